-- Found on 2026-12-06 (stop 94) by review 10b of the session's Lua changes: the schedulers' refusal of writes to their
-- settings, a group added mid-run, ReduceLROnPlateau's min_lrs, the Accelerator's scheduler wrapper.
-- docs/robustness.md, "Review of stop 94's Lua changes (stop 94)". The expected values are torch's, printed by
-- scripts/gen_review10b.py (/opt/torch2/bin/python scripts/gen_review10b.py, torch 2.15).

local S = fp8.optim.lr_scheduler
local U = dofile("tests/spec/helpers/util.lua")

local function param() return fp8.zeros { 1 }:requires_grad_() end

describe("a scheduler's own settings, and other names", function()
  it("a LambdaLR takes a field its lambda reads (torch's LambdaLR has no total_steps); each class refuses its own",
    function()
    -- gen_review10b.py's lambda_attribute: lambda t: 1 - t / s.total_steps, s.total_steps = 4: 0.75, 0.5, 0.25 (a
    -- list of every class's settings refused it on any scheduler)
    local o = fp8.optim.SGD({ param() }, { lr = 1 })
    local s
    s = S.LambdaLR(o, function(t) return s and 1 - t / s.total_steps or 1 end)
    s.total_steps = 4
    s.mode = "warmup"   -- (CyclicLR's setting; a field of a LambdaLR, as in torch)
    local got = {}
    for _ = 1, 3 do o:step(); s:step(); got[#got + 1] = o.param_groups[1].lr end
    assert.are.same({ 0.75, 0.5, 0.25 }, got)
    assert.are.equal("warmup", s.mode)
    -- its own setting is still refused, as a StepLR's, a CosineAnnealingLR's
    for _, c in ipairs { { s, "lr_lambdas" }, { S.StepLR(fp8.optim.SGD({ param() }, { lr = 1 }), 2), "gamma" },
                         { S.CosineAnnealingLR(fp8.optim.SGD({ param() }, { lr = 1 }), 10), "eta_min" } } do
      local ok, err = pcall(function() c[1][c[2]] = 1 end)
      assert.is_false(ok, c[2])
      assert.matches(c[1].name .. ": " .. c[2] .. " is set when the scheduler is made", err, 1, true)
    end
  end)

  it("are shown as torch's attributes (StepLR's gamma, ...)", function()
    -- gen_review10b.py's shown: [2, 0.5, 10, 0.01, 0.25, 1.0, 3, 6, 2.0] (they read nil here)
    local function o() return fp8.optim.SGD({ param() }, { lr = 1 }) end
    local st, ca = S.StepLR(o(), 2, 0.5), S.CosineAnnealingLR(o(), 10, 0.01)
    local li, po = S.LinearLR(o(), 0.25, 1.0, 3), S.PolynomialLR(o(), 6, 2.0)
    assert.are.same({ 2, 0.5, 10, 0.01, 0.25, 1.0, 3, 6, 2.0 }, { st.step_size, st.gamma, ca.T_max, ca.eta_min,
      li.start_factor, li.end_factor, li.total_iters, po.total_iters, po.power })
  end)

  it("CosineAnnealingWarmRestarts refuses T_cur, which torch's get_lr reads (it was taken and ignored)", function()
    local s = S.CosineAnnealingWarmRestarts(fp8.optim.SGD({ param() }, { lr = 1 }), 4)
    s:step(); s:step()
    local ok, err = pcall(function() s.T_cur = 0 end)
    assert.is_false(ok)
    assert.matches("CosineAnnealingWarmRestarts: T_cur follows from the step", err, 1, true)
    assert.matches("sched:step(epoch)", err, 1, true)
    assert.is_nil(rawget(s, "T_cur"))
  end)

  it("CosineAnnealingWarmRestarts' T_cur and T_i read as torch's (they read nil)", function()
    -- gen_review10b.py's cycle: T_0=3, T_mult=2, after each of 10 steps, then after step(2.5)
    local want = { { 0, 3 }, { 1, 3 }, { 2, 3 }, { 0, 6 }, { 1, 6 }, { 2, 6 }, { 3, 6 }, { 4, 6 }, { 5, 6 }, { 0, 12 },
                   { 1, 12 }, { 2.5, 3 } }
    local s = S.CosineAnnealingWarmRestarts(fp8.optim.SGD({ param() }, { lr = 1 }), 3, 2)
    local got = { { s.T_cur, s.T_i } }
    for _ = 1, 10 do s:step(); got[#got + 1] = { s.T_cur, s.T_i } end
    s:step(2.5)
    got[#got + 1] = { s.T_cur, s.T_i }
    assert.are.same(want, got)
  end)

  it("a write a prepared scheduler refuses names the writer's line, not the Accelerator's", function()
    local acc = fp8.Accelerator {}
    local p = acc:prepare(S.ExponentialLR(fp8.optim.SGD({ param() }, { lr = 1 }), 0.9))
    local ok, err = pcall(function() p.gamma = 0.5 end)
    assert.is_false(ok)
    assert.matches("^[^\n]*review10b_spec%.lua:%d+: ExponentialLR: gamma is set", err)
    assert.are.equal(0.9, p.gamma)
  end)
end)

describe("a group added to a PolynomialLR or LinearLR past its end (factor 0)", function()
  it("keeps its lr, as torch's forms keep a group's lr past total_iters (it had 0)", function()
    -- gen_review10b.py's added_past_end: SGD(lr=0.1), a group of lr 0.2 added before the sixth step
    local want = { { 0.075 }, { 0.05 }, { 0.025 }, { 0.0 }, { 0.0 }, { 0.0, 0.2 }, { 0.0, 0.2 }, { 0.0, 0.2 } }
    for name, mk in pairs { poly = function(o) return S.PolynomialLR(o, 4, 1.0) end,
                            linear = function(o) return S.LinearLR(o, 1.0, 0.0, 4) end } do
      local o = fp8.optim.SGD({ param() }, { lr = 0.1 })
      local s = mk(o)
      local got = {}
      for t = 0, 7 do
        if t == 5 then o:add_param_group { params = { param() }, lr = 0.2 } end
        o:step(); s:step()
        got[#got + 1] = U.group_lrs(o)
      end
      U.close_lr_rows(want, got, name)
    end
  end)

  it("in a SequentialLR's PolynomialLR too", function()
    -- gen_review10b.py's added_past_end seq: ExponentialLR(0.9), then PolynomialLR(3) from step 2; added before the
    -- seventh step
    local want = { { 0.09 }, { 0.1 }, { 0.066666666667 }, { 0.033333333333 }, { 0.0 }, { 0.0 }, { 0.0, 0.2 },
                   { 0.0, 0.2 }, { 0.0, 0.2 }, { 0.0, 0.2 } }
    local o = fp8.optim.SGD({ param() }, { lr = 0.1 })
    local s = S.SequentialLR(o, { S.ExponentialLR(o, 0.9), S.PolynomialLR(o, 3) }, { 2 })
    local got = {}
    for t = 0, 9 do
      if t == 6 then o:add_param_group { params = { param() }, lr = 0.2 } end
      o:step(); s:step()
      local r = U.group_lrs(o)
      for i, v in ipairs(r) do r[i] = math.floor(v * 1e12 + 0.5) / 1e12 end   -- (torch's rounded as printed)
      got[#got + 1] = r
    end
    U.close_lr_rows(want, got, "seq")
  end)

  it("in a ChainedScheduler the other members scale it, as torch's chain", function()
    -- gen_review10b.py's added_past_end chain: PolynomialLR(2) and ExponentialLR(0.5), added before the fourth step
    local want = { { 0.025 }, { 0.0 }, { 0.0 }, { 0.0, 0.1 }, { 0.0, 0.05 }, { 0.0, 0.025 } }
    local o = fp8.optim.SGD({ param() }, { lr = 0.1 })
    local s = S.ChainedScheduler { S.PolynomialLR(o, 2), S.ExponentialLR(o, 0.5) }
    local got = {}
    for t = 0, 5 do
      if t == 3 then o:add_param_group { params = { param() }, lr = 0.2 } end
      o:step(); s:step()
      got[#got + 1] = U.group_lrs(o)
    end
    U.close_lr_rows(want, got, "chain")
    assert.are.same({ 2 }, s:state_dict().kept_groups)
  end)

  it("keeps it through state_dict and load_state_dict (kept_groups), which checks it", function()
    local o = fp8.optim.SGD({ param() }, { lr = 0.1 })
    local s = S.PolynomialLR(o, 3)
    for _ = 1, 4 do s:step() end
    o:add_param_group { params = { param() }, lr = 0.2 }
    s:step()
    local sd = s:state_dict()
    assert.are.same({ 2 }, sd.kept_groups)
    local o2 = fp8.optim.SGD({ param() }, { lr = 0.1 })
    o2:add_param_group { params = { param() }, lr = 0.2 }
    local s2 = S.PolynomialLR(o2, 3)
    s2:load_state_dict(sd)
    s2:step()
    assert.are.same({ 0, 0.2 }, U.group_lrs(o2))
    -- a state without it (any other scheduler's) has none
    assert.is_nil(S.PolynomialLR(fp8.optim.SGD({ param() }, { lr = 0.1 }), 3):state_dict().kept_groups)
    local bad = { last_epoch = 5, base_lrs = { 0.1, 0.2 }, kept_groups = { 3 } }
    local ok, err = pcall(s2.load_state_dict, s2, bad)
    assert.is_false(ok)
    assert.matches("kept_groups must be absent or a list of group indices 1..2", err, 1, true)
    assert.are.same({ 0, 0.2 }, U.group_lrs(o2))
  end)
end)

describe("ReduceLROnPlateau's min_lrs written by hand", function()
  it("is checked when a step reduces: named, nothing changed (a number or a string was Lua's error here)", function()
    for _, c in ipairs { { 0.01, "min_lrs must be a list of 2 numbers >= 0 (one per parameter group), got 0.01" },
                         { { 0.01, "x" }, "min_lrs[2] must be a finite number >= 0, got \"x\"" },
                         { { 0.01, -1 }, "min_lrs[2] must be a finite number >= 0, got -1" } } do
      local o = fp8.optim.SGD({ param() }, { lr = 0.1 })
      local s = S.ReduceLROnPlateau(o, { patience = 0, min_lr = { 0.01 } })
      s:step(1.0)
      o:add_param_group { params = { param() }, lr = 0.2 }
      s.min_lrs = c[1]
      local before = { s.last_epoch, s.best, s.num_bad_epochs, s.cooldown_counter }
      local ok, err = pcall(s.step, s, 2.0)
      assert.is_false(ok)
      assert.matches("ReduceLROnPlateau:step: " .. c[2], err, 1, true)
      assert.are.same(before, { s.last_epoch, s.best, s.num_bad_epochs, s.cooldown_counter })
      assert.are.same({ 0.1, 0.2 }, U.group_lrs(o))
      s.min_lrs = { 0.01, 0.05 }
      s:step(3.0)
      assert.are.same({ 0.1 * 0.1, 0.05 }, U.group_lrs(o))   -- (0.1 · factor 0.1 is above min_lr 0.01 by a hair)
    end
  end)
end)
