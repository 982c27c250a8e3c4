-- Found on 2026-12-07 (stop 98): x:norm(p) refused every p but 1, 2 and math.huge, and dist every p < 0, where
-- torch 2.15 takes any p in both (0: the count of nonzero elements; fractional p, p > 2, p < 0 and -inf); dist's
-- p = 0 had no gradient (torch's is undefined: zeros here), a bf16/fp16 dist of p other than 1, 2 and math.huge was
-- computed in the dtype's own arithmetic (torch's sums in fp32 and rounds once), and F.normalize with p < 0 gave a
-- row of infinities ±inf (torch's NaN). docs/robustness.md, "x:norm(p) and dist for every p (stop 98)".
local U = dofile("tests/spec/helpers/util.lua")

local NAN, INF = 0 / 0, math.huge

-- got equals torch's want (U.near), a zero gradient's sign unchecked (where's +0 where torch's formula multiplies
-- by 0: -0)
local function near(want, got, rel, where) U.near(want, got, rel, where, where:find("^grad") ~= nil) end

-- torch 2.15's x.norm(p, 1) (fp8lab's dim 2) and the gradient of Σ r·W (scripts/gen_gaps16.py:
-- /opt/torch2/bin/python scripts/gen_gaps16.py; torch 2.15.0): rows with a zero, ties for the smallest and largest
-- |x|, a NaN, an inf, only infinities. p = 0's gradient is zeros here (torch leaves it undefined, .grad None).
local X = { { 3.0, 0.0, -4.0 }, { 2.0, -2.0, 3.0 }, { 1e-3, 2.0, NAN }, { INF, 1.0, -2.0 }, { INF, -INF, INF },
  { 0.5, -0.25, 1.5 } }
local W = { 1.0, -2.0, 3.0, 0.5, 4.0, -1.5 }
local ROWS = {
  { p = 0,
    r = { 2.0, 3.0, 3.0, 3.0, 3.0, 3.0 },
    g = nil },
  { p = 0.5,
    r = { 13.928203582763672, 20.797956466674805, NAN, INF, INF, 5.913903713226318 },
    g = { { 2.154700517654419, 0, -1.866025447845459 }, { -6.449489116668701, 6.449489116668701, -5.26598596572876 }, { NAN, NAN, NAN }, { NAN, INF, -INF }, { NAN, NAN, NAN }, { -5.158736705780029, 7.295555591583252, -2.978397846221924 } } },
  { p = 3.0,
    r = { 4.497941493988037, 3.5033981800079346, NAN, INF, INF, 1.5205504894256592 },
    g = { { 0.4448513388633728, 0, -0.7908468246459961 }, { -0.6517949104309082, 0.6517949104309082, -1.4665385484695435 }, { NAN, NAN, NAN }, { NAN, 0, -0.0 }, { NAN, NAN, NAN }, { -0.16219206154346466, 0.040548015385866165, -1.4597285985946655 } } },
  { p = 4.5,
    r = { 4.221163749694824, 3.1922943592071533, NAN, INF, INF, 1.5024738311767578 },
    g = { { 0.3026297986507416, 0, -0.8283182978630066 }, { -0.38929128646850586, 0.38929128646850586, -1.6091411113739014 }, { NAN, NAN, NAN }, { NAN, 0, -0.0 }, { NAN, NAN, NAN }, { -0.03189055249094963, 0.002818753244355321, -1.4913735389709473 } } },
  { p = -1.0,
    r = { 0, 0.75, NAN, 0.6666666865348816, INF, 0.15000000596046448 },
    g = { { 0, 0, -0.0 }, { -0.28125, 0.28125, -0.125 }, { NAN, NAN, NAN }, { 0, 0.222222238779068, -0.055555559694767 }, { NAN, NAN, NAN }, { -0.13500000536441803, 0.5400000214576721, -0.015000000596046448 } } },
  { p = -0.5,
    r = { 0, 0.2521224617958069, NAN, 0.3431457281112671, INF, 0.05586933344602585 },
    g = { { 0, 0, -0.0 }, { -0.08951633423566818, 0.08951633423566818, -0.04872652143239975 }, { NAN, NAN, NAN }, { 0, 0.1005050539970398, -0.03553390130400658 }, { NAN, NAN, NAN }, { -0.0560268834233284, 0.15846796333789825, -0.010782379657030106 } } },
  { p = -INF,
    r = { 0, 2.0, NAN, 1.0, INF, 0.25 },
    g = { { 0, 0, -0.0 }, { -1.0, 1.0, -0.0 }, { 0, 0, 0 }, { 0, 0.5, -0.0 }, { 1.3333333730697632, -1.3333333730697632, 1.3333333730697632 }, { -0.0, 1.5, -0.0 } } },
}

