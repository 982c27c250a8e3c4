-- oom_ddp.lua RANK HOLE — a DDP backward that runs out of memory on one process (tests/spec/oom3_spec.lua): rank
-- RANK takes its address space (under the caller's `ulimit -v`) but for a hole of HOLE MiB (a freed tensor), then
-- every rank runs a synchronising backward; each prints what it met, and the next step on every rank.
local who, hole = tonumber(arg[1]), tonumber(arg[2])
local acc = fp8.Accelerator { cpu = true, kwargs_handlers = {
  fp8.InitProcessGroupKwargs { backend = "mpi", timeout = 8 }, fp8.DistributedDataParallelKwargs { bucket_cap_mb = 1 } } }
local r = acc.process_index
fp8.manual_seed(1)
local m = fp8.nn.Sequential(fp8.nn.Linear(512, 1024), fp8.nn.GELU(), fp8.nn.Linear(1024, 512))
local opt = fp8.optim.AdamW(m:parameters(), { lr = 1e-3 })
m, opt = acc:prepare(m, opt)
local x = fp8.randn { 64, 512 }
acc:backward(m(x):sum()); opt:step(); opt:zero_grad()   -- warm: every primitive and bucket made
collectgarbage("stop")
local keep, n = {}, 0
local loss = m(x):sum()
if r == who then
  local pad = hole > 0 and fp8.empty { hole * 262144 }   -- (a block of its own, given back where room is short)
  for _, sz in ipairs { 262144, 4096 } do
    while true do local ok, t = pcall(fp8.empty, { sz }); if not ok then break end n = n + 1; keep[n] = t end
  end
  if pad then pad:free() end
end
local ok, e = pcall(acc.backward, acc, loss)
for i = 1, n do keep[i]:free() end
collectgarbage("restart"); collectgarbage()
io.write(("rank %d: %s\n"):format(r, ok and "ran" or tostring(e):gsub("\n", " ")))
io.flush()
local ok2, e2 = pcall(function() opt:zero_grad(); acc:backward(m(x):sum()); opt:step() end)
io.write(("rank %d next: %s\n"):format(r, ok2 and "ran" or tostring(e2):gsub("\n", " ")))
