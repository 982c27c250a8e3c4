-- fidelity_report.lua — the table of issue 16's fidelity study from the files scripts/fidelity_gpt.sh leaves in
-- its --dir (per run: <recipe>-s<seed>-summary.csv, -val.csv, .csv, -fp8stats.csv): bf16's seed-to-seed
-- spread of the final validation loss, every other recipe's gap to bf16 at the same seed against the bar
-- max(spread, 0.5% of bf16), the FP8 health of each recipe's last logged step, and PNGs of the curves.
-- With --doc FILE the "## Fidelity on the char GPT" section of FILE is replaced (or appended), atomically.
-- Run: build/fp8lab scripts/fidelity_report.lua --dir build/fidelity [--doc docs/recipes.md] (--help)
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local fp8 = fp8 or require "fp8"
local cp = require "fp8._checkpoint"
local write_atomic = require("fp8._fileio").write_atomic

local opts = require("fp8.args").parse(arg or {}, {
  { "dir", "str", "build/fidelity", "directory of the runs (scripts/fidelity_gpt.sh --out)" },
  { "doc", "str", "", "markdown file whose fidelity section to write (empty: print only)" },
  { "command", "str", "scripts/fidelity_gpt.sh", "the command to name in the doc" },
  { "rel-bar", "num", 0.005, "the relative bar: a gap within max(bf16 spread, rel-bar x bf16) passes", 0 },
}, { usage = "usage: fp8lab scripts/fidelity_report.lua [options]",
     about = "Tabulates the fidelity study of scripts/fidelity_gpt.sh. Options:" })

local ORDER = { "fp32", "te-hybrid", "te-e4m3", "ao-tensorwise", "ao-rowwise", "ao-rowwise_gw_hp", "msamp-O1", "msamp-O2",
                "msamp-O3" }
local SECTION = "## Fidelity on the char GPT"
local dir = opts.dir:gsub("(.)/+$", "%1")   -- ("/" stays "/")
if opts.doc ~= "" then   -- checked now, not after the tables and plots are made
  if cp.exists(opts.doc) and not cp.is_file(opts.doc) then fail(("--doc %s: not a file"):format(opts.doc)) end
  local ddir = opts.doc:match("^(.*)/[^/]*$") or "."
  if not cp.is_dir(ddir) then fail(("--doc %s: its directory %s does not exist"):format(opts.doc, ddir)) end
end
local names, err = cp.listdir(dir)
if not names then fail("--dir: " .. tostring(err)) end

