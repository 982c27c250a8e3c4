-- uneven.lua — a prepared loader over 5 items, batch_size 2, under 2 processes (tests/spec/dist2_spec.lua):
-- even_batches=true repeats the first items and gather_for_metrics drops them; even_batches=false gives rank 0 a
-- batch more, and a gather_for_metrics per batch is refused on both ranks (before, rank 1 cut its full round to the
-- remainder and rank 0 waited for ever in its next gather, as under Accelerate).
local r
for _, even in ipairs { true, false } do
  local acc = fp8.Accelerator { cpu = true, dataloader_config = fp8.DataLoaderConfiguration { even_batches = even },
    kwargs_handlers = { fp8.InitProcessGroupKwargs { timeout = 20 } } }
  r = acc.process_index
  local items = {}
  for i = 1, 5 do items[i] = { fp8.tensor { i }, i } end
  local l = acc:prepare(fp8.data.DataLoader { items, batch_size = 2 })
  local mine, all = {}, {}
  local ok, e = pcall(function()
    for _, y in l do
      mine[#mine + 1] = table.concat(y:totable(), ",")
      for _, v in ipairs(acc:gather_for_metrics(y):totable()) do all[#all + 1] = v end
    end
  end)
  print(("rank%d even=%s len=%d mine=%s gathered=%s %s"):format(r, tostring(even), #l, table.concat(mine, "|"),
    table.concat(all, ","), ok and "ok" or tostring(e)))
  acc:free_memory()
end
-- both ranks still in step
local t = fp8.Accelerator { cpu = true }:gather(fp8.tensor { r })
print(("rank%d after=%s"):format(r, table.concat(t:totable(), ",")))
