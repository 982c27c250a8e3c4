-- sgd.lua — fp8.optim.SGD(params, {lr, momentum=0, dampening=0, weight_decay=0, nesterov=false}):
-- torch.optim.SGD's update, run by the fused C kernel (core/optim.c) per parameter.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Optimizer = require "fp8.optim.optimizer"
local C = require "fp8._optim"

local SGD = Optimizer.class()

local DEFAULTS = { lr = Optimizer.REQUIRED, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false,
                   maximize = false }

function SGD.new(params, opts) return Optimizer.new(SGD, "SGD", DEFAULTS, params, opts) end

function SGD:_check_group(g)
  self:_check_number(g, "lr", 0)
  self:_check_number(g, "momentum", 0)
  self:_check_number(g, "dampening", 0)
  self:_check_number(g, "weight_decay", 0)
  if type(g.nesterov) ~= "boolean" then
    error(("SGD: nesterov must be a boolean, got %s"):format(type(g.nesterov)), 6)
  end
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
    error(("SGD: nesterov momentum requires momentum > 0 and dampening = 0 (got momentum=%g, dampening=%g)")
      :format(g.momentum, g.dampening), 6)
  end
  if g.maximize then error("SGD: maximize=true is not supported", 6) end
end

-- step([closure]): one update of every parameter that has a gradient. A closure, when given, is
-- called first (with grad enabled) and its result returned, as in PyTorch.
-- momentum_buffer exists once a step ran with momentum != 0.
function SGD:_state_schema(p) return { momentum_buffer = { dtype = "fp32", shape = "param", optional = true } } end

function SGD:step(closure)
  local loss
  if closure ~= nil and type(closure) ~= "function" then
    error(("%s:step: closure must be a function, got %s"):format(self.name or "optimizer", type(closure)), 2)
  end
  if closure then loss = closure() end
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      local grad = p.grad
      if grad ~= nil then
        local st = self.state[p]
        if st == nil then st = {}; self.state[p] = st end
        -- PyTorch starts the buffer as a copy of the first update (fresh=true tells the kernel so)
        local fresh, buf = false, nil
        if g.momentum ~= 0 then
          fresh = st.momentum_buffer == nil
          if fresh then st.momentum_buffer = fp8.zeros(p:shape(), { device = p:device() }) end
          buf = st.momentum_buffer
        end
        C.sgd_step(p, grad:contiguous(), buf, g.lr, g.momentum, g.dampening, g.weight_decay, g.nesterov, fresh)
      end
    end
  end
  self._step_count = self._step_count + 1
  return loss
end

return setmetatable(SGD, { __call = function(_, ...) return SGD.new(...) end })
