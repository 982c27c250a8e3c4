-- utils.lua — fp8.nn.utils: clip_grad_norm_(params, max_norm [, norm_type=2]), the norm of the gradients
-- taken together (torch's norm of norms, through the core's rescue), and its halves get_total_norm /
-- clip_grads_with_norm_; clip_grad_value_; parameters_to_vector / vector_to_parameters.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua

local M = {}

-- The length of a list the caller gave (of tensors, or of parameter groups), read raw: keys 1..n and nothing else (a
-- nil between two tensors is an entry, refused by the caller's check). A table whose metatable answers # or its keys
-- is refused: its __len was the loop's bound and its __index each entry, so one that lied (2^62 entries each a
-- tensor) looped for ever, and one whose # raised or was NaN reached sumsq's own refusal at this file's line
-- (sweep 115); ipairs stopped at a hole, so clip_grad_norm_({w, nil, b}, 1) clipped w alone and returned w's norm
local function plain_list(fname, what, t, level)
  local mt = getmetatable(t)
  if mt ~= nil and (type(mt) ~= "table" or rawget(mt, "__len") ~= nil or rawget(mt, "__index") ~= nil) then
    error(("%s: expected %s as a plain list, got a table whose metatable has %s (its entries are read as they are "
      .. "stored)"):format(fname, what, type(mt) ~= "table" and "__metatable"
      or rawget(mt, "__len") ~= nil and "__len" or "__index"), level + 1)
  end
  require("fp8.opts").check_list(fname, what, t, level + 2)
  return rawlen(t)
end