describe("x:norm(p, dim) takes every p but NaN, as torch 2.15", function()
  for _, c in ipairs(ROWS) do
    it(("p = %g along a dim: torch's values and gradients"):format(c.p), function()
      local x = fp8.tensor(X):requires_grad_()
      local r = x:norm(c.p, 2);
      (r * fp8.tensor(W)):sum():backward()
      near(c.r, r:totable(), 4e-6, "r")
      near(c.g or fp8.zeros { 6, 3 }:totable(), x.grad:totable(), 4e-6, "grad")
    end)
  end

  -- torch's y.norm(p), y.norm(p, (0, 1), True) and y.norm(p, 0, True) (the gradient of Σ r·{1, -1, 2})
  local Y = { { 0.5, -0.25, 1.5 }, { 2.0, -2.0, 3.0 } }
  local ALL = {
    { p = 0, r = 6.0, d1 = { 2.0, 2.0, 2.0 } },
    { p = 0.5, r = 48.89268112182617,
      g = { { 9.88864803314209, -13.984660148620605, 5.7092132568359375 }, { 4.944324016571045, -4.944324016571045, 4.037023544311523 } },
      d1 = { 4.499999523162842, 3.6642134189605713, 8.742640495300293 },
      g1 = { { 2.999999761581421, 3.8284270763397217, 4.828426837921143 }, { 1.4999998807907104, 1.353553295135498, 3.4142134189605713 } } },
    { p = 3, r = 3.596385955810547,
      g = { { 0.01932891272008419, -0.004832228180021048, 0.17396020889282227 }, { 0.30926260352134705, -0.30926260352134705, 0.6958408355712891 } },
      d1 = { 2.0103628635406494, 2.0013012886047363, 3.1201257705688477 },
      g1 = { { 0.06185732036828995, 0.015604685992002487, 0.4622408449649811 }, { 0.9897171258926392, 0.9986999034881592, 1.8489633798599243 } } },
    { p = -1, r = 0.125,
      g = { { 0.0625, -0.25, 0.0069444444961845875 }, { 0.00390625, -0.00390625, 0.0017361111240461469 } },
      d1 = { 0.4000000059604645, 0.2222222238779068, 1.0 },
      g1 = { { 0.64000004529953, 0.790123462677002, 0.8888888955116272 }, { 0.04000000283122063, 0.012345679104328156, 0.2222222238779068 } } },
    { p = -INF, r = 0.25, g = { { 0, -1.0, 0 }, { 0, -0.0, 0 } }, d1 = { 0.5, 0.25, 1.5 },
      g1 = { { 1.0, 1.0, 2.0 }, { 0, 0, 0 } } },
  }
  local Z = { { 0, 0, 0 }, { 0, 0, 0 } }
  for _, c in ipairs(ALL) do
    it(("p = %g over everything, a list of dims and one dim with keepdim: torch's"):format(c.p), function()
      local y = fp8.tensor(Y):requires_grad_()
      local r = y:norm(c.p)
      r:backward()
      assert.are.same({}, r:shape())
      near(c.r, r:item(), 4e-6, "r")
      near(c.g or Z, y.grad:totable(), 4e-6, "grad")
      y.grad = nil
      local rk = y:norm(c.p, { 1, 2 }, true)
      assert.are.same({ 1, 1 }, rk:shape())
      near({ { c.r } }, rk:totable(), 4e-6, "r over {1, 2}")
      local r1 = fp8.norm(y, c.p, 1, true);   -- (the function form)
      (r1 * fp8.tensor { { 1, -1, 2 } }):sum():backward()
      near({ c.d1 }, r1:totable(), 4e-6, "r along 1")
      near(c.g1 or Z, y.grad:totable(), 4e-6, "grad along 1")
    end)
  end

  it("bf16 and fp16 are summed in fp32 and rounded once, torch's values to the bit", function()
    -- torch's ones(300, dtype).norm(p): a bf16 sum stops at 256; fp16's 300^2 at p = 0.5 is inf
    local WANT = { bf16 = { [3] = 6.6875, [0.5] = 90112.0, [-1] = 0.003326416015625, [0] = 300.0 },
      fp16 = { [3] = 6.6953125, [0.5] = INF, [-1] = 0.00333404541015625, [0] = 300.0 } }
    for dt, w in pairs(WANT) do
      for p, v in pairs(w) do
        assert.are.equal(v, fp8.ones({ 300 }, { dtype = dt }):norm(p):float():item(), dt .. " p=" .. p)
      end
    end
    -- fp16 [40000, 40000] at p = 3: 40000^3 is past 65504, the norm 50400 is not; the -inf norm of [40000, 30000]
    assert.are.equal(50400, fp8.tensor({ 40000, 40000 }):to("fp16"):norm(3):float():item())
    assert.are.equal(30000, fp8.tensor({ 40000, 30000 }):to("fp16"):norm(-INF):float():item())
  end)

  it("empty: a sum over nothing is 0 for p >= 0; p < 0 and -inf are refused there, as torch", function()
    for _, p in ipairs { 0, 0.5, 3 } do
      assert.are.equal(0, fp8.zeros { 0 }:norm(p):item())
      assert.are.same({ 0, 0 }, fp8.zeros { 2, 0 }:norm(p, 2):totable())
    end
    for _, p in ipairs { -1, -INF } do
      assert.are.same({ 0 }, fp8.zeros { 0, 3 }:norm(p, 2):shape())
      local name = p == -1 and "-1" or "-inf"
      U.fails_with(("norm: the %s norm of an empty reduction has no value"):format(name),
        function() return fp8.zeros { 0 }:norm(p) end)
      U.fails_with(("norm: the %s norm of an empty reduction has no value"):format(name),
        function() return fp8.zeros { 2, 0 }:norm(p, 2) end)
    end
  end)

  it("a sum out of fp32's range is rescued for p > 0 as the 2-norm's; p < 0 keeps torch's formula", function()
    -- torch 2.15 (scripts/gen_gaps16.py): [1e20, 1e20]'s 3-norm inf, [1e-30, 1e-30]'s 0; the true values (fp64)
    -- 1.2599210504099149e+20 and 1.2599210822452381e-30, which the 2-norm's rescue gives (T._norm_rescaled)
    near(1.2599210504099149e+20, fp8.tensor({ 1e20, 1e20 }):norm(3):item(), 4e-6, "1e20")
    near(1.2599210822452381e-30, fp8.tensor({ 1e-30, 1e-30 }):norm(3):item(), 4e-6, "1e-30")
    near(4.0000000126843074e-30, fp8.tensor({ 1e-30, 1e-30 }):norm(0.5):item(), 4e-6, "p=0.5")
    near(5.000000015855384e-31, fp8.tensor({ 1e-30, 1e-30 }):norm(-1):item(), 4e-6, "p=-1")
    local x = fp8.tensor({ 1e20, -1e20 }):requires_grad_()
    x:norm(3):backward()
    near({ 0.6299605249474366, -0.6299605249474366 }, x.grad:totable(), 4e-6, "grad")   -- 2^(-2/3)
  end)

  it("refuses a NaN p and a p that is not a number or \"fro\", by name", function()
    local z = fp8.ones { 2, 3 }
    U.fails_with('norm: p must be a number (math.huge and -math.huge included, NaN not) or "fro", got ',
      function() return z:norm(NAN) end)
    U.fails_with('norm: p must be a number (math.huge and -math.huge included, NaN not) or "fro", got "nuc" (a string)',
      function() return z:norm("nuc") end)
    assert.are.equal(z:norm(2):item(), z:norm("fro"):item())
  end)
end)

