-- compare_recipes_gpt.lua — `scripts/compare_recipes.lua --model gpt`: the char GPT (fp8.nn.GPT) trained
-- under every precision recipe from the same seed, with the same batches in the same order, through the
-- Accelerator; one table (final validation loss, relative gap to bf16, tokens/s, peak allocator memory,
-- bytes of training state per parameter), and as files: the per-step training losses (<out>), the
-- validation losses every --eval-every steps (<out>-val.csv), one row per recipe (<out>-summary.csv) and a
-- PNG of the curves. scripts/fidelity_gpt.sh runs it once per recipe and seed and gathers the files.
-- Returns a function(opts, recipes) that compare_recipes.lua calls.
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local fp8 = fp8 or require "fp8"
local nn, optim, data = fp8.nn, fp8.optim, fp8.data
local R = require "fp8._memory"   -- allocator counters
local write_atomic = require("fp8._fileio").write_atomic

local function default_text()
  local cp = require "fp8._checkpoint"
  if cp.is_dir(data.FORTUNES_DIR) then return data.FORTUNES_DIR end
  fail(("--model gpt: no text: %s is missing (apt-get install fortunes) — or pass --text FILE"):format(
    data.FORTUNES_DIR))
end

local function live_bytes(dev)
  collectgarbage("collect"); collectgarbage("collect")
  return (R.bytes(dev))
end

local function stem(path) return (path:gsub("%.csv$", "")) end

-- Run as a script (it has no options of its own): say what to run instead.
if arg and arg[0] and arg[0]:match("compare_recipes_gpt%.lua$") then
  fail("compare_recipes_gpt.lua is run by compare_recipes.lua: fp8lab scripts/compare_recipes.lua --model gpt "
    .. "[options] (--help lists them)")
end

