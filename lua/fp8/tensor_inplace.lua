-- tensor_inplace.lua — torch's in-place tensor methods: copy_, fill_, zero_, add_, sub_, mul_, div_, clamp_,
-- masked_fill_, lerp_, scatter_, scatter_add_, index_add_, index_copy_, index_fill_, uniform_, normal_. Each computes
-- the new values out of place from detached operands and has the tensor's C half write them into it (t:_write_,
-- lua/l_tensor.c), which refuses what autograd here could not record — a write to a tensor that requires grad or is
-- part of a graph while grad mode is on (write under fp8.no_grad, as an optimizer or an EMA of weights does) — and
-- what torch refuses: a source that does not broadcast to the tensor, an expanded view; FP8 tensors are written by
-- quantize. The write counts as a change for autograd (a backward that saved the tensor refuses to run). Each returns
-- the tensor.
local core = require "fp8.core"
local T = require "fp8.tensor"
local opts = require "fp8.opts"
local P = require "fp8._profiler"
local prof_push, prof_pop = P.push, P.pop
local Tensor = core.Tensor
local no_more, got = opts.no_more, opts.got
local check_self, check_live = T._check_self, T._check_live
local at_caller = T._at_caller   -- every method below raises its errors at the user's line

-- v's values into t as method `name` (v a tensor or a number); its refusals name the method
local function write(name, t, v) return t:_write_(v, name) end

-- A tensor operand that requires grad (a leaf that does, or a result of a graph) while grad mode is on: torch records
-- the in-place op (x gets a grad_fn, and the gradient reaches the operand: x:mul_(w) then a loss of x gives w.grad);
-- here the new values are computed from detached operands and nothing is recorded, so w's gradient would be lost
-- without a word (until stop 95 it was: w.grad stayed nil). Refused, as a write to an x in a graph is; under
-- fp8.no_grad (an optimizer's or an EMA's update) it is taken. `level` is the error's level, as error's.
local function check_operand(name, what, v, level)
  -- a released one is named by the method (v:requires_grad() would name itself: "calling 'requires_grad' on bad self")
  if core.is_tensor(v) then check_live(name, what, v, level + 1) end
  if core.is_tensor(v) and v:requires_grad() and core.is_grad_enabled() then
    error(("%s: %s %s, and the write in place records nothing for autograd (torch records it, and the gradient "
      .. "reaches %s): its gradient would be lost; compute out of place (y = x:%s(...)), or write under "
      .. "fp8.no_grad"):format(name, what, v:is_leaf() and "requires grad" or "is part of an autograd graph", what,
      (name:gsub("_$", ""))), level + 1)
  end
end

-- an operand: a live tensor (detached, so no graph is built for values that are written in place) or a number
local function operand(name, what, v)
  if core.is_tensor(v) then
    check_live(name, what, v, 4)
    check_operand(name, what, v, 4)
    return v:detach()
  end
  if type(v) ~= "number" then error(("%s: %s must be a tensor or a number, got %s"):format(name, what, got(v)), 4) end
  return v
end

-- the new values, computed by f, with a core error renamed to the method; the profiler records the method as one op
-- of its name, as torch records aten::add_ (the out-of-place ops computing it inside count no FLOPs: torch counts none
-- for an in-place op). f returns one value: no table of its results is made (stop 101: that table and the closing
-- call while nothing records were a quarter of what the hook cost a call)
local function compute(name, f, ...)
  local tok = prof_push(name, "op")
  local ok, v = pcall(f, ...)
  if tok ~= 0 then prof_pop(tok) end
  if ok then return v end
  local msg = tostring(v):gsub("^[^:\n]*%.lua:%d+: ", ""):gsub("^[%w_]+: ", "")
  error(("%s: %s"):format(name, msg), 3)
end

Tensor.copy_ = at_caller(function(t, src, ...)
  check_self("copy_", t); no_more("copy_", "(src)", ...)
  if not core.is_tensor(src) then error(("copy_: expected a source tensor, got %s"):format(got(src)), 2) end
  check_live("copy_", "the source", src); check_operand("copy_", "the source", src, 2)
  return write("copy_", t, src:detach())
end)

