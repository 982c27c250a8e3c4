-- Changed on 2026-12-07 (stop 100): softmax and log_softmax along a dim that is not the last
-- (core/cpu/cpu_nn_softmax.c, fl_cpu_softmax_dim_fwd/_bwd) copy each tile of columns into a buffer of the thread's
-- where the tile's rows lie 16 floats apart or more, and stream a result of over 8 MB past the caches
-- (docs/performance.md, "softmax along a leading dim (stop 100)"): x [4096, 1024] along dim 1, one thread, about
-- half the time forward, ~0.7× torch's forward + backward. The same operations on the same values, so the same bits:
-- these cases hold the outputs' hashes as main's 97f5e147 gave them (its build/fp8lab, OMP_NUM_THREADS 1 and 2,
-- AVX-512 and FP8LAB_CPU_ISA=avx2 alike): forward and the input's gradient of softmax and log_softmax over the middle
-- and leading dims of 2-4-d inputs whose inner sizes are under and over the copy's 16 floats and up to 1040, with
-- tiles ending in part-vectors, equal values, -inf and large logits, a transposed view, an odd offset with a row
-- stride, bf16 and an empty input, and two along the last dim (log_softmax's backward there in expf16 since this
-- stop too); and a
-- [2100, 1024] input along dim 1 (the streamed stores) against the rows' kernel on its transposed copy, forward and
-- backward (tests/c/test_softmax_bits.c holds both copies to the rows' order as well).
local U = dofile("tests/spec/helpers/util.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"

local CODE = U.HASH_BITS .. [[
local F = fp8.nn.F
local function h(t) return ("%x"):format(hash_bits(t)) end
fp8.manual_seed(7)
local out = {}
local function case(x, d)
  for _, f in ipairs { F.softmax, F.log_softmax } do
    out[#out + 1] = h(fp8.no_grad(function() return f(x, d) end))
    local xg = x:detach():clone():requires_grad_()
    f(xg, d):backward(fp8.randn(x:shape()))
    out[#out + 1] = h(xg.grad)
  end
end
local function data(shape)   -- randn·4 with a run of equal values, large logits, -inf and a zero column's worth
  local x = fp8.randn(shape) * 4
  local v = x:reshape({ -1 })
  local n = v:numel()
  v:narrow(1, 1, math.min(n, 40)):fill_(2.5)
  if n > 50 then v[45] = -1 / 0; v[47] = 80; v[49] = -90 end
  return x
end
for _, c in ipairs {
  { { 2, 300, 64 }, 2 }, { { 3, 33, 100 }, 2 }, { { 300, 130 }, 1 }, { { 5, 7, 9, 11 }, 2 }, { { 5, 7, 9, 11 }, 1 },
  { { 5, 7, 9, 11 }, 3 }, { { 40, 1030 }, 1 }, { { 4, 257, 17 }, 2 }, { { 9, 2, 1040 }, 2 }, { { 1, 1, 80 }, 2 },
  { { 37, 1030 }, 2 }, { { 3, 5, 17 }, 3 },   -- the last dim (the rows' kernels; log_softmax's backward in expf16)
} do case(data(c[1]), c[2]) end
local x = data { 130, 300 }
case(x:t(), 1)                       -- a transposed view
case(x:narrow(2, 2, 131), 1)         -- an odd offset and a row stride
case(data { 300, 130 }:to("bf16"), 1)
case(fp8.zeros { 0, 70 }, 1)
-- the copied tiles' streamed results (over 8 MB) against the rows' kernel on the transposed copy, forward and backward
local big = fp8.randn { 2100, 1024 }
local g = fp8.randn { 2100, 1024 }
local same = true
local function eq(a, b) return a:ne(b):sum():item() == 0 end
for _, f in ipairs { F.softmax, F.log_softmax } do
  local y = fp8.no_grad(function() return f(big, 1) end)
  same = same and eq(y, fp8.no_grad(function() return f(big:t():contiguous(), 2) end):t())
  local a, b = big:clone():requires_grad_(), big:t():contiguous():requires_grad_()
  f(a, 1):backward(g); f(b, 2):backward(g:t():contiguous())
  same = same and eq(a.grad, b.grad:t())
end
print(#out .. " " .. table.concat(out, " ") .. " " .. tostring(same))
]]

describe("softmax along a leading dim through copied tiles (stop 100)", function()
  it("gives main's bits on every route, on 1 and 2 threads", function()
    local want = "64 fc76bf36db75 7e86ba1d639c cb2022fcaebf 8d854d7d2cc2 c5eca642cc05 7acccabbbdea "
      .. "e019727e12c 397cb2485970 e0c23bcd5d0a a4852a1a5433 b0fb1e3ed807 5fd84af52284 "
      .. "94c57e1c3648 38200e072ffb e12f13440823 489996d6cd02 79ff3b467c9e 1239fea3fca6 "
      .. "7c12857ab63 a85e3fcc9fad 7e907e08729a 5060dc982f14 5aaade4536c3 e27eb1114bd5 "
      .. "93ccc702ce7e ccaeea2d1f8 31a380df55f9 f194c95a3da1 eb4fa4caa019 886d780d1905 "
      .. "4a295b1158c6 f04f51b63345 c11fa3a8a8bd 16fb4e920582 f59366e4b1e9 9b798a399af2 "
      .. "db83054b8965 558595cb8965 558595cb8965 558595cb8965 855212313e51 595f9e6934e8 "
      .. "72ea4383058 67f39940f8e9 5e23eb18ca9d b6855b7ff3a7 b0ec3c4eb482 abae7d1b7938 "
      .. "f1dfd3d77b9d 4efcbbd1928 3e1da47cc4e 43a6747de3b6 ca7cdc6246a5 d7a937c14392 26b6350c865d "
      .. "739a98edb469 9b88b6bdda01 5cf3f0c81c48 ce29736b61ef 3dc0d70239bc cbf29ce484222325 "
      .. "cbf29ce484222325 cbf29ce484222325 cbf29ce484222325 true\n"
    assert.are.equal(want, U.same_on_threads(BIN, CODE))
    -- the AVX2 loops (the same hashes from main's binary under FP8LAB_CPU_ISA=avx2)
    assert.are.equal(want, U.same_on_threads("FP8LAB_CPU_ISA=avx2 " .. BIN, CODE))
  end)
end)
