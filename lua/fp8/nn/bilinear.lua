-- bilinear.lua — torch's bilinear layer: F.bilinear(x1 [..., in1], x2 [..., in2], weight [out, in1, in2] [, bias
-- [out]]) = x1ᵀ·W_o·x2 + b_o for each output o, and the module Bilinear(in1_features, in2_features, out_features
-- [, {bias=true}]) with torch's init U(-1/√in1, 1/√in1) for weight and bias. One GEMM (x1 against W laid out as
-- [in1, out·in2]) and a product with x2 summed over in2; differentiable in all four.
local fp8 = require "fp8.core"
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local O = require "fp8.opts"
local init = require "fp8.nn.init_fns"

local M = {}
local public, strip = require("fp8.errfmt").public_of("bilinear.lua")

local function impl_bilinear(x1, x2, w, b, ...)
  O.no_more("bilinear", "(input1, input2, weight [, bias])", ...)
  for _, a in ipairs { { "input1", x1 }, { "input2", x2 }, { "weight", w } } do
    if not fp8.is_tensor(a[2]) then error(("bilinear: %s must be a tensor, got %s"):format(a[1], O.got(a[2])), 0) end
  end
  if w:dim() ~= 3 then
    error(("bilinear: weight must be [out_features, in1_features, in2_features], got %s"):format(w:shape_str()), 0)
  end
  local Oc, I1, I2 = w:size(1), w:size(2), w:size(3)
  if x1:dim() < 1 or x1:size(-1) ~= I1 or x2:dim() ~= x1:dim() or x2:size(-1) ~= I2 then
    error(("bilinear: input1 must be [..., %d] and input2 [..., %d] with the same leading dims, got %s and %s")
      :format(I1, I2, x1:shape_str(), x2:shape_str()), 0)
  end
  local lead = x1:shape()
  lead[#lead] = nil
  for i, v in ipairs(lead) do
    if x2:size(i) ~= v then
      error(("bilinear: input1 %s and input2 %s must have the same leading dims"):format(x1:shape_str(),
        x2:shape_str()), 0)
    end
  end
  if b ~= nil and (not fp8.is_tensor(b) or b:dim() ~= 1 or b:size(1) ~= Oc) then
    error(("bilinear: bias must be [%d], got %s"):format(Oc, fp8.is_tensor(b) and b:shape_str() or O.got(b)), 0)
  end
  local n = 1
  for _, v in ipairs(lead) do n = n * v end
  local a = x1:reshape({ n, I1 }):matmul(w:permute({ 2, 1, 3 }):reshape({ I1, Oc * I2 }))   -- [n, out·in2]
  local y = (a:reshape({ n, Oc, I2 }) * x2:reshape({ n, 1, I2 })):sum(3)                   -- [n, out]
  if b ~= nil then y = y + b end
  lead[#lead + 1] = Oc
  return y:reshape(lead)
end
F.bilinear = public(impl_bilinear)

M.Bilinear = Module.class("Bilinear")
function M.Bilinear:__init(in1, in2, out, opts, ...)
  local ok, err = pcall(function(...)
    O.no_more("Bilinear", "(in1_features, in2_features, out_features [, {bias=true}])", ...)
    if type(in1) == "table" then
      if in2 ~= nil then error("Bilinear: pass the sizes as one table or as arguments, not both", 0) end
      local o = O.check("Bilinear", in1, { "in1_features", "in2_features", "out_features", "bias" })
      in1, in2, out, opts = o.in1_features, o.in2_features, o.out_features, { bias = o.bias }
    else
      opts = O.check("Bilinear", opts, { "bias" })
    end
    for _, a in ipairs { { "in1_features", in1 }, { "in2_features", in2 }, { "out_features", out } } do
      if math.type(a[2]) ~= "integer" or a[2] < 1 then
        error(("Bilinear: %s must be a positive integer, got %s"):format(a[1], O.got(a[2])), 0)
      end
    end
    if opts.bias ~= nil and type(opts.bias) ~= "boolean" then
      error(("Bilinear: bias must be a boolean, got %s"):format(O.got(opts.bias)), 0)
    end
    Module._check_size("Bilinear", 3, "out_features * in1_features * in2_features", out, in1, in2)
    self.in1_features, self.in2_features, self.out_features = in1, in2, out
    local k = 1 / math.sqrt(in1)
    self:register_parameter("weight", init.uniform({ out, in1, in2 }, -k, k))
    if opts.bias ~= false then self:register_parameter("bias", init.uniform({ out }, -k, k)) end
  end, ...)
  if not ok then error(strip(err), 3) end
end
function M.Bilinear:forward(x1, x2) return F.bilinear(x1, x2, self.weight, self.bias) end
function M.Bilinear:extra_repr()
  return ("in1_features=%d, in2_features=%d, out_features=%d, bias=%s"):format(self.in1_features, self.in2_features,
    self.out_features, tostring(self.bias ~= nil))
end

return M
