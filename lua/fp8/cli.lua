-- cli.lua — fp8lab sub-commands (`fp8lab env|launch|config|test ...`); lua/main.c calls
-- main(host, cmd, args...) with host = {version, lua, onednn, cuda, readline} and exits with its result.
-- Settings — their types, choices, defaults, flags, FP8LAB_* variables, help lines and questions — come
-- from the one settings table (core/settings.c, as fp8.settings.list()); nothing here names a setting
-- except the few the commands themselves act on (mixed_precision, backend, num_processes).
local unplaced = require("fp8.errfmt").unplaced   -- an error's text without its "file:line: "
local M = {}

local cfg = require "fp8.config"
local settings = require "fp8.settings"
local sys = require "fp8.sys"

-- A failure with an exit status: 2 for bad usage (flags, values), 1 for everything else.
local Fail = {}
local function fail(code, msg) error(setmetatable({ code = code, msg = msg }, Fail), 0) end
-- A Ctrl-C's error: the hook's "interrupted!" (Lua code ran when it came) or a C loop's "interrupted" (one Ctrl-C is
-- one of them since stop 100), after its "chunk:line: " or alone. Until sweep 115 only the hook's was known: a C
-- loop's came out as a bug's traceback, and one inside try() as a failure naming this file's line.
local function interrupted(e)
  return type(e) == "string" and (e:match("^interrupted!?$") or e:match(": interrupted!?$")) ~= nil
end

-- Calls f(...); a Lua error becomes fail(code, message) (a Ctrl-C stays one).
local function try(code, f, ...)
  local r = table.pack(pcall(f, ...))
  if not r[1] and interrupted(r[2]) then error(r[2], 0) end
  if not r[1] then fail(code, tostring(r[2])) end
  return table.unpack(r, 2, r.n)
end

