-- Changed on 2026-12-07 (stop 101): a conv2d of a channels-last input or weight (torch's channels_last: NHWC memory
-- seen as [N, C, H, W], by torch's rule on the strides) gives a channels-last result, as torch 2.15's, on every route
-- of core/conv_cols.c, and oneDNN's direct primitives read the input and the output gradient NHWC in place and write
-- the result and the input's gradient NHWC (core/cpu/cpu_conv.c, the nhwc descriptors), where the input was copied to
-- NCHW, reordered to the kernel's layout (NHWC again) and the result copied out to NCHW; on channels-last operands a
-- bf16 first layer (one group of under 16 channels) runs the direct forward and weight gradient, and a 1×1 kernel at
-- stride 1 without padding (fp32, bf16) the direct forward, faster there than the columns and their copies.
-- docs/performance.md, "conv2d on channels_last (stop 101)"; docs/robustness.md, "conv2d on channels_last (stop 101)".
-- These cases check torch 2.15's bits and strides on 14 geometries whose sums are exact in any order
-- (tests/data/convcl_torch.lua, scripts/gen_convcl.py) on 1 and 2 threads, the routes by the profiler's events, and
-- that the forward's and the input gradient's bits do not depend on the thread count.
local U = dofile("tests/spec/helpers/util.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"

-- NHWC memory seen as [N, C, H, W] (torch's x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2))
local CL = [[
local function cl(t) return t:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3) end
]]

-- Checks the fixture's cases in a fresh process (its threads): prints how many values it compared or the first value
-- or stride that differs.
local FIXTURE_CODE = CL .. [[
local F = fp8.nn.F
local T = dofile("tests/data/convcl_torch.lua")
local CASES = {   -- scripts/gen_convcl.py's CASES: x shape, w shape, bias, stride, padding, dilation, groups, dtype,
                  -- which operands are channels-last
  k3_bias_bf16 = { { 1, 16, 4, 4 }, { 16, 16, 3, 3 }, true, 1, 1, 1, 1, "bf16", "x" },
  first3_bias_bf16 = { { 2, 3, 6, 6 }, { 16, 3, 3, 3 }, true, 1, 1, 1, 1, "bf16", "x" },
  first3_k7s2_bf16 = { { 1, 3, 10, 10 }, { 16, 3, 7, 7 }, false, 2, 3, 1, 1, "bf16", "x" },
  k1_bf16 = { { 2, 16, 4, 4 }, { 16, 16, 1, 1 }, false, 1, 0, 1, 1, "bf16", "x" },
  k1s2_bf16 = { { 1, 16, 6, 6 }, { 16, 16, 1, 1 }, false, 2, 0, 1, 1, "bf16", "x" },
  k3s4_bf16 = { { 1, 16, 9, 9 }, { 16, 16, 3, 3 }, false, 4, 1, 1, 1, "bf16", "x" },
  groups4_bf16 = { { 1, 32, 4, 4 }, { 32, 8, 3, 3 }, false, 1, 1, 1, 4, "bf16", "x" },
  k3_bias_fp32 = { { 1, 16, 5, 5 }, { 16, 16, 3, 3 }, true, 1, 1, 1, 1, "fp32", "x" },
  k3s2_dil_fp32 = { { 1, 16, 7, 7 }, { 16, 16, 3, 3 }, false, 2, 2, 2, 1, "fp32", "x" },
  first3_fp32 = { { 2, 3, 6, 6 }, { 16, 3, 3, 3 }, true, 1, 1, 1, 1, "fp32", "x" },
  k1_bias_fp32 = { { 2, 16, 4, 4 }, { 16, 16, 1, 1 }, true, 1, 0, 1, 1, "fp32", "x" },
  c1_fp32 = { { 2, 1, 5, 5 }, { 8, 1, 3, 3 }, false, 1, 1, 1, 1, "fp32", "x" },
  wcl_fp32 = { { 1, 16, 4, 4 }, { 16, 16, 3, 3 }, false, 1, 1, 1, 1, "fp32", "w" },
  xwcl_bf16 = { { 1, 16, 4, 4 }, { 16, 16, 3, 3 }, true, 1, 1, 1, 1, "bf16", "xw" },
}
local function v(shape, seed, dt)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local t = {}
  for i = 0, n - 1 do t[i + 1] = ((7919 * i + 104729 * seed) % 251 - 125) / 64 end
  return fp8.tensor(t):reshape(shape):to(dt)
end
local function bits(x, dt)   -- a value's bits: bf16's 16 (an exact bf16 value), fp32's 32
  local b = string.unpack("<I4", string.pack("<f", x))
  if dt == "fp32" then return b, 8 end
  assert(b & 0xffff == 0, "not a bf16 value")
  return b >> 16, 4
end
local count = 0
local names = {}
for name in pairs(CASES) do names[#names + 1] = name end
table.sort(names)
for _, name in ipairs(names) do
  local c, want = CASES[name], T[name]
  local dt = c[8]
  local x, w = v(c[1], 1, dt), v(c[2], 2, dt)
  if c[9]:find("x") then x = cl(x) end
  if c[9]:find("w") then w = cl(w) end
  assert(table.concat(x:stride(), ",") == table.concat(want.x_stride, ","), name .. ": the input's strides")
  x, w = x:requires_grad_(), w:requires_grad_()
  local b = c[3] and v({ c[2][1] }, 3, dt):requires_grad_() or nil
  local y = F.conv2d(x, w, b, { stride = c[4], padding = c[5], dilation = c[6], groups = c[7] })
  assert(y:dtype() == dt, name .. ": the output is " .. y:dtype())
  local ys = table.concat(y:stride(), ",")
  if ys ~= table.concat(want.y_stride, ",") then
    print(("%s: the result's strides are {%s}, torch's {%s}"):format(name, ys, table.concat(want.y_stride, ",")))
    os.exit(1)
  end
  y:backward(v(y:shape(), 4, dt))
  local got = { y = y, dx = x.grad, dw = w.grad, db = b and b.grad }
  for _, k in ipairs { "y", "dx", "dw", "db" } do
    if want[k] then
      -- (the gradients of bf16 leaves come fp32, here exact sums: rounded once to bf16, as torch's bf16 gradients)
      local vals = got[k]:to(dt):float():contiguous():view(-1):tolist()
      local _, nd = bits(0, dt)
      assert(#vals * nd == #want[k], name .. "." .. k .. ": sizes")
      for i, e in ipairs(vals) do
        local tw = tonumber(want[k]:sub(nd * i - nd + 1, nd * i), 16)
        if bits(e, dt) ~= tw then
          print(("%s.%s[%d]: 0x%x (%.9g), torch's 0x%x"):format(name, k, i, bits(e, dt), e, tw))
          os.exit(1)
        end
        count = count + 1
      end
    end
  end
end
print(count .. " values as torch's")
]]

-- The route of each conv's forward and of its weight's gradient alone, told by the profiler's events (the columns
-- run GEMMs, counted as matmul events inside the conv's; the direct route none): "direct" or "columns" for each
local ROUTE_CODE = CL .. [[
local F = fp8.nn.F
local out = {}
local function route(f)
  local prof = fp8.profiler.profile {}
  prof:start()
  f()
  prof:stop()
  for _, e in ipairs(prof:events()) do if e.name == "matmul" then return "columns" end end
  return "direct"
end
for _, c in ipairs(ROUTES) do   -- dtype, C, OC, k, stride, padding
  local x = cl(fp8.randn({ 2, c[2], 9, 9 }):to(c[1]))
  local w = fp8.randn({ c[3], c[2], c[4], c[4] }):to(c[1])
  local o = { stride = c[5], padding = c[6] }
  local wg = w:detach():requires_grad_()
  out[#out + 1] = route(function() F.conv2d(x, w, nil, o) end) .. "/" ..
    route(function() F.conv2d(x, wg, nil, o):sum():backward() end)
end
print(#out .. " " .. table.concat(out, " "))
]]

describe("conv2d on channels_last (stop 101)", function()
  it("gives torch 2.15's bits and its channels_last result on 1 and 2 threads and under avx2 and avx512", function()
    local one = U.same_on_threads(BIN, FIXTURE_CODE)
    assert.are.equal("32774 values as torch's\n", one)
    -- the columns for bf16 and fp32's AVX2 kernels (avx2), oneDNN's bf16 emulation without AVX512_BF16 (avx512)
    U.same_under_caps(BIN, FIXTURE_CODE, one, { "avx2", "avx512" })
  end)

  it("runs a channels-last bf16 first layer's forward and weight gradient and a 1×1 forward on oneDNN's direct route",
    function()
    local routes = [[ROUTES = { { "bf16", 16, 24, 3, 1, 1 }, { "bf16", 3, 16, 3, 1, 1 }, { "bf16", 3, 16, 7, 2, 3 },
      { "bf16", 16, 32, 1, 1, 0 }, { "fp32", 16, 32, 1, 1, 0 }, { "bf16", 16, 16, 3, 4, 1 }, { "bf16", 16, 32, 1, 2, 0 },
      { "fp16", 16, 24, 3, 1, 1 } }
    ]]
    local out, ok = U.sh(("%s -e %s"):format(BIN, U.q(routes .. ROUTE_CODE)))
    assert.is_true(ok, out)
    if U.avx512_runs() then
      -- (a 1×1 kernel's weight gradient keeps the columns; a stride past the kernel's size too in bf16, where
      -- oneDNN 2.6.3's AMX kernel is wrong; fp16 has no oneDNN convolution)
      assert.are.equal("8 direct/direct direct/direct direct/direct direct/columns direct/columns columns/columns "
        .. "columns/columns columns/columns\n", out)
    end
    out, ok = U.sh(("FP8LAB_CPU_ISA=avx2 %s -e %s"):format(BIN, U.q(routes .. ROUTE_CODE)))
    assert.is_true(ok, out)
    -- (under avx2 oneDNN 2.6 has no bf16 convolution: the columns; fp32's direct forward stays)
    assert.are.equal("8 columns/columns columns/columns columns/columns columns/columns direct/columns "
      .. "columns/columns columns/columns columns/columns\n", out)
  end)

  it("gives the forward's and the input gradient's bits on 1 and 2 threads, and the NCHW forward's", function()
    local code = U.HASH_BITS .. CL .. [[
      local F = fp8.nn.F
      local h = hash_of
      fp8.manual_seed(3)
      local out = {}
      -- dtype, C, H, OC, k, stride, padding: 3×3, a first layer, a 1×1 kernel
      for _, c in ipairs { { "fp32", 32, 20, 32, 3, 1, 1 }, { "bf16", 32, 20, 32, 3, 1, 1 }, { "fp32", 3, 20, 16, 3, 1, 1 },
                           { "bf16", 3, 20, 16, 3, 1, 1 }, { "fp32", 32, 20, 32, 1, 1, 0 } } do
        local x0 = fp8.randn({ 4, c[2], c[3], c[3] }):to(c[1])
        local w = (fp8.randn({ c[4], c[2], c[5], c[5] }) * 0.3):to(c[1])
        local o = { stride = c[6], padding = c[7] }
        local x = cl(x0):requires_grad_()
        local y = F.conv2d(x, w, nil, o)
        y:backward(fp8.randn(y:shape()):to(c[1]))
        -- the same kernel as the NCHW input's forward where both run it (the layouts left to oneDNN gave NHWC)
        if c[2] > 3 and c[5] > 1 then assert(h(F.conv2d(x0, w, nil, o)) == h(y), c[1] .. ": not the NCHW forward's bits") end
        out[#out + 1] = h(y) .. " " .. h(x.grad)
      end
      print(#out .. " " .. table.concat(out, " "))
    ]]
    local got = U.same_on_threads(BIN, code)
    assert.is_truthy(got:match("^5 "), got)
  end)
end)
