-- compare_gpt_spec.lua — scripts/compare_recipes.lua --model gpt (docs/concepts.md "Lessons", issue
-- "The GPT in FP8"): a few steps of three recipes on a text made here give one table with a row per
-- recipe and bf16's gap at 0, the loss CSV; options of the other model are refused.
local bin = FP8LAB_BIN or "build/fp8lab"
local U = dofile("tests/spec/helpers/util.lua")
local tmpdir = U.tmpdir()
local q = U.q
local function run(args)
  local p = assert(io.popen("timeout 120 " .. q(bin) .. " scripts/compare_recipes.lua " .. args .. " 2>&1"))
  local out = p:read("a")
  return out, p:close() == true
end

describe("compare_recipes --model gpt", function()
  it("trains each chosen recipe from the same seed and prints one table", function()
    local text = tmpdir .. "/t.txt"
    local f = assert(io.open(text, "w"))
    for i = 1, 300 do f:write(("line %d of a small text, with words and letters %d.\n"):format(i, i * 7 % 13)) end
    f:close()
    local csv = tmpdir .. "/g.csv"
    local out, ok = run("--model gpt --steps 3 --layers 1 --d-model 32 --block-size 16 --batch-size 4 --only "
      .. "fp32,bf16,te-hybrid --text " .. q(text) .. " --out " .. q(csv))
    assert.is_true(ok, out)
    assert.matches("recipe%s+FP8%s+val loss%s+vs bf16%s+train loss%s+tokens / s%s+peak MiB%s+B / param", out)
    assert.matches("\nbf16%s+0%s+[%d.]+%s+%+0%.00%%", out)
    local fp8_layers = out:match("\nte%-hybrid%s+(%d+)")
    assert.is_true(tonumber(fp8_layers) > 0, out)
    local g = assert(io.open(csv)):read("a")
    assert.matches("^step,fp32,bf16,te%-hybrid\n1,", g)
    -- the validation curve (here only the final point) and one summary row per recipe
    local v = assert(io.open(tmpdir .. "/g-val.csv")):read("a")
    assert.matches("^step,fp32,bf16,te%-hybrid\n3,[%d.]+,[%d.]+,[%d.]+\n$", v)
    local sm = assert(io.open(tmpdir .. "/g-summary.csv")):read("a")
    assert.matches("^recipe,seed,steps,layers,d_model,heads,context,batch,lr,val_loss,", sm)
    assert.matches("\nte%-hybrid,42,3,1,32,4,16,4,0.003,[%d.]+,", sm)
  end)

  it("runs from scripts/ too (compare_recipes_gpt.lua found beside it)", function()
    local text = tmpdir .. "/t2.txt"
    U.write(text, ("a line of text for the GPT.\n"):rep(200))
    local abs = bin:sub(1, 1) == "/" and bin or (os.getenv("PWD") .. "/" .. bin)
    local out, ok = U.sh("cd scripts && timeout 120 " .. q(abs) .. " compare_recipes.lua --model gpt --steps 2 --layers 1 "
      .. "--d-model 16 --heads 2 --block-size 16 --batch-size 2 --only bf16 --text " .. q(text) .. " --out "
      .. q(tmpdir .. "/own/g.csv"))
    assert.is_true(ok, out)
    assert.matches("\nbf16%s+0%s+[%d.]+", out)
  end)

  it("refuses the options of the other model", function()
    local out, ok = run("--model gpt --epochs 2")
    assert.is_false(ok); assert.matches("%-%-epochs applies to %-%-model mlp only", out)
    out, ok = run("--steps 5")
    assert.is_false(ok); assert.matches("%-%-steps applies to %-%-model gpt only", out)
    out, ok = run("--model gpt --d-model 30 --heads 4")
    assert.is_false(ok); assert.matches("%-%-d%-model %(30%) must be a multiple of %-%-heads %(4%)", out)
    out, ok = run("--fp8-stats")
    assert.is_false(ok); assert.matches("%-%-fp8%-stats applies to %-%-model gpt only", out)
    out, ok = run("--model cnn")
    assert.is_false(ok); assert.matches("%-%-model must be mlp or gpt", out)
    out, ok = run("--model gpt --only bf16,te-hybrid,bf16")   -- it ran bf16 twice, two columns of one name
    assert.is_false(ok); assert.matches("%-%-only: 'bf16' is listed twice %(each recipe runs once%)", out)
    -- a usage error is the message alone: no traceback of the script's frames after it
    assert.is_nil(out:find("traceback", 1, true), out)
    out, ok = run("--epochs x")
    assert.is_false(ok); assert.matches("option %-%-epochs expects an integer >= 1, got 'x'", out)
    assert.is_nil(out:find("traceback", 1, true), out)
    -- a launch flag that sets a precision or recipe: refused at once (the fp32 run refused it, naming "no")
    out, ok = U.sh("FP8LAB_LAUNCH_FLAGS=FP8LAB_FP8_BACKEND=--fp8_backend FP8LAB_FP8_BACKEND=te timeout 60 " .. q(bin)
      .. " scripts/compare_recipes.lua --model gpt")
    assert.is_false(ok)
    assert.truthy(out:find("--fp8_backend (a launch flag) does not apply: compare_recipes.lua sets each run's "
      .. "precision", 1, true), out)
  end)
end)
