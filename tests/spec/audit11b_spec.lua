-- Found on 2026-12-06 (stop 95): the gaps stop 94 left (hypot's gradient at subnormal operands, a CyclicLR's
-- base_lrs in a loaded state dict) and torch's in-place tensor methods that fp8lab lacked (exp_, log_, ...).
-- docs/robustness.md, "The gaps stop 94 left, and torch's in-place forms (stop 95)".
-- The expected values are torch's, from the python lines quoted beside each case (/opt/torch2/bin/python, torch 2.15).
local U = require "tests.spec.helpers.util"

-- a's and b's elements the same floats (NaN matching NaN)
local function same_values(a, b)
  local x, y = U.flat(a), U.flat(b)
  assert.are.equal(#x, #y)
  for i = 1, #x do
    if x[i] ~= x[i] then assert.is_true(y[i] ~= y[i], ("element %d: %s, expected NaN"):format(i, y[i]))
    else assert.are.equal(x[i], y[i], ("element %d"):format(i)) end
  end
end

-- torch 2.15's in-place tensor methods:
--   /opt/torch2/bin/python -c "import torch; print(' '.join(m for m in dir(torch.Tensor) if m.endswith('_') and
--   not m.startswith('_')))"
local TORCH_INPLACE = [[
  abs_ absolute_ acos_ acosh_ add_ addbmm_ addcdiv_ addcmul_ addmm_ addmv_ addr_ apply_ arccos_ arccosh_ 
  arcsin_ arcsinh_ arctan2_ arctan_ arctanh_ as_strided_ asin_ asinh_ atan2_ atan_ atanh_ baddbmm_ bernoulli_ 
  bitwise_and_ bitwise_left_shift_ bitwise_not_ bitwise_or_ bitwise_right_shift_ bitwise_xor_ cauchy_ ceil_ 
  clamp_ clamp_max_ clamp_min_ clip_ conj_physical_ copy_ copysign_ cos_ cosh_ cumprod_ cumsum_ deg2rad_ 
  detach_ digamma_ div_ divide_ eq_ erf_ erfc_ erfinv_ exp2_ exp_ expm1_ exponential_ fill_ fill_diagonal_ 
  fix_ float_power_ floor_ floor_divide_ fmod_ frac_ gcd_ ge_ geometric_ greater_ greater_equal_ gt_ 
  heaviside_ hypot_ i0_ igamma_ igammac_ index_add_ index_copy_ index_fill_ index_put_ index_reduce_ lcm_ 
  ldexp_ le_ lerp_ less_ less_equal_ lgamma_ log10_ log1p_ log2_ log_ log_normal_ logical_and_ logical_not_ 
  logical_or_ logical_xor_ logit_ lt_ map2_ map_ masked_fill_ masked_scatter_ mul_ multiply_ mvlgamma_ 
  nan_to_num_ ne_ neg_ negative_ nextafter_ normal_ not_equal_ polygamma_ pow_ put_ rad2deg_ random_ 
  reciprocal_ relu_ remainder_ renorm_ requires_grad_ resize_ resize_as_ resize_as_sparse_ round_ rsqrt_ 
  scatter_ scatter_add_ scatter_reduce_ set_ sgn_ share_memory_ sigmoid_ sign_ sin_ sinc_ sinh_ 
  sparse_resize_ sparse_resize_and_clear_ sqrt_ square_ squeeze_ sub_ subtract_ swapaxes_ swapdims_ t_ tan_ 
  tanh_ transpose_ tril_ triu_ true_divide_ trunc_ uniform_ unsqueeze_ xlogy_ zero_ ]]
-- left out on purpose (docs/lua-api.md): they change the tensor's shape or history in place
local LEFT_OUT = { squeeze_ = true, unsqueeze_ = true, t_ = true, transpose_ = true, swapaxes_ = true,
  swapdims_ = true, set_ = true, detach_ = true }

