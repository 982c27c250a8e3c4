-- Found on 2026-12-07 (stop 98): stop 97's code read again as a reviewer who assumes it is wrong (T._norm_rescaled
-- and its callers, get_total_norm, the bf16 GELU/SiLU backward by table and span, x^s's AVX-512 loop, the hooks'
-- weak holds, the schedulers' raw reads and ReduceLROnPlateau's infinite best, softmax's contiguous route,
-- run-tests.sh's lanes). docs/robustness.md, "Stop 97's code read again (stop 98)".
local F = fp8.nn.functional

-- scripts/gen_review15.py (/opt/torch2/bin/python scripts/gen_review15.py) printed the torch 2.15 values below.
describe("a rescued p-norm whose sum of powers is still out of range", function()
  -- fp16 rows of 70,000 ones: Σx² is 70,000, past fp16's 65504, and the rescue's power of two near the largest |x|
  -- is 1, so its sum overflowed again and r2·2^k + (r2 − r2) was inf − inf: NaN (0, or inf, before stop 97)
  local h = fp8.ones(2, 70000):to("fp16")
  local z = fp8.zeros(2, 70000):to("fp16")

  it("F.normalize, dist, pairwise_distance, cdist and renorm of fp16 are torch's (fp32 sums), not NaN", function()
    assert.are.equal(0.003780364990234375, F.normalize(h, { dim = 2 }):float():totable()[1][1])
    assert.are.equal(0.024261474609375, F.normalize(h, { dim = 2, p = 3 }):float():totable()[1][1])
    assert.are.equal(41.21875, h:narrow(1, 1, 1):dist(z:narrow(1, 1, 1), 3):item())
    assert.are.same({ 41.21875, 41.21875 }, F.pairwise_distance(h, z, { p = 3 }):float():totable())
    -- (torch's cdist takes no fp16 on the CPU: the same 70000^(1/3) rounded to fp16)
    assert.are.same({ { 41.21875 }, { 41.21875 } }, fp8.cdist(h, z:narrow(1, 1, 1), 3):float():totable())
    local r = h:renorm(3, 1, 1)
    assert.are.equal(0.024261474609375, r:float():totable()[1][1])
    assert.is_true(math.abs(r:float():sum():item() - 3396.60595703125) <= 0.01)
  end)

  -- (float64's 51.9249 until stop 100, whose total is torch's norm of the per-tensor norms in their dtype, fp16)
  it("get_total_norm of fp16 sums the rescued powers in fp32 (was inf; torch's 51.9375)", function()
    local n = fp8.nn.utils.get_total_norm({ h }, 3)
    assert.are.equal(51.9375, n)   -- torch's: 140000^(1/3) rounded to fp16
  end)

  -- (torch's inf and 0 until stop 99, whose core rescue sums in float64: the correctly rounded 1.9·2^(1/200), where
  -- torch's fp32 Σ|x|^200 overflows; normcore_spec)
  it("a p whose rescued sum overflows fp32 (p = 200) is float64's (torch's inf), not NaN; fp16 p = 20 torch's",
    function()
    local x = fp8.tensor({ 1.9, 1.9 })
    assert.are.equal(1.906596302986145, x:dist(fp8.zeros(2), 200):item())
    local y = F.normalize(x:view(1, 2), { p = 200, dim = 2 }):totable()[1]
    assert.is_true(y[1] == y[2] and math.abs(y[1] - 0.9965402483940125) <= 1.2e-7, tostring(y[1]))
    local x16 = x:to("fp16")
    assert.are.equal(1.9677734375, x16:dist(fp8.zeros(2):to("fp16"), 20):item())
    assert.are.same({ { 0.9658203125, 0.9658203125 } },
      F.normalize(x16:view(1, 2), { p = 20, dim = 2 }):float():totable())
  end)

  it("the gradient through a rescued fp16 row is its float64 value; the other row keeps its own bits", function()
    -- row 1: ones, Σx³ past 65504 (rescued); row 2: 0.25, Σx³ 1093.75 (not). ∂‖x‖₃/∂xᵢ = xᵢ²/‖x‖₃², 70000^(-2/3) in both
    local rows = fp8.cat({ fp8.ones(1, 70000), fp8.full({ 1, 70000 }, 0.25) }, 1):to("fp16")
    local x = rows:clone():requires_grad_()
    F.pairwise_distance(x, z, { p = 3, eps = 0 }):sum():backward()
    local g = x.grad:narrow(2, 1, 4):float():totable()
    local want = 70000 ^ (-2 / 3)
    assert.is_true(math.abs(g[1][1] - want) <= 1e-3 * want, tostring(g[1][1]))
    local alone = rows:narrow(1, 2, 1):clone():requires_grad_()
    F.pairwise_distance(alone, z:narrow(1, 1, 1), { p = 3, eps = 0 }):sum():backward()
    assert.are.same(alone.grad:narrow(2, 1, 4):float():totable()[1], g[2])
  end)
end)

describe("an FP8 input to the norms' callers", function()
  it("F.normalize, F.pairwise_distance and fp8.cdist refuse it by name (was abs's, mul's or sub's message)", function()
    local q = fp8.tensor({ { 100, 2 }, { 3, 4 } }):quantize("e4m3")
    local t = fp8.tensor({ { 1, 2 }, { 3, 4 } })
    for _, p in ipairs { 2, 3 } do
      assert.has_error(function() F.normalize(q, { p = p }) end, "normalize: e4m3 input: call :dequantize() first")
    end
    assert.has_error(function() F.pairwise_distance(t, q:dequantize():quantize("e5m2")) end,
      "pairwise_distance: x2 is an e5m2 tensor: call :dequantize() first")
    assert.has_error(function() fp8.cdist(q, t, 3) end, "cdist: x1 is an e4m3 tensor: call :dequantize() first")
  end)
end)
