-- fp8 — the public Lua module: the C functions of fp8.core plus the Lua-level helpers
-- (formats table, encode options, explain, tensor printing). The host sets the global `fp8`.
local core = require "fp8.core"
local tensor_lua = require "fp8.tensor"   -- installs printing (__tostring) and Lua methods on fp8.Tensor
require "fp8.tensor_inplace"                -- more methods: copy_, fill_, add_, ...
require "fp8.tensor_logic"                  -- isnan, isinf, logical_and, all, any, ...
require "fp8.tensor_rearrange"              -- unbind, flip, roll, tile, repeat_interleave, movedim, unflatten
require "fp8.tensor_linalg"                 -- dot, addmm, baddbmm, diagonal, diag, trace
require "fp8.tensor_pointwise"              -- addcmul, addcdiv, nan_to_num, logaddexp, xlogy, logit, isclose, ...
require "fp8.tensor_scatter"                -- index_add, index_copy, index_fill (scatter, scatter_add: core)
require "fp8.tensor_math"                   -- hypot, frac, copysign, floor_divide, sinc, nansum, renorm, ...
local shapes = require "fp8.tensor_shapes"  -- atleast_2d, rot90, diff, take, kron, cross, ...; hstack, meshgrid, ...
local stats = require "fp8.tensor_stats"    -- median, quantile, cummax, cov, tensordot, ...; cdist, unique, ...

local fp8 = {}
for k, v in next, core do
  if type(k) == "string" and k:sub(1, 1) ~= "_" then fp8[k] = v end
end
fp8.stack = tensor_lua.stack   -- fp8.cat's companion (lua/fp8/tensor.lua)
fp8.set_printoptions = tensor_lua.set_printoptions
fp8.where = tensor_lua.where
fp8.index_select = tensor_lua.index_select
fp8.einsum = require("fp8.einsum").einsum
fp8.utils = { checkpoint = require "fp8.activation_checkpoint" }   -- torch.utils.checkpoint's
fp8.SummaryWriter = require("fp8.tensorboard").SummaryWriter   -- torch.utils.tensorboard's (lua/fp8/tensorboard.lua)
require("fp8.torch_forms")._install(fp8)   -- fp8.exp(x), fp8.sum(x, d), x:softmax(d), ...: torch's other spellings
for _, k in ipairs { "zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "full_like", "linspace",
                     "eye" } do
  fp8[k] = tensor_lua[k]
end
for k, f in next, shapes do assert(fp8[k] == nil, k); fp8[k] = f end   -- hstack, vstack, meshgrid, block_diag, ...
for k, f in next, stats do assert(fp8[k] == nil, k); fp8[k] = f end    -- cdist, searchsorted, bincount, unique, ...

