-- train_char_gpt.lua — a tiny character-level GPT (fp8.nn.GPT) trained on a text file (default: the
-- fortunes of Debian's `fortunes` package), printing train/val loss periodically and a sampled text
-- at the end. Run: build/fp8lab scripts/train_char_gpt.lua [--steps N] [--text FILE] ... (--help)
local fp8 = fp8 or require "fp8"
local nn = require "fp8.nn"
local optim = require "fp8.optim"
local data, amp = fp8.data, fp8.amp

-- The default corpus: the first readable plain-text file among the fortunes databases.
local function default_text()
  for _, p in ipairs { "/usr/share/games/fortunes/fortunes", "/usr/share/games/fortunes/literature",
                       "/usr/share/games/fortunes/science", "/usr/share/games/fortunes/art" } do
    local f = io.open(p, "rb")
    if f then
      local ok = f:read(1) ~= nil
      f:close()
      if ok then return p end
    end
  end
  return "/usr/share/games/fortunes/fortunes"
end

local OPTIONS = {
  { "steps", "int", 200, "optimizer steps", 1 },
  { "block-size", "int", 64, "context length (characters)", 1 },
  { "layers", "int", 2, "transformer blocks", 1 },
  { "heads", "int", 4, "attention heads", 1 },
  { "d-model", "int", 64, "embedding width", 1 },
  { "batch-size", "int", 16, "sequences per step", 1 },
  { "lr", "num", 3e-3, "peak AdamW learning rate (warmup, then cosine decay)", 0 },
  { "seed", "int", 1337, "seed of weights, batches and sampling", 1 },
  { "text", "str", nil, "text file to train on (default: Debian's fortunes)" },
  { "mixed-precision", "str", nil, "no | bf16 | fp16 | fp8 (default: launch --mixed_precision / "
    .. "FP8LAB_MIXED_PRECISION / config file, else no)" },
  { "fp8-backend", "str", nil, "te | ao | msamp (fp8; default: launch --fp8_backend / FP8LAB_FP8_BACKEND / config, else msamp)" },
  { "gradient-accumulation-steps", "int", nil, "micro-batches per optimizer step (default: launch flag / "
    .. "FP8LAB_GRADIENT_ACCUMULATION_STEPS / config file, else 1)", 1 },
  { "device", "str", "auto", "auto (the GPU when there is one) | cpu | cuda" },
  { "eval-every", "int", 50, "steps between loss reports", 1 },
  { "sample-len", "int", 200, "characters to generate at the end", 0 },
  { "temperature", "num", 0.8, "sampling temperature (0 = greedy)", 0 },
  { "save-every", "int", 0, "save a checkpoint every N steps into --checkpoint-dir/checkpoints (0 = never)", 0 },
  { "checkpoint-dir", "str", "build/checkpoints/char_gpt", "where --save-every writes (the last 3 are kept)" },
  { "resume", "str", nil, "resume from a checkpoint directory, or 'latest' (the newest in --checkpoint-dir)" },
}

local ARGS = { usage = "usage: fp8lab scripts/train_char_gpt.lua [options]",
               about = "Trains a tiny character-level GPT. Options:", default_text = "fortunes" }

local function parse_args(argv)
  local opts = require("fp8.args").parse(argv, OPTIONS, ARGS)
  if opts["d-model"] % opts.heads ~= 0 then
    error(("--d-model (%d) must be divisible by --heads (%d)"):format(opts["d-model"], opts.heads), 0)
  end
  if not (opts.lr > 0) then error("--lr must be > 0", 0) end
  local mp = opts["mixed-precision"]
  if mp ~= nil and mp ~= "no" and mp ~= "bf16" and mp ~= "fp16" and mp ~= "fp8" then
    error(("--mixed-precision must be one of no, bf16, fp16, fp8; got '%s'"):format(mp), 0)
  end
  local b = opts["fp8-backend"]
  if b ~= nil and not ({ te = true, ao = true, msamp = true })[b:lower()] then
    error(("--fp8-backend must be one of te, ao, msamp; got '%s'"):format(b), 0)
  end
  opts.device = require("fp8.args").device(opts.device)
  return opts
end

local opts = parse_args(arg or {})
local path = opts.text or default_text()
fp8.manual_seed(opts.seed)
local T = opts["block-size"]
local train_ds = data.TextDataset{path = path, block_size = T, split = "train"}
local val_ds = data.TextDataset{path = path, block_size = T, split = "val"}
local loader = data.DataLoader{train_ds, batch_size = opts["batch-size"], shuffle = true, drop_last = true, seed = opts.seed}
local val_loader = data.DataLoader{val_ds, batch_size = opts["batch-size"], shuffle = true, drop_last = false, seed = opts.seed + 1}

local model = nn.GPT{vocab_size = train_ds.vocab_size, block_size = T, n_layer = opts.layers,
                     n_head = opts.heads, n_embd = opts["d-model"]}
local opt = optim.AdamW(model:parameters(), {lr = opts.lr, weight_decay = 0.1, betas = {0.9, 0.95}})
local warm = math.max(1, opts.steps // 20)
local sched = optim.lr_scheduler.warmup_cosine(opt, {warmup_steps = warm, total_steps = opts.steps, min_lr = opts.lr / 10})
-- Every precision goes through the Accelerator (autocast, fp16 loss scaling, the FP8 recipes); options
-- left unset take the resolved settings (launch flags, FP8LAB_*, config file, defaults). Checkpoints
-- (docs/checkpoints.md) carry the model, optimizer, schedule, loss scaler, RNG and the training loader's
-- position; the validation loader's epoch (its shuffle order) rides along as a custom object.
local handlers = {}
if opts["fp8-backend"] then handlers[1] = fp8.FP8RecipeKwargs{backend = opts["fp8-backend"]} end
local accel = fp8.Accelerator{mixed_precision = opts["mixed-precision"], kwargs_handlers = handlers,
                              cpu = opts.device == "cpu", gradient_accumulation_steps = opts["gradient-accumulation-steps"],
  project_config = fp8.ProjectConfiguration{project_dir = opts["checkpoint-dir"], automatic_checkpoint_naming = true,
                                            total_limit = 3}}
model, opt, loader, sched = accel:prepare(model, opt, loader, sched)
-- Reports come from the main process only (acc:print), as in an Accelerate script under several processes.
local print = function(...) accel:print(...) end
-- The validation loader is not prepared: its short partial passes (val_loss breaks after a few batches)
-- must neither end an accumulation window nor be saved as a mid-epoch position; it only follows the device.
val_loader:to(accel:device())
accel:register_for_checkpointing({
  state_dict = function() return {epoch = val_loader.epoch} end,
  load_state_dict = function(_, s) val_loader.epoch = s.epoch end })
if opts.resume then
  accel:load_state(opts.resume ~= "latest" and opts.resume or nil)
  print(("resumed from %s at step %d"):format(opts.resume, accel.step))
end
local device, gas = accel:device(), accel.gradient_accumulation_steps
local precision = accel.mixed_precision
if precision == "fp8" then
  local r = accel.fp8_recipe
  precision = ("fp8 (%s %s, %d FP8 layers)"):format(r.backend,
    r.backend == "te" and r.fp8_format or r.backend == "ao" and r.config or r.opt_level, #accel._fp8_layers)
end

print(("char GPT on %s: %d train / %d val characters, vocab %d; %d layers, %d heads, d_model %d, block %d, "
  .. "%d parameters; %d steps of batch %d, mixed precision %s, on %s"):format(path, train_ds.tokens:size(1),
  val_ds.tokens:size(1), train_ds.vocab_size, opts.layers, opts.heads, opts["d-model"], T,
  model:num_parameters(), opts.steps, opts["batch-size"], precision, device)
  .. (gas > 1 and (", gradient accumulation %d"):format(gas) or ""))

-- Mean loss over a few validation batches (no grad, eval mode).
local function val_loss(nbatches)
  model:eval()
  local sum, n = 0, 0
  fp8.no_grad(function()
    for x, y in val_loader do
      local _, loss = model(x, y)
      sum, n = sum + loss:item(), n + 1
      if n >= nbatches then break end
    end
  end)
  model:train()
  return sum / n
end

local t0 = data.clock()
local ok, err = pcall(function()
  local step, run_sum, run_n = accel.step, 0, 0
  if step >= opts.steps then return end
  local bar = fp8.progress((opts.steps - step) * gas, {desc = "train"})   -- micro-batches
  local it
  for _ in bar do
    local x, y
    if it then x, y = it() end
    if x == nil then it = loader:iter(); x, y = it() end   -- next epoch when one runs out
    local loss = accel:accumulate(model, function()
      local _, l = model(x, y)
      accel:backward(l)
      if accel.sync_gradients then accel:clip_grad_norm_(model:parameters(), 1.0) end
      opt:step(); sched:step(); opt:zero_grad()    -- act only on sync steps
      return l
    end)
    if not accel.sync_gradients then goto continue end
    step = step + 1
    local l = loss:item()
    run_sum, run_n = run_sum + l, run_n + 1
    bar:set_postfix{loss = l}
    if step % opts["eval-every"] == 0 or step == opts.steps then
      print(("step %d/%d  train_loss=%.4f  val_loss=%.4f  lr=%.2e  (%.1fs)"):format(step, opts.steps,
        run_sum / run_n, val_loss(4), sched:get_last_lr()[1], data.clock() - t0))
      run_sum, run_n = 0, 0
    end
    if opts["save-every"] > 0 and step % opts["save-every"] == 0 then accel:save_state() end
    ::continue::
  end
end)
if not ok then error(err, 0) end

-- Sample: start from a newline and let the model write.
if opts["sample-len"] > 0 then
  local start = train_ds.stoi["\n"] or 0
  model:eval()
  local out = model:generate(fp8.tensor{{start}}, opts["sample-len"], {temperature = opts.temperature, seed = opts.seed})
  print("---- sample (temperature " .. opts.temperature .. ") ----")
  print(train_ds:decode(out[1]))
  print("----")
end
print(("final val_loss=%.4f time=%.1fs"):format(val_loss(8), data.clock() - t0))
