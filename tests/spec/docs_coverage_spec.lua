-- docs_coverage_spec.lua — docs/lua-api.md names every public name of fp8, fp8.nn, fp8.nn.functional, fp8.optim,
-- fp8.optim.lr_scheduler and fp8.recipes (the API sweep of seed 86 found 13 classes of fp8.nn, 14 functions of
-- fp8.nn.functional, fp8.Tensor and ten names of fp8.recipes in none of its pages' text).
local fp8 = fp8 or require "fp8"

-- The names the page writes as code (`...` spans, over line breaks, not fenced blocks), an option's name
-- (`threshold=20`) not counted as the function of that name; `AdaptiveAvgPool1d`/`2d`/`3d` names each size.
local function documented_names(text)
  text = text:gsub("```.-```", "")
  local names = {}
  for span in text:gmatch("`([^`]+)`") do
    for id, after in span:gmatch("([%a_][%w_]*)()") do
      if not span:sub(after):match("^%s*=[^=]") then names[id] = true end
    end
  end
  for base, rest in text:gmatch("([%a_][%w_]-)1d`([/`23d]*)") do
    names[base .. "1d"] = true
    for n in rest:gmatch("/`([23])d`") do names[base .. n .. "d"] = true end
  end
  return names
end

-- Public names that are not API and so not on the page, each with the reason. (None at present: fp8.recipes'
-- linears, linear_to_fp8, ... are the API for converting by hand, help("recipes"), and are documented.)
local INTERNAL = {}

describe("docs/lua-api.md", function()
  local f = assert(io.open("docs/lua-api.md"))
  local names = documented_names(f:read("a"))
  f:close()

  it("reads the names the way the page writes them", function()
    local n = documented_names("`F.max_unpool1d`/`2d`, `ZeroPad1d`/`2d`/`3d`, `softplus(x [, threshold=20])`, "
      .. "`binary_cross_entropy(input,\ntarget)`\n```lua\nlocal m = fp8.nn.Hidden()\n```")
    for _, k in ipairs { "max_unpool1d", "max_unpool2d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "softplus",
                         "binary_cross_entropy", "target" } do
      assert.is_true(n[k], k)
    end
    for _, k in ipairs { "max_unpool3d", "threshold", "Hidden" } do assert.is_nil(n[k], k) end
  end)

  it("names every public name of fp8, fp8.nn, fp8.nn.functional, fp8.optim, fp8.optim.lr_scheduler, fp8.recipes",
     function()
    -- the fields fp8 loads on first use (lua/fp8/init.lua's LAZY_MODULES and LAZY_RECIPES), so that pairs sees them
    local _ = fp8.nn, fp8.optim, fp8.recipes, fp8.Accelerator, fp8.profiler, fp8.plot, fp8.hist,
      fp8.GradientAccumulationPlugin, fp8.LocalSGD, fp8.autograd, fp8.convert_model, fp8.has_fp8_layers,
      fp8.has_transformer_engine_layers, fp8.contextual_fp8_autocast, fp8.apply_fp8_autowrap, fp8.stats,
      fp8.fp8_autocast, fp8.has_ao_layers
    local missing, counted = {}, 0
    for _, ns in ipairs { { "fp8", fp8 }, { "fp8.nn", fp8.nn }, { "fp8.nn.functional", fp8.nn.functional },
                          { "fp8.optim", fp8.optim }, { "fp8.optim.lr_scheduler", fp8.optim.lr_scheduler },
                          { "fp8.recipes", fp8.recipes } } do
      for k in pairs(ns[2]) do
        if type(k) == "string" and not k:match("^_") then
          local full = ns[1] .. "." .. k
          counted = counted + 1
          if not names[k] and not INTERNAL[full] then missing[#missing + 1] = full end
        end
      end
    end
    assert.is_true(counted > 500, "walked only " .. counted .. " names")
    table.sort(missing)
    assert.are.same({}, missing)
  end)
end)

-- help() finds every public name of fp8.profiler, fp8.progress, fp8.data, fp8.amp, fp8.kwargs and fp8.plot, in an
-- entry that names it (an audit found fp8.amp.MODES, fp8.data.SkipDataLoader, fp8.profiler.Profiler, ... in no entry,
-- and the page naming none of them), and every method of the classes whose objects help() answers for (help.class:
-- a profiler, a SummaryWriter, a progress bar, a safe_open handle, ...) in an entry that names the method.
describe("help()", function()
  local H = require "fp8.help"
  local f = assert(io.open("docs/lua-api.md"))
  local page = f:read("a")
  f:close()
  local function names(text, word) return text:find("%f[%w_]" .. word .. "%f[^%w_]") ~= nil end
  local function entry_names(e, word) return e ~= nil and names((e.sig or "") .. "\n" .. (e.doc or ""), word) end

  it("and docs/lua-api.md name every public name of fp8.profiler, progress, data, amp, kwargs, plot", function()
    local _ = fp8.profiler, fp8.plot
    local missing, counted = {}, 0
    for _, ns in ipairs { "profiler", "progress", "data", "amp", "kwargs", "plot" } do
      for k in pairs(fp8[ns]) do
        if type(k) == "string" and not k:match("^_") then
          counted = counted + 1
          local full = ns .. "." .. k
          if not entry_names(H.lookup(full), k) then missing[#missing + 1] = full .. " (help)" end
          if not names(page, k) then missing[#missing + 1] = full .. " (docs/lua-api.md)" end
        end
      end
    end
    assert.is_true(counted > 40, "walked only " .. counted .. " names")
    table.sort(missing)
    assert.are.same({}, missing)
  end)

  it("finds each method of the classes it answers objects of in an entry that names it", function()
    -- one object of each, so that the C classes' metatables exist and the Lua classes are loaded
    local _ = fp8.profiler.profile {}, fp8.SummaryWriter, fp8.nn.FP8Linear(16, 16, { backend = "te" })
    local p = os.tmpname()
    fp8.save_file({ a = fp8.ones { 1 } }, p)
    local h = fp8.safe_open(p)
    local missing, counted = {}, 0
    for _, c in ipairs(H.CLASSES) do
      local t = c.class or debug.getregistry()[c.registry]
      assert.is_table(t, c.prefix)
      local idx = rawget(t, "__index")
      for _, tbl in ipairs { t, type(idx) == "table" and idx or {} } do
        for k, v in pairs(tbl) do
          if type(k) == "string" and type(v) == "function" and not k:match("^_") then
            counted = counted + 1
            local e = H.lookup(v)
            if not entry_names(e, k) then missing[#missing + 1] = c.prefix .. ":" .. k end
          end
        end
      end
    end
    h:close()
    os.remove(p)
    assert.is_true(counted > 30, "walked only " .. counted .. " methods")
    table.sort(missing)
    assert.are.same({}, missing)
  end)
end)