-- encode(x, fmt [, {saturate=bool}]): saturate (clamp to ±max) is the default, as training casts do;
-- {saturate=false} is the IEEE policy (overflow → inf for e5m2, NaN for e4m3).
function fp8.encode(x, fmt, opts, ...)
  require("fp8.opts").no_more("encode", "(x, format [, {saturate=}])", ...)
  if type(x) ~= "number" then   -- (else core.encode's own message named this file's line, not the caller's)
    error(("bad argument #1 to 'encode' (expected a number, got %s)"):format(require("fp8.opts").got(x)), 2)
  end
  local saturate = true
  if opts ~= nil then
    if type(opts) ~= "table" then
      error(("bad argument #3 to 'encode' (expected an options table {saturate=bool}, got %s)"):format(type(opts)), 2)
    end
    require("fp8.opts").check("encode", opts, { "saturate" }, 2)
    if opts.saturate ~= nil then
      if type(opts.saturate) ~= "boolean" then
        error(("encode: saturate must be a boolean, got %s"):format(type(opts.saturate)), 2)
      end
      saturate = opts.saturate
    end
  end
  -- the format's refusal is core.encode's (it names the argument), raised at the caller's line, not this file's
  local ok, r = pcall(core.encode, x, fmt, saturate)
  if not ok and type(r) == "string" then   -- (under pcall, luaL names the function 'fp8.core.encode')
    r = r:gsub("^[^:\n]*init%.lua:%d+: ", ""):gsub("^bad argument #(%d+) to '[^']*'", "bad argument #%1 to 'encode'")
  end
  if not ok then error(r, 2) end
  return r
end

-- The order the formats are shown in: narrow to wide, as a reader compares them.
local FORMAT_ORDER = { "e4m3", "e5m2", "fp16", "bf16", "fp32" }

local function fmtnum(v)
  if v == math.huge then return "inf" end
  if v >= 1e6 or v < 1e-3 then return ("%.4g"):format(v) end
  return ("%.6g"):format(v)
end

-- formats() prints the traits of every format side by side (and returns nothing, so the prompt
-- does not print them twice); formats(true) prints nothing and returns them as a list in display
-- order, also keyed by name.
function fp8.formats(quiet, ...)
  require("fp8.opts").no_more("formats", "([quiet])", ...)
  if quiet ~= nil and type(quiet) ~= "boolean" then
    error(("formats: quiet must be a boolean, got %s"):format(type(quiet)), 2)
  end
  local list = {}
  for i, name in ipairs(FORMAT_ORDER) do
    local f = core.format(name)
    list[i] = f
    list[name] = f
  end
  if not quiet then
    local cols = {
      { "format", function(f) return f.name end },
      { "bits", function(f) return tostring(f.bits) end },
      { "exp", function(f) return tostring(f.exp_bits) end },
      { "mant", function(f) return tostring(f.mantissa_bits) end },
      { "bias", function(f) return tostring(f.bias) end },
      { "max", function(f) return fmtnum(f.max) end },
      { "min normal", function(f) return fmtnum(f.min_normal) end },
      { "min subnormal", function(f) return fmtnum(f.min_subnormal) end },
      { "inf", function(f) return f.has_inf and "yes" or "no" end },
      { "NaN codes", function(f) return tostring(f.nan_codes) end },
    }
    local rows, width = {}, {}
    for c, col in ipairs(cols) do width[c] = #col[1] end
    for r, f in ipairs(list) do
      rows[r] = {}
      for c, col in ipairs(cols) do
        rows[r][c] = col[2](f)
        width[c] = math.max(width[c], #rows[r][c])
      end
    end
    local function line(cells)
      local out = {}
      for c, s in ipairs(cells) do
        out[c] = c == 1 and s .. (" "):rep(width[c] - #s) or (" "):rep(width[c] - #s) .. s
      end
      return table.concat(out, "  ")
    end
    local header = {}
    for c, col in ipairs(cols) do header[c] = col[1] end
    print(line(header))
    for _, r in ipairs(rows) do print(line(r)) end
    return
  end
  return list
end

-- set_seed(seed [, device_specific [, deterministic]]): Accelerate's name: fp8's generator and Lua's math.random;
-- device_specific adds the process index.
-- deterministic (Accelerate's torch.use_deterministic_algorithms(True)) is what fp8lab's kernels always are: no
-- floating-point atomics and fixed summation orders on the CPU and the GPU, so a run repeated with the same seed
-- gives the same bits (docs/lua-api.md, "Reproducibility"); true is taken for that, false changes nothing.
function fp8.set_seed(seed, device_specific, deterministic, ...)
  require("fp8.opts").no_more("set_seed", "(seed [, device_specific [, deterministic]])", ...)
  if math.type(seed) ~= "integer" or seed < 0 then
    error(("set_seed: seed must be an integer >= 0, got %s"):format(require("fp8.opts").got(seed)), 2)
  end
  if device_specific ~= nil and type(device_specific) ~= "boolean" then
    error(("set_seed: device_specific must be a boolean, got %s"):format(type(device_specific)), 2)
  end
  if deterministic ~= nil and type(deterministic) ~= "boolean" then
    error(("set_seed: deterministic must be a boolean, got %s"):format(type(deterministic)), 2)
  end
  if device_specific then
    -- the process's rank from whatever started it (mpirun, srun, PMI; fp8lab launch), as the communicator reads it
    seed = seed + require("fp8._dist").info().rank
  end
  fp8.manual_seed(seed)
  -- and Lua's own generator, as Accelerate's set_seed seeds Python's random beside torch's (fp8.manual_seed, torch's
  -- name, seeds fp8's alone)
  math.randomseed(seed)
end

-- fp8.utils is torch.utils' (checkpoint); Accelerate's `from accelerate.utils import set_seed` is as common as torch's
-- manual_seed, so fp8.utils.set_seed is fp8.set_seed, the same function (device_specific and deterministic as
-- above). Any other name fp8 has (accelerate.utils' functions live at fp8's top level: fp8.convert_model,
-- fp8.load_checkpoint_in_model, ...) read from fp8.utils is an error naming fp8's (it was nil: "attempt to call a nil
-- value (field 'set_seed')" until stop 95's review)
fp8.utils.set_seed = fp8.set_seed
setmetatable(fp8.utils, { __index = function(_, k)
  if type(k) == "string" and k ~= "checkpoint" then
    local ok, v = pcall(function() return fp8[k] end)
    if ok and v ~= nil then
      error(("fp8.utils.%s: fp8.utils holds torch.utils' names (checkpoint) and set_seed; accelerate.utils' %s is "
        .. "fp8.%s"):format(k, k, k), 2)
    end
  end
end })

-- get_rng_state() / set_rng_state(state) / initial_seed(): torch's names for the generator's state, what save_state
-- writes to random_states_<rank>.json. The state is a string of 32 hex digits, the seed's 16 then the counter's 16
-- (torch's is a ByteTensor): it goes into JSON (a register_for_checkpointing object's state_dict) as it is, and
-- set_rng_state takes it back exactly. initial_seed() is the seed manual_seed or set_seed last set (torch's), an
-- integer (a seed given as a negative integer reads back as that integer: the same 64 bits).
local CK_RNG = require "fp8._checkpoint"
function fp8.get_rng_state(...)
  require("fp8.opts").no_more("get_rng_state", "()", ...)
  local seed, counter = CK_RNG.rng_state()
  return seed .. counter
end

function fp8.set_rng_state(state, ...)
  require("fp8.opts").no_more("set_rng_state", "(state)", ...)
  if type(state) ~= "string" or #state ~= 32 or state:find("[^0-9a-fA-F]") then
    error(("set_rng_state: expected the string fp8.get_rng_state() returns (32 hex digits: the seed's 16, then the "
      .. "counter's 16; torch's ByteTensor state is not one), got %s"):format(type(state) == "string"
      and ("%q"):format(#state > 40 and state:sub(1, 40) .. "..." or state) or require("fp8.opts").got(state)), 2)
  end
  CK_RNG.set_rng_state(state:sub(1, 16):lower(), state:sub(17):lower())
end

function fp8.initial_seed(...)
  require("fp8.opts").no_more("initial_seed", "()", ...)
  local seed = CK_RNG.rng_state()
  return (math.tointeger(tonumber(seed:sub(1, 8), 16)) << 32) | math.tointeger(tonumber(seed:sub(9), 16))
end

-- get_math_random_state() / set_math_random_state(state): the same for Lua's own generator (math.random, Lua 5.4's
-- xoshiro256**), which Lua's library cannot read: Python's random.getstate()/setstate(), which Accelerate's
-- save_state keeps beside torch's generator, as acc:save_state keeps this beside fp8's. The state is a string of 64
-- hex digits (the generator's four 64-bit words); set_math_random_state takes it back exactly, and the draws that
-- follow are the ones that followed it. fp8.get_rng_state stays torch's (fp8's generator alone, as torch's leaves
-- Python's random out). The C side (lua/l_luarng.c) checks the layout of Lua's state before each read or write.
local LUARNG = require "fp8._luarng"
function fp8.get_math_random_state(...)
  require("fp8.opts").no_more("get_math_random_state", "()", ...)
  return LUARNG.state()
end

function fp8.set_math_random_state(state, ...)
  require("fp8.opts").no_more("set_math_random_state", "(state)", ...)
  if not LUARNG.is_state(state) then   -- (the test load_state and the C set_state make)
    error(("set_math_random_state: expected the 64 hex digits fp8.get_math_random_state() returns (xoshiro256**'s "
      .. "four 64-bit words, not all zero), got %s"):format(require("fp8.opts").shown(state)), 2)
  end
  LUARNG.set_state(state)
end

-- release_memory(...): Accelerate's utility. Lua frees what nothing refers to, so the objects are handed
-- back as nils to assign over the caller's names (`model, opt = fp8.release_memory(model, opt)`); then a
-- full garbage collection, and the GPU allocator's cached blocks go back to the driver.
function fp8.release_memory(...)
  local n = select("#", ...)
  collectgarbage("collect"); collectgarbage("collect")   -- the second pass frees what finalizers let go
  local ok, cuda = pcall(require, "fp8.cuda")
  if ok and cuda.is_available() then cuda.empty_cache() end
  return table.unpack({}, 1, n)
end

fp8.explain = require "fp8.explain"
fp8.data = require "fp8.data"; fp8.skip_first_batches = fp8.data.skip_first_batches  -- Accelerate's utility
fp8.progress = require "fp8.progress"; fp8.amp = require "fp8.amp"  -- data helper
fp8.kwargs = require "fp8.kwargs"  -- kwargs helper: the handlers (fp8.FP8RecipeKwargs, ...) and fp8.kwargs.resolve
for _, name in ipairs(fp8.kwargs.HANDLER_NAMES) do fp8[name] = fp8.kwargs[name] end
-- Accelerate's enums DistributedType, DDPCommunicationHookType and FP8BackendType: lua/fp8/enums.lua
do local enums = require "fp8.enums"
  fp8.DistributedType, fp8.DDPCommunicationHookType = enums.DistributedType, enums.DDPCommunicationHookType
  fp8.FP8BackendType = enums.FP8BackendType end
-- Accelerate's is_*_available for the FP8 backends: fp8lab implements all three recipes itself, so each is there
function fp8.is_transformer_engine_available() return true end
function fp8.is_msamp_available() return true end
function fp8.is_torchao_available() return true end
function fp8.is_cuda_available()
  local ok, cuda = pcall(require, "fp8.cuda")
  return ok and cuda.is_available() == true
end
-- Loaded on first use: the training modules, and the FP8 recipe API (fp8.Accelerator, convert_model, ...).
local LAZY_MODULES = { nn = "fp8.nn", optim = "fp8.optim", recipes = "fp8.recipes", Accelerator = "fp8.accelerator",
  profiler = "fp8.profiler", plot = "fp8.plot", hist = "fp8.hist",
  GradientAccumulationPlugin = "fp8.accumulation_plugin",
  LocalSGD = "fp8.local_sgd", autograd = "fp8.autograd" }
-- fp8.ProjectConfiguration{...} (Accelerator's project_config=): lua/fp8/checkpointing.lua
function fp8.ProjectConfiguration(opts) return require("fp8.checkpointing").ProjectConfiguration(opts) end
-- fp8.load_checkpoint_in_model(model, path [, {strict=}]) (Accelerate's utility): lua/fp8/model_files.lua
function fp8.load_checkpoint_in_model(...) return require("fp8.model_files").load(...) end
-- fp8.find_executable_batch_size(fn [, {starting_batch_size=, reduce_batch_size_fn=}]) (Accelerate's utility):
-- lua/fp8/executable_batch_size.lua
function fp8.find_executable_batch_size(...)
  return require("fp8.executable_batch_size").find_executable_batch_size(...)
end
-- fp8.DataLoaderConfiguration{...} (Accelerator's dataloader_config=): lua/fp8/dataloader_config.lua
function fp8.DataLoaderConfiguration(...) return require("fp8.dataloader_config").new(...) end
local LAZY_RECIPES = { convert_model = "convert_model", has_fp8_layers = "has_fp8_layers",
  has_transformer_engine_layers = "has_fp8_layers", contextual_fp8_autocast = "contextual_fp8_autocast",
  apply_fp8_autowrap = "apply_fp8_autowrap", stats = "stats", fp8_autocast = "fp8_autocast",
  has_ao_layers = "has_ao_layers" }
-- Accelerate's names (from `accelerate` and `accelerate.utils`) that fp8lab has not got: reading one is an error
-- that says why and what to use, not a nil that fails later as "attempt to call a nil value". Other unknown names
-- stay nil (a script may test `if fp8.x then`).
local NO_FSDP = "fp8lab's parallelism is data parallel (DDP: fp8.Accelerator under several processes, "
  .. "docs/distributed.md); it shards no parameters, so "
local ACC_METHOD = "Accelerate's utility is a method of the Accelerator here: acc:"
local NOT_HERE = {
  FullyShardedDataParallelPlugin = NO_FSDP .. "FSDP is not supported",
  FullStateDictConfig = NO_FSDP .. "FSDP is not supported",
  DeepSpeedPlugin = NO_FSDP .. "DeepSpeed is not supported",
  DummyOptim = NO_FSDP .. "DeepSpeed is not supported (pass fp8.optim's optimizers to acc:prepare)",
  DummyScheduler = NO_FSDP .. "DeepSpeed is not supported (pass fp8.optim.lr_scheduler's schedulers to acc:prepare)",
  MegatronLMPlugin = NO_FSDP .. "Megatron-LM is not supported",
  TorchTensorParallelPlugin = NO_FSDP .. "tensor parallelism is not supported",
  ParallelismConfig = NO_FSDP .. "tensor, context and pipeline parallelism are not supported",
  AxoNNPlugin = NO_FSDP .. "AxoNN is not supported",
  TorchDynamoPlugin = "there is no compiler to configure (torch.compile's dynamo is PyTorch's); fp8lab runs its own "
    .. "kernels",
  DynamoBackend = "there is no compiler to configure (torch.compile's dynamo is PyTorch's)",
  BnbQuantizationConfig = "bitsandbytes quantization is not supported; fp8lab's quantization is its FP8 recipes "
    .. "(help(\"recipes\"))",
  init_empty_weights = "big-model loading (meta-device weights, dispatch across devices) is not supported; build "
    .. "the model and fp8.load_checkpoint_in_model(model, dir)",
  load_checkpoint_and_dispatch = "big-model loading (dispatch across devices) is not supported; use "
    .. "fp8.load_checkpoint_in_model(model, dir)",
  infer_auto_device_map = "big-model dispatch across devices is not supported",
  dispatch_model = "big-model dispatch across devices is not supported",
  notebook_launcher = "there are no notebooks to launch from; start processes with `fp8lab launch --num_processes N "
    .. "script.lua` or mpirun (docs/cli.md)",
  PartialState = "the process state is the Accelerator's: acc.process_index, acc.num_processes, "
    .. "acc.local_process_index, acc:is_main_process(), acc:device() (fp8.Accelerator{...})",
  AcceleratorState = "the state is the Accelerator's: acc:state(), acc.mixed_precision, acc.distributed_type, ... "
    .. "(fp8.Accelerator{...})",
  GradientState = "the gradient state is the Accelerator's: acc.gradient_state (sync_gradients, "
    .. "end_of_dataloader, ...) and acc.sync_gradients",
  get_logger = "there is no logging module; acc:print(...) prints on the main process only (Accelerate's "
    .. "main_process_only logging)",
  LoggerType = "trackers are named by string: fp8.Accelerator{log_with=\"tensorboard\"} (or \"all\")",
  GeneralTracker = "a tracker of your own is a table with a name field and a log(values, step) method, passed as "
    .. "log_with= (Accelerate's GeneralTracker protocol; docs/lua-api.md)",
  TensorBoardTracker = "the TensorBoard tracker is log_with=\"tensorboard\"; acc:get_tracker(\"tensorboard\") "
    .. "returns it",
  extract_model_from_parallel = ACC_METHOD .. "unwrap_model(model)",
  gather_object = ACC_METHOD .. "gather_object(obj) (fp8.gather is torch's gather along a dim)",
  broadcast = ACC_METHOD .. "broadcast(t [, from_process])",
  broadcast_object_list = ACC_METHOD .. "broadcast_object_list(list [, from_process])",
  reduce = ACC_METHOD .. "reduce(t [, \"sum\"|\"mean\"])",
  pad_across_processes = ACC_METHOD .. "pad_across_processes(t [, dim, pad_index, pad_first])",
  wait_for_everyone = ACC_METHOD .. "wait_for_everyone()",
  send_to_device = "tensors move with t:to(acc:device()); batches of a prepared loader arrive on the Accelerator's "
    .. "device",
  -- (until 2026-12-06 this said acc:prepare starts every process's generator from the main process's state, which it
  -- never did; Accelerate's default synchronises only the samplers' generators, which the loaders' seed and epoch are)
  synchronize_rng_states = "prepared loaders shuffle by their seed and epoch, the same on every process (what "
    .. "Accelerate's synchronisation of the samplers' generators gives); fp8's generator (dropout, rand) is each "
    .. "process's own and acc:prepare leaves it alone: fp8.set_seed(seed) gives every process the same stream, "
    .. "fp8.set_seed(seed, true) each its own (seed + process index); save_state keeps each process's",
  clear_device_cache = ACC_METHOD .. "free_memory() (fp8.cuda.empty_cache() on a GPU)",
  write_basic_config = "the config file is written by `fp8lab config --default` (or `fp8lab config` asking; docs/config.md)",
  convert_outputs_to_fp32 = "a prepared model's forward already returns fp32 outputs under autocast (acc:prepare)",
  patch_environment = "environment variables are the process's: set them before starting fp8lab (FP8LAB_*, "
    .. "docs/config.md), or pass the settings to fp8.Accelerator{...}",
  debug_launcher = "start processes with `fp8lab launch --num_processes N script.lua` (docs/cli.md)",
  KwargsHandler = "kwargs handlers are made by their own names (fp8.TERecipeKwargs{...}, fp8.ProfileKwargs{...}, ...; "
    .. "help(\"KwargsHandler:to_kwargs\"))",
  RNGType = "fp8lab has one generator (fp8.manual_seed, fp8.set_seed), which save_state saves; there are no rng_types",
  ComputeEnvironment = "fp8lab runs on this machine's processes (fp8lab launch, mpirun, srun); there is no cloud "
    .. "compute environment to choose",
  PrecisionType = "mixed_precision is a string: fp8.Accelerator{mixed_precision=\"no\"|\"fp16\"|\"bf16\"|\"fp8\"}",
}
-- each public function written here refuses arguments past its parameters (fp8.opts.strict_functions)
require("fp8.opts").strict_functions(fp8)
setmetatable(fp8, { __index = function(t, k)
  local v
  if LAZY_MODULES[k] then v = require(LAZY_MODULES[k])
  elseif LAZY_RECIPES[k] then v = require("fp8.recipes")[LAZY_RECIPES[k]]
  elseif NOT_HERE[k] then error(("fp8.%s: not in fp8lab: %s"):format(k, NOT_HERE[k]), 2) end
  if v ~= nil then rawset(t, k, v) end
  return v
end })

return fp8
