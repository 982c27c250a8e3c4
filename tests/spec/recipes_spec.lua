-- recipes_spec.lua — the FP8 recipes behind fp8.Accelerator: settings on the accelerator, model
-- conversion per backend, context-aware FP8 autocast (eval = high precision unless
-- use_autocast_during_eval), scaling state that adapts and round-trips, fp8.stats and its CSV log,
-- MS-AMP's optimizer rules and memory per parameter, and errors for bad input.
local nn, F = fp8.nn, fp8.nn.functional
local R = require "fp8._fp8_layer"
local memory = require "fp8._memory"

local function mlp(i, h, o)
  return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, o))
end

local function batch(n, d, classes)
  local labels = {}
  for i = 1, n do labels[i] = (i * 7) % classes end
  return fp8.randn { n, d }, fp8.tensor(labels)
end

-- ‖got − want‖ / ‖want‖ over two equally shaped nested tables of numbers (want not all zero).
local function relerr(got, want)
  local num, den = 0, 0
  local function walk(a, b)
    if type(a) == "table" then
      assert.equals(#b, #a)
      for i = 1, #a do walk(a[i], b[i]) end
    else
      num, den = num + (a - b) ^ 2, den + b ^ 2
    end
  end
  walk(got, want)
  assert.is_true(den > 0)
  return math.sqrt(num / den)
end

-- An Accelerator with TransformerEngine's recipe and no config or environment of the host.
local function te_accelerator()
  return fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} }, config = false, env = {} }
end

-- The same with torchao's tensorwise recipe (current scaling per tensor) on every Linear whose dims are multiples
-- of 16 (torchao's default filter would keep the first and the last in high precision).
local function ao_accelerator()
  local filter = function(m) return m.in_features % 16 == 0 and m.out_features % 16 == 0 end
  local ao = fp8.AORecipeKwargs { config = "tensorwise", module_filter_func = filter }
  return fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { ao }, config = false, env = {} }
end

-- torchao's rowwise recipe (per-row and per-column power-of-two scales), on the same layers.
local function ao_rowwise_accelerator()
  local filter = function(m) return m.in_features % 16 == 0 and m.out_features % 16 == 0 end
  local ao = fp8.AORecipeKwargs { config = "rowwise", module_filter_func = filter }
  return fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { ao }, config = false, env = {} }
end

-- A model's parameters as tables and its FP8 layers' scales and amaxes (fp8.stats): what two runs compare.
local function params_and_stats(model)
  local p = {}
  for _, t in ipairs(model:parameters()) do p[#p + 1] = t:tolist() end
  local st = {}
  -- (a rowwise role has no single scale: NaN, which compares unequal to itself; "per row" stands for it)
  for _, r in ipairs(fp8.stats(model, { quiet = true })) do
    st[#st + 1] = { r.per_row and "per row" or r.scale, r.amax }
  end
  return p, st
end

-- A 2-layer GPT trained 5 steps in te (or with the Accelerator make_acc() gives); unfuse(model) may replace forwards
-- on the instances first. Returns the losses, params_and_stats and counters(model).
local function train_small_gpt(unfuse, counters, make_acc)
  fp8.manual_seed(5)
  local model = nn.GPT { vocab_size = 16, block_size = 8, n_layer = 2, n_head = 2, n_embd = 32 }
  local opt = fp8.optim.AdamW(model:parameters(), { lr = 3e-3 })
  local acc = (make_acc or te_accelerator)()
  model, opt = acc:prepare(model, opt)
  if unfuse then unfuse(model) end
  local idx = fp8.tensor { { 1, 2, 3, 4, 5, 6, 7, 8 }, { 8, 7, 6, 5, 4, 3, 2, 1 } }
  local tgt = fp8.tensor { { 2, 3, 4, 5, 6, 7, 8, 9 }, { 7, 6, 5, 4, 3, 2, 1, 0 } }
  local losses = {}
  for step = 1, 5 do
    local _, loss = model(idx, tgt)
    acc:backward(loss); opt:step(); opt:zero_grad()
    losses[step] = loss:item()
  end
  local p, st = params_and_stats(model)
  return losses, p, st, counters(model)
end

-- run(true) (fused) and run(false) (unfused) each return losses, params_and_stats and a run's counters: the two
-- must give the same bits. Returns the two runs' counters.
local function same_bits_fused(run)
  local l1, p1, s1, c1 = run(true)
  local l2, p2, s2, c2 = run(false)
  assert.are.same(l2, l1)
  assert.are.same(p2, p1)
  assert.are.same(s2, s1)
  return c1, c2
end

local function count_class(model, name)
  local c = 0
  for _, m in ipairs(model:modules()) do if getmetatable(m).__name == name then c = c + 1 end end
  return c
end

local function train(acc, model, opt, steps)
  local x, y = batch(64, 32, 10)
  local first, last
  for _ = 1, steps do
    local loss = F.cross_entropy(model(x), y)
    acc:backward(loss); opt:step(); opt:zero_grad()
    first = first or loss:item()
    last = loss:item()
  end
  return first, last
end

local function setup(mp, handler, h)
  fp8.manual_seed(0)
  local model = mlp(32, h or 64, 10)
  local opt = fp8.optim.AdamW(model:parameters(), { lr = 3e-3 })
  local acc = fp8.Accelerator { mixed_precision = mp, kwargs_handlers = handler and { handler } or nil, config = false,
                                env = {} }
  model, opt = acc:prepare(model, opt)
  return acc, model, opt
end

describe("fp8.Accelerator settings", function()
  it("exposes precision, backend and the full recipe", function()
    local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.FP8RecipeKwargs { backend = "te",
      fp8_format = "HYBRID", amax_history_len = 16, amax_compute_algo = "max" } }, config = false, env = {} }
    assert.are.equal("fp8", acc.mixed_precision)
    assert.are.equal("te", acc.fp8_backend)
    assert.are.equal(16, acc.fp8_recipe.amax_history_len)
    assert.are.equal("max", acc.fp8_recipe.amax_compute_algo)
    assert.are.equal(0, acc.fp8_recipe.margin)
    assert.are.same({ false, false, false }, acc.fp8_recipe.override_linear_precision)
    assert.is_true(acc:is_main_process())
    assert.are.equal("cpu", acc:device())
    assert.matches("fp8_backend%s+te", tostring(acc:state()))
  end)

  it("defaults to msamp O2 and accepts the kwarg_handlers spelling", function()
    local acc = fp8.Accelerator { mixed_precision = "fp8", config = false, env = {} }
    assert.are.equal("msamp", acc.fp8_backend)
    assert.are.equal("O2", acc.fp8_recipe.opt_level)
    local acc2 = fp8.Accelerator { mixed_precision = "fp8", kwarg_handlers = { fp8.AORecipeKwargs {} }, config = false, env = {} }
    assert.are.equal("ao", acc2.fp8_backend)
  end)

  it("converting a model (prepare, convert_model) draws no random numbers", function()
    -- a script that draws its data after prepare must see the same numbers with and without FP8
    local function after(convert)
      fp8.manual_seed(0)
      local m = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.LayerNorm(16))
      convert(m)
      return fp8.randn { 4 }:tolist()
    end
    local want = after(function() end)
    for _, h in ipairs { fp8.TERecipeKwargs {}, fp8.AORecipeKwargs { module_filter_func = function() return true end },
                         fp8.MSAMPRecipeKwargs {} } do
      assert.are.same(want, after(function(m)
        local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { h }, config = false, env = {} }
        local opt = fp8.optim.AdamW(m:parameters(), { lr = 1e-3 })
        acc:prepare(m, opt)
        assert.is_true(fp8.has_fp8_layers(m))
      end), h.handler_type)
    end
    assert.are.same(want, after(function(m) fp8.convert_model(m, { recipe = { backend = "te" } }) end))
  end)

  it("rejects unknown options and FP8 handlers without fp8", function()
    assert.has_error(function() fp8.Accelerator { mixed_precission = "fp8" } end,
      "Accelerator: unknown option 'mixed_precission' (did you mean 'mixed_precision'?) (valid: config, cpu, "
      .. "dataloader_config, device_placement, env, even_batches, gradient_accumulation_plugin, "
      .. "gradient_accumulation_steps, kwarg_handlers, kwargs_handlers, log_with, mixed_precision, project_config, "
      .. "project_dir, "
      .. "step_scheduler_with_optimizer)")
    local ok, err = pcall(fp8.Accelerator, { mixed_precision = "bf16", kwargs_handlers = { fp8.TERecipeKwargs {} },
                                             config = false, env = {} })
    assert.is_false(ok)
    assert.truthy(err:find('TERecipeKwargs needs mixed_precision="fp8", but mixed_precision is "bf16" (from the '
      .. 'mixed_precision argument); pass mixed_precision="fp8"', 1, true), err)
    -- the argument outranks the environment: setting the variable would not help, so the message does not say so
    assert.is_nil(err:find("FP8LAB_MIXED_PRECISION", 1, true), err)
    ok, err = pcall(fp8.Accelerator, { kwargs_handlers = { fp8.TERecipeKwargs {} }, config = false,
                                       env = { FP8LAB_MIXED_PRECISION = "bf16" } })
    assert.is_false(ok)
    assert.truthy(err:find('(from the environment); pass mixed_precision="fp8" or set FP8LAB_MIXED_PRECISION=fp8', 1,
      true), err)
  end)

  it("prepare returns its arguments in order", function()
    local acc = fp8.Accelerator { mixed_precision = "no", config = false, env = {} }
    local model = mlp(8, 16, 4)
    local opt = fp8.optim.SGD(model:parameters(), { lr = 0.1 })
    local loader = { "a loader" }
    local a, b, c = acc:prepare(model, opt, loader)
    assert.are.equal(model, a)
    assert.are.equal(loader, c)
    assert.are.equal(opt.param_groups, b.param_groups)
  end)
