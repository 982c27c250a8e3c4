-- autograd.lua — fp8.autograd: torch.autograd's functional entry points.
--   fp8.autograd.grad(outputs, inputs [, grad_outputs] [, {retain_graph=false, allow_unused=false,
--                     materialize_grads=false}]) -> one gradient per input
--   fp8.autograd.backward(tensors [, grad_tensors] [, {retain_graph=false, inputs=}]): one backward from several
--                     tensors (torch.autograd.backward), filling .grad as loss:backward() does
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
local function as_list(v, what, holes, fname)
  fname = fname or "grad"
  if fp8.is_tensor(v) then return { v }, 1 end
  if type(v) ~= "table" or getmetatable(v) ~= nil then
    error(("%s: %s must be a tensor or a list of tensors, got %s"):format(fname, what, O.got(v)), 4)
  end
  local n = 0
  for k in next, v do
    if math.type(k) ~= "integer" or k < 1 then
      error(("%s: %s must be a list of tensors; it has the key %s"):format(fname, what, O.got(k)), 4)
    end
    if k > n then n = k end
  end
  local out = {}
  for i = 1, n do
    local t = rawget(v, i)
    if t == nil and not holes then
      error(("%s: %s[%d] is nil; expected a tensor"):format(fname, what, i), 4)
    elseif t ~= nil and not fp8.is_tensor(t) then
      error(("%s: %s[%d] is %s; expected a tensor"):format(fname, what, i, O.got(t)), 4)
    end
    out[i] = t
  end
  return out, n
end

-- The options may come where the list of seeds would (grad(y, x, {retain_graph=true})): a plain table whose first key
-- is not an integer. -> seeds, opts
local function seeds_and_opts(seeds, opts)
  if opts == nil and type(seeds) == "table" and getmetatable(seeds) == nil and next(seeds) ~= nil
      and math.type(next(seeds)) ~= "integer" then
    return nil, seeds
  end
  return seeds, opts
end

-- core.fn(...), its error at the caller's caller's line rather than this file's
local function call_core(fn, ...)
  local ok, res = pcall(fn, ...)
  if not ok then error(type(res) == "string" and res:gsub("^[^:\n]*autograd%.lua:%d+: ", "") or res, 3) end
  return res
end

local function flag(opts, k, fname)
  local v = opts[k]
  if v ~= nil and type(v) ~= "boolean" then
    error(("%s: %s must be a boolean, got %s"):format(fname or "grad", k, O.got(v)), 3)
  end
  return v == true
end

function M.grad(outputs, inputs, grad_outputs, opts, ...)
  O.no_more("grad", "(outputs, inputs [, grad_outputs] [, {options}])", ...)
  grad_outputs, opts = seeds_and_opts(grad_outputs, opts)
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
  local res = call_core(core._autograd_grad, outs, ins, gouts, retain)
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

local BACKWARD_OPTIONS = { "retain_graph", "inputs", "create_graph", "grad_variables" }

-- fp8.autograd.backward(tensors [, grad_tensors] [, {retain_graph=false, inputs=}]): torch.autograd.backward, one
-- backward from several tensors at once (each node runs once with the sum of what reaches it, each leaf's hooks once).
function M.backward(tensors, grad_tensors, opts, ...)
  O.no_more("backward", "(tensors [, grad_tensors] [, {options}])", ...)
  grad_tensors, opts = seeds_and_opts(grad_tensors, opts)
  opts = O.check("backward", opts, BACKWARD_OPTIONS)
  local retain = flag(opts, "retain_graph", "backward")
  if flag(opts, "create_graph", "backward") then
    error("backward: create_graph=true is not supported: fp8lab's backward records no graph of its own, so there "
      .. "are no second derivatives (leave it false)", 2)
  end
  if opts.grad_variables ~= nil then
    error("backward: grad_variables is torch's old name, removed in torch 2; give grad_tensors", 2)
  end
  local outs, no = as_list(tensors, "tensors", false, "backward")
  if no == 0 then error("backward: tensors is empty; give at least one tensor", 2) end
  local gouts
  if grad_tensors ~= nil then
    local ng
    gouts, ng = as_list(grad_tensors, "grad_tensors", true, "backward")
    if ng > no then
      error(("backward: %d grad_tensors for %d tensors; give one per tensor (nil: ones, for a one-element tensor)")
        :format(ng, no), 2)
    end
  end
  local ins
  if opts.inputs ~= nil then
    local ni
    ins, ni = as_list(opts.inputs, "inputs", false, "backward")
    if ni == 0 then error("backward: inputs is empty; give the tensors to fill the .grad of", 2) end
  end
  call_core(core._autograd_backward, outs, ins, gouts, retain)
end

-- fp8.autograd.Function{forward=, backward= [, setup_context=] [, name=]}: torch.autograd.Function
-- (lua/fp8/autograd_function.lua)
M.Function = require("fp8.autograd_function").Function

return M
