-- cli_spec.lua — `fp8lab config`, `fp8lab launch` and `fp8lab env`, spawned as child processes:
-- files written, questionnaire transcripts, FP8LAB_* variables reaching a script, -h filtering,
-- bad flags, mpirun start-up, and the sections of the environment report.
local BIN = assert(FP8LAB_BIN, "run through tests/busted.lua, which sets FP8LAB_BIN")

local U = dofile("tests/spec/helpers/util.lua")
local q = U.q

local function slurp(path, keep)   -- the file's bytes (nil if missing); removed unless keep
  if keep then return U.read(path) end
  return U.take(path)
end

local tmpdir = U.tmpdir

-- Every run gets a private cache directory (no default config unless a test writes one) and no
-- FP8LAB_* settings from the calling environment.
local CACHE = tmpdir()
local CLEAN = "env -u FP8LAB_CONFIG_FILE -u FP8LAB_MIXED_PRECISION -u FP8LAB_FP8_BACKEND -u FP8LAB_FP8_MARGIN "
  .. "-u FP8LAB_NUM_PROCESSES -u FP8LAB_RANK -u FP8LAB_WORLD_SIZE -u FP8LAB_CPU_ISA XDG_CACHE_HOME=" .. q(CACHE) .. " "

-- run(args [, stdin_text [, env_prefix]]) -> stdout, stderr, exit code
local function run(args, input, prefix)
  local out, err, inp = os.tmpname(), os.tmpname(), os.tmpname()
  local f = assert(io.open(inp, "wb")); f:write(input or ""); f:close()
  local cmd = string.format("%s%s%s %s <%s >%s 2>%s", CLEAN, prefix or "", q(BIN), args, inp, out, err)
  local _, _, code = os.execute(cmd)
  os.remove(inp)
  return slurp(out), slurp(err), code
end

local ENV_SCRIPT = os.tmpname()
do
  local f = assert(io.open(ENV_SCRIPT, "w"))
  f:write([[
local names = { "FP8LAB_MIXED_PRECISION", "FP8LAB_FP8_BACKEND", "FP8LAB_FP8_FORMAT", "FP8LAB_FP8_MARGIN",
  "FP8LAB_FP8_INTERVAL", "FP8LAB_FP8_AMAX_HISTORY_LEN", "FP8LAB_FP8_AMAX_COMPUTE_ALGO",
  "FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION", "FP8LAB_FP8_OPT_LEVEL", "FP8LAB_FP8_USE_AUTOCAST_DURING_EVAL",
  "FP8LAB_FP8_PAD_INNER_DIM", "FP8LAB_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER", "FP8LAB_CONFIG_FILE",
  "FP8LAB_NUM_PROCESSES", "FP8LAB_RANK", "FP8LAB_WORLD_SIZE" }
for _, n in ipairs(names) do print(n .. "=" .. tostring(os.getenv(n))) end
print("ARGS=" .. table.concat({ ... }, "|"))
]])
  f:close()
end

-- The script's report as a table name -> value (strings, "nil" when unset).
local function report(out)
  local t = {}
  for k, v in out:gmatch("([%w_]+)=([^\n]*)") do t[k] = v end
  return t
end

