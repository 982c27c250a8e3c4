-- compare_recipes_gpt.lua — `scripts/compare_recipes.lua --model gpt`: the char GPT (fp8.nn.GPT) trained
-- under every precision recipe from the same seed, with the same batches in the same order, through the
-- Accelerator; one table (final validation loss, relative gap to bf16, tokens/s, peak allocator memory,
-- bytes of training state per parameter) and the per-step losses of every run as CSV and one PNG.
-- Returns a function(opts, recipes) that compare_recipes.lua calls.
local fp8 = fp8 or require "fp8"
local nn, optim, data = fp8.nn, fp8.optim, fp8.data
local R = require "fp8._memory"   -- allocator counters

local function default_text()
  for _, p in ipairs { "/usr/share/games/fortunes/fortunes", "/usr/share/games/fortunes/literature" } do
    local f = io.open(p, "rb")
    if f then f:close(); return p end
  end
  error("--model gpt: no text (install Debian's fortunes or pass --text FILE)", 0)
end

local function live_bytes(dev)
  collectgarbage("collect"); collectgarbage("collect")
  return (R.bytes(dev))
end

return function(opts, recipes)
  local path = opts.text or default_text()
  local T, B = opts["block-size"], opts["batch-size"]
  local train_ds = data.TextDataset{path = path, block_size = T, split = "train"}
  local val_ds = data.TextDataset{path = path, block_size = T, split = "val"}
  local lr = opts.lr
  -- tokens/s leaves out the first steps, which create the GEMM primitives and caches
  local warm = opts.steps > 4 and 2 or 0

  local function run(recipe)
    local name, mp, handler = recipe[1], recipe[2], recipe[3]
    fp8.manual_seed(opts.seed)
    local acc = fp8.Accelerator{mixed_precision = mp, kwargs_handlers = handler and { handler() } or {}}
    local dev = acc:device()
    local loader = data.DataLoader{train_ds, batch_size = B, shuffle = true, drop_last = true, seed = opts.seed}
    local val_loader = data.DataLoader{val_ds, batch_size = B, shuffle = false, drop_last = true}
    local base = live_bytes(dev)
    local model = nn.GPT{vocab_size = train_ds.vocab_size, block_size = T, n_layer = opts.layers, n_head = 4,
                         n_embd = opts["d-model"]}
    local nparams = model:num_parameters()
    local opt = optim.AdamW(model:parameters(), {lr = lr, weight_decay = 0.1, betas = {0.9, 0.95}})
    local sched = optim.lr_scheduler.warmup_cosine(opt, {warmup_steps = math.max(1, opts.steps // 20),
      total_steps = opts.steps, min_lr = lr / 10})
    model, opt, loader, val_loader, sched = acc:prepare(model, opt, loader, val_loader, sched)
    R.reset_peak(dev)
    local peak_base = (R.bytes(dev))
    local curve, it, t_train, timed = {}, nil, 0, 0
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
    end
    local _, peak = R.bytes(dev)
    -- gradients of the last step are still held: weights + gradients + optimizer + recipe state
    local state_bytes = live_bytes(dev) - base
    model:eval()
    local sum, n = 0, 0
    fp8.no_grad(function()
      for x, y in val_loader do
        local _, l = model(x, y)
        sum, n = sum + l:item(), n + 1
        if n >= 16 then break end
      end
    end)
    return { name = name, val = sum / n, tok_s = timed * B * T / t_train, peak_mib = (peak - peak_base) / 2 ^ 20,
             bpp = state_bytes / nparams, curve = curve, fp8_layers = #acc._fp8_layers, nparams = nparams }
  end

  print(("char GPT on %s: %d layers, d_model %d, context %d, batch %d, %d steps per recipe, AdamW lr %g "
    .. "(warmup + cosine), seed %d, same batches for every recipe"):format(path, opts.layers, opts["d-model"], T, B,
    opts.steps, lr, opts.seed))
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
  print(("%-16s %6s %10s %10s %12s %10s %10s"):format("recipe", "FP8", "val loss", "vs " .. ref.name, "tokens / s",
    "peak MiB", "B / param"))
  for _, r in ipairs(results) do
    print(("%-16s %6d %10.4f %+9.2f%% %12.0f %10.1f %10.2f"):format(r.name, r.fp8_layers, r.val,
      100 * (r.val - ref.val) / ref.val, r.tok_s, r.peak_mib, r.bpp))
  end
  print(("(%d parameters; val loss: mean over up to 16 validation batches after the last step; vs: relative gap)")
    :format(results[1].nparams))

  local dir = opts.out:match("^(.*)/[^/]*$")
  if dir and dir ~= "" then os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'") end
  local tmp = opts.out .. ".tmp"
  local f = assert(io.open(tmp, "w"))
  local hdr = { "step" }
  for _, r in ipairs(results) do hdr[#hdr + 1] = r.name end
  f:write(table.concat(hdr, ","), "\n")
  for i = 1, opts.steps do
    local row = { tostring(i) }
    for _, r in ipairs(results) do row[#row + 1] = ("%.6f"):format(r.curve[i]) end
    f:write(table.concat(row, ","), "\n")
  end
  f:flush(); f:close()
  assert(os.rename(tmp, opts.out))
  print("loss curves: " .. opts.out)
  local series = {}
  for i, r in ipairs(results) do series[i] = { x = 1, y = i + 1, title = r.name } end
  local png = require("fp8.plot").lines{csv = opts.out, png = opts.out:gsub("%.csv$", "") .. ".png",
    title = "char GPT: training loss per recipe (same seed and batches)", xlabel = "step",
    ylabel = "training loss", series = series}
  if png then print("loss plot: " .. png) end
end
