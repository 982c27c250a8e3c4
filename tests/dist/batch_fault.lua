-- batch_fault.lua MODE — fp8.find_executable_batch_size on two processes (tests/spec/distfault_spec.lua): a function
-- that runs a DDP step of a batch size's rows and raises an out-of-memory error where MODE says, so that a retry on
-- one process only shows (its next collectives meeting the other's). MODE: both (both processes run out of memory at
-- batch size 8), one (rank 1 only, before its backward), step (rank 1's backward fails inside DDP with an
-- out-of-memory error, FP8LAB_FAULT_DIST=ddp_grad, so rank 0's step fails too, with DDP's error for another's).
local mode = arg[1] or "both"
local acc = fp8.Accelerator { cpu = true, kwargs_handlers = { fp8.InitProcessGroupKwargs { backend = "mpi", timeout = 20 },
  fp8.DistributedDataParallelKwargs { find_unused_parameters = mode == "step" } } }
local r = acc.process_index
fp8.manual_seed(1)
local model = fp8.nn.Sequential(fp8.nn.Linear(8, 8), fp8.nn.Linear(8, 8))
local opt = fp8.optim.SGD(model:parameters(), { lr = 0.01 })
model, opt = acc:prepare(model, opt)
local tries = {}
local run = fp8.find_executable_batch_size(function(bs)
  tries[#tries + 1] = bs
  if bs == 8 and (mode == "both" or (mode == "one" and r == 1)) then
    error(("a test's out of memory at batch size %d"):format(bs), 0)
  end
  fp8.manual_seed(10 + r)
  opt:zero_grad()
  local y = model[1](fp8.randn { bs, 8 })
  if mode ~= "step" or r == 0 or bs ~= 8 then y = model[2](y) end
  acc:backward(y:sum())
  opt:step()
  return bs
end, { starting_batch_size = 8, reduce_batch_size_fn = function() return 4 end })
local ok, e = pcall(run)
io.write(("rank %d: %s; tried %s\n"):format(r, ok and ("ran at " .. e) or tostring(e):gsub("\n", " "),
  table.concat(tries, ",")))
io.flush()
local s = 0
for _, p in ipairs(model:parameters()) do s = s + p:sum():item() end
io.write(("rank %d sum: %.9g\n"):format(r, s))
io.flush()
