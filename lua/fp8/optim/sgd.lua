-- sgd.lua — fp8.optim.SGD(params, {lr, momentum=0, dampening=0, weight_decay=0, nesterov=false}):
-- torch.optim.SGD's update, run by the fused C kernel (core/optim.c) per parameter.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Optimizer = require "fp8.optim.optimizer"
local C = require "fp8._optim"

local SGD = Optimizer.class()

local DEFAULTS = { lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false,
                   maximize = false }

SGD._param_dtypes = { fp32 = true }   -- fp8._optim.sgd_step updates fp32 parameters
function SGD.new(params, opts) return Optimizer.new(SGD, "SGD", DEFAULTS, params, opts) end

function SGD:_check_group(g)
  self:_check_number(g, "lr", 0)
  self:_check_number(g, "momentum", 0)
  self:_check_number(g, "dampening", 0)
  self:_check_number(g, "weight_decay", 0)
  if type(g.nesterov) ~= "boolean" then
    error(("SGD: nesterov must be a boolean, got %s"):format(type(g.nesterov)), 0)
  end
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
    error(("SGD: nesterov momentum requires momentum > 0 and dampening = 0 (got momentum=%g, dampening=%g)")
      :format(g.momentum, g.dampening), 0)
  end
  if type(g.maximize) ~= "boolean" then error(("SGD: maximize must be a boolean, got %s"):format(type(g.maximize)), 0) end
end

-- momentum_buffer exists once a step ran with momentum != 0 (opt:step() is Optimizer.step's loop).
function SGD:_state_schema(p) return { momentum_buffer = { dtype = "fp32", shape = "param", optional = true } } end

function SGD:_new_state(p, g) return {} end

function SGD:_update(p, grad, st, g)
  -- PyTorch starts the buffer as a copy of the first update (fresh=true tells the kernel so)
  if g.maximize then grad = -grad end   -- torch 2.x: the gradient negated before weight decay and momentum
  local fresh, buf = false, nil
  if g.momentum ~= 0 then
    fresh = st.momentum_buffer == nil
    buf = fresh and fp8.zeros(p:shape(), { device = p:device() }) or st.momentum_buffer
  end
  C.sgd_step(p, grad, buf, g.lr, g.momentum, g.dampening, g.weight_decay, g.nesterov, fresh)
  if fresh then st.momentum_buffer = buf end   -- kept once the step ran (a refused value changes no state)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(SGD, "SGD")
return setmetatable(SGD, { __call = function(_, ...) return SGD.new(...) end })
