-- resume_run.lua — one training run for resume_spec.lua, in its own process:
--   fp8lab resume_run.lua CONFIG MODEL STEPS MODE DIR
-- MODE "straight": STEPS steps; "first": stop after STEPS steps with acc:save_state(DIR/ckpt);
-- "resume": acc:load_state(DIR/ckpt) under use_stateful_dataloader=true (the loader finishes its interrupted epoch),
-- then steps up to STEPS; under Accelerate's default use_stateful_dataloader=false (the interrupted epoch runs again
-- from its first batch), Accelerate's two resume recipes: "resume_skip", the first epoch through
-- acc:skip_first_batches(loader, acc.step % #loader) (complete_nlp_example.py's), and "resume_manual", the loop
-- passing over that many batches itself (by_feature/checkpointing.py's); "resume_skip_stateful": the skip under
-- use_stateful_dataloader=true; "resume_skip_other": there, one batch more skipped than the checkpoint's position;
-- "resume_naive": the default with no skip. Prints one line per step,
-- "step N LOSS" (LOSS in %a, exact), and ends with save_state(DIR/final_<MODE>) holding the final
-- weights, recipe state and optimizer state.
local config, model_kind, total, mode, dir = arg[1], arg[2], math.tointeger(tonumber(arg[3])), arg[4], arg[5]
local nn, F = fp8.nn, fp8.nn.functional

local CONFIGS = {
  fp32 = { "no" }, bf16 = { "bf16" }, fp16 = { "fp16" },
  te_hybrid = { "fp8", function() return fp8.TERecipeKwargs { fp8_format = "HYBRID", amax_history_len = 4 } end },
  te_e4m3 = { "fp8", function() return fp8.TERecipeKwargs { fp8_format = "E4M3", amax_history_len = 4,
                                                           amax_compute_algo = "max" } end },
  ao_tensorwise = { "fp8", function() return fp8.AORecipeKwargs { config = "tensorwise" } end },
  ao_rowwise = { "fp8", function() return fp8.AORecipeKwargs { config = "rowwise" } end },
  msamp_o1 = { "fp8", function() return fp8.MSAMPRecipeKwargs { opt_level = "O1" } end },
  msamp_o2 = { "fp8", function() return fp8.MSAMPRecipeKwargs { opt_level = "O2" } end },
  msamp_o3 = { "fp8", function() return fp8.MSAMPRecipeKwargs { opt_level = "O3" } end },
}
local c = assert(CONFIGS[config], "unknown config " .. tostring(config))
fp8.manual_seed(1234)

local model, loader, forward
if model_kind == "mlp" then
  model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))
  local items = {}
  local rows = fp8.randn({ 40, 32 }):totable()
  for i = 1, 40 do items[i] = { fp8.tensor(rows[i]), (i * 7) % 16 } end
  loader = fp8.data.DataLoader { items, batch_size = 8, shuffle = true, seed = 5 }   -- 5 batches an epoch
  forward = function(x, y) return F.cross_entropy(model(x), y) end
else
  local text = ("the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. "):rep(2)
  local ds = fp8.data.TextDataset { text = text, block_size = 16 }
  model = nn.GPT { vocab_size = ds.vocab_size, block_size = 16, n_layer = 1, n_head = 2, n_embd = 32, dropout = 0.1 }
  loader = fp8.data.DataLoader { ds, batch_size = 16, shuffle = true, seed = 9 }
  forward = function(x, y) local _, loss = model(x, y); return loss end
end
local opt = fp8.optim.AdamW(model:parameters(), { lr = 3e-3 })
local sched = fp8.optim.lr_scheduler.LambdaLR(opt, function(e) return 1 / (1 + 0.1 * e) end)
-- FP8LAB_TEST_DEVICE=cuda (tests/gpu/resume_spec.lua) trains on the GPU; the CPU otherwise
local stateful = mode == "resume" or mode == "resume_skip_stateful" or mode == "resume_skip_other"
local acc = fp8.Accelerator { mixed_precision = c[1], kwargs_handlers = c[2] and { c[2]() } or nil, config = false, env = {},
                              cpu = os.getenv("FP8LAB_TEST_DEVICE") ~= "cuda",
                              dataloader_config = fp8.DataLoaderConfiguration { use_stateful_dataloader = stateful } }
model, opt, loader, sched = acc:prepare(model, opt, loader, sched)

local first_loader, pass_over = loader, 0
if mode:match("^resume") then acc:load_state(dir .. "/ckpt") end
if mode:match("^resume_skip") then
  first_loader = acc:skip_first_batches(loader, acc.step % #loader + (mode == "resume_skip_other" and 1 or 0))
elseif mode == "resume_manual" then
  pass_over = acc.step % #loader
end
local step = acc.step
while step < total do
  local b = 0
  for x, y in first_loader do
    b = b + 1
    if b <= pass_over then goto continue end
    model:train()
    local loss = forward(x, y)
    acc:backward(loss); opt:step(); sched:step(); opt:zero_grad()
    step = step + 1
    print(("step %d %a"):format(step, loss:item()))
    if step == total then break end
    ::continue::
  end
  first_loader, pass_over = loader, 0
end
if mode == "first" then acc:save_state(dir .. "/ckpt") end
acc:save_state(dir .. "/final_" .. mode)