describe("fp8lab config", function()
  it("writes through a symbolic link to the file it names (a dotfiles repository), and refuses a dangling one", function()
    local d = tmpdir()
    U.write(d .. "/real.yaml", "mixed_precision: bf16\n")
    assert(os.execute("ln -s real.yaml " .. q(d .. "/link.yaml")))
    local _, err, code = run("config --default --mixed_precision fp8 --config_file " .. q(d .. "/link.yaml"))
    assert.are.equal(0, code, err)
    assert.is_true(require("fp8._checkpoint").is_link(d .. "/link.yaml"))
    assert.truthy(U.read(d .. "/real.yaml"):find("mixed_precision: 'fp8'", 1, true))
    assert(os.execute("ln -s " .. q(d .. "/missing/x.yaml") .. " " .. q(d .. "/dangling.yaml")))
    _, err, code = run("config --default --config_file " .. q(d .. "/dangling.yaml"))
    assert.are.equal(1, code)
    assert.truthy(err:find("a symbolic link whose target cannot be reached", 1, true), err)
  end)

  it("--default --config_file writes defaults that load", function()
    local d = tmpdir()
    local p = d .. "/a/b.yaml"
    local out, err, code = run("config --default --config_file " .. q(p))
    assert.are.equal(0, code, err)
    assert.are.equal("fp8lab config: wrote " .. p .. "\n", out)
    local t = require("fp8.config").load(p)
    assert.are.equal("no", t.mixed_precision)
    assert.are.equal(1, t.num_processes)
    assert.is_nil(t.fp8_config)
    os.execute("rm -rf " .. q(d))
  end)

  it("--default takes setting flags and fills in the backend's defaults", function()
    local p = os.tmpname()
    local _, err, code = run("config --default --mixed_precision fp8 --fp8_backend=te --fp8_margin 2 --config_file " .. q(p))
    assert.are.equal(0, code, err)
    local t = require("fp8.config").load(p)
    os.remove(p)
    assert.are.equal("fp8", t.mixed_precision)
    assert.are.same({ backend = "te", fp8_format = "HYBRID", margin = 2, interval = 1, amax_history_len = 1024,
      amax_compute_algo = "most_recent", override_linear_precision = { false, false, false },
      use_autocast_during_eval = false }, t.fp8_config)
  end)

  it("writes the ao backend, by questionnaire and by --default, leaving out the refused FSDP key", function()
    local d = tmpdir()
    local out, err, code = run("config --config_file " .. q(d .. "/q.yaml"), "fp8\nao\n\n\n\n")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("fp8lab config: wrote " .. d .. "/q.yaml", 1, true), out)
    local t = require("fp8.config").load(d .. "/q.yaml")
    assert.are.same({ backend = "ao", pad_inner_dim = true }, t.fp8_config)
    assert.are.same({}, t.notices)
    _, err, code = run("config --default --mixed_precision fp8 --fp8_backend ao --fp8_pad_inner_dim false --config_file "
      .. q(d .. "/d.yaml"))
    assert.are.equal(0, code, err)
    t = require("fp8.config").load(d .. "/d.yaml")
    assert.are.same({ backend = "ao", pad_inner_dim = false }, t.fp8_config)
    -- and an Accelerator reads it back as the ao recipe
    local r = require("fp8.kwargs").resolve { config = t, env = {} }
    assert.are.equal("ao", r.fp8_backend)
    assert.is_false(r.fp8_recipe.pad_inner_dim)
    os.execute("rm -rf " .. q(d))
  end)

  it("--default refuses a flag the written file's run would not use", function()
    local d = tmpdir()
    local _, err, code = run("config --default --mixed_precision fp8 --fp8_margin 2 --config_file " .. q(d .. "/m.yaml"))
    assert.are.equal(2, code)
    assert.truthy(err:find("--fp8_margin belongs to the te backend and the file's backend is msamp (the default); "
      .. "add --fp8_backend te or leave --fp8_margin out", 1, true), err)
    _, err, code = run("config --default --mixed_precision fp8 --fp8_backend te --fp8_opt_level O1 --config_file " .. q(d .. "/m.yaml"))
    assert.are.equal(2, code)
    assert.truthy(err:find("--fp8_opt_level belongs to the msamp backend and the file's backend is te", 1, true), err)
    _, err, code = run("config --default --mixed_precision bf16 --fp8_backend te --config_file " .. q(d .. "/m.yaml"))
    assert.are.equal(2, code)
    assert.truthy(err:find("--fp8_backend is an FP8 setting and the file's mixed_precision is bf16; add --mixed_precision fp8", 1, true), err)
    assert.is_nil(slurp(d .. "/m.yaml"))
    os.execute("rm -rf " .. q(d))
  end)

  it("--check gives the notices an Accelerator would for a setting the file's backend does not use", function()
    local d = tmpdir()
    require("fp8.config").write(d .. "/m.yaml", { mixed_precision = "fp8", fp8_config = { backend = "msamp", margin = 2 } })
    local out, err, code = run("config --check --config_file " .. q(d .. "/m.yaml"))
    assert.are.equal(0, code, err)
    assert.truthy(out:find("notice: config file " .. d .. "/m.yaml: fp8_config.margin=2 ignored: margin belongs to the te "
      .. "recipe and the FP8 backend is msamp", 1, true), out)
    require("fp8.config").write(d .. "/n.yaml", { mixed_precision = "bf16", fp8_config = { backend = "te" } })
    out, err, code = run("config --check --config_file " .. q(d .. "/n.yaml"))
    assert.are.equal(0, code, err)
    assert.truthy(out:find("fp8_config.backend=\"te\" ignored: mixed_precision is \"bf16\", not \"fp8\"", 1, true), out)
    os.execute("rm -rf " .. q(d))
  end)

  it("writes to the default location when no path is given", function()
    local _, err, code = run("config --default --mixed_precision bf16")
    assert.are.equal(0, code, err)
    local text = slurp(CACHE .. "/fp8lab/default_config.yaml")
    assert.truthy(text and text:find("mixed_precision: 'bf16'", 1, true), text)
  end)

  it("asks only the chosen backend's questions, re-asks on bad answers, and writes the file", function()
    local p = os.tmpname()
    local answers = table.concat({ "fp8", "te", "E5M2", "e4m3", "abc", "3", "", "", "max", "(false, false, true)",
      "yes", "0", "2", "maybe", "yes" }, "\n") .. "\n"
    local out, err, code = run("config --config_file " .. q(p), answers)
    assert.are.equal(0, code, err)
    assert.truthy(out:find("FP8 backend (msamp = MS-AMP, te = TransformerEngine, ao = torchao) [msamp]: te", 1, true), out)
    assert.truthy(out:find("fp8_format: E5M2 alone is not a training format", 1, true), out)
    assert.truthy(out:find('margin: expected an integer in 0..64, got "abc"; please answer again', 1, true), out)
    assert.truthy(out:find("num_processes: expected an integer in 1..4096, got 0", 1, true), out)
    assert.truthy(out:find("Run on the CPU only, even when there is a GPU (yes/no) [no]: maybe", 1, true), out)
    assert.truthy(out:find('use_cpu: expected a boolean (true or false), got "maybe" (also yes/no, on/off, y/n, '
      .. 't/f, 1/0, in any case); please answer again', 1, true), out)
    assert.falsy(out:find("optimization level", 1, true), "asked an MS-AMP question for te")
    assert.falsy(out:find("Pad GEMM", 1, true), "asked a torchao question for te")
    assert.truthy(out:find("fp8lab config: wrote " .. p, 1, true), out)
    local t = require("fp8.config").load(p)
    os.remove(p)
    assert.are.equal(2, t.num_processes)
    assert.is_true(t.use_cpu)
    assert.are.same({ backend = "te", fp8_format = "E4M3", margin = 3, interval = 1, amax_history_len = 1024,
      amax_compute_algo = "max", override_linear_precision = { false, false, true },
      use_autocast_during_eval = true }, t.fp8_config)
  end)

  it("asks no FP8 questions without fp8", function()
    local p = os.tmpname()
    local out, err, code = run("config --config_file " .. q(p), "bf16\n\n\n")
    assert.are.equal(0, code, err)
    assert.falsy(out:find("backend", 1, true))
    assert.are.same({ mixed_precision = "bf16", num_processes = 1, use_cpu = false }, (function()
      local t = require("fp8.config").load(p); t.notices, t.path = nil, nil; return t end)())
    os.remove(p)
  end)

  it("aborts at end of input and writes nothing", function()
    local d = tmpdir()
    local p = d .. "/c.yaml"
    local _, err, code = run("config --config_file " .. q(p), "fp8\n")
    assert.are.equal(1, code)
    assert.truthy(err:find("input ended before the questionnaire was complete; nothing written", 1, true), err)
    assert.is_nil(slurp(p))
    local ls = assert(io.popen("ls -A " .. q(d)))
    assert.are.equal("", ls:read("a"))   -- not even a temporary file
    ls:close()
    os.execute("rm -rf " .. q(d))
  end)

  it("Ctrl-C at a question stops as a script's Ctrl-C does: a one-line message, status 130, nothing written", function()
    local d = tmpdir()
    local p, e = d .. "/c.yaml", d .. "/err"
    -- stdin stays open (sleep), so the questionnaire waits at its first question for the SIGINT
    local cmd = ("sleep 3 | %s%s config --config_file %s >/dev/null 2>%s & P=$!; sleep 1; kill -INT $P; wait $P")
      :format(CLEAN, q(BIN), q(p), q(e))
    local _, _, code = os.execute(cmd)
    local err = slurp(e)
    assert.are.equal(130, code, err)   -- ended by SIGINT since stop 101 (docs/cli.md), as Python's scripts
    assert.are.equal("fp8lab config: interrupted\n", err)
    assert.is_nil(slurp(p))
    os.execute("rm -rf " .. q(d))
  end)

  it("--check shows a valid file and rejects a bad one with its position", function()
    local out, err, code = run("config --check --config_file tests/data/config/good/accelerate_msamp.yaml")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("fp8_config.opt_level: O1", 1, true), out)
    assert.truthy(out:find("notice: ", 1, true), out)
    _, err, code = run("config --check --config_file tests/data/config/bad/typo_fp8.yaml")
    assert.are.equal(1, code)
    assert.truthy(err:find("typo_fp8.yaml:3:3: unknown key 'amax_histroy_len' in fp8_config (did you mean 'amax_history_len'?)", 1, true), err)
    -- --check with --default, or with setting flags, would have ignored them
    _, err, code = run("config --check --default --config_file tests/data/config/good/accelerate_msamp.yaml")
    assert.are.equal(2, code)
    assert.truthy(err:find("--check reads the file and --default writes one; give one of them", 1, true), err)
    _, err, code = run("config --check --mixed_precision fp8 --config_file tests/data/config/good/accelerate_msamp.yaml")
    assert.are.equal(2, code)
    assert.truthy(err:find("--check reads the file as it is; setting flags go with --default", 1, true), err)
  end)

  it("rejects unknown flags with a suggestion, and bad values", function()
    local _, err, code = run("config --defualt")
    assert.are.equal(2, code)
    assert.truthy(err:find("unknown flag --defualt (did you mean --default?)", 1, true), err)
    _, err, code = run("config --default --mixed_precision fp4 --config_file /dev/null")
    assert.are.equal(2, code)
    assert.truthy(err:find('--mixed_precision: expected one of no, fp16, bf16, fp8, got "fp4"', 1, true), err)
  end)

  it("-h describes the forms", function()
    local out, _, code = run("config -h")
    assert.are.equal(0, code)
    assert.truthy(out:find("--default", 1, true) and out:find("--check", 1, true) and out:find("--config_file", 1, true))
  end)