describe("in-place forms: torch's x:<op>_() for each out-of-place op fp8lab has", function()
  it("exists for every one of torch's in-place methods whose out-of-place form exists here", function()
    -- before stop 95, 77 were missing: exp_, log_, sqrt_, clamp_min_, eq_, cumsum_, ...
    local x = fp8.tensor { 1, 2 }
    local missing = {}
    for m in TORCH_INPLACE:gmatch("%S+") do
      local base = m:sub(1, -2)
      if x[m] == nil and x[base] ~= nil and not LEFT_OUT[m] then missing[#missing + 1] = m end
    end
    assert.are.same({}, missing)
  end)

  -- name -> a function giving (x, args...) for it
  local pos = function(...) return fp8.rand { 3, 4 } + 0.25, ... end
  local any = function(...) return fp8.randn { 3, 4 }, ... end
  local CASES = {
    abs = { any }, neg = { any }, sign = { any }, sgn = { any }, exp = { any }, exp2 = { any }, expm1 = { any },
    log = { any }, log2 = { pos }, log10 = { pos }, log1p = { any }, sqrt = { any }, rsqrt = { pos },
    square = { any }, reciprocal = { any }, sin = { any }, cos = { any }, tan = { any }, asin = { any },
    acos = { any }, atan = { any }, sinh = { any }, cosh = { any }, tanh = { any }, sigmoid = { any },
    logit = { pos }, relu = { any }, erf = { any }, sinc = { any }, frac = { any }, floor = { any },
    ceil = { any }, round = { any }, trunc = { any }, deg2rad = { any }, rad2deg = { any },
    nan_to_num = { function() return fp8.tensor { 0 / 0, math.huge, -math.huge, 1 } end },
    clamp_min = { any, 0 }, clamp_max = { any, 0.5 }, clip = { any, -0.5, 0.5 }, pow = { pos, 1.5 },
    atan2 = { any, "T" }, hypot = { any, "T" }, copysign = { any, "T" }, fmod = { any, "T" },
    remainder = { any, "T" }, floor_divide = { any, "T" }, true_divide = { any, "T" }, xlogy = { pos, "T" },
    heaviside = { any, "T" }, eq = { any, 0 }, ne = { any, 0 }, lt = { any, "T" }, le = { any, "T" },
    gt = { any, "T" }, ge = { any, "T" }, logical_not = { any }, logical_and = { any, "T" },
    logical_or = { any, "T" }, logical_xor = { any, "T" }, addcmul = { any, "T", "T", 0.5 },
    addcdiv = { pos, "T", "P", 0.5 }, cumsum = { any, 2 }, cumprod = { any, 1 }, tril = { any }, triu = { any, 1 },
    renorm = { any, 2, 1, 1.0 },
    addmm = { function() return fp8.randn { 3, 4 }, fp8.randn { 3, 2 }, fp8.randn { 2, 4 } end },
    baddbmm = { function() return fp8.randn { 2, 3, 4 }, fp8.randn { 2, 3, 5 }, fp8.randn { 2, 5, 4 } end },
  }
  local function case(name)
    fp8.manual_seed(7)
    local spec = CASES[name]
    local x, a1, a2, a3 = spec[1]()
    local args = {}
    for i = 2, #spec do
      local v = spec[i]
      if v == "T" then v = fp8.randn { 3, 4 } elseif v == "P" then v = fp8.rand { 3, 4 } + 0.5 end
      args[#args + 1] = v
    end
    if a1 then args = { a1, a2, a3 } end
    return x, args
  end

  it("writes the out-of-place op's values, bumps the version and returns x", function()
    local n = 0
    for name in pairs(CASES) do
      local x, args = case(name)
      local want = x[name](x, table.unpack(args))
      local v0 = x._version
      local r = x[name .. "_"](x, table.unpack(args))
      assert.are.equal(x, r, name)
      assert.are.equal(v0 + 1, x._version, name)
      same_values(want, x)
      n = n + 1
    end
    assert.are.equal(69, n)
  end)

  it("writes through a view to its base, in the base's dtype", function()
    local base = fp8.tensor { { 1, 2, 3 }, { 4, 5, 6 } }:to("bf16")
    local col = base:select(2, 2)
    col:exp_()
    same_values(fp8.tensor { { 1, 2, 3 }, { 4, 5, 6 } }:to("bf16"):select(2, 2):exp(), base:select(2, 2))
    assert.are.same({ 1, 3, 4, 6 }, { base:get { 1, 1 }, base:get { 1, 3 }, base:get { 2, 1 }, base:get { 2, 3 } })
    assert.are.equal("bf16", base:dtype())
    -- torch: a bf16 x with an fp32 other keeps bf16 (the fp32 result cast into it)
    local b = fp8.tensor { 1, 2, 3 }:to("bf16")
    b:hypot_(fp8.tensor { 1e-3, 2, 3 })
    assert.are.equal("bf16", b:dtype())
    same_values(fp8.tensor { 1, 2, 3 }:hypot(fp8.tensor { 1e-3, 2, 3 }):to("bf16"), b)
  end)

  it("refuses what the other in-place writes refuse, naming the in-place method", function()
    local w = fp8.randn { 3 }:requires_grad_()
    U.fails_with("exp_: the tensor requires grad", function() return w:exp_() end)
    fp8.no_grad(function() w:abs_() end)   -- an optimizer's or an EMA's write
    assert.is_true(w:min():item() >= 0)
    local q = fp8.tensor { 1, 2 }:quantize("e4m3")
    U.fails_with("log_:", function() return q:log_() end)
    local x = fp8.tensor { 1, 2, 3 }
    U.fails_with("exp_: takes no arguments", function() return x:exp_(1) end)
    U.fails_with("clamp_min_: min must be", function() return x:clamp_min_("a") end)
    -- torch: RuntimeError: output with shape [3] doesn't match the broadcast shape [2, 3]
    U.fails_with("eq_: a source of shape [2, 3] does not broadcast to the tensor's shape [3]",
      function() return x:eq_(fp8.ones { 2, 3 }) end)
    U.fails_with("atan2_: more than one element of the tensor refers to one memory location", function() return fp8.ones { 3 }:expand { 2, 3 }:atan2_(fp8.ones { 2, 3 }) end)
    assert.are.same({ 1, 2, 3 }, x:totable())
  end)

  it("float_power_ is refused, as torch refuses it on a float tensor", function()
    -- torch.ones(2).float_power_(2)  # RuntimeError: the base given to float_power_ has dtype Float but the
    -- operation's result requires dtype Double
    local x = fp8.ones { 2 }
    U.fails_with({ "float_power_: the base has dtype fp32", "requires dtype fp64" }, function() return x:float_power_(2) end)
    assert.are.equal(0, x._version)
  end)

  it("bernoulli_(p) draws with probability p (torch's), not with x as probabilities", function()
    local x = fp8.full({ 4000 }, 0.9)
    x:bernoulli_(0.25)
    local m = x:mean():item()
    assert.is_true(m > 0.2 and m < 0.3, tostring(m))
    for _, v in ipairs(x:totable()) do assert.is_true(v == 0 or v == 1) end
    local y = fp8.zeros { 2, 3 }:bernoulli_(fp8.tensor { 0, 1, 0 })
    assert.are.same({ { 0, 1, 0 }, { 0, 1, 0 } }, y:totable())
    U.fails_with("bernoulli_: p must be in [0, 1], got 2", function() return fp8.zeros { 2 }:bernoulli_(2) end)
  end)
end)

describe("CyclicLR: base_lrs loaded from a state dict (or written) is honoured, as torch's get_lr reads it", function()
  local function make()
    local o = fp8.optim.SGD({ { params = { fp8.zeros { 1 }:requires_grad_() } },
      { params = { fp8.zeros { 1 }:requires_grad_() } } }, { lr = 0.1 })
    return o, fp8.optim.lr_scheduler.CyclicLR(o, { base_lr = 0.01, max_lr = { 0.1, 0.2 }, step_size_up = 4,
      cycle_momentum = false })
  end
  local function next_rows(o, s, n)
    local rows = {}
    for _ = 1, n do
      o:step(); s:step()
      rows[#rows + 1] = { o.param_groups[1].lr, o.param_groups[2].lr }
    end
    return rows
  end
  local function close_rows(want, got)
    for r = 1, #want do
      for i = 1, 2 do assert.is_true(math.abs(want[r][i] - got[r][i]) <= 1e-12, ("row %d group %d: %s, expected %s")
        :format(r, i, got[r][i], want[r][i])) end
    end
  end
  -- scripts/gen_audit11b.py, cyclic_loaded: three steps, base_lrs set to [0.05, 0.0] in the state, loaded into a new
  -- one; the lrs after each of the next 6 steps. Before: base_lr's 0.01 went on (0.0775, 0.1525 at the first)
  local TORCH = { { 0.1, 0.2 }, { 0.0875, 0.15 }, { 0.075, 0.1 }, { 0.0625, 0.05 }, { 0.05, 0.0 }, { 0.0625, 0.05 } }
  it("from a loaded state dict", function()
    local o, s = make()
    for _ = 1, 3 do o:step(); s:step() end
    local sd = s:state_dict()
    sd.base_lrs = { 0.05, 0.0 }
    local o2, s2 = make()
    s2:load_state_dict(sd)
    assert.are.same({ 0.05, 0.0 }, s2.base_lrs)
    close_rows(TORCH, next_rows(o2, s2, 6))
  end)
  it("written by hand mid-run", function()
    local o, s = make()
    for _ = 1, 3 do o:step(); s:step() end
    s.base_lrs = { 0.05, 0.0 }
    close_rows(TORCH, next_rows(o, s, 6))
  end)
  it("a state saved before stop 95 still loads (its schedule probe is the same)", function()
    -- make()'s state after 3 steps from the code before the fix (main at eefd0ab): its `schedule` entry
    local old = { last_epoch = 3, name = "CyclicLR", base_lrs = { 0.01, 0.01 }, schedule = { 0.01,
      0.032500000000000001, 0.055000000000000007, 0.077499999999999999, 0.10000000000000001, 0.077499999999999999,
      0.055000000000000007, 0.032500000000000001, 0.01, 0.055000000000000007, 0.10000000000000001,
      0.032500000000000001, 0.01, 0.10000000000000001, 0.032500000000000001, 0.055000000000000007, 0.01, 0.01,
      0.055000000000000007, 0.01, 0.077499999999999999, 0.10000000000000001, 0.01, 0.055000000000000007, 0.01, 0.01,
      0.10000000000000001, 0.10000000000000001, 0.055000000000000007, 0.01, 0.01, 0.01, 0.01, 0.01 } }
    local o, s = make()
    s:load_state_dict(old)
    assert.is_true(math.abs(o.param_groups[1].lr - 0.0775) < 1e-12)
    assert.are.same(old.schedule, s:state_dict().schedule)
  end)
end)

describe("hypot's gradient is right for every finite pair (one node, HypotBackward)", function()
  local inf, nan = math.huge, 0 / 0
  -- scripts/gen_audit11b.py, hypot: torch's value and gradients (x/h, y/h); where torch's x/h is off (h subnormal
  -- or overflowed) the expected gradient is the derivative at the fp32 operands, x/√(x² + y²) in float64 rounded to
  -- fp32 (/opt/torch2/bin/python: a = float(np.float32(x)); a / math.hypot(a, b)); torch's beside it in a comment
  local CASES = {
    { 3e-40, 4e-40, 5.000001076526666e-40, 0.5999991297721863, 0.8000006675720215 },   -- torch 0.59999943, 0.80000114
    { 1e-45, 1e-45, 1.401298464324817e-45, 0.7071067690849304, 0.7071067690849304 },   -- torch 1, 1
    { 1e-45, 1e-30, 1.0000000031710769e-30, 1.4012984854108084e-15, 1.0 },
    { 1e-30, 1e-30, 1.4142135555081815e-30, 0.7071067690849304, 0.7071067690849304 },
    { 3.0, 4.0, 5.0, 0.6000000238418579, 0.800000011920929 },
    { 0.0, -2.0, 2.0, 0.0, -1.0 },
    { 1e38, 1e38, 1.4142135230892728e+38, 0.7071067690849304, 0.7071067690849304 },
    { 3e38, 1.0, 3.0000000054977558e+38, 1.0, 3.333333116818801e-39 },
    { 1e20, 1e-20, 1.0000000200408773e+20, 1.0, 9.99994610111476e-41 },
    { -3e-40, 4e-40, 5.000001076526666e-40, -0.5999991297721863, 0.8000006675720215 },
    { 1e-45, 0.0, 1.401298464324817e-45, 1.0, 0.0 },
    { inf, 1.0, inf, nan, 0.0 },
    { 1.0, -inf, inf, 0.0, nan },
    { inf, inf, inf, nan, nan },
    { nan, 1.0, nan, nan, nan },
    { nan, inf, inf, nan, nan },
    { 3e38, 3e38, inf, 0.7071067690849304, 0.7071067690849304 },   -- torch 0, 0 (h overflowed)
    { 0.0, 0.0, 0.0, 0.0, 0.0 },   -- torch nan, nan (0/0); fp8lab's 0, as documented
  }
  local function close(want, got, what)
    if want ~= want then assert.is_true(got ~= got, ("%s: %s, expected NaN"):format(what, got)); return end
    if want == 0 or math.abs(want) == inf then assert.are.equal(want, got, what); return end
    assert.is_true(math.abs(got - want) <= 2 ^ -22 * math.abs(want), ("%s: %.9g, expected %.9g"):format(what, got, want))
  end
  it("values and gradients: torch's, or the exact derivative where torch's x/h is off", function()
    local A, B = {}, {}
    for i, c in ipairs(CASES) do A[i], B[i] = c[1], c[2] end
    local a, b = fp8.tensor(A):requires_grad_(), fp8.tensor(B):requires_grad_()
    local h = a:hypot(b)
    h:sum():backward()
    local H, GA, GB = h:totable(), a.grad:totable(), b.grad:totable()
    for i, c in ipairs(CASES) do
      local at = ("(%g, %g)"):format(c[1], c[2])
      close(c[3], H[i], "hypot" .. at); close(c[4], GA[i], "x's gradient at " .. at)
      close(c[5], GB[i], "y's gradient at " .. at)
    end
    assert.are.equal("HypotBackward", h:grad_fn())
  end)
  it("broadcasts, sums each gradient to its operand's shape, and keeps the dtype rule", function()
    local a = fp8.tensor { { 3e-40 }, { 3 } }:requires_grad_()
    local b = fp8.tensor { { 4e-40, 4 } }:to("bf16"):requires_grad_()
    local h = a:hypot(b)
    assert.are.equal("fp32", h:dtype())
    assert.are.same({ 2, 2 }, h:shape())
    h:sum():backward()
    assert.are.same({ 2, 1 }, a.grad:shape()); assert.are.same({ 1, 2 }, b.grad:shape())
    -- the derivative at the operands' own values (bf16's 4e-40 is 3.67e-40), summed over b's two
    local a1, b1, b2 = a:get { 1, 1 }, b:get { 1, 1 }, b:get { 1, 2 }
    local want = a1 / math.sqrt(a1 ^ 2 + b1 ^ 2) + a1 / math.sqrt(a1 ^ 2 + b2 ^ 2)
    assert.is_true(math.abs(a.grad:get { 1, 1 } - want) < 1e-6 * want, tostring(a.grad:get { 1, 1 }))
    assert.are.equal("bf16", fp8.tensor { 3 }:to("bf16"):hypot(fp8.tensor { 4 }:to("bf16")):dtype())
    U.fails_with("hypot: e4m3 tensor: call :dequantize() first",
      function() return fp8.tensor { 1 }:hypot(fp8.tensor { 1 }:quantize("e4m3")) end)
  end)
end)
