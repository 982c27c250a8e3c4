-- state_load_spec.lua — in-memory state dicts for every backend, and loads that fail leave the
-- object as it was (model with FP8 recipe state, optimizers, GradScaler, schedulers): everything
-- is checked before anything is copied.
local nn, F = fp8.nn, fp8.nn.functional
local U = dofile("tests/spec/helpers/util.lua")

local function mlp() return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16)) end

local function batch()
  fp8.manual_seed(7)
  local labels = {}
  for i = 1, 32 do labels[i] = (i * 7) % 16 end
  return fp8.randn { 32, 32 }, fp8.tensor(labels)
end

local function setup(handler)
  fp8.manual_seed(0)
  local model = mlp()
  local opt = fp8.optim.AdamW(model:parameters(), { lr = 3e-3 })
  local acc = fp8.Accelerator { mixed_precision = handler and "fp8" or "no", kwargs_handlers = handler and { handler } or nil,
                                config = false, env = {} }
  model, opt = acc:prepare(model, opt)
  return acc, model, opt
end

local function steps(acc, model, opt, n)
  local x, y = batch()
  local losses = {}
  for i = 1, n do
    local loss = F.cross_entropy(model(x), y)
    acc:backward(loss); opt:step(); opt:zero_grad()
    losses[i] = loss:item()
  end
  return losses
end

local function flat(model)
  local out = {}
  for _, k in ipairs(model:state_dict_keys()) do
    local t = model:state_dict()[k]
    out[k] = t:is_fp8() and t:dequantize():totable() or t:to("fp32"):totable()
  end
  return out
end

describe("in-memory resume (state_dict / load_state_dict)", function()
  for _, case in ipairs {
    { "msamp O1", function() return fp8.MSAMPRecipeKwargs { opt_level = "O1" } end },
    { "msamp O2", function() return fp8.MSAMPRecipeKwargs { opt_level = "O2" } end },
    { "msamp O3", function() return fp8.MSAMPRecipeKwargs { opt_level = "O3" } end },
    { "te", function() return fp8.TERecipeKwargs {} end },
  } do
    it(case[1] .. ": a model and optimizer restored from state dicts continue bit-identically", function()
      local acc, model, opt = setup(case[2]())
      steps(acc, model, opt, 3)
      local msd, osd = model:state_dict(), opt:state_dict()
      local straight = steps(acc, model, opt, 3)
      local final = flat(model)
      local acc2, model2, opt2 = setup(case[2]())
      steps(acc2, model2, opt2, 1)        -- some other state, overwritten by the load
      model2:load_state_dict(msd)
      opt2:load_state_dict(osd)
      local resumed = steps(acc2, model2, opt2, 3)
      assert.same(straight, resumed)
      assert.same(final, flat(model2))
    end)
  end

  it("an FP8 state_dict into an unconverted model says what to do", function()
    local _, model = setup(fp8.TERecipeKwargs {})
    local plain = mlp()
    local ok, err = pcall(plain.load_state_dict, plain, model:state_dict())
    assert.is_false(ok)
    assert.matches("unexpected key", err)
    assert.matches("convert this model the same way first", err)
    assert.matches("strict=false", err)
    plain:load_state_dict(model:state_dict(), false)   -- weights only
  end)
end)

