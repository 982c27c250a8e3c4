-- resume_spec.lua — "resume is exact": for every precision and FP8 recipe, on the MLP and a small
-- GPT (both with dropout, shuffled loaders and an lr schedule), 10 steps straight vs 7 steps +
-- save_state + a NEW fp8lab process + load_state + 3 steps. The last 3 losses and the final model
-- (weights and FP8 recipe state), optimizer and scheduler files must be bit-identical. Step 7 is
-- in the middle of an epoch for both models; one case resumes at an epoch boundary (step 5).
local BIN = FP8LAB_BIN or "build/fp8lab"
local HELPER = "tests/spec/helpers/resume_run.lua"

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

local function run(config, model, steps, mode, dir)
  local ok, out = sh(("timeout 120 %s %s %s %s %d %s %s"):format(BIN, HELPER, config, model, steps, mode, dir))
  assert(ok, ("%s %s %s failed:\n%s"):format(config, model, mode, out))
  local losses = {}
  for s, l in out:gmatch("step (%d+) (%S+)") do losses[tonumber(s)] = l end
  return losses
end

local U = dofile("tests/spec/helpers/util.lua")
local bytes = U.must_read

local function check(config, model, first, resume_mode)
  resume_mode = resume_mode or "resume"
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. dir))
  local straight = run(config, model, 10, "straight", dir)
  run(config, model, first, "first", dir)
  local resumed = run(config, model, 10, resume_mode, dir)
  for s = first + 1, 10 do
    assert.is_not_nil(straight[s], ("no loss line for step %d"):format(s))
    assert.are.equal(straight[s], resumed[s], ("loss at step %d"):format(s))
  end
  assert.is_nil(resumed[first], "the resumed run repeated a step")
  for _, f in ipairs { "model.safetensors", "optimizer.safetensors", "scheduler.json" } do
    assert.is_true(bytes(dir .. "/final_straight/" .. f) == bytes(dir .. "/final_" .. resume_mode .. "/" .. f), f .. " differs")
  end
  os.execute("rm -rf " .. dir)
end

describe("resume in a new process is exact", function()
  for _, config in ipairs { "fp32", "bf16", "fp16", "te_hybrid", "te_e4m3", "ao_tensorwise", "ao_rowwise", "msamp_o1",
                            "msamp_o2", "msamp_o3" } do
    for _, model in ipairs { "mlp", "gpt" } do
      it(config .. " " .. model .. " (mid-epoch)", function() check(config, model, 7) end)
    end
  end
  it("te_hybrid mlp at an epoch boundary", function() check("te_hybrid", "mlp", 5) end)
end)

