-- tensor_linalg.lua — torch's small linear-algebra methods on tensors: dot, addmm, baddbmm, diagonal, diag, trace.
-- Each is made of differentiable ops (matmul, index_select, sums), so gradients reach every tensor argument; the
-- products run as matmul does (bf16-rounded operands under bf16 autocast).
local core = require "fp8.core"
local T = require "fp8.tensor"
local opts = require "fp8.opts"
local Tensor = core.Tensor
local no_more, got = opts.no_more, opts.got
local norm_dim = T._norm_dim
local at_caller = T._at_caller   -- every method below raises its errors at the user's line
-- dot, addmm and baddbmm are one op each in the profiler, as torch's aten::dot (no FLOPs), aten::addmm and
-- aten::baddbmm (2·M·N·K per product, the sum with the input not counted): the matmul, mul and add inside count none
local prof_op = require "fp8.prof_op"

local self_of, operand = T._check_arith_self, T._check_operand

-- dot(other): the inner product of two 1-d tensors of one size (torch's)
Tensor.dot = at_caller(function(t, y, ...)
  no_more("dot", "(other)", ...)
  self_of("dot", t)
  operand("dot", "other", y)
  if t:dim() ~= 1 or y:dim() ~= 1 or t:size(1) ~= y:size(1) then
    error(("dot: expected two 1-d tensors of one size, got %s and %s"):format(t:shape_str(), y:shape_str()))
  end
  -- core/ops.h's fl_dot: (t * y):sum()'s arithmetic, one node (DotBackward, torch's DotBackward0: the 0-d gradient
  -- times each vector, 1 FLOP a product as torch counts it; until stop 104 that graph itself, 2·n FLOPs)
  return prof_op("dot", nil, table.pack(t, y), function() return t:_dot(y) end)
end)

-- beta and alpha of addmm and baddbmm: torch's keywords, here {beta=, alpha=}
local function coefs(name, o)
  o = opts.check(name, o, { "beta", "alpha" }, 4)
  local beta, alpha = o.beta, o.alpha
  if beta == nil then beta = 1 end
  if alpha == nil then alpha = 1 end
  for _, kv in ipairs { { "beta", beta }, { "alpha", alpha } } do   -- (in order: one message for two faults)
    if type(kv[2]) ~= "number" then error(("%s: %s must be a number, got %s"):format(name, kv[1], got(kv[2]))) end
  end
  return beta, alpha
end

-- beta·input + alpha·product, torch's: beta 0 leaves input out (its NaN and inf too), alpha 1 and beta 1 add as they
-- are; input broadcast to the product's shape. addmm and baddbmm run it through T._low_in_fp32: bf16/fp16 operands in
-- fp32, the result rounded once (the product rounded before the sum was up to 16 bf16 ulps off)
local function combine(name, t, prod, beta, alpha)
  -- x must broadcast to the product's shape itself (torch's in-place-style check): the broadcast of the two is it
  local shape = T._broadcast_shape(t:shape(), prod:shape())
  local ok = shape ~= nil and #shape == prod:dim()
  for k = 1, ok and #shape or 0 do ok = ok and shape[k] == prod:size(k) end
  if not ok then
    error(("%s: input %s does not broadcast to the product's shape %s"):format(name, t:shape_str(), prod:shape_str()))
  end
  if alpha ~= 1 then prod = prod * alpha end
  if beta == 0 then return prod end
  return (beta == 1 and t or t * beta) + prod
end

-- addmm(mat1, mat2 [, {beta=1, alpha=1}]): beta·x + alpha·(mat1 @ mat2), mat1 [n, k], mat2 [k, m]
Tensor.addmm = at_caller(function(t, m1, m2, o, ...)
  no_more("addmm", "(mat1, mat2 [, {beta=, alpha=}])", ...)
  self_of("addmm", t)
  operand("addmm", "mat1", m1); operand("addmm", "mat2", m2)
  local beta, alpha = coefs("addmm", o)
  if m1:dim() ~= 2 or m2:dim() ~= 2 or m1:size(2) ~= m2:size(1) then
    error(("addmm: expected mat1 [n, k] and mat2 [k, m], got %s and %s"):format(m1:shape_str(), m2:shape_str()))
  end
  return prof_op("addmm", 2 * m1:size(1) * m1:size(2) * m2:size(2), table.pack(t, m1, m2, beta, alpha),
    T._low_in_fp32,
    function(x, a, b) return combine("addmm", x, a:matmul(b), beta, alpha) end, t, m1, m2)
end)

