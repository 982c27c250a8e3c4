-- fp8.amp — the mixed-precision switch ("no" | "bf16" | "fp16", the values Accelerate's
-- mixed_precision takes; "fp8" joins later) mapped onto fp8.set_autocast_dtype, and GradScaler,
-- the dynamic loss scaler fp16 needs (GradScalerKwargs defaults, docs/fp8-spec.md §5).
local O = require "fp8.opts"
local C = require "fp8._data"

local M = {}

-- mode -> autocast dtype. "fp32" is accepted as a synonym of "no".
M.MODES = { no = "fp32", fp32 = "fp32", bf16 = "bf16", fp16 = "fp16" }
M.MODE_NAMES = "no, bf16, fp16"

local function fp8mod()
  local fp8 = require "fp8"
  if type(fp8.set_autocast_dtype) ~= "function" or type(fp8.autocast_dtype) ~= "function" then
    error("mixed precision needs fp8.set_autocast_dtype (the autograd engine), which this build lacks", 3)
  end
  return fp8
end

-- The autocast dtype for a mixed-precision mode; an unknown mode is an error listing the valid ones, in fname's name,
-- raised at `level` as fname's caller counts it. Internal: as the public dtype_for's own parameters, a second argument
-- was taken for a level (dtype_for("x", 0) raised at this file's line) and a third for the name.
local function dtype_for(mode, level, fname)
  local dt = type(mode) == "string" and M.MODES[mode:lower()]
  if not dt then
    error(("%s: mixed precision must be one of %s; got %s"):format(fname, M.MODE_NAMES,
      type(mode) == "string" and ("'" .. mode .. "'") or type(mode)), level + 1)
  end
  return dt
end

-- dtype_for(mode): the autocast dtype of a mode ("no" or "fp32", "bf16", "fp16")
function M.dtype_for(mode, ...)
  O.no_more("dtype_for", "(mode)", ...)
  local dt = dtype_for(mode, 2, "dtype_for")   -- not a tail call: level 2 counts this frame
  return dt
end

-- set_mixed_precision(mode) switches autocast for the rest of the program; returns the previous dtype.
function M.set_mixed_precision(mode, ...)
  O.no_more("set_mixed_precision", "(mode)", ...)
  local dt = dtype_for(mode, 2, "set_mixed_precision")
  local fp8 = fp8mod()
  local prev = fp8.autocast_dtype()
  fp8.set_autocast_dtype(dt)
  return prev
end

-- autocast(mode, fn, ...) runs fn(...) with the mode's autocast on and restores the previous
-- setting afterwards, also when fn raises (the error is passed on unchanged).
function M.autocast(mode, fn, ...)
  local dt = dtype_for(mode, 2, "autocast")
  if type(fn) ~= "function" then error(("autocast: expected a function as argument #2, got %s"):format(type(fn)), 2) end
  local fp8 = fp8mod()
  local prev = fp8.autocast_dtype()
  fp8.set_autocast_dtype(dt)
  local res = table.pack(require("fp8.core")._pcall_scoped("autocast", fn, ...))
  fp8.set_autocast_dtype(prev)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- ---- GradScaler ---------------------------------------------------------------------------

local GradScaler = {}
GradScaler.__index = GradScaler
GradScaler.__name = "GradScaler"
M.GradScaler = GradScaler

-- The scale is an fp32 number, as torch's (a float32 tensor): every value it takes is rounded to fp32, growth
-- that would make it infinite in fp32 is not applied, and a number given as a Lua integer is a float from here on
-- (65536 * 2 repeated as integers would wrap past 2^63 to 0).
-- The state of one iteration (since the last update()), fresh: found_inf, whether some grads unscaled had inf/NaN;
-- _unscaled, optimizer -> whether its grads had inf/NaN, for the optimizers unscaled (by unscale_ or step): torch's
-- per-optimizer state, so a second optimizer's gradients are unscaled too; _stepped, the optimizers stepped (or
-- skipped); _checks, how many unscales had a gradient to check (a count of its own: the tables are weak, and an
-- optimizer collected between its step and update() took its entry with it, where torch's state, keyed by id,
-- stays). Returns self.
local function new_iteration(self)
  self.found_inf = false
  self._checks = 0
  self._unscaled, self._stepped = setmetatable({}, { __mode = "k" }), setmetatable({}, { __mode = "k" })
  self._no_grads = setmetatable({}, { __mode = "k" })   -- the optimizers unscaled without a single gradient
  return self
