-- resume_spec.lua — "resume is exact" on the GPU: tests/spec/resume_spec.lua's runs (10 steps straight
-- against 7 steps + save_state + a NEW process + load_state + 3 steps, MLP and small GPT with dropout,
-- shuffled loaders and an lr schedule) with the model on the cuda device. The GPU kernels sum in a fixed
-- order for a given shape and cuBLASLt picks the same algorithm for the same shape in every process, so the
-- resumed losses should be the straight run's bits; the bound allowed is 1e-6 relative per loss. Skips
-- without a GPU; FP8LAB_TEST_DEVICE=cpu runs it on the CPU (then bit-identical, as tests/spec holds it).
local BIN = FP8LAB_BIN or "build/fp8lab"
local HELPER = "tests/spec/helpers/resume_run.lua"
local DEV = os.getenv("FP8LAB_TEST_DEVICE") or "cuda"
local have = DEV == "cpu" or fp8.cuda.is_available()
local BOUND = DEV == "cpu" and 0 or 1e-6

local function run(config, model, steps, mode, dir)
  local p = io.popen(("FP8LAB_TEST_DEVICE=%s timeout 300 %s %s %s %s %d %s %s 2>&1"):format(DEV, BIN, HELPER, config,
    model, steps, mode, dir))
  local out = p:read("a")
  local ok = p:close()
  assert(ok, ("%s %s %s failed:\n%s"):format(config, model, mode, out))
  local losses = {}
  for s, l in out:gmatch("step (%d+) (%S+)") do losses[tonumber(s)] = tonumber(l) end
  return losses
end

describe("resume in a new process on the GPU", function()
  if not have then
    it("skips: no GPU", function() print("  skipped: no GPU (" .. tostring(fp8.cuda.unavailable_reason()) .. ")") end)
    return
  end
  for _, config in ipairs { "fp32", "bf16", "te_hybrid", "ao_tensorwise", "ao_rowwise", "msamp_o2" } do
    for _, model in ipairs { "mlp", "gpt" } do
      it(config .. " " .. model .. " (mid-epoch)", function()
        local dir = os.tmpname()
        os.remove(dir)
        assert(os.execute("mkdir -p " .. dir))
        local straight = run(config, model, 10, "straight", dir)
        run(config, model, 7, "first", dir)
        local resumed = run(config, model, 10, "resume", dir)
        local worst = 0
        for s = 8, 10 do
          assert.is_number(resumed[s], "no loss at step " .. s)
          local rel = math.abs(resumed[s] - straight[s]) / math.max(1e-30, math.abs(straight[s]))
          if rel > worst then worst = rel end
        end
        print(("# resume gap %s %s: %.2e (bound %.0e)"):format(config, model, worst, BOUND))
        assert.is_true(worst <= BOUND, ("%s %s: resumed losses %.2e relative from the straight run's"):format(config,
          model, worst))
        os.execute("rm -rf " .. dir)
      end)
    end
  end
end)
