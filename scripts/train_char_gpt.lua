-- train_char_gpt.lua — a character-level GPT (fp8.nn.GPT) trained on a text (default: every text file of
-- Debian's `fortunes` package, 2.6 MB) under any precision and FP8 recipe through the Accelerator. Every
-- --eval-every steps it prints train loss (the mean over the micro-batches since the last report) and validation
-- loss, tokens/s and, under fp8, the health of each
-- tensor role (largest underflow and saturated fractions over the FP8 layers, range of the scales); it
-- writes these to a CSV (and fp8.stats of every layer to another), and samples text at the end.
-- Run: build/fp8lab scripts/train_char_gpt.lua [--steps N] [--recipe te-hybrid] [--text FILE|DIR] ... (--help)
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local fp8 = fp8 or require "fp8"
local nn = require "fp8.nn"
local optim = require "fp8.optim"
local data = fp8.data

-- --recipe NAME -> mixed precision and the FP8 kwargs handler (fp8.recipes.NAMED).
local RECIPES = fp8.recipes.NAMED
local recipe_names = {}
for i, r in ipairs(RECIPES) do recipe_names[i] = r[1] end

local OPTIONS = {
  { "steps", "int", 200, "optimizer steps", 1 },
  { "block-size", "int", 64, "context length (characters)", 1 },
  { "layers", "int", 2, "transformer blocks", 1 },
  { "heads", "int", 4, "attention heads", 1 },
  { "d-model", "int", 64, "embedding width", 1 },
  { "batch-size", "int", 16, "sequences per step", 1 },
  { "gradient-checkpointing", "flag", false, "recompute each block in the backward (fp8.utils.checkpoint): less "
    .. "activation memory, a second forward; the same losses" },
  { "lr", "num", 3e-3, "peak AdamW learning rate (warmup, then cosine decay)", 0 },
  { "seed", "int", 1337, "seed of weights, batches and sampling", 1 },
  { "text", "str", nil, "text file, or directory of text files, to train on (default: every text file of "
    .. "Debian's fortunes, " .. data.FORTUNES_DIR .. ")" },
  { "recipe", "str", nil, "precision and FP8 recipe in one name: " .. table.concat(recipe_names, " | ")
    .. " (default: --mixed-precision and --fp8-backend decide)" },
  { "mixed-precision", "str", nil, "no | bf16 | fp16 | fp8 (default: launch --mixed_precision / "
    .. "FP8LAB_MIXED_PRECISION / config file, else no)" },
  { "fp8-backend", "str", nil, "te | ao | msamp (fp8; default: launch --fp8_backend / FP8LAB_FP8_BACKEND / config, else msamp)" },
  { "gradient-accumulation-steps", "int", nil, "micro-batches per optimizer step (default: launch flag / "
    .. "FP8LAB_GRADIENT_ACCUMULATION_STEPS / config file, else 1)", 1 },
  { "device", "str", "auto", "auto (the GPU when there is one) | cpu | cuda" },
  { "eval-every", "int", 50, "steps between reports (train/val loss, tokens/s, FP8 health; a CSV row)", 1 },
  { "eval-windows", "int", 256, "validation windows per report: evenly spaced, non-overlapping, the same each "
    .. "time (the final loss uses all of them)", 1 },
  { "csv", "str", "build/char_gpt.csv", "the reports as CSV, rewritten at each one; under fp8 also fp8.stats of "
    .. "every layer into <csv>-fp8stats.csv ('' = no CSV)" },
  { "tensorboard", "str", nil, "also log the reports, each FP8 layer's scales and amaxes, and the sample for "
    .. "TensorBoard under this directory, through the Accelerator's tracker (run char_gpt; tensorboard --logdir DIR)" },
  { "sample-len", "int", 200, "characters to generate at the end", 0 },
  { "temperature", "num", nil, "sampling temperature (0 = greedy; default 0.8)", 0 },
  { "save-every", "int", 0, "save a checkpoint every N steps into --checkpoint-dir/checkpoints (0 = never)", 0 },
  { "checkpoint-dir", "str", "build/checkpoints/char_gpt", "where --save-every writes (the last 3 are kept)" },
  { "resume", "str", nil, "resume from a checkpoint directory, or 'latest' (the newest in --checkpoint-dir; default: start afresh)" },
}

local ARGS = { usage = "usage: fp8lab scripts/train_char_gpt.lua [options]",
               about = "Trains a character-level GPT under any precision and FP8 recipe. Options:", default_text = false }

local function parse_args(argv)
  local opts = require("fp8.args").parse(argv, OPTIONS, ARGS)
  if opts["d-model"] % opts.heads ~= 0 then
    fail(("--d-model (%d) must be divisible by --heads (%d)"):format(opts["d-model"], opts.heads))
  end
  if not (opts.lr > 0) then fail("--lr must be > 0") end
  -- (generate's limit: 1 + n tokens at most 2^24; it failed after the whole training run)
  if opts["sample-len"] > (1 << 24) - 1 then
    fail(("--sample-len must be at most %d (the sample's token limit), got %d"):format((1 << 24) - 1, opts["sample-len"]))
  end
  -- (the sampling options are nil unless given, so that one given without a sample is refused, not ignored)
  if opts["sample-len"] == 0 and opts.temperature ~= nil then
    fail("--temperature sets the sample's temperature, and --sample-len 0 draws no sample: give --temperature with "
      .. "--sample-len N > 0, or leave it out")
  end
  opts.temperature = opts.temperature or 0.8
  -- made now: a file in its place failed at the first save, after training had run
  if opts["save-every"] > 0 then require("fp8.args").out_folder(opts["checkpoint-dir"], "--checkpoint-dir") end
  local mp = opts["mixed-precision"]
  if mp ~= nil and mp ~= "no" and mp ~= "bf16" and mp ~= "fp16" and mp ~= "fp8" then
    fail(("--mixed-precision must be one of no, bf16, fp16, fp8; got '%s'"):format(mp))
  end
  local b = opts["fp8-backend"]
  if b ~= nil and not ({ te = true, ao = true, msamp = true })[b:lower()] then
    fail(("--fp8-backend must be one of te, ao, msamp; got '%s'"):format(b))
  end
  if opts.recipe then
    for _, r in ipairs(RECIPES) do if r[1] == opts.recipe then opts.recipe = r end end
    if type(opts.recipe) ~= "table" then
      fail(("--recipe must be one of %s; got '%s'"):format(table.concat(recipe_names, ", "), opts.recipe))
    end
    if mp ~= nil or b ~= nil then
      fail("--recipe names the precision and the recipe: give it without --mixed-precision and --fp8-backend")
    end
  end
  opts.device = require("fp8.args").device(opts.device)
  return opts
end

local opts = parse_args(arg or {})
local path = opts.text
if not path then
  if not require("fp8._checkpoint").is_dir(data.FORTUNES_DIR) then
    fail(("no text to train on: %s is missing (apt-get install fortunes), or pass --text FILE"):format(
      data.FORTUNES_DIR))
  end
  path = data.FORTUNES_DIR
end
fp8.manual_seed(opts.seed)
local T = opts["block-size"]
local train_ds = data.TextDataset{path = path, block_size = T, split = "train"}
local val_ds = data.TextDataset{path = path, block_size = T, split = "val"}
local loader = data.DataLoader{train_ds, batch_size = opts["batch-size"], shuffle = true, drop_last = true, seed = opts.seed}
-- The validation set is fixed: evenly spaced non-overlapping windows of the validation split.
local val_all = val_ds:blocks()
local val_loader = data.DataLoader{val_ds:blocks(opts["eval-windows"]), batch_size = opts["batch-size"]}
local val_final = data.DataLoader{val_all, batch_size = opts["batch-size"]}

local model = nn.GPT{vocab_size = train_ds.vocab_size, block_size = T, n_layer = opts.layers,
                     n_head = opts.heads, n_embd = opts["d-model"],
                     gradient_checkpointing = opts["gradient-checkpointing"]}
-- weight decay on every parameter, biases and LayerNorms too (nanoGPT decays only the 2-D ones): the setting of
-- docs/recipes.md's measured tables
local opt = optim.AdamW(model:parameters(), {lr = opts.lr, weight_decay = 0.1, betas = {0.9, 0.95}})
-- Every precision goes through the Accelerator (autocast, fp16 loss scaling, the FP8 recipes); options
-- left unset take the resolved settings (launch flags, FP8LAB_*, config file, defaults). Checkpoints
-- (docs/checkpoints.md) carry the model, optimizer, schedule, loss scaler, RNG and the training loader's
-- position; the validation loader's epoch (its shuffle order) rides along as a custom object.
local handlers, mixed = {}, opts["mixed-precision"]
if opts["fp8-backend"] then handlers[1] = fp8.FP8RecipeKwargs{backend = opts["fp8-backend"]} end
if opts.recipe then
  mixed = opts.recipe[2]
  if opts.recipe[3] then handlers[1] = opts.recipe[3]() end
end
local accel = fp8.Accelerator{mixed_precision = mixed, kwargs_handlers = handlers,
                              cpu = opts.device == "cpu",
  -- given on the script's command line it is a plugin, which beats the launch flag (an argument would not)
  gradient_accumulation_plugin = opts["gradient-accumulation-steps"]
    and fp8.GradientAccumulationPlugin{num_steps = opts["gradient-accumulation-steps"]} or nil,
  project_config = fp8.ProjectConfiguration{project_dir = opts["checkpoint-dir"], automatic_checkpoint_naming = true,
                                            total_limit = 3, logging_dir = opts.tensorboard},
  log_with = opts.tensorboard and "tensorboard" or nil,
  -- --resume finishes an interrupted epoch from its next batch: load_state restores each loader's position
  dataloader_config = fp8.DataLoaderConfiguration{use_stateful_dataloader = true}}
if opts.tensorboard then
  local config = {}   -- the run's settings, as its hparams
  for _, k in ipairs { "steps", "block-size", "layers", "heads", "d-model", "batch-size", "lr", "seed" } do
    config[k] = opts[k]
  end
  config.mixed_precision = accel.mixed_precision
  if accel.mixed_precision == "fp8" then config.fp8_backend = accel.fp8_backend end
  accel:init_trackers("char_gpt", config)
end
-- --steps counts each process's optimizer steps; a prepared scheduler takes num_processes steps per optimizer
-- step (Accelerate's rule, as its examples scale their schedules), so the schedule is num_processes times as long
local warm, N = math.max(1, opts.steps // 20), accel.num_processes
local sched = optim.lr_scheduler.warmup_cosine(opt, {warmup_steps = warm * N, total_steps = opts.steps * N,
                                                     min_lr = opts.lr / 10})
model, opt, loader, sched = accel:prepare(model, opt, loader, sched)
-- Reports come from the main process only (acc:print), as in an Accelerate script under several processes.
local print = function(...) accel:print(...) end
-- The validation loaders are not prepared (they must not end an accumulation window, nor be sharded or
-- saved as a position); they only follow the device. The CSV's rows ride along in checkpoints, so a
-- resumed run's CSV holds the whole history.
val_loader:to(accel:device())
val_final:to(accel:device())
local csv_rows = {}
accel:register_for_checkpointing({
  state_dict = function() return {csv_rows = csv_rows} end,
  load_state_dict = function(_, s) csv_rows = type(s.csv_rows) == "table" and s.csv_rows or {} end })
if opts.resume then
  accel:load_state(opts.resume ~= "latest" and opts.resume or nil)
  print(("resumed from %s at step %d"):format(opts.resume, accel.step))
  require("fp8.args").after_resume(accel)
end
local device, gas = accel:device(), accel.gradient_accumulation_steps
local precision = accel.mixed_precision
if precision == "fp8" then
  local r = accel.fp8_recipe
  precision = ("fp8 (%s %s, %d FP8 layers)"):format(r.backend,
    r.backend == "te" and r.fp8_format or r.backend == "ao" and r.config or r.opt_level, #accel._fp8_layers)
end

print(("char GPT on %s%s: %d train / %d val characters, vocab %d; %d layers, %d heads, d_model %d, block %d, "
  .. "%d parameters; %d steps of batch %d, mixed precision %s, on %s"):format(path,
  train_ds.files and (" (%d files)"):format(#train_ds.files) or "", train_ds.tokens:size(1),
  val_ds.tokens:size(1), train_ds.vocab_size, opts.layers, opts.heads, opts["d-model"], T,
  model:num_parameters(), opts.steps, opts["batch-size"], precision, device)
  .. (gas > 1 and (", gradient accumulation %d"):format(gas) or ""))

-- Mean loss over a fixed set of validation windows (no grad, eval mode).
local function val_loss(loader) return model:evaluate(loader) end

-- FP8 health per tensor role over the FP8 layers (fp8.stats of the last casts): the largest underflow and
-- saturated fractions, the layer each comes from, the range of the scales.
local ROLES = { "input", "weight", "grad" }
local function health()
  if #accel._fp8_layers == 0 then return nil end
  local h = {}
  for _, r in ipairs(fp8.stats(model, {quiet = true})) do
    local x = h[r.role]
    if x == nil then
      x = { format = r.format, uf = -1, sat = -1, smin = math.huge, smax = -math.huge }
      h[r.role] = x
    end
    if r.underflow > x.uf then x.uf, x.uf_layer = r.underflow, r.layer end
    if r.saturated > x.sat then x.sat, x.sat_layer = r.saturated, r.layer end
    if r.scale == r.scale then x.smin, x.smax = math.min(x.smin, r.scale), math.max(x.smax, r.scale) end
  end
  return h
end

-- The CSV: one row per report, the file rewritten (atomically) each time.
local csv_header = "step,train_loss,val_loss,lr,tokens_per_s,elapsed_s"
for _, r in ipairs(ROLES) do
  csv_header = csv_header .. (",%s_underflow_max,%s_saturated_max,%s_scale_min,%s_scale_max"):format(r, r, r, r)
end
local stats_csv
if opts.csv ~= "" and accel:is_main_process() then
  require("fp8.args").out_dir(opts.csv, "--csv")   -- checked now, not at the first report
  if #accel._fp8_layers > 0 then
    stats_csv = opts.csv:gsub("%.csv$", "") .. "-fp8stats.csv"
    -- the log appends: a fresh run starts it afresh; a resumed one keeps the rows up to its checkpoint's step
    -- (those after it are written again, as the main CSV's are)
    local f = opts.resume and io.open(stats_csv, "r")
    if f then
      local kept = {}
      for line in f:lines() do
        local s = tonumber(line:match("^(%d+),"))
        if not s or s <= accel.step then kept[#kept + 1] = line end   -- the header, and the history up to here
      end
      f:close()
      require("fp8._fileio").write_atomic(stats_csv, table.concat(kept, "\n") .. "\n")
    elseif not opts.resume then
      os.remove(stats_csv)
    end
  end
end
-- fp8.stats of every layer: to the CSV beside --csv, and with --tensorboard to its tracker too (each layer's scale,
-- amax, underflow and saturation over the run)
local stats_to_tb = opts.tensorboard ~= nil and #accel._fp8_layers > 0
if stats_csv or stats_to_tb then
  accel:log_fp8_stats{every = opts["eval-every"], path = stats_csv, trackers = stats_to_tb or nil}
end
local function report(step, train, val, lr, tok_s, elapsed)
  local h = health()
  print(("step %d/%d  train_loss=%.4f  val_loss=%.4f  lr=%.2e  tokens/s=%.0f  (%.1fs)"):format(step, opts.steps,
    train, val, lr, tok_s, elapsed))
  local row = { ("%d,%.6f,%.6f,%.6g,%.1f,%.2f"):format(step, train, val, lr, tok_s, elapsed) }
  local logged = { train_loss = train, val_loss = val, lr = lr, tokens_per_s = tok_s }
  for _, r in ipairs(ROLES) do
    local x = h and h[r]
    if x then
      logged["fp8/" .. r .. "_underflow"], logged["fp8/" .. r .. "_saturated"] = x.uf, x.sat
      local function at(v, layer) return v > 0 and (" in " .. layer) or "" end
      -- no scale when every layer scales per row (ao rowwise: fp8.stats gives them as NaN): "per row", blank cells
      local scaled = x.smin <= x.smax
      print(("  fp8 %-11s %s: underflow %.4f%%%s, saturated %.4f%%%s, scales %s"):format(r, x.format,
        100 * x.uf, at(x.uf, x.uf_layer), 100 * x.sat, at(x.sat, x.sat_layer),
        scaled and ("%.3g..%.3g"):format(x.smin, x.smax) or "per row"))
      row[#row + 1] = scaled and ("%.6g,%.6g,%.6g,%.6g"):format(x.uf, x.sat, x.smin, x.smax)
        or ("%.6g,%.6g,,"):format(x.uf, x.sat)
    else
      row[#row + 1] = ",,,"
    end
  end
  accel:log(logged, step)   -- (no tracker without --tensorboard: nothing)
  if opts.csv ~= "" and accel:is_main_process() then
    local kept = {}
    for _, l in ipairs(csv_rows) do
      if tonumber(l:match("^(%d+),")) < step then kept[#kept + 1] = l end
    end
    kept[#kept + 1] = table.concat(row, ",")
    csv_rows = kept
    require("fp8._fileio").write_atomic(opts.csv, csv_header .. "\n" .. table.concat(csv_rows, "\n") .. "\n")
  end
end

local t0 = data.clock()
local tokens_per_micro = opts["batch-size"] * T * accel.num_processes
local ok, err = pcall(function()
  local step, run_sum, run_n = accel.step, 0, 0
  local t_train, micro = 0, 0      -- training seconds and micro-batches since the last report
  if step >= opts.steps then return end
  local bar = fp8.progress((opts.steps - step) * gas, {desc = "train"})   -- micro-batches
  local it
  for _ in bar do
    local x, y
    if it then x, y = it() end
    if x == nil then it = loader:iter(); x, y = it() end   -- next epoch when one runs out
    local tm = data.clock()
    local loss = accel:accumulate(model, function()
      local _, l = model(x, y)
      accel:backward(l)
      if accel.sync_gradients then accel:clip_grad_norm_(model:parameters(), 1.0) end
      opt:step(); sched:step(); opt:zero_grad()    -- act only on sync steps
      return l
    end)
    micro = micro + 1
    -- every micro-batch's loss goes into train_loss (the mean over the tokens the report's tokens/s counts; it was
    -- the last micro-batch's of each step under accumulation)
    local l = loss:item()      -- waits for the step: its time counts
    t_train = t_train + data.clock() - tm
    run_sum, run_n = run_sum + l, run_n + 1
    if not accel.sync_gradients then goto continue end
    step = step + 1
    bar:set_postfix{loss = l}
    if step % opts["eval-every"] == 0 or step == opts.steps then
      -- the mean over every process's micro-batches (each process's mean, averaged: the same counts on each);
      -- it was process 0's alone
      local train_loss = run_sum / run_n
      if accel.num_processes > 1 then train_loss = accel:reduce(fp8.tensor { train_loss }, "mean"):item() end
      report(step, train_loss, val_loss(val_loader), sched:get_last_lr()[1], micro * tokens_per_micro / t_train,
        data.clock() - t0)
      run_sum, run_n, t_train, micro = 0, 0, 0, 0
    end
    if opts["save-every"] > 0 and step % opts["save-every"] == 0 then accel:save_state() end
    -- --steps optimizer steps: an epoch's end closes a shorter accumulation window (Accelerate's sync_with_dataloader),
    -- one step more than the micro-batches counted for (step 9/8, past the schedule's end)
    if step >= opts.steps then bar:close(); break end
    ::continue::
  end
end)
if not ok then error(err, 0) end

-- Sample: start from a newline and let the model write.
if opts["sample-len"] > 0 then
  local start = train_ds.stoi["\n"] or 0
  model:eval()
  local out = model:generate(fp8.tensor{{start}}, opts["sample-len"], {temperature = opts.temperature, seed = opts.seed})
  local text = train_ds:decode(out[1])
  print("---- sample (temperature " .. opts.temperature .. ") ----")
  print(text)
  print("----")
  accel:log({ sample = text }, accel.step)
end
if opts.csv ~= "" and accel:is_main_process() then
  print("reports: " .. opts.csv .. (stats_csv and (", fp8.stats of every layer: " .. stats_csv) or ""))
end
local final = val_loss(val_final)
accel:log({ final_val_loss = final }, accel.step)
accel:end_training()   -- closes the TensorBoard files
print(("final val_loss=%.4f time=%.1fs (%d validation windows)"):format(final, data.clock() - t0, #val_all))