describe("a failed load changes nothing", function()
  it("model: corrupt fp8_state is refused before any weight is written", function()
    local acc, model, opt = setup(fp8.TERecipeKwargs {})
    steps(acc, model, opt, 2)
    local before = flat(model)
    local sd = model:state_dict()
    for k, v in pairs(sd) do if not k:match("fp8_state$") then sd[k] = v * 0 + 5 end end
    local key
    for k in pairs(sd) do if k:match("fp8_state$") then key = k end end
    sd[key] = fp8.tensor { 1, 3, 0.5 }   -- truncated
    local ok, err = pcall(model.load_state_dict, model, sd)
    assert.is_false(ok)
    assert.matches("fp8_state", err)
    assert.same(before, flat(model))
    sd[key] = fp8.tensor { 99, 3 }       -- unknown version
    assert.has_error(function() model:load_state_dict(sd) end)
    assert.same(before, flat(model))
  end)

  it("model: a recipe state with another history length is refused, naming it", function()
    local _, te = setup(fp8.TERecipeKwargs { amax_history_len = 8 })
    local _, te2 = setup(fp8.TERecipeKwargs { amax_history_len = 16 })
    local ok, err = pcall(te2.load_state_dict, te2, te:state_dict())
    assert.is_false(ok)
    assert.matches('for "0.fp8_state": the input role has an amax history of 8, this layer 16', err, 1, true)
  end)

  it("model: a role's scale for another FP8 format (HYBRID's E5M2 grads into E4M3) is refused; layout 2 still loads",
    function()
    local acc, hy, opt = setup(fp8.TERecipeKwargs { fp8_format = "HYBRID" })
    steps(acc, hy, opt, 2)
    local _, e4 = setup(fp8.TERecipeKwargs { fp8_format = "E4M3" })
    local before = flat(e4)
    for _, strict in ipairs { true, false } do
      local ok, err = pcall(e4.load_state_dict, e4, hy:state_dict(), strict)
      assert.is_false(ok)
      assert.matches('for "0.fp8_state": the grad role\'s scale is for E5M2, this layer casts it to E4M3', err, 1, true)
      assert.same(before, flat(e4))
    end
    -- layout 2 (before the format was recorded): [2, 3, then per role scale, updates, warm, history length, history]
    local S = require "fp8.fp8_state"
    local sd = hy:state_dict()
    local st = S.unpack(sd["0.fp8_state"])
    assert.are.same({ "e4m3", "e4m3", "e5m2" }, { st.input.format, st.weight.format, st.grad.format })
    local v2 = { 2, 3 }
    for _, r in ipairs(S.ROLES) do
      for _, v in ipairs { st[r].scale, st[r].updates, st[r].warm, #st[r].history } do v2[#v2 + 1] = v end
      for _, h in ipairs(st[r].history) do v2[#v2 + 1] = h end
    end
    sd["0.fp8_state"] = fp8.tensor(v2)
    local _, hy2 = setup(fp8.TERecipeKwargs { fp8_format = "HYBRID" })
    hy2:load_state_dict(sd)
    assert.are.equal(st.grad.scale, fp8.recipes.fp8_layers(hy2)[1][2].fp8_meta:state().grad.scale)
    -- a format code that is none of them
    local bad = S.pack(st):totable()
    bad[3] = 7
    sd["0.fp8_state"] = fp8.tensor(bad)
    local ok, err = pcall(hy2.load_state_dict, hy2, sd)
    assert.is_false(ok)
    assert.matches("the input role's format code is 7 (1 e4m3, 2 e5m2, 0 not recorded)", err, 1, true)
  end)

  local function opt_with_state()
    local acc, model, opt = setup(nil)
    steps(acc, model, opt, 2)
    return opt
  end

  local function same_opt(a, b)
    assert.same(a.param_groups[1].lr, b.param_groups[1].lr)
    assert.same(a.param_groups[1].betas, b.param_groups[1].betas)
  end

  for _, bad in ipairs {
    { "step = \"x\"", function(sd) sd.state[1].step = "x" end, "step' of parameter 1 must be an integer" },
    { "lr = NaN", function(sd) sd.param_groups[1].lr = 0 / 0 end, "lr must be a finite number" },
    { "betas = {2, 3}", function(sd) sd.param_groups[1].betas = { 2, 3 } end, "betas%[1%] must be in" },
    { "an unknown group option", function(sd) sd.param_groups[1].momentum = 0.9 end, "does not have" },
    { "a state tensor of another size", function(sd) sd.state[1].exp_avg = fp8.zeros { 3 } end, "shape" },
    -- the same size in another shape (a transposed moment) was reshaped into the parameter's, a misread
    { "a state tensor of another shape, the same size", function(sd)
      local m = sd.state[1].exp_avg
      sd.state[1].exp_avg = m:t():contiguous()
    end, "state 'exp_avg' of parameter 1 has shape %[32, 64%], it must be %[64, 32%]" },
    { "a state tensor with one more dim of 1", function(sd)
      sd.state[1].exp_avg_sq = sd.state[1].exp_avg_sq:reshape({ 1, 64, 32 })
    end, "has shape %[1, 64, 32%], it must be %[64, 32%]" },
    { "a state tensor of another dtype", function(sd) sd.state[1].exp_avg = sd.state[1].exp_avg:to("bf16") end, "is bf16" },
  } do
    it("optimizer: " .. bad[1] .. " is refused and nothing changes", function()
      local opt = opt_with_state()
      local sd = opt:state_dict()
      local p1 = opt.param_groups[1].params[1]
      local m_before = opt.state[p1].exp_avg:totable()
      sd.param_groups[1].lr = 0.5   -- a valid change that must not land either
      bad[2](sd)
      local ok, err = pcall(opt.load_state_dict, opt, sd)
      assert.is_false(ok)
      assert.matches(bad[3], err)
      assert.matches("AdamW:load_state_dict", err, 1, true)
      assert.same(3e-3, opt.param_groups[1].lr)
      assert.same(m_before, opt.state[p1].exp_avg:totable())
    end)
  end

  it("optimizer: an SGD state into AdamW is refused at load, not at step()", function()
    local model = mlp()
    local sgd = fp8.optim.SGD(model:parameters(), { lr = 0.1, momentum = 0.9 })
    local x, y = batch()
    F.cross_entropy(model(x), y):backward(); sgd:step()
    local adam = fp8.optim.AdamW(model:parameters(), { lr = 0.1 })
    local sd = sgd:state_dict()
    sd.param_groups[1] = { params = sd.param_groups[1].params, lr = 0.1 }
    local ok, err = pcall(adam.load_state_dict, adam, sd)
    assert.is_false(ok)
    assert.matches("another optimizer", err)
    assert.is_nil(next(adam.state))
  end)

  it("msamp: an O2 state into an O1 optimizer is refused (moment dtypes)", function()
    local acc2, m2, o2 = setup(fp8.MSAMPRecipeKwargs { opt_level = "O2" })
    steps(acc2, m2, o2, 1)
    local acc1, m1, o1 = setup(fp8.MSAMPRecipeKwargs { opt_level = "O1" })
    steps(acc1, m1, o1, 1)
    local ok, err = pcall(o1.load_state_dict, o1, o2:state_dict())
    assert.is_false(ok)
    assert.matches("is e4m3, MSAMPAdamW keeps it in fp32", err)
  end)

  it("msamp: an E4M3 first moment with a scale per row is refused by the load, not by the next step", function()
    local acc, m, o = setup(fp8.MSAMPRecipeKwargs { opt_level = "O2" })
    steps(acc, m, o, 1)
    local sd = o:state_dict()
    local before = o:state_dict().state[1].exp_avg:dequantize():tolist()
    sd.state[1].exp_avg = sd.state[1].exp_avg:dequantize():quantize("e4m3", { axis = 1 })   -- the step takes one scale
    local ok, err = pcall(o.load_state_dict, o, sd)
    assert.is_false(ok)
    assert.matches("state 'exp_avg' of parameter 1 has a scale per index of dim 1, MSAMPAdamW keeps one scale", err)
    assert.same(before, o.state[o.param_groups[1].params[1]].exp_avg:dequantize():tolist())
    steps(acc, m, o, 1)   -- and the optimizer still steps
  end)

  it("msamp: a second-moment scale inverse that is no scale (0, negative, inf, NaN) is refused by the load", function()
    local acc, m, o = setup(fp8.MSAMPRecipeKwargs { opt_level = "O2" })
    steps(acc, m, o, 1)
    local before = o:state_dict().state[1].exp_avg_sq_scale_inv:item()
    for _, bad in ipairs { 0, -1, math.huge, 0 / 0 } do
      local sd = o:state_dict()
      sd.state[1].exp_avg_sq_scale_inv = fp8.tensor { bad }
      local ok, err = pcall(o.load_state_dict, o, sd)
      assert.is_false(ok, tostring(bad))
      assert.matches("state 'exp_avg_sq_scale_inv' of parameter 1 must hold finite values > 0 (a scale), got", err, 1,
        true)
    end
    assert.are.equal(before, o.state[o.param_groups[1].params[1]].exp_avg_sq_scale_inv:item())
    local sd = o:state_dict()
    sd.state[1].exp_avg_sq_scale_inv = fp8.tensor { 0.5 }
    o:load_state_dict(sd)   -- a scale is taken
    steps(acc, m, o, 1)
  end)

  it("GradScaler: bad values and unknown keys are refused, nothing changes", function()
    local s = fp8.amp.GradScaler {}
    for _, bad in ipairs { { scale = "x" }, { scale = 0 / 0 }, { scale = -1 }, { growth_factor = 0.5 },
                           { backoff_factor = 2 }, { growth_interval = 1.5 }, { _growth_tracker = -1 }, { nope = 1 },
                           { scale = 4, growth_factor = "x" } } do
      assert.has_error(function() s:load_state_dict(bad) end)
      assert.same(65536.0, s:get_scale())
      assert.same(2.0, s.growth_factor)
    end
    s:load_state_dict { scale = 1024, growth_factor = 2, backoff_factor = 0.5, growth_interval = 2000,
      _growth_tracker = 3 }
    assert.same(1024, s:get_scale())
  end)

  it("GradScaler: an enabled scaler takes whole states only (torch's KeyError), naming the missing key", function()
    local s = fp8.amp.GradScaler {}
    local full = s:state_dict()
    for _, k in ipairs { "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker" } do
      local sd = {}
      for kk, v in pairs(full) do sd[kk] = v end
      sd[k] = nil
      U.fails_with(("GradScaler:load_state_dict: the state has no '%s' (a state from state_dict() holds scale, "
        .. "growth_factor, backoff_factor, growth_interval, _growth_tracker; torch's raises KeyError)"):format(k),
        s.load_state_dict, s, sd)
    end
    U.fails_with("GradScaler:load_state_dict: the state has no 'growth_factor'", s.load_state_dict, s, { scale = 128 })
    assert.same(65536.0, s:get_scale())
    U.fails_with("GradScaler:load_state_dict: unknown key 'nope' (valid: scale, growth_factor, backoff_factor, "
      .. "growth_interval, _growth_tracker)", s.load_state_dict, s, { scale = 128, nope = 1 })
    -- a disabled scaler (whose state_dict is empty) takes a part, as before
    local d = fp8.amp.GradScaler { enabled = false }
    d:load_state_dict { scale = 128 }
  end)

  it("scheduler: bad base_lrs are refused before the lrs change", function()
    local model = mlp()
    local opt = fp8.optim.AdamW(model:parameters(), { lr = 0.1 })
    local sch = fp8.optim.lr_scheduler.StepLR(opt, { step_size = 1, gamma = 0.5 })
    assert.has_error(function() sch:load_state_dict { last_epoch = 3, base_lrs = { "x" } } end)
    assert.has_error(function() sch:load_state_dict { last_epoch = 3, base_lrs = { 1, 2 } } end)
    assert.same(0.1, opt.param_groups[1].lr)
  end)
end)
