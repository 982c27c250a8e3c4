-- settings_spec.lua — the one settings table (core/settings.c, fp8.settings): its rows, its one
-- checker and messages, and the bar of issue 17: a row added to the table appears in the kwargs
-- handler, config.yaml, the launch flags, the environment, `fp8lab config` and help() with no other
-- edit. The table holds a test-only row (schema_selftest) that is visible only when
-- FP8LAB_SCHEMA_SELFTEST=1 is set at start-up; the checks of the six places run in child processes
-- started with it.
local BIN = assert(FP8LAB_BIN, "run through tests/busted.lua, which sets FP8LAB_BIN")
local settings = require "fp8.settings"

local U = dofile("tests/spec/helpers/util.lua")
local q, write, slurp = U.q, U.write, U.take

-- run(args [, stdin [, selftest]]) -> stdout, stderr, exit code; a clean FP8LAB_* environment and a
-- private cache directory (no default config file).
local CACHE = os.tmpname()
os.remove(CACHE)
assert(os.execute("mkdir -p " .. q(CACHE)))
local function run(args, input, selftest)
  local out, err, inp = os.tmpname(), os.tmpname(), os.tmpname()
  write(inp, input or "")
  local env = "env -u FP8LAB_CONFIG_FILE -u FP8LAB_MIXED_PRECISION -u FP8LAB_FP8_BACKEND -u FP8LAB_FP8_SCHEMA_SELFTEST "
    .. "-u FP8LAB_NUM_PROCESSES XDG_CACHE_HOME=" .. q(CACHE) .. (selftest and " FP8LAB_SCHEMA_SELFTEST=1 " or " ")
  local _, _, code = os.execute(("%s%s %s <%s >%s 2>%s"):format(env, q(BIN), args, inp, out, err))
  os.remove(inp)
  return slurp(out), slurp(err), code
end

-- A Lua chunk run in a child: prints its result or fails with the error.
local function child(code, selftest)
  local path = os.tmpname() .. ".lua"
  write(path, code)
  local out, err, rc = run(q(path), nil, selftest)
  os.remove(path)
  assert.are.equal(0, rc, err)
  return out
end