end)

describe("fp8lab launch", function()
  it("exports flags to the script as FP8LAB_* variables, both flag forms", function()
    local out, err, code = run("launch --mixed_precision fp8 --fp8_backend=TE --fp8_format e4m3 --fp8_margin 2 "
      .. "--fp8_interval=3 --fp8_amax_history_len 16 --fp8_amax_compute_algo max "
      .. "--fp8_override_linear_precision false,false,true --fp8_use_autocast_during_eval "
      .. "--fp8_opt_level o1 --fp8_pad_inner_dim false "
      .. q(ENV_SCRIPT) .. " a 'b c' --not-ours")
    assert.are.equal(0, code, err)
    local r = report(out)
    assert.are.same({
      FP8LAB_MIXED_PRECISION = "fp8", FP8LAB_FP8_BACKEND = "te", FP8LAB_FP8_FORMAT = "E4M3", FP8LAB_FP8_MARGIN = "2",
      FP8LAB_FP8_INTERVAL = "3", FP8LAB_FP8_AMAX_HISTORY_LEN = "16", FP8LAB_FP8_AMAX_COMPUTE_ALGO = "max",
      FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION = "false,false,true", FP8LAB_FP8_OPT_LEVEL = "O1",
      FP8LAB_FP8_USE_AUTOCAST_DURING_EVAL = "true", FP8LAB_FP8_PAD_INNER_DIM = "false",
      FP8LAB_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER = "nil", FP8LAB_CONFIG_FILE = "nil", FP8LAB_NUM_PROCESSES = "1",
      FP8LAB_RANK = "0", FP8LAB_WORLD_SIZE = "1", ARGS = "a|b c|--not-ours",
    }, r)
    -- Accelerate's torchao flag for FSDP's FP8 all-gather is known and refused: there is no FSDP here
    local _, err2, code2 = run("launch --fp8_backend ao --fp8_enable_fsdp_float8_all_gather=no " .. q(ENV_SCRIPT))
    assert.are.equal(2, code2)
    assert.truthy(err2:find("--fp8_enable_fsdp_float8_all_gather: not supported: fp8lab has no FSDP", 1, true), err2)
  end)

  it("takes flag names with hyphens as with underscores, as Accelerate's launcher does (--num-processes)", function()
    local out, err, code = run("launch --mixed-precision fp8 --fp8-backend=te --fp8-margin 2 "
      .. "--num-cpu-threads-per-process 1 " .. q(ENV_SCRIPT) .. " --not-ours")
    assert.are.equal(0, code, err)
    local r = report(out)
    assert.are.same({ "fp8", "te", "2", "--not-ours" },
      { r.FP8LAB_MIXED_PRECISION, r.FP8LAB_FP8_BACKEND, r.FP8LAB_FP8_MARGIN, r.ARGS })
    local d = tmpdir()
    _, err, code = run("config --default --mixed-precision bf16 --config-file " .. q(d .. "/c.yaml"))
    assert.are.equal(0, code, err)
    assert.truthy(U.read(d .. "/c.yaml"):find("mixed_precision: 'bf16'", 1, true))
    -- an unknown one is named as typed
    _, err, code = run("launch --use-fsdp " .. q(ENV_SCRIPT))
    assert.are.equal(2, code)
    assert.truthy(err:find("unknown flag --use-fsdp", 1, true), err)
  end)

  it("runs a script from stdin with -, and after --", function()
    local out, err, code = run("launch --fp8_margin 1 - a", "print('stdin', os.getenv('FP8LAB_FP8_MARGIN'), ...)\n")
    assert.are.equal(0, code, err)
    assert.are.equal("stdin\t1\ta\n", out)
    out, err, code = run("launch -- " .. q(ENV_SCRIPT) .. " --fp8_margin")
    assert.are.equal(0, code, err)
    assert.are.equal("--fp8_margin", report(out).ARGS)
    _, err, code = run("launch --num_processes 2 -", "print(1)\n")
    assert.are.equal(2, code)
    assert.truthy(err:find("a script on stdin reaches only one process", 1, true), err)
  end)

  it("passes the script's exit status through", function()
    local p = os.tmpname()
    local f = assert(io.open(p, "w")); f:write("os.exit(7)\n"); f:close()
    local _, _, code = run("launch " .. q(p))
    os.remove(p)
    assert.are.equal(7, code)
  end)

  it("a flag the script's run does not use is refused; the same variable set by hand gets a notice", function()
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write("local acc = fp8.Accelerator{} print(acc.mixed_precision, acc.fp8_backend)\n")
    f:close()
    local out, err, code = run("launch --mixed_precision fp8 --fp8_backend te --fp8_opt_level O3 " .. q(script))
    assert.are.equal(1, code, out)
    assert.truthy(err:find("--fp8_opt_level O3 (a launch flag) would change nothing: opt_level belongs to the msamp "
      .. "recipe and the FP8 backend is te; leave the flag out", 1, true), err)
    _, err, code = run("launch --mixed_precision bf16 --fp8_margin 2 " .. q(script))
    assert.are.equal(1, code)
    assert.truthy(err:find('--fp8_margin 2 (a launch flag) would change nothing: mixed_precision is "bf16", not "fp8"',
      1, true), err)
    -- used: the flags agree
    out, err, code = run("launch --mixed_precision fp8 --fp8_backend msamp --fp8_opt_level O3 " .. q(script))
    assert.are.equal(0, code, err)
    assert.are.equal("fp8\tmsamp\n", out)
    -- the script's handler picks the backend the flag needs: used, so accepted
    f = assert(io.open(script, "w"))
    f:write("local acc = fp8.Accelerator{kwargs_handlers = {fp8.MSAMPRecipeKwargs{}}}\n"
      .. "print(acc.fp8_backend, acc.fp8_recipe.opt_level)\n")
    f:close()
    out, err, code = run("launch --mixed_precision fp8 --fp8_opt_level O3 " .. q(script))
    assert.are.equal(0, code, err)
    assert.are.equal("msamp\tO3\n", out)
    -- a flag the script's own setting overrides changes nothing: refused (a notice naming the variable until
    -- 2026-12-06)
    out, err, code = run("launch --mixed_precision fp8 --fp8_backend te --fp8_opt_level O3 " .. q(script))
    assert.are.equal(1, code, out)
    assert.truthy(err:find("--fp8_backend te (a launch flag) would change nothing: the script sets it, "
      .. "MSAMPRecipeKwargs (backend msamp)", 1, true), err)
    -- a variable set by hand: a notice, and the run goes on
    out, err, code = run("launch --mixed_precision fp8 " .. q(script), nil, "FP8LAB_FP8_BACKEND=te FP8LAB_FP8_OPT_LEVEL=O3 ")
    assert.are.equal(0, code, err)
    assert.truthy(err:find("FP8LAB_FP8_BACKEND=te overridden by", 1, true), err)
    -- a launch without flags, started inside an outer launch's run: the outer's flags are variables set before it
    f = assert(io.open(script, "w"))
    f:write("local acc = fp8.Accelerator{} print(acc.mixed_precision)\n")
    f:close()
    out, err, code = run("launch " .. q(script), nil,
      "FP8LAB_FP8_MARGIN=2 FP8LAB_LAUNCH_FLAGS=FP8LAB_FP8_MARGIN=--fp8_margin ")
    os.remove(script)
    assert.are.equal(0, code, err)
    assert.truthy(err:find("FP8LAB_FP8_MARGIN=2 ignored", 1, true), err)
  end)

  it("a flag overrides an FP8LAB_* variable; a variable without a flag is kept", function()
    local out, err, code = run("launch --fp8_margin 3 " .. q(ENV_SCRIPT), nil,
      "FP8LAB_FP8_MARGIN=1 FP8LAB_FP8_INTERVAL=4 ")
    assert.are.equal(0, code, err)
    local r = report(out)
    assert.are.equal("3", r.FP8LAB_FP8_MARGIN)
    assert.are.equal("4", r.FP8LAB_FP8_INTERVAL)
  end)

  it("checks FP8LAB_* variables and names the bad one", function()
    local _, err, code = run("launch " .. q(ENV_SCRIPT), nil, "FP8LAB_FP8_INTERVAL=soon ")
    assert.are.equal(1, code)
    assert.truthy(err:find('FP8LAB_FP8_INTERVAL: expected an integer >= 1, got "soon"', 1, true), err)
    -- past the cap of an "unbounded" integer, the cap is the reason given
    _, err, code = run("launch " .. q(ENV_SCRIPT), nil, "FP8LAB_FP8_INTERVAL=3000000000 ")
    assert.are.equal(1, code)
    assert.truthy(err:find("FP8LAB_FP8_INTERVAL: expected an integer in 1..1000000000, got 3000000000", 1, true), err)
    U.fails_with("interval: expected an integer in 1..1000000000, got 2147483647", fp8.TERecipeKwargs, { interval = 2147483647 })
  end)

  it("hands the config file to the script (absolute path) and prints its notice once", function()
    local out, err, code = run("launch --config_file tests/data/config/good/accelerate_override_false.yaml " .. q(ENV_SCRIPT))
    assert.are.equal(0, code, err)
    local r = report(out)
    assert.truthy(r.FP8LAB_CONFIG_FILE:find("^/.*/tests/data/config/good/accelerate_override_false%.yaml$"), r.FP8LAB_CONFIG_FILE)
    assert.are.equal("nil", r.FP8LAB_MIXED_PRECISION)   -- the file's settings are read from the file, below the flags
    local _, n = err:gsub("ignoring settings that only matter to Accelerate", "")
    assert.are.equal(1, n, err)
  end)

  it("fp8lab test runs specs of the tree, passing busted arguments through", function()
    local out, err, code = run("test tests/spec/kwargs_spec.lua")
    assert.are.equal(0, code, err)
    assert.matches("%d+ successes / 0 failures", out)
    out, _, code = run("test --help")
    assert.are.equal(0, code)
    assert.matches("usage: fp8lab test", out)
  end)

  it("precedence end to end: handler > launch flag > config file > default", function()
    local d = tmpdir()
    local cfg = d .. "/c.yaml"
    require("fp8.config").write(cfg, { mixed_precision = "fp8",
      fp8_config = { backend = "te", margin = 2, interval = 5, amax_history_len = 64 } })
    local script = d .. "/s.lua"
    local f = assert(io.open(script, "w"))
    f:write([[
local acc = fp8.Accelerator{ kwargs_handlers = { fp8.TERecipeKwargs{ amax_history_len = 8 } } }
local r = acc.fp8_recipe
print(acc.mixed_precision, acc.fp8_backend, r.margin, r.interval, r.amax_history_len, r.amax_compute_algo)
]])
    f:close()
    local out, err, code = run("launch --config_file " .. q(cfg) .. " --fp8_margin 3 " .. q(script))
    os.execute("rm -rf " .. q(d))
    assert.are.equal(0, code, err)
    -- mixed_precision and backend from the file, margin from the flag (over the file's 2), interval
    -- from the file, history length from the handler (over the file's 64), algo the default
    assert.are.equal("fp8\tte\t3\t5\t8\tmost_recent\n", out)
  end)

  it("uses the default config file when there is one", function()
    local d = tmpdir()
    require("fp8.config").write(d .. "/fp8lab/default_config.yaml", { mixed_precision = "bf16" })
    local out, err, code = run("launch " .. q(ENV_SCRIPT), nil, "XDG_CACHE_HOME=" .. q(d) .. " ")
    os.execute("rm -rf " .. q(d))
    assert.are.equal(0, code, err)
    assert.are.equal(d .. "/fp8lab/default_config.yaml", report(out).FP8LAB_CONFIG_FILE)
  end)

  it("stops on a bad config file with file:line:column", function()
    local _, err, code = run("launch --config_file tests/data/config/bad/format_e5m2.yaml " .. q(ENV_SCRIPT))
    assert.are.equal(1, code)
    assert.truthy(err:find("format_e5m2.yaml:4:15: fp8_config.fp8_format: E5M2 alone", 1, true), err)
    _, err, code = run("launch --config_file /nonexistent.yaml " .. q(ENV_SCRIPT))
    assert.are.equal(1, code)
    assert.truthy(err:find("/nonexistent.yaml: cannot open config file", 1, true), err)
  end)

  it("rejects unknown flags with the nearest one, bad values with the choices", function()
    local cases = {
      { "launch --fp8_marign 2 x.lua", "unknown flag --fp8_marign (did you mean --fp8_margin?)" },
      { "launch --num_process 2 x.lua", "unknown flag --num_process (did you mean --num_processes?)" },
      { "launch --fp8_backend foo x.lua", '--fp8_backend: expected one of msamp, te, ao, got "foo"' },
      { "launch --fp8_format E5M2 x.lua", "--fp8_format: E5M2 alone is not a training format" },
      { "launch --fp8_margin=-1 x.lua", "--fp8_margin: expected an integer in 0..64, got -1" },
      { "launch --fp8_override_linear_precision true,false x.lua", "--fp8_override_linear_precision: expected three booleans" },
      { "launch --fp8_pad_inner_dim=maybe x.lua", '--fp8_pad_inner_dim: expected a boolean (true or false), got "maybe"' },
      { "launch --num_processes 0 x.lua", "--num_processes: expected an integer in 1..4096, got 0" },
      -- libgomp crashes when it cannot start the threads (100000: a segfault); 1e9 is not an integer flag's form
      { "launch --num_cpu_threads_per_process 100000 x.lua", '--num_cpu_threads_per_process: expected an integer in 1..1024, got "100000"' },
      { "launch --num_cpu_threads_per_process 1e9 x.lua", '--num_cpu_threads_per_process: expected an integer in 1..1024, got "1e9"' },
      { "launch --fp8_interval", "--fp8_interval needs a value N" },
      { "launch -x x.lua", "unknown flag -x" },
      { "launch", "no script given" },
    }
    for _, c in ipairs(cases) do
      local out, err, code = run(c[1])
      assert.are.equal(2, code, c[1])
      assert.are.equal("", out)
      assert.truthy(err:find(c[2], 1, true), c[1] .. " -> " .. err)
    end
  end)

  it("-h lists every flag; after --fp8_backend only that backend's", function()
    local all = run("launch -h")
    for _, f in ipairs { "--config_file", "--num_processes", "--mixed_precision", "--fp8_backend", "--fp8_format",
      "--fp8_margin", "--fp8_interval", "--fp8_amax_history_len", "--fp8_amax_compute_algo",
      "--fp8_override_linear_precision", "--fp8_use_autocast_during_eval", "--fp8_opt_level", "--fp8_pad_inner_dim",
      "--fp8_enable_fsdp_float8_all_gather" } do
      assert.truthy(all:find(f, 1, true), "launch -h lacks " .. f)
    end
    local te, _, code = run("launch --fp8_backend te -h")
    assert.are.equal(0, code)
    assert.truthy(te:find("--fp8_margin", 1, true) and te:find("--fp8_amax_history_len", 1, true))
    assert.truthy(te:find("--mixed_precision", 1, true) and te:find("--num_processes", 1, true))
    assert.falsy(te:find("--fp8_opt_level", 1, true))
    assert.falsy(te:find("--fp8_pad_inner_dim", 1, true))
    local ms = run("launch --fp8_backend=msamp --help")
    assert.truthy(ms:find("--fp8_opt_level", 1, true))
    assert.falsy(ms:find("--fp8_margin", 1, true))
  end)

  local has_mpirun = os.execute("command -v mpirun >/dev/null 2>&1")

  it("--num_processes 2 starts two ranks through mpirun", function()
    if not has_mpirun then pending("mpirun not installed") return end
    local out, err, code = run("launch --num_processes 2 --mixed_precision bf16 " .. q(ENV_SCRIPT) .. " x")
    assert.are.equal(0, code, err)
    local ranks = {}
    for r in out:gmatch("FP8LAB_RANK=(%d+)") do ranks[#ranks + 1] = tonumber(r) end
    table.sort(ranks)
    assert.are.same({ 0, 1 }, ranks)
    local _, n = out:gsub("FP8LAB_WORLD_SIZE=2", "")
    assert.are.equal(2, n)
    _, n = out:gsub("FP8LAB_MIXED_PRECISION=bf16", "")
    assert.are.equal(2, n)
    _, n = out:gsub("ARGS=x\n", "")
    assert.are.equal(2, n)
  end)

  it("a boolean flag takes y/n as its value, as the settings do", function()
    local out, err, code = run("launch --cpu y " .. q(ENV_SCRIPT) .. " a")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("ARGS=a", 1, true), out)
    out, err, code = run("launch --fp8_use_autocast_during_eval N " .. q(ENV_SCRIPT))
    assert.are.equal(0, code, err)
  end)

  it("booleans take t/f as Accelerate's str_to_bool does: flags, the override's items, variables", function()
    local out, err, code = run("launch --mixed_precision fp8 --fp8_backend te --fp8_use_autocast_during_eval T "
      .. "--fp8_override_linear_precision t,F,t " .. q(ENV_SCRIPT) .. " a")
    assert.are.equal(0, code, err)
    local r = report(out)
    assert.are.same({ "true", "true,false,true", "a" },
      { r.FP8LAB_FP8_USE_AUTOCAST_DURING_EVAL, r.FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION, r.ARGS })
    out, err, code = run("-e 'print(fp8.Accelerator{}.settings.use_cpu)'", nil, "FP8LAB_USE_CPU=t ")
    assert.are.equal(0, code, err)
    assert.are.equal("true\n", out)
  end)

  it("a rank that exits with a status ends the job with that status", function()
    if not has_mpirun then pending("mpirun not installed") return end
    local s = os.tmpname()
    U.write(s, "local acc = fp8.Accelerator{}\nif acc.process_index == 1 then os.exit(3) end\nacc:wait_for_everyone()\n")
    local _, err, code = run("launch --num_processes 2 " .. q(s))
    os.remove(s)
    assert.are.equal(3, code, err)
    assert.truthy(err:find("rank 1 of 2 failed (exit status 3)", 1, true), err)
  end)

  it("prints a config file's notices once, the Accelerator's included", function()
    local s = os.tmpname()
    U.write(s, "local acc = fp8.Accelerator{}\nprint(acc.mixed_precision)\n")
    local _, err, code = run("launch --config_file tests/data/config/good/accelerate_override_false.yaml " .. q(s))
    assert.are.equal(0, code, err)
    local _, n = err:gsub("ignoring settings that only matter to Accelerate", "")
    assert.are.equal(1, n, err)
    -- run directly, the Accelerator prints them
    _, err, code = run(q(s), nil, "FP8LAB_CONFIG_FILE=tests/data/config/good/accelerate_override_false.yaml ")
    os.remove(s)
    assert.are.equal(0, code, err)
    _, n = err:gsub("ignoring settings that only matter to Accelerate", "")
    assert.are.equal(1, n, err)
  end)

  it("takes num_processes from the config file when the flag is absent", function()
    if not has_mpirun then pending("mpirun not installed") return end
    local p = os.tmpname()
    require("fp8.config").write(p, { num_processes = 2 })
    local out, err, code = run("launch --config_file " .. q(p) .. " " .. q(ENV_SCRIPT))
    assert.are.equal(0, code, err)
    local _, n = out:gsub("FP8LAB_WORLD_SIZE=2", "")
    assert.are.equal(2, n)
    out = run("launch --num_processes 1 --config_file " .. q(p) .. " " .. q(ENV_SCRIPT))
    os.remove(p)
    assert.are.equal("1", report(out).FP8LAB_WORLD_SIZE)
  end)
end)

describe("FP8LAB_* variables fp8lab does not read", function()
  it("fp8lab env lists every FP8LAB_* variable set; the Accelerator names a misspelled one", function()
    local out, err, code = run("env", nil, "FP8LAB_MIXED_PRECISON=fp8 FP8LAB_SOMETHING=1 FP8LAB_VERBOSE=1 ")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("FP8LAB_MIXED_PRECISON=fp8   (not read by fp8lab: did you mean FP8LAB_MIXED_PRECISION?)", 1, true), out)
    assert.truthy(out:find("FP8LAB_SOMETHING=1   (not read by fp8lab)", 1, true), out)
    assert.truthy(out:find("  FP8LAB_VERBOSE=1\n", 1, true), out)
    -- a setting's variable with a value launch and the Accelerator would refuse is marked as such
    out, err, code = run("env", nil, "FP8LAB_MIXED_PRECISION=fp9 FP8LAB_FP8_MARGIN=2 ")
    assert.are.equal(1, code, err)   -- all shown, and the status says a setting was bad
    assert.truthy(out:find('FP8LAB_MIXED_PRECISION=fp9   (invalid: FP8LAB_MIXED_PRECISION: expected one of no, fp16, '
      .. 'bf16, fp8, got "fp9")', 1, true), out)
    assert.truthy(out:find("  FP8LAB_FP8_MARGIN=2\n", 1, true), out)
    local o2, e2, c2 = run("-e " .. q("print(fp8.Accelerator{}.mixed_precision)"), nil, "FP8LAB_MIXED_PRECISON=fp8 ")
    assert.are.equal(0, c2, e2)
    assert.are.equal("no\n", o2)
    assert.truthy(e2:find("notice: FP8LAB_MIXED_PRECISON is not an fp8lab variable and is ignored (did you mean "
      .. "FP8LAB_MIXED_PRECISION?)", 1, true), e2)
    -- Accelerate's own variables, kept from an Accelerate setup, are named with fp8lab's counterpart
    o2, e2, c2 = run("-e " .. q("print(fp8.Accelerator{}.mixed_precision)"), nil,
      "ACCELERATE_MIXED_PRECISION=fp8 ACCELERATE_SOMETHING_ELSE=1 ")
    assert.are.equal(0, c2, e2)
    assert.are.equal("no\n", o2)
    assert.truthy(e2:find("notice: ACCELERATE_MIXED_PRECISION is Accelerate's and is not read; fp8lab reads "
      .. "FP8LAB_MIXED_PRECISION", 1, true), e2)
    assert.falsy(e2:find("ACCELERATE_SOMETHING_ELSE", 1, true), e2)
    local env_out, _, env_code = run("env", nil, "ACCELERATE_MIXED_PRECISION=fp8 ")   -- listed there too
    assert.are.equal(0, env_code)
    assert.truthy(env_out:find("  ACCELERATE_MIXED_PRECISION is Accelerate's and is not read; fp8lab reads "
      .. "FP8LAB_MIXED_PRECISION", 1, true), env_out)
    -- accelerate launch --fp8_override_linear_precision sets three variables; fp8lab has one for the three
    o2, e2, c2 = run("-e " .. q("print(fp8.Accelerator{}.mixed_precision)"), nil, "ACCELERATE_FP8_OVERRIDE_WGRAD=True ")
    assert.are.equal(0, c2, e2)
    assert.truthy(e2:find("notice: ACCELERATE_FP8_OVERRIDE_WGRAD is Accelerate's and is not read; fp8lab reads "
      .. "FP8LAB_FP8_OVERRIDE_LINEAR_PRECISION", 1, true), e2)
  end)

  it("OMP_NUM_THREADS past 1024 and a missing FP8LAB_LUA_DIR are said, not crashed on or ignored", function()
    local out, err, code = run("-e " .. q("print(1)"), nil, "OMP_NUM_THREADS=100000 ")
    assert.are.equal(2, code, err)
    assert.truthy(err:find("OMP_NUM_THREADS=100000: at most 1024 threads per process", 1, true), err)
    -- as libgomp reads it: leading spaces, a '+', every entry of the list (these passed the check and segfaulted)
    for _, v in ipairs { " 100000", "+100000", "2,100000" } do
      _, err, code = run("-e " .. q("print(1)"), nil, "OMP_NUM_THREADS=" .. q(v) .. " ")
      assert.are.equal(2, code, v .. ": " .. err)
      assert.truthy(err:find("at most 1024 threads per process", 1, true), err)
    end
    out, _, code = run("-e " .. q("print(1)"), nil, "OMP_NUM_THREADS=' 2' ")
    assert.are.equal(0, code); assert.are.equal("1\n", out)
    out, err, code = run("-e " .. q("print(1)"), nil, "FP8LAB_LUA_DIR=/nonexistent/dir ")
    assert.are.equal(0, code, err)
    assert.are.equal("1\n", out)
    assert.truthy(err:find("FP8LAB_LUA_DIR=/nonexistent/dir is not a directory", 1, true), err)
  end)
end)

