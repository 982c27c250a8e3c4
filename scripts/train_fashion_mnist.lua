-- train_fashion_mnist.lua — an MLP (784-512-256-10, ReLU) trained on Fashion-MNIST with AdamW and a
-- cosine learning-rate schedule; prints test accuracy after each epoch and a final summary line:
--   final test_acc=NN.NN% loss=L time=Ts samples/s=S
-- (loss = mean training loss of the last epoch, time = wall time of training + evaluation,
-- samples/s = training samples per second of training time, evaluation excluded).
-- Writes the per-step loss curve as CSV (and a PNG when gnuplot is installed).
-- Run: build/fp8lab scripts/train_fashion_mnist.lua [--epochs N] [--mixed-precision bf16] ... (--help)
local fp8 = fp8 or require "fp8"
local nn = require "fp8.nn"
local optim = require "fp8.optim"
local F = nn.functional
local data, amp = fp8.data, fp8.amp

local OPTIONS = {
  { "epochs", "int", 10, "training epochs" },
  { "batch-size", "int", 256, "training batch size" },
  { "lr", "num", 1e-3, "peak AdamW learning rate (cosine decay to 0 over the run)" },
  { "weight-decay", "num", 0.01, "AdamW weight decay" },
  { "mixed-precision", "str", "no", "no | bf16 | fp16 | fp8 (fp16 adds a dynamic loss scaler)" },
  { "fp8-backend", "str", nil, "te | ao | msamp (fp8 only; default: msamp, or FP8LAB_FP8_BACKEND / config)" },
  { "fp8-format", "str", nil, "te: HYBRID | E4M3" },
  { "fp8-opt-level", "str", nil, "msamp: O1 | O2 | O3" },
  { "fp8-recipe", "str", nil, "ao: tensorwise | rowwise | rowwise_with_gw_hp" },
  { "seed", "int", 42, "seed of weights and shuffling: same seed, same loss curve" },
  { "limit", "int", 0, "use only the first N training (and N/6 test) images; 0 = all" },
  { "root", "str", data.FASHION_MNIST_ROOT, "directory with the IDX .gz files" },
  { "out", "str", "build/fashion_mnist_loss.csv", "loss curve CSV (a .png beside it with gnuplot)" },
  { "device", "str", "auto", "auto (the GPU when there is one) | cpu | cuda" },
  { "quiet", "flag", false, "no progress bars" },
  { "save-every", "int", 0, "save a checkpoint every N steps into --checkpoint-dir/checkpoints (0 = never)" },
  { "checkpoint-dir", "str", "build/checkpoints/fashion_mnist", "where --save-every writes (the last 3 are kept)" },
  { "resume", "str", nil, "resume from a checkpoint directory, or 'latest' (the newest in --checkpoint-dir)" },
}

local ARGS = { usage = "usage: fp8lab scripts/train_fashion_mnist.lua [options]",
               about = "Trains a 784-512-256-10 MLP on Fashion-MNIST. Options:" }

local function parse_args(argv)
  local opts = require("fp8.args").parse(argv, OPTIONS, ARGS)
  if opts.epochs < 1 then error(("--epochs must be >= 1, got %d"):format(opts.epochs), 0) end
  if opts["batch-size"] < 1 then error(("--batch-size must be >= 1, got %d"):format(opts["batch-size"]), 0) end
  if not (opts.lr > 0) then error(("--lr must be > 0, got %g"):format(opts.lr), 0) end
  if opts["weight-decay"] < 0 then error(("--weight-decay must be >= 0, got %g"):format(opts["weight-decay"]), 0) end
  if opts.limit < 0 then error(("--limit must be >= 0, got %d"):format(opts.limit), 0) end
  if opts["save-every"] < 0 then error(("--save-every must be >= 0, got %d"):format(opts["save-every"]), 0) end
  local mp = opts["mixed-precision"]
  if mp ~= "no" and mp ~= "bf16" and mp ~= "fp16" and mp ~= "fp8" then
    error(("--mixed-precision must be one of no, bf16, fp16, fp8; got '%s'"):format(mp), 0)
  end
  -- Each FP8 option belongs to one backend; the backend may be implied by the option given.
  local owner = { ["fp8-format"] = "te", ["fp8-opt-level"] = "msamp", ["fp8-recipe"] = "ao" }
  local backend = opts["fp8-backend"]
  if backend and not ({ te = true, ao = true, msamp = true })[backend:lower()] then
    error(("--fp8-backend must be one of te, ao, msamp; got '%s'"):format(backend), 0)
  end
  backend = backend and backend:lower()
  for name, b in pairs(owner) do
    if opts[name] ~= nil then
      if mp ~= "fp8" then error(("--%s needs --mixed-precision fp8"):format(name), 0) end
      if backend and backend ~= b then error(("--%s belongs to the %s backend, not %s"):format(name, b, backend), 0) end
      backend = b
    end
  end
  if opts["fp8-backend"] and mp ~= "fp8" then error("--fp8-backend needs --mixed-precision fp8", 0) end
  opts.device = require("fp8.args").device(opts.device)
  opts.backend = backend
  return opts
