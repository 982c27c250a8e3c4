-- Found on 2026-12-06 (stop 94): README.md, docs/*.md and help() read and run as written: every example, default,
-- choice list and message they quote against what the code does.
-- docs/robustness.md, "The docs, run as written (stop 94)".
local BIN = FP8LAB_BIN or "build/fp8lab"
local U = dofile("tests/spec/helpers/util.lua")
local q = U.q
local nn = fp8.nn

-- Runs `fp8lab -i` with `input` on stdin (a pipe: each line run as at the prompt); returns stdout, stderr.
local function prompt(input)
  local inp, out, err = os.tmpname(), os.tmpname(), os.tmpname()
  U.write(inp, input)
  os.execute(("%s -i < %s > %s 2> %s"):format(q(BIN), q(inp), q(out), q(err)))
  os.remove(inp)
  return U.take(out), U.take(err)
end

describe("fp8.stats at the prompt", function()
  it("prints its table and then one line for the rows it returns, not every field of every row", function()
    -- docs/checkpoints.md: `t = fp8.load_file(".../model.safetensors")`, then `fp8.stats(t)` prints the recipe state;
    -- the rows it returned then echoed whole, each role's amax history included (1024 numbers a role)
    local dir = U.tmpdir()
    fp8.manual_seed(0)
    local model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16))
    fp8.convert_model(model, { recipe = { backend = "te", amax_history_len = 64 } })
    fp8.save_file(model:state_dict(), dir .. "/model.safetensors")
    local out, err = prompt(("t = fp8.load_file(%q)\nfp8.stats(t)\nfp8.stats(fp8.nn.Sequential(fp8.nn.Linear(2, 2)))\n")
      :format(dir .. "/model.safetensors"))
    os.execute("rm -rf " .. q(dir))
    assert.are.equal("", err)
    assert.truthy(out:find("fp8.stats: 6 rows of 2 layers (rows[i].layer, .role, .scale, ...: help(\"stats\"))\n", 1,
      true), out)
    assert.truthy(out:find("fp8.stats: no rows\n", 1, true), out)
    local lines = select(2, out:gsub("\n", ""))
    assert.is_true(lines <= 10, out)   -- the header, six rows, the summary; the model without FP8 layers' two
  end)

  it("returns the rows as a list, read as before, with that line as its text", function()
    fp8.manual_seed(0)
    local model = nn.Sequential(nn.Linear(16, 16))
    fp8.convert_model(model, { recipe = { backend = "te" } })
    local rows = fp8.stats(model, { quiet = true })
    assert.are.equal(3, #rows)
    assert.are.same({ "input", "weight", "grad" }, { rows[1].role, rows[2].role, rows[3].role })
    assert.are.equal(1, rows[1].scale)
    assert.are.equal("fp8.stats: 3 rows of 1 layer (rows[i].layer, .role, .scale, ...: help(\"stats\"))",
      tostring(rows))
    local saved = fp8.stats(model:state_dict(), { quiet = true })
    assert.are.equal(3, #saved)
    assert.are.equal(1024, #saved[1].history)
    assert.truthy(tostring(saved):find("^fp8.stats: 3 rows of 1 layer"))
  end)
end)
