-- fp8_linear.lua — fp8.nn.FP8Linear(in, out [, bias], recipe): a Linear whose three GEMMs (fprop, dgrad,
-- wgrad) run in FP8 under FP8 autocast, with per-role scaling state configured by the recipe
-- (core/recipe.c via fp8._fp8_layer.layer_config) and carried in the buffer `fp8_state`
-- (fp8.fp8_state) so state_dict() and checkpoints hold it. The numerics are core/fp8_linear.c's.
local unplaced = require("fp8.errfmt").unplaced   -- an error's text without its "file:line: "
local core = require "fp8.core"
local C = require "fp8._fp8_layer"
local fp32_scale_ok = require("fp8.opts").fp32_scale_ok
local O = require "fp8.opts"
local Module = require "fp8.nn.module"
local Linear = require "fp8.nn.linear"
local F = require "fp8.nn.functional"
local autocast = require "fp8.fp8_autocast"
local state = require "fp8.fp8_state"

local FP8Linear = Module.class("FP8Linear", Linear)

-- A layer's recipe is fixed when it is made: its fp8_meta (scaling rules, history lengths) and fp8_state are built for
-- it. `layer.recipe = r` was a plain field write that changed what the layer showed (its repr, has_ao_layers, the
-- Accelerator's recipe checks) but not how it scaled; it is refused. (The field lives in _recipe, so that a write to
-- `recipe` reaches __newindex.)
local index, newindex = FP8Linear.__index, FP8Linear.__newindex
FP8Linear.__index = function(self, k)
  if k == "recipe" then return rawget(self, "_recipe") end
  return index(self, k)
end
FP8Linear.__newindex = function(self, k, v)
  if k == "recipe" then
    error("FP8Linear: a layer's recipe is fixed when it is made (its scaling state is built for it); convert the model "
      .. "back (fp8.convert_model(model, {to_fp8=false})) and again with the new recipe", 2)
  end
  return newindex(self, k, v)
end

-- The recipe r names: a resolved recipe table (acc.fp8_recipe, {backend="te", ...}: its fields are checked by the
-- settings table in layer_config), or a recipe kwargs handler (fp8.TERecipeKwargs{...}, AORecipeKwargs,
-- MSAMPRecipeKwargs, FP8RecipeKwargs), resolved as the Accelerator resolves it. Raises otherwise, in the name of
-- `who` (the function r was given to: FP8Linear, convert_model) at `level`. FP8Linear.as_recipe(r [, level]) is
-- the public form, in its own name (a third argument of its own would be taken for a name).
local RECIPE_HANDLERS = { TERecipeKwargs = true, AORecipeKwargs = true, MSAMPRecipeKwargs = true,
                          FP8RecipeKwargs = true }
