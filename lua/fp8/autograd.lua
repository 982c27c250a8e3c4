-- autograd.lua — fp8.autograd: torch.autograd's functional entry point.
--   fp8.autograd.grad(outputs, inputs [, grad_outputs] [, {retain_graph=false, allow_unused=false,
--                     materialize_grads=false}]) -> one gradient per input
-- outputs and inputs are a tensor or a list of tensors; the gradients come back as several values, one per input
-- (local gx, gw = fp8.autograd.grad(loss, { x, w })). No tensor's .grad changes, only the part of the graph between
-- the outputs and the inputs runs (core/autograd.h, fl_autograd_grad), and with retain_graph=false the nodes that ran
-- are freed, as loss:backward() frees them. create_graph (second derivatives) and is_grads_batched are refused.
local core = require "fp8.core"
local O = require "fp8.opts"

local M = {}

local OPTIONS = { "retain_graph", "allow_unused", "materialize_grads", "create_graph", "is_grads_batched" }

-- A tensor or a plain list of tensors (what) → a fresh list and its length; nil entries allowed where holes (the
-- grad_outputs' "ones for this one").
local function as_list(v, what, holes)
  if fp8.is_tensor(v) then return { v }, 1 end
  if type(v) ~= "table" or getmetatable(v) ~= nil then
    error(("grad: %s must be a tensor or a list of tensors, got %s"):format(what, O.got(v)), 4)
  end
  local n = 0
  for k in next, v do
    if math.type(k) ~= "integer" or k < 1 then
      error(("grad: %s must be a list of tensors; it has the key %s"):format(what, O.got(k)), 4)
    end
    if k > n then n = k end
  end
  local out = {}
  for i = 1, n do
    local t = rawget(v, i)
    if t == nil and not holes then
      error(("grad: %s[%d] is nil; expected a tensor"):format(what, i), 4)
    elseif t ~= nil and not fp8.is_tensor(t) then
      error(("grad: %s[%d] is %s; expected a tensor"):format(what, i, O.got(t)), 4)
    end
    out[i] = t
  end
  return out, n
end

local function flag(opts, k)
  local v = opts[k]
  if v ~= nil and type(v) ~= "boolean" then
    error(("grad: %s must be a boolean, got %s"):format(k, O.got(v)), 3)
  end
  return v == true
end

function M.grad(outputs, inputs, grad_outputs, opts, ...)
  O.no_more("grad", "(outputs, inputs [, grad_outputs] [, {options}])", ...)
  if opts == nil and type(grad_outputs) == "table" and getmetatable(grad_outputs) == nil
      and next(grad_outputs) ~= nil and math.type(next(grad_outputs)) ~= "integer" then
    grad_outputs, opts = nil, grad_outputs   -- the options second: grad(y, x, {retain_graph=true})
  end
  opts = O.check("grad", opts, OPTIONS)
  local retain, allow_unused, materialize = flag(opts, "retain_graph"), flag(opts, "allow_unused"),
    flag(opts, "materialize_grads")
  if flag(opts, "create_graph") then
    error("grad: create_graph=true is not supported: fp8lab's backward records no graph of its own, so there are no "
      .. "second derivatives (leave it false)", 2)
  end
  if flag(opts, "is_grads_batched") then
    error("grad: is_grads_batched=true is not supported (no vmap over grad_outputs): call grad once per row, "
      .. "with retain_graph=true", 2)
  end
  if materialize and opts.allow_unused == false then
    error("grad: materialize_grads=true needs allow_unused (it fills the unused inputs' gradients with zeros); "
      .. "leave allow_unused out or set it true", 2)
  end
  local outs, no = as_list(outputs, "outputs")
  local ins, ni = as_list(inputs, "inputs")
  if no == 0 then error("grad: outputs is empty; give at least one tensor", 2) end
  if ni == 0 then error("grad: inputs is empty; give at least one tensor", 2) end
  local gouts
  if grad_outputs ~= nil then
    local ng
    gouts, ng = as_list(grad_outputs, "grad_outputs", true)
    if ng > no then
      error(("grad: %d grad_outputs for %d outputs; give one per output (nil: ones, for a one-element output)")
        :format(ng, no), 2)
    end
  end
  local ok, res = pcall(core._autograd_grad, outs, ins, gouts, retain)
  if not ok then   -- the core's message, at the caller's line rather than this file's
    error(type(res) == "string" and res:gsub("^[^:\n]*autograd%.lua:%d+: ", "") or res, 2)
  end
  for i = 1, ni do
    if res[i] == nil then
      if materialize then
        res[i] = fp8.zeros_like(ins[i], "fp32")
      elseif not allow_unused then
        error(("grad: inputs[%d] is not on the graph of the outputs (no gradient reaches it); pass "
          .. "{allow_unused=true} to get nil for it, or {materialize_grads=true} for zeros"):format(i), 2)
      end
    end
  end
  return table.unpack(res, 1, ni)
end

return M
