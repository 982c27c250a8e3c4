-- Changed on 2026-12-07 (stop 102): the ops stop 102's sweep on an AVX2-only Zen 3 left slow against PyTorch 2.15
-- (docs/performance.md, "The ops against PyTorch on Zen 3 (stop 102)"): x:relu() of a bf16 tensor with nothing to
-- record computes max(x, 0) on the bf16 bits in one pass (core/cpu/cpu_nn_act.c relu_bf16_bits), where F.relu widened
-- it into an fp32 tensor that was then rounded back; a bf16 sum or mean over a contiguous run widens in registers
-- (core/cpu/cpu_reduce.c sum_bf16_f64), where each tile was widened into a buffer first; bf16 + - * / of contiguous
-- tensors of one size run in one AVX2 loop without AVX512_BF16 too (core/cpu/cpu_elementwise.c
-- bf16_binop_run_any), where such a host took the tiles' route. Each keeps main's bits: the
-- first case holds what main's 52a8f1b1 gave (its build/fp8lab, OMP_NUM_THREADS 1 and 2), the second checks every
-- bf16 pattern against a definition in Lua, the third the sums against Lua's doubles; the last fails on 52a8f1b1
-- (x:relu() of a bf16 x made an fp32 tensor of x's size on the way).
local U = dofile("tests/spec/helpers/util.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"

local CODE = U.HASH_BITS .. [==[
local h = hash_of
local out = {}
local function fill(n, k, scale)
  local v = {}
  for i = 1, n do v[i] = (((i * 37 + k * 11) % 203) - 101) / 16 * scale end
  return fp8.tensor(v)
end
local nan = string.unpack("<f", string.pack("<I4", 0x7fc01234))
local special = { 0 / 0, 1 / 0, -1 / 0, 0.0, -0.0, 2 ^ -133, -(2 ^ -133), 3e38, -3e38, nan, -nan }
local function with_special(t)
  local v = t:contiguous():view(-1)
  for i, s in ipairs(special) do if i * 5 <= v:numel() then v[i * 5] = s end end
  return v
end
-- lengths around the 16 lanes, the 512-element tiles, the 65536-element blocks, the spans of the activations
for k, n in ipairs { 0, 1, 15, 16, 17, 70, 511, 512, 513, 4097, 65535, 65536, 65537, 140001 } do
  for _, scale in ipairs { 1, 1e30 } do
    local x = with_special(fill(n, k, scale)):to("bf16")
    out[#out + 1] = h(x:relu())
    out[#out + 1] = h(x:sum()) .. "," .. h(x:mean())
    local y = fill(n, k + 1, scale):to("bf16")
    out[#out + 1] = h(y:sum()) .. "," .. h(y:mean())
    out[#out + 1] = h(x + y) .. "," .. h(x - y) .. "," .. h(x * y) .. "," .. h(x / y) .. "," .. h(y / x)
    out[#out + 1] = h(x:clone():add_(y)) .. "," .. h(x:clone():mul_(x))
  end
end
-- views: shapes summed along each dim, transposed (dense, not contiguous), channels-last, a narrowed (not dense) one
for k, shape in ipairs { { 33, 65 }, { 4, 3, 130 }, { 2, 64, 5, 7 }, { 1030, 3 } } do
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local x = fill(n, k, 1):reshape(shape):to("bf16")
  for d = 1, #shape do out[#out + 1] = h(x:sum(d)) .. "," .. h(x:mean(d)) end
  local t = x:transpose(1, #shape)
  out[#out + 1] = h(t:relu()) .. "," .. h(t:sum()) .. "," .. h(t:sum(1))
  if #shape == 4 then
    local cl = x:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3)
    out[#out + 1] = h(cl:relu()) .. "," .. h(cl:sum()) .. "," .. h(cl:mean(2))
  end
  local nr = x:narrow(#shape, 2, shape[#shape] - 2)
  out[#out + 1] = h(nr:relu()) .. "," .. h(nr:sum())
end
-- relu with a gradient to record (F.relu's fp32 route, its node), and under no_grad
local g = fill(999, 3, 1):to("bf16"):requires_grad_()
local r = g:relu()
r:float():sum():backward()
out[#out + 1] = h(r) .. "," .. h(g.grad) .. "," .. r:dtype()
out[#out + 1] = h(fp8.no_grad(function() return g:relu() end))
local all = table.concat(out, " ")
local x = 0xcbf29ce484222325
for i = 1, #all do x = ((x ~ all:byte(i)) * 0x100000001b3) & 0xffffffffffff end
print(("%d %x"):format(#out, x))
]==]

local function bits(v) return (string.unpack("<I4", string.pack("<f", v))) end
local function fb(u) return (string.unpack("<f", string.pack("<I4", u))) end

describe("bf16 relu on its bits, bf16 sums widened in registers, bf16 arithmetic in one loop (stop 102)", function()
  it("give main's bits, on 1 and 2 threads", function()
    assert.are.equal("162 85275663a5ae\n", U.same_on_threads(BIN, CODE))
  end)

  it("relu of every bf16 pattern is max(x, 0) in bf16: NaN quiet and kept, -0 and negatives 0", function()
    local v = {}
    for b = 0, 65535 do v[#v + 1] = fb(b << 16) end
    local x = fp8.tensor(v):to("bf16")
    local xs = x:float():tolist()
    local y = x:relu()
    assert.are.equal("bf16", y:dtype())
    local ys = y:float():tolist()
    for i = 1, #xs do
      local a = xs[i]
      local want = a ~= a and a or (a > 0 and a or 0.0)
      local ok = a ~= a and ys[i] ~= ys[i] and bits(ys[i]) == bits(a) | 0x400000 or U.same_number(want, ys[i])
      if not ok then
        error(("relu of bf16 0x%04x: got 0x%08x, want 0x%08x"):format(bits(a) >> 16, bits(ys[i]), bits(want)))
      end
    end
  end)

  it("sums and means of bf16 are Lua's doubles of the same values, rounded", function()
    for k, n in ipairs { 1, 17, 513, 65537, 140001 } do
      local v = {}
      for i = 1, n do v[i] = (((i * 37 + k * 11) % 203) - 101) / 16 end
      local x = fp8.tensor(v):to("bf16")
      local s = 0.0
      for _, e in ipairs(x:float():tolist()) do s = s + e end   -- bf16 of multiples of 1/16 below 8: exact
      -- (the double rounded to fp32, then to bf16: the result keeps x's dtype)
      assert.are.equal(fp8.tensor(s):to("bf16"):item(), x:sum():item(), "sum of " .. n)
      assert.are.equal(fp8.tensor(s / n):to("bf16"):item(), x:mean():item(), "mean of " .. n)
    end
  end)

  it("x:relu() of a bf16 x with nothing to record makes no fp32 tensor", function()
    local M = require "fp8._memory"
    local x = fp8.randn({ 256, 1024 }):to("bf16")
    x:relu()
    collectgarbage(); collectgarbage()
    local live = M.bytes()
    M.reset_peak()
    local y = x:relu()
    local _, peak = M.bytes()
    -- y (512 KiB) alone; F.relu's route made an fp32 result (1 MiB) and then y
    assert.is_true(peak - live < 0.75 * 2 ^ 20, (peak - live) .. " bytes at the peak over the live ones")
    assert.are.equal("bf16", y:dtype())
  end)
end)
