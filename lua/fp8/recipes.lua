-- fp8.recipes — FP8 layers and model conversion (docs/fp8-spec.md §2–§4): the recipe → per-layer scaling
-- configuration, FP8Linear / FP8LayerNorm, convert_model and its reverse, has_fp8_layers, FP8
-- autocast (context-aware: on in training, off in eval unless use_autocast_during_eval), and
-- fp8.stats. The numerics live in the core (core/scaling.c, core/fp8_linear.c); this file decides
-- which layers are FP8 and with which scaling rule.
local core = require "fp8.core"
local C = require "fp8._recipe"
local Module = require "fp8.nn.module"
local Linear = require "fp8.nn.linear"
local LayerNorm = require "fp8.nn.layernorm"
local F = require "fp8.nn.functional"

local M = {}

-- ---- recipe → layer configuration -----------------------------------------------------------

-- The per-layer configuration (the table fp8._recipe.layer_new takes) for an effective recipe
-- (settings.fp8_recipe: backend plus that backend's fields, defaults filled in): core/recipe.c decides
-- the three roles' formats, rules, histories and margins (fp8._recipe.layer_config).
function M.layer_config(r)
  return C.layer_config(r)
end

-- ---- FP8 autocast -----------------------------------------------------------------------------

local autocast_depth = 0
function M.autocast_enabled() return autocast_depth > 0 end

-- fp8_autocast(fn, ...) runs fn with FP8 autocast on (restored on error too).
function M.fp8_autocast(fn, ...)
  if type(fn) ~= "function" then error(("fp8_autocast: expected a function, got %s"):format(type(fn)), 2) end
  autocast_depth = autocast_depth + 1
  local res = table.pack(pcall(fn, ...))
  autocast_depth = autocast_depth - 1
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- For Accelerator:autocast() without a function (a to-be-closed block): enter / leave by hand.
function M._autocast_enter() autocast_depth = autocast_depth + 1 end
function M._autocast_leave() if autocast_depth > 0 then autocast_depth = autocast_depth - 1 end end

-- contextual_fp8_autocast(forward_fn, recipe, use_during_eval) → a forward(self, ...) that runs
-- with FP8 autocast when self.training, or always when use_during_eval (Accelerate's wrapper).
function M.contextual_fp8_autocast(forward_fn, recipe, use_during_eval)
  if type(forward_fn) ~= "function" then
    error(("contextual_fp8_autocast: expected the forward function, got %s"):format(type(forward_fn)), 2)
  end
  if use_during_eval == nil and type(recipe) == "table" then use_during_eval = recipe.use_autocast_during_eval end
  return function(self, ...)
    local on = use_during_eval or (type(self) == "table" and self.training ~= false)
    if not on then return forward_fn(self, ...) end
    return M.fp8_autocast(forward_fn, self, ...)
  end
end

-- ---- layers -----------------------------------------------------------------------------------

local FP8Linear = Module.class("FP8Linear", Linear)
M.FP8Linear = FP8Linear

local function validate_recipe(r, level)
  if type(r) ~= "table" or type(r.backend) ~= "string" then
    error(("expected a recipe table with a backend field (te, ao or msamp), got %s"):format(type(r)), level + 1)
  end
end

-- FP8Linear(in, out [, bias], recipe): a Linear whose GEMMs run in FP8 under FP8 autocast.
function FP8Linear:__init(in_features, out_features, bias, recipe)
  Linear.__init(self, in_features, out_features, bias)
  validate_recipe(recipe, 3)
  rawset(self, "recipe", recipe)
  rawset(self, "fp8_meta", C.layer_new(M.layer_config(recipe)))
  self:register_buffer("fp8_state", M.pack_state(self.fp8_meta:state()))
end

-- Recipe state as a buffer, so state_dict()/load_state_dict() (and every checkpoint made from them)
-- carry it in full: [version, roles, then per role: scale, updates, history length, history...].
local STATE_VERSION = 1
local STATE_ROLES = { "input", "weight", "grad" }
function M.pack_state(st)
  local flat = { STATE_VERSION, #STATE_ROLES }
  for _, r in ipairs(STATE_ROLES) do
    local s = st[r]
    flat[#flat + 1] = s.scale; flat[#flat + 1] = s.updates; flat[#flat + 1] = #s.history
    for _, h in ipairs(s.history) do flat[#flat + 1] = h end
  end
  return core.tensor(flat)
end

function M.unpack_state(t)
  if not core.is_tensor(t) or t:dim() ~= 1 then
    error("FP8 recipe state: expected a 1-d tensor, got " .. (core.is_tensor(t) and ("%d-d"):format(t:dim()) or type(t)), 3)
  end
  local flat = t:totable()
  if flat[1] ~= STATE_VERSION or flat[2] ~= #STATE_ROLES then
    error(("FP8 recipe state: unknown layout (version %s, %s roles; this build reads version %d)"):format(
      tostring(flat[1]), tostring(flat[2]), STATE_VERSION), 3)
  end
  local st, i = {}, 3
  for _, r in ipairs(STATE_ROLES) do
    local n = math.tointeger(flat[i + 2])
    if type(flat[i]) ~= "number" or not n or n < 0 or i + 2 + n > #flat then
      error(("FP8 recipe state: truncated or corrupt at the %s role (%d values)"):format(r, #flat), 3)
    end
    local s = { scale = flat[i], updates = math.tointeger(flat[i + 1]) or 0, history = {} }
    for k = 1, n do s.history[k] = flat[i + 2 + k] end
    st[r], i = s, i + 3 + n
  end
  if i - 1 ~= #flat then error(("FP8 recipe state: %d values, the layout needs %d"):format(#flat, i - 1), 3) end
  return st
end

-- Module:to moves parameters and buffers; MS-AMP O3's FP8 weight is neither, so it moves here.
function FP8Linear:_move_extra(device)
  local q = rawget(self, "weight_fp8")
  if q then q:move_(device) end
  self.fp8_meta:drop_cache()
end

function FP8Linear:_before_state_dict() self.fp8_state = M.pack_state(self.fp8_meta:state()) end
function FP8Linear:_after_load_state_dict() self.fp8_meta:load_state(M.unpack_state(self.fp8_state)) end
-- Module:load_state_dict asks before it writes anything: the recipe state in sd must unpack and fit
-- this layer (same history lengths, finite positive scales). Returns why not, or nil.
function FP8Linear:_check_load_state(sd, prefix)
  local t = sd[prefix .. "fp8_state"]
  if t == nil then return nil end   -- strict=false without recipe state: the layer keeps its own
  local ok, st = pcall(M.unpack_state, t)
  if not ok then return ('for "%sfp8_state": %s'):format(prefix, tostring(st):gsub("^[^:]*:%d+: ", "")) end
  local mine = self.fp8_meta:state()
  for _, r in ipairs(STATE_ROLES) do
    local s = st[r]
    if #s.history ~= #mine[r].history then
      return ('for "%sfp8_state": the %s role has an amax history of %d, this layer %d (a different amax_history_len '
        .. 'or recipe)'):format(prefix, r, #s.history, #mine[r].history)
    end
    if not (s.scale > 0 and s.scale < math.huge) then
      return ('for "%sfp8_state": the %s scale is %s (must be finite and > 0)'):format(prefix, r, tostring(s.scale))
    end
    for k, h in ipairs(s.history) do
      if h ~= h then return ('for "%sfp8_state": %s history[%d] is NaN'):format(prefix, r, k) end
    end
  end
  return nil
end

function FP8Linear:forward(x)
  if not core.is_tensor(x) then error(("expected a tensor input, got %s"):format(type(x)), 0) end
  if x:dim() < 1 or x:size(-1) ~= self.in_features then
    error(("expected input [..., %d], got %s"):format(self.in_features, Module._shape_str(x)), 0)
  end
  if autocast_depth > 0 and not rawget(self, "fp8_disabled") then
    local record = self.training ~= false and core.is_grad_enabled()
    return C.linear(x, self.weight, self.bias, self.fp8_meta, record, rawget(self, "weight_fp8"))
  end
  return F.linear(x, self.weight, self.bias)
end

function FP8Linear:extra_repr()
  local r = self.recipe
  local what = r.backend == "te" and ("te " .. (r.fp8_format or "HYBRID"))
    or r.backend == "ao" and ("ao " .. (r.config or "tensorwise"))
    or ("msamp " .. (r.opt_level or "O2"))
  return Linear.extra_repr(self) .. ", fp8=" .. what
end

-- Delayed-scaling update after an optimizer step (no-op for current scaling).
function FP8Linear:fp8_update() self.fp8_meta:update() end
function FP8Linear:fp8_state() return self.fp8_meta:state() end

-- TE's LayerNorm: the same normalisation in high precision (its output feeds an FP8 Linear, whose
-- input cast is where FP8 happens); marked so has_fp8_layers and the reverse conversion see it.
local FP8LayerNorm = Module.class("FP8LayerNorm", LayerNorm)
M.FP8LayerNorm = FP8LayerNorm

-- ---- conversion -------------------------------------------------------------------------------

local function class_name(m) return getmetatable(m).__name end

M.is_fp8_linear = function(m) return Module.is_module(m) and class_name(m) == "FP8Linear" end

local function linear_to_fp8(lin, recipe)
  local n = FP8Linear(lin.in_features, lin.out_features, lin.bias ~= nil, recipe)
  n.weight = lin.weight                       -- the same tensors: the conversion copies nothing
  if lin.bias ~= nil then n.bias = lin.bias end
  n.training = lin.training
  return n
end

local function ln_to_fp8(ln)
  local n = FP8LayerNorm(ln.normalized_shape, { eps = ln.eps, elementwise_affine = ln.elementwise_affine,
                                                bias = ln.bias ~= nil })
  if ln.elementwise_affine then
    n.weight = ln.weight
    if ln.bias ~= nil then n.bias = ln.bias end
  end
  n.training = ln.training
  return n
end

local function hp_weight(t)
  -- back to fp32 for a plain module (MS-AMP keeps fp16 weights)
  if t:dtype() == "fp32" then return t end
  local c = t:detach():to("fp32")
  c:requires_grad(true)
  return c
end

local function fp8_to_linear(m)
  local n = Linear(m.in_features, m.out_features, m.bias ~= nil)
  n.weight = hp_weight(m.weight)
  if m.bias ~= nil then n.bias = hp_weight(m.bias) end
  n.training = m.training
  return n
end

local function fp8_to_ln(m)
  local n = LayerNorm(m.normalized_shape, { eps = m.eps, elementwise_affine = m.elementwise_affine, bias = m.bias ~= nil })
  if m.elementwise_affine then
    n.weight = m.weight
    if m.bias ~= nil then n.bias = m.bias end
  end
  n.training = m.training
  return n
end

M.linear_to_fp8, M.ln_to_fp8 = linear_to_fp8, ln_to_fp8

-- The Linear layers of a model in forward (registration) order, as {name, module, parent, key}.
function M.linears(model)
  local out = {}
  local function walk(mod, prefix)
    for _, nc in ipairs(mod:named_children()) do
      local name, child = nc[1], nc[2]
      local full = prefix == "" and name or prefix .. "." .. name
      local cn = class_name(child)
      if cn == "Linear" or cn == "FP8Linear" then out[#out + 1] = { full, child, mod, name } end
      walk(child, full)
    end
  end
  walk(model, "")
  return out
end

-- The GPU rule for FP8 GEMM shapes (docs/fp8-spec.md §2): both feature dims multiples of 16.
function M.shape_ok(lin) return lin.in_features % 16 == 0 and lin.out_features % 16 == 0 end

M._shape_warned = {}   -- layers already reported as staying in high precision (one notice each per process)

-- convert_model(model, {to_fp8=true, convert_linear=true, convert_ln=true, recipe=…, filter=fn})
-- swaps Linear/LayerNorm children for their FP8 versions in place (same tensors) and returns the
-- model and the list of converted names. to_fp8=false restores plain modules. `filter(module,
-- name)` returning false keeps a Linear in high precision.
function M.convert_model(model, opts)
  if not Module.is_module(model) then error(("convert_model: expected a Module, got %s"):format(type(model)), 2) end
  opts = opts or {}
  if type(opts) ~= "table" then error(("convert_model: options must be a table, got %s"):format(type(opts)), 2) end
  local valid = { to_fp8 = true, convert_linear = true, convert_ln = true, recipe = true, filter = true,
                  _of_mp = true }
  -- Accelerate's spelling (accelerate.utils.convert_model): to_transformer_engine, _convert_linear, _convert_ln
  local ALIAS = { to_transformer_engine = "to_fp8", _convert_linear = "convert_linear", _convert_ln = "convert_ln" }
  local given = opts
  opts = {}
  for k, v in pairs(given) do
    local canon = ALIAS[k] or k
    if not valid[canon] then
      error(("convert_model: unknown option '%s' (valid: convert_linear, convert_ln, filter, recipe, to_fp8; "
        .. "Accelerate's names: _convert_linear, _convert_ln, to_transformer_engine)"):format(tostring(k)), 2)
    end
    if opts[canon] ~= nil and opts[canon] ~= v then
      error(("convert_model: '%s' and its other spelling disagree; give one"):format(tostring(k)), 2)
    end
    opts[canon] = v
  end
  local to_fp8 = opts.to_fp8 ~= false
  local do_lin, do_ln = opts.convert_linear ~= false, opts.convert_ln ~= false
  local recipe = opts.recipe or { backend = "te" }
  if to_fp8 then validate_recipe(recipe, 2) end
  if opts.filter ~= nil and type(opts.filter) ~= "function" then
    error(("convert_model: filter must be a function(module, name) -> boolean, got %s"):format(type(opts.filter)), 2)
  end
  local converted = {}
  local function walk(mod, prefix)
    for _, nc in ipairs(mod:named_children()) do
      local name, child = nc[1], nc[2]
      local full = prefix == "" and name or prefix .. "." .. name
      local cn = class_name(child)
      local repl
      if to_fp8 then
        if do_lin and cn == "Linear" and (not opts.filter or opts.filter(child, full)) then
          repl = linear_to_fp8(child, recipe)
        elseif do_ln and cn == "LayerNorm" then
          repl = ln_to_fp8(child)
        end
      else
        if do_lin and cn == "FP8Linear" then repl = fp8_to_linear(child)
        elseif do_ln and cn == "FP8LayerNorm" then repl = fp8_to_ln(child) end
      end
      if repl then
        mod[name] = repl                      -- replaced in place, keeping its position
        converted[#converted + 1] = full
      else
        walk(child, full)
      end
    end
  end
  walk(model, "")
  return model, converted
end

-- has_fp8_layers(model) (alias has_transformer_engine_layers): any FP8Linear or FP8LayerNorm.
function M.has_fp8_layers(model)
  if not Module.is_module(model) then error(("has_fp8_layers: expected a Module, got %s"):format(type(model)), 2) end
  for _, m in ipairs(model:modules()) do
    local cn = class_name(m)
    if cn == "FP8Linear" or cn == "FP8LayerNorm" then return true end
  end
  return false
end

-- has_ao_layers(model) (Accelerate's name): any FP8Linear of the torchao recipe (dynamic scaling).
function M.has_ao_layers(model)
  if not Module.is_module(model) then error(("has_ao_layers: expected a Module, got %s"):format(type(model)), 2) end
  for _, m in ipairs(model:modules()) do
    if class_name(m) == "FP8Linear" and m.recipe and m.recipe.backend == "ao" then return true end
  end
  return false
end

-- The FP8 linears of a model: list of {name, module}.
function M.fp8_layers(model)
  local out = {}
  for _, nm in ipairs(model:named_modules()) do
    if class_name(nm[2]) == "FP8Linear" then out[#out + 1] = nm end
  end
  return out
end

-- apply_fp8_autowrap(model, handler_or_recipe): model.forward runs under contextual FP8 autocast.
function M.apply_fp8_autowrap(model, recipe)
  if not Module.is_module(model) then error(("apply_fp8_autowrap: expected a Module, got %s"):format(type(model)), 2) end
  recipe = recipe or {}
  if rawget(model, "_fp8_unwrapped_forward") then return model end
  local fwd = model.forward
  rawset(model, "_fp8_unwrapped_forward", fwd)
  rawset(model, "forward", M.contextual_fp8_autocast(fwd, recipe, recipe.use_autocast_during_eval == true))
  return model
end

function M.remove_fp8_autowrap(model)
  local fwd = rawget(model, "_fp8_unwrapped_forward")
  if fwd then
    -- an outer wrapper (the Accelerator's autocast) may sit on top: drop both, the class forward remains
    rawset(model, "forward", nil); rawset(model, "_fp8_unwrapped_forward", nil)
    rawset(model, "_acc_unwrapped_forward", nil)
  end
  return model
end

-- ---- statistics -------------------------------------------------------------------------------

local ROLES = { "input", "weight", "grad" }

-- stats(model [, {quiet=true}]) → list of rows {layer, role, format, scale, amax, amax_history,
-- underflow, saturated, numel} (fractions of the last cast), printed as a table unless quiet.
-- stats(state_dict) (a table from model:state_dict() or fp8.load_file of a checkpoint's model file):
-- the recipe state saved in each "<layer>.fp8_state" — per role the scale, the largest amax in the
-- history, the update count and the history length (docs/checkpoints.md).
local function saved_stats(sd, opts)
  local names = {}
  for k, v in pairs(sd) do
    if type(k) == "string" and k:match("fp8_state$") and core.is_tensor(v) then names[#names + 1] = k end
  end
  table.sort(names)
  local rows = {}
  for _, k in ipairs(names) do
    local ok, st = pcall(M.unpack_state, sd[k])
    if not ok then error(("fp8.stats: %s: %s"):format(k, tostring(st):gsub("^[^:]*:%d+: ", "")), 3) end
    for _, r in ipairs(STATE_ROLES) do
      local s, amax = st[r], 0
      for _, h in ipairs(s.history) do if h > amax then amax = h end end
      rows[#rows + 1] = { layer = k:gsub("%.?fp8_state$", ""), role = r, scale = s.scale,
                          amax_history = amax, updates = s.updates, history = s.history }
    end
  end
  if not (type(opts) == "table" and opts.quiet) then
    if #rows == 0 then print("fp8.stats: no fp8_state entries in this table (not a state dict of an FP8 model)")
    else
      print(("%-28s %-11s %12s %11s %8s %7s"):format("layer", "role", "scale", "amax(hist)", "updates", "history"))
      for _, r in ipairs(rows) do
        print(("%-28s %-11s %12.5g %11.4g %8d %7d"):format(r.layer, r.role, r.scale, r.amax_history, r.updates, #r.history))
      end
    end
  end
  return rows
end

function M.stats(model, opts)
  if type(model) == "table" and not Module.is_module(model) then return saved_stats(model, opts) end
  if not Module.is_module(model) then error(("fp8.stats: expected a Module or a state dict, got %s"):format(type(model)), 2) end
  local rows = {}
  for _, nm in ipairs(M.fp8_layers(model)) do
    local st = nm[2].fp8_meta:state()
    for _, r in ipairs(ROLES) do
      local s = st[r]
      local n = s.numel > 0 and s.numel or 1
      rows[#rows + 1] = { layer = nm[1], role = r, format = s.format, scale = s.scale,
                          amax = s.amax, amax_history = s.amax_history_max, rule = s.rule, updates = s.updates,
                          underflow = s.underflow / n, saturated = s.saturated / n, numel = s.numel,
                          high_precision = (r == "input" and st.hp[1]) or false }
    end
  end
  -- several processes, MS-AMP: the FP8 weight-gradient all-reduce of the last step (lua/fp8/ddp.lua)
  local dstats = rawget(model, "_ddp_stats")
  if dstats then
    local d = dstats()
    if d.fp8_n > 0 then
      rows[#rows + 1] = { layer = "(all-reduce)", role = "weight_grad", format = "e4m3", scale = 0 / 0, amax = 0 / 0,
                          amax_history = 0 / 0, rule = "allreduce", updates = d.steps, numel = d.fp8_n,
                          underflow = d.fp8_underflow / d.fp8_n, saturated = d.fp8_saturated / d.fp8_n,
                          high_precision = false }
    end
  end
  if not (type(opts) == "table" and opts.quiet) then
    if #rows == 0 then print("fp8.stats: the model has no FP8 layers (convert it, or prepare it with an fp8 Accelerator)")
    else
      print(("%-28s %-11s %-5s %12s %11s %11s %9s %9s"):format("layer", "role", "fmt", "scale", "amax", "amax(hist)",
        "underflow", "saturated"))
      for _, r in ipairs(rows) do
        print(("%-28s %-11s %-5s %12.5g %11.4g %11.4g %8.3f%% %8.3f%%"):format(r.layer, r.role, r.format, r.scale, r.amax,
          r.amax_history, 100 * r.underflow, 100 * r.saturated))
      end
    end
  end
  return rows
end

-- ---- help -------------------------------------------------------------------------------------

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  local function add(name, sig, doc) help.add { section = "Accelerator & recipes", name = name, sig = sig, doc = doc } end
  add("convert_model", "fp8.convert_model(model [, {to_fp8=true, convert_linear=true, convert_ln=true, recipe=, filter=}])",
    "Swaps Linear/LayerNorm children for FP8Linear/FP8LayerNorm in place (same weight tensors) and returns\n"
    .. "model, {converted names}. to_fp8=false turns them back into plain modules. filter(module, name)\n"
    .. "returning false keeps a Linear in high precision. recipe: an effective recipe (acc.fp8_recipe).\n"
    .. "Accelerate's spelling works too: {to_transformer_engine=, _convert_linear=, _convert_ln=}.")
  add("has_ao_layers", "fp8.has_ao_layers(model) -> bool",
    "True when the model holds FP8 layers of the torchao recipe (Accelerate's has_ao_layers).")
  add("has_fp8_layers", "fp8.has_fp8_layers(model) -> bool",
    "True when the model holds FP8 layers (alias fp8.has_transformer_engine_layers).")
  add("contextual_fp8_autocast", "fp8.contextual_fp8_autocast(forward_fn, recipe, use_during_eval) -> forward",
    "Wraps a forward(self, ...) so FP8 runs in training (self.training) and, in eval, only when\n"
    .. "use_during_eval. fp8.apply_fp8_autowrap(model, recipe) installs it on model.forward.")
  add("fp8_autocast", "fp8.fp8_autocast(fn, ...)", "Runs fn(...) with FP8 autocast on: FP8 layers use their FP8 GEMMs.")
  add("stats", "fp8.stats(model [, {quiet=true}]) -> rows",
    "Per FP8 layer and tensor role (input, weight, grad: the output gradient): format, current scale, amax of the last\n"
    .. "cast and over the history, fraction of values that underflowed to zero and that saturated.\n"
    .. "Printed as a table; call it after each step at the prompt to watch the scales adapt.\n"
    .. "fp8.stats(fp8.load_file(\"ckpt/model.safetensors\")) shows the recipe state a checkpoint holds.")
end

return M