end

local f32, scale_ok, F32_MAX = O.f32, O.fp32_scale_ok, O.F32_MAX

local DEFAULTS = { init_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5, growth_interval = 2000, enabled = true }
local KEYS = { "init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled" }

setmetatable(GradScaler, { __call = function(_, opts, ...)
  O.no_more("GradScaler", "([options])", ...)
  opts = opts or {}
  if type(opts) ~= "table" then error(("GradScaler: expected an options table, got %s"):format(type(opts)), 2) end
  O.check("GradScaler", opts, KEYS, 2)
  local o = {}
  for _, k in ipairs(KEYS) do if opts[k] == nil then o[k] = DEFAULTS[k] else o[k] = opts[k] end end
  local function num(k, cond, what)
    if type(o[k]) ~= "number" or not cond(o[k]) then
      error(("GradScaler: %s must be %s, got %s"):format(k, what, tostring(o[k])), 3)
    end
  end
  num("init_scale", scale_ok,
    "a number > 0 that fits fp32 (at most 3.4028235e38; the scale is fp32, as torch's), its reciprocal too")
  num("growth_factor", function(v) return v > 1 and v <= F32_MAX end, "a number > 1 (at most fp32's max)")
  num("backoff_factor", function(v) return v > 0 and v < 1 end, "a number in (0, 1)")
  num("growth_interval", function(v) return math.type(v) == "integer" and v >= 1 end, "an integer >= 1")
  if type(o.enabled) ~= "boolean" then error(("GradScaler: enabled must be a boolean, got %s"):format(type(o.enabled)), 2) end
  return new_iteration(setmetatable({
    _scale = f32(o.init_scale), growth_factor = o.growth_factor + 0.0, backoff_factor = o.backoff_factor + 0.0,
    growth_interval = o.growth_interval, enabled = o.enabled,
    _growth_tracker = 0,      -- clean steps since the last growth or backoff
    skipped_steps = 0, steps = 0,
  }, GradScaler))
end })

