-- adagrad.lua — fp8.optim.Adagrad(params, {lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
-- eps=1e-10, maximize=false}): torch.optim.Adagrad's update, its operations in torch's order on fp32 tensors (fused
-- into one pass on the CPU, core/optim.c). State per parameter: step, sum (the squared gradients' running sum, from
-- initial_accumulator_value).
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Optimizer = require "fp8.optim.optimizer"
local C = require "fp8._optim"

local Adagrad = Optimizer.class()

local DEFAULTS = { lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10,
                   maximize = false }

Adagrad._param_dtypes = { fp32 = true }
function Adagrad.new(params, opts) return Optimizer.new(Adagrad, "Adagrad", DEFAULTS, params, opts) end

function Adagrad:_check_group(g)
  for _, k in ipairs { "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps" } do
    self:_check_number(g, k, 0)
  end
  if type(g.maximize) ~= "boolean" then
    error(("Adagrad: maximize must be a boolean, got %s"):format(type(g.maximize)), 0)
  end
end

function Adagrad:_state_schema(p) return { step = "count", sum = { dtype = "fp32", shape = "param" } } end

-- (torch makes the state when the optimizer is made; here at the first step, from the group's value then)
function Adagrad:_new_state(p, g)
  return { step = 0, sum = fp8.full(p:shape(), g.initial_accumulator_value, { device = p:device() }) }
end

-- fp32 contiguous tensors on a device with the kernel (fp8._optim.adagrad_step, core/optim.c; the CPU's): the
-- composite's fp32 operations in one pass (the same bits); elsewhere the composite below
function Adagrad:_update(p, grad, st, g)
  local dev = p:device()
  local function f32(t) return t:device() == dev and t:dtype() == "fp32" and t:is_contiguous() end
  if fp8._device_has(dev, "adagrad") and f32(p) and f32(grad) and f32(st.sum) then
    st.step = st.step + 1
    C.adagrad_step(p, grad, st.sum, g.lr / (1 + (st.step - 1) * g.lr_decay), g.eps, g.weight_decay, g.maximize)
    return
  end
  fp8.no_grad(function()
    st.step = st.step + 1
    if g.maximize then grad = -grad end
    if g.weight_decay ~= 0 then grad = grad + p * g.weight_decay end
    local clr = g.lr / (1 + (st.step - 1) * g.lr_decay)
    C.copy_(st.sum, st.sum + grad * grad)
    C.copy_(p, p - grad / (st.sum:sqrt() + g.eps) * clr)
  end)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(Adagrad, "Adagrad")
return setmetatable(Adagrad, { __call = function(_, ...) return Adagrad.new(...) end })
