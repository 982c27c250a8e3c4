-- autoname.lua DIR — three save_state() calls with automatic checkpoint naming and total_limit = 2 under
-- 2 processes (tests/spec/dist_spec.lua): every rank must name checkpoint_0, _1, _2 in turn (the iteration
-- counter once advanced on rank 0 only, and rank 1's second save wrote into checkpoint_0's temporary
-- directory and failed); then load_state() with no directory takes the newest on every rank.
local dir = arg[1]
local pc = fp8.ProjectConfiguration { project_dir = dir, automatic_checkpoint_naming = true, total_limit = 2 }
local acc = fp8.Accelerator { cpu = true, project_config = pc }
local r = acc.process_index
local m = fp8.nn.Linear(4, 4)
local opt = fp8.optim.SGD(m:parameters(), { lr = 0.1 })
m, opt = acc:prepare(m, opt)
for i = 1, 3 do
  fp8.no_grad(function() m.weight:set({ 1, 1 }, i) end)   -- a parameter: written as an optimizer does
  local d = acc:save_state()
  print(("rank%d save %d -> %s iteration=%d"):format(r, i, d:match("[^/]+$"), pc.iteration))
end
fp8.no_grad(function() m.weight:set({ 1, 1 }, 0) end)
acc:load_state()
print(("rank%d loaded weight=%g"):format(r, m.weight:get { 1, 1 }))
