-- user_fault.lua MODE — a script's own collective under FP8LAB_FAULT_DIST (core/fault.h, a test hook) on two processes
-- (tests/spec/distfault_spec.lua): each rank makes the collective MODE names under pcall and says what it met, then
-- makes one more (an all_reduce) and says so, so that a rank that went on past a collective the other is still in
-- shows. MODE: all_reduce, all_reduce_async, broadcast, broadcast_string, all_gather, reduce_scatter, barrier (the
-- communicator, require "fp8._dist"), gather, reduce (the Accelerator's utilities), bad_root (a refusal before
-- anything is sent: a Lua error on every process, which both go on from).
local D = require "fp8._dist"
local mode = arg[1] or "all_reduce"
local acc
if mode == "gather" or mode == "reduce" then
  acc = fp8.Accelerator { cpu = true, kwargs_handlers = { fp8.InitProcessGroupKwargs { backend = "mpi", timeout = 20 } } }
else
  D.init { timeout = 20 }
end
local r = D.rank()
local t = fp8.tensor { 1 + r, 2, 3, 4 }
local ops = {
  all_reduce = function() return D.all_reduce(t, "sum") end,
  all_reduce_async = function() return D.all_reduce_async(t, "sum"):wait() end,
  broadcast = function() return D.broadcast(t, 0) end,
  broadcast_string = function() return D.broadcast_string("abc", 0) end,
  all_gather = function() return D.all_gather(t) end,
  reduce_scatter = function() return D.reduce_scatter(t, "sum") end,
  barrier = function() return D.barrier() end,
  gather = function() return acc:gather(t) end,
  reduce = function() return acc:reduce(t, "sum") end,
  bad_root = function() return D.broadcast(t, 5) end,
}
local ok, e = pcall(ops[mode])
io.write(("rank %d %s: %s\n"):format(r, mode, ok and "ran" or tostring(e):gsub("\n", " ")))
io.flush()
local u = D.all_reduce(fp8.tensor { 1 }, "sum")
io.write(("rank %d after: %g\n"):format(r, u:item()))
io.flush()
