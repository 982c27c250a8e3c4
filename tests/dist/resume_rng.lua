-- resume_rng.lua — each rank's generator across save_state/load_state under 2 processes (tests/spec/audit11a_spec.lua):
-- an MLP with dropout, seeded per process (fp8.set_seed(seed, true)), on a sharded shuffled loader, te HYBRID.
-- `straight DIR`: 6 steps, a checkpoint after step 2 (mid-epoch); `resume DIR`: a new job loads it and runs steps 3..6.
-- Each rank prints "r<rank> after_prepare <the generator's state>" and "r<rank> end <4 draws>"; the final state goes to
-- DIR/final_<mode>.
local mode, dir = arg[1], arg[2]
local nn, F = fp8.nn, fp8.nn.functional
local acc = fp8.Accelerator { cpu = true, mixed_precision = "fp8", config = false, env = {},
  kwargs_handlers = { fp8.TERecipeKwargs { fp8_format = "HYBRID", amax_history_len = 4 } },
  dataloader_config = fp8.DataLoaderConfiguration { use_stateful_dataloader = true } }
fp8.manual_seed(1234)                    -- the data is the same on every rank
local items, rows = {}, fp8.randn({ 40, 16 }):totable()
for i = 1, 40 do items[i] = { fp8.tensor(rows[i]), (i * 7) % 16 } end
fp8.set_seed(99, true)                   -- each rank its own stream
local model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 16))
local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
local loader = fp8.data.DataLoader { items, batch_size = 4, shuffle = true, seed = 3 }   -- 5 batches a rank an epoch
model, opt, loader = acc:prepare(model, opt, loader)
local r = acc.process_index
print(("r%d after_prepare %s %s"):format(r, require("fp8._checkpoint").rng_state()))
local step = 0
if mode == "resume" then acc:load_state(dir .. "/ckpt"); step = acc.step end
while step < 6 do
  for x, y in loader do
    model:train()
    local loss = F.cross_entropy(model(x), y)
    acc:backward(loss); opt:step(); opt:zero_grad()
    step = step + 1
    print(("r%d loss %d %a"):format(r, step, loss:item()))
    if mode == "straight" and step == 2 then acc:save_state(dir .. "/ckpt") end
    if step == 6 then break end
  end
end
acc:save_state(dir .. "/final_" .. mode)
local t = fp8.rand({ 4 }):totable()
print(("r%d end %a %a %a %a"):format(r, t[1], t[2], t[3], t[4]))