end)

describe("te recipe", function()
  it("reports an infinite input as saturated in the layer's statistics", function()
    -- TransformerEngine's cast clamps it to ±max with the delayed scale (the output stays finite); fp8.stats must
    -- show it, not hide it behind a saturated count of 0
    fp8.manual_seed(3)
    local acc = te_accelerator()
    local model = acc:prepare(nn.Sequential(nn.Linear(16, 16)))
    local x = fp8.randn { 4, 16 }
    x:set({ 1, 1 }, math.huge)
    x:set({ 2, 5 }, -math.huge)
    local y = model(x)
    assert.is_true(y:abs():max():item() < math.huge)
    local st = model[1].fp8_meta:state().input
    assert.are.equal(2, st.saturated)
    assert.are.equal(math.huge, st.amax)
  end)

  it("converts Linear and LayerNorm, and back, keeping the tensors", function()
    local model = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.Linear(64, 16))
    local w = model:parameters()[1]
    fp8.convert_model(model, { recipe = { backend = "te" } })
    assert.are.equal(2, count_class(model, "FP8Linear"))
    assert.are.equal(1, count_class(model, "FP8LayerNorm"))
    assert.is_true(fp8.has_fp8_layers(model))
    assert.is_true(fp8.has_transformer_engine_layers(model))
    assert.are.equal(w, model:parameters()[1])
    fp8.convert_model(model, { to_fp8 = false })
    assert.are.equal(0, count_class(model, "FP8Linear"))
    assert.are.equal(2, count_class(model, "Linear"))
    assert.is_false(fp8.has_fp8_layers(model))
    assert.are.equal(w, model:parameters()[1])
  end)

  it("keeps layers whose dims are not multiples of 16 in high precision", function()
    local acc, model = setup("fp8", fp8.TERecipeKwargs {})
    assert.are.equal(2, count_class(model, "FP8Linear"))   -- the 64 -> 10 head stays a Linear
    assert.are.equal(1, count_class(model, "Linear"))
  end)

  it("trains, and the scales adapt from 1", function()
    local acc, model, opt = setup("fp8", fp8.TERecipeKwargs { amax_history_len = 4, amax_compute_algo = "max" })
    local first, last = train(acc, model, opt, 25)
    assert.is_true(last < first * 0.8, ("loss %g -> %g"):format(first, last))
    local rows = fp8.stats(model, { quiet = true })
    assert.are.equal(6, #rows)
    for _, r in ipairs(rows) do
      assert.are_not.equal(1.0, r.scale)
      assert.is_true(r.amax > 0)
    end
    assert.are.equal("e5m2", rows[3].format)   -- HYBRID: the output gradient is E5M2
  end)

  it("FP8 autocast and the module generation are one state for every copy of their modules (a reload)", function()
    local A1, M1 = require "fp8.fp8_autocast", require "fp8.nn.module"
    local saved = { package.loaded["fp8.fp8_autocast"], package.loaded["fp8.nn.module"] }
    package.loaded["fp8.fp8_autocast"], package.loaded["fp8.nn.module"] = nil, nil
    local ok, err = pcall(function()
      local A2, M2 = require "fp8.fp8_autocast", require "fp8.nn.module"
      assert.are_not.equal(A1, A2)
      -- a prepared model's wrapper (one copy) and its FP8 layers (the other) agree: under busted's insulation the
      -- layers of a later spec file ran in high precision inside an earlier file's Accelerator
      A2.fp8_autocast(function() assert.is_true(A1.enabled()) end)
      assert.is_false(A1.enabled())
      local g = M1.generation()
      M2.class("ReloadProbe")().w = fp8.zeros(1):requires_grad(true)
      assert.is_true(M1.generation() > g)
    end)
    package.loaded["fp8.fp8_autocast"], package.loaded["fp8.nn.module"] = saved[1], saved[2]
    assert(ok, err)
  end)

  it("a layer convert_model makes after prepare updates at each step too; one of another recipe is refused", function()
    fp8.manual_seed(7)
    local model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
    local acc = te_accelerator()
    model, opt = acc:prepare(model, opt)
    local x = fp8.randn { 8, 16 }
    local function step() local y = model(x); acc:backward((y * y):mean()); opt:step(); opt:zero_grad() end
    step()
    fp8.convert_model(model, { to_fp8 = false })
    fp8.convert_model(model, { recipe = acc.fp8_recipe })   -- new FP8 layers, fresh state
    step(); step()
    local st = model[1].fp8_meta:state().input
    assert.are.equal(2, st.updates)          -- it stayed 0, the scale 1 and the amax in slot 0 for ever
    assert.are.equal(R.scale_for(st.history[2], "e4m3", 0, false), st.scale)
    fp8.convert_model(model, { to_fp8 = false })
    fp8.convert_model(model, { recipe = fp8.TERecipeKwargs { amax_history_len = 4 } })
    local y = model(x)
    acc:backward((y * y):mean())
    local ok, err = pcall(opt.step, opt)
    assert.is_false(ok)
    assert.matches("'0' is an FP8Linear of the recipe .* made after prepare", err)
  end)

  it("eval output is the high-precision forward unless use_autocast_during_eval", function()
    for _, during_eval in ipairs { false, true } do
      local acc, model, opt = setup("fp8", fp8.TERecipeKwargs { use_autocast_during_eval = during_eval })
      train(acc, model, opt, 3)
      local x = fp8.randn { 8, 32 }
      model:eval()
      local before = fp8.stats(model, { quiet = true })[1].amax
      local y_eval = model(x)
      if not during_eval then   -- the high-precision eval forward leaves the recipe state alone
        assert.are.equal(before, fp8.stats(model, { quiet = true })[1].amax)
      end
      local hp = acc:unwrap_model(model, false)   -- te: plain layers, the same weights
      assert.is_false(fp8.has_fp8_layers(hp))
      local y_hp = fp8.no_grad(function() return fp8.amp.autocast("bf16", function() return hp(x) end) end)
      local diff = (y_eval - y_hp):abs():max():item()
      if during_eval then assert.is_true(diff > 0) else assert.are.equal(0, diff) end
    end
  end)

  it("override_linear_precision sends the named GEMM back to high precision", function()
    -- the forward's distance from the fp32 model, with fprop overridden and without (the same weights and input)
    local function distance(override)
      local acc, model = setup("fp8", fp8.TERecipeKwargs { override_linear_precision = override })
      local x = fp8.randn { 8, 32 }
      local out = model(x)
      local ref = acc:unwrap_model(model, { keep_fp32_wrapper = false })(x)   -- te: converted back to plain layers
      assert.are.equal("fp32", fp8.autocast_dtype())   -- prepare leaves the program's autocast alone
      return (out - ref):abs():max():item()
    end
    local hp, fp8_fprop = distance { true, false, false }, distance { false, false, false }
    -- fprop in high precision (bf16 autocast under fp8 mixed precision): bf16-close to fp32 (7.6e-4 here), an
    -- order of magnitude nearer than the FP8 forward (9.3e-3); an ignored override would give the FP8 distance
    assert.is_true(fp8_fprop > 0)
    assert.is_true(hp < fp8_fprop / 5, ("overridden %g, FP8 %g"):format(hp, fp8_fprop))
  end)

  it("with fprop overridden, the FP8 casts dgrad and wgrad read still feed the weight's and input's histories", function()
    -- the input of 1e-3 magnitude: cast with a scale of 1 (a history that never filled) it mostly underflows
    local l = fp8.recipes.FP8Linear(16, 16, true, { backend = "te", amax_history_len = 4,
                                                    override_linear_precision = { true, false, false } })
    local ref = nn.Linear(16, 16, true)
    ref.weight, ref.bias = l.weight, l.bias
    local errs = {}
    for step = 1, 3 do
      local x = (fp8.randn { 32, 16 } * 1e-3):requires_grad(true)
      fp8.recipes.fp8_autocast(function() return l(x) end):sum():backward()
      local x2 = x:detach():clone():requires_grad(true)
      ref(x2):sum():backward()
      errs[step] = (l.weight.grad - ref.weight.grad):abs():max():item() / ref.weight.grad:abs():max():item()
      for _, t in ipairs { l.weight, l.bias, ref.weight, ref.bias } do t.grad = nil end
      l.fp8_meta:update()
    end
    local st = l.fp8_meta:state()
    assert.is_true(st.input.scale > 1000, "input scale " .. st.input.scale)
    assert.is_true(st.weight.scale > 100, "weight scale " .. st.weight.scale)
    assert.is_true(errs[3] < 0.1, ("wgrad's error at step 3: %g (step 1, before any history: %g)"):format(errs[3], errs[1]))
  end)

  it("a GELU('tanh') before an FP8Linear runs fused in Sequential (its input cast in GELU's pass): the same bits", function()
    -- the same MLP trained with its GELUs as they are (fused: te casts with stored scales from the first step, ao's
    -- tensorwise with current scales, ao's rowwise makes GELU once for its per-row and per-column casts) and with
    -- their forward replaced by the same function on the instance (which Sequential never fuses)
    for _, make_acc in ipairs { te_accelerator, ao_accelerator, ao_rowwise_accelerator } do
      local function run(fused)
        fp8.manual_seed(3)
        local g1, g2 = nn.GELU("tanh"), nn.GELU("tanh")
        if not fused then
          for _, g in ipairs { g1, g2 } do g.forward = function(_, t) return F.gelu(t, "tanh") end end
        end
        local model = nn.Sequential(nn.Linear(32, 64), g1, nn.Linear(64, 48), g2, nn.Linear(48, 10))
        local opt = fp8.optim.AdamW(model:parameters(), { lr = 3e-3 })
        local acc = make_acc()
        model, opt = acc:prepare(model, opt)
        local x, y = batch(64, 32, 10)
        local losses = {}
        for step = 1, 6 do
          local loss = F.cross_entropy(model(x), y)
          acc:backward(loss); opt:step(); opt:zero_grad()
          losses[step] = loss:item()
        end
        local p, st = params_and_stats(model)
        local handed = {}   -- per FP8Linear: backwards whose dY the next layer's fused GELU backward cast
        for i = 1, 3, 2 do handed[#handed + 1] = model[i].fp8_meta:state().dy_handovers end
        handed[#handed + 1] = model[3].fp8_meta:state().fused_input_casts   -- forwards with GELU in the cast's pass
        return losses, p, st, handed
      end
      local h1, h2 = same_bits_fused(run)
      -- fused, the first GELU's backward also casts dY for the layer before it (every step), but under rowwise, whose
      -- hand-over is dY's per-row cast for dgrad, which the first layer (its input takes no gradient) does not run;
      -- the second GELU is not fused (the last layer, 48 -> 10, stays in high precision), so the layer before it
      -- casts its own
      assert.are.same({ make_acc == ao_rowwise_accelerator and 0 or 6, 0, 6 }, h1)
      assert.are.same({ 0, 0, 0 }, h2)
    end
    -- fused, the FP8 step records no GELU op of its own; with the instance's forward replaced it does
    for _, replaced in ipairs { false, true } do
      local prof = fp8.profiler.profile {}
      fp8.manual_seed(3)
      local g = nn.GELU("tanh")
      if replaced then g.forward = function(_, t) return F.gelu(t, "tanh") end end
      local model = nn.Sequential(nn.Linear(32, 64), g, nn.Linear(64, 16))
      local acc = te_accelerator()
      model = acc:prepare(model)
      prof:start()
      acc:backward(model(fp8.randn { 8, 32 }):sum())
      prof:stop()
      local names = {}
      for _, e in ipairs(prof:events()) do names[e.name] = true end
      assert.are.equal(replaced, names.gelu == true)
      assert.is_true(names.fp8_linear)
      -- a failing layer names itself either way
      model[3].in_features = 48
      local ok, err = pcall(model, fp8.randn { 4, 32 })
      assert.is_false(ok)
      assert.are.equal("in layer 2 (FP8Linear) forward: expected input [..., 48], got [4, 64]", err)
    end
  end)

  it("a GPT block's residual adds run in its FP8 projections' GEMMs: the same bits", function()
    -- the GPT trained as it is (x + proj(...) and x + fc2(...) added as the GEMMs store) and with the dropouts after
    -- the projections replaced on the instance by the identity (no container adds a residual before a replaced
    -- forward): the same losses, parameters and recipe state
    local function run(fused)
      return train_small_gpt(not fused and function(model)
        for _, b in ipairs { model.blocks[1], model.blocks[2] } do
          b.attn.resid_dropout.forward = function(_, t) return t end
          b.mlp[4].forward = function(_, t) return t end
        end
      end, function(model)
        local b2 = model.blocks[2]
        return { b2.attn.proj.fp8_meta:state().residual_adds, b2.mlp[3].fp8_meta:state().residual_adds }
      end)
    end
    local r1, r2 = same_bits_fused(run)
    assert.are.same({ 5, 5 }, r1)   -- the attention's projection and the MLP's second layer, every step
    assert.are.same({ 0, 0 }, r2)
    -- a dropout that drops (training, p > 0) runs between the projection and the add; in eval mode it is the
    -- identity and the add joins the GEMM, with the output of the unfused block
    local function block(p, replaced)
      fp8.manual_seed(9)
      local b = nn.TransformerBlock { n_embd = 32, n_head = 2, dropout = p }
      local acc = fp8.Accelerator { mixed_precision = "fp8", config = false, env = {},
        kwargs_handlers = { fp8.TERecipeKwargs { use_autocast_during_eval = true } } }
      b = acc:prepare(b)
      if replaced then b.attn.resid_dropout.forward = function(_, t) return t end; b.mlp[4].forward = function(_, t) return t end end
      return b
    end
    local x = fp8.randn { 2, 8, 32 }
    local b = block(0.1)
    b(x)
    assert.are.same({ 0, 0 }, { b.attn.proj.fp8_meta:state().residual_adds, b.mlp[3].fp8_meta:state().residual_adds })
    b:eval()
    local y1 = b(x)
    assert.are.same({ 1, 1 }, { b.attn.proj.fp8_meta:state().residual_adds, b.mlp[3].fp8_meta:state().residual_adds })
    local u = block(0.1, true)
    u(x)
    u:eval()
    assert.are.same(u(x):tolist(), y1:tolist())
    assert.are.same({ 0, 0 }, { u.attn.proj.fp8_meta:state().residual_adds, u.mlp[3].fp8_meta:state().residual_adds })
  end)

  it("FP8Linear:forward_residual is residual + forward(x), the add in the GEMM's store where it can", function()
    -- called from a prepared model's forward (its FP8 autocast on), with the add after the layer beside it
    local Probe = nn.Module.class("ResidualProbe")
    function Probe:__init() self.lin = nn.Linear(32, 48) end
    function Probe:forward(x, r, fused)
      if fused then return self.lin:forward_residual(x, r) end
      return r + self.lin(x)
    end
    fp8.manual_seed(3)
    local acc = te_accelerator()
    local probe = acc:prepare(Probe())
    local lin = probe.lin
    local x = fp8.randn { 4, 32 }
    for _, r in ipairs { fp8.randn { 4, 48 }, fp8.randn { 48 }, fp8.randn { 4, 48 }:to("bf16") } do
      assert.are.same(probe(x, r, false):tolist(), probe(x, r, true):tolist())
    end
    -- counted only where the GEMM added it (the fp32 residual of the output's shape): 1 of the 3
    assert.are.equal(1, lin.fp8_meta:state().residual_adds)
    -- gradients flow to the residual as through an add
    local function grad_of(fused)
      fp8.manual_seed(4)
      local r = fp8.randn({ 4, 48 }):requires_grad(true)
      local y = probe(x, r, fused)
      acc:backward((y * y):sum())
      return r.grad:tolist()
    end
    assert.are.same(grad_of(false), grad_of(true))
    assert.has_error(function() probe(x, "r", true) end, "ResidualProbe forward: FP8Linear:forward_residual: expected a tensor residual, got string")
    assert.has_error(function() probe(x, nil, true) end, "ResidualProbe forward: FP8Linear:forward_residual: expected a tensor residual, got nil")
    assert.has_error(function() probe(x, fp8.randn { 4, 47 }, true) end)
    -- outside FP8 autocast it declines: the caller adds
    assert.is_nil(lin:forward_residual(x, fp8.randn { 4, 48 }))
  end)

  it("a LayerNorm before an FP8Linear casts its output in its own pass (GPT blocks, Sequential): the same bits", function()
    -- the GPT trained with its LayerNorms as they are (fused into the FP8 projections after them) and with their
    -- forward replaced by the same function on the instance (which no container fuses), in te and in ao's
    -- tensorwise recipe (current scaling: LayerNorm's output amax in a pass of its own)
    for _, make_acc in ipairs { te_accelerator, ao_accelerator } do
      local function run(fused)
        return train_small_gpt(not fused and function(model)
          for _, b in ipairs { model.blocks[1], model.blocks[2] } do
            for _, ln in ipairs { b.ln1, b.ln2 } do
              ln.forward = function(m, t) return F.layer_norm(t, m.weight, m.bias, m.eps) end
            end
          end
        end, function(model)
          local b1 = model.blocks[1]
          return { b1.attn.qkv.fp8_meta:state().fused_input_casts, b1.mlp[1].fp8_meta:state().fused_input_casts,
                   b1.mlp[1].fp8_meta:state().dy_handovers }
        end, make_acc)
      end
      local f1, f2 = same_bits_fused(run)
      -- the attention's and the MLP's first projection, every step; and the MLP's GELU (fused in both runs) casts
      -- dY for its first projection every step
      assert.are.same({ 5, 5, 5 }, f1)
      assert.are.same({ 0, 0, 5 }, f2)
    end
    -- a forward replaced on the attention or the MLP runs: the block never goes around it
    do
      fp8.manual_seed(5)
      local model = nn.GPT { vocab_size = 16, block_size = 8, n_layer = 1, n_head = 2, n_embd = 32 }
      local acc = te_accelerator()
      model = acc:prepare(model)
      local b, calls = model.blocks[1], {}
      for _, k in ipairs { "attn", "mlp" } do
        local m = b[k]
        local class_forward = m.forward
        m.forward = function(self, t) calls[k] = (calls[k] or 0) + 1; return class_forward(self, t) end
      end
      model(fp8.tensor { { 1, 2, 3, 4 } })
      assert.are.same({ attn = 1, mlp = 1 }, calls)
      assert.are.equal(0, b.attn.qkv.fp8_meta:state().fused_input_casts)
    end
    -- in a Sequential too, and its layers name themselves in errors either way
    local function seq(replaced)
      fp8.manual_seed(6)
      local model = nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 48), nn.GELU("tanh"), nn.Linear(48, 16))
      local acc = te_accelerator()
      model = acc:prepare(model)   -- (its LayerNorm becomes an FP8LayerNorm: replace the forward after it)
      if replaced then model[1].forward = function(m, t) return F.layer_norm(t, m.weight, m.bias, m.eps) end end
      local x = fp8.randn { 8, 32 }
      local y = model(x)
      acc:backward(y:sum())
      return y:tolist(), model[2].weight.grad:tolist(), model[1].weight.grad:tolist(), model[2].fp8_meta:state().fused_input_casts, model
    end
    local y1, g1, lg1, n1, m1 = seq(false)
    local y2, g2, lg2, n2 = seq(true)
    assert.are.same(y2, y1)
    assert.are.same(g2, g1)
    assert.are.same(lg2, lg1)
    assert.are.same({ 1, 0 }, { n1, n2 })
    m1[2].in_features = 40
    local ok, err = pcall(m1, fp8.randn { 4, 32 })
    assert.is_false(ok)
    assert.are.equal("in layer 1 (FP8Linear) forward: expected input [..., 40], got [4, 32]", err)
  end)

  it("recipe state round-trips through state()/load_state()", function()
    local acc, model, opt = setup("fp8", fp8.TERecipeKwargs { amax_history_len = 8 })
    train(acc, model, opt, 5)
    local layer = fp8.recipes.fp8_layers(model)[1][2]
    local saved = layer.fp8_meta:state()
    local fresh = R.layer_new(fp8.recipes.layer_config(acc.fp8_recipe))
    fresh:load_state(saved)
    local got = fresh:state()
    for _, role in ipairs { "input", "weight", "grad" } do
      assert.are.equal(saved[role].scale, got[role].scale)
      assert.are.same(saved[role].history, got[role].history)
    end
    assert.has_error(function() fresh:load_state({ input = { scale = 1, history = {} } }) end)
  end)

  it("state_dict carries the recipe state, and load_state_dict restores it (resume keeps the scales)", function()
    local acc, model, opt = setup("fp8", fp8.TERecipeKwargs { amax_history_len = 8 })
    train(acc, model, opt, 6)
    local sd = model:state_dict()
    assert.is_not_nil(sd["0.fp8_state"])
    local acc2, model2 = setup("fp8", fp8.TERecipeKwargs { amax_history_len = 8 })
    model2:load_state_dict(sd)
    local a, b = fp8.stats(model, { quiet = true }), fp8.stats(model2, { quiet = true })
    for i = 1, #a do
      assert.are.equal(a[i].scale, b[i].scale)
      assert.are.equal(a[i].amax_history, b[i].amax_history)
    end
    local acc3, model3 = setup("fp8", fp8.TERecipeKwargs { amax_history_len = 4 })
    local ok, err = pcall(model3.load_state_dict, model3, sd)
    assert.is_false(ok)
    assert.matches("fp8_state", err)
  end)

  it("a NaN in a te cast does not enter the history (TE's fmaxf amax); a NaN in a saved history loads back", function()
    local acc, model, opt = setup("fp8", fp8.TERecipeKwargs { amax_history_len = 8, amax_compute_algo = "max" })
    local t = fp8.randn { 8, 32 }:totable()
    t[1][1] = 0 / 0
    local bad = fp8.tensor(t)
    acc:backward(model(bad):sum()); opt:zero_grad()
    train(acc, model, opt, 2)
    local layer = fp8.recipes.fp8_layers(model)[1][2]
    local st0 = layer.fp8_meta:state()
    for _, v in ipairs(st0.input.history) do assert.is_true(v == v, "a NaN entered the history") end
    -- so the `max` history did not freeze the scale for its length: it follows the finite amaxes
    assert.are.equal(R.scale_for(st0.input.amax_history_value, "e4m3", 0, false), st0.input.scale)
    -- a NaN already in a history (MS-AMP's in-time casts record one; a file may hold one) is state that loads back
    local S = require("fp8.fp8_state")
    local sd = model:state_dict()
    local st = S.unpack(sd["0.fp8_state"])
    st.input.history[3] = 0 / 0
    sd["0.fp8_state"] = S.pack(st)
    local acc2, model2 = setup("fp8", fp8.TERecipeKwargs { amax_history_len = 8, amax_compute_algo = "max" })
    model2:load_state_dict(sd)
    local h2 = fp8.recipes.fp8_layers(model2)[1][2].fp8_meta:state().input.history
    assert.is_true(h2[3] ~= h2[3])
    for k = 1, #h2 do if k ~= 3 then assert.are.equal(st.input.history[k], h2[k], "history[" .. k .. "]") end end
    st.input.history[2] = -1
    sd["0.fp8_state"] = S.pack(st)
    local ok, err = pcall(model2.load_state_dict, model2, sd)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("input history[2] is -1", 1, true), tostring(err))
  end)

  it("ao's amax(hist) is the last step's max, not the max since the start (current scaling keeps no history)",
    function()
    for _, cfg in ipairs { "tensorwise", "rowwise" } do
      local acc = fp8.Accelerator { cpu = true, mixed_precision = "fp8", config = false, env = {},
        kwargs_handlers = { fp8.AORecipeKwargs { config = cfg, module_filter_func = function() return true end } } }
      local model = fp8.nn.Sequential(fp8.nn.Linear(16, 16))
      local opt = fp8.optim.SGD(model:parameters(), { lr = 0.0 })
      model, opt = acc:prepare(model, opt)
      for step, mul in ipairs { 10, 1 } do
        acc:backward(model(fp8.ones { 2, 16 } * mul):sum()); opt:step(); opt:zero_grad()
        local hist
        for _, r in ipairs(fp8.stats(model, { quiet = true })) do
          if r.role == "input" then hist = r.amax_history end
        end
        assert.are.equal(mul, hist, cfg .. " step " .. step)   -- step 2 showed 10
      end
    end
  end)

  it("ao's amax(hist) after a load_state_dict is the next step's max, as without the load", function()
    local function make()
      local model = fp8.nn.Sequential(fp8.nn.Linear(16, 16))
      local acc = fp8.Accelerator { cpu = true, mixed_precision = "fp8", config = false, env = {},
        kwargs_handlers = { fp8.AORecipeKwargs { module_filter_func = function() return true end } } }
      return acc, acc:prepare(model, fp8.optim.SGD(model:parameters(), { lr = 0.0 }))
    end
    local acc, model, opt = make()
    acc:backward(model(fp8.ones { 2, 16 } * 10):sum()); opt:step(); opt:zero_grad()
    local sd = model:state_dict()
    acc, model, opt = make()
    model:load_state_dict(sd)
    acc:backward(model(fp8.ones { 2, 16 }):sum()); opt:step(); opt:zero_grad()
    local st = model[1].fp8_meta:state().input
    assert.are.equal(1, st.history[1])   -- the saved step's 10 stayed: max(10, 1)
    assert.are.equal(1, fp8.stats(model, { quiet = true })[1].amax_history)
  end)

  it("fp8.stats shows a te cast that met a NaN (amax NaN, a nan fraction), though its history passes it over",
    function()
    -- (the cast's amax left the NaN out, as the history must: a NaN-poisoned te layer looked healthy in fp8.stats,
    -- or, all NaN, like an all-zero tensor with amax 0, while ao's and msamp's showed amax NaN)
    local acc, model, opt = setup("fp8", fp8.TERecipeKwargs { amax_history_len = 8, amax_compute_algo = "max" })
    local t = fp8.randn { 8, 32 }:totable()
    t[1][1] = 0 / 0
    acc:backward(model(fp8.tensor(t)):sum())
    opt:step(); opt:zero_grad()
    local row = fp8.stats(model, { quiet = true })[1]
    assert.are.equal("input", row.role)
    assert.is_true(row.amax ~= row.amax, "amax " .. tostring(row.amax))
    assert.are.equal(1 / (8 * 32), row.nan)
    assert.is_true(row.amax_history == row.amax_history and row.amax_history > 0)   -- the history has no NaN
    local layer = fp8.recipes.fp8_layers(model)[1][2]
    assert.are.equal(1, layer.fp8_meta:state().input.nan)
    train(acc, model, opt, 1)   -- a clean step: nothing left over
    row = fp8.stats(model, { quiet = true })[1]
    assert.is_true(row.amax == row.amax and row.nan == 0)
  end)

  it("scale = (fp8_max · 2^-margin) / amax, TE's order: finite where fp8_max / amax alone overflows", function()
    local function f32(v) return (string.unpack("f", string.pack("f", v))) end
    local s = R.scale_for(1e-38, "e4m3", 10, false)   -- fp8_max / amax = 4.5e40 > FLT_MAX: the old order gave FLT_MAX
    assert.are.equal(f32(448 * 2 ^ -10 / f32(1e-38)), s)
    assert.is_true(s < 3.4e38)
    assert.are.equal(f32(56 / f32(3)), R.scale_for(3, "e4m3", 3, false))
  end)

  it("a large margin and amax give the scale 2^-126, not 0 or a subnormal whose scale_inv is inf", function()
    -- (margin 40, amax 3e38: 448·2^-40 / 3e38 is 0 in fp32, scale_inv inf, so a cast decoded 0·inf = NaN; and a
    -- checkpoint of that state was refused by load_state_dict)
    assert.are.equal(2 ^ -126, R.scale_for(3e38, "e4m3", 40, false))
    assert.are.equal(2 ^ -126, R.scale_for(3e38, "e4m3", 20, false))   -- (a subnormal before)
    local acc, model, opt = setup("fp8", fp8.TERecipeKwargs { margin = 40 })
    local x, y = batch(64, 32, 10)
    acc:backward(F.cross_entropy(model(x * 1e37), y)); opt:zero_grad(); opt:step()   -- (the weights stay as they are)
    local st = fp8.recipes.fp8_layers(model)[1][2].fp8_meta:state().input
    assert.are.equal(2 ^ -126, st.scale)
    assert.are.equal(2 ^ 126, st.scale_inv)
    local d = (x * 1e37):quantize("e4m3", { scale = st.scale }):dequantize()   -- decodes finite (0·inf was NaN)
    local v = d:abs():max():item()
    assert.is_true(v == v and v < math.huge, "the decoded max is " .. tostring(v))
    local acc2, model2 = setup("fp8", fp8.TERecipeKwargs { margin = 40 })
    model2:load_state_dict(model:state_dict())   -- the state loads back
    -- a scale whose reciprocal overflows fp32 is refused
    local S = require("fp8.fp8_state")
    local sd = model:state_dict()
    local s = S.unpack(sd["0.fp8_state"])
    s.input.scale = 1e-45
    sd["0.fp8_state"] = S.pack(s)
    local ok, err = pcall(model2.load_state_dict, model2, sd)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("its reciprocal finite in fp32", 1, true), tostring(err))
  end)
end)

describe("ao recipe", function()
  it("rowwise: the grad role of a layer whose input takes no gradient observes dY's per-column cast", function()
    -- (no FP8 dgrad, so no per-row cast of dY: fp8.stats showed that layer's grad role empty, amax 0)
    fp8.manual_seed(0)
    local acc = ao_rowwise_accelerator()
    local model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
    local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-3 })
    model, opt = acc:prepare(model, opt)
    acc:backward(model(fp8.randn { 8, 16 }):pow(2):mean())
    opt:step()
    for _, r in ipairs(fp8.stats(model, { quiet = true })) do
      assert.is_true(r.numel > 0 and r.amax > 0, ("layer %s role %s: numel %d amax %g"):format(r.layer, r.role, r.numel,
        r.amax))
    end
  end)

  it("fp8.stats and the stats log give rowwise roles no single scale (per row, NaN, an empty cell)", function()
    fp8.manual_seed(0)
    for _, c in ipairs { { ao_rowwise_accelerator, true }, { ao_accelerator, false } } do
      local acc = c[1]()
      local model = acc:prepare(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)))
      local path = os.tmpname()
      os.remove(path)
      acc:log_fp8_stats { every = 1, path = path }
      acc:backward(model(fp8.randn { 4, 16 }):sum())
      acc:_write_stats(acc._stats_log)
      local rows = fp8.stats(model, { quiet = true })
      assert.are.equal(6, #rows)
      for _, r in ipairs(rows) do
        assert.are.equal(c[2], r.per_row)
        assert.are.equal(c[2], r.scale ~= r.scale, r.role)   -- NaN exactly when per row
      end
      local f = assert(io.open(path))
      f:read("l")
      local cell = f:read("l"):match("^%d+,[^,]*,[^,]*,[^,]*,([^,]*),")
      f:close()
      os.remove(path)
      if c[2] then assert.are.equal("", cell) else assert.is_number(tonumber(cell)) end
      -- acc:state() too: it printed scale=1 for every rowwise role
      local text = tostring(acc:state())
      assert.are.equal(c[2] and 6 or 0, select(2, text:gsub("scale=per row", "")))
      assert.are.equal(c[2] and 0 or 6, select(2, text:gsub("scale=%d", "")))
    end
  end)

  it("keeps the first and last Linear in high precision by default", function()
    local acc, model = setup("fp8", fp8.AORecipeKwargs {})
    assert.are.equal(1, count_class(model, "FP8Linear"))
  end)

  it("the default filter keeps dims that are not multiples of 16 in high precision (Accelerate's); with a "
    .. "module_filter_func, pad_inner_dim decides", function()
    local function count(pad, user)
      fp8.manual_seed(0)
      local model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 40), nn.ReLU(), nn.Linear(40, 10),
        nn.ReLU(), nn.Linear(10, 16))
      local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.AORecipeKwargs { pad_inner_dim = pad,
                                    module_filter_func = user } }, config = false, env = {} }
      return count_class(acc:prepare(model), "FP8Linear")
    end
    assert.are.equal(0, count(true))    -- first and last stay, and 64 -> 40, 40 -> 10 are not multiples of 16
    -- pad_inner_dim=false without a filter changes nothing: refused (a notice until 2026-12-06)
    local ok, err = pcall(count, false)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("pad_inner_dim=false changes nothing without a module_filter_func", 1, true), err)
    local all = function() return true end
    assert.are.equal(4, count(true, all))    -- torchao pads them: all four in FP8
    assert.are.equal(1, count(false, all))   -- only 32 -> 64 can run unpadded
  end)

  it("uses module_filter_func when given", function()
    local seen = {}
    local acc, model = setup("fp8", fp8.AORecipeKwargs { module_filter_func = function(m, name)
      seen[#seen + 1] = name
      return m.out_features == 64
    end })
    assert.are.equal(2, count_class(model, "FP8Linear"))
    assert.are.equal(3, #seen)
    -- any true value says yes, as torchao tests the result (string.find's index here): the third Linear, named "4"
    local _, m2 = setup("fp8", fp8.AORecipeKwargs { module_filter_func = function(_, name) return name:find("4") end })
    assert.are.equal(1, count_class(m2, "FP8Linear"))
  end)

  for _, cfg in ipairs { "tensorwise", "rowwise", "rowwise_with_gw_hp" } do
    it(cfg .. " trains", function()
      local acc, model, opt = setup("fp8", fp8.AORecipeKwargs { config = cfg, module_filter_func = function() return true end })
      local first, last = train(acc, model, opt, 25)
      assert.is_true(last < first * 0.8, ("loss %g -> %g"):format(first, last))
    end)
  end
end)

describe("msamp recipe", function()
  local function bytes_per_param(level)
    collectgarbage("collect"); collectgarbage("collect")
    local base = memory.bytes()
    local acc, model, opt = setup("fp8", fp8.MSAMPRecipeKwargs { opt_level = level }, 256)
    local x, y = batch(4, 32, 10)
    acc:backward(F.cross_entropy(model(x), y)); opt:step()
    x, y = nil, nil
    collectgarbage("collect"); collectgarbage("collect")
    local b = (memory.bytes() - base) / model:num_parameters()
    return b, model, acc, opt
  end

  it("O1 keeps fp16 weights and FP8 gradients", function()
    local _, model = bytes_per_param("O1")
    local w = fp8.recipes.fp8_layers(model)[1][2].weight
    assert.are.equal("fp16", w:dtype())
    assert.are.equal("e4m3", w.grad:dtype())
  end)

  it("O2 needs at most 6.5 bytes per parameter, O1 about 11", function()
    local o2 = bytes_per_param("O2")
    assert.is_true(o2 <= 6.5, ("O2: %.2f B/param"):format(o2))
    local o1 = bytes_per_param("O1")
    assert.is_true(o1 > 10 and o1 < 12, ("O1: %.2f B/param"):format(o1))
  end)

  for _, level in ipairs { "O1", "O2", "O3" } do
    it(level .. " trains", function()
      local acc, model, opt = setup("fp8", fp8.MSAMPRecipeKwargs { opt_level = level })
      local first, last = train(acc, model, opt, 25)
      assert.is_true(last < first * 0.8, ("loss %g -> %g"):format(first, last))
    end)
  end

  -- MS-AMP's ScalingMeta: inputs and output gradients cast in time (scale from the tensor itself) until their
  -- 16-step window has filled, and again after a non-finite amax (amax_counter back to 0)
  local function one_layer(level)
    fp8.manual_seed(1)
    local model = nn.Sequential(nn.Linear(32, 32))
    local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.MSAMPRecipeKwargs { opt_level = level } },
                                  config = false, env = {} }
    local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-3 })
    model, opt = acc:prepare(model, opt)
    return acc, model, opt, fp8.recipes.fp8_layers(model)[1][2]
  end
  local function step(acc, model, opt, x, k)
    acc:backward((model(x) * (k or 1e-5)):sum() / 16); opt:step(); opt:zero_grad()
  end

  it("casts inputs and gradients in time for the first 16 steps (MS-AMP's warm-up), then from the history", function()
    local acc, model, opt, layer = one_layer("O2")
    step(acc, model, opt, fp8.randn { 16, 32 })
    local st = layer.fp8_meta:state()
    -- dL/dy = 6.25e-7: with the delayed rule's first scale (1) every gradient underflowed to 0
    assert.are.equal(0, st.grad.underflow)
    assert.is_true(st.grad.scale > 2 ^ 30, tostring(st.grad.scale))
    assert.is_true(st.input.in_time and st.grad.in_time)
    assert.are.equal(1, st.input.warm)
    assert.are.equal(16, st.input.warmup)
    assert.is_false(st.weight.in_time == false and false)   -- the weight role is current scaling throughout
    for _ = 2, 16 do step(acc, model, opt, fp8.randn { 16, 32 }) end
    st = layer.fp8_meta:state()
    assert.is_false(st.input.in_time)
    -- an inf in the input: that update keeps the scale and starts the warm-up again
    local x = fp8.randn { 16, 32 }
    fp8.no_grad(function() x:set({ 1, 1 }, math.huge) end)
    pcall(step, acc, model, opt, x)
    st = layer.fp8_meta:state()
    assert.are.equal(0, st.input.warm)
    assert.is_true(st.input.in_time)
  end)

  it("carries the warm-up count in its state (layout 2) and reads layout 1 as warmed up", function()
    local acc, model, opt, layer = one_layer("O2")
    for _ = 1, 3 do step(acc, model, opt, fp8.randn { 16, 32 }) end
    local sd = model:state_dict()
    local acc2, model2, opt2, layer2 = one_layer("O2")
    model2:load_state_dict(sd)
    assert.are.equal(3, layer2.fp8_meta:state().input.warm)
    -- a layout-1 state (no warm): [1, 3, then per role scale, updates, history length, history...]
    local st = layer.fp8_meta:state()
    local flat = { 1, 3 }
    for _, r in ipairs { "input", "weight", "grad" } do
      flat[#flat + 1] = st[r].scale; flat[#flat + 1] = st[r].updates; flat[#flat + 1] = #st[r].history
      for _, h in ipairs(st[r].history) do flat[#flat + 1] = h end
    end
    sd["0.fp8_state"] = fp8.tensor(flat)
    model2:load_state_dict(sd)
    local st2 = layer2.fp8_meta:state()
    assert.are.equal(16, st2.input.warm)
    assert.are.same(st.input.history, st2.input.history)
    assert.are.equal(st.grad.scale, st2.grad.scale)
  end)

  it("O3: a load that gives the weight without its E4M3 copy re-derives the copy the forward reads", function()
    fp8.manual_seed(1)
    local sd = nn.Linear(32, 32):state_dict()
    local out = {}
    for _, level in ipairs { "O2", "O3" } do
      local acc, model = one_layer(level)
      model:load_state_dict({ ["0.weight"] = sd.weight, ["0.bias"] = fp8.zeros { 32 } }, false)
      local x = fp8.ones { 4, 32 }
      out[level] = fp8.no_grad(function() return model(x):float():sum():item() end)
    end
    assert.are.equal(out.O2, out.O3)   -- O3 ran on its prepare-time weight before (the FP8 forward reads the copy)
  end)

  it("refuses a non-Adam optimizer, naming the allowed ones", function()
    local model = mlp(32, 64, 10)
    local opt = fp8.optim.SGD(model:parameters(), { lr = 0.1 })
    local acc = fp8.Accelerator { mixed_precision = "fp8", config = false, env = {} }
    local ok, err = pcall(acc.prepare, acc, model, opt)
    assert.is_false(ok)
    assert.matches("Adam, AdamW", err)
    assert.matches("SGD", err)
  end)
end)

describe("FP8Linear and convert_model take a recipe", function()
  it("as a kwargs handler, resolved as the Accelerator resolves it, or as a recipe table", function()
    local m = nn.FP8Linear(16, 16, true, fp8.TERecipeKwargs { margin = 1 })
    assert.are.equal("te", m.recipe.backend)
    assert.are.equal(1, m.recipe.margin)
    local c = fp8.convert_model(nn.Sequential(nn.Linear(16, 16)), { recipe = { backend = "msamp" } })
    assert.are.equal("msamp", fp8.recipes.fp8_layers(c)[1][2].recipe.backend)
    assert.matches("fp8=msamp)", tostring(c[1]), 1, true)   -- MS-AMP's scaling alone: no level's weights
    assert.truthy(nn.FP8Linear(16, 16, true, { backend = "ao" }))
    -- the bias left out, as FP8Linear(in, out [, bias], recipe) reads (it took the recipe for the bias)
    local nb = nn.FP8Linear(16, 16, fp8.TERecipeKwargs { margin = 1 })
    assert.equal(1, nb.recipe.margin)
    assert.truthy(nb.bias)
    assert.equal("ao", nn.FP8Linear(16, 16, { backend = "ao" }).recipe.backend)
    assert.is_nil(nn.FP8Linear(16, 16, false, { backend = "ao" }).bias)
    -- a handler where options go is refused, not read as an empty options table
    local okh, errh = pcall(nn.Linear, 16, 16, fp8.TERecipeKwargs { margin = 1 })
    assert.is_false(okh)
    assert.matches("Linear: options must be a plain table {key=value, ...}, got a kwargs handler (TERecipeKwargs)",
      errh, 1, true)
    local ok, err = pcall(nn.FP8Linear, 16, 16, true, {})
    assert.is_false(ok)
    assert.matches("got a table without a backend field", err, 1, true)
    ok, err = pcall(nn.FP8Linear, 16, 16, true, fp8.GradScalerKwargs {})
    assert.is_false(ok)
  end)

  it("a layer's recipe is fixed: assigning layer.recipe is refused (it changed the repr, not the scaling)", function()
    local l = nn.FP8Linear(16, 16, fp8.TERecipeKwargs { amax_history_len = 4 })
    local ok, err = pcall(function() l.recipe = nn.FP8Linear.as_recipe(fp8.AORecipeKwargs {}) end)
    assert.is_false(ok)
    assert.matches("recipe is fixed when it is made", err)
    assert.are.equal("te", l.recipe.backend)
    assert.is_false(fp8.has_ao_layers(l))
    assert.are.equal("delayed", l.fp8_meta:state().input.rule)
  end)
end)

describe("every recipe on batches of one row", function()
  -- With one row (or one column), a matrix and its transpose are the same bytes in the same order;
  -- dY's decode shared by dgrad and wgrad must still be read in the orientation each GEMM needs.
  local handlers = {
    te = function() return fp8.TERecipeKwargs {} end,
    ao = function() return fp8.AORecipeKwargs { module_filter_func = function() return true end } end,
    ao_rowwise = function() return fp8.AORecipeKwargs { config = "rowwise", module_filter_func = function() return true end } end,
    msamp = function() return fp8.MSAMPRecipeKwargs { opt_level = "O2" } end,
  }
  for name, h in pairs(handlers) do
    it(name .. ": forward, backward and a step; gradients match high precision to FP8 accuracy", function()
      fp8.manual_seed(5)
      local ref = mlp(32, 48, 16)
      local x = fp8.randn { 1, 32 }
      local y = fp8.tensor { 3 }
      F.cross_entropy(ref(x), y):backward()
      local want = ref:parameters()[1].grad:totable()
      fp8.manual_seed(5)
      local model = mlp(32, 48, 16)
      local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-3 })
      local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { h() }, config = false }
      model, opt = acc:prepare(model, opt)
      assert.is_true(fp8.has_fp8_layers(model))
      acc:backward(F.cross_entropy(model(x), y))
      local g = model:parameters()[1].grad
      g = g:is_fp8() and g:dequantize() or g
      -- From the loss to the first layer's weight gradient the output gradient is cast to E5M2 (2 mantissa
      -- bits: up to 12.5% per value) three times, with one row nothing averages out: 0.35 allows that, a
      -- GEMM reading an operand in the wrong orientation gives errors of order 1.
      local e = relerr(g:totable(), want)
      assert.is_true(e < 0.35, ("relative error %.3g"):format(e))
      opt:step()
    end)
  end
