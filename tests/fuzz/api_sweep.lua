-- api_sweep.lua — calls every entry of the live fp8 API with hostile arguments, each batch in a
-- child process, and reports any crash (signal, abort), hang or sanitizer report with a
-- `build/fp8lab -e '...'` reproducer. The API is enumerated from the live tables (the fp8 table,
-- every fp8.* module, methods and metamethods of one instance of each kind of object, each key a function reads
-- from an options table), so a function is swept the day it is added. docs/robustness.md describes it.
--
--   build/fp8lab tests/fuzz/api_sweep.lua [--quick] [--seed N] [--calls N] [--batch N]
--                [--timeout S] [--jobs N] [--list] [--filter P] [--messages] [--verbose] [--gc-stress] [--leaks]
--                [--from N] [--to N] [--values A-B]
--   --quick     a seeded random sample of --calls calls (default 50000) of the older values, and of the values added
--               since sweep 115 as many more as their share (--values below): what `make test` runs
--   (default)   the full sweep: every entry x every hostile value x every argument position
--   --list      print the enumerated entries (and the kinds of object, with the source that builds each) and exit
--   --filter P  only the entries whose label (as --list prints it) matches the Lua pattern P (given more than once:
--               any of them), every form and value of each: a whole sweep of what a change touched
--   --from N    start at batch N (the batches before it skipped): a long sweep stopped part way resumed where it
--               stopped, with the same --batch, --filter and --quick/--seed/--calls (its counts are the rest's)
--   --to N      stop after batch N (the batches after it skipped): with --from, exactly the batches N1..N2 of a sweep
--   --values A-B only the hostile values numbered A..B (VALUES' order): the values added since sweep 115 (their calls
--               follow the older values', so the old calls keep their numbers) over the whole API, as --list names them
--   --messages  also list calls whose error message names neither the function nor the argument
--   --gc-stress the children run Lua's collector in generational mode with the smallest minor step,
--               so collections happen inside C functions (finds C code that keeps a pointer into a
--               Lua value it no longer anchors, as save_file's name list once was)
--   --leaks     (a sanitizer build only) the children run with LeakSanitizer on (detect_leaks=1), and a batch that
--               leaks is cut in halves until the calls that leak are found, each reported with the leak's stack:
--               memory a call loses (a binding that allocates and then raises) grows without bound in a long session
-- Exit status 0 when no call crashed, hung or tripped a sanitizer.
local EXE = os.getenv("FP8LAB_EXE") or arg and arg[-1] or "build/fp8lab"
local SELF = arg and arg[0] or "tests/fuzz/api_sweep.lua"

-- ---- options ------------------------------------------------------------------------------
local opt = { quick = false, seed = 1, calls = 50000, batch = 2000, timeout = 5, jobs = 2, from = 1, to = math.huge,
              list = false,
              messages = false, verbose = false, child = nil, ["gc-stress"] = false, leaks = false, filter = {} }
do
  local i = 1
  while arg and arg[i] do
    local a = arg[i]
    local k = a:match("^%-%-([%w_%-]+)$")
    if k == "quick" or k == "list" or k == "messages" or k == "verbose" or k == "gc-stress" or k == "leaks" then opt[k] = true
    elseif k == "seed" or k == "calls" or k == "batch" or k == "timeout" or k == "jobs" or k == "from" or k == "to" then
      opt[k] = tonumber(arg[i + 1]) or error("--" .. k .. " needs a number"); i = i + 1
    elseif k == "child" then opt.child = arg[i + 1]; i = i + 1
    elseif k == "values" then opt.values = arg[i + 1] or error("--values needs a range a-b"); i = i + 1
    elseif k == "filter" then
      opt.filter[#opt.filter + 1] = arg[i + 1] or error("--filter needs a Lua pattern"); i = i + 1
    else error("api_sweep: unknown argument " .. tostring(a)) end
    i = i + 1
  end
end

-- ---- the deny-list ---------------------------------------------------------------------------
-- Entries never called, because their effect reaches outside the child's sandbox (the child runs
-- in a fresh temporary directory with HOME pointing there, stdin from /dev/null, so writing files
-- under relative paths is fine). Matched against the entry's path ("fp8.config.exec") or
-- "Kind:method". Keep each one commented.
local DENY = {
  ["fp8.config.sys.exec"] = "replaces the process image (execvp)",
  ["fp8.cli.main"] = "sub-commands launch mpirun, run the test suite, read the questionnaire from stdin",
  ["fp8.repl.run"] = "interactive prompt on stdin",
  ["fp8.config.sys.setenv"] = "changes the environment of later calls in the same child (false attributions)",
  ["fp8.manual_seed"] = nil,
}
-- Patterns of the same kind (Lua patterns on the path).
local DENY_PATTERNS = {
  { "^fp8%._?dist%.launch", "starts processes (mpirun)" },
  { "^fp8%._?dist%.init", "initialises MPI / NCCL for the whole child (one call, not a sweepable function)" },
  { "^fp8%._?dist%.abort", "ends the whole job on purpose (MPI_Abort, or exit without MPI): its message is any value" },
  { "^fp8%.cli%.", "command-line front: spawns processes (launch, test) and reads stdin (config)" },
  { "^fp8%.repl%.", "the interactive prompt (reads stdin, installs signal handlers)" },
}
-- Entries whose ordinary call takes a while, allowed this many times the per-call limit (a default argument builds
-- something big; under ASan with the collector stressed it nears the limit). Keep each one commented.
local SLOW = {
  ["fp8.nn.Transformer"] = 4,   -- no argument (or an empty options table) builds torch's default 44M-parameter model
}

-- The multiple of the per-call limit an entry is allowed (an option-key entry: its function's, sweep 111)
local function slow_of(e)
  local b = e.kind == "optkey" and e.base or e
  return b.kind == "func" and SLOW[b.expr] or 1
end

local function denied(path)
  path = path:gsub('^require%("(.-)"%)', "%1")
  if DENY[path] then return DENY[path] end
  for _, p in ipairs(DENY_PATTERNS) do if path:match(p[1]) then return p[2] end end
  return nil
end

-- ---- the hostile battery ---------------------------------------------------------------------
-- Each value is Lua source, evaluated fresh for every call (so a released tensor is fresh too).
local LYING = "setmetatable({}, {__len = function() return 1 << 62 end, __index = function() return 1 end})"
local VALUES = {
  "nil", "true", "false", "0", "-1", "1", "1.5", "0/0", "math.huge", "-math.huge", "2^53",
  "math.maxinteger", "math.mininteger", "-0.0", "1e308", "2^31", "2^62",
  "''", "'x'", "'cpu'", "'e4m3'", "'%s%n%d'", "('A'):rep(1 << 20)", "'nonexistent/dir/file'",
  "{}", "{{}}", "{{{{{{{{{{}}}}}}}}}}", "{1, 2, 3}", "{-1}", "{0}", "{2^62, 2^62}", "{math.maxinteger}",
  "{1e6, 1e6}", "{0/0}", "{'a', 'b'}", "{x = 1}",
  LYING,
  "setmetatable({}, {__index = function() error('hostile __index') end, __len = function() return -1 end})",
  -- proxy lists whose elements exist only while read (a full collection before each): a C function that keeps
  -- pointers to them must not read through the proxy (it would use what the collector freed)
  "setmetatable({}, {__len = function() return 2 end, __index = function(_, i) if math.type(i) == 'integer' and i >= 1 and i <= 2 then collectgarbage(); return fp8.ones{2, 3} end end})",
  "setmetatable({}, {__len = function() return 2 end, __index = function(_, i) if math.type(i) == 'integer' and i >= 1 and i <= 2 then collectgarbage(); return 'name' .. i end end})",
  "function() end", "coroutine.create(function() end)", "io.stdout",
  "fp8.ones{2, 3}", "fp8.ones{2, 3}:quantize('e4m3')", "fp8.ones({2, 3}, 'bf16')", "fp8.zeros{0}",
  "fp8.zeros{0, 3}", "fp8.tensor(1)", "fp8.ones{3, 2, 1, 1}", "fp8.arange(5)",
  "(function() local t = fp8.ones{2}; t:free(); return t end)()",
  "fp8.ones{1}:expand{2^62, 2}", "fp8.ones{2, 3}:quantize('e5m2', {axis = 1})", "fp8.ones{2, 3}:requires_grad(true)",
  "fp8.nn.Linear(3, 2)", "fp8.ones{1}:expand{4, 3}",
  -- values that reach the object under test (O) and the call's tensor argument (T) while the call runs: a
  -- metamethod (__index, __len, __close) or callback that frees them or collects, and a finalizer that frees them
  -- during a collection inside the call (RELEASE, GC_DURING: the helpers below). A binding that keeps a pointer to
  -- O or T across Lua code it calls must not use what the release freed (the t:free() class of 2026-12-01).
  "setmetatable({}, {__index = function() RELEASE() end, __len = function() RELEASE(); return 2 end, __close = function() RELEASE() end})",
  "setmetatable({}, {__index = function() collectgarbage() end, __len = function() collectgarbage(); return 2 end, __close = function() collectgarbage() end})",
  "function() RELEASE() end", "function() collectgarbage(); collectgarbage() end",
  "GC_DURING(2)", "GC_DURING(fp8.ones{2, 3})", "GC_DURING({})",
  -- (stop 97) state strings: hex of the wrong length, of the right length but all zeros, in capitals, with a NUL or a
  -- non-hex digit inside, and the real states of fp8's generator and Lua's math.random (a setter's whole path)
  "('0'):rep(64)", "('0'):rep(32)", "('f'):rep(63)", "('f'):rep(65)", "('F'):rep(64)", "('g'):rep(64)",
  "('0'):rep(31) .. '\\0' .. ('1'):rep(32)", "fp8.get_math_random_state()", "fp8.get_rng_state()",
  -- tensors of -0, NaN and both infinities (fp32 and bf16), views that are not contiguous (a transpose, a narrow of
  -- the last dim), and a [2, 3] view of a 2^40-row expand (a huge tensor's view, stride 0)
  "fp8.tensor{{-0.0, 0/0, math.huge}, {-math.huge, 1, -1}}",
  "fp8.tensor{{-0.0, 0/0, math.huge}, {-math.huge, 1, -1}}:to('bf16')",
  "fp8.arange(6):view{3, 2}:t()", "fp8.arange(8):view{2, 4}:narrow(2, 2, 3)",
  "fp8.ones{1}:expand{2^40, 3}:narrow(1, 2^40 - 1, 2)",
  -- (sweep 108) magnitudes at the range's ends, where sums of squares or powers leave it (the norms' rescue): fp32
  -- rows of 1e20 and -3e38 beside 1e-30, a subnormal and 0 (also requiring grad: a hostile self's backward), fp16 near
  -- 65504 and its subnormals, bf16 near 3.39e38 and its subnormals
  "fp8.tensor{{1e20, 1e20, -3e38}, {1e-30, -1e-45, 0}}",
  "fp8.tensor{{1e20, 1e20, -3e38}, {1e-30, -1e-45, 0}}:requires_grad(true)",
  "fp8.tensor{{60000, -65504, 6e-8}, {1e-7, 0, -1}}:to('fp16')",
  "fp8.tensor{{3e38, -3.38e38, 1e-38}, {9.2e-41, 0, -1}}:to('bf16')",
}
-- (sweep 115) the metamethods that found defects by hand in stop 100 and no value above had: `__pairs` that never
-- ends or raises, a lying object whose every key is a function (strict_arity's object check takes it since sweep 114),
-- `__len` that raises or answers NaN, a float past int64 or math.mininteger, `__tostring` that raises or answers a
-- table, `__name` that is not a string, `__eq`/`__lt`/`__le` that raise, and a userdata of another kind (a tensor's
-- hook handle). Appended after the older values and their calls (N_VALUES0, below), so the old calls keep their
-- numbers, batches and --quick sample.
local N_VALUES0 = #VALUES
for _, v in ipairs {
  "setmetatable({}, {__pairs = function(t) return function() return 1, 1 end, t, nil end, __len = function() return 2 end})",
  "setmetatable({1, 2}, {__pairs = function() error('hostile __pairs') end})",
  "setmetatable({}, {__index = function() return function() return 1 end end, __len = function() return 3 end})",
  "setmetatable({1, 2}, {__len = function() error('hostile __len') end})",
  "setmetatable({1, 2}, {__len = function() return 0/0 end})",
  "setmetatable({1, 2}, {__len = function() return 2^63 end, __index = function() return 1 end})",
  "setmetatable({1, 2}, {__len = function() return math.mininteger end})",
  "setmetatable({}, {__tostring = function() error('hostile __tostring') end, __name = 'hostile'})",
  "setmetatable({}, {__tostring = function() return {} end, __name = {}})",
  "setmetatable({1}, {__eq = function() error('hostile __eq') end, __lt = function() error('hostile __lt') end, __le = function() error('hostile __le') end})",
  "fp8.ones{2}:requires_grad(true):register_hook(function() end)",
  -- (sweep 118) the forms stops 101-104 opened, which no value above reached with valid contents: index tensors of
  -- whole positions smaller than the call's [2, 3] tensor in the other dims (gather/scatter's smaller index sizes),
  -- one larger there, a smaller one expanded (stride 0), a 0-d position and an empty index of another shape (the
  -- index ops' 0-d and empty forms), a 4-d channels_last view (the dense permuted layouts kept through the ops and
  -- the backward), a tensor cast per index along its last dim (fp8.hist's axis= read), a 0-d bf16 tensor
  "fp8.tensor{{1, 0}}", "fp8.tensor{{0, 1, 0, 1}}", "fp8.tensor{{1}}:expand{1, 2}", "fp8.tensor(0)", "fp8.zeros{0, 5}",
  "fp8.ones{1, 2, 2, 3}:permute{1, 4, 2, 3}", "fp8.ones{2, 3}:quantize('e4m3', {axis = 2})", "fp8.tensor(2):to('bf16')",
  -- (sweep 119) the channels_last forms stop 104's NHWC norms, poolings and dropout take, with sizes value 99 had not:
  -- odd sizes and distinct values ([2, 3, 5, 7]), C = 1 (torch reads it as contiguous), N = 0, bf16 requiring grad
  -- through the permute (a non-leaf view, N = 1), a channels_last view that is not dense (a narrow of W), and for
  -- dot's own node (x:_dot, stop 104) a 1-d vector requiring grad
  "fp8.arange(210):view{2, 5, 7, 3}:permute{1, 4, 2, 3}", "fp8.ones{2, 3, 3, 1}:permute{1, 4, 2, 3}",
  "fp8.zeros{0, 3, 3, 2}:permute{1, 4, 2, 3}", "fp8.ones({1, 3, 3, 2}, 'bf16'):requires_grad(true):permute{1, 4, 2, 3}",
  "fp8.arange(96):view{2, 4, 4, 3}:permute{1, 4, 2, 3}:narrow(4, 2, 3)", "fp8.arange(5):requires_grad(true)",
} do VALUES[#VALUES + 1] = v end
-- Globals the values above use, defined in the children's environment (and in a reproducer that needs them). O
-- and T are the call's object and tensor argument. RELEASE frees them (t:free(), or close(); a table's tensor
-- fields too), only while the call runs (IN_CALL), so each call starts with live ones, and once at a time (O.free
-- can reach V's __index again). No comments inside HELPERS: a reproducer puts it on one line. GC_DURING(v) returns v and
-- arms a finalizer that runs RELEASE at each collection, with the collector in generational mode at its smallest
-- step so that collections happen inside the call (the child disarms it and restores the collector after it).
local HELPERS = [[
function RELEASE()
  if not IN_CALL or RELEASING then return end
  RELEASING = true
  local function rel(v)
    if type(v) ~= "table" and type(v) ~= "userdata" then return end
    local ok, f = pcall(function() return v.free end)
    if ok and type(f) == "function" then pcall(f, v); return end
    ok, f = pcall(function() return v.close end)
    if ok and type(f) == "function" then pcall(f, v) end
  end
  for _, x in pairs { O or false, T or false } do
    rel(x)
    if type(x) == "table" then for _, v in next, x do if type(v) == "userdata" then rel(v) end end end
  end
  RELEASING = false
end
function GC_DURING(v)
  GC_ARMED = true
  local function arm() setmetatable({}, { __gc = function() if GC_ARMED then RELEASE(); arm() end end }) end
  arm()
  collectgarbage("generational", 1, 1)
  return v
end
function BACK(r, ...)
  if fp8.is_tensor(r) and r:requires_grad() then r:sum():backward() end
  return r, ...
end
]]
local HELPER_NAMES = { "RELEASE", "GC_DURING", "BACK" }

-- Instances, one of each kind we can build: Lua source; the instance is the expression's value.
-- Kinds reached only as results (e.g. a tensor's grad_fn) are found automatically too.
-- (sweep 110) a module kind's forward after one of its fields was written (the fields' uses, below): called on an
-- input of its shape, contiguous, as a channels-last view, and with a backward
local FORWARD_USES = {
  Conv2d = { "O(fp8.randn{2, 16, 7, 7})", "O(fp8.randn{2, 7, 7, 16}:permute{1, 4, 2, 3})",
             "BACK(O(fp8.randn{3, 16, 5, 6}:requires_grad(true)))" },
  Conv1d = { "O(fp8.randn{2, 4, 9})", "O(fp8.randn{2, 9, 4}:permute{1, 3, 2})",
             "BACK(O(fp8.randn{3, 4, 5}:requires_grad(true)))" },
}
local SEEDS = {
  "fp8.ones{2, 3}", "fp8.ones{2, 3}:quantize('e4m3')", "fp8.zeros{0}", "fp8.tensor(1)",
  "fp8.ones({2, 3}, 'bf16')", "fp8.ones{2, 3}:requires_grad(true):mul(2)",
  "fp8.nn.Linear(3, 2)", "fp8.nn.LayerNorm(3)", "fp8.nn.GELU()", "fp8.nn.ReLU()", "fp8.nn.Dropout(0.1)",
  "fp8.nn.Embedding(5, 3)", "fp8.nn.Sequential(fp8.nn.Linear(3, 3), fp8.nn.ReLU())",
  "fp8.nn.Module()",
  "fp8.nn.CausalSelfAttention{n_embd = 4, n_head = 2}",
  -- (sweep 110) the convs, whose fields (stride, padding, dilation, groups, padding_mode, weight, bias) written by
  -- hand reach conv2d's geometry checks and oneDNN's direct convolution (core/cpu/cpu_conv.c) through a forward
  -- (sweep 112) Conv2d with 8 channels a group: 4 (2 a group) took the columns (oneDNN's GEMM-based kernels,
  -- declined), so neither the direct forward nor stop 99's backward primitives were reached; 16 in 2 groups run
  -- oneDNN's jit forward, backward-data and backward-weights kernels (ONEDNN_VERBOSE=1 shows them)
  "fp8.nn.Conv2d(16, 16, 3, {padding = 1, groups = 2})", "fp8.nn.Conv1d(4, 6, 3, {padding = 1, groups = 2})",
  "fp8.nn.TransformerBlock{n_embd = 4, n_head = 2}",
  "fp8.nn.GPT{vocab_size = 5, block_size = 4, n_layer = 1, n_head = 2, n_embd = 4}",
  "fp8.recipes.FP8Linear(3, 2, true, {backend = 'te'})", "fp8.recipes.FP8LayerNorm(3)",
  "fp8.convert_model(fp8.nn.Sequential(fp8.nn.Linear(16, 16)), {recipe = {backend = 'ao'}})",
  "fp8.optim.SGD(fp8.nn.Linear(3, 2):parameters(), {lr = 0.1})",
  "fp8.optim.AdamW(fp8.nn.Linear(3, 2):parameters(), {lr = 0.1})",
  "fp8.optim.lr_scheduler.StepLR(fp8.optim.SGD(fp8.nn.Linear(3, 2):parameters(), {lr = 0.1}), {step_size = 1})",
  "fp8.optim.lr_scheduler.CosineAnnealingLR(fp8.optim.SGD(fp8.nn.Linear(3, 2):parameters(), {lr = 0.1}), {T_max = 2})",
  "fp8.optim.lr_scheduler.LambdaLR(fp8.optim.SGD(fp8.nn.Linear(3, 2):parameters(), {lr = 0.1}), function() return 1 end)",
  "fp8.data.TextDataset{text = 'hello world hello', block_size = 4}",
  "fp8.data.FashionMNIST{root = os.getenv('FP8LAB_SWEEP_DATA') or '.', train = false}",
  "fp8.data.DataLoader{fp8.data.TextDataset{text = 'hello world hello', block_size = 4}, batch_size = 2}",
  "fp8.skip_first_batches(fp8.data.DataLoader{fp8.data.TextDataset{text = 'hello world hello', block_size = 4}, batch_size = 2}, 1)",
  "fp8.amp.GradScaler()", "fp8.progress(3)", "fp8.Accelerator()", "fp8.Accelerator{mixed_precision = 'fp8'}",
  "fp8.profiler.profile()",
  "fp8.FP8RecipeKwargs{}", "fp8.TERecipeKwargs{}", "fp8.AORecipeKwargs{}", "fp8.MSAMPRecipeKwargs{}",
  "fp8.AutocastKwargs{}", "fp8.GradScalerKwargs{}", "fp8.DistributedDataParallelKwargs{}",
  "fp8.InitProcessGroupKwargs{}", "fp8.ProfileKwargs{}",
  "fp8.config.load_default()",
  "fp8.recipes.FP8Linear(16, 16, true, {backend = 'ao'})", "fp8.recipes.FP8Linear(16, 16, true, {backend = 'msamp', opt_level = 'O2'})",
  "fp8.Accelerator():prepare(fp8.nn.Linear(16, 16))",
  "require('fp8.optim.msamp_adamw')(fp8.nn.Linear(3, 2):parameters(), {lr = 0.1})",
  "fp8.ones{4, 3}:quantize('e4m3', {axis = 1})",
}

-- Tiny Fashion-MNIST IDX files in dir, so FashionMNIST{root=dir} builds (FP8LAB_SWEEP_DATA).
local function write_idx(dir)
  local function be32(n) return string.pack(">I4", n) end
  local f = io.open(dir .. "/t10k-images-idx3-ubyte", "wb")
  if not f then return end
  f:write(be32(0x803), be32(4), be32(28), be32(28), ("\7"):rep(4 * 28 * 28)); f:close()
  f = io.open(dir .. "/t10k-labels-idx1-ubyte", "wb")
  f:write(be32(0x801), be32(4), "\0\1\2\3"); f:close()
end

local function sh(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- ---- enumeration ----------------------------------------------------------------------------
-- Module names from the source tree (lua/fp8/**.lua -> fp8.a.b), so new modules are loaded too.
local MODULES
local function module_names()
  if MODULES then return MODULES end
  local names = {}
  local given = os.getenv("FP8LAB_SWEEP_MODULES")   -- the parent's list, for children (run elsewhere)
  if given then
    for m in given:gmatch("%S+") do names[#names + 1] = m end
    MODULES = names
    return names
  end
  local p = io.popen("find lua/fp8 -name '*.lua' 2>/dev/null | sort")
  if p then
    for path in p:lines() do
      local m = path:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
      names[#names + 1] = m
    end
    p:close()
  end
  for _, m in ipairs { "fp8.core", "fp8._data", "fp8._nn", "fp8._optim", "fp8._fp8_layer", "fp8._memory", "fp8.settings", "fp8._profiler", "fp8.cuda",
                       "fp8.config", "fp8._dist", "fp8._checkpoint" } do names[#names + 1] = m end
  -- (sweep 111) and every C module the host loaded that the lists above miss (fp8._fileio and fp8._luarng, made by
  -- luaL_requiref in l_fp8.c, were never swept: a module registered the day it is added is swept that day)
  local have, extra = {}, {}
  for _, m in ipairs(names) do have[m] = true end
  for m, v in pairs(package.loaded) do
    if type(m) == "string" and m:match("^fp8[._]") and not have[m] and type(v) == "table" then extra[#extra + 1] = m end
  end
  table.sort(extra)
  for _, m in ipairs(extra) do names[#names + 1] = m end
  MODULES = names
  return names
end

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do if type(k) == "string" then ks[#ks + 1] = k end end
  table.sort(ks)
  return ks
end

local function ident(k) return k:match("^[%a_][%w_]*$") ~= nil end
local function index_expr(base, k) return ident(k) and (base .. "." .. k) or (base .. "[" .. ("%q"):format(k) .. "]") end

-- Entries: { kind = "func", expr = path } | { kind = "method", inst = i, name = k }
--        | { kind = "op", inst = i, name = "__add" } | { kind = "field", inst = i, name = k }
local BINOPS = { __add = "+", __sub = "-", __mul = "*", __div = "/", __mod = "%", __pow = "^", __idiv = "//",
                 __band = "&", __bor = "|", __bxor = "~", __shl = "<<", __shr = ">>", __concat = "..",
                 __eq = "==", __lt = "<", __le = "<=" }

-- The tables whose functions are v's methods: v itself (a table), then its __index chain of tables (a C __index
-- function: its upvalue table, if any, and its metatable's own functions, which O[k] may answer)
local function method_chain(v)
  local mt = getmetatable(v)
  local idx = type(mt) == "table" and rawget(mt, "__index")
  local chain, guard = {}, 0
  if type(v) == "table" then chain[#chain + 1] = v end
  while idx and guard < 10 do
    guard = guard + 1
    if type(idx) == "table" then
      chain[#chain + 1] = idx
      local m2 = getmetatable(idx)
      idx = m2 and rawget(m2, "__index")
    elseif type(idx) == "function" then
      -- (its metatable's own functions, which O[k] may give: a handle's remove)
      if idx == rawget(mt, "__index") then chain[#chain + 1] = mt end
      local n, up = 1, nil
      repeat
        local name, val = debug.getupvalue(idx, n)
        if type(val) == "table" and name ~= "_ENV" and val ~= _G then up = val end
        n = n + 1
      until name == nil or up
      idx = up
    else idx = nil end
  end
  return chain
end

-- ---- calls ----------------------------------------------------------------------------------
-- The call body with O (the instance) and V (the hostile value); forms per entry kind.
-- T, the tensor argument, is built before V (T_SRC), so V can reach it.
-- The last form of a function or method (since stop 97) takes T requiring grad (a function's first argument, a tensor
-- method's self, any other method's first argument) and runs a backward through a result that requires grad (BACK):
-- the backward kernels (softmax along a strided dim, rms_norm, gather, hypot, ...) were reached by no hostile value.
local T_GRAD = "fp8.tensor{{0.5, -1, 2}, {3, -0.25, 1}}:requires_grad(true)"
local function T_SRC(e, form)
  if form and form:find("BACK(", 1, true) then return T_GRAD end
  local k = e.kind == "optkey" and e.base.kind or e.kind
  return k == "method" and "fp8.ones{1, 2}" or "fp8.ones{2, 3}"
end
-- (sweep 111) the arguments before an options table whose keys the probe records (T: the call's tensor argument)
local OPT_PREFIXES = { "", "T, ", "2, ", "3, 2, ", "T, 'e4m3', ", "'e4m3', ", "4, 6, 3, ", "T, 1, " }
local function enumerate()
  local fp8 = _G.fp8 or require "fp8"
  local entries, seen_fn, insts, inst_by_mt = {}, {}, {}, {}
  for _, m in ipairs(module_names()) do pcall(require, m) end
  -- lazily loaded members of fp8 (nn, optim, recipes, ...) are loaded by indexing them
  for _, k in ipairs { "nn", "optim", "recipes", "Accelerator", "profiler" } do local _ = fp8[k] end

  local function walk(t, path, depth, visited)
    if visited[t] or depth > 4 then return end
    visited[t] = true
    for _, k in ipairs(sorted_keys(t)) do
      local v = rawget(t, k)
      local p = index_expr(path, k)
      if type(v) == "function" and not seen_fn[v] then
        seen_fn[v] = true
        -- a Lua function whose first parameter is self is a method reached through its class table
        local is_method = debug.getlocal(v, 1) == "self"
        if not denied(p) then entries[#entries + 1] = { kind = "func", expr = p, method = is_method } end
      elseif type(v) == "table" and k ~= "__index" and not k:match("^_G$") then
        local mt = getmetatable(v)
        if mt and type(mt.__call) == "function" and not seen_fn[v] and not denied(p) then
          seen_fn[v] = true
          entries[#entries + 1] = { kind = "func", expr = p }   -- a callable class table
        end
        walk(v, p, depth + 1, visited)
      end
    end
  end
  local visited = {}
  walk(fp8, "fp8", 0, visited)
  for _, m in ipairs(module_names()) do
    local mod = package.loaded[m]
    if type(mod) == "table" then walk(mod, ("require(%q)"):format(m), 1, visited)
    elseif type(mod) == "function" and not seen_fn[mod] then
      seen_fn[mod] = true
      local p = ("require(%q)"):format(m)
      if not denied(m) then entries[#entries + 1] = { kind = "func", expr = p } end
    end
  end

  -- one instance per kind (metatable) from the seeds
  local function add_inst(src, v)
    local mt = getmetatable(v)
    if (type(v) ~= "table" and type(v) ~= "userdata") or mt == nil then return end
    if inst_by_mt[mt] then   -- another source of a kind already found (a tensor that requires grad): the probes' too
      local alts = insts[inst_by_mt[mt]].alts
      alts[#alts + 1] = src
      return
    end
    local name = rawget(mt, "__name") or (type(mt.__index) == "table" and rawget(mt.__index, "__name"))
      or src:match("^[%w_.]+") or ("obj" .. #insts + 1)
    if name == "FILE*" then return end   -- Lua's io library, not ours (and closing stderr hides reports)
    insts[#insts + 1] = { src = src, name = tostring(name), value = v, alts = {} }
    inst_by_mt[mt] = #insts
  end
  for _, src in ipairs(SEEDS) do
    local f = load("return " .. src, "=seed", "t", setmetatable({ fp8 = fp8 }, { __index = _G }))
    local ok, v = pcall(f)
    if ok then add_inst(src, v) elseif opt.verbose then io.stderr:write("seed skipped: ", src, ": ", tostring(v), "\n") end
  end
  -- kinds made by a constructor no seed calls (a class defined local to its file, as ReduceLROnPlateau's, whose
  -- methods no table walked above holds): every CamelCase function entry (a class, by the house's naming) is called
  -- with each of a few ordinary argument lists, and its first result of a new kind whose methods reach a function
  -- not reached yet is added, so such a class is swept the day it is added, without a seed written for it
  local reached = {}
  for _, inst in ipairs(insts) do
    local mt = getmetatable(inst.value)
    local idx = type(mt) == "table" and rawget(mt, "__index")
    for _, t in ipairs { type(inst.value) == "table" and inst.value or false, type(idx) == "table" and idx or false } do
      if t then for _, v in pairs(t) do if type(v) == "function" then reached[v] = true end end end
    end
  end
  -- the table of v's methods: its __index table, or (an __index function) its metatable's own functions
  local function method_table(v)
    local mt = getmetatable(v)
    local idx = type(mt) == "table" and rawget(mt, "__index")
    if type(idx) == "table" then return idx end
    return type(idx) == "function" and mt or nil
  end
  local function new_methods(v)
    local mt = getmetatable(v)
    local idx = method_table(v)
    if not idx or inst_by_mt[mt] then return false end
    for k, f in pairs(idx) do
      if type(k) == "string" and not k:match("^_") and type(f) == "function" and not reached[f] and not seen_fn[f] then
        local ok, real = pcall(function() return v[k] end)
        if ok and real == f then return true end
      end
    end
    return false
  end
  -- The parent probes (in its sandbox directory, below: a constructor may write files, SummaryWriter() its runs/)
  -- and hands the children what it found (FP8LAB_SWEEP_PROBED), so each child builds only those.
  local probed = {}
  local probe_env = setmetatable({ fp8 = fp8 }, { __index = _G })
  -- probe(src): src's value, added as a new kind when it is an object with methods no kind reached; whether it was
  local function probe(src)
    local ok, v = pcall(load("return " .. src, "=probe", "t", probe_env))
    if not (ok and (type(v) == "table" or type(v) == "userdata") and new_methods(v)) then return false end
    add_inst(src, v)
    probed[#probed + 1] = src
    for _, f in pairs(method_table(v)) do
      if type(f) == "function" then reached[f] = true end
    end
    return true
  end
  local given = os.getenv("FP8LAB_SWEEP_PROBED")
  if given then
    for src in given:gmatch("[^\n]+") do
      local ok, v = pcall(load("return " .. src, "=probe", "t", probe_env))
      if ok then add_inst(src, v) end
      probed[#probed + 1] = src
    end
  else
    local OPT = "fp8.optim.SGD(fp8.nn.Linear(3, 2):parameters(), {lr = 0.1})"
    local CTOR_ARGS = { "", "{}", OPT, OPT .. ", {}", "fp8.nn.Linear(3, 2)", "3", "3, 2" }
    local n_entries = #entries
    for i = 1, n_entries do
      local e = entries[i]
      local last = e.kind == "func" and e.expr:match("%.([%w_]+)$")
      if last and last:match("^%u%l") and not SLOW[e.expr] and not e.expr:find("._", 1, true) then
        for _, a in ipairs(CTOR_ARGS) do
          if probe(e.expr .. "(" .. a .. ")") then break end
        end
      end
    end
    -- (stop 97) the handles a register_* method returns (torch's RemovableHandle: a tensor's register_hook, a
    -- module's forward hooks, ...), whose remove a hostile value never reached: every register_* method of every
    -- kind, on each source of the kind (a tensor that requires grad, for a tensor's hooks), given a function
    for ii = 1, #insts do
      local inst = insts[ii]
      local names = {}
      for _, t in ipairs(method_chain(inst.value)) do
        for k, f in pairs(t) do if type(k) == "string" and type(f) == "function" then names[k] = true end end
      end
      for _, k in ipairs(sorted_keys(names)) do
        if k:match("^register_") and not denied(inst.name .. ":" .. k) then
          for _, from in ipairs { inst.src, table.unpack(inst.alts) } do
            if probe("(" .. from .. "):" .. k .. "(function() end)") then break end
          end
        end
      end
    end
  end
  -- kinds reachable as fields of the seeds (grad_fn, param groups, parameters, ...) are added too
  local n0 = #insts
  for i = 1, n0 do
    local inst = insts[i]
    if type(inst.value) == "table" then
      for _, k in ipairs(sorted_keys(inst.value)) do
        local v = rawget(inst.value, k)
        if (type(v) == "table" or type(v) == "userdata") and getmetatable(v) then add_inst(index_expr("(" .. inst.src .. ")", k), v) end
      end
    end
    if type(inst.value) == "userdata" then
      local ok, v = pcall(function() return inst.value.grad_fn end)
      if ok and v ~= nil then add_inst("(" .. inst.src .. ").grad_fn", v) end
    end
  end

  for ii, inst in ipairs(insts) do
    local mt = getmetatable(inst.value)
    local methods, fields = {}, {}
    -- methods: the __index chain of tables (a C __index function: its upvalue table, if any)
    for _, t in ipairs(method_chain(inst.value)) do
      for _, k in ipairs(sorted_keys(t)) do
        local v = rawget(t, k)
        local okm, real = pcall(function() return inst.value[k] end)   -- only what O[k] really gives
        if type(v) == "function" and not k:match("^__") and okm and real == v then methods[k] = true
        elseif t == inst.value and type(v) ~= "function" then fields[k] = true end
      end
    end
    local is_tensor = fp8.is_tensor(inst.value)
    for _, k in ipairs(sorted_keys(methods)) do
      local path = inst.name .. ":" .. k
      if not denied(path) then entries[#entries + 1] = { kind = "method", inst = ii, name = k, tensor = is_tensor } end
    end
    -- (stop 97) a field written by hand is also read back by the object's own use of it: its step (with no argument,
    -- and with 1: a scheduler's metric or epoch) and its state_dict, the methods of torch's stateful objects
    -- (optimizers, schedulers, scalers) that read their settings; a written field was only shown (tostring) before
    local uses = {}
    for _, u in ipairs { { "step", "" }, { "step", "1" }, { "state_dict", "" } } do
      if methods[u[1]] then uses[#uses + 1] = ("O:%s(%s)"):format(u[1], u[2]) end
    end
    -- (sweep 110) a module's field written by hand is read by its forward (FORWARD_USES: a conv's geometry fields
    -- reach the core through it)
    for _, u in ipairs(FORWARD_USES[inst.name] or {}) do uses[#uses + 1] = u end
    for _, k in ipairs(sorted_keys(fields)) do
      entries[#entries + 1] = { kind = "field", inst = ii, name = k, uses = uses }
    end
    for _, k in ipairs(sorted_keys(mt)) do
      if type(rawget(mt, k)) == "function" and k:match("^__") then entries[#entries + 1] = { kind = "op", inst = ii, name = k } end
    end
    -- the operators every object meets even without a metamethod
    for _, k in ipairs { "__index", "__newindex", "__len", "__tostring" } do
      if rawget(mt, k) == nil then entries[#entries + 1] = { kind = "op", inst = ii, name = k } end
    end
    -- (sweep 108) each key of its state_dict() (and of the first entry of a list of tables in it: an optimizer's
    -- param_groups[1]) edited before load_state_dict, as a checkpoint edited by hand: the loader's checks
    if methods.state_dict and methods.load_state_dict then
      local ok, sd = pcall(function() return inst.value:state_dict() end)
      if ok and type(sd) == "table" then
        for _, k in ipairs(sorted_keys(sd)) do
          local path = "[" .. ("%q"):format(k) .. "]"
          entries[#entries + 1] = { kind = "sdkey", inst = ii, name = k, path = path, step = methods.step }
          local v = rawget(sd, k)
          if type(v) == "table" and type(rawget(v, 1)) == "table" then
            for _, k2 in ipairs(sorted_keys(rawget(v, 1))) do
              entries[#entries + 1] = { kind = "sdkey", inst = ii, name = k2,
                                        path = path .. "[1][" .. ("%q"):format(k2) .. "]", step = methods.step }
            end
          end
        end
      end
    end
  end
  -- (sweep 108) an object held by another (a scheduler inside a SequentialLR, at step 0 or entered at a milestone,
  -- or a ChainedScheduler): its fields written by hand are read back by the holder's step and state_dict, not its
  -- own. Each source of each kind that a holder takes is a receiver of its own (M is the held object; the holder is
  -- the global HOLDER of the call's environment, made with O)
  local HOLDERS = {
    { "in SequentialLR at step 0", "fp8.optim.lr_scheduler.SequentialLR(M.optimizer, "
      .. "{M, fp8.optim.lr_scheduler.ConstantLR(M.optimizer, {factor = 0.5})}, {1})" },
    { "in SequentialLR past a milestone", "fp8.optim.lr_scheduler.SequentialLR(M.optimizer, "
      .. "{fp8.optim.lr_scheduler.ConstantLR(M.optimizer, {factor = 0.5}), M}, {1})" },
    { "in ChainedScheduler", "fp8.optim.lr_scheduler.ChainedScheduler({M, "
      .. "fp8.optim.lr_scheduler.ExponentialLR(M.optimizer, {gamma = 0.9})})" },
  }
  local nk = #insts
  for ii = 1, nk do
    local inst = insts[ii]
    for _, from in ipairs { inst.src, table.unpack(inst.alts) } do
      for _, h in ipairs(HOLDERS) do
        local src = ("(function() local M = %s; HOLDER = %s; return M end)()"):format(from, h[2])
        local ok, v = pcall(load("return " .. src, "=holder", "t", setmetatable({ fp8 = fp8 }, { __index = _G })))
        if ok and type(v) == "table" then
          insts[#insts + 1] = { src = src, value = v, alts = {},
            name = ("%s (%s) %s"):format(inst.name, from:match("^[%w_.]+") or from, h[1]) }
          for _, k in ipairs(sorted_keys(v)) do
            if type(rawget(v, k)) ~= "function" then
              entries[#entries + 1] = { kind = "field", inst = #insts, name = k,
                                        uses = { "HOLDER:step()", "HOLDER:state_dict()" } }
            end
          end
        end
      end
    end
  end
  -- (sweep 111) an options table with one key hostile: the string keys each function and method reads from a table
  -- given after a few ordinary argument lists (OPT_PREFIXES: an options table first, after a tensor, after sizes, ...),
  -- found by calling it once with each prefix and a table whose __index records the keys asked for; each key is a new
  -- entry whose form passes {[key] = V} there. The battery's tables ({x = 1}, the lying list) never set a key a
  -- function reads, so a binding that allocates, then reads its options and raises was reached only with every option
  -- absent. The parent probes (a method on a fresh instance of its kind, under an instruction budget) and hands the
  -- children the keys (FP8LAB_SWEEP_OPTKEYS; given in the sweep's environment, the probe is skipped)
  local optkeys = {}
  local given_keys = os.getenv("FP8LAB_SWEEP_OPTKEYS")
  if given_keys then
    for ei, pi, k in given_keys:gmatch("(%d+) (%d+) ([^\n]+)") do
      optkeys[#optkeys + 1] = { tonumber(ei), tonumber(pi), k }
    end
  else
    local n_entries = #entries
    local env = setmetatable({ fp8 = fp8 }, { __index = _G })
    local print0, out0, stdout0 = print, io.output(), io.stdout   -- what the probed calls print goes nowhere
    local null = io.open("/dev/null", "w")
    print, io.stdout = function() end, null
    io.output(null)
    -- (stop 102) the library refuses an options table that is a proxy (a metatable with __index or __pairs), as the
    -- spy P below is: the Lua readers let it pass while the parent probes (fp8.opts.proxy_text answers nil), and where
    -- a C reader (lua/l_util.c's fl_lcheckopts) refuses it, its keys are read from its unknown-option message's
    -- "(valid: a, b)" for a plain table with a key no function takes
    local O_lib = require("fp8.opts")
    local proxy_text0 = O_lib.proxy_text
    O_lib.proxy_text = function() return nil end
    for ei = 1, n_entries do
      local e = entries[ei]
      if e.kind == "func" or e.kind == "method" then
        local seen = {}
        -- (a Lua method's first argument is its self, whose fields are entries already)
        for pi = e.method and 2 or 1, #OPT_PREFIXES do
          local order = {}
          local P = setmetatable({}, { __index = function(_, k)
            if type(k) == "string" and k:match("^[%a_][%w_]*$") and not k:match("^__") and not seen[k] then
              seen[k] = true; order[#order + 1] = k
            end
          end })
          local function probe(P)
            return pcall(function()
              local O = e.kind == "method" and load("return " .. insts[e.inst].src, "=optkey", "t", env)() or nil
              local f = e.kind == "func" and load("return " .. e.expr, "=optkey", "t", env)() or O[e.name]
              local T = load("return " .. T_SRC(e), "=optkey", "t", env)()
              local args = load("local T, P = ...; return " .. OPT_PREFIXES[pi] .. "P", "=optkey", "t", env)
              debug.sethook(function() error("api_sweep: probe budget", 2) end, "", 1000000)
              if O then f(O, args(T, P)) else f(args(T, P)) end
            end)
          end
          local ok, err = probe(P)
          debug.sethook()
          if not ok and tostring(err):find("options must be a plain table {name = value}, got a table whose metatable", 1,
                                          true) then
            local _, err2 = probe({ api_sweep_no_such_option = true })
            debug.sethook()
            local valid = tostring(err2):match("unknown option 'api_sweep_no_such_option'.-%(valid: ([^)]*)%)")
            for k in (valid or ""):gmatch("[%a_][%w_]*") do
              if not seen[k] then seen[k] = true; order[#order + 1] = k end
            end
          end
          for _, k in ipairs(order) do optkeys[#optkeys + 1] = { ei, pi, k } end
        end
      end
    end
    print, io.stdout = print0, stdout0
    io.output(out0)
    null:close()
    O_lib.proxy_text = proxy_text0
  end
  local lines = {}
  for _, ok in ipairs(optkeys) do
    local base = entries[ok[1]]
    entries[#entries + 1] = { kind = "optkey", base = base, inst = base.inst, prefix = OPT_PREFIXES[ok[2]],
                              name = ok[3] }
    lines[#lines + 1] = ("%d %d %s"):format(ok[1], ok[2], ok[3])
  end
  return entries, insts, probed, table.concat(lines, "\n")
end

local function forms(e)
  if e.kind == "func" then
    -- (sweep 108) the first form runs a backward too where V requires grad (a huge or tiny tensor as the input)
    return { "return BACK(" .. e.expr .. "(V))", "return " .. e.expr .. "(2, V)", "return " .. e.expr .. "(T, V)",
             "return BACK(" .. e.expr .. "(T, V))" }
  elseif e.kind == "method" then
    local m = ("O[%q]"):format(e.name)
    return { "return " .. m .. "(O, V)", "return BACK(" .. m .. "(V))", "return " .. m .. "(O, 2, V)",
             "return " .. m .. "(O, T, V)", "return BACK(" .. m .. (e.tensor and "(T, V))" or "(O, T, V))") }
  elseif e.kind == "optkey" then
    -- (sweep 111) an options table whose one key read is V, where the probe found the key read
    local b = e.base
    local f = b.kind == "func" and b.expr or ("O[%q]"):format(b.name)
    local self = b.kind == "method" and "O, " or ""
    return { "return " .. f .. "(" .. self .. e.prefix .. ("{[%q] = V})"):format(e.name) }
  elseif e.kind == "sdkey" then
    -- (sweep 108) a key of O:state_dict() edited before load_state_dict (a checkpoint written by hand), then read
    local set = ("local sd = O:state_dict(); sd%s = V; "):format(e.path)
    local f = { set .. "return O:load_state_dict(sd)", set .. "O:load_state_dict(sd); return O:state_dict()" }
    if e.step then f[#f + 1] = set .. "O:load_state_dict(sd); return O:step()" end
    return f
  elseif e.kind == "field" then
    local f = { ("O[%q] = V; return tostring(O)"):format(e.name) }
    for _, u in ipairs(e.uses or {}) do f[#f + 1] = ("O[%q] = V; return %s"):format(e.name, u) end
    return f
  else
    local k = e.name
    if BINOPS[k] then return { "return O " .. BINOPS[k] .. " V", "return V " .. BINOPS[k] .. " O" } end
    if k == "__index" then return { "return O[V]", "return getmetatable(O).__index(V, 'x')" } end
    if k == "__newindex" then return { "O[V] = 1", "O.x = V", "O[1] = V" } end
    if k == "__call" then return { "return O(V)", "return O(V, V)" } end
    if k == "__len" then return { "return #O", "return getmetatable(O).__len(V)" } end
    if k == "__unm" or k == "__bnot" then return { "return -O", ("return getmetatable(O)[%q](V)"):format(k) } end
    if k == "__tostring" then return { "return tostring(O)", "return getmetatable(O).__tostring(V)" } end
    if k == "__name" then return {} end
    return { ("return getmetatable(O)[%q](O, V)"):format(k), ("return getmetatable(O)[%q](V)"):format(k) }
  end
end

local function entry_label(e, insts)
  if e.kind == "func" then return e.expr end
  if e.kind == "sdkey" then return insts[e.inst].name .. ":state_dict()" .. e.path end
  if e.kind == "optkey" then
    return entry_label(e.base, insts) .. "(" .. e.prefix .. "{" .. e.name .. " = V})"
  end
  return insts[e.inst].name .. (e.kind == "method" and ":" or e.kind == "field" and "." or " ") .. e.name
end

-- The reproducer: build/fp8lab -e '...'
local function uses_helpers(vsrc)
  for _, n in ipairs(HELPER_NAMES) do if vsrc:find(n, 1, true) then return true end end
  return false
end
local function repro(e, insts, form, vsrc)
  local o = e.inst and ("local O = " .. insts[e.inst].src .. "; ") or ""
  local helpers = uses_helpers(vsrc) or uses_helpers(form)
  if form:find("T", 1, true) or helpers then o = o .. "local T = " .. T_SRC(e, form) .. "; " end
  local body = form
  if body:match("^return ") then body = "print(select('#', " .. body:sub(8) .. "))" end
  if helpers then o = o .. HELPERS:gsub("%s*\n%s*", " ") .. " "; body = "IN_CALL = true; " .. body end
  local code = o .. "local V = " .. vsrc .. "; " .. body
  return EXE .. " -e '" .. code:gsub("'", "'\\''") .. "'"
end

-- Does an error message name the function (or method) and something about the argument? A raw error
-- from inside the library ("attempt to index a nil value", "bad argument #1 to '?'") does not.
local RAW = { "attempt to ", "bad argument #%d+ to '%?'", "table index is ", "number has no integer representation",
              "invalid key to 'next'", "stack overflow", "invalid value %(at index" }
local function message_ok(msg, e)
  if type(msg) ~= "string" then return true end   -- error objects (tables) are the library's own
  -- luaL's own argument errors name the function and the argument ("bad argument #2 to 'pop' (...)",
  -- "calling 'dim' on bad self (...)"), unless the function is '?' or a Lua builtin the library called
  local fn = msg:match("bad argument #%d+ to '([^']*)'") or msg:match("calling '([^']*)' on bad self")
  if fn and fn ~= "?" and not ({ error = 1, format = 1, concat = 1, insert = 1, setmetatable = 1, ipairs = 1,
                                 pairs = 1, tostring = 1, next = 1, select = 1, rep = 1, sub = 1 })[fn] then
    return true
  end
  for _, p in ipairs(RAW) do if msg:find(p) then return false end end
  local name = e.kind == "func" and (e.expr:match("([%w_]+)$") or e.expr) or e.name
  if msg:find(name, 1, true) then return true end
  if msg:match("bad argument") then return true end
  if e.kind == "op" or e.kind == "field" or e.kind == "sdkey" then return true end   -- operators have no name to give
  return msg:match("^[%w_.:]+: ") ~= nil or msg:match("^[^:]+:%d+: [%w_.:]+: ") ~= nil   -- "fname: ..."
end

-- Public entries: no component starting with "_" and not inside the library's internal tables
-- (a kwargs handler's field specs, a class's metatable or superclass). Raw errors are counted for
-- all, listed (--messages) for the public ones called with a well-formed self.
local function is_public(e, insts)
  if e.kind == "optkey" then return is_public(e.base, insts) end
  local label = e.kind == "func" and e.expr or (insts[e.inst].src .. "." .. e.name)
  if label:find('require%("fp8%._') or label:find("%._") or label:find("^_") then return false end
  for _, k in ipairs { ".by_name.", ".mt.", ".super.", ".kind.", "._metatable" } do
    if label:find(k, 1, true) then return false end
  end
  -- operators, and fields overwritten with hostile values (the object's own state, which its
  -- __tostring then trips over), are counted but not listed
  if e.kind == "op" or e.kind == "field" or e.kind == "sdkey" then return false end
  return true
end
-- Forms whose V takes the place of self (hostile self): Lua methods answer those with Lua's own
-- "attempt to index a number value (local 'self')", which names the argument (self).
local function hostile_self(e, fi)
  return (e.kind == "method" and fi == 2) or (e.kind == "op" and fi == 2) or (e.kind == "func" and e.method)
end

-- ---- child ----------------------------------------------------------------------------------
-- Runs calls "a-b" of a plan file; writes "B id" before each call and "E id status" after it to the
-- progress file, flushed, so a crash is attributed to the call that began and never ended.
local function child(spec)
  local planfile, progfile = spec:match("^(.-),(.*)$")
  -- belt and braces for the deny-list: nothing in a child leaves the sandbox this way
  local denied_fn = function(what) return function() error("api_sweep: " .. what .. " is denied in the sweep", 2) end end
  os.exit = denied_fn("os.exit"); os.execute = denied_fn("os.execute"); io.popen = denied_fn("io.popen")
  io.read = denied_fn("io.read")
  local entries, insts = enumerate()
  if tonumber(os.getenv("FP8LAB_SWEEP_ENTRIES")) ~= #entries then
    error(("api_sweep child: enumerated %d entries, the parent %s"):format(#entries, tostring(os.getenv("FP8LAB_SWEEP_ENTRIES"))))
  end
  local prog = assert(io.open(progfile, "a"))
  prog:setvbuf("no")
  local env = setmetatable({ fp8 = _G.fp8 or require "fp8" }, { __index = _G })
  assert(load(HELPERS, "=helpers", "t", env))()
  local inst_vals = {}
  local limit = opt.timeout
  local function gc_mode()
    if opt["gc-stress"] then collectgarbage("generational", 1, 1) else collectgarbage("incremental") end
  end
  gc_mode()
  for line in io.lines(planfile) do
    local id, ei, fi, vi = line:match("^(%d+) (%d+) (%d+) (%d+)$")
    id, ei, fi, vi = tonumber(id), tonumber(ei), tonumber(fi), tonumber(vi)
    local e = entries[ei]
    local form = forms(e)[fi]
    prog:write("B ", id, "\n")
    local status, detail = "ok", ""
    local O = e.inst and inst_vals[e.inst]
    if e.inst and O == nil then
      local ok, v = pcall(load("return " .. insts[e.inst].src, "=inst", "t", env))
      O = ok and v or false
      inst_vals[e.inst] = O
    end
    local fn = load("local O, V = ...; " .. form, "=call", "t", env)
    local vf = load("return " .. VALUES[vi], "=value", "t", env)
    env.O, env.T = O, load("return " .. T_SRC(e, form), "=T", "t", env)()
    local okv, V = pcall(vf)
    local t0 = os.clock()
    local lim = limit * slow_of(e)
    -- a per-call CPU-time limit for loops in Lua; a hang in C is caught by the batch timeout
    debug.sethook(function() if os.clock() - t0 > lim then error("api_sweep: call timed out", 2) end end, "", 10000)
    local ok, r = pcall(function()
      env.IN_CALL = true
      local res = fn(O, V)
      env.IN_CALL = false
      if res ~= nil then local _ = tostring(res) end
      return res
    end)
    env.IN_CALL, env.GC_ARMED, env.RELEASING = false, false, false
    debug.sethook()
    if not okv then status, detail = "valueerr", tostring(V)
    elseif ok then status = "ok"
    elseif type(r) == "string" and r:match("api_sweep: call timed out") then status = "hang"
    else
      status = message_ok(r, e) and "err" or "badmsg"
      detail = type(r) == "string" and r or ("(" .. type(r) .. ")")
    end
    prog:write("E ", id, " ", status, " ", (detail:gsub("\n", " "):sub(1, 300)), "\n")
    -- keep the instance usable: if a call released or broke it, rebuild for the next call
    -- (a field written by hand, since stop 97 read back by the object's step: a fresh object for the next call, as
    -- the reproducer builds one)
    local fresh = e.kind == "field" or e.kind == "sdkey"
    if (not ok or uses_helpers(VALUES[vi]) or uses_helpers(form) or fresh) and e.inst then
      inst_vals[e.inst] = nil
    end
    env.O, env.T = nil, nil
    gc_mode()
    collectgarbage("step", 100)
  end
  prog:close()
  os.exit = nil
  return 0
end

-- ---- parent ---------------------------------------------------------------------------------

local function read_file(p, limit) local f = io.open(p, "rb"); if not f then return "" end local s = f:read(limit or "a"); f:close(); return s or "" end

-- the build under test has ASan/UBSan (make sanitize sets ASAN_OPTIONS)
local SAN = os.getenv("FP8LAB_SWEEP_SAN") == "1" or os.getenv("ASAN_OPTIONS") ~= nil

-- Run a plan (list of {id, ei, fi, vi}) in one child; returns {done = {id = status line}, began, rc, stderr}.
local function run_child(tmp, plan, tag, budget)
  local dir = tmp .. "/c" .. tag
  os.execute("rm -rf " .. sh(dir) .. " && mkdir -p " .. sh(dir))
  local planf, progf = dir .. "/plan", dir .. "/progress"
  local f = assert(io.open(planf, "w"))
  for _, c in ipairs(plan) do f:write(c[1], " ", c[2], " ", c[3], " ", c[4], "\n") end
  f:close()
  local root = os.getenv("FP8LAB_SWEEP_ROOT") or os.getenv("PWD") or "."
  -- ulimit -v makes over-large allocations fail fast (ASan reserves address space, so instead its
  -- allocator returns NULL above max_allocation_size_mb there)
  local lim = SAN and "" or "ulimit -v 6000000; "
  local cmd = ("cd %s && %sHOME=%s FP8LAB_PROGRESS=plain ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=3000:detect_leaks=%d:abort_on_error=0 "
    .. "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 FP8LAB_SWEEP_MODULES=%s "
    .. "timeout -s KILL %d %s %s --child %s --timeout %s%s </dev/null >/dev/null 2>%s; echo \"rc=$?\" >> %s")
    :format(sh(dir), lim, sh(dir), opt.leaks and 1 or 0, sh(table.concat(module_names(), " ")), budget,
            sh(EXE:sub(1, 1) == "/" and EXE or root .. "/" .. EXE), sh(SELF:sub(1, 1) == "/" and SELF or root .. "/" .. SELF),
            sh(planf .. "," .. progf), tostring(opt.timeout), opt["gc-stress"] and " --gc-stress" or "", sh(dir .. "/stderr"), sh(progf))
  os.execute(cmd)
  local res = { done = {}, began = nil, rc = nil, stderr = read_file(dir .. "/stderr", 1 << 20) }
  for line in io.lines(progf) do
    local b = line:match("^B (%d+)$")
    if b then res.began = tonumber(b) end
    local id, rest = line:match("^E (%d+) (.*)$")
    if id then res.done[tonumber(id)] = rest; res.began = nil end
    local rc = line:match("^rc=(%d+)$")
    if rc then res.rc = tonumber(rc) end
  end
  os.execute("rm -rf " .. sh(dir))
  return res
end

-- The first line of a sanitizer report (plain finds: stderr may hold a megabyte-long line).
local function sanitizer_report(s)
  for _, key in ipairs { "ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer" } do
    local at = s:find(key, 1, true)
    if at then
      local first = at
      while first > 1 and at - first < 200 and s:sub(first - 1, first - 1) ~= "\n" do first = first - 1 end
      return s:sub(first, math.min(#s, at + 300)):match("^[^\n]*")
    end
  end
end

-- LeakSanitizer's report (--leaks): its first leaks, each with the top of its allocation stack.
local function leak_report(s)
  local at = s:find("ERROR: LeakSanitizer", 1, true)
  if not at then return nil end
  local out, leaks = {}, 0
  for line in s:sub(at):gmatch("[^\n]+") do
    if line:find("^%a+ leak of") then leaks = leaks + 1; if leaks > 3 then break end end
    if leaks > 0 and (line:find("^%a+ leak of") or line:find("^%s+#[0-9] ")) then out[#out + 1] = line end
  end
  return table.concat(out, "\n")
end

local function parent()
  if opt.leaks and not SAN then
    io.stderr:write("api_sweep: --leaks needs a sanitizer build run with FP8LAB_SWEEP_SAN=1 (or ASAN_OPTIONS set)\n")
    os.exit(2)
  end
  local tmp = os.tmpname(); os.remove(tmp); os.execute("mkdir -p " .. sh(tmp .. "/data"))
  write_idx(tmp .. "/data")
  require("fp8.config").sys.setenv("FP8LAB_SWEEP_DATA", tmp .. "/data")
  local entries, insts, probed, optkeys = enumerate()
  require("fp8.config").sys.setenv("FP8LAB_SWEEP_ENTRIES", tostring(#entries))
  require("fp8.config").sys.setenv("FP8LAB_SWEEP_PROBED", table.concat(probed, "\n"))
  require("fp8.config").sys.setenv("FP8LAB_SWEEP_OPTKEYS", optkeys)
  if opt.list then
    for i, e in ipairs(entries) do print(i, e.kind, entry_label(e, insts)) end
    for i, inst in ipairs(insts) do print("kind", i, inst.name, inst.src) end
    local n = 0
    for _, e in ipairs(entries) do n = n + #forms(e) * #VALUES end
    print(("%d entries over %d kinds of object, %d calls (%d values; values %d-%d, since sweep 115, from call %d: "
      .. "batch %d of --batch %d)"):format(#entries, #insts, n, #VALUES, N_VALUES0 + 1, #VALUES,
      n * N_VALUES0 // #VALUES + 1, n * N_VALUES0 // #VALUES // opt.batch + 1, opt.batch))
    return 0
  end
  -- the call list
  -- (sweep 115) the older values' calls first (numbered as before), then the values added since (N_VALUES0)
  local calls = {}
  for _, range in ipairs { { 1, N_VALUES0 }, { N_VALUES0 + 1, #VALUES } } do
    for ei, e in ipairs(entries) do
      for fi = 1, #forms(e) do
        for vi = range[1], range[2] do calls[#calls + 1] = { #calls + 1, ei, fi, vi } end
      end
    end
  end
  if opt.values then
    -- (sweep 115) only the values numbered a..b (--values a-b): the values added since N_VALUES0 over the whole API
    local a, b = opt.values:match("^(%d+)%-(%d+)$")
    a, b = tonumber(a), tonumber(b)
    if not a or a < 1 or b > #VALUES or a > b then
      io.stderr:write(("api_sweep: --values expects a-b within 1-%d, got %s\n"):format(#VALUES, opt.values))
      os.exit(2)
    end
    local keep = {}
    for _, c in ipairs(calls) do if c[4] >= a and c[4] <= b then keep[#keep + 1] = c end end
    calls = keep
  end
  if #opt.filter > 0 then
    -- (sweep 111) matched once an entry, not once a call: 570 patterns over the 1.45M calls took minutes
    local keep, match = {}, {}
    for ei, e in ipairs(entries) do
      local label = entry_label(e, insts)
      for _, p in ipairs(opt.filter) do if label:find(p) then match[ei] = true; break end end
    end
    for _, c in ipairs(calls) do if match[c[2]] then keep[#keep + 1] = c end end
    calls = keep
  end
  local total = #calls
  if opt.quick and opt.calls < #calls then
    -- seeded sample: every entry at least once (its first form, a value chosen by the seed), the rest random.
    -- (sweep 115) Drawn first from the older values' calls as before (the same seed, the same calls), then from the
    -- newer values' calls in their proportion (--calls 50000: about 6,700 more), each entry once at least there too
    math.randomseed(opt.seed)
    local old, new = {}, {}
    for _, c in ipairs(calls) do local l = c[4] > N_VALUES0 and new or old; l[#l + 1] = c end
    local pick, chosen = {}, {}
    local function sample(list, want)
      if want >= #list then
        for _, c in ipairs(list) do if not chosen[c[1]] then chosen[c[1]] = true; pick[#pick + 1] = c end end
        return
      end
      local n0 = #pick
      local by_entry = {}
      for _, c in ipairs(list) do by_entry[c[2]] = by_entry[c[2]] or {}; table.insert(by_entry[c[2]], c) end
      for ei = 1, #entries do
        local l = by_entry[ei]
        if l then local c = l[math.random(#l)]; if not chosen[c[1]] then chosen[c[1]] = true; pick[#pick + 1] = c end end
      end
      while #pick - n0 < want do
        local c = list[math.random(#list)]
        if not chosen[c[1]] then chosen[c[1]] = true; pick[#pick + 1] = c end
      end
    end
    if #old > 0 then sample(old, opt.calls) end
    -- (sweep 118) the share is the 11 values of sweep 115's (83-93) over the older ones, drawn among all the values
    -- added since: the 8 of sweep 118 spread the same number of calls, so make test's sweep takes no longer
    local share = #new / #old * math.min(1, 11 / (#VALUES - N_VALUES0))
    if #new > 0 then sample(new, #old > 0 and math.ceil(opt.calls * share) or opt.calls) end
    table.sort(pick, function(a, b) return a[1] < b[1] end)
    calls = pick
  end
  -- The children run under `ulimit -v` unless SAN: a sanitizer build cannot start there (ASan reserves terabytes of
  -- address space for its shadow), and every call would come back as a finding. Refuse at once, naming the fix.
  if not SAN then
    local p = io.popen("ulimit -v 6000000; " .. sh(EXE) .. " -e 'print(1)' 2>&1")
    local out = p and p:read("a") or ""
    if p then p:close() end
    if out:find("Sanitizer", 1, true) then
      io.stderr:write(("api_sweep: %s is a sanitizer build, which cannot start under the children's ulimit -v; "
        .. "set FP8LAB_SWEEP_SAN=1 (or ASAN_OPTIONS) to run it without the limit\n"):format(EXE))
      os.exit(2)
    end
  end
  io.stderr:write(("api_sweep: %d entries (%d kinds of object), %d calls%s, batches of %d, %d jobs\n")
    :format(#entries, #insts, #calls, opt.quick and (" sampled of " .. total .. " (seed " .. opt.seed .. ")") or "",
            opt.batch, opt.jobs))
  local findings, badmsg, counts = {}, {}, { ok = 0, err = 0, badmsg = 0, valueerr = 0 }
  local function note(kind, c, detail)
    local e = entries[c[2]]
    local form = forms(e)[c[3]]
    local f = { kind = kind, label = entry_label(e, insts), detail = detail, repro = repro(e, insts, form, VALUES[c[4]]) }
    findings[#findings + 1] = f
    print(("FINDING %s: %s\n  %s\n  %s"):format(f.kind, f.label, f.repro, (f.detail or ""):gsub("\n", "\n  ")))
    io.stdout:flush()
  end
  -- A batch: run; the call that began and never ended is re-run alone to confirm, the rest resumes.
  local function run_batch(batch, tag)
    local queue, pos = batch, 1
    local round, slow = 0, 1   -- slow: the budget's multiple (4 once a batch was killed at its budget, see below)
    while pos <= #queue do
      round = round + 1
      local rest = {}
      for i = pos, #queue do rest[#rest + 1] = queue[i] end
      local budget = slow * math.max(20, math.ceil(#rest * 0.05) + 4 * opt.timeout)
      local res = run_child(tmp, rest, tag .. "_" .. round, budget)
      -- a child that enumerates another API than the parent's (a lua/ named by FP8LAB_LUA_DIR edited while the sweep
      -- ran): every call of every batch would be a finding (sweep 113: 26 false 'exit status 1' in one batch). Stop.
      local mismatch = (res.stderr or ""):match("api_sweep child: enumerated %d+ entries, the parent %d+")
      if mismatch then
        io.stderr:write(("api_sweep: %s: the library changed under the sweep (lua/ edited since it started?); "
          .. "stopped in batch %s\n"):format(mismatch, tag))
        os.execute("rm -rf " .. sh(tmp))
        os.exit(2)
      end
      local last_done = pos - 1
      for i = pos, #queue do
        local c = queue[i]
        local st = res.done[c[1]]
        if not st then break end
        last_done = i
        local s, d = st:match("^(%S+) ?(.*)$")
        counts[s] = (counts[s] or 0) + 1
        if s == "hang" then note("hang (Lua loop past " .. opt.timeout .. " s)", c, d)
        elseif s == "badmsg" then
          local e = entries[c[2]]
          if is_public(e, insts) and not hostile_self(e, c[3]) then badmsg[#badmsg + 1] = { c = c, msg = d } end
        end
      end
      local san = sanitizer_report(res.stderr)
      if last_done == #queue and res.rc == 0 and not san then break end
      if opt.leaks and last_done == #queue and leak_report(res.stderr) and not res.stderr:find("ERROR: AddressSanitizer", 1, true)
         and not res.stderr:find("runtime error:", 1, true) then
        -- every call ended and the child leaked at exit: halves until the calls that leak (both halves when both do)
        local function bisect(list, rep, t)
          if #list == 1 then note("leak", list[1], rep); counts.leak = (counts.leak or 0) + 1; return end
          local mid = #list // 2
          local found = false
          for h, half in ipairs { { table.unpack(list, 1, mid) }, { table.unpack(list, mid + 1) } } do
            local r = run_child(tmp, half, t .. h, budget)
            local lr = leak_report(r.stderr)
            if lr then found = true; bisect(half, lr, t .. h) end
          end
          if not found then note("leak (these calls together only)", list[#list], rep); counts.leak = (counts.leak or 0) + 1 end
        end
        bisect(rest, leak_report(res.stderr), tag .. "_" .. round .. "l")
        break
      end
      -- the culprit: the call after the last finished one
      local culprit = queue[last_done + 1]
      if not culprit then
        if san then note("sanitizer (after the batch)", queue[#queue], san) end
        break
      end
      -- confirm alone
      -- (alone, a slow entry's multiple of the limit too: a default nn.Transformer under --gc-stress took more than
      -- the 30 s a call alone had, sweep 111)
      local alone = slow_of(entries[culprit[2]]) * (4 * opt.timeout + 10)
      local one = run_child(tmp, { culprit }, tag .. "_x" .. round, alone)
      local why
      local san1 = sanitizer_report(one.stderr)
      if san1 then why = "sanitizer: " .. san1
      elseif one.rc == 137 or one.rc == 124 then why = "hang (killed after " .. alone .. " s)"
      elseif one.rc and one.rc > 128 then why = "signal " .. (one.rc - 128)
      elseif one.rc ~= 0 then why = "exit status " .. tostring(one.rc)
      elseif san then why = "sanitizer (in batch only): " .. san
      elseif res.rc == 137 or res.rc == 124 then why = "hang (in batch only)"
      else why = "crash in batch only (rc " .. tostring(res.rc) .. "), not alone" end
      if why == "hang (in batch only)" and slow == 1 then
        -- killed at the batch's budget while the call alone ends: slow calls (a default nn.Transformer, 44M
        -- parameters, takes seconds under ASan) on a loaded machine, or a hang that needs the calls before it.
        -- The rest of the batch, this call first, runs again with 4 times the budget before it is a finding.
        io.stderr:write(("  batch %s: killed at its budget of %d s, the call alone ends: run again with %d s\n")
          :format(tag, budget, 4 * budget))
        slow, pos = 4, last_done + 1
      else
        note(why, culprit, (one.stderr ~= "" and one.stderr or res.stderr):sub(1, 400))
        counts.crash = (counts.crash or 0) + 1
        pos = last_done + 2
      end
    end
  end
  -- batches, run opt.jobs at a time via background shells is complex; run sequentially per job slot
  local batches = {}
  for i = 1, #calls, opt.batch do
    local b = {}
    for j = i, math.min(i + opt.batch - 1, #calls) do b[#b + 1] = calls[j] end
    batches[#batches + 1] = b
  end
  local t0 = os.time()
  for bi, b in ipairs(batches) do
    if bi < opt.from or bi > opt.to then goto next_batch end
    run_batch(b, tostring(bi))
    if opt.verbose or bi % 20 == 0 then
      io.stderr:write(("  batch %d/%d, %d findings, %ds\n"):format(bi, #batches, #findings, os.time() - t0))
    end
    ::next_batch::
  end
  os.execute("rm -rf " .. sh(tmp))
  if opt.messages then
    for _, b in ipairs(badmsg) do
      local e = entries[b.c[2]]
      print(("MESSAGE %s: %s\n  %s"):format(entry_label(e, insts), b.msg, repro(e, insts, forms(e)[b.c[3]], VALUES[b.c[4]])))
    end
  end
  local badfn = {}
  for _, b in ipairs(badmsg) do badfn[b.c[2]] = true end
  local nbadfn = 0
  for _ in pairs(badfn) do nbadfn = nbadfn + 1 end
  print(("api_sweep: %d entries, %d calls: %d returned, %d raised an error (%d raw or unnamed in all; %d from "
    .. "public entries with a proper self, over %d entries: --messages lists them), "
    .. "%d crashes/hangs/sanitizer reports, %ds"):format(#entries, #calls, counts.ok, counts.err + counts.badmsg,
    counts.badmsg, #badmsg, nbadfn, #findings, os.time() - t0))
  return #findings == 0 and 0 or 1
end

if opt.child then return child(opt.child) end
if not os.getenv("FP8LAB_SWEEP_SANDBOX") then
  -- The parent runs in a fresh directory with HOME there, as the children do: what it builds to enumerate the API (a
  -- probed constructor's object: SummaryWriter() makes its runs/ where it runs) leaves nothing in the tree. The
  -- module list is read here, in the tree; paths are made absolute.
  local root = os.getenv("PWD") or "."
  local function abs(p) return p:sub(1, 1) == "/" and p or root .. "/" .. p end
  local dir = os.tmpname(); os.remove(dir); os.execute("mkdir -p " .. sh(dir))
  local args = {}
  for i = 1, #arg do args[#args + 1] = sh(arg[i]) end
  local lua_dir = os.getenv("FP8LAB_LUA_DIR")
  local ok, _, code = os.execute(("cd %s && HOME=%s FP8LAB_SWEEP_SANDBOX=1 FP8LAB_SWEEP_ROOT=%s "
    .. "FP8LAB_SWEEP_MODULES=%s FP8LAB_EXE=%s %s%s %s %s"):format(sh(dir), sh(dir), sh(root), sh(table.concat(module_names(), " ")),
    sh(abs(EXE)), lua_dir and ("FP8LAB_LUA_DIR=" .. sh(abs(lua_dir)) .. " ") or "", sh(abs(EXE)), sh(abs(SELF)),
    table.concat(args, " ")))
  os.execute("rm -rf " .. sh(dir))
  if not ok then os.exit(code == 0 and 1 or code) end
  return
end
local rc = parent()
if rc ~= 0 then error("api_sweep: crashes or hangs found", 0) end
