-- nadam.lua — fp8.optim.NAdam(params, {lr=2e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0,
-- momentum_decay=4e-3, decoupled_weight_decay=false, maximize=false}): torch.optim.NAdam's update (Adam with
-- Nesterov momentum and a momentum schedule), its operations in torch's order on fp32 tensors (no fused kernel).
-- State per parameter: step, mu_product (the schedule's running product, kept rounded to fp32 as torch's 0-d float
-- tensor keeps it), exp_avg, exp_avg_sq.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Optimizer = require "fp8.optim.optimizer"
local AdamW = require "fp8.optim.adamw"
local C = require "fp8._optim"

local NAdam = Optimizer.class()

local DEFAULTS = { lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, momentum_decay = 4e-3,
                   decoupled_weight_decay = false, maximize = false }

local f32 = require("fp8.opts").f32

NAdam._param_dtypes = { fp32 = true }
function NAdam.new(params, opts) return Optimizer.new(NAdam, "NAdam", DEFAULTS, params, opts) end

function NAdam:_check_group(g)
  AdamW._check_adam_like(self, g)
  self:_check_number(g, "momentum_decay", 0)
  if type(g.decoupled_weight_decay) ~= "boolean" then
    error(("NAdam: decoupled_weight_decay must be a boolean, got %s"):format(type(g.decoupled_weight_decay)), 0)
  end
end

function NAdam:_state_schema(p)
  return { step = "count", mu_product = "number", exp_avg = { dtype = "fp32", shape = "param" },
    exp_avg_sq = { dtype = "fp32", shape = "param" } }
end

function NAdam:_new_state(p, g)
  return { step = 0, mu_product = 1.0, exp_avg = fp8.zeros(p:shape(), { device = p:device() }),
    exp_avg_sq = fp8.zeros(p:shape(), { device = p:device() }) }
end

function NAdam:_update(p, grad, st, g)
  fp8.no_grad(function()
    local b1, b2, lr = g.betas[1], g.betas[2], g.lr
    if g.maximize then grad = -grad end
    st.step = st.step + 1
    local step = st.step
    local bc2 = 1 - b2 ^ step
    if g.weight_decay ~= 0 then
      if g.decoupled_weight_decay then C.copy_(p, p * (1 - lr * g.weight_decay))
      else grad = grad + p * g.weight_decay end
    end
    local mu = b1 * (1 - 0.5 * 0.96 ^ (step * g.momentum_decay))
    local mu_next = b1 * (1 - 0.5 * 0.96 ^ ((step + 1) * g.momentum_decay))
    st.mu_product = f32(st.mu_product * mu)
    C.copy_(st.exp_avg, st.exp_avg:lerp(grad, 1 - b1))
    C.copy_(st.exp_avg_sq, st.exp_avg_sq * b2 + grad * grad * (1 - b2))
    local denom = (st.exp_avg_sq / bc2):sqrt() + g.eps
    local mu_product_next = st.mu_product * mu_next
    C.copy_(p, p + grad / denom * (-lr * (1 - mu) / (1 - st.mu_product)))
    C.copy_(p, p + st.exp_avg / denom * ((-lr * mu_next) / (1 - mu_product_next)))
  end)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(NAdam, "NAdam")
return setmetatable(NAdam, { __call = function(_, ...) return NAdam.new(...) end })
