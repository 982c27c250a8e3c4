-- Changed on 2026-12-07 (stop 101): a whole sum's or mean's backward (core/ops_grad.c reduce_bwd) hands on one
-- element expanded over the input's shape (strides 0), as torch's SumBackward0/MeanBackward0 do, where it filled a
-- tensor of the input's shape; a leaf's .grad += that gradient adds the one value (core/autograd.c add_inplace), and
-- the CPU's copy of an expanded source repeats the element's bits (core/cpu/cpu_device.c copy_tile), which copied
-- element by element; ReLU, SiLU and GELU's backward read the one value (core/nn.c act_bwd_broadcast), the other
-- nodes a copy (docs/performance.md, "sum's backward, GELU, layer_norm and SiLU (stop 101)";
-- docs/robustness.md, stop 101). The gradient's consumers keep a real tensor: .grad made, then added into; a node's
-- gradient; a leaf's hook; retain_grad; fp8.autograd.grad. The first case holds the bits main's 68cb7062 gave (its
-- build/fp8lab, OMP_NUM_THREADS 1 and 2, AVX-512 and FP8LAB_CPU_ISA=avx2 alike): .grad after a sum's or mean's
-- backward made, through a node, and added, over 0-d, empty, one-element and larger shapes and seeds 1, 0.3, -0,
-- inf, NaN, the smallest subnormal and -3e38; a transposed leaf, a bf16 leaf, a hooked leaf, retain_grad,
-- autograd.grad; expand():contiguous() in fp32, bf16 and fp16 (a NaN's payload among the values), transposed, and
-- converted; ReLU, SiLU and both GELUs over fp32, bf16 and transposed inputs. The two memory cases fail on 68cb7062
-- (it allocated a filled tensor of x's size for each such backward); the last holds what each consumer gets (a
-- .grad of its own, contiguous and writable; a hook's gradient written in place), as on 68cb7062.
local U = dofile("tests/spec/helpers/util.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"

local SUM_CODE = U.HASH_BITS .. [==[
local h = hash_of
local out = {}
local function leaf(shape, k)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local v = {}
  for i = 1, n do v[i] = ((i * 37 + k) % 101) / 7 - 7 end
  return fp8.tensor(v):reshape(shape)
end
local shapes = { {}, { 1 }, { 1, 1 }, { 0, 3 }, { 3, 4 }, { 257, 33 }, { 2, 3, 5, 7 }, { 1, 1030 } }
local seeds = { 1, 0.3, -0.0, 1 / 0, 0 / 0, 2 ^ -149, -3e38 }
for si, shape in ipairs(shapes) do
  for _, red in ipairs { "sum", "mean" } do
    for _, s in ipairs(seeds) do
      local x = leaf(shape, si):requires_grad_()
      x[red](x):backward(fp8.tensor(s))               -- .grad made
      x[red](x * 1):backward(fp8.tensor(s * 0.5))     -- through a node, added into .grad
      x[red](x):backward(fp8.tensor(s))               -- added into .grad
      out[#out + 1] = h(x.grad)
    end
  end
end
-- a transposed leaf, a bf16 one (its ToBackward), a hooked leaf, retain_grad, autograd.grad
local t = leaf({ 33, 65 }, 3):t():requires_grad_()
t:sum():backward(); t:mean():backward(); out[#out + 1] = h(t.grad)
local b = leaf({ 40, 9 }, 4):to("bf16"):requires_grad_()
b:sum():backward(); b:float():mean():backward(); out[#out + 1] = h(b.grad)
local k = leaf({ 5, 6 }, 5):requires_grad_()
k:register_hook(function(g) return g * 3 end)
k:sum():backward(fp8.tensor(0.7)); k:mean():backward(); out[#out + 1] = h(k.grad)
local r = leaf({ 7, 8 }, 6):requires_grad_()
local m = r * 2; m:retain_grad(); m:mean():backward(fp8.tensor(-1.5)); out[#out + 1] = h(m.grad); out[#out + 1] = h(r.grad)
local a = leaf({ 9, 10 }, 7):requires_grad_()
out[#out + 1] = h(fp8.autograd.grad(a:mean() + a:sum(), { a }))
-- ReLU, SiLU and GELU (exact and tanh) read the expanded gradient as it is: fp32 and bf16 inputs, a transposed one,
-- sizes over the 65,536-float pieces, two gradients summed, a hook, retain_grad and autograd.grad on the way
local F = fp8.nn.F
for _, act in ipairs { { "relu" }, { "silu" }, { "gelu" }, { "gelu", "tanh" } } do
  for ci, shape in ipairs { { 33, 65 }, { 70000 }, { 3, 0 } } do
    for _, dt in ipairs { "f32", "bf16", "t" } do
      local x = leaf(shape, ci) * 1.7
      if dt == "bf16" then x = x:to("bf16") elseif dt == "t" and #shape == 2 then x = x:t() end
      x:requires_grad_()
      local f = function(t) return act[2] and F[act[1]](t, act[2]) or F[act[1]](t) end
      f(x):sum():backward(fp8.tensor(0.3)); f(x):mean():backward()
      local y = f(x)
      local l = y:sum() + y:mean()
      l:backward()
      -- (of 70,000: the 100 across the first piece's end, and the sum over all)
      out[#out + 1] = ci == 2 and h(x.grad:narrow(1, 65487, 100)) .. "," .. h(x.grad:sum()) or h(x.grad)
    end
  end
  local x = leaf({ 20, 30 }, 8):requires_grad_()
  local f = function(t) return act[2] and F[act[1]](t, act[2]) or F[act[1]](t) end
  local y = f(x); y:retain_grad(); y:sum():backward(); out[#out + 1] = h(y.grad)
  y = f(x); y:register_hook(function(g) return g * 3 end); y:mean():backward(); out[#out + 1] = h(x.grad)
  out[#out + 1] = h(fp8.autograd.grad(f(x):sum(), { x }))
end
-- expand():contiguous(), same dtype (bits moved) and converted, fp32 NaN payloads among them
for _, v in ipairs { 0.3, -0.0, 1 / 0, 2 ^ -149, string.unpack("<f", string.pack("<I4", 0x7fc01234)) } do
  local s = fp8.tensor(v)
  out[#out + 1] = h(s:expand(3, 517):contiguous())
  out[#out + 1] = h(s:reshape({ 1, 1 }):expand(4, 130):t():contiguous())
  out[#out + 1] = h(s:to("bf16"):expand(515):contiguous())
  out[#out + 1] = h(s:to("f16"):expand(2, 3, 129):contiguous())
  out[#out + 1] = h(s:expand(600):to("bf16"))
end
local all = table.concat(out, " ")
local x = 0xcbf29ce484222325
for i = 1, #all do x = ((x ~ all:byte(i)) * 0x100000001b3) & 0xffffffffffff end
print(("%d %x"):format(#out, x))
]==]

describe("a whole sum's or mean's backward expanded (stop 101)", function()
  it("gives main's bits on every consumer, on 1 and 2 threads, AVX-512 and avx2", function()
    local want = "196 75fceb14083a\n"
    assert.are.equal(want, U.same_on_threads(BIN, SUM_CODE))
    assert.are.equal(want, U.same_on_threads("FP8LAB_CPU_ISA=avx2 " .. BIN, SUM_CODE))
  end)

  it("allocates no tensor of x's size when its gradient is added into .grad", function()
    local M = require "fp8._memory"
    local x = fp8.randn { 256, 1024 }:requires_grad_()
    x:sum():backward()
    for _, red in ipairs { "sum", "mean" } do
      collectgarbage(); collectgarbage()
      local live = M.bytes()
      M.reset_peak()
      x[red](x):backward()
      local _, peak = M.bytes()
      assert.is_true(peak - live < 4096, red .. ": " .. (peak - live) .. " bytes at the peak over the live ones")
    end
    assert.are.equal(1 + 1 + 1 / (256 * 1024), x.grad[7][9])
  end)

  it("makes no filled gradient for an activation's backward", function()
    local M = require "fp8._memory"
    local F = fp8.nn.F
    local x = fp8.randn { 256, 1024 }:requires_grad_()
    F.silu(x):sum():backward()
    for _, f in ipairs { F.relu, F.silu, F.gelu } do
      local y = f(x)
      collectgarbage(); collectgarbage()
      local live = M.bytes()
      M.reset_peak()
      y:sum():backward()
      local _, peak = M.bytes()
      -- dx (1 MiB) alone; the code before filled dy (1 MiB) too
      assert.is_true(peak - live < 1.5 * 2 ^ 20, (peak - live) .. " bytes at the peak over the live ones")
    end
  end)

  it("leaves each leaf a .grad of its own, contiguous and writable", function()
    local a, b = fp8.randn { 4, 5 }:requires_grad_(), fp8.randn { 4, 5 }:requires_grad_()
    local loss = a:sum() + b:mean()
    loss:backward()
    assert.are.same({ 5, 1 }, a.grad:stride())
    assert.is_true(b.grad:is_contiguous())
    a.grad:add_(1)
    a.grad:narrow(1, 2, 1):narrow(2, 3, 1):add_(5)
    assert.are.equal(2, a.grad[1][1])
    assert.are.equal(7, a.grad[2][3])
    local f20 = string.unpack("<f", string.pack("<f", 1 / 20))   -- 1/20 in fp32
    assert.are.equal(f20, b.grad[2][3])
    assert.are.equal(f20, b.grad[1][1])
    -- the next backward adds into the tensor the user holds
    local g = a.grad
    a:sum():backward()
    assert.are.equal(8, g[2][3])
    assert.are.equal(3, g[4][5])
    -- a hook's gradient is a real tensor it may write into
    local c = fp8.randn { 3, 2 }:requires_grad_()
    local seen
    c:register_hook(function(gr) seen = gr:stride(); gr:mul_(4) end)
    c:sum():backward()
    assert.are.same({ 2, 1 }, seen)
    assert.are.equal(4, c.grad[3][2])
    -- an activation's output: its hook writes into a real gradient (expanded, every element would be one)
    local x = fp8.randn { 6, 7 }:requires_grad_()
    local y = fp8.nn.F.silu(x)
    y:register_hook(function(gr) gr:add_(1) end)
    y:sum():backward()
    local x2 = x:detach():requires_grad_()
    local l2 = (fp8.nn.F.silu(x2) * 2):sum()
    l2:backward()
    assert.are.same(x2.grad:tolist(), x.grad:tolist())
  end)
end)