-- fill_(value): value a number or a one-element 0-d tensor (torch's)
Tensor.fill_ = at_caller(function(t, v, ...)
  check_self("fill_", t); no_more("fill_", "(value)", ...)
  if core.is_tensor(v) then
    check_live("fill_", "value", v); check_operand("fill_", "value", v, 2)
    if v:dim() ~= 0 then
      error(("fill_: value must be a number or a 0-d tensor, got a tensor of shape %s"):format(v:shape_str()), 2)
    end
    v = v:detach():float():item()
  elseif type(v) ~= "number" then
    error(("fill_: value must be a number or a 0-d tensor, got %s"):format(got(v)), 2)
  end
  return write("fill_", t, v)
end)

Tensor.zero_ = at_caller(function(t, ...)
  check_self("zero_", t); no_more("zero_", "no arguments", ...)
  return write("zero_", t, 0)
end)

-- alpha: torch's keyword, here a number or {alpha=}
local function alpha_of(name, a)
  if type(a) == "table" and not core.is_tensor(a) then a = opts.check(name, a, { "alpha" }, 4).alpha end
  if a ~= nil and type(a) ~= "number" then error(("%s: alpha must be a number, got %s"):format(name, got(a)), 4) end
  return a
end

Tensor.add_ = at_caller(function(t, y, alpha, ...)
  check_self("add_", t); no_more("add_", "(other [, alpha])", ...)
  y = operand("add_", "other", y); alpha = alpha_of("add_", alpha)
  return write("add_", t, compute("add_", function() return t:detach() + (alpha and y * alpha or y) end))
end)

Tensor.sub_ = at_caller(function(t, y, alpha, ...)
  check_self("sub_", t); no_more("sub_", "(other [, alpha])", ...)
  y = operand("sub_", "other", y); alpha = alpha_of("sub_", alpha)
  return write("sub_", t, compute("sub_", function() return t:detach() - (alpha and y * alpha or y) end))
end)

Tensor.mul_ = at_caller(function(t, y, ...)
  check_self("mul_", t); no_more("mul_", "(other)", ...)
  y = operand("mul_", "other", y)
  return write("mul_", t, compute("mul_", function() return t:detach() * y end))
end)

Tensor.div_ = at_caller(function(t, y, ...)
  check_self("div_", t); no_more("div_", "(other)", ...)
  y = operand("div_", "other", y)
  return write("div_", t, compute("div_", function() return t:detach() / y end))
end)

-- clamp_(min, max) / clamp_{min=, max=}: clamp's bounds (numbers or tensors)
Tensor.clamp_ = at_caller(function(t, lo, hi, ...)
  check_self("clamp_", t); no_more("clamp_", "(min, max) or ({min=, max=})", ...)
  local b = type(lo) == "table" and not core.is_tensor(lo) and lo or nil   -- {min=, max=}
  check_operand("clamp_", "min", b and rawget(b, "min") or lo, 2)
  check_operand("clamp_", "max", b and rawget(b, "max") or hi, 2)
  return write("clamp_", t, compute("clamp_", function() return t:detach():clamp(lo, hi) end))
end)

Tensor.masked_fill_ = at_caller(function(t, mask, value, ...)
  check_self("masked_fill_", t); no_more("masked_fill_", "(mask, value)", ...)
  check_operand("masked_fill_", "value", value, 2)
  return write("masked_fill_", t, compute("masked_fill_", function() return t:detach():masked_fill(mask, value) end))
end)

-- lerp(end, weight): t + weight·(end - t), torch's formula: for |weight| < 0.5 start + w·(end - start), else
-- end - (end - start)·(1 - w), so weight 1 gives end exactly. weight a number or a tensor (broadcast).
local function lerp(name, t, e, w)
  if not core.is_tensor(e) then error(("%s: expected end to be a tensor, got %s"):format(name, got(e)), 4) end
  check_live(name, "end", e, 4)
  if core.is_tensor(w) then check_live(name, "weight", w, 4)
  elseif type(w) ~= "number" then error(("%s: weight must be a number or a tensor, got %s"):format(name, got(w)), 4) end
  return compute(name, function()
    return T._low_in_fp32(function(s, f, wt)
      local d = f - s
      if type(wt) == "number" then
        if math.abs(wt) < 0.5 then return s + d * wt end
        return f - d * (1 - wt)
      end
      return T.where(wt:abs():lt(0.5), s + d * wt, f - d * (1 - wt))
    end, t, e, w)
  end)
end

Tensor.lerp = at_caller(function(t, e, w, ...)
  check_self("lerp", t); no_more("lerp", "(end, weight)", ...)
  return lerp("lerp", t, e, w)
end)

Tensor.lerp_ = at_caller(function(t, e, w, ...)
  check_self("lerp_", t); no_more("lerp_", "(end, weight)", ...)
  if core.is_tensor(e) then check_live("lerp_", "end", e); check_operand("lerp_", "end", e, 2); e = e:detach() end
  if core.is_tensor(w) then check_live("lerp_", "weight", w); check_operand("lerp_", "weight", w, 2); w = w:detach() end
  return write("lerp_", t, lerp("lerp_", t:detach(), e, w))
end)

-- scatter_, scatter_add_, index_add_, index_copy_, index_fill_: the out-of-place method's values (core/scatter.c,
-- lua/fp8/tensor_scatter.lua) written in place; the tensors read are detached
local function detached(v) return core.is_tensor(v) and v:detach() or v end
-- what each takes as its third argument, in the out-of-place forms' words
local SRC_WANTED = { scatter = "expected a src tensor or a number value", scatter_add = "expected a src tensor",
  index_add = "expected a source tensor", index_copy = "expected a source tensor",
  index_fill = "value must be a number or a 0-d tensor" }