function FP8Linear._as_recipe(r, level, who)
  local kwargs = require "fp8.kwargs"
  local handler = kwargs.is_handler(r) and r.handler_type
  if handler and RECIPE_HANDLERS[handler] then
    local ok, s = pcall(kwargs.resolve, { mixed_precision = "fp8", kwargs_handlers = { r }, config = false, env = {} })
    if not ok then error(who .. ": " .. unplaced(s), level + 1) end
    return s.fp8_recipe
  end
  if type(r) ~= "table" or handler or type(r.backend) ~= "string" then
    error(("%s: recipe must be a recipe kwargs handler (fp8.TERecipeKwargs{...}, AORecipeKwargs, MSAMPRecipeKwargs, "
      .. "FP8RecipeKwargs) or a recipe table with a backend field (te, ao or msamp, as acc.fp8_recipe), got %s"):format(
      who, handler and ("a " .. handler .. " handler") or type(r) == "table" and "a table without a backend field"
      or type(r)), level + 1)
  end
  -- a recipe table holds its backend's fields (as acc.fp8_recipe): anything else would be read by nothing (a
  -- misspelt margn, te's margin in an ao recipe), or by a backend whose recipe has no such field (msamp's margin)
  local fields = kwargs.RECIPE_FIELDS[r.backend]
  if not fields then
    error(("%s: recipe.backend must be one of te, ao, msamp, got %s"):format(who, O.got(r.backend)), level + 1)
  end
  for k in next, r do
    if k ~= "backend" and not (type(k) == "string" and fields[k]) then
      local names = {}
      for i, f in ipairs(fields) do names[i] = f.name end
      local other
      for b, fs in next, kwargs.RECIPE_FIELDS do if b ~= r.backend and type(k) == "string" and fs[k] then other = b end end
      error(("%s: the %s recipe has no field %s%s (its fields: backend, %s)"):format(who, r.backend,
        type(k) == "string" and ("'" .. k .. "'") or tostring(k), other and (" (it is the " .. other .. " recipe's)")
        or "", table.concat(names, ", ")), level + 1)
    end
  end
  -- (layer_config skips a field of function type, and convert_model calls it: a number failed there as a raw call)
  if r.module_filter_func ~= nil and type(r.module_filter_func) ~= "function" then
    error(("%s: module_filter_func must be a function(module, name) -> boolean, got %s"):format(who,
      O.got(r.module_filter_func)), level + 1)
  end
  return r
end

-- The recipe fields that act on a whole model or its optimizer, which acc:prepare sets up and a layer alone cannot:
-- MS-AMP's opt_level (fp16 weights, E4M3 weight gradients and the FP8 optimizer state, at O3 E4M3 weights: made with
-- the optimizer), te's use_autocast_during_eval (prepare wraps the model's forward), ao's module_filter_func (which
-- layers of a model convert; not FP8Linear's: a layer made as FP8Linear is one). Taken and then ignored by a layer
-- made outside prepare, so refused there: the field's name and why, or nil. whole_model: the caller converts a
-- model (module_filter_func is then its own to apply).
function FP8Linear._model_field(r, whole_model)
  if r.backend == "msamp" and r.opt_level ~= nil then
    return "opt_level", ("MS-AMP's opt_level (%s) makes fp16 weights, E4M3 weight gradients and FP8 optimizer state "
      .. "with the optimizer: acc:prepare(model, optimizer) sets it up; for MS-AMP's scaling alone give the recipe "
      .. "table {backend=\"msamp\"}"):format(tostring(r.opt_level))
  end
  if r.backend == "te" and r.use_autocast_during_eval then
    return "use_autocast_during_eval", "it is acc:prepare's (it wraps the model's forward); outside prepare the "
      .. "layers run in FP8 wherever the model is called under fp8.fp8_autocast, in training and in eval alike"
  end
  if r.backend == "ao" and r.module_filter_func ~= nil and not whole_model then
    return "module_filter_func", "it chooses which Linears of a model convert (fp8.convert_model, acc:prepare); a "
      .. "layer made as FP8Linear is FP8 already"
  end
end

local prepared = false   -- FP8Linear made by a conversion whose caller checked _model_field (_made_for_model)
function FP8Linear._made_for_model(...)
  prepared = true
  local ok, n = pcall(FP8Linear, ...)
  prepared = false
  if not ok then error(n, 0) end
  return n
end
function FP8Linear.as_recipe(r, level)
  -- the level an error blames, as error()'s (1: as_recipe's caller); anything else was taken as 1 until stop 99
  if level ~= nil and not (math.type(level) == "integer" and level >= 1) then
    error(("as_recipe: level must be an integer >= 1 (the caller an error blames, as error()'s), got %s")
      :format(require("fp8.opts").got(level)), 2)
  end
  level = level or 1
  return (FP8Linear._as_recipe(r, level + 1, "as_recipe"))   -- not a tail call: level counts this frame
end

