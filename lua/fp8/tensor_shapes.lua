-- tensor_shapes.lua — more of torch's ops that arrange, stack and combine tensors, made of differentiable views,
-- copies and products (so gradients flow as torch's): methods atleast_1d/2d/3d, fliplr, flipud, rot90,
-- broadcast_to, diff, take, take_along_dim, kron, inner, cross (function forms fp8.<name>(x, ...)); and functions of
-- several tensors fp8.hstack, vstack, dstack, column_stack, broadcast_tensors, meshgrid, cartesian_prod,
-- block_diag, triu_indices and tril_indices (the last two give [2, n] fp32 positions, 0-based: torch's are int64).
local core = require "fp8.core"
local T = require "fp8.tensor"
local opts = require "fp8.opts"
local Tensor = core.Tensor
local no_more, got = opts.no_more, opts.got
local check_self, check_live, check_not_fp8, norm_dim = T._check_self, T._check_live, T._check_not_fp8, T._norm_dim
local at_caller = T._at_caller

local M = {}

local function self_of(name, t) check_not_fp8(name, check_self(name, t)) end

-- a list of tensors (a plain table, or the arguments themselves), each live and not FP8
local function tensors_of(name, ...)
  local list = select("#", ...) == 1 and type((...)) == "table" and not core.is_tensor((...)) and (...) or { ... }
  require("fp8.opts").check_list(name, "the list of tensors", list, 4)
  local out = {}
  for i = 1, rawlen(list) do
    local t = rawget(list, i)
    if not core.is_tensor(t) then error(("%s: entry %d must be a tensor, got %s"):format(name, i, got(t)), 3) end
    check_live(name, "entry " .. i, t)
    check_not_fp8(name, t:dtype())
    out[i] = t
  end
  if #out == 0 then error(("%s: expected one or more tensors, got none"):format(name), 3) end
  return out
end

-- ---- methods ---------------------------------------------------------------------------------------------------

local function at_least(n)
  return function(t, ...)
    local name = ("atleast_%dd"):format(n)
    no_more(name, "no arguments", ...)
    self_of(name, t)
    local d = t:dim()
    if d >= n then return t end
    -- torch's: 0-d to [1, ...]; 1-d [k] to [1, k] (2d) or [1, k, 1] (3d); 2-d [m, k] to [m, k, 1]
    local shape = d == 0 and {} or d == 1 and { 1, t:size(1) } or { t:size(1), t:size(2) }
    while #shape < n do shape[#shape + 1] = 1 end
    return t:reshape(shape)
  end
end
Tensor.atleast_1d = at_caller(at_least(1))
Tensor.atleast_2d = at_caller(at_least(2))
Tensor.atleast_3d = at_caller(at_least(3))

Tensor.fliplr = at_caller(function(t, ...)
  no_more("fliplr", "no arguments", ...); self_of("fliplr", t)
  if t:dim() < 2 then error(("fliplr: the tensor must have 2 or more dims, got %s"):format(t:shape_str()), 2) end
  return t:flip(2)
end)
Tensor.flipud = at_caller(function(t, ...)
  no_more("flipud", "no arguments", ...); self_of("flipud", t)
  if t:dim() < 1 then error("flipud: the tensor must have 1 or more dims, got a 0-d one", 2) end
  return t:flip(1)
end)

-- rot90([k=1 [, dims={1, 2}]]): k quarter turns in the plane of dims, from the first dim toward the second (torch's)
Tensor.rot90 = at_caller(function(t, k, dims, ...)
  no_more("rot90", "([k=1 [, dims={1, 2}]])", ...)
  self_of("rot90", t)
  k = k or 1
  if math.type(k) ~= "integer" then error(("rot90: k must be an integer, got %s"):format(got(k)), 2) end
  dims = dims or { 1, 2 }
  if type(dims) ~= "table" or rawlen(dims) ~= 2 then
    error(("rot90: dims must be a list of two dims, got %s"):format(got(dims)), 2)
  end
  if t:dim() < 2 then error(("rot90: the tensor must have 2 or more dims, got %s"):format(t:shape_str()), 2) end
  local a, b = norm_dim("rot90", rawget(dims, 1), t:dim(), 2), norm_dim("rot90", rawget(dims, 2), t:dim(), 2)
  if a == b then error(("rot90: dims must differ, got %d and %d"):format(a, b), 2) end
  k = k % 4
  if k == 0 then return t * 1 end
  if k == 2 then return t:flip({ a, b }) end
  if k == 1 then return t:flip(b):transpose(a, b) end
  return t:flip(a):transpose(a, b)
end)

Tensor.broadcast_to = at_caller(function(t, shape, ...)
  no_more("broadcast_to", "(shape)", ...)
  self_of("broadcast_to", t)
  if type(shape) ~= "table" then
    error(("broadcast_to: shape must be a list of sizes, got %s"):format(got(shape)), 2)
  end
  return t:expand(shape)
end)

-- diff([n=1 [, dim=-1 [, {prepend=, append=}]]]): the n-th forward difference along dim, prepend and append joined
-- first (torch's)
Tensor.diff = at_caller(function(t, n, dim, o, ...)
  no_more("diff", "([n=1 [, dim=-1 [, {prepend=, append=}]]])", ...)
  self_of("diff", t)
  if t:dim() == 0 then error("diff: the tensor must have 1 or more dims, got a 0-d one", 2) end
  n = n or 1
  if math.type(n) ~= "integer" or n < 0 then error(("diff: n must be an integer >= 0, got %s"):format(got(n)), 2) end
  local d = norm_dim("diff", dim or -1, t:dim(), 2)
  o = opts.check("diff", o, { "prepend", "append" }, 2)
  local parts = {}
  for _, key in ipairs { "prepend", "append" } do
    if o[key] ~= nil and not core.is_tensor(o[key]) then
      error(("diff: %s must be a tensor, got %s"):format(key, got(o[key])), 2)
    end
  end
  if o.prepend then parts[#parts + 1] = o.prepend end
  parts[#parts + 1] = t
  if o.append then parts[#parts + 1] = o.append end
  local x = #parts > 1 and core.cat(parts, d) or t
  if rawequal(x, t) and n == 0 then return t:clone() end   -- (n = 0: torch's diff gives a copy, not t itself)
  for _ = 1, n do
    local len = x:size(d)
    if len == 0 then break end
    x = x:narrow(d, 2, len - 1) - x:narrow(d, 1, len - 1)
  end
  return x
end)

-- take(index): the elements at index's flat 0-based positions (negative from the end), in index's shape
Tensor.take = at_caller(function(t, index, ...)
  no_more("take", "(index)", ...)
  self_of("take", t)
  if not core.is_tensor(index) then error(("take: index must be a tensor, got %s"):format(got(index)), 2) end
  local n = t:numel()
  local flat = {}
  for i, v in ipairs(index:numel() > 0 and index:reshape({ -1 }):tolist() or {}) do
    if v ~= math.floor(v) or v < -n or v >= n then
      error(("take: index %s at %d is out of range for %d elements"):format(got(math.tointeger(v) or v), i, n), 2)
    end
    flat[i] = v < 0 and v + n or v
    if flat[i] > opts.MAX_POSITION then   -- (a negative index counted from the end: the index itself is exact)
      error(("take: index %d asks for position %.0f: positions above 2^24 are not exact in fp32, the index dtype")
        :format(i, flat[i]), 2)
    end
  end
  if #flat == 0 then return T._full_in_graph(t, index:shape(), 0) end
  return t:reshape({ -1 }):index_select(1, T._list_on(flat, t:device())):reshape(index:shape())
end)

-- take_along_dim(indices [, dim]): gather along dim with indices and x broadcast against each other elsewhere
-- (torch's); without dim, over the flattened tensor
Tensor.take_along_dim = at_caller(function(t, idx, dim, ...)
  no_more("take_along_dim", "(indices [, dim])", ...)
  self_of("take_along_dim", t)
  if not core.is_tensor(idx) then
    error(("take_along_dim: indices must be a tensor, got %s"):format(got(idx)), 2)
  end
  if dim == nil then return t:reshape({ -1 }):gather(1, idx:reshape({ -1 })) end
  if idx:dim() ~= t:dim() then
    error(("take_along_dim: indices %s must have the tensor's %d dims"):format(idx:shape_str(), t:dim()), 2)
  end
  if t:dim() == 0 then   -- (norm_dim said 'dim must be an integer in 1..0 or -0..-1'); torch 2.15 refuses too
    error(("take_along_dim: a 0-d tensor has no dim to take along, got dim %s (without dim, it is taken as [1])")
      :format(got(dim)), 2)
  end
  local d = norm_dim("take_along_dim", dim, t:dim(), 2)
  local ts, is = {}, {}
  for i = 1, t:dim() do
    local a, b = t:size(i), idx:size(i)
    if i ~= d and a ~= b and a ~= 1 and b ~= 1 then
      error(("take_along_dim: the tensor %s and indices %s do not broadcast (dim %d)"):format(t:shape_str(),
        idx:shape_str(), i), 2)
    end
    -- broadcast: the size that is not 1 (an empty dim against 1 stays empty, torch's; math.max gave 1 there)
    local both = a == 1 and b or a
    ts[i] = i == d and a or both
    is[i] = i == d and b or both
  end
  return t:expand(ts):gather(d, idx:expand(is))
end)

-- kron(other): the Kronecker product, the smaller rank padded with leading 1s (torch's)
Tensor.kron = at_caller(function(t, y, ...)
  no_more("kron", "(other)", ...)
  self_of("kron", t)
  if not core.is_tensor(y) then error(("kron: other must be a tensor, got %s"):format(got(y)), 2) end
  local nd = math.max(t:dim(), y:dim(), 1)
  local function padded(x)
    local s = x:shape()
    while #s < nd do table.insert(s, 1, 1) end
    return s
  end
  local sa, sb = padded(t), padded(y)
  local ia, ib, out = {}, {}, {}
  for i = 1, nd do
    ia[#ia + 1], ia[#ia + 2] = sa[i], 1
    ib[#ib + 1], ib[#ib + 2] = 1, sb[i]
    out[i] = sa[i] * sb[i]
  end
  return (t:reshape(ia) * y:reshape(ib)):reshape(out)
end)

-- inner(other): the sum over the last dims of the products, shape x's leading dims then other's (0-d: a product)
Tensor.inner = at_caller(function(t, y, ...)
  no_more("inner", "(other)", ...)
  self_of("inner", t)
  if not core.is_tensor(y) then error(("inner: other must be a tensor, got %s"):format(got(y)), 2) end
  if t:dim() == 0 or y:dim() == 0 then return t * y end
  local n = t:size(-1)
  if y:size(-1) ~= n then
    error(("inner: the last dims must agree, got %s and %s"):format(t:shape_str(), y:shape_str()), 2)
  end
  local out, M, N = {}, 1, 1
  for i = 1, t:dim() - 1 do out[#out + 1] = t:size(i); M = M * t:size(i) end
  for i = 1, y:dim() - 1 do out[#out + 1] = y:size(i); N = N * y:size(i) end
  -- the sizes given, not -1 (ambiguous where the last dims are 0: torch's zeros)
  return t:reshape({ M, n }):matmul(y:reshape({ N, n }):t()):reshape(out)
end)

-- cross(other [, dim]): the 3-vector cross product along dim (by default the first dim of size 3, torch.cross's),
-- the two broadcast
Tensor.cross = at_caller(function(t, y, dim, ...)
  no_more("cross", "(other [, dim])", ...)
  self_of("cross", t)
  if not core.is_tensor(y) then error(("cross: other must be a tensor, got %s"):format(got(y)), 2) end
  local shape = (t:detach() + y:detach()):shape()   -- the broadcast shape (and its errors)
  local a, b = t:expand(shape), y:expand(shape)
  local d
  if dim == nil then
    for i = 1, #shape do if shape[i] == 3 then d = i; break end end
    if d == nil then error(("cross: no dim of size 3 in %s"):format(a:shape_str()), 2) end
  else
    d = norm_dim("cross", dim, #shape, 2)
    if shape[d] ~= 3 then error(("cross: dim %d must have size 3, got %d"):format(d, shape[d]), 2) end
  end
  local function c(x, i) return x:narrow(d, i, 1) end
  return core.cat({ c(a, 2) * c(b, 3) - c(a, 3) * c(b, 2), c(a, 3) * c(b, 1) - c(a, 1) * c(b, 3),
    c(a, 1) * c(b, 2) - c(a, 2) * c(b, 1) }, d)
end)

-- ---- functions of several tensors ------------------------------------------------------------------------------

M.hstack = at_caller(function(...)
  local ts = tensors_of("hstack", ...)
  for i, t in ipairs(ts) do ts[i] = t:atleast_1d() end
  return core.cat(ts, ts[1]:dim() == 1 and 1 or 2)
end)
M.vstack = at_caller(function(...)
  local ts = tensors_of("vstack", ...)
  for i, t in ipairs(ts) do ts[i] = t:atleast_2d() end
  return core.cat(ts, 1)
end)
M.dstack = at_caller(function(...)
  local ts = tensors_of("dstack", ...)
  for i, t in ipairs(ts) do ts[i] = t:atleast_3d() end
  return core.cat(ts, 3)
end)
M.column_stack = at_caller(function(...)
  local ts = tensors_of("column_stack", ...)
  for i, t in ipairs(ts) do if t:dim() <= 1 then ts[i] = t:reshape({ t:numel(), 1 }) end end
  return core.cat(ts, 2)
end)

M.broadcast_tensors = at_caller(function(...)
  local ts = tensors_of("broadcast_tensors", ...)
  local acc = ts[1]
  for i = 2, #ts do acc = acc:detach() + ts[i]:detach() end   -- the broadcast shape (and its error)
  local shape, out = acc:shape(), {}
  for i, t in ipairs(ts) do out[i] = t:expand(shape) end
  return table.unpack(out)
end)

-- meshgrid(t1, t2, ... [, {indexing="ij"}]) or meshgrid({t1, ...} [, {indexing=}]): each 1-d (or 0-d) tensor spread
-- over the grid of all their sizes; "xy" swaps the first two dims (numpy's), torch's
M.meshgrid = at_caller(function(...)
  local args, o = table.pack(...), nil
  local last = args[args.n]
  if args.n >= 1 and type(last) == "table" and not core.is_tensor(last) and rawget(last, 1) == nil then
    o = last
    args.n = args.n - 1
  end
  o = opts.check("meshgrid", o, { "indexing" }, 2)
  local indexing = o.indexing or "ij"
  if indexing ~= "ij" and indexing ~= "xy" then
    error(("meshgrid: indexing must be \"ij\" or \"xy\", got %s"):format(got(indexing)), 2)
  end
  local ts = tensors_of("meshgrid", table.unpack(args, 1, args.n))
  for i, t in ipairs(ts) do
    if t:dim() > 1 then error(("meshgrid: entry %d must be 0-d or 1-d, got %s"):format(i, t:shape_str()), 2) end
    ts[i] = t:reshape({ -1 })
  end
  local swap = indexing == "xy" and #ts >= 2
  if swap then ts[1], ts[2] = ts[2], ts[1] end
  local sizes = {}
  for i, t in ipairs(ts) do sizes[i] = t:size(1) end
  local out = {}
  for i, t in ipairs(ts) do
    local view = {}
    for j = 1, #ts do view[j] = j == i and sizes[i] or 1 end
    out[i] = t:reshape(view):expand(sizes)
  end
  if swap then out[1], out[2] = out[2], out[1] end
  return table.unpack(out)
end)

-- cartesian_prod(t1, t2, ...): the rows of every combination of the 1-d tensors' elements, [n1·n2·..., k] (one tensor:
-- itself)
M.cartesian_prod = at_caller(function(...)
  local ts = tensors_of("cartesian_prod", ...)
  for i, t in ipairs(ts) do
    if t:dim() ~= 1 then error(("cartesian_prod: entry %d must be 1-d, got %s"):format(i, t:shape_str()), 2) end
  end
  if #ts == 1 then return ts[1] * 1 end
  local grids = { M.meshgrid(ts, { indexing = "ij" }) }
  for i, g in ipairs(grids) do grids[i] = g:reshape({ -1 }) end
  return T.stack(grids, 2)
end)

-- block_diag(t1, t2, ...): the 2-d block diagonal matrix of the tensors (0-d as [1, 1], 1-d as [1, n]), zeros elsewhere
M.block_diag = at_caller(function(...)
  local ts = tensors_of("block_diag", ...)
  local R, C = 0, 0
  for i, t in ipairs(ts) do
    if t:dim() > 2 then
      error(("block_diag: entry %d must have 2 or fewer dims, got %s"):format(i, t:shape_str()), 2)
    end
    ts[i] = t:atleast_2d()
    R, C = R + ts[i]:size(1), C + ts[i]:size(2)
  end
  local rows, c0 = {}, 0
  for i, t in ipairs(ts) do
    local r, c = t:size(1), t:size(2)
    local parts = {}
    if c0 > 0 then parts[#parts + 1] = core.zeros({ r, c0 }, { dtype = t:dtype(), device = t:device() }) end
    parts[#parts + 1] = t
    if C - c0 - c > 0 then
      parts[#parts + 1] = core.zeros({ r, C - c0 - c }, { dtype = t:dtype(), device = t:device() })
    end
    rows[i] = #parts > 1 and core.cat(parts, 2) or t
    c0 = c0 + c
  end
  return core.cat(rows, 1)
end)

-- triu_indices / tril_indices(row, col [, offset=0]): the [2, n] 0-based (row, column) positions of the upper (lower)
-- triangle from the offset'th diagonal on, row by row (torch's order)
local function tri_indices(name, upper)
  return at_caller(function(row, col, offset, ...)
    no_more(name, "(row, col [, offset=0])", ...)
    offset = offset or 0
    for _, a in ipairs { { "row", row }, { "col", col }, { "offset", offset } } do
      if math.type(a[2]) ~= "integer" or (a[1] ~= "offset" and a[2] < 0) then
        error(("%s: %s must be an integer%s, got %s"):format(name, a[1], a[1] ~= "offset" and " >= 0" or "",
          got(a[2])), 2)
      end
    end
    if row * 1.0 * col > 1 << 24 then   -- (in floating point: an integer product could wrap)
      error(("%s: %d × %d positions are more than the 2^24 fp32 counts exactly"):format(name, row, col), 2)
    end
    local rs, cs = {}, {}
    for i = 0, row - 1 do
      for j = 0, col - 1 do
        if (upper and j - i >= offset) or (not upper and j - i <= offset) then rs[#rs + 1], cs[#cs + 1] = i, j end
      end
    end
    if #rs == 0 then return core.zeros({ 2, 0 }) end
    return T.stack({ core.tensor(rs), core.tensor(cs) }, 1)
  end)
end
M.triu_indices = tri_indices("triu_indices", true)
M.tril_indices = tri_indices("tril_indices", false)

return M
