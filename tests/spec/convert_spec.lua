-- convert_spec.lua — converting models to FP8 and back (fp8.convert_model, acc:prepare's conversion): which modules
-- convert, what stays shared, and what is refused, against Accelerate + TransformerEngine / torchao / MS-AMP.
local nn = fp8.nn

local function accelerator(backend)
  local h = ({ te = fp8.TERecipeKwargs {}, msamp = fp8.MSAMPRecipeKwargs {},
               ao = fp8.AORecipeKwargs { module_filter_func = function() return true end } })[backend]
  return fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { h }, config = false, env = {} }
end

local function sorted(list)
  local c = table.move(list, 1, #list, 1, {})
  table.sort(c)
  return c
end

describe("a module under two names", function()
  for _, backend in ipairs { "te", "ao", "msamp" } do
    it(backend .. ": the same Linear called twice stays one module (one weight, one recipe state)", function()
      fp8.manual_seed(0)
      local l = nn.Linear(32, 32)
      local model = nn.Sequential(l, nn.ReLU(), l)
      local keys = model:state_dict_keys()
      local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
      local acc = accelerator(backend)
      model, opt = acc:prepare(model, opt)
      assert.are.equal("FP8Linear", getmetatable(model[1]).__name)
      assert.are.equal(model[1], model[3])
      if backend ~= "ao" then keys[#keys + 1] = "0.fp8_state" end   -- (ao: a Linear's keys, as torchao's)
      assert.are.same(sorted(keys), sorted(model:state_dict_keys()))
      acc:backward(model(fp8.randn { 4, 32 }):sum()); opt:step(); opt:zero_grad()
      assert.are.equal(model[1].weight, model[3].weight)   -- msamp: one fp16 weight, stepped once
      fp8.convert_model(model, { to_fp8 = false })
      assert.are.equal("Linear", getmetatable(model[1]).__name)
      assert.are.equal(model[1], model[3])
    end)
  end
end)

describe("frozen parameters", function()
  it("msamp: a frozen Linear stays frozen through prepare, a step and the way back", function()
    fp8.manual_seed(0)
    local model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
    model[1]:requires_grad_(false)
    local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
    local acc = accelerator("msamp")
    model, opt = acc:prepare(model, opt)
    assert.are.equal("fp16", model[1].weight:dtype())
    assert.is_false(model[1].weight:requires_grad())
    assert.is_true(model[3].weight:requires_grad())
    local before = model[1].weight:tolist()
    acc:backward(model(fp8.randn { 4, 32 }):sum()); opt:step(); opt:zero_grad()
    assert.are.same(before, model[1].weight:tolist())
    fp8.convert_model(model, { to_fp8 = false })
    assert.are.equal("fp32", model[1].weight:dtype())
    assert.is_false(model[1].weight:requires_grad())
    assert.is_true(model[3].weight:requires_grad())
  end)
end)

describe("converted back after prepare", function()
  it("msamp: a prepared optimizer refuses to step layers converted back (it holds their fp16 weights); te trains on",
    function()
    for _, backend in ipairs { "msamp", "te" } do
      fp8.manual_seed(0)
      local model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
      local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
      local acc = accelerator(backend)
      model, opt = acc:prepare(model, opt)
      local x = fp8.randn { 4, 32 }
      acc:backward(model(x):pow(2):mean()); opt:step(); opt:zero_grad()
      fp8.convert_model(model, { to_fp8 = false })   -- the way back itself is fine (export, an fp32 eval)
      local w = model[1].weight:clone()
      acc:backward(model(x):pow(2):mean())
      if backend == "msamp" then
        -- the step moved nothing the model uses: the new fp32 weights are no parameter of the optimizer
        local ok, err = pcall(opt.step, opt)
        assert.is_false(ok)
        assert.truthy(err:find("optimizer:step: the FP8 layer '0' was converted back", 1, true), err)
      else
        opt:step()   -- te keeps the same weight tensors: the optimizer still trains the model
        assert.is_true((model[1].weight - w):abs():max():item() > 0)
      end
    end
  end)
end)

describe("tied weights", function()
  for _, backend in ipairs { "te", "ao", "msamp" } do
    it(backend .. ": two Linears sharing one weight still share it after prepare and a step", function()
      fp8.manual_seed(0)
      local a, b = nn.Linear(32, 32), nn.Linear(32, 32, false)
      b.weight = a.weight
      local model = nn.Sequential(a, nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), b)
      local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
      local acc = accelerator(backend)
      model, opt = acc:prepare(model, opt)
      assert.are.equal(model[1].weight, model[5].weight)
      acc:backward(model(fp8.randn { 4, 32 }):sum()); opt:step(); opt:zero_grad()
      assert.are.equal(model[1].weight, model[5].weight)
    end)
  end

  it("msamp: O3's E4M3 copy of a shared weight is one tensor, which the step re-casts for both layers", function()
    fp8.manual_seed(0)
    local a, b = nn.Linear(32, 32), nn.Linear(32, 32)
    b.weight = a.weight
    local model = nn.Sequential(a, nn.ReLU(), b)
    local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
    local o3 = fp8.MSAMPRecipeKwargs { opt_level = "O3" }
    local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { o3 }, config = false, env = {} }
    model, opt = acc:prepare(model, opt)
    assert.are.equal(rawget(model[1], "weight_fp8"), rawget(model[3], "weight_fp8"))
    acc:backward(model(fp8.randn { 4, 32 }):sum()); opt:step(); opt:zero_grad()
    assert.are.equal(model[1].weight, model[3].weight)
    local w = model[1].weight:detach():to("fp32")
    local q = rawget(model[3], "weight_fp8")
    assert.is_true(q:dequantize():sub(w):abs():max():item() <= w:abs():max():item() / 16)   -- the stepped weight's
  end)

  it("msamp: a Linear's weight tied to an embedding is refused, naming both, before anything is converted", function()
    local emb, head = nn.Embedding(32, 16), nn.Linear(16, 32, false)
    head.weight = emb.weight
    local model = nn.Sequential(emb, nn.Linear(16, 16), head)
    local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
    local ok, err = pcall(function() return accelerator("msamp"):prepare(model, opt) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("prepare: under MS-AMP, 0.weight is the same tensor as 2.weight (the weight of "
      .. "a Linear)", 1, true), err)
    assert.is_false(fp8.has_fp8_layers(model))
    assert.are.equal(model[1].weight, model[3].weight)
    for _, backend in ipairs { "te", "ao" } do   -- the same tensor stays in both places
      fp8.manual_seed(0)
      emb, head = nn.Embedding(32, 16), nn.Linear(16, 32, false)
      head.weight = emb.weight
      model = nn.Sequential(emb, nn.Linear(16, 16), head)
      model = accelerator(backend):prepare(model)
      assert.are.equal("FP8Linear", getmetatable(model[3]).__name)
      assert.are.equal(model[1].weight, model[3].weight)
    end
  end)
end)