-- FP8Linear(in, out [, bias], recipe): a Linear whose GEMMs run in FP8 under FP8 autocast.
function FP8Linear:__init(in_features, out_features, bias, recipe)
  -- FP8Linear(in, out, recipe): the bias left out (true), as the optional [, bias] reads
  if recipe == nil and type(bias) == "table" and (require("fp8.kwargs").is_handler(bias) or bias.backend ~= nil) then
    bias, recipe = nil, bias
  end
  in_features, out_features, bias = Linear._args("FP8Linear", 3, in_features, out_features, bias)
  Linear.__init(self, in_features, out_features, bias)
  recipe = FP8Linear._as_recipe(recipe, 3, "FP8Linear")
  local field, why
  if not prepared then field, why = FP8Linear._model_field(recipe) end
  if field then error(("FP8Linear: the recipe's %s is refused here: %s"):format(field, why), 3) end
  if recipe.backend == "ao" and recipe.pad_inner_dim == false and (in_features % 16 ~= 0 or out_features % 16 ~= 0) then
    -- torchao's GEMM runs such a layer only zero-padded (convert_model and prepare keep it in high precision)
    error(("FP8Linear: %d -> %d: the ao recipe runs dims that are not multiples of 16 only with pad_inner_dim=true")
      :format(in_features, out_features), 3)
  end
  rawset(self, "_recipe", recipe)
  rawset(self, "fp8_meta", C.layer_new(C.layer_config(recipe)))
  -- an ao layer's state is not saved (torchao's Float8Linear has the keys of a Linear, so checkpoints move between
  -- converted and plain models both ways): its scales come from each cast's own amax, and a loaded one was replaced
  -- by the next cast. A file that has it (saved before 2026-12-05) still loads: _also_loads.
  self:register_buffer("fp8_state", state.pack(self.fp8_meta:state()), recipe.backend ~= "ao")
end
-- Non-persistent buffers a state_dict may still carry, taken when it does (not an unexpected key).
FP8Linear._also_loads = { fp8_state = true }

-- Module:to moves parameters and buffers; MS-AMP O3's FP8 weight is neither, so it moves here.
function FP8Linear:_move_extra(device)
  local q = rawget(self, "weight_fp8")
  if q then q:move_(device) end
  self.fp8_meta:drop_cache()
end

