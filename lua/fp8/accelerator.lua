-- fp8.Accelerator — Hugging Face Accelerate's Accelerator, FP8 part, in Lua (docs/fp8-spec.md §5):
--   local acc = fp8.Accelerator{mixed_precision = "fp8", kwargs_handlers = {fp8.FP8RecipeKwargs{backend="te"}}}
--   model, opt, loader = acc:prepare(model, opt, loader)
--   acc:backward(loss); opt:step(); opt:zero_grad()
-- Settings come from fp8.kwargs.resolve (handler > FP8LAB_* environment > config file > defaults).
-- prepare() converts the model for the chosen recipe (te: every Linear whose dims suit FP8 GEMMs and
-- every LayerNorm; ao: the module filter; msamp: every Linear, fp16 weights and FP8 gradients from O1,
-- low-bit Adam from O2, FP8 weights from O3), wraps its forward in context-aware FP8 autocast (with
-- bf16 autocast for the other ops), and wraps the optimizer so that each step updates the recipes'
-- scales (and, for fp16, applies the GradScaler).
local core = require "fp8.core"
local kwargs = require "fp8.kwargs"
local recipes = require "fp8.recipes"
local Module = require "fp8.nn.module"
local amp = require "fp8.amp"
local R = require "fp8._recipe"

local Accelerator = {}
Accelerator.__index = Accelerator
Accelerator.__name = "Accelerator"

local VALID = { mixed_precision = true, kwargs_handlers = true, kwarg_handlers = true, cpu = true,
                gradient_accumulation_steps = true, env = true, config = true }

