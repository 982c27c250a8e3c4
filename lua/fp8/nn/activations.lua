-- activations.lua — parameter-free activation modules: fp8.nn.ReLU(), fp8.nn.GELU([approximate]), fp8.nn.SiLU(),
-- fp8.nn.Sigmoid(), fp8.nn.Tanh(), fp8.nn.Softmax([dim]) (torch's; without dim, torch's implicit choice where it is
-- the last dim, up to 2-d inputs, refused past that: F.softmax's implicit_dim), LogSoftmax and Softmin alike,
-- GLU([dim=-1]), LeakyReLU, ELU, CELU, Softplus, Hardtanh, Threshold (their numbers), ReLU6, Hardsigmoid,
-- Hardswish, Mish, SELU, LogSigmoid, Softsign, Tanhshrink, Hardshrink, Softshrink; and PReLU, whose slope is a
-- parameter.
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local F = require "fp8.nn.functional"

local M = {}

M.ReLU = Module.class("ReLU")
function M.ReLU:forward(x) return F.relu(x) end

M.GELU = Module.class("GELU")
-- GELU() exact (erf), GELU("tanh") or GELU{approximate="tanh"} the tanh approximation.
function M.GELU:__init(approximate)
  if type(approximate) == "table" then approximate = O.check("GELU", approximate, { "approximate" }, 3).approximate end
  if approximate == nil then approximate = "none" end
  if approximate ~= "none" and approximate ~= "tanh" then
    error(("GELU: approximate must be \"none\" or \"tanh\", got %s"):format((type(approximate) == "string" and approximate or O.got(approximate))), 3)
  end
  self.approximate = approximate
end
function M.GELU:forward(x) return F.gelu(x, self.approximate) end
function M.GELU:extra_repr() return ("approximate='%s'"):format(self.approximate) end   -- 'none' too, as torch's

-- LeakyReLU([negative_slope=0.01]), ELU([alpha=1]), Softplus([beta=1 [, threshold=20]]) (or their option tables)
local function with_numbers(name, keys, defaults, fn)
  local cls = Module.class(name)
  cls["__init"] = function(self, a, b)
    if type(a) == "table" then
      if b ~= nil then error(("%s: pass the options as a table or as arguments, not both"):format(name), 3) end
      local o = O.check(name, a, keys, 3)
      a, b = o[keys[1]], o[keys[2] or ""]
    end
    if #keys == 1 and b ~= nil then   -- torch's LeakyReLU, ELU and CELU take inplace second: not dropped
      error(("%s: takes at most 1 argument ([%s]; no inplace), got 2"):format(name, keys[1]), 3)
    end
    local vals = { a, b }
    for i, k in ipairs(keys) do
      local v = vals[i]
      if v == nil then v = defaults[i] end
      if type(v) ~= "number" or v ~= v or math.abs(v) == math.huge then
        error(("%s: %s must be a finite number, got %s"):format(name, k, O.got(v)), 3)
      end
      self[k] = v
    end
  end
  cls.forward = function(self, x) return fn(self, x) end
  cls.extra_repr = function(self)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = ("%s=%g"):format(k, self[k]) end
    return table.concat(parts, ", ")
  end
  return cls
end
M.LeakyReLU = with_numbers("LeakyReLU", { "negative_slope" }, { 0.01 },
  function(self, x) return F.leaky_relu(x, self.negative_slope) end)
M.ELU = with_numbers("ELU", { "alpha" }, { 1.0 }, function(self, x) return F.elu(x, self.alpha) end)
M.Softplus = with_numbers("Softplus", { "beta", "threshold" }, { 1.0, 20.0 },
  function(self, x) return F.softplus(x, self.beta, self.threshold) end)
M.CELU = with_numbers("CELU", { "alpha" }, { 1.0 }, function(self, x) return F.celu(x, self.alpha) end)
M.Hardtanh = with_numbers("Hardtanh", { "min_val", "max_val" }, { -1.0, 1.0 },
  function(self, x) return F.hardtanh(x, self.min_val, self.max_val) end)
M.Threshold = with_numbers("Threshold", { "threshold", "value" }, {},   -- (both required, as torch's)
  function(self, x) return F.threshold(x, self.threshold, self.value) end)
M.Hardshrink = with_numbers("Hardshrink", { "lambd" }, { 0.5 },
  function(self, x) return F.hardshrink(x, self.lambd) end)
M.Softshrink = with_numbers("Softshrink", { "lambd" }, { 0.5 },
  function(self, x) return F.softshrink(x, self.lambd) end)

-- PReLU([num_parameters=1 [, init=0.25]]) (or {num_parameters=, init=}): F.prelu with a learned weight, one
-- element or one per channel (the input's dim 2), torch's
M.PReLU = Module.class("PReLU")
function M.PReLU:__init(n, init)
  if type(n) == "table" then
    if init ~= nil then error("PReLU: pass the options as a table or as arguments, not both", 3) end
    local o = O.check("PReLU", n, { "num_parameters", "init" }, 3)
    n, init = o.num_parameters, o.init
  end
  if n == nil then n = 1 end
  if init == nil then init = 0.25 end
  if math.type(n) ~= "integer" or n < 1 or n > 1 << 24 then
    error(("PReLU: num_parameters must be an integer in 1..2^24, got %s"):format(O.got(n)), 3)
  end
  if type(init) ~= "number" or init ~= init or math.abs(init) == math.huge then
    error(("PReLU: init must be a finite number, got %s"):format(O.got(init)), 3)
  end
  self.num_parameters = n
  self:register_parameter("weight", require("fp8.core").full({ n }, init))
end
function M.PReLU:forward(x) return F.prelu(x, self.weight) end
function M.PReLU:extra_repr()
  local n = rawget(self, "num_parameters")
  return math.type(n) == "integer" and ("num_parameters=%d"):format(n) or ""
end

-- the ones without settings: ReLU6(), Hardsigmoid(), Hardswish(), Mish(), SELU(), LogSigmoid()
for name, fn in pairs { ReLU6 = "relu6", Hardsigmoid = "hardsigmoid", Hardswish = "hardswish", Mish = "mish",
                        SELU = "selu", LogSigmoid = "logsigmoid", Softsign = "softsign", Tanhshrink = "tanhshrink" } do
  M[name] = Module.class(name)
  M[name].forward = function(self, x) return F[fn](x) end
end

M.SiLU = Module.class("SiLU")
function M.SiLU:forward(x) return F.silu(x) end
M.Sigmoid = Module.class("Sigmoid")
function M.Sigmoid:forward(x) return F.sigmoid(x) end
M.Tanh = Module.class("Tanh")
function M.Tanh:forward(x) return F.tanh(x) end

-- Softmax([dim]) (or {dim=}), and with it LogSoftmax, Softmin (without dim: F.softmax's implicit choice at each
-- call, as torch's dim=None) and GLU([dim=-1]) (its halves along dim)
local function along_dim(name, fn, default)
  local cls = Module.class(name)
  cls["__init"] = function(self, dim)
    if type(dim) == "table" then dim = O.check(name, dim, { "dim" }, 3).dim end
    if dim == nil then dim = default end
    if dim ~= nil and (math.type(dim) ~= "integer" or dim == 0) then
      error(("%s: dim must be a nonzero integer (1-based, negative from the end), got %s"):format(name, O.got(dim)), 3)
    end
    self.dim = dim
  end
  cls.forward = function(self, x) return F[fn](x, self.dim) end
  cls.extra_repr = function(self) return self.dim and ("dim=%d"):format(self.dim) or "dim=None" end
  return cls
end
M.Softmax = along_dim("Softmax", "softmax")
M.LogSoftmax = along_dim("LogSoftmax", "log_softmax")
M.Softmin = along_dim("Softmin", "softmin")
M.GLU = along_dim("GLU", "glu", -1)

return M
