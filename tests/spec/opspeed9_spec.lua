-- Changed on 2026-12-07 (stop 100): tanh's AVX-512 map computes each element's own branch only (core/cpu/cpu_vtanh.h:
-- the far lanes packed by vcompressps, the exponential and the division on them 16 at a time, put back by
-- vexpandps), gather along a dim whose stride is not 1 no longer prefetches (core/gather.c: the prefetches of a
-- transposed x made it slower), and index_select hands over its result in a's dtype (a bf16 or fp16 result was copied
-- whole once more). docs/performance.md and docs/robustness.md, "index_select, gather and tanh (stop 100)". None
-- of it may move a bit: the first case holds the outputs' hashes as main's 97f5e147 gave them (its build/fp8lab, the
-- same on 1 and 2 threads and under FP8LAB_CPU_ISA=avx2): gather on the ring's rows (at most 256), longer rows and
-- the other dims, of contiguous, transposed, narrowed and permuted inputs in fp32, bf16 and fp16, a strided index,
-- take_along_dim and the backward; index_select along each dim of contiguous and transposed inputs in the three
-- dtypes, repeated positions, an empty index and the backward; tanh on 65,614 floats spread over every bit pattern
-- with the branch point's and the clamps' neighbours, ±0, ±inf and NaNs of both signs, at lengths either side of the
-- split's vector (16) and block (512), transposed, in place, bf16, fp16, nn.Tanh's forward and backward. The tanh
-- split's bits were checked over all 2^32 floats outside the suite (a small C program, not kept). The second case
-- holds index_select's one allocation of a bf16/fp16 result (main's peak was twice the result's).
local U = dofile("tests/spec/helpers/util.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"
local memory = require "fp8._memory"

local CODE = U.HASH_BITS .. [[
local h = hash_of
local out = {}
local function put(t) out[#out + 1] = h(t) end
fp8.manual_seed(7)
local function pos(shape, size) return (fp8.rand(shape) * size):floor() end
-- gather: the ring (rows of at most 256 along the last dim), longer rows, other dims; a contiguous, transposed,
-- at an offset, permuted; fp32, bf16, fp16; the index strided too; the backward
for _, dt in ipairs { "f32", "bf16", "f16" } do
  local a = fp8.randn { 40, 300 }:to(dt)
  local at = fp8.randn { 300, 40 }:to(dt):t()
  local a3 = fp8.randn { 6, 7, 9 }:to(dt)
  local ap = fp8.randn { 9, 6, 7 }:to(dt):permute { 2, 3, 1 }
  put(a:gather(2, pos({ 40, 50 }, 300)))
  put(a:gather(2, pos({ 40, 290 }, 300)))
  put(at:gather(2, pos({ 40, 50 }, 300)))
  put(at:gather(2, pos({ 40, 700 }, 300)))
  put(at:gather(1, pos({ 20, 300 }, 40)))
  put(a:narrow(2, 3, 200):gather(2, pos({ 40, 33 }, 200)))
  put(a:gather(2, pos({ 50, 40 }, 300):t()))
  for d = 1, 3 do
    local s = { 6, 7, 9 }; s[d] = 5
    put(a3:gather(d, pos(s, ({ 6, 7, 9 })[d])))
    put(ap:gather(d, pos(s, ({ 6, 7, 9 })[d])))
  end
  put(a:take_along_dim(pos({ 1, 20 }, 300), 2))
end
local ag = fp8.randn { 30, 70 }:requires_grad_()
local ig = pos({ 30, 90 }, 70)
;(ag:gather(2, ig) * fp8.randn { 30, 90 }):sum():backward()
put(ag.grad)
local agt = fp8.randn { 70, 30 }:t():requires_grad_()
;(agt:gather(2, ig) * fp8.randn { 30, 90 }):sum():backward()
put(agt.grad)
-- index_select: each dim, contiguous and transposed, fp32/bf16/fp16, repeated positions; the backward
for _, dt in ipairs { "f32", "bf16", "f16" } do
  local a = fp8.randn { 33, 65 }:to(dt)
  local a3 = fp8.randn { 5, 6, 7 }:to(dt)
  put(a:index_select(1, pos({ 50 }, 33)))
  put(a:index_select(2, pos({ 50 }, 65)))
  put(a:t():index_select(1, pos({ 20 }, 65)))
  put(a:t():index_select(2, pos({ 20 }, 33)))
  for d = 1, 3 do put(a3:index_select(d, pos({ 9 }, ({ 5, 6, 7 })[d]))) end
  put(a:index_select(1, fp8.tensor { 3, 3, 0, 32 }))
  put(a:index_select(1, fp8.zeros { 0 }))
end
for _, d in ipairs { 1, 2 } do
  local ai = fp8.randn { 33, 65 }:requires_grad_()
  local ix = pos({ 80 }, ({ 33, 65 })[d])
  local y = ai:index_select(d, ix)
  ;(y * fp8.randn(y:size())):sum():backward()
  put(ai.grad)
end
local ab = fp8.randn { 33, 65 }:to("bf16"):requires_grad_()
;(ab:index_select(1, pos({ 40 }, 33)):float() * 3):sum():backward()
put(ab.grad)
-- tanh: 65,536 floats spread over every bit pattern and the branch point's neighbours, at lengths either side of
-- the split's blocks (512) and vectors (16), in place, transposed, bf16/fp16, nn.Tanh forward and backward
local v = {}
for k = 0, 65535 do v[#v + 1] = string.unpack("<f", string.pack("<I4", (k * 65537 + 12345) & 0xffffffff)) end
for _, c in ipairs { 0.9, 8.5, 9, 43.25, 86.5 } do
  for _, s in ipairs { 1, -1 } do
    local b = string.unpack("<I4", string.pack("<f", c * s))
    for d = -3, 3 do v[#v + 1] = string.unpack("<f", string.pack("<I4", b + d)) end
  end
end
for _, c in ipairs { 0, -0.0, 1 / 0, -1 / 0, 0 / 0, -(0 / 0), 2 ^ -149, -2 ^ -149 } do v[#v + 1] = c end
local x = fp8.tensor(v)
local n = x:numel()
put(x:tanh())
for _, len in ipairs { 1, 15, 16, 17, 511, 512, 513, 1040, 4099 } do put(x:narrow(1, 3, len):tanh()) end
put(x:narrow(1, 1, 65536):reshape({ 256, 256 }):t():tanh())
local y = x:clone(); y:tanh_(); put(y)
put(x:to("bf16"):tanh())
put(x:to("f16"):tanh())
put(fp8.nn.Tanh()(x))
local xg = x:clone():requires_grad_()
fp8.nn.Tanh()(xg):sum():backward()
put(xg.grad)
put(fp8.randn { 4096 * 3 + 5 }:tanh())
print(n .. " " .. table.concat(out, " "))
]]

describe("gather, index_select and tanh keep their bits (stop 100)", function()
  it("gives main's bits on every route, on 1 and 2 threads, with AVX-512 and AVX2", function()
    local want = "65614 2000:8230b77a6ee0 11600:b53dca16fba9 2000:c6a3d72a6e2e 28000:71d399feae24 6000:5be24f4d2180 "
      .. "1320:d0fb55237099 2000:d3a18dfb226f 315:330e0dc17a56 315:b4dde2c36bc7 270:c0d56a681740 "
      .. "270:aeb38c8f0055 210:50b4630b4e62 210:cc1266f3ffe5 800:4ad9ca449fc3 2000:f0db1349df65 "
      .. "11600:d3e2f25f8d65 2000:a298d8afdf65 28000:4aeb24985ea5 6000:6478462c7e5 1320:8e2e27d8c045 "
      .. "2000:3e28a9dddf65 315:ab6f9331a1d7 315:b1f1918da1d7 270:4234d8f1aedd 270:ba632a1caedd "
      .. "210:776308506a2d 210:530350176a2d 800:a9a0979db1a5 2000:e8da78007f65 11600:73ad9c472d65 "
      .. "2000:e007908fff65 28000:c3810ad7dea5 6000:117f452a7e5 1320:72c519d28045 2000:6068f5a55f65 "
      .. "315:d7e9b74921d7 315:c70ce9e881d7 270:6a5197262edd 270:44cda49baedd 210:a17c1862a2d "
      .. "210:33e70528aa2d 800:73df72b491a5 2100:74c1338dcda5 2100:92c8424f6bcd 3250:19ad1cd46f73 "
      .. "1650:1be9db6aa285 660:1902fbb50425 1300:f42eef677f97 378:94fb6619ae14 315:7ff8c57436a9 "
      .. "270:9993c9196a60 260:40a5757f1940 0:cbf29ce484222325 3250:2f12e321c3ad 1650:da641de71ead "
      .. "660:6603c6d09b35 1300:59ace3652d35 378:19269793f24d 315:8d0d6a60a1d7 270:29724161aedd "
      .. "260:185609f4e7f5 0:cbf29ce484222325 3250:bf31798d43ad 1650:2762160d1ead 660:122caf34db35 "
      .. "1300:eea49ea7ad35 378:bd7e5083924d 315:3d74fc1d01d7 270:a94634f26edd 260:2a710c9927f5 "
      .. "0:cbf29ce484222325 2145:e6565982de42 2145:de35fcae0996 2145:a208a195e65f 65614:4260f84f5416 "
      .. "1:b64c82807bfa 15:17e450a6615d 16:aff5277eca15 17:5b91fe2d6dba 511:a3539e84cbfd 512:4e12f7a76d25 "
      .. "513:c83768009ffa 1040:723666832615 4099:a1311c31693d 65536:e991a93dc098 65614:4260f84f5416 "
      .. "65614:e978b132d7dd 65614:b04f44ea37dd 65614:4260f84f5416 65614:e953282cced4 12293:28bb0ed685f\n"
    assert.are.equal(want, U.same_on_threads(BIN, CODE))
    assert.are.equal(want, U.same_on_threads("FP8LAB_CPU_ISA=avx2 " .. BIN, CODE))
  end)
end)

describe("index_select's result (stop 100)", function()
  it("is allocated once for a bf16 or fp16 input", function()
    -- the result in a's dtype was handed to fl_host_result, which converts from fp32 and so copied it whole: peak
    -- storage twice the result's; now the result and the index's fp32 copy
    for _, dt in ipairs { "bf16", "fp16" } do
      local x = fp8.randn { 256, 64 }:to(dt)
      local i = (fp8.rand { 50 } * 256):floor()
      collectgarbage()
      local live0 = memory.bytes()
      memory.reset_peak()
      local y = fp8.no_grad(function() return x:index_select(1, i) end)
      local _, peak = memory.bytes()
      assert.are.equal(dt, y:dtype())
      assert.are.equal(50 * 64 * 2 + 50 * 4, peak - live0)
      assert.are.same(fp8.no_grad(function() return x:float():index_select(1, i) end):tolist(), y:float():tolist())
    end
  end)
end)
