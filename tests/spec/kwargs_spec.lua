-- kwargs_spec.lua — the kwargs handlers (docs/fp8-spec.md §5) and fp8.kwargs.resolve: defaults, to_kwargs,
-- printing, every class of bad input, and the precedence handler > environment > config > default.
local fp8 = fp8 or require "fp8"
local K = require "fp8.kwargs"

local U = dofile("tests/spec/helpers/util.lua")
local fails_with = U.fails_with   -- f's error message, asserting it failed and contains every plain substring

-- resolve with no ambient environment and no config file unless the test gives them.
local function resolve(opts)
  opts.env = opts.env or {}
  if opts.config == nil then opts.config = false end
  return K.resolve(opts)
end

local TE_DEFAULTS = { fp8_format = "HYBRID", margin = 0, interval = 1, amax_history_len = 1024,
                      amax_compute_algo = "most_recent", override_linear_precision = { false, false, false },
                      use_autocast_during_eval = false }

describe("handler defaults", function()
  it("FP8RecipeKwargs", function()
    local h = fp8.FP8RecipeKwargs()
    local want = { backend = "msamp", opt_level = "O2" }
    for k, v in pairs(TE_DEFAULTS) do want[k] = v end
    assert.same(want, h:to_table())
    assert.equal(0, h.margin)
    assert.equal("FP8RecipeKwargs", h.handler_type)
    assert.same({}, h:to_kwargs())
  end)
  it("TERecipeKwargs", function()
    assert.same(TE_DEFAULTS, fp8.TERecipeKwargs{}:to_table())
  end)
  it("MSAMPRecipeKwargs", function()
    assert.same({ opt_level = "O2" }, fp8.MSAMPRecipeKwargs():to_table())
  end)
  it("AORecipeKwargs: pad_inner_dim on, as Accelerate sets it; enable_fsdp_float8_all_gather refused (no FSDP)", function()
    local h = fp8.AORecipeKwargs{}
    assert.same({ config = "tensorwise", pad_inner_dim = true }, h:to_table())
    assert.is_nil(h.module_filter_func)
    for _, v in ipairs { true, false } do
      local ok, err = pcall(fp8.AORecipeKwargs, { enable_fsdp_float8_all_gather = v })
      assert.is_false(ok)
      assert.matches("enable_fsdp_float8_all_gather: not supported: fp8lab has no FSDP", err)
    end
  end)
  it("AutocastKwargs and GradScalerKwargs", function()
    assert.same({ enabled = true, cache_enabled = false }, fp8.AutocastKwargs():to_table())
    assert.same({ init_scale = 65536, growth_factor = 2, backoff_factor = 0.5, growth_interval = 2000, enabled = true },
      fp8.GradScalerKwargs():to_table())
  end)
  it("DistributedDataParallelKwargs", function()
    assert.same({ dim = 0, broadcast_buffers = true, bucket_cap_mb = 25, find_unused_parameters = false,
                  check_reduction = false, gradient_as_bucket_view = false, static_graph = false,
                  comm_hook = "no", comm_wrapper = "no", comm_state_option = {} },
      fp8.DistributedDataParallelKwargs():to_table())
  end)
  it("InitProcessGroupKwargs: timeout 600 s for nccl, 1800 s otherwise", function()
    assert.same({ backend = "nccl", timeout = 600 }, fp8.InitProcessGroupKwargs():to_table())
    assert.equal(1800, fp8.InitProcessGroupKwargs{ backend = "mpi" }.timeout)
    assert.equal(30, fp8.InitProcessGroupKwargs{ backend = "mpi", timeout = 30 }.timeout)
    assert.same({ backend = "mpi" }, fp8.InitProcessGroupKwargs{ backend = "mpi" }:to_kwargs())
    assert.same({ backend = "mpi", timeout = 600 }, fp8.InitProcessGroupKwargs{ backend = "mpi", timeout = 600 }:to_kwargs())
  end)
  it("ProfileKwargs", function()
    assert.same({ record_shapes = false, profile_memory = false, with_stack = false, with_flops = false,
                  with_modules = false }, fp8.ProfileKwargs():to_table())
    local h = fp8.ProfileKwargs{ schedule_option = { wait = 1, warmup = 1, active = 3 }, activities = { "CPU" } }
    assert.same({ wait = 1, warmup = 1, active = 3, ["repeat"] = 0, skip_first = 0, skip_first_wait = 0 },
      h.schedule_option)
    assert.same({ "cpu" }, h.activities)
  end)
  it("fp8.* and fp8.kwargs.* are the same classes", function()
    for _, name in ipairs { "FP8RecipeKwargs", "TERecipeKwargs", "MSAMPRecipeKwargs", "AORecipeKwargs", "AutocastKwargs",
                            "GradScalerKwargs", "DistributedDataParallelKwargs", "InitProcessGroupKwargs", "ProfileKwargs" } do
      assert.equal(K[name], fp8[name], name)
      assert.equal(name, fp8[name]().handler_type)
    end
  end)
end)

