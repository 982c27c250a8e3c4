-- adadelta.lua — fp8.optim.Adadelta(params, {lr=1, rho=0.9, eps=1e-6, weight_decay=0, maximize=false}):
-- torch.optim.Adadelta's update, its operations in torch's order on fp32 tensors (no fused kernel). State per
-- parameter: step, square_avg (the squared gradients' running average), acc_delta (the squared updates').
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Optimizer = require "fp8.optim.optimizer"
local C = require "fp8._optim"

local Adadelta = Optimizer.class()

local DEFAULTS = { lr = 1.0, rho = 0.9, eps = 1e-6, weight_decay = 0, maximize = false }

Adadelta._param_dtypes = { fp32 = true }
function Adadelta.new(params, opts) return Optimizer.new(Adadelta, "Adadelta", DEFAULTS, params, opts) end

function Adadelta:_check_group(g)
  for _, k in ipairs { "lr", "eps", "weight_decay" } do self:_check_number(g, k, 0) end
  if type(g.rho) ~= "number" or not (g.rho >= 0 and g.rho <= 1) then
    error(("Adadelta: rho must be a number in [0, 1], got %s"):format(tostring(g.rho)), 0)
  end
  if type(g.maximize) ~= "boolean" then
    error(("Adadelta: maximize must be a boolean, got %s"):format(type(g.maximize)), 0)
  end
end

function Adadelta:_state_schema(p)
  return { step = "count", square_avg = { dtype = "fp32", shape = "param" },
    acc_delta = { dtype = "fp32", shape = "param" } }
end

function Adadelta:_new_state(p, g)
  return { step = 0, square_avg = fp8.zeros(p:shape(), { device = p:device() }),
    acc_delta = fp8.zeros(p:shape(), { device = p:device() }) }
end

function Adadelta:_update(p, grad, st, g)
  fp8.no_grad(function()
    if g.maximize then grad = -grad end
    st.step = st.step + 1
    if g.weight_decay ~= 0 then grad = grad + p * g.weight_decay end
    C.copy_(st.square_avg, st.square_avg * g.rho + grad * grad * (1 - g.rho))
    local std = (st.square_avg + g.eps):sqrt()
    local delta = (st.acc_delta + g.eps):sqrt() / std * grad
    C.copy_(st.acc_delta, st.acc_delta * g.rho + delta * delta * (1 - g.rho))
    C.copy_(p, p - delta * g.lr)
  end)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(Adadelta, "Adadelta")
return setmetatable(Adadelta, { __call = function(_, ...) return Adadelta.new(...) end })
