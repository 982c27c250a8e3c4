-- optimizer.lua — the base of fp8.optim's optimizers: parameter groups with per-group options,
-- zero_grad(), state_dict()/load_state_dict(), and the argument parsing the constructors share.
local unplaced = require("fp8.errfmt").unplaced   -- an error's text without its "file:line: "
local O = require "fp8.opts"
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua

local Optimizer = {}
Optimizer.__index = Optimizer

-- A group's own copy of an option value: a table (AdamW's betas) is copied, so that writing one group's
-- betas[1] changes neither another group nor the class defaults (torch's betas is a tuple).
local function own(v)
  if type(v) ~= "table" or getmetatable(v) ~= nil or v == Optimizer.REQUIRED then return v end
  local c = {}
  for k, x in next, v do c[k] = x end
  return c
end

local function sorted_keys(t)
  local ks = {}
  for k in next, t do ks[#ks + 1] = tostring(k) end
  table.sort(ks)
  return table.concat(ks, ", ")
end

-- Collect a parameter list: tensors, a Module (its parameters()), or a list of groups.
local function tensor_list(name, v, where)
  if type(v) == "table" and type(v.parameters) == "function" then v = v:parameters() end
  if fp8.is_tensor(v) then v = { v } end
  if type(v) ~= "table" then
    error(("%s: %s must be a list of tensors or a Module, got %s"):format(name, where, type(v)), 0)
  end
  local out = {}
  for i, p in ipairs(v) do
    if not fp8.is_tensor(p) then
      error(("%s: %s[%d] must be a tensor, got %s"):format(name, where, i, type(p)), 0)
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
  -- the base constructor a subclass calls: Optimizer.new(Class, "Name", {option = default, ...}, params, opts)
  if type(cls) ~= "table" then error(("Optimizer.new: expected the optimizer class first, got %s"):format(type(cls)), 2) end
  if type(name) ~= "string" then error(("Optimizer.new: expected the optimizer's name second, got %s"):format(type(name)), 2) end
  if type(defaults) ~= "table" or getmetatable(defaults) ~= nil then
    error(("%s: Optimizer.new: expected a table of option defaults third, got %s"):format(name,
      fp8.is_tensor(defaults) and "a tensor" or type(defaults) == "table" and "a table with a metatable" or type(defaults)), 2)
  end
  if type(params) == "table" and opts == nil and params.params ~= nil and not fp8.is_tensor(params[1]) then
    -- (a proxy's options were read raw below and dropped: SGD(proxy {params=} with lr in its __index) kept its
    -- default lr; refused as the options table is, stop 103)
    O.check_plain(name, params, 2)
    opts = {}
    for k, v in next, params do if k ~= "params" then opts[k] = v end end
    params = params.params
  end
  opts = opts or {}
  -- the constructors reach here by tail calls (Opt(...) -> Opt.new -> Optimizer.new): level 2 is the caller's line
  if type(opts) ~= "table" then error(("%s: options must be a table, got %s"):format(name, type(opts)), 2) end
  O.check(name, opts, defaults, 2)
  local self = setmetatable({ name = name, defaults = {}, param_groups = {}, state = {}, _step_count = 0 }, cls)
  for k, v in next, defaults do self.defaults[k] = own(v) end
  for k, v in next, opts do self.defaults[k] = own(v) end
  -- groups: a list whose entries are tables with a `params` field
  local groups
  if type(params) == "table" and type(params[1]) == "table" and not fp8.is_tensor(params[1])
     and params[1].params ~= nil then
    groups = params
  else
    groups = { { params = params } }
  end
  local ok, err = pcall(function() for i, g in ipairs(groups) do self:_add_group(g, i) end end)
  if not ok then error(err, 2) end
  if #self.param_groups == 0 then error(("%s: got an empty parameter list"):format(name), 2) end
  return self
end

-- add_param_group({params=..., <option>=...}): per-group options override the defaults. Its checks (and the
-- subclass's _check_group) raise without a position; this entry point and new() raise them at their caller's line.
function Optimizer:add_param_group(g)
  local ok, res = pcall(self._add_group, self, g)
  if not ok then error(res, 2) end
  return res
end

function Optimizer:_add_group(g, i)
  if type(g) ~= "table" then
    error(("%s: parameter group must be a table {params=..., ...}, got %s"):format(self.name, type(g)), 0)
  end
  -- a group is options too: its keys are read raw below, so a proxy's lr (its __index's) was dropped and the
  -- default taken (stop 103; the options table itself is refused so since stop 102)
  local proxy = O.proxy_text(g)
  if proxy then
    error(("%s: %s%s"):format(self.name, i and ("parameter group " .. i .. ": ") or "parameter group: ", proxy), 0)
  end
  local group = { params = tensor_list(self.name, g.params, i and ("group " .. i .. " params") or "params") }
  -- a parameter in two places would be updated twice a step (torch refuses it across groups, warns within one)
  local seen = {}
  for _, other in ipairs(self.param_groups) do for _, p in ipairs(other.params) do seen[p] = true end end
  local kinds = self._param_dtypes
  for j, p in ipairs(group.params) do
    -- the dtypes the subclass's step updates: refused here rather than by its first step, in library code
    if kinds and not kinds[p:dtype()] then
      local names = {}
      for d in next, kinds do names[#names + 1] = d end
      table.sort(names)
      error(("%s: %s[%d] is %s; %s updates %s parameters (keep the parameters in fp32: mixed_precision runs the "
        .. "compute in bf16, fp16 or FP8 and updates fp32 weights)"):format(self.name,
        i and ("group " .. i .. " params") or "params", j, p:dtype(), self.name, table.concat(names, " or ")), 0)
    end
    if not p:is_leaf() then   -- torch: "can't optimize a non-leaf Tensor"; its .grad would stay nil
      error(("%s: %s[%d] was made by %s: an optimizer updates leaf tensors (the parameters themselves; "
        .. "x:detach():requires_grad(true) makes one)"):format(self.name,
        i and ("group " .. i .. " params") or "params", j, p:grad_fn()), 0)
    end
    -- an expand: its update would write one memory location several times (six steps did, whichever value came
    -- last; SGD's and Adam's fused steps refused it at the first step; torch refuses it)
    local sh, sd = p:shape(), p:stride()
    for d = 1, #sh do
      if sd[d] == 0 and sh[d] > 1 then
        error(("%s: %s[%d] is an expanded view (more than one of its elements refers to one memory location, dim %d): "
          .. "an update would write them all; optimize a copy (:clone())"):format(self.name,
          i and ("group " .. i .. " params") or "params", j, d), 0)
      end
    end
    if seen[p] then
      error(("%s: %s[%d] is already in the optimizer (a parameter may appear once: in one group, once)"):format(
        self.name, i and ("group " .. i .. " params") or "params", j), 0)
    end
    seen[p] = true
  end
  for k, v in next, g do
    if k ~= "params" then
      -- initial_lr: written into the groups by a learning-rate scheduler (as in PyTorch); kept as is
      if self.defaults[k] == nil and k ~= "initial_lr" then
        local valid = {}
        for dk in next, self.defaults do valid[#valid + 1] = dk end
        table.sort(valid)
        error(("%s: %s"):format(self.name, O.unknown_text(k, valid, "option", " in parameter group")), 0)
      end
      if k == "initial_lr" and (type(v) ~= "number" or not (v >= 0 and v < math.huge)) then
        error(("%s: initial_lr in a parameter group must be a finite number >= 0, got %s"):format(self.name, tostring(v)), 0)
      end
      group[k] = own(v)
    end
  end
  for k, v in next, self.defaults do
    if group[k] == nil then group[k] = own(v) end
    if group[k] == Optimizer.REQUIRED then
      error(("%s: option '%s' is required"):format(self.name, k), 0)
    end
  end
  if #group.params == 0 then error(("%s: a parameter group has no parameters"):format(self.name), 0) end
  self:_check_group(group)
  self.param_groups[#self.param_groups + 1] = group
  return group
end

function Optimizer:_check_group(group) end
-- The parameter dtypes a subclass's step updates ({fp32 = true, ...}; nil: any), checked as groups are added.
Optimizer._param_dtypes = nil

-- Validation helpers for subclasses.
-- A finite number (the fused steps refuse inf at the first step, after the others had turned the weights to inf/NaN).
function Optimizer:_check_number(group, key, lo, lo_open)
  local v = group[key]
  if type(v) ~= "number" or v ~= v or v < lo or (lo_open and v == lo) or v == math.huge then
    error(("%s: %s must be a finite number %s %g, got %s"):format(self.name, key, lo_open and ">" or ">=", lo,
      require("fp8.opts").got(v)), 0)
  end
end

-- step([closure]): the one step loop of every optimizer. A closure, when given, is called first (with
-- grad enabled, even inside no_grad: torch's enable_grad) and its result returned, as in PyTorch. Then every parameter that has a gradient gets
-- its state (made by the subclass's _new_state(p, group) on the first step) and the subclass's
-- _update(p, grad, state, group), which runs the fused C kernel.
function Optimizer:step(closure)
  local loss
  if closure ~= nil and type(closure) ~= "function" then
    error(("%s:step: closure must be a function, got %s"):format(self.name or "optimizer", type(closure)), 2)
  end
  if closure then
    local ok, res = pcall(fp8.enable_grad, closure)
    if not ok then
      -- enable_grad refuses a yield (grad mode is process-wide); said as this call's, which the user wrote
      if type(res) == "string" and res:find("enable_grad: a coroutine yielded inside it", 1, true) == 1 then
        error(("%s:step: a coroutine yielded inside the closure (not allowed: it runs with grad mode on, which is "
          .. "process-wide and would stay on while the coroutine is suspended); yield outside opt:step(closure)")
          :format(self.name or "optimizer"), 2)
      end
      error(res, 0)   -- the closure's own error, as it raised it
    end
    loss = res
  end
  -- the groups' options as the constructor checks them: a value written into a group since (g.lr = math.huge) is
  -- refused here, before any parameter or state moved
  for gi, g in ipairs(self.param_groups) do
    local ok, err = pcall(self._check_group, self, g)
    if not ok then
      error(("%s:step: parameter group %d: %s"):format(self.name, gi, tostring(err):gsub("^" .. self.name .. ": ", "")), 2)
    end
  end
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      local grad = p.grad
      if grad ~= nil then
        local st = self.state[p]
        if st == nil then st = self:_new_state(p, g); self.state[p] = st end
        self:_update(p, grad:contiguous(), st, g)
      end
    end
  end
  self._step_count = self._step_count + 1
  return loss
end

-- What a subclass supplies to the step loop (or it overrides step itself).
function Optimizer:_new_state(p, group)
  error(("%s: an optimizer class defines _new_state(p, group) and _update(p, grad, state, group), or its own step"):format(
    self.name or "optimizer"), 3)
end
Optimizer._update = Optimizer._new_state

-- zero_grad([set_to_none=true]): every parameter's grad becomes nil (PyTorch's default), or with false is
-- zeroed in place (Optimizer._zero_grads, shared with Module:zero_grad).
function Optimizer._zero_grads(params, set_to_none, who)
  if set_to_none ~= nil and type(set_to_none) ~= "boolean" then
    error(("%s: set_to_none must be a boolean, got %s"):format(who, type(set_to_none)), 3)
  end
  if set_to_none == false then   -- checked before any is zeroed
    for _, p in ipairs(params) do
      if p.grad ~= nil and p.grad:is_fp8() then
        error(("%s(false): an FP8 gradient (MS-AMP's) cannot be zeroed in place; zero_grad() drops it"):format(who), 3)
      end
    end
  end
  for _, p in ipairs(params) do
    local g = p.grad
    if g ~= nil and set_to_none == false then
      require("fp8._optim").copy_(g, fp8.zeros(g:shape(), { dtype = g:dtype(), device = g:device() }))
    elseif g ~= nil then
      p:zero_grad()
    end
  end
end

function Optimizer:zero_grad(set_to_none)
  local all = {}
  for _, g in ipairs(self.param_groups) do for _, p in ipairs(g.params) do all[#all + 1] = p end end
  Optimizer._zero_grads(all, set_to_none, self.name .. ":zero_grad")
end

local function copy_state(st)
  local clone = require("fp8._checkpoint").clone   -- exact: FP8 moments keep their bytes and scales
  local out = {}
  for k, v in next, st do out[k] = fp8.is_tensor(v) and clone(v) or v end
  return out
end

-- The state one parameter has after a step: {key = {dtype=, shape=}} for tensors ("param" as shape: the
-- parameter's; optional = true: may be absent; per_tensor = true: an FP8 one has one scale, not one per row;
-- positive = true: every value finite and > 0, as a scale is), and
-- "count" for the step counter, "number" for a finite scalar (NAdam's mu_product). Subclasses override;
-- load_state_dict checks against it.
function Optimizer:_state_schema(p) return nil end

local function shape_str(sh) return "[" .. table.concat(sh, ", ") .. "]" end

-- Why state `st` cannot be loaded for parameter p (number idx in the state), or nil.
function Optimizer:_check_param_state(st, p, idx)
  if type(st) ~= "table" then return ("state of parameter %d must be a table, got %s"):format(idx, type(st)) end
  local schema = self:_state_schema(p)
  if schema == nil then   -- generic: tensors the parameter's shape
    for k, v in next, st do
      if fp8.is_tensor(v) and shape_str(v:shape()) ~= shape_str(p:shape()) then
        return ("state '%s' of parameter %d has shape %s, the parameter %s"):format(k, idx, shape_str(v:shape()),
          shape_str(p:shape()))
      end
    end
    return nil
  end
  local keys = {}
  for k in next, schema do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local want, v = schema[k], st[k]
    if v == nil and type(want) == "table" and want.optional then
      -- absent is fine (SGD without momentum keeps nothing)
    elseif v == nil then
      return ("state of parameter %d has no '%s' (a %s state has %s; is it from another optimizer?)"):format(idx, k,
        self.name, table.concat(keys, ", "))
    elseif want == "count" then
      if math.type(v) ~= "integer" or v < 0 then
        return ("state '%s' of parameter %d must be an integer >= 0, got %s"):format(k, idx, tostring(v))
      end
    elseif want == "number" then
      if type(v) ~= "number" or v ~= v or math.abs(v) == math.huge then
        return ("state '%s' of parameter %d must be a finite number, got %s"):format(k, idx, tostring(v))
      end
    else
      local shape = want.shape == "param" and p:shape() or want.shape
      if not fp8.is_tensor(v) then
        return ("state '%s' of parameter %d must be a tensor, got %s"):format(k, idx, type(v))
      elseif v:dtype() ~= want.dtype then
        return ("state '%s' of parameter %d is %s, %s keeps it in %s"):format(k, idx, v:dtype(), self.name, want.dtype)
      elseif shape_str(v:shape()) ~= shape_str(shape) then   -- of the same size too: a [32, 64] is no [64, 32]
        return ("state '%s' of parameter %d has shape %s, it must be %s"):format(k, idx, shape_str(v:shape()), shape_str(shape))
      elseif want.per_tensor and v:is_fp8() and v:scale_axis() ~= nil then   -- the step takes one scale
        return ("state '%s' of parameter %d has a scale per index of dim %d, %s keeps one scale for the tensor")
          :format(k, idx, v:scale_axis(), self.name)
      elseif want.positive then
        local lo, hi = v:min():item(), v:max():item()
        if not (lo > 0 and hi < math.huge) then   -- (NaN fails both)
          return ("state '%s' of parameter %d must hold finite values > 0 (a scale), got %s"):format(k, idx,
            lo > 0 and tostring(hi) or tostring(lo))
        end
      end
    end
  end
  for k in next, st do
    if schema[k] == nil then
      return ("state of parameter %d has '%s', which %s does not keep (it keeps %s; is it from another optimizer?)")
        :format(idx, tostring(k), self.name, table.concat(keys, ", "))
    end
  end
  return nil
end

-- state_dict() → {state = {[index] = {step=, exp_avg=, ...}}, param_groups = {{lr=, ..., params={1, 2}}}}
-- Parameters are numbered across groups in order, like PyTorch; tensors are copies.
function Optimizer:state_dict()
  local state, groups, idx = {}, {}, 0
  for gi, g in ipairs(self.param_groups) do
    local entry = { params = {} }
    for k, v in next, g do if k ~= "params" then entry[k] = type(v) == "table" and table.move(v, 1, #v, 1, {}) or v end end
    for _, p in ipairs(g.params) do
      idx = idx + 1
      entry.params[#entry.params + 1] = idx
      if self.state[p] then state[idx] = copy_state(self.state[p]) end
    end
    groups[gi] = entry
  end
  return { state = state, param_groups = groups }
end

-- load_state_dict(sd): everything is checked first (group options as the constructor checks them,
-- parameter counts, every state entry against what this optimizer keeps); only then is anything
-- copied, so a failed load leaves the optimizer as it was.
function Optimizer:load_state_dict(sd)
  local function fail(fmt, ...) error(("%s:load_state_dict: " .. fmt):format(self.name, ...), 3) end
  if type(sd) ~= "table" or type(sd.param_groups) ~= "table" or type(sd.state) ~= "table" then
    fail("expected a table {state=, param_groups=} from state_dict()")
  end
  if #sd.param_groups ~= #self.param_groups then
    fail("the state has %d parameter groups, this optimizer %d", #sd.param_groups, #self.param_groups)
  end
  local new_groups, new_state, seen = {}, {}, {}
  for gi, g in ipairs(self.param_groups) do
    local sg = sd.param_groups[gi]
    if type(sg) ~= "table" or type(sg.params) ~= "table" then fail("group %d must be a table with a params list", gi) end
    if #sg.params ~= #g.params then
      fail("group %d has %d parameters in the state, %d here", gi, #sg.params, #g.params)
    end
    local cand = {}
    for k, v in next, g do cand[k] = v end
    for k, v in next, sg do
      if k ~= "params" then
        if self.defaults[k] == nil and k ~= "initial_lr" then
          fail("group %d has the option '%s', which %s does not have (valid: %s)", gi, tostring(k), self.name,
            sorted_keys(self.defaults))
        end
        -- a list option (betas) copied raw: a table whose __len lies (2^62) made table.move copy for ever (sweep 108's
        -- state_dict key form: sd.param_groups[1].lr = the lying list, load_state_dict never returned); the copy is
        -- what _check_group then checks (a table where a number belongs is refused there)
        if type(v) == "table" then
          local c = {}
          for i = 1, rawlen(v) do c[i] = rawget(v, i) end
          v = c
        end
        cand[k] = v
      end
    end
    local ok, err = pcall(self._check_group, self, cand)
    if not ok then fail("group %d: %s", gi, unplaced(err)) end
    if cand.initial_lr ~= nil and (type(cand.initial_lr) ~= "number" or cand.initial_lr ~= cand.initial_lr) then
      fail("group %d: initial_lr must be a number, got %s", gi, tostring(cand.initial_lr))
    end
    new_groups[gi] = cand
    for i, p in ipairs(g.params) do
      local idx = sg.params[i]
      if math.type(idx) ~= "integer" then fail("group %d: params[%d] must be an integer index, got %s", gi, i, tostring(idx)) end
      -- an index listed twice would give one saved state to two parameters (torch keeps the last silently)
      if seen[idx] then
        fail("group %d: params[%d] is index %d, already listed at group %d params[%d] (each parameter once)", gi, i,
          idx, seen[idx][1], seen[idx][2])
      end
      seen[idx] = { gi, i }
      local st = sd.state[idx]
      if st ~= nil then
        local why = self:_check_param_state(st, p, idx)
        if why then fail("%s", why) end
        new_state[p] = st
      end
    end
  end
  -- All checked: copy.
  local clone = require("fp8._checkpoint").clone
  for gi, g in ipairs(self.param_groups) do
    for k, v in next, new_groups[gi] do if k ~= "params" then g[k] = v end end
    for _, p in ipairs(g.params) do
      local st = new_state[p]
      if st then
        local mine = {}
        for k, v in next, st do
          if fp8.is_tensor(v) then
            mine[k] = clone(v):to(p:device())
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
    for k in next, g do if k ~= "params" then ks[#ks + 1] = k end end
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
  for k, v in next, Optimizer do cls[k] = v end
  cls.__index = cls
  return cls
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Optimizer, "Optimizer", function(self) return rawget(self, "name") end)
return Optimizer
