-- adamw.lua — fp8.optim.AdamW(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=1e-2}):
-- torch.optim.AdamW (decoupled weight decay, bias correction, amsgrad=false) via the fused C kernel.
-- State per parameter: step, exp_avg (m), exp_avg_sq (v), kept as separate fp32 tensors.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Optimizer = require "fp8.optim.optimizer"
local C = require "fp8._optim"

local AdamW = Optimizer.class()

local DEFAULTS = { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2, amsgrad = false,
                   maximize = false }

AdamW.DEFAULTS = DEFAULTS

function AdamW.new(params, opts) return Optimizer.new(AdamW, "AdamW", DEFAULTS, params, opts) end

function AdamW:_check_group(g)
  self:_check_number(g, "lr", 0)
  self:_check_number(g, "eps", 0)
  self:_check_number(g, "weight_decay", 0)
  local b = g.betas
  if type(b) ~= "table" or type(b[1]) ~= "number" or type(b[2]) ~= "number" or #b ~= 2 then
    error(("%s: betas must be a pair {beta1, beta2}, got %s"):format(self.name, tostring(b)), 6)
  end
  for i = 1, 2 do
    if not (b[i] >= 0 and b[i] < 1) then
      error(("%s: betas[%d] must be in [0, 1), got %g"):format(self.name, i, b[i]), 6)
    end
  end
  if g.amsgrad then error(self.name .. ": amsgrad=true is not supported (only amsgrad=false)", 6) end
  if g.maximize then error(self.name .. ": maximize=true is not supported", 6) end
end

function AdamW:_state_schema(p)
  return { step = "count", exp_avg = { dtype = "fp32", shape = "param" }, exp_avg_sq = { dtype = "fp32", shape = "param" } }
end

function AdamW:step(closure)
  local loss
  if closure ~= nil and type(closure) ~= "function" then
    error(("%s:step: closure must be a function, got %s"):format(self.name or "optimizer", type(closure)), 2)
  end
  if closure then loss = closure() end
  for _, g in ipairs(self.param_groups) do
    local b1, b2 = g.betas[1], g.betas[2]
    for _, p in ipairs(g.params) do
      local grad = p.grad
      if grad ~= nil then
        local st = self.state[p]
        if st == nil then
          local on = { device = p:device() }
          st = { step = 0, exp_avg = fp8.zeros(p:shape(), on), exp_avg_sq = fp8.zeros(p:shape(), on) }
          self.state[p] = st
        end
        st.step = st.step + 1
        C.adamw_step(p, grad:contiguous(), st.exp_avg, st.exp_avg_sq, g.lr, b1, b2, g.eps, g.weight_decay, st.step)
      end
    end
  end
  self._step_count = self._step_count + 1
  return loss
end

return setmetatable(AdamW, { __call = function(_, ...) return AdamW.new(...) end })
