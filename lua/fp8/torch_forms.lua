-- torch_forms.lua — torch's other spellings of tensor operations: the function forms (torch.exp(x) is
-- fp8.exp(x), torch.sum(x, 1) is fp8.sum(x, 1), torch.max(a, b) of two tensors is fp8.maximum) and method forms
-- of functions (x.softmax(dim) is x:softmax(dim)); and the few ops that are easiest said in terms of others:
-- logsumexp, norm, mm, bmm, outer. Each is the method it names, with the same checks and gradients; errors
-- carry the user's line.
local core = require "fp8.core"
local T = require "fp8.tensor"
local opts = require "fp8.opts"
local Tensor = core.Tensor
local no_more, got = opts.no_more, opts.got
local check_self, check_live, check_not_fp8, dims_of = T._check_self, T._check_live, T._check_not_fp8, T._dims_of
local norm_dim = T._norm_dim
local at_caller = T._at_caller   -- every function below raises its errors at the user's line

local M = {}

-- ---- method forms of the nn.functional ops, and ops made of other ops ------------------------------------------

Tensor.softmax = at_caller(function(t, dim, ...)
  check_self("softmax", t); no_more("softmax", "(dim)", ...)
  return require("fp8.nn.functional").softmax(t, dim)
end)

Tensor.log_softmax = at_caller(function(t, dim, ...)
  check_self("log_softmax", t); no_more("log_softmax", "(dim)", ...)
  return require("fp8.nn.functional").log_softmax(t, dim)
end)

local function check_keepdim(who, keepdim) T._check_keepdim(who, keepdim, 5) end

local function each_dim(dim) return type(dim) == "table" and dim or { dim } end

local function fp32_back(r, x, t, dt) if x ~= t then return r:to(dt) end return r end

-- logsumexp(dim [, keepdim]): log Σ exp(x) along dim (or a list of dims), shifted by the largest value first as
-- torch's (an infinite largest value shifts by 0); the gradient is softmax(x)·g. bf16/fp16 inputs are computed in
-- fp32 and rounded once.
Tensor.logsumexp = at_caller(function(t, dim, keepdim, ...)
  local dt = check_self("logsumexp", t); no_more("logsumexp", "(dim [, keepdim])", ...)
  check_not_fp8("logsumexp", dt)
  if dim == nil then error("logsumexp: dim is required (torch's: the dim to reduce), got nil", 2) end
  dim = dims_of("logsumexp", dim, math.max(t:dim(), 1))
  check_keepdim("logsumexp", keepdim)
  local x = (dt == "bf16" or dt == "fp16") and t:float() or t
  local r, empty = nil, false
  for _, d in ipairs(each_dim(dim)) do empty = empty or (t:dim() > 0 and t:size(d) == 0) end
  if empty then   -- the sum of nothing: log 0
    local shape = t:shape()
    for _, d in ipairs(each_dim(dim)) do shape[d] = 1 end
    r = T._full_in_graph(x, shape, -math.huge)
  elseif type(dim) ~= "table" and t:dim() > 0 then
    -- one dim: core/ops.h's fl_logsumexp, the bits of the ops below (and of their gradient) in two passes
    return fp32_back(x:_logsumexp(dim, keepdim == true), x, t, dt)
  else
    local m = x:detach()
    for _, d in ipairs(each_dim(dim)) do m = m:max(d, true) end
    m = T.where(m:abs():eq(math.huge), 0, m)
    r = (x - m):exp():sum(dim, true):log() + m
  end
  if not keepdim and t:dim() > 0 then
    local ds = each_dim(dim)
    for i = #ds, 1, -1 do r = r:squeeze(ds[i]) end
  end
  if x ~= t then r = r:to(dt) end
  return r
end)