describe("the settings table", function()
  it("lists every setting once, with what every place needs", function()
    local seen = {}
    for _, r in ipairs(settings.list()) do
      assert.is_nil(seen[r.name], r.name)
      seen[r.name] = true
      assert.truthy(#r.help > 0, r.name)
      assert.truthy(#r.expected > 0, r.name)
      if r.env then assert.truthy(r.env:find("^FP8LAB_"), r.name) end
      -- a setting read from outside the script is read from everywhere: flag, variable and file
      assert.are.equal(r.env ~= nil, r.flag ~= nil, r.name)
      assert.are.equal(r.env ~= nil, r.file ~= nil, r.name)
    end
    assert.is_nil(seen.schema_selftest, "the self-test row is hidden without FP8LAB_SCHEMA_SELFTEST=1")
  end)

  it("one parser: a flag, a variable, a kwarg and a config value read alike", function()
    assert.are.equal(3, settings.parse("margin", " 3 "))
    assert.are.equal(3, settings.check("margin", 3))
    assert.are.equal(3, settings.coerce("margin", "3"))
    assert.is_true(settings.parse("use_autocast_during_eval", "y"))
    assert.is_false(settings.parse("use_autocast_during_eval", "Off"))
    assert.are.same({ false, false, true }, settings.check("override_linear_precision", { wgrad = true }))
    assert.are.same({ true, false, true }, settings.parse("override_linear_precision", "(true, false, true)"))
    assert.are.equal("te", settings.check("backend", "TE"))
    assert.are.equal("O1", settings.check("optimization_level", "o1"))   -- the alias names the same row
    local ok, err = pcall(settings.check, "margin", "3", "TERecipeKwargs: margin")
    assert.is_false(ok)
    assert.are.equal('TERecipeKwargs: margin: expected an integer in 0..64, got "3"', err)
    ok, err = pcall(settings.parse, "amax_history_len", "0", "--fp8_amax_history_len")
    assert.are.equal("--fp8_amax_history_len: expected an integer in 1..1048576, got 0", err)
    ok, err = pcall(settings.check, "mixed_precision", "fp32")
    assert.are.equal('mixed_precision: expected one of no, fp16, bf16, fp8, got "fp32"', err)
    ok, err = pcall(settings.check, "marign", 1)
    assert.are.equal("settings.check: unknown setting 'marign' (did you mean 'margin'?)", err)
    ok, err = pcall(settings.parse, "marign", "1")   -- each function names itself, not another
    assert.are.equal("settings.parse: unknown setting 'marign' (did you mean 'margin'?)", err)
    ok, err = pcall(settings.format, "marign", 1)
    assert.are.equal("settings.format: unknown setting 'marign' (did you mean 'margin'?)", err)
  end)

  it("one range for amax_history_len: the handler, the file, the flag and the recipe agree", function()
    local R = require "fp8._fp8_layer"
    local msgs = {}
    msgs[1] = select(2, pcall(fp8.TERecipeKwargs, { amax_history_len = 0 }))
    msgs[2] = select(2, pcall(fp8.config.parse, "fp8_config:\n  amax_history_len: 0\n"))
    msgs[3] = select(2, pcall(fp8.config.check, "amax_history_len", "0"))
    msgs[4] = select(2, pcall(R.layer_config, { backend = "te", amax_history_len = 0 }))
    for i, m in ipairs(msgs) do
      assert.truthy(tostring(m):find("expected an integer in 1..1048576, got 0", 1, true), i .. ": " .. tostring(m))
    end
    -- the default comes from the table too: 1024 in the handler, the recipe and every role
    assert.are.equal(1024, fp8.TERecipeKwargs{}.amax_history_len)
    local c = R.layer_config { backend = "te" }
    for _, role in ipairs { "input", "weight", "grad" } do assert.are.equal(1024, c[role].amax_history_len) end
  end)

  it("one suggestion function", function()
    assert.are.equal("amax_history_len", settings.suggest("amax_history", { "margin", "amax_history_len" }))
    assert.are.equal("margin", settings.suggest("marign", { "margin", "interval" }))
    assert.is_nil(settings.suggest("zzz", { "margin", "interval" }))
    assert.are.equal(fp8.kwargs.nearest("marign", { "margin" }), settings.suggest("marign", { "margin" }))
  end)

  it("docs/config.md and docs/cli.md name every setting read from outside a script", function()
    local function read(p) local f = assert(io.open(p)); local s = f:read("a"); f:close(); return s end
    local config_md, cli_md = read("docs/config.md"), read("docs/cli.md")
    for _, r in ipairs(settings.list()) do
      if r.env then
        assert.truthy(config_md:find("`" .. r.env .. "`", 1, true), "docs/config.md lacks " .. r.env)
        assert.truthy(cli_md:find("--" .. r.flag, 1, true), "docs/cli.md lacks --" .. r.flag)
      end
    end
  end)
end)

describe("a row added to the table (FP8LAB_SCHEMA_SELFTEST=1) appears everywhere", function()
  it("is hidden, and refused, without the variable", function()
    local out = child([[
      local ok, err = pcall(fp8.TERecipeKwargs, { schema_selftest = 1 })
      print(ok, err)
    ]])
    assert.truthy(out:find("unknown key 'schema_selftest'", 1, true), out)
    local _, err, code = run("launch --fp8_schema_selftest 1 x.lua")
    assert.are.equal(2, code)
    assert.truthy(err:find("unknown flag --fp8_schema_selftest", 1, true), err)
  end)

  it("1. in the kwargs handler, with the table's default, range and message", function()
    local out = child([[
      local h = fp8.TERecipeKwargs{ schema_selftest = 5 }
      print("value", h.schema_selftest, fp8.TERecipeKwargs{}.schema_selftest, fp8.FP8RecipeKwargs{}.schema_selftest)
      print("error", select(2, pcall(fp8.TERecipeKwargs, { schema_selftest = 100 })))
    ]], true)
    assert.truthy(out:find("value\t5\t7\t7", 1, true), out)
    assert.truthy(out:find("TERecipeKwargs: schema_selftest: expected an integer in 0..99, got 100", 1, true), out)
  end)

  it("2. in config.yaml, read and written", function()
    local path = os.tmpname()
    local out = child(([[
      local t = fp8.config.parse("mixed_precision: fp8\nfp8_config:\n  backend: te\n  schema_selftest: 9\n")
      print("parsed", t.fp8_config.schema_selftest)
      fp8.config.write(%q, t)
      print("written", fp8.config.load(%q).fp8_config.schema_selftest)
      print("error", select(2, pcall(fp8.config.parse, "fp8_config:\n  schema_selftest: 100\n", "c.yaml")))
      local s = fp8.kwargs.resolve{ config = t, env = {} }
      print("resolved", s.fp8_recipe.schema_selftest, s.sources.schema_selftest)
    ]]):format(path, path), true)
    os.remove(path)
    assert.truthy(out:find("parsed\t9", 1, true), out)
    assert.truthy(out:find("written\t9", 1, true), out)
    assert.truthy(out:find("c.yaml:2:20: fp8_config.schema_selftest: expected an integer in 0..99, got 100", 1, true), out)
    assert.truthy(out:find("resolved\t9\tconfig", 1, true), out)
  end)

  it("3. as a launch flag, listed by -h and exported to the script", function()
    local script = os.tmpname() .. ".lua"
    write(script, 'print("env=" .. tostring(os.getenv("FP8LAB_FP8_SCHEMA_SELFTEST")))\n'
      .. 'print("recipe=" .. fp8.kwargs.resolve{ mixed_precision = "fp8", config = false }.fp8_recipe.schema_selftest)\n')
    local out, err, code = run("launch --mixed_precision fp8 --fp8_backend te --fp8_schema_selftest 12 " .. q(script), nil, true)
    assert.are.equal(0, code, err)
    assert.truthy(out:find("env=12", 1, true), out)
    assert.truthy(out:find("recipe=12", 1, true), out)
    local help = run("launch --fp8_backend te -h", nil, true)
    assert.truthy(help:find("--fp8_schema_selftest N", 1, true), help)
    assert.truthy(help:find("one row of the settings table reaching every place (default 7)", 1, true), help)
    _, err, code = run("launch --fp8_schema_selftest 100 " .. q(script), nil, true)
    assert.are.equal(2, code)
    assert.truthy(err:find("--fp8_schema_selftest: expected an integer in 0..99, got 100", 1, true), err)
    os.remove(script)
  end)

  it("4. in the environment, through resolve", function()
    local out = child([[
      local s = fp8.kwargs.resolve{ mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs{} },
                                    env = { FP8LAB_FP8_SCHEMA_SELFTEST = "11" }, config = false }
      print("resolved", s.fp8_recipe.schema_selftest, s.sources.schema_selftest)
      print("error", select(2, pcall(fp8.kwargs.resolve, { env = { FP8LAB_FP8_SCHEMA_SELFTEST = "x" }, config = false })))
      local names = {}
      for _, e in ipairs(fp8.kwargs.ENV) do names[e.name] = true end
      print("listed", names.FP8LAB_FP8_SCHEMA_SELFTEST)
    ]], true)
    assert.truthy(out:find("resolved\t11\tenv", 1, true), out)
    assert.truthy(out:find('FP8LAB_FP8_SCHEMA_SELFTEST: expected an integer in 0..99, got "x"', 1, true), out)
    assert.truthy(out:find("listed\ttrue", 1, true), out)
  end)

  it("5. in `fp8lab config`: asked, checked, written", function()
    local path = os.tmpname()
    -- mixed precision, backend, the seven te questions (defaults), processes, CPU only, then the new one twice
    local answers = table.concat({ "fp8", "te", "", "", "", "", "", "", "", "1", "", "100", "13" }, "\n") .. "\n"
    local out, err, code = run("config --config_file " .. q(path), answers, true)
    assert.are.equal(0, code, err)
    assert.truthy(out:find("Schema self-test value (0..99) [7]: 100", 1, true), out)
    assert.truthy(out:find("schema_selftest: expected an integer in 0..99, got 100; please answer again", 1, true), out)
    local text = slurp(path)
    assert.truthy(text and text:find("  schema_selftest: 13\n", 1, true), text)
    out, err, code = run("config --default --mixed_precision fp8 --fp8_backend te --fp8_schema_selftest 4 --config_file "
      .. q(path), nil, true)
    assert.are.equal(0, code, err)
    text = slurp(path)
    assert.truthy(text and text:find("  schema_selftest: 4\n", 1, true), text)
  end)

  it("6. in help()", function()
    local out = child([[
      local help = require "fp8.help"
      print(help.text("TERecipeKwargs"))
      print(help.text("FP8RecipeKwargs"))
      print(help.text("settings"))
    ]], true)
    local _, n = out:gsub("schema_selftest", "")
    assert.truthy(n >= 4, out)   -- the two handlers' signatures and field lines, and the settings entry
    assert.truthy(out:find("schema_selftest: an integer in 0..99; test only", 1, true), out)
    assert.truthy(out:find("FP8LAB_FP8_SCHEMA_SELFTEST, --fp8_schema_selftest, fp8_config.schema_selftest", 1, true), out)
  end)
end)
