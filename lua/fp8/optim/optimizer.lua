-- optimizer.lua — the base of fp8.optim's optimizers: parameter groups with per-group options,
-- zero_grad(), state_dict()/load_state_dict(), and the argument parsing the constructors share.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua

local Optimizer = {}
Optimizer.__index = Optimizer

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = tostring(k) end
  table.sort(ks)
  return table.concat(ks, ", ")
end

-- Collect a parameter list: tensors, a Module (its parameters()), or a list of groups.
local function tensor_list(name, v, where)
  if type(v) == "table" and type(v.parameters) == "function" then v = v:parameters() end
  if fp8.is_tensor(v) then v = { v } end
  if type(v) ~= "table" then
    error(("%s: %s must be a list of tensors or a Module, got %s"):format(name, where, type(v)), 5)
  end
  local out = {}
  for i, p in ipairs(v) do
    if not fp8.is_tensor(p) then
      error(("%s: %s[%d] must be a tensor, got %s"):format(name, where, i, type(p)), 5)
    end
    out[i] = p
  end
  return out
end

-- new(cls, name, defaults, params, opts): accepts Opt(params, {lr=...}), Opt{params=..., lr=...} and
-- groups Opt({{params=a, lr=1}, {params=b}}, {lr=...}). `defaults` holds every option with its
-- default (the value `Optimizer.REQUIRED` marks one the caller must give).
Optimizer.REQUIRED = setmetatable({}, { __tostring = function() return "<required>" end })

function Optimizer.new(cls, name, defaults, params, opts)
  if type(params) == "table" and opts == nil and params.params ~= nil and not fp8.is_tensor(params[1]) then
    opts = {}
    for k, v in pairs(params) do if k ~= "params" then opts[k] = v end end
    params = params.params
  end
  opts = opts or {}
  if type(opts) ~= "table" then error(("%s: options must be a table, got %s"):format(name, type(opts)), 4) end
  for k in pairs(opts) do
    if defaults[k] == nil then
      error(("%s: unknown option '%s' (valid: %s)"):format(name, tostring(k), sorted_keys(defaults)), 4)
    end
  end
  local self = setmetatable({ name = name, defaults = {}, param_groups = {}, state = {}, _step_count = 0 }, cls)
  for k, v in pairs(defaults) do self.defaults[k] = v end
  for k, v in pairs(opts) do self.defaults[k] = v end
  -- groups: a list whose entries are tables with a `params` field
  local groups
  if type(params) == "table" and type(params[1]) == "table" and not fp8.is_tensor(params[1])
     and params[1].params ~= nil then
    groups = params
  else
    groups = { { params = params } }
  end
  for i, g in ipairs(groups) do self:add_param_group(g, i) end
  if #self.param_groups == 0 then error(("%s: got an empty parameter list"):format(name), 4) end
  return self
end

-- add_param_group({params=..., <option>=...}): per-group options override the defaults.
function Optimizer:add_param_group(g, i)
  if type(g) ~= "table" then
    error(("%s: parameter group must be a table {params=..., ...}, got %s"):format(self.name, type(g)), 2)
  end
  local group = { params = tensor_list(self.name, g.params, i and ("group " .. i .. " params") or "params") }
  for k, v in pairs(g) do
    if k ~= "params" then
      -- initial_lr: written into the groups by a learning-rate scheduler (as in PyTorch); kept as is
      if self.defaults[k] == nil and k ~= "initial_lr" then
        error(("%s: unknown option '%s' in parameter group (valid: %s)"):format(self.name, tostring(k),
          sorted_keys(self.defaults)), 2)
      end
      group[k] = v
    end
  end
  for k, v in pairs(self.defaults) do
    if group[k] == nil then group[k] = v end
    if group[k] == Optimizer.REQUIRED then
      error(("%s: option '%s' is required"):format(self.name, k), 5)
    end
  end
  if #group.params == 0 then error(("%s: a parameter group has no parameters"):format(self.name), 5) end
  self:_check_group(group)
  self.param_groups[#self.param_groups + 1] = group
  return group
end

function Optimizer:_check_group(group) end

-- Validation helpers for subclasses.
function Optimizer:_check_number(group, key, lo, lo_open)
  local v = group[key]
  if type(v) ~= "number" or v ~= v or v < lo or (lo_open and v == lo) then
    error(("%s: %s must be a number %s %g, got %s"):format(self.name, key, lo_open and ">" or ">=", lo, tostring(v)), 6)
  end
end

-- zero_grad(): every parameter's grad becomes nil (PyTorch's set_to_none=True default).
function Optimizer:zero_grad()
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do if p.zero_grad then p:zero_grad() end end
  end