-- norm([p=2 [, dim [, keepdim]]]): torch's vector norms (torch.linalg.vector_norm's) over everything or along dim (or
-- a list of dims), for every p but NaN, as torch 2.15's: p = 2 (or "fro"), 1, math.huge (max |x|), -math.huge (min
-- |x|), 0 (the count of nonzero elements, NaN counted; its gradient zeros), p < 0 ((Σ|x|^p)^(1/p), 0 where an
-- element is 0) and any other p > 0 ((Σ|x|^p)^(1/p)); p other than 1, 2 and math.huge refused until stop 98. The
-- 2-norm's gradient is x/‖x‖, and 0 where ‖x‖ = 0 (torch's); the ±inf norms' is split among the ties, and 0 in a
-- slice holding a NaN (torch's).
-- bf16/fp16 inputs are computed in fp32 and rounded once, as torch's accumulate type.
Tensor.norm = at_caller(function(t, p, dim, keepdim, ...)
  local dt = check_self("norm", t); no_more("norm", "([p [, dim [, keepdim]]])", ...)
  check_not_fp8("norm", dt)
  if p == nil or p == "fro" then p = 2 end
  if type(p) ~= "number" or p ~= p then   -- (torch takes NaN and returns NaN: refused here by name, as normalize's)
    error(("norm: p must be a number (math.huge and -math.huge included, NaN not) or \"fro\", got %s"):format(got(p)),
      2)
  end
  if dim ~= nil then dim = dims_of("norm", dim, math.max(t:dim(), 1)) end
  check_keepdim("norm", keepdim)
  if p < 0 or p == math.huge then
    -- a reduction over nothing has no value for p < 0 and inf (torch's RuntimeError: the operation has no identity;
    -- the inf norm's said 'amax: ...', a function the caller never named, until sweep 114)
    local empty = t:numel() == 0 and dim == nil
    for _, d in ipairs(dim ~= nil and t:dim() > 0 and each_dim(dim) or {}) do empty = empty or t:size(d) == 0 end
    if empty then
      error(("norm: the %s norm of an empty reduction has no value (the operation has no identity; torch refuses it "
        .. "too), input %s"):format(p == -math.huge and "-inf" or p == math.huge and "inf" or ("%.14g"):format(p),
        t:shape_str()), 2)
    end
  end
  local x = (dt == "bf16" or dt == "fp16") and t:float() or t
  local r
  if p == 1 then r = x:abs():sum(dim, keepdim)
  elseif p == math.huge then   -- (a slice holding a NaN: amax's backward takes sign(NaN) as 0, torch's sgn; stop 99)
    r = x:amax(dim, keepdim)
  elseif p == 2 then
    -- Σx² in one pass (core/ops.h's fl_sum_squares: (x * x):sum(dim, keepdim)'s bits and gradient; over a list of
    -- dims, those two); where it over- or underflows, x scaled by a power of two first (T._norm_rescaled)
    r = T._norm_rescaled(x, dim, function(v)
      local s = type(dim) == "table" and (v * v):sum(dim, keepdim) or v:_sum_squares(dim, keepdim)
      local z = s:eq(0)           -- no history: sqrt(s + 1) - 1 is 0 there with a zero gradient; elsewhere s's root
      return (s + z):sqrt() - z, s
    end, 2)
  elseif p == 0 then   -- the count of nonzero elements; torch's gradient is zeros (the zero keeps x in the graph)
    r = x:detach():ne(0):to(x:dtype()):sum(dim, keepdim)
    if x:requires_grad() then r = r + T._full_in_graph(x, {}, 0) end
  elseif p < 0 then   -- (an empty reduction refused above)
    if p == -math.huge then r = T._min_abs_norm(x, dim, keepdim)   -- the smallest |x|, its gradient split among ties
    else   -- no rescue (torch has none; the sum is ruled by the smallest |x|), and no select on the root: a sum of
      -- 0 (every |x| inf) has the norm inf, torch's pow(0, 1/p), with its NaN gradient
      r = T._abs_pow(x, p, true):sum(dim, keepdim):pow(1 / p)
    end
  else                 -- any other p > 0: Σ|x|^p out of range: x scaled first, as dist's and F.normalize's
    r = T._norm_rescaled(x, dim, function(v)
      local s = T._abs_pow(v, p, true):sum(dim, keepdim)
      return T._root(s, p), s
    end, p)
  end
  if x ~= t then r = r:to(dt) end
  return r
end)

-- mm(y): two 2-d tensors; bmm(y): two 3-d tensors with the same batch; outer(y): two 1-d tensors (x_i·y_j)
local function two(who, t, y, nd)
  check_self(who, t, 4)
  if not core.is_tensor(y) then
    error(("%s: expected a tensor as the second operand, got %s"):format(who, got(y)), 4)
  end
  check_live(who, "the second operand", y, 5)
  if t:dim() ~= nd or y:dim() ~= nd then
    error(("%s: expected two %d-d tensors, got shapes %s and %s"):format(who, nd, t:shape_str(), y:shape_str()), 4)
  end
end

Tensor.mm = at_caller(function(t, y, ...)
  no_more("mm", "(other)", ...); two("mm", t, y, 2)
  return t:matmul(y)
end)

Tensor.bmm = at_caller(function(t, y, ...)
  no_more("bmm", "(other)", ...); two("bmm", t, y, 3)
  if t:size(1) ~= y:size(1) then
    error(("bmm: the batch sizes differ: %s and %s"):format(t:shape_str(), y:shape_str()), 2)
  end
  return t:matmul(y)
end)

Tensor.outer = at_caller(function(t, y, ...)
  no_more("outer", "(other)", ...); two("outer", t, y, 1)
  return t:unsqueeze(2) * y:unsqueeze(1)
end)

-- prod([dim [, keepdim]]): torch's product of all elements (0-d) or along one dim, and cumprod(dim): torch's running
-- products. Both are multiplications of halves (prod: a tree, log2 n products of whole slices; cumprod: the
-- Hillis-Steele scan, each step the slice times its shift by 1, 2, 4, ...), so autograd's product rule gives the
-- gradients, exact where elements are 0 (torch's special cases come out of it). The order of the rounding differs
-- from torch's running product: at most a few ulps apart. bf16/fp16 are computed in fp32 and rounded once.
local function fp32_of(dt, t) return (dt == "bf16" or dt == "fp16") and t:float() or t end

local function product_along(x, d)   -- x's product along d, kept as a dim of size 1 (1 for a dim of size 0)
  local n = x:size(d)
  if n == 0 then
    local shape = x:shape()
    shape[d] = 1
    return T._full_in_graph(x, shape, 1)
  end
  while n > 1 do
    local h = n // 2
    local p = x:narrow(d, 1, h) * x:narrow(d, h + 1, h)
    if n % 2 == 1 then p = core.cat({ p, x:narrow(d, 2 * h + 1, 1) }, d) end
    x, n = p, h + n % 2
  end
  return x
end

Tensor.prod = at_caller(function(t, dim, keepdim, ...)
  local dt = check_self("prod", t); no_more("prod", "([dim [, keepdim]])", ...)
  check_not_fp8("prod", dt)
  t = T._autocast_fp32(t)   -- fp32 under autocast, as torch's CPU autocast
  dt = t:dtype()
  check_keepdim("prod", keepdim)
  local x = fp32_of(dt, t)
  local r
  if dim == nil then
    if keepdim ~= nil then error("prod: keepdim needs a dim (torch's prod(dim, keepdim))", 2) end
    r = product_along(x:reshape({ -1 }), 1):reshape({})
  else
    if type(dim) == "table" then error(("prod: dim must be one integer (torch's prod takes one dim), got %s")
      :format(got(dim)), 2) end
    local d = norm_dim("prod", dim, math.max(t:dim(), 1))
    if t:dim() == 0 then r = x * 1
    else
      r = product_along(x, d)
      if not keepdim then r = r:squeeze(d) end
    end
  end
  if x ~= t then r = r:to(dt) end
  return r
end)

Tensor.cumprod = at_caller(function(t, dim, ...)
  local dt = check_self("cumprod", t); no_more("cumprod", "(dim)", ...)
  check_not_fp8("cumprod", dt)
  if dim == nil then error("cumprod: dim is required (torch's cumprod(dim)), got none", 2) end
  if type(dim) == "table" then error(("cumprod: dim must be one integer, got %s"):format(got(dim)), 2) end
  local d = norm_dim("cumprod", dim, math.max(t:dim(), 1))
  local x = fp32_of(dt, t)
  local y = t:dim() == 0 and x * 1 or x
  local n = t:dim() == 0 and 1 or x:size(d)
  local k = 1
  while k < n do   -- y[i] holds the product of x[i-2k+1 .. i] after each step
    y = core.cat({ y:narrow(d, 1, k), y:narrow(d, k + 1, n - k) * y:narrow(d, 1, n - k) }, d)
    k = k * 2
  end
  if y == x and y == t then y = x * 1 end   -- a fresh tensor, as torch's, not t itself
  if x ~= t then y = y:to(dt) end
  return y
end)

-- ---- function forms: fp8.<name>(x, ...) is x:<name>(...) ------------------------------------------------------

M.FORMS = {
  "abs", "neg", "exp", "log", "sqrt", "rsqrt", "sign", "tanh", "sigmoid", "sin", "cos", "tan", "asin", "acos", "atan",
  "sinh", "cosh", "log2", "log10", "exp2", "floor", "ceil", "round",
  "trunc", "erf", "log1p", "expm1", "square", "reciprocal", "isnan", "isinf", "isfinite", "logical_not",
  "logical_and", "logical_or", "logical_xor", "all", "any", "sum", "mean", "var", "std", "argmax", "argmin",
  "logsumexp", "norm", "cumsum", "prod", "cumprod", "tril", "triu", "chunk", "split", "clone", "flatten", "squeeze",
  "unsqueeze",
  "transpose", "permute", "reshape", "narrow", "select", "masked_fill", "clamp", "clamp_min", "clamp_max", "topk",
  "sort", "argsort", "numel", "lerp", "t", "add", "sub", "mul", "div", "eq", "ne", "lt", "le", "gt", "ge", "mm",
  "bmm", "outer", "softmax", "log_softmax", "unbind", "flip", "roll", "tile", "repeat_interleave", "masked_select",
  "nonzero", "argwhere", "dot", "addmm", "baddbmm", "diagonal", "diag", "trace", "addcmul", "addcdiv", "clip",
  "relu", "nan_to_num", "logaddexp", "xlogy", "logit", "isclose", "allclose", "count_nonzero", "movedim", "moveaxis",
  "swapaxes", "swapdims", "unflatten", "index_add", "index_copy", "index_fill", "atan2", "fmod", "remainder",
  "hypot", "rad2deg", "deg2rad", "frac", "sgn", "heaviside", "logaddexp2", "floor_divide", "true_divide",
  "copysign", "signbit", "float_power", "sinc", "nansum", "nanmean", "std_mean", "var_mean", "dist",
  "renorm", "atleast_1d", "atleast_2d", "atleast_3d", "fliplr", "flipud", "rot90", "broadcast_to", "diff", "take",
  "take_along_dim", "kron", "inner", "cross", "msort", "median", "kthvalue", "quantile", "logcumsumexp", "cummax",
  "cummin", "cov", "corrcoef", "tensordot", "bernoulli",
}

-- x, checked as argument 1 of fp8.<name>; a core method's "bad argument #n to '?'" (the method is called by a
-- computed name here, which Lua cannot name) named
local function first(name, x)
  if not core.is_tensor(x) then error(("%s: expected a tensor as argument 1, got %s"):format(name, got(x))) end
  check_live(name, "argument 1", x)
end
local function named(name, ok, ...)
  if ok then return ... end
  local e = ...
  if type(e) == "string" then
    e = e:gsub("^[^:\n]*%.lua:%d+: ", "")
    local n, detail = e:match("^bad argument #(%d+) to '[^']*' %((.*)%)$")
    if n then e = ("%s: bad argument #%s (%s)"):format(name, n, detail) end
  end
  error(e, 0)
end

local function form(name)
  return at_caller(function(x, ...)
    first(name, x)
    return named(name, pcall(x[name], x, ...))
  end)
end

-- torch.max(x) / torch.max(x, dim [, keepdim]) are x:max(...); torch.max(a, b) of two tensors is fp8.maximum(a, b)
local function extreme(name, pair)
  return at_caller(function(x, ...)
    first(name, x)
    if core.is_tensor((...)) then
      no_more(name, "(input, other) for two tensors", select(2, ...))
      return named(name, pcall(x[pair], x, (...)))
    end
    return named(name, pcall(x[name], x, ...))
  end)
end

-- _install(fp8): the function forms into the public table (fp8/init.lua's; a name it already has is a bug here:
-- it would be shadowed or shadow)
function M._install(fp8)
  assert(type(fp8) == "table", "torch_forms: _install takes the fp8 table")
  for _, name in ipairs(M.FORMS) do
    assert(fp8[name] == nil, "torch_forms: fp8." .. name .. " exists already")
    assert(Tensor[name], "torch_forms: no method " .. name)
    fp8[name] = form(name)
  end
  fp8.max, fp8.min = extreme("max", "maximum"), extreme("min", "minimum")
end

return M
