-- 05_msamp_memory.lua — lesson 5 (docs/concepts.md, "Lesson 5: what MS-AMP saves"): the tiny char GPT
-- trained for a few steps under fp32, bf16 and MS-AMP O1/O2/O3 from the same seed and batches; the
-- bytes of training state per parameter (weights + gradients + optimizer state + recipe state) as the
-- allocator counts them after an optimizer step, next to the loss curves.
-- Run: build/fp8lab scripts/lessons/05_msamp_memory.lua [--quick] [--steps N] [--out DIR]
local fp8 = fp8 or require "fp8"
local R = require "fp8._memory"   -- allocator counters
local C = dofile(((arg and arg[0] or "scripts/lessons/x"):match("^(.*)/[^/]*$") or ".") .. "/common.lua")
local opts = C.parse(arg, "05_msamp_memory", "Lesson 5: what MS-AMP saves.",
  { size = { "steps", 150, 20, "training steps", 1 }, gpt = true })

local LEVELS = {
  { "fp32", "no" },
  { "bf16", "bf16" },
  { "msamp O1", "fp8", "O1" },
  { "msamp O2", "fp8", "O2" },
  { "msamp O3", "fp8", "O3" },
}

local function live()
  collectgarbage("collect"); collectgarbage("collect")
  return (R.bytes("cpu"))
end

local function run(level)
  local acc = fp8.Accelerator{mixed_precision = level[2], cpu = true,
    kwargs_handlers = level[3] and { fp8.MSAMPRecipeKwargs{opt_level = level[3]} } or {}}
  local base
  local model, next_batch = C.gpt(opts, { d = 64, heads = 4, layers = 2, on_data = function() base = live() end })
  local nparams = model:num_parameters()
  local lin = 0   -- parameters in the Linear weights MS-AMP converts
  for _, np in ipairs(model:named_parameters()) do
    if np[1]:match("%.weight$") and np[2]:dim() == 2 and not np[1]:match("^w[tp]e") then lin = lin + np[2]:numel() end
  end
  local opt = fp8.optim.AdamW(model:parameters(), {lr = 3e-3, weight_decay = 0, betas = {0.9, 0.95}})
  model, opt = acc:prepare(model, opt)
  local losses = {}
  for s = 1, opts.steps do
    local x, y = next_batch()
    local _, loss = model(x, y)
    opt:zero_grad()
    acc:backward(loss)
    opt:step()
    losses[s] = loss:item()
  end
  -- gradients are kept after the last step: the state is weights + gradients + optimizer + recipe
  local bytes = live() - base
  return { losses = losses, bpp = bytes / nparams, nparams = nparams, lin = lin, fp8_layers = #acc._fp8_layers }
end

print(("Lesson 5 — what MS-AMP saves. Tiny char GPT (2 blocks, d_model 64), %d AdamW steps per level, same seed.")
  :format(opts.steps))
local results = {}
for i, l in ipairs(LEVELS) do results[i] = run(l) end
local k = math.min(10, opts.steps)
print(("  %-10s %10s %12s %14s"):format("level", "FP8 layers", "B / param", "final loss"))
for i, l in ipairs(LEVELS) do
  local r, last = results[i], 0
  for s = opts.steps - k + 1, opts.steps do last = last + r.losses[s] / k end
  r.last = last
  print(("  %-10s %10d %12.2f %14.4f"):format(l[1], r.fp8_layers, r.bpp, last))
end
print(("  (B / param: the allocator's live bytes after an optimizer step over %d parameters, %.0f%% of them in"
  .. " the Linear weights MS-AMP converts; final loss: mean of the last %d steps)"):format(results[1].nparams,
  100 * results[1].lin / results[1].nparams, k))
print("Look at: fp32 AdamW keeps 16 bytes a parameter (weight, gradient, m, v). O1 stores Linear weights in")
print("fp16 and their gradients in FP8; O2 also keeps Adam's m in FP8 and v in fp16; O3 adds FP8 weights")
print("for the forward beside fp16 masters. Embeddings, biases and LayerNorms stay fp32, so a small model")
print("saves less than the per-Linear figures of docs/recipes.md. The loss curves stay together.")

local rows = {}
for s = 1, opts.steps do
  local row = { s }
  for i = 1, #LEVELS do row[#row + 1] = results[i].losses[s] end
  rows[s] = row
end
local header = { "step" }
for i, l in ipairs(LEVELS) do header[i + 1] = ("%s (%.2f B/param)"):format(l[1], results[i].bpp) end
local csv = C.write_csv(opts.out .. "/05_msamp_memory.csv", header, rows)
local series = {}
for i in ipairs(LEVELS) do series[i] = { x = 1, y = i + 1, title = header[i + 1] } end
C.plot{ csv = csv, png = opts.out .. "/05_msamp_memory.png", title = "Lesson 5: training loss per MS-AMP level "
  .. "(bytes of training state per parameter in the key)", xlabel = "step", ylabel = "training loss", series = series }
print(("RESULT bpp_fp32=%.4f bpp_bf16=%.4f bpp_O1=%.4f bpp_O2=%.4f bpp_O3=%.4f loss_fp32=%.4f loss_O1=%.4f "
  .. "loss_O2=%.4f loss_O3=%.4f"):format(results[1].bpp, results[2].bpp, results[3].bpp, results[4].bpp,
  results[5].bpp, results[1].last, results[3].last, results[4].last, results[5].last))
