-- bench_profiler_windows.lua — a long run under a repeating profiler schedule: N steps of a tiny op (`x + x` on a
-- [4, 4] tensor) with schedule_option={wait=1, warmup=1, active=2} and output_trace_dir (a window, and a trace
-- file written and fsynced, every 4 steps). Prints the resident set size at each quarter and the steps per second:
--   quarter=1 steps=2000 rss_kib=… s=…
--   steps=8000 s=… steps_per_s=… events_kept=… trace_files=…
-- Usage: build/fp8lab scripts/bench_profiler_windows.lua [N=8000]   (docs/performance.md, "Long profiled runs")
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local profiler = require "fp8.profiler"
local now = require("fp8._profiler").now

if arg and #arg > 1 then fail(("bench_profiler_windows: takes [N]; got %d arguments"):format(#arg)) end
local n = math.tointeger(tonumber(arg and arg[1] or "8000"))
if not n or n < 4 then fail("bench_profiler_windows: expected a step count >= 4, got " .. tostring(arg[1])) end
local dir = os.tmpname()
os.remove(dir)   -- the profiler creates it

local function rss_kib()
  local f = io.open("/proc/self/status")
  if not f then return -1 end
  local s = f:read("a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)")) or -1
end

local prof = profiler.profile{ schedule_option = { wait = 1, warmup = 1, active = 2 }, output_trace_dir = dir }
local x = fp8.randn{ 4, 4 }
local t0 = now()
prof:start()
for i = 1, n do
  local _ = x + x
  prof:step()
  if i % (n // 4) == 0 and i // (n // 4) <= 4 then
    print(("quarter=%d steps=%d rss_kib=%d s=%.2f"):format(i // (n // 4), i, rss_kib(), (now() - t0) / 1e9))
  end
end
prof:stop()
local s = (now() - t0) / 1e9
local files = 0
local p = io.popen("ls " .. dir)
for _ in p:lines() do files = files + 1 end
p:close()
os.execute("rm -rf " .. dir)
print(("steps=%d s=%.2f steps_per_s=%.0f events_kept=%d trace_files=%d"):format(n, s, n / s, #prof:events(), files))
