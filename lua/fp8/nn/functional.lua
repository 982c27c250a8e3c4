-- functional.lua — fp8.nn.functional (alias fp8.nn.F): the differentiable NN ops implemented in C
-- (lua/l_nn.c), re-exported with argument checks whose messages name the function and the problem.
local O = require "fp8.opts"
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local prof_op = require "fp8.prof_op"   -- (fp8._profiler: the C recorder; no recursion either)

local F = {}

-- The C table comes from the autograd binding; it is looked up on first use so this file loads
-- even in a build that lacks it (the error then says what is missing).
local C
local function core()
  if C then return C end
  local c = require "fp8.core"
  C = rawget(c, "nn") or rawget(c, "_nn") or package.loaded["fp8._nn"]
  if not C then
    local ok, m = pcall(require, "fp8._nn")
    if ok and type(m) == "table" then C = m end
  end
  if not C then error("fp8.nn.functional: this build has no C NN ops (lua/l_nn.c)", 3) end
  return C
end

local function shape_str(t)
  local s = t:shape()
  for i = 1, #s do s[i] = tostring(s[i]) end
  return "[" .. table.concat(s, ", ") .. "]"
end

-- a live tensor (one C call, as is_tensor was): a released one failed in the first method the check called after it
-- (cross_entropy's and layer_norm's dim(): "functional.lua:157: calling 'dim' on bad self")
local live_dtype = fp8._live_dtype
local function check_tensor(fname, what, v)
  local dt = live_dtype(v)
  if dt == nil then error(("%s: %s must be a tensor, got %s"):format(fname, what, type(v)), 3) end
  if not dt then error(("%s: %s has been released (freed or closed)"):format(fname, what), 3) end
end

