-- bench_norms.lua — the p-norms' small-tensor cost (stop 98: the range check of Σ|x|^p moved into the core).
-- Run: OMP_NUM_THREADS=1 build/fp8lab scripts/bench_norms.lua [rounds=5]; prints µs per call, the best round of each
-- case (CPU time by os.clock, one thread).
local F = fp8.nn.functional
local rounds = tonumber(arg and arg[1]) or 5
fp8.manual_seed(1)
local cases = {
  { "[64] x:norm()", fp8.randn { 64 }, function(x) return x:norm() end, 20000 },
  { "[64] x:norm() with grad", fp8.randn { 64 }:requires_grad(true), function(x) return x:norm() end, 20000 },
  { "[64, 64] x:norm(2, 2)", fp8.randn { 64, 64 }, function(x) return x:norm(2, 2) end, 10000 },
  { "[32, 64] F.normalize", fp8.randn { 32, 64 }, function(x) return F.normalize(x) end, 10000 },
  { "[64] x:dist(y)", fp8.randn { 64 }, function(x) return x:dist(x * 0.5) end, 20000 },
  { "[4096, 1024] x:norm(2, 2)", fp8.randn { 4096, 1024 }, function(x) return x:norm(2, 2) end, 50 },
}
for _, c in ipairs(cases) do
  local best = math.huge
  for _ = 1, rounds do
    collectgarbage()
    local t = os.clock()
    for _ = 1, c[4] do c[3](c[2]) end
    best = math.min(best, (os.clock() - t) / c[4] * 1e6)
  end
  print(("%-28s %10.2f us"):format(c[1], best))
end
