-- train_fashion_mnist.lua — an MLP (784-512-256-10, ReLU) trained on Fashion-MNIST with AdamW and a
-- cosine learning-rate schedule; prints test accuracy after each epoch and a final summary line:
--   final test_acc=NN.NN% loss=L time=Ts samples/s=S
-- (loss = mean training loss of the last epoch, time = wall time of training + evaluation,
-- samples/s = training samples per second of training time, evaluation excluded).
-- Writes the per-step loss curve as CSV (and a PNG when gnuplot is installed).
-- Run: build/fp8lab scripts/train_fashion_mnist.lua [--epochs N] [--mixed-precision bf16] ... (--help)
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local fp8 = fp8 or require "fp8"
local nn = require "fp8.nn"
local optim = require "fp8.optim"
local F = nn.functional
local data, amp = fp8.data, fp8.amp

local OPTIONS = {
  { "epochs", "int", 10, "training epochs" },
  { "batch-size", "int", 256, "training batch size" },
  { "lr", "num", 1e-3, "peak AdamW learning rate (cosine decay to 0 over the run)", 0 },
  { "weight-decay", "num", 0.01, "AdamW weight decay" },
  { "mixed-precision", "str", nil, "no | bf16 | fp16 | fp8 (fp16 adds a dynamic loss scaler; default: launch "
    .. "--mixed_precision / FP8LAB_MIXED_PRECISION / config file, else no)" },
  { "gradient-accumulation-steps", "int", nil, "micro-batches per optimizer step (default: launch flag / "
    .. "FP8LAB_GRADIENT_ACCUMULATION_STEPS / config file, else 1)", 1 },
  { "fp8-backend", "str", nil, "te | ao | msamp (fp8 only; default: launch --fp8_backend / FP8LAB_FP8_BACKEND / "
    .. "config file, else msamp)" },
  { "fp8-format", "str", nil, "te: HYBRID | E4M3 (default HYBRID)" },
  { "fp8-opt-level", "str", nil, "msamp: O1 | O2 | O3 (default O2)" },
  { "fp8-recipe", "str", nil, "ao: tensorwise | rowwise | rowwise_with_gw_hp (default tensorwise)" },
  { "seed", "int", 42, "seed of weights and shuffling: same seed, same loss curve" },
  { "limit", "int", 0, "use only the first N training (and N/6 test) images; 0 = all" },
  { "root", "str", data.FASHION_MNIST_ROOT, "directory with the IDX .gz files" },
  { "out", "str", "build/fashion_mnist_loss.csv", "per-step CSV: loss, lr, val loss/accuracy, FP8 under/overflow" },
  { "eval-every", "int", 0, "steps between test-set evaluations in the CSV (0: at the end of each epoch)", 0 },
  { "plot", "flag", false, "PNGs beside the CSV (gnuplot): train/val curves; under fp8 the scale/amax history of the first FP8 layer" },
  { "device", "str", "auto", "auto (the GPU when there is one) | cpu | cuda" },
  { "quiet", "flag", false, "no progress bars" },
  { "save-every", "int", 0, "save a checkpoint every N optimizer steps into --checkpoint-dir/checkpoints (0 = never)" },
  { "checkpoint-dir", "str", "build/checkpoints/fashion_mnist", "where --save-every writes (the last 3 are kept)" },
  { "resume", "str", nil, "resume from a checkpoint directory, or 'latest' (the newest in --checkpoint-dir; default: "
    .. "start afresh)" },
}

local ARGS = { usage = "usage: fp8lab scripts/train_fashion_mnist.lua [options]",
               about = "Trains a 784-512-256-10 MLP on Fashion-MNIST. Options:", default_text = false }

