-- bench_region_ops.lua — CPU time (os.clock) per call of two small in-place ops whose region has its `if` false at
-- this size, so that a region's own cost shows (docs/performance.md, stop 104). OMP_NUM_THREADS=T build/fp8lab scripts/bench_region_ops.lua
if arg and #arg > 0 then error(("bench_region_ops.lua: takes no arguments, got %q"):format(arg[1]), 0) end
local x, y = fp8.randn{16, 16}, fp8.randn{16, 16}
local N = 100000
for _, name in ipairs{"copy_", "add_"} do
  local f = x[name]
  for i = 1, 1000 do f(x, y) end
  local t0 = os.clock()
  for i = 1, N do f(x, y) end
  io.write(("%s %.0f ns  "):format(name, (os.clock() - t0) / N * 1e9))
end
io.write("\n")