end)

describe("every recipe on batches and widths off the kernels' blocks", function()
  -- Batches of 5, 25 and 49 rows (not whole micro-tiles of 6 rows, nor groups of 24: 49 spans three) and K of
  -- 272 and 528 (two and three K blocks of the CPU GEMM), through each recipe's forward and backward: the FP8
  -- output and the first layer's weight gradient against the fp32 model's. E4M3 inputs and E5M2 or E4M3
  -- gradients put errors of a few percent in both (at most 0.055 and 0.084 over these cases on 2026-11-30, Zen 3);
  -- a row scale, K block or operand read from the wrong place gives errors of order 1 (rowwise scales of the first
  -- group's rows on the later groups: 0.34 and 1.02).
  local recipes = {
    te = function() return fp8.TERecipeKwargs { fp8_format = "HYBRID" } end,
    te_e4m3 = function() return fp8.TERecipeKwargs { fp8_format = "E4M3" } end,
    ao = function() return fp8.AORecipeKwargs { module_filter_func = function() return true end } end,
    ao_rowwise = function()
      return fp8.AORecipeKwargs { config = "rowwise", module_filter_func = function() return true end }
    end,
    ao_rowwise_gw_hp = function()
      return fp8.AORecipeKwargs { config = "rowwise_with_gw_hp", module_filter_func = function() return true end }
    end,
    msamp_O1 = function() return fp8.MSAMPRecipeKwargs { opt_level = "O1" } end,
    msamp_O2 = function() return fp8.MSAMPRecipeKwargs { opt_level = "O2" } end,
    msamp_O3 = function() return fp8.MSAMPRecipeKwargs { opt_level = "O3" } end,
  }
  local names = { "te", "te_e4m3", "ao", "ao_rowwise", "ao_rowwise_gw_hp", "msamp_O1", "msamp_O2", "msamp_O3" }
  for _, name in ipairs(names) do
    it(name .. ": output and weight gradient near fp32's", function()
      for _, M in ipairs { 5, 25, 49 } do
        for _, kn in ipairs { { 272, 48 }, { 48, 272 }, { 528, 16 } } do
          local K, N = kn[1], kn[2]
          local function make()
            fp8.manual_seed(M + K + N)
            return nn.Sequential(nn.Linear(K, N), nn.GELU("tanh"), nn.Linear(N, N))
          end
          local ref, x = make(), fp8.randn { M, K }
          local want = ref(x)
          want:sum():backward()
          local model = make()
          local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-3 })
          local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { recipes[name]() }, config = false,
                                        env = {} }
          model, opt = acc:prepare(model, opt)
          assert.is_true(fp8.has_fp8_layers(model))
          local out = model(x)
          acc:backward(out:sum())
          local g = model:parameters()[1].grad
          g = g:is_fp8() and g:dequantize() or g
          local where = ("M=%d K=%d N=%d"):format(M, K, N)
          local e_out = relerr(out:totable(), want:totable())
          local e_grad = relerr(g:totable(), ref:parameters()[1].grad:totable())
          assert.is_true(e_out < 0.1, ("%s: output's relative error %.3g"):format(where, e_out))
          assert.is_true(e_grad < 0.15, ("%s: weight gradient's relative error %.3g"):format(where, e_grad))
        end
      end
    end)
  end
