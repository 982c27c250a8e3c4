-- tensor_logic.lua — torch's predicates and logical ops on tensors: isnan, isinf, isfinite, logical_not,
-- logical_and, logical_or, logical_xor, all, any. There is no bool dtype: like the comparisons (eq, lt, ...) they
-- give 1 where true and 0 where false in the input's dtype (fp32 for mixed inputs), and carry no gradient. A
-- value is true where it is nonzero, NaN included (torch's truthiness).
local core = require "fp8.core"
local T = require "fp8.tensor"
local opts = require "fp8.opts"
local Tensor = core.Tensor
local no_more, got = opts.no_more, opts.got
local check_self, check_live, check_not_fp8, norm_dim = T._check_self, T._check_live, T._check_not_fp8, T._norm_dim
local at_caller = T._at_caller   -- every method below raises its errors at the user's line

-- self checked (live, not FP8) and detached: these results take no gradient, so no graph is built under them
local function input(name, t)
  check_not_fp8(name, check_self(name, t, 4), 4)
  return t:detach()
end

Tensor.isnan = at_caller(function(t, ...)
  no_more("isnan", "no arguments", ...)
  local x = input("isnan", t)
  return x:ne(x)
end)

Tensor.isinf = at_caller(function(t, ...)
  no_more("isinf", "no arguments", ...)
  return input("isinf", t):abs():eq(math.huge)
end)

Tensor.isfinite = at_caller(function(t, ...)
  no_more("isfinite", "no arguments", ...)
  return input("isfinite", t):abs():lt(math.huge)   -- NaN < inf is false
end)

Tensor.logical_not = at_caller(function(t, ...)
  no_more("logical_not", "no arguments", ...)
  return input("logical_not", t):eq(0)
end)

local function other(name, o, what)
  what = what or "other"
  if core.is_tensor(o) then
    check_live(name, what, o, 4)
    check_not_fp8(name, o:dtype(), 4)
    return o:detach()
  end
  error(("%s: expected a tensor as %s, got %s"):format(name, what, got(o)), 4)
end

local function shapes(name, f)
  local ok, r = pcall(f)
  if ok then return r end
  error(("%s: %s"):format(name, tostring(r):gsub("^[^:\n]*%.lua:%d+: ", ""):gsub("^[%w_]+: ", "")), 3)
end

Tensor.logical_and = at_caller(function(t, o, ...)
  no_more("logical_and", "(other)", ...)
  local a, b = input("logical_and", t), other("logical_and", o)
  return shapes("logical_and", function() return a:ne(0) * b:ne(0) end)
end)

Tensor.logical_or = at_caller(function(t, o, ...)
  no_more("logical_or", "(other)", ...)
  local a, b = input("logical_or", t), other("logical_or", o)
  return shapes("logical_or", function() return a:ne(0):maximum(b:ne(0)) end)
end)

Tensor.logical_xor = at_caller(function(t, o, ...)
  no_more("logical_xor", "(other)", ...)
  local a, b = input("logical_xor", t), other("logical_xor", o)
  return shapes("logical_xor", function() return a:ne(0):ne(b:ne(0)) end)
end)

-- all([dim [, keepdim]]) / any(...): whether every (some) element is nonzero, over everything or along dim;
-- an empty reduction is true for all and false for any, as torch's
local function all_any(name, t, dim, keepdim, is_all)
  local x = input(name, t)
  if dim ~= nil then dim = norm_dim(name, dim, math.max(x:dim(), 1), 4) end
  if keepdim ~= nil and type(keepdim) ~= "boolean" then
    error(("%s: keepdim must be a boolean, got %s"):format(name, got(keepdim)), 3)
  end
  local nz = x:ne(0)
  if x:numel() == 0 or (dim ~= nil and x:dim() > 0 and x:size(dim) == 0) then
    local shape = x:shape()
    if dim == nil then
      if keepdim then for k = 1, #shape do shape[k] = 1 end else shape = {} end
    elseif keepdim then shape[dim] = 1
    else table.remove(shape, dim) end
    return core.full(shape, is_all and 1 or 0, { dtype = x:dtype(), device = x:device() })
  end
  if dim == nil then   -- keepdim: every dim kept, of size 1, as sum's (it was dropped)
    local r = is_all and nz:min() or nz:max()
    if keepdim and x:dim() > 0 then
      local ones = {}
      for k = 1, x:dim() do ones[k] = 1 end
      r = r:reshape(ones)
    end
    return r
  end
  local r = is_all and nz:min(dim, keepdim) or nz:max(dim, keepdim)
  return r
end

Tensor.all = at_caller(function(t, dim, keepdim, ...)
  no_more("all", "([dim [, keepdim]])", ...)
  return (all_any("all", t, dim, keepdim, true))
end)

Tensor.any = at_caller(function(t, dim, keepdim, ...)
  no_more("any", "([dim [, keepdim]])", ...)
  return (all_any("any", t, dim, keepdim, false))
end)

-- the flat positions (0-based) where m, broadcast to shape, is nonzero (NaN counts), read on the host
local function positions(m)
  local pos, vals = {}, m:reshape(-1):totable()
  for i = 1, #vals do if vals[i] ~= 0 then pos[#pos + 1] = i - 1 end end
  return pos
end

-- the shape a and b broadcast to (numpy's rule), or nil
local function broadcast_shape(a, b)
  local sa, sb, out = a:shape(), b:shape(), {}
  local n = math.max(#sa, #sb)
  for i = 1, n do
    local x, y = sa[#sa - n + i] or 1, sb[#sb - n + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then return nil end
    out[i] = x == 1 and y or x
  end
  return out
end

-- masked_select(mask): torch's x[mask] — x's elements where mask is nonzero, as a 1-d tensor in row-major order;
-- x and mask broadcast together, as torch's (a mask of more dims or larger sizes than x repeats x's elements:
-- before stop 94 only a mask that broadcast to x's shape was taken); the gradient goes back to those elements
-- (index_select's backward, then expand's sum)
Tensor.masked_select = at_caller(function(t, mask, ...)
  no_more("masked_select", "(mask)", ...)
  check_not_fp8("masked_select", check_self("masked_select", t))
  local m = other("masked_select", mask, "the mask")
  local shape = broadcast_shape(t, m)
  if not shape then
    error(("masked_select: the mask's shape %s and the tensor's %s do not broadcast together"):format(
      m:shape_str(), t:shape_str()))
  end
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  if n > 2 ^ 24 then   -- the positions are fp32 whole numbers, exact up to 2^24
    error(("masked_select: %d elements, more than 2^24"):format(n))
  end
  local pos = positions(m:expand(shape))
  return t:expand(shape):reshape(-1):index_select(1, core.tensor(#pos > 0 and pos or {}, "fp32"):reshape(#pos))
end)

-- nonzero() / argwhere(): torch's, the 0-based indices of the nonzero elements (NaN counts), one row each, [n, dim]
-- in row-major order, as fp32 (as argmax's); a 0-d tensor gives [n, 0]
local function nonzero(name, t, ...)
  no_more(name, "no arguments", ...)
  local x = input(name, t)
  local shape, nd = x:shape(), x:dim()
  if x:numel() > 2 ^ 24 then error(("%s: %d elements, more than 2^24"):format(name, x:numel())) end
  local pos, rows = positions(x), {}
  for r, p in ipairs(pos) do
    local row = {}
    for d = nd, 1, -1 do row[d] = p % shape[d]; p = p // shape[d] end
    rows[r] = row
  end
  if #rows == 0 or nd == 0 then return core.zeros({ #rows, nd }, { device = x:device() }) end
  local r = core.tensor(rows, "fp32")
  if x:device() ~= r:device() then r = r:to(x:device()) end
  return r
end
Tensor.nonzero = at_caller(function(t, ...) return nonzero("nonzero", t, ...) end)
Tensor.argwhere = at_caller(function(t, ...) return nonzero("argwhere", t, ...) end)

return {}
