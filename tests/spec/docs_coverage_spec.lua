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
