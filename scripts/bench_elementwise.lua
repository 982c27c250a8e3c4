-- bench_elementwise.lua [rounds] — the CPU elementwise ops a training step calls (same-shape fp32 add/mul, a
-- broadcast bias add, a scalar multiply, bf16 add), the comparisons, and exp and log (log of |a| + 1e-3; exp of a,
-- and of a with a value past exp's plain range every 512th, which sends every block through the checked loop),
-- timed as the fastest of `rounds` rounds (default 7) of 20 calls each, in ms per call. For A/B runs of two builds:
-- run each binary on this script in turn, a few times over, and compare the fastest figures (docs/performance.md).
--   OMP_NUM_THREADS=2 build/fp8lab scripts/bench_elementwise.lua 7
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local USAGE = "usage: fp8lab scripts/bench_elementwise.lua [ROUNDS]   (ROUNDS: an integer >= 1, default 7)"
local argv = arg or {}
if argv[1] == "-h" or argv[1] == "--help" then print(USAGE) return end
if #argv > 1 then fail(("bench_elementwise.lua: one argument at most, got %d\n%s"):format(#argv, USAGE)) end
local rounds = math.tointeger(tonumber(argv[1] or "7"))
if not rounds or rounds < 1 then
  fail(("bench_elementwise.lua: ROUNDS must be an integer >= 1, got '%s'\n%s"):format(argv[1], USAGE))
end
local now = require("fp8._data").clock   -- wall-clock seconds, monotonic

fp8.manual_seed(1)
local N = 1 << 22                         -- 4M elements, 16 MiB per fp32 tensor: past the caches
local a, b = fp8.randn { N }, fp8.randn { N }
local m, bias = fp8.randn { 4096, 1024 }, fp8.randn { 1024 }
local ah, bh = a:to("bf16"), b:to("bf16")
local pos = a:abs() + 1e-3
local spiky = a:clone()
for i = 1, N, 512 do spiky[i] = 100 end   -- e^100 overflows: outside exp's plain range, in every block

local cases = {
  { "add fp32 [4M]", function() return a + b end },
  { "mul fp32 [4M]", function() return a * b end },
  { "bias add [4096,1024]+[1024]", function() return m + bias end },
  { "scalar mul fp32 [4M]", function() return a * 0.5 end },
  { "add bf16 [4M]", function() return ah + bh end },
  { "lt fp32 [4M]", function() return a:lt(b) end },
  { "maximum fp32 [4M]", function() return a:maximum(b) end },
  { "exp fp32 [4M]", function() return a:exp() end },
  { "exp fp32 [4M], a spike a block", function() return spiky:exp() end },
  { "log fp32 [4M]", function() return pos:log() end },
}

for _, c in ipairs(cases) do
  local best = math.huge
  for _ = 1, rounds do
    local t0 = now()
    for _ = 1, 20 do c[2]():free() end
    local dt = (now() - t0) / 20 * 1e3
    if dt < best then best = dt end
  end
  print(("%-30s %8.3f ms"):format(c[1], best))
end
