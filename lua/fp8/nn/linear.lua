-- linear.lua — fp8.nn.Linear(in_features, out_features [, bias=true]): y = x·Wᵀ + b with PyTorch's
-- default initialisation (kaiming_uniform(a=√5) gives W, and b, the bound 1/√in_features).
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local F = require "fp8.nn.functional"
local init = require "fp8.nn.init_fns"

local Linear = Module.class("Linear")

local function check_size(v, what)
  if math.type(v) ~= "integer" or v <= 0 then
    error(("Linear: %s must be a positive integer, got %s"):format(what, tostring(v)), 4)
  end
end

-- Linear(in, out [, bias]) or Linear(in, out, {bias=bool}) or Linear{in_features=, out_features=, bias=}
function Linear:__init(in_features, out_features, bias)
  if type(in_features) == "table" then
    local o = O.check("Linear", in_features, { "in_features", "out_features", "bias" }, 3)
    in_features, out_features, bias = o.in_features, o.out_features, o.bias
  end
  if type(bias) == "table" then bias = O.check("Linear", bias, { "bias" }, 3).bias end
  if bias == nil then bias = true end
  check_size(in_features, "in_features")
  check_size(out_features, "out_features")
  if type(bias) ~= "boolean" then error(("Linear: bias must be a boolean, got %s"):format(type(bias)), 3) end
  self.in_features, self.out_features = in_features, out_features
  local bound = 1 / math.sqrt(in_features)
  self:register_parameter("weight", init.uniform({ out_features, in_features }, -bound, bound))
  if bias then self:register_parameter("bias", init.uniform({ out_features }, -bound, bound)) end
end

function Linear:forward(x)
  if not fp8.is_tensor(x) then error(("expected a tensor input, got %s"):format(type(x)), 0) end
  if x:dim() < 1 or x:size(-1) ~= self.in_features then
    error(("expected input [..., %d], got %s"):format(self.in_features, Module._shape_str(x)), 0)
  end
  return F.linear(x, self.weight, self.bias)
end

function Linear:extra_repr()
  return ("in_features=%d, out_features=%d, bias=%s"):format(self.in_features, self.out_features,
    tostring(self.bias ~= nil))
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Linear, "Linear")
return Linear