describe("a model prepared twice", function()
  for _, backend in ipairs { "te", "ao" } do
    it(backend .. ": comes back as it is, listed once (Accelerate's _is_accelerate_prepared)", function()
      fp8.manual_seed(0)
      local model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
      local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
      local acc = accelerator(backend)
      model, opt = acc:prepare(model, opt)
      local fwd = rawget(model, "forward")
      assert.are.equal(model, acc:prepare(model))
      assert.are.equal(model, acc:prepare_model(model))
      assert.are.equal(fwd, rawget(model, "forward"))
      assert.are.equal(2, acc:state().fp8_layers)
      local dir = os.tmpname()
      os.remove(dir)
      acc:save_state(dir)
      local files = {}
      for _, f in ipairs(require("fp8._checkpoint").listdir(dir)) do
        if f:match("^model") then files[#files + 1] = f end
      end
      os.execute("rm -rf '" .. dir .. "'")
      assert.are.same({ "model.safetensors" }, files)
    end)
  end
end)

describe("a model holding FP8 layers of another recipe", function()
  it("is refused by prepare, naming the layer and both recipes, before anything changes", function()
    for _, pair in ipairs { { "te", "ao" }, { "te", "msamp" }, { "ao", "te" }, { "msamp", "te" } } do
      fp8.manual_seed(0)
      local model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
      fp8.convert_model(model, { recipe = { backend = pair[1] } })
      local w = model[1].weight
      local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
      local acc = accelerator(pair[2])
      local ok, err = pcall(acc.prepare, acc, model, opt)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(("prepare: '0' is an FP8Linear of the recipe {backend=\"%s\"}, which scales "
        .. "differently from this accelerator's {"):format(pair[1]), 1, true), err)
      assert.are.equal(w, model[1].weight)   -- (msamp would have made it an fp16 copy)
      assert.are.equal(0, acc:state().fp8_layers)
    end
    -- another te recipe (E4M3 layers, a HYBRID accelerator) too; the same recipe is taken as it is
    local e4m3 = fp8.TERecipeKwargs { fp8_format = "E4M3" }
    local model = fp8.convert_model(nn.Sequential(nn.Linear(32, 32)), { recipe = e4m3 })
    assert.has_error(function() accelerator("te"):prepare(model) end)
    model = fp8.convert_model(nn.Sequential(nn.Linear(32, 32)), { recipe = { backend = "te" } })
    local acc = accelerator("te")
    acc:prepare(model)
    assert.are.equal(1, acc:state().fp8_layers)
  end)
end)

