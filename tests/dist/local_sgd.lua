-- local_sgd.lua — fp8.LocalSGD under 2 processes (tests/spec/accelerate_names_spec.lua): each rank trains on its own
-- shard without averaging gradients, so the weights part between averages; every local_sgd_steps steps, and at close,
-- they are averaged (equal on both ranks); distributed_type reads MULTI_CPU.
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
local out = { "type=" .. acc.distributed_type }
do
  local local_sgd <close> = fp8.LocalSGD{ accelerator = acc, model = model, local_sgd_steps = 2 }
  for x, y in loader do
    acc:backward(F.cross_entropy(model(x), y)); opt:step(); opt:zero_grad()
    local_sgd:step()
    out[#out + 1] = ("%d:%s"):format(local_sgd.num_steps, same(wsum()) and "same" or "apart")
  end
end
out[#out + 1] = "closed:" .. (same(wsum()) and "same" or "apart")
-- after close, a backward averages gradients again: one step keeps the weights equal
for x, y in loader do acc:backward(F.cross_entropy(model(x), y)); opt:step(); opt:zero_grad() break end
out[#out + 1] = "ddp:" .. (same(wsum()) and "same" or "apart")
print(("rank%d %s"):format(acc.process_index, table.concat(out, " ")))
