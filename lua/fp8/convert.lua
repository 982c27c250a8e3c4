-- fp8.convert — which layers of a model are FP8: convert_model swaps Linear/LayerNorm children for
-- FP8Linear/FP8LayerNorm in place (same weight tensors) and back, and the queries the Accelerator and
-- users ask (linears, fp8_layers, has_fp8_layers, has_ao_layers, shape_ok).
local Module = require "fp8.nn.module"
local Linear = require "fp8.nn.linear"
local LayerNorm = require "fp8.nn.layernorm"
local FP8Linear = require "fp8.nn.fp8_linear"
local FP8LayerNorm = require "fp8.nn.fp8_layernorm"
local O = require "fp8.opts"

local M = {}

local function class_name(m) return getmetatable(m).__name end

-- What v is, for a message: its module class, or its Lua type.
local function kind(v) return Module.is_module(v) and class_name(v) or type(v) end

-- v, checked to be a module (of one of the classes in `classes` when given) for fname's argument `what`.
local function need(fname, what, v, classes)
  local ok = Module.is_module(v)
  if ok and classes then
    ok = false
    for _, c in ipairs(classes) do ok = ok or class_name(v) == c end
  end
  if not ok then
    error(("%s: expected %s, got %s"):format(fname, what, kind(v)), 3)
  end
  return v
end

M.is_fp8_linear = function(m) return Module.is_module(m) and class_name(m) == "FP8Linear" end

