-- faults.lua MODE TAG — a rank failing under 2 processes (tests/spec/dist_spec.lua):
--   error  rank 1 raises an error at step 3
--   hang   rank 1 stops answering (busy for 60 s) while rank 0 waits in an all-reduce; timeout=5
--   kill   rank 1 sends itself SIGKILL at step 3
--   exit   rank 1 calls os.exit(3) at step 3
--   gone   rank 1 ends (status 0) before it creates its Accelerator, so never joins; rank 0 waits to; timeout=5
-- TAG only marks the command line so that the spec can look for leftover processes.
local mode = arg[1]
if mode == "gone" then   -- rank 0 joins once rank 1 has gone (mpirun ends the job itself when rank 0 joined first)
  if os.getenv("OMPI_COMM_WORLD_RANK") == "1" then os.exit(0) end
  os.execute("sleep 1")
end
local timeout = (mode == "hang" or mode == "gone") and 5 or 60
local acc = fp8.Accelerator { cpu = true,
  kwargs_handlers = { fp8.InitProcessGroupKwargs { backend = "mpi", timeout = timeout } } }
local r = acc.process_index
for step = 1, 10 do
  if r == 1 and step == 3 then
    if mode == "error" then error("boom at step 3") end
    if mode == "exit" then os.exit(3) end
    if mode == "kill" then
      local f = assert(io.open("/proc/self/stat"))
      local pid = f:read("a"):match("^(%d+)")
      f:close()
      os.execute("kill -9 " .. pid)
    end
    if mode == "hang" then local t = os.time(); while os.time() - t < 60 do end end
  end
  acc:reduce(fp8.tensor { step }, "sum")
end
acc:print("finished")
