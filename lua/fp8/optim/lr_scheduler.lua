-- lr_scheduler.lua — fp8.optim.lr_scheduler: learning-rate schedules that set each parameter group's
-- lr from its initial lr. LambdaLR is the base (lr = base_lr · f(epoch)); torch's StepLR, MultiStepLR, ConstantLR,
-- LinearLR, ExponentialLR, PolynomialLR, MultiplicativeLR, CosineAnnealingLR, CosineAnnealingWarmRestarts,
-- OneCycleLR, CyclicLR, SequentialLR and ChainedScheduler, warmup_cosine (linear warmup, then cosine decay to
-- min_lr), and transformers' schedules
-- (get_linear/cosine/cosine_with_hard_restarts/polynomial_decay_schedule_with_warmup, get_constant_schedule(_with_
-- warmup), get_inverse_sqrt_schedule, get_scheduler by name) are built on it. Call :step() after
-- optimizer:step(); :get_last_lr() returns the list of current lrs.
-- Every schedule is a closed form of (step, base lr): an lr written into a group by hand lasts until the
-- scheduler's next step, which writes the schedule's value again (torch's chainable StepLR would scale the
-- hand-set lr instead), and two schedulers stepping one optimizer are refused (torch multiplies them; a
-- ChainedScheduler of them does, for the schedules that multiply the lr step by step). A group
-- added to the optimizer after the scheduler was made joins the schedule at its current step (Scheduler:get_lr).
local O = require "fp8.opts"
local M = {}

-- These checks raise at their caller's caller (level 3: a constructor's line in the user's code); one more
-- function between (targs) passes level 4.
local function check_opt(name, opt, level)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    error(("%s: expected an optimizer from fp8.optim, got %s"):format(name, type(opt)), level or 3)
  end
  -- (an optimizer's param_groups is a plain list: a table whose __len lies, 2^62, made ReduceLROnPlateau's loop over
  -- the groups run for ever; sweep 111)
  if getmetatable(opt.param_groups) ~= nil then
    error(("%s: expected an optimizer from fp8.optim, got a table whose param_groups is not a plain list (it has a "
      .. "metatable)"):format(name), level or 3)
  end
  -- (each group a table: {0} gave ReduceLROnPlateau's loop Lua's own 'attempt to index a number value (local 'g')';
  -- sweep 113's --messages)
  for i = 1, rawlen(opt.param_groups) do
    local g = rawget(opt.param_groups, i)
    if type(g) ~= "table" then
      error(("%s: expected an optimizer from fp8.optim, got a table whose param_groups[%d] is a %s, not a group "
        .. "table"):format(name, i, type(g)), level or 3)
    end
  end
end

local function check_keys(name, opts, valid, level)
  if type(opts) ~= "table" then error(("%s: options must be a table, got %s"):format(name, type(opts)), level or 3) end
  O.check(name, opts, valid, level or 3)
end

local function check_rate(name, key, v)
  if type(v) ~= "number" or not (v >= 0 and v < math.huge) then
    error(("%s: %s must be a finite number >= 0, got %s"):format(name, key,
      type(v) == "number" and tostring(v) or ("%s %s"):format(type(v), type(v) == "string" and ("%q"):format(v) or tostring(v))), 3)
  end
end

local function check_int(name, key, v, min, level)
  if math.type(v) ~= "integer" or v < min then
    error(("%s: %s must be an integer >= %d, got %s"):format(name, key, min, tostring(v)), level or 3)
  end
end

-- The constructors take torch's arguments as far as they go here: one past them (StepLR(opt, 2, 0.5, -1)'s
-- last_epoch, ExponentialLR(opt, 0.9, 3)) is refused rather than dropped; trailing nils do not count.
local function no_more(name, takes, ...)
  local n = select("#", ...)
  while n > 0 and select(n, ...) == nil do n = n - 1 end
  if n > 0 then error(O.more_args_message(name, takes, n), 3) end
end

