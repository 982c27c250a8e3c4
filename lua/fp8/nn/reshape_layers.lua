-- reshape_layers.lua — layers that pass or reshape their input: fp8.nn.Identity(...) (torch's: returns its input,
-- its constructor's arguments ignored as torch's are, so it stands in for any layer) and fp8.nn.Flatten([start_dim=2
-- [, end_dim=-1]]) (torch's Flatten(start_dim=1) counted from 1: the batch dim is kept) and fp8.nn.Unflatten(dim,
-- unflattened_size).
local Module = require "fp8.nn.module"
local O = require "fp8.opts"

local M = {}

M.Identity = Module.class("Identity")
function M.Identity:__init(...) end   -- torch's Identity(*args, **kwargs) takes and drops them: a stand-in layer
function M.Identity:forward(x) return x end

M.Flatten = Module.class("Flatten")
-- Flatten([start_dim=2 [, end_dim=-1]]) (or {start_dim=, end_dim=})
function M.Flatten:__init(start_dim, end_dim)
  if type(start_dim) == "table" then
    if end_dim ~= nil then error("Flatten: pass the dims as a table or as arguments, not both", 3) end
    local o = O.check("Flatten", start_dim, { "start_dim", "end_dim" }, 3)
    start_dim, end_dim = o.start_dim, o.end_dim
  end
  if start_dim == nil then start_dim = 2 end
  if end_dim == nil then end_dim = -1 end
  for k, v in pairs { start_dim = start_dim, end_dim = end_dim } do
    if math.type(v) ~= "integer" or v == 0 then
      error(("Flatten: %s must be a nonzero integer (1-based, negative from the end), got %s"):format(k, O.got(v)), 3)
    end
  end
  self.start_dim, self.end_dim = start_dim, end_dim
end
function M.Flatten:forward(x)
  if not require("fp8.core").is_tensor(x) then
    Module._forward_error(self, ("expected a tensor input, got %s"):format(type(x)))
  end
  return x:flatten(self.start_dim, self.end_dim)
end
function M.Flatten:extra_repr() return ("start_dim=%d, end_dim=%d"):format(self.start_dim, self.end_dim) end

-- Unflatten(dim, unflattened_size) (or {dim=, unflattened_size=}): dim (1-based, negative from the end) split into
-- the sizes given (one may be -1), torch's
M.Unflatten = Module.class("Unflatten")
function M.Unflatten:__init(dim, sizes)
  if type(dim) == "table" then
    if sizes ~= nil then error("Unflatten: pass dim and unflattened_size as a table or as arguments, not both", 3) end
    local o = O.check("Unflatten", dim, { "dim", "unflattened_size" }, 3)
    dim, sizes = o.dim, o.unflattened_size
  end
  if math.type(dim) ~= "integer" or dim == 0 then
    error(("Unflatten: dim must be a nonzero integer (1-based, negative from the end), got %s"):format(O.got(dim)), 3)
  end
  if type(sizes) ~= "table" or getmetatable(sizes) ~= nil or rawlen(sizes) == 0 then
    error(("Unflatten: unflattened_size must be a list of sizes, got %s"):format(O.got(sizes)), 3)
  end
  local list = {}
  for i = 1, rawlen(sizes) do
    local v = rawget(sizes, i)
    if math.type(v) ~= "integer" or (v < 0 and v ~= -1) then
      error(("Unflatten: unflattened_size must hold integers >= 0 (or one -1), got %s at %d"):format(O.got(v), i), 3)
    end
    list[i] = v
  end
  self.dim, self.unflattened_size = dim, list
end
function M.Unflatten:forward(x)
  if not require("fp8.core").is_tensor(x) then
    Module._forward_error(self, ("expected a tensor input, got %s"):format(type(x)))
  end
  return x:unflatten(self.dim, self.unflattened_size)
end
function M.Unflatten:extra_repr()
  local d, u = rawget(self, "dim"), rawget(self, "unflattened_size")
  if math.type(d) ~= "integer" or type(u) ~= "table" then return "" end
  return ("dim=%d, unflattened_size=(%s)"):format(d, table.concat(u, ", "))
end

O.strict_arity(M.Flatten, "Flatten")
O.strict_arity(M.Unflatten, "Unflatten")
return M
