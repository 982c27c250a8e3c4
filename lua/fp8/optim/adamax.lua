-- adamax.lua — fp8.optim.Adamax(params, {lr=2e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0, maximize=false}):
-- torch.optim.Adamax's update (Adam with the infinity norm), its operations in torch's order on fp32 tensors (no
-- fused kernel). State per parameter: step, exp_avg, exp_inf (the running max of |grad| + eps, decayed by beta2).
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Optimizer = require "fp8.optim.optimizer"
local AdamW = require "fp8.optim.adamw"
local C = require "fp8._optim"

local Adamax = Optimizer.class()

local DEFAULTS = { lr = 2e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, maximize = false }

Adamax._param_dtypes = { fp32 = true }
function Adamax.new(params, opts) return Optimizer.new(Adamax, "Adamax", DEFAULTS, params, opts) end

function Adamax:_check_group(g)
  AdamW._check_adam_like(self, g)
end

function Adamax:_state_schema(p)
  return { step = "count", exp_avg = { dtype = "fp32", shape = "param" },
    exp_inf = { dtype = "fp32", shape = "param" } }
end

function Adamax:_new_state(p, g)
  return { step = 0, exp_avg = fp8.zeros(p:shape(), { device = p:device() }),
    exp_inf = fp8.zeros(p:shape(), { device = p:device() }) }
end

function Adamax:_update(p, grad, st, g)
  fp8.no_grad(function()
    local b1, b2 = g.betas[1], g.betas[2]
    if g.maximize then grad = -grad end
    st.step = st.step + 1
    if g.weight_decay ~= 0 then grad = grad + p * g.weight_decay end
    C.copy_(st.exp_avg, st.exp_avg:lerp(grad, 1 - b1))
    C.copy_(st.exp_inf, (st.exp_inf * b2):maximum(grad:abs() + g.eps))
    local clr = g.lr / (1 - b1 ^ st.step)
    C.copy_(p, p - st.exp_avg / st.exp_inf * clr)
  end)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(Adamax, "Adamax")
return setmetatable(Adamax, { __call = function(_, ...) return Adamax.new(...) end })
