-- parameter_containers.lua — torch's fp8.nn.ParameterList{t1, t2, ...} and fp8.nn.ParameterDict{name = t, ...}:
-- tensors registered as parameters of the container (state_dict keys "0", "1", ... or the names; an optimizer,
-- :to, DDP and save_state see them), used by the model's own forward. Each tensor becomes a parameter as
-- register_parameter makes one: a leaf, set to require grad (torch wraps it in an nn.Parameter); a tensor an op made is
-- refused (it would never get a gradient: x:detach():requires_grad(true) is the leaf). Positions are 1-based (l[1]
-- is torch's l[0]; negative from the end), #l counts, ipairs walks them; names are ModuleDict's rules. Calling either
-- is refused (no forward), as torch's.
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local core = require "fp8.core"

local M = {}

local function check_param(fname, what, t, level)
  if not core.is_tensor(t) then
    error(("%s: %s must be a tensor, got %s"):format(fname, what, O.got(t)), level + 1)
  end
  if t:is_released() then error(("%s: %s has been released (freed or closed)"):format(fname, what), level + 1) end
  if not t:is_leaf() then
    error(("%s: %s was made by %s: it would never get a gradient (give a leaf: x:detach():requires_grad(true))")
      :format(fname, what, t:grad_fn()), level + 1)
  end
end

local function describe(t)
  local dims = {}
  for i, d in ipairs(t:shape()) do dims[i] = tostring(d) end
  return ("Parameter containing: [%s of size %s%s]"):format(t:dtype(), #dims == 0 and "()" or table.concat(dims, "x"),
    t:device() ~= "cpu" and (" on " .. t:device()) or "")
end

-- ---- ParameterList -----------------------------------------------------------------------------------------------
local ParameterList = Module.class("ParameterList")
M.ParameterList = ParameterList

local function params(self) return rawget(self, "_parameters") end

-- the tensors of a list (a plain list read raw, another ParameterList), each checked
local function list_values(fname, values, level)
  if Module.is_module(values) then
    if getmetatable(values) ~= ParameterList then
      error(("%s: expected a list of tensors, got a %s"):format(fname, values:type_name()), level + 1)
    end
    local p, out = params(values), {}
    for i, name in ipairs(p.names) do out[i] = p.map[name] end
    return out
  end
  if type(values) ~= "table" or core.is_tensor(values) then
    error(("%s: expected a list of tensors {t1, t2, ...}, got %s"):format(fname, O.got(values)), level + 1)
  end
  local n, out = rawlen(values), {}
  for k in next, values do
    if math.type(k) ~= "integer" or k < 1 or k > n then
      error(("%s: expected a list of tensors {t1, t2, ...}, got a table with the key %s"):format(fname, O.got(k)),
        level + 1)
    end
  end
  for i = 1, n do
    out[i] = rawget(values, i)
    check_param(fname, ("item %d"):format(i), out[i], level + 1)
  end
  return out
end

-- ParameterList([{t1, t2, ...} | another ParameterList])
function ParameterList:__init(values)
  if values ~= nil then
    for _, t in ipairs(list_values("ParameterList", values, 3)) do self:register_parameter(tostring(#self), t) end
  end
end

-- append(t) → self: t as the next parameter, named by its 0-based position as torch's
function ParameterList:append(t)
  check_param("ParameterList:append", "the value", t, 2)
  self:register_parameter(tostring(#self), t)
  return self
end

-- extend(list) → self: each tensor appended, all checked first
function ParameterList:extend(values)
  for _, t in ipairs(list_values("ParameterList:extend", values, 2)) do self:register_parameter(tostring(#self), t) end
  return self
end

ParameterList.__len = function(self) return #params(self).names end

local function name_at(self, k)
  local names = params(self).names
  if k < 0 then k = #names + 1 + k end
  return names[k]
end

-- l[i] → the i-th parameter (nil out of range, a Lua list's answer)
function ParameterList.__getitem(self, k)
  local name = name_at(self, k)
  return name and params(self).map[name]
end

-- l[i] = t replaces the i-th parameter under its name; out of range, or not a leaf tensor: refused
function ParameterList.__setitem(self, k, t)
  local name = name_at(self, k)
  if name == nil then
    error(("ParameterList: index %d is out of range (%d parameters; append adds one)"):format(k, #self), 2)
  end
  check_param("ParameterList", ("item %d"):format(k), t, 2)
  self:register_parameter(name, t)
end

function ParameterList:forward()
  error("ParameterList has no forward: it holds parameters for the model's own forward (for _, p in ipairs(l) do "
    .. "... end), as torch's", 0)
end

-- a line per parameter, as torch prints them: "(0): Parameter containing: [fp32 of size 3x4]"
local function params_repr(self)
  local p, lines = params(self), {}
  for i, name in ipairs(p.names) do lines[i] = ("(%s): %s"):format(name, describe(p.map[name])) end
  return table.concat(lines, "\n")
end
ParameterList.extra_repr = params_repr

-- ---- ParameterDict -----------------------------------------------------------------------------------------------
local ParameterDict = Module.class("ParameterDict")
M.ParameterDict = ParameterDict

-- the entries of t ({name = tensor} sorted by name, {{name, tensor}, ...} in order, or another ParameterDict), checked
local function entries(fname, t, level)
  if Module.is_module(t) then
    if getmetatable(t) ~= ParameterDict then
      error(("%s: expected a table of tensors by name, got a %s"):format(fname, t:type_name()), level + 1)
    end
    return t:items()
  end
  if type(t) ~= "table" or core.is_tensor(t) then
    error(("%s: expected a table of tensors by name, got %s"):format(fname, O.got(t)), level + 1)
  end
  local out = {}
  if rawget(t, 1) ~= nil then   -- {{name, t}, ...}
    local n = rawlen(t)
    for k in next, t do
      if math.type(k) ~= "integer" or k < 1 or k > n then
        error(("%s: a list of {name, tensor} pairs has no key %s (give a table by name or a list, not both)")
          :format(fname, O.got(k)), level + 1)
      end
    end
    for i = 1, n do
      local e = rawget(t, i)
      if type(e) ~= "table" or core.is_tensor(e) or rawlen(e) ~= 2 then
        error(("%s: item %d must be a {name, tensor} pair, got %s"):format(fname, i, O.got(e)), level + 1)
      end
      out[i] = { rawget(e, 1), rawget(e, 2) }
    end
  else
    for k, v in next, t do
      if type(k) ~= "string" then error(("%s: names must be strings, got %s"):format(fname, O.got(k)), level + 1) end
      out[#out + 1] = { k, v }
    end
    table.sort(out, function(a, b) return a[1] < b[1] end)
  end
  for _, e in ipairs(out) do
    local name = e[1]
    if type(name) ~= "string" or name == "" or name:find(".", 1, true) then
      error(("%s: a name must be a non-empty string without '.', got %s"):format(fname, O.got(name)), level + 1)
    end
    if ParameterDict[name] ~= nil then
      error(("%s: '%s' is a method of ParameterDict: a parameter under that name would hide it (use another name)")
        :format(fname, name), level + 1)
    end
    check_param(fname, ("'%s'"):format(name), e[2], level + 1)
  end
  return out
end

-- ParameterDict([{name = t, ...} | {{name, t}, ...} | another ParameterDict])
function ParameterDict:__init(values)
  if values ~= nil then
    for _, e in ipairs(entries("ParameterDict", values, 3)) do self:register_parameter(e[1], e[2]) end
  end
end

-- update(t) → self: each parameter of t added, or replacing one of the same name in its place; all checked first
function ParameterDict:update(values)
  for _, e in ipairs(entries("ParameterDict:update", values, 2)) do self:register_parameter(e[1], e[2]) end
  return self
end

function ParameterDict:keys() return table.move(params(self).names, 1, #params(self).names, 1, {}) end
function ParameterDict:values()
  local p, out = params(self), {}
  for i, name in ipairs(p.names) do out[i] = p.map[name] end
  return out
end
-- items() → {{name, t}, ...}
function ParameterDict:items()
  local p, out = params(self), {}
  for i, name in ipairs(p.names) do out[i] = { name, p.map[name] } end
  return out
end

-- pop(name) → the parameter, removed (an unknown name is an error, as torch's KeyError)
function ParameterDict:pop(name)
  local t = type(name) == "string" and params(self).map[name] or nil
  if t == nil then
    error(("ParameterDict:pop: no parameter named %s (names: %s)"):format(O.got(name),
      #self == 0 and "none" or table.concat(self:keys(), ", ")), 2)
  end
  self:register_parameter(name, nil)
  return t
end

function ParameterDict:clear()
  for _, name in ipairs(self:keys()) do self:register_parameter(name, nil) end
end

ParameterDict.__len = function(self) return #params(self).names end

function ParameterDict:forward()
  error("ParameterDict has no forward: it holds parameters by name for the model's own forward (d.name or "
    .. "d[\"name\"]), as torch's", 0)
end

ParameterDict.extra_repr = params_repr

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(ParameterList, "ParameterList")
O.strict_arity(ParameterDict, "ParameterDict")
return M