describe("handler objects", function()
  it("to_kwargs returns only the fields that differ from the defaults", function()
    local h = fp8.FP8RecipeKwargs{ backend = "te", margin = 0, interval = 2, override_linear_precision = { false, false, true } }
    assert.same({ backend = "te", interval = 2, override_linear_precision = { false, false, true } }, h:to_kwargs())
    assert.is_true(h:is_set("margin"))          -- given, though equal to the default
    assert.is_false(h:is_set("amax_history_len"))
    assert.same({ comm_hook = "power_sgd", comm_state_option = { matrix_approximation_rank = 2 } },
      fp8.DistributedDataParallelKwargs{ comm_hook = "power_sgd", comm_state_option = { matrix_approximation_rank = 2 } }:to_kwargs())
  end)
  it("tostring lists every field in a stable order", function()
    assert.equal('FP8RecipeKwargs(backend="te", fp8_format="HYBRID", margin=0, interval=1, amax_history_len=1024, '
      .. 'amax_compute_algo="most_recent", override_linear_precision={false, false, false}, '
      .. 'use_autocast_during_eval=false, opt_level="O2")', tostring(fp8.FP8RecipeKwargs{ backend = "te" }))
    assert.equal('MSAMPRecipeKwargs(opt_level="O3")', tostring(fp8.MSAMPRecipeKwargs{ opt_level = "O3" }))
    assert.equal('AORecipeKwargs(config="tensorwise", module_filter_func=nil, pad_inner_dim=true, '
      .. 'enable_fsdp_float8_all_gather=nil)', tostring(fp8.AORecipeKwargs()))
    assert.equal('GradScalerKwargs(init_scale=65536, growth_factor=2, backoff_factor=0.5, growth_interval=2000, enabled=true)',
      tostring(fp8.GradScalerKwargs()))
    assert.equal('InitProcessGroupKwargs(backend="nccl", init_method=nil, timeout=600)', tostring(fp8.InitProcessGroupKwargs()))
    assert.equal('AutocastKwargs(enabled=false, cache_enabled=false)', tostring(fp8.AutocastKwargs{ enabled = false }))
    local s = tostring(fp8.DistributedDataParallelKwargs())
    assert.truthy(s:find('^DistributedDataParallelKwargs%(dim=0, broadcast_buffers=true, bucket_cap_mb=25,'))
    assert.truthy(s:find('comm_state_option={}%)$'))
    assert.truthy(tostring(fp8.ProfileKwargs()):find("^ProfileKwargs%(activities=nil, schedule_option=nil, on_trace_ready=nil"))
  end)
  it("is_handler tells handlers from everything else", function()
    assert.is_true(K.is_handler(fp8.TERecipeKwargs()))
    assert.is_false(K.is_handler(fp8.TERecipeKwargs))
    assert.is_false(K.is_handler({ handler_type = "TERecipeKwargs" }))
    assert.is_false(K.is_handler(nil))
    assert.is_false(K.is_handler("TERecipeKwargs"))
  end)
  it("handlers are read-only", function()
    local h = fp8.TERecipeKwargs()
    fails_with({ "read-only", "margin", "TERecipeKwargs{margin=" }, function() h.margin = 3 end)
    local l = h.override_linear_precision
    l[1] = true
    assert.same({ false, false, false }, h.override_linear_precision)   -- reads give copies
  end)
  it("backend, fp8_format, opt_level and amax_compute_algo ignore case", function()
    assert.equal("msamp", fp8.FP8RecipeKwargs{ backend = "MSAMP" }.backend)
    assert.equal("te", fp8.FP8RecipeKwargs{ backend = "TE" }.backend)
    assert.equal("ao", fp8.FP8RecipeKwargs{ backend = "Ao" }.backend)
    assert.equal("HYBRID", fp8.TERecipeKwargs{ fp8_format = "hybrid" }.fp8_format)
    assert.equal("E4M3", fp8.TERecipeKwargs{ fp8_format = "e4m3" }.fp8_format)
    assert.equal("O1", fp8.MSAMPRecipeKwargs{ opt_level = "o1" }.opt_level)
    assert.equal("max", fp8.TERecipeKwargs{ amax_compute_algo = "MAX" }.amax_compute_algo)
    assert.equal("rowwise_with_gw_hp", fp8.AORecipeKwargs{ config = "ROWWISE_WITH_GW_HP" }.config)
  end)
  it("optimization_level is an alias of opt_level", function()
    local h = fp8.FP8RecipeKwargs{ optimization_level = "O3" }
    assert.equal("O3", h.opt_level)
    assert.equal("O3", h.optimization_level)
    assert.same({ opt_level = "O3" }, h:to_kwargs())
    assert.equal("O1", fp8.MSAMPRecipeKwargs{ optimization_level = "O1" }.opt_level)
    fails_with({ "'opt_level', 'optimization_level' name the same option" }, fp8.MSAMPRecipeKwargs,
      { opt_level = "O1", optimization_level = "O2" })
  end)
  it("accepts the names Accelerate's questionnaire writes as aliases", function()
    local h = fp8.TERecipeKwargs{ amax_history_length = 16, amax_compute_algorithm = "max" }
    assert.equal(16, h.amax_history_len)
    assert.equal("max", h.amax_compute_algo)
    assert.same({ amax_history_len = 16, amax_compute_algo = "max" }, h:to_kwargs())
    assert.equal(16, fp8.FP8RecipeKwargs{ backend = "te", amax_history_length = 16 }.amax_history_len)
  end)
  it("override_linear_precision accepts lists, named tables and the string forms", function()
    local T = fp8.TERecipeKwargs
    assert.same({ false, false, true }, T{ override_linear_precision = "(false, false, true)" }.override_linear_precision)
    assert.same({ true, false, false }, T{ override_linear_precision = "(True, False, False)" }.override_linear_precision)
    assert.same({ false, true, false }, T{ override_linear_precision = "false,true,false" }.override_linear_precision)
    assert.same({ false, false, true }, T{ override_linear_precision = { wgrad = true } }.override_linear_precision)
    assert.same({ true, true, true }, T{ override_linear_precision = { true, true, true } }.override_linear_precision)
    assert.same({ override_linear_precision = { false, false, true } },
      fp8.FP8RecipeKwargs{ override_linear_precision = "(false, false, true)" }:to_kwargs())
  end)
  it("AORecipeKwargs takes a module filter function", function()
    local f = function(_, name) return name ~= "head" end
    assert.equal(f, fp8.AORecipeKwargs{ module_filter_func = f }.module_filter_func)
    local callable = setmetatable({}, { __call = function() return true end })
    assert.equal(callable, fp8.AORecipeKwargs{ module_filter_func = callable }.module_filter_func)
  end)
  it("GradScalerKwargs feeds fp8.amp.GradScaler", function()
    local s = fp8.amp.GradScaler(fp8.GradScalerKwargs{ init_scale = 1024, growth_interval = 10 }:to_table())
    assert.equal(1024, s:get_scale())
    assert.equal(10, s.growth_interval)
  end)
end)

