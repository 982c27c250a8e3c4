-- utils.lua — Accelerator process utilities under 2 processes (tests/spec/dist_spec.lua). Each check
-- prints "ok <name>" on the main process (acc:print) or raises; "rank<r> <name> ..." lines come
-- from every rank where the spec looks at both.
local acc = fp8.Accelerator { cpu = true }
local r, N = acc.process_index, acc.num_processes
assert(N == 2, "expected 2 processes, got " .. N)
assert(acc.local_process_index == r)
assert(acc:is_main_process() == (r == 0))
local function eq(a, b, what) if a ~= b then error(("%s: got %s, expected %s"):format(what, tostring(a), tostring(b))) end end

-- gather: 2x the rows, rank order
local g = acc:gather(fp8.tensor { { r, 1 }, { r, 2 } })
eq(g:shape()[1], 4, "gather rows")
eq(g:get{3, 1}, 1.0, "gather rank 1 block")
local g0 = acc:gather(fp8.tensor(r + 0.5):reshape {})
eq(g0:shape()[1], 2, "gather 0-d")
acc:print("ok gather")

-- reduce
eq(acc:reduce(fp8.tensor { r + 1, 10 }, "sum"):get{1}, 3.0, "reduce sum")
eq(acc:reduce(fp8.tensor { r + 1, 10 }, "mean"):get{2}, 10.0, "reduce mean")
eq(acc:reduce(fp8.tensor { r + 1, 10 }, "sum", 0.5):get{1}, 1.5, "reduce sum scaled")
eq(acc:reduce(fp8.tensor { r + 1, 10 }, "mean", 4):get{1}, 6.0, "reduce mean scaled")
local okn, errn = pcall(acc.reduce, acc, fp8.tensor { 1 }, "none")
eq(not okn and tostring(errn):match('reduction="none" is not supported') ~= nil, true, "reduce none refused")
acc:print("ok reduce")

-- split_between_processes: 5 items -> 3 + 2
local part = acc:split_between_processes { "a", "b", "c", "d", "e" }
eq(table.concat(part), r == 0 and "abc" or "de", "split")
local padded = acc:split_between_processes({ "a", "b", "c" }, true)
eq(#padded, 2, "split padded length")
-- a table of lists by name (Accelerate's dict): each list split the same way
local d = acc:split_between_processes { input_ids = { 1, 2, 3, 4, 5 }, labels = { 6, 7, 8, 9, 10 } }
eq(table.concat(d.input_ids, ",") .. "|" .. table.concat(d.labels, ","), r == 0 and "1,2,3|6,7,8" or "4,5|9,10",
  "split dict")
local okd, errd = pcall(acc.split_between_processes, acc, { a = { 1, 2 }, b = { 1 } })
eq(not okd and tostring(errd):match("the values must have one length") ~= nil, true, "split dict lengths")
acc:print("ok split")

-- main_process_first: the main process finishes before the other starts
local path = arg[1] .. ".mpf"
local seen = acc:main_process_first(function()
  if r == 0 then local f = assert(io.open(path, "w")); f:write("main was here"); f:close(); return "main" end
  local f = io.open(path, "r")
  local s = f and f:read("a"); if f then f:close() end
  return s
end)
eq(seen, r == 0 and "main" or "main was here", "main_process_first")
acc:print("ok main_process_first")

-- wait_for_everyone and print (main only)
acc:wait_for_everyone()
acc:print("printed by rank " .. r)

-- sharded loader: 10 items, batch 4, even_batches: rank 0 gets [1..4], [9,10,1,2]; rank 1 [5..8], [3..6]
local items = {}
for i = 1, 10 do items[i] = { fp8.tensor { i }, i } end
local loader = acc:prepare(fp8.data.DataLoader { items, batch_size = 4 })
eq(#loader, 2, "sharded length")
local seen_ids, preds = {}, {}
for x in loader do
  for i = 1, x:shape()[1] do seen_ids[#seen_ids + 1] = math.tointeger(x:get{i, 1}) end
  preds[#preds + 1] = acc:gather_for_metrics(x)
end
print(("rank%d batches %s"):format(r, table.concat(seen_ids, ",")))
eq(preds[1]:shape()[1], 8, "gather_for_metrics full batch")
eq(preds[2]:shape()[1], 2, "gather_for_metrics drops the padding (10 % 8 = 2 real samples)")
acc:print("ok gather_for_metrics")
-- same shuffle on every rank, disjoint slices
local sl = acc:prepare(fp8.data.DataLoader { items, batch_size = 2, shuffle = true, seed = 5, drop_last = true })
local mine = {}
for x in sl do for i = 1, x:shape()[1] do mine[#mine + 1] = math.tointeger(x:get{i, 1}) end end
local all, distinct = acc:gather(fp8.tensor(mine)):totable(), {}
for _, v in ipairs(all) do distinct[v] = true end
local nd = 0
for _ in pairs(distinct) do nd = nd + 1 end
eq(#all, 8, "drop_last keeps 2 rounds of 2 batches of 2")
eq(nd, 8, "the ranks' shuffled slices are disjoint")
-- uneven without even_batches
local acc2 = fp8.Accelerator { cpu = true, even_batches = false }
local ul = acc2:prepare(fp8.data.DataLoader { items, batch_size = 4 })
eq(#ul, r == 0 and 2 or 1, "even_batches=false lengths")
-- even_batches=false, 7 items, batch 2: rank 0 gets [1,2], [5,6], rank 1 [3,4], [7]; padded to gather, the last
-- round holds 7 % 4 = 3 real samples, which gather_for_metrics keeps (Accelerate's remainder): [5, 6, 7], not the pad
local ul7, got7 = acc2:prepare(fp8.data.DataLoader { table.move(items, 1, 7, 1, {}), batch_size = 2 }), {}
for x in ul7 do
  local g = acc2:gather_for_metrics(acc2:pad_across_processes(x, 1, -1))
  local v = {}
  for i = 1, g:shape()[1] do v[i] = math.tointeger(g:get{i, 1}) end
  got7[#got7 + 1] = table.concat(v, ",")
end
eq(table.concat(got7, " "), "1,2,3,4 5,6,7", "gather_for_metrics cuts the padding of an uneven last round")
-- the same through Accelerate's DataLoaderConfiguration, and a data_seed that both ranks' loaders take (their own
-- seeds differ: without it prepare would refuse them)
local acc3 = fp8.Accelerator { cpu = true, dataloader_config = fp8.DataLoaderConfiguration { even_batches = false,
  use_seedable_sampler = true, data_seed = 11 } }
local ul3 = acc3:prepare(fp8.data.DataLoader { items, batch_size = 4, shuffle = true, seed = 100 + r })
eq(#ul3, r == 0 and 2 or 1, "DataLoaderConfiguration even_batches=false lengths")
local seen3 = {}
for x in ul3 do for i = 1, x:shape()[1] do seen3[#seen3 + 1] = math.tointeger(x:get{i, 1}) end end
local all3, d3 = acc3:gather_object(seen3), {}   -- uneven lengths: gather would refuse them
for _, v in ipairs(all3) do d3[v] = true end
local n3 = 0
for _ in pairs(d3) do n3 = n3 + 1 end
eq(#all3 .. "/" .. n3, #items .. "/" .. #items, "data_seed: one shuffled order sharded, every item once")
acc:print("ok sharding")

-- progress bars draw on the main process only
for _ in fp8.progress(2, { desc = "rankbar" .. r, every = 1 }) do end
