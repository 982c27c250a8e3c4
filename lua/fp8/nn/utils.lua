-- utils.lua — fp8.nn.utils: clip_grad_norm_(params, max_norm [, norm_type=2]), the norm accumulated
-- in float64 over all gradients.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua

local M = {}

-- Accepts a list of tensors, a Module, or optimizer-style groups ({params = {...}}).
local function param_list(params, fname)
  if type(params) == "table" and params.parameters and type(params.parameters) == "function" then
    return params:parameters()
  end
  if fp8.is_tensor(params) then return { params } end
  if type(params) ~= "table" then
    error(("%s: expected a list of tensors or a Module, got %s"):format(fname, type(params)), 3)
  end
  local out = {}
  for i, p in ipairs(params) do
    if type(p) == "table" and p.params then
      for _, q in ipairs(p.params) do out[#out + 1] = q end
    elseif fp8.is_tensor(p) then
      out[#out + 1] = p
    else
      error(("%s: entry %d must be a tensor, got %s"):format(fname, i, type(p)), 3)
    end
  end
  return out
end
M._param_list = param_list

-- clip_grad_norm_(params, max_norm [, norm_type=2 (any p > 0, or math.huge) [, error_if_nonfinite=false]]) → total
-- norm (before clipping). As torch's: every gradient is scaled in place by min(1, max_norm / (norm + 1e-6)) — so a norm
-- at max_norm is scaled by a hair below 1, and a NaN norm makes every gradient NaN — unless
-- error_if_nonfinite, which raises on a NaN or infinite norm and leaves the gradients alone.
function M.clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite, ...)
  if select("#", ...) > 0 then
    error("clip_grad_norm_: takes (params, max_norm [, norm_type [, error_if_nonfinite]]); torch's foreach= is not supported", 2)
  end
  if error_if_nonfinite ~= nil and type(error_if_nonfinite) ~= "boolean" then
    error(("clip_grad_norm_: error_if_nonfinite must be a boolean, got %s"):format(type(error_if_nonfinite)), 2)
  end
  local list = param_list(params, "clip_grad_norm_")
  if type(max_norm) ~= "number" or not (max_norm >= 0) then   -- `not (...)` also refuses NaN
    error(("clip_grad_norm_: max_norm must be a number >= 0, got %s"):format(require("fp8.opts").got(max_norm)), 2)
  end
  norm_type = norm_type or 2
  if norm_type == "inf" then norm_type = math.huge end
  if type(norm_type) ~= "number" or not (norm_type > 0) then   -- `not (...)` also refuses NaN
    error(("clip_grad_norm_: norm_type must be a number > 0 or math.huge (\"inf\"), got %s"):format(
      tostring(norm_type)), 2)
  end
  local C = require "fp8._optim"
  local grads = {}
  for _, p in ipairs(list) do
    local g = p.grad
    if g ~= nil then grads[#grads + 1] = g end
  end
  local total
  if norm_type == 2 then
    total = math.sqrt(C.sumsq(grads))   -- every gradient's Σg², added in order; one device wait for all
  elseif norm_type == math.huge then
    total = 0.0
    for _, g in ipairs(grads) do
      local m = (g:is_fp8() and g:dequantize() or g):abs():max():item()   -- MS-AMP's E4M3 weight gradients
      if m > total or m ~= m then total = m end
    end
  else   -- (Σ over the gradients of Σ|g|^p)^(1/p): torch's norm of the per-gradient p-norms
    local sum = 0.0
    for _, g in ipairs(grads) do
      local a = (g:is_fp8() and g:dequantize() or g):abs()
      sum = sum + (norm_type == 1 and a or a:pow(norm_type)):sum():item()
    end
    total = sum ^ (1 / norm_type)
  end
  if error_if_nonfinite and (total ~= total or total == math.huge) then
    error(("clip_grad_norm_: the total norm of order %s of the gradients is non-finite (%s), so it cannot be "
      .. "clipped; error_if_nonfinite=false scales them by it anyway"):format(norm_type == math.huge and "inf"
      or ("%g"):format(norm_type), tostring(total)), 2)
  end
  local coef = max_norm / (total + 1e-6)
  if not (coef >= 1) then   -- < 1, or NaN (torch's clamp(coef, max=1) keeps a NaN)
    for _, g in ipairs(grads) do C.scale_(g, coef) end
  end
  return total
end

-- clip_grad_value_(params, clip_value): every gradient element clamped to [-clip_value, clip_value] in place, as
-- torch's. MS-AMP's FP8 gradients are refused (their bytes share one scale: clip_grad_norm_ scales them instead).
function M.clip_grad_value_(params, clip_value, ...)
  if select("#", ...) > 0 then
    error("clip_grad_value_: takes (params, clip_value); torch's foreach= is not supported", 2)
  end
  local list = param_list(params, "clip_grad_value_")
  if type(clip_value) ~= "number" or not (clip_value >= 0) then   -- `not (...)` also refuses NaN
    error(("clip_grad_value_: clip_value must be a number >= 0, got %s"):format(require("fp8.opts").got(clip_value)), 2)
  end
  local grads = {}
  for _, p in ipairs(list) do
    local g = p.grad
    if g ~= nil then
      if g:is_fp8() then
        error("clip_grad_value_: FP8 gradients (MS-AMP) are not supported; use clip_grad_norm_, which scales them", 2)
      end
      grads[#grads + 1] = g
    end
  end
  local C = require "fp8._optim"
  fp8.no_grad(function()
    for _, g in ipairs(grads) do C.copy_(g, g:clamp(-clip_value, clip_value)) end
  end)
end

return M
