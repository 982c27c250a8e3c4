-- Found on 2026-12-07 (stop 99): the LR schedulers' state_dict()/load_state_dict() read against PyTorch 2.15's, every
-- class: the keys torch saves, the lrs over 6 steps, torch's own state (a plain table of its values) loaded and stepped
-- on, a MultiplicativeLR loaded far along (torch goes on from the group's lr: no replay), a ChainedScheduler's or
-- SequentialLR's members written by hand, and the settings a state carries at its top level. torch's values:
-- /opt/torch2/bin/python scripts/gen_sched2.py > tests/spec/helpers/sched2_torch.lua. docs/robustness.md, "The LR
-- schedulers' state as torch's (stop 99)".
local L = fp8.optim.lr_scheduler
local U = dofile("tests/spec/helpers/util.lua")
local T = dofile("tests/spec/helpers/sched2_torch.lua")

local function sgd(lr) return fp8.optim.SGD(fp8.nn.Linear(1, 1):parameters(), { lr = lr or 1, momentum = 0.9 }) end
local function close(a, b) return a == b or math.abs(a - b) <= 1e-12 * math.max(1, math.abs(b)) end

-- the schedules of scripts/gen_sched2.py, as fp8lab spells them
local MULT = function(t) return 0.5 + (t % 3) * 0.25 end
local LAMB = function(t) return 1.0 / (t + 1) end
local MAKE = {
  StepLR = function(o) return L.StepLR(o, 2, 0.5) end,
  MultiStepLR = function(o) return L.MultiStepLR(o, { 2, 4, 4 }, 0.5) end,
  ConstantLR = function(o) return L.ConstantLR(o, 0.5, 3) end,
  LinearLR = function(o) return L.LinearLR(o, 0.25, 1.0, 4) end,
  ExponentialLR = function(o) return L.ExponentialLR(o, 0.9) end,
  PolynomialLR = function(o) return L.PolynomialLR(o, 6, 2.0) end,
  CosineAnnealingLR = function(o) return L.CosineAnnealingLR(o, 6, 0.1) end,
  CosineAnnealingWarmRestarts = function(o) return L.CosineAnnealingWarmRestarts(o, 3, 2, 0.05) end,
  OneCycleLR = function(o) return L.OneCycleLR(o, { max_lr = 1.0, total_steps = 12 }) end,
  CyclicLR = function(o) return L.CyclicLR(o, { base_lr = 0.1, max_lr = 1.0, step_size_up = 3 }) end,
  LambdaLR = function(o) return L.LambdaLR(o, LAMB) end,
  MultiplicativeLR = function(o) return L.MultiplicativeLR(o, MULT) end,
  ChainedScheduler = function(o) return L.ChainedScheduler({ L.StepLR(o, 2, 0.5), L.MultiplicativeLR(o, MULT) }) end,
  SequentialLR = function(o)
    return L.SequentialLR(o, { L.LinearLR(o, 0.5, 1.0, 2), L.MultiplicativeLR(o, MULT) }, { 3 })
  end,
  ReduceLROnPlateau = function(o) return L.ReduceLROnPlateau(o, { factor = 0.5, patience = 1, cooldown = 1 }) end,
}
local METRICS = { 1.0, 0.9, 0.95, 0.95, 0.97, 0.8, 0.85, 0.9, 0.9, 0.9 }
local function step(s, t) if s.name == "ReduceLROnPlateau" then s:step(METRICS[t]) else s:step() end end
local NAMES = {}
for k in pairs(MAKE) do NAMES[#NAMES + 1] = k end
table.sort(NAMES)

-- torch's keys fp8lab's state has no use for: its own bookkeeping, a form of the mode (mode_worse), the functions it
-- cannot save (lr_lambdas, _scale_fn_custom: None), and T_cur and T_i, which follow from last_epoch here (a state that
-- carries them is checked against them, below)
local NOT_KEPT = { _step_count = true, _is_initial = true, _get_lr_called_within_step = true, mode_worse = true,
  lr_lambdas = true, _scale_fn_custom = true, T_cur = true, T_i = true }

-- a torch value as fp8lab's state holds it: MultiStepLR's Counter as the sorted list of milestones
local function as_ours(k, v)
  if k ~= "milestones" then return v end
  local out = {}
  for m, c in pairs(v) do for _ = 1, c do out[#out + 1] = m end end
  table.sort(out)
  return out
end
local function same(a, b)
  if type(a) == "number" and type(b) == "number" then return close(a, b) end
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

describe("every scheduler's state as torch 2.15's", function()
  it("steps as torch's and saves torch's keys with its values", function()
    for _, n in ipairs(NAMES) do
      local c, o = T[n], sgd(1)
      local s = MAKE[n](o)
      local lrs = { s:get_last_lr()[1] }
      for t = 1, 6 do step(s, t); lrs[#lrs + 1] = s:get_last_lr()[1] end
      for i = 1, #c.lrs do assert.is_true(close(lrs[i], c.lrs[i]), ("%s step %d: %.17g vs %.17g"):format(n, i - 1,
        lrs[i], c.lrs[i])) end
      local sd = s:state_dict()
      for _, k in ipairs(c.keys) do
        if not NOT_KEPT[k] and k ~= "_schedulers" then
          assert.is_true(sd[k] ~= nil, ("%s: torch's key %s is not in the state"):format(n, k))
          assert.is_true(same(sd[k], as_ours(k, c.sd[k])), ("%s: %s"):format(n, k))
        end
      end
      -- a ChainedScheduler's and SequentialLR's members: their states, at torch's last_epoch
      if c.sd._schedulers then
        for j, msd in ipairs(c.sd._schedulers) do
          assert.are.equal(msd.last_epoch, s._schedulers[j].last_epoch, ("%s member %d"):format(n, j))
          assert.are.equal(msd.last_epoch, sd._schedulers[j].last_epoch, ("%s member %d's state"):format(n, j))
        end
      end
    end
  end)

  it("loads torch's state (a plain table of its values) and steps on as torch's", function()
    -- (the optimizer's lr is the saved one, as optimizer:load_state_dict puts it back; the ChainedScheduler's and
    -- SequentialLR's are refused before stop 99 (no last_epoch, no base_lrs in torch's), LambdaLR's and
    -- MultiplicativeLR's for lr_lambdas = {None}, MultiStepLR's for its Counter, CyclicLR's and OneCycleLR's for the
    -- settings they did not keep)
    for _, n in ipairs(NAMES) do
      local c, o = T[n], sgd(1)
      local s = MAKE[n](o)
      o.param_groups[1].lr = c.sd._last_lr[1]
      local ok, err = pcall(s.load_state_dict, s, c.sd)
      assert.is_true(ok, n .. ": " .. tostring(err))
      local r = { s:get_last_lr()[1] }
      for t = 7, 10 do step(s, t); r[#r + 1] = s:get_last_lr()[1] end
      for i = 1, #c.resumed do assert.is_true(close(r[i], c.resumed[i]), ("%s resumed step %d: %.17g vs %.17g"):format(
        n, 5 + i, r[i], c.resumed[i])) end
    end
  end)

  it("round-trips its own state through JSON, as a checkpoint does", function()
    local C = require "fp8._checkpoint"
    for _, n in ipairs(NAMES) do
      local o = sgd(1)
      local s = MAKE[n](o)
      for t = 1, 4 do step(s, t) end
      local sd = C.json_decode(C.json_encode(s:state_dict()), n)
      local o2 = sgd(1)
      local s2 = MAKE[n](o2)
      o2.param_groups[1].lr = o.param_groups[1].lr
      local ok, err = pcall(s2.load_state_dict, s2, sd)
      assert.is_true(ok, n .. ": " .. tostring(err))
      for t = 5, 7 do
        step(s, t); step(s2, t)
        assert.is_true(close(o2.param_groups[1].lr, o.param_groups[1].lr), ("%s step %d"):format(n, t))
      end
    end
  end)
end)