-- The settings that are flags (all but the kwargs-only ones), in table order.
local KEYS = {}
local BY_NAME, BY_FLAG = {}, {}
for _, k in ipairs(settings.list()) do
  if k.flag then KEYS[#KEYS + 1] = k; BY_NAME[k.name] = k; BY_FLAG[k.flag] = k end
end
local BACKEND_TITLE = BY_NAME.backend.choice_help

-- The text form of a value as fp8.config returns it (what FP8LAB_* variables carry).
local function text_of(v)
  if type(v) == "table" then
    local t = {}
    for i = 1, #v do t[i] = tostring(v[i]) end
    return table.concat(t, ",")
  end
  return tostring(v)
end

local function placeholder(k)
  if k.type == "choice" then return "{" .. table.concat(k.choices, ",") .. "}" end
  if k.type == "int" then return "N" end
  if k.type == "bool" then return "[BOOL]" end
  return "A,B,C"
end

local function flag_names()
  local t = {}
  for _, k in ipairs(KEYS) do t[#t + 1] = k.flag end
  return t
end

local function is_bool_word(s)
  s = s:lower()
  return s == "true" or s == "false" or s == "yes" or s == "no" or s == "on" or s == "off" or s == "1" or s == "0"
    or s == "y" or s == "n" or s == "t" or s == "f"
end

-- Parses the setting flag at argv[i] ("--name value", "--name=value"; booleans may omit the value).
-- A name is spelled with underscores or hyphens (--num-processes), as Accelerate's launcher takes it.
-- `extra` maps other flag names to true (taking a value) or false (taking none). Returns
-- (next index, key or extra name, value). Raises fail(2, ...) for unknown flags and bad values.
local function parse_flag(argv, i, extra, cmd)
  local a = argv[i]
  local name, val = a:match("^%-%-([^=]+)=(.*)$")
  name = name or a:sub(3)
  local typed = name
  name = name:gsub("%-", "_")
  local k = BY_FLAG[name]
  if not k and extra[name] == nil then
    local cands = flag_names()
    for n in next, extra do cands[#cands + 1] = n end
    local best = settings.suggest(name, cands)
    fail(2, ("unknown flag --%s%s (fp8lab %s -h lists them)"):format(typed,
      best and (" (did you mean --" .. best .. "?)") or "", cmd))
  end
  if not k then
    if extra[name] == false then
      if val then fail(2, ("--%s takes no value"):format(name)) end
      return i + 1, name, true
    end
    if val == nil then
      val = argv[i + 1]
      if val == nil then fail(2, ("--%s needs a value"):format(name)) end
      i = i + 1
    end
    return i + 1, name, val
  end
  if val == nil then
    local nxt = argv[i + 1]
    if k.type == "bool" and not (nxt and is_bool_word(nxt)) then
      val = "true"
    else
      if nxt == nil then fail(2, ("--%s needs a value %s"):format(name, placeholder(k))) end
      val, i = nxt, i + 1
    end
  end
  local v = try(2, settings.parse, k.name, val, "--" .. name)
  return i + 1, k, v
end

-- The config file a command uses: --config_file, else $FP8LAB_CONFIG_FILE, else the default path
-- when it exists. Returns path, origin (or nil when there is none).
local function config_path(flag_path)
  if flag_path then return flag_path, "--config_file" end
  local env = os.getenv("FP8LAB_CONFIG_FILE")
  if env and env ~= "" then return env, "FP8LAB_CONFIG_FILE" end
  local p = cfg.default_path()
  -- whatever is there (not opened: a named pipe would block; the loader says what is wrong with it)
  if require("fp8._checkpoint").exists(p) then return p, "default location" end
  return nil
end

local function print_notices(cmd, settings)
  for _, n in ipairs(settings and settings.notices or {}) do io.stderr:write("fp8lab ", cmd, ": ", n, "\n") end
end

-- ---- fp8lab env ------------------------------------------------------------------------------

-- The text of a regular file (nil for anything else: a named pipe would block, a device never end).
local function read_file(path, limit)
  if not require("fp8._checkpoint").is_file(path) then return nil end
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read(limit or "a")
  f:close()
  return s
end

local function command_output(cmd)
  local p = io.popen(cmd .. " 2>/dev/null")
  if not p then return nil end
  local s = p:read("a")
  p:close()
  if s == nil or s == "" then return nil end
  return s
end

local function cpu_info()
  local s = read_file("/proc/cpuinfo") or ""
  local model = s:match("model name%s*:%s*([^\n]+)") or "unknown"
  local count = select(2, s:gsub("\nprocessor%s*:", "")) + (s:match("^processor%s*:") and 1 or 0)
  local flags = " " .. (s:match("\nflags%s*:%s*([^\n]+)") or s:match("^flags%s*:%s*([^\n]+)") or "") .. " "
  local have = {}
  for _, f in ipairs { "avx512f", "avx512_bf16", "avx512vbmi", "amx_tile", "amx_bf16" } do
    have[#have + 1] = f .. (flags:find(" " .. f .. " ", 1, true) and " yes" or " no")
  end
  return model, count, table.concat(have, ", ")
end

-- GPUs through nvidia-smi (works whether or not fp8lab was built with CUDA).
local function gpu_lines()
  local out = command_output("nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv,noheader")
  local lines = {}
  if out then
    for line in out:gmatch("[^\n]+") do
      local idx, name, cc, drv = line:match("^%s*(%d+),%s*(.-),%s*([%d%.]+),%s*(.-)%s*$")
      if idx then
        local maj, min = cc:match("(%d+)%.(%d+)")
        local fp8 = maj and (tonumber(maj) * 10 + tonumber(min) >= 89)
        lines[#lines + 1] = ("%s: %s, compute capability %s, FP8 %s, driver %s"):format(idx, name, cc,
          fp8 and "yes" or "no (needs 8.9+)", drv)
      end
    end
  end
  return lines
end

local function env_cmd(host, ...)
  local argv, extra = { ... }, {}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "-h" or a == "--help" then
      print("usage: fp8lab env [--config_file PATH]\n\nPrints versions, hardware, FP8LAB_* variables and the active"
        .. " config file:\nthe thing to paste into a bug report.")
      return 0
    end
    if a:sub(1, 2) ~= "--" then fail(2, ("unexpected argument '%s' (fp8lab env -h)"):format(a)) end
    local k, v
    i, k, v = parse_flag(argv, i, { config_file = true }, "env")
    if type(k) == "table" then fail(2, ("--%s is a launch flag; fp8lab env takes only --config_file"):format(k.flag)) end
    extra[k] = v
  end
  local config_flag = extra.config_file

  local rows = {}
  local function row(k, v) rows[#rows + 1] = { k, v } end
  row("fp8lab", host.version or "?")
  row("Lua", host.lua or _VERSION)
  row("libyaml", cfg.libyaml_version())
  row("oneDNN", host.onednn or "not found")
  row("readline", host.readline or "not built in (plain line input)")
  local build = sys.build()
  local has_cuda, cuda = pcall(require, "fp8.cuda")
  if not has_cuda then cuda = nil end
  if host.cuda or build.cuda then
    local n = cuda and cuda.device_count() or 0
    local why = n == 0 and cuda and cuda.unavailable_reason() or nil
    row("CUDA", ("built in; %d usable GPU%s%s"):format(n, n == 1 and "" or "s", why and (" (" .. why .. ")") or ""))
  else
    row("CUDA", "not built in")
  end
  row("cuBLASLt", build.cublaslt and "built in" or "not built in")
  -- MPI / NCCL: the libraries linked in (build time) and this process's world (run time, from the
  -- launcher's environment or, once initialised, from MPI itself); docs/distributed.md
  local dinfo = require("fp8._dist").info()
  row("NCCL", dinfo.nccl_built and ("built in: NCCL " .. dinfo.nccl_version .. " (ran on one GPU, one process; never across GPUs)")
    or "not built in (GPU collectives are refused)")
  local mpi = command_output("mpirun --version")
  row("MPI", (dinfo.mpi_built and ("built in: " .. dinfo.mpi_version:match("^[^,]*")) or "not built in (single process only)")
    .. "; " .. (mpi and mpi:match("^[^\n]+") or "mpirun not found (apt-get install openmpi-bin)"))
  row("world", dinfo.launched and ("rank %d of %d (started by an MPI launcher%s)"):format(dinfo.rank, dinfo.world_size,
      dinfo.initialized and ", MPI initialised" or "") or "1 process (not started by mpirun/srun)")
  row("OpenMP", ("%d threads (OMP_NUM_THREADS %s)"):format(sys.omp_max_threads(), os.getenv("OMP_NUM_THREADS") or "unset"))
  local model, count, flags = cpu_info()
  row("CPU", ("%s, %d logical CPUs"):format(model, count))
  row("CPU flags", flags)
  local isa = sys.cpu_isa()
  row("CPU ISA", isa == "amx" and "all this CPU has (FP8LAB_CPU_ISA caps it: avx2, avx512, avx512_bf16)"
    or ("at most %s (FP8LAB_CPU_ISA; oneDNN's GEMMs too)"):format(isa))
  local fam = sys.cpu_fp8_gemm()
  local FAMILY = { amx_bf16 = "AMX tiles", avx512_bf16 = "AVX-512 BF16 dot products", avx512_fma = "AVX-512 FMA",
    avx2_fma = "AVX2 + FMA" }
  row("FP8 GEMM", fam and ("%s: fp8lab's own kernels, %s (core/cpu/cpu_fp8_mm_*.c)"):format(fam, FAMILY[fam] or fam)
    or "decode to bf16 + oneDNN (no kernel family of fp8lab's own runs on this CPU)")
  local gpus = gpu_lines()
  if #gpus == 0 then row("GPUs", "none seen (nvidia-smi lists none or is not installed)") end
  for j, g in ipairs(gpus) do row(j == 1 and "GPUs" or "", g) end
  -- the device names this process can put tensors on (x:to(name), fp8.zeros{..., device = name})
  row("devices", (cuda and cuda.is_available()) and "cpu, cuda" or "cpu")
  for _, r in ipairs(rows) do print(("%-10s %s"):format(r[1], r[2])) end

  print("\nEnvironment")
  local E = require "fp8.env"
  local names, unknown = sys.env_names("FP8LAB_"), {}
  for _, u in ipairs(E.unknown()) do unknown[u.name] = u end
  local setting_of = {}   -- a setting's variable → its key: its value is checked as launch and the Accelerator do
  for _, k in ipairs(KEYS) do if k.env then setting_of[k.env] = k end end
  -- everything is shown, and the exit status says whether a setting was bad (1, as the other sub-commands')
  local bad = false
  for _, n in ipairs(names) do
    local u, v, note = unknown[n], os.getenv(n) or "", ""
    if u then
      note = u.near and ("   (not read by fp8lab: did you mean %s?)"):format(u.near) or "   (not read by fp8lab)"
    elseif setting_of[n] and v ~= "" then
      local ok, err = pcall(settings.parse, setting_of[n].name, v, n)
      if not ok then note = ("   (invalid: %s)"):format(unplaced(err)); bad = true end
    end
    print(("  %s=%s%s"):format(n, v, note))
  end
  if #names == 0 then print("  no FP8LAB_* variables") end
  -- Accelerate's own variables with an fp8lab counterpart, kept from an Accelerate setup: not read
  for _, n in ipairs(E.accelerate_names()) do print("  " .. n) end

  print("\nConfig")
  local path, origin = config_path(config_flag)
  if not path then
    print(("  none (%s does not exist; fp8lab config writes it)"):format(cfg.default_path()))
    return bad and 1 or 0
  end
  print(("  %s (%s)"):format(path, origin))
  local ok, settings = pcall(cfg.load, path)
  if not ok then
    print("  error: " .. tostring(settings))
    bad = true
  else
    -- the file's own notices, then those an Accelerator would give for the file alone, as config --check prints
    local okr, r = pcall(require("fp8.kwargs").resolve, { config = settings, env = {} })
    for _, n in ipairs(okr and r.notices or settings.notices) do print("  notice: " .. n) end
    if not okr then print("  error: " .. unplaced(r)); bad = true end
  end
  local text = read_file(path, 64 * 1024)
  if text then
    print("  ---")
    local shown = 0
    for line in (text:gsub("\n$", "") .. "\n"):gmatch("([^\n]*)\n") do
      shown = shown + 1
      if shown > 200 then print("  ... (cut after 200 lines)"); break end
      if #line > 300 then line = line:sub(1, 300) .. " ... (line cut after 300 bytes)" end
      print("  " .. line:gsub("[%c\128-\255]", function(c)
        return c == "\t" and c or ("\\x%02X"):format(c:byte())
      end))
    end
  end
  return bad and 1 or 0
end

-- ---- fp8lab launch ---------------------------------------------------------------------------

local function launch_help(backend)
  local out = {
    "usage: fp8lab launch [flags] script.lua [script args]",
    "",
    "Runs script.lua with its settings in FP8LAB_* environment variables; --num_processes N > 1 starts",
    "N copies through mpirun, each with FP8LAB_RANK and FP8LAB_WORLD_SIZE.",
    "Precedence: a kwargs handler in the script > these flags and FP8LAB_* variables > the config file > defaults.",
    "Flags take `--flag value` or `--flag=value`, spelled with _ or - (--num-processes); [BOOL] flags alone mean true.",
  }
  local function line(left, help)
    out[#out + 1] = ("  %-44s %s"):format(left, help)
  end
  local function key_line(k)
    local def = k.default
    line("--" .. k.flag .. " " .. placeholder(k), k.unsupported and ("refused: " .. k.unsupported)
      or ("%s (default %s)"):format(k.help, text_of(def)))
  end
  out[#out + 1] = ""
  out[#out + 1] = "General:"
  line("--config_file PATH", "config file (default $FP8LAB_CONFIG_FILE, else " .. cfg.default_path() .. ")")
  for _, k in ipairs(KEYS) do if not k.backends then key_line(k) end end
  line("--num_cpu_threads_per_process N", "OpenMP threads per process (sets OMP_NUM_THREADS)")
  line("--multi_gpu", "refused: data-parallel training across GPUs is not part of fp8lab yet")
  line("--main_process_port N", "refused: mpirun wires the processes and picks its own ports")
  line("--num_machines 1, --machine_rank 0, ...", "Accelerate's launcher settings: taken at values that change nothing "
    .. "(--gpu_ids all, --dynamo_backend no, --main_training_function, --rdzv_backend, --same_network), "
    .. "refused otherwise as the config file's keys; --main_process_ip, --debug, --downcast_bf16, "
    .. "--enable_cpu_affinity, --module, --no_python, --tee, --log_dir, --quiet refused")
  line("-h, --help", "this text; after --fp8_backend B only B's flags")
  for _, b in ipairs(BY_NAME.backend.choices) do
    if not backend or backend == b then
      out[#out + 1] = ""
      out[#out + 1] = ("%s (--fp8_backend %s):"):format(BACKEND_TITLE[b], b)
      for _, k in ipairs(KEYS) do
        if k.backends then
          for _, kb in ipairs(k.backends) do if kb == b then key_line(k) end end
        end
      end
    end
  end
  return table.concat(out, "\n")
end

local function self_exe()
  return try(1, sys.executable)
end

local function on_path(prog)
  for dir in (os.getenv("PATH") or ""):gmatch("[^:]+") do
    local f = io.open(dir .. "/" .. prog, "r")
    if f then f:close(); return dir .. "/" .. prog end
  end
  return nil
end

local function exec(argv)
  local _, err = sys.exec(argv)
  fail(1, err)
end

-- `fp8lab -- script args` for argv[first..]; a script "-" (stdin) must not follow "--", which would
-- make it a file named "-".
local function script_command(me, argv, first)
  local cmd = { me }
  if argv[first] ~= "-" then cmd[2] = "--" end
  for j = first, #argv do cmd[#cmd + 1] = argv[j] end
  return cmd
end

-- Started by mpirun as `fp8lab launch --_worker script args`: publish the rank, then run the script.
local function launch_worker(argv)
  local function first(...)
    for _, n in ipairs { ... } do
      local v = os.getenv(n)
      if v and v ~= "" then return v end
    end
  end
  local rank = first("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID") or "0"
  local size = first("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "FP8LAB_NUM_PROCESSES") or "1"
  local lrank = first("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID") or rank
  sys.setenv("FP8LAB_RANK", rank)
  sys.setenv("FP8LAB_WORLD_SIZE", size)
  sys.setenv("FP8LAB_LOCAL_RANK", lrank)
  exec(script_command(self_exe(), argv, 2))
end

-- Accelerate's launch flags that are not settings: value-taking (true) or alone (false).
local LAUNCH_EXTRA = { config_file = true, num_cpu_threads_per_process = true,
                       main_process_port = true, multi_gpu = false }
-- Accelerate's launch flags of settings the config file also has (core/config.c's Accelerate keys): taken at a
-- value that changes nothing here (--num_machines 1), with a notice; refused otherwise, with the file's reason.
local ACCEL_FLAGS = { num_machines = true, machine_rank = true, gpu_ids = true, dynamo_backend = true,
                      main_training_function = true, rdzv_backend = true, same_network = false }
-- and those that change how the script runs, which fp8lab's launcher does not do: {takes a value, why refused}.
-- Among them the flags whose config keys are taken only at a value no flag can give: --debug alone means true (the
-- file's debug: false is taken), --main_process_ip's file value is null
local OWN_OUTPUT = "each process writes to the launcher's stdout and stderr (redirect them)"
local ACCEL_REFUSED = {
  module = { false, "fp8lab runs Lua scripts: give the script's path" },
  no_python = { false, "fp8lab runs its own Lua interpreter" },
  tee = { true, OWN_OUTPUT }, log_dir = { true, OWN_OUTPUT },
  quiet = { false, "the launcher prints only the processes' own output and its one-line reports" },
  main_process_ip = { true, "mpirun starts and connects the processes; there is no rendezvous address" },
  debug = { false, "Accelerate's debug checks of collectives are not part of fp8lab" },
  downcast_bf16 = { false, "downcasting to bf16 is a TPU feature; fp8lab has none" },
  enable_cpu_affinity = { false, "fp8lab does not pin threads (OMP_PROC_BIND and OMP_PLACES do)" } }
for k, v in next, ACCEL_FLAGS do LAUNCH_EXTRA[k] = v end
for k, r in next, ACCEL_REFUSED do LAUNCH_EXTRA[k] = r[1] end

-- The environment those flags set (checked before anything starts).
local function launch_extra_env(extra)
  local env = {}
  if extra.num_cpu_threads_per_process then
    -- digits only, as every other integer flag; at most 1024 (libgomp crashes when it cannot start the threads)
    local s = extra.num_cpu_threads_per_process
    local t = s:match("^%s*%d+%s*$") and math.tointeger(tonumber(s))
    if not t or t < 1 or t > 1024 then
      fail(2, ("--num_cpu_threads_per_process: expected an integer in 1..1024, got %q"):format(s))
    end
    env.OMP_NUM_THREADS = tostring(t)
  end
  for name, r in next, ACCEL_REFUSED do
    if extra[name] ~= nil then fail(2, ("--%s is not supported: %s"):format(name, r[2])) end
  end
  local names = {}
  for name in next, ACCEL_FLAGS do if extra[name] ~= nil then names[#names + 1] = name end end
  table.sort(names)
  for _, name in ipairs(names) do
    -- checked as the config file's key of that name (one rule for both); a flag alone means true
    local v = extra[name]
    local text = v == true and "true" or ('"' .. tostring(v):gsub('[\\"]', "\\%0") .. '"')
    local ok, err = pcall(cfg.parse, ("%s: %s\n"):format(name, text), "--" .. name)
    if not ok then
      fail(2, ("--%s %s"):format(name, (tostring(err):gsub("^[^\n]-: " .. name .. ": ", ""))))
    end
    io.stderr:write(("fp8lab launch: notice: --%s%s changes nothing here (a setting of Accelerate's launcher)\n")
      :format(name, v == true and "" or (" " .. tostring(v))))
  end
  if extra.main_process_port then
    fail(2, "--main_process_port is not supported: fp8lab's processes are started and connected by mpirun "
      .. "(MPI; NCCL is bootstrapped over MPI), which picks its own ports; no rendezvous port is used")
  end
  if extra.multi_gpu then
    -- One process per GPU would start, and each would stop at prepare: the DDP reducer (core/ddp.c) takes CPU
    -- gradients only, and NCCL has run in one process on one GPU, never across GPUs (docs/distributed.md).
    fail(2, "--multi_gpu is not supported: data-parallel training across GPUs is not part of fp8lab yet (the gradient "
      .. "reducer runs on CPU gradients; NCCL has never run across GPUs); --num_processes N --cpu trains N CPU processes")
  end
  return env
end

local function launch(host, ...)
  local argv = { ... }
  if argv[1] == "--_worker" then
    if not argv[2] then fail(2, "--_worker needs a script") end
    return launch_worker(argv)
  end
  local given, extra = {}, {}
  local help, script = false, nil
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "-h" or a == "--help" then
      help, i = true, i + 1
    elseif a == "--" then
      script, i = argv[i + 1], i + 1
      break
    elseif a:sub(1, 2) == "--" then
      local k, v
      i, k, v = parse_flag(argv, i, LAUNCH_EXTRA, "launch")
      if type(k) == "table" then given[k.name] = v else extra[k] = v end
    elseif a == "-m" or a == "-q" then   -- Accelerate's short forms of --module and --quiet
      fail(2, ("%s is not supported: %s"):format(a, ACCEL_REFUSED[a == "-m" and "module" or "quiet"][2]))
    elseif a:sub(1, 1) == "-" and a ~= "-" then
      fail(2, ("unknown flag %s (fp8lab launch -h lists them)"):format(a))
    else
      script = a
      break
    end
  end
  if help then
    print(launch_help(given.backend))
    return 0
  end
  if not script then
    fail(2, "no script given\nusage: fp8lab launch [flags] script.lua [script args]   (fp8lab launch -h)")
  end

  -- The config file: checked now so that a bad file stops here, not in every process.
  local path = config_path(extra.config_file)
  local file
  if path then
    file = try(1, cfg.load, path)
    print_notices("launch", file)
    path = sys.realpath(path) or path
  end
  -- FP8LAB_* variables already set rank with the flags; check them now too.
  for _, k in ipairs(KEYS) do
    local v = k.env and os.getenv(k.env)
    if v and v ~= "" and given[k.name] == nil then try(1, settings.parse, k.name, v, k.env) end
  end

  local n = given.num_processes or (os.getenv("FP8LAB_NUM_PROCESSES") and tonumber(os.getenv("FP8LAB_NUM_PROCESSES")))
    or (file and file.num_processes) or 1
  local exported = {}
  local function export(name, value)
    sys.setenv(name, value)
    exported[#exported + 1] = name
  end
  local extra_env = launch_extra_env(extra)
  -- which variables the flags set (VAR=--flag,...): the script's Accelerator refuses a flag's setting that the run
  -- does not use (another backend's, an FP8 one without fp8), where a variable set by hand only gets a notice
  local from_flags = {}
  for _, k in ipairs(KEYS) do
    if given[k.name] ~= nil and k.env then
      export(k.env, text_of(given[k.name]))
      from_flags[#from_flags + 1] = k.env .. "=--" .. k.flag
    end
  end
  -- this launch's flags only: one inherited from an outer launch (a script that runs fp8lab launch) would make the
  -- variables it names flags of this run too
  if #from_flags > 0 then export("FP8LAB_LAUNCH_FLAGS", table.concat(from_flags, ",")) else
    sys.setenv("FP8LAB_LAUNCH_FLAGS", nil) end
  if extra_env.OMP_NUM_THREADS then export("OMP_NUM_THREADS", extra_env.OMP_NUM_THREADS) end
  export("FP8LAB_NUM_PROCESSES", tostring(n))
  -- the CPU's instruction-set cap reaches every rank, on other machines too (mpirun -x)
  if os.getenv("FP8LAB_CPU_ISA") then export("FP8LAB_CPU_ISA", os.getenv("FP8LAB_CPU_ISA")) end
  if path then
    export("FP8LAB_CONFIG_FILE", path)
    export("FP8LAB_NOTICED", path)   -- its notices are printed above: the Accelerator does not repeat them
  end

  local me = self_exe()
  if n == 1 then
    sys.setenv("FP8LAB_RANK", "0")
    sys.setenv("FP8LAB_WORLD_SIZE", "1")
    sys.setenv("FP8LAB_LOCAL_RANK", "0")
    return exec(script_command(me, argv, i))
  end
  if script == "-" then fail(2, "a script on stdin reaches only one process; give --num_processes > 1 a file") end
  if not on_path("mpirun") then
    fail(1, ("--num_processes %d needs mpirun, which is not on PATH (apt-get install openmpi-bin)"):format(n))
  end
  -- Threads per process: share the machine unless the user chose (torchrun does the same).
  if not os.getenv("OMP_NUM_THREADS") then
    export("OMP_NUM_THREADS", tostring(math.max(1, sys.omp_max_threads() // n)))
  end
  local cmd = { "mpirun", "-np", tostring(n), "--oversubscribe", "--bind-to", "none" }
  if sys.geteuid() == 0 then cmd[#cmd + 1] = "--allow-run-as-root" end
  for _, name in ipairs(exported) do cmd[#cmd + 1] = "-x"; cmd[#cmd + 1] = name end
  for _, w in ipairs { me, "launch", "--_worker", script } do cmd[#cmd + 1] = w end
  for j = i + 1, #argv do cmd[#cmd + 1] = argv[j] end
  return exec(cmd)
end

-- ---- fp8lab config ---------------------------------------------------------------------------

local function config_help()
  return table.concat({
    "usage: fp8lab config [--config_file PATH]                 ask questions, write the config file",
    "       fp8lab config --default [setting flags] [--config_file PATH]   write defaults, no questions",
    "       fp8lab config --check [--config_file PATH]         load and show the config file",
    "",
    "The file goes to --config_file, else $FP8LAB_CONFIG_FILE, else " .. cfg.default_path() .. ".",
    "Setting flags are those of fp8lab launch (--mixed_precision fp8 --fp8_backend te ...).",
    "Answers are read line by line from stdin; an empty answer keeps the default shown in [brackets].",
  }, "\n")
end

-- The keys relevant to a backend, in table order.
local function backend_keys(b)
  local t = {}
  for _, k in ipairs(KEYS) do
    if k.block and k.backends then
      for _, kb in ipairs(k.backends) do if kb == b then t[#t + 1] = k end end
    end
  end
  return t
end

-- A settings table for write(): given values over the defaults of what is relevant.
local function settings_from(values)
  local s = { mixed_precision = values.mixed_precision, num_processes = values.num_processes }
  if values.mixed_precision == "fp8" or values.backend then
    local b = values.backend or BY_NAME.backend.default
    s.fp8_config = { backend = b }
    -- a refused key (enable_fsdp_float8_all_gather) has a default only to describe it; writing it would be refused
    for _, k in ipairs(backend_keys(b)) do if not k.unsupported then s.fp8_config[k.name] = k.default end end
  end
  for name, v in next, values do
    local k = BY_NAME[name]
    if k.block then s.fp8_config = s.fp8_config or {}; s.fp8_config[name] = v else s[name] = v end
  end
  return s
end

-- --default's flags must all reach the file's run: an FP8 flag needs --mixed_precision fp8, a backend's
-- flag that backend (what an Accelerator would otherwise ignore with a notice is refused here).
local function refuse_dead(values)
  local b = values.backend or BY_NAME.backend.default
  for _, k in ipairs(KEYS) do
    if values[k.name] ~= nil and k.block then
      if values.mixed_precision ~= "fp8" then
        fail(2, ("--%s is an FP8 setting and the file's mixed_precision is %s; add --mixed_precision fp8 or leave "
          .. "--%s out"):format(k.flag, values.mixed_precision, k.flag))
      end
      if k.backends then
        local ok = false
        for _, kb in ipairs(k.backends) do ok = ok or kb == b end
        if not ok then
          fail(2, ("--%s belongs to the %s backend and the file's backend is %s%s; add --fp8_backend %s or leave "
            .. "--%s out"):format(k.flag, table.concat(k.backends, "/"), b,
            values.backend and "" or " (the default)", k.backends[1], k.flag))
        end
      end
    end
  end
end

local function answer_text(k, v)
  if k.type == "bool" then return v and "yes" or "no" end
  return text_of(v)
end

-- Whether the questionnaire asks about k, given the answers so far: FP8 settings only for fp8, a
-- backend's settings only for that backend.
local function applies(k, values)
  if k.block ~= "fp8_config" then return true end
  if values.mixed_precision ~= "fp8" then return false end
  if not k.backends then return true end
  for _, b in ipairs(k.backends) do if b == values.backend then return true end end
  return false
end

local function questionnaire()
  local echo = not sys.isatty(0)   -- piped answers: show them so the transcript reads well
  local function ask(k)
    local def = answer_text(k, k.default)
    while true do
      io.write(k.question, " [", def, "]: ")
      io.flush()
      local line = io.read("l")
      if line == nil then
        io.write("\n")
        fail(1, "input ended before the questionnaire was complete; nothing written")
      end
      line = line:match("^%s*(.-)%s*$")
      if echo then io.write(line, "\n") end
      if line == "" then line = def end
      local ok, v = pcall(settings.parse, k.name, line, k.name)
      if ok then return v end
      io.write("  ", tostring(v), "; please answer again\n")
    end
  end
  local values = {}
  for _, k in ipairs(KEYS) do
    if k.question and applies(k, values) then values[k.name] = ask(k) end
  end
  return values
end

local function config_cmd(host, ...)
  local argv = { ... }
  local given, extra = {}, {}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "-h" or a == "--help" then print(config_help()); return 0 end
    -- Accelerate's subcommands: `accelerate config default` is --default here; `update` has nothing to do
    if a == "default" and i == 1 then argv[i] = "--default"; a = argv[i] end
    if a == "update" and i == 1 then
      fail(2, "'update' is not needed: fp8lab reads every config file it wrote as it is (Accelerate's `config update` "
        .. "adds the keys of newer versions); `fp8lab config --check` says what a file sets")
    end
    if a:sub(1, 2) ~= "--" then fail(2, ("unexpected argument '%s' (fp8lab config -h)"):format(a)) end
    local k, v
    i, k, v = parse_flag(argv, i, { config_file = true, default = false, check = false }, "config")
    if type(k) == "table" then given[k.name] = v else extra[k] = v end
  end
  local path = extra.config_file
  if not path then
    local env = os.getenv("FP8LAB_CONFIG_FILE")
    path = (env and env ~= "") and env or cfg.default_path()
  end

  if extra.check then
    if extra.default then fail(2, "--check reads the file and --default writes one; give one of them") end
    if next(given) then fail(2, "--check reads the file as it is; setting flags go with --default") end
    local s = try(1, cfg.load, path)
    -- the file's own notices, then those an Accelerator would give for it alone (a setting the file's
    -- backend or mixed_precision does not use): kwargs.resolve with no handler and no FP8LAB_* variable
    local r = try(1, require("fp8.kwargs").resolve, { config = s, env = {} })
    print(path .. ": valid")
    for _, k in ipairs(KEYS) do
      local v
      if k.block then v = s.fp8_config and s.fp8_config[k.name] else v = s[k.name] end
      if v ~= nil then print(("  %s%s: %s"):format(k.block and "fp8_config." or "", k.name, text_of(v))) end
    end
    for _, n in ipairs(r.notices) do print("  notice: " .. n) end
    return 0
  end

  local values
  if extra.default then
    values = given
    values.mixed_precision = values.mixed_precision or BY_NAME.mixed_precision.default
    values.num_processes = values.num_processes or BY_NAME.num_processes.default
    refuse_dead(values)
  else
    if next(given) then fail(2, "setting flags go with --default; the questionnaire asks for them") end
    values = questionnaire()
  end
  try(1, cfg.write, path, settings_from(values))
  print("fp8lab config: wrote " .. path)
  return 0
end

-- ---- dispatch ----------------------------------------------------------------------------------

-- Linux's numbers of the signals a run is commonly ended by (signal(7)), for fp8lab test's message
local SIGNAL_NAMES = { [1] = "SIGHUP", [2] = "SIGINT", [3] = "SIGQUIT", [4] = "SIGILL", [6] = "SIGABRT", [7] = "SIGBUS",
  [8] = "SIGFPE", [9] = "SIGKILL", [11] = "SIGSEGV", [13] = "SIGPIPE", [14] = "SIGALRM", [15] = "SIGTERM", [24] = "SIGXCPU",
  [25] = "SIGXFSZ" }

-- fp8lab test [busted options]: the test suite of the source tree this binary was built in (the
-- C core tests when BUILD/test_core exists, and the busted specs), from that tree's root.
local function test_cmd(host, ...)
  local extra = { ... }
  for _, a in ipairs(extra) do
    if a == "--config_file" or a:match("^%-%-config_file=") then   -- Accelerate's `accelerate test --config_file F`
      fail(2, "fp8lab test runs the test suite of the source tree; Accelerate's `accelerate test --config_file F` "
        .. "(a check of that configuration) is `fp8lab config --check --config_file F`, and a short run under it "
        .. "`fp8lab launch --config_file F script.lua`")
    end
    if a == "-h" or a == "--help" then
      print("usage: fp8lab test [busted options, e.g. --filter=recipes or a spec file]\n"
        .. "Runs the C core tests (when test_core was built beside this binary) and the busted specs of the\n"
        .. "source tree this binary lives in; the last line says \"N passed, N failed\". `make test` does the same after building.")
      return 0
    end
  end
  local exe = sys.executable()
  local bdir = exe:match("^(.*)/[^/]+$") or "."
  local root = bdir:match("^(.*)/[^/]+$") or "."
  local function exists(p) local f = io.open(p, "r"); if f then f:close() end; return f ~= nil end
  if not exists(root .. "/tests/busted.lua") then
    fail(1, ("runs the specs of a source checkout, and %s is not in one (no %s/tests/busted.lua); "
      .. "build from the tree and run its build/fp8lab"):format(exe, root))
  end
  if not exists("/usr/share/lua/5.1/busted/runner.lua") then
    fail(1, "busted is not installed (Debian package lua-busted: apt-get install lua-busted)")
  end
  local function q(x) return "'" .. tostring(x):gsub("'", "'\\''") .. "'" end
  local cmd
  if #extra == 0 and exists(bdir .. "/test_core") then
    cmd = ("cd %s && bash scripts/run-tests.sh %s"):format(q(root), q(bdir))
  else
    local args = {}
    for i, a in ipairs(extra) do args[i] = q(a) end
    cmd = ("cd %s && %s tests/busted.lua %s"):format(q(root), q(exe), #args > 0 and table.concat(args, " ") or "tests/spec")
  end
  local ok, how, code = os.execute(cmd)
  if ok then return 0 end
  if how == "signal" then
    -- the run (the shell's command, exec'd) ended by a signal: os.execute gives its number, which as a status read
    -- 2 ("bad usage") for a Ctrl-C until stop 102. Said, and the status a shell gives: 128 + N (a Ctrl-C's 130,
    -- on which main.c ends fp8lab by SIGINT, as a shell loop expects; system() ignored the SIGINT here meanwhile)
    io.stderr:write(("fp8lab test: the test run was ended by signal %d%s\n"):format(code,
      SIGNAL_NAMES[code] and (" (" .. SIGNAL_NAMES[code] .. ")") or ""))
    return 128 + code
  end
  return code or 1
end

M.commands = {
  env = env_cmd,
  launch = launch,
  config = config_cmd,
  test = test_cmd,
}
M.launch_help = launch_help

function M.main(host, cmd, ...)
  local f = M.commands[cmd]
  if not f then
    io.stderr:write("fp8lab: unknown command '", tostring(cmd), "'\n")
    return 1
  end
  local ok, rc = xpcall(f, function(e)
    if getmetatable(e) == Fail then return e end
    -- Ctrl-C: the user's stop, said in one line, not a bug's traceback; status 130, on which main.c ends the process
    -- by SIGINT, as a script's Ctrl-C (a shell's loop stops there too)
    if interrupted(e) then
      return setmetatable({ code = 130, msg = "interrupted" }, Fail)
    end
    return debug.traceback(tostring(e), 2)   -- a bug, not a user error: keep where it happened
  end, host, ...)
  if ok then return rc or 0 end
  if getmetatable(rc) == Fail then
    io.stderr:write("fp8lab ", cmd, ": ", rc.msg, "\n")
    return rc.code
  end
  error(rc, 0)
end

return M