local function new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error(("Accelerator: expected an options table, got %s"):format(type(opts)), 3) end
  local names = {}
  for k in pairs(VALID) do names[#names + 1] = k end
  table.sort(names)
  for k in pairs(opts) do
    if not VALID[k] then
      local near = kwargs.nearest and kwargs.nearest(tostring(k), names)
      error(("Accelerator: unknown option '%s'%s (valid: %s)"):format(tostring(k),
        near and (" (did you mean '%s'?)"):format(near) or "", table.concat(names, ", ")), 3)
    end
  end
  local gas = opts.gradient_accumulation_steps or 1
  if math.type(gas) ~= "integer" or gas < 1 then
    error(("Accelerator: gradient_accumulation_steps must be an integer >= 1, got %s"):format(tostring(gas)), 3)
  end
  local ok, settings = pcall(kwargs.resolve, { mixed_precision = opts.mixed_precision,
    kwargs_handlers = opts.kwargs_handlers, kwarg_handlers = opts.kwarg_handlers, env = opts.env, config = opts.config })
  if not ok then error(settings, 3) end
  local self = setmetatable({
    settings = settings,
    mixed_precision = settings.mixed_precision,
    fp8_backend = settings.fp8_backend,
    fp8_recipe = settings.fp8_recipe,
    gradient_accumulation_steps = gas,
    step = 0,
    _models = {}, _optimizers = {}, _fp8_layers = {},
    _param_map = {},   -- replaced parameter → its replacement, until an optimizer is prepared (then dropped, freeing the old ones)
    _fp8_weights = setmetatable({}, { __mode = "k" }),   -- O3: fp16 master → its E4M3 weight
    _stats_log = nil,
  }, Accelerator)
  -- Accelerate's rule: the GPU when there is one, unless cpu=true (or FP8LAB_USE_CPU=1).
  if opts.cpu ~= nil and type(opts.cpu) ~= "boolean" then
    error(("Accelerator: cpu must be a boolean, got %s"):format(type(opts.cpu)), 3)
  end
  local env_cpu = os.getenv("FP8LAB_USE_CPU")
  local force_cpu = opts.cpu == true or env_cpu == "1" or env_cpu == "true"
  local okc, cuda = pcall(require, "fp8.cuda")
  self._device = (not force_cpu and okc and cuda.is_available()) and "cuda" or "cpu"
  self.process_index = tonumber(os.getenv("FP8LAB_RANK") or os.getenv("OMPI_COMM_WORLD_RANK") or "0") or 0
  self.num_processes = tonumber(os.getenv("FP8LAB_WORLD_SIZE") or os.getenv("OMPI_COMM_WORLD_SIZE") or "1") or 1
  self.local_process_index = tonumber(os.getenv("FP8LAB_LOCAL_RANK") or os.getenv("OMPI_COMM_WORLD_LOCAL_RANK") or "0") or 0
  if self.mixed_precision == "fp16" then
    local gs = settings.grad_scaler or {}
    self.scaler = amp.GradScaler { init_scale = gs.init_scale, growth_factor = gs.growth_factor,
      backoff_factor = gs.backoff_factor, growth_interval = gs.growth_interval, enabled = gs.enabled }
  end
  for _, n in ipairs(settings.notices or {}) do
    if self.process_index == 0 then io.stderr:write("fp8lab: notice: ", n, "\n") end
  end
  return self
end

setmetatable(Accelerator, { __call = function(_, opts) return new(opts) end })

-- The autocast dtype of the non-FP8 ops for this mixed precision.
local AUTOCAST = { no = "fp32", bf16 = "bf16", fp16 = "fp16", fp8 = "bf16" }

function Accelerator:autocast_dtype() return AUTOCAST[self.mixed_precision] end

-- ---- model conversion -------------------------------------------------------------------------

local function ao_filter(self, model)
  local r = self.fp8_recipe
  local lins = recipes.linears(model)
  local first, last = lins[1] and lins[1][2], lins[#lins] and lins[#lins][2]
  local user = r.module_filter_func
  return function(m, name)
    if user ~= nil then return user(m, name) == true end
    if m == first or m == last then return false end        -- torchao's default: first and last stay hp
    -- dims not divisible by 16: skipped, unless pad_inner_dim (torchao pads them with zeros for the GPU
    -- GEMM; zero padding leaves every product unchanged, so the CPU runs them unpadded, same numbers)
    if not recipes.shape_ok(m) then return r.pad_inner_dim == true end
    return true
  end
end

local function to_fp16_param(t)
  local h = t:detach():to("fp16")
  h:requires_grad(true)
  return h
end

function Accelerator:_prepare_model(model)
  if not Module.is_module(model) then return model end
  self._models[#self._models + 1] = model
  -- on the accelerator's device first, so every copy the conversion makes (fp16 weights, FP8 weights)
  -- is made there
  if model:device() ~= self._device then model:to(self._device) end
  if self.mixed_precision ~= "fp8" then
    return self:_wrap_autocast(model)
  end
  local r = self.fp8_recipe
  local filter
  if r.backend == "ao" then
    filter = ao_filter(self, model)
  elseif r.backend == "te" then
    filter = function(m, name)
      if recipes.shape_ok(m) then return true end
      local key = ("%s:%d:%d"):format(name, m.in_features, m.out_features)
      if not recipes._shape_warned[key] then
        recipes._shape_warned[key] = true
        io.stderr:write(("fp8lab: notice: %s [%d -> %d] stays in high precision: FP8 GEMMs need dims divisible by 16 (the GPU rule)\n")
          :format(name, m.in_features, m.out_features))
      end
      return false
    end
  end
  local _, converted = recipes.convert_model(model, { recipe = r, filter = filter, convert_ln = r.backend == "te" })
  self.converted = converted
  for _, nm in ipairs(recipes.fp8_layers(model)) do
    local layer = nm[2]
    self._fp8_layers[#self._fp8_layers + 1] = nm
    if r.backend == "msamp" then
      -- O1+: fp16 weights (scale 1: weights sit far inside fp16's range), FP8 E4M3 weight gradients.
      local old = layer.weight
      local w16 = to_fp16_param(old)
      layer.weight = w16
      self._param_map[old] = w16
      R.set_grad_dtype(w16, "e4m3")
      if r.opt_level == "O3" then
        local q = w16:detach():to("fp32"):quantize("e4m3", { scale = R.scale_for(w16:abs():max():item(), "e4m3", 0, true) })
        rawset(layer, "weight_fp8", q)
        self._fp8_weights[w16] = q
      end
    end
  end
  recipes.apply_fp8_autowrap(model, r)
  return self:_wrap_autocast(model)
end

-- The model's forward runs under this accelerator's autocast (bf16 for the non-FP8 ops under fp8),
-- restored afterwards: autocast is a property of the prepared model, not of the whole program.
function Accelerator:_wrap_autocast(model)
  local mode = ({ no = "no", bf16 = "bf16", fp16 = "fp16", fp8 = "bf16" })[self.mixed_precision]
  if mode == "no" or rawget(model, "_acc_unwrapped_forward") then return model end
  local fwd = model.forward
  rawset(model, "_acc_unwrapped_forward", fwd)
  rawset(model, "forward", function(m, ...) return amp.autocast(mode, fwd, m, ...) end)
  return model
end

-- ---- optimizer wrapping -----------------------------------------------------------------------

local AccOptimizer = {}
AccOptimizer.__index = function(t, k)
  local v = AccOptimizer[k]
  if v ~= nil then return v end
  local inner = rawget(t, "optimizer")
  local iv = inner[k]
  if type(iv) == "function" then return function(_, ...) return iv(inner, ...) end end
  return iv
end
AccOptimizer.__newindex = function(t, k, v) rawget(t, "optimizer")[k] = v end
AccOptimizer.__tostring = function(t) return "AcceleratedOptimizer(" .. tostring(rawget(t, "optimizer")) .. ")" end

function AccOptimizer:step(...)
  local acc, inner = rawget(self, "accelerator"), rawget(self, "optimizer")
  local res
  local prof = acc._profiler   -- acc:profile(fn) is running: the step is a range, and ends a profiler step
  local ptok = prof and prof.push("Optimizer.step#" .. tostring(inner.name) .. ".step")
  if acc.scaler then
    res = acc.scaler:step(inner, ...)
    acc.scaler:update()
    rawset(self, "step_was_skipped", acc.scaler.found_inf == true)
  else
    res = inner:step(...)
  end
  acc:_after_step()
  if prof then prof.pop(ptok); prof.profiler:step() end
  return res
end

function AccOptimizer:zero_grad(...) return rawget(self, "optimizer"):zero_grad(...) end

local ADAM_NAMES = { AdamW = true, Adam = true, MSAMPAdamW = true }

function Accelerator:_prepare_optimizer(opt)
  -- parameters replaced by the model conversion (msamp fp16 weights) are swapped in the groups
  for _, g in ipairs(opt.param_groups or {}) do
    for i, p in ipairs(g.params) do
      local n = self._param_map[p]
      if n then g.params[i] = n; opt.state[p] = nil end
    end
  end
  if self.mixed_precision == "fp8" and self.fp8_backend == "msamp" then
    local level = self.fp8_recipe.opt_level or "O2"
    if not ADAM_NAMES[opt.name] then
      -- O2/O3 by the spec; O1 too here, since its fp16 weights and FP8 gradients need an optimizer
      -- step that reads them, and only the Adam family has one in this build.
      error(("Accelerator: MS-AMP %s needs an Adam or AdamW optimizer (allowed: Adam, AdamW), got %s; use fp8.optim.AdamW")
        :format(level, tostring(opt.name)), 4)
    end
    if opt.name ~= "MSAMPAdamW" then
      opt = require("fp8.optim.msamp_adamw").from_adamw(opt, { fp8_weights = self._fp8_weights,
        moments = level == "O1" and "fp32" or "fp8" })
    end
  end
  local w = setmetatable({ optimizer = opt, accelerator = self, step_was_skipped = false }, AccOptimizer)
  self._pending_map_clear = true
  self._optimizers[#self._optimizers + 1] = w
  return w
end

local function is_loader(v)
  return type(v) == "table" and getmetatable(v) == require("fp8.data").DataLoader
end

local function is_optimizer(v)
  return type(v) == "table" and type(v.param_groups) == "table" and type(v.step) == "function"
end

-- prepare(...) → its arguments in order: models converted and wrapped, optimizers wrapped, data
-- loaders and anything else passed through. Models are handled before optimizers whatever the order.
function Accelerator:prepare(...)
  local args = table.pack(...)
  if args.n == 0 then error("prepare: expected models, optimizers or data loaders", 2) end
  for i = 1, args.n do
    if Module.is_module(args[i]) then args[i] = self:_prepare_model(args[i])
    elseif is_loader(args[i]) then args[i] = self:prepare_data_loader(args[i]) end
  end
  for i = 1, args.n do
    if is_optimizer(args[i]) then
      local ok, res = pcall(self._prepare_optimizer, self, args[i])
      if not ok then error(res, 2) end
      args[i] = res
    end
  end
  if self._pending_map_clear then self._param_map, self._pending_map_clear = {}, nil end
  return table.unpack(args, 1, args.n)
end

function Accelerator:prepare_model(m) return (self:prepare(m)) end
function Accelerator:prepare_optimizer(o) return (self:prepare(o)) end
-- A DataLoader hands out its batches on the accelerator's device from now on.
function Accelerator:prepare_data_loader(d)
  if is_loader(d) then d:to(self._device) end
  return d
end

-- backward(loss): loss scaling under fp16; gradient accumulation divides by the step count.
function Accelerator:backward(loss, opts)
  if not core.is_tensor(loss) then error(("backward: expected the loss tensor, got %s"):format(type(loss)), 2) end
  if self.gradient_accumulation_steps > 1 then loss = loss / self.gradient_accumulation_steps end
  if self.scaler then loss = self.scaler:scale(loss) end
  loss:backward(opts)
end

function Accelerator:_after_step()
  self.step = self.step + 1
  for _, nm in ipairs(self._fp8_layers) do
    local meta = nm[2].fp8_meta
    meta:update()
    meta:drop_cache()     -- the step changed the weights: the cached FP8 weight is stale, free it now
  end
  local log = self._stats_log
  if log and self.step % log.every == 0 then self:_write_stats(log) end
end

-- autocast(fn, ...) runs fn with this accelerator's autocast (and FP8 autocast under fp8).
function Accelerator:autocast(fn, ...)
  if type(fn) ~= "function" then error(("autocast: expected a function, got %s"):format(type(fn)), 2) end
  local mode = self.mixed_precision == "fp8" and "bf16" or self.mixed_precision
  if self.mixed_precision == "fp8" then
    return amp.autocast(mode, recipes.fp8_autocast, fn, ...)
  end
  return amp.autocast(mode, fn, ...)
end

function Accelerator:clip_grad_norm_(params, max_norm, norm_type)
  if self.scaler then
    for _, o in ipairs(self._optimizers) do
      if not self.scaler._unscaled then self.scaler:unscale_(rawget(o, "optimizer")) end
    end
  end
  if Module.is_module(params) then params = params:parameters() end
  return require("fp8.nn.utils").clip_grad_norm_(params, max_norm, norm_type)
end

-- unwrap_model(model) → the model without the FP8 autocast wrapper (its layers stay as they are;
-- fp8.convert_model(model, {to_fp8=false}) restores plain modules).
function Accelerator:unwrap_model(model)
  if rawget(model, "_acc_unwrapped_forward") then
    rawset(model, "forward", nil)
    rawset(model, "_acc_unwrapped_forward", nil)
  end
  return recipes.remove_fp8_autowrap(model)
end

-- profile(fn [, handler]): fn(prof) runs under an fp8.profiler configured from the ProfileKwargs handler
-- (argument, else kwargs_handlers/settings, else defaults); each opt:step() through this accelerator
-- advances its schedule. With output_trace_dir the trace is <dir>/trace_rank<process_index>.json.
function Accelerator:profile(fn, handler)
  if type(fn) ~= "function" then error(("profile: expected a function, got %s"):format(type(fn)), 2) end
  if self._profiler then error("profile: this accelerator is already profiling", 2) end
  local profiler = require "fp8.profiler"
  local ok, prof = pcall(profiler.profile, handler or self.settings.profile, { rank = self.process_index })
  if not ok then error(prof, 2) end
  self._profiler = { profiler = prof, push = profiler.push, pop = profiler.pop }
  local rok, err = pcall(prof.run, prof, fn)
  self._profiler = nil
  if not rok then error(err, 0) end
  return prof
end

-- acc:is_main_process(), acc:is_local_main_process(), acc:device(): methods, as the issue spells them
-- (Accelerate has properties; a Lua field holding a function would make `if acc.is_main_process`
-- always true, so these are only methods, and process_index / num_processes are plain fields).
function Accelerator:is_main_process() return self.process_index == 0 end
function Accelerator:is_local_main_process() return self.local_process_index == 0 end
function Accelerator:device() return self._device end

function Accelerator:print(...) if self:is_main_process() then print(...) end end
function Accelerator:wait_for_everyone() end
function Accelerator:gather(t) return t end

-- state() → printable summary of precision, backend, recipe and per-layer FP8 state.
function Accelerator:state()
  local lines = { ("Accelerator: mixed_precision=%s, device=%s, process %d of %d"):format(self.mixed_precision,
    self._device, self.process_index, self.num_processes) }
  lines[#lines + 1] = kwargs.describe(self.settings)
  if #self._fp8_layers > 0 then
    lines[#lines + 1] = ("FP8 layers (%d), after %d optimizer steps:"):format(#self._fp8_layers, self.step)
    for _, nm in ipairs(self._fp8_layers) do
      local st = nm[2].fp8_meta:state()
      lines[#lines + 1] = ("  %-24s in scale=%-10.5g amax=%-9.4g  w scale=%-10.5g amax=%-9.4g  grad(%s) scale=%-10.5g amax=%.4g")
        :format(nm[1], st.input.scale, st.input.amax, st.weight.scale, st.weight.amax, st.grad.format, st.grad.scale,
          st.grad.amax)
    end
  end
  local s = table.concat(lines, "\n")
  return setmetatable({ text = s, settings = self.settings, fp8_layers = #self._fp8_layers },
    { __tostring = function() return s end })
end

-- log_fp8_stats{every=N, path=…} appends one CSV row per FP8 layer and role every N optimizer steps.
function Accelerator:log_fp8_stats(opts)
  if type(opts) ~= "table" then error(("log_fp8_stats: expected {every=N, path=...}, got %s"):format(type(opts)), 2) end
  local every, path = opts.every or 1, opts.path
  if math.type(every) ~= "integer" or every < 1 then error(("log_fp8_stats: every must be an integer >= 1, got %s"):format(tostring(every)), 2) end
  if type(path) ~= "string" or path == "" then error(("log_fp8_stats: path must be a file name, got %s"):format(tostring(path)), 2) end
  local f, err = io.open(path, "a")
  if not f then error(("log_fp8_stats: cannot open %s: %s"):format(path, err), 2) end
  if f:seek("end") == 0 then f:write("step,layer,role,format,scale,amax,amax_history,underflow_frac,saturated_frac\n") end
  f:close()
  self._stats_log = { every = every, path = path }
end

function Accelerator:_write_stats(log)
  local f = io.open(log.path, "a")
  if not f then return end
  for _, model in ipairs(self._models) do
    for _, r in ipairs(recipes.stats(model, { quiet = true })) do
      f:write(("%d,%s,%s,%s,%.9g,%.9g,%.9g,%.6g,%.6g\n"):format(self.step, r.layer, r.role, r.format, r.scale, r.amax,
        r.amax_history, r.underflow, r.saturated))
    end
  end
  f:close()
end

function Accelerator:__tostring() return tostring(self:state()) end

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  local function add(name, sig, doc) help.add { section = "Accelerator & recipes", name = name, sig = sig, doc = doc } end
  add("Accelerator", "fp8.Accelerator{mixed_precision=\"no\"|\"fp16\"|\"bf16\"|\"fp8\", kwargs_handlers={...}}",
    "Hugging Face Accelerate's Accelerator for Lua. Fields: mixed_precision, fp8_backend (te|ao|msamp|nil),\n"
    .. "fp8_recipe (every effective field). Methods: prepare(...) (models converted for the recipe, optimizers\n"
    .. "wrapped; returns its arguments in order), backward(loss), autocast(fn), clip_grad_norm_(params, max),\n"
    .. "unwrap_model(m), print(...), is_main_process(), device(), state(), log_fp8_stats{every=N, path=}. FP8 autocast is off in eval\n"
    .. "unless use_autocast_during_eval. With fp8 and no handler: msamp O2.")
  pcall(require, "fp8.profiler")   -- its help entries (fp8.profiler.profile, prof:key_averages, ...)
  add("acc:profile", "acc:profile(function(prof) ... end [, fp8.ProfileKwargs{...}]) -> prof",
    "Runs the function under fp8.profiler configured from the ProfileKwargs in kwargs_handlers (or the\n"
    .. "handler given, or defaults); every opt:step() through the accelerator is one profiler step (do not\n"
    .. "call prof:step() as well). With output_trace_dir the Chrome trace goes to\n"
    .. "<dir>/trace_rank<process_index>.json. Then print(prof:key_averages()).")
end

return Accelerator