-- torch 2.15's torch.dist(a, b, p) and the gradients of both operands (scripts/gen_gaps16.py)
local A, B = { 1.5, -2.0, 3.0, 0.5 }, { 1.0, 1.0, -1.0, 2.0 }
local DIST = {
  { p = -1.0, r = 0.3076923191547394,
    ga = { 0.3786982595920563, -0.010519396513700485, 0.005917160306125879, -0.04207758605480194 },
    gb = { -0.3786982595920563, 0.010519396513700485, -0.005917160306125879, 0.04207758605480194 } },
  { p = -2.5, r = 0.48466023802757263,
    ga = { 0.8966766595840454, -0.0016947533003985882, 0.000619185680989176, -0.019173944368958473 },
    gb = { -0.8966766595840454, 0.0016947533003985882, -0.000619185680989176, 0.019173944368958473 } },
  { p = -INF, r = 0.5,
    ga = { 1.0, -0.0, 0, -0.0 },
    gb = { -1.0, 0, -0.0, 0 } },
  { p = 0, r = 4.0 },
  { p = 0.5, r = 32.07978820800781,
    ga = { 8.009966850280762, -3.2700555324554443, 2.831951141357422, -4.624556541442871 },
    gb = { -8.009966850280762, 3.2700555324554443, -2.831951141357422, 4.624556541442871 } },
  { p = 3.0, r = 4.5548834800720215,
    ga = { 0.012049956247210503, -0.4337984323501587, 0.7711971998214722, -0.10844960808753967 },
    gb = { -0.012049956247210503, 0.4337984323501587, -0.7711971998214722, 0.10844960808753967 } },
}

