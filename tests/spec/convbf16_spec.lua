-- Changed on 2026-12-07 (stop 100): a bf16 conv2d on the CPU runs oneDNN's direct convolution primitives forward and
-- backward (core/cpu/cpu_conv.c; AMX's brgconv on this host, AVX512_BF16's, or oneDNN's bf16 emulation on AVX-512)
-- where it made columns (im2col + a bf16 GEMM; still the route under FP8LAB_CPU_ISA=avx2, of fp16, of a 1×1 kernel at
-- stride 1 without padding, of a stride past the kernel's size, where oneDNN 2.6.3's AMX kernel is wrong, and of what
-- fp32 declines), and the blocked copies' buffers are kept between calls.
-- docs/performance.md, "bf16 conv2d on oneDNN (stop 100)". What the output is: the bf16 products summed in fp32 (in
-- the kernel's order) and rounded to bf16 once, as torch 2.15's mkldnn bf16 conv does; the gradients the same from
-- the output gradient rounded to bf16. These cases check torch 2.15's bits where every order gives the same sum
-- (tests/data/convbf16_torch.lua, scripts/gen_convbf16.py) on 1 and 2 threads and under FP8LAB_CPU_ISA=avx2 (the
-- columns), and, on random values, that each value is the definition summed in Lua's doubles rounded once to bf16
-- wherever the fp32 sum's error bound cannot move it across a rounding boundary (the gradients, fp32, within that
-- bound).
local F = fp8.nn.F
local U = dofile("tests/spec/helpers/util.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"

-- Checks the fixture's cases in a fresh process (its environment: threads, the ISA cap); prints how many values it
-- compared or the first value that differs.
local FIXTURE_CODE = [[
local F = fp8.nn.F
local T = dofile("tests/data/convbf16_torch.lua")
local CASES = {   -- scripts/gen_convbf16.py's CASES: x shape, w shape, bias, stride, padding, dilation, groups
  k3p1_bias = { { 2, 16, 5, 5 }, { 16, 16, 3, 3 }, true, 1, 1, 1, 1 },
  k3s2 = { { 2, 16, 7, 7 }, { 16, 16, 3, 3 }, false, 2, 1, 1, 1 },
  groups2 = { { 2, 32, 4, 4 }, { 32, 8, 3, 3 }, false, 1, 1, 1, 4 },
  first3 = { { 2, 3, 8, 8 }, { 16, 3, 3, 3 }, true, 1, 1, 1, 1 },
  dil2 = { { 1, 16, 7, 7 }, { 16, 16, 3, 3 }, false, 1, 2, 2, 1 },
  k1s2 = { { 2, 16, 6, 6 }, { 32, 16, 1, 1 }, false, 2, 0, 1, 1 },
}
local function v(shape, seed)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local t = {}
  for i = 0, n - 1 do t[i + 1] = ((7919 * i + 104729 * seed) % 251 - 125) / 64 end
  return fp8.tensor(t):reshape(shape):to("bf16")
end
local function bits(x)   -- a value's bf16 bits (an exact bf16 value)
  local b = string.unpack("<I4", string.pack("<f", x))
  assert(b & 0xffff == 0, "not a bf16 value")
  return b >> 16
end
local count = 0
local names = {}
for name in pairs(CASES) do names[#names + 1] = name end
table.sort(names)
for _, name in ipairs(names) do
  local c, want = CASES[name], T[name]
  local x, w = v(c[1], 1):requires_grad_(), v(c[2], 2):requires_grad_()
  local b = c[3] and v({ c[2][1] }, 3):requires_grad_() or nil
  local y = F.conv2d(x, w, b, { stride = c[4], padding = c[5], dilation = c[6], groups = c[7] })
  assert(y:dtype() == "bf16", name .. ": the output is " .. y:dtype())
  y:backward(v(y:shape(), 4))
  local got = { y = y, dx = x.grad, dw = w.grad, db = b and b.grad }
  for _, k in ipairs { "y", "dx", "dw", "db" } do
    if want[k] then
      -- (the output is bf16; the gradients of bf16 leaves come fp32, here exact sums: rounded once to bf16, as
      -- torch's bf16 gradients are)
      local vals = got[k]:to("bf16"):float():contiguous():view(-1):tolist()
      assert(#vals * 4 == #want[k], name .. "." .. k .. ": sizes")
      for i, e in ipairs(vals) do
        local tw = tonumber(want[k]:sub(4 * i - 3, 4 * i), 16)
        if bits(e) ~= tw then
          print(("%s.%s[%d]: 0x%04x (%.9g), torch's 0x%04x"):format(name, k, i, bits(e), e, tw))
          os.exit(1)
        end
        count = count + 1
      end
    end
  end
end
print(count .. " values as torch's")
]]

-- a double's bf16 neighbourhood: the bf16 value RNE gives (through fp32: exact where x is an fp32 value)
local function bf16(x)
  local b = string.unpack("<I4", string.pack("<f", x))
  if (b & 0x7f800000) == 0x7f800000 then return x end
  b = (b + 0x7fff + ((b >> 16) & 1)) & 0xffff0000
  return string.unpack("<f", string.pack("<I4", b))
end

-- got (bf16) is want (double, the exact sum) rounded once to bf16, wherever want ± err (the fp32 sum's error
-- bound) rounds to one bf16 value; elsewhere within the bf16 values that interval reaches
local function rounded_once(what, got, want, mag, K)
  local g = got:float():contiguous():view(-1):tolist()
  assert.are.equal(#want, #g, what .. ": sizes")
  local decided = 0
  for i = 1, #want do
    local ref = want[i]
    local err = (K + 1) * 2 ^ -24 * mag[i] + 1e-30
    local lo, hi = bf16(ref - err), bf16(ref + err)
    if lo == hi then
      decided = decided + 1
      if g[i] ~= lo then
        error(("%s: element %d is %.9g, the double sum %.9g rounded once is %.9g"):format(what, i, g[i], ref, lo), 2)
      end
    elseif not (g[i] >= lo and g[i] <= hi) then
      error(("%s: element %d is %.9g, outside %.9g .. %.9g"):format(what, i, g[i], lo, hi), 2)
    end
  end
  assert.is_true(decided > #want * 0.9, what .. ": too few values decided")
end

-- The route a conv2d's forward and backward take, told by the profiler's events (the columns run GEMMs, counted as
-- matmul events inside the conv's; the direct route none): prints "direct" or "columns" for each conv in ROUTES
local ROUTE_CODE = [[
local F = fp8.nn.F
local out = {}
for _, c in ipairs(ROUTES) do   -- dtype, C, OC, k, stride
  local x = fp8.randn({ 2, c[2], 9, 9 }):to(c[1]):requires_grad_()
  local w = fp8.randn({ c[3], c[2], c[4], c[4] }):to(c[1]):requires_grad_()
  local prof = fp8.profiler.profile {}
  prof:start()
  F.conv2d(x, w, nil, { padding = c[4] // 2, stride = c[5] }):sum():backward()
  prof:stop()
  local mm = 0
  for _, e in ipairs(prof:events()) do if e.name == "matmul" then mm = mm + 1 end end
  out[#out + 1] = mm == 0 and "direct" or "columns"
end
print(#out .. " " .. table.concat(out, " "))
]]
local ROUTES = [[ROUTES = { { "bf16", 16, 24, 3, 1 }, { "bf16", 32, 16, 3, 2 }, { "fp16", 16, 24, 3, 1 },
  { "bf16", 3, 16, 3, 1 }, { "bf16", 16, 32, 1, 2 }, { "bf16", 16, 16, 3, 4 } }
]]

describe("bf16 conv2d on oneDNN (stop 100)", function()
  it("runs oneDNN's direct route for bf16 with AVX-512; the columns under avx2, for fp16, first layers, 1×1 and a "
    .. "stride past the kernel", function()
    local cols = "6 columns columns columns columns columns columns\n"
    local out, ok = U.sh(("FP8LAB_CPU_ISA=avx2 %s -e %s"):format(BIN, U.q(ROUTES .. ROUTE_CODE)))
    assert.is_true(ok, out)
    assert.are.equal(cols, out)
    out, ok = U.sh(("%s -e %s"):format(BIN, U.q(ROUTES .. ROUTE_CODE)))
    assert.is_true(ok, out)
    if U.avx512_runs() then
      assert.are.equal("6 direct direct columns columns columns columns\n", out)
    else
      assert.are.equal(cols, out)
    end
  end)

  -- oneDNN 2.6.3's AMX bf16 brgconv forward gives wrong sums where a stride passes the kernel's size (here 3×3 at
  -- stride 4: -2.5e37 for 0.0023 in 4,672 of 65,536 outputs on one thread; 2×2 at stride 4 wrote past its buffers):
  -- such a bf16 conv keeps the columns (cpu_conv.c, cv_bf16_declined)
  it("gives right values where the stride passes the kernel (oneDNN's AMX kernel there is wrong)", function()
    local code = [[
      local F = fp8.nn.F
      fp8.manual_seed(3)
      local x = fp8.randn({ 1, 16, 256, 256 }):to("bf16")
      local w = (fp8.randn({ 16, 16, 3, 3 }) * 0.3):to("bf16")
      local got = F.conv2d(x, w, nil, { padding = 1, stride = 4 }):float():reshape({ -1 }):tolist()
      -- the same values in fp32 (the sums exact to 2^-24 of their terms; a bf16 result is within 2^-8 of it)
      local want = F.conv2d(x:float(), w:float(), nil, { padding = 1, stride = 4 }):reshape({ -1 }):tolist()
      for i = 1, #want do
        if not (math.abs(got[i] - want[i]) <= 2 ^ -8 * math.abs(want[i]) + 2 ^ -20) then
          print(("element %d is %.9g, fp32's %.9g"):format(i, got[i], want[i]))
          os.exit(1)
        end
      end
      print(#want .. " right")
    ]]
    local out, ok = U.sh(("OMP_NUM_THREADS=1 %s -e %s"):format(BIN, U.q(code)))
    assert.are.equal("65536 right\n", out)
    assert.is_true(ok)
  end)

  it("gives torch 2.15's bits where every order of the sums is exact, on 1 and 2 threads and under avx2", function()
    local one = U.same_on_threads(BIN, FIXTURE_CODE)
    assert.are.equal("21648 values as torch's\n", one)
    -- the columns (oneDNN 2.6 has no bf16 convolution below AVX-512), and oneDNN's emulation of bf16 on AVX-512
    -- without AVX512_BF16
    U.same_under_caps(BIN, FIXTURE_CODE, one, { "avx2", "avx512" })
  end)

  it("rounds the fp32 sums once: the forward and the gradients against the definition in doubles", function()
    fp8.manual_seed(7)
    local cases = {
      -- x shape, OC, k, stride, dilation, padding (t, b, l, r), groups, bias
      { { 2, 16, 8, 8 }, 32, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1, false },
      { { 2, 16, 7, 7 }, 24, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1, 1, 1 }, 1, true },
      { { 2, 32, 6, 6 }, 32, { 3, 3 }, { 1, 1 }, { 2, 2 }, { 2, 2, 2, 2 }, 4, false },
      { { 3, 3, 9, 9 }, 16, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1, true },   -- a first layer
      { { 1, 20, 5, 6 }, 17, { 2, 3 }, { 1, 2 }, { 1, 1 }, { 0, 1, 2, 0 }, 1, false },  -- 17 channels: a spare block
    }
    for ci, c in ipairs(cases) do
      local what = "case " .. ci
      local x = (fp8.randn(c[1]) * 1.5):to("bf16")
      local w = (fp8.randn { c[2], c[1][2] // c[7], c[3][1], c[3][2] } * 0.5):to("bf16")
      local b = c[8] and fp8.randn({ c[2] }):to("bf16") or nil
      local xg, wg = x:detach():requires_grad_(), w:detach():requires_grad_()
      local opts = { stride = c[4], dilation = c[5], groups = c[7],
        padding = { c[6][1], c[6][3] } }
      if c[6][1] ~= c[6][2] or c[6][3] ~= c[6][4] then   -- asymmetric: pad the input by hand, then no padding
        opts.padding = 0
      end
      local xin = opts.padding == 0 and F.pad(xg, { c[6][3], c[6][4], c[6][1], c[6][2] }) or xg
      local y = F.conv2d(xin, wg, b, opts)
      assert.are.equal("bf16", y:dtype())
      local ry, rm = U.ref_conv2d(x, w, b, c[4], c[5], c[6], c[7])
      rounded_once(what .. ": the output", y, ry, rm, c[1][2] // c[7] * c[3][1] * c[3][2])
      local gy = fp8.randn(y:shape()):to("bf16")
      y:backward(gy)
      local rb = U.ref_conv2d_bwd(x, w, gy, c[4], c[5], c[6], c[7])
      -- the gradients of bf16 leaves come fp32: the fp32 sums of the bf16 products, within their bound
      assert.are.equal("fp32", xg.grad:dtype())
      U.conv_close(what .. ": the input's gradient", xg.grad, rb.dx, rb.dxm, rb.K[1])
      U.conv_close(what .. ": the weight's gradient", wg.grad, rb.dw, rb.dwm, rb.K[2])
    end
  end)

  it("gives the forward's and the input gradient's bits on 1 and 2 threads, chunked or whole", function()
    local code = U.HASH_BITS .. [[
      local F = fp8.nn.F
      local h = hash_of
      fp8.manual_seed(3)
      local out = {}
      -- C, H, OC, stride per case, 2 samples but the last: 4 samples of 16·256² input and 16·64² output elements,
      -- 3 a chunk of 2^22 (chunks of 3 and 1); its input gradient hashed for its last sample's first channel only
      for _, c in ipairs { { 2, 32, 16, 64, 1 }, { 2, 3, 20, 16, 1 }, { 4, 16, 256, 16, 4 } } do
        local x = fp8.randn({ c[1], c[2], c[3], c[3] }):to("bf16"):requires_grad_()
        local w = (fp8.randn({ c[4], c[2], 3, 3 }) * 0.3):to("bf16")
        local y = F.conv2d(x, w, nil, { padding = 1, stride = c[5] })
        y:backward(fp8.randn(y:shape()):to("bf16"))
        -- each sample's own bits, whatever the chunk
        local y1 = F.conv2d(x:detach():narrow(1, c[1], 1), w, nil, { padding = 1, stride = c[5] })
        assert(h(y1) == h(y:narrow(1, c[1], 1)), "the last sample alone gave other bits")
        out[#out + 1] = h(y) .. " " .. h(x.grad:narrow(1, c[1], 1):narrow(2, 1, 1))
      end
      print(#out .. " " .. table.concat(out, " "))
    ]]
    local got = U.same_on_threads(BIN, code)
    assert.is_truthy(got:match("^3 "), got)
  end)
end)
