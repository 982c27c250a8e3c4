-- train_spec.lua — end-to-end runs of scripts/train_fashion_mnist.lua and scripts/train_char_gpt.lua
-- as child processes on small generated data: the final line's format, learning on an easy synthetic
-- task, identical loss curves for the same seed, and option errors.
local bin = FP8LAB_BIN or "build/fp8lab"

local U = dofile("tests/spec/helpers/util.lua")
local tmpdir = U.tmpdir()
assert(os.execute("mkdir -p " .. tmpdir .. "/fm"))

local sh_quote = U.q

-- Run a script; returns the combined output and whether it exited with status 0.
local function run(script, args)
  local cmd = sh_quote(bin) .. " " .. script
  for _, a in ipairs(args) do cmd = cmd .. " " .. sh_quote(a) end
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return out, ok == true
end

local function last_line(s)
  local last
  for l in s:gmatch("[^\n]+") do last = l end
  return last
end

local read = U.must_read

local synthetic_fmnist = dofile("tests/spec/helpers/synthetic_fmnist.lua")
local function make_dataset(dir, split, n) return synthetic_fmnist(dir, split, n, 12345) end
make_dataset(tmpdir .. "/fm", "train", 600)
make_dataset(tmpdir .. "/fm", "t10k", 200)

describe("scripts/train_fashion_mnist.lua", function()
  local base = { "--root", tmpdir .. "/fm", "--epochs", "1", "--batch-size", "100", "--quiet" }
  local function args(extra)
    local a = { table.unpack(base) }
    for _, v in ipairs(extra) do a[#a + 1] = v end
    return a
  end

  it("trains, ends with the summary line and writes the loss CSV", function()
    local csv = tmpdir .. "/a.csv"
    local out, ok = run("scripts/train_fashion_mnist.lua", args { "--out", csv, "--seed", "7" })
    assert.is_true(ok, out)
    local last = last_line(out)
    local acc, loss, time, sps = last:match("^final test_acc=(%d+%.%d%d)%% loss=([%d%.]+) time=([%d%.]+)s samples/s=(%d+)$")
    assert.is_truthy(acc, "last line: " .. tostring(last))
    assert.is_true(tonumber(acc) > 80, "synthetic task not learned: " .. last)
    assert.is_true(tonumber(loss) > 0 and tonumber(time) >= 0 and tonumber(sps) > 0)
    assert.matches("epoch 1/1 .* test_acc=", out)
    local text = read(csv)
    assert.matches("^step,epoch,loss,lr,val_loss,val_acc,fp8_underflow,fp8_saturated\n1,1,", text)
    local rows = select(2, text:gsub("\n", ""))
    assert.are.equal(1 + 6, rows)         -- header + 600/100 steps
  end)

  it("an --out it cannot write stops the run before it trains", function()
    -- (its directory exists; the file cannot be made there)
    local out, ok = run("scripts/train_fashion_mnist.lua", args { "--out", "/proc/such.csv" })
    assert.is_false(ok)
    assert.truthy(out:find("cannot write the loss curve: /proc/such.csv", 1, true), out)
    assert.is_nil(out:find("epoch 1/1", 1, true), out)   -- no epoch ran
  end)

  it("gives the same loss curve for the same seed", function()
    local a, b = tmpdir .. "/s1.csv", tmpdir .. "/s2.csv"
    local out1, ok1 = run("scripts/train_fashion_mnist.lua", args { "--out", a, "--seed", "3" })
    local out2, ok2 = run("scripts/train_fashion_mnist.lua", args { "--out", b, "--seed", "3" })
    assert.is_true(ok1 and ok2, out1 .. out2)
    assert.are.equal(read(a), read(b))
    local c = tmpdir .. "/s3.csv"
    run("scripts/train_fashion_mnist.lua", args { "--out", c, "--seed", "4" })
    assert.are_not.equal(read(a), read(c))
  end)

  it("runs every FP8 backend, and its recipe shows in the header", function()
    for _, b in ipairs { { "te", "--fp8-format", "E4M3", "te E4M3" }, { "ao", "--fp8-recipe", "rowwise", "ao rowwise" },
                         { "msamp", "--fp8-opt-level", "O3", "msamp O3" } } do
      local out, ok = run("scripts/train_fashion_mnist.lua", args { "--out", tmpdir .. "/fp8.csv", "--mixed-precision", "fp8",
        "--fp8-backend", b[1], b[2], b[3] })
      assert.is_true(ok, out)
      assert.matches("mixed precision fp8 %(" .. b[4], out)
      assert.matches("^final test_acc=", last_line(out))
    end
  end)

  it("runs in bf16 and fp16 mixed precision", function()
    for _, mp in ipairs { "bf16", "fp16" } do
      local out, ok = run("scripts/train_fashion_mnist.lua", args { "--out", tmpdir .. "/mp.csv", "--mixed-precision", mp })
      assert.is_true(ok, out)
      assert.matches("^final test_acc=", last_line(out))
      if mp == "fp16" then assert.matches("loss_scale=", out) end
    end
  end)

  it("rejects unknown options and bad values, listing the valid ones", function()
    local out, ok = run("scripts/train_fashion_mnist.lua", { "--epoch", "2" })
    assert.is_false(ok)
    assert.matches("unknown option '%-%-epoch' %(valid: %-%-epochs %-%-batch%-size %-%-lr", out)
    out, ok = run("scripts/train_fashion_mnist.lua", { "--mixed-precision", "fp9" })
    assert.is_false(ok)
    assert.matches("must be one of no, bf16, fp16, fp8; got 'fp9'", out)
    out, ok = run("scripts/train_fashion_mnist.lua", { "--fp8-backend", "te" })
    assert.is_false(ok)
    assert.matches("needs %-%-mixed%-precision fp8", out)
    out, ok = run("scripts/train_fashion_mnist.lua", { "--mixed-precision", "fp8", "--fp8-backend", "ao", "--fp8-format", "E4M3" })
    assert.is_false(ok)
    assert.matches("belongs to the te backend, not ao", out)
    out, ok = run("scripts/train_fashion_mnist.lua", { "--epochs", "two" })
    assert.is_false(ok)
    assert.matches("%-%-epochs expects an integer, got 'two'", out)
    out, ok = run("scripts/train_fashion_mnist.lua", { "--root", tmpdir .. "/none", "--epochs", "1" })
    assert.is_false(ok)
    assert.matches("dataset%-fashion%-mnist", out)
    out, ok = run("scripts/train_fashion_mnist.lua", { "--help" })
    assert.is_true(ok)
    assert.matches("%-%-mixed%-precision", out)
  end)
end)

describe("scripts/train_char_gpt.lua", function()
  it("trains a tiny GPT and prints a sample", function()
    local path = tmpdir .. "/text.txt"
    local f = assert(io.open(path, "w"))
    f:write(("the quick brown fox jumps over the lazy dog.\n"):rep(40))
    f:close()
    local out, ok = run("scripts/train_char_gpt.lua", { "--text", path, "--steps", "4", "--block-size", "16",
      "--layers", "1", "--d-model", "16", "--heads", "2", "--batch-size", "4", "--eval-every", "2", "--sample-len", "20" })
    assert.is_true(ok, out)
    assert.matches("step 4/4 +train_loss=[%d%.]+ +val_loss=", out)
    assert.matches("%-%-%-%- sample", out)
    assert.matches("^final val_loss=[%d%.]+ time=", last_line(out))
  end)

  it("--tensorboard logs the reports, the FP8 health, the settings and the sample through the Accelerator's tracker",
    function()
    local path = tmpdir .. "/text3.txt"
    local f = assert(io.open(path, "w"))
    f:write(("the quick brown fox jumps over the lazy dog.\n"):rep(40))
    f:close()
    local tb = tmpdir .. "/tb"
    local out, ok = run("scripts/train_char_gpt.lua", { "--text", path, "--steps", "4", "--block-size", "16",
      "--layers", "1", "--d-model", "16", "--heads", "2", "--batch-size", "4", "--eval-every", "2", "--sample-len", "8",
      "--recipe", "te-hybrid", "--csv", "", "--tensorboard", tb })
    assert.is_true(ok, out)
    local files = {}
    for n in io.popen("find " .. tb .. " -type f | sort"):lines() do files[#files + 1] = n:sub(#tb + 2) end
    assert.are.equal(3, #files)
    assert.matches("^char_gpt/[%d.]+/events%.out%.tfevents%.", files[1])   -- the settings' run: hparams
    assert.matches("^char_gpt/[%d.]+/hparams%.yml$", files[2])
    assert.matches("^char_gpt/events%.out%.tfevents%.", files[3])
    local yml = read(tb .. "/" .. files[2])
    assert.matches('\nmixed_precision: "fp8"\n', yml)
    assert.matches("\nsteps: 4\n", yml)
    -- the run's tags, as the event file holds them (each a length-prefixed string after the tag field's key, 0x0a)
    local events = read(tb .. "/" .. files[3])
    for _, tag in ipairs { "train_loss", "val_loss", "lr", "tokens_per_s", "fp8/input_underflow", "fp8/grad_saturated",
                           "sample/text_summary", "final_val_loss", "fp8/blocks.0.mlp.0/weight/scale",
                           "fp8/blocks.0.attn.qkv/grad/amax" } do
      assert.truthy(events:find("\n" .. string.char(#tag) .. tag, 1, true), tag)
    end
  end)

  it("rejects unknown options", function()
    local out, ok = run("scripts/train_char_gpt.lua", { "--stepz", "4" })
    assert.is_false(ok)
    assert.matches("unknown option '%-%-stepz' %(valid: %-%-steps", out)
  end)

  it("--recipe picks precision and FP8 recipe; reports FP8 health per role and writes the CSVs", function()
    local path = tmpdir .. "/text2.txt"
    local f = assert(io.open(path, "w"))
    f:write(("the quick brown fox jumps over the lazy dog.\n"):rep(40))
    f:close()
    local csv = tmpdir .. "/gpt/r.csv"
    local base = { "--text", path, "--steps", "4", "--block-size", "16", "--layers", "1", "--d-model", "16",
                   "--heads", "2", "--batch-size", "4", "--eval-every", "2", "--sample-len", "0", "--csv", csv }
    for _, c in ipairs { { "te-e4m3", "te E4M3" }, { "ao-rowwise", "ao rowwise," }, { "msamp-O3", "msamp O3" } } do
      local args = { "--recipe", c[1] }
      for _, a in ipairs(base) do args[#args + 1] = a end
      local out, ok = run("scripts/train_char_gpt.lua", args)
      assert.is_true(ok, out)
      assert.matches("mixed precision fp8 %(" .. c[2], out)
      assert.matches("step 4/4  train_loss=[%d.]+  val_loss=[%d.]+  lr=%S+  tokens/s=%d+", out)
      -- ao rowwise makes a scale per row at each cast: no range of one scale to report
      local scales = c[1] == "ao-rowwise" and "scales per row" or "scales %S+%.%.%S+"
      for _, role in ipairs { "input", "weight", "grad" } do
        assert.matches("fp8 " .. role .. " +e[45]m[23]: underflow [%d.]+%%.*, saturated [%d.]+%%.*, " .. scales, out)
      end
      local rows = read(csv)
      assert.matches("^step,train_loss,val_loss,lr,tokens_per_s,elapsed_s,input_underflow_max,", rows)
      assert.matches("\n2,[%d.]+,[%d.]+,[^\n]+\n4,[%d.]+,[%d.]+,[^\n]+\n$", rows)
      assert.matches("^step,layer,role,format,scale,amax,", read(tmpdir .. "/gpt/r-fp8stats.csv"))
    end
    -- bf16: no FP8 columns filled, no stats file
    os.remove(csv)
    local args = { "--recipe", "bf16" }
    for _, a in ipairs(base) do args[#args + 1] = a end
    local out, ok = run("scripts/train_char_gpt.lua", args)
    assert.is_true(ok, out)
    assert.matches("mixed precision bf16", out)
    assert.is_nil(out:find("fp8 input", 1, true))
    assert.matches("\n4,[%d.]+,[%d.]+,[%d.e+-]+,[%d.]+,[%d.]+,,,,,,,,,,,,\n$", read(csv))
  end)

  it("refuses a bad or conflicting --recipe", function()
    local out, ok = run("scripts/train_char_gpt.lua", { "--recipe", "te-e5m2" })
    assert.is_false(ok)
    assert.matches("%-%-recipe must be one of fp32, fp16, bf16, te%-hybrid, .*msamp%-O3; got 'te%-e5m2'", out)
    out, ok = run("scripts/train_char_gpt.lua", { "--recipe", "bf16", "--mixed-precision", "fp8" })
    assert.is_false(ok)
    assert.matches("give it without %-%-mixed%-precision and %-%-fp8%-backend", out)
    out, ok = run("scripts/train_char_gpt.lua", { "--eval-windows", "0" })
    assert.is_false(ok)
    assert.matches("option %-%-eval%-windows expects an integer >= 1, got '0'", out)
  end)
end)