local function read_csv(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local hdr, rows = nil, {}
  for line in f:lines() do
    local cells = {}
    for c in (line .. ","):gmatch("([^,]*),") do cells[#cells + 1] = c end
    if not hdr then hdr = cells
    else
      local r = {}
      for i, h in ipairs(hdr) do r[h] = tonumber(cells[i]) or cells[i] end
      rows[#rows + 1] = r
    end
  end
  f:close()
  return rows, hdr
end

-- runs[name][seed] = summary row (+ stem of its files)
local runs, count = {}, 0
for _, n in ipairs(names) do
  local st = n:match("^(.+)%-summary%.csv$")
  if st then
    local rows = read_csv(dir .. "/" .. n)
    for _, r in ipairs(rows or {}) do
      r.stem = dir .. "/" .. st
      runs[r.recipe] = runs[r.recipe] or {}
      runs[r.recipe][r.seed] = r
      count = count + 1
    end
  end
end
if count == 0 then fail(("no *-summary.csv in %s (run scripts/fidelity_gpt.sh first)"):format(dir)) end
local bf = runs.bf16 or {}
local ref = bf[1]
if not ref then fail(("%s has no bf16 run at seed 1, the reference of every gap"):format(dir)) end
local seeds = {}
for s in pairs(bf) do seeds[#seeds + 1] = s end
table.sort(seeds)
local lo, hi, sum = math.huge, -math.huge, 0
for _, s in ipairs(seeds) do
  local v = bf[s].val_loss
  lo, hi, sum = math.min(lo, v), math.max(hi, v), sum + v
end
local spread = hi - lo
local bar = math.max(spread, opts["rel-bar"] * ref.val_loss)
-- every run must share the budget of the reference
for name, by in pairs(runs) do
  for s, r in pairs(by) do
    for _, k in ipairs { "steps", "layers", "d_model", "heads", "context", "batch", "lr", "val_windows", "text" } do
      if r[k] ~= ref[k] then
        fail(("%s seed %d has %s=%s but bf16 seed 1 has %s (mixed budgets in %s)"):format(name, s, k, tostring(r[k]),
          tostring(ref[k]), dir))
      end
    end
  end
end

-- FP8 health at the last logged step: per role, the largest underflow and saturated fractions over the layers.
local function health(r)
  local rows = read_csv(("%s-%s-fp8stats.csv"):format(r.stem, r.recipe))   -- as compare_recipes_gpt names it
  if not rows or #rows == 0 then return nil end
  local last = 0
  for _, r in ipairs(rows) do last = math.max(last, r.step) end
  local h = {}
  for _, r in ipairs(rows) do
    if r.step == last then
      local x = h[r.role] or { uf = -1, sat = -1, smin = math.huge, smax = -math.huge }
      if r.underflow_frac > x.uf then x.uf, x.uf_layer = r.underflow_frac, r.layer end
      if r.saturated_frac > x.sat then x.sat, x.sat_layer = r.saturated_frac, r.layer end
      if type(r.scale) == "number" then   -- empty for a rowwise role (no single scale)
        x.smin, x.smax = math.min(x.smin, r.scale), math.max(x.smax, r.scale)
      end
      x.format = r.format
      h[r.role] = x
    end
  end
  h.step = last
  return h
end

local dates = {}
local function note_date(r) dates[#dates + 1] = r.date end
local lines = {}
local function out(s) lines[#lines + 1] = s end
local machine = io.popen("lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1"):read("l") or "unknown CPU"

-- compare_recipes_gpt.lua's train_loss is the mean of the last min(100, steps) steps
out(("| run | FP8 layers | final val loss | gap to bf16 (seed 1) | relative | within the bar "
  .. "| train loss (last %d steps) | tokens/s | B / param |"):format(math.min(100, ref.steps)))
out("|---|---|---|---|---|---|---|---|---|")
for _, s in ipairs(seeds) do
  local r = bf[s]
  note_date(r)
  out(("| bf16, seed %d | 0 | %.4f | %+.4f | %+.2f%% | (reference) | %.4f | %.0f | %.2f |"):format(s, r.val_loss,
    r.val_loss - ref.val_loss, 100 * (r.val_loss - ref.val_loss) / ref.val_loss, r.train_loss, r.tokens_per_s,
    r.bytes_per_param))
end
local results, fails, missing = {}, {}, {}
for _, name in ipairs(ORDER) do
  local r = runs[name] and runs[name][1]
  if not r then
    if name ~= "fp32" then missing[#missing + 1] = name end   -- fp32 is a reference row, not part of the bar
  else
    note_date(r)
    local gap = r.val_loss - ref.val_loss
    local ok = math.abs(gap) <= bar
    if not ok and name ~= "fp32" then fails[#fails + 1] = name .. (runs[name][2] and " (seed 1)" or "") end
    results[#results + 1] = { name = name, r = r, gap = gap, ok = ok }
    out(("| %s | %d | %.4f | %+.4f | %+.2f%% | %s | %.4f | %.0f | %.2f |"):format(name, r.fp8_layers, r.val_loss, gap,
      100 * gap / ref.val_loss, ok and "yes" or "**no**", r.train_loss, r.tokens_per_s, r.bytes_per_param))
    -- the same recipe at bf16's other seeds: each gap to bf16 at that seed
    local gsum, gn = gap, 1
    for _, s in ipairs(seeds) do
      local rs = s ~= 1 and runs[name][s]
      if rs then
        note_date(rs)
        local g = rs.val_loss - bf[s].val_loss
        gsum, gn = gsum + g, gn + 1
        if math.abs(g) > bar and name ~= "fp32" then fails[#fails + 1] = ("%s (seed %d)"):format(name, s) end
        out(("| %s, seed %d | %d | %.4f | %+.4f (to bf16 seed %d) | %+.2f%% | %s | %.4f | %.0f | %.2f |"):format(name, s,
          rs.fp8_layers, rs.val_loss, g, s, 100 * g / bf[s].val_loss, math.abs(g) <= bar and "yes" or "**no**",
          rs.train_loss, rs.tokens_per_s, rs.bytes_per_param))
      end
    end
    if gn > 1 then
      results[#results].mean_gap = gsum / gn
      results[#results].nseeds = gn
    end
  end
end
local table_md = table.concat(lines, "\n")
local seed_notes = {}
for _, x in ipairs(results) do
  if x.mean_gap then
    seed_notes[#seed_notes + 1] = ("%s's mean gap over %d seeds is %+.4f (%+.2f%%)"):format(x.name, x.nseeds, x.mean_gap,
      100 * x.mean_gap / ref.val_loss)
  end
end
lines = {}
out("| recipe | role | format | largest underflow (layer) | largest saturated (layer) | scales |")
out("|---|---|---|---|---|---|")
local hstep
local maxsat = { f = 0 }   -- the largest saturated fraction in the health table, and where
-- whether the table shows what the GELU note below explains: an input role whose largest underflow (1% or more) is
-- in an mlp.2, and a grad role whose largest one is in an mlp.0
local gelu_in, gelu_grad = false, false
for _, x in ipairs(results) do
  local h = health(x.r)
  if h then
    hstep = h.step
    for _, role in ipairs { "input", "weight", "grad" } do
      local v = h[role]
      if v and x.name == "msamp-O3" and role == "weight" then
        -- O3's E4M3 weight is cast by the optimizer step (lua/fp8/accelerator.lua), not by the recipe's weight role
        out(("| %s | %s | %s | — | — | not logged: O3 casts its E4M3 weight in the optimizer step, which fp8.stats "
          .. "does not see |"):format(x.name, role, v.format))
      elseif v then
        local function at(f, layer) return f > 0 and (" (%s)"):format(layer) or "" end
        -- rowwise scales are one per row, made at each cast: the role's single scale stays 1
        local scales = x.name:match("rowwise") and "per row (not logged)" or ("%.3g … %.3g"):format(v.smin, v.smax)
        if v.sat > maxsat.f then maxsat = { f = v.sat, what = ("%s %s, %s"):format(x.name, role, v.sat_layer) } end
        if v.uf >= 0.01 and role == "input" and v.uf_layer:match("mlp%.2$") then gelu_in = true end
        if v.uf >= 0.01 and role == "grad" and v.uf_layer:match("mlp%.0$") then gelu_grad = true end
        out(("| %s | %s | %s | %.4f%%%s | %.4f%%%s | %s |"):format(x.name, role, v.format, 100 * v.uf,
          at(v.uf, v.uf_layer), 100 * v.sat, at(v.sat, v.sat_layer), scales))
      end
    end
  end
end
local health_md = #lines > 2 and table.concat(lines, "\n") or nil
table.sort(dates)

-- Curves: validation loss of every run (and the smoothed training loss), one column per run.
local cols, vals, trains = {}, {}, {}
local function add_run(label, r)
  local v = read_csv(r.stem .. "-val.csv")
  local t = read_csv(r.stem .. ".csv")
  if v and t then cols[#cols + 1] = label; vals[#vals + 1] = { v, r.recipe }; trains[#trains + 1] = { t, r.recipe } end
end
for _, s in ipairs(seeds) do add_run(("bf16-s%d"):format(s), bf[s]) end
for _, x in ipairs(results) do add_run(x.name, x.r) end
local pngs = {}
if #cols > 0 then
  local steps = ref.steps
  -- the plots start at a tenth of the run (the first steps' losses would flatten the rest), unless that
  -- leaves fewer than two points
  local function from(first_steps)
    local n = 0
    for _, st in ipairs(first_steps) do if st >= steps / 10 then n = n + 1 end end
    return n >= 2 and steps / 10 or -math.huge
  end
  local vsteps = {}
  for i, r in ipairs(vals[1][1]) do vsteps[i] = r.step end
  local vfrom = from(vsteps)
  local vl, gl = { "step," .. table.concat(cols, ",") }, { "step," .. table.concat(cols, ",") }
  for i = 1, #vals[1][1] do
    if vsteps[i] >= vfrom then
      local row, grow = { tostring(vsteps[i]) }, { tostring(vsteps[i]) }
      local base = vals[1][1][i] and vals[1][1][i][vals[1][2]]    -- bf16 seed 1 (the first column)
      for _, v in ipairs(vals) do
        local x = v[1][i] and v[1][i][v[2]]
        row[#row + 1] = type(x) == "number" and ("%.6f"):format(x) or ""
        grow[#grow + 1] = type(x) == "number" and type(base) == "number" and ("%.6f"):format(x - base) or ""
      end
      vl[#vl + 1] = table.concat(row, ",")
      gl[#gl + 1] = table.concat(grow, ",")
    end
  end
  local vcsv, gcsv = dir .. "/fidelity_val.csv", dir .. "/fidelity_gap.csv"
  write_atomic(vcsv, table.concat(vl, "\n") .. "\n")
  write_atomic(gcsv, table.concat(gl, "\n") .. "\n")
  -- training loss: means over windows of a 40th of the run
  local W = math.max(1, steps // 40)
  local ends = {}
  for e = W, steps, W do ends[#ends + 1] = e end
  local tfrom = from(ends)
  local tl = { "step," .. table.concat(cols, ",") }
  for _, e in ipairs(ends) do
    if e >= tfrom then
      local row = { tostring(e) }
      for _, t in ipairs(trains) do
        local sum, n = 0, 0
        for i = e - W + 1, e do
          local x = t[1][i] and t[1][i][t[2]]
          if type(x) == "number" then sum, n = sum + x, n + 1 end
        end
        row[#row + 1] = n > 0 and ("%.6f"):format(sum / n) or ""
      end
      tl[#tl + 1] = table.concat(row, ",")
    end
  end
  local tcsv = dir .. "/fidelity_train.csv"
  write_atomic(tcsv, table.concat(tl, "\n") .. "\n")
  local series = {}
  for i, c in ipairs(cols) do series[i] = { x = 1, y = i + 1, title = c } end
  local plot = require "fp8.plot"
  local every = vsteps[2] and (vsteps[2] - vsteps[1]) or steps
  pngs.val = plot.lines{csv = vcsv, png = dir .. "/fidelity_val.png", series = series, xlabel = "step",
    ylabel = "validation loss (nats / character)",
    title = ("char GPT on Debian's fortunes: validation loss every %d steps, every run"):format(every)}
  pngs.gap = plot.lines{csv = gcsv, png = dir .. "/fidelity_gap.png", series = series, xlabel = "step",
    ylabel = "validation loss minus bf16 seed 1's",
    title = "char GPT: each run's validation loss minus bf16 seed 1's (bf16-s2, -s3: the seed-to-seed band)"}
  pngs.train = plot.lines{csv = tcsv, png = dir .. "/fidelity_train.png", series = series, xlabel = "step",
    ylabel = "training loss (nats / character)",
    title = ("char GPT on Debian's fortunes: training loss (mean of %d steps), every run"):format(W)}
end

local spread_s = {}
for _, s in ipairs(seeds) do spread_s[#spread_s + 1] = ("%.4f (seed %d)"):format(bf[s].val_loss, s) end
local fp8_names = {}
for _, x in ipairs(results) do if x.name ~= "fp32" then fp8_names[#fp8_names + 1] = x.name end end
local verdict
if #missing > 0 then
  verdict = ("**Incomplete**: no run yet of %s."):format(table.concat(missing, ", "))
elseif #fails == 0 then
  verdict = ("**Every FP8 recipe is within the bar** (%d of %d)."):format(#fp8_names, #fp8_names)
else
  verdict = ("**Outside the bar: %s.**"):format(table.concat(fails, ", "))
end
local B, T = ref.batch, ref.context
local corpus = cp.is_dir(ref.text) and ("every text file of %s`%s`, the first 90%% of each file for training "
  .. "and its last 10%% for validation"):format(ref.text:gsub("/+$", "") == fp8.data.FORTUNES_DIR
  and "Debian's `fortunes` package, " or "", ref.text)
  or ("`%s`, its first 90%% for training and its last 10%% for validation"):format(ref.text)
local train_chars = fp8.data.TextDataset{path = ref.text, block_size = T, split = "train"}.tokens:size(1)
local body = {
  SECTION, "",
  ("Issue 16's first bar: at a budget that fits this CI-sized machine, every FP8 recipe's final validation loss "
    .. "within bf16's seed-to-seed spread, or within %.1f%% relative, whichever is larger."):format(100 * opts["rel-bar"]),
  "",
  ("Measured %s to %s on %s, one thread per run, with `%s` (`scripts/compare_recipes.lua --model gpt --only R "
    .. "--seed S` per run; tables by `scripts/fidelity_report.lua`)."):format(dates[1], dates[#dates], machine,
    opts.command),
  "",
  ("**Budget**: the char GPT (`fp8.nn.GPT`), layers %d, d_model %d, %d heads, context %d (%d parameters), "
    .. "batch %d × %d = %d tokens per step, %d steps (%.1f M tokens, %.1f passes over the %.2f M training "
    .. "characters), AdamW lr %g (warmup %d steps, cosine to lr/10), weight decay 0.1, betas (0.9, 0.95), gradient "
    .. "clipping at 1. Corpus: %s. **Final val loss**: mean cross-entropy (nats per character) "
    .. "over %d non-overlapping %d-character windows evenly spread over the validation split, in eval mode (FP8 "
    .. "layers then run their high-precision forward, as TE's default `use_autocast_during_eval=false`)."):format(
    ref.layers, ref.d_model, ref.heads, T, ref.params, B, T, B * T, ref.steps, B * T * ref.steps / 1e6,
    B * T * ref.steps / train_chars, train_chars / 1e6, ref.lr, math.max(1, ref.steps // 20),
    corpus, ref.val_windows, T),
  "",
  ("**bf16's spread**: %s; max − min = %.4f (%.2f%% of seed 1). **Bar**: |gap| ≤ max(%.4f, %.1f%% × %.4f) = **%.4f**. "
    .. "Every other run uses seed 1, so its weights start from the same values and it sees the same batches in "
    .. "the same order as bf16's seed 1; its gap is to that run."):format(table.concat(spread_s, ", "), spread,
    100 * spread / ref.val_loss, spread, 100 * opts["rel-bar"], ref.val_loss, bar),
  "",
  table_md,
  "",
  verdict .. (#seed_notes > 0 and (" " .. table.concat(seed_notes, "; ") .. ".") or "") .. " tokens/s: training steps only, one thread on a shared machine (other jobs ran beside it), so "
    .. "they are indicative; B / param: the allocator's bytes of weights, gradients, optimizer and recipe state "
    .. "per parameter.",
}
if health_md then
  body[#body + 1] = ""
  body[#body + 1] = ("FP8 health at step %d (`fp8.stats`, logged by `--fp8-stats`): per recipe and tensor role, the "
    .. "largest fraction of a layer's values that flushed to zero or saturated in the last cast, and the range "
    .. "of the scales over the layers. Per layer and over training: `%s/<recipe>-s1-<recipe>-fp8stats.csv`."):format(
    hstep or 0, dir)
  body[#body + 1] = ""
  body[#body + 1] = health_md
  body[#body + 1] = ""
  body[#body + 1] = "How to read it: underflow counts nonzero values that became zero. "
    .. (gelu_in and ("The input of `mlp.2` (the second MLP "
    .. "linear) is GELU's output, whose negative side is a long tail of values of order 1e-5 and smaller: below half "
    .. "the smallest E4M3 subnormal once scaled (2^-10 / scale, about 4e-6 at a scale of 250), so a large fraction "
    .. "of them flush while carrying almost none of the product's magnitude. " .. (gelu_grad and ("The output "
    .. "gradient of `mlp.0` (the first MLP linear) is the gradient above it times GELU's derivative, near zero on "
    .. "that same tail, so it flushes there for the same reason. ") or "")) or "")
    .. (maxsat.f > 0 and ("Saturation is at most %.4f%% (%s)."):format(100 * maxsat.f, maxsat.what)
      or "Nothing saturated.")
end
if pngs.val and opts.doc ~= "" then
  local docdir = (opts.doc:match("^(.*)/[^/]*$") or ".") .. "/img"
  cp.mkdir(docdir)
  for _, k in ipairs { "val", "gap", "train" } do
    if pngs[k] then
      local f = assert(io.open(pngs[k], "rb"))
      local data = f:read("a"); f:close()
      write_atomic(("%s/fidelity_gpt_%s.png"):format(docdir, k), data)
    end
  end
  body[#body + 1] = ""
  body[#body + 1] = "![validation loss of every run](img/fidelity_gpt_val.png)"
  body[#body + 1] = "![each run's validation loss minus bf16 seed 1's](img/fidelity_gpt_gap.png)"
  body[#body + 1] = "![training loss of every run](img/fidelity_gpt_train.png)"
end
local text = table.concat(body, "\n")
print(text)

if opts.doc ~= "" then
  local f = io.open(opts.doc, "r")
  local old = f and f:read("a") or ""
  if f then f:close() end
  local new, done, skip = {}, false, false
  for line in (old .. (old:sub(-1) == "\n" and "" or "\n")):gmatch("(.-)\n") do
    if line == SECTION then
      skip = true
      if not done then new[#new + 1] = text; new[#new + 1] = ""; done = true end
    elseif skip and line:match("^## ") then skip = false end
    if not skip then new[#new + 1] = line end
  end
  if not done then new[#new + 1] = ""; new[#new + 1] = text end
  -- no blank lines at the end
  while new[#new] == "" do new[#new] = nil end
  write_atomic(opts.doc, table.concat(new, "\n") .. "\n")
  print(("wrote %s to %s"):format(SECTION, opts.doc))
end
