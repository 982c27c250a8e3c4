-- Found on 2026-12-07 (stop 99): the whole API under LeakSanitizer with the collector stressed (tests/fuzz/api_sweep.lua,
-- seed 111, --leaks --gc-stress from batch 279, ASan + UBSan) and a --messages run (seed 113, --quick --calls 50000):
-- the public entries whose error message named neither the function nor the argument.
-- docs/robustness.md, "The rest of the whole API under LeakSanitizer (stop 99)".
local nn = fp8.nn
local LR = fp8.optim.lr_scheduler

local function err_of(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok)
  return err
end

describe("a layer's forward called directly names itself", function()
  -- forward's own refusals were bare ('expected a tensor input, got number'): called as m(x) Module's _call_with puts
  -- "Linear forward: " in front, but m:forward(x) named neither the function nor the argument (--messages' most common
  -- public entries: Linear, LayerNorm, FP8LayerNorm, Embedding, CausalSelfAttention, GPT, FP8Linear). They say
  -- "<Class>:forward: " now, which the call through m(x) replaces with its context.
  local te = { backend = "te" }
  local cases = {
    { nn.Linear(3, 2), { 5 }, "Linear:forward: expected a tensor input, got number" },
    { nn.Linear(3, 2), { fp8.ones { 1, 2 } }, "Linear:forward: expected input [..., 3], got [1, 2]" },
    { nn.LayerNorm(3), { "x" }, "LayerNorm:forward: expected a tensor input, got string" },
    { nn.FP8LayerNorm(3), { fp8.ones { 1, 2 } }, "FP8LayerNorm:forward: expected input [..., 3], got [1, 2]" },
    { nn.RMSNorm(4), { fp8.ones { 2 } }, "RMSNorm:forward: expected input [..., 4], got [2]" },
    { nn.Embedding(4, 2), { 1 }, "Embedding:forward: expected a tensor of token ids, got number" },
    { nn.CausalSelfAttention { n_embd = 4, n_head = 2 }, { nil }, "CausalSelfAttention:forward: expected input [B, T, 4], got nil" },
    { nn.GPT { vocab_size = 5, block_size = 4, n_layer = 1, n_head = 2, n_embd = 4 }, { 3 },
      "GPT:forward: expected token ids [B, T], got number" },
    { nn.GPT { vocab_size = 5, block_size = 4, n_layer = 1, n_head = 2, n_embd = 4 }, { fp8.ones { 1, 2 }, fp8.ones { 2, 3 } },
      "GPT:forward: targets must be [1, 2] like idx, got [2, 3]" },
    { fp8.recipes.FP8Linear(16, 16, true, te), { "x" }, "FP8Linear:forward: expected a tensor input, got string" },
    { nn.LSTM(3, 2), { 5 }, "LSTM:forward: expected a tensor input, got 5" },
    { nn.LSTM(3, 2), { fp8.ones { 2, 2, 4 } }, "LSTM:forward: expected input [T, N, 3] or unbatched [T, 3], got [2, 2, 4]" },
    { nn.RNNCell(3, 2), { fp8.ones { 2, 4 } }, "RNNCell:forward: expected input [N, 3] or [3], got [2, 4]" },
    { nn.Flatten(), { 5 }, "Flatten:forward: expected a tensor input, got number" },
    { nn.Unflatten(2, { 1, 2 }), { 5 }, "Unflatten:forward: expected a tensor input, got number" },
    { nn.BatchNorm2d(3), { fp8.ones { 1, 2, 4, 4 } }, "BatchNorm2d:forward: expected input [N, C, H, W] with 3 channels, got [1, 2, 4, 4]" },
    { nn.InstanceNorm1d(3), { 5 }, "InstanceNorm1d:forward: expected input [N, C, L] or unbatched [C, L], got 5" },
    { nn.ConvTranspose2d(2, 2, 3), { 5, { 3, 3 } }, "ConvTranspose2d:forward: expected a tensor input, got 5" },
  }
  it("m:forward(bad) says <Class>:forward", function()
    for _, c in ipairs(cases) do
      local m, args, want = c[1], c[2], c[3]
      assert.are.equal(want, err_of(m.forward, m, table.unpack(args, 1, #args)))
    end
  end)

  it("m(bad) and a container keep their context, without the prefix", function()
    for _, c in ipairs(cases) do
      local m, args, want = c[1], c[2], c[3]
      local cls = want:match("^(%w+):forward: ")
      assert.are.equal(cls .. " forward: " .. want:sub(#cls + 11), err_of(m, table.unpack(args, 1, #args)))
    end
    assert.are.equal("in layer 1 (Linear) forward: expected input [..., 5], got [2, 4]",
      err_of(nn.Sequential(nn.Linear(4, 4), nn.Linear(5, 2)), fp8.ones { 2, 4 }))
    -- the fused LayerNorm -> FP8Linear path checks the FP8Linear's input in its own _call_with
    local seq = nn.Sequential(nn.LayerNorm(32), fp8.recipes.FP8Linear(40, 16, true, te))
    assert.are.equal("in layer 1 (FP8Linear) forward: expected input [..., 40], got [4, 32]", err_of(seq, fp8.ones { 4, 32 }))
    assert.are.equal("GPT forward: sequence length 5 is longer than block_size 4",
      err_of(nn.GPT { vocab_size = 5, block_size = 4, n_layer = 1, n_head = 2, n_embd = 4 }, fp8.ones { 1, 5 }))
  end)
end)

describe("fp8.kwargs.describe refuses a settings value that is not text by name", function()
  -- {mixed_precision = {}} (or a tensor) reached Lua's own "attempt to concatenate a table value (local 'text')" in
  -- the padding (--messages: fp8.kwargs.describe({mixed_precision = V}))
  it("a value and a source", function()
    assert.are.equal("describe: settings.mixed_precision must be a string, got table (the settings table from "
      .. "fp8.kwargs.resolve)", err_of(fp8.kwargs.describe, { mixed_precision = {} }))
    assert.matches("describe: settings.mixed_precision must be a string, got number 2",
      err_of(fp8.kwargs.describe, { mixed_precision = 2 }), 1, true)
    assert.matches("describe: settings.config_path must be a string",
      err_of(fp8.kwargs.describe, { mixed_precision = "no", config_path = {} }), 1, true)
    assert.are.equal("describe: settings.sources.mixed_precision must be a string, got table",
      err_of(fp8.kwargs.describe, { mixed_precision = "no", sources = { mixed_precision = {} } }))
  end)

  it("resolve's settings still describe", function()
    local text = fp8.kwargs.describe(fp8.kwargs.resolve { mixed_precision = "fp8" })
    assert.matches("mixed_precision%s+fp8%s+%(argument%)", text)
  end)
end)

describe("a scheduler refuses an optimizer whose param_groups holds a non-table", function()
  -- ReduceLROnPlateau({param_groups = {0}}) reached Lua's own "attempt to index a number value (local 'g')"
  it("by the group's index", function()
    assert.are.equal("ReduceLROnPlateau: expected an optimizer from fp8.optim, got a table whose param_groups[1] is "
      .. "a number, not a group table", err_of(LR.ReduceLROnPlateau, { param_groups = { 0 } }))
    assert.matches("StepLR: expected an optimizer from fp8.optim, got a table whose param_groups%[2%] is a string",
      err_of(LR.StepLR, { param_groups = { { lr = 1 }, "x" } }, { step_size = 1 }))
  end)

  it("an SGD's groups are taken", function()
    local opt = fp8.optim.SGD({ fp8.zeros { 2 }:requires_grad_() }, { lr = 0.1 })
    assert.is_true(pcall(LR.ReduceLROnPlateau, opt))
    assert.is_true(pcall(LR.StepLR, opt, { step_size = 1 }))
  end)
end)

describe("SummaryWriter refuses a filename_suffix past a file name's length by name", function()
  -- {filename_suffix = ('A'):rep(300)} (or 2^20 bytes) reached fileio's own "lua/fp8/tensorboard.lua:145: runs/...AAA:
  -- cannot open to append: File name too long", the path cut short, neither the writer nor the option named
  local dir = os.tmpname(); os.remove(dir)
  it("300 and 2^20 bytes refused, nothing written", function()
    for _, n in ipairs { 300, 1 << 20 } do
      local err = err_of(fp8.SummaryWriter, dir, { filename_suffix = ("A"):rep(n) })
      assert.matches("^SummaryWriter: the event file's name would be %d+ bytes, past the 255 a file name may have "
        .. "%(filename_suffix is " .. n .. " bytes%)$", err)
    end
  end)

  it("a short suffix is taken", function()
    local w = fp8.SummaryWriter(dir, { filename_suffix = ".run1" })
    assert.matches("%.run1$", w._path)
    w:close()
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)

describe("a progress bar's methods refuse another value as their self by name", function()
  -- fp8.progress.Bar.update(t) with a table that answers every key reached Lua's own "attempt to call a number value
  -- (method '_draw')" (sweep 113's --messages); iter the same at '_make', line and close took it
  local lying = setmetatable({}, { __len = function() return 1 << 62 end, __index = function() return 1 end })
  it("each method, with the lying table", function()
    for _, m in ipairs { "set_postfix", "line", "update", "close", "elapsed", "iter" } do
      -- refused before the method runs since sweep 114 (the lookup of m on a table whose __index answers every key
      -- finds no function: not an object of any class), in strict_arity's words
      assert.are.equal(("ProgressBar:%s: called without its object (got a table as self): write obj:%s(...), with a "
        .. "colon, not obj.%s(...)"):format(m, m, m), err_of(fp8.progress.Bar[m], lying))
    end
  end)

  it("a bar still counts", function()
    local bar = fp8.progress({ 1, 2, 3 }, { total = 3, out = { write = function() end, flush = function() end } })
    for _ in bar:iter() do end
    assert.are.equal(3, bar.n)
    bar:update(2)
    assert.are.equal(5, bar.n)
  end)
end)
