-- Changed on 2026-12-06 (stop 97): the ops stop 96 left slower than PyTorch 2.15 at one thread (docs/performance.md,
-- "The ops stop 96 left slow (stop 97)"): x^s by a number in the AVX-512 copy vectorised 16 floats a turn (0^s's and
-- inf^s's values picked by a compare of x alone, where a compare of x's test with s's had made the loop 32 floats a
-- turn in 256-bit vectors with its constants spilled), and the backward of GELU and SiLU on a bf16 input without its
-- fp32 copy (the exact GELU's derivative read from a second table of 65536 results, as the forward reads its own).
-- Each keeps the bits it had; these cases compare against what defines them: (float)pow((double)x, s) in Lua's doubles
-- (C's pow) for x^s, and for the backward the route that widens x (a strided view, which still takes it) and the
-- derivative in doubles.
local F = fp8.nn.F
local inf, nan = math.huge, 0 / 0

local function bits(v) return (string.unpack("<I4", string.pack("<f", v))) end
local function fb(u) return (string.unpack("<f", string.pack("<I4", u))) end
local function f32(v) return (string.unpack("<f", string.pack("<f", v))) end   -- one rounding to fp32
-- the same bits, or both NaN (a NaN's payload and sign are not part of the contract)
local function same_bits(a, b)
  if a ~= a then return b ~= b end
  return bits(a) == bits(b)
end
local function flat(t) return t:float():contiguous():view(-1):tolist() end
local function assert_same(want, got, what)
  local w, g = flat(want), flat(got)
  assert.are.equal(#w, #g, what .. ": sizes")
  for i = 1, #w do
    if not same_bits(w[i], g[i]) then
      error(("%s: element %d is %.9g (0x%08x), want %.9g (0x%08x)"):format(what, i, g[i], bits(g[i]), w[i],
        bits(w[i])), 2)
    end
  end
end

describe("x^s by a number other than the shortcuts", function()
  -- C99's pow on the double value, rounded once to fp32: the op's contract (cpu_vpow.h)
  local function want(x, s) return f32(x ^ s) end
  local specials = { 0.0, -0.0, inf, -inf, 1, -1, 2, -2, 0.5, -0.5, fb(1), -fb(1), fb(0x00800000), 3.4028234663852886e38,
    -3.4028234663852886e38, nan, 1e-20, -1e20, 3, -3, 62 * 62 * 2 ^ -62 }
  it("gives (float)pow((double)x, s) at the special values and over a block's vector loop and its tail", function()
    fp8.manual_seed(3)
    -- 600 values: two full blocks of 256 and a tail of 88, specials spread across the vector lanes
    local base = (fp8.randn { 600 } * 3):tolist()
    for i, v in ipairs(specials) do
      base[i] = v
      base[256 + 16 * i + (i % 16)] = v
      base[512 + i * 3] = v
    end
    local x = fp8.tensor(base)
    local xs = flat(x)
    for _, s in ipairs { 2.5, -2.5, 3.5, -1.5, 7, -7, 5, -3, 0.3, -0.3, 1e-3, 40, -149 } do
      local got = flat(x:pow(s))
      for i = 1, #xs do
        local w = want(xs[i], s)
        if not same_bits(w, got[i]) then
          error(("x^%g at x = %.9g (element %d): %.9g (0x%08x), pow gives %.9g (0x%08x)"):format(s, xs[i], i, got[i],
            bits(got[i]), w, bits(w)))
        end
      end
    end
  end)
  it("gives the same bits on views, in bf16 and fp16, and its gradient s·x^(s−1)·g", function()
    fp8.manual_seed(4)
    local x = fp8.randn { 40, 33 }:abs() + 0.1
    for _, s in ipairs { 2.5, 3.5, -1.5 } do
      assert_same(x:contiguous():pow(s), x:pow(s), "contiguous")
      assert_same(x:t():contiguous():pow(s):t(), x:t():pow(s):t(), "transposed " .. s)
      assert_same(x:narrow(2, 3, 20):contiguous():pow(s), x:narrow(2, 3, 20):pow(s), "narrowed " .. s)
      for _, dt in ipairs { "bf16", "fp16" } do
        local xd = x:to(dt)
        local got, xf = flat(xd:pow(s)), flat(xd)
        for i = 1, #xf do
          local w = f32(xf[i] ^ s)
          assert(same_bits(w, got[i]) or math.abs(got[i] - w) <= math.abs(w) * 2 ^ -7,
            ("%s x^%g at %.6g: %.9g, want %.9g"):format(dt, s, xf[i], got[i], w))
        end
      end
      local xl = x:clone():requires_grad_()
      local g = fp8.randn { 40, 33 }
      xl:pow(s):backward(g)
      local gx, xv, gv = flat(xl.grad), flat(x), flat(g)
      for i = 1, #gx, 7 do
        local w = s * xv[i] ^ (s - 1) * gv[i]
        assert(math.abs(gx[i] - w) <= 1e-5 * math.abs(w) + 1e-30, ("grad x^%g at %g: %.9g, want %.9g"):format(s,
          xv[i], gx[i], w))
      end
    end
  end)
end)

describe("GELU's and SiLU's backward on a bf16 input", function()
  local acts = {
    { "gelu", function(t) return F.gelu(t) end },
    { "gelu tanh", function(t) return F.gelu(t, "tanh") end },
    { "silu", function(t) return F.silu(t) end },
  }
  -- every bf16 pattern once: the widened values
  local function all_bf16()
    local v = {}
    for k = 0, 65535 do v[#v + 1] = fb(k << 16) end
    return fp8.tensor(v):to("bf16")
  end
  it("gives the route that widens x its bits, on every bf16 value, with dy of every sign and specials", function()
    fp8.manual_seed(5)
    local xb = all_bf16():view(256, 256)
    local g = fp8.randn { 256, 256 } * 3
    local gv = g:view(-1)
    for i, v in ipairs { 0.0, -0.0, inf, -inf, nan, 1e-40, 3e38, -3e38 } do gv[i * 97] = v end
    for _, a in ipairs(acts) do
      -- new route: a contiguous bf16 leaf; old route: the same values through a transposed (strided) bf16 view
      local xl = xb:clone():requires_grad_()
      a[2](xl):backward(g)
      local xt = xb:t():contiguous():requires_grad_()
      a[2](xt:t()):backward(g)
      assert_same(xt.grad:t(), xl.grad, a[1] .. " gradient")
      -- and the gradient of the widened values as an fp32 leaf
      local xf = xb:float():requires_grad_()
      a[2](xf):backward(g)
      assert_same(xf.grad, xl.grad, a[1] .. " against fp32")
    end
  end)
  it("is the derivative within bf16's rounding, in doubles, and under bf16 autocast", function()
    local function phi(v) return math.exp(-v * v / 2) / math.sqrt(2 * math.pi) end
    local function Phi(v)   -- Abramowitz-Stegun 7.1.26 is too coarse; a series/continued fraction is overkill here:
      -- erf by its Taylor series for |v| < 3, else the asymptotic tail (enough for a 1e-5 comparison)
      local z = v / math.sqrt(2)
      local az = math.abs(z)
      local e
      if az < 3 then
        local term, sum, n = az, az, 0
        repeat
          n = n + 1
          term = term * -az * az / n
          local add = term / (2 * n + 1)
          sum = sum + add
        until math.abs(add) < 1e-17
        e = 2 / math.sqrt(math.pi) * sum
      else
        e = 1 - math.exp(-az * az) / (az * math.sqrt(math.pi)) * (1 - 1 / (2 * az * az))
      end
      if z < 0 then e = -e end
      return 0.5 * (1 + e)
    end
    local vals = { -6, -3.5, -2, -1, -0.5, -0.125, 0, 0.125, 0.5, 1, 1.5, 2, 3.5, 6, 20, -20 }
    local xb = fp8.tensor(vals):to("bf16")
    local xl = xb:clone():requires_grad_()
    F.gelu(xl):backward(fp8.ones { #vals })
    local gx = flat(xl.grad)
    for i, v in ipairs(flat(xb)) do
      local w = Phi(v) + v * phi(v)
      assert(math.abs(gx[i] - w) <= 2 ^ -8 * math.abs(w) + 1e-6, ("gelu'(%g) = %.9g, want %.9g"):format(v, gx[i], w))
    end
    -- under bf16 autocast a Linear's bf16 output goes through GELU and back: the same gradient as the strided route
    fp8.manual_seed(6)
    local lin = fp8.nn.Linear(16, 16)
    local x = fp8.randn { 8, 16 }
    local function run(strided)
      lin:zero_grad()
      fp8.amp.autocast("bf16", function()
        local h = lin(x)
        if strided then h = h:t():contiguous():t() end
        local y = F.gelu(h)
        y:sum():backward()
      end)
      return lin.weight.grad:clone()
    end
    local a, b = run(false), run(true)
    assert_same(b, a, "the Linear's weight gradient")
  end)
end)
