-- Changed on 2026-12-06 (stop 96): the ops stop 95's sweep against PyTorch 2.15 left slow (docs/performance.md,
-- "The ops stop 95 left slow (stop 96)"): softmax and log-softmax along a dim with a stride computed down the columns
-- (no transposed copies around the last dim's kernel, forward and backward), F.rms_norm with nothing to record in one
-- pass, the exact GELU of a bf16 tensor read from a table of its 65536 results, and gather along the last dim with the
-- positions of the rows ahead prefetched. Each keeps the bits of what it replaced, which these cases compare against
-- (the transposed route, the composite of tensor ops, the fp32 kernel on the widened input), values and gradients,
-- on views, in three dtypes and at special values; and against definitions computed in Lua's doubles.
local U = dofile("tests/spec/helpers/util.lua")
local F = fp8.nn.F
local inf, nan = math.huge, 0 / 0

local function bits(v) return (string.unpack("<I4", string.pack("<f", v))) end
local function fb(u) return (string.unpack("<f", string.pack("<I4", u))) end
local function flat(t) return t:float():contiguous():view(-1):tolist() end
local function assert_same(want, got, what)
  local w, g = flat(want), flat(got)
  assert.are.equal(#w, #g, what .. ": sizes")
  for i = 1, #w do
    if not U.same_number(w[i], g[i]) then
      error(("%s: element %d is %.9g (0x%08x), want %.9g (0x%08x)"):format(what, i, g[i], bits(g[i]), w[i],
        bits(w[i])), 2)
    end
  end
end
-- x with special values written at every 7th place
local function special(x)
  local v = x:contiguous():view(-1)
  for i, s in ipairs { nan, inf, -inf, 0.0, -0.0, 1e-40, 300, -300, 88, -104, 1e30 } do
    if i * 7 <= v:numel() then v[i * 7] = s end
  end
  return v:view(x:shape())
end

describe("softmax along a dim with a stride, down the columns", function()
  -- the route it replaced: the dim made last (a contiguous copy), the last dim's kernel, and back
  local function by_transpose(fn, x, d)
    local n = x:dim()
    return F[fn](x:transpose(d, n):contiguous(), n):transpose(d, n)
  end

  it("gives the transposed route's bits, values and gradients, every dim, views, three dtypes", function()
    fp8.manual_seed(3)
    local cases = { { { 5, 9 }, false, "fp32" }, { { 9, 5 }, true, "fp32" }, { { 3, 17, 4 }, false, "bf16" },
      { { 2, 3, 4, 5 }, true, "fp16" }, { { 33, 1, 2 }, true, "fp32" }, { { 1030, 3 }, false, "fp32" } }
    for _, case in ipairs(cases) do
      local shp, sp, dt = case[1], case[2], case[3]
      local base = fp8.randn(shp) * 4
      if sp then base = special(base) end
      local x = base:to(dt)
      for _, v in ipairs { { "contiguous", x }, { "transposed", x:transpose(1, x:dim()) } } do
        for d = 1, x:dim() - 1 do
          for _, fn in ipairs { "softmax", "log_softmax" } do
            local what = ("%s of %s %s %s along dim %d%s"):format(fn, x:shape_str(), dt, v[1], d,
              sp and " (special values)" or "")
            local a = v[2]:float()
            local ga, gb, ya = U.grads_of_two(a, function(l) return F[fn](l, d) end,
              function(l) return by_transpose(fn, l, d) end)
            local yb = fp8.no_grad(function() return by_transpose(fn, a, d) end)
            assert_same(yb, ya, what)
            assert_same(gb, ga, what .. ", gradient")
            assert_same(yb, fp8.no_grad(function() return F[fn](v[2], d) end), what .. ", no_grad")
          end
        end
      end
    end
  end)

  it("gives a contiguous fp32 result and one node, and matches the definition in doubles", function()
    local x = fp8.tensor({ { 1, -2, 3 }, { 0.5, 4, -1 }, { 2, 2, 10 }, { -3, 0, 0.25 } }):requires_grad_()
    local y = F.softmax(x, 1)
    assert.is_true(y:is_contiguous())
    assert.are.equal("fp32", F.softmax(x:to("bf16"), 1):dtype())
    assert.are.equal("SoftmaxBackward", y:grad_fn())
    assert.are.equal("LogSoftmaxBackward", F.log_softmax(x, 1):grad_fn())
    local xv, yv, ly = x:tolist(), y:tolist(), F.log_softmax(x, 1):tolist()
    for j = 1, 3 do
      local m, s = -inf, 0
      for i = 1, 4 do m = math.max(m, xv[i][j]) end
      for i = 1, 4 do s = s + math.exp(xv[i][j] - m) end
      for i = 1, 4 do
        local p = math.exp(xv[i][j] - m) / s
        assert.is_true(math.abs(yv[i][j] - p) <= 2e-7 * math.max(p, 1e-30) + 1e-38, ("softmax [%d][%d]"):format(i, j))
        assert.is_true(math.abs(ly[i][j] - math.log(p)) <= 1e-6 * math.max(1, math.abs(math.log(p))))
      end
    end
    -- the gradient of Σ w·y: y ⊙ (w − Σ w·y) down each column
    local w = fp8.tensor({ { 1, 0, 2 }, { 0.5, -1, 0 }, { 3, 1, 1 }, { 0, 2, -2 } })
    local loss = (y * w):sum()
    loss:backward()
    local gv, wv = x.grad:tolist(), w:tolist()
    for j = 1, 3 do
      local s = 0
      for i = 1, 4 do s = s + wv[i][j] * yv[i][j] end
      for i = 1, 4 do
        local want = yv[i][j] * (wv[i][j] - s)
        assert.is_true(math.abs(gv[i][j] - want) <= 1e-6,
          ("gradient [%d][%d]: %g, want %g"):format(i, j, gv[i][j], want))
      end
    end
  end)
end)

describe("rms_norm with nothing to record, in one pass", function()
  it("gives the composite's bits (the graph's forward), weights of each dtype or none, eps, views, dtypes", function()
    fp8.manual_seed(5)
    local cases = { { { 4, 7 }, true, "fp32" }, { { 3, 16 }, false, "bf16" }, { { 2, 3, 33 }, true, "fp32" },
      { { 5, 1 }, false, "fp16" }, { { 3, 1030 }, false, "fp32" }, { { 6, 20 }, true, "bf16" } }
    for _, case in ipairs(cases) do
      local shp, sp, dt = case[1], case[2], case[3]
      local base = fp8.randn(shp) * 3
      if sp then base = special(base) end
      local c = shp[#shp]
      local w = fp8.randn { c }
      local x = base:to(dt)
      local views = { x }
      if x:dim() == 3 then views[2] = x:transpose(1, 2) end
      if shp[1] > 2 then views[#views + 1] = x:narrow(1, 2, shp[1] - 2) end
      for vi, v in ipairs(views) do
        for _, eps in ipairs { false, 1e-6, 0.1, 0 } do
          for _, wd in ipairs { "none", "fp32", "bf16" } do
            local ww = wd ~= "none" and w:to(wd) or nil
            local e = eps or nil
            local what = ("rms_norm of %s %s view %d, eps %s, weight %s%s"):format(v:shape_str(), dt, vi,
              tostring(eps), wd, sp and " (special values)" or "")
            -- the composite: the same call with an input that requires grad
            local want = F.rms_norm(v:clone():requires_grad_(), c, ww, e)
            local got = fp8.no_grad(function() return F.rms_norm(v, c, ww, e) end)
            assert.are.equal(want:dtype(), got:dtype(), what .. ": dtype")
            assert_same(want, got, what)
            assert.are.same(want:shape(), got:shape())
          end
        end
      end
    end
  end)

  it("matches the definition in doubles, and a 0 row with eps 0 gives NaN as the composite does", function()
    local x = fp8.tensor({ { 1, -2, 3, 0.5 }, { 1e-3, 2e-3, -4e-3, 0 }, { 0, 0, 0, 0 } })
    local w = fp8.tensor({ 1, 0.5, -2, 3 })
    local y = fp8.no_grad(function() return F.rms_norm(x, 4, w, 1e-5) end):tolist()
    local xv, wv = x:tolist(), w:tolist()
    for i = 1, 3 do
      local s = 0
      for j = 1, 4 do s = s + xv[i][j] ^ 2 end
      local r = 1 / math.sqrt(s / 4 + 1e-5)
      for j = 1, 4 do
        local want = xv[i][j] * r * wv[j]
        assert.is_true(math.abs(y[i][j] - want) <= 1e-6 * math.max(1, math.abs(want)), ("[%d][%d]"):format(i, j))
      end
    end
    local z = fp8.no_grad(function() return F.rms_norm(x, 4, nil, 0) end):tolist()
    for j = 1, 4 do assert.is_true(z[3][j] ~= z[3][j], "0 · inf is NaN") end
  end)

  it("keeps the graph where an input requires grad, and the core's one-pass form refuses one", function()
    local x = fp8.randn({ 3, 8 }):requires_grad_()
    local w = fp8.randn({ 8 }):requires_grad_()
    local y = F.rms_norm(x, 8, w)
    assert.is_not_nil(y:grad_fn())
    y:sum():backward()
    assert.is_not_nil(x.grad)
    assert.is_not_nil(w.grad)
    local core = require "fp8._nn"
    assert.has_error(function() core.rms_norm_fwd(x, nil, 1e-5) end,
      "rms_norm: the one-pass form records no gradient; an input requires grad")
    assert.has_error(function() core.rms_norm_fwd(fp8.randn { 2, 4 }, fp8.randn { 3 }, 1e-5) end,
      "rms_norm: weight [3] must be [4] for input [2, 4]")
  end)
end)

describe("the exact GELU of a bf16 tensor by table", function()
  it("gives the fp32 kernel's bits on every bf16 value, on views and with a gradient to record", function()
    local all = {}
    for u = 0, 65535 do
      local e = (u >> 7) & 0xFF
      if not (e == 0xFF and (u & 0x7F) ~= 0) then all[#all + 1] = fb(u << 16) end
    end
    all[#all + 1] = nan
    local xb = fp8.tensor(all):to("bf16")
    assert_same(F.gelu(xb:float()), F.gelu(xb), "gelu of every bf16 value")
    local m = xb:narrow(1, 1, 65280):view(255, 256):t()
    assert_same(F.gelu(m:float()), F.gelu(m), "gelu of a transposed bf16 view")
    local xg = xb:narrow(1, 30000, 5000):clone():requires_grad_()
    local y = F.gelu(xg)
    assert.are.equal("GeluBackward", y:grad_fn())
    assert_same(F.gelu(xg:detach():float()), y, "gelu of a bf16 tensor that requires grad")
    -- against Φ in doubles: x·½·erfc(−x/√2), within 2e-6 relative where the value is not tiny
    local v, got = xb:narrow(1, 16000, 500):float():tolist(), F.gelu(xb:narrow(1, 16000, 500)):tolist()
    for i = 1, #v do
      local x = v[i]
      if math.abs(x) < 3 then   -- erf's Taylor series, good to ~1e-15 there
        local z = x / math.sqrt(2)
        local s, term, k = 0, z, 0
        repeat
          s = s + term / (2 * k + 1)
          k = k + 1
          term = -term * z * z / k
        until math.abs(term) < 1e-18 or k > 200
        local want = x * 0.5 * (1 + 2 / math.sqrt(math.pi) * s)
        assert.is_true(math.abs(got[i] - want) <= 2e-6 * math.abs(want) + 1e-30,
          ("gelu(%g) = %.9g, want %.9g"):format(x, got[i], want))
      end
    end
  end)
end)

describe("gather along the last dim with the rows ahead prefetched", function()
  it("gives x[.., index] in three dtypes, every dim, and names a bad position in a later row", function()
    fp8.manual_seed(9)
    for _, dt in ipairs { "fp32", "bf16", "fp16" } do
      local x = (fp8.randn { 40, 33 } * 10):to(dt)
      for d = 1, 2 do
        local ishape = { 40, 33 }
        ishape[d] = 5
        local idx = (fp8.rand(ishape) * x:size(d)):floor()
        local got, xv, iv = x:gather(d, idx):tolist(), x:float():tolist(), idx:tolist()
        for i = 1, ishape[1] do
          for j = 1, ishape[2] do
            local want = d == 1 and xv[iv[i][j] + 1][j] or xv[i][iv[i][j] + 1]
            assert.are.equal(want, got[i][j])
          end
        end
      end
    end
    local x = fp8.randn { 6, 10 }
    for _, bad in ipairs { 10, -1, 0.5, nan, 1e30 } do
      local idx = fp8.zeros { 6, 3 }
      idx[5][2] = bad
      assert.has_error(function() x:gather(2, idx) end)
    end
  end)
end)