end

local function copy_state(st)
  local out = {}
  for k, v in pairs(st) do out[k] = fp8.is_tensor(v) and v:clone() or v end
  return out
end

-- state_dict() → {state = {[index] = {step=, exp_avg=, ...}}, param_groups = {{lr=, ..., params={1, 2}}}}
-- Parameters are numbered across groups in order, like PyTorch; tensors are copies.
function Optimizer:state_dict()
  local state, groups, idx = {}, {}, 0
  for gi, g in ipairs(self.param_groups) do
    local entry = { params = {} }
    for k, v in pairs(g) do if k ~= "params" then entry[k] = type(v) == "table" and table.move(v, 1, #v, 1, {}) or v end end
    for _, p in ipairs(g.params) do
      idx = idx + 1
      entry.params[#entry.params + 1] = idx
      if self.state[p] then state[idx] = copy_state(self.state[p]) end
    end
    groups[gi] = entry
  end
  return { state = state, param_groups = groups }
end

function Optimizer:load_state_dict(sd)
  if type(sd) ~= "table" or type(sd.param_groups) ~= "table" or type(sd.state) ~= "table" then
    error(("%s:load_state_dict: expected a table {state=, param_groups=} from state_dict()"):format(self.name), 2)
  end
  if #sd.param_groups ~= #self.param_groups then
    error(("%s:load_state_dict: the state has %d parameter groups, this optimizer %d"):format(self.name,
      #sd.param_groups, #self.param_groups), 2)
  end
  for gi, g in ipairs(self.param_groups) do
    local sg = sd.param_groups[gi]
    if #sg.params ~= #g.params then
      error(("%s:load_state_dict: group %d has %d parameters in the state, %d here"):format(self.name, gi,
        #sg.params, #g.params), 2)
    end
  end
  local copy_ = require("fp8._optim").copy_
  for gi, g in ipairs(self.param_groups) do
    local sg = sd.param_groups[gi]
    for k, v in pairs(sg) do if k ~= "params" then g[k] = v end end
    for i, p in ipairs(g.params) do
      local st = sd.state[sg.params[i]]
      if st then
        local mine = {}
        for k, v in pairs(st) do
          if fp8.is_tensor(v) then
            if v:numel() ~= p:numel() then
              error(("%s:load_state_dict: state '%s' of parameter %d has %d elements, the parameter %d"):format(
                self.name, k, sg.params[i], v:numel(), p:numel()), 2)
            end
            mine[k] = copy_(fp8.zeros(p:shape(), { device = p:device() }), v:reshape(p:shape()))
          else
            mine[k] = v
          end
        end
        self.state[p] = mine
      else
        self.state[p] = nil
      end
    end
  end
end

function Optimizer:__tostring()
  local lines = { self.name .. " (" }
  for gi, g in ipairs(self.param_groups) do
    lines[#lines + 1] = ("Parameter Group %d"):format(gi - 1)
    local ks = {}
    for k in pairs(g) do if k ~= "params" then ks[#ks + 1] = k end end
    table.sort(ks)
    for _, k in ipairs(ks) do
      local v = g[k]
      if type(v) == "table" then
        local parts = {}
        for i, x in ipairs(v) do parts[i] = tostring(x) end
        v = "(" .. table.concat(parts, ", ") .. ")"
      end
      lines[#lines + 1] = ("    %s: %s"):format(k, tostring(v))
    end
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

-- Class helper: subclasses get the base methods and metamethods.
function Optimizer.class()
  local cls = {}
  for k, v in pairs(Optimizer) do cls[k] = v end
  cls.__index = cls
  return cls
end

return Optimizer