end)

describe("fp8 observability and errors", function()
  it("log_fp8_stats appends CSV rows every N steps", function()
    local path = os.tmpname()
    os.remove(path)
    local acc, model, opt = setup("fp8", fp8.TERecipeKwargs {})
    acc:log_fp8_stats { every = 2, path = path }
    train(acc, model, opt, 4)
    local f = assert(io.open(path))
    local header = f:read("l")
    local rows = 0
    for _ in f:lines() do rows = rows + 1 end
    f:close()
    os.remove(path)
    assert.matches("^step,layer,role,format,scale,amax", header)
    assert.are.equal(2 * 2 * 3, rows)   -- 2 logged steps x 2 FP8 layers x 3 roles
    assert.has_error(function() acc:log_fp8_stats { every = 0, path = path } end)
    -- a file that cannot take a step's rows is an error naming it and the step, not rows lost without a word
    acc:log_fp8_stats { every = 1, path = path }
    os.remove(path)
    assert(require("fp8._checkpoint").mkdir(path))   -- the log's name is now a directory
    local ok, err = pcall(train, acc, model, opt, 1)
    os.remove(path)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("log_fp8_stats: cannot append step 5's rows to " .. path, 1, true), err)
  end)

  it("log_fp8_stats on a file that cannot take its header (a full disk) is an error naming it", function()
    local acc = setup("fp8", fp8.TERecipeKwargs {})
    -- /dev/full: every write fails with ENOSPC; the header's failure showed only in a close nobody checked
    local ok, err = pcall(acc.log_fp8_stats, acc, { every = 1, path = "/dev/full" })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("log_fp8_stats: cannot write the header to /dev/full: ", 1, true), err)
    assert.truthy(tostring(err):find("No space left on device", 1, true), err)
    assert.is_nil(rawget(acc, "_stats_log"))
  end)

  it("FP8 layers check their input like Linear does", function()
    local acc, model = setup("fp8", fp8.TERecipeKwargs {})
    local ok, err = pcall(model, fp8.randn { 4, 31 })
    assert.is_false(ok)
    assert.matches("expected input %[%.%.%., 32%]", err)
    assert.has_error(function() fp8.convert_model("model") end)
    assert.has_error(function() fp8.convert_model(mlp(4, 4, 4), { bogus = true }) end)
    assert.has_error(function() R.linear(fp8.randn { 2, 3 }, fp8.randn { 4, 5 }, nil, 42, true) end)
    assert.has_error(function() R.layer_new { input = { format = "fp32" }, weight = {}, grad = {} } end)
  end)
end)
