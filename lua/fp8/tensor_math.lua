-- tensor_math.lua — more of torch's pointwise ops and reductions, each said in terms of ops fp8 has, with torch's
-- values at the edges and torch's gradients: hypot, rad2deg, deg2rad, frac, sgn, heaviside, logaddexp2,
-- floor_divide, true_divide, copysign, signbit, float_power, sinc, nansum, nanmean, std_mean, var_mean, dist and
-- renorm. Methods (x:hypot(y)) with function forms (fp8.hypot(x, y), lua/fp8/torch_forms.lua). (No amin: amax here
-- is max |x|, the FP8 sense; min and max are torch's min and max.)
local core = require "fp8.core"
local T = require "fp8.tensor"
local opts = require "fp8.opts"
local Tensor = core.Tensor
local no_more, got = opts.no_more, opts.got
local self_of, operand = T._check_arith_self, T._check_operand
local at_caller = T._at_caller
local where = T.where

local PI = math.pi

-- |x|^p, with a zero gradient where x is 0 (for p < 1 the power's derivative there is infinite, and times abs's 0 it
-- was NaN: cdist and pairwise_distance of points sharing a coordinate). The select is on x ≠ 0, so a NaN stays NaN
-- (on x > 0 until 2026-12-05, |NaN|^p was 0). With norm_rule the zeros' gradient is 0 times the gradient reaching
-- them, torch's norm backward for p < 1 (sgn(x)·|x|^(p-1), masked to 0 where x is 0, times g·‖x‖^(1-p)): NaN where
-- the norm is NaN or inf (dist and F.normalize: 0 until stop 98, where torch 2.15 gives NaN; cdist keeps 0, torch's
-- cdist backward does). p < 0 (F.normalize alone): |0|^p is inf, as torch's sum has it, its gradient the same 0·g.
function T._abs_pow(x, p, norm_rule)
  local a = x:abs()
  if p >= 1 then return a ^ p end
  local nz = a:ne(0)
  local at0 = p < 0 and math.huge or 0
  if norm_rule then at0 = a * 0 + at0 end   -- (a is 0 there: the value at0, the gradient 0·g)
  return where(nz, where(nz, a, 1) ^ p, at0)
end

-- s^(1/p) of sums s >= 0, the root taken where s ≠ 0 only: a zero sum's root is 0, with a finite gradient (the
-- root's derivative at 0 is infinite: renorm's all-zero slice had NaN gradients). The p-norms' last step. A NaN sum's
-- root is NaN (the select was s > 0 until 2026-12-05: the distance of a point with a NaN coordinate came out 0 and
-- normalize divided by eps, as torch's never do).
function T._root(s, p)
  local nz = s:ne(0)
  local safe = where(nz, s, 1)
  return where(nz, p == 2 and safe:sqrt() or safe:pow(1 / p), 0)
end

-- torch's -inf norm: the smallest |x| over dim (nil: all; a dim or a list of them), NaN if any is NaN; where it is
-- inf (every element inf or NaN) the mean of the masked |x|, inf or NaN. Its gradient is torch 2.15's norm backward
-- for ±inf, sgn(x)·(g / count) on the elements whose |x| equals it (mask, count of them), sgn(x)·0 elsewhere: a slice
-- whose norm is NaN takes none, an element off the mask -0 where x < 0, +0 at ±0 and NaN (torch's sgn). The graph
-- of ops it was until stop 101 (m + Σ_mask(|x| − |x|) / count) gave those zeros as +0 (abs's backward and where's
-- fill) and split g among a NaN slice's NaNs: an fp8.autograd.Function (MinAbsNormBackward) gives the gradient, its
-- zeros selected, not multiplied (an inf or NaN g stays off the elements that did not take it, as the amax
-- backward's masked_grad). x:norm(-math.huge) and dist's.
local MIN_ABS
local function min_abs_value(x, dim)
  local ad = x:abs()
  local m = ad
  if dim == nil then
    m = ad:min()
    if x:dim() > 0 then m = m:reshape(ad:sum(nil, true):shape()) end
  else
    -- (the list read raw, as _dims_mask's: a table whose __index answers every key made ipairs run for ever, sweep
    -- 111; the sums below refuse such a table)
    local list = type(dim) == "table" and dim or { dim }
    for i = 1, rawlen(list) do m = m:min(rawget(list, i), true) end
  end
  local mask = ad:eq(m):logical_or(ad:isnan())
  local count = mask:to(ad:dtype()):sum(dim, true)
  return where(m:isfinite(), m, where(mask, ad, 0):sum(dim, true) / count), ad
end
function T._min_abs_norm(x, dim, keepdim)
  local shape = x:abs():sum(dim, keepdim):shape()
  if not x:requires_grad() then return (min_abs_value(x, dim)):reshape(shape) end
  MIN_ABS = MIN_ABS or require("fp8.autograd_function").Function {
    name = "MinAbsNorm",
    forward = function(ctx, xx, d)
      local n, ad = min_abs_value(xx, d)
      local mask = ad:eq(n)   -- (no NaN is equal: a NaN slice takes no gradient, torch's)
      ctx:save_for_backward(xx, mask, mask:to(ad:dtype()):sum(d, true))
      return n
    end,
    backward = function(ctx, g)
      local xx, mask, count = ctx.saved_tensors[1], ctx.saved_tensors[2], ctx.saved_tensors[3]
      local sgn = where(xx:isnan(), 0, xx:sign()) + 0   -- torch's sgn: +0 at ±0 and NaN
      local share = where(mask, g:reshape(count:shape()) / count, 0) + 0
      return sgn * share, nil
    end,
  }
  return MIN_ABS(x, dim):reshape(shape)
end

-- The dims of x that dim names (nil: all; a dim or a list of them, counted from 1, negative from the end) as the
-- bits of a mask, bit i - 1 for dim i: fl_norm_rescue's
function T._dims_mask(x, dim)
  local nd = x:dim()
  if nd == 0 then return 0 end
  if dim == nil then return (1 << nd) - 1 end
  -- (the list read raw: its callers check the dims first, but a table whose __index answers every key made ipairs
  -- run for ever, sweep 110)
  local list = type(dim) == "table" and dim or { dim }
  local m = 0
  for i = 1, rawlen(list) do
    local d = rawget(list, i)
    if math.type(d) ~= "integer" or d < -nd or d > nd or d == 0 then
      error(("_dims_mask: dim must be an integer in [%d, -1] or [1, %d], got %s"):format(-nd, nd, tostring(d)), 2)
    end
    if d < 0 then d = d + nd + 1 end
    m = m | (1 << (d - 1))
  end
  return m
end

-- ‖x‖_p as norm_of computes it, kept where the sum it is the root of stayed in its dtype's normal range, and otherwise
-- computed again from x scaled by a power of two. norm_of(v) returns the norm of v over the reduced dims (in v's
-- graph) and the sum of |v|^p it is the root of, both of the norm's shape; dim is the reduced dim, a list of them, or
-- nil for all; p the norm's order (finite, > 0). The core does it (core/ops.h's fl_norm_rescue; stop 98 for p <= 2
-- in fp32, stop 99 for every p and bf16/fp16), with no host read: in one pass over the sums it keeps r where s is in
-- [the smallest normal number of s's dtype, inf), and only a slice out of range (an overflowed sum, inf, or one that
-- fell below that number: [1e20, 1e20]'s Σx² is inf, [1e-30, 1e-30]'s 0, where the norms are 1.414e20 and 1.414e-30)
-- whose largest |x| is finite and not 0 has x read: its norm from x / 2^k in float64, rounded once to fp32 (and then
-- to r's dtype: an fp16 slice's ones(70000) at p = 2 is 264.5, torch 2.15's fp32 accumulation's, where fp16's own sum
-- overflows), its gradient the norm's derivative at x / 2^k in float64. The other slices keep norm_of's value bits
-- and its graph's gradient bits. norm_of takes x through x:_norm_gate(mask), which passes -0 instead of the plain
-- formula's gradient in the rescued slices: there the plain backward runs with g = 0, and for p > 2 |x|^(p-1)
-- overflows (0·inf, NaN), which the Lua rescue's host reads kept out until stop 99. For p = 2 that backward stays
-- finite and norm_of takes x itself: a gate would sum the two contributions of (x * x):sum (F.normalize's, cdist's)
-- before adding them to x's gradient, in another order than x's own (an ulp apart); every other p's norm_of reaches x
-- once, through abs. torch 2.15 keeps the
-- overflow (linalg.vector_norm([1e20, 1e20]) is inf, of [1e-30, 1e-30] 0, so its gradients there are 0) except for a
-- one-element reduction, which is |x|; a norm whose true value is finite in its dtype comes out finite here.
function T._norm_rescaled(x, dim, norm_of, p)
  if x:numel() == 0 then return (norm_of(x)) end   -- sums of nothing: 0, right
  local mask = T._dims_mask(x, dim)
  local xg = p ~= 2 and x:_norm_gate(mask) or x
  local r, s = norm_of(xg)
  return r:_norm_rescue(s, x, mask, p, xg)
end

-- A tensor of `shape` filled with v (x's dtype and device unless opts says), which stays in x's graph when x requires
-- grad: its gradient reaches x as zeros, as torch's does, where a constant made x's .grad stay nil and a backward of
-- it alone fail (an empty reduction's result: prod, logsumexp or median of nothing, an empty diagonal or take, a bag
-- of no ids; until 2026-12-05). The zero is a sum over nothing taken from x, so it is 0 whatever x holds.
function T._full_in_graph(x, shape, v, opts)
  opts = opts or { dtype = x:dtype(), device = x:device() }
  local r = core.full(shape, v, opts)
  if not x:requires_grad() then return r end
  local flat = x:reshape({ -1 })
  local zero = (flat:numel() == 0 and flat or flat:narrow(1, 1, 0)):sum()
  return r + zero:to(r:dtype())
end

-- y as a tensor beside t (a number becomes a full tensor of t's shape and dtype)
local function tensor_of(t, y)
  if type(y) == "number" then return core.full(t:shape(), y, { dtype = t:dtype(), device = t:device() }) end
  return y
end

-- hypot(other): √(x² + other²) without overflow or underflow in the squares, and its gradient (x/h, computed so
-- that it is right for every finite pair): core/ops.h's fl_hypot, one node (HypotBackward, as torch's). Until stop
-- 95 a graph of ops here, whose gradient was wrong with subnormal operands (-inf at (3e-40, 4e-40), NaN at (1e-45,
-- 1e-45)).
Tensor.hypot = at_caller(function(t, y, ...)
  no_more("hypot", "(other)", ...)
  self_of("hypot", t); operand("hypot", "other", y)
  return t:_hypot(tensor_of(t, y))
end)

Tensor.rad2deg = at_caller(function(t, ...)
  no_more("rad2deg", "no arguments", ...); self_of("rad2deg", t)
  return t * (180 / PI)
end)
Tensor.deg2rad = at_caller(function(t, ...)
  no_more("deg2rad", "no arguments", ...); self_of("deg2rad", t)
  return t * (PI / 180)
end)

-- frac(): x - trunc(x), the sign of x kept (torch's); its gradient 1
Tensor.frac = at_caller(function(t, ...)
  no_more("frac", "no arguments", ...); self_of("frac", t)
  return t - t:detach():trunc()
end)

-- sgn(): sign, for the real tensors here
Tensor.sgn = at_caller(function(t, ...)
  no_more("sgn", "no arguments", ...); self_of("sgn", t)
  return t:sign()
end)

-- heaviside(values): 0 where x < 0, values where x == 0, 1 where x > 0 (NaN: 0, as torch's comparison gives); no
-- gradient (torch has none)
Tensor.heaviside = at_caller(function(t, values, ...)
  no_more("heaviside", "(values)", ...)
  self_of("heaviside", t)
  operand("heaviside", "values", values)
  local x = t:detach()
  local v = core.is_tensor(values) and values:detach() or values
  return where(x:eq(0), v, x:gt(0):to(x:dtype()))
end)

-- logaddexp2(other): log₂(2^x + 2^other) without overflow: max + log₂(1 + 2^-|x − other|); the same infinity on both
-- sides gives it
Tensor.logaddexp2 = at_caller(function(t, y, ...)
  no_more("logaddexp2", "(other)", ...)
  self_of("logaddexp2", t); operand("logaddexp2", "other", y)
  return T._low_in_fp32(function(a, b)
    local m = a:maximum(b)
    local d = (a - b):abs()
    local same_inf = a:eq(b):logical_and(a:isinf())
    local r = m + (-d):exp2():log1p() / math.log(2)
    return where(same_inf, m, r)
  end, t, y)
end)

-- floor_divide(other): ⌊x / other⌋ as torch computes it from fmod, so a quotient that rounds up to an integer in
-- floating point does not round the floor up with it; x / 0 where other is 0; no gradient (torch has none)
Tensor.floor_divide = at_caller(function(t, y, ...)
  no_more("floor_divide", "(other)", ...)
  self_of("floor_divide", t); operand("floor_divide", "other", y, true)
  local a, b = t:detach(), tensor_of(t, core.is_tensor(y) and y:detach() or y)
  local mod = a:fmod(b)
  local div = (a - mod) / b
  local off = mod:ne(0):logical_and(b:lt(0):ne(mod:lt(0)))
  div = div - off:to(div:dtype())
  local fl = div:floor()
  fl = fl + (div - fl):gt(0.5):to(fl:dtype())
  -- a zero quotient takes the sign of the true one (torch's copysign(0, a / b))
  fl = where(fl:eq(0), (a / b):sign() * 0, fl)
  return where(b:eq(0), a / b, fl)
end)

-- x // y: floor_divide, as torch's // on tensors (Lua's generic "attempt to perform arithmetic" before); a number
-- on the left is refused as floor_divide's function form refuses it
core._metatable.__idiv = function(a, b)
  if not core.is_tensor(a) then
    error(("//: the left operand must be a tensor, got %s (fp8.full_like(x, n):floor_divide(x) divides a number by "
      .. "x)"):format(got(a)), 2)
  end
  local ok, r = pcall(Tensor.floor_divide, a, b)
  if not ok then error((tostring(r):gsub("^[^\n:]+:%d+: ", "")), 2) end
  return r
end

-- true_divide(other): div's other name
Tensor.true_divide = at_caller(function(t, y, ...)
  no_more("true_divide", "(other)", ...)
  self_of("true_divide", t); operand("true_divide", "other", y, true)
  return t / y
end)

-- signbit(): 1 where the sign bit is set (x < 0, and -0), else 0; no gradient
local function sign_bit(x) return x:lt(0):logical_or(x:eq(0):logical_and((1 / x):lt(0))) end
Tensor.signbit = at_caller(function(t, ...)
  no_more("signbit", "no arguments", ...); self_of("signbit", t)
  local x = t:detach()
  return sign_bit(x):to(x:dtype())
end)

-- copysign(other): |x| with other's sign (its sign bit: -0 counts as negative); the gradient for x is torch's
-- result/x, as ±sign(x) (0 where x is 0, ±1 at an infinite x, where torch's inf/inf is NaN); other takes none
Tensor.copysign = at_caller(function(t, y, ...)
  no_more("copysign", "(other)", ...)
  self_of("copysign", t); operand("copysign", "other", y, true)
  local b = tensor_of(t, core.is_tensor(y) and y:detach() or y)
  local neg = sign_bit(b)
  local mag = t:abs()
  -- the promoted dtype, as + and * give it (it kept self's: a bf16 x with an fp32 other stayed bf16)
  if core.is_tensor(y) and y:dtype() ~= t:dtype() then mag = mag:to("fp32") end
  return where(neg, -mag, mag)
end)

-- float_power(exponent): x^exponent in double (torch returns float64; here it is rounded once to fp32, which is
-- what pow already computes)
Tensor.float_power = at_caller(function(t, y, ...)
  no_more("float_power", "(exponent)", ...)
  self_of("float_power", t); operand("float_power", "exponent", y, true)
  local x = t:dtype() == "fp32" and t or t:float()
  if core.is_tensor(y) and y:dtype() ~= "fp32" then y = y:float() end
  return x ^ y
end)

-- sinc(): sin(πx)/(πx), 1 at 0. Near 0 (|πx| < 0.06) its Taylor polynomial 1 - u²/6 + u⁴/120 (u = πx), whose
-- gradient does not lose its digits to the cancellation the quotient's does there (and is 0 at 0, not 0/0)
Tensor.sinc = at_caller(function(t, ...)
  no_more("sinc", "no arguments", ...); self_of("sinc", t)
  return T._low_in_fp32(function(x)
    local small = (x:detach() * PI):abs():lt(0.06)
    local xs = where(small, 1, x) * PI
    local u = where(small, x, 0) * PI
    local u2 = u * u
    return where(small, 1 - u2 / 6 + u2 * u2 / 120, xs:sin() / xs)
  end, t)
end)

-- ---- reductions ----------------------------------------------------------------------------------------------------

local function check_keepdim(who, keepdim) T._check_keepdim(who, keepdim, 4) end

-- nansum([dim [, keepdim]]) / nanmean: the sum / mean of the elements that are not NaN (nanmean of none: NaN)
Tensor.nansum = at_caller(function(t, dim, keepdim, ...)
  no_more("nansum", "([dim [, keepdim]])", ...)
  self_of("nansum", t); check_keepdim("nansum", keepdim)
  local z = where(t:isnan(), 0, t)
  if dim == nil then return z:sum(nil, keepdim) end   -- (keepdim: every dim kept, of size 1, as sum's)
  return z:sum(dim, keepdim)
end)
Tensor.nanmean = at_caller(function(t, dim, keepdim, ...)
  no_more("nanmean", "([dim [, keepdim]])", ...)
  self_of("nanmean", t); check_keepdim("nanmean", keepdim)
  local ok = t:isnan():logical_not():to(t:dtype() == "fp32" and "fp32" or t:dtype())
  local z = where(t:isnan(), 0, t)
  if dim == nil then return z:sum(nil, keepdim) / ok:sum(nil, keepdim) end
  return z:sum(dim, keepdim) / ok:sum(dim, keepdim)
end)

-- std_mean / var_mean([dim] [, {correction=1, keepdim=false}]) -> std (var), mean: torch's pairs
Tensor.std_mean = at_caller(function(t, dim, o, ...)
  no_more("std_mean", "([dim] [, {correction=, keepdim=}])", ...)
  self_of("std_mean", t)
  local keep = type(o) == "table" and rawget(o, "keepdim") or nil
  local m = dim == nil and t:mean() or t:mean(dim, keep)
  return t:std(dim, o), m
end)
Tensor.var_mean = at_caller(function(t, dim, o, ...)
  no_more("var_mean", "([dim] [, {correction=, keepdim=}])", ...)
  self_of("var_mean", t)
  local keep = type(o) == "table" and rawget(o, "keepdim") or nil
  local m = dim == nil and t:mean() or t:mean(dim, keep)
  return t:var(dim, o), m
end)

-- dist(other [, p=2]): ‖x − other‖_p over every element, x:norm(p)'s for every p but NaN, as torch 2.15's dist
-- (until stop 98: p < 0 and -math.huge refused, p = 0's count without a gradient, torch's undefined, zeros here, and
-- a bf16/fp16 p other than 1, 2 and math.huge computed in the dtype's own arithmetic, where torch's sums in fp32 and
-- rounds once: bf16 p = 3 of gaps16_spec's operands 5.09375, torch's 5.0625)
Tensor.dist = at_caller(function(t, y, p, ...)
  no_more("dist", "(other [, p=2])", ...)
  self_of("dist", t); operand("dist", "other", y)
  p = p or 2
  if type(p) ~= "number" or p ~= p then
    error(("dist: p must be a number (math.huge and -math.huge included, NaN not), got %s"):format(got(p)), 2)
  end
  return (t - y):norm(p)
end)

-- renorm(p, dim, maxnorm): each slice along dim (the tensor at one index of dim) whose p-norm passes maxnorm
-- scaled to maxnorm / (norm + 1e-7) of itself, torch's; differentiable through the norm, as torch's; x of 2 or more
-- dims, as torch's
Tensor.renorm = at_caller(function(t, p, dim, maxnorm, ...)
  no_more("renorm", "(p, dim, maxnorm)", ...)
  self_of("renorm", t)
  if type(p) ~= "number" or not (p > 0) then error(("renorm: p must be a number > 0, got %s"):format(got(p)), 2) end
  if type(maxnorm) ~= "number" or not (maxnorm >= 0) then
    error(("renorm: maxnorm must be a number >= 0, got %s"):format(got(maxnorm)), 2)
  end
  -- (torch 2.15's renorm refuses fewer than 2 dims; until stop 99 a 1-d x was taken, each element its own slice, a
  -- clamp of |x| to maxnorm where torch raises)
  if t:dim() < 2 then
    error(("renorm: input needs at least 2 dims (torch's too), got %d-d %s"):format(t:dim(), t:shape_str()), 2)
  end
  local d = T._norm_dim("renorm", dim, t:dim(), 2)
  local others = {}
  for i = 1, t:dim() do if i ~= d then others[#others + 1] = i end end
  if p == math.huge then
    -- the inf norm of an empty slice has no value (torch's RuntimeError: the operation has no identity); it said
    -- 'amax: the reduced range of tensor [3, 0] is empty ...', an op the caller never called, until sweep 114
    for _, i in ipairs(others) do
      if t:size(i) == 0 then
        error(("renorm: the inf norm of an empty slice has no value (the operation has no identity; torch refuses it "
          .. "too), input %s"):format(t:shape_str()), 2)
      end
    end
  end
  local function norm_of(x)
    local a = x:abs()
    if p == math.huge then
      for _, i in ipairs(others) do a = a:amax(i, true) end
      return a
    end
    local dims = #others == 1 and others[1] or others
    return T._norm_rescaled(a, dims, function(v)   -- Σ|x|^p out of range: x scaled first
      local s = T._abs_pow(v, p):sum(dims, true)
      return T._root(s, p), s
    end, p)
  end
  -- A bf16/fp16 tensor's norms are taken in fp32 and the factor rounded to its dtype, as torch 2.15's renorm does
  -- (linalg_vector_norm with dtype=float, its accumulate type, then the factor in self's dtype): in the tensor's own
  -- dtype an fp16 slice whose norm passes 65504 ([60000, 60000], p = 3: 75595) was renormed to zeros, where torch's
  -- gives 0.7939, and a bf16 norm rounded twice (0.7969 for [1, 1], p = 3, torch's 0.7930; sweep 108).
  local dt = t:dtype()
  local half = dt == "bf16" or dt == "fp16"
  local x = half and t:float() or t
  -- the norm takes a gradient only in the slices it scales (torch's): the others enter it detached, so a slice whose
  -- norm is NaN or inf and stays unscaled passes g through (0 times the norm's NaN local derivatives made its whole
  -- gradient NaN until 2026-12-05)
  local plain = norm_of(x:detach())
  local big = plain:gt(maxnorm)
  local norm = t:requires_grad() and norm_of(where(big, x, x:detach())) or plain   -- the second pass for the graph only
  local scale = where(big, maxnorm / (norm + 1e-7), 1)
  if half then scale = scale:to(dt) end
  return t * scale
end)

return {}
