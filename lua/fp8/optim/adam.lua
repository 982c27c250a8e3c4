-- adam.lua — fp8.optim.Adam(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0}): torch.optim.Adam,
-- whose weight decay is L2: weight_decay·p is added to the gradient before the moments see it (after maximize's
-- negation), where AdamW (adamw.lua) shrinks the weight apart from them; torch 2.x's decoupled_weight_decay=true
-- makes it AdamW's step. The rest of the step (bias correction,
-- amsgrad, maximize) and the state (step, exp_avg, exp_avg_sq, amsgrad's max_exp_avg_sq) are AdamW's, run by the
-- same fused C kernel with its decoupled decay at zero.
local Optimizer = require "fp8.optim.optimizer"
local AdamW = require "fp8.optim.adamw"

local Adam = Optimizer.class()

-- torch.optim.Adam's defaults: AdamW's but for weight_decay (0 against 1e-2)
local DEFAULTS = { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, amsgrad = false,
                   maximize = false, decoupled_weight_decay = false }
Adam.DEFAULTS = DEFAULTS

Adam._param_dtypes = AdamW._param_dtypes
function Adam.new(params, opts) return Optimizer.new(Adam, "Adam", DEFAULTS, params, opts) end
function Adam:_check_group(g)
  AdamW._check_group(self, g)   -- the same options, checked alike (messages name Adam)
  if type(g.decoupled_weight_decay) ~= "boolean" then
    error(("%s: decoupled_weight_decay must be a boolean, got %s"):format(self.name, type(g.decoupled_weight_decay)), 0)
  end
end
Adam._state_schema = AdamW._state_schema
Adam._new_state = AdamW._new_state

function Adam:_update(p, grad, st, g)
  if g.maximize then grad = -grad end   -- torch: negated first, then the decay is added
  -- torch: grad.add(param, alpha=weight_decay), one fused multiply-add (the kernel's grad + wd·p rounds twice:
  -- the two can differ in the last bit of the gradient, far under the step's own rounding)
  local decoupled = g.decoupled_weight_decay
  if g.weight_decay ~= 0 and not decoupled then grad = grad + p:detach() * g.weight_decay end
  AdamW._step(p, grad, st, g, decoupled and g.weight_decay or 0)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(Adam, "Adam")
return setmetatable(Adam, { __call = function(_, ...) return Adam.new(...) end })
