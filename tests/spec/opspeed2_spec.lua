-- Changed on 2026-12-06 (stop 95): ops the wider sweep against PyTorch 2.15 left slow (docs/performance.md,
-- "logsumexp, norm, sum and rsqrt (stop 95)"): rsqrt one core op (FL_OP_RSQRT: 1/√x in one pass, the bits of
-- 1 / x:sqrt() and of its gradient), a sum's double accumulation in sixteen partial sums (one chain of adds waited on
-- the last), norm's Σx² in one pass (fl_sum_squares) and logsumexp along one dim in two (fl_logsumexp), each with the
-- bits, gradient included, of the ops it replaced. The values are checked against definitions computed in Lua (whose
-- numbers are doubles), against those ops, and against torch's bits from scripts/gen_opspeed2.py.
local inf, nan = math.huge, 0 / 0
local U = dofile("tests/spec/helpers/util.lua")

local f32 = U.f32
local function fb(u) return (string.unpack("<f", string.pack("<I4", u))) end
local function bits(v) return (string.unpack("<I4", string.pack("<f", v))) end
local same_bits = U.same_number   -- NaN equals NaN; -0 and +0 differ

describe("rsqrt in one pass", function()
  -- /opt/torch2/bin/python scripts/gen_opspeed2.py (torch 2.15): x, g, x.rsqrt() and x.grad after y.backward(g)
  local X = { 0x3e800000, 0x40000000, 0x40400000, 0x40e9999a, 0x3a83126f, 0x42f6e979, 0x3f350481, 0x003671f7,
              0x7f61b1e6, 0x3f8ccccd, 0x411fd70a, 0x3cfdf3b6 }
  local G = { 0x3f800000, 0xbf000000, 0x406ccccd, 0x3e000000, 0x40000000, 0xbfa66666, 0x3f666666, 0x3a83126f,
              0x40800000, 0xc0f00000, 0x3ea8f5c3, 0x3f800000 }
  local Y = { 0x40000000, 0x3f3504f3, 0x3f13cd3a, 0x3ebd7fec, 0x41fcfb71, 0x3db85212, 0x3f983820, 0x5f4442f6,
              0x1f8852af, 0x3f741620, 0x3ea1fd59, 0x40b5bf6f }
  local GRAD = { 0xc0800000, 0x3db504f2, 0xbeb649e9, 0xbb4fabbe, 0xc6f70d89, 0x39f86fad, 0xbf41becd, 0xff800000,
                 0x80000000, 0x40500739, 0xbbab3b78, 0xc2b736a8 }

  it("gives 1 / √x rounded twice (torch's bits) at special values, on a view too, in three dtypes", function()
    local vals = { 0.0, -0.0, 1.0, -1.0, 0.5, 4.0, inf, -inf, nan, 1e-40, 3.4e38, 7.3, 1e-3, 2.0, 3.0 }
    for i, v in ipairs(vals) do vals[i] = f32(v) end
    local x = fp8.tensor(vals)
    local y = x:rsqrt():tolist()
    for i, v in ipairs(vals) do
      local want = f32(1 / f32(math.sqrt(v)))
      assert.is_true(same_bits(want, y[i]), ("rsqrt(%g): want %g, got %g"):format(v, want, y[i]))
    end
    -- a transposed view, and bf16/fp16 computed in fp32 and rounded once
    local m = fp8.tensor({ { 0.25, 2, 3 }, { 5, 7.3, 11 } }):t()
    local r = m:rsqrt():tolist()
    local mv = m:tolist()
    for i = 1, 3 do for j = 1, 2 do
      assert.are.equal(f32(1 / f32(math.sqrt(mv[i][j]))), r[i][j])
    end end
    for _, dt in ipairs({ "bf16", "fp16" }) do
      local h = fp8.tensor({ 0.3, 2, 3, 7.3, 1e-3, 123.5 }):to(dt)
      local got = h:rsqrt()
      assert.are.equal(dt, got:dtype())
      assert.are.same(h:float():sqrt():reciprocal():to(dt):float():tolist(), got:float():tolist())
    end
  end)

  it("gives torch's values bit for bit, and 1 / x:sqrt()'s gradient, within 2 ulp of torch's (one node)", function()
    local xs, gs = {}, {}
    for i = 1, #X do xs[i] = fb(X[i]); gs[i] = fb(G[i]) end
    local x = fp8.tensor(xs):requires_grad_()
    local y = x:rsqrt()
    assert.are.equal("RsqrtBackward", y:grad_fn())
    y:backward(fp8.tensor(gs))
    local x2 = fp8.tensor(xs):requires_grad_();
    (1 / x2:sqrt()):backward(fp8.tensor(gs))
    local yt, gt, gc = y:detach():tolist(), x.grad:tolist(), x2.grad:tolist()
    for i = 1, #X do
      assert.are.equal(("0x%08x"):format(Y[i]), ("0x%08x"):format(bits(yt[i])), "y at " .. xs[i])
      assert.is_true(same_bits(gc[i], gt[i]), ("grad at %g: the composite's %g, got %g"):format(xs[i], gc[i], gt[i]))
      local b, w = bits(gt[i]), GRAD[i]   -- same sign: the ulps apart are the bit patterns apart
      assert.is_true(math.abs(b - w) <= 2, ("grad at %g: torch's 0x%08x, got 0x%08x"):format(xs[i], w, b))
    end
  end)

  it("keeps its checks: no arguments, FP8 refused; rsqrt_ in place", function()
    local x = fp8.tensor({ 4.0, 16.0 })
    assert.has_error(function() x:rsqrt(1) end)
    assert.has_error(function() x:to("e4m3"):rsqrt() end)
    x:rsqrt_()
    assert.are.same({ 0.5, 0.25 }, x:tolist())
  end)
end)