-- The Accelerator's prepared optimizers step one at a time, each calling for an update as Accelerate's do;
-- the update waits until the scale is next read (scale, get_scale, state_dict), so that every optimizer of
-- the iteration is unscaled with the scale its gradients were made with and the scale moves once per
-- iteration (torch's rule for several optimizers: one update() after all of them stepped).
function GradScaler:_update_later() self._update_due = true end
local function settle(self) if rawget(self, "_update_due") then self:update() end end

function GradScaler:get_scale() settle(self); return self.enabled and self._scale or 1.0 end
function GradScaler:is_enabled() return self.enabled end

-- scale(loss) -> loss * scale (the loss itself when disabled).
function GradScaler:scale(loss)
  -- dt: true for a number, a tensor's dtype, false for a released tensor, nil for anything else
  local dt = type(loss) == "number" or require("fp8.core")._live_dtype(loss)
  if dt == nil then error(("GradScaler:scale: loss must be a tensor or a number, got %s"):format(type(loss)), 2) end
  if not self.enabled then return loss end
  -- a released or FP8 loss failed in the product below, as "amp.lua:126: mul: ..."
  if dt == false then error("GradScaler:scale: the loss tensor has been released (freed or closed)", 2) end
  if dt ~= true and require("fp8.core").format(dt).is_fp8 then
    error(("GradScaler:scale: the loss is an %s tensor: call :dequantize() first (FP8 tensors only hold quantized "
      .. "data)"):format(dt), 2)
  end
  settle(self)
  return loss * self._scale
end

-- The parameters an optimizer updates: param_groups[i].params, .params, or :parameters().
local function optimizer_params(opt)
  if type(opt) ~= "table" then error(("GradScaler: expected an optimizer, got %s"):format(type(opt)), 3) end
  local out
  if type(opt.param_groups) == "table" then
    out = {}
    for i, g in ipairs(opt.param_groups) do
      -- (a group or a parameter that is not what an optimizer holds failed at 'attempt to index a number value
      -- (local 'g')' in this file until stop 101)
      if type(g) ~= "table" then
        error(("GradScaler: the optimizer's param_groups[%d] must be a parameter group (a table), got %s"):format(i,
          require("fp8.opts").got(g)), 3)
      end
      for _, p in ipairs(g.params or g) do out[#out + 1] = p end
    end
  elseif type(opt.params) == "table" then out = opt.params
  elseif type(opt.parameters) == "function" then
    out = opt:parameters()
    -- (a parameters() answering nil failed at 'attempt to index a nil value' in ipairs below until stop 103)
    if type(out) ~= "table" then
      error(("GradScaler: the optimizer's parameters() must return a list of tensors, got %s"):format(
        require("fp8.opts").got(out)), 3)
    end
  else error("GradScaler: cannot find the optimizer's parameters (expected param_groups or params)", 3) end
  for i, p in ipairs(out) do
    if type(p) ~= "table" and not require("fp8.core").is_tensor(p) then   -- (a table: an object with a grad)
      error(("GradScaler: the optimizer's parameter %d must be a tensor, got %s"):format(i,
        require("fp8.opts").got(p)), 3)
    end
  end
  return out
end

local function grad_of(p)
  local g = p.grad
  if type(g) == "function" then g = p:grad() end
  return g
end

-- unscale_(optimizer): divide every gradient of the optimizer by the scale in place, and note whether any
-- had inf/NaN. Call it before gradient clipping; step(optimizer) then does not unscale again. Once per
-- optimizer between two update() calls, as torch's.
function GradScaler:unscale_(optimizer)
  if not self.enabled then return end
  if self._stepped[optimizer] then error("GradScaler: unscale_() is being called after step()", 2) end
  if self._unscaled[optimizer] ~= nil then
    error("GradScaler: unscale_() was already called on this optimizer since the last update()", 2)
  end
  local inv = 1.0 / self._scale
  local grads = {}
  for _, p in ipairs(optimizer_params(optimizer)) do
    local g = grad_of(p)
    if g ~= nil then grads[#grads + 1] = g end
  end
  -- one call for all of them: on a device, one wait for every inf/NaN check rather than one per gradient
  local found = C.unscale_(grads, inv)
  self._unscaled[optimizer] = found
  if #grads == 0 then self._no_grads[optimizer] = true else self._checks = self._checks + 1 end
  self.found_inf = self.found_inf or found
end

-- is_unscaled(optimizer): whether the optimizer's gradients were unscaled since the last update().
function GradScaler:is_unscaled(optimizer) return self._unscaled[optimizer] ~= nil end

-- step(optimizer, ...) -> true when the optimizer stepped, false when skipped for inf/NaN grads.
function GradScaler:step(optimizer, ...)
  if type(optimizer) ~= "table" or type(optimizer.step) ~= "function" then
    error(("GradScaler:step: expected an optimizer with :step(), got %s"):format(type(optimizer)), 2)
  end
  if self.enabled and self._stepped[optimizer] then
    -- torch refuses a second step between updates (it would step on the same gradients twice); the Accelerator's
    -- update, due after each of its steps as in Accelerate, comes first
    if not rawget(self, "_update_due") then
      error("GradScaler:step: step() has already been called on this optimizer since the last update()", 2)
    end
    settle(self)
  end
  self.steps = self.steps + 1
  if not self.enabled then optimizer:step(...); return true end
  if self._unscaled[optimizer] == nil then self:unscale_(optimizer) end
  -- torch's assertion: with no gradient there is no inf check, and the step counted as a clean one grew the scale
  if self._no_grads[optimizer] then
    -- (forgotten, so that a step after a backward unscales afresh: torch's stays stuck until a new iteration)
    self._unscaled[optimizer], self._no_grads[optimizer] = nil, nil
    error("GradScaler:step: no inf checks were recorded for this optimizer: none of its parameters has a gradient "
      .. "(call backward on the scaled loss first; torch: 'No inf checks were recorded for this optimizer.')", 2)
  end
  if self._unscaled[optimizer] then   -- this optimizer's gradients had inf/NaN
    self.skipped_steps = self.skipped_steps + 1
    self._stepped[optimizer] = true
    return false
  end
  optimizer:step(...)
  self._stepped[optimizer] = true
  return true
end

-- update([new_scale]): back off after an overflow, grow after growth_interval clean steps.
function GradScaler:update(new_scale)
  if new_scale ~= nil and self.enabled then
    if type(new_scale) ~= "number" or not scale_ok(new_scale) then
      error(("GradScaler:update: new_scale must be a number > 0 that fits fp32, its reciprocal too, got %s"):format(
        tostring(new_scale)), 2)
    end
    -- the update due after an Accelerator's optimizer step comes first: Accelerate's step already made it
    settle(self)
  end
  self._update_due = nil
  if not self.enabled then return end
  if new_scale ~= nil then
    -- the count of clean steps goes on: torch's update(new_scale) sets the scale alone
    self._scale = f32(new_scale)
  else
    -- torch asserts this: an update with no step or unscale_ since the last one has no inf check to act on
    -- (it would count a step nobody took as a clean one and grow the scale)
    -- (an optimizer unscaled without a gradient recorded no inf check: torch's rule too)
    if self._checks == 0 then
      error("GradScaler:update: no optimizer was stepped or unscaled since the last update() "
        .. "(call scaler:step(optimizer) first; torch: 'No inf checks were recorded prior to update.')", 2)
    end
    -- as torch's kernel (_amp_update_scale_): the fp32 scale times the factor as a double, the product rounded
    -- to fp32 once (1000 backed off by 0.3 three times is 27.0, not 27.000002 as with the factor rounded first)
    if self.found_inf then
      -- left as it is where backing off would reach 0 or a scale whose reciprocal is inf (about 150 skipped steps
      -- in a row from 65536): torch's goes on to 0, where the next clean step unscales by inf and writes NaN into
      -- every weight, and where load_state_dict refuses the state save_state wrote
      local backed = f32(self._scale * self.backoff_factor)
      if scale_ok(backed) then self._scale = backed end
      self._growth_tracker = 0
    else
      self._growth_tracker = self._growth_tracker + 1
      if self._growth_tracker == self.growth_interval then
        local grown = f32(self._scale * self.growth_factor)
        if grown < math.huge then self._scale = grown end   -- torch keeps the scale finite in fp32 too
        self._growth_tracker = 0
      end
    end
  end
  new_iteration(self)
end

function GradScaler:state_dict()
  if not self.enabled then return {} end
  settle(self)
  return { scale = self._scale, growth_factor = self.growth_factor, backoff_factor = self.backoff_factor,
           growth_interval = self.growth_interval, _growth_tracker = self._growth_tracker }
end

-- load_state_dict(sd): every field is checked before any is set (a failed load changes nothing). An enabled scaler
-- takes whole states only, every key of state_dict's (torch's raises KeyError for a missing one); a disabled one
-- takes any of them (torch's ignores the state).
local SCALER_KEYS = { "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker" }
local SCALER_STATE = {
  scale = { function(v) return type(v) == "number" and scale_ok(v) end,
            "a number > 0 that fits fp32, its reciprocal too" },
  growth_factor = { function(v) return type(v) == "number" and v > 1 and v <= F32_MAX end, "a number > 1 (at most fp32's max)" },
  backoff_factor = { function(v) return type(v) == "number" and v > 0 and v < 1 end, "a number in (0, 1)" },
  growth_interval = { function(v) return math.type(v) == "integer" and v >= 1 end, "an integer >= 1" },
  _growth_tracker = { function(v) return math.type(v) == "integer" and v >= 0 end, "an integer >= 0" },
}
function GradScaler:load_state_dict(sd)
  if type(sd) ~= "table" then error(("GradScaler:load_state_dict: expected a table, got %s"):format(type(sd)), 2) end
  if self.enabled and next(sd) == nil then   -- torch's refusal: the scale would silently stay at init_scale
    error("GradScaler:load_state_dict: the state is empty, possibly because it was saved from a disabled GradScaler", 2)
  end
  for k, v in next, sd do
    local rule = SCALER_STATE[k]
    if not rule then
      error(("GradScaler:load_state_dict: unknown key '%s' (valid: %s)"):format(tostring(k),
        table.concat(SCALER_KEYS, ", ")), 2)
    end
    if not rule[1](v) then
      error(("GradScaler:load_state_dict: %s must be %s, got %s"):format(k, rule[2], tostring(v)), 2)
    end
  end
  for _, k in ipairs(self.enabled and SCALER_KEYS or {}) do
    if sd[k] == nil then
      error(("GradScaler:load_state_dict: the state has no '%s' (a state from state_dict() holds %s; torch's "
        .. "raises KeyError)"):format(k, table.concat(SCALER_KEYS, ", ")), 2)
    end
  end
  -- JSON reads 65536 back as an integer: numbers that are floats in the scaler stay floats
  if sd.scale ~= nil then self._scale = f32(sd.scale) end
  if sd.growth_factor ~= nil then self.growth_factor = sd.growth_factor + 0.0 end
  if sd.backoff_factor ~= nil then self.backoff_factor = sd.backoff_factor + 0.0 end
  for _, k in ipairs { "growth_interval", "_growth_tracker" } do
    if sd[k] ~= nil then self[k] = sd[k] end
  end
  -- the loaded state is one taken after an update: a pending one, and this iteration's unscaling, are void
  self._update_due = nil
  new_iteration(self)
end

function GradScaler:__tostring()
  settle(self)
  return ("GradScaler(scale=%g, growth_tracker=%d/%d, skipped=%d%s)"):format(self._scale, self._growth_tracker,
    self.growth_interval, self.skipped_steps, self.enabled and "" or ", disabled")
end

local ok, help = pcall(require, "fp8.help")
if ok and help.add then
  help.add { section = "Training", name = "amp.autocast", sig = "fp8.amp.autocast(mode, fn, ...)",
    doc = "Runs fn(...) with mixed precision mode \"no\" | \"bf16\" | \"fp16\" (GEMM inputs rounded to that dtype,\n"
       .. "fp32 accumulation, fp32 master weights) and restores the previous mode, also on error.\n"
       .. "fp8.amp.set_mixed_precision(mode) switches it for good." }
  help.add { section = "Training", name = "amp.GradScaler",
    sig = "fp8.amp.GradScaler{init_scale=65536, growth_factor=2, backoff_factor=0.5, growth_interval=2000, enabled=true}",
    doc = "Dynamic loss scaling for fp16: scaler:scale(loss):backward(); scaler:step(opt) (skipped when a grad has\n"
       .. "inf/NaN); scaler:update() (backoff on overflow, growth after growth_interval clean steps); :get_scale().\n"
       .. "scaler:unscale_(opt) unscales its gradients early (to clip them); :is_unscaled(opt), :is_enabled();\n"
       .. ":state_dict() / :load_state_dict(sd) save and restore the scale and its counters, as torch's.\n"
       .. "Fields to read: found_inf (whether a gradient unscaled since the last update() held an inf or NaN;\n"
       .. "update() clears it), steps and skipped_steps (step() calls, and those skipped), growth_factor,\n"
       .. "backoff_factor, growth_interval." }
  help.add { section = "Training", name = "amp.MODES", sig = "fp8.amp.MODES / fp8.amp.MODE_NAMES",
    doc = "MODES maps each mixed-precision mode to the autocast dtype it computes in: no = \"fp32\" (and fp32, its\n"
       .. "synonym), bf16, fp16 (what fp8.amp.dtype_for reads, case-insensitively); MODE_NAMES is the text \""
       .. M.MODE_NAMES .. "\"\nthat messages list. Tables to read, not to change." }
  help.ALIASES["amp.MODE_NAMES"] = "amp.MODES"
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(GradScaler, "GradScaler")
return M