-- The new layer's own initial weights are dropped at once: the random generator is put back as it was, so converting
-- (acc:prepare) draws nothing and a script's later draws are those of a run without FP8.
-- (The recipe's whole-model fields were checked by the caller: FP8Linear._model_field.)
local function without_draws(f, ...)
  local CK = require "fp8._checkpoint"
  local seed, counter = CK.rng_state()
  local ok, n = pcall(f, ...)
  CK.set_rng_state(seed, counter)
  if not ok then error(n, 0) end
  return n
end

-- What a plain Linear or LayerNorm carries besides its weight and bias would be lost by the replacement, which is a
-- new module of another class: a forward of its own (set on the instance), other parameters, buffers, submodules or
-- fields (a hook's state, a user's tag). The first such thing, described, or nil.
local OWN = {   -- what each class's __init (and the FP8 machinery) puts in a module: its entries and fields
  Linear = { entries = { weight = true, bias = true }, fields = { in_features = true, out_features = true } },
  LayerNorm = { entries = { weight = true, bias = true },
                fields = { normalized_shape = true, eps = true, elementwise_affine = true } },
  FP8Linear = { entries = { weight = true, bias = true, fp8_state = true, weight_fp8 = true },
                fields = { in_features = true, out_features = true, fp8_meta = true, weight_fp8 = true,
                           fp8_disabled = true } },
}
OWN.FP8LayerNorm = OWN.LayerNorm
local function carries_more(m)
  if rawget(m, "forward") ~= nil then return "a forward of its own" end
  local own = OWN[class_name(m)]
  for _, store in ipairs { "_parameters", "_buffers", "_modules" } do
    for _, k in ipairs(rawget(m, store).names) do
      if not own.entries[k] then
        return ("its %s '%s'"):format(store == "_modules" and "submodule" or store:sub(2, -2), tostring(k))
      end
    end
  end
  for k in next, m do
    if type(k) ~= "string" or not (own.fields[k] or k:byte(1) == 95 or k == "training") then
      return ("its field '%s'"):format(tostring(k))
    end
  end
end

local function linear_to_fp8(lin, recipe)
  local n = without_draws(FP8Linear._made_for_model, lin.in_features, lin.out_features, lin.bias ~= nil, recipe)
  n.weight = lin.weight                       -- the same tensors: the conversion copies nothing
  if lin.bias ~= nil then n.bias = lin.bias end
  n.training = lin.training
  Module._carry_hooks(lin, n)                 -- (every replacement below runs the replaced module's hooks)
  return n
end

-- A LayerNorm of class cls (LayerNorm or FP8LayerNorm) over the same tensors as ln.
local function ln_as(cls, ln)
  local n = without_draws(cls, ln.normalized_shape, { eps = ln.eps, elementwise_affine = ln.elementwise_affine,
    bias = ln.bias ~= nil })
  if ln.elementwise_affine then
    n.weight = ln.weight
    if ln.bias ~= nil then n.bias = ln.bias end
  end
  n.training = ln.training
  Module._carry_hooks(ln, n)
  return n
end
local function ln_to_fp8(ln) return ln_as(FP8LayerNorm, ln) end
local function fp8_to_ln(m) return ln_as(LayerNorm, m) end

local function hp_weight(t)
  -- back to fp32 for a plain module (MS-AMP keeps fp16 weights)
  if t:dtype() == "fp32" then return t end
  local c = t:detach():to("fp32")
  c:requires_grad(t:requires_grad())   -- a frozen weight stays frozen
  return c
end

local function fp8_to_linear(m)
  local n = without_draws(Linear, m.in_features, m.out_features, m.bias ~= nil)
  n.weight = hp_weight(m.weight)
  if m.bias ~= nil then n.bias = hp_weight(m.bias) end
  n.training = m.training
  Module._carry_hooks(m, n)
  return n
end

function M.linear_to_fp8(lin, recipe)
  need("linear_to_fp8", "a Linear", lin, { "Linear" })
  recipe = FP8Linear._as_recipe(recipe, 2, "linear_to_fp8")
  local field, why = FP8Linear._model_field(recipe)
  if field then error(("linear_to_fp8: the recipe's %s is refused here: %s"):format(field, why), 2) end
  local more = carries_more(lin)
  if more then error(("linear_to_fp8: this Linear carries %s, which an FP8Linear would not keep"):format(more), 2) end
  return linear_to_fp8(lin, recipe)
end
-- acc:prepare's conversion of a model that is itself a Linear (its recipe and the Linear checked there)
M._prepared_linear_to_fp8 = linear_to_fp8
function M.ln_to_fp8(ln) return ln_to_fp8(need("ln_to_fp8", "a LayerNorm", ln, { "LayerNorm" })) end

-- to_plain(m): m itself when it is not an FP8 layer, else the plain Linear/LayerNorm over the same tensors.
function M.to_plain(m)
  local cn = class_name(need("to_plain", "a Module", m))
  if cn == "FP8Linear" then return fp8_to_linear(m) end
  if cn == "FP8LayerNorm" then return fp8_to_ln(m) end
  return m
end

-- Visits the modules below mod depth first, in registration order: fn(parent, key, child, full_name)
-- returns a module to put in the child's place (which is not descended into), or nil to descend.
local function visit(mod, fn, prefix)
  for _, nc in ipairs(mod:_all_children()) do
    local name, child = nc[1], nc[2]
    local full = (prefix or "") == "" and name or prefix .. "." .. name
    local repl = fn(mod, name, child, full)
    if repl then mod[name] = repl else visit(child, fn, full) end
  end
end

-- The Linear layers of a model in forward (registration) order, as {name, module, parent, key}.
function M.linears(model)
  need("linears", "a Module", model)
  local out = {}
  visit(model, function(mod, name, child, full)
    local cn = class_name(child)
    if cn == "Linear" or cn == "FP8Linear" then out[#out + 1] = { full, child, mod, name } end
  end)
  return out
end

-- The GPU rule for FP8 GEMM shapes (docs/fp8-spec.md §2): both feature dims multiples of 16.
function M.shape_ok(lin)
  need("shape_ok", "a Linear or FP8Linear", lin, { "Linear", "FP8Linear" })
  return lin.in_features % 16 == 0 and lin.out_features % 16 == 0
end

M._shape_warned = {}   -- layers already reported as staying in high precision (one notice each per process)

-- A Linear that stays in high precision: said once per process (tag: whose rule keeps it). Returns false, the
-- filter's answer.
function M._keep_hp(tag, name, m, why)
  local dims = m.in_features and ("%d -> %d"):format(m.in_features, m.out_features) or tostring(m.normalized_shape)
  local key = ("%s:%s:%s:%s"):format(tag, name, dims, why)
  if not M._shape_warned[key] then
    M._shape_warned[key] = true
    io.stderr:write(("fp8lab: notice: %s [%s] stays in high precision: %s\n"):format(
      name == "" and "the model" or name, dims, why))
  end
  return false
end

-- te's rule for a Linear (prepare's filter, convert_model's): its dims multiples of 16, else high precision with a
-- notice. Returns whether it converts.
function M._te_takes(m, name)
  return M.shape_ok(m) or M._keep_hp("te", name, m, "FP8 GEMMs need dims divisible by 16 (the GPU rule)")
end

-- A Linear or LayerNorm that carries more than its FP8 replacement keeps (carries_more) stays in high precision,
-- with a notice: true when it does.
function M._keeps_what_it_carries(m, name)
  local more = carries_more(m)
  if not more then return false end
  M._keep_hp("carries", name, m, ("it carries %s, which its FP8 replacement would not keep"):format(more))
  return true
end

-- What an ao recipe (a resolved one, or a recipe table) says of a Linear: its module_filter_func decides (by Lua's
-- truth, as torchao tests it), and a Linear it takes whose dims are not multiples of 16 runs in FP8 only with
-- pad_inner_dim (torchao zero-pads K and N for the GPU GEMM; padding changes no product, so the CPU runs it
-- unpadded with the same numbers); without, torchao's GEMM could not run it: it stays in high precision, with a notice.
function M._ao_takes(r, m, name)
  if r.module_filter_func ~= nil and not r.module_filter_func(m, name) then return false end
  if M.shape_ok(m) or r.pad_inner_dim ~= false then return true end
  return M._keep_hp("ao-pad", name, m, (r.module_filter_func and "module_filter_func took it, but " or "")
    .. "its dims are not multiples of 16 and pad_inner_dim=false")
end

-- convert_model(model, {to_fp8=true, convert_linear=true, convert_ln=true, recipe=…, filter=fn})
-- swaps Linear/LayerNorm children for their FP8 versions in place (same tensors) and returns the
-- model and the list of converted names. to_fp8=false restores plain modules. `filter(module,
-- name)` returning false keeps a Linear in high precision.
function M.convert_model(model, opts)
  need("convert_model", "a Module", model)
  opts = opts or {}
  if type(opts) ~= "table" then error(("convert_model: options must be a table, got %s"):format(type(opts)), 2) end
  local valid = { to_fp8 = true, convert_linear = true, convert_ln = true, recipe = true, filter = true,
                  _of_mp = true, _recipe_filtered = true }   -- (_recipe_filtered: prepare's filter applies the recipe's)
  -- Accelerate's spelling (accelerate.utils.convert_model): to_transformer_engine, _convert_linear, _convert_ln
  local ALIAS = { to_transformer_engine = "to_fp8", _convert_linear = "convert_linear", _convert_ln = "convert_ln" }
  local given = opts
  opts = {}
  for k, v in next, given do
    local canon = ALIAS[k] or k
    if not valid[canon] then
      local near = type(k) == "string" and require("fp8.settings").suggest(k, { "convert_linear", "convert_ln", "filter",
        "recipe", "to_fp8", "_convert_linear", "_convert_ln", "to_transformer_engine" }) or nil
      error(("convert_model: unknown option '%s'%s (valid: convert_linear, convert_ln, filter, recipe, to_fp8; "
        .. "Accelerate's names: _convert_linear, _convert_ln, to_transformer_engine)"):format(tostring(k),
        near and (" (did you mean '%s'?)"):format(near) or ""), 2)
    end
    if opts[canon] ~= nil and opts[canon] ~= v then
      error(("convert_model: '%s' and its other spelling disagree; give one"):format(tostring(k)), 2)
    end
    opts[canon] = v
  end
  for _, k in ipairs { "to_fp8", "convert_linear", "convert_ln" } do   -- (any other value was taken as true)
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      error(("convert_model: %s must be a boolean, got %s"):format(k, O.got(opts[k])), 2)
    end
  end
  local to_fp8 = opts.to_fp8 ~= false
  local do_lin, do_ln = opts.convert_linear ~= false, opts.convert_ln ~= false
  if not to_fp8 and (opts.recipe ~= nil or opts.filter ~= nil) then   -- the way back takes every FP8 layer as it is
    error(("convert_model: '%s' applies to the conversion to FP8 only, not with to_fp8=false"):format(
      opts.recipe ~= nil and "recipe" or "filter"), 2)
  end
  local recipe = opts.recipe or { backend = "te" }
  if to_fp8 then recipe = FP8Linear._as_recipe(recipe, 2, "convert_model") end
  if to_fp8 and not opts._recipe_filtered then   -- (prepare sets the whole-model fields up itself)
    local field, why = FP8Linear._model_field(recipe, true)
    if field then error(("convert_model: the recipe's %s is refused here: %s"):format(field, why), 2) end
  end
  -- te's rule for GEMM shapes, as acc:prepare applies it (the same recipe gave another model through convert_model)
  local te_shapes = to_fp8 and recipe.backend == "te" and not opts._recipe_filtered
  if opts.filter ~= nil and type(opts.filter) ~= "function" then
    error(("convert_model: filter must be a function(module, name) -> boolean, got %s"):format(type(opts.filter)), 2)
  end
  -- an ao recipe's module_filter_func and pad_inner_dim choose its layers here too (they were read by nothing); a
  -- filter= beside a module_filter_func would leave one of the two to decide
  local ao = to_fp8 and recipe.backend == "ao" and not opts._recipe_filtered
  if ao and opts.filter ~= nil and recipe.module_filter_func ~= nil then
    error("convert_model: give filter= or the ao recipe's module_filter_func, not both (each chooses the layers)", 2)
  end
  if not to_fp8 then   -- checked before anything changes: the model is converted back whole or not at all
    for _, nm in ipairs(model:named_modules()) do
      local cn = class_name(nm[2])
      local more = nm[1] ~= "" and ((do_lin and cn == "FP8Linear") or (do_ln and cn == "FP8LayerNorm"))
        and carries_more(nm[2])
      if more then
        error(("convert_model: %s (%s) carries %s, which a plain %s would not keep; remove it first"):format(nm[1], cn,
          more, cn:sub(4)), 2)
      end
    end
  end
  -- The swap replaces submodules in their parents; a model that is itself one of the layers it swaps has no parent,
  -- and came back unchanged, without a word (its recipe, filter and every option taken and ignored). (prepare swaps a
  -- root itself, before, and keeps one it leaves in high precision)
  local rcn = class_name(model)
  local root = to_fp8 and ((do_lin and rcn == "Linear" and "linear_to_fp8") or (do_ln and rcn == "LayerNorm" and "ln_to_fp8"))
    or not to_fp8 and ((do_lin and rcn == "FP8Linear") or (do_ln and rcn == "FP8LayerNorm")) and "to_plain"
  if root and not opts._recipe_filtered then
    error(("convert_model: the model is itself a%s %s, which convert_model cannot replace (it swaps a model's "
      .. "submodules in their parents); use fp8.recipes.%s(model%s), which returns the %s, or put it in a container"):format(
      (rcn:match("^[AEIOU]") or rcn:match("^FP8")) and "n" or "", rcn, root, root == "linear_to_fp8" and ", recipe" or "",
      to_fp8 and ("FP8" .. rcn) or rcn:sub(4)), 2)
  end
  local converted = {}
  -- a module under several names (the same Linear called twice) becomes one FP8 module in all its places, as the
  -- model had one module there: its weight, its recipe state (the max of both calls' amaxes) and its state_dict keys
  local done = {}
  visit(model, function(_, _, child, full)   -- a replacement takes the child's place and position
    if done[child] ~= nil then return done[child] or nil end
    local cn = class_name(child)
    local repl
    if to_fp8 then
      -- (the FP8 module, a new one of another class, would drop what the child carries besides weight and bias)
      local plain = (do_lin and cn == "Linear") or (do_ln and cn == "LayerNorm")
      if plain and M._keeps_what_it_carries(child, full) then
        repl = nil   -- it stays, in high precision
      elseif do_lin and cn == "Linear" and (not opts.filter or opts.filter(child, full))
          and (not ao or M._ao_takes(recipe, child, full))
          and (not te_shapes or M._te_takes(child, full)) then
        repl = linear_to_fp8(child, recipe)
      elseif do_ln and cn == "LayerNorm" then
        repl = ln_to_fp8(child)
      end
    else
      -- (marked: a prepared MS-AMP optimizer holds its fp16 weight, not the new fp32 one, and refuses to step)
      if do_lin and cn == "FP8Linear" then repl = fp8_to_linear(child); rawset(child, "_converted_back", true)
      elseif do_ln and cn == "FP8LayerNorm" then repl = fp8_to_ln(child) end
    end
    if repl then converted[#converted + 1] = full end
    done[child] = repl or false
    return repl
  end)
  return model, converted
end

-- has_fp8_layers(model) (alias has_transformer_engine_layers): any FP8Linear or FP8LayerNorm.
function M.has_fp8_layers(model)
  need("has_fp8_layers", "a Module", model)
  for _, m in ipairs(model:modules()) do
    local cn = class_name(m)
    if cn == "FP8Linear" or cn == "FP8LayerNorm" then return true end
  end
  return false
end

-- has_ao_layers(model) (Accelerate's name): any FP8Linear of the torchao recipe (dynamic scaling).
function M.has_ao_layers(model)
  need("has_ao_layers", "a Module", model)
  for _, m in ipairs(model:modules()) do
    if class_name(m) == "FP8Linear" and m.recipe and m.recipe.backend == "ao" then return true end
  end
  return false
end

-- The FP8 linears of a model: list of {name, module}.
function M.fp8_layers(model)
  need("fp8_layers", "a Module", model)
  local out = {}
  for _, nm in ipairs(model:named_modules()) do
    if class_name(nm[2]) == "FP8Linear" then out[#out + 1] = nm end
  end
  return out
end

local add = require("fp8.help").adder("Accelerator & recipes")
add("convert_model", "fp8.convert_model(model [, {to_fp8=true, convert_linear=true, convert_ln=true, recipe=, filter=}])",
  "Swaps Linear/LayerNorm children for FP8Linear/FP8LayerNorm in place (same weight tensors) and returns\n"
  .. "model, {converted names}. to_fp8=false turns them back into plain modules. filter(module, name)\n"
  .. "returning false keeps a Linear in high precision. recipe: an effective recipe (acc.fp8_recipe).\n"
  .. "recipe and filter are for the way to FP8: with to_fp8=false they are refused.\n"
  .. "A module under several names (the same Linear called twice) becomes one FP8 module in all its places.\n"
  .. "Accelerate's spelling works too: {to_transformer_engine=, _convert_linear=, _convert_ln=}.")
add("has_ao_layers", "fp8.has_ao_layers(model) -> bool",
  "True when the model holds FP8 layers of the torchao recipe (Accelerate's has_ao_layers).")
add("has_fp8_layers", "fp8.has_fp8_layers(model) -> bool",
  "True when the model holds FP8 layers (alias fp8.has_transformer_engine_layers).")

return M