-- A call with more arguments than the function takes (torch's inplace=, padding_idx=, a dtype) would drop them
-- silently: refused, naming what the function takes.
local no_more = O.no_more
local function low_in_fp32(...) return require("fp8.tensor")._low_in_fp32(...) end   -- (fp8.tensor's, at call time)

-- Its arguments, the bf16 and fp16 tensors among them cast to fp32 (a differentiable cast) where the autocast dtype is
-- not fp32: torch's CPU autocast puts its losses on the fp32 list, so under autocast they compute in fp32 and return
-- fp32 (torch 2.15, bf16 and fp16 alike: all of them but gaussian_nll_loss and multilabel_soft_margin_loss, written
-- in Python of ops it leaves alone). Outside autocast each keeps its inputs' dtype, as torch's.
local function autocast_fp32(...) return require("fp8.tensor")._autocast_fp32(...) end   -- (at call time)

local function check_opts(fname, opts, valid)
  local o = O.check(fname, opts, valid, 3)   -- not a tail call: level 3 counts this frame
  return o
end

-- The results of pcall(core op): its values, or its error raised at the caller of the F function that called it
-- (level 3), without the position inside this file the core's message carried (an index out of range is the
-- caller's, not functional.lua's; none when that caller is fp8lab's own code). A non-string error passes as it is.
-- Call it as `return (at_caller(pcall(...)))`: the parentheses keep it from being a tail call, which would take the
-- F function's frame off the stack, so that level 3 named the caller's caller (or nothing at all).
local function at_caller(ok, ...)
  if ok then return ... end
  local err = ...
  if type(err) ~= "string" then error(err, 0) end
  err = err:gsub("^[^:\n]*functional%.lua:%d+: ", "")
  -- called from fp8lab's own code (a layer's forward): no position (the layer's name comes before the message)
  local src = (debug.getinfo(3, "S") or {}).source or ""
  error(err, src ~= "=[C]" and require("fp8.errfmt").is_own_source(src) and 0 or 3)
end

-- linear(x[..., in], w[out, in] [, b[out]]) → x·wᵀ + b
function F.linear(x, w, b, ...)
  no_more("linear", "(input, weight [, bias])", ...)
  check_tensor("linear", "input", x); check_tensor("linear", "weight", w)
  if w:dim() ~= 2 then error(("linear: weight must be 2-D [out, in], got %s"):format(shape_str(w)), 2) end
  if x:dim() < 1 or x:size(-1) ~= w:size(2) then
    error(("linear: expected input [..., %d], got %s"):format(w:size(2), shape_str(x)), 2)
  end
  if b ~= nil then
    check_tensor("linear", "bias", b)
    if b:dim() ~= 1 or b:size(1) ~= w:size(1) then
      error(("linear: bias must be [%d], got %s"):format(w:size(1), shape_str(b)), 2)
    end
  end
  return (at_caller(pcall(core().linear, x, w, b)))
end

function F.relu(x, ...)
  no_more("relu", "(input) (no inplace)", ...)
  check_tensor("relu", "input", x); return (at_caller(pcall(core().relu, x)))
end

-- gelu(x [, approximate "none"|"tanh"]) (also {approximate=...})
function F.gelu(x, approximate, ...)
  no_more("gelu", "(input [, approximate])", ...)
  check_tensor("gelu", "input", x)
  if type(approximate) == "table" then approximate = check_opts("gelu", approximate, { approximate = true }).approximate end
  if approximate == nil then approximate = "none" end   -- (false is refused below, as torch's)
  if approximate ~= "none" and approximate ~= "tanh" then
    error(("gelu: approximate must be \"none\" or \"tanh\", got %s"):format(tostring(approximate)), 2)
  end
  return (at_caller(pcall(core().gelu, x, approximate)))
end

-- silu(x) = x·sigmoid(x) (torch's SiLU, the Swish of SwiGLU MLPs): one fp32 kernel and one node (the core's silu;
-- a bf16/fp16 input computed in fp32 and rounded once, keeping its dtype, as torch's); sigmoid and tanh as
-- torch.nn.functional's.
-- _linear_relu_bf16(x, w [, b]) → relu(linear(x, w, b)) rounded once to bf16 (internal): under a bf16 autocast with
-- nothing requiring grad, in one pass over the GEMM's fp32 sums where the device can (the composite's bits); the
-- feed-forward block's first half that TransformerEncoderLayer hands its second linear, which rounds to bf16 anyway
function F._linear_relu_bf16(x, w, b)
  return (at_caller(pcall(core().linear_relu_bf16, x, w, b)))
end
-- _relu_bf16(x) → relu of a bf16 x with no gradient to record, in bf16 on its bits (internal: x:relu()'s form then)
function F._relu_bf16(x)
  return (at_caller(pcall(core().relu_bf16, x)))
end

-- _add_layer_norm(x, r, w, b, eps) → layer_norm(x + r, w, b, eps) recording nothing (internal): the sum never in memory
-- where the device can (x, r fp32 of one shape), the bits of the add then the norm; a residual block's norm in inference
function F._add_layer_norm(x, r, w, b, eps)
  return (at_caller(pcall(core()._add_layer_norm, x, r, w, b, eps)))
end

function F.silu(x, ...)
  no_more("silu", "(input) (no inplace)", ...)
  check_tensor("silu", "input", x)
  -- a bf16 input with no gradient to record: read and rounded in one pass, the bits of the fp32 round trip below
  if x:dtype() == "bf16" and not (x:requires_grad() and fp8.is_grad_enabled()) then
    return (at_caller(pcall(core().silu_bf16, x)))
  end
  return low_in_fp32(function(v) return (at_caller(pcall(core().silu, v))) end, x)
end
function F.sigmoid(x, ...)
  no_more("sigmoid", "(input)", ...)
  check_tensor("sigmoid", "input", x)
  return x:sigmoid()
end
function F.tanh(x, ...)
  no_more("tanh", "(input)", ...)
  check_tensor("tanh", "input", x)
  return x:tanh()
end

-- leaky_relu(x [, negative_slope=0.01]), elu(x [, alpha=1]), softplus(x [, beta=1 [, threshold=20]]): torch's, built
-- of selections (fp8.where) so each side's gradient is its own and the side not taken passes none (elu's exp and
-- softplus's are taken of a clamped argument, so they never overflow there; expm1 and log1p, as torch's, so that
-- the tails keep their digits). At 0 the gradients are torch's: slope,
-- alpha, and sigmoid(0)·... as softplus's formula gives.
local function check_number(fname, what, v, default)
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or math.abs(v) == math.huge then
    error(("%s: %s must be a finite number, got %s"):format(fname, what, O.got(v)), 3)
  end
  return v
end
local function where(...) return require("fp8.tensor").where(...) end
-- expm1(u) whose gradient is e^u of u, as torch's ELU takes it (expm1's own, e^u = y + 1 from its output, is 0 where y
-- rounds to -1: elu's at -20 was 0 for torch's 2.1e-9). The second term is 0 (its sign kept: -0.0 - 0 = -0.0).
local function expm1_exp(u)
  local e = u:exp()
  return u:expm1():detach() - (e:detach() - e)
end
function F.leaky_relu(x, slope, ...)
  no_more("leaky_relu", "(input [, negative_slope]) (no inplace)", ...)
  check_tensor("leaky_relu", "input", x)
  slope = check_number("leaky_relu", "negative_slope", slope, 0.01)
  return where(x:gt(0), x, x * slope)
end
function F.elu(x, alpha, ...)
  no_more("elu", "(input [, alpha]) (no inplace)", ...)
  check_tensor("elu", "input", x)
  alpha = check_number("elu", "alpha", alpha, 1.0)
  -- (the exp's argument bounded for the branch not taken; at 1, not 0, so that x = 0 keeps its gradient: clamp's
  -- passes none at a bound)
  return where(x:le(0), expm1_exp(x:clamp_max(1)) * alpha, x)   -- (NaN takes x's side, its gradient 1: torch's)
end
local softplus
function F.softplus(x, beta, threshold, ...)
  no_more("softplus", "(input [, beta [, threshold]])", ...)
  check_tensor("softplus", "input", x)
  beta = check_number("softplus", "beta", beta, 1.0)
  threshold = check_number("softplus", "threshold", threshold, 20.0)
  if beta == 0 then error("softplus: beta must be nonzero (it divides)", 2) end
  return low_in_fp32(function(v) return softplus(v, beta, threshold) end, x)
end
softplus = function(x, beta, threshold)
  local bx = x * beta
  -- above the threshold torch returns x itself (linear); below, log1p(e^(βx)) / β, e^ of the clamped βx (log of
  -- 1 + e^(βx) rounded 1 + e^-17 to 1: softplus(-17) was 0, logsigmoid(17) and mish(-17) too)
  -- (the exponential's argument is 0 where the linear piece is taken, not clamped: a NaN keeps its NaN gradient, as
  -- torch's)
  local linear = bx:gt(threshold)
  return where(linear, x, where(linear, 0, bx):exp():log1p() / beta)
end

-- hardtanh(x [, min=-1 [, max=1]]), relu6(x) (hardtanh over [0, 6], torch's), hardsigmoid(x), hardswish(x),
-- mish(x), selu(x), celu(x [, alpha=1]), logsigmoid(x): torch's, built of selections so that the gradient at a
-- kink is torch's: the middle pieces of hardtanh, hardsigmoid and hardswish pass it only strictly inside their
-- bounds (hardswish's gradient is 0 at -3 and 1 at 3), and a NaN passes it as torch's (hardtanh's and hardswish's
-- tests are for the outer pieces; the middle of hardswish takes 0 outside (-3, 3), so ±inf get 0 and 1). mish is
-- x·tanh(softplus(x)) (softplus's threshold keeps large x finite, and its gradient), logsigmoid -softplus(-x).
local function kinked(x, lo, hi, inside)   -- x:clamp(lo, hi) at and beyond lo and hi, inside(x) elsewhere (NaN too)
  return where(x:le(lo):logical_or(x:ge(hi)), x:detach():clamp(lo, hi), inside(x))
end
function F.hardtanh(x, lo, hi, ...)
  no_more("hardtanh", "(input [, min_val [, max_val]]) (no inplace)", ...)
  check_tensor("hardtanh", "input", x)
  lo, hi = check_number("hardtanh", "min_val", lo, -1.0), check_number("hardtanh", "max_val", hi, 1.0)
  if lo > hi then error(("hardtanh: min_val %s is above max_val %s"):format(O.got(lo), O.got(hi)), 2) end
  return kinked(x, lo, hi, function(v) return v end)
end
function F.relu6(x, ...)
  no_more("relu6", "(input) (no inplace)", ...)
  check_tensor("relu6", "input", x)
  return kinked(x, 0, 6, function(v) return v end)
end
function F.hardsigmoid(x, ...)
  no_more("hardsigmoid", "(input) (no inplace)", ...)
  check_tensor("hardsigmoid", "input", x)
  -- torch's (x + 3) / 6: x / 6 + 0.5 cancelled near -3
  return low_in_fp32(function(v)
    return where(v:gt(-3):logical_and(v:lt(3)), (v + 3) / 6, (v:detach():clamp(-3, 3) + 3) / 6)
  end, x)
end
function F.hardswish(x, ...)
  no_more("hardswish", "(input) (no inplace)", ...)
  check_tensor("hardswish", "input", x)
  local mid = where(x:gt(-3):logical_and(x:lt(3)), x, 0)
  return where(x:le(-3), 0, where(x:lt(3), mid * (mid + 3) / 6, x))
end
function F.mish(x, ...)
  no_more("mish", "(input) (no inplace)", ...)
  check_tensor("mish", "input", x)
  return low_in_fp32(function(v) return v * F.softplus(v):tanh() end, x)
end
local SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
function F.selu(x, ...)
  no_more("selu", "(input) (no inplace)", ...)
  check_tensor("selu", "input", x)
  return F.elu(x, SELU_ALPHA) * SELU_SCALE
end
function F.celu(x, alpha, ...)
  no_more("celu", "(input [, alpha]) (no inplace)", ...)
  check_tensor("celu", "input", x)
  alpha = check_number("celu", "alpha", alpha, 1.0)
  if alpha == 0 then error("celu: alpha must be nonzero (it divides)", 2) end
  return where(x:le(0), expm1_exp(x:clamp_max(math.abs(alpha)) / alpha) * alpha, x)
end
function F.logsigmoid(x, ...)
  no_more("logsigmoid", "(input)", ...)
  check_tensor("logsigmoid", "input", x)
  return -F.softplus(-x)
end

-- softsign(x) = x / (1 + |x|), tanhshrink(x) = x − tanh(x), threshold(x, threshold, value): value where
-- x <= threshold (no gradient there), x elsewhere (NaN included), prelu(x, weight): x where x > 0, weight·x
-- elsewhere, weight of one element or one per channel (dim 2, torch's dim 1; a 1-d x's only dim); torch's, made of
-- differentiable ops
function F.softsign(x, ...)
  no_more("softsign", "(input)", ...)
  check_tensor("softsign", "input", x)
  return x / (x:abs() + 1)
end
function F.tanhshrink(x, ...)
  no_more("tanhshrink", "(input)", ...)
  check_tensor("tanhshrink", "input", x)
  return x - x:tanh()
end
-- hardshrink(x [, lambd=0.5]): x where |x| > lambd, 0 elsewhere; softshrink(x [, lambd=0.5]): x ∓ lambd beyond ±lambd,
-- 0 within. torch's: |x| = lambd counts as within (value and gradient 0 there); lambd >= 0 (softshrink's, torch's
-- check; hardshrink takes any number, as torch's)
function F.hardshrink(x, lambd, ...)
  no_more("hardshrink", "(input [, lambd])", ...)
  check_tensor("hardshrink", "input", x)
  lambd = check_number("hardshrink", "lambd", lambd, 0.5)
  return where(x:ge(-lambd):logical_and(x:le(lambd)), 0, x)
end
function F.softshrink(x, lambd, ...)
  no_more("softshrink", "(input [, lambd])", ...)
  check_tensor("softshrink", "input", x)
  lambd = check_number("softshrink", "lambd", lambd, 0.5)
  if lambd < 0 then error(("softshrink: lambd must be >= 0, got %g"):format(lambd), 2) end
  -- (torch's: x·0 within, so -0.0 for a negative x; a NaN is outside, NaN with its gradient)
  return where(x:ge(-lambd):logical_and(x:le(lambd)), x:detach() * 0, where(x:gt(lambd), x - lambd, x + lambd))
end
function F.threshold(x, threshold, value, ...)
  no_more("threshold", "(input, threshold, value) (no inplace)", ...)
  check_tensor("threshold", "input", x)
  if threshold == nil or value == nil then
    error("threshold: takes (input, threshold, value): both numbers are needed", 2)
  end
  threshold, value = check_number("threshold", "threshold", threshold), check_number("threshold", "value", value)
  return where(x:le(threshold), value, x)   -- (torch's test: NaN is not <= threshold, so it stays NaN)
end
function F.prelu(x, w, ...)
  no_more("prelu", "(input, weight)", ...)
  check_tensor("prelu", "input", x); check_tensor("prelu", "weight", w)
  if w:dim() > 1 then error(("prelu: weight must be 1-d (or 0-d), got %s"):format(shape_str(w)), 2) end
  local n = w:numel()
  if n ~= 1 then
    local c = x:dim() >= 2 and x:size(2) or x:dim() == 1 and x:size(1) or nil
    if c ~= n then
      error(("prelu: weight has %d elements, the input %s has %s channels (dim %d): give 1 or %s"):format(n,
        shape_str(x), c and tostring(c) or "no", x:dim() >= 2 and 2 or 1, c and tostring(c) or "1"), 2)
    end
    if x:dim() >= 2 then   -- one per channel, broadcast over the rest
      local view = {}
      for i = 1, x:dim() do view[i] = i == 2 and n or 1 end
      w = w:reshape(view)
    end
  else
    w = w:reshape({})
  end
  -- w multiplies x only where x <= 0 (or NaN), as torch's kernel: on where(pos, x, x·w) the positive elements' zero
  -- gradient through x·w came back as 0·w and 0·x, so a NaN weight made every input gradient NaN and an infinite
  -- input the weight's (until 2026-12-05)
  local pos = x:gt(0)
  return where(pos, x, where(pos, 0, x) * w)
end

local function check_dim(fname, x, dim)
  if math.type(dim) ~= "integer" then error(("%s: dim must be an integer, got %s"):format(fname, O.got(dim)), 3) end
  local n = math.max(x:dim(), 1)   -- a 0-d tensor's one implicit dim is 1 (or -1), as torch's 0 (or -1)
  if dim == 0 or dim > n or dim < -n then
    error(("%s: dim %d out of range for a %d-d tensor (valid: 1..%d or -%d..-1)"):format(fname, dim, x:dim(), n, n), 3)
  end
end

-- softmax's dim when none is given: torch's implicit choice (deprecated there, with a warning) is dim 1 of a 0-, 1- or
-- 3-d input and dim 2 otherwise (1-based); the last dim is that choice up to 2-d and is taken there. Past 2-d the two
-- differ, so a missing dim is refused rather than read another way than torch reads it (until 2026-12-06 the last
-- dim was taken for every rank: a 3-d or 4-d input gave other values than torch's).
local function implicit_dim(fname, x, dim)
  if dim ~= nil then return dim end
  if x:dim() <= 2 then return -1 end
  error(("%s: give dim for a %d-d input (torch's implicit choice, deprecated, would take dim %d, not the last)")
    :format(fname, x:dim(), x:dim() == 3 and 1 or 2), 3)
end

function F.softmax(x, dim, ...)
  no_more("softmax", "(input [, dim]) (no dtype)", ...)
  check_tensor("softmax", "input", x); dim = implicit_dim("softmax", x, dim); check_dim("softmax", x, dim)
  if x:dim() == 0 then return (at_caller(pcall(core().softmax, x:reshape{1}, 1))):reshape{} end
  return (at_caller(pcall(core().softmax, x, dim)))
end

function F.log_softmax(x, dim, ...)
  no_more("log_softmax", "(input [, dim]) (no dtype)", ...)
  check_tensor("log_softmax", "input", x); dim = implicit_dim("log_softmax", x, dim); check_dim("log_softmax", x, dim)
  if x:dim() == 0 then return (at_caller(pcall(core().log_softmax, x:reshape{1}, 1))):reshape{} end
  return (at_caller(pcall(core().log_softmax, x, dim)))
end

-- The losses of reduction "none" (per row) and "sum": −(1 − ε)·log_softmax(x)[i, t] − (ε/C)·Σ_j log_softmax(x)[i, j]
-- (ε the label smoothing), 0 where the target is ignore_index: torch's per-row loss. The target's term is selected
-- (fp8.where), not multiplied by a one-hot row: a −inf logit elsewhere in the row (a masked class) would make
-- −inf · 0 a NaN. (The mean, the common case, is the core's fused op.)
-- torch's reduction of a loss: "mean" when not given, "sum" or "none" (with batch, kl_div's, "batchmean" too);
-- anything else, false included, is refused (as the loss modules refuse it when made). level: as error's.
local function reduction_of(fname, red, batch, level)
  if red == nil then return "mean" end
  if red == "mean" or red == "sum" or red == "none" or (batch and red == "batchmean") then return red end
  error(("%s: reduction must be %s, got %s"):format(fname, batch and '"mean", "batchmean", "sum" or "none"'
    or '"mean", "sum" or "none"', O.got(red)), level + 1)
end

-- A weight (or target) that torch's loss takes no gradient for: refused where gradients are on and it requires grad,
-- as torch 2.15 refuses it ("the function 'nll_loss_forward' is not differentiable with respect to argument
-- 'weight'"); its gradient was dropped (its .grad stayed nil) or, where made of tensor ops, taken. level: as error's.
local function refuse_grad(fname, what, v, level)
  if fp8.is_tensor(v) and v:requires_grad() and fp8.is_grad_enabled() then
    error(("%s: %s requires grad, but the loss is not differentiable with respect to it (torch refuses it too): "
      .. "pass %s:detach()"):format(fname, what, what), level + 1)
  end
end

-- torch's weight= of cross_entropy and nll_loss: nil, or a 1-D float tensor of C class weights; returns it as fp32 on
-- dev and its values as a list. Not differentiated, as torch's (one that requires grad is refused), except with
-- class probabilities (probs), where torch's weight is a factor of the loss like any other, and so is it here.
local function class_weights(fname, w, C, dev, probs)
  if w == nil then return nil end
  if not fp8.is_tensor(w) or w:dim() ~= 1 or w:size(1) ~= C or not (w:dtype() == "fp32" or w:dtype() == "bf16"
      or w:dtype() == "fp16") then
    error(("%s: weight must be a float tensor of %d class weights (one per class), got %s"):format(fname, C,
      fp8.is_tensor(w) and (w:dtype() .. " " .. shape_str(w)) or O.got(w)), 3)
  end
  if probs then return w:to("fp32"):to(dev) end
  refuse_grad(fname, "weight", w, 3)
  local wd = w:detach():to("fp32"):to(dev)
  return wd, wd:to("cpu"):tolist()
end

-- torch's ignore_index of class-id targets: -100 when not given, else an integer (a whole float too); anything else,
-- false included, is refused. level: as error's.
local function ignore_index_of(fname, ii, level)
  if ii == nil then return -100 end
  if type(ii) ~= "number" or math.tointeger(ii) == nil then
    error(("%s: ignore_index must be an integer, got %s"):format(fname, O.got(ii)), level + 1)
  end
  return ii
end

-- The rows of class-id targets[N] over C classes: hit, each row's one-hot list (all 0 where the row is ignore_index);
-- keep, 1 or 0 per row (ignored); hw, with class weights wv only, each row's target weight in its place; and the kept
-- rows' total weight (their count without weights). A target out of range or fractional is refused in the words of
-- the core's cross_entropy (its mean), blaming level (as error's, from target_rows's caller).
local function target_rows(fname, targets, C, ii, wv, level)
  local tg = targets:tolist()
  local hit, keep, hw, total = {}, {}, wv and {} or nil, 0
  for i = 1, #tg do
    local t, r = tg[i], {}
    for j = 1, C do r[j] = 0 end
    local rw = hw and {}
    if rw then for j = 1, C do rw[j] = 0 end end
    if t ~= ii then
      if not (t >= 0 and t < C) then
        error(("%s: target %g at row %d is out of range [0, %d)"):format(fname, t, i - 1, C), level + 1)
      elseif t ~= math.floor(t) then
        error(("%s: target %g at row %d is not a whole number (class indices are integers)"):format(fname, t,
          i - 1), level + 1)
      end
      local k = math.tointeger(t) + 1
      r[k] = 1
      if rw then rw[k] = wv[k] end
      total = total + (wv and wv[k] or 1)
    end
    hit[i], keep[i] = r, t ~= ii and 1 or 0
    if hw then hw[i] = rw end
  end
  return hit, keep, hw, total
end

-- The per-row losses of class-id targets: -w[t]·log_softmax(x)[t], mixed with the smoothing term
-- -Σ_c w[c]·log_softmax(x)[c] / C by label_smoothing, 0 on ignored rows; and the sum of the rows' w[t] (the mean's
-- divisor, torch's: the kept rows' count without weights). wv: the class weights' values, or nil.
local function ce_rows(logits, targets, ls, ii, w, wv)
  local N, C = logits:size(1), logits:size(2)
  -- no rows: an empty loss of the graph (fp8.tensor({}) below would be [0], not [0, C])
  if N == 0 then return F.log_softmax(logits, -1):sum(2), 0 end
  local hit, keep, hw, total = target_rows("cross_entropy", targets, C, ii, wv, 3)   -- (3: cross_entropy's caller)
  local dev = logits:device()
  local lp = F.log_softmax(logits, -1)
  local where = require("fp8.tensor").where
  local sel = where(fp8.tensor(hit):to(dev), lp, 0)
  local per = (w and (sel * fp8.tensor(hw):to(dev)) or sel):sum(2) * (ls - 1)
  if ls > 0 then
    per = per - where(fp8.tensor(keep):to(dev), (w and lp * w or lp):sum(2), 0) * (ls / C)
  end
  return per + 0, total   -- an ignored row's −0 becomes +0, as torch prints it
end

-- torch's other input shapes of cross_entropy and nll_loss, as rows: x [C] (one unbatched sample; target a 0-d class
-- id, or [C] probabilities where probs is allowed) and x [N, C, d1, ..., dk] (target [N, d1, ..., dk], or probabilities
-- of x's shape): the classes moved last and the rest flattened into rows; returns the rows, the targets as rows and
-- the shape a reduction "none" result takes back (nil: x is already [N, C]). what: x's name in the messages.
local function class_rows(fname, what, x, t, probs)
  local nd = x:dim()
  if nd == 2 then return nil end
  if nd == 0 then error(("%s: %s must be [N, C], [C] or [N, C, d1, ...], got a 0-d tensor"):format(fname, what), 4) end
  local C = x:size(nd == 1 and 1 or 2)
  if nd == 1 then
    if t:dim() == 0 then return x:unsqueeze(1), t:reshape { 1 }, {} end
    if probs and shape_str(t) == shape_str(x) then return x:unsqueeze(1), t:unsqueeze(1), {} end
    error(("%s: an unbatched %s %s takes a 0-d class id%s as its target, got %s"):format(fname, what, shape_str(x),
      probs and (" or " .. shape_str(x) .. " class probabilities") or "", shape_str(t)), 4)
  end
  local rest = { x:size(1) }
  for d = 3, nd do rest[#rest + 1] = x:size(d) end
  local rows = x:movedim(2, -1):reshape { -1, C }
  if probs and shape_str(t) == shape_str(x) then return rows, t:movedim(2, -1):reshape { -1, C }, rest end
  if shape_str(t) ~= "[" .. table.concat(rest, ", ") .. "]" then
    error(("%s: %s %s takes a target [%s] (class ids)%s, got %s"):format(fname, what, shape_str(x),
      table.concat(rest, ", "), probs and (" or " .. shape_str(x) .. " (class probabilities)") or "", shape_str(t)), 4)
  end
  return rows, t:reshape { -1 }, rest
end

-- cross_entropy(logits[N, C], targets[N] (0-based class ids as numbers) or [N, C] (class probabilities)
-- [, {weight, label_smoothing, ignore_index, reduction="mean"|"sum"|"none"}]); weight: C class weights, torch's (the
-- mean of class ids divides by the kept rows' weights; of probabilities, by N). Also torch's [C] and
-- [N, C, d1, ..., dk] (class_rows).
function F.cross_entropy(logits, targets, opts, ...)
  no_more("cross_entropy", "(logits, targets [, {weight=, label_smoothing=, ignore_index=, reduction=}])", ...)
  check_tensor("cross_entropy", "logits", logits); check_tensor("cross_entropy", "targets", targets)
  opts = check_opts("cross_entropy", opts, { weight = true, label_smoothing = true, ignore_index = true,
    reduction = true })
  local red = reduction_of("cross_entropy", opts.reduction, nil, 2)
  local ii = ignore_index_of("cross_entropy", opts.ignore_index, 2)
  local rows, trows, back = class_rows("cross_entropy", "logits", logits, targets, true)
  if rows then
    local r = at_caller(pcall(F.cross_entropy, rows, trows, opts))
    return red == "none" and r:reshape(back) or r
  end
  local probs = targets:dim() == 2 and shape_str(targets) == shape_str(logits)
  if not probs and (targets:dim() ~= 1 or targets:size(1) ~= logits:size(1)) then
    error(("cross_entropy: targets must be [%d] (class ids) or %s (class probabilities) to match logits %s, got %s")
      :format(logits:size(1), shape_str(logits), shape_str(logits), shape_str(targets)), 2)
  end
  if logits:size(2) == 0 then error(("cross_entropy: logits %s have no classes"):format(shape_str(logits)), 2) end
  local w, wv = class_weights("cross_entropy", opts.weight, logits:size(2), logits:device(), probs)
  local ls = opts.label_smoothing
  if ls == nil then ls = 0 end   -- (false is refused below, not taken as 0)
  if type(ls) ~= "number" or not (ls >= 0 and ls <= 1) then   -- `not (...)` also refuses NaN
    error(("cross_entropy: label_smoothing must be a number in [0, 1], got %s"):format(O.got(ls)), 2)
  end
  if probs then
    -- class probabilities (torch's second form): −Σ_j t'[i, j]·log_softmax(x)[i, j], t' = (1 − ε)·t + ε/C; the mean
    -- divides by N. Differentiable in the targets and the weight too, as torch's. torch applies no ignore_index to
    -- this form and refuses one >= 0 (a class it would skip); a negative one, the default -100 among them, matches no
    -- class: taken, as torch takes it.
    if ii >= 0 then
      error(("cross_entropy: ignore_index applies to class-id targets, not to class probabilities, got %d (torch's: "
        .. "ignore_index is not supported for floating point target; a negative one, as the default -100, is taken)")
        :format(ii), 2)
    end
    local t = targets:to("fp32")
    if ls > 0 then t = t * (1 - ls) + ls / logits:size(2) end
    if w then t = t * w end
    local per = -((F.log_softmax(logits:to("fp32"), -1) * t):sum(2))
    if red == "none" then return per end
    return red == "sum" and per:sum() or per:sum() / logits:size(1)
  end
  if red == "mean" and not w then
    local o = opts
    if o.reduction ~= nil then   -- the core's option table takes no reduction: a copy without it
      o = {}
      for k, v in next, opts do if k ~= "reduction" then o[k] = v end end
    end
    return (at_caller(pcall(core().cross_entropy, logits, targets, o)))
  end
  if targets:requires_grad() then   -- as the mean's core op refuses it (torch's class ids are integers)
    error("cross_entropy: target holds class indices and cannot require grad", 2)
  end
  local per, total = ce_rows(logits, targets, ls, ii, w, wv)
  if red == "mean" then return per:sum() / total end   -- (all rows ignored: 0 / 0, NaN, as torch's)
  return red == "none" and per or per:sum()
end

-- An elementwise loss's input and target: one shape (checked after both are known to be tensors).
local function same_shape(fname, a, b)
  if shape_str(a) ~= shape_str(b) then
    error(("%s: input %s and target %s must have the same shape"):format(fname, shape_str(a), shape_str(b)), 3)
  end
end

-- A tensor a loss broadcasts against its input (a weight, pos_weight, soft_margin_loss's target): its shape must
-- broadcast to the input's own, as torch's, whose result keeps the input's shape (a larger one grew the loss to the
-- broadcast shape; one that does not broadcast failed inside an op). level: as error's.
local function broadcasts_to(fname, what, v, x, level)
  local xs = x:shape()
  local full = require("fp8.tensor")._broadcast_shape(v:shape(), xs)
  local ok = full ~= nil and #full == #xs
  for i = 1, ok and #xs or 0 do ok = ok and full[i] == xs[i] end
  if not ok then
    error(("%s: %s %s must broadcast to the input %s"):format(fname, what, shape_str(v), shape_str(x)), level + 1)
  end
end

-- mse_loss(input, target [, {reduction="mean"|"sum"|"none"}]) (torch's reductions)
function F.mse_loss(a, b, opts, ...)
  no_more("mse_loss", "(input, target [, {reduction=}])", ...)
  check_tensor("mse_loss", "input", a); check_tensor("mse_loss", "target", b)
  opts = check_opts("mse_loss", opts, { reduction = true })
  same_shape("mse_loss", a, b)
  local red = reduction_of("mse_loss", opts.reduction, nil, 2)
  a, b = autocast_fp32(a, b)
  if red == "mean" then return (at_caller(pcall(core().mse_loss, a, b))) end
  local d = a - b
  local sq = d * d
  return red == "none" and sq or sq:sum()
end

-- The reductions of the elementwise losses: "mean" (the core's mean), "sum" or "none"; with batch (kl_div's: the
-- input's first size) also "batchmean", the sum divided by it.
local function reduce_loss(fname, per, red, batch)
  red = reduction_of(fname, red, batch, 3)
  if red == "mean" then return per:mean() end
  if red == "sum" then return per:sum() end
  if red == "none" then return per end
  return per:sum() / batch   -- batchmean
end

-- l1_loss(input, target [, {reduction="mean"|"sum"|"none"}]): |input − target|, torch's.
function F.l1_loss(a, b, opts, ...)
  no_more("l1_loss", "(input, target [, {reduction=}])", ...)
  check_tensor("l1_loss", "input", a); check_tensor("l1_loss", "target", b)
  opts = check_opts("l1_loss", opts, { reduction = true })
  same_shape("l1_loss", a, b)
  a, b = autocast_fp32(a, b)
  return reduce_loss("l1_loss", (a - b):abs(), opts.reduction)
end

-- smooth_l1_loss(input, target [, {reduction=, beta=1}]): 0.5·d²/beta where |d| < beta, |d| − 0.5·beta elsewhere
-- (beta 0: the L1 loss); huber_loss(input, target [, {reduction=, delta=1}]): 0.5·d² where |d| < delta,
-- delta·(|d| − 0.5·delta) elsewhere (torch's). Differentiable; the two pieces meet with one slope.
local function piecewise_loss(fname, a, b, opts, key)
  check_tensor(fname, "input", a); check_tensor(fname, "target", b)
  opts = check_opts(fname, opts, { reduction = true, [key] = true })
  same_shape(fname, a, b)
  local k = opts[key]
  if k == nil then k = 1.0 end
  if type(k) ~= "number" or k ~= k or k < 0 or k == math.huge then
    error(("%s: %s must be a finite number >= 0, got %s"):format(fname, key, O.got(k)), 2)   -- (tail-called)
  end
  if key == "delta" and k == 0 then error("huber_loss: delta must be positive, got 0", 2) end
  a, b = autocast_fp32(a, b)
  local d = a - b
  local ad = d:abs()
  if k == 0 then return reduce_loss(fname, ad, opts.reduction) end
  local per
  -- (the square takes 0 where the linear piece is taken: at ±inf its gradient is torch's ±1, not 0·inf)
  local quad = ad:lt(k)
  local dq = where(quad, d, 0)
  if key == "beta" then per = where(quad, dq * dq * (0.5 / k), ad - 0.5 * k)
  else per = where(quad, dq * dq * 0.5, (ad - 0.5 * k) * k) end
  return reduce_loss(fname, per, opts.reduction)
end
function F.smooth_l1_loss(a, b, opts, ...)
  no_more("smooth_l1_loss", "(input, target [, {reduction=, beta=}])", ...)
  return piecewise_loss("smooth_l1_loss", a, b, opts, "beta")
end
function F.huber_loss(a, b, opts, ...)
  no_more("huber_loss", "(input, target [, {reduction=, delta=}])", ...)
  return piecewise_loss("huber_loss", a, b, opts, "delta")
end

-- kl_div(input, target [, {reduction="mean", log_target=false}]): torch's, input log-probabilities; pointwise
-- target·(log target − input) (0 where target is 0, NaN where it is negative, as torch's xlogy), or with log_target
-- e^target·(target − input). reduction "batchmean" divides the sum by the batch size (input's first dim): the KL
-- divergence; "mean" (torch's default) by the element count.
function F.kl_div(x, t, opts, ...)
  no_more("kl_div", "(input, target [, {reduction=, log_target=}])", ...)
  check_tensor("kl_div", "input", x); check_tensor("kl_div", "target", t)
  opts = check_opts("kl_div", opts, { reduction = true, log_target = true })
  same_shape("kl_div", x, t)
  if opts.log_target ~= nil and type(opts.log_target) ~= "boolean" then
    error(("kl_div: log_target must be a boolean, got %s"):format(O.got(opts.log_target)), 2)
  end
  x, t = autocast_fp32(x, t)
  local per
  if opts.log_target then per = t:exp() * (t - x)
  else per = where(t:eq(0), 0, t * t:log()) - t * x end
  return reduce_loss("kl_div", per, opts.reduction, x:dim() == 0 and 1 or x:size(1))
end

-- glu(x [, dim=-1]): the halves a, b of dim (its size even), a·sigmoid(b); softmin(x [, dim]): softmax(−x)
function F.glu(x, dim, ...)
  no_more("glu", "(input [, dim])", ...)
  check_tensor("glu", "input", x)
  if dim == nil then dim = -1 end
  check_dim("glu", x, dim)
  if x:dim() == 0 or x:size(dim) % 2 ~= 0 then
    error(("glu: dim %d must have an even size, got shape %s"):format(dim, x:shape_str()), 2)
  end
  local a, b = x:chunk(2, dim)
  return a * b:sigmoid()
end
function F.softmin(x, dim, ...)
  no_more("softmin", "(input [, dim]) (no dtype)", ...)
  check_tensor("softmin", "input", x)
  local r = F.softmax(-x, implicit_dim("softmin", x, dim))
  -- a bf16/fp16 input keeps its dtype, in and out of autocast, as torch's (softmax's kernel gives fp32: rounded once)
  return require("fp8.tensor")._round_to(r, require("fp8.tensor")._low_dtype(x))
end

-- binary_cross_entropy_with_logits(input, target [, {weight=, reduction=, pos_weight=}]): torch's, −w·(pw·y·log σ(x)
-- + (1 − y)·log σ(−x)) with pos_weight pw (a number or a tensor broadcast to the input, 1 without) and weight w (a
-- tensor broadcast to the input, 1 without); neither is differentiated, and one that requires grad is refused, as
-- torch's. The two log sigmoids are logsigmoid's, so the gradient is torch's σ(x)-based one, 0 included, no exp
-- overflows for large |x|, and an infinite logit has torch's finite gradient (one log_softmax over (0, x), until
-- 2026-12-05, gave NaN losses and gradients at x = +inf: inf − inf).
function F.binary_cross_entropy_with_logits(x, y, opts, ...)
  local N = "binary_cross_entropy_with_logits"
  no_more(N, "(input, target [, {weight=, reduction=, pos_weight=}])", ...)
  check_tensor(N, "input", x); check_tensor(N, "target", y)
  opts = check_opts(N, opts, { weight = true, reduction = true, pos_weight = true })
  same_shape(N, x, y)
  local pw = opts.pos_weight
  if pw ~= nil and type(pw) ~= "number" then
    check_tensor(N, "pos_weight", pw); broadcasts_to(N, "pos_weight", pw, x, 2); refuse_grad(N, "pos_weight", pw, 2)
  end
  local w = opts.weight
  if w ~= nil then check_tensor(N, "weight", w); broadcasts_to(N, "weight", w, x, 2); refuse_grad(N, "weight", w, 2) end
  x, y, pw, w = autocast_fp32(x, y, pw, w)
  -- log σ(−x), log σ(x), in fp32 for a bf16 or fp16 input too (the loss is fp32, as log_softmax's kernel gave it)
  local xf = x:dtype() == "fp32" and x or x:to("fp32")
  local neg, pos = F.logsigmoid(-xf), F.logsigmoid(xf)
  local wpos = pw == nil and y or y * pw
  local per = -(wpos * pos + (1 - y) * neg)
  return reduce_loss(N, w and per * w or per, opts.reduction)
end

-- binary_cross_entropy(input, target [, {weight=, reduction=}]): torch's, −w·(y·log x + (1 − y)·log(1 − x)) with each
-- log clamped at −100 (so a probability of exactly 0 or 1 gives 100, not inf), input and target probabilities in
-- [0, 1] (anything else, NaN too, refused as torch refuses it), weight a tensor broadcast to the input (not
-- differentiated: one that requires grad is refused, as torch's). Computed in fp32 (a bf16 or fp16 loss rounded
-- once). The gradient is torch's own formula, w·(x − y) / max(x·(1 − x), 1e-12), not the clamped logs' derivative
-- (0 where they clamp), and the target's is torch's too, −w·logit(x) (±3.4e38 where x is 0 or 1, torch's ±inf): the
-- value is computed without a graph and the gradients attached by x − x.detach() and y − y.detach() (0 in the
-- forward).
local bce
function F.binary_cross_entropy(x, y, opts, ...)
  local N = "binary_cross_entropy"
  no_more(N, "(input, target [, {weight=, reduction=}])", ...)
  check_tensor(N, "input", x); check_tensor(N, "target", y)
  opts = check_opts(N, opts, { weight = true, reduction = true })
  same_shape(N, x, y)
  local red = reduction_of(N, opts.reduction, nil, 2)
  local w = opts.weight
  if w ~= nil then check_tensor(N, "weight", w); broadcasts_to(N, "weight", w, x, 2); refuse_grad(N, "weight", w, 2) end
  for _, c in ipairs { { x, "input" }, { y, "target" } } do
    local d = c[1]:detach()
    if d:numel() > 0 and (d:ge(0):logical_and(d:le(1))):all():item() ~= 1 then
      error(("%s: all elements of %s should be between 0 and 1"):format(N, c[2]), 2)
    end
  end
  return low_in_fp32(bce, autocast_fp32(x, y, w, red))
end
bce = function(x, y, w, red)
  -- (in fp32 whatever the dtypes: a bf16 gy clamped to fp32's largest float was refused, "clamp: min ... out of range")
  local xd, yd = x:detach():to("fp32"), y:detach():to("fp32")
  local per, gx, gy
  local wd = w ~= nil and w:detach():to("fp32") or nil
  fp8.no_grad(function()
    local lx, l1x = xd:log(), (1 - xd):log()
    per = -(yd * lx:clamp_min(-100) + (1 - yd) * l1x:clamp_min(-100))
    gx = (xd - yd) / (xd * (1 - xd)):clamp_min(1e-12)
    -- (clamped to the largest float, before and after a weight: ±inf where x is 0 or 1, as torch's, would make the
    -- forward's 0·gy NaN, and so would a weight of 0 times inf)
    local MAX = O.F32_MAX
    gy = (l1x - lx):clamp(-MAX, MAX)
    if wd ~= nil then per, gx, gy = per * wd, gx * wd, (gy * wd):clamp(-MAX, MAX) end
  end)
  -- per's value, gx and gy as each element's gradient with respect to x and y (the weight takes none, as torch's)
  local loss = per + (x - xd) * gx
  if y:requires_grad() then loss = loss + (y - yd) * gy end
  return reduce_loss("binary_cross_entropy", loss, red)
end

-- cosine_similarity(x1, x2 [, dim=2 [, eps=1e-8]]) (or {dim=, eps=}): torch's, Σ (x1/‖x1‖)·(x2/‖x2‖) along dim,
-- the two broadcast first, each norm clamped at eps where it divides (as torch's, whose clamp takes no part in the
-- gradient: a zero vector's gradient is finite). dim counts from 1 (torch's default dim=1 is the second).
function F.cosine_similarity(a, b, dim, eps, ...)
  local N = "cosine_similarity"
  no_more(N, "(x1, x2 [, dim [, eps]])", ...)
  check_tensor(N, "x1", a); check_tensor(N, "x2", b)
  if type(dim) == "table" then
    if eps ~= nil then error(("%s: give dim and eps either in order or in one table"):format(N), 2) end
    local o = check_opts(N, dim, { dim = true, eps = true })
    dim, eps = o.dim, o.eps
  end
  if dim == nil then dim = 2 end
  if eps == nil then eps = 1e-8 end
  if type(eps) ~= "number" or not (eps >= 0 and eps < math.huge) then
    error(("%s: eps must be a finite number >= 0, got %s"):format(N, O.got(eps)), 2)
  end
  local x1, x2 = a, b
  if shape_str(a) ~= shape_str(b) then
    local full = require("fp8.tensor")._broadcast_shape(a:shape(), b:shape())
    if full == nil then
      error(("%s: x1 %s and x2 %s do not broadcast"):format(N, shape_str(a), shape_str(b)), 2)
    end
    x1, x2 = a:expand(full), b:expand(full)
  end
  check_dim(N, x1, dim)
  if x1:dim() == 0 then error(("%s: the inputs are 0-d; it reduces along a dimension, so needs one"):format(N), 2) end
  local function unit(x)
    local n = x:norm(2, dim, true)
    return x / (n + (n:detach():clamp_min(eps) - n:detach()))   -- the clamp's value, the norm's gradient
  end
  return (unit(x1) * unit(x2)):sum(dim)
end

-- torch's normalized_shape of layer_norm and rms_norm: a number or a list of the input's last dims. Returns how many
-- trailing dims it spans (1 when it is the last alone) and their element count; fname's caller is blamed.
local function normalized_dims(fname, x, shape)
  local list = type(shape) == "table" and shape or { shape }
  local n = rawlen(list)
  if n == 0 or n > x:dim() then
    error(("%s: normalized_shape must name 1..%d of the input's last dims, got %s (input %s)"):format(fname, x:dim(),
      type(shape) == "table" and ("a list of " .. n) or O.got(shape), shape_str(x)), 3)
  end
  local count = 1
  for i = 1, n do
    local want = x:size(x:dim() - n + i)
    if rawget(list, i) ~= want then
      if n == 1 then
        error(("%s: normalized_shape %s must be the input's last dimension, %d (input %s)"):format(fname,
          type(shape) == "table" and ("{" .. O.got(rawget(list, 1)) .. "}") or O.got(shape), want, shape_str(x)), 3)
      end
      local shown = {}
      for j = 1, n do shown[j] = O.got(rawget(list, j)) end
      error(("%s: normalized_shape {%s} must be the input's last %d dims (input %s)"):format(fname,
        table.concat(shown, ", "), n, shape_str(x)), 3)
    end
    count = count * want
  end
  return n, count
end

-- x with its last n dims flattened into one (n = 1: x itself)
local function flat_last(x, n, count)
  if n == 1 then return x end
  local shape = {}
  for d = 1, x:dim() - n do shape[d] = x:size(d) end
  shape[#shape + 1] = count
  return x:reshape(shape)
end

-- layer_norm(x[..., C], w[C], b[C] [, eps=1e-5]) (w, b may be nil), or torch's
-- layer_norm(x, normalized_shape, w, b [, eps]) with normalized_shape C, {C} or several last dims {H, W} (w and b of
-- that shape): the input's last dims, normalized over as one
function F.layer_norm(x, w, b, eps, ...)
  local shape
  if type(w) == "number" or type(w) == "table" then   -- torch's normalized_shape (a tensor is a userdata)
    shape, w, b, eps = w, b, eps, ...
    no_more("layer_norm", "(input, normalized_shape, weight, bias [, eps])", select(2, ...))
  else
    no_more("layer_norm", "(input, weight, bias [, eps])", ...)
  end
  check_tensor("layer_norm", "input", x)
  if eps ~= nil and (type(eps) ~= "number" or not (eps >= 0) or eps == math.huge) then   -- (named here, not by the core)
    error(("layer_norm: eps must be a finite number >= 0, got %s"):format(O.got(eps)), 2)
  end
  if x:dim() == 0 then error("layer_norm: input is 0-d; it normalizes over the last dimension, so needs one", 2) end
  local c, nd = x:size(-1), 1
  if shape ~= nil then nd, c = normalized_dims("layer_norm", x, shape) end
  local want = {}
  for d = x:dim() - nd + 1, x:dim() do want[#want + 1] = x:size(d) end
  local wshape = "[" .. table.concat(want, ", ") .. "]"
  for what, t in pairs { weight = w, bias = b } do
    check_tensor("layer_norm", what, t)
    if shape_str(t) ~= wshape then
      error(("layer_norm: %s must be %s to match input %s, got %s"):format(what, wshape, shape_str(x), shape_str(t)), 2)
    end
  end
  if nd > 1 then   -- several last dims: normalized as one, and shaped back
    local y = at_caller(pcall(core().layer_norm, flat_last(x, nd, c), w and w:reshape { c }, b and b:reshape { c },
      eps == nil and 1e-5 or eps))
    return y:reshape(x:shape())
  end
  return (at_caller(pcall(core().layer_norm, x, w, b, eps == nil and 1e-5 or eps)))
end

-- torch's eps for rms_norm when none is given: the machine epsilon of the type it computes in (at::opmath_type),
-- fp32's for bf16 and fp16 inputs too (2⁻²³; their own, 2⁻⁷ and 2⁻¹⁰, as the docs' torch.finfo(x.dtype).eps reads,
-- moved small rows' results by up to 40%: torch 2.15's F.rms_norm of a bf16 x gives what eps=2⁻²³ gives)
local MACHINE_EPS = { fp32 = 2 ^ -23, bf16 = 2 ^ -23, fp16 = 2 ^ -23 }

-- rms_norm(x[..., C], normalized_shape (C, {C} or several last dims), weight (of that shape) or nil [, eps]): torch's
-- (2.4+) RMSNorm, x / sqrt(mean(x², those dims) + eps) · weight, eps fp32's machine epsilon unless given.
-- Built of the tensor ops (their gradients flow).
function F.rms_norm(x, shape, w, eps, ...)
  no_more("rms_norm", "(input, normalized_shape [, weight [, eps]])", ...)
  check_tensor("rms_norm", "input", x)
  if x:dim() == 0 then error("rms_norm: input is 0-d; it normalizes over the last dimension, so needs one", 2) end
  if x:is_fp8() then error(("rms_norm: %s input: call :dequantize() first"):format(x:dtype()), 2) end
  local nd = normalized_dims("rms_norm", x, shape)
  local want = {}
  for d = x:dim() - nd + 1, x:dim() do want[#want + 1] = x:size(d) end
  if w ~= nil then
    check_tensor("rms_norm", "weight", w)
    -- (stop 96's one-pass form refused it as 'lua/fp8/nn/functional.lua:876: rms_norm: the one-pass form takes fp32
    -- tensors, got fp32 and e4m3', and the ops' form as 'mul: e4m3 tensor ...', neither at the caller's line)
    if w:is_fp8() then error(("rms_norm: %s weight: call :dequantize() first"):format(w:dtype()), 2) end
    local wshape = "[" .. table.concat(want, ", ") .. "]"
    if shape_str(w) ~= wshape then
      error(("rms_norm: weight must be %s to match input %s, got %s"):format(wshape, shape_str(x), shape_str(w)), 2)
    end
  end
  if eps == nil then eps = MACHINE_EPS[x:dtype()] or 2 ^ -23 end
  if type(eps) ~= "number" or not (eps >= 0 and eps < math.huge) then
    error(("rms_norm: eps must be a finite number >= 0, got %s"):format(O.got(eps)), 2)
  end
  -- bf16/fp16: in fp32, the result rounded once to the input's dtype (torch's; a bf16 x beside an fp32 weight gives
  -- bf16), not op by op in the input's dtype
  local T = require "fp8.tensor"
  local low = T._low_dtype(x)
  if low then x = x:to("fp32") end
  if w ~= nil and T._low_dtype(w) then w = w:to("fp32") end
  -- nothing to record, over the last dim: one pass where the device has it (the core's rms_norm_fwd), the bits of the
  -- ops below (they made five passes over x's size: 1.8× torch's)
  if nd == 1 and not (fp8.is_grad_enabled() and (x:requires_grad() or (w ~= nil and w:requires_grad()))) then
    local y = core().rms_norm_fwd(x, w, eps)
    if y then return T._round_to(y, low) end
  end
  local ms = x * x
  if nd == 1 then ms = ms:mean(-1, true)
  else
    local dims = {}
    for d = x:dim() - nd + 1, x:dim() do dims[#dims + 1] = d end
    ms = ms:mean(dims, true)
  end
  local y = x * (ms + eps):rsqrt()
  if w ~= nil then y = y * w end
  return T._round_to(y, low)
end

-- normalize(x [, {p=2, dim=2, eps=1e-12}]): torch's, x / max(‖x‖_p, eps) along dim (p any number but NaN, as torch
-- 2.15's: math.huge the largest |x|, -math.huge the smallest, 0 the count of nonzero elements, p < 0 (Σ|x|^p)^(1/p),
-- 0 where an element is 0; it refused p < 1 until stop 98; dim 2 is torch's default dim=1, the channels of
-- [N, C, ...]). The norm of a zero row is 0 by a select, so its gradient stays finite (torch's: 1/eps); clamping the
-- sum at eps^p instead (as before 2026-12-04) underflowed fp32 for p >= 4 or a small eps, and gave 0/0.
function F.normalize(x, opts, ...)
  no_more("normalize", "(input [, {p=, dim=, eps=}])", ...)
  check_tensor("normalize", "input", x)
  -- (refused by the norm's abs or mul as 'lua/fp8/nn/functional.lua:916: abs: e4m3 tensor: ...', at the library's
  -- line and naming an op the caller did not call; stop 98)
  if x:is_fp8() then error(("normalize: %s input: call :dequantize() first"):format(x:dtype()), 2) end
  opts = check_opts("normalize", opts, { p = true, dim = true, eps = true })
  local p, dim, eps = opts.p, opts.dim, opts.eps
  if p == nil then p = 2 end
  if dim == nil then dim = 2 end
  if eps == nil then eps = 1e-12 end
  if type(p) ~= "number" or p ~= p then   -- (torch takes NaN and returns NaN everywhere: refused here by name)
    error(("normalize: p must be a number (math.huge and -math.huge included, NaN not), got %s"):format(O.got(p)), 2)
  end
  if type(eps) ~= "number" or not (eps > 0 and eps < math.huge) then
    error(("normalize: eps must be a finite number > 0, got %s"):format(O.got(eps)), 2)
  end
  check_dim("normalize", x, dim)
  if x:dim() == 0 then error("normalize: input is 0-d; it normalizes along a dimension, so needs one", 2) end
  if (p < 0 or p == math.huge) and x:size(dim) == 0 then
    -- the norm of an empty dim has no value for p < 0 and ±inf (torch's RuntimeError: the operation has no identity):
    -- p < 0 returned the empty input where torch refuses, ±inf said 'amax: ...' or 'min: ...' at this file's line
    -- (sweep 114)
    error(("normalize: the %s norm of an empty dim has no value (the operation has no identity; torch refuses it too), "
      .. "input %s along dim %d"):format(p == math.huge and "inf" or p == -math.huge and "-inf" or ("%.14g"):format(p),
      x:shape_str(), dim < 0 and dim + x:dim() + 1 or dim), 2)
  end
  if p == math.huge then return x / x:abs():amax(dim, true):clamp_min(eps) end   -- torch's p=inf: the largest |x|
  local T = require "fp8.tensor"
  local n
  if p == -math.huge then
    -- torch's p=-inf: the smallest |x| (NaN if any is NaN), its gradient split among the elements that equal it (and
    -- the NaNs), as torch's norm backward: m + Σ_mask(|x| − |x|) / count, whose value is m (NaN where m is inf:
    -- there every element is inf or NaN, and x / n NaN either way, as torch's)
    local a = x:abs()
    local ad = a:detach()
    local m = ad:min(dim, true)
    local mask = ad:eq(m):logical_or(ad:isnan())
    n = m + T.where(mask, a - ad, 0):sum(dim, true) / mask:to(a:dtype()):sum(dim, true)
  elseif p == 0 then   -- torch's p=0: the count of nonzero elements (NaN counts), no gradient through it
    n = x:detach():ne(0):to(x:dtype()):sum(dim, true)
  elseif p < 0 then    -- torch's: (Σ|x|^p)^(1/p), 0 where an element is 0 (|0|^p inf); no rescue (torch has none).
    -- No select on the root: a row of infinities sums to 0 and its norm is inf, x / inf NaN as torch's (the zero
    -- sum's root was 0, and the row came out ±inf, x / eps; stop 98)
    n = T._abs_pow(x, p, true):sum(dim, true):pow(1 / p)
  else
    n = T._norm_rescaled(x, dim, function(v)   -- Σ|x|^p out of range: x scaled first
      local s = p == 2 and (v * v):sum(dim, true) or T._abs_pow(v, p, true):sum(dim, true)
      return F._root(s, p), s
    end, p)
  end
  return x / n:clamp_min(eps)
end

-- s^(1/p) of sums s >= 0, a zero sum's root 0 with a finite gradient (fp8.tensor's): normalize's and
-- pairwise_distance's norms
F._root = require("fp8.tensor")._root

-- pad(x, pad [, {mode="constant", value=0}]): torch's padding of the last dims: pad = {left, right} for the last
-- dim, then {top, bottom} for the one before, ...; a negative amount crops. mode "constant" fills with value (any
-- number of dims); "reflect" mirrors about the edge element (each amount less than the dim's size), "replicate"
-- repeats the edge element, "circular" wraps around (crops first, then each amount at most the size left). The
-- three take no value and pad the last 1, 2 or 3 dims of a batched or unbatched input (2 amounts: a 2-D or 3-D
-- input, 4: 3-D or 4-D, 6: 4-D or 5-D), as torch's. Built of cat, narrow and index_select, so gradients flow to the
-- input's elements (a reflected or repeated element gets the sum of its copies' gradients).
local PAD_MODES = { constant = true, reflect = true, replicate = true, circular = true }

-- the 0-based source position of each output position of a dim of size n padded by lo and hi in mode
local function pad_index(mode, n, lo, hi, dev)
  local idx = {}
  for o = 0, n + lo + hi - 1 do
    local i = o - lo
    if mode == "reflect" then
      if i < 0 then i = -i elseif i >= n then i = 2 * (n - 1) - i end
    elseif mode == "replicate" then
      i = i < 0 and 0 or i >= n and n - 1 or i
    else   -- circular
      i = i % n
    end
    idx[#idx + 1] = i
  end
  return require("fp8.tensor")._list_on(idx, dev)
end

function F.pad(x, pad, opts, ...)
  no_more("pad", "(input, pad [, {mode=, value=}])", ...)
  check_tensor("pad", "input", x)
  if x:is_fp8() then error(("pad: %s tensor: dequantize it first (its bytes share a scale)"):format(x:dtype()), 2) end
  opts = check_opts("pad", opts, { mode = true, value = true })
  local mode = opts.mode
  if mode == nil then mode = "constant" end
  if not PAD_MODES[mode] then
    error(("pad: mode must be one of \"constant\", \"reflect\", \"replicate\", \"circular\", got %s"):format(
      O.got(mode)), 2)
  end
  local value = opts.value
  if value == nil then value = 0 end
  if type(value) ~= "number" then error(("pad: value must be a number, got %s"):format(O.got(value)), 2) end
  if mode ~= "constant" and value ~= 0 then
    error(("pad: mode \"%s\" takes no value (it pads with the input's own elements), got value=%s"):format(mode,
      O.got(value)), 2)
  end
  -- fp32 under autocast, as torch's CPU autocast (its reflection_pad/replication_pad are on the fp32 list)
  if mode == "reflect" or mode == "replicate" then x = autocast_fp32(x) end
  if type(pad) ~= "table" or rawlen(pad) % 2 ~= 0 or rawlen(pad) == 0 then
    error(("pad: pad must be a list of an even number of integers {left, right, ...}, got %s"):format(O.got(pad)), 2)
  end
  local n = rawlen(pad) // 2
  if n > x:dim() then
    error(("pad: %d pairs pad %d dims, but the input %s has %d"):format(n, n, shape_str(x), x:dim()), 2)
  end
  if mode ~= "constant" and n > 3 then
    error(("pad: mode \"%s\" pads the last 1, 2 or 3 dims, got %d amounts"):format(mode, 2 * n), 2)
  end
  if mode ~= "constant" and x:dim() ~= n + 1 and x:dim() ~= n + 2 then
    error(("pad: mode \"%s\" pads the last 1, 2 or 3 dims of an unbatched or batched input (%d amounts take a "
      .. "%d-D or %d-D input), got %d amounts for %s"):format(mode, 2 * n, n + 1, n + 2, 2 * n, shape_str(x)), 2)
  end
  local y = x
  for i = 1, n do
    local lo, hi = rawget(pad, 2 * i - 1), rawget(pad, 2 * i)
    for j = 1, 2 do   -- (not ipairs{lo, hi}: it stops at a nil lo, a hole in the list)
      local v = select(j, lo, hi)
      if math.type(v) ~= "integer" then error(("pad: amounts must be integers, got %s"):format(O.got(v)), 2) end
    end
    local d = y:dim() - i + 1   -- 1-based: the last dim first
    local size = y:size(d)
    if size + lo + hi < 0 or (size + lo + hi == 0 and (mode == "reflect" or mode == "replicate")) then
      error(("pad: padding dim %d of size %d by {%d, %d} leaves nothing"):format(d, size, lo, hi), 2)
    end
    if mode == "reflect" and (lo >= size or hi >= size) then
      error(("pad: mode \"reflect\" needs each amount less than the dim's size: {%d, %d} for dim %d of %s"):format(lo,
        hi, d, shape_str(x)), 2)
    end
    if mode == "constant" or mode == "circular" then
      -- torch's: the crops first (circular then wraps around what is left, its size bounding the amounts)
      if lo < 0 then y = y:narrow(d, 1 - lo, size + lo); size = size + lo; lo = 0 end
      if hi < 0 then y = y:narrow(d, 1, size + hi); size = size + hi; hi = 0 end
    end
    if mode == "circular" then
      if lo > size or hi > size then
        error(("pad: mode \"circular\" wraps around once at most: {%s} for dim %d of %s exceeds the size %d%s"):format(
          table.concat({ rawget(pad, 2 * i - 1), rawget(pad, 2 * i) }, ", "), d, shape_str(x), size,
          size < x:size(d) and " left after the crop" or ""), 2)
      end
    end
    if mode ~= "constant" then
      require("fp8.nn.conv_geometry").check_positions("pad", "dim " .. d, size + lo + hi, 3)
      if size + lo + hi == 0 then y = y:narrow(d, 1, 0)   -- circular's crop to nothing, as torch's
      elseif lo ~= 0 or hi ~= 0 then y = y:index_select(d, pad_index(mode, size, lo, hi, y:device())) end
    elseif lo > 0 or hi > 0 then
      local parts = {}
      local function block(k)
        local shp = y:shape()
        shp[d] = k
        return fp8.full(shp, value, { dtype = y:dtype(), device = y:device() })
      end
      if lo > 0 then parts[#parts + 1] = block(lo) end
      parts[#parts + 1] = y
      if hi > 0 then parts[#parts + 1] = block(hi) end
      y = fp8.cat(parts, d)
    end
  end
  return y
end

-- one_hot(t (class ids, 0-based), num_classes=-1) → [t..., C] of 1 and 0 (fp32; torch's is int64), C the largest id
-- + 1 when num_classes is -1. Not differentiable.
function F.one_hot(t, num_classes, ...)
  no_more("one_hot", "(tensor [, num_classes=-1])", ...)
  check_tensor("one_hot", "tensor", t)
  if t:is_fp8() then error(("one_hot: %s tensor: class ids are whole numbers, not FP8"):format(t:dtype()), 2) end
  if num_classes == nil then num_classes = -1 end
  if math.type(num_classes) ~= "integer" or (num_classes < 1 and num_classes ~= -1) then
    error(("one_hot: num_classes must be a positive integer or -1, got %s"):format(O.got(num_classes)), 2)
  end
  local n = t:numel()
  local hi = -1
  for i, v in ipairs(n > 0 and t:reshape(-1):tolist() or {}) do
    if not (v >= 0 and v == math.floor(v) and v < math.huge) then
      error(("one_hot: class ids must be whole numbers >= 0, got %s at position %d"):format(O.got(v), i), 2)
    end
    if v > hi then hi = v end
  end
  if num_classes == -1 then
    if n == 0 then error("one_hot: an empty tensor needs num_classes (there is no largest id to count from)", 2) end
    num_classes = math.tointeger(hi) + 1
  elseif hi >= num_classes then
    error(("one_hot: class id %s is not below num_classes = %d"):format(O.got(math.tointeger(hi) or hi),
      num_classes), 2)
  end
  O.exact_positions("one_hot", num_classes - 1, ("the class ids of %d classes"):format(num_classes), 3)
  return t:detach():to("fp32"):unsqueeze(-1):eq(fp8.arange(num_classes, { device = t:device() }))
end

-- nll_loss(log_probs[N, C], targets[N] (0-based class ids) [, {weight=, ignore_index=-100, reduction="mean"|"sum"|
-- "none"}]): torch's negative log-likelihood, −w[t_i]·log_probs[i, t_i] (w: C class weights, 1 without); the mean
-- divides by the weights of the rows not ignored (their count without weights).
function F.nll_loss(lp, targets, opts, ...)
  no_more("nll_loss", "(input, target [, {weight=, ignore_index=, reduction=}])", ...)
  check_tensor("nll_loss", "input", lp); check_tensor("nll_loss", "target", targets)
  opts = check_opts("nll_loss", opts, { weight = true, ignore_index = true, reduction = true })
  local red = reduction_of("nll_loss", opts.reduction, nil, 2)
  local ii = ignore_index_of("nll_loss", opts.ignore_index, 2)
  local rows, trows, back = class_rows("nll_loss", "input", lp, targets, false)
  if rows then
    local r = at_caller(pcall(F.nll_loss, rows, trows, opts))
    return red == "none" and r:reshape(back) or r
  end
  if targets:dim() ~= 1 or targets:size(1) ~= lp:size(1) then
    error(("nll_loss: target must be [%d] (class ids) to match input %s, got %s"):format(lp:size(1), shape_str(lp),
      shape_str(targets)), 2)
  end
  if targets:requires_grad() then error("nll_loss: target holds class indices and cannot require grad", 2) end
  lp = autocast_fp32(lp)
  local N, C = lp:size(1), lp:size(2)
  local w, wv = class_weights("nll_loss", opts.weight, C, lp:device())
  local hit, _, hw, kept = target_rows("nll_loss", targets, C, ii, wv, 2)
  if N == 0 then
    local e = lp:sum(2)
    return red == "none" and e or red == "sum" and e:sum() or e:sum() / 0
  end
  -- the target's entry selected, not multiplied by a one-hot row (a −inf elsewhere would make a NaN)
  local sel = require("fp8.tensor").where(fp8.tensor(hit):to(lp:device()), lp, 0)
  -- the class weights are fp32 numbers: a bf16/fp16 input's weighted loss in fp32, rounded once to its dtype when the
  -- weight has that dtype too (torch keeps it, as without weights); a weight of another dtype, which torch refuses,
  -- gives fp32 (the promotion, as the other losses' weights)
  local T = require "fp8.tensor"
  local low = w and T._low_dtype(lp) and opts.weight:dtype() == lp:dtype() and lp:dtype() or nil
  local function out(r) return T._round_to(r, low) end
  if w then sel = sel * fp8.tensor(hw):to(lp:device()) end
  local per = -(sel:sum(2)) + 0
  if red == "none" then return out(per) end
  if red == "sum" then return out(per:sum()) end
  return out(per:sum() / kept)   -- every row ignored (or their weights 0): 0/0, NaN, as torch's
end

-- torch's padding_idx for num rows: nil, or an integer in [-num, num), a negative one counted from the end;
-- returned as the 0-based row. fname's caller's caller is blamed (level: as error's, from here).
function F._padding_idx(fname, p, num, level)
  if p == nil then return nil end
  if math.type(p) ~= "integer" or p < -num or p >= num then
    error(("%s: padding_idx must be an integer in [%d, %d) (a negative one counts from the end), got %s"):format(
      fname, -num, num, O.got(p)), level + 1)
  end
  return p < 0 and p + num or p
end

-- embedding(idx (token ids as numbers, 0-based), weight[V, D] [, padding_idx]) → [idx..., D]; torch's padding_idx:
-- the rows looked up at that id pass no gradient to it (the output there is still the weight's row)
-- The rows of weight that idx looks up whose norm_type-norm passes max_norm scaled in place to max_norm / (norm +
-- 1e-7) of themselves, torch's embedding_renorm_ (under no_grad: the write is not part of the graph)
local function renorm_rows(weight, idx, max_norm, norm_type)
  local V, ids, seen = weight:size(1), {}, {}
  for _, v in ipairs(idx:numel() > 0 and idx:reshape({ -1 }):tolist() or {}) do
    if not (v == math.floor(v) and v >= 0 and v < V) then
      error(("embedding: index %s is out of range for %d embeddings (0-based ids 0..%d)"):format(
        O.got(math.tointeger(v) or v), V, V - 1), 3)
    end
    if not seen[v] then seen[v] = true; ids[#ids + 1] = v end
  end
  if #ids == 0 then return end
  fp8.no_grad(function()
    local at = fp8.tensor(ids)
    if weight:device() ~= "cpu" then at = at:to(weight:device()) end
    local rows = weight:index_select(1, at)
    local a = rows:float():abs()
    local norms = norm_type == math.huge and a:amax(2, true) or (a ^ norm_type):sum(2, true) ^ (1 / norm_type)
    local scale = where(norms:gt(max_norm), max_norm / (norms + 1e-7), 1)
    weight:index_copy_(1, at, (rows:float() * scale):to(weight:dtype()))
  end)
end

-- embedding(indices, weight [, padding_idx | {padding_idx=, max_norm=, norm_type=2}]): torch's lookup; max_norm
-- renormalizes the looked-up rows of weight in place first (torch's); scale_grad_by_freq and sparse are refused.
function F.embedding(idx, weight, padding_idx, ...)
  no_more("embedding", "(indices, weight [, padding_idx | {padding_idx=, max_norm=, norm_type=}])", ...)
  check_tensor("embedding", "indices", idx); check_tensor("embedding", "weight", weight)
  if weight:dim() ~= 2 then error(("embedding: weight must be [num_embeddings, dim], got %s"):format(shape_str(weight)), 2) end
  local max_norm, norm_type
  if type(padding_idx) == "table" then
    local o = padding_idx
    for _, k in ipairs { "scale_grad_by_freq", "sparse" } do
      if type(o) == "table" and rawget(o, k) ~= nil and rawget(o, k) ~= false then
        error(("embedding: %s=%s is not supported (%s)"):format(k, O.got(rawget(o, k)), k == "sparse"
          and "there are no sparse gradients here" or "gradients are not scaled by frequency here"), 2)
      end
    end
    o = check_opts("embedding", o, { padding_idx = true, max_norm = true, norm_type = true, scale_grad_by_freq = true,
      sparse = true })
    padding_idx, max_norm, norm_type = o.padding_idx, o.max_norm, o.norm_type
    if norm_type == nil then norm_type = 2 end
    if max_norm ~= nil and (type(max_norm) ~= "number" or not (max_norm >= 0 and max_norm < math.huge)) then
      error(("embedding: max_norm must be a finite number >= 0, got %s"):format(O.got(max_norm)), 2)
    end
    if type(norm_type) ~= "number" or not (norm_type > 0) then
      error(("embedding: norm_type must be a number > 0 (math.huge for the max), got %s"):format(O.got(norm_type)), 2)
    end
  end
  local pad = F._padding_idx("embedding", padding_idx, weight:size(1), 2)
  if max_norm ~= nil then renorm_rows(weight, idx, max_norm, norm_type) end
  local out = at_caller(pcall(core().embedding, idx, weight))
  -- a bf16/fp16 weight's rows in its dtype, as torch's (the kernel gives fp32; the values are the rows, exact)
  out = require("fp8.tensor")._round_to(out, require("fp8.tensor")._low_dtype(weight))
  if pad == nil or not out:requires_grad() then return out end
  return require("fp8.tensor").where(idx:eq(pad):unsqueeze(-1):to(out:device()), out:detach(), out)
end

function F.dropout(x, p, training, ...)
  no_more("dropout", "(input [, p [, training]]) (no inplace)", ...)
  check_tensor("dropout", "input", x)
  p = p == nil and 0.5 or p
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then   -- `not (...)` also refuses NaN
    error(("dropout: p must be a probability in [0, 1], got %s"):format(O.got(p)), 2)
  end
  if training == nil then training = true end
  if type(training) ~= "boolean" then error(("dropout: training must be a boolean, got %s"):format(type(training)), 2) end
  if not training or p == 0 then return x end
  local r = at_caller(pcall(core().dropout, x, p, training))
  -- a bf16/fp16 input keeps its dtype, as torch's (the kernel gives fp32; x·mask/(1-p) rounded once)
  return require("fp8.tensor")._round_to(r, require("fp8.tensor")._low_dtype(x))
end

-- scaled_dot_product_attention(q, k, v [B, H, T, D] [, {is_causal=true}])
-- The attention written out — scores q·kᵀ·scale, the causal mask or attn_mask, softmax, dropout, the product with v —
-- for what the fused kernels do not take: an attn_mask, dropout_p > 0, k and v of another length than q (torch's
-- causal mask is then the top-left one: query i sees keys 1..i), fewer k/v heads (enable_gqa). Differentiable
-- through its ops; it materialises the [B, H, Tq, Tk] probabilities, as torch's math path does.
local function sdpa_written_out(q, k, v, o)
  local scale = o.scale or 1 / math.sqrt(q:size(4))
  if k:size(2) ~= q:size(2) then   -- enable_gqa: each k/v head serves q:size(2) / k:size(2) query heads, in order
    local rep = q:size(2) // k:size(2)
    k, v = k:repeat_interleave(rep, 2), v:repeat_interleave(rep, 2)
  end
  local s = q:matmul(k:transpose(3, 4)) * scale
  local tq, tk = q:size(3), k:size(3)
  if o.is_causal then
    s = s:masked_fill(fp8.ones({ tq, tk }, { device = q:device() }):tril():eq(0), -math.huge)
  elseif o.attn_mask then
    s = s + o.attn_mask
  end
  -- a row whose every key is masked (a padded query): torch's math path gives it 0 attention and 0 gradients, where
  -- the softmax of all -inf is NaN, which also spread into k's and v's gradients. Its scores are made 0 for the
  -- softmax and its probabilities 0 after it (the selects pass no gradient to the masked scores)
  if o.is_causal or o.attn_mask then
    local dead = s:max(-1, true):eq(-math.huge)
    local p = F.softmax(where(dead, 0, s), -1)
    p = where(dead, 0, p)
    if (o.dropout_p or 0) > 0 then p = F.dropout(p, o.dropout_p, true) end
    return p:matmul(v)
  end
  local p = F.softmax(s, -1)
  if (o.dropout_p or 0) > 0 then p = F.dropout(p, o.dropout_p, true) end
  return p:matmul(v)
end

function F.scaled_dot_product_attention(q, k, v, opts, ...)
  local N = "scaled_dot_product_attention"
  no_more(N, "(q, k, v [, {is_causal=, scale=, attn_mask=, dropout_p=, enable_gqa=}])", ...)
  check_tensor(N, "q", q)
  check_tensor(N, "k", k)
  check_tensor(N, "v", v)
  opts = check_opts(N, opts, { is_causal = true, scale = true, attn_mask = true, dropout_p = true, enable_gqa = true })
  local dp, mask, gqa = opts.dropout_p, opts.attn_mask, opts.enable_gqa
  if dp == nil then dp = 0 end
  if type(dp) ~= "number" or not (dp >= 0 and dp <= 1) then
    error(("%s: dropout_p must be a probability in [0, 1], got %s"):format(N, O.got(dp)), 2)
  end
  if gqa ~= nil and type(gqa) ~= "boolean" then
    error(("%s: enable_gqa must be a boolean, got %s"):format(N, O.got(gqa)), 2)
  end
  if opts.is_causal ~= nil and type(opts.is_causal) ~= "boolean" then
    error(("%s: is_causal must be a boolean, got %s"):format(N, O.got(opts.is_causal)), 2)
  end
  if mask ~= nil then
    check_tensor(N, "attn_mask", mask)
    if mask:dim() < 2 then   -- (a 1-d mask broadcast over the key positions alone; torch refuses it)
      error(("%s: attn_mask must have at least 2 dims [..., Tq, Tk], got %s"):format(N, shape_str(mask)), 2)
    end
  end
  local r = q:dim()
  if r < 3 or k:dim() ~= r or v:dim() ~= r then
    error(("%s: q, k, v must be [B, H, T, D] (or [B, T, D], or [..., H, T, D]: torch's leading dims), got %s, %s, %s")
      :format(N, shape_str(q), shape_str(k), shape_str(v)), 2)
  end
  if r ~= 4 then
    -- torch's other ranks: [B, T, D] as one head, [..., H, T, D] with the leading dims as one batch
    local lead, keep = {}, r == 3 and 1 or r - 2
    for d = 1, keep - 1 do lead[d] = q:size(d) end
    local function to4(t)
      if r == 3 then return t:unsqueeze(2) end
      for d = 1, keep - 1 do
        if t:size(d) ~= lead[d] then
          error(("%s: q, k, v must share their leading dims, got %s, %s, %s"):format(N, shape_str(q), shape_str(k),
            shape_str(v)), 3)   -- (at F's caller: to4 is called from F)
        end
      end
      return t:reshape { -1, t:size(r - 2), t:size(r - 1), t:size(r) }
    end
    local o = {}
    for key, val in next, opts do o[key] = val end
    if mask ~= nil then
      check_tensor(N, "attn_mask", mask)
      if r == 3 then
        if mask:dim() == 3 then o.attn_mask = mask:unsqueeze(2) end
      elseif mask:dim() > 3 then   -- its leading dims broadcast against q's, then fold as q's do
        local full = {}
        for d = 1, keep - 1 do full[d] = lead[d] end
        local mr = mask:dim()
        for d = keep, r do full[d] = mr - (r - d) >= 1 and mask:size(mr - (r - d)) or 1 end
        full[r] = mask:size(mr)
        local ok, m4 = pcall(function() return mask:expand(full):reshape { -1, full[r - 2], full[r - 1], full[r] } end)
        if not ok then
          error(("%s: attn_mask %s does not broadcast to the scores of q %s"):format(N, shape_str(mask),
            shape_str(q)), 2)
        end
        o.attn_mask = m4
      end
    end
    local q4, k4, v4 = to4(q), to4(k), to4(v)
    local out = at_caller(pcall(F.scaled_dot_product_attention, q4, k4, v4, o))
    if r == 3 then return out:squeeze(2) end
    local shape = {}
    for d = 1, keep - 1 do shape[d] = lead[d] end
    for d = keep, r do shape[d] = out:size(4 - (r - d)) end
    return out:reshape(shape)
  end
  local B, H, D = q:size(1), q:size(2), q:size(4)
  local Hk = gqa and k:size(2) or H
  if k:size(1) ~= B or v:size(1) ~= B or k:size(2) ~= Hk or v:size(2) ~= Hk or k:size(4) ~= D
     or v:size(3) ~= k:size(3) or Hk < 1 or H % Hk ~= 0 then
    error(("%s: expected k [B, %s, Tk, D] and v [B, %s, Tk, Dv] for q [B, H, Tq, D] = %s%s, got %s and %s"):format(N,
      gqa and "Hk" or "H", gqa and "Hk" or "H", shape_str(q), gqa and " (Hk dividing H: enable_gqa)" or "",
      shape_str(k), shape_str(v)), 2)
  end
  if mask ~= nil then
    check_tensor(N, "attn_mask", mask)
    if opts.is_causal then
      error(("%s: give either is_causal=true or an attn_mask, not both (torch refuses both too)"):format(N), 2)
    end
    -- torch tells a keep/drop mask (bool) from an additive one (float) by its dtype; there is no bool dtype here,
    -- so a mask of 0s and 1s, which as an additive mask would barely change anything, is refused rather than read
    local m = mask:detach()
    if m:numel() > 0 and m:eq(0):logical_or(m:eq(1)):all():item() == 1 and m:eq(1):any():item() == 1 then
      error(("%s: attn_mask holds only 0s and 1s: torch reads a bool mask as where attention may go and a float "
        .. "one as added to the scores; here a mask is added, so give it as 0 where attention may go and -math.huge "
        .. "where it may not: fp8.where(keep, 0, -math.huge)"):format(N), 2)
    end
  end
  -- q, k and v of one bf16/fp16 dtype outside autocast: the result rounded once to it, as torch's (the kernels give
  -- fp32); under autocast it stays as the autocast's attention gives it
  local T = require "fp8.tensor"
  local low = fp8.autocast_dtype() == "fp32" and k:dtype() == q:dtype() and v:dtype() == q:dtype()
    and T._low_dtype(q) or nil
  local function in_dtype(r) return T._round_to(r, low) end
  if mask == nil and dp == 0 and not gqa and shape_str(q) == shape_str(k) and shape_str(q) == shape_str(v) then
    return in_dtype(at_caller(pcall(core().scaled_dot_product_attention, q, k, v,
      { is_causal = opts.is_causal, scale = opts.scale })))
  end
  -- the fused kernels' rule on both paths (the written-out one took 0, a negative scale and inf, which gave NaN)
  if opts.scale ~= nil and (type(opts.scale) ~= "number" or not (opts.scale > 0 and opts.scale < math.huge)) then
    error(("%s: scale must be a positive finite number, got %s"):format(N, O.got(opts.scale)), 2)
  end
  if mask ~= nil and mask:dim() > q:dim() then   -- (it broadcast the output to the mask's extra dims)
    error(("%s: attn_mask %s has more dims than q %s"):format(N, mask:shape_str(), q:shape_str()), 2)
  end
  if mask ~= nil then
    -- the mask broadcasts to the scores, which keep their shape, as torch's: a mask of more query rows than q (a
    -- [T, T] causal mask beside a one-token q) made the output that many rows long before stop 94
    local scores = { B, H, q:size(3), k:size(3) }
    local mr = mask:dim()
    for d = 1, mr do
      local m, want = mask:size(d), scores[4 - mr + d]
      if m ~= 1 and m ~= want then
        error(("%s: attn_mask %s does not broadcast to the scores [B, H, Tq, Tk] = [%d, %d, %d, %d]"):format(N,
          mask:shape_str(), scores[1], scores[2], scores[3], scores[4]), 2)
      end
    end
  end
  -- one op in the profiler, as torch's aten::scaled_dot_product_attention (its fused kernel on every mask, dropout and
  -- shape here), which torch counts no FLOPs for: with_flops, the matmuls and elementwise ops inside count none
  return in_dtype(at_caller(pcall(prof_op, N, nil, table.pack(q, k, v, mask, dp, opts.is_causal, opts.scale, gqa), sdpa_written_out, q, k, v, opts)))
end

-- qkv_attention(qkv [B, T, 3C], n_head [, {is_causal=, scale=}]) → [B, T, C]: the attention of the packed
-- projection a transformer makes (q, k, v side by side), heads split and merged inside one op, so the
-- backward writes the qkv gradient at once (narrow-splitting costs a zero-filled [B, T, 3C] per part).
function F.qkv_attention(qkv, n_head, opts, ...)
  no_more("qkv_attention", "(qkv, n_head [, {is_causal=, scale=}])", ...)
  check_tensor("qkv_attention", "qkv", qkv)
  if math.type(n_head) ~= "integer" or n_head < 1 then
    error(("qkv_attention: n_head must be a positive integer, got %s"):format(O.got(n_head)), 2)
  end
  opts = check_opts("qkv_attention", opts, { is_causal = true, scale = true })
  if qkv:dim() ~= 3 or qkv:size(3) % (3 * n_head) ~= 0 then
    error(("qkv_attention: expected qkv [B, T, 3·C] with C divisible by n_head=%d, got %s"):format(n_head,
      shape_str(qkv)), 2)
  end
  return (at_caller(pcall(core().qkv_attention, qkv, n_head, opts)))
end

-- the checks other files' functionals share (lua/fp8/nn/embedding_losses.lua, likelihood_losses.lua,
-- multiclass_losses.lua; the loss modules of losses.lua)
F._util = { check_tensor = check_tensor, check_opts = check_opts, check_number = check_number,
            reduce_loss = reduce_loss, same_shape = same_shape, shape_str = shape_str, where = where,
            ignore_index_of = ignore_index_of, refuse_grad = refuse_grad, broadcasts_to = broadcasts_to,
            autocast_fp32 = autocast_fp32, reduction_of = reduction_of }

-- Anything else the C table offers is reachable too (F.xyz → C.xyz).
return setmetatable(F, {
  __index = function(_, k)
    local ok, c = pcall(core)
    if ok then return c[k] end
    return nil
  end,
})