describe("fp8lab env", function()
  it("prints versions, hardware, variables and the config", function()
    local out, err, code = run("env", nil, "FP8LAB_FP8_MARGIN=2 FP8LAB_HISTSIZE=5 FP8LAB_CONFIG_FILE=tests/data/config/good/accelerate_te.yaml ")
    assert.are.equal(0, code, err)
    for _, pat in ipairs { "fp8lab%s+0%.1", "Lua%s+Lua 5%.4", "libyaml%s+%d+%.%d+", "oneDNN%s+%S+", "CUDA%s+%S+",
      "cuBLASLt%s+%S+", "NCCL%s+%S+", "MPI%s+%S+", "OpenMP%s+%d+ threads", "CPU%s+%S+", "CPU flags%s+avx512f (%a+)",
      "avx512vbmi %a+", "amx_bf16 %a+", "CPU ISA%s+all this CPU has %(FP8LAB_CPU_ISA caps it",
      "FP8 GEMM%s+[%w_]+: fp8lab's own kernels", "GPUs%s+%S+", "\nEnvironment\n", "FP8LAB_FP8_MARGIN=2", "\nConfig\n",
      "accelerate_te%.yaml %(FP8LAB_CONFIG_FILE%)", "notice: .*ignoring settings", "  backend: TE" } do
      assert.truthy(out:find(pat), "env lacks " .. pat .. "\n" .. out)
    end
    -- each CPU flag as /proc/cpuinfo has it (a name misspelt there would read "no" everywhere)
    local f = io.open("/proc/cpuinfo")
    local flags = " " .. ((f and f:read("a") or ""):match("\nflags%s*:%s*([^\n]+)") or "") .. " "
    if f then f:close() end
    for _, flag in ipairs { "avx512f", "avx512_bf16", "avx512vbmi", "amx_tile", "amx_bf16" } do
      local want = flags:find(" " .. flag .. " ", 1, true) and "yes" or "no"
      assert.truthy(out:find(flag .. " " .. want, 1, true), flag .. " " .. want .. "\n" .. out)
    end
    assert.truthy(out:find("\n  FP8LAB_HISTSIZE=5\n", 1, true), out)   -- read by the REPL: not marked unknown
    -- the devices tensors can go to here: cuda when this machine has a usable GPU
    local ok, cuda = pcall(require, "fp8.cuda")
    local want = (ok and cuda.is_available()) and "cpu, cuda" or "cpu"
    assert.truthy(out:find("\ndevices%s+" .. want:gsub("%p", "%%%0") .. "\n"), out)
  end)

  it("shows the notices an Accelerator would give for the config file alone, as config --check", function()
    local d = tmpdir()
    local p = d .. "/c.yaml"
    local f = assert(io.open(p, "w"))
    f:write("mixed_precision: fp8\nfp8_config:\n  backend: msamp\n  margin: 2\n")
    f:close()
    local out, _, code = run("env --config_file " .. q(p))
    local chk = run("config --check --config_file " .. q(p))
    os.execute("rm -rf " .. q(d))
    assert.are.equal(0, code)
    local want = "notice: config file " .. p .. ": fp8_config.margin=2 ignored: margin belongs to the te recipe and "
      .. "the FP8 backend is msamp"
    assert.truthy(out:find(want, 1, true), out)
    assert.truthy(chk:find(want, 1, true), chk)
  end)

  it("shows a broken config file's error, and exits 1 as the other sub-commands do", function()
    local out, _, code = run("env --config_file tests/data/config/bad/typo_top.yaml")
    assert.are.equal(1, code)
    assert.truthy(out:find("error: tests/data/config/bad/typo_top.yaml:1:1: unknown key 'mixed_precison'", 1, true), out)
    assert.truthy(out:find("  mixed_precison: fp8", 1, true), out)
  end)

  it("refuses a named pipe or a device as the config file without opening it (env and launch blocked on a pipe)",
    function()
    local d = tmpdir()
    assert.is_true(os.execute("mkdir -p " .. q(d .. "/fp8lab") .. " && mkfifo " .. q(d .. "/pipe.yaml") .. " "
      .. q(d .. "/fp8lab/default_config.yaml")))
    -- timeout: the old code waited for a writer for ever
    local out, _, code = run("env --config_file " .. q(d .. "/pipe.yaml"), nil, "timeout 60 ")
    assert.are.equal(1, code, out)
    assert.truthy(out:find("pipe.yaml: is a named pipe, not a regular file", 1, true), out)
    out, _, code = run("env", nil, "timeout 60 env XDG_CACHE_HOME=" .. q(d) .. " ")   -- the default location
    assert.are.equal(1, code, out)
    assert.truthy(out:find("default_config.yaml (default location)", 1, true), out)
    assert.truthy(out:find("is a named pipe", 1, true), out)
    local _, err
    _, err, code = run("launch " .. q(ENV_SCRIPT), nil, "timeout 60 env XDG_CACHE_HOME=" .. q(d) .. " ")
    assert.are.equal(1, code, err)
    assert.truthy(err:find("default_config.yaml: is a named pipe", 1, true), err)
    os.execute("rm -rf " .. q(d))
    -- a device is refused and its bytes not shown (/dev/zero's 64 KiB were printed as one line of escapes)
    out, _, code = run("env --config_file /dev/zero", nil, "timeout 60 ")
    assert.are.equal(1, code, out)
    assert.truthy(out:find("is a device, not a regular file", 1, true), out)
    assert.is_nil(out:find("\\x00"), out:sub(1, 300))
  end)

  it("lists the GPUs nvidia-smi reports, with FP8 from compute capability 8.9", function()
    local d = tmpdir()
    local f = assert(io.open(d .. "/nvidia-smi", "w"))
    f:write("#!/bin/sh\necho '0, NVIDIA H100 80GB HBM3, 9.0, 550.54.15'\necho '1, NVIDIA A100-SXM4-40GB, 8.0, 550.54.15'\n")
    f:close()
    os.execute("chmod +x " .. q(d .. "/nvidia-smi"))
    local out = run("env", nil, "PATH=" .. q(d) .. ":\"$PATH\" ")
    os.execute("rm -rf " .. q(d))
    assert.truthy(out:find("GPUs%s+0: NVIDIA H100 80GB HBM3, compute capability 9%.0, FP8 yes, driver 550%.54%.15\n"), out)
    assert.truthy(out:find("\n%s+1: NVIDIA A100%-SXM4%-40GB, compute capability 8%.0, FP8 no %(needs 8%.9%+%)"), out)
  end)

  it("says when there is no config file", function()
    local out = run("env")
    assert.truthy(out:find("none (" .. CACHE .. "/fp8lab/default_config.yaml does not exist", 1, true), out)
  end)
end)

describe("FP8LAB_CPU_ISA", function()
  local f = io.open("/proc/cpuinfo")
  local info = f and f:read("a") or ""
  if f then f:close() end
  local flags = " " .. (info:match("\nflags%s*:%s*([^\n]+)") or "") .. " "
  local intel = info:match("vendor_id%s*:%s*GenuineIntel") ~= nil   -- vdpbf16ps at half the FMA's rate there
  local function has(flag) return flags:find(" " .. flag .. " ", 1, true) ~= nil end
  local avx512 = has("avx512f") and has("avx512bw") and has("avx512vl") and has("avx512dq")
  local bf16 = avx512 and has("avx512_bf16")
  local amx = bf16 and has("amx_bf16") and has("avx512vbmi")
  -- The kernel family each cap leaves the FP8 GEMM on this CPU, and whether oneDNN may use AMX / AVX-512 for a bf16
  -- GEMM (it reports its kernel with ONEDNN_VERBOSE).
  local SCRIPT = os.tmpname()
  U.write(SCRIPT, [[
local fp8 = require "fp8"
local c = fp8.matmul(fp8.randn{64, 256}:to("bf16"), fp8.randn{256, 128}:to("bf16"))
local sys = require("fp8.config").sys
print("CAP=" .. sys.cpu_isa() .. " FAMILY=" .. tostring(sys.cpu_fp8_gemm()) .. " SUM=" .. tostring(c:sum():item() == c:sum():item()))
]])

  it("caps the kernels fp8lab picks and oneDNN's, at each level", function()
    local fma = avx512 and "avx512_fma" or "avx2_fma"
    local dot = (bf16 and not intel) and "avx512_bf16" or fma
    local want = { avx2 = "avx2_fma", avx512 = fma, avx512_bf16 = dot, amx = amx and "amx_bf16" or dot }
    for cap, family in pairs(want) do
      local out, err, code = run(q(SCRIPT), nil, "FP8LAB_CPU_ISA=" .. cap .. " ONEDNN_VERBOSE=1 ")
      assert.are.equal(0, code, err)
      assert.truthy(out:find("CAP=" .. cap .. " FAMILY=" .. family .. " SUM=true", 1, true), cap .. "\n" .. out)
      local impl = out:match("onednn_verbose,exec,cpu,matmul,([^,]+),") or "none"
      if cap ~= "amx" then assert.falsy(impl:find("amx", 1, true), cap .. ": oneDNN ran " .. impl) end
      if cap == "avx2" then assert.falsy(impl:find("avx512", 1, true), cap .. ": oneDNN ran " .. impl) end
      if cap == "amx" and amx then assert.truthy(impl:find("amx", 1, true), "uncapped oneDNN ran " .. impl) end
      local env = run("env", nil, "FP8LAB_CPU_ISA=" .. cap .. " ")
      assert.truthy(env:find(cap == "amx" and "\nCPU ISA%s+all this CPU has" or ("\nCPU ISA%s+at most " .. cap)), env)
      assert.falsy(env:find("FP8LAB_CPU_ISA=" .. cap .. "   (not read", 1, true), env)
    end
  end)

  it("reaches every rank fp8lab launch starts", function()
    if not os.execute("command -v mpirun >/dev/null 2>&1") then pending("mpirun not installed") return end
    local out, err, code = run("launch --num_processes 2 " .. q(SCRIPT), nil, "FP8LAB_CPU_ISA=avx2 ")
    assert.are.equal(0, code, err)
    local _, n = out:gsub("CAP=avx2 FAMILY=avx2_fma SUM=true", "")
    assert.are.equal(2, n, out)
  end)

  it("takes its word in any case, as the other FP8LAB_ words (AVX2 as ONEDNN_MAX_CPU_ISA writes it)", function()
    local out, err, code = run(q(SCRIPT), nil, "FP8LAB_CPU_ISA=AVX2 ")
    assert.are.equal(0, code, err)
    assert.truthy(out:find("CAP=avx2 FAMILY=avx2_fma SUM=true", 1, true), out)
  end)

  it("refuses a word outside its choices, before anything runs", function()
    for _, args in ipairs { "-e 'print(1)'", "env", "launch --num_processes 1 " .. q(SCRIPT) } do
      local out, err, code = run(args, nil, "FP8LAB_CPU_ISA=avx512bf16 ")
      assert.are.equal(2, code, args .. "\n" .. out .. err)
      assert.are.equal("", out)
      assert.truthy(err:find('FP8LAB_CPU_ISA: expected one of avx2, avx512, avx512_bf16, amx, got "avx512bf16"', 1, true), err)
    end
  end)

  teardown(function() os.remove(SCRIPT) end)
end)

teardown(function()
  os.remove(ENV_SCRIPT)
  os.execute("rm -rf " .. q(CACHE))
end)
