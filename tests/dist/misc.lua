-- misc.lua MODE — DDP behaviours under 2 processes (tests/spec/dist_spec.lua):
--   mismatch      rank 1 builds a wider hidden layer: prepare must fail on every rank naming it
--   frozen        rank 0 freezes the first layer's weight, rank 1 the last's: prepare must fail naming it
--   unused        a layer outside the loss, find_unused_parameters=false: backward fails naming it
--   unused_ok     the same with find_unused_parameters=true: trains; the unused weight's grad stays nil
--   buffers       a buffer that differs per rank: equal to rank 0's after a forward (broadcast_buffers)
--   buffers_off   the same with broadcast_buffers=false: stays different
--   nosync        no_sync: gradients differ across ranks inside, agree after the next synchronising backward
--   hooks         a gradient hook on a parameter (t:register_hook) runs before the all-reduce: the average is of the
--                 hooked gradients (rank r's scaled by r + 1); a post-accumulate-grad hook sees the rank's own
--                 gradient, as fp8.autograd.grad gives it
--   eachbatch     GradientAccumulationPlugin{sync_each_batch=true}: gradients agree across ranks after every micro-step,
--                 and the step ends where the default (one reduction per window) ends
--   sched         a prepared scheduler takes 2 steps per optimizer step (Accelerate without split_batches), one per
--                 call with step_scheduler_with_optimizer=false; a OneCycleLR stops at its total_steps
--   objects       gather_object (lists of plain values, in rank order; a refusal raised on every rank), triggers,
--                 on_process / on_last_process, local_main_process_first, pad_across_processes
--   skip          skip_first_batches on a prepared (sharded) loader: the tail of this rank's batches of the epoch
--   freemem       acc:free_memory() after a step, then a new model prepared: its gradients are averaged (the old
--                 model's parameters are out of the reducer) and the old optimizer refuses to step
--   collectives   tables with string keys gathered and reduced field by field; gather_for_metrics of an eval loop
--                 nested in a training loop cuts each by its own loader; FP8 gather, mismatched reduce and a
--                 gather_object of a record refused on every rank; a te model run on rank 0 alone does not wait
--   ddpfaults     find_unused: a parameter used only in a no_sync micro-step is averaged too; a parameter without a
--                 gradient on rank 1 only (caught there): an error on both ranks, none waits, the reducer works after;
--                 DistributedDataParallelKwargs that differ across ranks are refused at prepare
--   unfreeze      a parameter frozen at prepare and unfrozen later: refused (its gradients would stay local); prepared
--                 trainable with find_unused_parameters and frozen after prepare, it unfreezes with the weights equal
--   inputs        backward's inputs=: refused naming a left-out parameter without find_unused_parameters; with it
--                 the inputs' gradients are averaged and the other parameters get none
--   settings      mixed precision, FP8 recipe or accumulation settings that differ across ranks (each process reads its
--                 own environment and config file) are refused at prepare, on every rank, naming the first difference
local mode = arg[1]

-- An Accelerator with find_unused_parameters = fu and a small MLP with its SGD, prepared; before(model), if given,
-- runs before the optimizer is made. -> acc, rank, model, opt
local function small_prepared(fu, before)
  local nn = fp8.nn
  local acc = fp8.Accelerator { cpu = true,
    kwargs_handlers = { fp8.DistributedDataParallelKwargs { find_unused_parameters = fu } } }
  fp8.manual_seed(1)
  local model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
  if before then before(model) end
  local opt = fp8.optim.SGD(model:parameters(), { lr = 0.1 })
  model, opt = acc:prepare(model, opt)
  return acc, acc.process_index, model, opt
end

if mode == "inputs" then
  -- backward's inputs= under DDP: without find_unused_parameters the parameters left out are named on both ranks
  -- (torch's reducer raises too); with it the inputs' gradients are averaged and the rest stay without one
  for _, fu in ipairs { false, true } do
    local acc, r, model = small_prepared(fu)
    fp8.manual_seed(10 + r)
    local x = fp8.randn { 3, 4 }
    local ok, err = pcall(acc.backward, acc, (model(x) ^ 2):mean(), { inputs = { model[3].weight, model[3].bias } })
    local g = model[3].weight.grad
    local same = g and acc:gather(g:reshape { 1, -1 })
    same = same and (same:narrow(1, 1, 1) - same:narrow(1, 2, 1)):abs():max():item() == 0
    local named = ok and "" or tostring(err):match("DDP: parameter '[^']*'")
    print(("rank%d inputs find_unused=%s ok=%s same=%s first_grad=%s %s"):format(r, tostring(fu), tostring(ok),
      tostring(same), tostring(model[1].weight.grad ~= nil), named))
  end
  return
end
if mode == "unfreeze" then
  -- a parameter frozen at prepare and unfrozen later is refused; prepared trainable under find_unused_parameters and
  -- frozen after prepare, it can be unfrozen: the weights stay equal across ranks
  for _, fu in ipairs { false, true } do
    local acc, r, model, opt = small_prepared(fu, function(m) if not fu then m[1].weight:requires_grad(false) end end)
    if fu then model[1].weight:requires_grad(false) end
    local out = {}
    for step = 1, 3 do
      if step == 2 then model[1].weight:requires_grad(true) end
      fp8.manual_seed(10 * step + r)
      local x = fp8.randn { 3, 4 }
      local ok, err = pcall(function() acc:backward((model(x) ^ 2):mean()); opt:step(); opt:zero_grad() end)
      local w = acc:gather(model[1].weight:reshape { 1, -1 })
      local same = (w:narrow(1, 1, 1) - w:narrow(1, 2, 1)):abs():max():item() == 0
      local what = ok and "ok" or (tostring(err):match("DDP: parameter '[^']*' was frozen") or tostring(err))
      out[#out + 1] = ("%s/%s"):format(what, same and "same" or "differ")
      opt:zero_grad()
    end
    print(("rank%d unfreeze find_unused=%s %s"):format(r, tostring(fu), table.concat(out, " ")))
  end
  return
end
if mode == "settings" then
  local r = fp8.Accelerator { cpu = true }.process_index
  local cases = {
    { "fp16", { mixed_precision = r == 1 and "fp16" or "no" } },
    { "margin", { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs { margin = r } } } },
    { "backend", { mixed_precision = "fp8",
                   kwargs_handlers = { r == 1 and fp8.MSAMPRecipeKwargs {} or fp8.TERecipeKwargs {} } } },
    { "accum", { gradient_accumulation_steps = r + 1 } },
    { "same", { mixed_precision = "fp8",
                kwargs_handlers = { fp8.TERecipeKwargs { override_linear_precision = { wgrad = true } } } } },
  }
  for _, c in ipairs(cases) do
    c[2].cpu = true
    local acc = fp8.Accelerator(c[2])
    local model = fp8.nn.Linear(4, 4)
    local ok, err = pcall(acc.prepare, acc, model, fp8.optim.AdamW(model:parameters(), { lr = 1e-3 }))
    print(("rank%d %s=%s"):format(r, c[1], ok and "ok" or tostring(err):match("rank 1 has .*") or tostring(err)))
  end
  return
end
if mode == "ddpfaults" then
  local nn = fp8.nn
  local acc = fp8.Accelerator { cpu = true, kwargs_handlers = { fp8.DistributedDataParallelKwargs { find_unused_parameters = true } } }
  local r = acc.process_index
  fp8.manual_seed(1)
  local a, b = nn.Linear(4, 4), nn.Linear(4, 4)
  local model = acc:prepare(nn.Sequential(a, b))
  fp8.manual_seed(2 + r)
  local x1, x2 = fp8.randn { 2, 4 }, fp8.randn { 2, 4 }
  acc:no_sync(model, function() acc:backward((b(a(x1)) ^ 2):mean()) end)   -- uses a and b
  acc:backward((a(x2) ^ 2):mean())                                          -- the synchronising one: a only
  local g = acc:gather(b.bias.grad:reshape { 1, -1 })
  print(("rank%d nosync_used_same=%s"):format(r, tostring((g:narrow(1, 1, 1) - g:narrow(1, 2, 1)):abs():max():item() == 0)))
  -- without find_unused: rank 1 leaves b out of its loss and catches the error; rank 0 must not wait
  local acc2 = fp8.Accelerator { cpu = true }
  fp8.manual_seed(1)
  local c, d = nn.Linear(4, 4), nn.Linear(4, 4)
  local m2 = acc2:prepare(nn.Sequential(c, d))
  local ok, err = pcall(acc2.backward, acc2, ((r == 1 and c(x1) or d(c(x1))) ^ 2):mean())
  print(("rank%d caught=%s %s"):format(r, tostring(not ok), tostring(err):match("DDP: [^;(]*") or tostring(err)))
  for _, p in ipairs(m2:parameters()) do p.grad = nil end
  ok, err = pcall(acc2.backward, acc2, (d(c(x1)) ^ 2):mean())
  print(("rank%d after=%s"):format(r, tostring(ok and err == nil)))
  -- options that differ across ranks
  local acc3 = fp8.Accelerator { cpu = true, kwargs_handlers = { fp8.DistributedDataParallelKwargs { bucket_cap_mb = r == 0 and 25 or 1 } } }
  ok, err = pcall(acc3.prepare, acc3, nn.Linear(4, 4))
  print(("rank%d options=%s"):format(r, tostring(err):match("rank 1 has DistributedDataParallelKwargs bucket_cap_mb=1 where rank 0 has "
    .. "DistributedDataParallelKwargs bucket_cap_mb=25") and "refused" or tostring(err)))
  -- a loader shuffled with a seed per process would repeat some samples and drop others
  local items = {}
  for i = 1, 8 do items[i] = { fp8.tensor { i }, i } end
  ok, err = pcall(acc2.prepare, acc2, fp8.data.DataLoader { items, batch_size = 2, shuffle = true, seed = 100 + r })
  print(("rank%d loader=%s"):format(r, tostring(err):find("rank 1 has items=8 batch_size=2 shuffle=true seed=101 drop_last=false "
    .. "where rank 0 has items=8 batch_size=2 shuffle=true seed=100", 1, true) and "refused" or tostring(err)))
  return
end
local nn = fp8.nn
local k = { find_unused_parameters = mode == "unused_ok", broadcast_buffers = mode ~= "buffers_off" }
local acc = fp8.Accelerator { cpu = true, kwargs_handlers = { fp8.DistributedDataParallelKwargs(k) } }
local r = acc.process_index
fp8.manual_seed(1 + r)
local hidden = (mode == "mismatch" and r == 1) and 12 or 8
local model = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 2))
local extra = nn.Linear(4, 4)   -- prepared with the model, never used by the loss
if mode == "frozen" then (r == 0 and model[1] or model[3]).weight:requires_grad(false) end
if mode == "buffers" or mode == "buffers_off" then model:register_buffer("running", fp8.tensor { r + 1.0, 0 }) end
local opt = fp8.optim.SGD(model:parameters(), { lr = 0.1 })
if mode == "unused" or mode == "unused_ok" then model, extra, opt = acc:prepare(model, extra, opt)
else model, opt = acc:prepare(model, opt) end
if mode:match("^buffers") then model.running:set({ 1 }, 5 + r) end   -- differs again after prepare's broadcast
local x = fp8.randn { 3, 4 } + r
local function allsame(t)
  local g = acc:gather(t:reshape { 1, -1 })
  local a, b = g:narrow(1, 1, 1), g:narrow(1, 2, 1)
  return (a - b):abs():max():item() == 0
end
if mode:match("^buffers") then
  model(x)
  print(("rank%d buffers_same=%s"):format(r, tostring(allsame(model.running))))
  return
end
if mode == "nosync" then
  acc:no_sync(model, function()
    assert(acc.sync_gradients == true)   -- Accelerate's no_sync leaves it alone: only the backward stays local
    acc:backward(model(x):sum())
  end)
  assert(acc.sync_gradients == true)
  local w = model:parameters()[1]
  print(("rank%d inside_same=%s"):format(r, tostring(allsame(w.grad))))
  acc:backward(model(x):sum())
  print(("rank%d after_same=%s"):format(r, tostring(allsame(w.grad))))
  -- a second model under DDP: one reducer averages both, so no_sync(model) would keep the other's gradients local
  -- too (Accelerate's keeps only model's): refused
  acc:prepare(nn.Linear(2, 2))
  local ok, err = pcall(acc.no_sync, acc, model, function() end)
  print(("rank%d two_models=%s"):format(r, not ok and tostring(err):find("not supported with 2 models under DDP", 1,
    true) and "refused" or tostring(err)))
  return
end
if mode == "hooks" then
  local w = model:parameters()[1]
  local locals = {}   -- each rank's own gradient, no reduction
  acc:no_sync(model, function() acc:backward(model(x):sum()) end)
  locals = acc:gather(w.grad:reshape { 1, -1 })
  w.grad = nil
  local h = w:register_hook(function(g) return g * (r + 1) end)
  acc:backward(model(x):sum())
  local want = (locals:narrow(1, 1, 1) + locals:narrow(1, 2, 1) * 2) / 2
  local err = (w.grad:reshape { 1, -1 } - want):abs():max():item()
  print(("rank%d hooked_mean=%s same=%s"):format(r, tostring(err <= 1e-6), tostring(allsame(w.grad))))
  h:remove()
  -- a post-accumulate-grad hook runs before the all-reduce too (torch's under DDP): it sees this rank's gradient
  w.grad = nil
  local seen
  local hp = w:register_post_accumulate_grad_hook(function(p) seen = p.grad:clone():reshape { 1, -1 } end)
  acc:backward(model(x):sum())
  local own = (seen - locals:narrow(1, r + 1, 1)):abs():max():item() <= 1e-6
  print(("rank%d post_own=%s post_same=%s"):format(r, tostring(own), tostring(allsame(w.grad))))
  hp:remove()
  -- fp8.autograd.grad communicates nothing (torch's neither): each rank gets its own gradient; training goes on
  local g = fp8.autograd.grad(model(x):sum(), w):reshape { 1, -1 }
  local gown = (g - locals:narrow(1, r + 1, 1)):abs():max():item() <= 1e-6
  w.grad = nil
  acc:backward(model(x):sum())
  print(("rank%d grad_own=%s after_same=%s"):format(r, tostring(gown), tostring(allsame(w.grad))))
  return
end
if mode == "objects" then
  local g = acc:gather_object({ ("r%d"):format(r), { n = r, x = 0.1 * r, t = r == 1 } })
  print(("rank%d gathered=%s,%s,%d,%s,%s"):format(r, g[1], g[3], g[4].n, tostring(g[4].x == 0.1), tostring(g[4].t)))
  local ok, err = pcall(acc.gather_object, acc, r == 1 and { fp8.ones { 1 } } or { 1 })
  print(("rank%d refused=%s %s"):format(r, tostring(not ok), tostring(err)))
  local before = acc:check_trigger()
  if r == 1 then acc:set_trigger() end
  print(("rank%d trigger=%s,%s,%s"):format(r, tostring(before), tostring(acc:check_trigger()), tostring(acc:check_trigger())))
  local ran = {}
  acc:on_process(function() ran[#ran + 1] = "p1" end, 1)()
  acc:on_last_process(function() ran[#ran + 1] = "last" end)()
  acc:on_main_process(function() ran[#ran + 1] = "main" end)()
  print(("rank%d ran=%s"):format(r, table.concat(ran, ",")))
  print(("rank%d first=%s"):format(r, acc:local_main_process_first(function() return "done" end)))
  -- rank 0 has 2 rows, rank 1 has 3: padded to 3 (at the end, then at the start), then gathered
  local t = fp8.full({ r + 2, 2 }, r + 1)
  local p = acc:gather(acc:pad_across_processes(t, 1, -1))
  local q = acc:gather(acc:pad_across_processes({ a = t }, -2, 0, true)).a
  print(("rank%d padded=%s|%s"):format(r, table.concat(p:sum(2):totable(), ","), table.concat(q:sum(2):totable(), ",")))
  -- gather_for_metrics of strings (not tensors: gather_object), the samples even_batches repeated cut off
  local ld = acc:prepare(fp8.data.DataLoader { { 1, 2, 3, 4, 5 }, batch_size = 2 })
  local seen = {}
  for xb in ld do
    local names = {}
    for _, v in ipairs(xb:totable()) do names[#names + 1] = ("item%d"):format(v) end
    for _, n in ipairs(acc:gather_for_metrics(names)) do seen[#seen + 1] = n end
  end
  table.sort(seen)
  print(("rank%d metrics=%s"):format(r, table.concat(seen, ",")))
  return
end
if mode == "eachbatch" then
  local function run(each)
    local a = fp8.Accelerator { cpu = true, gradient_accumulation_plugin = fp8.GradientAccumulationPlugin {
      num_steps = 2, sync_each_batch = each } }
    fp8.manual_seed(7)
    local m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    local o = fp8.optim.SGD(m:parameters(), { lr = 0.5 })
    m, o = a:prepare(m, o)
    local same = {}
    for k = 1, 2 do
      a:accumulate(m, function()
        local y = m(fp8.randn { 3, 4 } + r + k)
        a:backward((y * y):sum())
        same[k] = allsame(m:parameters()[1].grad)
        o:step(); o:zero_grad()
      end)
    end
    return same, m:parameters()[1]:clone()
  end
  local s1, w1 = run(true)
  local s0, w0 = run(false)
  print(("rank%d each=%s,%s default=%s,%s agree=%s"):format(r, tostring(s1[1]), tostring(s1[2]), tostring(s0[1]),
    tostring(s0[2]), tostring((w1 - w0):abs():max():item() < 1e-6)))
  return
end
if mode == "sched" then
  local function run(sswo)
    local a = fp8.Accelerator { cpu = true, step_scheduler_with_optimizer = sswo, gradient_accumulation_steps = 3 }
    local m = nn.Linear(4, 2)
    local o = fp8.optim.SGD(m:parameters(), { lr = 0.1 })
    local sc = fp8.optim.lr_scheduler.LambdaLR(o, function(e) return 1 / (1 + e) end)
    m, o, sc = a:prepare(m, o, sc)
    for _ = 1, 6 do   -- 6 micro-steps, 2 optimizer steps
      a:accumulate(m, function() a:backward(m(x):sum()); o:step(); sc:step(); o:zero_grad() end)
    end
    return sc.last_epoch, a.step
  end
  local e1, s1 = run(nil)
  local e2, s2 = run(false)
  -- OneCycleLR of 3 steps: the second optimizer step's 2 scheduler steps would go past it (torch raises there);
  -- as Accelerate's, the prepared scheduler stops at total_steps
  local a = fp8.Accelerator { cpu = true }
  local m = nn.Linear(4, 2)
  local o = fp8.optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9 })
  local sc = fp8.optim.lr_scheduler.OneCycleLR(o, 0.1, 3)
  m, o, sc = a:prepare(m, o, sc)
  local ok = true
  for _ = 1, 3 do
    a:backward(m(x):sum()); o:step(); ok = ok and pcall(sc.step, sc); o:zero_grad()
  end
  print(("rank%d with=%d,%d without=%d,%d onecycle=%d,%s"):format(r, e1, s1, e2, s2, sc.last_epoch, tostring(ok)))
  return
end
if mode == "skip" then
  local items = {}
  for i = 1, 20 do items[i] = i end
  local function epoch(l) local out = {} for xb in l do out[#out + 1] = table.concat(xb:totable(), ",") end return out end
  local a = acc:prepare(fp8.data.DataLoader { items, batch_size = 2, shuffle = true, seed = 4 })
  local b = acc:prepare(fp8.data.DataLoader { items, batch_size = 2, shuffle = true, seed = 4 })
  local full, tail = epoch(a), epoch(acc:skip_first_batches(b, 2))
  print(("rank%d batches=%d skipped=%d tail_same=%s"):format(r, #full, #tail,
    tostring(table.concat(full, " ", 3) == table.concat(tail, " "))))
  return
end
if mode == "collectives" then
  local function vals(t) return table.concat(t:totable(), ",") end
  -- string keys: every rank walks them in one order, so the fields pair up
  local refs = fp8.tensor { 1 + 2 * r, 2 + 2 * r }
  local g = acc:gather_for_metrics { references = refs, predictions = refs * 10, zeta = refs * 100 }
  print(("rank%d paired=%s"):format(r, tostring((g.predictions - g.references * 10):abs():max():item() == 0
    and (g.zeta - g.references * 100):abs():max():item() == 0)))
  local red = acc:reduce({ loss = fp8.tensor { 10 + r }, accuracy = fp8.tensor { 20 + r } }, "sum")
  print(("rank%d reduced=%s|%s"):format(r, vals(red.loss), vals(red.accuracy)))
  -- an eval loop nested in a training loop: each gather_for_metrics cuts by its own loader's repeats
  local items8, items5 = {}, {}
  for i = 1, 8 do items8[i] = i end
  for i = 1, 5 do items5[i] = 100 + i end
  local train, eval = acc:prepare(fp8.data.DataLoader { items8, batch_size = 2 }, fp8.data.DataLoader { items5, batch_size = 2 })
  local seen = {}
  for xb in train do
    local ev = {}
    for eb in eval do ev[#ev + 1] = vals(acc:gather_for_metrics(eb)) end
    seen[#seen + 1] = vals(acc:gather_for_metrics(xb)) .. "[" .. table.concat(ev, "/") .. "]"
  end
  print(("rank%d nested=%s"):format(r, table.concat(seen, " ")))
  -- refusals, raised on every rank
  local ok1, e1 = pcall(acc.gather, acc, fp8.tensor { 1, 2 }:quantize("e4m3"))
  print(("rank%d fp8=%s %s"):format(r, tostring(not ok1), tostring(e1):match("gather: an FP8 tensor[^;]*")))
  local ok2, e2 = pcall(acc.reduce, acc, r == 0 and fp8.ones { 2 } or fp8.ones { 3 })
  print(("rank%d shapes=%s %s"):format(r, tostring(not ok2), tostring(e2):match("reduce: the tensors differ.*")))
  -- a refusal on one rank only is raised on every rank (the other does not wait in a collective), as are other fields
  local ok4, e4 = pcall(acc.reduce, acc, r == 1 and fp8.tensor { 1, 2 }:quantize("e4m3") or fp8.ones { 2 })
  print(("rank%d onerank=%s %s"):format(r, tostring(not ok4), tostring(e4):match("reduce: an FP8 tensor's bytes")))
  local ok5, e5 = pcall(acc.gather, acc, r == 0 and { a = fp8.ones { 1 } } or { b = fp8.ones { 1 } })
  print(("rank%d fields=%s %s"):format(r, tostring(not ok5), tostring(e5):match("gather: the tensors differ.*")))
  local ok3, e3 = pcall(acc.gather_object, acc, { acc = 0.5 })
  print(("rank%d record=%s %s"):format(r, tostring(not ok3), tostring(e3):match("gather_object: expected a list, got a table with the key 'acc'")))
  -- empty tables agree; a kind that differs across ranks (tensors vs values), or keys that only look alike, are one
  -- error on every rank
  local okE1, okE2 = pcall(acc.gather, acc, {}), pcall(acc.reduce, acc, { a = {} })
  local okK, eK = pcall(acc.gather_for_metrics, acc, r == 0 and { a = fp8.ones { 1 } } or { a = "x" })
  local okL, eL = pcall(acc.gather, acc, r == 0 and { [1] = fp8.ones { 1 } } or { ["1"] = fp8.ones { 1 } })
  print(("rank%d empty=%s,%s kind=%s keys=%s"):format(r, tostring(okE1), tostring(okE2),
    tostring(not okK and tostring(eK):match("rank 0 passes tensors %(gather%), rank 1 other values")),
    tostring(not okL and tostring(eL):match('rank 1 has "1" fp32%[1%] where rank 0 has %[1%] fp32%[1%]'))))
  -- a save hook failing on one rank: the save fails on every rank (none waits), and its temporary directory goes
  local d = acc:gather_object({ os.tmpname() })[1]
  if r == 0 then os.remove(d); assert(require("fp8._checkpoint").mkdir(d)) end
  acc:wait_for_everyone()
  local h = acc:register_save_state_pre_hook(function() if r == 1 then error("hook failed on rank 1") end end)
  local ok6, e6 = pcall(acc.save_state, acc, d .. "/ck")
  h:remove()
  acc:wait_for_everyone()
  print(("rank%d hookfail=%s %s tmp=%s"):format(r, tostring(not ok6), tostring(e6):match("hook failed on rank 1") or tostring(e6),
    tostring(require("fp8._checkpoint").is_dir(d .. "/ck.tmp"))))
  acc:wait_for_everyone()
  -- a checkpoint from another number of processes: refused on every rank; with strict=false the process without
  -- a saved random state keeps its own, and no rank waits for another
  acc:save_state(d .. "/ck")
  if r == 0 then
    local C = require "fp8._checkpoint"
    local path = d .. "/ck/fp8lab_state.json"
    local f = assert(io.open(path)); local text = f:read("a"); f:close()
    C.write_atomic(path, (text:gsub('"num_processes":%s*2', '"num_processes":1')))
    os.remove(d .. "/ck/random_states_1.json")
  end
  acc:wait_for_everyone()
  local ok7, e7 = pcall(acc.load_state, acc, d .. "/ck")
  local ok8, e8 = pcall(acc.load_state, acc, d .. "/ck", { strict = false })
  print(("rank%d procs=%s %s nonstrict=%s"):format(r, tostring(not ok7), tostring(e7):match("was saved by 1 process, this run has 2"),
    tostring(ok8 or e8)))
  acc:wait_for_everyone()
  if r == 0 then os.execute("rm -rf " .. d) end
  -- an FP8 (te) model: its recipe-state buffers are not broadcast, so rank 0 can run it alone in training mode
  local a2 = fp8.Accelerator { cpu = true, mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} } }
  local m2 = a2:prepare(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16)))
  if r == 0 then m2(fp8.randn { 4, 16 }) end
  a2:wait_for_everyone()
  print(("rank%d alone=done"):format(r))
  -- MS-AMP O3: its E4M3 weight copies (buffers, re-cast by every optimizer step) are not broadcast either: after a
  -- forward on rank 0 alone, both ranks train on the same data with the same weights, so their losses are equal
  local a3 = fp8.Accelerator { cpu = true, mixed_precision = "fp8",
    kwargs_handlers = { fp8.MSAMPRecipeKwargs { opt_level = "O3" } } }
  fp8.manual_seed(1)
  local m3 = nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 16))
  local o3 = fp8.optim.AdamW(m3:parameters(), { lr = 1e-2 })
  m3, o3 = a3:prepare(m3, o3)
  if r == 0 then m3(fp8.randn { 2, 32 }) end
  fp8.manual_seed(5)
  local losses = {}
  for s = 1, 4 do
    local l = nn.functional.cross_entropy(m3(fp8.randn { 8, 32 }), fp8.tensor { 0, 1, 2, 3, 4, 5, 6, 7 })
    a3:backward(l); o3:step(); o3:zero_grad()
    losses[s] = ("%.6f"):format(l:item())
  end
  print(("rank%d o3losses=%s"):format(r, table.concat(losses, ",")))
  return
end
if mode == "freemem" then
  acc:backward(model(x):sum())
  opt:step()
  local old_opt = opt
  model, opt = acc:free_memory(model, opt)
  assert(model == nil and opt == nil and acc.step == 0)
  local ok, err = pcall(old_opt.step, old_opt)
  print(("rank%d old_step_refused=%s %s"):format(r, tostring(not ok), tostring(err)))
  local m2 = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
  local o2 = fp8.optim.SGD(m2:parameters(), { lr = 0.1 })
  m2, o2 = acc:prepare(m2, o2)
  acc:backward(m2(x):sum())
  print(("rank%d new_same=%s"):format(r, tostring(allsame(m2:parameters()[1].grad))))
  o2:step()
  print(("rank%d step=%d"):format(r, acc.step))
  return
end
acc:backward(model(x):sum())
opt:step()
if mode == "unused_ok" then print(("rank%d extra_grad=%s"):format(r, tostring(extra.weight.grad))) end
acc:print("trained")
