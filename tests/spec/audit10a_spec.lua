-- Found on 2026-12-06 (stop 94): training loops stepped against PyTorch 2.15 (every optimizer with parameter groups,
-- add_param_group, a parameter without a gradient, state_dict round trips mid-run; clipping; the schedulers and their
-- resumes; GradScaler; accumulation through the Accelerator; the losses). The torch values are literals printed by
-- scripts/gen_audit10a.py. docs/robustness.md, "Training runs step by step against PyTorch 2.15 (stop 94)".

local function lrs(opt)
  local out = {}
  for i, g in ipairs(opt.param_groups) do out[i] = g.lr end
  return out
end

local function close_rows(want, got, what)
  assert.are.equal(#want, #got, what)
  for i = 1, #want do
    assert.are.equal(#want[i], #got[i], ("%s: step %d's groups"):format(what, i))
    for k = 1, #want[i] do
      assert.is_true(math.abs(want[i][k] - got[i][k]) <= 1e-12 * math.abs(want[i][k]),
        ("%s: step %d group %d: %.17g, torch's %.17g"):format(what, i, k, got[i][k], want[i][k]))
    end
  end
end

local function param() return fp8.zeros { 1 }:requires_grad(true) end

describe("ReduceLROnPlateau and a group added after it was made", function()
  it("gives the new group the min_lr given as one number, as torch's _reduce_lr", function()
    -- scripts/gen_audit10a.py's plateau_added_group: torch 2.15's lrs after each step
    local want = { { 0.1, 0.3 }, { 0.1, 0.3 }, { 0.1, 0.3 }, { 0.05, 0.15 }, { 0.05, 0.15 }, { 0.025, 0.075, 0.1 },
      { 0.025, 0.075, 0.1 }, { 0.025, 0.075, 0.1 }, { 0.02, 0.0375, 0.05 }, { 0.02, 0.0375, 0.05 },
      { 0.02, 0.02, 0.025 }, { 0.02, 0.02, 0.025 }, { 0.02, 0.02, 0.02 }, { 0.02, 0.02, 0.02 } }
    local ms = { 1.0, 0.9, 0.95, 0.91, 0.92, 0.93, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6 }
    local opt = fp8.optim.SGD({ { params = { param() } }, { params = { param() }, lr = 0.3 } }, { lr = 0.1 })
    local s = fp8.optim.lr_scheduler.ReduceLROnPlateau(opt, { patience = 1, factor = 0.5, min_lr = 0.02 })
    local got = {}
    for i, m in ipairs(ms) do
      if i == 6 then opt:add_param_group { params = { param() }, lr = 0.2 } end
      s:step(m)
      got[i] = lrs(opt)
    end
    -- (the new group's lr went on halving past min_lr: 0.0125, 0.00625, ...)
    close_rows(want, got, "ReduceLROnPlateau")
  end)

  it("refuses to reduce with a min_lr list that has no entry for the new group, as torch's, and changes nothing", function()
    -- torch 2.15: RuntimeError "The number of param groups in the `optimizer` (2) differs from when
    -- `ReduceLROnPlateau` was initialized (1), ... Please modify the `min_lrs` field ..."
    local opt = fp8.optim.SGD({ param() }, { lr = 0.1 })
    local s = fp8.optim.lr_scheduler.ReduceLROnPlateau(opt, { patience = 0, min_lr = { 0.01 } })
    s:step(1.0)
    opt:add_param_group { params = { param() }, lr = 0.2 }
    s:step(0.5)   -- an improvement: nothing to reduce, as torch's
    local before = s:state_dict()
    local ok, err = pcall(s.step, s, 2.0)
    assert.is_false(ok)
    assert.matches("the optimizer has 2 parameter groups, min_lr was given as a list of 1", err, 1, true)
    assert.are.same(before, s:state_dict())   -- the counters as they were
    assert.are.same({ 0.1, 0.2 }, lrs(opt))
    s.min_lrs = { 0.01, 0.15 }   -- as torch's message says
    s:step(2.0)
    close_rows({ { 0.1 * 0.1, 0.15 } }, { lrs(opt) }, "with min_lrs set")
  end)
end)
