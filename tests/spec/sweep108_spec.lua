-- Found on 2026-12-07 (stop 98): the hostile API sweep (tests/fuzz/api_sweep.lua, seeds 108 and 109, ASan + UBSan)
-- over what stop 97 added (the norms' overflow rescue, x:pow(s), bf16 GELU/SiLU backward, softmax along a strided
-- dim, the schedulers' fields read back by step and state_dict, the math_random state checks, hooks), with the sweep's
-- new values and receivers (tensors at the range's ends, a hostile self's backward, a scheduler held by a
-- SequentialLR or ChainedScheduler, a state_dict edited before load_state_dict), and hand-written hostile cases
-- compared with PyTorch 2.15 (scripts/gen_sweep108.py). docs/robustness.md, "The hostile sweep over stop 97's
-- additions (stop 98)".
local L = fp8.optim.lr_scheduler

local function sgd(lr) return fp8.optim.SGD(fp8.nn.Linear(1, 1):parameters(), { lr = lr or 1 }) end

local U = dofile("tests/spec/helpers/util.lua")
local ends, lying = U.ends, U.lying   -- a call under a budget of instructions; the sweep's lying table

describe("renorm of a bf16 or fp16 tensor", function()
  -- The norms were taken in the tensor's dtype: an fp16 slice whose norm passes 65504 was renormed to zeros, a bf16
  -- norm was rounded before the factor. torch 2.15 takes them in fp32 and rounds the factor to the dtype:
  -- /opt/torch2/bin/python scripts/gen_sweep108.py
  local CASES = {
    { "fp16", { { 60000, 60000 }, { 1, 1 } }, 3, 1, { 0.7939453125, 0.7939453125, 0.79345703125, 0.79345703125 } },
    { "fp16", { { 40000, 40000 }, { 1, 1 } }, 2, 1, { 0.7080078125, 0.7080078125, 0.70703125, 0.70703125 } },
    { "bf16", { { 1, 1 }, { 2, 2 } }, 3, 1, { 0.79296875, 0.79296875, 0.79296875, 0.79296875 } },
    { "bf16", { { 1, 3 }, { 0.5, 0.25 } }, 2, 2, { 0.6328125, 1.8984375, 0.5, 0.25 } },
  }
  it("gives torch's values, in the tensor's dtype", function()
    for _, c in ipairs(CASES) do
      local r = fp8.tensor(c[2]):to(c[1]):renorm(c[3], 1, c[4])
      assert.are.equal(c[1], r:dtype())
      assert.are.same(c[5], r:reshape({ -1 }):to("fp32"):tolist(), ("%s p=%g"):format(c[1], c[3]))
    end
  end)
  it("passes a gradient through the fp32 norm", function()
    local x = fp8.tensor({ { 60000, 60000 }, { 1, 1 } }):to("fp16"):requires_grad(true)
    local r = x:renorm(3, 1, 1)
    r:to("fp32"):sum():backward()
    local g = x.grad:reshape({ -1 }):tolist()
    for _, v in ipairs(g) do assert.is_true(v == v and math.abs(v) < 1) end
    assert.is_true(g[1] ~= 0)   -- (the slice of norm 75595 was scaled: its gradient is not 0)
  end)
end)

describe("CosineAnnealingWarmRestarts with a cycle length past 2^63", function()
  -- T_i · T_mult wrapped in Lua's integers and the loop over cycles never ended (torch's Python integers do not wrap):
  -- /opt/torch2/bin/python scripts/gen_sweep108.py gives lrs 0.05, 0.1, 0.1 and T_i 2, 2^63, 2^63
  it("steps as torch's with T_mult = 2^62", function()
    local opt = sgd(0.1)
    local s = L.CosineAnnealingWarmRestarts(opt, { T_0 = 2, T_mult = 1 << 62 })
    local want = { { 0.05, 2, 1 }, { 0.1, 2.0 ^ 63, 0 }, { 0.1, 2.0 ^ 63, 1 } }
    for i = 1, 3 do
      local ok, err = ends(s.step, s)
      assert.is_true(ok, err)
      assert.is_true(math.abs(s:get_last_lr()[1] - want[i][1]) < 1e-15, tostring(s:get_last_lr()[1]))
      assert.are.equal(want[i][2], s.T_i)
      assert.are.equal(want[i][3], s.T_cur)
    end
  end)
  it("loads a state at step 5", function()
    local s = L.CosineAnnealingWarmRestarts(sgd(0.1), { T_0 = 2, T_mult = 1 << 62 })
    local ok, err = ends(function()   -- (state_dict's probe of the schedule at steps 2, 3, ... never ended either)
      local sd = s:state_dict()
      sd.last_epoch = 5
      s:load_state_dict(sd)
    end)
    assert.is_true(ok, err)
    assert.are.equal(2.0 ^ 63, s.T_i)   -- the second cycle, of 2 · 2^62 steps, from step 2
    assert.are.equal(3, s.T_cur)
  end)
end)

describe("a SequentialLR's member with base_lrs written by hand", function()
  -- SequentialLR read the member's base_lrs[i] unchecked: a number was Lua's "attempt to index a number value" at the
  -- library's line, {"0.5"} was coerced and "x" taken. Now the member's own check (its step's), naming it.
  local function seq(member_first)
    local opt = sgd(0.1)
    local a = L.ConstantLR(opt, { factor = 0.5, total_iters = 1 })
    local b = L.CosineAnnealingLR(opt, { T_max = 4 })
    -- (run from step 0: until the milestone 3; entered at the milestone 1)
    return opt, L.SequentialLR(opt, member_first and { b, a } or { a, b }, { member_first and 3 or 1 }), b
  end
  for _, first in ipairs { false, true } do
    it(first and "run from step 0" or "entered at a milestone", function()
      for _, c in ipairs {
        { 5, "base_lrs must be a list of learning rates" }, { "x", "base_lrs must be a list of learning rates" },
        { { "0.5" }, 'base_lrs%[1%] must be a finite number >= 0, got "0.5"' },
        { { -1 }, "base_lrs%[1%] must be a finite number >= 0, got %-1" },
      } do
        local opt, s, b = seq(first)
        s:step()
        local lr, epoch = opt.param_groups[1].lr, s.last_epoch
        b.base_lrs = c[1]
        local ok, err = pcall(function() s:step(); s:step() end)
        assert.is_false(ok)
        local who = "SequentialLR: schedulers%[" .. (first and 1 or 2) .. "%] %(CosineAnnealingLR%): "
        assert.is_truthy(tostring(err):find(who .. c[2]), err)
        assert.is_nil(tostring(err):find("lr_scheduler.lua", 1, true), err)
        assert.are.equal(lr, opt.param_groups[1].lr)   -- the refused step changed nothing
        assert.are.equal(epoch, s.last_epoch)
      end
      local opt, s, b = seq(first)
      b.base_lrs = { 0.2 }   -- a list it takes is its base from the milestone on (past T_max when run from step 0)
      for _ = 1, 6 do s:step() end
      assert.is_true(opt.param_groups[1].lr >= 0)
    end)
  end
end)

describe("a scheduler's state with a setting edited at its top level (torch's place)", function()
  -- torch's state_dict is the scheduler's attributes, its settings among them, and load_state_dict puts them back;
  -- here the settings are the constructor's, and a state whose sd.gamma (sd.factor, sd.mode, ...) was edited loaded
  -- with the setting ignored. Now refused (strict), as a state whose schedule differs; the same value, or strict=false,
  -- loads.
  it("StepLR and MultiStepLR", function()
    local opt = sgd(1)
    local s = L.StepLR(opt, { step_size = 2, gamma = 0.1 })
    s:step()
    local sd = s:state_dict()
    sd.gamma, sd.last_epoch = 0.5, 3
    local ok, err = pcall(s.load_state_dict, s, sd)
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("StepLR:load_state_dict: the state sets gamma = 0.5, this scheduler's is 0.1",
      1, true), err)
    assert.are.equal(1, s.last_epoch)   -- nothing loaded
    sd.gamma = 0.1
    s:load_state_dict(sd)
    assert.are.equal(3, s.last_epoch)
    sd.step_size = 3
    s:load_state_dict(sd, false)   -- strict=false: this one's settings stay
    assert.are.equal(2, s.step_size)
    local m = L.MultiStepLR(sgd(1), { milestones = { 1, 3 } })
    local msd = m:state_dict()
    msd.milestones = { 1, 4 }
    ok, err = pcall(m.load_state_dict, m, msd)
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("the state sets milestones = {1, 4}", 1, true), err)
  end)
  it("ReduceLROnPlateau", function()
    for _, c in ipairs { { "factor", 0.5, "factor = 0.5, this scheduler's is 0.1" },
                         { "mode", "max", 'mode = "max", this scheduler\'s is "min"' },
                         { "patience", 3, "patience = 3, this scheduler's is 0" },
                         { "min_lrs", { 0.5 }, "min_lrs = {0.5}, this scheduler's is {0}" } } do
      local opt = sgd(1)
      local s = L.ReduceLROnPlateau(opt, { patience = 0 })
      s:step(1)
      local sd = s:state_dict()
      sd[c[1]] = c[2]
      local ok, err = pcall(s.load_state_dict, s, sd)
      assert.is_false(ok)
      assert.is_truthy(tostring(err):find("ReduceLROnPlateau:load_state_dict: the state sets " .. c[3], 1, true), err)
      assert.is_true(pcall(s.load_state_dict, s, sd, false))
    end
    local s = L.ReduceLROnPlateau(sgd(1), { patience = 0 })
    local sd = s:state_dict()
    sd.factor = 0.1   -- the scheduler's own value: taken
    s:load_state_dict(sd)
  end)
  it("ReduceLROnPlateau refuses a counter its step cannot add 1 to", function()
    -- (a state of math.maxinteger loaded, and every step after it was refused)
    for _, k in ipairs { "last_epoch", "num_bad_epochs", "cooldown_counter" } do
      local s = L.ReduceLROnPlateau(sgd(1), { patience = 0 })
      s:step(1)
      local sd = s:state_dict()
      sd[k] = math.maxinteger
      local ok, err = pcall(s.load_state_dict, s, sd)
      assert.is_false(ok)
      assert.is_truthy(tostring(err):find("ReduceLROnPlateau:load_state_dict: " .. k .. " must be an integer >= 0 "
        .. "(below 2^63 - 1)", 1, true), err)
      assert.are.equal(1, s.last_epoch)
      s:step(2)
    end
  end)
end)

