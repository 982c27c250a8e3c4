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
local O = require "fp8.opts"
local convert = require "fp8.convert"
local fp8_autocast = require "fp8.fp8_autocast"
local fp8_stats = require "fp8.stats"
local Module = require "fp8.nn.module"
local FP8Linear = require "fp8.nn.fp8_linear"   -- (MS-AMP O3: its E4M3 weights, marked as cast from their masters)
local amp = require "fp8.amp"
local fp8_layer = require "fp8._fp8_layer"
local trackers = require "fp8.trackers"
local checkpointing = require "fp8.checkpointing"   -- save_state/load_state/save_model (installed below)
local dataloader_config = require "fp8.dataloader_config"   -- fp8.DataLoaderConfiguration (dataloader_config=)
local dist = require "fp8.distributed"   -- processes, utilities, loader sharding (docs/distributed.md)
local ddp = require "fp8.ddp"            -- gradient reduction across processes
local data = require "fp8.data"          -- DataLoader, SkipDataLoader
local Plugin = require "fp8.accumulation_plugin"   -- fp8.GradientAccumulationPlugin

local Accelerator = {}
-- Accelerate's read-only properties that follow other state, computed when read.
local PROPERTIES = {
  project_dir = function(self) return self.project_configuration.project_dir end,
  logging_dir = function(self) return self.project_configuration.logging_dir end,
  save_iteration = function(self) return self.project_configuration.iteration end,
  use_distributed = function(self) return (self.num_processes or 1) > 1 end,
  fp8_enabled = function(self) return self.mixed_precision == "fp8" end,
}
Accelerator.__index = function(self, k)
  local v = Accelerator[k]
  if v ~= nil then return v end
  local p = PROPERTIES[k]
  if p then return p(self) end
end
Accelerator.__name = "Accelerator"

local VALID = { mixed_precision = true, kwargs_handlers = true, kwarg_handlers = true, cpu = true,
                gradient_accumulation_steps = true, env = true, config = true, even_batches = true,
                step_scheduler_with_optimizer = true, device_placement = true, gradient_accumulation_plugin = true,
                project_config = true, project_dir = true,   -- these two: lua/fp8/checkpointing.lua
                log_with = true,                              -- lua/fp8/trackers.lua
                dataloader_config = true }                    -- lua/fp8/dataloader_config.lua

-- Accelerate's options and methods that fp8lab does not have, refused by name with the reason (an
-- Accelerate script gets why, rather than "unknown option" or "attempt to call a nil value").
local ENGINES = "fp8lab trains with data parallelism only (DDP over MPI: fp8lab launch --num_processes N); "
  .. "it has no DeepSpeed, FSDP, tensor-, pipeline- or Megatron-LM parallelism"
local NOT_HERE = {
  split_batches = "Accelerate 1.x takes it in its DataLoaderConfiguration only (its Accelerator argument is "
    .. "ignored); pass dataloader_config=fp8.DataLoaderConfiguration{split_batches=true}",
  deepspeed_plugin = ENGINES, deepspeed_plugins = ENGINES, fsdp_plugin = ENGINES, torch_tp_plugin = ENGINES,
  megatron_lm_plugin = ENGINES, parallelism_config = ENGINES,
  rng_types = "fp8lab has one generator (fp8.manual_seed, fp8.set_seed), which save_state saves; loaders "
    .. "shuffle by their seed and epoch",
  dynamo_backend = "fp8lab has no torch.compile (dynamo)", dynamo_plugin = "fp8lab has no torch.compile (dynamo)",
}
local NOT_PROVIDED = {
  join_uneven_inputs = "not provided: a prepared loader gives every process the same number of batches "
    .. "(even_batches=true, the default)",
  trigger_sync_in_backward = "acc:no_sync(model, fn) keeps only fn's backwards local, and the next "
    .. "synchronising backward averages everything accumulated, the gradients of fn's backwards included",
  prepare_pippy = ENGINES, deepspeed_autotp_size = ENGINES, lomo_backward = "fp8lab has no LOMO optimizer",
  maybe_context_parallel = ENGINES .. " (no context parallelism: the block is the whole computation)",
  verify_device_map = "a model is on one device (model:to(acc:device())); there are no device maps",
}

local function new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error(("Accelerator: expected an options table, got %s"):format(type(opts)), 3) end
  O.check_plain("Accelerator", opts, 3)   -- (stop 102) before the walk below: a proxy's keys are not read
  for k in next, opts do
    if NOT_HERE[k] then error(("Accelerator: %s is not supported: %s"):format(k, NOT_HERE[k]), 3) end
  end
  O.check("Accelerator", opts, VALID, 3)
  local gas_arg = opts.gradient_accumulation_steps
  if gas_arg ~= nil then   -- checked as the flag, variable and config key are; 2.0 is kept as the integer 2
    local ok, v = pcall(require("fp8.settings").check, "gradient_accumulation_steps", gas_arg,
      "Accelerator: gradient_accumulation_steps")
    if not ok then error(v, 3) end
    gas_arg = v
  end
  local ok, settings = pcall(kwargs.resolve, { mixed_precision = opts.mixed_precision,
    kwargs_handlers = opts.kwargs_handlers, kwarg_handlers = opts.kwarg_handlers, env = opts.env, config = opts.config })
  -- the resolver's errors name the function the user called
  if not ok then error((tostring(settings):gsub("^resolve: ", "Accelerator: ", 1)), 3) end
  -- Accelerate's GradientAccumulationPlugin: instead of gradient_accumulation_steps, never with it; its num_steps
  -- is an argument (it beats the launch flag, the variable and the config file, as in Accelerate)
  local plugin = opts.gradient_accumulation_plugin
  if plugin ~= nil then
    if not Plugin.is_plugin(plugin) then
      error(("Accelerator: gradient_accumulation_plugin must be an fp8.GradientAccumulationPlugin{...}, got %s")
        :format(type(plugin)), 3)
    end
    -- Accelerate refuses both only when the steps are not 1, its default (a script passing its own default along
    -- with a plugin runs there)
    if gas_arg ~= nil and gas_arg ~= 1 then
      error("Accelerator: pass gradient_accumulation_steps or gradient_accumulation_plugin, not both (the plugin's "
        .. "num_steps is the number of steps)", 3)
    end
  end
  -- plugin > launch --gradient_accumulation_steps / FP8LAB_GRADIENT_ACCUMULATION_STEPS > argument > config file > 1:
  -- Accelerate's order (its ACCELERATE_GRADIENT_ACCUMULATION_STEPS beats the argument); every value beaten is named
  local from, given = settings.sources.gradient_accumulation_steps, settings.gradient_accumulation_steps
  local sources = {   -- {value, source, what the notice calls it}, in order of precedence; absent ones are false
    plugin ~= nil and { plugin.num_steps, "argument", "the GradientAccumulationPlugin's num_steps" },
    from == "env" and { given, "env", "launch --gradient_accumulation_steps / FP8LAB_GRADIENT_ACCUMULATION_STEPS" },
    gas_arg ~= nil and { gas_arg, "argument", "the Accelerator's gradient_accumulation_steps" },
    from == "config" and { given, "config", "the config file's gradient_accumulation_steps" },
  }
  local win
  for i = 1, 4 do
    local c = sources[i]
    if c and not win then win = c
    elseif c and c[1] ~= win[1] then
      settings.notices[#settings.notices + 1] = ("%s=%d overridden by %s=%d"):format(c[3], c[1], win[3], win[1])
    end
  end
  local gas, gsrc = 1, "default"
  if win then gas, gsrc = win[1], win[2] end
  settings.sources.gradient_accumulation_steps = gsrc
  settings.gradient_accumulation_steps = gas
  local ac = settings.autocast or {}
  if ac.cache_enabled ~= nil and settings.handlers and settings.handlers.AutocastKwargs
     and settings.handlers.AutocastKwargs:is_set("cache_enabled") and ac.cache_enabled ~= false then
    error("Accelerator: AutocastKwargs{cache_enabled=true} is not supported: autocast keeps no cache of cast "
      .. "weights in this build (every op casts its inputs afresh, which is cache_enabled=false); leave it unset "
      .. "or pass false", 3)
  end
  local self = setmetatable({
    settings = settings,
    mixed_precision = settings.mixed_precision,
    fp8_backend = settings.fp8_backend,
    fp8_recipe = settings.fp8_recipe,
    gradient_accumulation_steps = gas,
    step = 0,
    -- Accelerate's GradientState: true on the micro-step that ends an accumulation window (and always
    -- outside acc:accumulate); prepared optimizers and schedulers step only then, and data-parallel
    -- gradient communication happens only then (docs/lua-api.md, "Gradient accumulation").
    sync_gradients = true,
    optimizer_step_was_skipped = false,   -- fp16: the GradScaler skipped the last step (inf/NaN gradients)
    gradient_state = { step = 0, end_of_dataloader = false,
                       sync_with_dataloader = not plugin or plugin.sync_with_dataloader,
                       sync_each_batch = plugin ~= nil and plugin.sync_each_batch },
    gradient_accumulation_plugin = plugin,
    _opt_map = setmetatable({}, { __mode = "k" }),   -- optimizer given to prepare → its prepared wrapper
    _models = {}, _optimizers = {}, _fp8_layers = {},
    _param_map = {},   -- replaced parameter → its replacement, until an optimizer is prepared (then dropped, freeing the old ones)
    _fp8_weights = setmetatable({}, { __mode = "k" }),   -- O3: fp16 master → its E4M3 weight
    _stats_log = nil,
  }, Accelerator)
  -- GradientState's sync_gradients and num_steps, as Accelerate's: the Accelerator's own, read through
  local acc_self = self
  -- and the active loop's (in_dataloader, active_dataloader, remainder: -1 outside a loop) and the plugin's
  setmetatable(self.gradient_state, { __index = function(gs, k)
    if k == "sync_gradients" then return acc_self.sync_gradients end
    if k == "num_steps" then return acc_self.gradient_accumulation_steps end
    if k == "in_dataloader" then return data._active(gs) ~= nil end
    if k == "active_dataloader" then local st = data._active(gs); return st and st.owner or nil end
    if k == "remainder" then local st = data._active(gs); return st and st.remainder or -1 end
    if k == "adjust_scheduler" then return true end   -- false is refused (fp8.GradientAccumulationPlugin)
    if k == "plugin_kwargs" then
      local p = acc_self.gradient_accumulation_plugin
      return { num_steps = acc_self.gradient_accumulation_steps, sync_with_dataloader = not p or p.sync_with_dataloader,
        sync_each_batch = p ~= nil and p.sync_each_batch, adjust_scheduler = true }
    end
  end })
  -- Accelerate's rule: the GPU when there is one, unless cpu=true or the use_cpu setting (launch --cpu,
  -- FP8LAB_USE_CPU, the config file's use_cpu: true), read and checked by fp8.kwargs.resolve as every setting is.
  -- As in Accelerate, where cpu=False is the default, cpu=false does not override the setting.
  if opts.cpu ~= nil and type(opts.cpu) ~= "boolean" then
    error(("Accelerator: cpu must be a boolean, got %s"):format(type(opts.cpu)), 3)
  end
  if opts.cpu == true then settings.use_cpu, settings.sources.use_cpu = true, "argument" end
  local force_cpu = opts.cpu == true or settings.use_cpu == true
  local okc, cuda = pcall(require, "fp8.cuda")
  self._device = (not force_cpu and okc and cuda.is_available()) and "cuda" or "cpu"
  -- fp8.DataLoaderConfiguration{even_batches=, data_seed=, ...}, or the older even_batches= (one of them)
  self.dataloader_config = dataloader_config.from(opts.dataloader_config, opts.even_batches, 3)
  self.even_batches = self.dataloader_config.even_batches
  -- device_placement=false: prepare leaves models where they are and loaders hand out batches where they were
  if opts.device_placement ~= nil and type(opts.device_placement) ~= "boolean" then
    error(("Accelerator: device_placement must be a boolean, got %s"):format(type(opts.device_placement)), 3)
  end
  self.device_placement = opts.device_placement ~= false
  if opts.step_scheduler_with_optimizer ~= nil and type(opts.step_scheduler_with_optimizer) ~= "boolean" then
    error(("Accelerator: step_scheduler_with_optimizer must be a boolean, got %s")
      :format(type(opts.step_scheduler_with_optimizer)), 3)
  end
  self.step_scheduler_with_optimizer = opts.step_scheduler_with_optimizer ~= false
  dist.setup(self)                        -- process_index, num_processes, local_process_index, sync_gradients
  self._ddp_opts = ddp.options(settings.ddp)
  self.project_configuration = checkpointing.project_config_from(opts.project_config, opts.project_dir, 3,
    opts.log_with ~= nil)
  -- Accelerate's read-only properties, as fields: the loader settings, and what a single-model, data-parallel run
  -- answers. project_dir and logging_dir are not: they read project_configuration when read (PROPERTIES), as
  -- Accelerate's properties do (logging_dir is project_dir's unless given: ProjectConfiguration's)
  -- the experiment trackers (lua/fp8/trackers.lua): log_with checked now, as Accelerate's; init_trackers starts them
  self.log_with = trackers._resolve(opts.log_with, self.logging_dir, 3)
  self.trackers = {}
  for _, k in ipairs { "split_batches", "dispatch_batches", "use_seedable_sampler", "non_blocking",
    "use_stateful_dataloader" } do self[k] = self.dataloader_config[k] end
  self.should_save_model = self.local_process_index == 0
  self.multi_device = self.num_processes > 1 and self._device == "cuda"
  self.is_fsdp2, self.is_composable_parallelism_enabled = false, false
  if self.mixed_precision == "fp16" then
    local gs = settings.grad_scaler or {}
    self.scaler = amp.GradScaler { init_scale = gs.init_scale, growth_factor = gs.growth_factor,
      backoff_factor = gs.backoff_factor, growth_interval = gs.growth_interval, enabled = gs.enabled }
  end
  -- the config file's notices were printed by fp8lab launch when it noted that file in FP8LAB_NOTICED
  local shown = settings.config_path and os.getenv("FP8LAB_NOTICED") == settings.config_path and settings.file_notices or 0
  for i, n in ipairs(settings.notices or {}) do
    if self.process_index == 0 and i > shown then io.stderr:write("fp8lab: notice: ", n, "\n") end
  end
  return self