-- (a step's update that the next forward would make is made first, so a state saved between an optimizer step and
-- that forward has it, as the Accelerator's would: a resume from it had lost one update; see catch_up below)
function FP8Linear:_before_state_dict()
  FP8Linear._catch_up(self)
  self.fp8_state = state.pack(self.fp8_meta:state())
end
-- After Module:load_state_dict wrote sd's tensors (sd and this layer's key prefix given): the recipe state goes
-- back into fp8_meta, and MS-AMP O3's E4M3 weight, which the forward reads, is re-derived from the weight when sd
-- gave the weight without it (strict=false, a plain model's file): else the forward ran on the old weight's bytes
-- until the next optimizer step. It is re-cast in place (the optimizer updates that same tensor), as prepare casts it.
-- With strict false, a saved amax history of another length (another amax_history_len or recipe) is fitted to
-- this layer's: its most recent entries (history[1] is the newest) that fit, zeros after them. Returns
-- "<saved length> -> <this length>" when it fitted one, for the caller's notice.
function FP8Linear:_after_load_state_dict(sd, prefix, strict)
  prefix = prefix or ""
  -- sd's own tensor: one in an older layout (another length) was not copied into the buffer
  local st = state.unpack(sd and sd[prefix .. "fp8_state"] or self.fp8_state)
  local mine, fitted = strict == false and self.fp8_meta:state() or nil, nil   -- (only strict=false fits a history)
  for _, r in ipairs(mine and state.ROLES or {}) do
    local h, n = st[r].history, #mine[r].history
    if #h ~= n then
      fitted = fitted or ("%d -> %d"):format(#h, n)
      local f = {}
      for k = 1, n do f[k] = h[k] or 0 end
      st[r].history = f
    end
  end
  self.fp8_meta:load_state(st)
  self.fp8_state = state.pack(self.fp8_meta:state())
  local q = rawget(self, "weight_fp8")
  if q and sd and sd[prefix .. "weight"] ~= nil and sd[prefix .. "weight_fp8"] == nil then
    FP8Linear._cast_weight_fp8(q, self.weight)
  elseif q then
    FP8Linear._mark_cast(q, self.weight)   -- sd's E4M3 weight is the one saved with its master: kept as it is
  end
  return fitted
end
-- Module:load_state_dict asks before it writes anything: the recipe state in sd must unpack and fit
-- this layer (same history lengths unless strict is false, finite positive scales, no negative amax). Returns why
-- not, or nil.
function FP8Linear:_check_load_state(sd, prefix, strict)
  local t = sd[prefix .. "fp8_state"]
  if t == nil then return nil end   -- strict=false without recipe state: the layer keeps its own
  local ok, st = pcall(state.unpack, t)
  if not ok then return ('for "%sfp8_state": %s'):format(prefix, unplaced(st)) end
  local mine = self.fp8_meta:state()
  for _, r in ipairs(state.ROLES) do
    local s = st[r]
    -- a scale is for one format's range (layouts 1 and 2 did not record it): a HYBRID grad scale, for E5M2, into an
    -- E4M3 layer saturated its first backward. Not fitted under strict=false: nothing in the state says the scale.
    if s.format and s.format ~= mine[r].format then
      return ('for "%sfp8_state": the %s role\'s scale is for %s, this layer casts it to %s (a different fp8_format)')
        :format(prefix, r, s.format:upper(), mine[r].format:upper())
    end
    if #s.history ~= #mine[r].history and strict ~= false then
      return ('for "%sfp8_state": the %s role has an amax history of %d, this layer %d (a different amax_history_len '
        .. 'or recipe; strict=false keeps its most recent entries that fit)'):format(prefix, r, #s.history,
        #mine[r].history)
    end
    -- (and its reciprocal, the scale_inv that decodes, finite in fp32 as the core rounds it: a scale of 1e-45 made every
    -- decode inf or NaN)
    if not fp32_scale_ok(s.scale) then
      return ('for "%sfp8_state": the %s scale is %s (must be finite and > 0, its reciprocal finite in fp32)'):format(
        prefix, r, tostring(s.scale))
    end
    -- the update count and MS-AMP's warm-up count are counts (a NaN or negative one was taken as 0 or kept)
    for _, k in ipairs { "updates", "warm" } do
      local v = s[k]
      if v ~= nil and not (math.tointeger(v) and v >= 0) then
        return ('for "%sfp8_state": the %s role\'s %s count is %s (must be an integer >= 0)'):format(prefix, r, k,
          v ~= v and "nan" or tostring(v))
      end
    end
    -- a NaN or infinite amax is recorded state (it stays in the window, FP8-SPEC §2); only a negative one is not
    for k, h in ipairs(s.history) do
      if h < 0 then return ('for "%sfp8_state": %s history[%d] is %s (an amax is >= 0)'):format(prefix, r, k, tostring(h)) end
    end
  end
  return nil
end

-- MS-AMP O3's E4M3 weight (weight_fp8), which the forward reads in place of the fp16 master: the master and its
-- version counter when it was last cast (weak keys: one record per E4M3 copy, which tied layers share). A write to
-- the master since (an nn.init, a copy_, a load, a broadcast) re-casts it before the next forward, as the optimizer
-- step does: the forward ran on the old weight's bytes until the next step.
local cast_from = setmetatable({}, { __mode = "k" })
function FP8Linear._cast_weight_fp8(q, w)
  core.no_grad(function()
    local w32 = w:detach():to("fp32")
    local fresh = w32:quantize("e4m3", { scale = C.scale_for(w32:abs():max():item(), "e4m3", 0, true) })
    require("fp8._checkpoint").copy_exact_(q, fresh)
  end)
  cast_from[q] = { w, w._version }
end
-- q holds w's values as of now (the optimizer step re-cast it, prepare made it)
function FP8Linear._mark_cast(q, w) cast_from[q] = { w, w._version } end
local function weight_fp8(self)
  local q = rawget(self, "weight_fp8")
  if q == nil then return nil end
  local w, from = self.weight, cast_from[q]
  if not from or from[1] ~= w or from[2] ~= w._version then FP8Linear._cast_weight_fp8(q, w) end
  return q
end

-- (method: the one refusing, forward's by default; forward_gelu and forward_residual name themselves)
local function check_input(self, x, method) Module._check_features(self, x, self.in_features, method) end
local function runs_fp8(self) return autocast.enabled() and not rawget(self, "fp8_disabled") end
-- The recipe's update after an optimizer step (the delayed rule's new scales and the ring's roll, MS-AMP's warm-up
-- count) is the prepared optimizer's (Accelerator:_after_step). A model converted by hand and trained by an optimizer
-- of the script's own under fp8.fp8_autocast had none: te's scales stayed 1 for good, its history never rolled (slot 0
-- the max of every step), so margin, interval, amax_history_len and amax_compute_algo changed nothing, and MS-AMP's
-- warm-up never ended. TransformerEngine's fp8_autocast updates by itself. So a recording forward that finds the
-- weight written since the last recording forward (an optimizer step: every in-place write bumps its version) with
-- no update or state load since (fp8_meta:_syncs()) makes that step's update first: once per step, before the next
-- forward, as the Accelerator would have made it after the step. Under the Accelerator the count has moved by then,
-- and micro-steps of gradient accumulation do not write the weight. last_seen[layer] = {weight, version, syncs}.
local last_seen = setmetatable({}, { __mode = "k" })
local function catch_up(self)
  local meta, w = self.fp8_meta, self.weight
  local seen, syncs, v = last_seen[self], meta:_syncs(), w._version
  if seen and seen[1] == w and seen[2] ~= v and seen[3] == syncs then
    meta:update()
    syncs = meta:_syncs()
  end
  if seen then seen[1], seen[2], seen[3] = w, v, syncs else last_seen[self] = { w, v, syncs } end   -- (no table a call)
end
-- for _before_state_dict: only after a recording forward has seen the weight (nothing is pending before one)
function FP8Linear._catch_up(self) if last_seen[self] then catch_up(self) end end
-- whether this call's amaxes go into the histories (then the update a step without one missed is made first)
local function records(self)
  local rec = self.training ~= false and core.is_grad_enabled()
  if rec then catch_up(self) end
  return rec
end

function FP8Linear:forward(x)
  check_input(self, x)
  if runs_fp8(self) then
    -- (a refusal of the binding's, an FP8 input say, without this file's position, as Linear's)
    local ok, y = pcall(C.linear, x, self.weight, self.bias, self.fp8_meta, records(self), weight_fp8(self))
    if not ok then error(type(y) == "string" and unplaced(y) or y, 0) end
    return y
  end
  return F.linear(x, self.weight, self.bias)
end

local function check_residual(self, method, r, required)
  if (r ~= nil or required) and not core.is_tensor(r) then   -- (named: the bare message named no function)
    Module._forward_error(self, ("expected a tensor residual, got %s"):format(type(r)), method)
  end
end

-- forward(GELU(x)) with GELU's tanh form, for a Sequential whose GELU("tanh") comes right before this layer: the
-- same result, gradients and recipe state, with the input's FP8 cast made in GELU's pass where the core can
-- (fl_fp8_linear_gelu: per-tensor scaling, delayed or current, every GEMM in FP8, a CPU tensor: the fp32 activation
-- is never written; ao rowwise with a weight that takes a gradient: GELU made once for both of its casts). With
-- residual: residual + that, as forward_residual adds it. nil when the layer would not run in FP8 now (the caller
-- runs the two).
function FP8Linear:forward_gelu(x, residual, ...)
  O.no_more("FP8Linear:forward_gelu", "(x [, residual])", ...)
  if not runs_fp8(self) then return nil end
  check_input(self, x, "forward_gelu")
  check_residual(self, "forward_gelu", residual)
  return C.linear_gelu(x, self.weight, self.bias, self.fp8_meta, records(self), weight_fp8(self), residual)
end

-- residual + forward(x), for a container that adds this layer's output to its input (TransformerBlock's
-- x + proj(...), x + fc2(...)): the same result, gradients and recipe state as the add after the layer, with an
-- fp32 residual of the output's shape added as the FP8 GEMM stores its result where the core can (fl_fp8_linear's
-- residual: the layer's own output is never written alone; fp8_meta:state().residual_adds counts it). nil when
-- the layer would not run in FP8 now (the caller adds).
function FP8Linear:forward_residual(x, residual, ...)
  O.no_more("FP8Linear:forward_residual", "(x, residual)", ...)
  if not runs_fp8(self) then return nil end
  check_input(self, x, "forward_residual")
  check_residual(self, "forward_residual", residual, true)
  return C.linear(x, self.weight, self.bias, self.fp8_meta, records(self), weight_fp8(self), residual)
end

-- forward(ln(x)) for the LayerNorm module ln right before this layer (in a Sequential, a TransformerBlock): the same
-- result, gradients and recipe state, with LayerNorm's output cast to FP8 in LayerNorm's own pass where the core
-- can (fl_fp8_linear_layernorm: per-tensor scaling, delayed or current, every GEMM in FP8, a CPU tensor), so
-- it is never written in fp32. nil when the layer would not run in FP8 now, or when x, ln and this layer do not
-- fit together (the caller runs the two, which raise the usual errors).
function FP8Linear:forward_layernorm(x, ln, ...)
  O.no_more("FP8Linear:forward_layernorm", "(x, ln)", ...)
  if not Module.is_module(ln) or math.type(ln.normalized_shape) ~= "integer" then
    error(("forward_layernorm: expected a LayerNorm module, got %s"):format(Module.is_module(ln) and ln:type_name() or type(ln)), 0)
  end
  if not runs_fp8(self) then return nil end
  if not core.is_tensor(x) or x:dim() < 1 or x:size(-1) ~= ln.normalized_shape or ln.normalized_shape ~= self.in_features
    or x:is_fp8() then
    return nil
  end
  for _, t in ipairs { ln.weight or x, ln.bias or x, self.weight } do
    if not core.is_tensor(t) or t:device() ~= x:device() then return nil end
  end
  return C.linear_layernorm(x, ln.weight, ln.bias, ln.eps, self.weight, self.bias, self.fp8_meta, records(self),
    weight_fp8(self))
end

-- The field that names each backend's variant in extra_repr; a recipe without it has the table's default.
local VARIANT = { te = "fp8_format", ao = "config", msamp = "opt_level" }
local DEFAULT = {}
for _, row in ipairs(require("fp8.settings").list()) do DEFAULT[row.name] = row.default end

function FP8Linear:extra_repr()
  local r = self.recipe
  local field = VARIANT[r.backend] or "opt_level"
  -- (an msamp recipe table without opt_level: MS-AMP's scaling alone, no level's weights)
  if field == "opt_level" and r.opt_level == nil then return Linear.extra_repr(self) .. ", fp8=" .. r.backend end
  return Linear.extra_repr(self) .. ", fp8=" .. r.backend .. " " .. tostring(r[field] or DEFAULT[field])
end

-- Delayed-scaling update after an optimizer step (no-op for current scaling).
function FP8Linear:fp8_update(...)
  O.no_more("FP8Linear:fp8_update", "no arguments", ...)
  self.fp8_meta:update()
end

return FP8Linear
