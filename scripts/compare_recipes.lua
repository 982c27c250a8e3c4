-- compare_recipes.lua — trains the same Fashion-MNIST MLP (784-512-256-10, AdamW, cosine lr) from the
-- same seed under every precision recipe and prints one table: final test accuracy, last-epoch loss,
-- time per step, peak allocator memory during training, and bytes of training state (weights +
-- gradients + optimizer state + recipe caches) per parameter, measured from the allocator after an
-- optimizer step. Writes the per-step losses of every run as CSV, and a PNG with gnuplot.
-- Run: build/fp8lab scripts/compare_recipes.lua [--epochs 3] [--limit N] [--only te-hybrid,ao-rowwise] (--help)
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local fp8 = fp8 or require "fp8"
local nn, optim = fp8.nn, fp8.optim
local F = nn.functional
local data = fp8.data
local R = require "fp8._memory"   -- allocator counters

-- every precision and recipe of fp8.recipes.NAMED but fp16 (its loss scaler makes it a different run)
local RECIPES = {}
for _, r in ipairs(fp8.recipes.NAMED) do if r[1] ~= "fp16" then RECIPES[#RECIPES + 1] = r end end
local names = {}
for i, r in ipairs(RECIPES) do names[i] = r[1] end

local OPTIONS = {
  { "epochs", "int", nil, "mlp: training epochs per recipe (default 3)", 1 },
  { "batch-size", "int", nil, "training batch size (default 256; gpt: 16)", 1 },
  { "lr", "num", nil, "peak AdamW learning rate (default 1e-3; gpt: 3e-3)", 0 },
  { "seed", "int", 42, "seed shared by every run" },
  { "limit", "int", nil, "mlp: use only the first N training images (N/6 test); 0 = all (default)", 0 },
  { "only", "str", nil, "comma-separated subset of: " .. table.concat(names, ",") },
  { "out", "str", nil, "per-step losses of every run (CSV; PNG beside it with gnuplot; default "
    .. "build/compare_recipes.csv, build/compare_recipes_gpt.csv with --model gpt)" },
  { "root", "str", nil, "mlp: directory with the IDX .gz files (default " .. data.FASHION_MNIST_ROOT .. ")" },
  { "model", "str", "mlp", "mlp (Fashion-MNIST) | gpt (the char GPT of scripts/train_char_gpt.lua on a text)" },
  { "steps", "int", nil, "gpt: optimizer steps per recipe (default 300)", 1 },
  { "text", "str", nil, "gpt: text file or directory of text files (default: all of Debian's fortunes, "
    .. data.FORTUNES_DIR .. ")" },
  { "layers", "int", nil, "gpt: transformer blocks (default 2)", 1 },
  { "d-model", "int", nil, "gpt: embedding width, a multiple of --heads (default 64: a multiple of 16, so every Linear can run FP8)", 1 },
  { "heads", "int", nil, "gpt: attention heads (default 4)", 1 },
  { "block-size", "int", nil, "gpt: context length (default 64)", 1 },
  { "eval-every", "int", nil, "gpt: steps between validation losses on --eval-windows/8 windows (default 100; "
    .. "the final one uses all --eval-windows)", 1 },
  { "eval-windows", "int", nil, "gpt: validation windows of the final loss, evenly spaced non-overlapping "
    .. "windows of the validation split (default 0 = all of them)", 0 },
  { "fp8-stats", "flag", nil, "gpt: log fp8.stats of every FP8 layer at each --eval-every into <out>-<recipe>-fp8stats.csv" },
}
local opts = require("fp8.args").parse(arg or {}, OPTIONS, {
  usage = "usage: fp8lab scripts/compare_recipes.lua [options]",
  about = "Trains the Fashion-MNIST MLP under fp32, bf16 and every FP8 recipe and compares them. Options:",
  default_text = false })
-- Each run sets its own precision and recipe: a launch flag that sets one would be refused by the first run that
-- does not use it (the fp32 run, naming mixed_precision "no"), so it is refused here, for what it is.
for var, flag in (os.getenv("FP8LAB_LAUNCH_FLAGS") or ""):gmatch("([%w_]+)=(%-%-[%w_]+)") do
  if var == "FP8LAB_MIXED_PRECISION" or var:match("^FP8LAB_FP8_") then
    fail(("%s (a launch flag) does not apply: compare_recipes.lua sets each run's precision and recipe itself (--only "
      .. "picks them); launch it without the flag"):format(flag))
  end
end
if opts.model ~= "mlp" and opts.model ~= "gpt" then
  fail(("--model must be mlp or gpt, got '%s'"):format(opts.model))
end
-- Options of the other model are refused, not ignored.
local ONLY = { mlp = { "epochs", "limit", "root" }, gpt = { "steps", "text", "layers", "d-model", "heads", "block-size",
  "eval-every", "eval-windows", "fp8-stats" } }
for m, names in pairs(ONLY) do
  if m ~= opts.model then
    for _, k in ipairs(names) do
      if opts[k] ~= nil then
        fail(("--%s applies to --model %s only (this run is --model %s)"):format(k, m, opts.model))
      end
    end
  end
end
local DEFAULTS = { epochs = 3, limit = 0, root = data.FASHION_MNIST_ROOT, steps = 300, layers = 2, ["d-model"] = 64,
                   heads = 4, ["block-size"] = 64, ["eval-every"] = 100, ["eval-windows"] = 0 }
for k, v in pairs(DEFAULTS) do if opts[k] == nil then opts[k] = v end end
if opts.model == "gpt" and opts["d-model"] % opts.heads ~= 0 then
  fail(("--d-model (%d) must be a multiple of --heads (%d)"):format(opts["d-model"], opts.heads))
end
opts["batch-size"] = opts["batch-size"] or (opts.model == "gpt" and 16 or 256)
opts.lr = opts.lr or (opts.model == "gpt" and 3e-3 or 1e-3)
if not (opts.lr > 0) then fail(("--lr must be > 0, got %g (no run would learn)"):format(opts.lr)) end   -- as the training scripts
opts.out = opts.out or (opts.model == "gpt" and "build/compare_recipes_gpt.csv" or "build/compare_recipes.csv")
require("fp8.args").out_dir(opts.out)   -- made now: files go there during training

local chosen = RECIPES
if opts.only then
  chosen = {}
  local by = {}
  for _, r in ipairs(RECIPES) do by[r[1]] = r end
  local seen = {}
  for name in opts.only:gmatch("[^,]+") do
    if not by[name] then fail(("--only: unknown recipe '%s' (valid: %s)"):format(name, table.concat(names, ", "))) end
    if seen[name] then fail(("--only: '%s' is listed twice (each recipe runs once)"):format(name)) end
    seen[name] = true
    chosen[#chosen + 1] = by[name]
  end
  if #chosen == 0 then fail(("--only: expected a comma-separated list of recipes (valid: %s), got '%s'"):format(
    table.concat(names, ", "), opts.only)) end
