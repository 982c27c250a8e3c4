-- sequential.lua — fp8.nn.Sequential(m1, m2, ...) or Sequential{m1, m2, ...}: runs its layers in
-- order. Layers are named "0", "1", ... (PyTorch's names, so state_dict keys match); s[1] is the first.
local Module = require "fp8.nn.module"
local O = require "fp8.opts"

local Sequential = Module.class("Sequential")

-- The name messages give a method: "Sequential:append", or a subclass's own ("ModuleList:append").
local function T(self, method) return self:type_name() .. (method and ":" .. method or "") end

function Sequential:__init(...)
  local layers, n = { ... }, select("#", ...)
  if n == 1 and type(layers[1]) == "table" and not Module.is_module(layers[1]) then
    layers, n = layers[1], 0
    for k in next, layers do   -- raw: a __pairs answering 1 for ever looped here (ModuleList too, sweep 115)
      if math.type(k) ~= "integer" or k < 1 then
        error(("%s: expected a list of modules, got key %s"):format(T(self), tostring(k)), 3)
      end
      if k > n then n = k end
    end
  end
  -- every position up to the last one given: a list like {a, nil, b} would otherwise drop layers silently
  for i = 1, n do
    local m = layers[i]
    if not Module.is_module(m) then
      error(("%s: layer %d must be a Module, got %s"):format(T(self), i, type(m)), 3)
    end
    self:add_module(tostring(i - 1), m)
  end
end

-- append(m): adds a layer at the end, named tostring(#s) as torch's; returns self. After s["1"] = nil removed a layer
-- the names are "0", "2": that name is a layer's already, and torch's append replaces it (the model loses a layer and
-- runs in another order, no error). Refused here, naming the clash.
function Sequential:append(m)
  if not Module.is_module(m) then error(("%s: expected a Module, got %s"):format(T(self, "append"), type(m)), 2) end
  local name = tostring(#self)
  if rawget(self, "_modules").map[name] ~= nil then
    error(("%s: the new layer's name '%s' (the layer count) is a layer's already (one was removed by "
      .. "name): appending would replace it; use s:add_module(name, m) with a free name"):format(T(self, "append"),
      name), 2)
  end
  self:add_module(name, m)
  return self
end
Sequential.add = Sequential.append

-- The layers of a list {m1, m2, ...} (every position up to the largest key a Module), of a Sequential (by position),
-- as a new list; an error naming the first bad entry otherwise. fname names the caller in it.
local function layers_of(fname, v)
  if Module.is_module(v) then
    if v.__getitem == nil then   -- not a container: torch's "'Linear' object is not iterable"
      error(("%s: expected a list of Modules or a Sequential, got a %s"):format(fname, v:type_name()), 3)
    end
    local mods, out = rawget(v, "_modules"), {}
    for i, name in ipairs(mods.names) do out[i] = mods.map[name] end
    return out
  end
  if type(v) ~= "table" then
    error(("%s: expected a list of Modules or a Sequential, got %s"):format(fname, O.got(v)), 3)
  end
  local n = 0
  for k in next, v do
    if math.type(k) ~= "integer" or k < 1 then
      error(("%s: expected a list of Modules, got key %s"):format(fname, O.got(k)), 3)
    end
    if k > n then n = k end
  end
  local out = {}
  for i = 1, n do
    if not Module.is_module(v[i]) then
      error(("%s: item %d must be a Module, got %s"):format(fname, i, O.got(v[i])), 3)
    end
    out[i] = v[i]
  end
  return out
end

-- extend(list or Sequential): appends each layer in order, as torch's; returns self. Checked before any is added:
-- a non-Module in the list, or a name a layer holds after a removal (see append), changes nothing (torch's adds the
-- layers before the bad one). s:extend(s) appends s's layers as they were before the call (torch's raises
-- "dictionary changed size during iteration" after adding one).
function Sequential:extend(layers)
  local list = layers_of(T(self, "extend"), layers)
  local map, n = rawget(self, "_modules").map, #self
  for i = 1, #list do
    local name = tostring(n + i - 1)
    if map[name] ~= nil then
      error(("%s: the name '%s' for item %d (the layer count) is a layer's already (one was removed "
        .. "by name): appending would replace it; use s:add_module(name, m) with a free name"):format(T(self, "extend"),
        name, i), 2)
    end
  end
  for i, m in ipairs(list) do self:add_module(tostring(n + i - 1), m) end
  return self
end

-- Registers `list` as the layers, named "0", "1", ... in its order, in place of the present ones: what torch's
-- insert leaves (it moves each layer after the index one name up) and what its del s[i] / pop does (renumbering
-- every name, one given by add_module too). Each change goes through add_module (Module.generation moves: a
-- prepared model's FP8 layers are found again). A new name that is a parameter, buffer or plain field of this
-- Sequential is refused before anything changes.
local function renumber(self, fname, list)
  for i = 1, #list do
    local name = tostring(i - 1)
    local kind = rawget(self, "_parameters").map[name] ~= nil and "a parameter"
      or rawget(self, "_buffers").map[name] ~= nil and "a buffer"
      or rawget(self, name) ~= nil and "a plain field" or nil
    if kind then
      error(("%s: the layers are renamed \"0\"..\"%d\", and '%s' is %s of this Sequential (assign nil to it first)")
        :format(fname, #list - 1, name, kind), 3)
    end
  end
  local names = rawget(self, "_modules").names
  for i = #names, 1, -1 do self:add_module(names[i], nil) end
  for i, m in ipairs(list) do self:add_module(tostring(i - 1), m) end
end

-- The position an index names: an integer (a float with an integer value too), 1-based, negative from the end.
local function index_arg(fname, i)
  local k = math.type(i) == "float" and math.tointeger(i) or i
  if math.type(k) ~= "integer" then
    local hint = Module.is_module(i) and " (the index comes first: s:insert(index, m); s:append(m) adds at the end)"
      or i == nil and " (torch's takes one too; -1 names the last)" or ""
    error(("%s: index must be an integer, got %s%s"):format(fname, Module.is_module(i) and "a " .. i:type_name()
      or O.got(i), hint), 3)
  end
  return k
end

-- insert(index, m): m becomes the layer at position index (1-based: 1 first, #s + 1 after the last; negative counts
-- from the end, -1 before the last), as torch's insert(index - 1, m) (insert(-1, m) the same as torch's); returns
-- self. The layers are then named "0".."n-1" in their new order (torch's names after its insert, so state_dict keys
-- follow the positions); where a name was given (add_module, or a removal left "0", "2") it is renumbered too
-- (torch's insert fails there with KeyError). Out of range, or not a Module: refused.
function Sequential:insert(index, m)
  local k, n = index_arg(T(self, "insert"), index), #self
  if k == 0 or k > n + 1 or k < -n then
    error(("%s: index %d is out of range (%d layers: 1..%d, or -%d..-1 from the end; positions "
      .. "count from 1)"):format(T(self, "insert"), k, n, n + 1, n), 2)
  end
  if not Module.is_module(m) then error(("%s: expected a Module, got %s"):format(T(self, "insert"), O.got(m)), 2) end
  if k < 0 then k = n + 1 + k end
  local list = layers_of(T(self, "insert"), self)
  table.insert(list, k, m)
  renumber(self, T(self, "insert"), list)
  return self
end

-- pop(index) → the layer at position index (1-based, negative from the end), removed; the rest are renamed
-- "0".."n-2" in order, as torch's pop(index - 1) (its del s[i] renumbers). Out of range: refused, as torch's
-- IndexError.
function Sequential:pop(index)
  local k, n = index_arg(T(self, "pop"), index), #self
  if k == 0 or k > n or k < -n then
    error(("%s: index %d is out of range (%s; positions count from 1)"):format(T(self, "pop"), k,
      n == 0 and "no layers" or ("%d layers: 1..%d, or -%d..-1 from the end"):format(n, n, n)), 2)
  end
  if k < 0 then k = n + 1 + k end
  local list = layers_of(T(self, "pop"), self)
  local m = table.remove(list, k)
  renumber(self, T(self, "pop"), list)
  return m
end

-- A GELU("tanh") whose output goes straight into an FP8Linear runs inside that layer (FP8Linear:forward_gelu: the
-- input's FP8 cast in GELU's pass, and in the backward the cast of dY for an FP8Linear that made GELU's input; the
-- same results), and so does a LayerNorm right before an FP8Linear (FP8Linear:forward_layernorm: LayerNorm's output
-- cast in LayerNorm's pass), unless either module's forward is replaced or the profiler times modules (it would
-- lose the first module's range). The fused call of m then nxt and whether it takes a residual, or nil.
local LayerNorm = require "fp8.nn.layernorm"
local Dropout = require "fp8.nn.dropout"
local function fused(m, nxt)
  if nxt == nil or Module._call_hook ~= nil then return nil end
  if Module.runs_forward_of(m, "GELU") and m.approximate == "tanh"
    and type(nxt.forward_gelu) == "function" and Module.runs_forward_of(nxt, "FP8Linear") then
    return nxt.forward_gelu, true
  end
  if LayerNorm.fuses_into(m, nxt) then return function(l, x) return l:forward_layernorm(x, m) end, false end
  return nil
end

-- Whether the layers from position i on are all identities now (Dropout.is_identity): a residual added before them
-- is then what adding it after them gives.
local function identities_from(map, names, i)
  for k = i, #names do
    if not Dropout.is_identity(map[names[k]]) then return false end
  end
  return true
end

-- The layers from position i on, x their input; with res, res + their output, added in the last FP8Linear's GEMM
-- where only identities follow it (FP8Linear:forward_residual, forward_gelu's residual).
local function run_from(self, x, i, res)
  local mods = rawget(self, "_modules")
  local names, map = mods.names, mods.map
  while i <= #names do   -- every position (a module may repeat)
    local m, nxt = map[names[i]], names[i + 1] and map[names[i + 1]]
    local f, takes_res = fused(m, nxt)
    local y
    if f then
      local r = res ~= nil and takes_res and identities_from(map, names, i + 2) and res or nil
      y = nxt:_call_with(f, x, r)   -- errors carry the layer's own context, as its forward's would
      if y ~= nil and r ~= nil then return y end
      if y ~= nil then x, i = y, i + 2 end
    end
    if y == nil then
      if res ~= nil and Module._call_hook == nil and Module.runs_forward_of(m, "FP8Linear")
        and identities_from(map, names, i + 1) then
        y = m:_call_with(m.forward_residual, x, res)
        if y ~= nil then return y end
      end
      x, i = m(x), i + 1
    end
  end
  if res ~= nil then return res + x end
  return x
end

function Sequential:forward(x) return run_from(self, x, 1) end

-- self(ln(x)) with the LayerNorm's output cast to FP8 in its pass where the first layer is an FP8Linear that takes
-- it (TransformerBlock's MLP), and with residual, residual + that (added in the last FP8Linear's GEMM where it
-- can); nil where LayerNorm's pass cannot cast (the caller runs the two and adds).
function Sequential:_forward_after_ln(x, ln, residual)
  local first = self[1]
  if not Module.runs_forward_of(self, "Sequential") or not LayerNorm.fuses_into(ln, first) then return nil end
  local y = first:_call_with(first.forward_layernorm, x, ln)
  if y == nil then return nil end
  return run_from(self, y, 2, residual)
end

Sequential.__len = function(self) return #rawget(self, "_modules").names end

-- The name at position k (1-based; negative counts from the end, -1 the last), as torch's positional s[i]: after
-- m["1"] = nil the layers keep their names ("0", "2") and s[2] is the one named "2". nil when out of range.
local function name_at(self, k)
  local names = rawget(self, "_modules").names
  if k < 0 then k = #names + 1 + k end
  return names[k]
end

-- s[i] → the i-th layer, nil out of range (a Lua list's answer; torch raises IndexError)
function Sequential.__getitem(self, k)
  local name = name_at(self, k)
  return name and rawget(self, "_modules").map[name]
end

-- s[i] = m replaces the i-th layer under its name, as torch's s[i - 1] = m; out of range or not a Module: refused
function Sequential.__setitem(self, k, m)
  local name = name_at(self, k)
  if name == nil then error(("%s: index %d is out of range (%d layers)"):format(T(self), k, #self), 2) end
  if not Module.is_module(m) then
    error(("%s: layer %d must be a Module, got %s (to remove one: s:pop(%d), which renames the rest \"0\", "
      .. "\"1\", ... as torch's del; or assign nil to its name, which keeps the others': s[\"%s\"] = nil)")
      :format(T(self), k, type(m), k, name), 2)
  end
  self:add_module(name, m)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(Sequential, "Sequential", function(self) return self:type_name() end)
return Sequential
