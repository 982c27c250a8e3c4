-- lr_scheduler.lua — fp8.optim.lr_scheduler: learning-rate schedules that set each parameter group's
-- lr from its initial lr. LambdaLR is the base (lr = base_lr · f(epoch)); StepLR, MultiStepLR, ExponentialLR,
-- LinearLR, CosineAnnealingLR, warmup_cosine (linear warmup, then cosine decay to min_lr) and transformers'
-- get_linear/cosine_schedule_with_warmup are built on it. Call :step() after
-- optimizer:step(); :get_last_lr() returns the list of current lrs.
-- Every schedule is a closed form of (step, base lr): an lr written into a group by hand lasts until the
-- scheduler's next step, which writes the schedule's value again (torch's chainable StepLR would scale the
-- hand-set lr instead), and two schedulers stepping one optimizer are refused (torch multiplies them). A group
-- added to the optimizer after the scheduler was made joins the schedule with its own lr (or initial_lr) as its
-- base, at the schedule's current step.
local O = require "fp8.opts"
local M = {}

-- These checks raise at their caller's caller (level 3: a constructor's line in the user's code); one more
-- function between (warmup_args) passes level 4.
local function check_opt(name, opt, level)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    error(("%s: expected an optimizer from fp8.optim, got %s"):format(name, type(opt)), level or 3)
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

local Scheduler = {}
Scheduler.__index = Scheduler
Scheduler.__name = "optim.lr_scheduler"   -- help(sched) finds the schedulers' entry by it

-- new(name, opt, lr_fn, [last_epoch]) — lr_fn(epoch, base_lr, group_index) → lr. Sets epoch 0's lr now,
-- as PyTorch's constructors do.
local function new(name, opt, lr_fn, last_epoch)
  check_opt(name, opt)
  local self = setmetatable({ name = name, optimizer = opt, _lr_fn = lr_fn, base_lrs = {} }, Scheduler)
  for i, g in ipairs(opt.param_groups) do
    g.initial_lr = g.initial_lr or g.lr
    self.base_lrs[i] = g.initial_lr
  end
  self.last_epoch = (last_epoch or -1)
  local ok, err = pcall(self.step, self)
  if not ok then error(err, 2) end   -- reached by tail calls: level 2 is the constructor's caller
  return self
end

function Scheduler:get_lr()
  -- a group added since (opt:add_param_group) joins with its own lr as its base
  for i = #self.base_lrs + 1, #self.optimizer.param_groups do
    local g = self.optimizer.param_groups[i]
    g.initial_lr = g.initial_lr or g.lr
    self.base_lrs[i] = g.initial_lr
  end
  local out = {}
  for i, base in ipairs(self.base_lrs) do
    local lr = self._lr_fn(self.last_epoch, base, i)
    if type(lr) ~= "number" or not (lr >= 0 and lr < math.huge) then
      error(("%s: the schedule gave group %d the learning rate %s at step %d (expected a finite number >= 0)"):format(
        self.name, i, tostring(lr), self.last_epoch), 0)
    end
    out[i] = lr
  end
  return out
end

