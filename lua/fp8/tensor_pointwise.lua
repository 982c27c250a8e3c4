-- tensor_pointwise.lua — torch's further elementwise methods, each made of differentiable ops with torch's values at
-- the edges (NaN, ±inf, 0): addcmul, addcdiv, clip (clamp's alias), relu, nan_to_num, logaddexp, xlogy, logit,
-- isclose, allclose, count_nonzero. Predicates give 1 and 0 in the input's dtype (there is no bool dtype), as
-- isnan does.
local core = require "fp8.core"
local T = require "fp8.tensor"
local opts = require "fp8.opts"
local Tensor = core.Tensor
local no_more, got = opts.no_more, opts.got
local check_self, check_not_fp8 = T._check_self, T._check_not_fp8
local at_caller = T._at_caller   -- every method below raises its errors at the user's line
local where = T.where

local self_of, operand = T._check_arith_self, T._check_operand

local function value_of(name, v)
  if type(v) == "table" and not core.is_tensor(v) then v = opts.check(name, v, { "value" }, 4).value end
  if v == nil then return 1 end
  if type(v) ~= "number" then error(("%s: value must be a number, got %s"):format(name, got(v))) end
  return v
end

-- addcmul(t1, t2 [, value=1]) (or {value=}): x + value·t1·t2; addcdiv: x + value·t1/t2 (torch's, broadcast)
Tensor.addcmul = at_caller(function(t, a, b, v, ...)
  no_more("addcmul", "(tensor1, tensor2 [, value])", ...)
  self_of("addcmul", t)
  operand("addcmul", "tensor1", a); operand("addcmul", "tensor2", b)
  v = value_of("addcmul", v)
  return T._low_in_fp32(function(x, a1, b1)
    local p = a1 * b1
    return x + (v == 1 and p or p * v)
  end, t, a, b)
end)
Tensor.addcdiv = at_caller(function(t, a, b, v, ...)
  no_more("addcdiv", "(tensor1, tensor2 [, value])", ...)
  self_of("addcdiv", t)
  operand("addcdiv", "tensor1", a); operand("addcdiv", "tensor2", b)
  v = value_of("addcdiv", v)
  return T._low_in_fp32(function(x, a1, b1)
    local q = a1 / b1
    return x + (v == 1 and q or q * v)
  end, t, a, b)
end)

-- clip: torch's alias of clamp; relu(): F.relu as a method, keeping a bf16/fp16 input's dtype in and out of autocast
-- as torch's and the other elementwise methods (F.relu's kernel gives fp32; max(x, 0) is exact in the input's dtype)
Tensor.clip = at_caller(function(t, ...)
  check_self("clip", t)
  return t:clamp(...)
end)
-- A bf16 tensor with no gradient to record: max(x, 0) on its bits in one pass (the core's relu_bf16, the same bits as
-- the fp32 kernel and the rounding; stop 102)
Tensor.relu = at_caller(function(t, ...)
  no_more("relu", "()", ...)
  self_of("relu", t)
  local F = require "fp8.nn.functional"
  if t:dtype() == "bf16" and not (t:requires_grad() and core.is_grad_enabled()) then return F._relu_bf16(t) end
  local r = F.relu(t)
  return T._round_to(r, T._low_dtype(t))
end)

local FINITE_MAX = { fp32 = opts.F32_MAX, bf16 = 3.3895313892515355e38, fp16 = 65504 }

-- nan_to_num([nan=0 [, posinf [, neginf]]]) (or {nan=, posinf=, neginf=}): NaN, +inf and -inf replaced (the
-- infinities by the dtype's largest and smallest finite values unless given); the gradient passes where x is finite
-- and is 0 at the replaced elements (torch's)
Tensor.nan_to_num = at_caller(function(t, nan, posinf, neginf, ...)
  no_more("nan_to_num", "([nan [, posinf [, neginf]]])", ...)
  local dt = check_self("nan_to_num", t)
  check_not_fp8("nan_to_num", dt)
  if type(nan) == "table" then
    if posinf ~= nil or neginf ~= nil then
      error("nan_to_num: give nan, posinf and neginf either in order or in one table")
    end
    local o = opts.check("nan_to_num", nan, { "nan", "posinf", "neginf" }, 3)
    nan, posinf, neginf = o.nan, o.posinf, o.neginf
  end
  for _, kv in ipairs { { "nan", nan or 0 }, { "posinf", posinf or 0 }, { "neginf", neginf or 0 } } do   -- (in order)
    if type(kv[2]) ~= "number" then error(("nan_to_num: %s must be a number, got %s"):format(kv[1], got(kv[2]))) end
  end
  local big = FINITE_MAX[dt]
  nan, posinf, neginf = nan or 0, posinf or big, neginf or -big
  local r = where(t:isnan(), nan, t)
  r = where(t:eq(math.huge), posinf, r)
  return where(t:eq(-math.huge), neginf, r)
end)

-- logaddexp(other): log(e^x + e^other) without overflow: max + log1p(e^-|x − other|); both -inf gives -inf, an inf
-- gives inf, as torch's
Tensor.logaddexp = at_caller(function(t, y, ...)
  no_more("logaddexp", "(other)", ...)
  self_of("logaddexp", t)
  operand("logaddexp", "other", y)
  return T._low_in_fp32(function(a, b)
    local m = a:maximum(b)
    local d = (a - b):abs()
    -- where both are the same infinity, d is NaN: the sum is that infinity (m)
    local same_inf = a:eq(b):logical_and(a:isinf())
    local r = m + (-d):exp():log1p()
    return where(same_inf, m, r)
  end, t, y)
end)

-- xlogy(other): x·log(other), 0 where x is 0 (unless other is NaN), torch's; other a tensor or a number. The gradient
-- is torch's: log(other) for x (0 where x is 0 and other <= 0), x/other for other, but 0 rather than torch's 0/0 NaN
-- where both are 0.
Tensor.xlogy = at_caller(function(t, y, ...)
  no_more("xlogy", "(other)", ...)
  self_of("xlogy", t)
  y = operand("xlogy", "other", y, true)
  if type(y) == "number" then y = core.full(t:shape(), y, { dtype = t:dtype(), device = t:device() }) end
  local zero_x = t:eq(0)
  -- where x is 0 and other <= 0 the log would be -inf or NaN and 0·it NaN: log(1) = 0 instead, the value torch gives
  local ysafe = T.where(zero_x:logical_and(y:le(0)), 1, y)
  -- (the log in fp32 when x is: an fp32 x beside a bf16 other took it in bf16)
  if t:dtype() == "fp32" and ysafe:dtype() ~= "fp32" then ysafe = ysafe:to("fp32") end
  local prod = T._low_in_fp32(function(a, b) return a * b:log() end, t, ysafe)
  -- 0·log(inf) is NaN: torch's value there is 0 too
  return T.where(zero_x:logical_and(y:eq(math.huge)), 0, prod)
end)

-- logit([eps]): log(x / (1 − x)), x first clamped to [eps, 1 − eps] when eps is given (the gradient 0 outside it,
-- torch's)
Tensor.logit = at_caller(function(t, eps, ...)
  no_more("logit", "([eps])", ...)
  self_of("logit", t)
  local x = t
  if eps ~= nil then
    if type(eps) ~= "number" or not (eps >= 0 and eps <= 0.5) then
      error(("logit: eps must be a number in [0, 0.5], got %s"):format(got(eps)))
    end
    -- torch's own backward passes the gradient on the bounds too (clamp's passes none there)
    x = T.where(t:ge(eps):logical_and(t:le(1 - eps)), t, t:detach():clamp(eps, 1 - eps))
  end
  -- log x − log(1 − x): torch's value within rounding, and its gradient 1/(x·(1 − x)) at 0 and 1 too (the quotient's
  -- chain rule would make 0·inf NaN there)
  return x:log() - (1 - x):log()
end)

-- isclose(other [, {rtol=1e-5, atol=1e-8, equal_nan=false}]): |x − other| <= atol + rtol·|other|, infinities equal
-- only to themselves, 1/0 in x's dtype; allclose: whether every element is close (a Lua boolean)
local function close_opts(name, o)
  o = opts.check(name, o, { "rtol", "atol", "equal_nan" }, 4)
  local rtol, atol = o.rtol or 1e-5, o.atol or 1e-8
  for _, kv in ipairs { { "rtol", rtol }, { "atol", atol } } do   -- (in order: one message for two faults)
    if type(kv[2]) ~= "number" or not (kv[2] >= 0) then
      error(("%s: %s must be a number >= 0, got %s"):format(name, kv[1], got(kv[2])))
    end
  end
  if o.equal_nan ~= nil and type(o.equal_nan) ~= "boolean" then
    error(("%s: equal_nan must be a boolean, got %s"):format(name, got(o.equal_nan)))
  end
  return rtol, atol, o.equal_nan == true
end
local function isclose(name, t, y, o)
  self_of(name, t)
  y = operand(name, "other", y, true)
  local rtol, atol, equal_nan = close_opts(name, o)
  local x, yy = t:detach(), type(y) == "number" and y or y:detach()
  local yabs = type(yy) == "number" and math.abs(yy) or yy:abs()
  -- (torch's: a finite difference within the tolerance; an infinite one, as against an infinity, is never close)
  local diff = (x - yy):abs()
  local close = diff:le(yabs * rtol + atol):logical_and(diff:isfinite())
  -- exact equality (infinities of one sign), and NaN with NaN when asked
  close = close:logical_or(x:eq(yy))
  if equal_nan then
    local ynan = type(yy) == "number" and (yy ~= yy and 1 or 0) or yy:isnan()
    close = close:logical_or(x:isnan():logical_and(ynan))
  end
  return close
end
Tensor.isclose = at_caller(function(t, y, o, ...)
  no_more("isclose", "(other [, {rtol=, atol=, equal_nan=}])", ...)
  return isclose("isclose", t, y, o)
end)
Tensor.allclose = at_caller(function(t, y, o, ...)
  no_more("allclose", "(other [, {rtol=, atol=, equal_nan=}])", ...)
  local c = isclose("allclose", t, y, o)
  return c:numel() == 0 or c:all():item() == 1
end)

-- count_nonzero([dim]): the number of nonzero elements (NaN counts), over everything or along dim (or a list of dims),
-- in x's dtype (fp32 counts are exact to 2^24)
Tensor.count_nonzero = at_caller(function(t, dim, ...)
  no_more("count_nonzero", "([dim])", ...)
  self_of("count_nonzero", t)
  local nz = t:detach():ne(0)
  if dim == nil then return nz:sum() end
  return nz:sum(dim)
end)

return true