end

if opts["fp8-stats"] then   -- (it logs the FP8 layers of fp8 recipes: with none chosen it would log nothing)
  local any = false
  for _, r in ipairs(chosen) do any = any or r[2] == "fp8" end
  if not any then fail("--fp8-stats logs the FP8 layers of the fp8 recipes, and --only chose none") end
end

if opts.model == "gpt" then
  -- The GPT comparison lives in its own file (same recipes, same options table).
  local dir = (arg and arg[0] or "scripts/compare_recipes.lua"):match("^(.*)/[^/]*$") or "."   -- run from scripts/ too
  return dofile(dir .. "/compare_recipes_gpt.lua")(opts, chosen)
end

local limit = opts.limit > 0 and opts.limit or nil
local train_ds = data.FashionMNIST{root = opts.root, train = true, normalize = true, limit = limit}
local test_ds = data.FashionMNIST{root = opts.root, train = false, normalize = true,
                                  limit = limit and math.max(1, limit // 6) or nil}

local function accuracy(model)
  local hits, n = 0, 0
  model:eval()
  fp8.no_grad(function()
    for x, y in data.DataLoader{test_ds, batch_size = 1000, device = model:device()} do
      local rows, labels = model(x):totable(), y:totable()
      for i, r in ipairs(rows) do
        local best = 1
        for c = 2, #r do if r[c] > r[best] then best = c end end
        if best - 1 == labels[i] then hits = hits + 1 end
      end
      n = n + #rows
    end
  end)
  model:train()
  return hits / n
end

-- Bytes of tensor storage on a device ("cpu" or "cuda"), after a full collection.
local function live_bytes(dev)
  collectgarbage("collect"); collectgarbage("collect")
  return (R.bytes(dev))
end

local function run(recipe)
  local name, mp, handler = recipe[1], recipe[2], recipe[3]
  fp8.manual_seed(opts.seed)
  local acc = fp8.Accelerator{ mixed_precision = mp, kwargs_handlers = handler and { handler() } or {} }
  local dev = acc:device()
  local base = live_bytes(dev)
  local model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
  local nparams = model:num_parameters()
  local opt = optim.AdamW(model:parameters(), { lr = opts.lr })
  local loader = data.DataLoader{ train_ds, batch_size = opts["batch-size"], shuffle = true, seed = opts.seed }
  model, opt, loader = acc:prepare(model, opt, loader)
  local sched = optim.lr_scheduler.CosineAnnealingLR(opt, { T_max = opts.epochs * #loader })
  local curve, steps, train_time, last = {}, 0, 0, 0
  R.reset_peak(dev)
  local peak_base = (R.bytes(dev))
  for _ = 1, opts.epochs do
    local sum, count = 0, 0
    local t0 = data.clock()
    for x, y in loader do
      local loss = F.cross_entropy(model(x), y)
      opt:zero_grad()
      acc:backward(loss)
      opt:step()
      sched:step()
      steps = steps + 1
      local l = loss:item()
      sum, count = sum + l, count + 1
      curve[#curve + 1] = l
    end
    train_time = train_time + data.clock() - t0
    last = sum / count
  end
  local _, peak = R.bytes(dev)
  -- Training state: one more step (gradients kept), then everything but the model, its gradients,
  -- the optimizer and the recipe state dropped; what the allocator still holds above the baseline.
  local function one_step()
    local x, y = train_ds:get(1)
    x, y = x:view(1, 784):to(dev), fp8.tensor({ y }):to(dev)
    opt:zero_grad()
    acc:backward(F.cross_entropy(model(x), y))
    opt:step()
  end
  one_step()
  local state_bytes = live_bytes(dev) - base
  return { name = name, acc = accuracy(model), loss = last, ms = train_time / steps * 1000,
           peak_mib = (peak - peak_base) / 2 ^ 20, bpp = state_bytes / nparams, curve = curve,
           fp8_layers = #acc._fp8_layers }
end

print(("Fashion-MNIST MLP 784-512-256-10, %d train / %d test images, %d epochs, batch %d, seed %d")
  :format(#train_ds, #test_ds, opts.epochs, opts["batch-size"], opts.seed))
local results = {}
for _, r in ipairs(chosen) do
  io.write(("  %-18s ... "):format(r[1])); io.flush()
  local res = run(r)
  results[#results + 1] = res
  print(("test_acc=%.2f%%  loss=%.4f  %.2f ms/step"):format(res.acc * 100, res.loss, res.ms))
end

local ref = results[1]
print()
print(("%-18s %6s %10s %8s %10s %12s %12s %10s"):format("recipe", "FP8", "test acc", "vs " .. ref.name, "loss",
  "ms / step", "peak MiB", "B / param"))
for _, r in ipairs(results) do
  print(("%-18s %6d %9.2f%% %+8.2f %10.4f %12.2f %12.1f %10.2f"):format(r.name, r.fp8_layers, r.acc * 100,
    (r.acc - ref.acc) * 100, r.loss, r.ms, r.peak_mib, r.bpp))
end

-- Loss curves: one column per recipe.
local hdr = { "step" }
for _, r in ipairs(results) do hdr[#hdr + 1] = r.name end
local lines = { table.concat(hdr, ",") }
for i = 1, #results[1].curve do
  local row = { tostring(i) }
  for _, r in ipairs(results) do row[#row + 1] = ("%.6f"):format(r.curve[i] or 0 / 0) end
  lines[#lines + 1] = table.concat(row, ",")
end
require("fp8._fileio").write_atomic(opts.out, table.concat(lines, "\n") .. "\n")   -- temp, fsync, rename, fsync dir
print("loss curves: " .. opts.out)
-- One line per recipe (fp8.plot: without gnuplot one notice, and the CSV stays).
local series = {}
for i, r in ipairs(results) do series[i] = { x = 1, y = i + 1, title = r.name } end
local png = require("fp8.plot").lines{csv = opts.out, png = opts.out:gsub("%.csv$", "") .. ".png",
  title = "Fashion-MNIST MLP: training loss per recipe", xlabel = "step", ylabel = "training loss (log scale)",
  logy = true, series = series}
if png then print("loss plot: " .. png) end
