-- bench_resample.lua [rounds] — F.interpolate's linear, bicubic and trilinear modes (scale 2, fp32), forward under
-- no_grad and forward + backward, each the fastest of `rounds` calls (default 4) in ms, wall clock. The same cases
-- in PyTorch: scripts/bench_resample_torch.py. For A/B runs, alternate the binaries and the peer a few times over at
-- one thread and compare the fastest figures (docs/performance.md, "Resampling in one pass"):
--   OMP_NUM_THREADS=1 build/fp8lab scripts/bench_resample.lua 4
local fail = require("fp8.args").fail
local USAGE = "usage: fp8lab scripts/bench_resample.lua [ROUNDS]   (ROUNDS: an integer >= 1, default 4)"
local argv = arg or {}
if argv[1] == "-h" or argv[1] == "--help" then print(USAGE) return end
if #argv > 1 then fail(("bench_resample.lua: one argument at most, got %d\n%s"):format(#argv, USAGE)) end
local rounds = math.tointeger(tonumber(argv[1] or "4"))
if not rounds or rounds < 1 then
  fail(("bench_resample.lua: ROUNDS must be an integer >= 1, got '%s'\n%s"):format(argv[1], USAGE))
end
local now = require("fp8._data").clock   -- wall-clock seconds, monotonic
local F = fp8.nn.F

local function best(f)
  local b = math.huge
  for _ = 1, rounds do
    collectgarbage()
    local t = now()
    f()
    b = math.min(b, now() - t)
  end
  return b * 1e3
end

fp8.manual_seed(1)
local x4, x5 = fp8.randn { 16, 64, 32, 32 }, fp8.randn { 2, 16, 16, 32, 32 }
for _, c in ipairs { { "bilinear", x4 }, { "bicubic", x4 }, { "trilinear", x5 } } do
  local mode, x = c[1], c[2]
  local o = { scale_factor = 2, mode = mode, align_corners = false }
  local fwd = best(function() fp8.no_grad(function() F.interpolate(x, o) end) end)
  local xg = x:clone():requires_grad_()
  local both = best(function() F.interpolate(xg, o):sum():backward() end)
  print(("%-10s %s  forward %8.2f ms  forward + backward %8.2f ms"):format(mode, x:shape_str(), fwd, both))
end