end

local opts = parse_args(arg or {})
local mp = opts["mixed-precision"]
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
local accel = fp8.Accelerator{mixed_precision = mp, kwargs_handlers = handlers, cpu = opts.device == "cpu",
  project_config = fp8.ProjectConfiguration{project_dir = opts["checkpoint-dir"], automatic_checkpoint_naming = true,
                                            total_limit = 3}}
-- the model and both loaders go to the accelerator's device (the GPU when there is one)
model, opt, train_loader, test_loader = accel:prepare(model, opt, train_loader, test_loader)

local total_steps = opts.epochs * #train_loader
-- Cosine decay from the peak lr to 0 over the run, stepped once per optimizer step.
local sched = optim.lr_scheduler.CosineAnnealingLR(opt, {T_max = total_steps})
sched = accel:prepare(sched)   -- so checkpoints carry it (docs/checkpoints.md)
if opts.resume then
  accel:load_state(opts.resume ~= "latest" and opts.resume or nil)
  print(("resumed from %s at step %d (epoch %d)"):format(opts.resume, accel.step, train_loader.epoch + 1))
end

local function argmax_hits(logits, y)
  local rows, labels, hits = logits:totable(), y:totable(), 0
  for i, r in ipairs(rows) do
    local best = 1
    for c = 2, #r do if r[c] > r[best] then best = c end end
    if best - 1 == labels[i] then hits = hits + 1 end
  end
  return hits
end

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
  .. "mixed precision %s, seed %d"):format(#train_ds, #test_ds, opts.epochs, opts["batch-size"], opts.lr, recipe_str(),
  opts.seed))

local prev_autocast = fp8.autocast_dtype()
local scaler = accel.scaler
local curve = {}          -- {step, epoch, loss, lr}
local step, samples, train_time = accel.step, 0, 0
local t0 = data.clock()
local acc, test_loss, epoch_loss
local ok, err = pcall(function()
  for epoch = train_loader.epoch + 1, opts.epochs do   -- after --resume: the interrupted epoch first
    local sum, count = 0, 0
    local te = data.clock()
    local iter = opts.quiet and train_loader
      or fp8.progress(train_loader, {desc = ("epoch %d/%d"):format(epoch, opts.epochs)})
    for x, y in iter do
      step = step + 1
      local lr = sched:get_last_lr()[1]
      local loss = F.cross_entropy(model(x), y)
      opt:zero_grad()
      accel:backward(loss)
      opt:step()
      sched:step()
      local l = loss:item()
      sum, count, samples = sum + l, count + 1, samples + x:size(1)
      curve[#curve + 1] = { step, epoch, l, lr }
      if iter ~= train_loader then iter:set_postfix{loss = sum / count} end
      if opts["save-every"] > 0 and step % opts["save-every"] == 0 then accel:save_state() end
    end
    epoch_loss = sum / count
    train_time = train_time + (data.clock() - te)
    acc, test_loss = evaluate()
    print(("epoch %d/%d  train_loss=%.4f  test_loss=%.4f  test_acc=%.2f%%  (%.1fs)%s"):format(epoch, opts.epochs,
      epoch_loss, test_loss, acc * 100, data.clock() - t0,
      scaler and ("  loss_scale=%g skipped=%d"):format(scaler:get_scale(), scaler.skipped_steps) or ""))
  end
end)
fp8.set_autocast_dtype(prev_autocast)
if not ok then error(err, 0) end
local elapsed = data.clock() - t0

-- Loss curve: CSV always, PNG when gnuplot is there.
local dir = opts.out:match("^(.*)/[^/]*$")
if dir and dir ~= "" then os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'") end
local f, ferr = io.open(opts.out, "w")
if not f then error("cannot write the loss curve: " .. tostring(ferr), 0) end
f:write("step,epoch,loss,lr\n")
for _, r in ipairs(curve) do f:write(("%d,%d,%.6f,%.6g\n"):format(r[1], r[2], r[3], r[4])) end
f:close()
print("loss curve: " .. opts.out)
if os.execute("command -v gnuplot >/dev/null 2>&1") then
  local png = opts.out:gsub("%.csv$", "") .. ".png"
  local gp = io.popen("gnuplot 2>&1", "w")
  if gp then
    gp:write(("set terminal png size 900,500\nset output '%s'\nset datafile separator ','\n"
      .. "set title 'Fashion-MNIST MLP (%s)'\nset xlabel 'step'\nset ylabel 'training loss'\nset logscale y\n"
      .. "plot '%s' using 1:3 every ::1 with lines title 'loss'\n"):format(png, recipe_str(), opts.out))
    gp:close()
    print("loss plot: " .. png)
  end
end

print(("final test_acc=%.2f%% loss=%.4f time=%.1fs samples/s=%.0f"):format(acc * 100, epoch_loss, elapsed,
  samples / train_time))
