-- Changed on 2026-12-06 (stop 96): the numeric gaps stop 95 left (docs/robustness.md, "hypot correctly rounded (stop
-- 96)"; docs/performance.md, "hypot, strided logsumexp and x^s (stop 96)"): hypot on fp32 is one elementwise op
-- (FL_OP_HYPOT, core/hypot1.h), correctly rounded, where m·√(1 + (n/m)²) in fp32 ops was up to 2 ulp off; logsumexp
-- along a dim with a stride in two reads with the bits of the five passes it made; x^s's near-tie test on the double's
-- bits. The hypot values are checked against the correctly rounded ones from exact rationals and torch's bits, from
-- scripts/gen_numerics13.py; logsumexp against the ops it replaced; x^s against pow's ties (tests/c/test_vpow.c too).
local inf, nan = math.huge, 0 / 0

local function fb(u) return (string.unpack("<f", string.pack("<I4", u))) end
local function bits(v) return (string.unpack("<I4", string.pack("<f", v))) end
local function f32(v) return (string.unpack("<f", string.pack("<f", v))) end
local function same_bits(a, b)   -- NaN equals NaN; -0 and +0 differ
  if a ~= a then return b ~= b end
  if a == 0 and b == 0 then return 1 / a == 1 / b end
  return a == b
end

describe("hypot on fp32", function()
  -- /opt/torch2/bin/python scripts/gen_numerics13.py (torch 2.15): x, y, the correctly rounded hypot (exact rationals)
  -- and torch.hypot's, fp32 bits. The first ten: x = round(k²/2^24 − 1/4), y = k/2^12, √(x² + y²) within 2^-30 of a
  -- midpoint, where the double expression and torch's are one ulp off (either way)
  local P = {
    { 0x4b000072, 0x45350544, 0x4b000073, 0x4b000072 },
    { 0x4b000083, 0x45350550, 0x4b000083, 0x4b000084 },
    { 0x4b0000fe, 0x453505a7, 0x4b0000ff, 0x4b0000fe },
    { 0x4b00010f, 0x453505b3, 0x4b00010f, 0x4b000110 },
    { 0x4b000138, 0x453505d0, 0x4b000139, 0x4b000138 },
    { 0x4b000149, 0x453505dc, 0x4b000149, 0x4b00014a },
    { 0x4b0001c4, 0x45350633, 0x4b0001c5, 0x4b0001c4 },
    { 0x4b0001d5, 0x4535063f, 0x4b0001d5, 0x4b0001d6 },
    { 0x4b0001fe, 0x4535065c, 0x4b0001ff, 0x4b0001fe },
    { 0x4b000261, 0x453506a2, 0x4b000261, 0x4b000262 },
    { 0x40400000, 0x40800000, 0x40a00000, 0x40a00000 },
    { 0x7f000000, 0x7f000000, 0x7f3504f3, 0x7f3504f3 },
    { 0x00034447, 0x00045b0a, 0x000571cc, 0x000571cc },
    { 0x00000001, 0x00000001, 0x00000001, 0x00000001 },
    { 0x3dcccccd, 0x3e4ccccd, 0x3e64f92e, 0x3e64f92e },
    { 0x60ad78ec, 0x1e3ce508, 0x60ad78ec, 0x60ad78ec },
  }

  it("is correctly rounded: the method, fp8.hypot, either order, signs, a 0-d operand", function()
    local xs, ys = {}, {}
    for i, p in ipairs(P) do xs[i] = fb(p[1]); ys[i] = fb(p[2]) end
    local x, y = fp8.tensor(xs), fp8.tensor(ys)
    local forms = { x:hypot(y):tolist(), fp8.hypot(y, x):tolist(), (-x):hypot(-y):tolist() }
    for i, p in ipairs(P) do
      for f, got in ipairs(forms) do
        assert.are.equal(p[3], bits(got[i]), ("form %d, hypot(%a, %a): want 0x%08x, got 0x%08x (torch 0x%08x)"):format(
          f, xs[i], ys[i], p[3], bits(got[i]), p[4]))
      end
      assert.are.equal(p[3], bits(fp8.tensor({ xs[i] }):hypot(fp8.tensor(ys[i])):tolist()[1]))   -- a 0-d other
    end
  end)

  it("gives torch's bits where torch's is correctly rounded, and inf beside an infinity, NaN included", function()
    for i = 11, #P do
      assert.are.equal(P[i][4], bits(fp8.tensor({ fb(P[i][1]) }):hypot(fp8.tensor({ fb(P[i][2]) })):tolist()[1]))
    end
    local got = fp8.tensor({ inf, nan, -inf, nan, 0, -0.0, 3.4e38 })
                  :hypot(fp8.tensor({ nan, -inf, 1, 2, -0.0, 0, 3.4e38 })):tolist()
    local want = { inf, inf, inf, nan, 0, 0, inf }
    for i = 1, #want do assert.is_true(same_bits(want[i], got[i]), ("case %d: %g"):format(i, got[i])) end
  end)

  it("rounds a bf16 or fp16 result once from the correctly rounded fp32 value (torch's opmath)", function()
    for _, dt in ipairs({ "bf16", "fp16" }) do
      local a = fp8.tensor({ 3, 0.1, 1e-3, 7.3, 100.5, -2.75 }):to(dt)
      local b = fp8.tensor({ 4, 0.2, 5e-4, -1.1, 0.5, 2.75 }):to(dt)
      local got = a:hypot(b)
      assert.are.equal(dt, got:dtype())
      assert.are.same(a:float():hypot(b:float()):to(dt):float():tolist(), got:float():tolist())
    end
  end)

  it("names itself in a shape error (it named maximum, its inner op)", function()
    local ok, err = pcall(function() return fp8.tensor({ 1, 2 }):hypot(fp8.tensor({ 1, 2, 3 })) end)
    assert.is_false(ok)
    assert.matches("hypot: shapes %[2%] and %[3%] cannot be broadcast", err)
  end)

  it("keeps HypotBackward's gradient x/h", function()
    local x = fp8.tensor({ 3, 1e-40, -5, 0 }):requires_grad_()
    local y = fp8.tensor({ 4, 1e-40, 12, 0 }):requires_grad_()
    local h = x:hypot(y)
    assert.are.equal("HypotBackward", h:grad_fn())
    h:sum():backward()
    local gx, gy = x.grad:tolist(), y.grad:tolist()
    local want_x, want_y = { 0.6, math.sqrt(0.5), -5 / 13, 0 }, { 0.8, math.sqrt(0.5), 12 / 13, 0 }
    for i = 1, 4 do
      assert.is_true(math.abs(gx[i] - want_x[i]) <= 1e-6 and math.abs(gy[i] - want_y[i]) <= 1e-6,
        ("pair %d: %g %g"):format(i, gx[i], gy[i]))
    end
  end)
end)

