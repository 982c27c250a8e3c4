-- Found on 2026-12-07 (stop 98): three torch-parity gaps review 15 left, each older than stop 97: F.normalize
-- refused p < 1 (torch 2.15 takes any p), x^0.5 and x^-0.5 gave C pow's values at -0 and -inf (torch's are sqrt's
-- and rsqrt's), and dist with p < 1 gave a zero element of a NaN (or inf) distance the gradient 0 (torch's NaN).
-- docs/robustness.md, "The gaps review 15 left (stop 98)".
local U = dofile("tests/spec/helpers/util.lua")
local F = fp8.nn.functional

local NAN, INF = 0 / 0, math.huge

local near = U.near   -- got equals torch's want (NaN, infinities, signed zeros, within rel)

-- torch 2.15's F.normalize(x, p=p, dim=1) and the gradient of Σ y·W (scripts/gen_gaps15b.py:
-- /opt/torch2/bin/python scripts/gen_gaps15b.py): a row with a zero, a zero row, a NaN row, a row without zeros and
-- a row with a tie for the smallest |x|. torch 2.15.0
local X = { { 3.0, 0.0, -4.0 }, { 0.0, 0.0, 0.0 }, { 1e-3, 2.0, NAN }, { 0.5, -2.0, 1.0 }, { 2.0, -2.0, 3.0 } }
local W = { { 1.0, 2.0, 3.0 }, { 4.0, 5.0, 6.0 }, { 7.0, 8.0, 9.0 }, { -1.0, 0.5, 2.0 }, { 1.0, -3.0, 0.25 } }
local G0 = { 3999999983616.0, 4999999913984.0, 6000000106496.0 }   -- the zero row's gradient: W / eps, every p
local NORMALIZE = {
  { p = 0.5,
    y = { { 0.21539030969142914, 0, -0.2871870696544647 }, { 0, 0, 0 }, { NAN, NAN, NAN }, { 0.05132078751921654, -0.20528315007686615, 0.10264157503843307 }, { 0.0961632952094078, -0.0961632952094078, 0.1442449390888214 } },
    g = { { 0.17175975441932678, 0.14359353482723236, 0.12881982326507568 }, G0, { NAN, NAN, NAN }, { -0.12589408457279205, 0.06294704228639603, 0.18884113430976868 }, { -0.01715056225657463, -0.07901272922754288, -0.04124146327376366 } } },
  { p = 0.3,
    y = { { 0.08565444499254227, 0, -0.11420592665672302 }, { 0, 0, 0 }, { NAN, NAN, NAN }, { 0.012239811010658741, -0.048959244042634964, 0.024479622021317482 }, { 0.02230938710272312, -0.02230938710272312, 0.03346408158540726 } },
    g = { { 0.06953175365924835, 0.05710296332836151, 0.052148815244436264 }, G0, { NAN, NAN, NAN }, { -0.031012989580631256, 0.014715494588017464, 0.044937483966350555 }, { -0.004440184682607651, -0.01786920428276062, -0.008952680043876171 } } },
  { p = 0,
    y = { { 1.5, 0, -2.0 }, { 0, 0, 0 }, { 0.0003333333588670939, 0.6666666865348816, NAN }, { 0.1666666716337204, -0.6666666865348816, 0.3333333432674408 }, { 0.6666666865348816, -0.6666666865348816, 1.0 } },
    g = { { 0.5, 1.0, 1.5 }, G0, { 2.3333332538604736, 2.6666667461395264, 3.0 }, { -0.3333333432674408, 0.1666666716337204, 0.6666666865348816 }, { 0.3333333432674408, -1.0, 0.0833333358168602 } } },
  { p = -0.5,
    y = { { 3000000053248.0, 0, -3999999983616.0 }, { 0, 0, 0 }, { NAN, NAN, NAN }, { 4.8713202476501465, -19.485280990600586, 9.742640495300293 }, { 7.932652950286865, -7.932652950286865, 11.898979187011719 } },
    g = { { 999999995904.0, 1999999991808.0, 3000000053248.0 }, G0, { NAN, NAN, NAN }, { -14.156854629516602, 5.423097133636475, 17.92462158203125 }, { -2.1947591304779053, -5.737893581390381, -2.362088680267334 } } },
  { p = -1.0,
    y = { { 3000000053248.0, 0, -3999999983616.0 }, { 0, 0, 0 }, { NAN, NAN, NAN }, { 1.7499998807907104, -6.999999523162842, 3.499999761581421 }, { 2.6666667461395264, -2.6666667461395264, 4.0 } },
    g = { { 999999995904.0, 1999999991808.0, 3000000053248.0 }, G0, { NAN, NAN, NAN }, { -5.5, 1.8749998807907104, 6.499999523162842 }, { -0.8541666269302368, -1.8125, -0.638888955116272 } } },
  { p = -INF,
    y = { { 3000000053248.0, 0, -3999999983616.0 }, { 0, 0, 0 }, { NAN, NAN, NAN }, { 1.0, -4.0, 2.0 }, { 1.0, -1.0, 1.5 } },
    g = { { 999999995904.0, 1999999991808.0, 3000000053248.0 }, G0, { NAN, NAN, NAN }, { -4.0, 1.0, 4.0 }, { -0.59375, -0.40625, 0.125 } } },
}

