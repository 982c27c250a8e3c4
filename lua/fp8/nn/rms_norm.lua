-- rms_norm.lua — fp8.nn.RMSNorm(normalized_shape [, {eps, elementwise_affine=true}]): torch's (2.4+) RMSNorm over
-- the last dimension, x / sqrt(mean(x²) + eps) · weight; weight starts at ones; eps fp32's machine epsilon
-- (2⁻²³, for bf16 and fp16 inputs too) unless given, as torch's (F.rms_norm).
local O = require "fp8.opts"
local fp8 = require "fp8.core"
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"

local RMSNorm = Module.class("RMSNorm")

function RMSNorm:__init(n, opts)
  if type(n) == "table" and rawlen(n) == 1 then n = rawget(n, 1) end
  if type(n) == "table" then
    error(("RMSNorm: normalized_shape spans %d dimensions; fp8lab normalizes over the last one only"):format(rawlen(n)),
      3)
  end
  if math.type(n) ~= "integer" or n <= 0 then
    error(("RMSNorm: normalized_shape must be a positive integer (the last dimension), got %s"):format(O.got(n)), 3)
  end
  Module._check_size("RMSNorm", 3, "normalized_shape", n)
  opts = opts or {}
  if type(opts) ~= "table" then error(("RMSNorm: options must be a table, got %s"):format(type(opts)), 3) end
  O.check("RMSNorm", opts, { "eps", "elementwise_affine" }, 3)
  if opts.elementwise_affine ~= nil and type(opts.elementwise_affine) ~= "boolean" then
    error(("RMSNorm: elementwise_affine must be a boolean, got %s"):format(O.got(opts.elementwise_affine)), 3)
  end
  if opts.eps ~= nil and (type(opts.eps) ~= "number" or not (opts.eps >= 0 and opts.eps < math.huge)) then
    error(("RMSNorm: eps must be a finite number >= 0, got %s"):format(O.got(opts.eps)), 3)
  end
  self.normalized_shape = n
  self.eps = opts.eps   -- nil: fp32's machine epsilon, as torch's eps=None
  self.elementwise_affine = opts.elementwise_affine ~= false
  if self.elementwise_affine then self:register_parameter("weight", fp8.ones { n }) end
end

function RMSNorm:forward(x)
  Module._check_features(self, x, self.normalized_shape)
  return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)
end

function RMSNorm:extra_repr()
  return ("(%d,), eps=%s, elementwise_affine=%s"):format(self.normalized_shape, self.eps and ("%g"):format(self.eps)
    or "None", tostring(self.elementwise_affine))
end

O.strict_arity(RMSNorm, "RMSNorm")
return RMSNorm