return function(opts, recipes)
  local path = opts.text or default_text()
  local T, B = opts["block-size"], opts["batch-size"]
  local train_ds = data.TextDataset{path = path, block_size = T, split = "train"}
  local val_ds = data.TextDataset{path = path, block_size = T, split = "val"}
  -- The validation set is fixed: evenly spaced non-overlapping windows of the validation split, the same
  -- batches for every recipe and seed. The curve's points use every 8th of them (cheaper, same spread).
  local nwin = opts["eval-windows"] > 0 and opts["eval-windows"] or nil
  local val_final = val_ds:blocks(nwin)
  local val_curve = val_ds:blocks(math.max(1, #val_final // 8))
  local lr = opts.lr
  -- tokens/s leaves out the first steps, which create the GEMM primitives and caches
  local warm = opts.steps > 4 and 2 or 0
  local base_out = stem(opts.out)
  require("fp8.args").out_dir(opts.out)   -- checked now, not after every recipe has trained

  local function val_loss(model, loader) return model:evaluate(loader) end

  local function run(recipe)
    local name, mp, handler = recipe[1], recipe[2], recipe[3]
    fp8.manual_seed(opts.seed)
    local acc = fp8.Accelerator{mixed_precision = mp, kwargs_handlers = handler and { handler() } or {}}
    local dev = acc:device()
    local loader = data.DataLoader{train_ds, batch_size = B, shuffle = true, drop_last = true, seed = opts.seed}
    local vfinal = data.DataLoader{val_final, batch_size = B, device = dev}
    local vcurve = data.DataLoader{val_curve, batch_size = B, device = dev}
    local base = live_bytes(dev)
    local model = nn.GPT{vocab_size = train_ds.vocab_size, block_size = T, n_layer = opts.layers, n_head = opts.heads,
                         n_embd = opts["d-model"]}
    local nparams = model:num_parameters()
    -- weight decay on every parameter, as scripts/train_char_gpt.lua (docs/recipes.md, "Budget")
    local opt = optim.AdamW(model:parameters(), {lr = lr, weight_decay = 0.1, betas = {0.9, 0.95}})
    local N = acc.num_processes   -- a prepared scheduler takes N steps per optimizer step (Accelerate's rule)
    local sched = optim.lr_scheduler.warmup_cosine(opt, {warmup_steps = math.max(1, opts.steps // 20) * N,
      total_steps = opts.steps * N, min_lr = lr / 10})
    model, opt, loader, sched = acc:prepare(model, opt, loader, sched)
    local stats_csv
    if opts["fp8-stats"] and #acc._fp8_layers > 0 then
      stats_csv = ("%s-%s-fp8stats.csv"):format(base_out, name)
      os.remove(stats_csv)      -- the log appends: start it afresh
      acc:log_fp8_stats{every = opts["eval-every"], path = stats_csv}
    end
    R.reset_peak(dev)
    local peak_base = (R.bytes(dev))
    local curve, vcurve_pts, it, t_train, timed = {}, {}, nil, 0, 0
    for s = 1, opts.steps do
      local x, y
      if it then x, y = it() end
      if x == nil then it = loader:iter(); x, y = it() end
      local t0 = data.clock()
      local _, loss = model(x, y)
      opt:zero_grad()
      acc:backward(loss)
      acc:clip_grad_norm_(model:parameters(), 1.0)
      opt:step(); sched:step()
      curve[s] = loss:item()
      if s > warm then t_train, timed = t_train + data.clock() - t0, timed + 1 end
      if s % opts["eval-every"] == 0 and s < opts.steps then vcurve_pts[#vcurve_pts + 1] = { s, val_loss(model, vcurve) } end
    end
    local _, peak = R.bytes(dev)
    -- gradients of the last step are still held: weights + gradients + optimizer + recipe state
    local state_bytes = live_bytes(dev) - base
    local val = val_loss(model, vfinal)
    vcurve_pts[#vcurve_pts + 1] = { opts.steps, val }
    local tail, nt = 0, 0
    for s = math.max(1, opts.steps - 99), opts.steps do tail, nt = tail + curve[s], nt + 1 end
    return { name = name, val = val, train = tail / nt, tok_s = timed > 0 and timed * B * T / t_train or 0 / 0,
             peak_mib = (peak - peak_base) / 2 ^ 20, bpp = state_bytes / nparams, curve = curve, vcurve = vcurve_pts,
             fp8_layers = #acc._fp8_layers, nparams = nparams, stats_csv = stats_csv }
  end

  print(("char GPT on %s (%d train / %d val characters, vocab %d): %d layers, %d heads, d_model %d, context %d, "
    .. "batch %d, %d steps per recipe, AdamW lr %g (warmup + cosine), seed %d, same batches for every recipe; "
    .. "val loss over %d windows (%d characters)"):format(path, train_ds.tokens:size(1), val_ds.tokens:size(1),
    train_ds.vocab_size, opts.layers, opts.heads, opts["d-model"], T, B, opts.steps, lr, opts.seed, #val_final,
    #val_final * T))
  local results, ref = {}, nil
  for _, r in ipairs(recipes) do
    io.write(("  %-16s ... "):format(r[1])); io.flush()
    local res = run(r)
    results[#results + 1] = res
    if r[1] == "bf16" then ref = res end
    print(("val_loss=%.4f  %.0f tokens/s"):format(res.val, res.tok_s))
  end
  ref = ref or results[1]
  print()
  print(("%-16s %6s %10s %10s %10s %12s %10s %10s"):format("recipe", "FP8", "val loss", "vs " .. ref.name, "train loss",
    "tokens / s", "peak MiB", "B / param"))
  for _, r in ipairs(results) do
    print(("%-16s %6d %10.4f %+9.2f%% %10.4f %12.0f %10.1f %10.2f"):format(r.name, r.fp8_layers, r.val,
      100 * (r.val - ref.val) / ref.val, r.train, r.tok_s, r.peak_mib, r.bpp))
  end
  print(("(%d parameters; val loss: mean over %d validation windows after the last step, in eval mode; "
    .. "vs: relative gap; train loss: mean of the last %d steps)"):format(results[1].nparams, #val_final,
    math.min(100, opts.steps)))

  local hdr = { "step" }
  for _, r in ipairs(results) do hdr[#hdr + 1] = r.name end
  local lines = { table.concat(hdr, ",") }
  for i = 1, opts.steps do
    local row = { tostring(i) }
    for _, r in ipairs(results) do row[#row + 1] = ("%.6f"):format(r.curve[i]) end
    lines[#lines + 1] = table.concat(row, ",")
  end
  write_atomic(opts.out, table.concat(lines, "\n") .. "\n")
  print("loss curves: " .. opts.out)
  lines = { table.concat(hdr, ",") }
  for i = 1, #results[1].vcurve do
    local row = { tostring(results[1].vcurve[i][1]) }
    for _, r in ipairs(results) do row[#row + 1] = ("%.6f"):format(r.vcurve[i][2]) end
    lines[#lines + 1] = table.concat(row, ",")
  end
  write_atomic(base_out .. "-val.csv", table.concat(lines, "\n") .. "\n")
  print("validation curves: " .. base_out .. "-val.csv")
  lines = { "recipe,seed,steps,layers,d_model,heads,context,batch,lr,val_loss,train_loss,tokens_per_s,peak_mib,"
    .. "bytes_per_param,fp8_layers,params,val_windows,date,text" }
  local date = os.date("!%Y-%m-%d %H:%M UTC")
  for _, r in ipairs(results) do
    lines[#lines + 1] = ("%s,%d,%d,%d,%d,%d,%d,%d,%g,%.6f,%.6f,%.1f,%.2f,%.3f,%d,%d,%d,%s,%s"):format(r.name, opts.seed,
      opts.steps, opts.layers, opts["d-model"], opts.heads, T, B, lr, r.val, r.train, r.tok_s, r.peak_mib, r.bpp,
      r.fp8_layers, r.nparams, #val_final, date, (path:gsub(",", "_")))
  end
  write_atomic(base_out .. "-summary.csv", table.concat(lines, "\n") .. "\n")
  print("summary: " .. base_out .. "-summary.csv")
  for _, r in ipairs(results) do if r.stats_csv then print(("fp8.stats of %s: %s"):format(r.name, r.stats_csv)) end end
  local series = {}
  for i, r in ipairs(results) do series[i] = { x = 1, y = i + 1, title = r.name } end
  local png = require("fp8.plot").lines{csv = opts.out, png = base_out .. ".png",
    title = "char GPT: training loss per recipe (same seed and batches)", xlabel = "step",
    ylabel = "training loss", series = series}
  if png then print("loss plot: " .. png) end
end
