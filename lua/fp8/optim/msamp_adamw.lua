-- msamp_adamw.lua — MS-AMP's low-bit AdamW (docs/fp8-spec.md §4, levels O2 and O3), built from an existing
-- fp8.optim.AdamW so that `acc:prepare(model, opt)` can swap it in: same param_groups (lr, betas,
-- eps, weight_decay — schedulers keep working), but per parameter the first moment is E4M3 and the
-- second fp16, each with its own power-of-two scale, updated by one fused C step
-- (fp8._optim.msamp_adamw_step, beside AdamW's). Parameters may be fp32 or fp16 (O2 keeps Linear weights in fp16);
-- gradients fp32 or FP8. At O3 a parameter may carry an E4M3 copy the forward uses
-- (`fp8_weights[p]`), re-cast after each update.
local core = require "fp8.core"
local Optimizer = require "fp8.optim.optimizer"
local C = require "fp8._optim"
local memory = require "fp8._memory"

local MSAMPAdamW = Optimizer.class()

local AdamW = require "fp8.optim.adamw"
local FP8Linear = require "fp8.nn.fp8_linear"   -- (O3: the E4M3 weight the step re-casts is marked fresh)

-- Same options and checks as AdamW (the messages name MSAMPAdamW).
function MSAMPAdamW.new(params, opts) return Optimizer.new(MSAMPAdamW, "MSAMPAdamW", AdamW.DEFAULTS, params, opts) end
function MSAMPAdamW:_check_group(g)
  AdamW._check_group(self, g)
  if g.maximize then
    error(self.name .. ": maximize=true is not supported by MS-AMP's AdamW (its moments' scales)", 0)
  end
  if g.amsgrad then
    error(self.name .. ": amsgrad=true is not supported by MS-AMP's AdamW (its low-bit second moment has no running "
      .. "maximum here)", 0)
  end
end
MSAMPAdamW._param_dtypes = { fp32 = true, fp16 = true }   -- fp8._optim.msamp_adamw_step: fp32 or fp16 weights

-- from_adamw(opt, {fp8_weights = {[param] = e4m3 tensor}, moments = "fp8"|"fp32", level = "O2"}) → a MSAMPAdamW
-- over the same groups (level: the MS-AMP level its messages name). moments="fp32" is MS-AMP O1: fp32 m and v,
-- fp16 weights, FP8 gradients.
function MSAMPAdamW.from_adamw(opt, extra)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    error(("from_adamw: expected an AdamW optimizer, got %s"):format(type(opt)), 2)
  end
  if extra ~= nil and type(extra) ~= "table" then
    error(("from_adamw: options must be a table {fp8_weights=, moments=, level=}, got %s"):format(type(extra)), 2)
  end
  local groups = {}
  for i, g in ipairs(opt.param_groups) do
    -- (a group that is not a table failed below with 'attempt to index a number value (local 'g')'; stop 101)
    if type(g) ~= "table" then
      error(("from_adamw: expected an AdamW optimizer, whose param_groups are tables, got %s as group %d"):format(
        require("fp8.opts").got(g), i), 2)
    end
    -- an Adam (fp8.optim.Adam, or a script's own class of that name): its weight decay is L2 (added to the gradient),
    -- this step's decoupled, so it takes the Adam's place only where they are the same step: without decay, or with
    -- torch 2.x's decoupled_weight_decay=true
    local wd = g.weight_decay
    if opt.name == "Adam" and wd ~= nil and wd ~= 0 and g.decoupled_weight_decay ~= true then
      error(("MS-AMP %s replaces the optimizer by MSAMPAdamW, whose weight decay is AdamW's (decoupled); an Adam's "
        .. "weight_decay (parameter group %d: %s) is L2 on the gradient, another step: use fp8.optim.AdamW, "
        .. "decoupled_weight_decay=true or weight_decay=0"):format(extra and extra.level or "O2", i, tostring(wd)), 0)
    end
    for _, k in ipairs { "maximize", "amsgrad" } do
      if g[k] == true then
        error(("MSAMPAdamW: parameter group %d has %s=true, which MS-AMP's AdamW does not support (the msamp "
          .. "backend replaces an AdamW by it)"):format(i, k), 0)
      end
    end
    local c = {}
    -- initial_lr: a scheduler's mark, not an option; decoupled_weight_decay: an Adam's, whose true is this step's
    -- decay (the Accelerator refuses an Adam's L2 decay before it gets here)
    for k, v in next, g do if k ~= "initial_lr" and k ~= "decoupled_weight_decay" then c[k] = v end end
    groups[i] = c
  end
  local o = MSAMPAdamW.new(groups, {})
  -- the same group tables as the AdamW it replaces (validated above), so a scheduler made before
  -- Accelerator:prepare still sets the learning rate this optimizer reads
  for i, g in ipairs(opt.param_groups) do
    for k, v in next, o.param_groups[i] do if g[k] == nil then g[k] = v end end
    g.decoupled_weight_decay = nil   -- an Adam's option, not this one's (its state_dict would not load here)
    o.param_groups[i] = g
  end
  o._fp8_weights = (extra and extra.fp8_weights) or {}
  o._fp32_moments = extra and extra.moments == "fp32" or false
  o._step_count = opt._step_count or 0
  return o
end

-- load_state_dict(sd): Optimizer's; a group saved by an Adam (its decoupled_weight_decay) loads where that Adam's step
-- is this one's, as from_adamw takes it: decoupled decay, or none.
function MSAMPAdamW:load_state_dict(sd)
  if type(sd) == "table" and type(sd.param_groups) == "table" then
    -- (read raw: ipairs walked a list whose __index answers every key for ever, the sweep's param_groups of sweep
    -- 108; Optimizer's load_state_dict refuses such a list by its length)
    local groups, pg = nil, sd.param_groups
    for i = 1, rawlen(pg) do
      local g = rawget(pg, i)
      if type(g) == "table" and g.decoupled_weight_decay ~= nil then
        local wd = g.weight_decay
        if g.decoupled_weight_decay ~= true and type(wd) == "number" and wd ~= 0 then
          error(("%s:load_state_dict: group %d is an Adam's with L2 weight decay %s (decoupled_weight_decay=%s), "
            .. "another step than this optimizer's decoupled decay"):format(self.name, i, tostring(wd),
            tostring(g.decoupled_weight_decay)), 2)
        end
        groups = groups or table.move(pg, 1, rawlen(pg), 1, {})
        local c = {}
        for k, v in next, g do if k ~= "decoupled_weight_decay" then c[k] = v end end
        groups[i] = c
      end
    end
    if groups then sd = { state = sd.state, param_groups = groups } end
  end
  return Optimizer.load_state_dict(self, sd)   -- a tail call: its errors are blamed on the caller, as Optimizer's
end

-- O1: fp32 moments; O2/O3: E4M3 first moment, fp16 second; a [1] scale inverse for the second either way.
function MSAMPAdamW:_new_state(p, g)
  local shape, f32, f16 = p:shape(), { device = p:device() }, { dtype = "fp16", device = p:device() }
  if self._fp32_moments then
    return { step = 0, exp_avg = core.zeros(shape, f32), exp_avg_sq = core.zeros(shape, f32),
             exp_avg_sq_scale_inv = core.ones({ 1 }, f32) }
  end
  return { step = 0, exp_avg = core.zeros(shape, f32):quantize("e4m3"), exp_avg_sq = core.zeros(shape, f16),
           exp_avg_sq_scale_inv = core.ones({ 1 }, f32) }
end

function MSAMPAdamW:_state_schema(p)
  local fp32 = self._fp32_moments
  -- per_tensor: an E4M3 first moment with a scale per row is refused by the step (one power-of-two scale)
  return { step = "count", exp_avg = { dtype = fp32 and "fp32" or "e4m3", shape = "param", per_tensor = true },
           exp_avg_sq = { dtype = fp32 and "fp32" or "fp16", shape = "param" },
           exp_avg_sq_scale_inv = { dtype = "fp32", shape = { 1 }, positive = true } }
end

-- opt:step() is Optimizer.step's loop; O3 re-casts the E4M3 weight copy in the same C step.
function MSAMPAdamW:_update(p, grad, st, g)
  st.step = st.step + 1
  local q = (self._fp8_weights or {})[p]
  C.msamp_adamw_step(p, grad, st.exp_avg, st.exp_avg_sq, st.exp_avg_sq_scale_inv, q,
    g.lr, g.betas[1], g.betas[2], g.eps, g.weight_decay, st.step)
  if q then FP8Linear._mark_cast(q, p) end   -- (re-cast in the step: the forward need not cast it again)
end

-- Bytes of optimizer state (moments and their scales), for the memory report.
function MSAMPAdamW:state_bytes()
  local n = 0
  for _, st in next, self.state do
    n = n + memory.storage_bytes(st.exp_avg) + memory.storage_bytes(st.exp_avg_sq)
      + memory.storage_bytes(st.exp_avg_sq_scale_inv)
  end
  return n
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(MSAMPAdamW, "MSAMPAdamW")
return setmetatable(MSAMPAdamW, { __call = function(_, ...) return MSAMPAdamW.new(...) end })
