-- Found on 2026-12-06 (stop 95's review): the two audits merged that day (audit11b: hypot's node, the 69 in-place
-- forms, CyclicLR's base_lrs; audit11a: clip_grad_norm_'s blocks, the generator's state, a prepared
-- ReduceLROnPlateau's load_state) read again against torch 2.15 and Accelerate.
-- docs/robustness.md, "The two audits of stop 95, reviewed (stop 95)".
local U = dofile("tests/spec/helpers/util.lua")
local S = fp8.optim.lr_scheduler

describe("an in-place write with an operand that requires grad", function()
  -- The new values were computed from detached operands, so under grad mode x:mul_(w) wrote w's values into x and
  -- recorded nothing: a loss of x gave w no gradient, without a word (torch records the write: x gets MulBackward and
  -- w.grad comes). The same for the 69 forms of stop 95 (x:atan2_(w), x:addcmul_(w, w), ...), copy_, fill_, lerp_,
  -- masked_fill_, clamp_ and the scatter/index family.
  it("is refused under grad mode, naming the method and the operand, and x is left as it was", function()
    local w = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
    local x = fp8.tensor({ 4, 5, 6 })
    U.fails_with({ "mul_: other requires grad", "y = x:mul(...)", "fp8.no_grad" }, function() return x:mul_(w) end)
    assert.same({ 4, 5, 6 }, x:totable())
    assert.are.equal(0, x._version)
    U.fails_with("add_: other is part of an autograd graph", function() return x:add_(w * 2) end)
    U.fails_with("atan2_: argument 1 requires grad", function() return x:atan2_(w) end)
    U.fails_with("hypot_: argument 1 requires grad", function() return x:hypot_(w) end)
    U.fails_with("addcmul_: argument 1 requires grad", function() return x:addcmul_(w, w) end)
    U.fails_with("pow_: argument 1 requires grad", function() return x:pow_(w) end)
    U.fails_with("copy_: the source requires grad", function() return x:copy_(w) end)
    U.fails_with("fill_: value is part of an autograd graph", function() return x:fill_(w:sum()) end)
    U.fails_with("lerp_: end requires grad", function() return x:lerp_(w, 0.5) end)
    U.fails_with("lerp_: weight requires grad", function() return x:lerp_(fp8.zeros(3), w) end)
    U.fails_with("clamp_: min requires grad", function() return x:clamp_(w, nil) end)
    U.fails_with("clamp_: max requires grad", function() return x:clamp_({ max = w }) end)
    U.fails_with("masked_fill_: value is part", function() return x:masked_fill_(fp8.tensor({ 1, 0, 1 }), w:sum()) end)
    U.fails_with("index_add_: the source requires grad", function()
      return x:index_add_(1, fp8.tensor({ 0, 1, 2 }), w)
    end)
    assert.same({ 4, 5, 6 }, x:totable())
    assert.are.equal(0, x._version)
  end)

  it("is taken under fp8.no_grad, and for the comparisons and logical ops (no gradient in torch either)", function()
    local w = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
    local x = fp8.tensor({ 4, 5, 6 })
    fp8.no_grad(function() x:mul_(w); x:copy_(x + w) end)
    assert.same({ 5, 12, 21 }, x:totable())
    assert.same({ 0, 1, 0 }, fp8.tensor({ 4, 2, 6 }):eq_(w):totable())
    assert.same({ 0, 0, 1 }, fp8.tensor({ 1, 0, 1 }):logical_xor_(w:lt(2)):totable())
    assert.same({ 2, 8, 18 }, fp8.tensor({ 1, 2, 3 }):mul_(w:detach() * 2):totable())
  end)
end)

describe("ReduceLROnPlateau's settings in its state", function()
  local function make(o)
    local opt = fp8.optim.SGD({ fp8.zeros(2):requires_grad(true) }, { lr = 0.1 })
    return opt, S.ReduceLROnPlateau(opt, o)
  end
  -- Its state_dict kept the counters and best alone, so a state saved with factor 0.5 and patience 2 went into a
  -- scheduler of factor 0.1 (or mode "max", which reads the saved best the wrong way round) without a word, where the
  -- closed forms refuse a state whose settings give another schedule (torch's load_state_dict puts the saved
  -- settings back).
  it("are recorded, and a state of other settings is refused unless strict=false", function()
    local _, a = make({ factor = 0.5, patience = 2, min_lr = 0.001 })
    a:step(1.0); a:step(2.0)
    local sd = a:state_dict()
    assert.are.equal("ReduceLROnPlateau", sd.name)
    assert.are.equal(0.5, sd.settings.factor)
    for _, o in ipairs {
      { { factor = 0.1, patience = 2, min_lr = 0.001 }, "factor was 0.5, this one's is 0.1" },
      { { factor = 0.5, patience = 3, min_lr = 0.001 }, "patience was 2, this one's is 3" },
      { { factor = 0.5, patience = 2, min_lr = 0.001, mode = "max" }, 'mode was "min", this one\'s is "max"' },
      { { factor = 0.5, patience = 2, min_lr = 0.001, threshold = 0.01 }, "threshold was" },
      { { factor = 0.5, patience = 2, min_lr = 0.001, threshold_mode = "abs" }, "threshold_mode was" },
      { { factor = 0.5, patience = 2, min_lr = 0.001, cooldown = 1 }, "cooldown was 0" },
      { { factor = 0.5, patience = 2, min_lr = 0.001, eps = 1e-6 }, "eps was" },
      { { factor = 0.5, patience = 2 }, "min_lrs was {0.001}, this one's is {0}" },
    } do
      local _, b = make(o[1])
      U.fails_with({ "ReduceLROnPlateau:load_state_dict: its settings differ: " .. o[2], "strict=false" },
        b.load_state_dict, b, sd)
      assert.are.equal(0, b.num_bad_epochs)   -- nothing taken
      b:load_state_dict(sd, false)            -- this one's settings, the saved counters
      assert.are.equal(1, b.num_bad_epochs)
      assert.are.equal(o[1].factor, b.factor)
    end
    local _, c = make({ factor = 0.5, patience = 2, min_lr = 0.001 })
    c:load_state_dict(sd)
    assert.are.equal(1, c.num_bad_epochs)
    assert.are.equal(1.0, c.best)
    U.fails_with("strict must be a boolean, got 1", c.load_state_dict, c, sd, 1)
    -- a state saved before the settings were recorded loads as before; a StepLR refuses a plateau's state by name
    local old = a:state_dict(); old.settings, old.name = nil, nil
    for _, k in ipairs { "mode", "threshold_mode", "factor", "patience", "threshold", "cooldown", "eps", "min_lrs",
                         "default_min_lr" } do
      old[k] = nil   -- (torch's top-level keys, which a state has since stop 99)
    end
    local _, d = make({ factor = 0.1 })
    d:load_state_dict(old)
    assert.are.equal(1, d.num_bad_epochs)
    local opt = fp8.optim.SGD({ fp8.zeros(2):requires_grad(true) }, { lr = 0.1 })
    U.fails_with("the state is a ReduceLROnPlateau's, this scheduler is a StepLR", S.StepLR(opt, 3).load_state_dict,
      S.StepLR(opt, 3), sd)
  end)

  it("are compared by acc:load_state, as the other schedulers' schedules", function()
    local dir = U.tmpdir()
    local function run(o)
      local m = fp8.nn.Linear(2, 2)
      local opt = fp8.optim.SGD(m:parameters(), { lr = 0.1 })
      local sched = S.ReduceLROnPlateau(opt, o)
      local acc = fp8.Accelerator { config = false, env = {}, cpu = true }
      m, opt, sched = acc:prepare(m, opt, sched)
      return acc, sched, opt
    end
    local acc, sched = run({ factor = 0.5, patience = 1 })
    sched:step(1.0); sched:step(2.0)
    acc:save_state(dir .. "/ck")
    local acc2, sched2, opt2 = run({ factor = 0.1, patience = 1 })
    U.fails_with({ "load_state: scheduler 1 of", "its settings differ: factor was 0.5, this one's is 0.1",
      "{strict=false}" }, acc2.load_state, acc2, dir .. "/ck")
    assert.are.equal(0, sched2.num_bad_epochs)
    assert.are.equal(0.1, opt2.param_groups[1].lr)
    acc2:load_state(dir .. "/ck", { strict = false })
    assert.are.equal(1, sched2.num_bad_epochs)
    local acc3, sched3 = run({ factor = 0.5, patience = 1 })
    acc3:load_state(dir .. "/ck")
    assert.are.equal(1, sched3.num_bad_epochs)
    os.execute("rm -rf " .. U.q(dir))
  end)
end)

describe("fp8.utils.set_seed", function()
  -- fp8.utils is torch.utils' (checkpoint); `accelerate.utils.set_seed` ported as fp8.utils.set_seed was nil
  it("is fp8.set_seed (Accelerate's accelerate.utils.set_seed), and fp8.utils names fp8's other functions", function()
    assert.are.equal(fp8.set_seed, fp8.utils.set_seed)
    fp8.utils.set_seed(7, false, true)
    local a = fp8.rand({ 4 }):totable()
    fp8.set_seed(7)
    assert.same(a, fp8.rand({ 4 }):totable())
    assert.are.equal(7, fp8.initial_seed())
    U.fails_with("set_seed: device_specific must be a boolean, got table", fp8.utils.set_seed, 1,
      { device_specific = true })
    U.fails_with("set_seed: deterministic must be a boolean, got string", fp8.utils.set_seed, 1, false, "yes")
    U.fails_with("accelerate.utils' convert_model is fp8.convert_model", function() return fp8.utils.convert_model end)
    assert.is_nil(fp8.utils.no_such_name)
    assert.is_table(fp8.utils.checkpoint)
  end)
end)

describe("a ReduceLROnPlateau is known as one by a second copy of the scheduler module", function()
  -- busted's insulation drops a module that a spec file loaded: a later `require` inside acc:load_state loaded a
  -- second copy, whose Plateau class was another table, and load_state compared no settings (CI of 33ab5f8a:
  -- review12a's case above failed after review10b's file ran)
  it("by its class's mark, not its identity", function()
    local saved = package.loaded["fp8.optim.lr_scheduler"]
    package.loaded["fp8.optim.lr_scheduler"] = nil
    local ok, S2 = pcall(require, "fp8.optim.lr_scheduler")
    package.loaded["fp8.optim.lr_scheduler"] = saved
    assert.is_true(ok, tostring(S2))
    assert.are_not.equal(S, S2)
    local opt = fp8.optim.SGD({ fp8.zeros(2):requires_grad(true) }, { lr = 0.1 })
    local p = S.ReduceLROnPlateau(opt, { factor = 0.5 })
    assert.is_true(S2._is_plateau(p))
    assert.is_false(S2._is_plateau(S.StepLR(fp8.optim.SGD({ fp8.zeros(2):requires_grad(true) }, { lr = 0.1 }), 3)))
    local sd = p:state_dict()
    sd.settings.factor = 0.1
    assert.truthy(S2._other_schedule(p, sd):find("factor was 0.1, this one's is 0.5", 1, true))
  end)
end)
