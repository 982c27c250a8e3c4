-- linear.lua — fp8.nn.Linear(in_features, out_features [, bias=true]): y = x·Wᵀ + b with PyTorch's
-- default initialisation (kaiming_uniform(a=√5) gives W, and b, the bound 1/√in_features).
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local F = require "fp8.nn.functional"
local init = require "fp8.nn.init_fns"
local unplaced = require("fp8.errfmt").unplaced

local Linear = Module.class("Linear")

-- The arguments of Linear(in, out [, bias]) or Linear(in, out, {bias=bool}) or Linear{in_features=, out_features=,
-- bias=}, checked in the name of the class being built: in_features, out_features, bias (a boolean). An error is
-- raised at `level` as the caller counts it (FP8Linear's constructor checks its arguments here too, before
-- Linear.__init, so that its errors name FP8Linear and its caller's line, not module.lua's).
function Linear._args(name, level, in_features, out_features, bias)
  level = level + 1
  if type(in_features) == "table" then
    local o = O.check(name, in_features, { "in_features", "out_features", "bias" }, level)
    in_features, out_features, bias = o.in_features, o.out_features, o.bias
  end
  if type(bias) == "table" then bias = O.check(name, bias, { "bias" }, level).bias end
  if bias == nil then bias = true end
  for _, what in ipairs { "in_features", "out_features" } do   -- a list: a nil size is checked too
    local v = what == "in_features" and in_features or out_features
    if math.type(v) ~= "integer" or v <= 0 then
      error(("%s: %s must be a positive integer, got %s"):format(name, what, tostring(v)), level)
    end
  end
  if type(bias) ~= "boolean" then error(("%s: bias must be a boolean, got %s"):format(name, type(bias)), level) end
  Module._check_size(name, level, "out_features * in_features", out_features, in_features)
  return in_features, out_features, bias
end

-- a parameter drawn from U(-bound, bound); out of memory is raised naming the class (Linear, FP8Linear) and the
-- parameter (the draw's own error carried init_fns.lua's position and no name: stop 102), at the constructor's
-- caller where the class is Linear (drawn, __init, the class's call, the caller)
local function drawn(self, what, shape, bound)
  local ok, t = pcall(init.uniform, shape, -bound, bound)
  if ok then return t end
  local msg = unplaced(t)
  if msg:find("out of memory", 1, true) or msg:find("not enough memory", 1, true) then
    error(("%s: out of memory drawing its %s [%s] (%d fp32 values): %s"):format(self:type_name(), what,
      table.concat(shape, ", "),
      #shape == 2 and shape[1] * shape[2] or shape[1], msg), 4)
  end
  error(t, 0)
end

function Linear:__init(in_features, out_features, bias)
  in_features, out_features, bias = Linear._args("Linear", 3, in_features, out_features, bias)
  self.in_features, self.out_features = in_features, out_features
  local bound = 1 / math.sqrt(in_features)
  self:register_parameter("weight", drawn(self, "weight", { out_features, in_features }, bound))
  if bias then self:register_parameter("bias", drawn(self, "bias", { out_features }, bound)) end
end

function Linear:forward(x)
  Module._check_features(self, x, self.in_features)
  return F.linear(x, self.weight, self.bias)
end

function Linear:extra_repr()
  return ("in_features=%d, out_features=%d, bias=%s"):format(self.in_features, self.out_features,
    tostring(self.bias ~= nil))
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Linear, "Linear")
return Linear