describe("a MultiplicativeLR loaded far along", function()
  -- torch 2.15's get_lr multiplies the group's lr by the lambda; its load_state_dict replays nothing. Here a load
  -- multiplied the lambdas again from step 1: 2^40 steps (hours), for ever at 2^62
  it("goes on from the group's lr, calling its lambda once a step, as torch's", function()
    local calls = 0
    local o = sgd(1)
    local s = L.MultiplicativeLR(o, function(t) calls = calls + 1; return MULT(t) end)
    o.param_groups[1].lr = 0.4
    local sd = s:state_dict()
    sd.last_epoch = T.far.last_epoch
    calls = 0
    local ok, err = U.ends(s.load_state_dict, s, sd)
    assert.is_true(ok, err)
    assert.are.equal(0, calls)
    assert.are.equal(0.4, o.param_groups[1].lr)
    for i = 1, 3 do
      s:step()
      assert.is_true(close(o.param_groups[1].lr, T.far.lrs[i]), ("step %d: %.17g"):format(i, o.param_groups[1].lr))
    end
    assert.are.equal(3, calls)
    -- at math.maxinteger - 1, the largest step can add 1 to
    sd.last_epoch = math.maxinteger - 1
    ok, err = U.ends(s.load_state_dict, s, sd)
    assert.is_true(ok, err)
  end)
  it("and written by hand: its next step goes on from the group's lr, as torch's (its load is that write)", function()
    local calls = 0
    local o = sgd(1)
    local s = L.MultiplicativeLR(o, function(t) calls = calls + 1; return MULT(t) end)
    s:step()
    o.param_groups[1].lr = 0.4
    s.last_epoch = T.far.last_epoch
    calls = 0
    local ok, err = U.ends(s.step, s)
    assert.is_true(ok, err)
    assert.are.equal(1, calls)
    assert.is_true(close(o.param_groups[1].lr, T.far.lrs[1]), tostring(o.param_groups[1].lr))
    s.last_epoch = 1 << 50
    ok, err = U.ends(s.get_lr, s)
    assert.is_true(ok, err)
    -- a ChainedScheduler's member asked for its lr keeps the chain's product
    o = sgd(1)
    local m = L.MultiplicativeLR(o, MULT)
    local c = L.ChainedScheduler({ L.StepLR(o, 2, 0.5), m })
    c:step(); c:step()
    assert.is_true(close(m:get_lr()[1], MULT(1) * MULT(2)))
    c:step()
    assert.is_true(close(o.param_groups[1].lr, 0.5 * MULT(1) * MULT(2) * MULT(3)), tostring(o.param_groups[1].lr))
  end)
  it("and a last_epoch written that step cannot add 1 to is refused, naming it", function()
    -- (math.huge made the product multiply its lambda for ever; a function was Lua's own arithmetic error)
    local s = L.MultiplicativeLR(sgd(1), MULT)
    for _, v in ipairs { math.huge, 0 / 0, -2, "3", U.lying } do
      s.last_epoch = v
      for _, f in ipairs { s.step, s.get_lr } do
        local ok, err = U.ends(f, s)
        assert.is_false(ok)
        assert.truthy(tostring(err):find("MultiplicativeLR:" .. (f == s.step and "step" or "get_lr")
          .. ": last_epoch must be an integer >= -1, got", 1, true), err)
      end
    end
  end)
  it("in a ChainedScheduler and a SequentialLR too", function()
    local o = sgd(1)
    -- (a LinearLR past its end: its factor 1; a StepLR's 0.5^(2^39) is 0 there, where the chain's lr is 0: the closed
    -- form's, torch's chain would scale the group's lr)
    local c = L.ChainedScheduler({ L.LinearLR(o, 0.5, 1.0, 2), L.MultiplicativeLR(o, MULT) })
    o.param_groups[1].lr = 0.4
    local sd = c:state_dict()
    sd.last_epoch = 1 << 40
    local ok, err = U.ends(c.load_state_dict, c, sd)
    assert.is_true(ok, err)
    c:step()
    assert.is_true(close(o.param_groups[1].lr, 0.4 * MULT((1 << 40) + 1)), tostring(o.param_groups[1].lr))
    o = sgd(1)
    local q = L.SequentialLR(o, { L.LinearLR(o, 0.5, 1.0, 2), L.MultiplicativeLR(o, MULT) }, { 3 })
    o.param_groups[1].lr = 0.4
    sd = q:state_dict()
    sd.last_epoch = 1 << 40
    ok, err = U.ends(q.load_state_dict, q, sd)
    assert.is_true(ok, err)
    q:step()
    assert.is_true(close(o.param_groups[1].lr, 0.4 * MULT((1 << 40) - 3 + 1)), tostring(o.param_groups[1].lr))
  end)
  it("is not called by a ChainedScheduler's state_dict", function()
    -- its schedule probe called a member's lambda at 34 steps up to 100,000 (100,000 calls), and the product it left
    -- there made the next step multiply again from step 1
    local calls = 0
    local o = sgd(1)
    local c = L.ChainedScheduler({ L.StepLR(o, 2, 0.5), L.MultiplicativeLR(o, function(t)
      calls = calls + 1; return MULT(t) end) })
    c:step(); c:step()
    calls = 0
    c:state_dict()
    assert.are.equal(0, calls)
    c:step()
    assert.are.equal(1, calls)
  end)
end)

describe("a ChainedScheduler's or SequentialLR's member written by hand", function()
  -- torch's steps each member, whose step reads its last_epoch; here the whole runs the members' schedules from its own
  -- step, and a member's last_epoch (a chain member's base_lrs) written by hand was taken and ignored
  it("is refused at the next step, naming it, and steps again once written back", function()
    local o = sgd(1)
    local a = L.StepLR(o, 2, 0.5)
    local c = L.ChainedScheduler({ a, L.ExponentialLR(o, 0.9) })
    c:step()
    a.last_epoch = 50
    local ok, err = pcall(c.step, c)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("ChainedScheduler:step: schedulers[1].last_epoch was written by hand (50; the "
      .. "chain keeps it at 1", 1, true), err)
    assert.are.equal(1, c.last_epoch)   -- nothing stepped
    a.last_epoch = 1
    c:step()
    assert.are.equal(2, a.last_epoch)
    a.base_lrs = { 7 }
    ok, err = pcall(c.step, c)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("schedulers[1].base_lrs was written by hand ({7}; it held {1})", 1, true), err)
    a.base_lrs = { 1 }
    c:step()
    o = sgd(1)
    local m = L.MultiplicativeLR(o, MULT)
    local q = L.SequentialLR(o, { L.LinearLR(o, 0.5, 1.0, 2), m }, { 3 })
    for _ = 1, 4 do q:step() end
    assert.are.equal(1, m.last_epoch)   -- its step from the milestone, as torch's
    m.last_epoch = 9
    ok, err = pcall(q.step, q)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("SequentialLR:step: schedulers[2].last_epoch was written by hand (9; the "
      .. "SequentialLR keeps it at 1", 1, true), err)
  end)