local function parse_args(argv)
  local opts = require("fp8.args").parse(argv, OPTIONS, ARGS)
  if opts.epochs < 1 then fail(("--epochs must be >= 1, got %d"):format(opts.epochs)) end
  if opts["batch-size"] < 1 then fail(("--batch-size must be >= 1, got %d"):format(opts["batch-size"])) end
  if not (opts.lr > 0) then fail(("--lr must be > 0, got %g"):format(opts.lr)) end
  if opts["weight-decay"] < 0 then fail(("--weight-decay must be >= 0, got %g"):format(opts["weight-decay"])) end
  if opts.limit < 0 then fail(("--limit must be >= 0, got %d"):format(opts.limit)) end
  if opts["save-every"] < 0 then fail(("--save-every must be >= 0, got %d"):format(opts["save-every"])) end
  -- made now: a file in its place failed at the first save, after training had run
  if opts["save-every"] > 0 then require("fp8.args").out_folder(opts["checkpoint-dir"], "--checkpoint-dir") end
  local mp = opts["mixed-precision"]
  if mp ~= nil and mp ~= "no" and mp ~= "bf16" and mp ~= "fp16" and mp ~= "fp8" then
    fail(("--mixed-precision must be one of no, bf16, fp16, fp8; got '%s'"):format(mp))
  end
  -- Each FP8 option belongs to one backend; the backend may be implied by the option given.
  local owner = { ["fp8-format"] = "te", ["fp8-opt-level"] = "msamp", ["fp8-recipe"] = "ao" }
  -- unset: the resolved setting (launch flag, FP8LAB_MIXED_PRECISION, config file, default)
  local mp_eff = mp or fp8.kwargs.resolve{}.mixed_precision
  local backend = opts["fp8-backend"]
  if backend and not ({ te = true, ao = true, msamp = true })[backend:lower()] then
    fail(("--fp8-backend must be one of te, ao, msamp; got '%s'"):format(backend))
  end
  backend = backend and backend:lower()
  for name, b in pairs(owner) do
    if opts[name] ~= nil then
      if mp_eff ~= "fp8" then fail(("--%s needs --mixed-precision fp8"):format(name)) end
      if backend and backend ~= b then fail(("--%s belongs to the %s backend, not %s"):format(name, b, backend)) end
      backend = b
    end
  end
  if opts["fp8-backend"] and mp_eff ~= "fp8" then fail("--fp8-backend needs --mixed-precision fp8") end
  opts.device = require("fp8.args").device(opts.device)
  opts.backend = backend
  return opts
end

local opts = parse_args(arg or {})
require("fp8.args").out_dir(opts.out)   -- made now: files go there during training
fp8.manual_seed(opts.seed)