describe("handler errors", function()
  it("unknown key: names the handler, the key, the nearest valid key and the valid keys", function()
    fails_with({ "FP8RecipeKwargs", "unknown key 'marginn'", "did you mean 'margin'?", "valid keys:", "backend",
                 "opt_level (alias optimization_level)", "use_autocast_during_eval" },
      fp8.FP8RecipeKwargs, { marginn = 1 })
    fails_with({ "'amax_histroy_len'", "did you mean 'amax_history_len'?" }, fp8.TERecipeKwargs, { amax_histroy_len = 16 })
    fails_with({ "'amax_history'", "did you mean 'amax_history_len'?" }, fp8.TERecipeKwargs, { amax_history = 16 })
    fails_with({ "did you mean 'optimization_level'?" }, fp8.MSAMPRecipeKwargs, { optimisation_level = "O1" })
    fails_with({ "did you mean 'bucket_cap_mb'?" }, fp8.DistributedDataParallelKwargs, { bucket_cap_mv = 1 })
    fails_with({ "did you mean 'cache_enabled'?" }, fp8.AutocastKwargs, { cache_enable = true })
    local err = fails_with({ "unknown key 'zzz'", "valid keys: enabled, cache_enabled" }, fp8.AutocastKwargs, { zzz = 1 })
    assert.falsy(err:find("did you mean", 1, true))
  end)
  it("a key of another recipe handler says which handler takes it", function()
    fails_with({ "unknown key 'pad_inner_dim'", "AORecipeKwargs{pad_inner_dim=" }, fp8.FP8RecipeKwargs, { pad_inner_dim = true })
    fails_with({ "unknown key 'opt_level'", "MSAMPRecipeKwargs" }, fp8.TERecipeKwargs, { opt_level = "O1" })
  end)
  it("positional values and non-table options", function()
    fails_with({ "FP8RecipeKwargs", "positional", "key=value" }, fp8.FP8RecipeKwargs, { "te" })
    fails_with({ "TERecipeKwargs", "expected an options table", "got string" }, fp8.TERecipeKwargs, "te")
  end)
  it("wrong type: expected X, got Y", function()
    -- the settings table's messages: a string shows in quotes, a number as written
    fails_with({ "FP8RecipeKwargs: margin: expected an integer in 0..64, got \"2\"" }, fp8.FP8RecipeKwargs, { margin = "2" })
    fails_with({ "use_autocast_during_eval: expected a boolean (true or false), got 1" }, fp8.TERecipeKwargs,
      { use_autocast_during_eval = 1 })
    fails_with({ "module_filter_func: expected a function, got \"first_last\"" }, fp8.AORecipeKwargs,
      { module_filter_func = "first_last" })
    fails_with({ "pad_inner_dim: expected a boolean (true or false), got \"yes\"" }, fp8.AORecipeKwargs, { pad_inner_dim = "yes" })
    fails_with({ "backend: expected one of msamp, te, ao, got 1" }, fp8.FP8RecipeKwargs, { backend = 1 })
  end)
  it("value out of range", function()
    fails_with({ "margin: expected an integer in 0..64, got -1" }, fp8.TERecipeKwargs, { margin = -1 })
    fails_with({ "interval: expected an integer >= 1, got 0" }, fp8.TERecipeKwargs, { interval = 0 })
    fails_with({ "amax_history_len: expected an integer in 1..1048576, got 2.5" }, fp8.TERecipeKwargs, { amax_history_len = 2.5 })
    fails_with({ "amax_history_len: expected an integer in 1..1048576, got 1048577" }, fp8.TERecipeKwargs,
      { amax_history_len = 1048577 })
    -- the range is checked when the handler is built, whatever the backend (not only at acc:prepare)
    fails_with({ "FP8RecipeKwargs: margin: expected an integer in 0..64, got 100" }, fp8.FP8RecipeKwargs,
      { backend = "te", margin = 100 })
    fails_with({ "backoff_factor", "(0, 1)", "1.5" }, fp8.GradScalerKwargs, { backoff_factor = 1.5 })
    fails_with({ "growth_interval", "integer >= 1" }, fp8.GradScalerKwargs, { growth_interval = 0 })
    fails_with({ "timeout", "seconds > 0" }, fp8.InitProcessGroupKwargs, { timeout = 0 })
    assert.equal(3, math.tointeger(fp8.TERecipeKwargs{ margin = 3.0 }.margin))
  end)
  it("bad choice names the valid choices", function()
    fails_with({ "backend: expected one of msamp, te, ao, got \"tx\"" }, fp8.FP8RecipeKwargs, { backend = "tx" })
    fails_with({ "opt_level", "O1, O2, O3", "\"O4\"" }, fp8.MSAMPRecipeKwargs, { opt_level = "O4" })
    fails_with({ "amax_compute_algo", "most_recent, max" }, fp8.TERecipeKwargs, { amax_compute_algo = "mean" })
    fails_with({ "config", "tensorwise, rowwise, rowwise_with_gw_hp" }, fp8.AORecipeKwargs, { config = "blockwise" })
    fails_with({ "comm_hook", "\"no\", \"fp16\", \"bf16\", \"power_sgd\", \"batched_power_sgd\"" },
      fp8.DistributedDataParallelKwargs, { comm_hook = "int8" })
    fails_with({ "comm_wrapper", "\"no\", \"fp16\", \"bf16\"" }, fp8.DistributedDataParallelKwargs, { comm_wrapper = "int8" })
    fails_with({ "backend", "\"nccl\", \"mpi\"" }, fp8.InitProcessGroupKwargs, { backend = "gloo" })
    fails_with({ "activities", "\"cpu\", \"cuda\"", "\"tpu\"" }, fp8.ProfileKwargs, { activities = { "cpu", "tpu" } })
  end)
  it("E5M2 is refused with the reason and the valid formats", function()
    for _, H in ipairs { fp8.FP8RecipeKwargs, fp8.TERecipeKwargs } do
      fails_with({ "fp8_format", "E5M2 alone is not a training format", "TransformerEngine refuses it too", "HYBRID, E4M3" },
        H, { fp8_format = "e5m2" })
    end
  end)
  it("bad override_linear_precision", function()
    fails_with({ "override_linear_precision", "three booleans", "{true, false}" }, fp8.TERecipeKwargs,
      { override_linear_precision = { true, false } })
    fails_with({ "override_linear_precision", "\"(false, maybe, true)\"" }, fp8.TERecipeKwargs,
      { override_linear_precision = "(false, maybe, true)" })
    fails_with({ "override_linear_precision", "got 1" }, fp8.TERecipeKwargs, { override_linear_precision = 1 })
  end)
  it("FP8RecipeKwargs refuses a non-default field of another backend", function()
    fails_with({ "margin=3", "te recipe", "\"msamp\"", "backend=\"te\"" }, fp8.FP8RecipeKwargs, { backend = "msamp", margin = 3 })
    fails_with({ "opt_level=\"O1\"", "msamp recipe" }, fp8.FP8RecipeKwargs, { backend = "te", opt_level = "O1" })
    assert.equal("msamp", fp8.FP8RecipeKwargs{ backend = "msamp", margin = 0 }.backend)   -- defaults are harmless
  end)
  it("DDP, process group and profiler cross-checks", function()
    fails_with({ "comm_wrapper", "power_sgd" }, fp8.DistributedDataParallelKwargs, { comm_wrapper = "fp16" })
    fails_with({ "comm_state_option", "PowerSGD" }, fp8.DistributedDataParallelKwargs,
      { comm_state_option = { matrix_approximation_rank = 2 } })
    fails_with({ "did you mean 'matrix_approximation_rank'?" }, fp8.DistributedDataParallelKwargs,
      { comm_hook = "power_sgd", comm_state_option = { matrix_aproximation_rank = 2 } })
    assert.equal("bf16", fp8.DistributedDataParallelKwargs{ comm_hook = "batched_power_sgd", comm_wrapper = "BF16" }.comm_wrapper)
    fails_with({ "init_method", "env://, tcp:// or file://" }, fp8.InitProcessGroupKwargs, { init_method = "http://x" })
    assert.equal("tcp://10.0.0.1:29500", fp8.InitProcessGroupKwargs{ init_method = "tcp://10.0.0.1:29500" }.init_method)
    fails_with({ "schedule_option", "warmup is missing" }, fp8.ProfileKwargs, { schedule_option = { wait = 1, active = 1 } })
    fails_with({ "schedule_option", "did you mean 'repeat'?" }, fp8.ProfileKwargs,
      { schedule_option = { wait = 1, warmup = 1, active = 1, repeats = 2 } })
    fails_with({ "schedule_option", "active", ">= 1" }, fp8.ProfileKwargs, { schedule_option = { wait = 0, warmup = 0, active = 0 } })
    fails_with({ "activities", "listed twice" }, fp8.ProfileKwargs, { activities = { "cpu", "CPU" } })
  end)
  it("errors point at the caller's line", function()
    -- (not `return f{...}`: a tail call leaves no frame for the position)
    local ok, err = pcall(function() local h = fp8.TERecipeKwargs{ marginn = 1 }; return h end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("kwargs_spec.lua:%d+: TERecipeKwargs"), err)
    ok, err = pcall(function() local s = K.resolve{ mixed_precision = "fp9", env = {}, config = false }; return s end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("kwargs_spec.lua:%d+: resolve"), err)
    ok, err = pcall(function() local s = K.resolve{ env = { FP8LAB_FP8_MARGIN = "x" }, config = false }; return s end)
    assert.truthy(tostring(err):find("kwargs_spec.lua:%d+: FP8LAB_FP8_MARGIN"), err)
  end)
end)