describe("an optimizer's state whose group option is a table whose __len lies", function()
  -- (the sweep's state_dict key form: load_state_dict copied a table option with table.move(v, 1, #v), 2^62 entries,
  -- and never returned) read raw now, and refused as the constructor refuses a table there
  it("is refused, for each option of SGD and AdamW", function()
    for _, mk in ipairs { function() return fp8.optim.SGD(fp8.nn.Linear(3, 2):parameters(), { lr = 0.1 }) end,
                          function() return fp8.optim.AdamW(fp8.nn.Linear(3, 2):parameters(), { lr = 0.1 }) end } do
      for k in pairs(mk():state_dict().param_groups[1]) do
        if k ~= "params" then
          local opt = mk()
          local sd = opt:state_dict()
          sd.param_groups[1][k] = setmetatable({}, { __len = function() return 1 << 62 end,
                                                     __index = function() return 1 end })
          local ok, err = ends(opt.load_state_dict, opt, sd)
          assert.is_false(ok)
          assert.is_truthy(tostring(err):find(opt.name .. ":load_state_dict: group 1: " .. opt.name .. ": " .. k, 1,
            true), err)
          assert.are.equal(0.1, opt.param_groups[1].lr)
        end
      end
    end
  end)
end)

describe("MSAMPAdamW's load_state_dict with param_groups a table whose __index answers every key", function()
  -- (the sweep's state_dict key form: its scan for an Adam's groups walked the list with ipairs for ever)
  it("is refused", function()
    local opt = require("fp8.optim.msamp_adamw")(fp8.nn.Linear(3, 2):parameters(), { lr = 0.1 })
    local sd = opt:state_dict()
    sd.param_groups = setmetatable({}, { __len = function() return 1 << 62 end, __index = function() return 1 end })
    local ok, err = ends(opt.load_state_dict, opt, sd)
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("MSAMPAdamW:load_state_dict: the state has", 1, true), err)
  end)
end)
