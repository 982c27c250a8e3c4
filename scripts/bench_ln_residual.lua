-- bench_ln_residual.lua — a pre-LayerNorm residual's backward as the GPT step runs it (x [2048, 256], the
-- bench_step_ab model's tokens and width): h = x·1, out = LayerNorm(h) + h·1, out:backward(G); ms an iteration
-- (forward and backward) by os.clock (this process's CPU time), the best of ROUNDS rounds of 20, in the two orders
-- of the sum's terms. With LayerNorm's term first the engine holds h·1's gradient when LayerNorm's backward runs,
-- which adds into it since stop 101 (docs/performance.md, "The te step outside its GEMMs (stop 101)"); with it
-- last there is no sum yet and LayerNorm writes its gradient. Torch's: scripts/bench_ln_residual_torch.py.
-- Run: OMP_NUM_THREADS=1 build/fp8lab scripts/bench_ln_residual.lua [rounds=7]
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local USAGE = "usage: fp8lab scripts/bench_ln_residual.lua [ROUNDS]   (ROUNDS: an integer >= 1, default 7)"
local argv = arg or {}
if argv[1] == "-h" or argv[1] == "--help" then print(USAGE) return end
if #argv > 1 then fail(("bench_ln_residual.lua: one argument at most, got %d\n%s"):format(#argv, USAGE)) end
local rounds = math.tointeger(tonumber(argv[1] or "7"))
if not rounds or rounds < 1 then
  fail(("bench_ln_residual.lua: ROUNDS must be an integer >= 1, got '%s'\n%s"):format(argv[1], USAGE))
end
local F = fp8.nn.F
fp8.manual_seed(1)
local R, C = 2048, 256
local x0 = fp8.randn { R, C }:requires_grad_()
local w, b = fp8.randn { C }:requires_grad_(), fp8.randn { C }:requires_grad_()
local G = fp8.randn { R, C }
local out = {}
for _, first in ipairs { true, false } do
  local best = math.huge
  for _ = 1, rounds do
    local t0 = os.clock()
    for _ = 1, 20 do
      local h = x0 * 1
      local y = first and F.layer_norm(h, { C }, w, b, 1e-5) + h * 1 or h * 1 + F.layer_norm(h, { C }, w, b, 1e-5)
      y:backward(G)
    end
    best = math.min(best, (os.clock() - t0) / 20 * 1000)
    collectgarbage()
  end
  out[#out + 1] = ("%s %.3f ms"):format(first and "ln_first" or "ln_last", best)
end
print(table.concat(out, "  "))