describe("logsumexp along a dim with a stride", function()
  local function hash(t)   -- FNV-1a over the results' fp32 bits
    local h = 2166136261
    for _, v in ipairs(t:reshape(-1):tolist()) do h = ((h ~ bits(v)) * 16777619) & 0xffffffff end
    return h
  end

  it("gives the bits its five passes gave (recorded with the binary of c84aa434)", function()
    fp8.manual_seed(13)
    local x = fp8.randn(37, 5, 1100) * 4
    local v = (fp8.randn(300, 70) * 30):t()
    local y = fp8.randn(3, 2049, 33) * 10
    local s = fp8.tensor({ { 1, -inf, inf, nan, -inf }, { 2, -inf, 3, 1, inf }, { -1, -inf, inf, 2, 0 } })
    assert.are.same({ 0xd6f9c0df, 0xacb8c066, 0x5e742cee, 0x5138c76c, 0x60178cb7 },
      { hash(x:logsumexp(1, true)), hash(x:logsumexp(2)), hash(v:logsumexp(1)), hash(y:logsumexp(2, true)),
        hash(s:logsumexp(1)) })
  end)

  it("keeps an all -inf column -inf, an inf one inf and a NaN one NaN", function()
    local x = fp8.tensor({ { 1, -inf, inf, nan, -inf }, { 2, -inf, 3, 1, inf }, { -1, -inf, inf, 2, 0 } })
    local got = x:logsumexp(1):tolist()
    assert.are.equal(-inf, got[2])
    assert.are.equal(inf, got[3])
    assert.is_true(got[4] ~= got[4])
    assert.are.equal(inf, got[5])
    assert.is_true(math.abs(got[1] - math.log(math.exp(1) + math.exp(2) + math.exp(-1))) < 1e-6)
  end)
end)
