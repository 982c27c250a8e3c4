-- split.lua — DataLoaderConfiguration{split_batches=true} under 2 processes (tests/spec/dist2_spec.lua): a loader
-- over 10 items, batch_size 4, gives each process 2 samples of every batch (the short last one completed from the
-- first batch under even_batches, sliced as it is without), gather_for_metrics cuts the repeats, a prepared
-- scheduler steps once per optimizer step (twice without split_batches), a batch size 2 processes do not divide is
-- refused, and a checkpoint taken mid-epoch resumes at the same batch.
local dir = arg[1]
local function run(split, even)
  local acc = fp8.Accelerator { cpu = true, dataloader_config = fp8.DataLoaderConfiguration { split_batches = split,
    even_batches = even }, kwargs_handlers = { fp8.InitProcessGroupKwargs { timeout = 20 } } }
  local items = {}
  for i = 1, 10 do items[i] = { fp8.tensor { i }, i } end
  local w = fp8.nn.Linear(1, 1)
  local opt = fp8.optim.SGD(w:parameters(), { lr = 0.1 })
  local sched = fp8.optim.lr_scheduler.LambdaLR(opt, function(e) return 1 / (e + 1) end)
  local l
  w, opt, l, sched = acc:prepare(w, opt, fp8.data.DataLoader { items, batch_size = 4 }, sched)
  local mine, all = {}, {}
  for x, y in l do
    mine[#mine + 1] = table.concat(y:totable(), ",")
    if even ~= false then   -- (without even_batches rank 1 has a batch less: a backward there would wait for ever)
      acc:backward(w(x):sum())
      opt:step(); sched:step(); opt:zero_grad()
      for _, v in ipairs(acc:gather_for_metrics(y):totable()) do all[#all + 1] = v end
    end
  end
  print(("rank%d split=%s even=%s len=%d total=%d mine=%s gathered=%s sched=%d"):format(acc.process_index,
    tostring(split), tostring(even ~= false), #l, l.total_batch_size, table.concat(mine, "|"), table.concat(all, ","),
    sched.last_epoch))
  acc:free_memory()
  return acc
end
run(true)
run(true, false)
local acc = run(false)
-- 3 does not divide by 2
local ok, e = pcall(function()
  local a = fp8.Accelerator { cpu = true, dataloader_config = fp8.DataLoaderConfiguration { split_batches = true } }
  local items = {}
  for i = 1, 6 do items[i] = { fp8.tensor { i }, i } end
  a:prepare(fp8.data.DataLoader { items, batch_size = 3 })
end)
print(("rank%d odd: %s"):format(acc.process_index, ok and "accepted" or tostring(e)))
-- a checkpoint after the first batch of an epoch: the next loop resumes at the second, under split_batches
local a = fp8.Accelerator { cpu = true, dataloader_config = fp8.DataLoaderConfiguration { split_batches = true } }
local items = {}
for i = 1, 12 do items[i] = { fp8.tensor { i }, i } end
local l = a:prepare(fp8.data.DataLoader { items, batch_size = 4, shuffle = true, seed = 5 })
local first = {}
for _, y in l do
  if #first == 0 then a:save_state(dir) end   -- after the first batch
  first[#first + 1] = table.concat(y:totable(), ",")
end
table.remove(first, 1)
local b = fp8.Accelerator { cpu = true, dataloader_config = fp8.DataLoaderConfiguration { split_batches = true,
  use_stateful_dataloader = true } }
local l2 = b:prepare(fp8.data.DataLoader { items, batch_size = 4, shuffle = true, seed = 5 })
b:load_state(dir)
local again = {}
for _, y in l2 do again[#again + 1] = table.concat(y:totable(), ",") end
print(("rank%d resumed=%s rest=%s"):format(a.process_index, table.concat(again, "|"), table.concat(first, "|")))
