-- radam.lua — fp8.optim.RAdam(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0,
-- decoupled_weight_decay=false, maximize=false}): torch.optim.RAdam's update (Adam whose adaptive step is rectified
-- by the variance of its estimate, plain momentum SGD while that is undefined: rho_t <= 5), its operations in torch's
-- order on fp32 tensors (no fused kernel). State per parameter: step, exp_avg, exp_avg_sq.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Optimizer = require "fp8.optim.optimizer"
local AdamW = require "fp8.optim.adamw"
local C = require "fp8._optim"

local RAdam = Optimizer.class()

local DEFAULTS = { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, decoupled_weight_decay = false,
                   maximize = false }

RAdam._param_dtypes = { fp32 = true }
function RAdam.new(params, opts) return Optimizer.new(RAdam, "RAdam", DEFAULTS, params, opts) end

function RAdam:_check_group(g)
  AdamW._check_adam_like(self, g)
  if type(g.decoupled_weight_decay) ~= "boolean" then
    error(("RAdam: decoupled_weight_decay must be a boolean, got %s"):format(type(g.decoupled_weight_decay)), 0)
  end
end

function RAdam:_state_schema(p)
  return { step = "count", exp_avg = { dtype = "fp32", shape = "param" },
    exp_avg_sq = { dtype = "fp32", shape = "param" } }
end

function RAdam:_new_state(p, g)
  return { step = 0, exp_avg = fp8.zeros(p:shape(), { device = p:device() }),
    exp_avg_sq = fp8.zeros(p:shape(), { device = p:device() }) }
end

function RAdam:_update(p, grad, st, g)
  fp8.no_grad(function()
    local b1, b2, lr = g.betas[1], g.betas[2], g.lr
    if g.maximize then grad = -grad end
    st.step = st.step + 1
    local step = st.step
    if g.weight_decay ~= 0 then
      if g.decoupled_weight_decay then C.copy_(p, p * (1 - lr * g.weight_decay))
      else grad = grad + p * g.weight_decay end
    end
    C.copy_(st.exp_avg, st.exp_avg:lerp(grad, 1 - b1))
    C.copy_(st.exp_avg_sq, st.exp_avg_sq * b2 + grad * grad * (1 - b2))
    local bc1, bc2 = 1 - b1 ^ step, 1 - b2 ^ step
    local corrected = st.exp_avg / bc1
    local rho_inf = 2 / (1 - b2) - 1
    local rho_t = rho_inf - 2 * step * (b2 ^ step) / bc2
    if rho_t > 5 then
      local rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ^ 0.5
      local adaptive = (st.exp_avg_sq:sqrt() + g.eps):reciprocal() * bc2 ^ 0.5
      C.copy_(p, p - corrected * lr * adaptive * rect)
    else
      C.copy_(p, p - corrected * lr)
    end
  end)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(RAdam, "RAdam")
return setmetatable(RAdam, { __call = function(_, ...) return RAdam.new(...) end })
