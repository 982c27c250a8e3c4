-- resume.lua — save_state/load_state under 2 processes (tests/spec/dist_spec.lua): an FP8 (te) MLP on
-- a sharded, shuffled loader. `straight OUT DIR`: 8 steps, with a checkpoint after step 3 (mid-epoch).
-- `resume OUT DIR`: a new job loads that checkpoint and runs steps 4..8. Each rank writes
-- "loss <step> <value>" lines and its final weights to OUT.<rank>; the spec compares the two runs.
local mode, out, dir = arg[1], arg[2], arg[3]
local nn, F = fp8.nn, fp8.nn.functional
local acc = fp8.Accelerator { cpu = true, mixed_precision = "fp8", kwargs_handlers = { fp8.FP8RecipeKwargs { backend = "te" } },
  dataloader_config = fp8.DataLoaderConfiguration { use_stateful_dataloader = true } }   -- resumes in the epoch
fp8.manual_seed(7 + acc.process_index)   -- different seeds per rank: prepare broadcasts rank 0's weights
local items = {}
fp8.manual_seed(1234)                    -- the data is the same on every rank
for i = 1, 48 do items[i] = { fp8.randn { 16 }, (i * 7) % 16 } end
fp8.manual_seed(7 + acc.process_index)
local model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
local loader = fp8.data.DataLoader { items, batch_size = 4, shuffle = true, seed = 3 }
model, opt, loader = acc:prepare(model, opt, loader)
local f = assert(io.open(out .. "." .. acc.process_index, "w"))
local step = 0
if mode == "resume" then
  acc:load_state(dir)
  step = acc.step
end
while step < 8 do
  for x, y in loader do
    local loss = F.cross_entropy(model(x), y)
    acc:backward(loss)
    opt:step(); opt:zero_grad()
    step = step + 1
    f:write(("loss %d %.9g\n"):format(step, loss:item()))
    if mode == "straight" and step == 3 then acc:save_state(dir) end
    if step == 8 then break end
  end
end
local sd, names = model:state_dict(), {}
for name in pairs(sd) do names[#names + 1] = name end
table.sort(names)
for _, name in ipairs(names) do
  local p = sd[name]
  if fp8.is_tensor(p) and p:dtype() == "fp32" then f:write(("param %s %.9g\n"):format(name, p:sum():item())) end
end
f:close()
acc:print("ok resume " .. mode)
