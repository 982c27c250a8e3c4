-- Found on 2026-12-06 (stop 97): the hostile API sweep (tests/fuzz/api_sweep.lua, seeds 106 and 107, ASan + UBSan)
-- over what stop 96 added (Lua's generator state and its checkpoints, hypot, softmax/log_softmax/logsumexp along a
-- strided dim, rms_norm, bf16 GELU, gather, self-referring gradient hooks, ReduceLROnPlateau, the schedulers'
-- hand-written base_lrs, fp8.nn.utils' foreach=nil), with the sweep's new forms (a field written by hand, then the
-- object's step and state_dict; a backward through the result), and hand-written hostile cases compared with
-- PyTorch 2.15 (scripts/gen_sweep106.py). docs/robustness.md, "The hostile sweep over stop 96's additions (stop 97)".
local L = fp8.optim.lr_scheduler

local function sgd(lr) return fp8.optim.SGD(fp8.nn.Linear(1, 1):parameters(), { lr = lr or 1 }) end

local U = dofile("tests/spec/helpers/util.lua")
local ends, lying = U.ends, U.lying   -- a call under a budget of instructions; the sweep's lying table

describe("a scheduler's base_lrs written as a table whose __len and __index lie", function()
  -- get_lr walked the list with ipairs, which read index after index through __index for ever (sched:step() never
  -- returned); state_dict's table.move copied #base_lrs = 2^62 entries
  it("is read raw: step and state_dict end", function()
    local opt = sgd(0.5)
    local s = L.StepLR(opt, { step_size = 1, gamma = 0.5 })
    s.base_lrs = lying()
    local ok, err = ends(s.step, s)
    assert.is_true(ok, err)
    assert.are.equal(0.5 * 0.5 ^ 1, opt.param_groups[1].lr)   -- (the group joins at its lr: no entry read raw)
    local sd
    ok, sd = ends(s.state_dict, s)
    assert.is_true(ok, sd)
    assert.are.same({ 0.5 }, sd.base_lrs)
    s.base_lrs = 5
    ok, err = ends(s.state_dict, s)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("StepLR:state_dict: base_lrs must be a list", 1, true), err)
  end)

  it("a ReduceLROnPlateau's state_dict ends with base_lrs, min_lrs or _last_lr written so", function()
    for _, k in ipairs { "base_lrs", "min_lrs", "_last_lr" } do
      local s = L.ReduceLROnPlateau(sgd())
      s[k] = lying()
      local ok, sd = ends(s.state_dict, s)
      assert.is_true(ok, sd)
      s[k] = "x"
      local err
      ok, err = ends(s.state_dict, s)
      assert.is_false(ok)
      local want = k == "_last_lr" and "ReduceLROnPlateau:get_last_lr: _last_lr must be a list of learning rates"
        or "ReduceLROnPlateau:state_dict: " .. k .. " must be a list of learning rates"
      assert.truthy(tostring(err):find(want, 1, true), err)
    end
    local s = L.StepLR(sgd(), { step_size = 1 })
    s._last_lr = lying()
    local ok, lrs = ends(s.get_last_lr, s)
    assert.is_true(ok, lrs)
    assert.are.same({}, lrs)
  end)
end)

describe("ReduceLROnPlateau's settings written by hand between steps", function()
  -- torch's step reads them as attributes (a write mid-run is honoured, here too); written with a value its
  -- constructor refuses, a mode of "maximum" was taken as "max" and a threshold_mode of "relative" as neither (every
  -- metric no improvement), a factor of 2 or an eps of NaN never cut the lr, "x" was Lua's own comparison error
  it("are refused at the step, naming the field, and the refused step changes nothing", function()
    local cases = {
      { "mode", "maximum", 'mode must be "min" or "max", got "maximum"' },
      { "threshold_mode", "relative", 'threshold_mode must be "rel" or "abs", got "relative"' },
      { "factor", 2, "factor must be a number in [0, 1), got 2" },
      { "factor", "0.5", 'factor must be a number in [0, 1), got "0.5"' },
      { "eps", 0 / 0, "eps must be a finite number >= 0" },
      { "threshold", "x", 'threshold must be a finite number >= 0, got "x"' },
      { "threshold", -1, "threshold must be a finite number >= 0, got -1" },
      { "patience", "x", 'patience must be an integer >= 0, got "x"' },
      { "patience", -1, "patience must be an integer >= 0, got -1" },
      { "cooldown", 1.5, "cooldown must be an integer >= 0, got 1.5" },
      { "num_bad_epochs", math.maxinteger, "num_bad_epochs must be an integer >= 0" },
      { "best", 0 / 0, "best must be a number (not NaN)" },
      { "best", "x", 'best must be a number (not NaN), got "x"' },
    }
    for _, c in ipairs(cases) do
      local opt = sgd()
      local s = L.ReduceLROnPlateau(opt, { patience = 0 })
      s:step(3)
      s[c[1]] = c[2]
      local ok, err = pcall(s.step, s, 5)
      assert.is_false(ok, c[1])
      assert.truthy(tostring(err):find("ReduceLROnPlateau:step: " .. c[3], 1, true), err)
      assert.are.equal(1, s.last_epoch)
      assert.are.equal(0, s.num_bad_epochs == math.maxinteger and 0 or s.num_bad_epochs)
      assert.are.equal(1, opt.param_groups[1].lr)
    end
    -- a value the constructor takes is honoured (torch's attributes)
    local opt = sgd()
    local s = L.ReduceLROnPlateau(opt, { patience = 5 })
    s.patience, s.factor = 0, 0.5
    s:step(3); s:step(4)
    assert.are.equal(0.5, opt.param_groups[1].lr)
  end)
end)

describe("ReduceLROnPlateau with NaN and infinite metrics, against torch 2.15", function()
  -- /opt/torch2/bin/python scripts/gen_sweep106.py (torch 2.15.0): the lr after each step(metric)
  local METRICS = { 5.0, 0 / 0, 4.0, math.huge, 3.0, -math.huge, 2.0, 0 / 0, 1.0, 0.5, 0.25, 9.0 }
  local TORCH_LRS = {
    min_rel = { 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25 },
    min_abs = { 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25 },
    max_rel = { 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125, 0.0625 },
    max_abs = { 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125, 0.0625 },
  }
  local TORCH_RESUMED = {
    min = { best = -math.huge, lrs = { 1.0, 0.5, 0.5, 0.25 } },
    max = { best = math.huge, lrs = { 1.0, 0.5, 0.5, 0.25 } },
  }

  it("gives torch's lrs in each mode and threshold_mode", function()
    for key, want in pairs(TORCH_LRS) do
      local mode, tmode = key:match("^(%a+)_(%a+)$")
      local opt = sgd()
      local s = L.ReduceLROnPlateau(opt, { mode = mode, threshold_mode = tmode, patience = 1, cooldown = 1,
        factor = 0.5, threshold = 0.1 })
      local got = {}
      for _, m in ipairs(METRICS) do s:step(m); got[#got + 1] = opt.param_groups[1].lr end
      assert.are.same(want, got, key)
    end
  end)

  -- state_dict left best out whenever it was infinite (JSON has no infinity), so a best of -inf in mode "min" came
  -- back as the mode's start, +inf: the first metric after the resume counted as an improvement
  it("keeps a best of the other infinity in its state, and resumes as torch's does", function()
    for mode, want in pairs(TORCH_RESUMED) do
      local s = L.ReduceLROnPlateau(sgd(), { mode = mode, patience = 1, factor = 0.5 })
      s:step(1.0); s:step(want.best)
      local sd = s:state_dict()
      assert.are.equal(want.best > 0 and "inf" or "-inf", sd.best)
      -- through JSON, as a checkpoint's scheduler.json
      local C = require "fp8._checkpoint"
      sd = C.json_decode(C.json_encode(sd), "sweep106")
      local opt2 = sgd()
      local s2 = L.ReduceLROnPlateau(opt2, { mode = mode, patience = 1, factor = 0.5 })
      s2:load_state_dict(sd)
      assert.are.equal(want.best, s2.best)
      local got = {}
      for _, x in ipairs { 1.0, 2.0, 3.0, 4.0 } do s2:step(x); got[#got + 1] = opt2.param_groups[1].lr end
      assert.are.same(want.lrs, got, mode)
    end
    -- the mode's start is still left out, and loads back
    local s = L.ReduceLROnPlateau(sgd())
    assert.is_nil(s:state_dict().best)
    local ok, err = pcall(s.load_state_dict, s,
      { last_epoch = 0, num_bad_epochs = 0, cooldown_counter = 0, best = "x" })
    assert.is_false(ok)
    assert.truthy(tostring(err):find('best must be a number (or "inf", "-inf"), got "x"', 1, true), err)
  end)

  -- load_state_dict checked _last_lr after it had set last_epoch, best and the counters: a refused state was half
  -- loaded
  it("refuses a state with a bad _last_lr before it changes anything", function()
    local s = L.ReduceLROnPlateau(sgd(), { patience = 3 })
    s:step(2); s:step(3)
    local sd = s:state_dict()
    sd.last_epoch, sd.best, sd.num_bad_epochs, sd._last_lr = 9, 0.5, 2, { "x" }
    local ok, err = pcall(s.load_state_dict, s, sd)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("_last_lr must be a list of 1 numbers", 1, true), err)
    assert.are.equal(2, s.last_epoch)
    assert.are.equal(2, s.best)
    assert.are.equal(1, s.num_bad_epochs)
  end)
end)

describe("a checkpoint's random_states file edited between save and load", function()
  local d
  before_each(function() d = U.tmpdir() end)
  after_each(function() os.execute("rm -rf " .. U.q(d)) end)

  -- (the case of math_random in capitals, which this sweep found too, is gaps14_spec's "load_state takes what
  -- set_math_random_state takes")
  -- a seed of a megabyte was all in the message; a table showed as "table: 0x..."
  it("shows a long string cut and a table by its kind", function()
    local acc, p, C, rs = U.fresh_random_states(d)
    rs.fp8[1] = ("a"):rep(100000)
    U.write(p, C.json_encode(rs))
    local ok, err = pcall(acc.load_state, acc, d .. "/ck")
    assert.is_false(ok)
    assert.truthy(tostring(err):find('seed is "' .. ("a"):rep(64) .. '...", expected 16 hex digits', 1, true), err)
    assert.is_true(#tostring(err) < 400, #tostring(err))
    acc, p, C, rs = U.fresh_random_states(d)
    rs.math_random = { 1, 2 }
    U.write(p, C.json_encode(rs))
    ok, err = pcall(acc.load_state, acc, d .. "/ck")
    assert.is_false(ok)
    assert.truthy(tostring(err):find("math_random is a table, expected", 1, true), err)
  end)
end)
