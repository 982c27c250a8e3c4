-- rmsprop.lua — fp8.optim.RMSprop(params, {lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=false,
-- maximize=false}): torch.optim.RMSprop's update, its operations in torch's order on fp32 tensors, fused into one pass
-- on the CPU (core/optim.c).
-- State per parameter: step, square_avg, momentum_buffer (momentum > 0), grad_avg (centered).
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Optimizer = require "fp8.optim.optimizer"
local C = require "fp8._optim"

local RMSprop = Optimizer.class()

local DEFAULTS = { lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0, centered = false,
                   maximize = false }

RMSprop._param_dtypes = { fp32 = true }
function RMSprop.new(params, opts) return Optimizer.new(RMSprop, "RMSprop", DEFAULTS, params, opts) end

function RMSprop:_check_group(g)
  for _, k in ipairs { "lr", "alpha", "eps", "weight_decay", "momentum" } do self:_check_number(g, k, 0) end
  for _, k in ipairs { "centered", "maximize" } do
    if type(g[k]) ~= "boolean" then error(("RMSprop: %s must be a boolean, got %s"):format(k, type(g[k])), 0) end
  end
end

function RMSprop:_state_schema(p)
  return { step = "count", square_avg = { dtype = "fp32", shape = "param" },
    momentum_buffer = { dtype = "fp32", shape = "param", optional = true },
    grad_avg = { dtype = "fp32", shape = "param", optional = true } }
end

function RMSprop:_new_state(p, g)
  return { step = 0, square_avg = fp8.zeros(p:shape(), { device = p:device() }) }
end

-- fp32 contiguous parameters on a device with the kernel (fp8._optim.rmsprop_step, core/optim.c; the CPU's): the
-- same fp32 operations in one pass (the same bits); elsewhere (a device whose table leaves the entry NULL) the
-- composite below (every tensor fp32, contiguous, on p's device: a state loaded otherwise keeps the composite)
local function fused(p, ...)
  if not fp8._device_has(p:device(), "rmsprop") then return false end
  for i = 1, select("#", ...) + 1 do
    local t = i == 1 and p or select(i - 1, ...)
    if t ~= nil and not (t:device() == p:device() and t:dtype() == "fp32" and t:is_contiguous()) then return false end
  end
  return true
end

function RMSprop:_update(p, grad, st, g)
  if fused(p, grad, st.square_avg, st.grad_avg, st.momentum_buffer) then
    st.step = st.step + 1
    if g.centered then st.grad_avg = st.grad_avg or fp8.zeros(p:shape(), { device = p:device() }) end
    if g.momentum > 0 then st.momentum_buffer = st.momentum_buffer or fp8.zeros(p:shape(), { device = p:device() }) end
    C.rmsprop_step(p, grad, st.square_avg, g.centered and st.grad_avg or nil,
      g.momentum > 0 and st.momentum_buffer or nil, g.lr, g.alpha, g.eps, g.weight_decay, g.momentum, g.maximize)
    return
  end
  fp8.no_grad(function()
    st.step = st.step + 1
    if g.maximize then grad = -grad end
    if g.weight_decay ~= 0 then grad = grad + p * g.weight_decay end
    C.copy_(st.square_avg, st.square_avg * g.alpha + grad * grad * (1 - g.alpha))
    local avg
    if g.centered then
      st.grad_avg = st.grad_avg or fp8.zeros(p:shape(), { device = p:device() })
      C.copy_(st.grad_avg, st.grad_avg + (grad - st.grad_avg) * (1 - g.alpha))   -- torch's lerp_
      avg = (st.square_avg - st.grad_avg * st.grad_avg):sqrt() + g.eps
    else
      avg = st.square_avg:sqrt() + g.eps
    end
    if g.momentum > 0 then
      st.momentum_buffer = st.momentum_buffer or fp8.zeros(p:shape(), { device = p:device() })
      C.copy_(st.momentum_buffer, st.momentum_buffer * g.momentum + grad / avg)
      C.copy_(p, p - st.momentum_buffer * g.lr)
    else
      C.copy_(p, p - grad / avg * g.lr)
    end
  end)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(RMSprop, "RMSprop")
return setmetatable(RMSprop, { __call = function(_, ...) return RMSprop.new(...) end })