-- Data: normalised pixels; the loader shuffles from the seed and the epoch number.
local limit = opts.limit > 0 and opts.limit or nil
local train_ds = data.FashionMNIST{root = opts.root, train = true, normalize = true, limit = limit}
local test_ds = data.FashionMNIST{root = opts.root, train = false, normalize = true,
                                  limit = limit and math.max(1, limit // 6) or nil}
local train_loader = data.DataLoader{train_ds, batch_size = opts["batch-size"], shuffle = true, seed = opts.seed}
local test_loader = data.DataLoader{test_ds, batch_size = 1000}

local model = nn.Sequential(
  nn.Linear(784, 512), nn.ReLU(),
  nn.Linear(512, 256), nn.ReLU(),
  nn.Linear(256, 10))
local opt = optim.AdamW(model:parameters(), {lr = opts.lr, weight_decay = opts["weight-decay"]})

-- The Accelerator owns precision: autocast, the fp16 loss scaler, and under fp8 the recipe (model
-- conversion, scaling state, MS-AMP's optimizer). Unset FP8 options fall back to FP8LAB_* / config.
local handlers = {}
if opts.backend == "te" then
  handlers[1] = fp8.TERecipeKwargs{fp8_format = opts["fp8-format"]}
elseif opts.backend == "ao" then
  handlers[1] = fp8.AORecipeKwargs{config = opts["fp8-recipe"]}
elseif opts.backend == "msamp" then
  handlers[1] = fp8.MSAMPRecipeKwargs{opt_level = opts["fp8-opt-level"]}
end
-- Options left unset take the resolved settings (launch flags, FP8LAB_*, config file, defaults).
local accel = fp8.Accelerator{mixed_precision = opts["mixed-precision"], kwargs_handlers = handlers,
                              cpu = opts.device == "cpu",
  -- given on the script's command line it is a plugin, which beats the launch flag (an argument would not)
  gradient_accumulation_plugin = opts["gradient-accumulation-steps"]
    and fp8.GradientAccumulationPlugin{num_steps = opts["gradient-accumulation-steps"]} or nil,
  project_config = fp8.ProjectConfiguration{project_dir = opts["checkpoint-dir"], automatic_checkpoint_naming = true,
                                            total_limit = 3},
  -- --resume finishes an interrupted epoch from its next batch: load_state restores each loader's position
  dataloader_config = fp8.DataLoaderConfiguration{use_stateful_dataloader = true}}
local mp = accel.mixed_precision
-- Reports come from the main process only (acc:print), as in an Accelerate script under several processes.
local print = function(...) accel:print(...) end
local gas = accel.gradient_accumulation_steps
-- the model and both loaders go to the accelerator's device (the GPU when there is one)
model, opt, train_loader, test_loader = accel:prepare(model, opt, train_loader, test_loader)

local total_steps = opts.epochs * math.ceil(#train_loader / gas)
-- Cosine decay from the peak lr to 0 over the run, stepped with the optimizer: num_processes steps per optimizer
-- step under several processes (Accelerate's rule; #train_loader is then this process's share of the batches).
-- prepared too, so that it steps once per optimizer step under gradient accumulation, and so that
-- checkpoints carry it (docs/checkpoints.md)
local sched = accel:prepare(optim.lr_scheduler.CosineAnnealingLR(opt, {T_max = total_steps * accel.num_processes}))
-- The loss curve: this run's rows ({step, epoch, loss, lr, val_loss, val_acc, fp8_underflow, fp8_saturated}) after
-- the CSV lines a checkpoint carried (as train_char_gpt.lua's), so a resumed run's CSV holds the whole history.
local curve, carried = {}, {}
local CSV_HEADER = "step,epoch,loss,lr,val_loss,val_acc,fp8_underflow,fp8_saturated"
local function csv_lines()
  local lines = table.move(carried, 1, #carried, 1, {})
  local function cell(v, fmt) return v == nil and "" or fmt:format(v) end
  for _, r in ipairs(curve) do
    lines[#lines + 1] = ("%d,%d,%.6f,%.6g,%s,%s,%s,%s"):format(r[1], r[2], r[3], r[4], cell(r[5], "%.6f"),
      cell(r[6], "%.4f"), cell(r[7], "%.6g"), cell(r[8], "%.6g"))
  end
  return lines
end
-- the script's micro-batch counter (it names the CSV rows) and the CSV rows ride along in checkpoints
local counter = { step = 0 }
accel:register_for_checkpointing({
  state_dict = function() return { step = counter.step, csv_rows = csv_lines() } end,
  load_state_dict = function(_, s)
    counter.step = s.step
    carried = type(s.csv_rows) == "table" and s.csv_rows or {}
  end })
if opts.resume then
  accel:load_state(opts.resume ~= "latest" and opts.resume or nil)
  print(("resumed from %s at step %d (epoch %d)"):format(opts.resume, counter.step, train_loader.epoch + 1))
  require("fp8.args").after_resume(accel)
end

-- correct predictions in a batch: argmax gives 0-based classes, as the labels are
local function argmax_hits(logits, y) return logits:argmax(2):eq(y):sum():item() end

local function evaluate()
  model:eval()
  local hits, loss_sum, n = 0, 0, 0
  fp8.no_grad(function()
    for x, y in test_loader do
      local logits = model(x)
      loss_sum = loss_sum + F.cross_entropy(logits, y):item() * x:size(1)
      hits = hits + argmax_hits(logits, y)
      n = n + x:size(1)
    end
  end)
  model:train()
  return hits / n, loss_sum / n
end

local function recipe_str()
  if mp ~= "fp8" then return mp end
  local r = accel.fp8_recipe
  local detail = r.backend == "te" and r.fp8_format or r.backend == "ao" and r.config or r.opt_level
  return ("fp8 (%s %s, %d FP8 layers)"):format(r.backend, detail, #accel._fp8_layers)
end
print(("Fashion-MNIST MLP 784-512-256-10: %d train / %d test images, %d epochs, batch %d, AdamW lr %g (cosine), "
  .. "mixed precision %s, seed %d%s"):format(#train_ds, #test_ds, opts.epochs, opts["batch-size"], opts.lr, recipe_str(),
  opts.seed, gas > 1 and (", gradient accumulation %d"):format(gas) or ""))

local prev_autocast = fp8.autocast_dtype()
local scaler = accel.scaler
local plot = opts.plot and require "fp8.plot"
local stats_csv = opts.out:gsub("%.csv$", "") .. "_fp8_stats.csv"
if plot and mp == "fp8" then
  os.remove(stats_csv)   -- log_fp8_stats appends
  accel:log_fp8_stats{every = 1, path = stats_csv}
end
-- Fractions of the values of the last FP8 casts (all layers and roles) that underflowed to zero and
-- that saturated at the format's max.
local function fp8_fractions()
  if mp ~= "fp8" then return nil end
  local u, s, n = 0, 0, 0
  for _, r in ipairs(fp8.stats(model, {quiet = true})) do
    u, s, n = u + r.underflow * r.numel, s + r.saturated * r.numel, n + r.numel
  end
  if n == 0 then return nil end
  return u / n, s / n
end
local step, samples, train_time = counter.step, 0, 0
-- The curve's CSV (main process only), written atomically (temporary file, fsync, rename, fsync the directory): now,
-- so that a path that cannot be written stops the run before it trains, after each epoch (an interrupted run keeps
-- its finished epochs), and at the end.
local function write_curve()
  if accel.process_index ~= 0 then return end
  local lines = csv_lines()
  table.insert(lines, 1, CSV_HEADER)
  local ok, werr = pcall(require("fp8._fileio").write_atomic, opts.out, table.concat(lines, "\n") .. "\n")
  if not ok then error("cannot write the loss curve: " .. tostring(werr), 0) end
end
write_curve()

local t0 = data.clock()
local acc, test_loss, epoch_loss
local save_due = false
local ok, err = pcall(function()
  for epoch = train_loader.epoch + 1, opts.epochs do   -- after --resume: the interrupted epoch first
    local sum, count = 0, 0
    local te = data.clock()
    local iter = opts.quiet and train_loader
      or fp8.progress(train_loader, {desc = ("epoch %d/%d"):format(epoch, opts.epochs)})
    for x, y in iter do
      step = step + 1
      local lr = sched:get_last_lr()[1]
      local loss = accel:accumulate(model, function()
        local l = F.cross_entropy(model(x), y)
        accel:backward(l)
        opt:step()          -- these three act only on sync steps (every gas-th batch, and the last)
        sched:step()
        opt:zero_grad()
        return l
      end)
      local l = loss:item()
      sum, count, samples = sum + l, count + 1, samples + x:size(1)
      local under, sat = fp8_fractions()
      curve[#curve + 1] = { step, epoch, l, lr, nil, nil, under, sat }
      if opts["eval-every"] > 0 and step % opts["eval-every"] == 0 then
        local tt = data.clock()
        local a, vl = evaluate()
        curve[#curve][5], curve[#curve][6] = vl, a
        train_time = train_time - (data.clock() - tt)   -- evaluation is not training time
      end
      if iter ~= train_loader then iter:set_postfix{loss = sum / count} end
      counter.step = step
      -- every N optimizer steps (accel.step counts them), at the end of an accumulation window; on the epoch's last
      -- batch after its evaluation, so that the checkpoint's CSV rows hold it
      save_due = opts["save-every"] > 0 and accel.sync_gradients and accel.step % opts["save-every"] == 0
      if save_due and not accel.gradient_state.end_of_dataloader then accel:save_state(); save_due = false end
    end
    epoch_loss = sum / count
    train_time = train_time + (data.clock() - te)
    acc, test_loss = evaluate()
    curve[#curve][5], curve[#curve][6] = test_loss, acc
    if save_due then accel:save_state(); save_due = false end
    write_curve()
    print(("epoch %d/%d  train_loss=%.4f  test_loss=%.4f  test_acc=%.2f%%  (%.1fs)%s"):format(epoch, opts.epochs,
      epoch_loss, test_loss, acc * 100, data.clock() - t0,
      scaler and ("  loss_scale=%g skipped=%d"):format(scaler:get_scale(), scaler.skipped_steps) or ""))
  end
end)
fp8.set_autocast_dtype(prev_autocast)
if not ok then error(err, 0) end
local elapsed = data.clock() - t0

-- The curve (main process only): CSV always; PNGs with --plot.
write_curve()
if accel.process_index == 0 then
  print("loss curve: " .. opts.out)
  if plot then
    local png = plot.lines{csv = opts.out, png = opts.out:gsub("%.csv$", "") .. ".png",
      title = ("Fashion-MNIST MLP (%s)"):format(recipe_str()), xlabel = "step", ylabel = "loss (log scale)",
      y2label = "test accuracy", y2range = {0, 1}, logy = true,
      series = {{x = 1, y = 3, title = "train loss"}, {x = 1, y = 5, title = "test loss", style = "points"},
                {x = 1, y = 6, title = "test accuracy", style = "points", axis = "x1y2"}}}
    if png then print("loss plot: " .. png) end
    if mp == "fp8" then
      local p2 = plot.fp8_history{csv = stats_csv, png = opts.out:gsub("%.csv$", "") .. "_fp8.png"}
      if p2 then print("fp8 scale/amax plot: " .. p2) end
    end
  end
end

if acc == nil then   -- resumed from a checkpoint at the end of the last epoch: no epoch ran, so no summary
  print(("nothing left to train: the checkpoint is at the end of epoch %d of %d"):format(train_loader.epoch, opts.epochs))
else
  print(("final test_acc=%.2f%% loss=%.4f time=%.1fs samples/s=%.0f"):format(acc * 100, epoch_loss, elapsed,
    samples / train_time))
end