-- Accepts a list of tensors, a Module, or optimizer-style groups ({params = {...}}).
local function param_list(params, fname)
  -- a Module by its class (a table whose __index answers every key passed `params.parameters` and its list was the
  -- function's result: 'attempt to index a number value', sweep 115)
  if type(params) == "table" and require("fp8.nn").isinstance(params, require("fp8.nn").Module) then
    return params:parameters()
  end
  if fp8.is_tensor(params) then params = { params } end
  if type(params) ~= "table" then
    error(("%s: expected a list of tensors or a Module, got %s"):format(fname, type(params)), 3)
  end
  local out = {}
  for i = 1, plain_list(fname, "the parameters", params, 3) do
    local p = rawget(params, i)
    local group = type(p) == "table" and rawget(p, "params")
    if group then
      if type(group) ~= "table" then
        error(("%s: entry %d's params must be a list of tensors, got %s"):format(fname, i, type(group)), 3)
      end
      for j = 1, plain_list(fname, ("entry %d's params"):format(i), group, 3) do
        local q = rawget(group, j)
        if not fp8.is_tensor(q) then
          error(("%s: entry %d's params[%d] must be a tensor, got %s"):format(fname, i, j, type(q)), 3)
        end
        out[#out + 1] = q
      end
    elseif fp8.is_tensor(p) then
      out[#out + 1] = p
    else
      error(("%s: entry %d must be a tensor, got %s"):format(fname, i, type(p)), 3)
    end
  end
  -- a released one is named here: reading its .grad raised "bad argument #1 to 'index'" at this file's line
  for i, p in ipairs(out) do
    if fp8._live_dtype(p) == false then
      error(("%s: parameter %d has been released (freed or closed)"):format(fname, i), 3)
    end
  end
  return out
end
M._param_list = param_list

-- norm_type as clip_grad_norm_ and get_total_norm take it: a number > 0, math.huge or "inf"; 2 when nil
local function check_norm_type(fname, norm_type)
  norm_type = norm_type or 2
  if norm_type == "inf" then norm_type = math.huge end
  if type(norm_type) ~= "number" or not (norm_type > 0) then   -- `not (...)` also refuses NaN
    error(("%s: norm_type must be a number > 0 or math.huge (\"inf\"), got %s"):format(fname, tostring(norm_type)), 3)
  end
  return norm_type
end

local function check_nonfinite_flag(fname, v)
  if v ~= nil and type(v) ~= "boolean" then
    error(("%s: error_if_nonfinite must be a boolean, got %s"):format(fname, type(v)), 3)
  end
end

-- The norm of order p of the tensors taken together; error_if_nonfinite raises (in fname's name) on a NaN or infinite
-- one. p = 2 over fp32 tensors: √ of their Σg² in float64 (sumsq: each tensor's sum, added in order, one device wait
-- for all; within an ulp of torch's fp32 total where torch's own Σg² stays in range, and finite past fp32's max,
-- docs/lua-api.md). Any other p or dtype: torch's norm of the per-tensor p-norms, each x:norm(p)'s value (the core's rescue
-- where Σ|g|^p leaves the range: [1e20, ...] and [1e-25, ...] at p = 3 are their true norms, torch's inf and 0) and
-- their norm again on the device, read once (stop 100: until then one item() per tensor, and the largest |g|'s
-- where a sum left the range, with a Lua rescue of its own, in float64); a total past the dtype's max is inf, as
-- torch's. The norms keep the gradients' dtype where they share one (torch's bf16 total of bf16 gradients), fp32
-- otherwise (torch's stack promotes); MS-AMP's FP8 gradients dequantized.
-- x:norm(p)'s value, without its graph and its argument checks (a third of its time on a [64, 64]): Σ|x|^p, its root
-- and the core's rescue where the sum left the range (no read); bf16/fp16 summed in fp32 and rounded back, as x:norm's.
-- (|x|^p itself, not norm's select at x = 0: 0^p is 0 for p > 0, the same values.)
local function norm_value(g, p)
  local x = g:is_fp8() and g:dequantize() or g
  if x:requires_grad() then x = x:detach() end   -- (no graph; an op fewer where there is none to cut)
  local dt = x:dtype()
  if dt ~= "fp32" then x = x:float() end
  local r
  if p == 1 then
    r = x:abs():sum()
  elseif p == math.huge then
    r = x:amax()
  else
    local s = x:abs():pow(p):sum()
    r = s:pow(1 / p):_norm_rescue(s, x, x:dim() > 0 and (1 << x:dim()) - 1 or 0, p)
  end
  return dt ~= "fp32" and r:to(dt) or r
end

local function all_fp32(tensors)
  for _, g in ipairs(tensors) do if g:dtype() ~= "fp32" then return false end end
  return true
end
local function one_device(tensors)
  local d = tensors[1]:device()
  for _, g in ipairs(tensors) do if g:device() ~= d then return false end end
  return true
end
-- which(i): how the refusals name tensor i (get_total_norm's "entry 2", clip_grad_norm_'s "the gradient of parameter 3")
local function total_norm(fname, tensors, p, error_if_nonfinite, which)
  if p == math.huge then
    -- the inf norm of an empty tensor has no value (torch 2.15's _foreach_norm refuses it: the operation has no
    -- identity); amax's own refusal said 'lua/fp8/nn/utils.lua:NN: amax: the reduced range of tensor [0] is empty',
    -- an op and a line the caller never called (stop 101)
    for i, g in ipairs(tensors) do
      if g:numel() == 0 then
        error(("%s: the inf norm of an empty tensor has no value (the operation has no identity; torch refuses it "
          .. "too): %s is %s"):format(fname, which(i), g:shape_str()), 3)
      end
    end
  end
  local total
  if #tensors == 0 then
    total = 0.0   -- torch's tensor(0.)
  elseif p == 2 and all_fp32(tensors) then
    total = math.sqrt(require("fp8._optim").sumsq(tensors))
  elseif all_fp32(tensors) and one_device(tensors) then
    -- the ops of the loop below, in C (_optim.pnorm_total), without a Lua object and a collected userdata for each
    -- (stop 101: the loop had made the p = 3 clipping rows 1.6-2x slower in stop 100; the same bits, loose101_spec)
    total = require("fp8._optim").pnorm_total(tensors, p)
  else
    local norms, dt = {}, nil
    for i, g in ipairs(tensors) do
      local n = norm_value(g, p)
      if i > 1 and n:device() ~= norms[1]:device() then n = n:to(norms[1]:device()) end   -- torch's to(first_device)
      dt = (dt == nil or dt == n:dtype()) and n:dtype() or "fp32"
      norms[i] = n
    end
    if dt == "fp32" then for i, n in ipairs(norms) do if n:dtype() ~= "fp32" then norms[i] = n:float() end end end
    for i, n in ipairs(norms) do norms[i] = n:view(1) end
    total = norm_value(fp8.cat(norms, 1), p):item()   -- (the core's cat: fp8.stack's checks cost more than it)
  end
  if error_if_nonfinite and (total ~= total or total == math.huge) then
    error(("%s: the total norm of order %s of the gradients is non-finite (%s), so it cannot be clipped; "
      .. "error_if_nonfinite=false scales them by it anyway"):format(fname, p == math.huge and "inf"
      or ("%g"):format(p), total ~= total and "NaN" or tostring(total)), 3)   -- (tostring gives "-nan" or "nan")
  end
  return total
end

-- The gradients of params (those that have one), and each one's parameter's position in params.
local function grads_of(list)
  local grads, at = {}, {}
  for i, p in ipairs(list) do
    local g = p.grad
    if g ~= nil then grads[#grads + 1] = g; at[#grads] = i end
  end
  return grads, at
end

-- Every gradient scaled in place by min(1, max_norm / (total + 1e-6)), torch's (a NaN total makes them NaN). torch
-- computes the coefficient of its 0-d total norm, as aten::add and then aten::reciprocal and aten::mul (1 FLOP each
-- with with_flops); here it is Lua numbers, recorded as the ops of scalars torch's are: an `add` and a `div` (fp8lab's
-- event for a number over a tensor, torch's reciprocal and mul), 1 FLOP each, inputs [[], [], []] and [[], []]
-- (stop 101: a profiled step's total was 2 FLOPs short of torch's)
local prof_op = require "fp8.prof_op"
local function plus_eps(t) return t + 1e-6 end
local function over(m, d) return m / d end
local SCALARS3, SCALARS2 = { n = 3 }, { n = 2 }
local function scale_by_norm(grads, max_norm, total)
  local coef = prof_op("div", 1, SCALARS2, over, max_norm, prof_op("add", 1, SCALARS3, plus_eps, total))
  if not (coef >= 1) then   -- < 1, or NaN (torch's clamp(coef, max=1) keeps a NaN)
    local C = require "fp8._optim"
    for _, g in ipairs(grads) do C.scale_(g, coef) end
  end
end

local function check_max_norm(fname, max_norm)
  if type(max_norm) ~= "number" or not (max_norm >= 0) then   -- `not (...)` also refuses NaN
    error(("%s: max_norm must be a number >= 0, got %s"):format(fname, require("fp8.opts").got(max_norm)), 3)
  end
end

-- torch's clipping functions end with foreach=None, which only picks their implementation: nil there is that
-- default and passes; any other value is refused with the function's usage (fp8lab has one implementation).
-- The wording is opts.no_more's, for the arguments up to the last that is not nil.
local function no_foreach(fname, usage, ...)
  local n = select("#", ...)
  while n > 0 and select(n, ...) == nil do n = n - 1 end
  if n > 0 then
    error(require("fp8.opts").more_args_message(fname, usage, n)
      .. "; torch's foreach= is not supported (nil, its default None, passes)", 3)
  end
end

-- clip_grad_norm_(params, max_norm [, norm_type=2 (any p > 0, or math.huge) [, error_if_nonfinite=false]]) → total
-- norm (before clipping). As torch's: every gradient is scaled in place by min(1, max_norm / (norm + 1e-6)) — so a norm
-- at max_norm is scaled by a hair below 1, and a NaN norm makes every gradient NaN — unless
-- error_if_nonfinite, which raises on a NaN or infinite norm and leaves the gradients alone.
function M.clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite, ...)
  no_foreach("clip_grad_norm_", "(params, max_norm [, norm_type [, error_if_nonfinite]])", ...)
  check_nonfinite_flag("clip_grad_norm_", error_if_nonfinite)
  local list = param_list(params, "clip_grad_norm_")
  check_max_norm("clip_grad_norm_", max_norm)
  norm_type = check_norm_type("clip_grad_norm_", norm_type)
  local grads, at = grads_of(list)
  local total = total_norm("clip_grad_norm_", grads, norm_type, error_if_nonfinite,
    function(i) return ("the gradient of parameter %d"):format(at[i]) end)
  scale_by_norm(grads, max_norm, total)
  return total
end

-- get_total_norm(tensors [, norm_type=2 [, error_if_nonfinite=false]]) → the norm of the tensors taken together (a
-- number), torch 2.6's half of clip_grad_norm_: tensors a tensor or a list of them (the gradients, usually)
function M.get_total_norm(tensors, norm_type, error_if_nonfinite, ...)
  no_foreach("get_total_norm", "(tensors [, norm_type [, error_if_nonfinite]])", ...)
  check_nonfinite_flag("get_total_norm", error_if_nonfinite)
  local list = fp8.is_tensor(tensors) and { tensors } or tensors
  if type(list) ~= "table" then
    error(("get_total_norm: expected a tensor or a list of tensors, got %s"):format(require("fp8.opts").got(tensors)),
      2)
  end
  for i = 1, plain_list("get_total_norm", "the tensors", list, 2) do
    if not fp8.is_tensor(list[i]) then
      error(("get_total_norm: entry %d must be a tensor, got %s"):format(i, require("fp8.opts").got(list[i])), 2)
    end
    -- named here: the sum's own refusal named its internal entry and this file's line ("lua/fp8/nn/utils.lua:52:
    -- sumsq: element 2 of the list: a tensor has been released")
    if fp8._live_dtype(list[i]) == false then
      error(("get_total_norm: entry %d has been released (freed or closed)"):format(i), 2)
    end
  end
  return total_norm("get_total_norm", list, check_norm_type("get_total_norm", norm_type), error_if_nonfinite,
    function(i) return ("entry %d"):format(i) end)
end

-- clip_grads_with_norm_(params, max_norm, total_norm): torch 2.6's other half: the gradients scaled in place by
-- min(1, max_norm / (total_norm + 1e-6))
function M.clip_grads_with_norm_(params, max_norm, total, ...)
  no_foreach("clip_grads_with_norm_", "(params, max_norm, total_norm)", ...)
  local list = param_list(params, "clip_grads_with_norm_")
  check_max_norm("clip_grads_with_norm_", max_norm)
  if fp8.is_tensor(total) and total:numel() == 1 then total = total:item() end
  if type(total) ~= "number" then
    error(("clip_grads_with_norm_: total_norm must be a number (get_total_norm's), got %s"):format(
      require("fp8.opts").got(total)), 2)
  end
  scale_by_norm(grads_of(list), max_norm, total)
end

-- parameters_to_vector(params) → one 1-D tensor of every parameter flattened, in order (differentiable, torch's);
-- vector_to_parameters(vec, params): vec's slices copied into the parameters, in order (no gradient recorded)
function M.parameters_to_vector(params, ...)
  if select("#", ...) > 0 then error("parameters_to_vector: takes (parameters)", 2) end
  local list = param_list(params, "parameters_to_vector")
  if #list == 0 then error("parameters_to_vector: there are no parameters", 2) end
  local flat = {}
  for i, p in ipairs(list) do flat[i] = p:reshape(-1) end
  return fp8.cat(flat, 1)
end
function M.vector_to_parameters(vec, params, ...)
  if select("#", ...) > 0 then error("vector_to_parameters: takes (vec, parameters)", 2) end
  if not fp8.is_tensor(vec) or vec:dim() ~= 1 then
    error(("vector_to_parameters: vec must be a 1-D tensor, got %s"):format(fp8.is_tensor(vec) and vec:shape_str()
      or require("fp8.opts").got(vec)), 2)
  end
  local list = param_list(params, "vector_to_parameters")
  local n = 0
  for _, p in ipairs(list) do n = n + p:numel() end
  if n ~= vec:numel() then
    error(("vector_to_parameters: vec has %d elements, the parameters %d"):format(vec:numel(), n), 2)
  end
  local C = require "fp8._optim"
  fp8.no_grad(function()
    local at = 1
    for _, p in ipairs(list) do
      local k = p:numel()
      if k > 0 then C.copy_(p, vec:narrow(1, at, k):reshape(p:shape()):to(p:dtype())) end
      at = at + k
    end
  end)
end

-- clip_grad_value_(params, clip_value): every gradient element clamped to [-clip_value, clip_value] in place, as
-- torch's. MS-AMP's FP8 gradients are refused (their bytes share one scale: clip_grad_norm_ scales them instead).
function M.clip_grad_value_(params, clip_value, ...)
  no_foreach("clip_grad_value_", "(params, clip_value)", ...)
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

-- rnn: pad_sequence and unpad_sequence (lua/fp8/nn/rnn_utils.lua)
M.rnn = require "fp8.nn.rnn_utils"

return M