describe("resolve", function()
  it("defaults: no mixed precision, no FP8 recipe, no scaler", function()
    local s = resolve{}
    assert.equal("no", s.mixed_precision)
    assert.is_nil(s.fp8_backend)
    assert.is_nil(s.fp8_recipe)
    assert.is_nil(s.grad_scaler)
    assert.is_nil(s.profile)
    assert.same({ enabled = true, cache_enabled = false }, s.autocast)
    assert.equal(25, s.ddp.bucket_cap_mb)
    -- the group a run uses, as the Accelerator's state shows it: MPI unless NCCL is asked for, and its timeout
    assert.same({ backend = "mpi", timeout = 1800 }, s.process_group)
    assert.same({ backend = "mpi", timeout = 5 },
      resolve { kwargs_handlers = { fp8.InitProcessGroupKwargs { timeout = 5 } } }.process_group)
    assert.same({ backend = "nccl", timeout = 600 },
      resolve { kwargs_handlers = { fp8.InitProcessGroupKwargs { backend = "nccl" } } }.process_group)
    assert.same({}, s.notices)
    assert.equal("default", s.sources.mixed_precision)
  end)
  it("fp8 with no backend named anywhere: msamp at O2", function()
    local s = resolve{ mixed_precision = "fp8" }
    assert.equal("msamp", s.fp8_backend)
    assert.same({ backend = "msamp", opt_level = "O2" }, s.fp8_recipe)
    assert.equal("default", s.sources.fp8_backend)
    assert.equal("default", s.sources.opt_level)
    assert.equal("argument", s.sources.mixed_precision)
  end)
  it("fills every field of the chosen backend, defaults included", function()
    local s = resolve{ mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs{} } }
    local want = { backend = "te" }
    for k, v in pairs(TE_DEFAULTS) do want[k] = v end
    assert.same(want, s.fp8_recipe)
    s = resolve{ mixed_precision = "fp8", kwargs_handlers = { fp8.AORecipeKwargs{ config = "rowwise" } } }
    assert.same({ backend = "ao", config = "rowwise", pad_inner_dim = true }, s.fp8_recipe)   -- enable_fsdp_float8_all_gather: refused, never carried
  end)
  it("precedence per field: handler > env > config > default", function()
    local s = resolve{
      mixed_precision = "fp8",
      kwargs_handlers = { fp8.TERecipeKwargs{ margin = 1 } },
      env = { FP8LAB_FP8_MARGIN = "2", FP8LAB_FP8_INTERVAL = "3" },
      config = { path = "cfg.yaml", fp8_config = { margin = 4, interval = 5, amax_history_len = 16 } },
    }
    assert.equal(1, s.fp8_recipe.margin);             assert.equal("handler", s.sources.margin)
    assert.equal(3, s.fp8_recipe.interval);           assert.equal("env", s.sources.interval)
    assert.equal(16, s.fp8_recipe.amax_history_len);  assert.equal("config", s.sources.amax_history_len)
    assert.equal("HYBRID", s.fp8_recipe.fp8_format);  assert.equal("default", s.sources.fp8_format)
    assert.equal("cfg.yaml", s.config_path)
  end)
  it("a key given to a handler wins even when it equals the default", function()
    local s = resolve{ mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs{ margin = 0 } },
                       env = { FP8LAB_FP8_MARGIN = "2" } }
    assert.equal(0, s.fp8_recipe.margin)
    assert.equal("handler", s.sources.margin)
  end)
  it("precedence of mixed_precision: argument > env > config > default", function()
    local cfg = { mixed_precision = "fp16" }
    assert.equal("bf16", resolve{ mixed_precision = "bf16", env = { FP8LAB_MIXED_PRECISION = "fp8" }, config = cfg }.mixed_precision)
    local s = resolve{ env = { FP8LAB_MIXED_PRECISION = "FP8" }, config = cfg }
    assert.equal("fp8", s.mixed_precision); assert.equal("env", s.sources.mixed_precision)
    s = resolve{ config = cfg }
    assert.equal("fp16", s.mixed_precision); assert.equal("config", s.sources.mixed_precision)
    assert.equal("no", resolve{ env = { FP8LAB_MIXED_PRECISION = "" } }.mixed_precision)   -- empty = unset
  end)
  it("precedence of the backend", function()
    local cfg = { mixed_precision = "fp8", fp8_config = { backend = "AO" } }
    local s = resolve{ config = cfg }
    assert.equal("ao", s.fp8_backend); assert.equal("config", s.sources.fp8_backend)
    s = resolve{ config = cfg, env = { FP8LAB_FP8_BACKEND = "te" } }
    assert.equal("te", s.fp8_backend); assert.equal("env", s.sources.fp8_backend)
    s = resolve{ config = cfg, env = { FP8LAB_FP8_BACKEND = "te" }, kwargs_handlers = { fp8.MSAMPRecipeKwargs{} } }
    assert.equal("msamp", s.fp8_backend); assert.equal("handler", s.sources.fp8_backend)
    assert.truthy(table.concat(s.notices, "\n"):find("FP8LAB_FP8_BACKEND=te overridden by MSAMPRecipeKwargs", 1, true))
    s = resolve{ config = cfg, env = { FP8LAB_FP8_BACKEND = "te" }, kwargs_handlers = { fp8.FP8RecipeKwargs{ backend = "MSAMP" } } }
    assert.equal("msamp", s.fp8_backend); assert.equal("handler", s.sources.fp8_backend)
    -- FP8RecipeKwargs without a backend leaves the choice to the environment, the config, the default
    s = resolve{ config = cfg, env = { FP8LAB_FP8_BACKEND = "te" }, kwargs_handlers = { fp8.FP8RecipeKwargs{ margin = 2 } } }
    assert.equal("te", s.fp8_backend); assert.equal("env", s.sources.fp8_backend)
    assert.equal(2, s.fp8_recipe.margin); assert.equal("handler", s.sources.margin)
  end)
  it("FP8RecipeKwargs fields that the resolved backend does not use are an error", function()
    fails_with({ "FP8RecipeKwargs", "fp8_format=\"E4M3\"", "te recipe", "\"msamp\"", "from the default", "backend=\"te\"" },
      resolve, { mixed_precision = "fp8", kwargs_handlers = { fp8.FP8RecipeKwargs{ fp8_format = "E4M3" } } })
  end)
  it("a handler's keys left out fall through to env and config", function()
    local s = resolve{ mixed_precision = "fp8", kwargs_handlers = { fp8.MSAMPRecipeKwargs() },
                       env = { FP8LAB_FP8_OPT_LEVEL = "o1" } }
    assert.equal("O1", s.fp8_recipe.opt_level); assert.equal("env", s.sources.opt_level)
    s = resolve{ mixed_precision = "fp8", kwargs_handlers = { fp8.AORecipeKwargs() },
                 config = { fp8_config = { pad_inner_dim = false } } }
    assert.is_false(s.fp8_recipe.pad_inner_dim)
    assert.is_nil(s.fp8_recipe.enable_fsdp_float8_all_gather)   -- not supported: never in a recipe
    assert.equal("config", s.sources.pad_inner_dim)
  end)
  it("environment values are parsed and checked", function()
    local s = resolve{ env = {
      FP8LAB_MIXED_PRECISION = "fp8", FP8LAB_FP8_BACKEND = "TE", FP8LAB_FP8_FORMAT = "e4m3", FP8LAB_FP8_MARGIN = "2",
      FP8LAB_FP8_INTERVAL = "3", FP8LAB_FP8_AMAX_HISTORY_LEN = "16", FP8LAB_FP8_AMAX_COMPUTE_ALGO = "max",
      FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION = "false,false,true", FP8LAB_FP8_USE_AUTOCAST_DURING_EVAL = "yes" } }
    assert.same({ backend = "te", fp8_format = "E4M3", margin = 2, interval = 3, amax_history_len = 16,
                  amax_compute_algo = "max", override_linear_precision = { false, false, true },
                  use_autocast_during_eval = true }, s.fp8_recipe)
    for f in pairs(TE_DEFAULTS) do assert.equal("env", s.sources[f], f) end
    assert.same({ false, true, false }, resolve{ env = { FP8LAB_MIXED_PRECISION = "fp8", FP8LAB_FP8_BACKEND = "te",
      FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION = "(False, True, False)" } }.fp8_recipe.override_linear_precision)
    -- the same booleans as a launch flag or fp8.config.check takes (one parser): y/n too, any case
    for text, want in pairs { y = true, N = false, ON = true, ["0"] = false } do
      assert.equal(want, resolve{ env = { FP8LAB_MIXED_PRECISION = "fp8", FP8LAB_FP8_BACKEND = "te",
        FP8LAB_FP8_USE_AUTOCAST_DURING_EVAL = text } }.fp8_recipe.use_autocast_during_eval, text)
      assert.equal(want, fp8.config.check("use_autocast_during_eval", text, "FP8LAB_FP8_USE_AUTOCAST_DURING_EVAL"), text)
    end
  end)
  it("bad environment values name the variable", function()
    fails_with({ "FP8LAB_MIXED_PRECISION", "no, fp16, bf16, fp8", "\"fp9\"" }, resolve, { env = { FP8LAB_MIXED_PRECISION = "fp9" } })
    fails_with({ "FP8LAB_FP8_BACKEND", "msamp, te, ao" }, resolve, { env = { FP8LAB_FP8_BACKEND = "cuda" } })
    fails_with({ "FP8LAB_FP8_MARGIN", "integer in 0..64", "\"two\"" }, resolve, { env = { FP8LAB_FP8_MARGIN = "two" } })
    fails_with({ "FP8LAB_FP8_FORMAT", "E5M2" }, resolve, { env = { FP8LAB_FP8_FORMAT = "E5M2" } })
    fails_with({ "FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION", "three booleans" }, resolve,
      { env = { FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION = "true,false" } })
    fails_with({ "FP8LAB_FP8_PAD_INNER_DIM", "boolean", "\"maybe\"" }, resolve, { env = { FP8LAB_FP8_PAD_INNER_DIM = "maybe" } })
    fails_with({ "FP8LAB_FP8_OPT_LEVEL", "O1, O2, O3" }, resolve, { env = { FP8LAB_FP8_OPT_LEVEL = "O9" } })
    fails_with({ "FP8LAB_GRADIENT_ACCUMULATION_STEPS", "integer >= 1", "0" }, resolve,
      { env = { FP8LAB_GRADIENT_ACCUMULATION_STEPS = "0" } })
    -- env= stands in for the process environment: text only (a number was read as its text, a table as
    -- "table: 0x...", and a key that is not a name was skipped without a word)
    fails_with({ "resolve: env: FP8LAB_FP8_MARGIN: expected a string", "got table" }, resolve,
      { env = { FP8LAB_FP8_MARGIN = {} } })
    fails_with({ "resolve: env: FP8LAB_FP8_MARGIN: expected a string", "got number 3" }, resolve,
      { env = { FP8LAB_FP8_MARGIN = 3 } })
    fails_with({ "resolve: env: expected variable names as keys, got number 1" }, resolve, { env = { "x" } })
  end)
  it("bad config values name the file and the key; unknown keys are errors, as in a file", function()
    fails_with({ "config file a.yaml", "fp8_config.margin", "integer in 0..64", "-1" }, resolve,
      { config = { path = "a.yaml", fp8_config = { margin = -1 } } })
    fails_with({ "config file a.yaml", "mixed_precision", "no, fp16, bf16, fp8" }, resolve,
      { config = { path = "a.yaml", mixed_precision = "int8" } })
    local s = resolve{ config = { path = "a.yaml", mixed_precision = "fp8",
      fp8_config = { backend = "te", amax_history_length = 32, amax_compute_algorithm = "max" } } }
    assert.equal(32, s.fp8_recipe.amax_history_len)
    assert.equal("max", s.fp8_recipe.amax_compute_algo)
    fails_with({ "config file a.yaml: unknown key 'marginn' in fp8_config (did you mean 'margin'?)" }, resolve,
      { config = { path = "a.yaml", mixed_precision = "fp8", fp8_config = { backend = "te", marginn = 1 } } })
    fails_with({ "config: unknown key 'mixed_precison' (did you mean 'mixed_precision'?)" }, resolve,
      { config = { mixed_precison = "fp8" } })   -- was skipped without a word: mixed_precision stayed "no"
    -- the valid choices are a file's keys: path and notices (what fp8.config.load adds) were offered too
    local ok, err = pcall(resolve, { config = { mixed_precison = "fp8" } })
    err = type(err) == "table" and err.kwargs_error or tostring(err)
    assert.is_false(ok)
    assert.truthy(err:find("(valid: mixed_precision, num_processes, use_cpu, gradient_accumulation_steps, fp8_config)",
      1, true), err)
    assert.equal("fp8", resolve{ config = { path = "a.yaml", notices = { "n" }, mixed_precision = "fp8" } }.mixed_precision)
    fails_with({ "config: path: expected a string, got number" }, resolve, { config = { path = 3 } })
    fails_with({ "config file a.yaml: notices: expected a list of strings, got string" }, resolve,
      { config = { path = "a.yaml", notices = "x" } })   -- both were dropped without a word
    fails_with({ "config: unknown key 'module_filter_func' in fp8_config" }, resolve,
      { config = { fp8_config = { backend = "ao", module_filter_func = function() return true end } } })
    -- an option under both its names, refused as a file's duplicate key is (one of the two was kept unseen)
    fails_with({ "config file a.yaml: fp8_config: 'amax_history_len' and 'amax_history_length' name the same option" },
      resolve, { config = { path = "a.yaml", mixed_precision = "fp8",
        fp8_config = { backend = "te", amax_history_length = 16, amax_history_len = 8 } } })
    fails_with({ "fp8_config: 'opt_level' and 'optimization_level' name the same option; give one" }, resolve,
      { config = { mixed_precision = "fp8", fp8_config = { optimization_level = "O1", opt_level = "O3" } } })
  end)
  it("unused env/config fields: silent when default, a notice otherwise", function()
    local s = resolve{ mixed_precision = "fp8", env = { FP8LAB_FP8_MARGIN = "0", FP8LAB_FP8_PAD_INNER_DIM = "true" } }
    assert.same({}, s.notices)
    s = resolve{ mixed_precision = "fp8", env = { FP8LAB_FP8_MARGIN = "2" },
                 config = { path = "c.yaml", fp8_config = { pad_inner_dim = false } } }
    local text = table.concat(s.notices, "\n")
    assert.truthy(text:find("FP8LAB_FP8_MARGIN=2 ignored", 1, true), text)
    assert.truthy(text:find("config file c.yaml: fp8_config.pad_inner_dim=false ignored", 1, true), text)
    s = resolve{ mixed_precision = "bf16", env = { FP8LAB_FP8_BACKEND = "te" } }
    assert.truthy(table.concat(s.notices, "\n"):find("mixed_precision is \"bf16\"", 1, true))
  end)
  it("an FP8 recipe handler without mixed_precision=\"fp8\" is an error", function()
    fails_with({ "TERecipeKwargs", "mixed_precision=\"fp8\"", "\"no\"", "default" }, resolve,
      { kwargs_handlers = { fp8.TERecipeKwargs() } })
    fails_with({ "AORecipeKwargs", "\"bf16\"", "the mixed_precision argument" }, resolve,
      { mixed_precision = "bf16", kwargs_handlers = { fp8.AORecipeKwargs() } })
    fails_with({ "FP8RecipeKwargs", "\"fp16\"", "environment" }, resolve,
      { env = { FP8LAB_MIXED_PRECISION = "fp16" }, kwargs_handlers = { fp8.FP8RecipeKwargs() } })
  end)
  it("two FP8 recipe handlers, or two of one type, are errors", function()
    fails_with({ "two FP8 recipe handlers", "TERecipeKwargs", "AORecipeKwargs" }, resolve,
      { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs(), fp8.AORecipeKwargs() } })
    fails_with({ "two FP8 recipe handlers", "FP8RecipeKwargs", "MSAMPRecipeKwargs" }, resolve,
      { mixed_precision = "fp8", kwargs_handlers = { fp8.FP8RecipeKwargs(), fp8.MSAMPRecipeKwargs() } })
    fails_with({ "two AutocastKwargs", "items 1 and 3" }, resolve,
      { kwargs_handlers = { fp8.AutocastKwargs(), fp8.DistributedDataParallelKwargs(), fp8.AutocastKwargs{ enabled = false } } })
  end)
  it("kwargs_handlers must hold handlers", function()
    fails_with({ "kwargs_handlers[1]", "the class AutocastKwargs", "AutocastKwargs{...}" }, resolve,
      { kwargs_handlers = { fp8.AutocastKwargs } })
    fails_with({ "kwargs_handlers[2]", "expected a kwargs handler", "got table" }, resolve,
      { kwargs_handlers = { fp8.AutocastKwargs(), { enabled = false } } })
    fails_with({ "a single TERecipeKwargs", "wrap it" }, resolve, { kwargs_handlers = fp8.TERecipeKwargs() })
    fails_with({ "unknown key 'kwargs_handler'", "did you mean 'kwargs_handlers'?" }, resolve, { kwargs_handler = {} })
  end)
  it("accepts the kwarg_handlers spelling", function()
    local s = resolve{ mixed_precision = "fp8", kwarg_handlers = { fp8.TERecipeKwargs{ interval = 4 } } }
    assert.equal("te", s.fp8_backend)
    assert.equal(4, s.fp8_recipe.interval)
    fails_with("not both", resolve, { kwargs_handlers = {}, kwarg_handlers = {} })
  end)
  it("mixed_precision must be no, fp16, bf16 or fp8", function()
    fails_with({ "mixed_precision", "no, fp16, bf16, fp8", "\"fp4\"" }, resolve, { mixed_precision = "fp4" })
    assert.equal("fp8", resolve{ mixed_precision = "FP8" }.mixed_precision)
  end)
  it("the other handlers", function()
    local prof = fp8.ProfileKwargs{ with_flops = true }
    local s = resolve{ mixed_precision = "fp16", kwargs_handlers = {
      fp8.GradScalerKwargs{ init_scale = 256 }, fp8.AutocastKwargs{ cache_enabled = false },
      fp8.DistributedDataParallelKwargs{ static_graph = true }, fp8.InitProcessGroupKwargs{ backend = "mpi" }, prof } }
    assert.equal(256, s.grad_scaler.init_scale)
    assert.equal(2000, s.grad_scaler.growth_interval)
    assert.same({ enabled = true, cache_enabled = false }, s.autocast)
    assert.is_true(s.ddp.static_graph)
    assert.same({ backend = "mpi", timeout = 1800 }, s.process_group)
    assert.equal(prof, s.profile)
    for _, k in ipairs { "grad_scaler", "autocast", "ddp", "process_group", "profile" } do
      assert.equal("handler", s.sources[k], k)
    end
    assert.same({ init_scale = 65536, growth_factor = 2, backoff_factor = 0.5, growth_interval = 2000, enabled = true },
      resolve{ mixed_precision = "fp16" }.grad_scaler)
    -- without fp16 the handler would change nothing: refused, naming where the precision came from
    fails_with({ 'GradScalerKwargs needs mixed_precision="fp16" (loss scaling is for fp16), but mixed_precision is "bf16" '
      .. "(from the mixed_precision argument)" }, resolve, { mixed_precision = "bf16", kwargs_handlers = { fp8.GradScalerKwargs() } })
    fails_with({ 'but mixed_precision is "fp8" (from the environment)' }, resolve,
      { env = { FP8LAB_MIXED_PRECISION = "fp8" }, config = false, kwargs_handlers = { fp8.GradScalerKwargs() } })
    fails_with({ 'but mixed_precision is "no" (from the default)' }, resolve,
      { env = {}, config = false, kwargs_handlers = { fp8.GradScalerKwargs { enabled = false } } })
  end)
  it("loads the config through fp8.config.load_default(path) when no config is given", function()
    local saved = package.loaded["fp8.config"]
    local asked
    package.loaded["fp8.config"] = { load_default = function(path)
      asked = path
      return { path = path, mixed_precision = "fp8", fp8_config = { backend = "te", margin = 5 } }
    end }
    local ok, s = pcall(K.resolve, { env = { FP8LAB_CONFIG_FILE = "/tmp/x.yaml" } })   -- no load(): load_default(path)
    package.loaded["fp8.config"] = saved
    assert.is_true(ok, s)
    assert.equal("/tmp/x.yaml", asked)
    assert.equal("te", s.fp8_backend)
    assert.equal(5, s.fp8_recipe.margin)
    assert.equal("config", s.sources.margin)
  end)
  it("reads FP8LAB_CONFIG_FILE through fp8.config.load(path) when the module has it", function()
    local saved = package.loaded["fp8.config"]
    local asked
    package.loaded["fp8.config"] = {
      load = function(path)
        asked = path
        return { path = path, mixed_precision = "fp8", fp8_config = { backend = "ao", pad_inner_dim = false },
                 notices = { path .. ": ignoring settings that only matter to Accelerate: compute_environment" } }
      end,
      load_default = function() error("load_default should not be called when the path is known") end }
    local ok, s = pcall(K.resolve, { env = { FP8LAB_CONFIG_FILE = "/tmp/y.yaml" } })
    package.loaded["fp8.config"] = saved
    assert.is_true(ok, s)
    assert.equal("/tmp/y.yaml", asked)
    assert.equal("ao", s.fp8_backend)
    assert.is_false(s.fp8_recipe.pad_inner_dim)
    assert.equal("/tmp/y.yaml", s.config_path)
    assert.truthy(s.notices[1]:find("compute_environment", 1, true))   -- the loader's notices are kept
  end)
  it("works without an fp8.config module", function()
    local saved_loaded, saved_searchers = package.loaded["fp8.config"], package.searchers
    package.loaded["fp8.config"] = nil
    package.searchers = { function() return "\n\tno fp8.config in this test" end }
    local ok, s = pcall(K.resolve, { env = {} })
    package.searchers, package.loaded["fp8.config"] = saved_searchers, saved_loaded
    assert.is_true(ok, s)
    assert.equal("no", s.mixed_precision)
  end)
  it("describe prints each setting with its source", function()
    local s = resolve{ mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs{ margin = 1 } },
                       env = { FP8LAB_FP8_INTERVAL = "2", FP8LAB_FP8_OPT_LEVEL = "O1" } }
    local text = K.describe(s)
    assert.truthy(text:find("mixed_precision%s+fp8%s+%(argument%)"), text)
    assert.truthy(text:find("fp8_backend%s+te%s+%(handler%)"), text)
    assert.truthy(text:find("margin%s+1%s+%(handler%)"), text)
    assert.truthy(text:find("interval%s+2%s+%(env%)"), text)
    assert.truthy(text:find("amax_history_len%s+1024%s+%(default%)"), text)
    assert.truthy(text:find("FP8LAB_FP8_OPT_LEVEL=O1 ignored", 1, true), text)
    fails_with("settings table", K.describe, {})
  end)