describe("a sum in sixteen partial sums", function()
  -- integers (and multiples of 2^-10) well inside 2^53: every order of double adds gives the exact sum, so a lane
  -- left out or added twice shows
  local function ints(n, seed)
    local t, s = {}, 0
    local v = seed
    for i = 1, n do
      v = (v * 1103515245 + 12345) % 2147483648
      t[i] = ((v >> 8) % 4001 - 2000) / 1024
      s = s + t[i]
    end
    return t, s
  end

  it("sums every element of every length 0-70 and past a block (65536) and a tile, in fp32 and bf16", function()
    local LENS = { 0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 70, 1000, 65535, 65536, 65553, 200003 }
    for _, n in ipairs(LENS) do
      local t, s = ints(n, n + 1)
      local x = n > 0 and fp8.tensor(t) or fp8.zeros({ 0 })
      assert.are.equal(f32(s), x:sum():item(), "sum of " .. n)
      assert.are.equal(n > 0 and f32(s / n) or nil, n > 0 and x:mean():item() or nil, "mean of " .. n)
      if n > 0 and n <= 1000 then   -- bf16 holds these values (|v| ≤ 2000/1024, 11 significant bits... rounded)
        local b = x:to("bf16")
        local bs = 0
        for _, v in ipairs(b:float():tolist()) do bs = bs + v end
        assert.are.equal(f32(bs), b:float():sum():item(), "bf16 sum of " .. n)
      end
    end
  end)

  it("sums rows along the last dim and a strided view of any length", function()
    for _, c in ipairs({ 1, 5, 16, 17, 33, 100 }) do
      local rows, want = {}, {}
      for r = 1, 3 do
        local t, s = ints(c, 7 * r + c)
        rows[r], want[r] = t, f32(s)
      end
      local x = fp8.tensor(rows)
      assert.are.same(want, x:sum(2):tolist(), "rows of " .. c)
      local cols = x:t()   -- [c, 3]: along dim 1 it is the same sums, read through a transpose
      assert.are.same(want, cols:sum(1):tolist(), "a transposed view, " .. c)
      assert.are.same(want, cols:contiguous():t():sum(2):tolist(), "a strided view, " .. c)
    end
  end)

  it("is the double sum rounded once, NaN and infinities as IEEE adds them", function()
    local t = ints(40, 3)
    t[21] = nan
    assert.is_true(fp8.tensor(t):sum():item() ~= fp8.tensor(t):sum():item())
    t[21] = inf
    assert.are.equal(inf, fp8.tensor(t):sum():item())
    t[5] = -inf
    local v = fp8.tensor(t):sum():item()
    assert.is_true(v ~= v)
    -- a large value cancelled after many small ones: double accumulation keeps the small ones
    local u = { 3.0e7 }
    for i = 2, 1001 do u[i] = 0.25 end
    u[1002] = -3.0e7
    assert.are.equal(250.0, fp8.tensor(u):sum():item())
  end)
end)

-- a few tensors for the ops below: random, with zeros, with ±inf and NaN, and views
local function cases()
  fp8.manual_seed(11)
  local a = fp8.randn({ 6, 37 }) * 4
  local z = fp8.zeros({ 3, 20 })
  local sp = fp8.tensor({ { 1, 2, 3, 4 }, { -inf, -inf, -inf, -inf }, { inf, 1, 2, 3 }, { nan, 1, 2, 3 },
                          { 0, 0, 0, 0 }, { -0.0, 0, 1e-45, 0 }, { 88, 89, 90, 91 }, { -100, -200, -300, -400 } })
  local b = fp8.randn({ 3, 4, 50 })
  return { a = a, z = z, sp = sp, b = b, at = a:t(), bn = b:narrow(3, 2, 40), big = fp8.randn({ 4, 3000 }) }
