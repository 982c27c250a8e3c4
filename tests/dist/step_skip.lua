-- step_skip.lua [te|msamp] — under te (default) or msamp, process 1 skips opt:step() at step 3 on a decision of its own
-- (tests/spec/dist_spec.lua): the step holds the recipe's amax all-reduce, so the processes' collectives part; the job
-- must end with an error that names opt:step() (it said only MPI_ERR_TRUNCATE), not hang. Under msamp the two layers'
-- 4 delayed roles make an all-reduce of 4 fp32 MAX values, which the call agreement check's first all-reduce took at
-- first: it paired with it silently (process 0's amaxes became process 1's hashes) and both then waited until the
-- timeout (stop 93's review).
local nn = fp8.nn
local backend = arg[1] or "te"
local handler = backend == "msamp" and fp8.MSAMPRecipeKwargs {} or fp8.TERecipeKwargs {}
local acc = fp8.Accelerator { mixed_precision = "fp8", cpu = true, config = false, env = {},
  kwargs_handlers = { handler, fp8.InitProcessGroupKwargs { timeout = 20 } } }
fp8.manual_seed(7)
local model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-3 })
model, opt = acc:prepare(model, opt)
fp8.manual_seed(1000 + acc.process_index)
for step = 1, 6 do
  local loss = nn.functional.cross_entropy(model(fp8.randn { 16, 16 }), fp8.randint(0, 16, { 16 }))
  acc:backward(loss)
  if not (acc.process_index == 1 and step == 3) then opt:step() end
  opt:zero_grad()
end
print(("rank%d finished"):format(acc.process_index))
