-- tensor_scatter.lua — torch's index_add, index_copy and index_fill: along dim, the positions a 1-d index names
-- (0-based) take source's slices, added (times alpha), copied, or a value. Each is scatter_add or scatter (core,
-- core/scatter.c) with the index spread over the other dims, as index_select was gather's, so gradients reach the
-- tensor and the source as torch's (a position index_copy writes gives the tensor no gradient there).
local core = require "fp8.core"
local T = require "fp8.tensor"
local opts = require "fp8.opts"
local Tensor = core.Tensor
local no_more, got = opts.no_more, opts.got
local check_self, check_live, check_not_fp8 = T._check_self, T._check_live, T._check_not_fp8
local at_caller = T._at_caller   -- every method below raises its errors at the user's line

-- the index over the shape of t with dim's size k: [k] viewed and expanded as scatter takes it; dim normalised
local function spread(name, t, dim, index)
  check_not_fp8(name, check_self(name, t))
  if t:dim() == 0 then error(("%s: a 0-d tensor has no dim to index along"):format(name)) end
  if math.type(dim) ~= "integer" or dim == 0 or math.abs(dim) > t:dim() then
    error(("%s: dim must be in 1..%d or -%d..-1, got %s"):format(name, t:dim(), t:dim(), got(dim)))
  end
  if dim < 0 then dim = t:dim() + 1 + dim end
  if not core.is_tensor(index) then error(("%s: expected an index tensor, got %s"):format(name, got(index))) end
  check_live(name, "the index", index)
  if index:dim() ~= 1 then error(("%s: the index must be 1-d, got %s"):format(name, index:shape_str())) end
  local view, full = {}, t:shape()
  for i = 1, t:dim() do view[i] = i == dim and index:size(1) or 1 end
  full[dim] = index:size(1)
  return dim, index:view(view):expand(full), full
end

-- source of the shape t has with dim's size k (torch's index_add/index_copy)
local function check_source(name, t, dim, source, full)
  if not core.is_tensor(source) then error(("%s: expected a source tensor, got %s"):format(name, got(source))) end
  check_live(name, "the source", source)
  local s = source:shape()
  local same = #s == #full
  for i = 1, #full do same = same and s[i] == full[i] end
  if not same then
    error(("%s: source must be %s (the tensor's shape with dim %d's size the index's %d), got %s"):format(name,
      "[" .. table.concat(full, ", ") .. "]", dim, full[dim], source:shape_str()))
  end
end

-- a core error under the method's name
local function call(name, f, ...)
  local r = table.pack(pcall(f, ...))
  if r[1] then return r[2] end
  error((tostring(r[2]):gsub("^[^:\n]*%.lua:%d+: ", ""):gsub("^scatter_add: ", name .. ": "):gsub("^scatter: ",
    name .. ": ")), 0)
end

-- t:index_add(dim, index, source [, alpha | {alpha=1}])
Tensor.index_add = at_caller(function(t, dim, index, source, alpha, ...)
  no_more("index_add", "(dim, index, source [, {alpha=}])", ...)
  local d, idx, full = spread("index_add", t, dim, index)
  check_source("index_add", t, d, source, full)
  if type(alpha) == "table" and not core.is_tensor(alpha) then
    alpha = opts.check("index_add", alpha, { "alpha" }, 3).alpha
  end
  if alpha ~= nil and (type(alpha) ~= "number" or alpha ~= alpha) then
    error(("index_add: alpha must be a number, got %s"):format(got(alpha)))
  end
  if alpha ~= nil and alpha ~= 1 then source = source * alpha end
  return call("index_add", t.scatter_add, t, d, idx, source)
end)

-- t:index_copy(dim, index, source)
Tensor.index_copy = at_caller(function(t, dim, index, source, ...)
  no_more("index_copy", "(dim, index, source)", ...)
  local d, idx, full = spread("index_copy", t, dim, index)
  check_source("index_copy", t, d, source, full)
  return call("index_copy", t.scatter, t, d, idx, source)
end)

-- t:index_fill(dim, index, value): value a number (or a 0-d tensor's)
Tensor.index_fill = at_caller(function(t, dim, index, value, ...)
  no_more("index_fill", "(dim, index, value)", ...)
  local d, idx = spread("index_fill", t, dim, index)
  if core.is_tensor(value) then
    check_live("index_fill", "value", value)
    if value:dim() ~= 0 then
      error(("index_fill: value must be a number or a 0-d tensor, got a tensor of shape %s"):format(value:shape_str()))
    end
    value = value:detach():float():item()
  elseif type(value) ~= "number" then
    error(("index_fill: value must be a number or a 0-d tensor, got %s"):format(got(value)))
  end
  return call("index_fill", t.scatter, t, d, idx, value)
end)

return {}
