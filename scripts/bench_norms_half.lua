-- bench_norms_half.lua — the p-norms' cost at p = 3 and on bf16 (stop 99: their rescue moved into the core, where the
-- Lua rescue read a min and a max of the sums back). Run: OMP_NUM_THREADS=1 build/fp8lab scripts/bench_norms_half.lua
-- [rounds=5 [filter]]; prints µs per call, the best round of each case (CPU time by os.clock, one thread); filter, a
-- plain substring of the cases' names, keeps only those ("norm (4x" for the clipping rows, stop 100).
local F = fp8.nn.functional
local U = fp8.nn.utils
local rounds = tonumber(arg and arg[1]) or 5
local filter = arg and arg[2]
fp8.manual_seed(1)
local x64, x2d, x32 = fp8.randn { 64 }, fp8.randn { 64, 64 }, fp8.randn { 32, 64 }
local b64, b2d, b32 = x64:to("bf16"), x2d:to("bf16"), x32:to("bf16")
local params = {}
for i = 1, 4 do
  local p = fp8.randn { 64, 64 }:requires_grad(true)
  p.grad = fp8.randn { 64, 64 }
  params[i] = p
end
local bparams = {}
for i = 1, 4 do
  local p = fp8.randn { 64, 64 }:to("bf16"):requires_grad(true)
  p.grad = fp8.randn { 64, 64 }:to("bf16")
  bparams[i] = p
end
local grads, bgrads = {}, {}
for i = 1, 4 do grads[i], bgrads[i] = params[i].grad, bparams[i].grad end
local cases = {
  { "[64] x:norm(3)", function() return x64:norm(3) end, 20000 },
  { "[64, 64] x:norm(3, 2)", function() return x2d:norm(3, 2) end, 10000 },
  { "[32, 64] F.normalize p=3", function() return F.normalize(x32, { p = 3 }) end, 10000 },
  { "[64] bf16 x:norm()", function() return b64:norm() end, 20000 },
  { "[64, 64] bf16 x:norm(2, 2)", function() return b2d:norm(2, 2) end, 10000 },
  { "[32, 64] bf16 F.normalize", function() return F.normalize(b32) end, 10000 },
  { "[32, 64] bf16 F.normalize p=3", function() return F.normalize(b32, { p = 3 }) end, 10000 },
  { "get_total_norm p=3 (4x[64,64])", function() return U.get_total_norm(grads, 3) end, 5000 },
  { "get_total_norm bf16 (4x[64,64])", function() return U.get_total_norm(bgrads) end, 5000 },
  { "clip_grad_norm_ p=3 (4x[64,64])", function() return U.clip_grad_norm_(params, 1e9, 3) end, 5000 },
  { "clip_grad_norm_ bf16 (4x[64,64])", function() return U.clip_grad_norm_(bparams, 1e9) end, 5000 },
  -- the other orders (stop 101)
  { "get_total_norm p=1 (4x[64,64])", function() return U.get_total_norm(grads, 1) end, 5000 },
  { "get_total_norm p=inf (4x[64,64])", function() return U.get_total_norm(grads, math.huge) end, 5000 },
  { "get_total_norm p=0.5 (4x[64,64])", function() return U.get_total_norm(grads, 0.5) end, 5000 },
  { "clip_grad_norm_ p=1 (4x[64,64])", function() return U.clip_grad_norm_(params, 1e9, 1) end, 5000 },
  { "clip_grad_norm_ p=inf (4x[64,64])", function() return U.clip_grad_norm_(params, 1e9, math.huge) end, 5000 },
  { "clip_grad_norm_ p=0.5 (4x[64,64])", function() return U.clip_grad_norm_(params, 1e9, 0.5) end, 5000 },
}
for _, c in ipairs(cases) do
  if filter and not c[1]:find(filter, 1, true) then goto next end
  local best = math.huge
  for _ = 1, rounds do
    collectgarbage()
    local t = os.clock()
    for _ = 1, c[3] do c[2]() end
    best = math.min(best, (os.clock() - t) / c[3] * 1e6)
  end
  print(("%-34s %10.2f us"):format(c[1], best))
  ::next::
end
