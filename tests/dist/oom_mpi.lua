-- oom_mpi.lua — a collective that runs out of memory inside MPI (tests/spec/oom4_spec.lua): every rank takes its
-- address space (under the caller's `ulimit -v`), then all-reduces a 1 MiB tensor made before, blocking and
-- non-blocking; Open MPI's temporary buffer (its libnbc schedule) does not fit and it answers MPI_ERR_INTERN on
-- every rank before any message is sent. Each rank prints what each call met, then the same calls once the space is
-- given back, with an element of the sum (4: 1 summed over 2 ranks, twice). arg[1] "async": the non-blocking call
-- only, whose refused start ends the job by name since stop 105 (a script's collective that MPI failed on one
-- process: the others may be waiting in it, lua/l_dist.c), before anything is printed.
local D = require "fp8._dist"
local async_only = arg[1] == "async"
local acc = fp8.Accelerator { cpu = true, kwargs_handlers = { fp8.InitProcessGroupKwargs { backend = "mpi", timeout = 8 } } }
local r = acc.process_index
local t = fp8.ones { 262144 }
D._all_reduce_unchecked(t)   -- warm: MPI's connections made
collectgarbage("stop")
local keep, n = {}, 0
for _, sz in ipairs { 262144, 4096 } do
  while true do local ok, x = pcall(fp8.empty, { sz }); if not ok then break end n = n + 1; keep[n] = x end
end
local ok1, e1 = true, nil
if not async_only then ok1, e1 = pcall(D._all_reduce_unchecked, t) end
local ok2, e2 = true, nil
if async_only then ok2, e2 = pcall(function() local q = D.all_reduce_async(t); q:wait() end) end
for i = 1, n do keep[i]:free() end
collectgarbage("restart"); collectgarbage()
io.write(("rank %d blocking: %s\n"):format(r, ok1 and "ran" or tostring(e1)))
io.write(("rank %d non-blocking: %s\n"):format(r, ok2 and "ran" or tostring(e2)))
local u = fp8.ones { 262144 }
D._all_reduce_unchecked(u)
D._all_reduce_unchecked(u)
io.write(("rank %d then: %s\n"):format(r, tostring(u[7])))