end

-- not a tail call, so that new's errors (level 3) name the caller's line
setmetatable(Accelerator, { __call = function(_, opts, ...)
    O.no_more("Accelerator", "one options table {mixed_precision=, kwargs_handlers=, ...}", ...)
    local acc = new(opts); return acc
  end,
  __index = function(_, k)
    local why = NOT_PROVIDED[k]
    if why then return function() error(("Accelerator:%s is not supported: %s"):format(k, why), 2) end end
  end })

-- The autocast dtype of the non-FP8 ops for this mixed precision: what the prepared model's forward and
-- acc:autocast() run under (fp32 with AutocastKwargs{enabled=false}).
local AUTOCAST = { no = "fp32", bf16 = "bf16", fp16 = "fp16", fp8 = "bf16" }

function Accelerator:autocast_dtype()
  if (self.settings.autocast or {}).enabled == false then return "fp32" end
  return AUTOCAST[self.mixed_precision]
end

-- ---- model conversion -------------------------------------------------------------------------

-- One notice per layer and reason, per process, for a Linear that stays in high precision.
local keep_hp = convert._keep_hp

-- ao's filter. Accelerate's default (filter_linear_layers) keeps the first and last Linear, and every Linear whose
-- dims are not multiples of 16, in high precision, whatever pad_inner_dim says. A module_filter_func decides
-- alone, except that a layer it takes whose dims are not multiples of 16 runs in FP8 only with pad_inner_dim
-- (convert._ao_takes, which convert_model applies too).
local function ao_filter(self, model)
  local r = self.fp8_recipe
  local lins = convert.linears(model)
  local first, last = lins[1] and lins[1][2], lins[#lins] and lins[#lins][2]
  local user = r.module_filter_func
  if user == nil and r.pad_inner_dim == false then   -- (a notice until 2026-12-06: a setting is honoured or refused)
    error("prepare: AORecipeKwargs pad_inner_dim=false changes nothing without a module_filter_func: the default "
      .. "filter keeps every Linear whose dims are not multiples of 16 in high precision already (leave it at its "
      .. "default, or give a module_filter_func, which it then applies to)", 0)
  end
  return function(m, name)
    if user ~= nil then return convert._ao_takes(r, m, name) end
    if m == first or m == last then
      return keep_hp("ao", name, m, "torchao's default filter keeps the first and last Linear in high precision")
    end
    if not convert.shape_ok(m) then
      return keep_hp("ao", name, m, "Accelerate's default filter keeps Linears whose dims are not multiples of 16 in "
        .. "high precision (a module_filter_func with pad_inner_dim=true runs them in FP8)")
    end
    return true
  end
end

-- (a frozen weight stays frozen: MS-AMP's fresh ScalingParameter took requires_grad=True, and a frozen layer trained)
local function to_fp16_param(t)
  local h = t:detach():to("fp16")
  h:requires_grad(t:requires_grad())
  return h
end

function Accelerator:_prepare_model(model)
  if not Module.is_module(model) then return model end
  self._models[#self._models + 1] = model
  -- on the accelerator's device first, so every copy the conversion makes (fp16 weights, FP8 weights)
  -- is made there
  if self.device_placement and model:device() ~= self._device then model:to(self._device) end
  if self.mixed_precision ~= "fp8" then
    return self:_wrap_autocast(model)
  end
  local r = self.fp8_recipe
  local filter
  if r.backend == "ao" then
    filter = ao_filter(self, model)
  elseif r.backend == "te" then
    filter = convert._te_takes
  end
  -- the model itself may be a Linear (or a LayerNorm): convert_model swaps children, so the root is
  -- converted here, or a notice says why it stays in high precision
  local root_cn = getmetatable(model).__name
  if root_cn == "Linear" then
    local keep = filter ~= nil and not filter(model, "")   -- the root's name: "", as torchao's swap_linear_layers
    if r.backend == "ao" and r.module_filter_func == nil then
      keep = true
      io.stderr:write(("fp8lab: notice: the model [%d -> %d] stays in high precision: torchao's default filter keeps "
        .. "the first and last Linear of a model in high precision (pass AORecipeKwargs{module_filter_func=...} "
        .. "to convert it)\n"):format(model.in_features, model.out_features))
    end
    keep = keep or convert._keeps_what_it_carries(model, "")
    if not keep then
      model = convert._prepared_linear_to_fp8(model, r)
      if self._models[#self._models] then self._models[#self._models] = model end
    end
  elseif root_cn == "LayerNorm" and r.backend == "te" then
    if not convert._keeps_what_it_carries(model, "") then
      model = convert.ln_to_fp8(model)
      self._models[#self._models] = model
    end
  end
  local _, converted = convert.convert_model(model, { recipe = r, filter = filter, convert_ln = r.backend == "te",
    _recipe_filtered = true })
  self.converted = converted
  local tied = {}   -- msamp: a weight several FP8 layers share gets one fp16 copy (one E4M3 copy at O3): still tied
  for _, nm in ipairs(convert.fp8_layers(model)) do
    local layer = nm[2]
    self._fp8_layers[#self._fp8_layers + 1] = nm
    if r.backend == "msamp" then
      -- O1+: fp16 weights (scale 1: weights sit far inside fp16's range), FP8 E4M3 weight gradients.
      local old = layer.weight
      local w16 = tied[old]
      if not w16 then
        w16 = to_fp16_param(old)
        tied[old] = w16
        self._param_map[old] = w16
        fp8_layer.set_grad_dtype(w16, "e4m3")
        if r.opt_level == "O3" then
          local q = w16:detach():to("fp32"):quantize("e4m3",
            { scale = fp8_layer.scale_for(w16:abs():max():item(), "e4m3", 0, true) })
          self._fp8_weights[w16] = q
          FP8Linear._mark_cast(q, w16)
        end
      end
      layer.weight = w16
      local q = self._fp8_weights[w16]
      if r.opt_level == "O3" then
        layer:register_buffer("weight_fp8", q)   -- the same tensor, so state_dict/checkpoints carry it (exactly)
        rawset(layer, "weight_fp8", q)           -- (registered first: register_buffer refuses a plain field's name)
      end
    end
  end
  fp8_autocast.apply_fp8_autowrap(model, r)
  return self:_wrap_autocast(model)
end

-- v with every bf16/fp16 tensor in it made fp32 (differentiably), through plain tables (no metatable) at any
-- depth: Accelerate's convert_outputs_to_fp32. A table is copied only where something in it changed; seen
-- maps a table met before to its result (a cycle, or one table in two places).
local LOW = { bf16 = true, fp16 = true }
local function to_fp32(v, seen)
  if core.is_tensor(v) then return LOW[v:dtype()] and v:to("fp32") or v end
  if type(v) ~= "table" or getmetatable(v) ~= nil then return v end
  if seen[v] then return seen[v] end
  seen[v] = v
  local copy
  for k, x in next, v do
    local y = to_fp32(x, seen)
    if y ~= x then
      if not copy then
        copy = {}
        for k2, x2 in next, v do copy[k2] = x2 end
        seen[v] = copy
      end
      copy[k] = y
    end
  end
  return copy or v
end

local function outputs_to_fp32(...)
  local n = select("#", ...)
  if n == 1 then return (to_fp32(..., {})) end   -- the common case, without a table of results
  local res, seen = table.pack(...), {}
  for i = 1, n do res[i] = to_fp32(res[i], seen) end
  return table.unpack(res, 1, n)
end

-- The model's forward runs under this accelerator's autocast (bf16 for the non-FP8 ops under fp8),
-- restored afterwards: autocast is a property of the prepared model, not of the whole program. Its bf16/fp16
-- outputs come back as fp32, as Accelerate's prepared forward converts them (convert_outputs_to_fp32), with
-- AutocastKwargs{enabled=false} too; under "no" the forward is left as it is, as Accelerate leaves it.
function Accelerator:_wrap_autocast(model)
  local mode = ({ no = "no", bf16 = "bf16", fp16 = "fp16", fp8 = "bf16" })[self.mixed_precision]
  if mode == "no" or rawget(model, "_acc_unwrapped_forward") then return model end
  -- AutocastKwargs{enabled=false}: the non-FP8 ops stay in fp32 (FP8 layers follow the FP8 recipe,
  -- as in Accelerate, where the FP8 autocast is separate from torch.autocast), inside an enclosing
  -- autocast too: Accelerate wraps the forward in torch.autocast(enabled=False), which turns one off
  if (self.settings.autocast or {}).enabled == false then mode = "no" end
  local fwd = model.forward
  rawset(model, "_acc_unwrapped_forward", fwd)
  rawset(model, "forward", function(m, ...) return outputs_to_fp32(amp.autocast(mode, fwd, m, ...)) end)
  return model
end

-- ---- optimizer wrapping -----------------------------------------------------------------------

-- A wrapper class whose instances keep the wrapped object in field `field`: its own methods first,
-- then the wrapped object's fields, with methods bound to the wrapped object; writes go through.
local function delegating_class(field)
  local cls = {}
  cls.__index = function(t, k)
    local v = cls[k]
    if v ~= nil then return v end
    local inner = rawget(t, field)
    local iv = inner[k]
    if type(iv) == "function" then return function(_, ...) return iv(inner, ...) end end
    return iv
  end
  -- a write goes to the object; one it refuses (a scheduler's sched.gamma = 0.5) is raised at the writer's line, as
  -- the same write to the object itself (it named this line of accelerator.lua before review 10b)
  cls.__newindex = function(t, k, v)
    local inner = rawget(t, field)
    local mt = getmetatable(inner)
    local set = type(mt) == "table" and rawget(mt, "__newindex")
    if type(set) ~= "function" then inner[k] = v; return end
    local ok, err = pcall(set, inner, k, v)   -- (its error at level 2 is pcall's: no location)
    if not ok then error(err, 2) end
  end
  return cls
end

local AccOptimizer = delegating_class("optimizer")
AccOptimizer.__tostring = function(t) return "AcceleratedOptimizer(" .. tostring(rawget(t, "optimizer")) .. ")" end

-- opt:train() / opt:eval(): Accelerate's AcceleratedOptimizer passes them to an optimizer that has them (a
-- schedule-free one swaps its weights) and does nothing for one that has not, so a loop written for either runs
for _, mode in ipairs { "train", "eval" } do
  AccOptimizer[mode] = function(self, ...)
    if select("#", ...) > 0 then
      error(("%s: takes no arguments (opt:%s())"):format(mode, mode), 2)
    end
    local inner = rawget(self, "optimizer")
    local f = type(inner) == "table" and inner[mode]
    if type(f) == "function" then return f(inner) end
  end
end

-- After acc:free_memory() the accelerator no longer tracks what it prepared before: stepping such an
-- optimizer would skip the FP8 scale updates and (several processes) the gradient averaging, so it is refused.
local function check_live(w, fname, noun)
  if rawget(w, "_freed") then
    error(("%s: this %s was prepared before acc:free_memory(), which let it go; prepare it again"):format(fname, noun), 3)
  end
end

-- relay(ok, ...): pcall's results through. An error raised at its caller (level 2) by the wrapped call has no
-- location (its caller was pcall) or a wrapper's line in ddp.lua; it is raised again at the wrapper's caller, so that a
-- bad argument to a prepared optimizer, scheduler or backward names the user's line, as the same call unprepared does.
local function relay(ok, ...)
  if ok then return ... end
  local msg = ...
  if type(msg) == "string" then
    local rest = msg:match("^lua/fp8/ddp%.lua:%d+: (.*)$")
    if not rest and not msg:match("^[^\n]-:%d+: ") then rest = msg end
    if rest then error(rest, 3) end
  end
  error(msg, 0)
end

function AccOptimizer:step(...)
  check_live(self, "optimizer:step", "optimizer")
  local acc, inner = rawget(self, "accelerator"), rawget(self, "optimizer")
  -- inside an accumulation window (acc:accumulate, not a sync step) the step is skipped: the
  -- gradients keep accumulating, and the FP8 scales are not updated (Accelerate's AcceleratedOptimizer); its
  -- arguments are checked as the optimizer checks them, so a bad call does not wait for the window's end
  if not acc.sync_gradients then
    O.no_more("optimizer:step", "([closure])", select(2, ...))
    local closure = ...
    if closure ~= nil and type(closure) ~= "function" then
      error(("optimizer:step: closure must be a function, got %s"):format(O.got(closure)), 2)
    end
    return nil
  end
  -- MS-AMP's layers converted back after prepare: this optimizer holds their fp16 weights, the model new fp32 ones,
  -- so the step would train nothing the model uses
  if acc.fp8_backend == "msamp" then
    for _, nm in ipairs(acc._fp8_layers) do
      if rawget(nm[2], "_converted_back") then
        error(("optimizer:step: the FP8 layer '%s' was converted back (fp8.convert_model{to_fp8=false}) after "
          .. "prepare under MS-AMP: this optimizer holds its fp16 weight, not the model's new fp32 one, so the step "
          .. "would not train the model; prepare a fresh model and optimizer (acc:save_model writes the weights)")
          :format(nm[1]), 2)
      end
    end
  end
  acc:_find_fp8_layers(2)
  local res
  local prof = acc._profiler   -- acc:profile(fn) is running: the step is a range, and ends a profiler step
  local ptok = prof and prof.push("Optimizer.step#" .. tostring(inner.name) .. ".step")
  local ok
  if acc.scaler then ok, res = pcall(acc.scaler.step, acc.scaler, inner, ...)
  else ok, res = pcall(inner.step, inner, ...) end
  if not ok then
    if prof then prof.pop(ptok) end
    relay(false, res)
  end
  if acc.scaler then
    local skipped = res == false   -- GradScaler:step returns false when it skipped this optimizer (inf/NaN)
    -- Accelerate updates the scaler after every optimizer's step; here the update waits until the scale is
    -- next read, so a second optimizer of the same iteration is unscaled with its gradients' scale (lua/fp8/amp.lua)
    acc.scaler:_update_later()
    rawset(self, "step_was_skipped", skipped)
    -- Accelerate's optimizer_step_was_skipped: whether any prepared optimizer's last step was skipped
    local any = false
    for _, o in ipairs(acc._optimizers) do any = any or rawget(o, "step_was_skipped") == true end
    acc.optimizer_step_was_skipped = any
  end
  local counted = acc:_after_step()
  if prof then
    prof.pop(ptok)
    -- one profiler step per training step (a second optimizer of the same step adds none); not after
    -- on_trace_ready called stop(); not once the user's prof:step() calls took over the stepping
    if counted and prof.profiler._state == "running" and prof.mode ~= "manual" then
      prof.mode = "optimizer"
      prof.profiler:_step_now()
    end
  end
  return res
end

-- zero_grad only on sync steps: between them the gradients are being accumulated.
function AccOptimizer:zero_grad(...)
  if not rawget(self, "accelerator").sync_gradients then   -- checked as the optimizer checks them
    O.no_more("optimizer:zero_grad", "([set_to_none])", select(2, ...))
    local set_to_none = ...
    if set_to_none ~= nil and type(set_to_none) ~= "boolean" then
      error(("optimizer:zero_grad: set_to_none must be a boolean, got %s"):format(O.got(set_to_none)), 2)
    end
    return
  end
  return rawget(self, "optimizer"):zero_grad(...)
end

-- A prepared scheduler steps only on sync steps, and not when the optimizer step was skipped
-- (fp16 overflow), as Accelerate's AcceleratedScheduler; everything else goes to the scheduler. Under
-- several processes it takes num_processes steps per optimizer step, as Accelerate's does without
-- split_batches: each process's loader holds 1/N of the batches, so a schedule written in one process's
-- steps keeps its length in samples. With split_batches=true every process walks every batch (a slice of
-- it), so it takes one. step_scheduler_with_optimizer=false: every call is one step of the scheduler,
-- whatever the optimizer did.
local AccScheduler = delegating_class("scheduler")
AccScheduler.__tostring = function(t) return "AcceleratedScheduler(" .. tostring(rawget(t, "scheduler").name) .. ")" end

function AccScheduler:step(...)
  check_live(self, "scheduler:step", "scheduler")
  local acc, inner = rawget(self, "accelerator"), rawget(self, "scheduler")
  if not acc.step_scheduler_with_optimizer then relay(pcall(inner.step, inner, ...)); return self end
  if not acc.sync_gradients then return self end
  local own = rawget(self, "acc_optimizer")
  for _, o in ipairs(own and { own } or acc._optimizers) do   -- its own optimizer; all when it has none prepared
    if rawget(o, "step_was_skipped") then return self end
  end
  -- a schedule with a fixed number of steps (OneCycleLR's total_steps, an error past it) is not stepped past its
  -- end, as Accelerate's: the last optimizer step's N steps may overrun it when the batches do not divide evenly
  for _ = 1, acc.split_batches and 1 or acc.num_processes do
    local st = rawget(inner, "_settings")   -- (a scheduler of fp8.optim shows its settings from there)
    local total = rawget(inner, "total_steps") or type(st) == "table" and st.total_steps or nil
    if total == nil or inner.last_epoch < total then relay(pcall(inner.step, inner, ...)) end
  end
  return self
end

local ADAM_NAMES = { AdamW = true, Adam = true, MSAMPAdamW = true }

function Accelerator:_prepare_optimizer(opt)
  local orig = opt
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
      local default = (self.settings.sources or {}).fp8_backend == "default"
      error(("Accelerator: MS-AMP %s needs an Adam or AdamW optimizer (allowed: Adam, AdamW), got %s; use "
        .. "fp8.optim.AdamW%s"):format(level, tostring(opt.name), default and (" (msamp is the FP8 backend by "
          .. "default: te or ao take any optimizer, e.g. kwargs_handlers={fp8.TERecipeKwargs{}})") or ""), 4)
    end
    if opt.name ~= "MSAMPAdamW" then
      opt = require("fp8.optim.msamp_adamw").from_adamw(opt, { fp8_weights = self._fp8_weights,
        moments = level == "O1" and "fp32" or "fp8", level = level })
    end
  end
  local w = setmetatable({ optimizer = opt, accelerator = self, step_was_skipped = false }, AccOptimizer)
  self._opt_map[orig] = w
  self._pending_map_clear = true
  self._optimizers[#self._optimizers + 1] = w
  return w
end

local function is_loader(v)
  return type(v) == "table" and getmetatable(v) == data.DataLoader
end

local function is_scheduler(v)
  return getmetatable(v) ~= AccScheduler and require("fp8.optim.lr_scheduler")._is_scheduler(v)
end

local function is_optimizer(v)
  return type(v) == "table" and getmetatable(v) ~= AccOptimizer and type(v.param_groups) == "table"
    and type(v.step) == "function" and not is_scheduler(v)
end

-- A scheduler made before prepare points at the optimizer as it was given; after prepare it drives
-- the prepared one (MS-AMP replaces AdamW by MSAMPAdamW, which shares its parameter groups).
function Accelerator:_prepare_scheduler(sched)
  local w = self._opt_map[sched.optimizer]
  if w then sched.optimizer = rawget(w, "optimizer") end
  -- its own prepared optimizer (Accelerate ties them), whose skipped step alone skips the scheduler's
  if not w then
    for _, o in ipairs(self._optimizers) do if rawget(o, "optimizer") == sched.optimizer then w = o end end
  end
  return setmetatable({ scheduler = sched, accelerator = self, acc_optimizer = w }, AccScheduler)
end

-- Under msamp: nil, or a phrase naming both places when a Linear's weight is also a parameter of a module that is not
-- a Linear, or not as its weight (an embedding tied to the output layer). Linears that share a weight stay tied.
local function msamp_tie(model)
  local function is_lin(m) local cn = getmetatable(m).__name; return cn == "Linear" or cn == "FP8Linear" end
  local lin_w = {}   -- weight → the Linear's name
  for _, nm in ipairs(model:named_modules()) do
    local w = is_lin(nm[2]) and nm[2].weight
    if w then lin_w[w] = lin_w[w] or (nm[1] == "" and "weight" or nm[1] .. ".weight") end
  end
  for _, nm in ipairs(model:named_modules()) do
    for _, np in ipairs(nm[2]:named_parameters()) do
      local own = not np[1]:find(".", 1, true)   -- this module's own parameter (its children's have a dot)
      if own and lin_w[np[2]] and not (is_lin(nm[2]) and np[1] == "weight") then
        local name = nm[1] == "" and np[1] or nm[1] .. "." .. np[1]
        return ("%s is the same tensor as %s (the weight of a Linear)"):format(name, lin_w[np[2]])
      end
    end
  end
end

-- a pcall's result, or its error raised at prepare's caller (a message that already names the caller's line keeps it,
-- once)
local function at_caller(ok, res)
  if not ok then error(res, (type(res) == "string" and res:match("^[^\n:]+:%d+: ")) and 0 or 3) end
  return res
end

-- prepare(...) → its arguments in order: models converted and wrapped, optimizers wrapped, data
-- loaders and anything else passed through. Models are handled before optimizers whatever the order.
function Accelerator:prepare(...)
  local args = table.pack(...)
  if args.n == 0 then error("prepare: expected models, optimizers or data loaders", 2) end
  -- Accelerate's prepare(*args, device_placement=[...]) as a trailing options table: other objects pass through
  -- prepare as they are, so this one would come back unread
  local last = args[args.n]
  if type(last) == "table" and getmetatable(last) == nil and rawget(last, "device_placement") ~= nil then
    error("prepare: device_placement= per object is not supported: the accelerator's device_placement places every "
      .. "object alike (fp8.Accelerator{device_placement=false} leaves them all where they are)", 2)
  end
  if self.mixed_precision == "fp8" and self.fp8_backend == "msamp" then
    -- MS-AMP swaps each FP8 layer's weight for an fp16 one and its optimizer's moments for FP8 ones: the two are
    -- converted together, once (an optimizer prepared apart, or a model prepared again, would update tensors the
    -- model no longer uses). Accelerate's _prepare_msamp refuses the same.
    local models, opts = 0, 0
    for i = 1, args.n do
      if Module.is_module(args[i]) then
        models = models + 1
        for _, m in ipairs(self._models) do
          if m == args[i] then error("prepare: this model is already prepared; under MS-AMP a model is prepared once, with its optimizer", 2) end
        end
      elseif is_optimizer(args[i]) then
        opts = opts + 1
      end
    end
    -- a Linear's weight also held elsewhere (an embedding tied to the output layer) would be untied by the fp16
    -- copy (MS-AMP's LinearReplacer copies it and leaves the other holder on the fp32 tensor): refused, before any
    -- conversion
    for i = 1, args.n do
      local why = Module.is_module(args[i]) and msamp_tie(args[i])
      if why then error(("prepare: under MS-AMP, %s; MS-AMP converts the weights of Linear layers to fp16 copies, so "
        .. "the two would no longer be tied: untie them, or use the te or ao recipe"):format(why), 2) end
    end
    if (models > 0) ~= (opts > 0) then
      error("prepare: pass a model and its optimizer together to acc:prepare() when using MS-AMP (Accelerate's rule: "
        .. "the weights and the optimizer state are converted together)", 2)
    elseif models > 1 or opts > 1 then
      error(("prepare: MS-AMP takes one model and one optimizer per prepare call, got %d models and %d optimizers"):format(models, opts), 2)
    end
  end
  local prepared = {}
  for _, m in ipairs(self._models) do prepared[m] = true end
  -- FP8 layers made for another recipe (fp8.convert_model's, another Accelerator's) would keep their own scaling
  -- (a layer's recipe is fixed when it is made) and ignore this accelerator's: refused, before anything is converted
  if self.mixed_precision == "fp8" then
    local mine = kwargs.repr(fp8_layer.layer_config(self.fp8_recipe))
    for i = 1, args.n do
      for _, nm in ipairs(Module.is_module(args[i]) and not prepared[args[i]] and convert.fp8_layers(args[i]) or {}) do
        if kwargs.repr(fp8_layer.layer_config(nm[2].recipe)) ~= mine then
          error(("prepare: %s is an FP8Linear of the recipe %s, which scales differently from this accelerator's %s; "
            .. "convert the model back first (fp8.convert_model(model, {to_fp8=false})) or prepare it with that recipe")
            :format(nm[1] == "" and "the model" or ("'%s'"):format(nm[1]), kwargs.repr(nm[2].recipe),
              kwargs.repr(self.fp8_recipe)), 2)
        end
      end
    end
  end
  for i = 1, args.n do
    if Module.is_module(args[i]) and prepared[args[i]] then
      -- a model this accelerator prepared comes back as it is, as Accelerate's (_is_accelerate_prepared): preparing
      -- it again listed it twice (save_state wrote it twice, log_fp8_stats its rows twice) and its FP8 layers too
    elseif Module.is_module(args[i]) then
      if self.num_processes > 1 then ddp.agree(self, args[i]) end
      args[i] = self:_prepare_model(args[i])
      if self.num_processes > 1 then ddp.attach(self, args[i]) end
    elseif is_loader(args[i]) or getmetatable(args[i]) == data.SkipDataLoader then
      args[i] = at_caller(pcall(self.prepare_data_loader, self, args[i]))
    end
  end
  for i = 1, args.n do
    if is_optimizer(args[i]) then
      args[i] = at_caller(pcall(self._prepare_optimizer, self, args[i]))
    end
  end
  for i = 1, args.n do
    if is_scheduler(args[i]) then args[i] = self:_prepare_scheduler(args[i]) end
  end
  if self._pending_map_clear then self._param_map, self._pending_map_clear = {}, nil end
  for i = 1, args.n do self:_remember(args[i]) end   -- loaders and schedulers, for save_state
  return table.unpack(args, 1, args.n)
end

-- prepare_model(model) etc.: Accelerate's device_placement= / evaluation_mode= arguments are not offered here (the
-- accelerator's device_placement decides); given, they are refused rather than dropped.
local function prepare_one(self, fname, want, x, n)
  if n > 1 then error(("%s: takes one argument (Accelerate's device_placement and evaluation_mode are not supported)"):format(fname), 3) end
  if not want(x) then error(("%s: expected %s, got %s"):format(fname, fname:match("prepare_(.*)"):gsub("_", " "), type(x)), 3) end
  return (self:prepare(x))
end
function Accelerator:prepare_model(m, ...) return prepare_one(self, "prepare_model", Module.is_module, m, select("#", ...) + 1) end
function Accelerator:prepare_optimizer(o, ...)
  return prepare_one(self, "prepare_optimizer", function(v) return is_optimizer(v) or getmetatable(v) == AccOptimizer end, o,
    select("#", ...) + 1)
end
-- A DataLoader hands out its batches on the accelerator's device from now on.
-- It also reports its last batch to the gradient state, so an accumulation window ends with the epoch.
function Accelerator:prepare_data_loader(d, ...)
  if select("#", ...) > 0 then
    error("prepare_data_loader: takes one argument (Accelerate's device_placement and slice_fn_for_dispatch are not supported)", 2)
  end
  if getmetatable(d) == data.SkipDataLoader then   -- the loader it wraps is prepared, and skipped as before
    return data._skip("prepare", self:prepare_data_loader(rawget(d, "loader")), rawget(d, "skip_batches"), 2)
  end
  if is_loader(d) then
    if self.device_placement then d:to(self._device) end
    -- DataLoaderConfiguration{use_seedable_sampler=true, data_seed=N}: a shuffling loader's order comes from N and
    -- the epoch (Accelerate's SeedableRandomSampler: data_seed + epoch), whatever seed it was made with
    local data_seed = self.dataloader_config.data_seed
    if data_seed ~= nil and d.shuffle then d:_set_seed(data_seed) end
    rawset(d, "_gradient_state", self.gradient_state)
    if self.num_processes > 1 then
      -- every process shards the same order: a seed (or length, batch size) that differs per process would repeat
      -- some samples and drop others (Accelerate synchronises its samplers' RNG; here the loaders must agree)
      dist._require_same(self, { ("items=%d batch_size=%d shuffle=%s seed=%d drop_last=%s"):format(d.n, d.batch_size,
        tostring(d.shuffle), d.seed, tostring(d.drop_last)) },
        "prepare: the data loader differs across processes (each shards the same order)")
      if self.split_batches and d.batch_size % self.num_processes ~= 0 then
        error(("prepare: with split_batches=true the batch size (%d) must be a round multiple of the number of "
          .. "processes (%d): each process takes batch_size / %d samples of every batch"):format(d.batch_size,
          self.num_processes, self.num_processes), 2)
      end
      d = dist.shard(self, d, self.even_batches, self.split_batches)
    elseif self.split_batches then
      -- one process splits each batch into one slice: the loader as it is, marked so that a checkpoint records
      -- split_batches and its position resumes in place under another process count (dist.is_split)
      rawset(d, "_split_batches", true)
    end
    self:_remember(d)   -- its position goes into save_state
  end
  return d
end
function Accelerator:prepare_scheduler(s, ...)
  return prepare_one(self, "prepare_scheduler", function(v) return is_scheduler(v) or getmetatable(v) == AccScheduler end, s,
    select("#", ...) + 1)
end

-- skip_first_batches(loader, num_batches): Accelerate's method, fp8.skip_first_batches (lua/fp8/data.lua).
function Accelerator:skip_first_batches(loader, num_batches)
  local s = data._skip("skip_first_batches", loader, num_batches, 2)   -- not a tail call: level 2 is the caller
  return s
end

-- free_memory(...) (alias clear): Accelerate's. The accelerator lets go of every model, optimizer, scheduler
-- and data loader it prepared (and of the FP8 layers whose scales it updates, the data-parallel reducer),
-- step and gradient_state.step go back to 0, and fp8.release_memory(...) hands the arguments back as nils after a
-- full collection.
-- What was prepared before refuses to step afterwards (check_live); objects registered for checkpointing stay.
function Accelerator:free_memory(...)
  for _, w in ipairs(self._optimizers) do rawset(w, "_freed", true) end
  for _, w in ipairs(self._schedulers or {}) do rawset(w, "_freed", true) end
  self._models, self._optimizers, self._fp8_layers = {}, {}, {}
  self._schedulers, self._dataloaders = {}, {}
  self._opt_map = setmetatable({}, { __mode = "k" })
  self._param_map, self._pending_map_clear = {}, nil
  self._fp8_weights = setmetatable({}, { __mode = "k" })
  self._ddp_models, self._ddp_params, self._ddp_names, self._ddp_reducer = nil, nil, nil, nil
  self._ddp_param_set = nil
  self.gradient_state._active, self.gradient_state.end_of_dataloader = {}, false
  -- Accelerate's free_memory sets its step (the micro-step count that ends accumulation windows) to 0: the next
  -- trial's windows start afresh, whatever micro-step the last one stopped at
  self.gradient_state.step = 0
  self.step, self._step_backward = 0, nil
  return require("fp8").release_memory(...)
end
Accelerator.clear = Accelerator.free_memory

-- accumulate([model, model2, ...] [, fn, ...]): Accelerate's `with accelerator.accumulate(model):`. Each call is one
-- micro-step: sync_gradients becomes true on every gradient_accumulation_steps-th call and on the last
-- batch of a prepared DataLoader, false otherwise. With fn: runs fn(...) and returns its results.
-- Without: returns a handle to close (`local _ <close> = acc:accumulate(model)`); the state is set
-- already, closing it only ends the block.
-- Several models, as Accelerate's accumulate(*models): acc:accumulate(gen, disc, function() ... end); or none, as
-- Accelerate's accumulate() (the models only choose what no_sync covers there; here gradient communication reads
-- sync_gradients): acc:accumulate(function() ... end).
function Accelerator:accumulate(...)
  local args = table.pack(...)
  local k = 1
  while k <= args.n and Module.is_module(args[k]) do k = k + 1 end   -- the models
  local fn = args[k]
  if fn ~= nil and type(fn) ~= "function" then
    error(("accumulate: argument #%d must be a model or a function (or nothing), got %s"):format(k, type(fn)), 2)
  end
  -- a field a script may assign (automatic_gradient_accumulation.py sets it per trial, as Accelerate's setter)
  local n = self.gradient_accumulation_steps
  if math.type(n) ~= "integer" or n < 1 then
    error(("accumulate: acc.gradient_accumulation_steps must be an integer >= 1, got %s"):format(O.got(n)), 2)
  end
  local gs = self.gradient_state
  if gs.sync_with_dataloader and gs.end_of_dataloader then
    gs.step = 0
    self.sync_gradients = true
  else
    gs.step = gs.step + 1
    self.sync_gradients = gs.step % self.gradient_accumulation_steps == 0
  end
  if fn then return fn(table.unpack(args, k + 1, args.n)) end
  -- the state is set already: closing (`<close>` or `:close()`, as autocast's handle) only ends the block
  local function close() end
  return setmetatable({ close = close }, { __close = close, __name = "accumulate" })
end

-- A collective that did not pair (core/dist.c says so) under te or msamp: say which step holds a collective. Their
-- opt:step() all-reduces the amaxes, so a process that skips a step the others take (on its own loss, say) meets
-- them in another collective.
function Accelerator:_collective_hint(msg)
  if type(msg) ~= "string" or not msg:find("collectives did not pair", 1, true) or #self._fp8_layers == 0 then
    return msg
  end
  local backend = self.fp8_backend
  if backend ~= "te" and backend ~= "msamp" then return msg end
  return msg .. ". Under " .. backend .. " every opt:step() all-reduces the FP8 amaxes, so every process must call "
    .. "it for every step: skip a step on all processes alike (on the norm acc:clip_grad_norm_ returns, which they "
    .. "share), not on one process's own loss"
end

-- backward(loss): loss scaling under fp16; gradient accumulation divides by the step count.
function Accelerator:backward(loss, opts)
  if not core.is_tensor(loss) then error(("backward: expected the loss tensor, got %s"):format(type(loss)), 2) end
  local n = self.gradient_accumulation_steps
  if math.type(n) ~= "integer" or n < 1 then
    error(("backward: acc.gradient_accumulation_steps must be an integer >= 1, got %s"):format(O.got(n)), 2)
  end
  if n > 1 then loss = loss / n end
  if self.scaler then
    loss = self.scaler:scale(loss)   -- settles a pending update first, which forgets what was unscaled
    if next(self.scaler._unscaled) ~= nil then
      error("backward: gradients were unscaled (clip_grad_norm_, clip_grad_value_ or unscale_gradients) and no optimizer "
        .. "step followed: this backward would add loss-scaled gradients to unscaled ones. Under gradient accumulation, "
        .. "clip only when acc.sync_gradients is true; to skip a step by hand, call opt:zero_grad() and then "
        .. "acc.scaler:update(), as torch's scaler.update() (or call opt:step() anyway: the GradScaler skips it "
        .. "where a gradient is inf or NaN). torch raises at the second unscale_ too", 2)
    end
  end
  -- plain loss:backward(opts) unless gradients are averaged across processes
  local ok, err = pcall(ddp.backward, self, loss, opts)
  if not ok then relay(false, self:_collective_hint(err)) end
end

-- The FP8 layers the prepared models hold now, which each step updates: a layer fp8.convert_model made after prepare
-- (the model converted back and again, or a Linear the filter had kept) updates too, as TE updates every module that
-- ran under its autocast (before, its scale stayed 1 and its history never rolled); one converted back is let go. A
-- layer of another recipe is refused, as prepare refuses it (it would scale by its own recipe, not this one's).
function Accelerator:_find_fp8_layers(level)
  if self.mixed_precision ~= "fp8" then return end
  -- the walk is kept until a module changes (Module.generation) or the prepared models do
  local key, models = Module.generation(), self._models
  local last = self._fp8_scan
  if last and last.gen == key and last.models == models and last.n == #models and last.top == models[#models] then
    return
  end
  local known, list, seen, mine = {}, {}, {}, nil
  for _, nm in ipairs(self._fp8_layers) do known[nm[2]] = true end
  for _, m in ipairs(self._models) do
    for _, nm in ipairs(convert.fp8_layers(m)) do
      local layer = nm[2]
      if not seen[layer] then
        seen[layer] = true
        list[#list + 1] = nm
        mine = not known[layer] and (mine or kwargs.repr(fp8_layer.layer_config(self.fp8_recipe))) or mine
        if not known[layer] and kwargs.repr(fp8_layer.layer_config(layer.recipe)) ~= mine then
          error(("optimizer:step: %s is an FP8Linear of the recipe %s, made after prepare, which scales differently "
            .. "from this accelerator's %s; convert it with recipe=acc.fp8_recipe"):format(nm[1] == "" and "the model"
            or ("'%s'"):format(nm[1]), kwargs.repr(layer.recipe), kwargs.repr(self.fp8_recipe)), level + 1)
        end
      end
    end
  end
  self._fp8_layers = list
  self._fp8_scan = { gen = key, models = models, n = #models, top = models[#models] }
end

function Accelerator:_after_step()
  -- one training step however many prepared optimizers step after a backward (one per parameter group, say): the
  -- count, the amax all-reduce and the recipes' updates once; the others only free the cached FP8 weights
  local bw = core._backwards_started()
  if self._step_backward == bw and bw > 0 then
    for _, nm in ipairs(self._fp8_layers) do nm[2].fp8_meta:drop_cache() end
    return false
  end
  self._step_backward = bw
  self.step = self.step + 1
  if self.num_processes > 1 and #self._fp8_layers > 0 then   -- TE's reduce_amax: one MAX all-reduce for all layers
    local metas = {}
    for i, nm in ipairs(self._fp8_layers) do metas[i] = nm[2].fp8_meta end
    local ok, err = pcall(fp8_layer.reduce_amax, metas)
    if not ok then error(self:_collective_hint(err), 0) end
  end
  for _, nm in ipairs(self._fp8_layers) do
    local meta = nm[2].fp8_meta
    meta:update()
    meta:drop_cache()     -- the step changed the weights: the cached FP8 weight is stale, free it now
  end
  local log = self._stats_log
  if log and self.step % log.every == 0 then self:_write_stats(log) end
  return true
end

-- autocast(fn, ...) runs fn with this accelerator's autocast: bf16 under fp8 and bf16, fp16 under fp16, as
-- Accelerate's (FP8 itself is the prepared model's to turn on: its forward runs in FP8 in training, and in eval
-- only with use_autocast_during_eval, inside this autocast or not).
-- autocast() without a function: Accelerate's `with accelerator.autocast():` as a handle to close,
--   do local _ <close> = acc:autocast(); ... end   (the previous autocast returns at the block's end)
-- autocast(fp8.AutocastKwargs{enabled=false} [, fn, ...]): Accelerate's autocast(autocast_handler): that handler
-- for this block instead of the one the Accelerator was built with.
function Accelerator:autocast(fn, ...)
  local enabled = (self.settings.autocast or {}).enabled
  local args = table.pack(...)
  if type(fn) == "table" and fn.handler_type ~= nil then
    if fn.handler_type ~= "AutocastKwargs" then
      error(("autocast: expected an AutocastKwargs handler, a function or nothing, got a %s"):format(fn.handler_type), 2)
    end
    if fn:is_set("cache_enabled") and fn.cache_enabled ~= false then
      error("autocast: AutocastKwargs{cache_enabled=true} is not supported: autocast keeps no cache of cast weights", 2)
    end
    enabled = fn.enabled
    fn = args[1]
    args = table.pack(table.unpack(args, 2, args.n))
  end
  local mode = self.mixed_precision == "fp8" and "bf16" or self.mixed_precision
  if enabled == false then mode = "no" end
  if fn == nil then
    if args.n > 0 then
      error(("autocast: arguments after a missing function (%d given); pass the function first"):format(args.n), 2)
    end
    local fp8 = require "fp8"
    local prev = fp8.autocast_dtype()
    fp8.set_autocast_dtype(amp.dtype_for(mode))
    -- a handle to close: `local _ <close> = acc:autocast()`, or `h:close()` where the block is not one Lua scope
    -- (opened in one function, closed in another); a second close does nothing
    local closed = false
    local function close()
      if closed then return end
      closed = true
      fp8.set_autocast_dtype(prev)
    end
    return setmetatable({ close = close }, { __name = "autocast", __close = close })
  end
  if type(fn) ~= "function" then error(("autocast: expected a function or nothing, got %s"):format(type(fn)), 2) end
  return amp.autocast(mode, fn, table.unpack(args, 1, args.n))
end

-- unscale_gradients([optimizer or list]): Accelerate's. Under fp16, the gradients of every prepared optimizer
-- (or of those given) are divided by the loss scale now, once per step (the optimizer's step does not unscale
-- them again; a second call before the next backward leaves them as they are, and a backward before the step
-- is refused: it would mix scaled and unscaled gradients); without a loss scaler it does nothing.
function Accelerator:unscale_gradients(optimizer)
  local list = self._optimizers
  if optimizer ~= nil then
    list = (type(optimizer) == "table" and getmetatable(optimizer) == nil and optimizer.param_groups == nil)
      and optimizer or { optimizer }
    for i, o in ipairs(list) do
      if getmetatable(o) ~= AccOptimizer and not is_optimizer(o) then
        error(("unscale_gradients: expected an optimizer (or a list of them), got %s%s"):format(type(o),
          #list > 1 and (" at position %d"):format(i) or ""), 2)
      end
    end
  end
  if not self.scaler then return end
  for _, o in ipairs(list) do
    local inner = getmetatable(o) == AccOptimizer and rawget(o, "optimizer") or o
    if not self.scaler:is_unscaled(inner) then self.scaler:unscale_(inner) end
  end
end

function Accelerator:clip_grad_norm_(params, max_norm, norm_type, ...)
  if select("#", ...) > 0 then
    error("clip_grad_norm_: takes (parameters, max_norm [, norm_type]) as Accelerate's does", 2)
  end
  self:unscale_gradients()
  if Module.is_module(params) then params = params:parameters() end
  local ok, total = pcall(require("fp8.nn.utils").clip_grad_norm_, params, max_norm, norm_type)
  if not ok then error(total, 2) end
  return total
end

-- clip_grad_value_(params, clip_value): every gradient element clamped to [-clip_value, clip_value]
-- (after unscaling under fp16), as torch.nn.utils.clip_grad_value_.
function Accelerator:clip_grad_value_(params, clip_value, ...)
  if select("#", ...) > 0 then
    error("clip_grad_value_: takes (parameters, clip_value) as Accelerate's does", 2)
  end
  if type(clip_value) ~= "number" or clip_value < 0 or clip_value ~= clip_value then
    error(("clip_grad_value_: clip_value must be a number >= 0, got %s"):format(O.got(clip_value)), 2)
  end
  self:unscale_gradients()
  if Module.is_module(params) then params = params:parameters() end
  local ok, err = pcall(require("fp8.nn.utils").clip_grad_value_, params, clip_value)
  if not ok then error(err, 2) end
end

-- unwrap_model(model [, keep_fp32_wrapper=true | {keep_fp32_wrapper=}]): Accelerate's. There is no DDP
-- wrapper object here (prepare hooks the model itself), so by default it is the model as it is, autocast
-- included, and training goes on as before. keep_fp32_wrapper=false takes off, in place as Accelerate
-- does, the mixed-precision forward (autocast and FP8 autocast: FP8 layers then run their high-precision
-- forward) and, for TransformerEngine's recipe, converts the FP8 layers back to plain ones (Accelerate's
-- convert_model(model, to_transformer_engine=False), behind a flag 1.15 never sets); the model then no longer
-- trains in mixed precision.
function Accelerator:unwrap_model(model, keep)
  if not Module.is_module(model) then
    error(("unwrap_model: expected a model (an fp8.nn Module), got %s"):format(type(model)), 2)
  end
  if type(keep) == "table" then
    O.check("unwrap_model", keep, { "keep_fp32_wrapper" }, 2)
    keep = keep.keep_fp32_wrapper
  end
  if keep ~= nil and type(keep) ~= "boolean" then
    error(("unwrap_model: keep_fp32_wrapper must be a boolean, got %s"):format(type(keep)), 2)
  end
  if keep ~= false then return model end
  if rawget(model, "_acc_unwrapped_forward") then
    rawset(model, "forward", nil)
    rawset(model, "_acc_unwrapped_forward", nil)
  end
  fp8_autocast.remove_fp8_autowrap(model)
  if self.fp8_backend == "te" and convert.has_fp8_layers(model) then
    local plain = convert.to_plain(model)   -- the model itself, when prepare converted it (a Linear or LayerNorm)
    if plain == model then convert.convert_model(model, { to_fp8 = false }) end
    model = plain
  end
  return model
end

-- profile(fn [, handler]): fn(prof) runs under an fp8.profiler configured from the ProfileKwargs handler
-- (argument, else kwargs_handlers/settings, else defaults); each opt:step() through this accelerator
-- advances its schedule. With output_trace_dir the first window's trace is <dir>/profile_<process_index>.json
-- (Accelerate's name), window N's after it <dir>/profile_<process_index>_window<N>.json; then a barrier.
function Accelerator:profile(fn, handler)
  if type(fn) ~= "function" then error(("profile: expected a function, got %s"):format(type(fn)), 2) end
  if self._profiler then error("profile: this accelerator is already profiling", 2) end
  local profiler = require "fp8.profiler"
  local ok, prof = pcall(profiler.profile, handler or self.settings.profile, { rank = self.process_index })
  if not ok then error(prof, 2) end
  -- started here, not by prof:run, so that a refusal ("another profiler is running") names this call
  local sok, serr = pcall(prof._start, prof)
  if not sok then error(serr, type(serr) == "string" and 2 or 0) end
  self._profiler = { profiler = prof, push = profiler.push, pop = profiler.pop }
  rawset(prof, "_acc", self._profiler)   -- who steps it: the optimizers or the user (Profiler:step)
  -- yields refused: a coroutine suspended (or abandoned) in fn left this accelerator profiling for good, every
  -- later profile refused ("already profiling") and the optimizers stepping a profiler no one reads
  local rok, err = require("fp8.core")._pcall_noyield("profile", "the accelerator profiles until fn returns; an "
    .. "abandoned coroutine would leave it profiling for good", prof._run_started, prof, fn)
  self._profiler = nil
  rawset(prof, "_acc", nil)
  if not rok then error(err, 0) end
  -- as Accelerate's profile(): with a trace directory every process waits until all have written theirs, so
  -- the main process can read each rank's file once profile returns (not after an error: a rank that failed
  -- would never arrive)
  if prof.options.output_trace_dir then self:wait_for_everyone() end
  return prof
end

-- acc:is_main_process(), acc:is_local_main_process(), acc:device(): methods, as the issue spells them
-- (Accelerate has properties; a Lua field holding a function would make `if acc.is_main_process`
-- always true, so these are only methods, and process_index / num_processes are plain fields).
function Accelerator:is_main_process() return self.process_index == 0 end
function Accelerator:is_local_main_process() return self.local_process_index == 0 end
function Accelerator:device() return self._device end

-- print, wait_for_everyone, gather, gather_for_metrics, reduce, split_between_processes,
-- main_process_first: lua/fp8/distributed.lua
dist.install(Accelerator)
-- no_sync(model, fn, ...): fn runs without gradient synchronisation (a backward inside communicates nothing;
-- acc.sync_gradients is left as it is, as Accelerate leaves it).
function Accelerator:no_sync(model, fn, ...) return ddp.no_sync(self, model, fn, ...) end
-- Accelerate's end_training: it finishes the trackers (closing TensorBoard's event files) and destroys the process
-- group. Here the group (MPI) ends when the process exits, so that scripts that end with it (Accelerate's examples
-- do, with or without trackers) run to the end.
function Accelerator:end_training(...)
  O.no_more("end_training", "no arguments", ...)
  if getmetatable(self) ~= Accelerator then
    error(("end_training: called without its accelerator (got %s): write acc:end_training()"):format(O.got(self)), 2)
  end
  self:_finish_trackers()
end
-- init_trackers, log, get_tracker: lua/fp8/trackers.lua
trackers._install(Accelerator)

-- state() → printable summary of precision, backend, recipe and per-layer FP8 state.
function Accelerator:state()
  local lines = { ("Accelerator: mixed_precision=%s, device=%s, process %d of %d"):format(self.mixed_precision,
    self._device, self.process_index, self.num_processes) }
  local gs = self.gradient_state
  lines[#lines + 1] = kwargs.describe(self.settings, {
    { "options", ("even_batches=%s%s%s, step_scheduler_with_optimizer=%s, device_placement=%s"):format(
      tostring(self.even_batches), self.dataloader_config.data_seed and (", data_seed=%d"):format(
      self.dataloader_config.data_seed) or "", self.split_batches and ", split_batches=true" or "",
      tostring(self.step_scheduler_with_optimizer),
      tostring(self.device_placement)) },
    { "accumulation", ("sync_with_dataloader=%s, sync_each_batch=%s%s"):format(tostring(gs.sync_with_dataloader),
      tostring(gs.sync_each_batch == true), self.gradient_accumulation_plugin and " (GradientAccumulationPlugin)" or "") },
  })
  if #self._fp8_layers > 0 then
    lines[#lines + 1] = ("FP8 layers (%d), after %d optimizer steps:"):format(#self._fp8_layers, self.step)
    for _, nm in ipairs(self._fp8_layers) do
      local st = nm[2].fp8_meta:state()
      -- ao's rowwise recipes scale per row at each cast: a role's one scale stays 1 and means nothing (as fp8.stats)
      local function scale(r) return st.granularity ~= "tensor" and "per row" or ("%.5g"):format(st[r].scale) end
      lines[#lines + 1] = ("  %-24s in scale=%-10s amax=%-9.4g  w scale=%-10s amax=%-9.4g  grad(%s) scale=%-10s "
        .. "amax=%.4g")
        :format(nm[1], scale("input"), st.input.amax, scale("weight"), st.weight.amax, st.grad.format, scale("grad"),
          st.grad.amax)
    end
  end
  local s = table.concat(lines, "\n")
  return setmetatable({ text = s, settings = self.settings, fp8_layers = #self._fp8_layers },
    { __tostring = function() return s end })
end

-- Appends data to the CSV at path; true, or false and the reason. A regular file (or a new one) takes it through
-- fp8._fileio.append, which cuts a write that fails part-way (a full disk, a file-size limit) back to the file's old
-- size: a torn row would have run into the next step's first one. A device (/dev/null, /dev/full) is written as is.
local function append_log(path, data)
  local C = require("fp8._checkpoint")
  if C.is_file(path) or not C.exists(path) then
    local ok, err = pcall(require("fp8._fileio").append, path, data)
    return ok, not ok and tostring(err):gsub("^" .. path:gsub("%p", "%%%0") .. ": ", "") or nil
  end
  local f, err = require("fp8.model_files").open_file(path, "a")   -- (collects once when out of descriptors)
  if not f then return false, err end
  local ok, werr = f:write(data)
  local cok, cerr = f:close()   -- a buffered write's failure shows here
  if not ok then return false, werr end
  if not cok then return false, cerr end
  return true
end

-- log_fp8_stats{every=N, path=…, trackers=false} appends one CSV row per FP8 layer and role every N optimizer steps
-- to path, and with trackers=true logs the same to the experiment trackers (acc:log): fp8/<layer>/<role>/scale,
-- amax, underflow and saturated, so TensorBoard draws each layer's scale and amax over the run.
function Accelerator:log_fp8_stats(opts)
  if type(opts) ~= "table" then
    error(("log_fp8_stats: expected {every=N, path=..., trackers=}, got %s"):format(type(opts)), 2)
  end
  O.check("log_fp8_stats", opts, { "every", "path", "trackers" }, 2)
  local every, path, to_trackers = opts.every or 1, opts.path, opts.trackers
  if math.type(every) ~= "integer" or every < 1 then
    error(("log_fp8_stats: every must be an integer >= 1, got %s"):format(O.got(every)), 2)
  end
  if to_trackers ~= nil and type(to_trackers) ~= "boolean" then
    error(("log_fp8_stats: trackers must be a boolean, got %s"):format(O.got(to_trackers)), 2)
  end
  if to_trackers and #self.log_with == 0 then
    error("log_fp8_stats: trackers=true needs the accelerator's trackers: fp8.Accelerator{log_with=\"tensorboard\", "
      .. "project_dir=...} and acc:init_trackers(...)", 2)
  end
  if path == nil and not to_trackers then
    error("log_fp8_stats: give path= (a CSV file) or trackers=true (the experiment trackers), or both", 2)
  end
  if path ~= nil and (type(path) ~= "string" or path == "") then
    error(("log_fp8_stats: path must be a file name, got %s"):format(tostring(path)), 2)
  end
  if path ~= nil and self.process_index == 0 then   -- the main process writes the CSV
    local f, err = require("fp8.model_files").open_file(path, "a")   -- (collects once when out of descriptors)
    if not f then error(("log_fp8_stats: cannot open %s: %s"):format(path, err), 2) end
    local empty = f:seek("end") == 0
    f:close()
    local ok, werr = true, nil
    if empty then
      ok, werr = append_log(path, "step,layer,role,format,scale,amax,amax_history,underflow_frac,saturated_frac\n")
    end
    if not ok then error(("log_fp8_stats: cannot write the header to %s: %s"):format(path, tostring(werr)), 2) end
  end
  self._stats_log = { every = every, path = path, trackers = to_trackers == true }
end

-- The step's rows, appended in one write; a file that cannot take them is an error naming it (the rows would be
-- lost without a word: a full disk, a file made read-only since log_fp8_stats opened it).
function Accelerator:_write_stats(log)
  if self.process_index ~= 0 then return end   -- the main process writes the CSV and logs
  local rows, values = {}, {}
  for _, model in ipairs(self._models) do
    for _, r in ipairs(fp8_stats.stats(model, { quiet = true })) do
      -- no one scale (ao rowwise's per-row scales, the all-reduce row): an empty cell, not "nan"
      local scale = r.scale == r.scale and ("%.9g"):format(r.scale) or ""
      -- a layer name holding a comma, a quote or a line break is quoted (RFC 4180), else its row had a field more
      local layer = r.layer:find('[,"\r\n]') and ('"' .. r.layer:gsub('"', '""') .. '"') or r.layer
      rows[#rows + 1] = ("%d,%s,%s,%s,%s,%.9g,%.9g,%.6g,%.6g\n"):format(self.step, layer, r.role, r.format, scale,
        r.amax, r.amax_history, r.underflow, r.saturated)
      local tag = "fp8/" .. r.layer .. "/" .. r.role .. "/"
      if r.scale == r.scale then values[tag .. "scale"] = r.scale end
      values[tag .. "amax"], values[tag .. "underflow"], values[tag .. "saturated"] = r.amax, r.underflow, r.saturated
    end
  end
  if log.trackers then self:log(values, self.step) end
  if log.path == nil then return end
  local function failed(err)
    error(("log_fp8_stats: cannot append step %d's rows to %s: %s"):format(self.step, log.path, tostring(err)), 0)
  end
  local ok, err = append_log(log.path, table.concat(rows))
  if not ok then failed(err) end
end

function Accelerator:__tostring() return tostring(self:state()) end

checkpointing.install(Accelerator)

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  local function add(name, sig, doc) help.add { section = "Accelerator & recipes", name = name, sig = sig, doc = doc } end
  add("Accelerator", "fp8.Accelerator{mixed_precision=\"no\"|\"fp16\"|\"bf16\"|\"fp8\", kwargs_handlers={...}}",
    "Hugging Face Accelerate's Accelerator for Lua. Fields: mixed_precision, fp8_backend (te|ao|msamp|nil),\n"
    .. "fp8_recipe (every effective field). Methods: prepare(...) (models converted for the recipe, optimizers\n"
    .. "wrapped, schedulers too; returns its arguments in order), backward(loss [, {retain_graph=, inputs=}]),\n"
    .. "accumulate(model, fn), autocast([AutocastKwargs{...},] fn, ...) or autocast([handler]) (a handle to close:\n"
    .. "<close> or h:close()),\n"
    .. "autocast_dtype() (the dtype it runs the non-FP8 ops in), clip_grad_norm_(params, max [, norm_type]),\n"
    .. "clip_grad_value_(params, v),\n"
    .. "unwrap_model(m), print(...), is_main_process(), device(), state(), log_fp8_stats{every=N, path=, trackers=},\n"
    .. "skip_first_batches(loader, n), free_memory(...) / clear(...), get_state_dict(m), save(tensors, path);\n"
    .. "field optimizer_step_was_skipped. unwrap_model(m, false) takes the mixed-precision forward off. FP8 autocast is off in eval\n"
    .. "unless use_autocast_during_eval. With fp8 and no handler: msamp O2. Other options: cpu=true (also the use_cpu\n"
    .. "setting: launch --cpu, FP8LAB_USE_CPU, use_cpu: true in config.yaml) keeps the CPU where a GPU is usable;\n"
    .. "gradient_accumulation_steps, even_batches (or dataloader_config=fp8.DataLoaderConfiguration{...}),\n"
    .. "step_scheduler_with_optimizer (true: a prepared scheduler steps\n"
    .. "with the optimizer, num_processes times per step as in Accelerate; false: once per call), device_placement\n"
    .. "(false: prepare moves nothing), "
    .. "project_config / project_dir (save_state), env and config (the\n"
    .. "environment and config table to resolve settings from instead of the real ones; config=false: no file).\n"
    .. "More: help(\"acc:prepare\") (prepare_model and its kin), help(\"acc.fields\") (every field).")
  pcall(require, "fp8.profiler")   -- its help entries (fp8.profiler.profile, prof:key_averages, ...)
  add("acc:accumulate",
    "acc:accumulate([model, ...,] function() ... end)  or  local _ <close> = acc:accumulate([model, ...])",
    "Gradient accumulation as in Accelerate: each call is a micro-step; acc.sync_gradients is true on every\n"
    .. "gradient_accumulation_steps-th call (and the last batch of a prepared DataLoader). The prepared\n"
    .. "optimizer's step/zero_grad and the prepared scheduler's step act only then; FP8 scales update once\n"
    .. "per real step. gradient_accumulation_steps: argument > launch flag / FP8LAB_* > config file > 1.")
  add("acc:free_memory", "model, opt = acc:free_memory(model, opt)   (alias acc:clear; fp8.release_memory(...))",
    "Accelerate's free_memory: the accelerator lets go of every model, optimizer, scheduler and data loader it\n"
    .. "prepared (with its FP8 layers and data-parallel reducer), step and gradient_state.step (the micro-step\n"
    .. "count of acc:accumulate) go back to 0, and the arguments come back as nils to assign over your names, after\n"
    .. "a full garbage collection (and the GPU cache emptied). An optimizer or scheduler prepared before refuses to\n"
    .. "step afterwards: prepare the new ones. Objects registered for checkpointing stay registered.")
  add("release_memory", "a, b = fp8.release_memory(a, b)",
    "Accelerate's release_memory: returns one nil per argument (assign them over your names: Lua frees what nothing\n"
    .. "refers to), after a full garbage collection and, with a usable GPU, fp8.cuda.empty_cache().")
  add("acc:clip_grad_value_", "acc:clip_grad_value_(model_or_params, v)",
    "Clamps every gradient element to [-v, v] (after unscaling under fp16). See also acc:clip_grad_norm_.")
  add("set_seed", "fp8.set_seed(seed [, device_specific [, deterministic]]) / fp8.utils.set_seed(...)",
    "Accelerate's set_seed (accelerate.utils', also as fp8.utils.set_seed): seeds fp8's RNG and Lua's math.random "
    .. "(device_specific adds the process index). "
    .. "deterministic: fp8lab's kernels always are (the same seed gives the same bits), so true is taken and false "
    .. "changes nothing.")
  add("acc:profile", "acc:profile(function(prof) ... end [, fp8.ProfileKwargs{...}]) -> prof",
    "Runs the function under fp8.profiler configured from the ProfileKwargs in kwargs_handlers (or the\n"
    .. "handler given, or defaults); every opt:step() through the accelerator is one profiler step (do not\n"
    .. "call prof:step() as well). With output_trace_dir the Chrome trace goes to\n"
    .. "<dir>/profile_<process_index>.json (the first window; window N >= 2 of a repeating schedule:\n"
    .. "profile_<process_index>_window<N>.json), and every process waits for the others' files before it\n"
    .. "returns (Accelerate's wait_for_everyone). Then print(prof:key_averages()) (the last window).")
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Accelerator, "Accelerator")
O.strict_arity(AccOptimizer, "AcceleratedOptimizer")
O.strict_arity(AccScheduler, "AcceleratedScheduler")
return Accelerator