describe("dist takes every p but NaN, as torch 2.15", function()
  for _, c in ipairs(DIST) do
    it(("p = %g: torch's value and both gradients"):format(c.p), function()
      local a, b = fp8.tensor(A):requires_grad_(), fp8.tensor(B):requires_grad_()
      local r = fp8.dist(a, b, c.p)
      r:backward()
      near(c.r, r:item(), 4e-6, "r")
      near(c.ga or { 0, 0, 0, 0 }, a.grad:totable(), 4e-6, "grad a")   -- p = 0: zeros (torch's undefined)
      near(c.gb or { 0, 0, 0, 0 }, b.grad:totable(), 4e-6, "grad b")
    end)
  end
  it("bf16 is summed in fp32 and rounded once (torch's 6.6875 for 300 ones at p = 3; as before stop 98)", function()
    local d = fp8.ones({ 300 }, { dtype = "bf16" }):dist(fp8.zeros({ 300 }, { dtype = "bf16" }), 3)
    assert.are.equal(6.6875, d:float():item())
  end)
  it("bf16 and fp16 differences are summed in fp32 and rounded once, torch's values to the bit", function()
    -- torch's dist of these in bf16 and fp16 (scripts/gen_gaps16.py); the dtype's own arithmetic gave bf16 p = 3
    -- 5.09375 and fp16 p = 0.5 62.875 until stop 98
    local WANT = { bf16 = { [0.5] = 63.0, [3] = 5.0625 }, fp16 = { [0.5] = 62.84375, [3] = 5.0703125 } }
    for dt, w in pairs(WANT) do
      local a = fp8.tensor({ 1.5, -2.0, 3.0, 0.5, 0.1, 2.7 }):to(dt)
      local b = fp8.tensor({ 1.0, 1.0, -1.0, 2.0, 0.3, -0.6 }):to(dt)
      for p, v in pairs(w) do assert.are.equal(v, fp8.dist(a, b, p):float():item(), dt .. " p=" .. p) end
    end
  end)
  it("refuses a NaN p by name", function()
    U.fails_with("dist: p must be a number (math.huge and -math.huge included, NaN not), got ",
      function() return fp8.dist(fp8.tensor { 1 }, fp8.tensor { 0 }, NAN) end)
  end)
end)

describe("F.normalize with p < 0 of a row of infinities is NaN, as torch 2.15", function()
  -- torch's F.normalize(x, p, dim=1) and the gradient of Σ y·{{1, 2}, {3, -1}} (scripts/gen_gaps16.py): the row's
  -- Σ|x|^p is 0, its norm inf, x / inf NaN (fp8lab's zero-sum root was 0, and the row came out ±inf, x / eps)
  local NORMALIZE = {
    { p = -1.0, y = { { NAN, NAN }, { 1.5, -3.0 } },
      g = { { NAN, NAN }, { -0.5000004768371582, -0.24999988079071045 } } },
    { p = -0.5, y = { { NAN, NAN }, { 2.9142136573791504, -5.828427314758301 } },
      g = { { NAN, NAN }, { 0.2071075439453125, 0.10355329513549805 } } },
  }
  for _, c in ipairs(NORMALIZE) do
    it(("p = %g"):format(c.p), function()
      local x = fp8.tensor({ { INF, -INF }, { 1.0, -2.0 } }):requires_grad_()
      local y = fp8.nn.functional.normalize(x, { p = c.p });
      (y * fp8.tensor { { 1, 2 }, { 3, -1 } }):sum():backward()
      near(c.y, y:totable(), 4e-6, "y")
      near(c.g, x.grad:totable(), 4e-6, "grad")
    end)
  end
end)
