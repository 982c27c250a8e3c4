-- parity_launch_spec.lua — issue 15 points 6 and 7: launch flags and config files reach the bundled
-- scripts (their options default to the resolved settings), Accelerate's extra launch flags, and
-- scripts/train_char_gpt.lua running every recipe through the Accelerator. Child processes on tiny data.
local bin = FP8LAB_BIN or "build/fp8lab"

local U = dofile("tests/spec/helpers/util.lua")
local tmpdir = U.tmpdir()
assert(os.execute("mkdir -p " .. tmpdir .. "/fm"))

local sh_quote = U.q

-- Runs `fp8lab <words...>` (with `env` prepended); returns output, success.
local function run(words, env)
  local cmd = (env or "") .. " timeout 120 " .. sh_quote(bin)
  for _, a in ipairs(words) do cmd = cmd .. " " .. sh_quote(a) end
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return out, ok == true
end

local synthetic_fmnist = dofile("tests/spec/helpers/synthetic_fmnist.lua")
local function make_dataset(dir, split, n) return synthetic_fmnist(dir, split, n, 777) end
make_dataset(tmpdir .. "/fm", "train", 200)
make_dataset(tmpdir .. "/fm", "t10k", 50)
local neutral = tmpdir .. "/neutral.yaml"   -- a config file that sets nothing relevant (not the user's own)
do local f = assert(io.open(neutral, "w")); f:write("num_processes: 1\n"); f:close() end

local FM = { "scripts/train_fashion_mnist.lua", "--root", tmpdir .. "/fm", "--epochs", "1", "--batch-size", "50",
             "--quiet", "--out", tmpdir .. "/loss.csv" }
local function cat(a, b)
  local t = { table.unpack(a) }
  for _, v in ipairs(b) do t[#t + 1] = v end
  return t
end

describe("launch flags and config files reach the bundled scripts", function()
  it("launch --mixed_precision fp8 --fp8_backend te trains the Fashion-MNIST MLP in FP8 te", function()
    local out, ok = run(cat({ "launch", "--mixed_precision", "fp8", "--fp8_backend", "te" }, FM),
      "env -u FP8LAB_MIXED_PRECISION -u FP8LAB_FP8_BACKEND FP8LAB_CONFIG_FILE=" .. neutral)
    assert.is_true(ok, out)
    assert.matches("mixed precision fp8 %(te HYBRID, %d FP8 layers%)", out)
  end)

  it("a config file's mixed_precision is what the script uses; a script option still wins", function()
    local cfgfile = tmpdir .. "/bf16.yaml"
    local f = assert(io.open(cfgfile, "w"))
    f:write("mixed_precision: bf16\ngradient_accumulation_steps: 2\n")
    f:close()
    local out, ok = run(cat({ "launch", "--config_file", cfgfile }, FM), "env -u FP8LAB_MIXED_PRECISION")
    assert.is_true(ok, out)
    assert.matches("mixed precision bf16, seed 42, gradient accumulation 2", out)
    out, ok = run(cat(cat({ "launch", "--config_file", cfgfile }, FM), { "--mixed-precision", "no" }),
      "env -u FP8LAB_MIXED_PRECISION")
    assert.is_true(ok, out)
    assert.matches("mixed precision no,", out)
  end)

  it("train_char_gpt.lua runs every recipe through the Accelerator, from its options or launch flags", function()
    local path = tmpdir .. "/text.txt"
    local f = assert(io.open(path, "w"))
    f:write(("the quick brown fox jumps over the lazy dog.\n"):rep(40))
    f:close()
    local gpt = { "scripts/train_char_gpt.lua", "--text", path, "--steps", "2", "--block-size", "16", "--layers", "1",
                  "--d-model", "16", "--heads", "2", "--batch-size", "4", "--eval-every", "2", "--sample-len", "4" }
    for _, c in ipairs { { "te", "te HYBRID" }, { "msamp", "msamp O2" }, { "ao", "ao tensorwise" } } do
      local out, ok = run(cat(gpt, { "--mixed-precision", "fp8", "--fp8-backend", c[1] }), "env -u FP8LAB_MIXED_PRECISION")
      assert.is_true(ok, out)
      assert.matches("mixed precision fp8 %(" .. c[2], out)
      assert.matches("final val_loss=[%d%.]+", out)
    end
    local out, ok = run(cat({ "launch", "--mixed_precision", "fp8", "--fp8_backend", "te",
      "--gradient_accumulation_steps", "2" }, gpt), "env -u FP8LAB_MIXED_PRECISION FP8LAB_CONFIG_FILE=" .. neutral)
    assert.is_true(ok, out)
    assert.matches("mixed precision fp8 %(te HYBRID.*gradient accumulation 2", out)
    assert.matches("step 2/2", out)
    out, ok = run(cat(gpt, { "--mixed-precision", "fp16" }))
    assert.is_true(ok, out)
    assert.matches("mixed precision fp16", out)
  end)
end)

describe("Accelerate's launch flags", function()
  local script = tmpdir .. "/show.lua"
  local f = assert(io.open(script, "w"))
  f:write([[print("use_cpu=" .. tostring(os.getenv("FP8LAB_USE_CPU")) .. " device=" .. fp8.Accelerator{config=false}:device()
  .. " threads=" .. fp8.config.sys.omp_max_threads())]])
  f:close()

  it("FP8LAB_USE_CPU takes the flag booleans and refuses anything else", function()
    local code = "print(fp8.Accelerator{config = false}:device())"
    local out, ok = run({ "-e", code }, "FP8LAB_USE_CPU=maybe")
    assert.is_false(ok, out)
    assert.matches("FP8LAB_USE_CPU: expected a boolean", out, 1, true)
    assert.matches('got "maybe" (also yes/no, on/off, y/n, t/f, 1/0, in any case)', out, 1, true)
    for _, v in ipairs { "1", "YES", "on", "true", "0", "off" } do
      out, ok = run({ "-e", code }, "FP8LAB_USE_CPU=" .. v)
      assert.is_true(ok, out)
      assert.matches("cpu", out)   -- no GPU here: the CPU either way; the value is accepted
    end
  end)

  -- The device choice itself, with fp8.cuda.is_available made to say yes (in a child process): the GPU unless
  -- cpu=true or the use_cpu setting from any of its places (the CPU-only code path is all a GPU-less machine runs).
  it("use_cpu from the argument, the variable, launch --cpu or the config file keeps the CPU", function()
    local cfg_cpu = tmpdir .. "/use_cpu.yaml"
    do local f = assert(io.open(cfg_cpu, "w")); f:write("use_cpu: true\n"); f:close() end
    local probe = tmpdir .. "/probe_device.lua"
    do
      local f = assert(io.open(probe, "w"))
      f:write([[require("fp8.cuda").is_available = function() return true end
local acc = fp8.Accelerator{ cpu = os.getenv("PROBE_CPU") == "1" or nil }
print("device=" .. acc:device() .. " source=" .. tostring(acc.settings.sources.use_cpu))]])
      f:close()
    end
    local base = "env -u FP8LAB_USE_CPU FP8LAB_CONFIG_FILE=" .. sh_quote(neutral) .. " "
    local cases = {
      { {}, "", "device=cuda source=default" },
      { {}, "PROBE_CPU=1", "device=cpu source=argument" },
      { {}, "FP8LAB_USE_CPU=yes", "device=cpu source=env" },
      { {}, "FP8LAB_USE_CPU=0", "device=cuda source=env" },
      { {}, "FP8LAB_CONFIG_FILE=" .. sh_quote(cfg_cpu), "device=cpu source=config" },
      { { "launch", "--cpu" }, "", "device=cpu source=env" },
      { { "launch", "--cpu=false", "--config_file", cfg_cpu }, "", "device=cuda source=env" },   -- the flag beats the file
      { { "launch", "--config_file", cfg_cpu }, "", "device=cpu source=config" },
    }
    for _, c in ipairs(cases) do
      local words = {}
      for _, w in ipairs(c[1]) do words[#words + 1] = w end
      words[#words + 1] = probe
      local out, ok = run(words, base .. c[2])
      assert.is_true(ok, out)
      assert.matches(c[3], out, 1, true)
    end
  end)

  it("--cpu runs on the CPU and --num_cpu_threads_per_process sets the threads", function()
    local out, ok = run({ "launch", "--cpu", "--num_cpu_threads_per_process", "3", script }, "env -u FP8LAB_USE_CPU")
    assert.is_true(ok, out)
    assert.matches("use_cpu=true device=cpu threads=3", out)
    out, ok = run({ "launch", "--num_cpu_threads_per_process", "2", script }, "OMP_NUM_THREADS=1")
    assert.is_true(ok, out)
    assert.matches("threads=2", out)   -- the flag, not the environment's 1
    out, ok = run({ "launch", "--num_cpu_threads_per_process", "0", script })
    assert.is_false(ok)
    assert.matches("expected an integer in 1..1024", out)
  end)

  it("--main_process_port and --multi_gpu are refused with the reason", function()
    local out, ok = run({ "launch", "--main_process_port", "29500", script })
    assert.is_false(ok)
    assert.matches("%-%-main_process_port is not supported: .*mpirun", out)
    out, ok = run({ "launch", "--multi_gpu", "--num_processes", "2", script })
    assert.is_false(ok)
    assert.matches("--multi_gpu is not supported: data-parallel training across GPUs is not part of fp8lab yet", out, 1, true)
  end)

  it("Accelerate's launcher settings run at values that change nothing (with a notice); others are refused", function()
    local out, ok = run({ "launch", "--num_machines", "1", "--machine_rank=0", "--gpu_ids", "all", "--dynamo_backend",
      "no", "--same_network", script })
    assert.is_true(ok, out)
    assert.truthy(out:find("notice: --num_machines 1 changes nothing here", 1, true), out)
    assert.truthy(out:find("notice: --same_network changes nothing here", 1, true), out)
    for _, c in ipairs {
      { { "--num_machines", "2" }, "--num_machines \"2\" is not supported: fp8lab's launcher runs on one machine" },
      { { "--dynamo_backend", "inductor" }, "torch.compile backends are not part of fp8lab" },
      { { "--debug" }, "--debug is not supported: Accelerate's debug checks of collectives are not part of fp8lab" },
      { { "--enable_cpu_affinity" }, "--enable_cpu_affinity is not supported: fp8lab does not pin threads" },
      { { "--main_process_ip", "127.0.0.1" }, "--main_process_ip is not supported: mpirun starts and connects" },
      { { "-m" }, "-m is not supported: fp8lab runs Lua scripts" },
      { { "--tee", "3" }, "--tee is not supported" },
    } do
      local argv = { "launch" }
      for _, a in ipairs(c[1]) do argv[#argv + 1] = a end
      argv[#argv + 1] = script
      out, ok = run(argv)
      assert.is_false(ok)
      assert.truthy(out:find(c[2], 1, true), out)
    end
  end)
end)
