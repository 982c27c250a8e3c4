-- audit9a.lua MODE DIR — stop 93's multi-process cases (tests/spec/audit9a_spec.lua); each rank prints "rank<r> <key>=<value>".
--   mainonly   save_state, load_state and gather called by process 0 alone (under `if acc:is_main_process()`) while
--              process 1 goes on to its next backward: one error on both at once, naming both calls (they waited in
--              each other's collectives until the process group's timeout); the processes stay in step after it
--   mainonly_bn  the same for save_state against a training-mode forward of a model with buffers (a BatchNorm's
--              running statistics, broadcast before it): its 8-byte buffer received save_state's first broadcast
--   localsgd   a LocalSGD made while one of the same model was never closed (a `local` without <close>) is refused;
--              once closed, the next one opens, and after it the gradients are averaged again
--   mainonly_end  save_state on process 0 alone as the script's last call: process 1 ends its script and waits in
--              MPI_Finalize until its watchdog (timeout 3 s; process 0's 60 s) ends the job, saying that it ended and what to look for
local mode, dir = arg[1], arg[2]
local nn, F = fp8.nn, fp8.nn.functional
-- mainonly_end: process 1's watchdog must fire first (process 0 waits longer), so the message checked is its own
local END_TIMEOUT = (tonumber(os.getenv("OMPI_COMM_WORLD_RANK")) or 0) == 1 and 3 or 60
local acc = fp8.Accelerator { cpu = true, config = false, env = {},
  kwargs_handlers = { fp8.InitProcessGroupKwargs { backend = "mpi",
    timeout = mode ~= "mainonly_end" and 20 or END_TIMEOUT } } }
local r = acc.process_index
local function say(k, v) print(("rank%d %s=%s"):format(r, k, tostring(v))) end

if mode == "mainonly" then
  fp8.manual_seed(3)
  local items = {}
  for i = 1, 16 do items[i] = { fp8.randn { 4 }, i % 2 } end
  local model = nn.Linear(4, 2)
  local opt = fp8.optim.SGD(model:parameters(), { lr = 0.1 })
  local ld
  model, opt, ld = acc:prepare(model, opt, fp8.data.DataLoader { items, batch_size = 2 })
  local function step(x, y)
    acc:backward(F.cross_entropy(model(x), y)); opt:step(); opt:zero_grad()
  end
  local batches = {}
  for x, y in ld do batches[#batches + 1] = { x, y } end
  step(table.unpack(batches[1]))
  acc:save_state(dir)   -- on every process: a checkpoint for the load case
  for i, case in ipairs { "save_state", "load_state", "gather" } do
    local ok, err = pcall(function()
      if acc:is_main_process() then
        if case == "save_state" then acc:save_state(dir) end
        if case == "load_state" then acc:load_state(dir) end
        if case == "gather" then acc:gather(fp8.ones { 2 }) end
      else
        step(table.unpack(batches[i + 1]))
      end
    end)
    say(case, ok and "ok" or (tostring(err):gsub("^[^\n]-%.lua:%d+: ", "")))
  end
  say("after", table.concat(acc:gather(fp8.tensor { r + 0.0 }):totable(), ","))
end

if mode == "mainonly_end" then
  acc:wait_for_everyone()
  if acc:is_main_process() then acc:save_state(dir) end
  say("end", "reached")
end

if mode == "localsgd" then
  local model = nn.Linear(4, 2)
  local opt = fp8.optim.SGD(model:parameters(), { lr = 0.1 })
  model, opt = acc:prepare(model, opt)
  local function step()
    fp8.manual_seed(100 + r)   -- each process its own batch
    acc:backward(F.cross_entropy(model(fp8.randn { 2, 4 }), fp8.tensor { 0, 1 })); opt:step(); opt:zero_grad()
  end
  local first = fp8.LocalSGD { accelerator = acc, model = model, local_sgd_steps = 2 }   -- (ported without <close>)
  step(); first:step()
  local ok, err = pcall(fp8.LocalSGD, { accelerator = acc, model = model, local_sgd_steps = 2 })
  say("second", ok and "made" or (tostring(err):gsub("^[^\n]-%.lua:%d+: ", "")))
  first:close()
  do
    local again <close> = fp8.LocalSGD { accelerator = acc, model = model, local_sgd_steps = 2 }
    step(); again:step()
  end
  fp8.manual_seed(100 + r)
  acc:backward(F.cross_entropy(model(fp8.randn { 2, 4 }), fp8.tensor { 0, 1 }))
  local g = model.weight.grad:reshape { -1 }
  say("grads_agree", (acc:reduce(g, "sum") - g * acc.num_processes):abs():max():item() == 0)
end

if mode == "mainonly_bn" then
  local model = nn.Sequential(nn.Linear(4, 2), nn.BatchNorm1d(2))
  local opt = fp8.optim.SGD(model:parameters(), { lr = 0.1 })
  model, opt = acc:prepare(model, opt)
  fp8.manual_seed(5)
  local x = fp8.randn { 4, 4 }
  acc:backward(model(x):sum()); opt:step(); opt:zero_grad()
  local ok, err = pcall(function()
    if acc:is_main_process() then acc:save_state(dir) else model(x) end
  end)
  say("save_state", ok and "ok" or (tostring(err):gsub("^[^\n]-%.lua:%d+: ", ""):gsub("^Sequential forward: ", "")))
  say("after", table.concat(acc:gather(model[2].running_mean):totable(), ","))
end
