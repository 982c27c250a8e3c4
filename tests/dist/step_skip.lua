-- step_skip.lua — under te, process 1 skips opt:step() at step 3 on a decision of its own (tests/spec/dist_spec.lua):
-- the step holds te's amax all-reduce, so the processes' collectives part; the job must end with an error that names
-- opt:step() (it said only MPI_ERR_TRUNCATE), not hang.
local nn = fp8.nn
local acc = fp8.Accelerator { mixed_precision = "fp8", cpu = true, config = false, env = {},
  kwargs_handlers = { fp8.TERecipeKwargs {}, fp8.InitProcessGroupKwargs { timeout = 20 } } }
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
