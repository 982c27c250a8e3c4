-- parity_seed_port_spec.lua — the training loop of the seed documents (Accelerate's FP8 example),
-- written as a user would write it in Lua, run for every backend: Accelerator with
-- mixed_precision="fp8" and a recipe handler, a scheduler created before prepare, prepare of model,
-- optimizer, both loaders and the scheduler, gradient accumulation, eval with and without
-- use_autocast_during_eval, and printing on the main process only.
local nn, F, optim, data = fp8.nn, fp8.nn.functional, fp8.optim, fp8.data
local G = debug.getregistry()[2]   -- the real globals (the spec may run in its own environment)

-- 96 samples of 32 features in 4 classes: class c shifts features 8c..8c+7 up.
local function dataset(n, seed)
  fp8.manual_seed(seed)
  local items = {}
  for i = 1, n do
    local c = i % 4
    local x = fp8.randn { 32 } * 0.5
    local bump = {}
    for k = 1, 32 do bump[k] = (k - 1) // 8 == c and 2.0 or 0.0 end
    items[i] = { x + fp8.tensor(bump), c }
  end
  return items
end

-- The loop, as in the seed documents; returns what a user would look at.
local function seed_loop(handler)
  fp8.set_seed(42)
  local model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
  local optimizer = optim.AdamW(model:parameters(), { lr = 1e-2 })
  local train_dl = data.DataLoader { dataset(96, 1), batch_size = 8, shuffle = true, seed = 1 }
  local eval_dl = data.DataLoader { dataset(32, 2), batch_size = 16 }
  local lr_scheduler = optim.lr_scheduler.StepLR(optimizer, { step_size = 4, gamma = 0.5 })   -- before prepare
  local accelerator = fp8.Accelerator { mixed_precision = "fp8", kwarg_handlers = { handler },
                                        gradient_accumulation_steps = 2, config = false, env = {} }
  model, optimizer, train_dl, eval_dl, lr_scheduler = accelerator:prepare(model, optimizer, train_dl, eval_dl, lr_scheduler)

  local printed = {}
  local real_print = G.print
  G.print = function(...) printed[#printed + 1] = table.concat({ ... }, " ") end   -- capture accelerator:print
  local ok, err = pcall(function()
    for epoch = 1, 3 do
      model:train()
      for x, y in train_dl do
        accelerator:accumulate(model, function()
          local loss = F.cross_entropy(model(x), y)
          accelerator:backward(loss)
          optimizer:step()
          lr_scheduler:step()
          optimizer:zero_grad()
        end)
      end
      model:eval()
      local correct, total, loss_sum = 0, 0, 0
      fp8.no_grad(function()
        for x, y in eval_dl do
          local logits = model(x)
          loss_sum = loss_sum + F.cross_entropy(logits, y):item() * x:size(1)
          local preds, refs = accelerator:gather(logits), accelerator:gather(y)
          local rows, labels = preds:totable(), refs:totable()
          for i, r in ipairs(rows) do
            local best = 1
            for c = 2, #r do if r[c] > r[best] then best = c end end
            if best - 1 == labels[i] then correct = correct + 1 end
          end
          total = total + #rows
        end
      end)
      accelerator:print(("epoch %d: accuracy %.3f eval_loss %.4f"):format(epoch, correct / total, loss_sum / total))
    end
  end)
  G.print = real_print
  if not ok then error(err, 0) end
  return accelerator, model, printed
end

describe("the seed documents' loop, in Lua", function()
  for _, b in ipairs { "te", "msamp", "ao" } do
    it("trains with the " .. b .. " backend", function()
      local acc, model, printed = seed_loop(fp8.FP8RecipeKwargs { backend = b })
      assert.equal(3, #printed)
      local acc3 = tonumber(printed[3]:match("accuracy ([%d%.]+)"))
      assert.is_true(acc3 >= 0.9, printed[3])
      assert.is_true(fp8.has_fp8_layers(model))
      assert.equal(b == "ao", fp8.has_ao_layers(model))
      -- 96 samples / batch 8 = 12 micro-batches per epoch, accumulation 2: 6 real steps per epoch
      assert.equal(18, acc.step)
      assert.near(1e-2 * 0.5 ^ 4, acc._optimizers[1].param_groups[1].lr, 1e-12)   -- 18 scheduler steps: 4 halvings
    end)
  end

  it("evaluates in high precision unless use_autocast_during_eval (te)", function()
    local _, m_off, p_off = seed_loop(fp8.FP8RecipeKwargs { backend = "te", use_autocast_during_eval = false })
    local _, m_on, p_on = seed_loop(fp8.FP8RecipeKwargs { backend = "te", use_autocast_during_eval = true })
    -- the same training (eval does not touch the recipe state), different eval numerics
    local x = dataset(16, 3)
    local xs = {}
    for i, it in ipairs(x) do xs[i] = it[1]:totable() end
    local batch = fp8.tensor(xs)
    m_off:eval(); m_on:eval()
    local a = fp8.no_grad(function() return m_off(batch) end)
    local b = fp8.no_grad(function() return m_on(batch) end)
    local d = (a - b):abs():max():item()
    assert.is_true(d > 0, "eval in FP8 should differ from eval in high precision")
    assert.is_true(d < 1.0, "but only by FP8 rounding, got " .. d)
    m_off:train()
    local c = fp8.no_grad(function() return m_off(batch) end)   -- training mode: FP8
    m_on:train()
    local e = fp8.no_grad(function() return m_on(batch) end)
    assert.equal(0, (c - e):abs():max():item())   -- same weights, same FP8 path
    assert.equal(3, #p_off); assert.equal(3, #p_on)
  end)

  it("prints on each machine's main process only (Accelerate's: once per server)", function()
    local acc = fp8.Accelerator { config = false, env = {} }
    local got = {}
    local real_print = G.print
    G.print = function(...) got[#got + 1] = table.concat({ ... }, " ") end
    acc:print("main")
    acc.process_index, acc.local_process_index = 1, 1   -- rank 1 of one machine
    acc:print("other")
    acc.process_index, acc.local_process_index = 1, 0   -- the main process of a second machine
    acc:print("second machine")
    G.print = real_print
    assert.same({ "main", "second machine" }, got)
  end)
end)