describe("F.normalize takes any p but NaN, as torch 2.15", function()
  for _, c in ipairs(NORMALIZE) do
    it(("p = %g: torch's values and gradients"):format(c.p), function()
      local x = fp8.tensor(X):requires_grad_()
      local y = F.normalize(x, { p = c.p });
      (y * fp8.tensor(W)):sum():backward()
      near(c.y, y:totable(), 4e-6, "y")
      near(c.g, x.grad:totable(), 4e-6, "grad")
    end)
  end
  it("p = 0.5 in bf16 and fp16 within their rounding of torch's fp32 values", function()
    for _, dt in ipairs { "bf16", "fp16" } do
      local y = F.normalize(fp8.tensor({ { 3.0, 0.0, -4.0 }, { 0.5, -2.0, 1.0 } }):to(dt), { p = 0.5 }):float():totable()
      near({ { 0.21539030969142914, 0, -0.2871870696544647 }, { 0.05132078751921654, -0.20528315007686615,
        0.10264157503843307 } }, y, dt == "bf16" and 2 ^ -7 or 2 ^ -10, dt)
    end
  end)
  it("refuses a NaN p (torch returns NaN everywhere) and a p that is not a number, by name", function()
    local z = fp8.ones { 2, 3 }
    U.fails_with("normalize: p must be a number (math.huge and -math.huge included, NaN not), got ", F.normalize, z,
      { p = NAN })
    U.fails_with("normalize: p must be a number (math.huge and -math.huge included, NaN not), got \"2\" (a string)",
      F.normalize, z, { p = "2" })
  end)
end)

-- torch 2.15's x.pow(0.5) and x.pow(-0.5) and their gradients (ones backward) at {-0, -inf, 0, inf, 4, -4, 2.25}:
-- sqrt's and rsqrt's values at -0 and -inf (scripts/gen_gaps15b.py; fp32 and bf16 on the CPU; torch's CUDA kernel
-- takes them for fp16 too, its CPU fp16 kernel std::pow: fp8lab takes sqrt and rsqrt for every dtype)
local P = { -0.0, -INF, 0.0, INF, 4.0, -4.0, 2.25 }
local POW = {
  [0.5] = { y = { -0.0, NAN, 0, INF, 2.0, NAN, 1.5 }, g = { -INF, NAN, INF, 0, 0.25, NAN, 0.3333333432674408 } },
  [-0.5] = { y = { -INF, NAN, INF, 0, 0.5, NAN, 0.6666666865348816 },
             g = { -INF, -0.0, -INF, -0.0, -0.0625, NAN, -0.14814814925193787 } },
}

describe("x^0.5 and x^-0.5 are torch's sqrt and rsqrt at -0 and -inf", function()
  for _, dt in ipairs { "fp32", "bf16", "fp16" } do
    for _, s in ipairs { 0.5, -0.5 } do
      it(("%s x:pow(%g), x^%g, fp8.pow and the gradient"):format(dt, s, s), function()
        local rel = dt == "fp32" and 1e-7 or dt == "bf16" and 2 ^ -8 or 2 ^ -11
        local x = fp8.tensor(P):to(dt):requires_grad_()
        local y = x:pow(s)
        y:backward(fp8.ones_like(y))
        near(POW[s].y, y:float():totable(), rel, "x:pow")
        near(POW[s].g, x.grad:float():totable(), rel, "grad")
        near(POW[s].y, (x:detach() ^ s):float():totable(), rel, "x^s")
        near(POW[s].y, fp8.pow(x:detach(), s):float():totable(), rel, "fp8.pow")
      end)
    end
  end
  it("x^1.5's gradient, 1.5·x^0.5, is torch's -0 and NaN there (fp32 and bf16; +0 and +inf before)", function()
    for _, dt in ipairs { "fp32", "bf16" } do
      local x = fp8.tensor({ -0.0, -INF }):to(dt):requires_grad_()
      local y = x:pow(1.5)
      y:backward(fp8.ones_like(y))
      near({ 0, INF }, y:float():totable(), 0, dt .. " y")
      near({ -0.0, NAN }, x.grad:float():totable(), 0, dt .. " grad")
    end
  end)
  it("a tensor exponent keeps C's pow (torch's pow of two tensors)", function()
    local x = fp8.tensor { -0.0, -INF }
    near({ 0, INF }, x:pow(fp8.tensor { 0.5, 0.5 }):totable(), 0, "x^t")
  end)
end)

-- torch 2.15's dist(a, b, p) of a − b = {0, 1, NaN or inf, 0.5} and its gradient for a (scripts/gen_gaps15b.py):
-- the zero element's gradient is 0·g·‖d‖^(1-p), NaN; cdist's backward keeps 0 there, as torch's _cdist_backward
describe("dist with p < 1 gives a zero element of a NaN or inf distance torch's NaN gradient", function()
  for _, p in ipairs { 0.5, 0.3 } do
    it(("p = %g"):format(p), function()
      local b = fp8.tensor { 1.0, 1.0, 1.0, 0.0 }
      local a = fp8.tensor({ 1.0, 2.0, NAN, 0.5 }):requires_grad_()
      local d = a:dist(b, p)
      d:backward()
      near(NAN, d:item(), 0, "dist")
      near({ NAN, NAN, NAN, NAN }, a.grad:totable(), 0, "grad")
      a = fp8.tensor({ 1.0, 2.0, INF, 0.5 }):requires_grad_()
      d = a:dist(b, p)
      d:backward()
      near(INF, d:item(), 0, "dist")
      near({ NAN, INF, NAN, INF }, a.grad:totable(), 0, "grad")
      -- cdist keeps torch's 0 at the zero difference
      local c = fp8.tensor({ { 1.0, 2.0, NAN, 0.5 } }):requires_grad_()
      fp8.cdist(c, b:view(1, 4), p):sum():backward()
      near({ { 0, NAN, NAN, NAN } }, c.grad:totable(), 0, "cdist grad")
      c = fp8.tensor({ { 1.0, 2.0, INF, 0.5 } }):requires_grad_()
      fp8.cdist(c, b:view(1, 4), p):sum():backward()
      near({ { 0, INF, NAN, INF } }, c.grad:totable(), 0, "cdist grad")
    end)
  end
end)