end)

describe("a state's settings at its top level (torch's place)", function()
  -- torch's load_state_dict puts them back; here they are the constructor's: the same value (in torch's form too)
  -- loads, another is refused naming the key, the state's value and this scheduler's (strict), strict=false keeps
  -- this one's. Until stop 99 a setting kept only in the schedule's closure (MultiStepLR's milestones, CyclicLR's
  -- max_lrs, OneCycleLR's cycle_momentum, ...) was refused whatever its value ('made by its constructor and not kept as
  -- a value'), so torch's own state of the same settings could not load
  local function refused(s, sd, want)
    local ok, err = pcall(s.load_state_dict, s, sd)
    assert.is_false(ok)
    assert.truthy(tostring(err):find(want, 1, true), err)
  end
  it("MultiStepLR's milestones, as torch's Counter or a list in any order", function()
    local o = sgd(1)
    local m = L.MultiStepLR(o, { 4, 2 }, 0.5)
    assert.are.same({ 2, 4 }, m.milestones)
    local sd = m:state_dict()
    sd.last_epoch = 3
    sd.milestones = { [4] = 1, [2] = 1 }
    m:load_state_dict(sd)
    sd.milestones = { 4, 2 }
    m:load_state_dict(sd)
    sd.milestones = { [2] = 1, [4] = 2 }
    refused(m, sd, "the state sets milestones = {2, 4, 4}, this scheduler's is {2, 4}")
    sd.milestones = { [2] = 1, [5] = 1 }
    refused(m, sd, "the state sets milestones = {2, 5}, this scheduler's is {2, 4}")
    m:load_state_dict(sd, false)
    m:step()
    assert.are.equal(0.25, o.param_groups[1].lr)   -- this one's milestones: 2 and 4 passed at step 4
    local shown = m.milestones
    shown[1] = 9   -- (a copy: the schedule and what it shows stay)
    assert.are.same({ 2, 4 }, m.milestones)
  end)
  it("the settings torch saves that were kept only in the closure", function()
    local c = MAKE.CyclicLR(sgd(1))
    local sd = c:state_dict()
    sd.max_lrs = { 2.0 }
    refused(c, sd, "CyclicLR:load_state_dict: the state sets max_lrs = {2.0}, this scheduler's is {1.0}")
    local oc = MAKE.OneCycleLR(sgd(1))
    sd = oc:state_dict()
    sd.cycle_momentum = false
    refused(oc, sd, "the state sets cycle_momentum = false, this scheduler's is true")
    sd = oc:state_dict()
    sd._schedule_phases[1].end_step = 2.0
    refused(oc, sd, "the state sets _schedule_phases = {{end_lr = \"max_lr\", end_momentum = \"base_momentum\", "
      .. "end_step = 2.0")
  end)
  it("a member's in torch's state of a ChainedScheduler, a SequentialLR's milestones", function()
    local c = MAKE.ChainedScheduler(sgd(1))
    local sd = T.ChainedScheduler.sd
    local edited = { _last_lr = sd._last_lr, _schedulers = { {}, sd._schedulers[2] } }
    for k, v in pairs(sd._schedulers[1]) do edited._schedulers[1][k] = v end
    edited._schedulers[1].gamma = 0.1
    refused(c, edited, "ChainedScheduler:load_state_dict: schedulers[1] (StepLR): the state sets gamma = 0.1, this "
      .. "scheduler's is 0.5")
    edited._schedulers = { edited._schedulers[1] }
    refused(c, edited, "ChainedScheduler:load_state_dict: _schedulers must be a list of 2 member states")
    local q = MAKE.SequentialLR(sgd(1))
    local qsd = q:state_dict()
    qsd._milestones = { 4 }
    refused(q, qsd, "SequentialLR:load_state_dict: the state sets _milestones = {4}, this scheduler's is {3}")
  end)
  it("CosineAnnealingWarmRestarts' T_cur and T_i: the step's", function()
    -- torch's state after step(6.5) has T_cur 3.5 at last_epoch 6; here T_cur follows from the position, and such a
    -- state loaded at step 6's T_cur 3 without a word
    local s = MAKE.CosineAnnealingWarmRestarts(sgd(1))
    local sd = {}
    for k, v in pairs(T.CosineAnnealingWarmRestarts.sd) do sd[k] = v end
    s:load_state_dict(sd)   -- (T_cur 3, T_i 6 at step 6: the schedule's)
    sd.T_cur = 3.5
    refused(s, sd, "the state sets T_cur = 3.5, this schedule's at step 6 is 3")
    sd.T_cur, sd.position = 3.5, 6.5
    s:load_state_dict(sd)
    assert.are.equal(3.5, s.T_cur)
  end)
  it("ReduceLROnPlateau's, at torch's top level", function()
    local s = MAKE.ReduceLROnPlateau(sgd(1))
    local sd = s:state_dict()
    assert.are.same({ 0.5, 1, 1, 0 }, { sd.factor, sd.patience, sd.cooldown, sd.default_min_lr })
    sd.default_min_lr = 0.01
    refused(s, sd, "ReduceLROnPlateau:load_state_dict: the state sets default_min_lr = 0.01, this scheduler's is 0")
    -- a setting written by hand as a table whose length lies: state_dict copied it by its length and hung (the API
    -- sweep's seed 1, make test's sample); copied now only where JSON can hold it, read raw
    s.factor = U.lying()
    local ok, got = U.ends(s.state_dict, s)
    assert.is_true(ok, tostring(got))
    assert.is_nil(got.factor)
  end)
end)