end)

describe("RECIPE_FIELDS and ENV", function()
  it("list every recipe field in order with the handler defaults", function()
    local names = {}
    for i, f in ipairs(K.RECIPE_FIELDS.te) do names[i] = f.name end
    assert.same({ "fp8_format", "margin", "interval", "amax_history_len", "amax_compute_algo",
                  "override_linear_precision", "use_autocast_during_eval" }, names)
    for _, f in ipairs(K.RECIPE_FIELDS.te) do
      assert.same(TE_DEFAULTS[f.name], f.default, f.name)
      assert.truthy(#f.doc > 0)
      assert.truthy(f.env:find("^FP8LAB_FP8_"))
    end
    assert.equal("O2", K.RECIPE_FIELDS.msamp.opt_level.default)
    assert.same({ "O1", "O2", "O3" }, K.RECIPE_FIELDS.msamp[1].choices)
    local ao = {}
    for _, f in ipairs(K.RECIPE_FIELDS.ao) do ao[f.name] = f.default end
    assert.same({ config = "tensorwise", pad_inner_dim = true }, ao)   -- enable_fsdp_float8_all_gather has no default: refused
  end)
  it("ENV names every variable the launcher sets", function()
    local names = {}
    for _, e in ipairs(K.ENV) do names[e.name] = true end
    for _, n in ipairs { "FP8LAB_MIXED_PRECISION", "FP8LAB_FP8_BACKEND", "FP8LAB_FP8_FORMAT", "FP8LAB_FP8_MARGIN",
                         "FP8LAB_FP8_INTERVAL", "FP8LAB_FP8_AMAX_HISTORY_LEN", "FP8LAB_FP8_AMAX_COMPUTE_ALGO",
                         "FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION", "FP8LAB_FP8_OPT_LEVEL",
                         "FP8LAB_FP8_USE_AUTOCAST_DURING_EVAL", "FP8LAB_FP8_PAD_INNER_DIM",
                         "FP8LAB_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER", "FP8LAB_CONFIG_FILE", "FP8LAB_LAUNCH_FLAGS" } do
      assert.truthy(names[n], n)
    end
    local rows = 0
    for _, r in ipairs(fp8.settings.list()) do if r.env then rows = rows + 1 end end
    assert.equal(rows + 2, #K.ENV)   -- every setting's variable, FP8LAB_CONFIG_FILE and FP8LAB_LAUNCH_FLAGS
  end)
  it("help has an entry per handler", function()
    local help = require "fp8.help"
    for _, name in ipairs(K.HANDLER_NAMES) do
      local e = help.lookup(name)
      assert.truthy(e, name)
      assert.truthy(e.sig:find(name, 1, true))
    end
    assert.truthy(help.lookup("kwargs.resolve"))
  end)
end)