describe("module_filter_func", function()
  it("takes (module, fully qualified name): nested names dotted, the model itself \"\" (torchao's)", function()
    local seen = {}
    local function filter(m, name)
      seen[#seen + 1] = { getmetatable(m).__name, name }
      return name ~= "1.0"
    end
    local h = fp8.AORecipeKwargs { module_filter_func = filter }
    local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { h }, config = false, env = {} }
    local model = acc:prepare(nn.Sequential(nn.Linear(32, 32), nn.Sequential(nn.Linear(32, 32), nn.ReLU()),
      nn.Linear(32, 32, false)))
    assert.are.same({ { "Linear", "0" }, { "Linear", "1.0" }, { "Linear", "2" } }, seen)
    assert.are.equal("Linear", getmetatable(model[2][1]).__name)
    assert.are.equal("FP8Linear", getmetatable(model[3]).__name)
    seen = {}
    acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { h }, config = false, env = {} }
    assert.are.equal("FP8Linear", getmetatable(acc:prepare(nn.Linear(32, 32))).__name)
    assert.are.same({ { "Linear", "" } }, seen)
  end)
end)

describe("apply_fp8_autowrap and contextual_fp8_autocast", function()
  it("refuse a recipe that is neither a handler nor a table (its use_autocast_during_eval was read as nil)", function()
    local model = fp8.convert_model(nn.Sequential(nn.Linear(32, 32)), { recipe = { backend = "te" } })
    local ok, err = pcall(fp8.apply_fp8_autowrap, model, "te")
    assert.is_false(ok)
    assert.truthy(tostring(err):find("apply_fp8_autowrap: recipe must be a recipe kwargs handler or a recipe table, "
      .. "got string", 1, true), err)
    assert.is_nil(rawget(model, "forward"))
    ok, err = pcall(fp8.contextual_fp8_autocast, function() end, true)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("contextual_fp8_autocast: recipe must be", 1, true), err)
    -- nil, a table and a handler are taken; wrapping twice keeps the first wrapper (TE's innermost autocast decides)
    assert.are.equal(model, fp8.apply_fp8_autowrap(model))
    local fwd = rawget(model, "forward")
    fp8.apply_fp8_autowrap(model, fp8.TERecipeKwargs { use_autocast_during_eval = true })
    assert.are.equal(fwd, rawget(model, "forward"))
    assert.is_function(fp8.contextual_fp8_autocast(function() end, fp8.TERecipeKwargs {}))
  end)
end)

describe("convert_model's options", function()
  it("refuses recipe and filter with to_fp8=false, which converts every FP8 layer back (they were ignored)", function()
    local model = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32))
    fp8.convert_model(model, { recipe = { backend = "te" } })
    for _, kv in ipairs { { "filter", function() return false end }, { "recipe", { backend = "ao" } } } do
      local ok, err = pcall(fp8.convert_model, model, { to_fp8 = false, [kv[1]] = kv[2] })
      assert.is_false(ok)
      assert.truthy(tostring(err):find(("convert_model: '%s' applies to the conversion to FP8 only, not with "
        .. "to_fp8=false"):format(kv[1]), 1, true), err)
      assert.are.equal("FP8Linear", getmetatable(model[1]).__name)
    end
    local _, back = fp8.convert_model(model, { to_transformer_engine = false })
    assert.are.same({ "0", "1" }, back)
  end)
end)
