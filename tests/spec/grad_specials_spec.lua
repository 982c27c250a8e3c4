-- The values and gradients of 64 pointwise ops at special points (NaN, ±inf, ±0, ±subnormal, ±3e38, 1e-30 and a few
-- ordinary values), each gradient for the upstream gradients 1, NaN and -0, against PyTorch 2.x's
-- (tests/data/grad_specials_torch.lua, written by scripts/gen_grad_specials.py). Written on 2026-12-05 (stop 89)
-- after dropout's backward was found to turn a NaN gradient into 0 where torch's keeps it.
-- Equal means: NaN with NaN; a zero with a zero of either sign (fp8lab's backward kernels write a literal 0 where a
-- piece of a function is flat, torch's multiply the upstream gradient by 0, so a -0 upstream gives -0 there: the sign
-- of a zero gradient moves nothing); finite values within 1e-6 relative (fp8lab's sigmoid and GELU derivatives are
-- computed from x in higher precision and land up to 7 fp32 ulps from torch's, closer to the exact derivative:
-- GELU'(-2) = -0.0852318010..., fp8lab -0.0852317959, torch -0.0852318704). Every other difference is listed in
-- DIFFERS with its reason, and each listed one must still differ from torch's, so the list cannot go stale.
local F = fp8.nn.functional
local ref = dofile("tests/data/grad_specials_torch.lua")
local XS = ref.xs
local N = #XS
local INF, NAN = math.huge, 0 / 0

local ONES, ZEROS = fp8.ones(N), fp8.zeros(N)
local function m(name, ...)   -- the method `name`, with these arguments after the tensor
  local args = table.pack(...)
  return function(t) return t[name](t, table.unpack(args, 1, args.n)) end
end
local OPS = {
  neg = function(t) return -t end, exp_scalar = function(t) return fp8.pow(2, t) end,
  zero_pow = function(t) return fp8.pow(0, t) end,
  pow2 = m("pow", 2), pow05 = m("pow", 0.5), pow3 = m("pow", 3), powm1 = m("pow", -1), pow0 = m("pow", 0),
  clamp = m("clamp", -1, 1), relu = F.relu, gelu = F.gelu, gelu_tanh = function(t) return F.gelu(t, "tanh") end,
  silu = F.silu, softplus = F.softplus, elu = F.elu, leaky_relu = function(t) return F.leaky_relu(t, 0.01) end,
  hardtanh = F.hardtanh, mish = F.mish, logsigmoid = F.logsigmoid, softsign = F.softsign, selu = F.selu,
  celu = F.celu, hardswish = F.hardswish, hardsigmoid = F.hardsigmoid, relu6 = F.relu6, tanhshrink = F.tanhshrink,
  softshrink = F.softshrink, hardshrink = F.hardshrink,
  atan2y = function(t) return fp8.atan2(t, ONES) end, atan2x = function(t) return fp8.atan2(ONES, t) end,
  fmod = function(t) return fp8.fmod(t, 1.5) end, remainder = function(t) return fp8.remainder(t, 1.5) end,
  dropout1 = function(t) return F.dropout(t, 1.0) end,
  maximum0 = function(t) return fp8.maximum(t, ZEROS) end, minimum0 = function(t) return fp8.minimum(t, ZEROS) end,
  xlogx = function(t) return t * t:log() end,
}
for _, name in ipairs { "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid", "erf", "log1p",
                        "expm1", "asin", "acos", "atan", "sinh", "cosh", "log2", "log10", "exp2", "floor", "ceil",
                        "round", "trunc", "sign", "reciprocal", "square" } do
  OPS[name] = m(name)
end
local UPSTREAM = { g1 = function() return fp8.ones(N) end, gnan = function() return fp8.full({ N }, NAN) end,
                   gnegzero = function() return fp8.full({ N }, -0.0) end }

-- fp8lab's value where it differs from torch's on purpose: [key][index of XS] = fp8lab's value
local DIFFERS = {
  -- sign(NaN): NaN, as C's and NumPy's (torch's sign(NaN) is 0); |x|'s gradient at NaN is torch's 0 since stop 102
  -- (g·sgn(x); it was NaN)
  sign = { [1] = NAN },
  -- a NaN input to hardtanh, relu6, softshrink and hardshrink passes the upstream gradient, as ReLU's does in
  -- both (torch's backward of these four gives 0 there)
  hardtanh_g1 = { [1] = 1 }, hardtanh_gnan = { [1] = NAN }, relu6_g1 = { [1] = 1 }, relu6_gnan = { [1] = NAN },
  softshrink_g1 = { [1] = 1 }, softshrink_gnan = { [1] = NAN },
  hardshrink_g1 = { [1] = 1 }, hardshrink_gnan = { [1] = NAN },
  -- (x^0.5 at -inf and its gradient at -0 and -inf were C pow's +inf, 0 and +inf, torch's sqrt NaN, NaN and -inf,
  -- until stop 98: the core takes sqrt and rsqrt for the exponents 0.5 and -0.5 now, as torch's; gaps15b_spec)
  -- a derivative that overflows meets an upstream gradient of -0: torch forms the derivative first (2·3e38 = inf,
  -- then inf·-0 = NaN), fp8lab scales the upstream gradient first (a zero)
  pow2_gnegzero = { [14] = 0, [15] = 0 }, square_gnegzero = { [14] = 0, [15] = 0 },
  reciprocal_gnegzero = { [6] = 0, [7] = 0, [16] = 0 }, rsqrt_gnegzero = { [6] = 0, [16] = 0 },
  -- GELU(+inf) = +inf (torch's NaN) and GELU(3e38) = 3e38 (torch's product overflows to inf); hardswish(-inf) = 0
  -- (torch's -inf·0 = NaN) and hardswish(3e38) = 3e38 (torch's x·6 overflows before the division by 6)
  gelu = { [2] = INF, [14] = 3e38 }, hardswish = { [3] = 0, [14] = 3e38 },
}

local function same(a, b)
  if a ~= a or b ~= b then return a ~= a and b ~= b end
  if a == b then return true end   -- ±0 included
  if a == INF or a == -INF or b == INF or b == -INF then return false end
  return math.abs(a - b) <= 1e-6 * math.abs(b)
end

local function check(key, got)
  local want, differs, bad = ref[key], DIFFERS[key] or {}, {}
  assert(want, "no reference for " .. key)
  for i = 1, N do
    local d = differs[i]
    if d ~= nil then
      if not same(got[i], d) then
        bad[#bad + 1] = ("x=%s: %s, listed as %s"):format(XS[i], got[i], d)
      elseif same(want[i], d) then
        bad[#bad + 1] = ("x=%s: listed as differing, but torch's is %s too"):format(XS[i], want[i])
      end
    elseif not same(got[i], want[i]) then
      bad[#bad + 1] = ("x=%s: %s, torch %s"):format(XS[i], got[i], want[i])
    end
  end
  return bad
end

describe("pointwise ops at special points against torch", function()
  local names = {}
  for k in pairs(OPS) do names[#names + 1] = k end
  table.sort(names)

  it("the values", function()
    local bad = {}
    for _, name in ipairs(names) do
      for _, b in ipairs(check(name, OPS[name](fp8.tensor(XS)):totable())) do bad[#bad + 1] = name .. " " .. b end
    end
    assert(#bad == 0, table.concat(bad, "\n"))
  end)

  it("the gradients for upstream gradients 1, NaN and -0", function()
    local bad = {}
    for _, name in ipairs(names) do
      for kind, g in pairs(UPSTREAM) do
        local x = fp8.tensor(XS):requires_grad_()
        OPS[name](x):backward(g())
        local key = name .. "_" .. kind
        for _, b in ipairs(check(key, x.grad:totable())) do bad[#bad + 1] = key .. " " .. b end
      end
    end
    assert(#bad == 0, table.concat(bad, "\n"))
  end)

  it("runs every op of the reference, and every listed difference names an op and a kind the reference has", function()
    local n = 0
    for key in pairs(ref) do
      if key ~= "xs" and not key:find("_g") then
        n = n + 1
        assert(OPS[key], "the reference has " .. key .. ", which the spec does not run")
      end
    end
    assert.are.equal(64, n)
    for key in pairs(DIFFERS) do assert(ref[key], "DIFFERS lists " .. key .. ", which the reference lacks") end
  end)
end)
