-- bench_checkpoint.lua PARAMS DIR — save and load throughput of a training state with PARAMS
-- parameters (fp32 weights + AdamW's two fp32 moments: 12 bytes per parameter, in 16M-element
-- tensors) as one safetensors file in DIR, against `cp` of the same file on the same disk. Save
-- counts the atomic write with its fsyncs; cp is timed with and without `sync` of the copy. Prints
-- one markdown table (the best of three interleaved rounds). Run by scripts/bench_checkpoint.sh (make bench).
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local USAGE = "usage: fp8lab scripts/bench_checkpoint.lua PARAMS DIR (PARAMS >= 1 parameters; DIR an existing directory)"
if arg[1] == "-h" or arg[1] == "--help" then print(USAGE); os.exit(0) end
if #arg ~= 2 then fail(("%s; got %d argument%s"):format(USAGE, #arg, #arg == 1 and "" or "s")) end
local params = math.tointeger(tonumber(arg[1]))
if not params or params < 1 then fail(("PARAMS must be an integer >= 1, got %q (%s)"):format(arg[1], USAGE)) end
local dir = arg[2]
if dir == "" or not require("fp8._checkpoint").is_dir(dir) then
  fail(("DIR must be an existing directory, got %q (%s)"):format(dir, USAGE))
end
local clock = require("fp8._data").clock
local CHUNK = 16 * 1024 * 1024
local t, n, k = {}, 0, 0
while n < params do
  local m = math.min(CHUNK, params - n)
  k = k + 1
  for _, role in ipairs { "weight", "exp_avg", "exp_avg_sq" } do t[("%s.%d"):format(role, k)] = fp8.full({ m }, k) end
  n = n + m
end
local path = dir .. "/state.safetensors"
local bytes = 12 * params
local function gbs(s) return bytes / s / 1e9 end
local function timed(fn) local t0 = clock(); fn(); return clock() - t0 end
local function sh(cmd) assert(os.execute(cmd), cmd) end
-- Three interleaved rounds of save, load, cp + sync and cp; the best time of each counts (the machine is
-- shared, and first touches of fresh memory in a VM vary from one run to the next).
local save, load, cp_sync, cp = math.huge, math.huge, math.huge, math.huge
for _ = 1, 3 do
  save = math.min(save, timed(function() fp8.save_file(t, path) end))
  load = math.min(load, timed(function() local back = fp8.load_file(path); assert(back["weight.1"]) end))
  collectgarbage()
  cp_sync = math.min(cp_sync, timed(function() sh(("cp %s %s.cp && sync %s.cp"):format(path, path, path)) end))
  os.remove(path .. ".cp")
  cp = math.min(cp, timed(function() sh(("cp %s %s.cp"):format(path, path)) end))
  os.remove(path .. ".cp")
end
os.remove(path)
print(("| state | bytes | save (fsync) | load | cp + sync | cp | save / (cp + sync) | load / cp |"))
print("|---|---|---|---|---|---|---|---|")
print(("| %dM params, fp32 + AdamW | %.2f GB | %.2f GB/s (%.2f s) | %.2f GB/s (%.2f s) | %.2f GB/s | %.2f GB/s | %.0f%% | %.0f%% |")
  :format(params // 1000000, bytes / 1e9, gbs(save), save, gbs(load), load, gbs(cp_sync), gbs(cp),
    100 * cp_sync / save, 100 * cp / load))
