-- module_dict.lua — fp8.nn.ModuleDict{name = m, ...}: torch's ModuleDict, layers registered under names (d.name or
-- d["name"] is the layer; state_dict keys "name.weight"), run by the model's own forward. A Lua table has no order:
-- the names of the table given are taken sorted (a list of {name, m} pairs keeps its own order), later ones in the
-- order they are added. keys() / values() / items() list them in that order, #d counts them, d:update(t) adds or
-- replaces, d:pop(name) removes one and returns it, d:clear() removes all. A name must be a non-empty string without
-- '.', and not one of the class's methods (keys, update, forward, ...: reading it would find the layer, not the
-- method), as torch's KeyError for an existing attribute. Calling it is refused (no forward), as torch's.
local Module = require "fp8.nn.module"
local O = require "fp8.opts"

local ModuleDict = Module.class("ModuleDict")

-- the entries of t ({name = m} sorted by name, or {{name, m}, ...} in order) as a list of pairs, checked
local function entries(fname, t, level)
  if Module.is_module(t) then
    if getmetatable(t) ~= ModuleDict then
      error(("%s: expected a table of Modules by name, got a %s"):format(fname, t:type_name()), level)
    end
    return t:items()
  end
  if type(t) ~= "table" then
    error(("%s: expected a table of Modules by name, got %s"):format(fname, O.got(t)), level)
  end
  local out = {}
  if rawget(t, 1) ~= nil then   -- {{name, m}, ...}
    for i = 1, rawlen(t) do
      local e = rawget(t, i)
      if type(e) ~= "table" or Module.is_module(e) or rawlen(e) ~= 2 then
        error(("%s: item %d must be a {name, module} pair, got %s"):format(fname, i, O.got(e)), level)
      end
      out[i] = { e[1], e[2] }
    end
    for k in next, t do   -- raw, as below: a __pairs that never ends looped here (sweep 115)
      if math.type(k) ~= "integer" or k < 1 or k > #out then
        error(("%s: a list of {name, module} pairs has no key %s (give a table by name or a list, not both)")
          :format(fname, O.got(k)), level)
      end
    end
  else
    for k, v in next, t do out[#out + 1] = { k, v } end
    for _, e in ipairs(out) do
      if type(e[1]) ~= "string" then error(("%s: names must be strings, got %s"):format(fname, O.got(e[1])), level) end
    end
    table.sort(out, function(a, b) return a[1] < b[1] end)
  end
  for _, e in ipairs(out) do
    local name, m = e[1], e[2]
    if type(name) ~= "string" or name == "" or name:find(".", 1, true) then
      error(("%s: a name must be a non-empty string without '.', got %s"):format(fname, O.got(name)), level)
    end
    if ModuleDict[name] ~= nil then
      error(("%s: '%s' is a method of ModuleDict: a layer under that name would hide it (use another name)")
        :format(fname, name), level)
    end
    if not Module.is_module(m) then
      error(("%s: '%s' must be a Module, got %s"):format(fname, name, O.got(m)), level)
    end
  end
  return out
end

-- the layers of modules added (a name already there: replaced in its place), all checked first; errors at `level`
-- (counted from add_all)
local function add_all(self, fname, modules, level)
  for _, e in ipairs(entries(fname, modules, level + 1)) do
    -- a parameter, buffer or plain field of that name is refused by add_module, named
    local ok, err = pcall(self.add_module, self, e[1], e[2])
    if not ok then
      error(("%s: '%s': %s"):format(fname, e[1], (tostring(err):gsub("^add_module[^:]*: ", ""))), level)
    end
  end
end

-- ModuleDict([{name = m, ...} | {{name, m}, ...}])
function ModuleDict:__init(modules)
  if modules ~= nil then add_all(self, "ModuleDict", modules, 4) end
end

-- update(t): adds each layer of t (a table by name, a list of pairs or another ModuleDict), replacing one of the same
-- name in its place; checked before any is added. Returns self.
function ModuleDict:update(modules)
  add_all(self, "ModuleDict:update", modules, 3)
  return self
end

function ModuleDict:keys()
  return table.move(rawget(self, "_modules").names, 1, #rawget(self, "_modules").names, 1, {})
end
function ModuleDict:values()
  local mods, out = rawget(self, "_modules"), {}
  for i, name in ipairs(mods.names) do out[i] = mods.map[name] end
  return out
end
-- items() → {{name, m}, ...}
function ModuleDict:items()
  local mods, out = rawget(self, "_modules"), {}
  for i, name in ipairs(mods.names) do out[i] = { name, mods.map[name] } end
  return out
end

-- pop(name) → the layer, removed (an unknown name is an error, as torch's KeyError)
function ModuleDict:pop(name)
  local m = type(name) == "string" and rawget(self, "_modules").map[name] or nil
  if m == nil then
    error(("ModuleDict:pop: no layer named %s (names: %s)"):format(O.got(name),
      #self == 0 and "none" or table.concat(self:keys(), ", ")), 2)
  end
  self:add_module(name, nil)
  return m
end

function ModuleDict:clear()
  for _, name in ipairs(self:keys()) do self:add_module(name, nil) end
end

function ModuleDict:forward(...)
  error("ModuleDict has no forward: it holds layers by name for the model's own forward to run (d.name(x) or "
    .. "d[\"name\"](x)), as torch's", 0)
end

ModuleDict.__len = function(self) return #rawget(self, "_modules").names end

O.strict_arity(ModuleDict, "ModuleDict")
return ModuleDict
