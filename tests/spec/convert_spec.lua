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
      keys[#keys + 1] = "0.fp8_state"
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
