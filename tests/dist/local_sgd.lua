-- local_sgd.lua — fp8.LocalSGD under 2 processes (tests/spec/accelerate_names_spec.lua): each rank trains on its own
-- shard without averaging gradients, so the weights part between averages; every local_sgd_steps steps, and at close,
-- they are averaged (equal on both ranks, each parameter the mean of the ranks' values); distributed_type reads
-- MULTI_CPU.
local F = fp8.nn.F
local acc = fp8.Accelerator{ cpu = true, config = false }
fp8.manual_seed(1)
local items = {}
for i = 1, 32 do items[i] = { fp8.randn(4), i % 2 } end
local model = fp8.nn.Linear(4, 2)
local opt = fp8.optim.SGD(model:parameters(), { lr = 0.5 })
local loader = fp8.data.DataLoader{ items, batch_size = 4 }
model, opt, loader = acc:prepare(model, opt, loader)
local function wsum() return acc:gather(model.weight:sum():reshape(1)) end
local function same(g) return g[1] == g[2] end
-- both parameters' sums on each rank ({w0, w1, b0, b1}); an average leaves each the mean of the ranks' sums
local function sums()
  local w, b = acc:gather(model.weight:sum():reshape(1)), acc:gather(model.bias:sum():reshape(1))
  return { w[1], w[2], b[1], b[2] }
end
local function is_mean(before, after)
  for _, i in ipairs({ 1, 3 }) do
    local want = (before[i] + before[i + 1]) / 2
    for j = i, i + 1 do if math.abs(after[j] - want) > 1e-5 * (1 + math.abs(want)) then return false end end
  end
  return true
end
local out = { "type=" .. acc.distributed_type }
do
  local local_sgd <close> = fp8.LocalSGD{ accelerator = acc, model = model, local_sgd_steps = 2 }
  for x, y in loader do
    acc:backward(F.cross_entropy(model(x), y)); opt:step(); opt:zero_grad()
    local before = sums()
    local_sgd:step()
    local avg = same(wsum()) and (is_mean(before, sums()) and "mean" or "same-not-mean") or "apart"
    out[#out + 1] = ("%d:%s"):format(local_sgd.num_steps, avg)
  end
end
out[#out + 1] = "closed:" .. (same(wsum()) and "same" or "apart")
-- after close, a backward averages gradients again: one step keeps the weights equal
for x, y in loader do acc:backward(F.cross_entropy(model(x), y)); opt:step(); opt:zero_grad() break end
out[#out + 1] = "ddp:" .. (same(wsum()) and "same" or "apart")
print(("rank%d %s"):format(acc.process_index, table.concat(out, " ")))
