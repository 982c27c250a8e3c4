-- fp8.fp8_autocast — FP8 autocast: while it is on, FP8 layers run their FP8 GEMMs. fp8_autocast(fn, ...)
-- runs a function with it on; contextual_fp8_autocast wraps a forward so it is on in training (and in
-- eval only with use_autocast_during_eval); apply/remove_fp8_autowrap install that wrapper on a model.
local Module = require "fp8.nn.module"
local core = require "fp8.core"

local M = {}

-- The depth lives in the registry, one for every copy of this file: code that reloads fp8's modules (a REPL's
-- package.loaded[...] = nil, a test harness's insulation) would otherwise leave a prepared model's wrapper turning
-- on one copy's autocast while its FP8 layers, made by the other copy, asked theirs and ran in high precision.
local REG = debug.getregistry()
local S = REG.fp8lab_fp8_autocast or { depth = 0 }
REG.fp8lab_fp8_autocast = S
-- Whether FP8 autocast is on (FP8Linear:forward asks).
function M.enabled() return S.depth > 0 end

-- fp8_autocast(fn, ...) runs fn with FP8 autocast on (restored on error too).
function M.fp8_autocast(fn, ...)
  if type(fn) ~= "function" then error(("fp8_autocast: expected a function, got %s"):format(type(fn)), 2) end
  S.depth = S.depth + 1
  local res = table.pack(core._pcall_scoped("fp8_autocast", fn, ...))
  S.depth = S.depth - 1
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- fp8_autocast_off(fn, ...) runs fn with FP8 autocast off, whatever encloses it (restored on error too).
local function fp8_autocast_off(fn, ...)
  local depth = S.depth
  S.depth = 0
  local res = table.pack(core._pcall_scoped("fp8_autocast", fn, ...))
  S.depth = depth
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end
M._fp8_autocast_off = fp8_autocast_off   -- (activation checkpointing replays a forward that ran with it off)

-- contextual_fp8_autocast(forward_fn, recipe, use_during_eval) → a forward(self, ...) that runs
-- with FP8 autocast when self.training, or always when use_during_eval, and with it off otherwise even inside
-- an enclosing FP8 autocast (Accelerate's wrapper: te.fp8_autocast(enabled=...) decides for what it wraps).
function M.contextual_fp8_autocast(forward_fn, recipe, use_during_eval)
  if type(forward_fn) ~= "function" then
    error(("contextual_fp8_autocast: expected the forward function, got %s"):format(type(forward_fn)), 2)
  end
  if recipe ~= nil and type(recipe) ~= "table" then   -- (Accelerate's fails on it too: it reads the recipe's fields)
    error(("contextual_fp8_autocast: recipe must be a recipe kwargs handler or a recipe table, got %s"):format(
      type(recipe)), 2)
  end
  if use_during_eval == nil and type(recipe) == "table" then use_during_eval = recipe.use_autocast_during_eval end
  return function(self, ...)
    local on = use_during_eval or (type(self) == "table" and self.training ~= false)
    if not on then return fp8_autocast_off(forward_fn, self, ...) end
    return M.fp8_autocast(forward_fn, self, ...)
  end
end

-- apply_fp8_autowrap(model, handler_or_recipe): model.forward runs under contextual FP8 autocast.
function M.apply_fp8_autowrap(model, recipe)
  if not Module.is_module(model) then error(("apply_fp8_autowrap: expected a Module, got %s"):format(type(model)), 2) end
  if recipe ~= nil and type(recipe) ~= "table" then
    error(("apply_fp8_autowrap: recipe must be a recipe kwargs handler or a recipe table, got %s"):format(type(recipe)),
      2)
  end
  recipe = recipe or {}
  if rawget(model, "_fp8_unwrapped_forward") then return model end
  local fwd = model.forward
  rawset(model, "_fp8_unwrapped_forward", fwd)
  rawset(model, "forward", M.contextual_fp8_autocast(fwd, recipe, recipe.use_autocast_during_eval == true))
  return model
end

function M.remove_fp8_autowrap(model)
  if not Module.is_module(model) then
    error(("remove_fp8_autowrap: expected a Module, got %s"):format(type(model)), 2)
  end
  local fwd = rawget(model, "_fp8_unwrapped_forward")
  if fwd then
    -- an outer wrapper (the Accelerator's autocast) may sit on top: drop both, the class forward remains
    rawset(model, "forward", nil); rawset(model, "_fp8_unwrapped_forward", nil)
    rawset(model, "_acc_unwrapped_forward", nil)
  end
  return model
end

local add = require("fp8.help").adder("Accelerator & recipes")
add("contextual_fp8_autocast", "fp8.contextual_fp8_autocast(forward_fn, recipe, use_during_eval) -> forward",
  "Wraps a forward(self, ...) so FP8 runs in training (self.training) and, in eval, only when\n"
  .. "use_during_eval. fp8.apply_fp8_autowrap(model, recipe) installs it on model.forward.")
require("fp8.help").ALIASES.apply_fp8_autowrap = "contextual_fp8_autocast"
add("fp8_autocast", "fp8.fp8_autocast(fn, ...)", "Runs fn(...) with FP8 autocast on: FP8 layers use their FP8 GEMMs.")

return M