end
local function same_list(want, got, what)
  want, got = want:float():contiguous():view({ -1 }):tolist(), got:float():contiguous():view({ -1 }):tolist()
  assert.are.equal(#want, #got, what)
  for i = 1, #want do
    assert.is_true(bits(want[i]) == bits(got[i]),   -- every bit, a NaN's sign too
      ("%s [%d]: want %.9g (0x%08x), got %.9g (0x%08x)"):format(what, i, want[i], bits(want[i]), got[i], bits(got[i])))
  end
end

describe("norm's sum of squares in one pass", function()
  local function composite(x, dim, keepdim)   -- the ops x:norm(2, dim, keepdim) made before
    -- (since stop 97 through the rescue of a sum that leaves fp32's range, as norm's: sp's row {-0, 0, 1e-45, 0} has
    -- the norm 1e-45, where Σx² underflows to 0; since stop 98 the core's rescue, p = 2, whose other slices keep the
    -- plain formula's gradient bits: the Lua rescue's turned a -0 beside a rescued slice into +0)
    return require("fp8.tensor")._norm_rescaled(x, dim, function(v)
      local s = (v * v):sum(dim, keepdim)
      local z = s:eq(0)
      return (s + z):sqrt() - z, s
    end, 2)
  end
  it("gives (x * x):sum's bits and its gradient, along each dim and over all, on views, in three dtypes", function()
    U.each_reduction(cases(), { "fp32", "bf16", "fp16" }, 0, function(what, x, xd, dim, keep)
      local dt = xd:dtype()
      same_list(composite(xd:float(), dim, keep):to(dt), xd:norm(2, dim, keep), what)
      same_list((xd:float() * xd:float()):sum(dim, keep), xd:float():_sum_squares(dim, keep), what .. " Σx²")
      if dt == "fp32" then
        local got, want = U.grads_of_two(x, function(l) return l:norm(2, dim, keep) end,
          function(l) return composite(l, dim, keep) end)
        same_list(want, got, what .. " grad")
      end
    end)
  end)
  it("keeps a list of dims and the other p as they were", function()
    local x = cases().b
    same_list(composite(x, { 1, 3 }), x:norm(2, { 1, 3 }), "dims {1, 3}")
    same_list(x:abs():sum(2), x:norm(1, 2), "p = 1")
  end)
end)

describe("logsumexp along one dim in two passes", function()
  local function composite(x, dim, keepdim)   -- the ops x:logsumexp(dim, keepdim) made before (x fp32)
    local m = x:detach():max(dim, true)
    m = fp8.where(m:abs():eq(inf), 0, m)
    local r = (x - m):exp():sum(dim, true):log() + m
    return keepdim and r or r:squeeze(dim)
  end
  it("gives the bits of max, x - m, exp, sum, log and + m, and their gradient, on views, in three dtypes", function()
    U.each_reduction(cases(), { "fp32", "bf16", "fp16" }, 1, function(what, x, xd, d, keep)
      local dt = xd:dtype()
      local got = xd:logsumexp(d, keep)
      assert.are.equal(dt, got:dtype())
      same_list(composite(xd:float(), d, keep):to(dt), got, what)
      if dt == "fp32" then
        local g1, g2, y = U.grads_of_two(x, function(l) return l:logsumexp(d, keep) end,
          function(l) return composite(l, d, keep) end)
        assert.are.equal("LogsumexpBackward", y:grad_fn())
        same_list(g2, g1, what .. " grad")
      end
    end)
  end)
  it("keeps the empty dim, the 0-d tensor and a list of dims as they were", function()
    assert.are.same({ -inf, -inf }, fp8.zeros({ 2, 0 }):logsumexp(2):tolist())
    assert.are.equal(f32(2.5), fp8.tensor(2.5):logsumexp(1):item())
    local x = cases().b
    local m = x:amax({ 1, 3 }, true)
    same_list(((x - m):exp():sum({ 1, 3 }, true):log() + m):view({ 4 }), x:logsumexp({ 1, 3 }), "dims {1, 3}")
  end)
  it("checks its private form's arguments", function()
    local x = fp8.randn({ 2, 3 })
    assert.has_error(function() x:_logsumexp() end)
    assert.has_error(function() x:_logsumexp(3) end)
    assert.has_error(function() x:_logsumexp(1, 1) end)
    assert.has_error(function() x:to("bf16"):_logsumexp(1) end,
      "logsumexp: expected an fp32 tensor (bf16/fp16 are computed in fp32 first), got bf16")
  end)
end)
