-- parity_prompt_spec.lua — issue 15 point 9, the prompt: short echo of fp8.explain, significant
-- digits for scalars and small tensors, dims counted from 1 in broadcast errors, help() sections and
-- suggestions, short script tracebacks (full with -v), and fp8.args.parse --help inside a REPL.
local bin = FP8LAB_BIN or "build/fp8lab"
local help = require "fp8.help"
local repl = require "fp8.repl"

local U = dofile("tests/spec/helpers/util.lua")
local sh_quote, sh = U.q, U.sh
local function lines(s) return select(2, s:gsub("\n", "")) + 1 end

describe("the prompt", function()
  it("fp8.explain echoes as one short line", function()
    local r = fp8.explain(0.1, "e4m3", { quiet = true })
    local shown = repl.format(r)
    assert.equal(1, lines(shown))
    assert.matches("0%.1 in e4m3 %-> 0%.1015625", shown)
    assert.equal(0.1015625, r.value)   -- the fields are still there
  end)

  it("scalars and small tensors print with significant digits", function()
    local x = fp8.tensor { 0.1, 0.2, 0.3, 0.7 }
    local q = x:quantize("e4m3")
    local err = (q:dequantize() - x):abs():max()
    local s = tostring(err)
    local shown = tonumber(s:match("^tensor%(([%d%.e%-]+)"))
    assert.truthy(shown, s)
    assert.is_true(math.abs(shown - err:item()) <= 1e-3 * err:item(), s)   -- 4 significant digits
    assert.matches("^tensor%(0%.0001230,", tostring(fp8.tensor { 0.000123 }:sum()))
    assert.matches("^tensor%(%[0%.5000, 0%.2500%]", tostring(fp8.tensor { 0.5, 0.25 }))
  end)

  it("broadcast errors count dims from 1", function()
    local ok, e = pcall(function() return fp8.randn { 2, 3 } + fp8.randn { 4, 3 } end)
    assert.is_false(ok)
    assert.matches("%(dim 1 of the result: 2 vs 4%)", e)
    ok, e = pcall(function() return fp8.randn { 2, 3 } + fp8.randn { 2, 4 } end)
    assert.matches("%(dim 2 of the result: 3 vs 4%)", e)
    local x = fp8.randn { 3, 4 }
    ok, e = pcall(x.narrow, x, 2, 3, 5)
    assert.matches("range start 3, length 5 out of range for dim 2 of size 4", e)
    ok, e = pcall(fp8.zeros, { 2, -1 })
    assert.is_false(ok)
    assert.matches("dimension 2", e)
  end)

  it("help() is a short index of sections; help(\"tensors\") one section", function()
    local t = help.text()
    assert.is_true(lines(t) <= 15, t)
    assert.matches("tensors", t)
    local sec = help.text("tensors")
    assert.matches("fp8%.zeros", sec)
    assert.is_nil(sec:find("fp8.encode", 1, true))
  end)

  it("help(\"nosuchthing\") suggests near names instead of dumping the index", function()
    local t = help.text("quantise")
    assert.matches("did you mean: [^\n]*Tensor:quantize", t)
    assert.equal(1, lines(t))
    local n = help.text("nosuchthing")
    assert.matches("no help for 'nosuchthing'", n)
    assert.is_nil(n:find("known:", 1, true))
    assert.is_true(#n < 200, n)
  end)

  it("a script error shows the user's line first and a short traceback; -v the full one", function()
    local path = os.tmpname() .. ".lua"
    local f = assert(io.open(path, "w"))
    f:write("local function f()\n  local a = fp8.Accelerator{mixed_precision='no', config=false, env={}, "
      .. "kwargs_handlers={fp8.TERecipeKwargs{}}}\n  return a\nend\nf()\n")
    f:close()
    local out, ok = sh(sh_quote(bin) .. " " .. sh_quote(path))
    assert.is_false(ok)
    local first = out:match("^[^\n]+")
    assert.truthy(first:find(path .. ":2: ", 1, true), out)
    assert.matches("TERecipeKwargs needs mixed_precision", first)
    assert.is_nil(out:find("lua/fp8/accelerator.lua", 1, true), out)
    assert.matches("fp8lab %-v", out)
    local full = sh(sh_quote(bin) .. " -v " .. sh_quote(path))
    assert.truthy(full:find("lua/fp8/accelerator.lua", 1, true), full)
    assert.matches("stack traceback:", full)
    os.remove(path)
  end)

  it("help() has an entry for every public function of fp8, its modules and the Tensor methods", function()
    local help = require "fp8.help"
    help.lookup("x")   -- loads the modules that register entries on first use
    -- and every lazy field, as other specs may have (the check must not depend on which ran first)
    local _ = fp8.Accelerator, fp8.nn, fp8.optim, fp8.profiler, fp8.recipes, fp8.plot, fp8.hist,
      fp8.GradientAccumulationPlugin, fp8.convert_model, fp8.has_fp8_layers, fp8.has_transformer_engine_layers,
      fp8.contextual_fp8_autocast, fp8.apply_fp8_autowrap, fp8.stats, fp8.fp8_autocast, fp8.has_ao_layers, fp8.LocalSGD
    local missing = {}
    local function check(label, fn, name)
      if not help.lookup(fn) and not help.lookup(name) then missing[#missing + 1] = label end
    end
    for k, v in pairs(fp8) do
      if type(k) == "string" and not k:match("^_") then
        if type(v) == "function" then check(k, v, k)
        elseif type(v) == "table" and k ~= "Tensor" and not k:match("Kwargs$") then   -- handler classes: their constructors
          for k2, v2 in pairs(v) do
            if type(k2) == "string" and not k2:match("^_") and type(v2) == "function" then check(k .. "." .. k2, v2, k .. "." .. k2) end
          end
        end
      end
    end
    -- the modules one level further down (fp8.nn.init, ...), whose functions the loop above does not reach
    for _, m in ipairs { "nn.init", "nn.utils", "nn.functional", "optim.lr_scheduler" } do
      local a, b = m:match("^(%w+)%.([%w_]+)$")
      for k, v in pairs(fp8[a][b]) do
        if type(k) == "string" and not k:match("^_") and type(v) == "function" then
          check(m .. "." .. k, v, m .. "." .. k)
        end
      end
    end
    -- the layer classes: tables called as constructors (fp8.nn.Embedding(...)), which the loops above skip
    for k, v in pairs(fp8.nn) do
      local cmt = type(v) == "table" and getmetatable(v)
      if type(k) == "string" and cmt and cmt.__call then check("nn." .. k, v, "nn." .. k) end
    end
    local mt = debug.getregistry()["fp8.Tensor"]
    for _, idx in ipairs(require("fp8.repl").metatable_index_tables(mt)) do
      for k, v in pairs(idx) do
        if type(k) == "string" and not k:match("^_") and type(v) == "function" then check("Tensor:" .. k, v, "Tensor:" .. k) end
      end
    end
    table.sort(missing)
    assert.are.same({}, missing)
  end)

  it("help(fn) of every function of fp8 and its modules shows an entry that names it (no 'no help for function')",
     function()
    -- the check above also takes the name: help(F.conv2d) itself said "no help for function" for 62 functions of
    -- fp8.nn.functional (reached as "nn.functional:conv2d", a method's name, where the entries list
    -- "nn.functional.conv2d") and every function of fp8.nn.utils (the API sweep of seed 86)
    help.lookup("x")
    local _ = fp8.nn, fp8.optim, fp8.recipes, fp8.profiler
    local bad = {}
    local function check(label, t)
      for k, v in pairs(t) do
        if type(k) == "string" and not k:match("^_") and type(v) == "function" then
          local text = help.text(v)
          local e = help.lookup(v)
          -- the entry found names the function (its sig or doc), so it is the entry that documents it
          if text:match("^no help") or not (e and ((e.sig or "") .. "\n" .. (e.doc or "")):find("%f[%w_]" .. k .. "%f[^%w_]")) then
            bad[#bad + 1] = label .. "." .. k .. " -> " .. (e and e.name or text:match("^[^\n]*"))
          end
        end
      end
    end
    check("fp8", fp8)
    for _, m in ipairs { "nn", "nn.functional", "nn.F", "nn.utils", "nn.init", "optim", "optim.lr_scheduler", "recipes",
                         "profiler", "autograd", "amp", "data", "cuda" } do
      local t = fp8
      for part in m:gmatch("[^.]+") do t = t[part] end
      check("fp8." .. m, t)
    end
    table.sort(bad)
    assert.are.same({}, bad)
  end)

  it("help(module) lists every name of the module an entry covers (help('optim') left out Adagrad, RAdam, ...)",
     function()
    for _, m in ipairs { "optim", "nn", "nn.utils", "nn.utils.rnn" } do
      local t = fp8
      for part in m:gmatch("[^.]+") do t = t[part] end
      local text, missing = help.text(t), {}
      assert.are.equal(text, help.text(m))
      for k, v in pairs(t) do
        -- (fp8.nn.F is fp8.nn.functional, listed under that name)
        if type(k) == "string" and not k:match("^_") and type(v) ~= "number" and type(v) ~= "string"
          and not (m == "nn" and k == "F") then
          local name = m .. "." .. k
          if not text:find("%f[%w_.]" .. name:gsub("%.", "%%.") .. "%f[^%w_]") then missing[#missing + 1] = name end
          -- and each name listed has help
          assert.falsy(help.text(name):match("^no help"), name)
        end
      end
      table.sort(missing)
      assert.are.same({}, missing, m)
    end
    local t = help.text("optim")
    assert.truthy(t:find("  optim.NAdam (also optim.Adadelta, optim.Adamax, optim.RAdam)\n", 1, true), t)
    assert.truthy(t:find("  optim.RMSprop (also optim.Adagrad)\n", 1, true), t)
    for line in (help.text("nn") .. "\n"):gmatch("(.-)\n") do assert.is_true(#line <= 80, line) end
  end)

  it("help() has an entry for fp8.optim.Optimizer, its methods (an optimizer's too) and every Accelerator method",
     function()
    -- the base class and opt.step, opt.zero_grad, ... (where pairs found Optimizer's copy first) said "no help for"
    local help = require "fp8.help"
    local missing = {}
    local function check(label, v) if not help.lookup(v) then missing[#missing + 1] = label end end
    check("optim.Optimizer", fp8.optim.Optimizer)
    local opt = fp8.optim.SGD({ fp8.ones(1):requires_grad(true) })
    for k, v in pairs(fp8.optim.Optimizer) do
      if type(k) == "string" and not k:match("^_") and type(v) == "function" then
        check("optim.Optimizer." .. k, v)
        if rawequal(opt[k], v) then check("opt:" .. k, v) end   -- (opt.new is SGD's own constructor)
      end
    end
    for k, v in pairs(fp8.Accelerator) do
      if type(k) == "string" and not k:match("^_") and type(v) == "function" then check("acc:" .. k, v) end
    end
    table.sort(missing)
    assert.are.same({}, missing)
  end)

  it("help(sched.step) and every other scheduler method find the schedulers' entry (they said 'no help for')",
     function()
    -- the schedulers' class was not reachable from fp8, so names_of found no name for its methods
    local help = require "fp8.help"
    local o = fp8.optim.SGD({ fp8.zeros { 1 } }, { lr = 0.1 })
    local s = fp8.optim.lr_scheduler.StepLR(o, { step_size = 1 })
    assert.are.equal(fp8.optim.lr_scheduler.LRScheduler, getmetatable(s))
    local seen = {}
    for _, k in ipairs { "step", "get_last_lr", "get_lr", "state_dict", "load_state_dict" } do
      local e = help.lookup(s[k])
      seen[#seen + 1] = k .. "=" .. tostring(e and e.name)
    end
    assert.are.same({ "step=optim.lr_scheduler", "get_last_lr=optim.lr_scheduler", "get_lr=optim.lr_scheduler",
                      "state_dict=optim.lr_scheduler", "load_state_dict=optim.lr_scheduler" }, seen)
    for k, v in pairs(fp8.optim.lr_scheduler.LRScheduler) do   -- and any method added since
      if type(k) == "string" and not k:match("^_") and type(v) == "function" then
        assert.truthy(help.lookup(v), "no help for sched." .. k)
      end
    end
    assert.falsy(help.text(s.step):find("no help for", 1, true))
    assert.are.equal("optim.lr_scheduler", help.lookup("optim.lr_scheduler.LRScheduler").name)
  end)

  it("help(obj.method) finds the entry of the class that documents the method; help('REPL keys') as listed", function()
    local help = require "fp8.help"
    local s = fp8.amp.GradScaler()
    local dl = fp8.data.DataLoader { { { fp8.zeros { 1 }, 1 } }, batch_size = 1 }
    for _, fn in ipairs { s.step, s.update, s.unscale_, s.get_scale, s.state_dict, s.is_enabled, dl.iter, dl.set_epoch,
                          dl.to } do
      local e = help.lookup(fn)
      assert.truthy(e and (e.name == "amp.GradScaler" or e.name == "data.DataLoader"), e and e.name)
    end
    assert.are.equal("data.TextDataset", help.lookup("data.TextDataset:blocks").name)
    assert.are.equal("config.sys", help.lookup("config.sys.setenv").name)
    assert.are.equal("keys", help.lookup("REPL keys").name)
    assert.is_nil(help.lookup("amp.GradScaler:nope"))   -- a member the class's entry does not name: no entry
  end)

  it("help(scheduler) shows the schedulers' entry; help(module) lists its entries (both said 'no help for table')",
    function()
    local help = require "fp8.help"
    local o = fp8.optim.SGD({ fp8.zeros { 1 } }, { lr = 0.1 })
    assert.are.equal("optim.lr_scheduler", help.lookup(fp8.optim.lr_scheduler.StepLR(o, { step_size = 1 })).name)
    local t = help.text(fp8.optim)
    assert.truthy(t:find("fp8.optim, a module", 1, true) and t:find("optim.AdamW", 1, true), t)
    assert.truthy(help.text(fp8.profiler):find("profiler.profile", 1, true))
    assert.truthy(help.text({}):find("no help for table", 1, true))
  end)

  it("=expr continues over lines as an expression does", function()
    local out = sh("printf %s " .. sh_quote("=1 +\n41\n") .. " | " .. sh_quote(bin) .. " -i")
    assert.matches("42", out)
    assert.falsy(out:find("unexpected symbol", 1, true), out)
  end)

  it("fp8.args.parse reads option names with underscores, as Accelerate's scripts spell them", function()
    local A = require "fp8.args"
    local spec = { { "mixed_precision", "str", "no", "precision" }, { "cpu", "flag", false, "cpu" },
                   { "batch-size", "int", 8, "batch" } }
    local o = A.parse({ "--cpu", "--mixed_precision", "fp8", "--batch-size=4" }, spec, { usage = "u", about = "a" })
    assert.same({ mixed_precision = "fp8", cpu = true, ["batch-size"] = 4 }, o)
    assert.equal("bf16", A.parse({ "--mixed_precision=bf16" }, spec, { usage = "u", about = "a" }).mixed_precision)
    local ok, err = pcall(A.parse, { "--mixed_precison", "x" }, spec, { usage = "u", about = "a" })
    assert.is_false(ok)
    assert.matches("unknown option '%-%-mixed_precison'", tostring(err))
    -- a name no command line can spell is refused when the options are declared
    ok, err = pcall(A.parse, {}, { { "a b", "int", 1, "x" } }, { usage = "u", about = "a" })
    assert.is_false(ok)
    assert.matches("option 1's name must be letters, digits, '_' or '%-'", tostring(err))
  end)

  it("fp8.args.parse --help inside a REPL raises instead of ending the session", function()
    local code = 'require("fp8.args").parse({"--help"}, {{"n", "int", 1, "a number"}}, {usage = "usage: demo", about = "x"})\n'
      .. 'print("still " .. "here")\n'
    local out = sh("printf %s " .. sh_quote(code) .. " | " .. sh_quote(bin) .. " -i")
    assert.matches("usage: demo", out)
    assert.matches("still here", out)
    -- a script run on its own still exits 0 after printing the usage
    local out2, ok2 = sh(sh_quote(bin) .. " scripts/train_char_gpt.lua --help")
    assert.is_true(ok2, out2)
    assert.matches("usage: fp8lab scripts/train_char_gpt.lua", out2)
  end)
end)