-- step([epoch]): advance one step (or jump to `epoch`) and write the new lrs into the groups.
function Scheduler:step(epoch)
  local prev = self.last_epoch
  if epoch ~= nil then
    check_int(self.name .. ":step", "epoch", epoch, 0)
    self.last_epoch = epoch
  else
    self.last_epoch = self.last_epoch + 1
  end
  -- Two schedulers stepping one optimizer: torch's chainable ones multiply their effects (warmup times decay), but
  -- each schedule here is a closed form of the step and base lr, so the last to step would win without a word.
  -- The optimizer remembers the scheduler that stepped it last; another one stepping it is refused (a scheduler
  -- made to replace one, which is not stepped again, is fine).
  local opt = self.optimizer
  local other = rawget(opt, "_lr_scheduler")
  if other ~= nil and other ~= self and prev >= 0 then
    self.last_epoch = prev
    error(("%s:step: this optimizer is also stepped by another scheduler (%s); torch would multiply the two "
      .. "schedules, fp8lab's are closed forms and the last to step would win: use one scheduler (a LambdaLR of "
      .. "their product, or warmup_cosine for a warmup then a decay)"):format(self.name, other.name), 2)
  end
  local ok, lrs = pcall(self.get_lr, self)
  if not ok then self.last_epoch = prev; error(lrs, 2) end   -- the groups keep their lrs
  -- a group added while get_lr ran (by an lr_lambda) has no lr in lrs: it keeps its own, as torch's zip leaves it, and
  -- joins at the next step (writing nil erased it, and the optimizer's step then failed on it)
  for i, g in ipairs(opt.param_groups) do if lrs[i] ~= nil then g.lr = lrs[i] end end
  self._last_lr = lrs
  rawset(opt, "_lr_scheduler", self)
  return self
end

function Scheduler:get_last_lr()
  return table.move(self._last_lr, 1, #self._last_lr, 1, {})
end

function Scheduler:state_dict()
  return { last_epoch = self.last_epoch, base_lrs = table.move(self.base_lrs, 1, #self.base_lrs, 1, {}) }
end

function Scheduler:load_state_dict(sd)
  if type(sd) ~= "table" then
    error(("%s:load_state_dict: expected a table from state_dict(), got %s"):format(self.name, type(sd)), 2)
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
  self.base_lrs = table.move(sd.base_lrs, 1, ngroups, 1, {})
  self.last_epoch = sd.last_epoch
  local lrs = self:get_lr()
  for i, g in ipairs(self.optimizer.param_groups) do if lrs[i] ~= nil then g.lr = lrs[i] end end
  self._last_lr = lrs
  rawset(self.optimizer, "_lr_scheduler", self)   -- the optimizer's scheduler now (step's check)
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
  return new("StepLR", opt, function(epoch, base) return base * gamma ^ (epoch // step_size) end)
end

-- CosineAnnealingLR(opt, {T_max, eta_min=0}): closed form η_min + (base − η_min)(1 + cos(π·t/T_max))/2.
function M.CosineAnnealingLR(opt, opts, ...)
  check_opt("CosineAnnealingLR", opt)
  no_more("CosineAnnealingLR", "(opt, {T_max=, eta_min=})", ...)
  check_keys("CosineAnnealingLR", opts, { T_max = true, eta_min = true })
  check_int("CosineAnnealingLR", "T_max", opts.T_max, 1)
  local eta_min, T = opts.eta_min or 0, opts.T_max
  check_rate("CosineAnnealingLR", "eta_min", eta_min)
  return new("CosineAnnealingLR", opt, function(epoch, base)
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * epoch / T)) / 2
  end)
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

-- MultiStepLR(opt, {milestones, gamma=0.1}): lr = base · gamma^(how many milestones ≤ epoch), a milestone listed
-- twice counting twice (torch's Counter).
function M.MultiStepLR(opt, opts, ...)
  check_opt("MultiStepLR", opt)
  no_more("MultiStepLR", "(opt, {milestones=, gamma=})", ...)
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
  end)
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
  return new("ExponentialLR", opt, function(epoch, base) return base * gamma ^ epoch end)
end

-- LinearLR(opt, {start_factor=1/3, end_factor=1, total_iters=5}): the factor goes linearly from start_factor to
-- end_factor over total_iters steps and stays there: base · (s·(1 − r) + e·r),
-- r = min(epoch, total_iters) / total_iters.
function M.LinearLR(opt, opts, ...)
  check_opt("LinearLR", opt)
  no_more("LinearLR", "(opt [, {start_factor=, end_factor=, total_iters=}])", ...)
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
  end)
end

-- The schedules of transformers.optimization that Accelerate's examples use, under their names:
-- get_linear_schedule_with_warmup(opt, num_warmup_steps, num_training_steps) and
-- get_cosine_schedule_with_warmup(opt, num_warmup_steps, num_training_steps [, num_cycles=0.5]) (or one table of
-- those keys after opt). Warmup is step / warmup (0 at step 0, unlike warmup_cosine's first step); then linear decay
-- to 0 at num_training_steps, or max(0, (1 + cos(2π · num_cycles · progress)) / 2).
local function warmup_args(name, opt, a, b, c, with_cycles)
  check_opt(name, opt, 4)
  local o
  if type(a) == "table" then
    o = a
    if b ~= nil then error(("%s: pass the steps as a table or as arguments, not both"):format(name), 3) end
  else
    o = { num_warmup_steps = a, num_training_steps = b, num_cycles = c }   -- (no_more refused a c it takes not)
  end
  check_keys(name, o, { num_warmup_steps = true, num_training_steps = true, num_cycles = with_cycles or nil }, 4)
  check_int(name, "num_warmup_steps", o.num_warmup_steps, 0, 4)
  check_int(name, "num_training_steps", o.num_training_steps, 0, 4)
  local cycles = o.num_cycles or 0.5
  if type(cycles) ~= "number" or not (cycles >= 0 and cycles < math.huge) then
    error(("%s: num_cycles must be a finite number >= 0, got %s"):format(name, tostring(cycles)), 3)
  end
  return o.num_warmup_steps, o.num_training_steps, cycles
end

function M.get_linear_schedule_with_warmup(opt, a, b, ...)
  O.no_more("get_linear_schedule_with_warmup", "(opt, num_warmup_steps, num_training_steps)", ...)
  local warmup, total = warmup_args("get_linear_schedule_with_warmup", opt, a, b, nil, false)
  return new("get_linear_schedule_with_warmup", opt, function(step, base)
    if step < warmup then return base * step / math.max(1, warmup) end
    return base * math.max(0, (total - step) / math.max(1, total - warmup))
  end)
end

function M.get_cosine_schedule_with_warmup(opt, a, b, c, ...)
  O.no_more("get_cosine_schedule_with_warmup", "(opt, num_warmup_steps, num_training_steps [, num_cycles])", ...)
  local warmup, total, cycles = warmup_args("get_cosine_schedule_with_warmup", opt, a, b, c, true)
  return new("get_cosine_schedule_with_warmup", opt, function(step, base)
    if step < warmup then return base * step / math.max(1, warmup) end
    local progress = (step - warmup) / math.max(1, total - warmup)
    return base * math.max(0, (1 + math.cos(math.pi * cycles * 2 * progress)) / 2)
  end)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Scheduler, "LRScheduler", function(self) return rawget(self, "name") end)
-- the schedulers' class under torch's name (torch.optim.lr_scheduler.LRScheduler): what getmetatable(sched) is,
-- and where help(sched.step) finds its methods
M.LRScheduler = Scheduler
return M
