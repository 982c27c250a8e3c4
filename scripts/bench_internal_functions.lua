-- bench_internal_functions.lua: the cost of fp8.opts.internal_functions' wrapper per call (opts.check wrapped vs its raw
-- function), called from library code (a chunk named lua/fp8/...) and from a user's; os.clock, best of 5 runs of N.
-- Run: OMP_NUM_THREADS=1 build/fp8lab scripts/bench_internal_functions.lua [N]
local O = require "fp8.opts"
local w = O.check
local raw
for i = 1, 10 do local n, v = debug.getupvalue(w, i); if n == "f" then raw = v end end
assert(raw and raw ~= w)
local code = [[
local f, n = ...
local opts, valid = { a = 1 }, { "a", "b" }
local t0 = os.clock()
for i = 1, n do f("bench", opts, valid) end
return os.clock() - t0
]]
local lib = assert(load(code, "@lua/fp8/bench_internal.lua"))
-- (a chunk of the library's as the host registers them, lua/main.c note_library_chunk: since stop 103 a chunk that
-- only carries a library file's name is a user's)
local envs = debug.getregistry()["fp8.library_envs"]
if envs then envs[debug.upvalueid(lib, 1)] = true end
local user = assert(load(code, "@/tmp/user_script.lua"))
local N = tonumber(arg and arg[1]) or 300000
local function best(fn, f) local b = math.huge; for r = 1, 5 do b = math.min(b, fn(f, N)) end return b end
local r_raw, r_lib, r_user = best(lib, raw), best(lib, w), best(user, w)
print(("N=%d  raw %.3f us/call  wrapped from library %.3f us/call (+%.3f)  wrapped from user code %.3f us/call"):format(
  N, r_raw / N * 1e6, r_lib / N * 1e6, (r_lib - r_raw) / N * 1e6, r_user / N * 1e6))