describe("Accelerate's resume recipes under its default use_stateful_dataloader=false", function()
  -- load_state puts the loader at the start of the interrupted epoch (its shuffled order kept); the script skips
  it("skip_first_batches: te_hybrid mlp (mid-epoch)", function() check("te_hybrid", "mlp", 7, "resume_skip") end)
  it("skip_first_batches: msamp_o2 gpt (mid-epoch)", function() check("msamp_o2", "gpt", 7, "resume_skip") end)
  it("skip_first_batches: te_hybrid mlp at an epoch boundary", function() check("te_hybrid", "mlp", 5, "resume_skip") end)
  -- by_feature/checkpointing.py's: the loop passes over the done batches itself (before 2026-12-06 load_state also
  -- restored the position, so these batches were skipped twice: epoch 2 trained 0 of its 5 batches, without a word)
  it("the loop's own count: fp32 mlp (mid-epoch)", function() check("fp32", "mlp", 7, "resume_manual") end)
  it("the loop's own count: te_hybrid gpt (mid-epoch)", function() check("te_hybrid", "gpt", 7, "resume_manual") end)
  it("the loop's own count: fp32 mlp at an epoch boundary", function() check("fp32", "mlp", 5, "resume_manual") end)
  it("without a skip the interrupted epoch runs again from its first batch, in its shuffled order", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    run("fp32", "mlp", 10, "straight", dir)
    run("fp32", "mlp", 7, "first", dir)
    local naive = run("fp32", "mlp", 10, "resume_naive", dir)
    -- steps 8-10 train on epoch 2's batches 1-3; the straight run trained them as steps 6-8 (other weights, so other
    -- losses); what shows the order kept: the final loader position in the saved state, epoch 2 after batch 3
    assert.is_not_nil(naive[8]); assert.is_not_nil(naive[10])
    local st = require("fp8._checkpoint").json_decode(U.must_read(dir .. "/final_resume_naive/fp8lab_state.json"), "state")
    assert.are.equal(2, st.dataloaders[1].epoch)
    assert.are.equal(3, st.dataloaders[1].batches_served)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("use_stateful_dataloader=true: load_state restores the loader's position", function()
  -- skipping the same number of batches is the same resume (the skip counts from the restored epoch's start)
  it("skip_first_batches of the restored count: te_hybrid mlp (mid-epoch)", function()
    check("te_hybrid", "mlp", 7, "resume_skip_stateful")
  end)
  it("a skip other than the restored position wins, with a notice", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    local straight = run("fp32", "mlp", 10, "straight", dir)
    run("fp32", "mlp", 7, "first", dir)
    local ok, out = sh(("timeout 120 %s %s fp32 mlp 10 resume_skip_other %s"):format(BIN, HELPER, dir))
    assert(ok, out)
    assert.are_not.equal(straight[8], out:match("step 8 (%S+)"), "step 8 trained on the batch after the restored one")
    assert.truthy(out:find("skip_first_batches: acc:load_state had this loader resume epoch 2 after batch 2; "
      .. "it resumes after batch 3, as asked", 1, true), out)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("the training scripts' --save-every and --resume", function()
  it("train_char_gpt.lua resumed from step 3 reports what the straight run reports", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    local f = assert(io.open(dir .. "/t.txt", "w"))
    f:write(("hello world, this is a tiny text for a tiny gpt.\nanother line of text to learn from.\n"):rep(20))
    f:close()
    local base = ("timeout 120 %s scripts/train_char_gpt.lua --text %s/t.txt --layers 1 --d-model 16 --heads 2 "
      .. "--block-size 16 --batch-size 4 --sample-len 0 --eval-every 1 --device cpu --steps 6 --checkpoint-dir %s --recipe te-hybrid --csv %s/r.csv"):format(
      BIN, dir, dir, dir)
    local function lines(extra)
      local ok, out = sh(base .. " " .. extra)
      assert(ok, out)
      local t = {}
      for l in out:gmatch("(step %d/6  train_loss=%S+  val_loss=%S+  lr=%S+)") do t[#t + 1] = l end
      t[#t + 1] = out:match("final val_loss=%S+")
      return t
    end
    local straight = lines("")
    lines("--save-every 3")
    local resumed = lines("--resume " .. dir .. "/checkpoints/checkpoint_0")
    assert.are.equal(7, #straight)
    assert.same({ straight[4], straight[5], straight[6], straight[7] }, resumed)
    -- the FP8 stats log holds each step's rows once: the resumed run dropped those past its checkpoint's step
    local function rows_per_step()
      local n = {}
      for l in io.lines(dir .. "/r-fp8stats.csv") do
        local st = tonumber(l:match("^(%d+),"))
        if st then n[st] = (n[st] or 0) + 1 end
      end
      return n
    end
    local per = rows_per_step()
    for st = 1, 6 do assert.are.equal(per[1], per[st], "rows of step " .. st) end
    assert.is_true(per[1] > 0)
    local latest = lines("--resume latest")   -- checkpoint_1 (step 6): nothing left to train
    assert.same({ straight[7] }, latest)
    assert.same(per, rows_per_step())
    -- resumed from the older checkpoint with --save-every again: its checkpoints come after the newest (checkpoint_1
    -- is taken: the save at step 6 was refused after the whole training)
    local ok, out = sh(base .. " --save-every 3 --resume " .. dir .. "/checkpoints/checkpoint_0")
    assert(ok, out)
    assert.truthy(out:find("holds checkpoints up to checkpoint_1, after the one resumed from: this run's are numbered "
      .. "from checkpoint_2", 1, true), out)
    assert.truthy(require("fp8._checkpoint").is_dir(dir .. "/checkpoints/checkpoint_2"))
    os.execute("rm -rf " .. dir)
  end)

  it("fp8.args.after_resume names what is not an Accelerator, and leaves a run without a project_dir alone", function()
    local A = require "fp8.args"
    for _, v in ipairs { false, 3, "acc", fp8.nn.Linear(2, 2) } do
      local ok, err = pcall(A.after_resume, v)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("after_resume: expected the script's fp8.Accelerator, got ", 1, true), err)
    end
    local ok, err = pcall(A.after_resume)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("got nil", 1, true), err)
    local acc = fp8.Accelerator {}
    assert.is_nil(A.after_resume(acc))
  end)

  it("train_fashion_mnist.lua saves every N optimizer steps under accumulation, and a resumed run's CSV holds the whole history", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    -- 12 batches an epoch, 4 per optimizer step: 3 steps an epoch, 6 in all, each saved (the last 3 kept)
    local base = ("timeout 120 %s scripts/train_fashion_mnist.lua --limit 120 --batch-size 10 --epochs 2 "
      .. "--gradient-accumulation-steps 4 --device cpu --quiet --checkpoint-dir %s"):format(BIN, dir)
    local ok, out = sh(base .. " --save-every 1 --out " .. dir .. "/straight.csv")
    assert(ok, out)
    assert.is_nil(out:find("saved at micro-step", 1, true), out)   -- never in the middle of a window
    local C = require "fp8._checkpoint"
    assert.same({ "checkpoint_3", "checkpoint_4", "checkpoint_5" }, C.listdir(dir .. "/checkpoints"))
    for i, micro in ipairs { 4, 8, 0 } do   -- epoch 2's micro-steps 4, 8, and its end (the count starts again)
      local st = C.json_decode(bytes(("%s/checkpoints/checkpoint_%d/fp8lab_state.json"):format(dir, i + 2)))
      assert.are.equal(i + 3, st.step)
      assert.are.equal(micro, st.micro_step)
    end
    local full = bytes(dir .. "/straight.csv")
    assert.are.equal(25, select(2, full:gsub("\n", "")))   -- the header and 24 micro-batches
    -- mid-epoch (step 4) and at the end (step 6, its evaluation included): the same file as the straight run's
    for _, ck in ipairs { "checkpoint_3", "checkpoint_5" } do
      ok, out = sh(base .. " --out " .. dir .. "/resumed.csv --resume " .. dir .. "/checkpoints/" .. ck)
      assert(ok, out)
      assert.are.equal(full, bytes(dir .. "/resumed.csv"), ck)
    end
    assert.truthy(out:find("nothing left to train: the checkpoint is at the end of epoch 2 of 2", 1, true), out)
    os.execute("rm -rf " .. dir)
  end)
end)
