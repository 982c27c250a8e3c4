-- common.lua — what the lessons (scripts/lessons/NN_*.lua, docs/concepts.md "Lessons") share: their
-- options, the tiny character GPT on Debian's fortunes (as scripts/train_char_gpt.lua), its real
-- gradients, atomic CSV files and PNG plots through fp8.plot. Loaded by each lesson with dofile.
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local fp8 = fp8 or require "fp8"
local nn, optim, data = fp8.nn, fp8.optim, fp8.data
local C = {}

-- The first readable fortunes database (Debian's `fortunes` package), or the file the user names.
function C.corpus(path)
  if path then return path end
  for _, p in ipairs { "/usr/share/games/fortunes/fortunes", "/usr/share/games/fortunes/literature",
                       "/usr/share/games/fortunes/science", "/usr/share/games/fortunes/art" } do
    local f = io.open(p, "rb")
    if f then
      local ok = f:read(1) ~= nil
      f:close()
      if ok then return p end
    end
  end
  fail("no text to train on: install Debian's fortunes package or pass --text FILE")
end

-- parse(argv, name, about, cfg) -> opts. cfg.size = {option, default, quick, help, min}: the lesson's size option
-- (--steps, or lesson 4's --rows), which --quick shortens; cfg.gpt: the lesson trains the GPT, so it takes --text;
-- cfg.extra: the lesson's own options; cfg.quick_more: --quick does more than set the size (so it may be given with
-- it). Every lesson takes --quick, --seed and --out.
function C.parse(argv, name, about, cfg)
  local size = cfg.size
  local OPTIONS = {
    { "quick", "flag", false, ("short mode for tests: %s %d instead of %d"):format(size[1], size[3], size[2]) },
    { size[1], "int", nil, ("%s (default %d; %d with --quick)"):format(size[4], size[2], size[3]), size[5] },
    { "seed", "int", 1337, "seed of weights and batches", 0 },
    { "out", "str", "build/lessons", "directory for the CSV and PNG" },
  }
  if cfg.gpt then OPTIONS[#OPTIONS + 1] = { "text", "str", nil, "text file for the GPT (default: Debian's fortunes)" } end
  for _, o in ipairs(cfg.extra or {}) do OPTIONS[#OPTIONS + 1] = o end
  local opts = require("fp8.args").parse(argv or {}, OPTIONS, {
    usage = ("usage: fp8lab scripts/lessons/%s.lua [options]"):format(name), about = about .. " Options:",
    default_text = false })
  -- --quick sets the size; given beside it, the size wins and --quick would change nothing (where the lesson's
  -- --quick does no more: lesson 1's also drops runs, cfg.quick_more)
  if opts.quick and opts[size[1]] ~= nil and not cfg.quick_more then
    require("fp8.args").fail(("--quick sets --%s to %d: give --quick or --%s, not both"):format(size[1], size[3],
      size[1]))
  end
  opts[size[1]] = opts[size[1]] or (opts.quick and size[3] or size[2])
  require("fp8.args").out_folder(opts.out)   -- made now ("" wrote into /, a file there failed after the lesson)
  return opts
end

-- The tiny GPT of the lessons: 1 block, d_model 32, 2 heads, context 32, batch 8 — a few ms a step.
-- cfg: layers, heads, d, block, batch, on_data (called once the data is loaded, before the model).
function C.gpt(opts, cfg)
  cfg = cfg or {}
  fp8.manual_seed(opts.seed)
  local path = C.corpus(opts.text)
  local T = cfg.block or 32
  local ds = data.TextDataset{path = path, block_size = T, split = "train"}
  local loader = data.DataLoader{ds, batch_size = cfg.batch or 8, shuffle = true, drop_last = true, seed = opts.seed}
  if cfg.on_data then cfg.on_data() end   -- e.g. an allocator baseline that leaves the data out
  local model = nn.GPT{vocab_size = ds.vocab_size, block_size = T, n_layer = cfg.layers or 1, n_head = cfg.heads or 2,
                       n_embd = cfg.d or 32}
  local it
  local function next_batch()
    local x, y
    if it then x, y = it() end
    if x == nil then it = loader:iter(); x, y = it() end
    return x, y
  end
  return model, next_batch, ds, path
end

-- Runs `steps` AdamW steps; after each backward, transform(name, p) may replace p.grad (a cast).
-- Returns the list of losses.
function C.train(model, next_batch, steps, transform, lr)
  local opt = optim.AdamW(model:parameters(), {lr = lr or 3e-3, weight_decay = 0, betas = {0.9, 0.95}})
  local losses = {}
  for s = 1, steps do
    local x, y = next_batch()
    local _, loss = model(x, y)
    opt:zero_grad()
    loss:backward()
    if transform then
      for _, np in ipairs(model:named_parameters()) do
        if np[2].grad then transform(np[1], np[2]) end
      end
    end
    opt:step()
    losses[s] = loss:item()
  end
  return losses
end

-- The weight gradients of one backward after `warm` training steps (a list of {name, grad}, sorted).
function C.gradients(model, next_batch, warm)
  if warm > 0 then C.train(model, next_batch, warm) end
  local x, y = next_batch()
  local _, loss = model(x, y)
  for _, np in ipairs(model:named_parameters()) do np[2].grad = nil end
  loss:backward()
  local out = {}
  for _, np in ipairs(model:named_parameters()) do
    if np[2].grad and np[2]:dim() == 2 then out[#out + 1] = { np[1], np[2].grad:clone() } end
  end
  return out
end

-- write_csv(path, header list, rows (lists)) — atomically (temporary file, fsync, rename, fsync the directory).
function C.write_csv(path, header, rows)
  local lines = { table.concat(header, ",") }
  for _, r in ipairs(rows) do
    local cells = {}
    for i, v in ipairs(r) do cells[i] = type(v) == "number" and ("%.9g"):format(v) or tostring(v) end
    lines[#lines + 1] = table.concat(cells, ",")
  end
  require("fp8._fileio").write_atomic(path, table.concat(lines, "\n") .. "\n")
  print("data: " .. path)
  return path
end

-- plot(o) — fp8.plot.lines; says where the PNG is, or (once, from fp8.plot) that gnuplot is missing.
function C.plot(o)
  local png = require("fp8.plot").lines(o)
  if png then print("plot: " .. png) end
  return png
end

return C