-- baddbmm(batch1, batch2 [, {beta=1, alpha=1}]): beta·x + alpha·(batch1 @ batch2), [b, n, k] @ [b, k, m]
Tensor.baddbmm = at_caller(function(t, b1, b2, o, ...)
  no_more("baddbmm", "(batch1, batch2 [, {beta=, alpha=}])", ...)
  self_of("baddbmm", t)
  operand("baddbmm", "batch1", b1); operand("baddbmm", "batch2", b2)
  local beta, alpha = coefs("baddbmm", o)
  if b1:dim() ~= 3 or b2:dim() ~= 3 or b1:size(1) ~= b2:size(1) or b1:size(3) ~= b2:size(2) then
    error(("baddbmm: expected batch1 [b, n, k] and batch2 [b, k, m], got %s and %s"):format(b1:shape_str(),
      b2:shape_str()))
  end
  return prof_op("baddbmm", 2 * b1:size(1) * b1:size(2) * b1:size(3) * b2:size(3),
    table.pack(t, b1, b2, beta, alpha), T._low_in_fp32,
    function(x, a, b) return combine("baddbmm", x, a:matmul(b), beta, alpha) end, t, b1, b2)
end)

-- diagonal([offset=0 [, dim1=1 [, dim2=2]]]) (or {offset=, dim1=, dim2=}): the elements x[..i.., ..i+offset..] of
-- dims dim1 and dim2 (offset > 0 above the main diagonal, < 0 below), as a last dim after the others (torch's); a copy
-- here, where torch's is a view. Positions are picked with index_select, so the gradient goes back to each.
Tensor.diagonal = at_caller(function(t, offset, d1, d2, ...)
  no_more("diagonal", "([offset [, dim1 [, dim2]]])", ...)
  self_of("diagonal", t)
  if type(offset) == "table" then
    if d1 ~= nil or d2 ~= nil then error("diagonal: give offset, dim1 and dim2 either in order or in one table") end
    local o = opts.check("diagonal", offset, { "offset", "dim1", "dim2" }, 3)
    offset, d1, d2 = o.offset, o.dim1, o.dim2
  end
  offset = offset or 0
  if math.type(offset) ~= "integer" then error(("diagonal: offset must be an integer, got %s"):format(got(offset))) end
  if t:dim() < 2 then error(("diagonal: needs 2 or more dims, got %s"):format(t:shape_str())) end
  d1, d2 = norm_dim("diagonal", d1 or 1, t:dim()), norm_dim("diagonal", d2 or 2, t:dim())
  if d1 == d2 then error(("diagonal: dim1 and dim2 must differ, got %d twice"):format(d1)) end
  local perm = {}
  for d = 1, t:dim() do if d ~= d1 and d ~= d2 then perm[#perm + 1] = d end end
  perm[#perm + 1], perm[#perm + 2] = d1, d2
  local x = t:permute(perm)
  local n, m = t:size(d1), t:size(d2)
  local r0, c0 = math.max(-offset, 0), math.max(offset, 0)
  local len = math.max(0, math.min(n - r0, m - c0))
  if n * m > (1 << 24) then error(("diagonal: %d x %d elements are more than 2^24"):format(n, m)) end
  local shape = x:shape()
  shape[#shape] = nil
  shape[#shape] = n * m
  local pos = {}
  for i = 0, len - 1 do pos[i + 1] = (r0 + i) * m + c0 + i end
  local flat = x:reshape(shape)
  if len == 0 then
    shape[#shape] = 0
    return T._full_in_graph(x, shape, 0, { dtype = t:dtype(), device = t:device() })
  end
  return flat:index_select(#shape, core.tensor(pos):to(t:device()))
end)

-- trace(): the sum of a 2-d tensor's main diagonal
Tensor.trace = at_caller(function(t, ...)
  no_more("trace", "()", ...)
  self_of("trace", t)
  if t:dim() ~= 2 then error(("trace: expected a 2-d tensor, got %s"):format(t:shape_str())) end
  return T._autocast_fp32(t):diagonal():sum()   -- (fp32 under autocast, as torch's CPU autocast)
end)

-- diag([diagonal=0]): a 1-d tensor's values on the given diagonal of a square matrix (zeros elsewhere), or a 2-d
-- tensor's diagonal as a 1-d tensor (torch's two uses)
Tensor.diag = at_caller(function(t, k, ...)
  no_more("diag", "([diagonal])", ...)
  self_of("diag", t)
  k = k or 0
  if math.type(k) ~= "integer" then error(("diag: diagonal must be an integer, got %s"):format(got(k))) end
  if t:dim() == 2 then return t:diagonal(k) end
  if t:dim() ~= 1 then error(("diag: expected a 1-d or 2-d tensor, got %s"):format(t:shape_str())) end
  local n = t:size(1)
  if k > (1 << 24) or k < -(1 << 24) then   -- (math.abs(mininteger) wraps: the size went negative)
    error(("diag: diagonal %d puts the result past 2^24 elements"):format(k))
  end
  local size = n + math.abs(k)
  if size * size > (1 << 24) then error(("diag: a %d x %d result is more than 2^24 elements"):format(size, size)) end
  -- each position p of the flattened result: on the diagonal when col − row = k, where it takes v[min(row, col)]
  -- (index_select, so the gradient goes back to v); zero elsewhere
  local p = core.arange(size * size):to(t:device())
  local row = (p / size):floor()
  local col = p - row * size
  local on = (col - row):eq(k)
  local idx = T.where(on, k >= 0 and row or col, 0)
  local vals = t:index_select(1, idx):reshape { size, size }
  return T.where(on:reshape { size, size }, vals, 0):to(t:dtype())
end)

return true