for _, name in ipairs { "scatter", "scatter_add", "index_add", "index_copy", "index_fill" } do
  local m = name .. "_"
  local add = name == "index_add"
  local valued = name == "scatter" or name == "index_fill"   -- src may be a number (torch's value)
  local takes = add and "(dim, index, source [, {alpha=}])" or name:find("fill") and "(dim, index, value)"
    or "(dim, index, src)"
  Tensor[m] = at_caller(function(t, dim, index, src, ...)
    check_self(m, t)
    local alpha = add and (...) or nil
    if add then no_more(m, takes, select(2, ...)) else no_more(m, takes, ...) end
    if not core.is_tensor(index) then error(("%s: expected an index tensor, got %s"):format(m, got(index)), 2) end
    if not core.is_tensor(src) and not (valued and type(src) == "number") then
      error(("%s: %s, got %s"):format(m, SRC_WANTED[name], got(src)), 2)
    end
    for _, v in ipairs { index, src } do if core.is_tensor(v) then check_live(m, "an argument", v) end end
    check_operand(m, name == "index_fill" and "value" or "the source", src, 2)
    local d = t:detach()
    return write(m, t, compute(m, function()
      if add then return d:index_add(dim, detached(index), detached(src), alpha) end
      return d[name](d, dim, detached(index), detached(src))
    end))
  end)
end

-- The in-place form of every other out-of-place method here that torch has one of (torch 2.15's dir(torch.Tensor)):
-- x:exp_() writes x:exp()'s values into x, as the methods above do (the out-of-place method computes them from x
-- detached and its arguments detached, and checks the arguments itself, its refusals renamed to the in-place
-- method; t:_write_ refuses what it refuses for the others, and a result that does not broadcast to x's shape,
-- torch's "output with shape [3] doesn't match the broadcast shape [2, 3]"). Every result here is fp32, bf16 or fp16
-- (comparisons and logical ops give 1 and 0), which torch casts into a float x; float_power_ is the one whose result
-- (fp64 in torch) torch refuses to cast into a float x, below. Left out (docs/lua-api.md): the ones that change
-- x's shape or history in place (squeeze_, unsqueeze_, t_, transpose_, swapaxes_, swapdims_, set_, detach_).
local FORMS = {
  "abs", "neg", "sign", "sgn", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "square",
  "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "logit", "relu",
  "erf", "sinc", "frac", "floor", "ceil", "round", "trunc", "deg2rad", "rad2deg", "nan_to_num",
  "clamp_min", "clamp_max", "clip", "pow", "atan2", "hypot", "copysign", "fmod", "remainder", "floor_divide",
  "true_divide", "xlogy", "heaviside", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and",
  "logical_or", "logical_xor", "addcmul", "addcdiv", "addmm", "baddbmm", "cumsum", "cumprod", "tril", "triu",
  "renorm",
}
-- the forms whose values carry no gradient to an operand (comparisons and logical ops, torch's too): an operand that
-- requires grad is taken for them
local NO_GRADIENT = { eq = true, ne = true, lt = true, le = true, gt = true, ge = true, logical_and = true,
  logical_or = true, logical_xor = true }
for _, name in ipairs(FORMS) do
  local m = name .. "_"
  assert(Tensor[m] == nil, m)
  Tensor[m] = at_caller(function(t, ...)
    check_self(m, t)
    local args = table.pack(...)
    for i = 1, args.n do
      if core.is_tensor(args[i]) then
        check_live(m, "argument " .. i, args[i])
        if not NO_GRADIENT[name] then check_operand(m, "argument " .. i, args[i], 2) end
        args[i] = args[i]:detach()
      end
    end
    local d = t:detach()
    return write(m, t, compute(m, function() return d[name](d, table.unpack(args, 1, args.n)) end))
  end)
end

-- float_power_(exponent): torch's result is fp64, which it refuses to write into a float x (only a double x takes
-- it); fp8lab has no fp64 tensor, so it is refused whatever x is, with torch's reason
Tensor.float_power_ = at_caller(function(t, ...)
  check_self("float_power_", t)
  error(("float_power_: the base has dtype %s but the operation's result requires dtype fp64 (torch's float_power "
    .. "computes in double, and in place only a double tensor takes it); fp8lab has no fp64 tensor: write "
    .. "x:copy_(x:float_power(e)) to round the result into x"):format(t:dtype()), 2)
end)

-- bernoulli_([p=0.5]): x filled with 1 with probability p, else 0 (torch's: p a number in [0, 1] or a tensor of
-- probabilities that broadcasts to x), from fp8's generator; the out-of-place bernoulli() takes x as the probabilities
Tensor.bernoulli_ = at_caller(function(t, p, ...)
  check_self("bernoulli_", t); no_more("bernoulli_", "([p=0.5])", ...)
  if p == nil then p = 0.5 end
  local probs
  if core.is_tensor(p) then
    check_live("bernoulli_", "p", p)
    probs = p:detach()
  elseif type(p) == "number" then
    if not (p >= 0 and p <= 1) then error(("bernoulli_: p must be in [0, 1], got %s"):format(got(p)), 2) end
    probs = core.full({}, p, { device = t:device() })
  else
    error(("bernoulli_: p must be a number or a tensor, got %s"):format(got(p)), 2)
  end
  return write("bernoulli_", t, compute("bernoulli_", function()
    local e = probs:float():expand(t:shape())
    return e:contiguous():bernoulli()
  end))
end)

-- uniform_(a=0, b=1), normal_(mean=0, std=1): fresh draws from fp8's generator (fp8.nn.init's), written in place
Tensor.uniform_ = at_caller(function(t, a, b, ...)
  check_self("uniform_", t); no_more("uniform_", "([a=0 [, b=1]])", ...)
  return write("uniform_", t, compute("uniform_", require("fp8.nn.init_fns").uniform, t:shape(), a, b, t:dtype()))
end)

Tensor.normal_ = at_caller(function(t, mean, std, ...)
  check_self("normal_", t); no_more("normal_", "([mean=0 [, std=1]])", ...)
  return write("normal_", t, compute("normal_", require("fp8.nn.init_fns").normal, t:shape(), mean, std))
end)

return {}
