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

-- The recipe given to the autowrap → {use_during_eval, fields = what it says of the scaling (backend and fields)}.
-- Here an FP8 layer keeps the recipe it was made with (Accelerate's te.fp8_autocast(fp8_recipe=) sets the scaling
-- of what it wraps), so what the recipe says of the scaling is checked against the model's layers (check_layers):
-- a handler's fields as given (to_kwargs), a recipe table's all, a table without a backend only
-- use_autocast_during_eval.
local function recipe_says(who, recipe, level)
  if recipe == nil then return { fields = {} } end
  if type(recipe) ~= "table" then   -- (Accelerate's fails on it too: it reads the recipe's fields)
    error(("%s: recipe must be a recipe kwargs handler or a recipe table, got %s"):format(who, type(recipe)), level + 1)
  end
  local kwargs = require "fp8.kwargs"
  local fields, eval = {}, nil
  if kwargs.is_handler(recipe) then
    local r = require("fp8.nn.fp8_linear")._as_recipe(recipe, level + 1, who)
    fields.backend = r.backend
    for k in next, (recipe:to_kwargs()) do if r[k] ~= nil then fields[k] = r[k] end end
    eval = r.use_autocast_during_eval
  elseif recipe.backend == nil then
    for k in next, recipe do
      if k ~= "use_autocast_during_eval" then
        error(("%s: a recipe table without a backend takes only use_autocast_during_eval, got the key %s (a recipe "
          .. "table with a backend field, as acc.fp8_recipe, or a recipe kwargs handler says more)"):format(who,
          tostring(k)), level + 1)
      end
    end
    eval = recipe.use_autocast_during_eval
  else
    local r = require("fp8.nn.fp8_linear")._as_recipe(recipe, level + 1, who)
    for k, v in next, r do fields[k] = v end
    eval = r.use_autocast_during_eval
  end
  fields.use_autocast_during_eval, fields.module_filter_func = nil, nil   -- the wrapper's, and the conversion's
  if eval ~= nil and type(eval) ~= "boolean" then
    error(("%s: use_autocast_during_eval must be a boolean, got %s"):format(who, require("fp8.opts").got(eval)),
      level + 1)
  end
  return { use_during_eval = eval, fields = fields }
end

-- Every FP8 layer of model against what the recipe says of the scaling: a difference would be read by nothing.
local function check_layers(who, says, model, level)
  if next(says.fields) == nil then return end
  for _, nm in ipairs(model:named_modules()) do
    local lr = rawget(nm[2], "_recipe")
    local fields = lr and require("fp8.kwargs").RECIPE_FIELDS[lr.backend] or {}
    for k, v in next, (lr and says.fields or {}) do
      local have = lr[k]   -- a recipe table may leave a field out: its default
      if have == nil and k ~= "backend" and fields[k] then have = fields[k].default end
      if not require("fp8.kwargs")._deep_equal(have, v) then
        local function shown(x)   -- (a list of booleans, override_linear_precision's, as {false,false,true})
          if type(x) ~= "table" then return tostring(x) end
          local parts = {}
          for i, e in ipairs(x) do parts[i] = tostring(e) end
          return "{" .. table.concat(parts, ",") .. "}"
        end
        error(("%s: the recipe says %s=%s, but the FP8 layer '%s' was made with %s=%s: a layer keeps the recipe it "
          .. "was made with (fp8.convert_model{recipe=...}, acc:prepare), which this wrapper cannot change"):format(who,
          k, shown(v), nm[1], k, shown(have)), level + 1)
      end
    end
  end
end

-- contextual_fp8_autocast(forward_fn, recipe, use_during_eval) → a forward(self, ...) that runs
-- with FP8 autocast when self.training, or always when use_during_eval, and with it off otherwise even inside
-- an enclosing FP8 autocast (Accelerate's wrapper: te.fp8_autocast(enabled=...) decides for what it wraps).
-- The forward wrapper: the recipe's scaling fields (says) are checked against the FP8 layers of each self it first
-- runs on (check_layers), those of `checked_model` excepted (apply_fp8_autowrap checked them already).
local function wrapper(who, forward_fn, says, use_during_eval, checked_model)
  local checked = setmetatable({}, { __mode = "k" })
  if checked_model then checked[checked_model] = true end
  return function(self, ...)
    if Module.is_module(self) and not checked[self] then check_layers(who, says, self, 2); checked[self] = true end
    local on = use_during_eval or (type(self) == "table" and self.training ~= false)
    if not on then return fp8_autocast_off(forward_fn, self, ...) end
    return M.fp8_autocast(forward_fn, self, ...)
  end
end

function M.contextual_fp8_autocast(forward_fn, recipe, use_during_eval, ...)
  local who = "contextual_fp8_autocast"
  require("fp8.opts").no_more(who, "(forward_fn, recipe, use_during_eval)", ...)
  if type(forward_fn) ~= "function" then error(("%s: expected the forward function, got %s"):format(who,
    type(forward_fn)), 2) end
  local says = recipe_says(who, recipe, 2)
  if use_during_eval ~= nil and type(use_during_eval) ~= "boolean" then   -- ("no" was taken as true)
    error(("%s: use_during_eval must be a boolean, got %s"):format(who, require("fp8.opts").got(use_during_eval)), 2)
  end
  if use_during_eval == nil then use_during_eval = says.use_during_eval == true end
  return wrapper(who, forward_fn, says, use_during_eval)
end

-- apply_fp8_autowrap(model, handler_or_recipe): model.forward runs under contextual FP8 autocast.
function M.apply_fp8_autowrap(model, recipe, ...)
  require("fp8.opts").no_more("apply_fp8_autowrap", "(model, recipe)", ...)
  if not Module.is_module(model) then error(("apply_fp8_autowrap: expected a Module, got %s"):format(type(model)), 2) end
  local says = recipe_says("apply_fp8_autowrap", recipe, 2)
  check_layers("apply_fp8_autowrap", says, model, 2)
  if rawget(model, "_fp8_unwrapped_forward") then return model end
  local fwd = model.forward
  rawset(model, "_fp8_unwrapped_forward", fwd)
  rawset(model, "forward", wrapper("apply_fp8_autowrap", fwd, says, says.use_during_eval == true, model))
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
