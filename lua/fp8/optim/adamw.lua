-- adamw.lua — fp8.optim.AdamW(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=1e-2}):
-- torch.optim.AdamW (decoupled weight decay, bias correction, maximize, amsgrad) via the fused C kernel.
-- State per parameter: step, exp_avg (m), exp_avg_sq (v) and, with amsgrad, max_exp_avg_sq (the running maximum of
-- v, which the denominator takes), kept as separate fp32 tensors.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Optimizer = require "fp8.optim.optimizer"
local C = require "fp8._optim"

local AdamW = Optimizer.class()

local DEFAULTS = { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2, amsgrad = false,
                   maximize = false }

AdamW.DEFAULTS = DEFAULTS

AdamW._param_dtypes = { fp32 = true }   -- fp8._optim.adamw_step updates fp32 parameters
function AdamW.new(params, opts) return Optimizer.new(AdamW, "AdamW", DEFAULTS, params, opts) end

-- lr, eps, weight_decay (numbers >= 0), betas (a pair in [0, 1)) and maximize: what every Adam-like optimizer
-- (Adam, AdamW, Adamax, NAdam, RAdam) checks alike, its messages naming it
function AdamW._check_adam_like(self, g)
  self:_check_number(g, "lr", 0)
  self:_check_number(g, "eps", 0)
  self:_check_number(g, "weight_decay", 0)
  local b = g.betas
  if type(b) ~= "table" or type(b[1]) ~= "number" or type(b[2]) ~= "number" or #b ~= 2 then
    local got = type(b)
    if type(b) == "table" then
      local kinds = {}
      for i = 1, #b do kinds[i] = fp8.is_tensor(b[i]) and "tensor" or type(b[i]) end
      got = ("a table of %d (%s)"):format(#b, table.concat(kinds, ", "))
    end
    error(("%s: betas must be a pair of numbers {beta1, beta2}, got %s"):format(self.name, got), 0)
  end
  for i = 1, 2 do
    if not (b[i] >= 0 and b[i] < 1) then
      error(("%s: betas[%d] must be in [0, 1), got %g"):format(self.name, i, b[i]), 0)
    end
  end
  if type(g.maximize) ~= "boolean" then
    error(("%s: maximize must be a boolean, got %s"):format(self.name, type(g.maximize)), 0)
  end
end

function AdamW:_check_group(g)
  AdamW._check_adam_like(self, g)
  if type(g.amsgrad) ~= "boolean" then
    error(("%s: amsgrad must be a boolean, got %s"):format(self.name, type(g.amsgrad)), 0)
  end
end

function AdamW:_state_schema(p)
  -- max_exp_avg_sq: amsgrad's (a state saved without it, loaded with amsgrad=true, starts it at zero: max(0, v) = v)
  return { step = "count", exp_avg = { dtype = "fp32", shape = "param" },
    exp_avg_sq = { dtype = "fp32", shape = "param" },
    max_exp_avg_sq = { dtype = "fp32", shape = "param", optional = true } }
end

-- opt:step() is Optimizer.step's loop over these two.
function AdamW:_new_state(p, g)
  local on = { device = p:device() }
  return { step = 0, exp_avg = fp8.zeros(p:shape(), on), exp_avg_sq = fp8.zeros(p:shape(), on),
    max_exp_avg_sq = g.amsgrad and fp8.zeros(p:shape(), on) or nil }
end

-- The fused step on a gradient already negated for maximize (and, for Adam, with its L2 decay added), with the
-- decoupled weight decay wd (AdamW's; Adam's 0 or, with decoupled_weight_decay, its own): AdamW's and Adam's.
function AdamW._step(p, grad, st, g, wd)
  local mx = st.max_exp_avg_sq
  if g.amsgrad and mx == nil then mx = fp8.zeros(p:shape(), { device = p:device() }) end
  C.adamw_step(p, grad, st.exp_avg, st.exp_avg_sq, g.lr, g.betas[1], g.betas[2], g.eps, wd, st.step + 1,
    g.amsgrad and mx or nil)
  st.step = st.step + 1   -- counted once the step ran (a refused value in a group changes no state)
  if g.amsgrad then st.max_exp_avg_sq = mx end
end

function AdamW:_update(p, grad, st, g)
  if g.maximize then grad = -grad end   -- torch: the gradient negated before everything else
  AdamW._step(p, grad, st, g, g.weight_decay)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(AdamW, "AdamW")
return setmetatable(AdamW, { __call = function(_, ...) return AdamW.new(...) end })
