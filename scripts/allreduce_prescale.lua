-- allreduce_prescale.lua — why fp8lab's FP8 gradient all-reduce (msamp, docs/distributed.md) divides by N before
-- the cast where MS-AMP divides by √N. N ranks' E4M3 gradients are summed as the all-reduce sums them: each rank's
-- gradient cast with the shared power-of-two scale s times a pre-scale, the partial sums re-encoded (saturating)
-- at every addition, the result decoded with the rest of the 1/N average. The error of that average against the
-- fp32 average, for gradients identical on every rank, independent, and correlated 0.9.
-- Run: build/fp8lab scripts/allreduce_prescale.lua [N=2] [seed=1]   (no processes needed: one process simulates)
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local fp8 = fp8 or require "fp8"
if arg[1] == "-h" or arg[1] == "--help" then
  print("usage: fp8lab scripts/allreduce_prescale.lua [N=2] [seed=1]\n  N: ranks simulated (2..64); seed: the "
    .. "gradients' seed. Prints the error of the FP8 all-reduce's average against fp32's, pre-scaled by 1/N and by "
    .. "1/sqrt(N).")
  os.exit(0)
end
if #arg > 2 then fail(("takes [N] [seed]; got %d arguments"):format(#arg)) end
local N, seed = math.tointeger(tonumber(arg[1] or "2")), math.tointeger(tonumber(arg[2] or "1"))
if not N or N < 2 or N > 64 then fail("N must be an integer in 2..64, got " .. tostring(arg[1])) end
if not seed then fail("seed must be an integer, got " .. tostring(arg[2])) end

-- the E4M3 bytes of x·s read back in the scaled domain (saturating at ±448)
local function wire(x, s) return x:quantize("e4m3", { scale = s }):dequantize() * s end

local function allreduce(gs, pre)
  local amax = 0
  for _, g in ipairs(gs) do amax = math.max(amax, g:abs():max():item()) end
  local s = 2 ^ math.floor(math.log(448 / amax, 2))
  local sum = wire(gs[1], s * pre)
  for i = 2, #gs do sum = wire(sum + wire(gs[i], s * pre), 1) end
  local avg = sum / (s * pre * #gs)
  return avg, sum:abs():ge(448):sum():item()
end

fp8.manual_seed(seed)
print(("%d ranks, 64×32 E4M3 gradients, seed %d"):format(N, seed))
print(("%-16s %-10s %10s %22s %12s"):format("gradients", "pre-scale", "NMSE", "worst (% of |avg| max)", "at ±448"))
for _, case in ipairs { "identical", "independent", "correlated 0.9" } do
  local base = fp8.randn { 64, 32 }
  local gs = {}
  for i = 1, N do
    if case == "identical" then gs[i] = base:clone()
    elseif case == "independent" then gs[i] = fp8.randn { 64, 32 }
    else gs[i] = base * 0.9 + fp8.randn { 64, 32 } * math.sqrt(1 - 0.81) end
  end
  local ref = gs[1]
  for i = 2, N do ref = ref + gs[i] end
  ref = ref / N
  for _, pre in ipairs { { "1/N", 1 / N }, { "1/sqrt(N)", 1 / math.sqrt(N) } } do
    local avg, sat = allreduce(gs, pre[2])
    local d = avg - ref
    local nmse = (d * d):sum():item() / (ref * ref):sum():item()
    print(("%-16s %-10s %10.2e %21.1f%% %7d of %d"):format(case, pre[1], nmse,
      100 * d:abs():max():item() / ref:abs():max():item(), sat, ref:numel()))
  end
end