-- torch's positional form of a constructor's options: (opt, a, b, ...) → {names[1] = a, names[2] = b, ...} when the
-- first is not an options table (`is_opts` says whether it is; default: a table), else the table itself with
-- nothing after it; nil for (opt) alone. takes: the two forms, as an arity message names them. level: where errors
-- point (3: the constructor's caller, when it calls this itself).
local function positional(name, first, rest, names, takes, is_opts, level)
  level = level or 3
  local n = rest.n
  while n > 0 and rest[n] == nil do n = n - 1 end
  if first == nil and n == 0 then return nil end   -- (opt) alone: the defaults
  if (is_opts or function(v) return type(v) == "table" end)(first) then
    if n > 0 then error(O.more_args_message(name, takes, n), level) end
    return first
  end
  if n > #names - 1 then error(O.more_args_message(name, takes, n - (#names - 1)), level) end
  local o = { [names[1]] = first }
  for i = 2, #names do o[names[i]] = rest[i - 1] end
  return o
end
-- a list (milestones, schedulers) rather than an options table: its keys are 1..n, or it has none
local function is_list(v) return type(v) == "table" and next(v) ~= nil and rawget(v, 1) ~= nil end
local function is_options(v) return type(v) == "table" and not is_list(v) end

local Scheduler = {}
local resume_products   -- (with load_state_dict, below; step and get_lr call it)
-- sched.last_epoch as a user may have written it, where step() adds 1 to it or get_lr() reads it: a number >= -1 below
-- 2^63 (a float too: torch's takes one). Anything else was Lua's own "attempt to perform arithmetic on a function
-- value" at this file's line, and math.huge made a MultiplicativeLR multiply its lambda for ever (its product from the
-- step it held up to inf; stop 99). Raises at level 3 (the method's caller). stepping: step() adds 1, so the integer
-- 2^63 - 1 is refused there (its + 1 wrapped to -2^63: 'the learning rate inf at step -9223372036854775808', and a
-- StepLR's lr jumped; sweep 112); get_lr reads it as it is.
local function check_epoch(self, fname, stepping)
  local e = rawget(self, "last_epoch")
  if type(e) ~= "number" or not (e >= -1 and e < 2 ^ 63) then
    error(("%s: last_epoch must be an integer >= -1, got %s"):format(fname, O.got(e)), 3)
  end
  if stepping and e == math.maxinteger and math.type(e) == "integer" then
    error(("%s: last_epoch must be below 2^63 - 1 to step (the next step, 2^63, is past Lua's integers), got %s")
      :format(fname, O.got(e)), 3)
  end
end
-- A method called with another value as its self (LRScheduler.step(t), t not a scheduler): named, where Lua's own
-- "attempt to concatenate a nil value" at this file's line was the message (sweep 112). Raises at level 3.
local function check_sched(self, fname)
  if type(self) ~= "table" or type(rawget(self, "_lr_fn")) ~= "function" then
    error(("LRScheduler:%s: expected a scheduler (sched:%s(...)), got %s"):format(fname, fname, O.got(self)), 3)
  end
end
local Plateau = {}   -- ReduceLROnPlateau's class (below): not a closed form
-- torch's schedulers keep their settings as attributes their get_lr reads, so a loop may change one mid-run
-- (sched.T_max = 200 to train longer, sched.gamma = 0.5). Each schedule here is a closed form its constructor made,
-- so such a write was taken and ignored without a word: it is refused, naming what to do. Each class refuses its own
-- settings: the attributes torch's class of that name reads, and its constructor's options; any other name is a
-- field as in torch (a LambdaLR's sched.total_steps that its lambda reads, which a list of every class's names
-- refused from stop 94 until review 10b). The settings a scheduler shows (StepLR's step_size and gamma, ...,
-- CosineAnnealingWarmRestarts' T_0, OneCycleLR's total_steps) are read from _settings.
local TRANSFORMERS = "num_warmup_steps num_training_steps num_cycles lr_end power timescale lr_lambdas"
local SETTINGS_OF = {
  LambdaLR = "lr_lambdas", MultiplicativeLR = "lr_lambdas", StepLR = "step_size gamma",
  MultiStepLR = "milestones gamma", ConstantLR = "factor total_iters",
  LinearLR = "start_factor end_factor total_iters", ExponentialLR = "gamma", PolynomialLR = "total_iters power",
  CosineAnnealingLR = "T_max eta_min", CosineAnnealingWarmRestarts = "T_0 T_i T_mult eta_min T_cur",
  OneCycleLR = "total_steps epochs steps_per_epoch max_lr max_lrs pct_start anneal_strategy anneal_func "
    .. "cycle_momentum use_beta1 base_momentum max_momentum div_factor final_div_factor three_phase "
    .. "_schedule_phases _anneal_func_type",
  CyclicLR = "base_lr max_lr max_lrs step_size_up step_size_down total_size step_ratio mode gamma scale_fn "
    .. "scale_mode cycle_momentum use_beta1 base_momentum max_momentum base_momentums max_momentums",
  SequentialLR = "schedulers milestones", ChainedScheduler = "schedulers",
  warmup_cosine = "warmup_steps total_steps min_lr",
  get_linear_schedule_with_warmup = TRANSFORMERS, get_cosine_schedule_with_warmup = TRANSFORMERS,
  get_constant_schedule = TRANSFORMERS, get_constant_schedule_with_warmup = TRANSFORMERS,
  get_polynomial_decay_schedule_with_warmup = TRANSFORMERS,
  get_cosine_with_hard_restarts_schedule_with_warmup = TRANSFORMERS, get_inverse_sqrt_schedule = TRANSFORMERS,
}
for name, list in next, SETTINGS_OF do
  local set = {}
  for k in list:gmatch("%S+") do set[k] = true end
  SETTINGS_OF[name] = set
end
local NONE = {}
local function settings_of(t) return SETTINGS_OF[rawget(t, "name")] or NONE end
-- CosineAnnealingWarmRestarts' T_cur and T_i are where the schedule is, not settings: step(epoch) moves them, they
-- read as torch's (the steps since the last restart, the cycle's length) from the position (_cycle)
local POSITION = { T_cur = true, T_i = true }
function Scheduler.__index(t, k)
  local v = Scheduler[k]
  if v ~= nil then return v end
  local cycle = POSITION[k] and rawget(t, "_cycle")
  if cycle then
    local cur, Ti = cycle(rawget(t, "_pos") or rawget(t, "last_epoch"))
    if k == "T_cur" then return cur end
    return Ti
  end
  local st = rawget(t, "_settings")
  if st ~= nil then
    local v = st[k]
    if type(v) ~= "table" then return v end
    -- a copy (OneCycleLR's phases: each one's too): a list read and written into (sched.milestones[1] = 9) would
    -- change what the scheduler shows and load_state_dict compares, not its schedule
    local out = {}
    for key, x in next, v do
      if type(x) == "table" then
        local c = {}
        for kk, xx in next, x do c[kk] = xx end
        x = c
      end
      out[key] = x
    end
    return out
  end
  return nil
end
function Scheduler.__newindex(t, k, v)
  if settings_of(t)[k] then
    local name = rawget(t, "name")
    if POSITION[k] then
      error(("%s: %s follows from the step (torch's step() updates it, its get_lr reads it): sched:step(epoch) goes "
        .. "to a step (a fraction too), a new %s with other T_0 or T_mult makes other cycles"):format(name, k, name), 2)
    end
    error(("%s: %s is set when the scheduler is made: each schedule here is a closed form its constructor "
      .. "makes (torch's get_lr reads the attribute at every step); make a new %s with the value, and "
      .. "load_state_dict(old:state_dict(), false) to go on from the old one's step"):format(name, tostring(k), name), 2)
  end
  rawset(t, k, v)
end
-- Both classes say they are schedulers (read through an Accelerator's wrapper too): M._is_scheduler.
Scheduler._is_lr_scheduler = true
Plateau._is_lr_scheduler = true
Scheduler.__name = "optim.lr_scheduler"   -- help(sched) finds the schedulers' entry by it
-- The fields of a schedule that is the base times a factor of the step alone (lr_fn(t, base) = base · f(t)), whose
-- factors ChainedScheduler multiplies as torch's chain of recursive steps does (and which SequentialLR applies to the
-- groups' initial_lr when it runs the schedule from step 0, as torch's recursive steps do).
local function chain(settings)
  local f = { _chainable = true }
  for k, v in next, settings do f[k] = v end
  return f
end

-- new(name, opt, lr_fn, [last_epoch [, fractional [, after_step]]]) — lr_fn(t, base_lr, group_index) → lr. Sets
-- epoch 0's lr now, as PyTorch's constructors do. fractional: step(epoch) also takes a fraction, kept as the
-- position t that lr_fn sees (last_epoch is its floor). after_step(self, t): run after each step has written t's
-- lrs (OneCycleLR's momentum). fields: set on the scheduler before that first step (T_0, total_steps, ...; base_lrs:
-- its own, CyclicLR's base_lr, where torch's are not the groups' initial_lr). A group without an initial_lr gets
-- its lr as one (torch's setdefault: the first scheduler's base stays).
-- How torch's SequentialLR runs a scheduler, read there: fields _seq_first(sc, u, base0, i, own) (its lr at its step
-- u when it runs from step 0, started on the groups' initial_lr base0; own its base_lrs[i], checked) and
-- _seq_enter(sc, u, base, i, prev) (from a milestone on; base its own, prev() the lr before the milestone); without
-- them, a chainable schedule (_chainable: torch's steps multiply the group's lr) scales base0, and any schedule runs
-- from its own base after a milestone.
-- _no_epoch: why step(epoch) is refused.
local function new(name, opt, lr_fn, last_epoch, fractional, after_step, fields)
  check_opt(name, opt)
  local self = setmetatable({ name = name, optimizer = opt, _lr_fn = lr_fn, base_lrs = {},
    _fractional = fractional or nil, _after_step = after_step }, Scheduler)
  for k, v in next, (fields or {}) do
    if settings_of(self)[k] then   -- shown, not written (Scheduler.__newindex)
      local st = rawget(self, "_settings") or {}
      st[k] = v
      rawset(self, "_settings", st)
    else
      rawset(self, k, v)
    end
  end
  for i, g in ipairs(opt.param_groups) do
    g.initial_lr = g.initial_lr or g.lr
    if self.base_lrs[i] == nil then self.base_lrs[i] = g.initial_lr end
  end
  self.last_epoch = (last_epoch or -1)
  local ok, err = pcall(self.step, self)
  if not ok then error(err, 2) end   -- reached by tail calls: level 2 is the constructor's caller
  return self
end

-- sched.base_lrs as a user may write it (torch's schedulers read the field; CyclicLR's since stop 95), checked where it
-- is read: a list of finite numbers >= 0, one per group (a group added since joins in get_lr), read raw. Anything
-- else was Lua's own error ("attempt to get length of a number value", "attempt to sub a 'number' with a 'string'"),
-- a negative lr in the message, or, for a table whose __index answers every key, a step that never ended (ipairs
-- walked it for ever; the sweep's lying list, stop 97). Raises at level 0 with fname's name. The one check of such a
-- list (key: base_lrs, or ReduceLROnPlateau's min_lrs for its state): until stop 98 ReduceLROnPlateau's state_dict
-- checked its base_lrs by another rule (numbers of any sign, in other words), and saved a base of -1 or NaN.
local function lr_list(self, key, fname)
  local bl = rawget(self, key)
  if type(bl) ~= "table" then
    error(("%s: %s must be a list of learning rates (finite numbers >= 0, one per parameter group), got %s")
      :format(fname, key, O.got(bl)), 0)
  end
  for i = 1, rawlen(bl) do
    local v = rawget(bl, i)
    if type(v) ~= "number" or not (v >= 0 and v < math.huge) then
      error(("%s: %s[%d] must be a finite number >= 0, got %s"):format(fname, key, i, O.got(v)), 0)
    end
  end
  return bl
end
local function base_list(self, fname) return lr_list(self, "base_lrs", fname) end

function Scheduler:get_lr()
  -- A group added since (opt:add_param_group) joins. In a schedule that multiplies the lr step by step (torch's
  -- chainable forms: ConstantLR, LinearLR, ExponentialLR, StepLR, MultiStepLR, PolynomialLR, MultiplicativeLR, and a
  -- ChainedScheduler of them) its lr is the lr of the step the scheduler was at (t0), which torch's later steps scale
  -- by f(t)/f(t0): its base is lr / f(t0) (a StepLR(2, 0.5) group added with 0.2 at step 3 has 0.1 at step 4, as
  -- torch's; taken as the base it had 0.05, gamma applied for the steps before it joined); so too in a SequentialLR
  -- while such a schedule runs (torch's steps it). In the others (LambdaLR, the cosines, OneCycleLR, CyclicLR,
  -- transformers'), whose torch forms fail on a group added later, its lr is its base.
  -- A group that joins a PolynomialLR or LinearLR past its end, where the factor is 0 (end_factor=0), keeps its lr:
  -- torch's forms return the group's lr unchanged past total_iters (it had base · 0 = 0 before review 10b); its index
  -- is in _kept (state_dict's kept_groups), where a factor of 0 gives it its base (in a ChainedScheduler such a
  -- member's factor counts as 1: lr_fn's 4th argument, and the other members scale it, as torch's chain).
  local bl = base_list(self, self.name)
  -- (called by itself at a last_epoch written by hand: a MultiplicativeLR's product is the groups' lr there, as step's)
  if rawget(self, "_stepping_from") == nil then check_epoch(self, self.name .. ":get_lr") end
  local at = self.last_epoch
  if rawget(self, "_stepping_from") == nil and type(at) == "number" and at >= 0 and at < math.huge
      and rawget(self, "_stepped_at") ~= at then
    resume_products(self)
  end
  local t0 = rawget(self, "_stepping_from") or self.last_epoch
  for i = rawlen(bl) + 1, #self.optimizer.param_groups do
    local g = self.optimizer.param_groups[i]
    g.initial_lr = g.initial_lr or g.lr
    local base = g.initial_lr
    local at = rawget(self, "_phase_at")   -- (SequentialLR: the schedule that runs step t0)
    local phase = at and t0 >= 0 and at(t0) or self
    if (rawget(phase, "_chainable") or rawget(self, "_chained")) and t0 >= 0 and type(g.lr) == "number" then
      local ok, f = pcall(self._lr_fn, t0, 1, i)
      if not ok then error(f, 0) end   -- (MultiplicativeLR's list of lambdas has none for it)
      -- (a factor of 0 leaves nothing to scale: the lr is the base then)
      local keeps = f == 0 and rawget(phase, "_keeps_past_end")
      if f == 0 and rawget(self, "_chained") then   -- (a member past its end: the others scale the group)
        local fk = self._lr_fn(t0, 1, i, true)
        if fk ~= 0 then keeps, f = true, fk end
      end
      if type(f) == "number" and f > 0 and f < math.huge then base = g.lr / f else base = g.lr end
      if keeps then
        local kept = rawget(self, "_kept") or {}
        kept[i] = true
        rawset(self, "_kept", kept)
      end
    end
    rawset(bl, i, base)
  end
  local out = {}
  local t = rawget(self, "_pos") or self.last_epoch
  local kept = rawget(self, "_kept") or {}
  local chained = rawget(self, "_chained")
  for i = 1, rawlen(bl) do
    local base = rawget(bl, i)
    local lr = self._lr_fn(t, base, i, kept[i])
    if lr == 0 and kept[i] and not chained then lr = base end
    if type(lr) ~= "number" or not (lr >= 0 and lr < math.huge) then
      error(("%s: the schedule gave group %d the learning rate %s at step %s (expected a finite number >= 0)"):format(
        self.name, i, tostring(lr), tostring(t)), 0)
    end
    out[i] = lr
  end
  return out
end

-- A SequentialLR's or ChainedScheduler's members: torch's steps each one (its last_epoch moves: a ChainedScheduler's
-- members are at its step, a SequentialLR's member at its own step from its milestone, one it has left at its last
-- step, one it has not reached at -1), and a member's step reads its last_epoch. Here the whole runs the members'
-- schedules from its own step, so a member's last_epoch (and, in a ChainedScheduler, whose members scale the chain's
-- own base_lrs, a member's base_lrs) written by hand was taken and ignored until stop 99. sync_members sets them as
-- torch's are after each step and load; check_members refuses a step after one was written (torch's chain would go on
-- from the written step), naming it and what it holds, before anything changes.
local function member_epochs(self, t)
  local list, out = rawget(self, "_schedulers"), {}
  if rawget(self, "_chained") then
    for j = 1, #list do out[j] = t end
    return out
  end
  local ms = rawget(self, "_milestones")
  local _, _, k = rawget(self, "_member_at")(math.max(t, 0))
  for j = 1, #list do
    local start = j > 1 and ms[j - 1] or 0
    if j - 1 < k then out[j] = math.max(ms[j] - 1 - start, -1)
    elseif j - 1 == k then out[j] = t - start
    else out[j] = -1 end
  end
  return out
end
local function sync_members(self)
  local list = rawget(self, "_schedulers")
  if not list then return end
  local epochs, state = member_epochs(self, self.last_epoch), {}
  for j, sc in ipairs(list) do
    rawset(sc, "last_epoch", epochs[j])
    rawset(sc, "_stepped_at", epochs[j])   -- (a member's own get_lr: no written last_epoch to resume from)
    local bl = rawget(sc, "base_lrs")
    state[j] = { epochs[j], type(bl) == "table" and table.move(bl, 1, rawlen(bl), 1, {}) or bl }
  end
  rawset(self, "_member_state", state)
end
local function check_members(self, fname)
  local state = rawget(self, "_member_state")
  if not state then return nil end
  local whole = rawget(self, "_chained") and "the chain" or "the SequentialLR"
  for j, sc in ipairs(rawget(self, "_schedulers")) do
    local st, e = state[j], rawget(sc, "last_epoch")
    if e ~= st[1] then
      return ("%s: schedulers[%d].last_epoch was written by hand (%s; %s keeps it at %d, %s): %s runs its members' "
        .. "schedules from its own step (torch's member would step on from the written one); write it back, or load a "
        .. "state into %s (load_state_dict) to move it"):format(fname, j, O.got(e), whole, st[1],
        rawget(self, "_chained") and "its own step" or "the member's step from its milestone", whole, whole)
    end
    if rawget(self, "_chained") then
      -- (by value: a list written back, or the same values in a new list, is the member's)
      local bl = rawget(sc, "base_lrs")
      local same = type(bl) == "table" and type(st[2]) == "table" and rawlen(bl) == rawlen(st[2])
      for i = 1, same and rawlen(bl) or 0 do same = same and rawget(bl, i) == st[2][i] end
      same = same or (type(bl) ~= "table" and bl == st[2])
      if not same then
        local function text(v)   -- (the list's first 8 raw entries)
          if type(v) ~= "table" then return O.got(v) end
          local parts = {}
          for i = 1, math.min(rawlen(v), 8) do parts[i] = tostring(rawget(v, i)) end
          return "{" .. table.concat(parts, ", ") .. (rawlen(v) > 8 and ", ...}" or "}")
        end
        return ("%s: schedulers[%d].base_lrs was written by hand (%s; it held %s): the chain scales its own base_lrs "
          .. "(sched.base_lrs), as torch's chained steps scale the groups' lr and read no member's base_lrs; write the "
          .. "chain's base_lrs"):format(fname, j, text(bl), text(st[2]))
      end
    end
  end
end

-- step([epoch]): advance one step (or jump to `epoch`) and write the new lrs into the groups.
function Scheduler:step(epoch)
  check_sched(self, "step")
  local member_edit = check_members(self, rawget(self, "name") .. ":step")
  if member_edit then error(member_edit, 2) end
  local prev, prev_pos = self.last_epoch, rawget(self, "_pos")
  -- a last_epoch written by hand since the last step or load (sched.last_epoch = 10^12): a MultiplicativeLR goes on
  -- from the groups' lr there, as after a load (torch's step multiplies the group's lr by the lambda at the written
  -- step + 1; here it multiplied the lambdas from step 1 to it, for hours)
  if type(prev) == "number" and prev >= 0 and prev < math.huge and rawget(self, "_stepped_at") ~= prev then
    resume_products(self)
  end
  local no_epoch = rawget(self, "_no_epoch")   -- why this scheduler's step takes no epoch
  if epoch ~= nil and no_epoch then
    error(("%s:step: takes no epoch, got %s: %s"):format(self.name, O.got(epoch), no_epoch), 2)
  end
  if epoch ~= nil and rawget(self, "_fractional") then
    if type(epoch) ~= "number" or not (epoch >= 0 and epoch < 2 ^ 53) then
      error(("%s:step: epoch must be a number >= 0, got %s"):format(self.name, O.got(epoch)), 2)
    end
    self.last_epoch, self._pos = math.tointeger(math.floor(epoch)) or math.floor(epoch), epoch
  elseif epoch ~= nil then
    check_int(self.name .. ":step", "epoch", epoch, 0)
    self.last_epoch = epoch
  else
    check_epoch(self, self.name .. ":step", true)
    self.last_epoch = self.last_epoch + 1
    if prev_pos ~= nil then self._pos = prev_pos + 1 end
  end
  -- Two schedulers stepping one optimizer: torch's chainable ones multiply their effects (warmup times decay), but
  -- each schedule here is a closed form of the step and base lr, so the last to step would win without a word.
  -- The optimizer remembers the scheduler that stepped it last; another one stepping it is refused (a scheduler
  -- made to replace one, which is not stepped again, is fine).
  local opt = self.optimizer
  local other = rawget(opt, "_lr_scheduler")
  if other ~= nil and other ~= self and prev >= 0 then
    self.last_epoch, self._pos = prev, prev_pos
    error(("%s:step: this optimizer is also stepped by another scheduler (%s); torch would multiply the two "
      .. "schedules, fp8lab's are closed forms and the last to step would win: use one scheduler (a ChainedScheduler "
      .. "of the two, their product; a SequentialLR of the two, one after the other; a LambdaLR of their product; or "
      .. "warmup_cosine for a warmup then a decay)")
      :format(self.name, other.name), 2)
  end
  self._stepping_from = prev   -- (get_lr: the step a group added since joins at)
  local ok, lrs = pcall(self.get_lr, self)
  self._stepping_from = nil
  if not ok then self.last_epoch, self._pos = prev, prev_pos; error(lrs, 2) end   -- the groups keep their lrs
  -- a group added while get_lr ran (by an lr_lambda) has no lr in lrs: it keeps its own, as torch's zip leaves it, and
  -- joins at the next step (writing nil erased it, and the optimizer's step then failed on it)
  for i, g in ipairs(opt.param_groups) do if lrs[i] ~= nil then g.lr = lrs[i] end end
  self._last_lr = lrs
  rawset(opt, "_lr_scheduler", self)
  rawset(self, "_stepped_at", self.last_epoch)
  sync_members(self)
  local after = rawget(self, "_after_step")
  if after then after(self, rawget(self, "_pos") or self.last_epoch) end
  return self
end

function Scheduler:get_last_lr()
  -- (read raw, as base_list: a _last_lr whose __len lies made table.move run for ever; stop 97)
  local last = rawget(self, "_last_lr")
  if type(last) ~= "table" then
    error(("%s:get_last_lr: _last_lr must be a list of learning rates, got %s"):format(rawget(self, "name"),
      O.got(last)), 2)
  end
  return table.move(last, 1, rawlen(last), 1, {})
end

-- The schedule itself, for a state to be checked against: the lr factor its function gives group 1 on base 1 (on
-- base_lr's first entry for CyclicLR, whose lr is not its base times a factor: _probe_base) at these steps (false
-- where it refuses the step: OneCycleLR past its total). torch's state_dict carries the
-- settings (gamma, step_size, T_max, ...) and load_state_dict puts them back; here they live in the schedule's
-- closure, so a state records what they give and a scheduler whose settings give other lrs refuses it (it kept
-- its own schedule and overwrote the saved lr without a word). A user's lambdas (LambdaLR, MultiplicativeLR) are
-- not called: the name alone is compared there, as in a ChainedScheduler or SequentialLR that holds one (until stop 99
-- such a chain's state_dict called a MultiplicativeLR member's lambda 100,000 times, steps torch never calls it at,
-- and the product it left at step 100,000 made the next step multiply again from step 1).
local PROBES = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 16, 20, 25, 30, 32, 40, 50, 64, 75, 100, 128, 150, 200, 256,
                 300, 500, 750, 1000, 2000, 5000, 10000, 100000 }
local USER_FN = { LambdaLR = true, MultiplicativeLR = true }
local function schedule_probe(self)
  if USER_FN[self.name] then return nil end
  for _, sc in ipairs(rawget(self, "_schedulers") or {}) do
    if USER_FN[rawget(sc, "name")] then return nil end
  end
  local out = {}
  for k, t in ipairs(PROBES) do
    local ok, lr = pcall(self._lr_fn, t, rawget(self, "_probe_base") or 1, 1)
    out[k] = ok and type(lr) == "number" and lr == lr and lr or false
  end
  return out
end

-- kept_groups: the groups that joined a PolynomialLR or LinearLR past its end and keep their lr (get_lr), when any
local function kept_list(self, bl)
  local kept, list = rawget(self, "_kept"), {}
  for i = 1, rawlen(bl) do if kept and kept[i] then list[#list + 1] = i end end
  return #list > 0 and list or nil
end

-- A value JSON can hold (a checkpoint writes the state in JSON): a string, a boolean, a finite number, or a table of
-- them two levels deep (a list, OneCycleLR's phases)
local function storable(v, depth)
  local tv = type(v)
  if tv == "string" or tv == "boolean" then return true end
  if tv == "number" then return v == v and v > -math.huge and v < math.huge end
  if tv ~= "table" or (depth or 0) > 1 then return false end
  for _, x in next, v do if not storable(x, (depth or 0) + 1) then return false end end
  return true
end

-- torch's keys besides (stop 99): the settings as torch's attributes (StepLR's step_size and gamma, MultiStepLR's
-- milestones as a sorted list, OneCycleLR's _schedule_phases, CyclicLR's max_lrs, ...: what the scheduler shows, where
-- JSON can hold it), a SequentialLR's _milestones, a SequentialLR's or ChainedScheduler's _schedulers (its members'
-- states) and _last_lr. load_state_dict compares the settings (strict) and reads no _last_lr (it writes the step's lrs
-- again). Not kept: CosineAnnealingWarmRestarts' T_cur and T_i, which follow from last_epoch and position (a state of
-- torch's that has them is checked against them: load_state_dict), and torch's own bookkeeping (_step_count,
-- _is_initial, _get_lr_called_within_step). setting_keys is below.
local setting_keys
function Scheduler:state_dict()
  check_sched(self, "state_dict")
  local bl = base_list(self, self.name .. ":state_dict")
  local sd = { last_epoch = self.last_epoch, base_lrs = table.move(bl, 1, rawlen(bl), 1, {}),
    position = rawget(self, "_pos"), name = self.name, schedule = schedule_probe(self),
    kept_groups = kept_list(self, bl), _last_lr = self:get_last_lr() }
  local keys, get = setting_keys(self)
  for _, k in ipairs(keys) do
    local v = get(k)
    if v ~= nil and storable(v) then sd[k] = v end
  end
  local list = rawget(self, "_schedulers")
  if list then
    sd._schedulers = {}
    for j, sc in ipairs(list) do sd._schedulers[j] = sc:state_dict() end
  end
  return sd
end

-- Why a state from state_dict() is not this scheduler's (another class, or settings that give other lrs), or nil
local function other_schedule(self, sd)
  if sd.name ~= nil and sd.name ~= self.name then
    return ("the state is a %s's, this scheduler is a %s"):format(tostring(sd.name), self.name)
  end
  local mine = sd.schedule ~= nil and schedule_probe(self)
  if not mine or type(sd.schedule) ~= "table" then return nil end
  for k, t in ipairs(PROBES) do
    local a, b = rawget(sd.schedule, k), mine[k]
    local same = a == b or (type(a) == "number" and type(b) == "number"
      and math.abs(a - b) <= 1e-12 * math.max(math.abs(a), math.abs(b)))
    if not same then
      return ("its settings give another schedule: at step %d the lr factor was %s, this one gives %s"):format(t,
        tostring(a), tostring(b))
    end
  end
end

M._other_schedule = function(sched, sd)
  -- a ReduceLROnPlateau: its settings (M._plateau_other, defined with the class below)
  if M._is_plateau(sched) and type(sd) == "table" then return M._plateau_other(sched, sd) end
  -- (a Scheduler, not a Plateau: its schedule function; getmetatable answers the class's torch name, not Scheduler)
  if type(sched) ~= "table" or type(rawget(sched, "_lr_fn")) ~= "function" or type(sd) ~= "table" then return nil end
  return other_schedule(sched, sd)
end

-- A setting as a state may carry it at its top level, torch's place (torch's state_dict is the scheduler's
-- attributes, settings among them, and its load_state_dict puts them back): the same value as this scheduler's (a
-- number within 1e-12 of it, a list of such), or the key absent. Until sweep 108 a state edited before
-- load_state_dict (sd.gamma = 0.5, sd.factor = 0.5 for a ReduceLROnPlateau) loaded and its setting was ignored.
-- Tables (a list, OneCycleLR's phases: a list of maps) are the same key by key, read raw, two levels deep.
local function same_setting(a, b, depth)
  if a == b then return true end
  if type(a) == "number" and type(b) == "number" then
    return math.abs(a - b) <= 1e-12 * math.max(math.abs(a), math.abs(b))
  end
  depth = depth or 0
  if type(a) ~= "table" or type(b) ~= "table" or depth > 1 then return false end
  local n = 0
  for k, v in next, a do
    n = n + 1
    if n > 4096 or not same_setting(v, rawget(b, k), depth + 1) then return false end
  end
  for _ in next, b do
    n = n - 1
    if n < 0 then return false end
  end
  return n == 0
end
-- A setting in torch's form as this scheduler shows it: MultiStepLR's milestones as torch's Counter (a map of
-- milestone → count, what its state_dict holds, as a plain table) or a list in any order, as the sorted list; v itself
-- where it is neither (it differs then)
local function setting_value(k, v)
  if k ~= "milestones" or type(v) ~= "table" then return v end
  local out = {}
  if rawlen(v) == 0 then
    for m, c in next, v do
      if math.type(m) ~= "integer" or math.type(c) ~= "integer" or c < 1 or #out + c > 4096 then return v end
      for _ = 1, c do out[#out + 1] = m end
    end
  else
    for i = 1, rawlen(v) do
      local m = rawget(v, i)
      if math.type(m) ~= "integer" or i > 4096 then return v end
      out[i] = m
    end
  end
  table.sort(out)
  return out
end
-- Why sd's top-level settings (keys, the class's settings) are not self's (get(k): self's value), or nil
local function other_settings(sd, keys, get)
  local function show(v, depth)
    if type(v) == "string" then return ("%q"):format(v) end
    if type(v) == "table" and (depth or 0) < 2 then
      local parts = {}
      if rawlen(v) == 0 and next(v) ~= nil then   -- a map (torch's Counter, a phase): its keys sorted
        local ks = {}
        for key in next, v do
          ks[#ks + 1] = key
          if #ks > 8 then break end
        end
        table.sort(ks, function(x, y) return tostring(x) < tostring(y) end)
        for i = 1, math.min(#ks, 8) do
          local key = ks[i]
          parts[i] = (type(key) == "string" and key or ("[" .. tostring(key) .. "]")) .. " = "
            .. show(rawget(v, key), (depth or 0) + 1)
        end
        return "{" .. table.concat(parts, ", ") .. (#ks > 8 and ", ...}" or "}")
      end
      for i = 1, math.min(rawlen(v), 8) do parts[i] = show(rawget(v, i), (depth or 0) + 1) end
      return "{" .. table.concat(parts, ", ") .. (rawlen(v) > 8 and ", ...}" or "}")
    end
    return O.got(v)
  end
  for _, k in ipairs(keys) do
    local v, mine = setting_value(k, rawget(sd, k)), get(k)
    -- torch's lr_lambdas of plain functions, which it cannot save: a list of None (an empty table), nothing to compare
    if k == "lr_lambdas" and type(v) == "table" and next(v) == nil then v = nil end
    if v ~= nil and not same_setting(v, mine) then
      return ("the state sets %s = %s, this scheduler's is %s"):format(k, show(v), mine == nil
        and "made by its constructor and not kept as a value" or show(mine))
    end
  end
end

-- After a load at step t, the schedules whose lr is no closed form of the step (a MultiplicativeLR, alone or in a
-- ChainedScheduler, or running step t in a SequentialLR: members with _seed_factor) go on from each group's lr, as
-- torch's: its MultiplicativeLR.get_lr multiplies group["lr"] by the lambda, and load_state_dict replays nothing (the
-- optimizer's state, loaded first as Accelerator.load_state does, put the saved lr back). The first such schedule's
-- product at its step is set so that the schedule gives the group's lr at t (the others' products are 1 there); a
-- group whose lr the schedule cannot give from a product (its lr or the rest 0, not a number) starts at 1. Until
-- stop 99 a load multiplied the lambdas again from step 1: a state of last_epoch 2^40 took hours (for ever at 2^62),
-- a length a file chose.
function resume_products(self)
  local t = self.last_epoch
  local targets = {}
  if rawget(self, "_seed_factor") then
    targets[1] = { self, t }
  elseif rawget(self, "_chained") then
    for _, sc in ipairs(rawget(self, "_schedulers")) do
      if rawget(sc, "_seed_factor") then targets[#targets + 1] = { sc, t } end
    end
  elseif rawget(self, "_member_at") and t >= 0 then
    local sc, u = rawget(self, "_member_at")(t)
    if rawget(sc, "_seed_factor") then targets[1] = { sc, u } end
  end
  if #targets == 0 then return end
  local bl = rawget(self, "base_lrs")
  for i, g in ipairs(self.optimizer.param_groups) do
    for _, tg in ipairs(targets) do rawget(tg[1], "_seed_factor")(tg[2], i, 1) end
    local base = rawget(bl, i)
    if targets[1][2] >= 1 and type(g.lr) == "number" and g.lr >= 0 and g.lr < math.huge and type(base) == "number" then
      local ok, l1 = pcall(self._lr_fn, t, base, i)
      if ok and type(l1) == "number" and l1 > 0 and l1 < math.huge then
        rawget(targets[1][1], "_seed_factor")(targets[1][2], i, g.lr / l1)
      end
    end
  end
end

-- The settings keys a state's top level is compared on (the class's, but CosineAnnealingWarmRestarts' position), and
-- this scheduler's value of one (a SequentialLR's milestones: torch's key _milestones)
function setting_keys(self)
  local keys = {}
  for k in next, (settings_of(self)) do if not POSITION[k] then keys[#keys + 1] = k end end
  if rawget(self, "_member_at") then keys[#keys + 1] = "_milestones" end
  table.sort(keys)
  return keys, function(k) if k == "_milestones" then return rawget(self, k) end return self[k] end
end

-- torch's state of a ChainedScheduler or SequentialLR ({_schedulers = {member states}, _last_lr, [last_epoch,
-- _milestones]}: its members' states, no base_lrs, and a ChainedScheduler's no last_epoch), as a plain table of its
-- values: a copy with last_epoch and base_lrs taken from the first member's state where the top level has none
-- (torch's members share the groups' initial_lr; a chain's members are at its step). Each member's state must be
-- one of that member's settings (strict; as a top-level setting, refused naming schedulers[j] and the key). Until
-- stop 99 torch's state of either was refused for the base_lrs or last_epoch it does not have. Errors at level 3.
local function whole_state(self, sd, strict)
  local list, states = rawget(self, "_schedulers"), rawget(sd, "_schedulers")
  local fname = self.name .. ":load_state_dict"
  local ok = type(states) == "table" and rawlen(states) == #list
  for j = 1, ok and #list or 0 do ok = ok and type(rawget(states, j)) == "table" end
  if not ok then
    error(("%s: _schedulers must be a list of %d member states (torch's state_dict of each), got %s"):format(fname,
      #list, O.got(states)), 3)
  end
  if strict ~= false then
    for j, sc in ipairs(list) do
      local keys, get = setting_keys(sc)
      local why = other_settings(rawget(states, j), keys, get)
      if why then
        error(("%s: schedulers[%d] (%s): %s (torch puts the saved settings back; here they are the constructor's: "
          .. "make the scheduler as it was saved, or pass strict=false to keep this one's)"):format(fname, j, sc.name,
          why), 3)
      end
    end
  end
  local copy = {}
  for k, v in next, sd do copy[k] = v end
  local first = rawget(states, 1)
  if copy.last_epoch == nil and rawget(self, "_chained") then copy.last_epoch = rawget(first, "last_epoch") end
  if copy.base_lrs == nil then copy.base_lrs = rawget(first, "base_lrs") end
  return copy
end

-- load_state_dict(sd [, strict=true]): strict=false takes a state of another schedule (this one's settings stay)
function Scheduler:load_state_dict(sd, strict)
  if type(sd) ~= "table" then
    error(("%s:load_state_dict: expected a table from state_dict(), got %s"):format(self.name, type(sd)), 2)
  end
  if rawget(self, "_schedulers") and rawget(sd, "_schedulers") ~= nil then sd = whole_state(self, sd, strict) end
  if strict ~= false then
    local keys, get = setting_keys(self)
    local why = other_schedule(self, sd) or other_settings(sd, keys, get)
    if why then
      error(("%s:load_state_dict: %s (torch puts the saved settings back; here they are the constructor's: make the "
        .. "scheduler as it was saved, or pass strict=false to keep this one's schedule from the saved step)")
        :format(self.name, why), 2)
    end
  end
  if math.type(sd.last_epoch) ~= "integer" or sd.last_epoch < -1 then
    error(("%s:load_state_dict: last_epoch must be an integer >= -1, got %s"):format(self.name, tostring(sd.last_epoch)), 2)
  end
  -- validate everything before changing anything
  local ngroups = #self.optimizer.param_groups
  if type(sd.base_lrs) ~= "table" or rawlen(sd.base_lrs) ~= ngroups then
    error(("%s:load_state_dict: base_lrs must be a list of %d learning rates, got %s"):format(self.name, ngroups,
      type(sd.base_lrs) == "table" and ("a list of " .. rawlen(sd.base_lrs)) or type(sd.base_lrs)), 2)
  end
  for i = 1, ngroups do
    local v = rawget(sd.base_lrs, i)
    if type(v) ~= "number" or not (v >= 0 and v < math.huge) then
      error(("%s:load_state_dict: base_lrs[%d] must be a finite number >= 0, got %s"):format(self.name, i, tostring(v)), 2)
    end
  end
  -- a fractional scheduler's position (CosineAnnealingWarmRestarts after step(2.5)): a number whose floor is
  -- last_epoch; any other scheduler has none
  local pos = sd.position
  if pos ~= nil and (not rawget(self, "_fractional") or type(pos) ~= "number" or not (pos >= 0 and pos < 2 ^ 53)
      or math.floor(pos) ~= sd.last_epoch) then
    error(("%s:load_state_dict: position must be %s, got %s"):format(self.name, rawget(self, "_fractional")
      and ("absent or a number >= 0 whose floor is last_epoch (" .. tostring(sd.last_epoch) .. ")")
      or "absent (this schedule steps in whole steps)", O.got(pos)), 2)
  end
  -- CosineAnnealingWarmRestarts' T_cur and T_i in torch's state (its step goes on from them): they follow from the
  -- step here, so a state whose T_cur or T_i is not this schedule's at its position is refused (strict), naming both;
  -- until stop 99 they were taken and ignored (torch's state of a step(6.5), T_cur 3.5, loaded at step 6's T_cur 3)
  local cycle = rawget(self, "_cycle")
  if cycle and strict ~= false then
    local cur, Ti = cycle(pos or math.max(sd.last_epoch, 0))
    for _, kv in ipairs { { "T_cur", cur }, { "T_i", Ti } } do
      local v = rawget(sd, kv[1])
      if v ~= nil and not same_setting(v, kv[2]) then
        error(("%s:load_state_dict: the state sets %s = %s, this schedule's at step %s is %s (T_cur and T_i follow "
          .. "from the step here: a fraction is the state's position, as state_dict() saves it; pass strict=false to "
          .. "go on from the step)"):format(self.name, kv[1], O.got(v), tostring(pos or sd.last_epoch),
          tostring(kv[2])), 2)
      end
    end
  end
  local kept
  if sd.kept_groups ~= nil then
    local kg, ok = sd.kept_groups, type(sd.kept_groups) == "table"
    kept = {}
    for j = 1, ok and rawlen(kg) or 0 do
      local i = rawget(kg, j)
      ok = ok and math.type(i) == "integer" and i >= 1 and i <= ngroups
      if ok then kept[i] = true end
    end
    if not ok then
      error(("%s:load_state_dict: kept_groups must be absent or a list of group indices 1..%d, got %s"):format(
        self.name, ngroups, O.got(sd.kept_groups)), 2)
    end
  end
  local prev_base, prev_epoch, prev_pos, prev_kept = self.base_lrs, self.last_epoch, rawget(self, "_pos"),
    rawget(self, "_kept")
  self.base_lrs = table.move(sd.base_lrs, 1, ngroups, 1, {})
  self.last_epoch, self._pos, self._kept = sd.last_epoch, pos, kept
  resume_products(self)
  local ok, lrs = pcall(self.get_lr, self)
  if not ok then   -- (OneCycleLR past its total_steps) nothing changed
    self.base_lrs, self.last_epoch, self._pos, self._kept = prev_base, prev_epoch, prev_pos, prev_kept
    error(lrs, 2)
  end
  for i, g in ipairs(self.optimizer.param_groups) do if lrs[i] ~= nil then g.lr = lrs[i] end end
  self._last_lr = lrs
  rawset(self.optimizer, "_lr_scheduler", self)   -- the optimizer's scheduler now (step's check)
  rawset(self, "_stepped_at", self.last_epoch)
  sync_members(self)
  local after = rawget(self, "_after_step")
  if after then after(self, pos or self.last_epoch) end
end

-- LambdaLR(opt, fn) or LambdaLR(opt, {fn1, fn2, ...} per group): lr = base_lr · fn(epoch).
function M.LambdaLR(opt, lr_lambda, ...)
  check_opt("LambdaLR", opt)
  no_more("LambdaLR", "(opt, lr_lambda)", ...)
  local fns = lr_lambda
  if type(lr_lambda) == "function" then
    fns = {}
    for i = 1, #opt.param_groups do fns[i] = lr_lambda end
  elseif type(lr_lambda) ~= "table" or #lr_lambda ~= #opt.param_groups then
    error(("LambdaLR: lr_lambda must be a function or a list of %d functions, got %s"):format(#opt.param_groups,
      type(lr_lambda)), 2)
  end
  return new("LambdaLR", opt, function(epoch, base, i)
    local fn = type(lr_lambda) == "function" and lr_lambda or fns[i]
    if fn == nil then
      error(("LambdaLR: the optimizer has %d parameter groups, lr_lambda %d functions (a group was added after "
        .. "the scheduler was made)"):format(#opt.param_groups, #fns), 0)
    end
    local f = fn(epoch)
    if type(f) ~= "number" then
      error(("LambdaLR: lr_lambda returned %s at step %d (expected a number)"):format(type(f), epoch), 0)
    end
    return base * f
  end)
end

-- MultiplicativeLR(opt, fn) or MultiplicativeLR(opt, {fn1, fn2, ...} per group): torch's, lr_t = lr_(t-1) · fn(t)
-- from step 1 on, so lr = base · fn(1) · ... · fn(t). Each group keeps its latest product and the step it is of, so
-- fn runs once a step, as torch's. load_state_dict goes on from the group's lr as torch's does (its get_lr multiplies
-- group["lr"]; nothing is replayed): the product at the loaded step is the group's lr over its base (resume_products).
-- Until stop 99 a load multiplied again from step 1, so a state of last_epoch 2^40 took hours, for ever at 2^62,
-- and the lr came from the lambdas' product, not the group's. step(epoch) is
-- refused: torch's (deprecated) multiplies the current lr by fn(epoch) once, which is no step of this product.
-- In a SequentialLR past a milestone it goes on from the lr before the milestone times fn(0) (torch's _update_lr(0):
-- MultiplicativeLR has no closed form).
function M.MultiplicativeLR(opt, lr_lambda, ...)
  check_opt("MultiplicativeLR", opt)
  no_more("MultiplicativeLR", "(opt, lr_lambda)", ...)
  if type(lr_lambda) ~= "function" and (type(lr_lambda) ~= "table" or rawlen(lr_lambda) ~= #opt.param_groups) then
    error(("MultiplicativeLR: lr_lambda must be a function or a list of %d functions, got %s"):format(
      #opt.param_groups, O.got(lr_lambda)), 2)
  end
  if type(lr_lambda) == "table" then
    for i = 1, rawlen(lr_lambda) do
      if type(rawget(lr_lambda, i)) ~= "function" then
        error(("MultiplicativeLR: lr_lambda[%d] must be a function, got %s"):format(i, O.got(rawget(lr_lambda, i))), 2)
      end
    end
  end
  local function fn_of(i)
    local fn = type(lr_lambda) == "function" and lr_lambda or rawget(lr_lambda, i)
    if fn == nil then
      error(("MultiplicativeLR: the optimizer has %d parameter groups, lr_lambda %d functions (a group was added "
        .. "after the scheduler was made)"):format(#opt.param_groups, rawlen(lr_lambda)), 0)
    end
    return fn
  end
  local function call(fn, k)
    local f = fn(k)
    if type(f) ~= "number" then
      error(("MultiplicativeLR: lr_lambda returned %s at step %d (expected a number)"):format(O.got(f), k), 0)
    end
    return f
  end
  local products = {}   -- products[i] = {t = t, v = fn(1) · ... · fn(t)} of group i
  local lr_fn = function(t, base, i)
    local fn = fn_of(i)
    local p = products[i]
    if p == nil or p.t > t then p = { t = 0, v = 1 }; products[i] = p end
    -- (only where p is behind t: at p.t = 2^63 - 1, a load's or a hand-written last_epoch, p.t + 1 wrapped to -2^63
    -- and the loop ran 2^64 steps, get_lr and load_state_dict hanging; sweep 112)
    if p.t < t then
      for k = p.t + 1, t do p.t, p.v = k, p.v * call(fn, k) end
    end
    return base * p.v
  end
  local at0 = {}   -- fn(0) of group i, once (SequentialLR's milestone)
  return new("MultiplicativeLR", opt, lr_fn, nil, false, nil, { _chainable = true,
    _no_epoch = "torch's step(epoch), deprecated, multiplies the current lr by lr_lambda(epoch) once, which is no "
      .. "step of this schedule (base · fn(1) · ... · fn(t)); call step()",
    _seq_enter = function(_, u, _, i, prev)
      if at0[i] == nil then at0[i] = call(fn_of(i), 0) end
      return prev() * at0[i] * lr_fn(u, 1, i)
    end,
    -- (resume_products: the product of group i at step u is v, where a load put it; none at step 0 or before)
    _seed_factor = function(u, i, v) products[i] = u >= 1 and { t = u, v = v } or nil end })
end

-- StepLR(opt, {step_size, gamma=0.1}) or torch's positional StepLR(opt, step_size [, gamma]):
-- lr = base · gamma^floor(epoch / step_size).
function M.StepLR(opt, opts, pos_gamma, ...)
  check_opt("StepLR", opt)
  if math.type(opts) == "integer" then
    no_more("StepLR", "(opt, step_size [, gamma]) or (opt, {step_size=, gamma=})", ...)
    opts = { step_size = opts, gamma = pos_gamma }
  else
    no_more("StepLR", "(opt, {step_size=, gamma=}) or (opt, step_size [, gamma])", pos_gamma, ...)
  end
  check_keys("StepLR", opts, { step_size = true, gamma = true })
  check_int("StepLR", "step_size", opts.step_size, 1)
  local gamma = opts.gamma or 0.1
  check_rate("StepLR", "gamma", gamma)
  local step_size = opts.step_size
  return new("StepLR", opt, function(epoch, base) return base * gamma ^ (epoch // step_size) end, nil, false, nil,
    chain { step_size = step_size, gamma = gamma })
end

-- CosineAnnealingLR(opt, {T_max, eta_min=0}) or torch's CosineAnnealingLR(opt, T_max [, eta_min]): closed form
-- η_min + (base − η_min)(1 + cos(π·t/T_max))/2. torch's steps are recursive on the group's lr: run first in a
-- SequentialLR, which starts it on the groups' initial_lr (a later OneCycleLR's), it descends from that lr to η_min
-- at T_max, and rises from there on its own base (torch adds a term of the base at step T_max + 1).
function M.CosineAnnealingLR(opt, opts, ...)
  check_opt("CosineAnnealingLR", opt)
  opts = positional("CosineAnnealingLR", opts, table.pack(...), { "T_max", "eta_min" },
    "(opt, T_max [, eta_min]) or (opt, {T_max=, eta_min=})") or {}
  check_keys("CosineAnnealingLR", opts, { T_max = true, eta_min = true })
  check_int("CosineAnnealingLR", "T_max", opts.T_max, 1)
  local eta_min, T = opts.eta_min or 0, opts.T_max
  check_rate("CosineAnnealingLR", "eta_min", eta_min)
  local function lr_fn(epoch, base)
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * epoch / T)) / 2
  end
  return new("CosineAnnealingLR", opt, lr_fn, nil, false, nil, { T_max = T, eta_min = eta_min,
    _seq_first = function(_, u, base0, _, own) return lr_fn(u, u <= T and base0 or own) end })
end

-- warmup_cosine(opt, {warmup_steps=0, total_steps, min_lr=0}):
--   step < warmup:  base · (step + 1) / warmup        (linear ramp, the first step already > 0)
--   then:           min_lr + (base − min_lr) · (1 + cos(π · progress)) / 2,
--                   progress = (step − warmup) / (total − warmup), clamped to [0, 1]
-- (build-nanogpt's get_lr schedule; after total_steps the lr stays at min_lr).
function M.warmup_cosine(opt, opts, ...)
  check_opt("warmup_cosine", opt)
  no_more("warmup_cosine", "(opt, {warmup_steps=, total_steps=, min_lr=})", ...)
  check_keys("warmup_cosine", opts, { warmup_steps = true, total_steps = true, min_lr = true })
  local warmup, total, min_lr = opts.warmup_steps or 0, opts.total_steps, opts.min_lr or 0
  check_int("warmup_cosine", "warmup_steps", warmup, 0)
  check_int("warmup_cosine", "total_steps", total, 1)
  if warmup > total then
    error(("warmup_cosine: warmup_steps (%d) must not exceed total_steps (%d)"):format(warmup, total), 2)
  end
  check_rate("warmup_cosine", "min_lr", min_lr)
  return new("warmup_cosine", opt, function(step, base)
    if step < warmup then return base * (step + 1) / warmup end
    local progress = total == warmup and 1 or (step - warmup) / (total - warmup)
    if progress > 1 then progress = 1 end
    return min_lr + (base - min_lr) * (1 + math.cos(math.pi * progress)) / 2
  end)
end
M.WarmupCosine = M.warmup_cosine

-- A list of numbers, sorted (a copy): MultiStepLR's milestones as torch's Counter holds them, whatever their order
local function sorted_list(list)
  local out = table.move(list, 1, #list, 1, {})
  table.sort(out)
  return out
end

-- MultiStepLR(opt, {milestones, gamma=0.1}) or torch's MultiStepLR(opt, milestones [, gamma]): lr = base ·
-- gamma^(how many milestones ≤ epoch), a milestone listed twice counting twice (torch's Counter).
function M.MultiStepLR(opt, opts, ...)
  check_opt("MultiStepLR", opt)
  opts = positional("MultiStepLR", opts, table.pack(...), { "milestones", "gamma" },
    "(opt, milestones [, gamma]) or (opt, {milestones=, gamma=})", is_options) or {}
  check_keys("MultiStepLR", opts, { milestones = true, gamma = true })
  local ms = opts.milestones
  if type(ms) ~= "table" then
    error(("MultiStepLR: milestones must be a list of integers >= 0, got %s"):format(type(ms)), 2)
  end
  local n = rawlen(ms)
  if n > 4096 then error(("MultiStepLR: milestones has %d entries (at most 4096)"):format(n), 2) end
  local list = {}
  for i = 1, n do
    local m = rawget(ms, i)
    if math.type(m) ~= "integer" or m < 0 then
      error(("MultiStepLR: milestones[%d] must be an integer >= 0, got %s"):format(i, tostring(m)), 2)
    end
    list[i] = m
  end
  local gamma = opts.gamma or 0.1
  check_rate("MultiStepLR", "gamma", gamma)
  return new("MultiStepLR", opt, function(epoch, base)
    local k = 0
    for _, m in ipairs(list) do if m <= epoch then k = k + 1 end end
    return base * gamma ^ k
  end, nil, false, nil, chain { gamma = gamma, milestones = sorted_list(list) })
end

-- ExponentialLR(opt, {gamma}) (or ExponentialLR(opt, gamma)): lr = base · gamma^epoch.
function M.ExponentialLR(opt, opts, ...)
  check_opt("ExponentialLR", opt)
  no_more("ExponentialLR", "(opt, gamma) or (opt, {gamma=})", ...)
  if type(opts) == "number" then opts = { gamma = opts } end
  check_keys("ExponentialLR", opts, { gamma = true })
  if opts.gamma == nil then error("ExponentialLR: gamma is required", 2) end
  check_rate("ExponentialLR", "gamma", opts.gamma)
  local gamma = opts.gamma
  return new("ExponentialLR", opt, function(epoch, base) return base * gamma ^ epoch end, nil, false, nil,
    chain { gamma = gamma })
end

-- LinearLR(opt, {start_factor=1/3, end_factor=1, total_iters=5}) or torch's LinearLR(opt [, start_factor
-- [, end_factor [, total_iters]]]): the factor goes linearly from start_factor to end_factor over total_iters steps
-- and stays there: base · (s·(1 − r) + e·r), r = min(epoch, total_iters) / total_iters.
function M.LinearLR(opt, opts, ...)
  check_opt("LinearLR", opt)
  opts = positional("LinearLR", opts, table.pack(...), { "start_factor", "end_factor", "total_iters" },
    "(opt [, start_factor [, end_factor [, total_iters]]]) or (opt, {start_factor=, end_factor=, total_iters=})")
  opts = opts or {}
  check_keys("LinearLR", opts, { start_factor = true, end_factor = true, total_iters = true })
  local sf, ef, total = opts.start_factor or 1 / 3, opts.end_factor or 1, opts.total_iters or 5
  if type(sf) ~= "number" or not (sf > 0 and sf <= 1) then
    error(("LinearLR: start_factor must be a number in (0, 1], got %s"):format(O.got(sf)), 2)
  end
  if type(ef) ~= "number" or not (ef >= 0 and ef <= 1) then
    error(("LinearLR: end_factor must be a number in [0, 1], got %s"):format(O.got(ef)), 2)
  end
  check_int("LinearLR", "total_iters", total, 1)
  -- two terms >= 0: torch's s + (e − s)·r rounds to a hair below 0 at the end when e = 0 (0.1 + (0 − 0.1)·3/3 =
  -- −1.4e-17), which the step would refuse
  return new("LinearLR", opt, function(epoch, base)
    local r = math.min(epoch, total) / total
    return base * (sf * (1 - r) + ef * r)
  end, nil, false, nil, chain { start_factor = sf, end_factor = ef, total_iters = total, _keeps_past_end = true })
end

-- ConstantLR(opt, {factor=1/3, total_iters=5}) or torch's ConstantLR(opt [, factor [, total_iters]]): base · factor
-- for the first total_iters steps, then base. total_iters = 0: base · factor at every step, torch's step() (its
-- get_lr scales by factor at step 0 and undoes it only at a later step equal to total_iters); entered at a
-- SequentialLR's milestone it is base throughout, as torch's closed form there.
function M.ConstantLR(opt, opts, ...)
  check_opt("ConstantLR", opt)
  opts = positional("ConstantLR", opts, table.pack(...), { "factor", "total_iters" },
    "(opt [, factor [, total_iters]]) or (opt, {factor=, total_iters=})") or {}
  check_keys("ConstantLR", opts, { factor = true, total_iters = true })
  local factor, total = opts.factor or 1 / 3, opts.total_iters or 5
  if type(factor) ~= "number" or not (factor >= 0 and factor <= 1) then
    error(("ConstantLR: factor must be a number in [0, 1], got %s"):format(O.got(factor)), 2)
  end
  check_int("ConstantLR", "total_iters", total, 0)
  return new("ConstantLR", opt, function(epoch, base)
    return (epoch < total or total == 0) and base * factor or base
  end, nil, false, nil, { _chainable = true, factor = factor, total_iters = total,
    _seq_enter = total == 0 and function(_, _, base) return base end or nil })
end

-- PolynomialLR(opt, {total_iters=5, power=1}) or torch's PolynomialLR(opt [, total_iters [, power]]):
-- base · (1 − min(t, total_iters) / total_iters)^power, 0 from total_iters on.
function M.PolynomialLR(opt, opts, ...)
  check_opt("PolynomialLR", opt)
  opts = positional("PolynomialLR", opts, table.pack(...), { "total_iters", "power" },
    "(opt [, total_iters [, power]]) or (opt, {total_iters=, power=})") or {}
  check_keys("PolynomialLR", opts, { total_iters = true, power = true })
  local total, power = opts.total_iters or 5, opts.power or 1
  check_int("PolynomialLR", "total_iters", total, 1)
  check_rate("PolynomialLR", "power", power)
  return new("PolynomialLR", opt, function(epoch, base)
    return base * (1 - math.min(total, epoch) / total) ^ power
  end, nil, false, nil, chain { total_iters = total, power = power, _keeps_past_end = true })
end

-- CosineAnnealingWarmRestarts(opt, {T_0, T_mult=1, eta_min=0}) or torch's (opt, T_0 [, T_mult [, eta_min]]): the
-- cosine from base to eta_min over T_i steps, then again from base, T_i = T_0 · T_mult^(restarts so far):
-- eta_min + (base − eta_min)(1 + cos(π·T_cur/T_i))/2, T_cur the steps since the last restart. step(epoch) also
-- takes a fraction (torch's scheduler.step(epoch + i / iters) within an epoch); a step() after it goes on from there
-- by 1.
-- The restarts are found in integers (torch's step(epoch) takes them from a floating-point log, which can put an
-- epoch on a restart one cycle early; its step() counts them as here).
function M.CosineAnnealingWarmRestarts(opt, opts, ...)
  check_opt("CosineAnnealingWarmRestarts", opt)
  opts = positional("CosineAnnealingWarmRestarts", opts, table.pack(...), { "T_0", "T_mult", "eta_min" },
    "(opt, T_0 [, T_mult [, eta_min]]) or (opt, {T_0=, T_mult=, eta_min=})") or {}
  check_keys("CosineAnnealingWarmRestarts", opts, { T_0 = true, T_mult = true, eta_min = true })
  local T0, mult, eta_min = opts.T_0, opts.T_mult or 1, opts.eta_min or 0
  check_int("CosineAnnealingWarmRestarts", "T_0", T0, 1)
  check_int("CosineAnnealingWarmRestarts", "T_mult", mult, 1)
  check_rate("CosineAnnealingWarmRestarts", "eta_min", eta_min)
  -- (the cycle's length past 2^63 is a float: T_i · T_mult wrapped in Lua's integers, start + T_i with it, and the
  -- loop never ended for T_mult = 2^62 from step 2 on, stepped or loaded; torch's Python integers do not
  -- wrap. t < 2^53 or an integer, so t - start >= T_i decides before T_i is near the float's rounding; sweep 108)
  local function cycle(t)   -- T_cur, T_i at position t
    if mult == 1 then return math.fmod(t, T0), T0 end
    local start, Ti = 0, T0
    while t - start >= Ti do
      start = start + Ti
      if math.type(Ti) == "integer" and Ti > math.maxinteger // mult then Ti = Ti * 1.0 * mult else Ti = Ti * mult end
    end
    return t - start, Ti
  end
  return new("CosineAnnealingWarmRestarts", opt, function(t, base)
    local cur, Ti = cycle(t)
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * cur / Ti)) / 2
  end, nil, true, nil, { T_0 = T0, T_mult = mult, eta_min = eta_min, _cycle = cycle })
end

-- OneCycleLR(opt, {max_lr, total_steps | epochs and steps_per_epoch, pct_start=0.3, anneal_strategy="cos",
-- cycle_momentum=true, base_momentum=0.85, max_momentum=0.95, div_factor=25, final_div_factor=1e4,
-- three_phase=false}) or torch's positional (opt, max_lr [, total_steps [, epochs [, steps_per_epoch [, ...]]]]):
-- torch's 1cycle policy. The lr goes from max_lr/div_factor up to max_lr over pct_start of the steps, then down to
-- max_lr/div_factor/final_div_factor at step total_steps − 1 (three_phase: back to the start first, then down);
-- each phase's curve is a half cosine (or a line). With cycle_momentum the momentum (SGD's momentum, Adam's
-- betas[1]) goes the other way between max_momentum and base_momentum. max_lr, base_momentum and max_momentum may
-- be lists, one per group. Like torch's, each group's initial_lr becomes max_lr/div_factor, and a step past
-- total_steps is an error.
-- a number, or a list of one per parameter group (torch's _format_param), each in [lo, hi]; errors at `level`
local function per_group_values(name, opt, key, v, lo, hi, level)
  local ng, list = #opt.param_groups, {}
  if type(v) == "table" then
    if rawlen(v) ~= ng then
      error(("%s: %s must be a number or a list of %d (one per parameter group), got a list of %d"):format(
        name, key, ng, rawlen(v)), level)
    end
    for i = 1, ng do list[i] = rawget(v, i) end
  else
    for i = 1, ng do list[i] = v end
  end
  for i = 1, ng do
    local x = list[i]
    if type(x) ~= "number" or not (x >= lo and x <= hi) then
      error(("%s: %s%s must be a number in [%g, %g], got %s"):format(name, key, type(v) == "table" and
        ("[" .. i .. "]") or "", lo, hi, O.got(x)), level)
    end
  end
  return list
end

-- OneCycleLR's and CyclicLR's momentum: with cycle_momentum (default true), the optimizer's momentum (SGD's) or
-- betas[1] (Adam's) is cycled between base_momentum and max_momentum (defaults: the scheduler's). Returns cyc,
-- base_m, max_m (per group) and whether betas; errors at the constructor's caller.
local function cycled_momentum(name, opt, opts, base_default, max_default)
  local cyc = opts.cycle_momentum
  if cyc == nil then cyc = true end
  if type(cyc) ~= "boolean" then
    error(("%s: cycle_momentum must be a boolean, got %s"):format(name, O.got(cyc)), 3)
  end
  if not cyc then
    -- torch drops them unseen; their defaults (which torch's positional order makes a call pass) are taken
    for _, kd in ipairs { { "base_momentum", base_default }, { "max_momentum", max_default } } do
      if opts[kd[1]] ~= nil and opts[kd[1]] ~= kd[2] then
        error(("%s: %s takes effect only with cycle_momentum=true, got %s"):format(name, kd[1], O.got(opts[kd[1]])), 3)
      end
    end
    return false
  end
  local d = opt.defaults or {}
  if d.momentum == nil and d.betas == nil then
    error(("%s: cycle_momentum=true needs an optimizer with momentum or betas (%s has neither); pass "
      .. "cycle_momentum=false"):format(name, tostring(opt.name)), 3)
  end
  return true, per_group_values(name, opt, "base_momentum", opts.base_momentum or base_default, 0, 1, 4),
    per_group_values(name, opt, "max_momentum", opts.max_momentum or max_default, 0, 1, 4), d.betas ~= nil
end
-- torch's use_beta1 (whether the momentum cycled is Adam's betas[1]): set with cycle_momentum only
local function beta1_of(cyc, use_betas)
  if cyc then return use_betas == true end
  return nil
end
local function set_momentum(g, m, use_betas)
  if use_betas then g.betas = { m, g.betas[2] } else g.momentum = m end
end

-- A setting as the scheduler shows it (a list copied: what the constructor was given stays the user's)
local function copy_value(v)
  if type(v) ~= "table" then return v end
  return table.move(v, 1, rawlen(v), 1, {})
end
-- OneCycleLR's phases as torch's _schedule_phases attribute (its state_dict's key): each phase's end_step and the names
-- of the group entries it goes between
local PHASE_NAMES = { initial = "initial_lr", max = "max_lr", min = "min_lr", max_m = "max_momentum",
  base_m = "base_momentum" }
local function torch_phases(phases)
  local out = {}
  for k, ph in ipairs(phases) do
    out[k] = { end_step = ph[1], start_lr = PHASE_NAMES[ph[2]], end_lr = PHASE_NAMES[ph[3]],
      start_momentum = PHASE_NAMES[ph[4]], end_momentum = PHASE_NAMES[ph[5]] }
  end
  return out
end

local ONECYCLE_KEYS = { "max_lr", "total_steps", "epochs", "steps_per_epoch", "pct_start", "anneal_strategy",
  "cycle_momentum", "base_momentum", "max_momentum", "div_factor", "final_div_factor", "three_phase" }
function M.OneCycleLR(opt, opts, ...)
  local N = "OneCycleLR"
  check_opt(N, opt)
  opts = positional(N, opts, table.pack(...), ONECYCLE_KEYS, "(opt, max_lr [, total_steps [, epochs [, "
    .. "steps_per_epoch [, pct_start [, ...]]]]]) or (opt, {max_lr=, total_steps=, ...})", is_options) or {}
  local valid = {}
  for _, k in ipairs(ONECYCLE_KEYS) do valid[k] = true end
  check_keys(N, opts, valid)
  local total = opts.total_steps
  if total ~= nil then
    check_int(N, "total_steps", total, 1)
    if opts.epochs ~= nil or opts.steps_per_epoch ~= nil then   -- torch drops them unseen
      error("OneCycleLR: give total_steps, or epochs and steps_per_epoch, not both", 2)
    end
  elseif opts.epochs ~= nil and opts.steps_per_epoch ~= nil then
    check_int(N, "epochs", opts.epochs, 1)
    check_int(N, "steps_per_epoch", opts.steps_per_epoch, 1)
    total = opts.epochs * opts.steps_per_epoch
  else
    error("OneCycleLR: give total_steps, or epochs and steps_per_epoch", 2)
  end
  local pct = opts.pct_start or 0.3
  if type(pct) ~= "number" or not (pct >= 0 and pct <= 1) then
    error(("OneCycleLR: pct_start must be a number in [0, 1], got %s"):format(O.got(pct)), 2)
  end
  local anneal = opts.anneal_strategy or "cos"
  if anneal ~= "cos" and anneal ~= "linear" then
    error(("OneCycleLR: anneal_strategy must be \"cos\" or \"linear\", got %s"):format(O.got(anneal)), 2)
  end
  local div, final_div = opts.div_factor or 25, opts.final_div_factor or 1e4
  for k, v in pairs { div_factor = div, final_div_factor = final_div } do
    if type(v) ~= "number" or not (v > 0 and v < math.huge) then
      error(("OneCycleLR: %s must be a finite number > 0, got %s"):format(k, O.got(v)), 2)
    end
  end
  local three = opts.three_phase or false
  if type(three) ~= "boolean" then
    error(("OneCycleLR: three_phase must be a boolean, got %s"):format(O.got(three)), 2)
  end
  local ng = #opt.param_groups
  if opts.max_lr == nil then error("OneCycleLR: max_lr is required", 2) end
  local max_lrs = per_group_values(N, opt, "max_lr", opts.max_lr, 0, math.huge, 3)
  local cyc, base_m, max_m, use_betas = cycled_momentum(N, opt, opts, 0.85, 0.95)
  local phases
  if three then
    phases = { { pct * total - 1, "initial", "max", "max_m", "base_m" },
               { 2 * pct * total - 2, "max", "initial", "base_m", "max_m" },
               { total - 1, "initial", "min", "max_m", "max_m" } }
  else
    phases = { { pct * total - 1, "initial", "max", "max_m", "base_m" },
               { total - 1, "max", "min", "base_m", "max_m" } }
  end
  -- A phase some step in [0, total_steps] reaches must not end where it starts: torch's divides by zero there (at
  -- its construction, or at step total_steps). Only the first phase (when pct_start · total_steps = 1) and the last
  -- (pct_start = 1; three_phase: 2 · pct_start · total_steps − 2 = total_steps − 1) can: a middle one that ends
  -- where it starts is never reached, nor is a first that ends before step 0 (pct_start = 0: the lr starts falling).
  local ends = three and { "pct_start · total_steps − 1", "2 · pct_start · total_steps − 2", "total_steps − 1" }
    or { "pct_start · total_steps − 1", "total_steps − 1" }
  for k = 1, #phases, #phases - 1 do
    local start = k == 1 and 0 or phases[k - 1][1]
    local e = phases[k][1]
    if e == start then
      error(("OneCycleLR: pct_start=%s and total_steps=%d leave phase %d of %d no steps: it ends at step %s = %g, "
        .. "where it starts (%s), and torch's divides by zero there; %s"):format(tostring(pct), total, k, #phases,
        ends[k], e, k == 1 and "step 0" or ends[k - 1],
        k == 1 and "pct_start · total_steps must not be 1" or three and
          "2 · pct_start · total_steps − 2 must be below total_steps − 1" or "pct_start must be below 1"), 2)
    end
  end
  local function curve(a, b, f)
    if anneal == "cos" then return b + (a - b) / 2 * (math.cos(math.pi * f) + 1) end
    -- at step total_steps (after a loop's last step: an lr no step uses) the last phase's f passes 1; torch's
    -- linear strategy then goes past the final lr, below zero where the phase falls steeply, which the scheduler
    -- refuses: it holds the final lr
    return (b - a) * math.min(f, 1) + a
  end
  local vals = {}
  for i = 1, ng do
    local initial = max_lrs[i] / div
    vals[i] = { initial = initial, max = max_lrs[i], min = initial / final_div, max_m = max_m and max_m[i],
      base_m = base_m and base_m[i] }
    opt.param_groups[i].initial_lr = initial
  end
  -- step t's lr and momentum for group i (torch's get_lr: the first phase whose end_step is not below t)
  local function at(t, i)
    if t > total then
      error(("OneCycleLR: tried to step %d times; the specified number of total steps is %d"):format(t, total), 0)
    end
    local v = vals[i]
    if v == nil then
      error(("OneCycleLR: parameter group %d was added after the scheduler was made; its max_lr is unknown")
        :format(i), 0)
    end
    local start = 0
    for k, ph in ipairs(phases) do
      if t <= ph[1] or k == #phases then
        local f = (t - start) / (ph[1] - start)
        return curve(v[ph[2]], v[ph[3]], f), cyc and curve(v[ph[4]], v[ph[5]], f) or nil
      end
      start = ph[1]
    end
  end
  return new(N, opt, function(t, _, i) return (at(t, i)) end, nil, false, function(self, t)
    if not cyc then return end
    for i, g in ipairs(self.optimizer.param_groups) do
      local _, m = at(t, i)
      set_momentum(g, m, use_betas)
    end
  end, { total_steps = total, epochs = opts.epochs, steps_per_epoch = opts.steps_per_epoch,
    max_lr = copy_value(opts.max_lr), max_lrs = max_lrs, pct_start = pct, anneal_strategy = anneal,
    _anneal_func_type = anneal, div_factor = div, final_div_factor = final_div, three_phase = three,
    cycle_momentum = cyc, use_beta1 = beta1_of(cyc, use_betas),
    base_momentum = cyc and copy_value(opts.base_momentum or 0.85) or nil,
    max_momentum = cyc and copy_value(opts.max_momentum or 0.95) or nil, _schedule_phases = torch_phases(phases) })
end

-- CyclicLR(opt, {base_lr, max_lr, step_size_up=2000, step_size_down=step_size_up, mode="triangular", gamma=1,
-- scale_fn=, scale_mode="cycle", cycle_momentum=true, base_momentum=0.8, max_momentum=0.9}) or torch's positional
-- (opt, base_lr, max_lr [, step_size_up [, ...]]): torch's cyclical learning rate. Each cycle the lr climbs from
-- base_lr to max_lr over step_size_up steps and back over step_size_down; mode "triangular" keeps the height,
-- "triangular2" halves it every cycle, "exp_range" scales it by gamma^step; scale_fn(x) (a function of the cycle, or
-- of the step with scale_mode="iterations") replaces the mode. With cycle_momentum the momentum (SGD's momentum,
-- Adam's betas[1]) goes the other way between max_momentum and base_momentum. base_lr, max_lr and the momenta may be
-- lists, one per group; the groups' lr start at base_lr, as torch's.
local CYCLIC_KEYS = { "base_lr", "max_lr", "step_size_up", "step_size_down", "mode", "gamma", "scale_fn",
  "scale_mode", "cycle_momentum", "base_momentum", "max_momentum" }
function M.CyclicLR(opt, opts, ...)
  local N = "CyclicLR"
  check_opt(N, opt)
  opts = positional(N, opts, table.pack(...), CYCLIC_KEYS, "(opt, base_lr, max_lr [, step_size_up [, "
    .. "step_size_down [, mode [, ...]]]]) or (opt, {base_lr=, max_lr=, ...})", is_options) or {}
  local valid = {}
  for _, k in ipairs(CYCLIC_KEYS) do valid[k] = true end
  check_keys(N, opts, valid)
  for _, k in ipairs { "base_lr", "max_lr" } do
    if opts[k] == nil then error(("CyclicLR: %s is required"):format(k), 2) end
  end
  local base_lrs = per_group_values(N, opt, "base_lr", opts.base_lr, 0, math.huge, 3)
  local max_lrs = per_group_values(N, opt, "max_lr", opts.max_lr, 0, math.huge, 3)
  local up = opts.step_size_up or 2000
  local down = opts.step_size_down or up
  for _, kv in ipairs { { "step_size_up", up }, { "step_size_down", down } } do   -- in this order: down is up's by default
    local v = kv[2]
    if type(v) ~= "number" or not (v >= 0 and v < math.huge) then
      error(("CyclicLR: %s must be a finite number >= 0, got %s"):format(kv[1], O.got(v)), 2)
    end
  end
  local total = up + down
  if total <= 0 then error("CyclicLR: step_size_up + step_size_down must be > 0", 2) end
  local ratio = up / total
  local mode, gamma, scale_fn = opts.mode or "triangular", opts.gamma or 1.0, opts.scale_fn
  if type(gamma) ~= "number" or gamma ~= gamma then
    error(("CyclicLR: gamma must be a number, got %s"):format(O.got(gamma)), 2)
  end
  local scale_mode
  if scale_fn ~= nil then
    if type(scale_fn) ~= "function" then
      error(("CyclicLR: scale_fn must be a function of one number, got %s"):format(O.got(scale_fn)), 2)
    end
    -- torch drops mode and gamma when scale_fn is given; their defaults (which torch's positional order makes a
    -- call pass before scale_fn) are taken
    if mode ~= "triangular" or gamma ~= 1.0 then
      error(("CyclicLR: %s is not used with scale_fn (the function gives the scale), got %s"):format(
        mode ~= "triangular" and "mode" or "gamma", O.got(mode ~= "triangular" and mode or gamma)), 2)
    end
    scale_mode = opts.scale_mode or "cycle"
    if scale_mode ~= "cycle" and scale_mode ~= "iterations" then
      error(("CyclicLR: scale_mode must be \"cycle\" or \"iterations\", got %s"):format(O.got(scale_mode)), 2)
    end
  else
    if mode == "triangular" then scale_fn, scale_mode = function() return 1.0 end, "cycle"
    elseif mode == "triangular2" then scale_fn, scale_mode = function(x) return 1 / 2.0 ^ (x - 1) end, "cycle"
    elseif mode == "exp_range" then scale_fn, scale_mode = function(x) return gamma ^ x end, "iterations"
    else
      error(("CyclicLR: mode must be \"triangular\", \"triangular2\" or \"exp_range\" (or give scale_fn), got %s")
        :format(O.got(mode)), 2)
    end
    if opts.scale_mode ~= nil then
      error("CyclicLR: scale_mode goes with scale_fn (each mode has its own: torch overrides it)", 2)
    end
    if mode ~= "exp_range" and gamma ~= 1.0 then   -- torch drops it unseen
      error(("CyclicLR: gamma takes effect only with mode=\"exp_range\", got %s with mode=%q"):format(O.got(gamma), mode), 2)
    end
  end
  local cyc, base_m, max_m, use_betas = cycled_momentum(N, opt, opts, 0.8, 0.9)
  -- the scale of step t: the cycle's position and the mode's factor (a scale_fn's error or bad value is named)
  local function at(t)
    local cycle = math.floor(1 + t / total)
    local x = 1.0 + t / total - cycle
    local f = x <= ratio and x / ratio or (x - 1) / (ratio - 1)
    local ok, sc = pcall(scale_fn, scale_mode == "cycle" and cycle or t)
    if not ok then error(("CyclicLR: scale_fn raised: %s"):format(tostring(sc)), 0) end
    if type(sc) ~= "number" then
      error(("CyclicLR: scale_fn must return a number, got %s"):format(O.got(sc)), 0)
    end
    return f, sc
  end
  -- the groups start at base_lr (torch writes it before its first step); an initial_lr already there stays (torch's
  -- setdefault: a SequentialLR starts its first scheduler on it), as do the scheduler's base_lrs, base_lr
  for i, g in ipairs(opt.param_groups) do g.lr = base_lrs[i] end
  -- The lr of group i at step t from base, the scheduler's base_lrs[i] (torch's get_lr reads self.base_lrs, so one
  -- written by hand or loaded from a state dict is honoured; before stop 95 the closure's base_lr was read and such a
  -- base_lrs taken and ignored). The schedule probe (state_dict's `schedule`) passes base_lr's first entry
  -- (_probe_base) for its base of 1, so it records the numbers it did before, and older checkpoints still load.
  return new(N, opt, function(t, base, i)
    if max_lrs[i] == nil then
      error(("CyclicLR: parameter group %d was added after the scheduler was made; its base_lr is unknown"):format(i), 0)
    end
    local f, sc = at(t)
    return base + (max_lrs[i] - base) * f * sc
  end, nil, false, function(sched, t)
    if not cyc then return end
    local f, sc = at(t)
    for i, g in ipairs(sched.optimizer.param_groups) do
      if base_m[i] ~= nil then
        set_momentum(g, max_m[i] - (max_m[i] - base_m[i]) * f * sc, use_betas)
      end
    end
  end, { base_lrs = table.move(base_lrs, 1, #base_lrs, 1, {}), _probe_base = base_lrs[1],
    -- the settings as torch's attributes (its state_dict's keys) and as the constructor's options
    base_lr = copy_value(opts.base_lr), max_lr = copy_value(opts.max_lr), max_lrs = max_lrs, step_size_up = up,
    step_size_down = down, total_size = total, step_ratio = ratio, mode = mode, gamma = gamma, scale_mode = scale_mode,
    cycle_momentum = cyc, use_beta1 = beta1_of(cyc, use_betas), base_momentums = cyc and base_m or nil,
    max_momentums = cyc and max_m or nil, base_momentum = cyc and copy_value(opts.base_momentum or 0.8) or nil,
    max_momentum = cyc and copy_value(opts.max_momentum or 0.9) or nil })
end

-- The schedulers a SequentialLR or a ChainedScheduler (N) runs: a non-empty list of schedulers of one optimizer (opt,
-- or the first one's); member(i, sc) refuses the kinds N does not take (raising at level 4: N's caller). Errors
-- point at N's caller.
local function scheduler_list(N, schedulers, opt, member)
  if not is_list(schedulers) then
    error(("%s: schedulers must be a non-empty list of schedulers, got %s"):format(N, O.got(schedulers)), 3)
  end
  local list = {}
  for i = 1, rawlen(schedulers) do
    local sc = rawget(schedulers, i)
    if getmetatable(sc) ~= Scheduler and getmetatable(sc) ~= Plateau then
      local prepared = type(sc) == "table" and rawget(sc, "scheduler") ~= nil
      error(("%s: schedulers[%d] must be a scheduler from fp8.optim.lr_scheduler, got %s%s"):format(N, i, O.got(sc),
        prepared and (" (a prepared one: pass the scheduler itself and prepare the %s)"):format(N) or ""), 3)
    end
    member(i, sc)
    opt = opt or sc.optimizer
    if sc.optimizer ~= opt then
      error(("%s: schedulers[%d] (%s) belongs to another optimizer; all must be of one (the one given), as torch's")
        :format(N, i, sc.name), 3)
    end
    list[i] = sc
  end
  return list
end

-- SequentialLR(opt, schedulers, milestones) (or (opt, {schedulers=, milestones=})): torch's: schedulers[1] until
-- milestones[1], then schedulers[2] from its own step 0, and so on (#milestones = #schedulers − 1, non-decreasing).
-- Each must be a scheduler of this optimizer (made, as torch's, on it before this one); they are not stepped
-- themselves afterwards (this one steps the optimizer, and one of them stepping it is refused as any second
-- scheduler). As torch's: the scheduler of step 0 runs on the groups' initial_lr as the constructors left it (a
-- OneCycleLR's max_lr/div_factor), a chainable one scaling it; one entered at a milestone runs from its own base
-- (torch's closed form at its step 0), a MultiplicativeLR from the lr before the milestone (see new's _seq_*).
function M.SequentialLR(opt, schedulers, milestones, ...)
  local N = "SequentialLR"
  check_opt(N, opt)
  local tab = type(schedulers) == "table"
  if tab and (rawget(schedulers, "schedulers") ~= nil or rawget(schedulers, "milestones") ~= nil) then
    no_more(N, "(opt, schedulers, milestones) or (opt, {schedulers=, milestones=})", milestones, ...)
    check_keys(N, schedulers, { schedulers = true, milestones = true })
    schedulers, milestones = schedulers.schedulers, schedulers.milestones
  else
    no_more(N, "(opt, schedulers, milestones) or (opt, {schedulers=, milestones=})", ...)
  end
  local list = scheduler_list(N, schedulers, opt, function(i, sc)
    if getmetatable(sc) == Plateau then
      error(("SequentialLR: schedulers[%d] is a ReduceLROnPlateau, which steps on a metric; SequentialLR steps "
        .. "without one (torch's refuses it too)"):format(i), 4)
    end
    if rawget(sc, "_schedulers") ~= nil then
      error(("SequentialLR: schedulers[%d] is a %s; torch's SequentialLR fails entering one at a milestone (it has no "
        .. "get_lr) and, run from step 0, steps its members out of turn: give its schedulers to this SequentialLR, "
        .. "or a LambdaLR of their product"):format(i, sc.name), 4)
    end
  end)
  if type(milestones) ~= "table" or rawlen(milestones) ~= #list - 1 then
    error(("SequentialLR: milestones must be a list of %d integers (one fewer than the schedulers), got %s"):format(
      #list - 1, type(milestones) == "table" and ("a list of " .. rawlen(milestones)) or O.got(milestones)), 2)
  end
  local ms = {}
  for i = 1, #list - 1 do
    local m = rawget(milestones, i)
    if math.type(m) ~= "integer" or m < 0 or (i > 1 and m < ms[i - 1]) then
      error(("SequentialLR: milestones[%d] must be an integer >= %d, got %s"):format(i, i > 1 and ms[i - 1] or 0,
        O.got(m)), 2)
    end
    ms[i] = m
  end
  local function which(t)   -- the scheduler of step t, its own step, and how many milestones are <= t
    local k = 0
    while k < #ms and ms[k + 1] <= t do k = k + 1 end
    return list[k + 1], t - (k > 0 and ms[k] or 0), k
  end
  local _, _, k0 = which(0)   -- the scheduler torch's constructor starts at step 0 (any before it never runs)
  local before = {}   -- before[k][i] = {base, lr}: group i's lr at step milestones[k] − 1, for a MultiplicativeLR
  -- group i's base in the member sc = list[k + 1], its base_lrs checked as its own step checks them (base_list): a
  -- member's base_lrs written by hand was read unchecked here (a number: Lua's "attempt to index a number value" at
  -- this file's line; {"0.5"} coerced, a string or a table whose __index answers every key taken without a word;
  -- sweep 108), the group's base where the member has none (a group added since)
  local function own_base(sc, k, i, base)
    local bl = base_list(sc, ("SequentialLR: schedulers[%d] (%s)"):format(k + 1, tostring(rawget(sc, "name"))))
    local v = rawget(bl, i)
    if v == nil then return base end
    return v
  end
  local function lr_at(t, base, i)
    local sc, u, k = which(t)
    local own = own_base(sc, k, i, base)
    if k == k0 then
      local first = rawget(sc, "_seq_first")
      if first then return first(sc, u, base, i, own) end
      if rawget(sc, "_chainable") then return base * sc._lr_fn(u, 1, i) end
      return sc._lr_fn(u, own, i)
    end
    local enter = rawget(sc, "_seq_enter")
    if not enter then return sc._lr_fn(u, own, i) end
    return enter(sc, u, own, i, function()
      before[k] = before[k] or {}
      local c = before[k][i]
      if c == nil or c[1] ~= base then c = { base, lr_at(ms[k] - 1, base, i) }; before[k][i] = c end
      return c[2]
    end)
  end
  return new(N, opt, lr_at, nil, false, function(_, t)
    local sc, u = which(t)
    if sc._after_step then sc:_after_step(u) end
  end, { _schedulers = list, _milestones = ms, _no_epoch = "torch 2.15's SequentialLR.step() takes none",
    -- the schedule that runs step t (get_lr: how a group added then joins)
    _phase_at = function(t) return (which(t)) end, _member_at = which })
end

-- ChainedScheduler(schedulers [, opt]) (or ({schedulers=, optimizer=})): torch's, every scheduler's effect at once.
-- torch steps each one on the lr the one before it left, so the factors of schedules that multiply the lr step by step
-- multiply: lr = base · f1(t) · f2(t) · ..., f the schedule's lr for a base of 1. Taken: those schedules (ConstantLR,
-- LinearLR, ExponentialLR, StepLR, MultiStepLR, PolynomialLR, MultiplicativeLR). Refused by name: the ones that set
-- the lr from the base (LambdaLR, the cosines, OneCycleLR, CyclicLR, SequentialLR, a ChainedScheduler,
-- ReduceLROnPlateau), whose result in torch's chain depends on their place in it. The schedulers are made on one
-- optimizer first, and are not stepped themselves afterwards.
function M.ChainedScheduler(schedulers, optimizer, ...)
  local N = "ChainedScheduler"
  local takes = "(schedulers [, optimizer]) or ({schedulers=, optimizer=})"
  if type(schedulers) == "table" and (rawget(schedulers, "schedulers") ~= nil or rawget(schedulers, "optimizer") ~= nil)
  then
    no_more(N, takes, optimizer, ...)
    check_keys(N, schedulers, { schedulers = true, optimizer = true })
    schedulers, optimizer = schedulers.schedulers, schedulers.optimizer
  else
    no_more(N, takes, ...)
  end
  if optimizer ~= nil then check_opt(N, optimizer) end
  local list = scheduler_list(N, schedulers, optimizer, function(i, sc)
    if not rawget(sc, "_chainable") then
      error(("ChainedScheduler: schedulers[%d] is a %s, which sets the lr from the base rather than multiplying it "
        .. "step by step, so in torch's chain its effect depends on its place; chained here: ConstantLR, LinearLR, "
        .. "ExponentialLR, StepLR, MultiStepLR, PolynomialLR, MultiplicativeLR (a SequentialLR runs schedules one "
        .. "after the other; a LambdaLR of a product multiplies any)"):format(i, sc.name), 4)
    end
  end)
  local opt = list[1].optimizer
  return new(N, opt, function(t, base, i, kept)
    local f = 1
    for _, sc in ipairs(list) do
      local fm = sc._lr_fn(t, 1, i)
      -- (a group that joined past a member's end keeps its lr there, as torch's form of that member: get_lr)
      if fm == 0 and kept and rawget(sc, "_keeps_past_end") then fm = 1 end
      f = f * fm
    end
    return base * f
  end, nil, false, nil, { _schedulers = list, _chained = true,
    _no_epoch = "torch 2.15's ChainedScheduler.step() takes none" })
end

-- The schedules of transformers.optimization that Accelerate's examples use, under their names:
-- get_linear_schedule_with_warmup(opt, num_warmup_steps, num_training_steps) and
-- get_cosine_schedule_with_warmup(opt, num_warmup_steps, num_training_steps [, num_cycles=0.5]) (or one table of
-- those keys after opt). Warmup is step / warmup (0 at step 0, unlike warmup_cosine's first step); then linear decay
-- to 0 at num_training_steps, or max(0, (1 + cos(2π · num_cycles · progress)) / 2).

-- The arguments after opt of transformers' schedules: positional, in the order of names, or one table of those names
-- (not both); ints: the names that must be integers >= 0. Errors point at the constructor's caller.
local function targs(name, opt, names, ints, first, rest, takes)
  check_opt(name, opt, 4)
  if type(first) == "table" then
    local n = rest.n
    while n > 0 and rest[n] == nil do n = n - 1 end
    if n > 0 then error(("%s: pass the steps as a table or as arguments, not both"):format(name), 3) end
  end
  local o = positional(name, first, rest, names, takes, nil, 4) or {}
  local valid = {}
  for _, k in ipairs(names) do valid[k] = true end
  check_keys(name, o, valid, 4)
  for _, k in ipairs(ints) do check_int(name, k, o[k], 0, 4) end
  return o
end
local function warm(step, warmup) return step / math.max(1, warmup) end
local WARMUP_TOTAL = { "num_warmup_steps", "num_training_steps" }

function M.get_linear_schedule_with_warmup(opt, a, ...)
  local N = "get_linear_schedule_with_warmup"
  local o = targs(N, opt, WARMUP_TOTAL, WARMUP_TOTAL, a, table.pack(...), "(opt, num_warmup_steps, num_training_steps)")
  local warmup, total = o.num_warmup_steps, o.num_training_steps
  return new(N, opt, function(step, base)
    if step < warmup then return base * warm(step, warmup) end
    return base * math.max(0, (total - step) / math.max(1, total - warmup))
  end)
end

function M.get_cosine_schedule_with_warmup(opt, a, ...)
  local N = "get_cosine_schedule_with_warmup"
  local o = targs(N, opt, { "num_warmup_steps", "num_training_steps", "num_cycles" }, WARMUP_TOTAL, a, table.pack(...),
    "(opt, num_warmup_steps, num_training_steps [, num_cycles])")
  local warmup, total, cycles = o.num_warmup_steps, o.num_training_steps, o.num_cycles or 0.5
  if type(cycles) ~= "number" or not (cycles >= 0 and cycles < math.huge) then
    error(("%s: num_cycles must be a finite number >= 0, got %s"):format(N, tostring(cycles)), 2)
  end
  return new(N, opt, function(step, base)
    if step < warmup then return base * warm(step, warmup) end
    local progress = (step - warmup) / math.max(1, total - warmup)
    return base * math.max(0, (1 + math.cos(math.pi * cycles * 2 * progress)) / 2)
  end)
end

-- ReduceLROnPlateau(opt [, {mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel", cooldown=0,
-- min_lr=0, eps=1e-8}]): torch's. Not a closed form: sched:step(metric) (a number, or a one-element tensor) counts
-- the steps since the metric last improved (by threshold, relative or absolute) and, past patience of them, multiplies
-- each group's current lr by factor (not below min_lr, a number or one per group; a change smaller than eps is not
-- made), then waits cooldown steps before counting again. As the closed forms, it refuses to step an optimizer that
-- another scheduler stepped last. state_dict() / load_state_dict(sd [, strict]) keep its counters and best value,
-- and its settings, which a load compares (below).
Plateau.__index = Plateau
Plateau.__name = "optim.lr_scheduler"   -- help(sched) finds the schedulers' entry
Plateau._plateau_class = true            -- M._is_plateau's mark
local PLATEAU_KEYS = { "mode", "factor", "patience", "threshold", "threshold_mode", "cooldown", "min_lr", "eps" }
function M.ReduceLROnPlateau(opt, opts, ...)
  local N = "ReduceLROnPlateau"
  check_opt(N, opt)
  opts = positional(N, opts, table.pack(...), PLATEAU_KEYS, "(opt [, mode [, factor [, patience [, ...]]]]) or "
    .. "(opt, {mode=, factor=, patience=, threshold=, threshold_mode=, cooldown=, min_lr=, eps=})") or {}
  local valid = {}
  for _, k in ipairs(PLATEAU_KEYS) do valid[k] = true end
  check_keys(N, opts, valid)
  local mode, tmode = opts.mode or "min", opts.threshold_mode or "rel"
  if mode ~= "min" and mode ~= "max" then
    error(("ReduceLROnPlateau: mode must be \"min\" or \"max\", got %s"):format(O.got(mode)), 2)
  end
  if tmode ~= "rel" and tmode ~= "abs" then
    error(("ReduceLROnPlateau: threshold_mode must be \"rel\" or \"abs\", got %s"):format(O.got(tmode)), 2)
  end
  local factor = opts.factor or 0.1
  if type(factor) ~= "number" or not (factor >= 0 and factor < 1) then
    error(("ReduceLROnPlateau: factor must be a number in [0, 1) (torch's \"Factor should be < 1.0\"), got %s")
      :format(O.got(factor)), 2)
  end
  local patience, cooldown = opts.patience or 10, opts.cooldown or 0
  check_int(N, "patience", patience, 0)
  check_int(N, "cooldown", cooldown, 0)
  local threshold, eps = opts.threshold or 1e-4, opts.eps or 1e-8
  check_rate(N, "threshold", threshold)
  check_rate(N, "eps", eps)
  local ng, min_lrs = #opt.param_groups, {}
  local ml = opts.min_lr or 0
  local default_min_lr = type(ml) ~= "table" and ml or nil   -- torch's: what a group added later gets
  if type(ml) == "table" then
    if rawlen(ml) ~= ng then
      error(("ReduceLROnPlateau: min_lr must be a number or a list of %d (one per parameter group), got a list of %d")
        :format(ng, rawlen(ml)), 2)
    end
    for i = 1, ng do min_lrs[i] = rawget(ml, i) end
  else
    for i = 1, ng do min_lrs[i] = ml end
  end
  for i = 1, ng do check_rate(N, ("min_lr[%d]"):format(i), min_lrs[i]) end
  local self = setmetatable({ name = N, optimizer = opt, mode = mode, threshold_mode = tmode, factor = factor,
    patience = patience, cooldown = cooldown, threshold = threshold, eps = eps, min_lrs = min_lrs,
    _default_min_lr = default_min_lr, last_epoch = 0,
    best = mode == "min" and math.huge or -math.huge, num_bad_epochs = 0, cooldown_counter = 0, base_lrs = {} },
    Plateau)
  for i, g in ipairs(opt.param_groups) do
    g.initial_lr = g.initial_lr or g.lr
    self.base_lrs[i] = g.initial_lr
  end
  self._last_lr = {}
  for i, g in ipairs(opt.param_groups) do self._last_lr[i] = g.lr end
  return self
end

-- _is_better(a, best): torch 2.15's ReduceLROnPlateau._is_better, whether metric a improves on best by the threshold.
-- Until stop 96 it was a public is_better(a) (torch 1.x's public name), which took the best from the scheduler (a best
-- given as torch passes it was dropped) and compared a hostile a with Lua's own "attempt to compare table with number".
-- The settings it reads, as a user may have written them on the scheduler (the constructor checked what it was given):
-- refused naming fname; level as error's, counted from the function that calls this one. A mode other than "min" was
-- taken as "max", a threshold_mode other than "rel" as "abs", and a threshold that is not a number was Lua's own
-- arithmetic error.
local function check_comparison(self, fname, level)
  local function refuse(what, v) error(("%s: %s, got %s"):format(fname, what, O.got(v)), level + 2) end
  if self.mode ~= "min" and self.mode ~= "max" then refuse("mode must be \"min\" or \"max\"", self.mode) end
  if self.threshold_mode ~= "rel" and self.threshold_mode ~= "abs" then
    refuse("threshold_mode must be \"rel\" or \"abs\"", self.threshold_mode)
  end
  local th = self.threshold
  if type(th) ~= "number" or not (th >= 0 and th < math.huge) then
    refuse("threshold must be a finite number >= 0", th)
  end
end

function Plateau:_is_better(a, best, ...)
  no_more("ReduceLROnPlateau:_is_better", "(a, best)", ...)
  for _, v in ipairs { { "a", a }, { "best", best } } do
    if type(v[2]) ~= "number" then
      error(("ReduceLROnPlateau:_is_better: %s must be a number (a metric), got %s"):format(v[1], O.got(v[2])), 2)
    end
  end
  check_comparison(self, "ReduceLROnPlateau:_is_better", 2)
  local th = self.threshold
  if self.mode == "min" then
    return self.threshold_mode == "rel" and a < best * (1 - th) or self.threshold_mode == "abs" and a < best - th
  end
  return self.threshold_mode == "rel" and a > best * (th + 1) or self.threshold_mode == "abs" and a > best + th
end

-- The settings and counters step reads, as a user may write them between steps: torch's are attributes its step reads
-- (sched.factor = 0.5 or sched.patience = 2 mid-run is honoured, here too), and its constructor checks them only when
-- it is made. Written later they were not checked here either until stop 97: a mode of "maximum" or a threshold_mode
-- of "relative" was taken as another one (every metric counted as no improvement, and the lr went down each step past
-- patience), a factor of 2 or an eps of NaN left the lr alone for ever, a threshold or patience of "x" was Lua's own
-- "attempt to compare string with number". Each is refused as the constructor refuses it (best as load_state_dict
-- does), before the step changes anything. Raises at level 3 (step's caller).
local function plateau_checked(self)
  local function bad(k, want)
    error(("ReduceLROnPlateau:step: %s must be %s, got %s"):format(k, want, O.got(rawget(self, k))), 4)
  end
  check_comparison(self, "ReduceLROnPlateau:step", 3)   -- mode, threshold_mode, threshold (what _is_better reads)
  local f = self.factor
  if type(f) ~= "number" or not (f >= 0 and f < 1) then bad("factor", "a number in [0, 1)") end
  local e = self.eps
  if type(e) ~= "number" or not (e >= 0 and e < math.huge) then bad("eps", "a finite number >= 0") end
  for _, k in ipairs { "patience", "cooldown", "last_epoch", "num_bad_epochs", "cooldown_counter" } do
    local v = self[k]
    if math.type(v) ~= "integer" or v < 0 or v == math.maxinteger then bad(k, "an integer >= 0") end
  end
  if type(self.best) ~= "number" or self.best ~= self.best then bad("best", "a number (not NaN)") end
end

-- step(metric): torch's ReduceLROnPlateau.step(metrics)
function Plateau:step(metric)
  if require("fp8.core").is_tensor(metric) then
    if metric:numel() ~= 1 then
      error(("ReduceLROnPlateau:step: metric must be a number or a one-element tensor, got a tensor of %d elements")
        :format(metric:numel()), 2)
    end
    metric = metric:item()
  end
  if type(metric) ~= "number" then
    error(("ReduceLROnPlateau:step: expected the metric (a number, e.g. the validation loss), got %s"):format(
      O.got(metric)), 2)
  end
  local opt = self.optimizer
  local other = rawget(opt, "_lr_scheduler")
  if other ~= nil and other ~= self then
    error(("ReduceLROnPlateau:step: this optimizer is also stepped by another scheduler (%s); the last to step would "
      .. "win: use one"):format(other.name), 2)
  end
  plateau_checked(self)
  local before = { self.last_epoch, self.best, self.num_bad_epochs, self.cooldown_counter }
  self.last_epoch = self.last_epoch + 1
  if self:_is_better(metric, self.best) then   -- a NaN metric is never better (torch's comparisons)
    self.best, self.num_bad_epochs = metric, 0
  else
    self.num_bad_epochs = self.num_bad_epochs + 1
  end
  if self.cooldown_counter > 0 then
    self.cooldown_counter = self.cooldown_counter - 1
    self.num_bad_epochs = 0
  end
  if self.num_bad_epochs > self.patience then
    -- a group added since the scheduler was made (opt:add_param_group): torch's _reduce_lr gives it the min_lr given
    -- as one number, and refuses a min_lr given as a list (it has none for the group); here such a group's lr went
    -- down to 0 past a min_lr of 1e-3, and a list's missing entry was taken as 0 without a word
    local ng = #opt.param_groups
    local function refuse(msg)   -- nothing changed
      self.last_epoch, self.best, self.num_bad_epochs, self.cooldown_counter = table.unpack(before)
      error("ReduceLROnPlateau:step: " .. msg, 3)
    end
    -- sched.min_lrs as a user wrote it (the message below asks for it): a list of one number >= 0 per group (a
    -- number, or a string in it, was Lua's own error in this file before review 10b, the step counted)
    local ml = self.min_lrs
    if type(ml) ~= "table" then
      refuse(("min_lrs must be a list of %d numbers >= 0 (one per parameter group), got %s"):format(ng, O.got(ml)))
    end
    if rawlen(ml) ~= ng then
      if self._default_min_lr == nil then
        refuse(("the optimizer has %d parameter groups, min_lr was given as a list of %d when the scheduler was "
          .. "made (a group was added since); set sched.min_lrs to a list of %d (torch's RuntimeError)")
          :format(ng, rawlen(ml), ng))
      end
      ml = {}
      for i = 1, ng do ml[i] = self._default_min_lr end
    end
    for i = 1, ng do
      local v = rawget(ml, i)
      if type(v) ~= "number" or not (v >= 0 and v < math.huge) then
        refuse(("min_lrs[%d] must be a finite number >= 0, got %s"):format(i, O.got(v)))
      end
    end
    self.min_lrs = ml
    for i, g in ipairs(opt.param_groups) do
      local old = g.lr
      local new = math.max(old * self.factor, self.min_lrs[i])
      if old - new > self.eps then g.lr = new end
    end
    self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
  end
  self._last_lr = {}
  for i, g in ipairs(opt.param_groups) do self._last_lr[i] = g.lr end
  rawset(opt, "_lr_scheduler", self)
  return self
end

function Plateau:get_last_lr() return Scheduler.get_last_lr(self) end

local PLATEAU_STATE = { "last_epoch", "best", "num_bad_epochs", "cooldown_counter" }
-- The settings a state records (`settings`), as the closed forms record their schedule: torch's state_dict carries
-- them and its load_state_dict puts them back; here they are the constructor's, so a state whose settings differ is
-- refused (strict, the default), as the closed forms refuse one whose schedule differs. Before stop 95 they were not
-- recorded, and a state saved with factor 0.5 and patience 2 loaded into a scheduler of factor 0.1 and patience 10
-- (or mode "max", which read the saved best the wrong way round) without a word. A state without them (saved before)
-- loads as before.
local PLATEAU_SETTINGS = { "mode", "threshold_mode", "factor", "patience", "threshold", "cooldown", "eps" }
-- A list field as a user may have written it (min_lrs, base_lrs), copied for a state: the other schedulers' check
-- (lr_list: finite numbers >= 0, read raw: a table whose __len lies made table.move run for ever; stop 97)
local function number_list(self, k)
  local v = lr_list(self, k, "ReduceLROnPlateau:state_dict")
  return table.move(v, 1, rawlen(v), 1, {})
end

local function plateau_settings(self)
  local st = { min_lrs = number_list(self, "min_lrs") }
  for _, k in ipairs(PLATEAU_SETTINGS) do st[k] = self[k] end
  return st
end

local function same_number(a, b)
  return a == b or (type(a) == "number" and type(b) == "number"
    and math.abs(a - b) <= 1e-12 * math.max(math.abs(a), math.abs(b)))
end

-- Why a state from state_dict() is not this ReduceLROnPlateau's (another class, or other settings), or nil
local function plateau_other(self, sd)
  if sd.name ~= nil and sd.name ~= self.name then
    return ("the state is a %s's, this scheduler is a %s"):format(tostring(sd.name), self.name)
  end
  local st = sd.settings
  if st == nil then return nil end
  if type(st) ~= "table" then return ("its settings must be a table, got %s"):format(O.got(st)) end
  local show = function(v) return type(v) == "string" and ("%q"):format(v) or tostring(v) end
  for _, k in ipairs(PLATEAU_SETTINGS) do
    local a, b = rawget(st, k), self[k]
    if not same_number(a, b) then
      return ("its settings differ: %s was %s, this one's is %s"):format(k, show(a), show(b))
    end
  end
  local ml = rawget(st, "min_lrs")
  local ok = type(ml) == "table" and rawlen(ml) == #self.min_lrs
  for i = 1, ok and #self.min_lrs or 0 do ok = ok and same_number(rawget(ml, i), self.min_lrs[i]) end
  if not ok then
    return ("its settings differ: min_lrs was %s, this one's is {%s}"):format(type(ml) == "table"
      and ("{" .. table.concat(ml, ", ") .. "}") or O.got(ml), table.concat(self.min_lrs, ", "))
  end
end
M._plateau_other = plateau_other

-- best is left out while it is the mode's start (+inf for "min", -inf for "max"), which loading restores; JSON, which a
-- checkpoint writes the state in, has no infinity. The other infinity, reached by a metric of -inf in mode "min" (or
-- +inf in "max"), after which no metric improves, is kept as the string "-inf" ("inf"), Python's str() of torch's
-- float: until stop 97 it was left out too, and a resumed scheduler started again from the mode's start (the first
-- metric after the resume counted as an improvement, and the lr was cut patience steps later than torch's).
function Plateau:state_dict()
  local sd = { base_lrs = number_list(self, "base_lrs"), name = self.name, settings = plateau_settings(self) }
  for _, k in ipairs(PLATEAU_STATE) do sd[k] = self[k] end
  if sd.best == (self.mode == "min" and math.huge or -math.huge) then sd.best = nil
  elseif sd.best == math.huge or sd.best == -math.huge then sd.best = sd.best > 0 and "inf" or "-inf" end
  sd._last_lr = self:get_last_lr()   -- torch's key: get_last_lr() after a load is the saved one
  -- torch's keys for the settings too (stop 99), at its top level: load_state_dict compares them there
  -- (min_lrs a fresh list of numbers; the others, scalars, only where JSON can hold them: a table written there by
  -- hand whose length lies hung state_dict, sweep seed 1 of stop 99, and sweep 112)
  for k, v in next, sd.settings do
    if k == "min_lrs" then sd[k] = table.move(v, 1, rawlen(v), 1, {})
    elseif type(v) ~= "table" and storable(v) then sd[k] = v end
  end
  sd.default_min_lr = rawget(self, "_default_min_lr")
  return sd
end

-- load_state_dict(sd [, strict=true]): strict=false takes a state saved with other settings (this one's stay), as
-- the closed forms' (torch's has no strict: it puts the saved settings back)
function Plateau:load_state_dict(sd, strict)
  if type(sd) ~= "table" then
    error(("ReduceLROnPlateau:load_state_dict: expected a table from state_dict(), got %s"):format(type(sd)), 2)
  end
  if strict ~= nil and type(strict) ~= "boolean" then
    error(("ReduceLROnPlateau:load_state_dict: strict must be a boolean, got %s"):format(O.got(strict)), 2)
  end
  if strict ~= false then
    -- (torch's default_min_lr: the min_lr a group added later gets, None where min_lr was a list)
    local keys = { "min_lrs", "default_min_lr" }
    for _, k in ipairs(PLATEAU_SETTINGS) do keys[#keys + 1] = k end
    local why = plateau_other(self, sd) or other_settings(sd, keys, function(k)
      return rawget(self, k == "default_min_lr" and "_default_min_lr" or k)
    end)
    if why then
      error(("ReduceLROnPlateau:load_state_dict: %s (torch puts the saved settings back; here they are the "
        .. "constructor's: make the scheduler as it was saved, or pass strict=false to keep this one's settings)")
        :format(why), 2)
    end
  end
  -- (below 2^63 - 1, as step checks them: it adds 1; a state of math.maxinteger loaded, and every step was refused)
  for _, k in ipairs { "last_epoch", "num_bad_epochs", "cooldown_counter" } do
    if math.type(sd[k]) ~= "integer" or sd[k] < 0 or sd[k] == math.maxinteger then
      error(("ReduceLROnPlateau:load_state_dict: %s must be an integer >= 0 (below 2^63 - 1), got %s"):format(k,
        O.got(sd[k])), 2)
    end
  end
  local best = sd.best == "inf" and math.huge or sd.best == "-inf" and -math.huge or sd.best   -- (state_dict's)
  if best ~= nil and (type(best) ~= "number" or best ~= best) then
    error(("ReduceLROnPlateau:load_state_dict: best must be a number (or \"inf\", \"-inf\"), got %s"):format(
      O.got(sd.best)), 2)
  end
  -- _last_lr checked before anything is set (until stop 97 a bad one was refused after the counters and best were
  -- loaded: the scheduler was left half loaded), read raw
  local last = sd._last_lr
  if last ~= nil then
    local ok = type(last) == "table" and rawlen(last) == #self.optimizer.param_groups
    for i = 1, ok and rawlen(last) or 0 do ok = ok and type(rawget(last, i)) == "number" and rawget(last, i) >= 0 end
    if not ok then
      error(("ReduceLROnPlateau:load_state_dict: _last_lr must be a list of %d numbers >= 0 (one per parameter "
        .. "group), got %s"):format(#self.optimizer.param_groups, O.got(last)), 2)
    end
  end
  self.last_epoch, self.num_bad_epochs, self.cooldown_counter = sd.last_epoch, sd.num_bad_epochs, sd.cooldown_counter
  self.best = best or (self.mode == "min" and math.huge or -math.huge)
  if last ~= nil then
    self._last_lr = table.move(last, 1, rawlen(last), 1, {})
  else   -- a state from before it was kept: the groups' lr, as the optimizer's own state restores them
    self._last_lr = {}
    for i, g in ipairs(self.optimizer.param_groups) do self._last_lr[i] = g.lr end
  end
  rawset(self.optimizer, "_lr_scheduler", self)
end

O.strict_arity(Plateau, "ReduceLROnPlateau")
-- transformers' other schedules (their step counts from 0; the warmup is t / num_warmup_steps):
-- get_constant_schedule(opt), get_constant_schedule_with_warmup(opt, num_warmup_steps),
-- get_polynomial_decay_schedule_with_warmup(opt, num_warmup_steps, num_training_steps [, lr_end=1e-7 [, power=1]]),
-- get_cosine_with_hard_restarts_schedule_with_warmup(opt, num_warmup_steps, num_training_steps [, num_cycles=1]),
-- get_inverse_sqrt_schedule(opt, num_warmup_steps [, timescale]); the arguments after opt may also come as one
-- table of their names (targs, above).
function M.get_constant_schedule(opt, ...)
  O.no_more("get_constant_schedule", "(opt)", ...)
  return new("get_constant_schedule", opt, function(_, base) return base end)
end

function M.get_constant_schedule_with_warmup(opt, a, ...)
  local N = "get_constant_schedule_with_warmup"
  local o = targs(N, opt, { "num_warmup_steps" }, { "num_warmup_steps" }, a, table.pack(...), "(opt, num_warmup_steps)")
  local warmup = o.num_warmup_steps
  return new(N, opt, function(t, base)
    if t < warmup then return base * warm(t, warmup) end
    return base
  end)
end

-- lr_init is the optimizer's default lr (transformers reads optimizer.defaults["lr"]), which must exceed lr_end:
-- after the warmup, (lr_init − lr_end)·(1 − progress)^power + lr_end, as a factor of each group's base.
function M.get_polynomial_decay_schedule_with_warmup(opt, a, ...)
  local N = "get_polynomial_decay_schedule_with_warmup"
  local o = targs(N, opt, { "num_warmup_steps", "num_training_steps", "lr_end", "power" },
    { "num_warmup_steps", "num_training_steps" }, a, table.pack(...),
    "(opt, num_warmup_steps, num_training_steps [, lr_end [, power]])")
  local warmup, total, lr_end, power = o.num_warmup_steps, o.num_training_steps, o.lr_end or 1e-7, o.power or 1
  check_rate(N, "lr_end", lr_end)
  check_rate(N, "power", power)
  local lr_init = opt.defaults and opt.defaults.lr
  if type(lr_init) ~= "number" or not (lr_init > lr_end) then
    error(("%s: lr_end (%s) must be smaller than the optimizer's initial lr (%s)"):format(N, tostring(lr_end),
      tostring(lr_init)), 2)
  end
  return new(N, opt, function(t, base)
    if t < warmup then return base * warm(t, warmup) end
    if t > total then return base * (lr_end / lr_init) end
    local remaining = 1 - (t - warmup) / (total - warmup)
    return base * (((lr_init - lr_end) * remaining ^ power + lr_end) / lr_init)
  end)
end

function M.get_cosine_with_hard_restarts_schedule_with_warmup(opt, a, ...)
  local N = "get_cosine_with_hard_restarts_schedule_with_warmup"
  local o = targs(N, opt, { "num_warmup_steps", "num_training_steps", "num_cycles" },
    { "num_warmup_steps", "num_training_steps" }, a, table.pack(...),
    "(opt, num_warmup_steps, num_training_steps [, num_cycles])")
  local warmup, total, cycles = o.num_warmup_steps, o.num_training_steps, o.num_cycles or 1
  check_int(N, "num_cycles", cycles, 0, 2)
  return new(N, opt, function(t, base)
    if t < warmup then return base * warm(t, warmup) end
    local progress = (t - warmup) / math.max(1, total - warmup)
    if progress >= 1 then return 0 end
    return base * math.max(0, 0.5 * (1 + math.cos(math.pi * ((cycles * progress) % 1))))
  end)
end

-- timescale: num_warmup_steps, or 10000 when that is 0 (transformers' default)
function M.get_inverse_sqrt_schedule(opt, a, ...)
  local N = "get_inverse_sqrt_schedule"
  local o = targs(N, opt, { "num_warmup_steps", "timescale" }, { "num_warmup_steps" }, a, table.pack(...),
    "(opt, num_warmup_steps [, timescale])")
  local warmup = o.num_warmup_steps
  local timescale = o.timescale
  if timescale == nil then timescale = warmup > 0 and warmup or 10000 end
  check_int(N, "timescale", timescale, 1, 2)
  return new(N, opt, function(t, base)
    if t < warmup then return base * warm(t, warmup) end
    return base / math.sqrt((t + timescale - warmup) / timescale)
  end)
end

-- get_scheduler(name, opt [, num_warmup_steps [, num_training_steps [, scheduler_specific_kwargs]]]) (or
-- (name, opt, {num_warmup_steps=, num_training_steps=, scheduler_specific_kwargs=})): transformers' (and
-- Accelerate's examples') way to pick a schedule by name. scheduler_specific_kwargs goes to the schedule (num_cycles,
-- lr_end, power, timescale). Its names that have no schedule here are refused by name.
local BY_NAME = {
  linear = { "get_linear_schedule_with_warmup", 2 },
  cosine = { "get_cosine_schedule_with_warmup", 2 },
  cosine_with_restarts = { "get_cosine_with_hard_restarts_schedule_with_warmup", 2 },
  polynomial = { "get_polynomial_decay_schedule_with_warmup", 2 },
  constant = { "get_constant_schedule", 0 },
  constant_with_warmup = { "get_constant_schedule_with_warmup", 1 },
  inverse_sqrt = { "get_inverse_sqrt_schedule", 1 },
}
local NOT_HERE = { cosine_with_min_lr = true, cosine_warmup_with_min_lr = true, warmup_stable_decay = true }
function M.get_scheduler(name, opt, a, b, c, ...)
  local N = "get_scheduler"
  O.no_more(N, "(name, opt [, num_warmup_steps [, num_training_steps [, scheduler_specific_kwargs]]])", ...)
  local names = { "reduce_lr_on_plateau" }
  for k in next, BY_NAME do names[#names + 1] = k end
  table.sort(names)
  local plateau = name == "reduce_lr_on_plateau"
  if not plateau and (type(name) ~= "string" or not BY_NAME[name]) then
    if type(name) == "string" and NOT_HERE[name] then
      error(("get_scheduler: transformers' schedule %q is not offered here (available: %s)"):format(name,
        table.concat(names, ", ")), 2)
    end
    error(("get_scheduler: name must be one of %s, got %s"):format(table.concat(names, ", "), O.got(name)), 2)
  end
  check_opt(N, opt)
  local o
  if type(a) == "table" then
    if b ~= nil or c ~= nil then error("get_scheduler: pass the steps as a table or as arguments, not both", 2) end
    check_keys(N, a, { num_warmup_steps = true, num_training_steps = true, scheduler_specific_kwargs = true })
    o = a
  else
    o = { num_warmup_steps = a, num_training_steps = b, scheduler_specific_kwargs = c }
  end
  local kw = o.scheduler_specific_kwargs or {}
  if type(kw) ~= "table" then
    error(("get_scheduler: scheduler_specific_kwargs must be a table, got %s"):format(O.got(kw)), 2)
  end
  O.check_plain("get_scheduler: scheduler_specific_kwargs", kw, 2)   -- (stop 102) a proxy's keys are not read
  -- The step counts a schedule does not use. transformers drops them unseen; here a warmup the schedule would not
  -- make is refused, and num_training_steps, which the generic call (transformers' and Accelerate's example scripts)
  -- passes to every schedule, is checked and taken where the schedule has no end, as it changes nothing there.
  local needs = plateau and 0 or BY_NAME[name][2]
  if o.num_warmup_steps ~= nil then check_int(N, "num_warmup_steps", o.num_warmup_steps, 0, 2) end
  if o.num_training_steps ~= nil then check_int(N, "num_training_steps", o.num_training_steps, 0, 2) end
  if needs == 0 and o.num_warmup_steps ~= nil and o.num_warmup_steps > 0 then
    error(("get_scheduler: %q has no warmup, got num_warmup_steps=%d (constant_with_warmup warms up; leave it out "
      .. "or 0)"):format(name, o.num_warmup_steps), 2)
  end
  if plateau then   -- transformers: ReduceLROnPlateau(opt, **scheduler_specific_kwargs)
    local ok, sched = pcall(M.ReduceLROnPlateau, opt, o.scheduler_specific_kwargs)
    if not ok then error(sched, 2) end
    return sched
  end
  local fn = BY_NAME[name][1]
  if needs == 0 then
    if next(kw) ~= nil then
      error(("get_scheduler: %q takes no scheduler_specific_kwargs, got key '%s'"):format(name, tostring(next(kw))), 2)
    end
    return M[fn](opt)
  end
  if o.num_warmup_steps == nil then
    error(("get_scheduler: %s requires num_warmup_steps, please provide that argument"):format(name), 2)
  end
  if needs == 2 and o.num_training_steps == nil then
    error(("get_scheduler: %s requires num_training_steps, please provide that argument"):format(name), 2)
  end
  local args = { num_warmup_steps = o.num_warmup_steps }
  if needs == 2 then args.num_training_steps = o.num_training_steps end
  for k, v in next, kw do
    if args[k] ~= nil then
      error(("get_scheduler: scheduler_specific_kwargs repeats '%s'"):format(tostring(k)), 2)
    end
    args[k] = v
  end
  local ok, sched = pcall(M[fn], opt, args)
  if not ok then error(sched, 2) end
  return sched
end

-- Whether v (a scheduler, or a prepared one) is a ReduceLROnPlateau, whose settings are compared by _plateau_other
-- rather than by a schedule function: _other_schedule's test (internal). By the class's mark, not by its identity: a
-- caller that requires this module anew after package.loaded lost it (busted's insulation between spec files does
-- that) gets a second Plateau class, and an identity test then took a plateau for a closed form and compared nothing.
function M._is_plateau(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(rawget(v, "scheduler") or v)
  return type(mt) == "table" and rawget(mt, "_plateau_class") == true
end

-- Whether v is a scheduler of this module (one of either class, or a prepared one, whose fields are its scheduler's):
-- what acc:prepare wraps and save_state saves (internal: their one test).
function M._is_scheduler(v)
  return type(v) == "table" and v._is_lr_scheduler == true and type(v.optimizer) == "table"
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Scheduler, "LRScheduler", function(self) return rawget(self, "name") end)
-- the schedulers' class under torch's name (torch.optim.lr_scheduler.LRScheduler): what getmetatable(sched) is,
-- and where help(sched.step) finds its methods
M.LRScheduler = Scheduler
return M
