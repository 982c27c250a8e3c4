-- env.lua — the FP8LAB_* environment: every name fp8lab reads, and the set variables it does not read (a
-- misspelled FP8LAB_MIXED_PRECISON would otherwise be ignored without a word). `fp8lab env` lists them all;
-- the Accelerator names (in a notice) each unknown one that is a near miss of a known name.
local sys = require "fp8.sys"
local M = {}

-- Read by the host, the launcher, the scripts or the test suite (the settings' own come from the table).
M.OTHER = {
  FP8LAB_CONFIG_FILE = "the config file (fp8lab launch --config_file exports it)",
  FP8LAB_NOTICED = "the config file whose notices fp8lab launch printed (set by fp8lab launch)",
  FP8LAB_LAUNCH_FLAGS = "the variables fp8lab launch's flags set, as VAR=--flag,... (set by fp8lab launch)",
  FP8LAB_RANK = "this process's rank (set by fp8lab launch)",
  FP8LAB_WORLD_SIZE = "the number of processes (set by fp8lab launch)",
  FP8LAB_LOCAL_RANK = "this process's rank on its machine (set by fp8lab launch)",
  FP8LAB_LUA_DIR = "a directory of fp8 Lua modules loaded before the built-in ones",
  FP8LAB_GNUPLOT = "the gnuplot command for plots",
  FP8LAB_HISTORY = "the prompt's history file",
  FP8LAB_HISTSIZE = "the entries of prompt history kept, 0..1000000 (default 1000)",
  FP8LAB_PROGRESS = "progress bars: plain (lines, even on a terminal), or unset (the terminal decides)",
  FP8LAB_VERBOSE = "1: full tracebacks",
  FP8LAB_CPU_ISA = "the most of the CPU's instruction sets the kernels use: avx2, avx512, avx512_bf16 or amx (all)",
  FP8LAB_SCHEMA_SELFTEST = "test only: the settings table's self-test row",
  FP8LAB_TEST_DNNL_OOM = "test only: a oneDNN call (memory_create, execute[:N]) that answers out of memory",
  FP8LAB_FAULT_DIST = "test only: a collective (allreduce, iallreduce, wait, broadcast, allgather, reduce_scatter, barrier) "
    .. "or DDP's new .grad (ddp_grad) that fails "
    .. "on one process, SITE:N[-M][@RANK],... (core/fault.h)",
  FP8LAB_BIN = "test suite: the binary under test", FP8LAB_EXE = "test suite: the binary the API sweep runs",
  FP8LAB_TEST_DEVICE = "test suite: the device the GPU specs compare against",
  FP8LAB_FAULT_TAG = "test suite: the crash spec's kill point",
  FP8LAB_SWEEP_CALLS = "test suite: API sweep calls", FP8LAB_SWEEP_DATA = "test suite: API sweep data",
  FP8LAB_SWEEP_ENTRIES = "test suite: API sweep entries", FP8LAB_SWEEP_MODULES = "test suite: API sweep modules",
  FP8LAB_SWEEP_SAN = "test suite: API sweep under sanitizers",
  FP8LAB_SWEEP_PROBED = "test suite: API sweep's probed constructors",
  FP8LAB_SWEEP_ROOT = "test suite: API sweep's tree",
  FP8LAB_SWEEP_SANDBOX = "test suite: API sweep's parent, in its own directory",
  FP8LAB_RECIPES = "scripts/bench_train.sh: the recipes it runs",
}

-- known() -> set of every FP8LAB_* name fp8lab reads (the settings' variables and M.OTHER).
function M.known()
  local set = {}
  for n in next, M.OTHER do set[n] = true end
  for _, r in ipairs(require("fp8.settings").list()) do if r.env then set[r.env] = true end end
  return set
end

-- unknown([set]) -> list of {name=, near=} for each FP8LAB_* variable set (in the process environment, or the
-- names of the table `set`, an Accelerator's env=) that fp8lab does not read, sorted by name; near is the closest
-- known name when one is close (a misspelling), else nil.
-- The names starting with prefix: of the table `set`, or of the process environment; sorted.
local function names_with(prefix, set)
  if not set then return sys.env_names(prefix) end
  local given = {}
  for k in next, set do if type(k) == "string" and k:sub(1, #prefix) == prefix then given[#given + 1] = k end end
  table.sort(given)
  return given
end

function M.unknown(set)
  local known = M.known()
  local names = {}
  for n in next, known do names[#names + 1] = n end
  table.sort(names)
  local given = names_with("FP8LAB_", set)
  local out = {}
  for _, n in ipairs(given) do
    if not known[n] then out[#out + 1] = { name = n, near = require("fp8.settings").suggest(n, names) } end
  end
  return out
end

-- misspelled() -> notice lines for the unknown variables that are near misses of a known name.
function M.misspelled(set)
  local out = {}
  for _, u in ipairs(M.unknown(set)) do
    if u.near then
      out[#out + 1] = ("%s is not an fp8lab variable and is ignored (did you mean %s?)"):format(u.name, u.near)
    end
  end
  return out
end

-- Accelerate's variables whose fp8lab counterpart is not FP8LAB_ + the rest of the name: the override's three
-- booleans (what accelerate launch --fp8_override_linear_precision a,b,c sets) are one variable here.
local RENAMED = { ACCELERATE_FP8_OVERRIDE_FPROP = "FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION",
                  ACCELERATE_FP8_OVERRIDE_DGRAD = "FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION",
                  ACCELERATE_FP8_OVERRIDE_WGRAD = "FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION" }

-- accelerate_names([set]) -> notice lines for Accelerate's own variables (ACCELERATE_MIXED_PRECISION, ...) whose
-- fp8lab counterpart exists: fp8lab reads only its own, so a variable kept from an Accelerate setup is named.
function M.accelerate_names(set)
  local known = M.known()
  local out = {}
  for _, n in ipairs(names_with("ACCELERATE_", set)) do
    local ours = RENAMED[n] or ("FP8LAB_" .. n:sub(12))
    if known[ours] then
      out[#out + 1] = ("%s is Accelerate's and is not read; fp8lab reads %s"):format(n, ours)
    end
  end
  return out
end

return M
