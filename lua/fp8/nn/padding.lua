-- padding.lua — torch's padding layers: ZeroPad1d/2d/3d, ConstantPad1d/2d/3d(padding, value), ReflectionPad1d/2d/3d,
-- ReplicationPad1d/2d/3d and CircularPad1d/2d/3d(padding). Each is F.pad in its mode over the last 1, 2 or 3 dims:
-- padding an integer (every side) or a list of 2, 4 or 6 amounts {left, right [, top, bottom [, front, back]]},
-- negative ones cropping, as torch's.
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local O = require "fp8.opts"

local M = {}

-- padding as the module keeps it: a list of 2·dims integers (an integer stands for every side)
local function amounts(name, dims, padding)
  if math.type(padding) == "integer" then
    local t = {}
    for i = 1, 2 * dims do t[i] = padding end
    return t
  end
  if type(padding) ~= "table" or getmetatable(padding) ~= nil or rawlen(padding) ~= 2 * dims then
    error(("%s: padding must be an integer or a list of %d integers, got %s"):format(name, 2 * dims, O.got(padding)),
      0)
  end
  local t = {}
  for i = 1, 2 * dims do
    local v = rawget(padding, i)
    if math.type(v) ~= "integer" then
      error(("%s: padding must hold integers, got %s at %d"):format(name, O.got(v), i), 0)
    end
    t[i] = v
  end
  return t
end

local function pad_class(name, dims, mode, takes_value)
  local cls = Module.class(name)
  cls["__init"] = function(self, padding, value, ...)
    local ok, err = pcall(function(...)
      O.no_more(name, takes_value and "(padding, value)" or "(padding)", ...)
      if not takes_value and value ~= nil then
        error(("%s: takes (padding) only (%s), got a second argument %s"):format(name,
          mode == "constant" and "it pads with zeros" or "it pads with the input's own elements", O.got(value)), 0)
      end
      self.padding = amounts(name, dims, padding)
      if takes_value then
        if type(value) ~= "number" then
          error(("%s: value must be a number, got %s"):format(name, O.got(value)), 0)
        end
        self.value = value
      end
    end, ...)
    if not ok then error(err, 3) end
  end
  cls.forward = function(self, x)
    local ok, r = pcall(F.pad, x, self.padding, { mode = mode, value = self.value })
    if not ok then error((tostring(r):gsub("^[^:\n]*%.lua:%d+: ", "")), 0) end
    return r
  end
  cls.extra_repr = function(self)
    local p = "(" .. table.concat(self.padding, ", ") .. ")"
    if takes_value then return ("padding=%s, value=%s"):format(p, self.value) end
    return p
  end
  return cls
end

for dims = 1, 3 do
  M[("ZeroPad%dd"):format(dims)] = pad_class(("ZeroPad%dd"):format(dims), dims, "constant", false)
  M[("ConstantPad%dd"):format(dims)] = pad_class(("ConstantPad%dd"):format(dims), dims, "constant", true)
  M[("ReflectionPad%dd"):format(dims)] = pad_class(("ReflectionPad%dd"):format(dims), dims, "reflect", false)
  M[("ReplicationPad%dd"):format(dims)] = pad_class(("ReplicationPad%dd"):format(dims), dims, "replicate", false)
  M[("CircularPad%dd"):format(dims)] = pad_class(("CircularPad%dd"):format(dims), dims, "circular", false)
end

return M
