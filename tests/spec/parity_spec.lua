-- parity_spec.lua — Accelerate parity (issue 15, points 1–5): gradient accumulation with
-- acc:accumulate and acc.sync_gradients, schedulers prepared in either order for every backend,
-- AutocastKwargs honoured, the root of a model converted, and Accelerate's names.
local nn, F, optim = fp8.nn, fp8.nn.functional, fp8.optim
local bin = FP8LAB_BIN or "build/fp8lab"

local U = dofile("tests/spec/helpers/util.lua")
local sh_quote, sh = U.q, U.sh

local function new_acc(opts)
  opts.config = opts.config == nil and false or opts.config
  opts.env = opts.env or {}
  return fp8.Accelerator(opts)
end

local function batches(n, rows, d, classes)
  local out = {}
  for b = 1, n do
    local labels = {}
    for i = 1, rows do labels[i] = (i * 7 + b) % classes end
    out[b] = { fp8.randn { rows, d }, fp8.tensor(labels) }
  end
  return out
end

local function maxdiff(a, b)
  local ta, tb = a:detach():to("fp32"):totable(), b:detach():to("fp32"):totable()
  local m = 0
  local function walk(x, y)
    if type(x) == "table" then for i = 1, #x do walk(x[i], y[i]) end
    else m = math.max(m, math.abs(x - y)) end
  end
  walk(ta, tb)
  return m
end

describe("gradient accumulation (acc:accumulate, acc.sync_gradients)", function()
  it("steps the optimizer and scheduler only on sync steps; the result is one step on the mean gradient", function()
    fp8.manual_seed(3)
    local data = batches(8, 8, 32, 4)
    local model = nn.Sequential(nn.Linear(32, 4))
    local ref = nn.Sequential(nn.Linear(32, 4))
    ref:load_state_dict(model:state_dict())
    local opt = optim.SGD(model:parameters(), { lr = 0.5 })
    local sched = optim.lr_scheduler.StepLR(opt, { step_size = 1, gamma = 0.5 })
    local acc = new_acc { gradient_accumulation_steps = 4 }
    assert.is_true(acc.sync_gradients)   -- true outside accumulate (the data-parallel contract)
    model, opt, sched = acc:prepare(model, opt, sched)
    local syncs, changed = {}, {}
    for i, b in ipairs(data) do
      local before = model[1].weight:clone()
      acc:accumulate(model, function()
        local loss = F.cross_entropy(model(b[1]), b[2])
        acc:backward(loss)
        opt:step(); sched:step(); opt:zero_grad()
      end)
      syncs[i] = acc.sync_gradients
      changed[i] = maxdiff(before, model[1].weight) > 0
    end
    assert.same({ false, false, false, true, false, false, false, true }, syncs)
    assert.same({ false, false, false, true, false, false, false, true }, changed)
    assert.equal(2, acc.step)
    assert.near(0.5 * 0.25, sched:get_last_lr()[1], 1e-12)   -- two scheduler steps, not eight
    -- reference: plain SGD, one step per 4 batches on the mean of their losses
    local ropt = optim.SGD(ref:parameters(), { lr = 0.5 })
    local lr = 0.5
    for w = 0, 1 do
      for k = 1, 4 do
        local b = data[w * 4 + k]
        local loss = F.cross_entropy(ref(b[1]), b[2]) / 4
        loss:backward()
      end
      ropt.param_groups[1].lr = lr
      ropt:step(); ropt:zero_grad()
      lr = lr * 0.5
    end
    assert.is_true(maxdiff(ref[1].weight, model[1].weight) < 1e-5)
  end)

  it("takes several models, as Accelerate's accumulate(*models), and passes the function its arguments", function()
    local acc = new_acc { gradient_accumulation_steps = 2 }
    local g, d = acc:prepare(nn.Linear(2, 2), nn.Linear(2, 2))
    local syncs = {}
    for i = 1, 4 do
      local got = acc:accumulate(g, d, function(a, b) syncs[#syncs + 1] = acc.sync_gradients; return a + b end, i, 10)
      assert.are.equal(i + 10, got)
    end
    assert.are.same({ false, true, false, true }, syncs)
    do local _ <close> = acc:accumulate(g, d) end
    U.fails_with("accumulate: argument #3 must be a model or a function (or nothing), got number", acc.accumulate, acc, g, d, 5)
  end)

  it("GradientAccumulationPlugin: num_steps, sync_with_dataloader=false; refused with gradient_accumulation_steps", function()
    local items = {}
    for i = 1, 6 do items[i] = i end
    local function syncs(plugin)
      local acc = new_acc { gradient_accumulation_plugin = plugin }
      local m, ld = acc:prepare(nn.Linear(2, 2), fp8.data.DataLoader { items, batch_size = 2 })   -- 3 batches an epoch
      local out = {}
      for _ = 1, 2 do
        for _ in ld do acc:accumulate(m, function() out[#out + 1] = acc.sync_gradients and 1 or 0 end) end
      end
      return table.concat(out), acc.gradient_accumulation_steps
    end
    local with, n = syncs(fp8.GradientAccumulationPlugin { num_steps = 2 })
    assert.are.equal("011011", with)   -- the last batch of each epoch ends a window too
    -- once a loop is over the loader is forgotten (Accelerate's gradient state drops it): micro-steps count again
    local acc = new_acc { gradient_accumulation_steps = 2 }
    local m, ld = acc:prepare(nn.Linear(2, 2), fp8.data.DataLoader { items, batch_size = 2 })
    for _ in ld do acc:accumulate(m, function() end) end
    local after = {}
    for _ = 1, 4 do acc:accumulate(m, function() after[#after + 1] = acc.sync_gradients and 1 or 0 end) end
    assert.are.equal("0101", table.concat(after))
    -- an eval loop inside a training step leaves the training loop's end-of-data flag as it was (Accelerate's
    -- active loader): with 4-step windows over 3 batches the epoch's last batch still ends the window
    local acc2 = new_acc { gradient_accumulation_steps = 4 }
    local m2, tr, ev = acc2:prepare(nn.Linear(2, 2), fp8.data.DataLoader { items, batch_size = 2 },
      fp8.data.DataLoader { items, batch_size = 4 })
    local nested = {}
    for _ in tr do
      for _ in ev do end
      acc2:accumulate(m2, function() nested[#nested + 1] = acc2.sync_gradients and 1 or 0 end)
    end
    assert.are.equal("001", table.concat(nested))
    -- free_memory inside a loop: the loop goes on (its loader no longer prepared)
    local acc3 = new_acc {}
    local _, ld3 = acc3:prepare(nn.Linear(2, 2), fp8.data.DataLoader { items, batch_size = 2 })
    local served = 0
    for _ in ld3 do served = served + 1; if served == 1 then acc3:free_memory() end end
    assert.are.equal(3, served)
    assert.are.equal(2, n)
    assert.are.equal("010101", (syncs(fp8.GradientAccumulationPlugin { num_steps = 2, sync_with_dataloader = false })))
    assert.are.equal("001001", (syncs(fp8.GradientAccumulationPlugin { num_steps = 3, adjust_scheduler = true })))
    U.fails_with("GradientAccumulationPlugin: adjust_scheduler=false is not supported", fp8.GradientAccumulationPlugin,
      { num_steps = 3, adjust_scheduler = false })
    U.fails_with("pass gradient_accumulation_steps or gradient_accumulation_plugin, not both", new_acc,
      { gradient_accumulation_steps = 2, gradient_accumulation_plugin = fp8.GradientAccumulationPlugin { num_steps = 2 } })
    -- on_local_process, skip_first_batches' default 0, and trigger_sync_in_backward refused with the reason
    local lacc = new_acc {}
    local ran = false
    lacc:on_local_process(function() ran = true end, 0)()
    assert.is_true(ran)
    local dl = fp8.data.DataLoader { { { fp8.zeros { 1 }, 1 }, { fp8.zeros { 1 }, 2 } }, batch_size = 1 }
    assert.are.equal(2, #lacc:skip_first_batches(dl))
    U.fails_with("trigger_sync_in_backward is not supported: acc:no_sync(model, fn) keeps only",
      lacc.trigger_sync_in_backward, lacc, nn.Linear(2, 2))
    -- the default msamp backend with an SGD: the message says msamp was the default, and names the line once
    local m5 = nn.Linear(32, 32)
    local err = U.fails_with({ "MS-AMP O2 needs an Adam or AdamW optimizer", "msamp is the FP8 backend by default" },
      function() new_acc { mixed_precision = "fp8" }:prepare(m5, optim.SGD(m5:parameters(), { lr = 0.1 })) end)
    assert.is_nil(err:match("^[^:]+:%d+: [^:]+:%d+: "), err)
    -- a script's own class named Adam (as fp8.optim.Adam): MSAMPAdamW replaces it only without weight decay, where Adam's L2
    -- decay and AdamW's decoupled one are the same step
    local Adam = optim.Optimizer.class()
    function Adam.new(params, o)
      return optim.Optimizer.new(Adam, "Adam", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0 },
        params, o)
    end
    local m6 = nn.Linear(32, 32)
    U.fails_with({ "MS-AMP O2 replaces the optimizer by MSAMPAdamW", "parameter group 1: 0.01", "use fp8.optim.AdamW" },
      function() new_acc { mixed_precision = "fp8" }:prepare(m6, Adam.new(m6:parameters(), { weight_decay = 0.01 })) end)
    local _, popt = new_acc { mixed_precision = "fp8" }:prepare(m6, Adam.new(m6:parameters()))
    assert.are.equal("MSAMPAdamW", popt.optimizer.name)
    -- GradientState's fields, as Accelerate's
    local gacc = new_acc { gradient_accumulation_steps = 3 }
    assert.are.equal(3, gacc.gradient_state.num_steps)
    assert.is_true(gacc.gradient_state.sync_gradients)
    gacc.sync_gradients = false
    assert.is_false(gacc.gradient_state.sync_gradients)
    -- the default 1 along with a plugin: Accelerate runs it (the plugin decides)
    assert.are.equal(3, new_acc { gradient_accumulation_steps = 1,
      gradient_accumulation_plugin = fp8.GradientAccumulationPlugin { num_steps = 3 } }.gradient_accumulation_steps)
    U.fails_with("gradient_accumulation_plugin must be an fp8.GradientAccumulationPlugin{...}, got table", new_acc,
      { gradient_accumulation_plugin = { num_steps = 2 } })
    U.fails_with("GradientAccumulationPlugin: num_steps must be an integer >= 1, got 0", fp8.GradientAccumulationPlugin, { num_steps = 0 })
    -- Accelerate's num_steps=None, as gradient_accumulation.md's GradientAccumulationPlugin(sync_with_dataloader=False)
    assert.are.equal(1, fp8.GradientAccumulationPlugin { sync_with_dataloader = false }.num_steps)
    U.fails_with("GradientAccumulationPlugin: sync_each_batch must be a boolean, got string",
      fp8.GradientAccumulationPlugin, { num_steps = 1, sync_each_batch = "yes" })
    U.fails_with("unknown option 'num_step'", fp8.GradientAccumulationPlugin, { num_step = 1 })
  end)

  it("the block form: local _ <close> = acc:accumulate(model)", function()
    local model = nn.Sequential(nn.Linear(8, 2))
    local acc = new_acc { gradient_accumulation_steps = 2 }
    model = acc:prepare(model)
    local seen = {}
    for i = 1, 4 do
      do
        local _ <close> = acc:accumulate(model)
        seen[i] = acc.sync_gradients
      end
    end
    assert.same({ false, true, false, true }, seen)
    U.fails_with("accumulate: argument #1 must be a model or a function (or nothing), got number",
      function() acc:accumulate(42) end)
    U.fails_with("accumulate: argument #2 must be a model or a function (or nothing), got number", function() acc:accumulate(model, 5) end)
  end)

  it("accumulate takes no model, as Accelerate's accumulate(): acc:accumulate(fn) and acc:accumulate()", function()
    local model = nn.Sequential(nn.Linear(2, 1))
    local opt = optim.SGD(model:parameters(), { lr = 0.5 })
    local acc = new_acc { gradient_accumulation_steps = 2 }
    model, opt = acc:prepare(model, opt)
    local x, seen = fp8.ones(1, 2), {}
    for i = 1, 4 do
      local r = acc:accumulate(function(a)
        acc:backward(model(x):sum()); opt:step(); opt:zero_grad()
        return a
      end, i)
      seen[i] = { r, acc.sync_gradients }
    end
    assert.same({ { 1, false }, { 2, true }, { 3, false }, { 4, true } }, seen)
    do local _ <close> = acc:accumulate(); assert.is_false(acc.sync_gradients) end
    do local _ <close> = acc:accumulate(); assert.is_true(acc.sync_gradients) end
    assert.equal(2, acc.step)
  end)

  it("the FP8 recipe updates its scales once per real step", function()
    local model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
    local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
    local acc = new_acc { mixed_precision = "fp8", gradient_accumulation_steps = 4,
                          kwargs_handlers = { fp8.TERecipeKwargs { amax_history_len = 4 } } }
    model, opt = acc:prepare(model, opt)
    local x, y = fp8.randn { 16, 32 }, fp8.tensor((function() local t = {} for i = 1, 16 do t[i] = i % 16 end return t end)())
    for _ = 1, 8 do
      acc:accumulate(model, function()
        acc:backward(F.cross_entropy(model(x), y)); opt:step(); opt:zero_grad()
      end)
    end
    local st = model[1].fp8_meta:state()
    assert.equal(2, st.input.updates)
    assert.equal(2, st.grad.updates)
  end)

  it("an accumulation window ends with the prepared DataLoader's last batch", function()
    local ds = {}
    for i = 1, 6 do ds[i] = { fp8.randn { 8 }, i % 2 } end
    local loader = fp8.data.DataLoader { ds, batch_size = 1 }
    local model = nn.Sequential(nn.Linear(8, 2))
    local acc = new_acc { gradient_accumulation_steps = 4 }
    model, loader = acc:prepare(model, loader)
    local seen = {}
    for _ = 1, 2 do
      for _x in loader do
        acc:accumulate(model)
        seen[#seen + 1] = acc.sync_gradients
      end
    end
    assert.same({ false, false, false, true, false, true, false, false, false, true, false, true }, seen)
  end)

  it("gradient_accumulation_steps comes from the environment, the argument, the config file", function()
    assert.equal(3, new_acc { env = { FP8LAB_GRADIENT_ACCUMULATION_STEPS = "3" } }.gradient_accumulation_steps)
    assert.equal(5, new_acc { config = { gradient_accumulation_steps = 5 } }.gradient_accumulation_steps)
    assert.equal(3, new_acc { gradient_accumulation_steps = 2, env = { FP8LAB_GRADIENT_ACCUMULATION_STEPS = "3" } }
      .gradient_accumulation_steps)   -- Accelerate's ACCELERATE_GRADIENT_ACCUMULATION_STEPS beats the argument too
    assert.equal(2, new_acc { gradient_accumulation_steps = 2, config = { gradient_accumulation_steps = 5 } }
      .gradient_accumulation_steps)
    assert.equal(1, new_acc {}.gradient_accumulation_steps)
    local cfg = fp8.config.parse("gradient_accumulation_steps: 6\nmixed_precision: bf16\n")
    assert.equal(6, new_acc { config = cfg }.gradient_accumulation_steps)
    U.fails_with("FP8LAB_GRADIENT_ACCUMULATION_STEPS: expected an integer >= 1, got 0", function() new_acc { env = { FP8LAB_GRADIENT_ACCUMULATION_STEPS = "0" } } end)
    U.fails_with("Accelerator: gradient_accumulation_steps: expected an integer >= 1, got 0", function() new_acc { gradient_accumulation_steps = 0 } end)
  end)

  it("fp8lab launch --gradient_accumulation_steps feeds the Accelerator", function()
    local script = os.tmpname() .. ".lua"
    local f = assert(io.open(script, "w"))
    f:write('print("gas=" .. fp8.Accelerator{config=false}.gradient_accumulation_steps)\n')
    f:close()
    local out, ok = sh(sh_quote(bin) .. " launch --gradient_accumulation_steps 7 " .. sh_quote(script))
    os.remove(script)
    assert.is_true(ok, out)
    assert.matches("gas=7", out)
  end)
end)

describe("a scheduler made before prepare", function()
  for _, backend in ipairs { "msamp", "te", "ao" } do
    it("works with " .. backend .. " and drives the prepared optimizer's learning rate", function()
      local model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
      local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
      local sched = optim.lr_scheduler.LambdaLR(opt, function(e) return 1 / (e + 1) end)
      local acc = new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.FP8RecipeKwargs { backend = backend } } }
      local m2, o2, s2 = acc:prepare(model, opt, sched)
      local x = fp8.randn { 8, 32 }
      acc:backward(m2(x):sum()); o2:step(); s2:step(); o2:zero_grad()
      local inner = rawget(o2, "optimizer")
      assert.near(1e-2 / 2, inner.param_groups[1].lr, 1e-12)
      assert.near(1e-2 / 2, s2:get_last_lr()[1], 1e-12)
    end)
  end
end)

describe("a scheduler made after prepare", function()
  it("passed to prepare, it steps once per real step (msamp)", function()
    local model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16))
    local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
    local acc = new_acc { mixed_precision = "fp8", gradient_accumulation_steps = 2,
                          kwargs_handlers = { fp8.FP8RecipeKwargs { backend = "msamp" } } }
    model, opt = acc:prepare(model, opt)
    local sched = acc:prepare(optim.lr_scheduler.StepLR(opt, { step_size = 1, gamma = 0.5 }))
    local x = fp8.randn { 8, 32 }
    for _ = 1, 4 do
      acc:accumulate(model, function()
        acc:backward(model(x):sum()); opt:step(); sched:step(); opt:zero_grad()
      end)
    end
    assert.near(1e-2 * 0.25, rawget(opt, "optimizer").param_groups[1].lr, 1e-12)
    assert.equal(2, acc.step)
  end)

  it("two prepared optimizers stepped after one backward are one training step (acc.step, the te update)", function()
    local function run(two)
      fp8.manual_seed(1)
      local model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16))
      local ps = model:parameters()
      local acc = new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.FP8RecipeKwargs { backend = "te",
        amax_history_len = 4, amax_compute_algo = "most_recent" } } }
      local opts
      if two then
        local o1, o2 = optim.SGD({ ps[1], ps[2] }, { lr = 0.1 }), optim.SGD({ ps[3], ps[4] }, { lr = 0.1 })
        model, o1, o2 = acc:prepare(model, o1, o2)
        opts = { o1, o2 }
      else
        local o = optim.SGD(ps, { lr = 0.1 })
        model, o = acc:prepare(model, o)
        opts = { o }
      end
      fp8.manual_seed(5)
      local losses = {}
      for s = 1, 3 do
        local l = F.cross_entropy(model(fp8.randn { 16, 32 }), fp8.arange(16))
        acc:backward(l)
        for _, o in ipairs(opts) do o:step() end
        for _, o in ipairs(opts) do o:zero_grad() end
        losses[s] = l:item()
      end
      return acc.step, losses, fp8.stats(model)
    end
    local n1, l1, s1 = run(false)
    local n2, l2, s2 = run(true)
    assert.are.equal(3, n1); assert.are.equal(3, n2)   -- counted 6 with two optimizers
    assert.are.same(l1, l2)
    assert.are.same(s1, s2)
  end)

  it("step_scheduler_with_optimizer=false: every call is one step of the schedule", function()
    local model = nn.Linear(8, 4)
    local opt = optim.SGD(model:parameters(), { lr = 1 })
    local acc = new_acc { gradient_accumulation_steps = 2, step_scheduler_with_optimizer = false }
    local sched = optim.lr_scheduler.StepLR(opt, { step_size = 1, gamma = 0.5 })
    model, opt, sched = acc:prepare(model, opt, sched)
    for _ = 1, 4 do
      acc:accumulate(model, function() acc:backward(model(fp8.randn { 2, 8 }):sum()); opt:step(); sched:step() end)
    end
    assert.equal(2, acc.step)
    assert.equal(4, sched.last_epoch)
    assert.truthy(tostring(acc:state()):find("step_scheduler_with_optimizer=false", 1, true))   -- acc:state() says so
    assert.near(1 / 16, opt.param_groups[1].lr, 1e-12)
    U.fails_with("Accelerator: step_scheduler_with_optimizer must be a boolean, got string", new_acc,
      { step_scheduler_with_optimizer = "no" })
  end)
end)

describe("AutocastKwargs", function()
  local Probe = nn.Module.class("AutocastProbe")
  function Probe:__init() self.lin = nn.Linear(4, 4) end
  function Probe:forward(x) self.seen = fp8.autocast_dtype(); return self.lin(x) end

  it("enabled=false keeps the prepared model's non-FP8 ops in fp32", function()
    local m = new_acc { mixed_precision = "bf16" }:prepare(Probe())
    m(fp8.randn { 2, 4 })
    assert.equal("bf16", m.seen)
    local m2 = new_acc { mixed_precision = "bf16", kwargs_handlers = { fp8.AutocastKwargs { enabled = false } } }
      :prepare(Probe())
    m2(fp8.randn { 2, 4 })
    assert.equal("fp32", m2.seen)
    -- acc:autocast_dtype() says what the forward ran in (it said bf16 here, ignoring the handler)
    assert.equal("bf16", new_acc { mixed_precision = "bf16" }:autocast_dtype())
    local off = new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.AutocastKwargs { enabled = false } } }
    assert.equal("fp32", off:autocast_dtype())
    -- inside an enclosing autocast too (Accelerate's torch.autocast(enabled=False) turns an outer one off)
    fp8.amp.autocast("fp16", function() m2(fp8.randn { 2, 4 }) end)
    assert.equal("fp32", m2.seen)
    -- mixed_precision="no": Accelerate does not wrap the forward at all, so the handler would change nothing:
    -- refused (it was taken and left the forward as it was until 2026-12-06)
    local ok, err = pcall(new_acc, { mixed_precision = "no", kwargs_handlers = { fp8.AutocastKwargs { enabled = false } } })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("AutocastKwargs needs mixed precision", 1, true), err)
  end)

  it("a prepared model's bf16/fp16 outputs come back fp32, in tables too (convert_outputs_to_fp32)", function()
    local Low = nn.Module.class("LowOutputs")
    function Low:__init() self.lin = nn.Linear(4, 4) end
    function Low:forward(x)
      local y = self.lin(x)
      return y:to("bf16"), { a = y:to("fp16"), b = { y:to("bf16"), 3 } }, y:detach():quantize("e4m3")
    end
    for _, mp in ipairs { "bf16", "fp16" } do
      for _, h in ipairs { {}, { fp8.AutocastKwargs { enabled = false } } } do
        local x = fp8.randn { 2, 4 }
        local m = new_acc { mixed_precision = mp, kwargs_handlers = h }:prepare(Low())
        local y, t, q = m(x)
        assert.same({ "fp32", "fp32", "fp32", 3, "e4m3" },
          { y:dtype(), t.a:dtype(), t.b[1]:dtype(), t.b[2], q:dtype() })
        y:sum():backward()   -- differentiable
        assert.equal("fp32", m.lin.weight.grad:dtype())
      end
    end
    -- mixed_precision="no": Accelerate leaves the forward as it is
    local y = new_acc { mixed_precision = "no" }:prepare(Low())(fp8.randn { 2, 4 })
    assert.equal("bf16", y:dtype())
  end)

  it("acc:autocast(handler) uses that handler for the block, as Accelerate's autocast(autocast_handler)", function()
    local acc = new_acc { mixed_precision = "bf16" }
    do
      local _ <close> = acc:autocast(fp8.AutocastKwargs { enabled = false })
      assert.equal("fp32", fp8.autocast_dtype())
    end
    do
      local _ <close> = acc:autocast()
      assert.equal("bf16", fp8.autocast_dtype())
    end
    assert.same({ "fp32", 7 }, { acc:autocast(fp8.AutocastKwargs { enabled = false }, function(a) return fp8.autocast_dtype(), a end, 7) })
    U.fails_with("expected an AutocastKwargs handler, a function or nothing, got a GradScalerKwargs", acc.autocast, acc, fp8.GradScalerKwargs {})
    U.fails_with("cache_enabled=true} is not supported", acc.autocast, acc, fp8.AutocastKwargs { cache_enabled = true })
    U.fails_with("arguments after a missing function", acc.autocast, acc, nil, 5)
  end)

  it("cache_enabled=true is refused (no cast cache in this build); false is what happens", function()
    local ok, err = pcall(new_acc, { mixed_precision = "bf16",
      kwargs_handlers = { fp8.AutocastKwargs { cache_enabled = true } } })
    assert.is_false(ok)
    assert.matches("cache_enabled=true} is not supported", err, 1, true)
    assert.truthy(new_acc { mixed_precision = "bf16", kwargs_handlers = { fp8.AutocastKwargs { cache_enabled = false } } })
  end)
end)

describe("prepare converts the root module", function()
  it("a bare Linear becomes FP8 under te and msamp", function()
    for _, b in ipairs { "te", "msamp" } do
      local lin = nn.Linear(32, 32)
      local acc = new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.FP8RecipeKwargs { backend = b } } }
      -- MS-AMP prepares a model with its optimizer (Accelerate's rule); te takes the model alone
      local m = b == "msamp" and acc:prepare(lin, fp8.optim.AdamW(lin:parameters())) or acc:prepare(lin)
      assert.equal("FP8Linear", getmetatable(m).__name)
      assert.is_true(fp8.has_fp8_layers(m))
    end
  end)

  it("says in one line why a root stays in high precision", function()
    local out = sh(sh_quote(bin) .. " -e " .. sh_quote([[
      local acc = fp8.Accelerator{mixed_precision="fp8", config=false, env={},
        kwargs_handlers={fp8.FP8RecipeKwargs{backend="te"}}}
      local m = acc:prepare(fp8.nn.Linear(30, 30))
      print("class=" .. getmetatable(m).__name)
      local acc2 = fp8.Accelerator{mixed_precision="fp8", config=false, env={},
        kwargs_handlers={fp8.AORecipeKwargs{}}}
      print("class=" .. getmetatable(acc2:prepare(fp8.nn.Linear(32, 32))).__name)
      local nn = fp8.nn
      acc2:prepare(nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16)))]]))
    assert.matches("%[30 %-> 30%] stays in high precision: FP8 GEMMs need dims divisible by 16", out)
    assert.matches("stays in high precision: torchao's default filter", out)
    assert.matches("class=Linear\n.*class=Linear", out)
    -- and every layer a model keeps in high precision gets its line
    assert.matches("\n[^\n]*%[32 %-> 32%] stays in high precision: torchao's default filter keeps the first and last Linear in high", out)
    assert.matches("\n[^\n]*%[32 %-> 16%] stays in high precision: torchao's default filter keeps the first and last Linear in high", out)
  end)
end)

describe("Accelerate's names", function()
  it("convert_model takes Accelerate's spelling", function()
    local m = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16))
    fp8.convert_model(m, { to_transformer_engine = true, _convert_linear = true, _convert_ln = false })
    assert.equal("FP8Linear", getmetatable(m[1]).__name)
    assert.equal("LayerNorm", getmetatable(m[2]).__name)
    fp8.convert_model(m, { to_transformer_engine = false })
    assert.equal("Linear", getmetatable(m[1]).__name)
    assert.has_error(function() fp8.convert_model(m, { _convert_lin = true }) end)
  end)

  it("has_ao_layers tells the torchao recipe apart", function()
    local m = nn.Sequential(nn.Linear(16, 16))
    assert.is_false(fp8.has_ao_layers(m))
    fp8.convert_model(m, { recipe = { backend = "ao" } })
    assert.is_true(fp8.has_ao_layers(m))
    local t = fp8.convert_model(nn.Sequential(nn.Linear(16, 16)), { recipe = { backend = "te" } })
    assert.is_false(fp8.has_ao_layers(t))
    assert.is_true(fp8.has_fp8_layers(t))
  end)

  it("set_seed(seed, false, true) (Accelerate's deterministic=True): a training run repeated gives the same bits",
    function()
    -- fp8lab's kernels are deterministic whatever the flag says; what it promises is checked here: two FP8 runs of a
    -- small GPT (its init, dropout off, AdamW) from the same seed give the same loss bits at every step
    local function run()
      fp8.set_seed(11, false, true)
      local model = fp8.nn.GPT{ vocab_size = 32, block_size = 16, n_layer = 2, n_head = 2, n_embd = 32 }
      local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
      local acc = fp8.Accelerator{ mixed_precision = "fp8", cpu = true, config = false, env = {} }
      model, opt = acc:prepare(model, opt)
      local out = {}
      for s = 1, 3 do
        local r = {}
        for b = 1, 8 do r[b] = {} for t = 1, 17 do r[b][t] = (b * 31 + t * 17 + s * 7 + b * t) % 32 end end
        local x = fp8.tensor(r)
        local loss = fp8.nn.functional.cross_entropy(model(x:narrow(2, 1, 16)):reshape({ -1, 32 }),
          x:narrow(2, 2, 16):reshape({ -1 }))
        acc:backward(loss); opt:step(); opt:zero_grad()
        out[s] = ("%a"):format(loss:item())
      end
      return out
    end
    assert.same(run(), run())
    assert.has_no.errors(function() fp8.set_seed(1, false, false) end)
  end)

  it("set_seed makes the random numbers repeat", function()
    fp8.set_seed(7); local a = fp8.randn { 4 }:totable()
    fp8.set_seed(7); local b = fp8.randn { 4 }:totable()
    assert.same(a, b)
    assert.has_error(function() fp8.set_seed(-1) end)
    -- device_specific adds the rank of whatever started the process: mpirun's and srun's variables alike (srun's
    -- were not read, so every rank of `srun -n 8 fp8lab ...` drew the same numbers)
    local code = sh_quote("fp8.set_seed(1, true); io.write(fp8.rand{1}:item())")
    local function draw(env) local out, ok = sh(("env -u FP8LAB_RANK %s %s -e %s"):format(env, sh_quote(bin), code)); assert(ok, out); return out end
    local want = {}
    for _, sd in ipairs { 1, 3, 4 } do
      local out, ok = sh(("%s -e %s"):format(sh_quote(bin), sh_quote(("fp8.set_seed(%d); io.write(fp8.rand{1}:item())"):format(sd))))
      assert(ok, out)
      want[sd] = out
    end
    assert.are.equal(want[1], draw(""))
    assert.are.equal(want[3], draw("OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=4"))
    assert.are.equal(want[4], draw("SLURM_PROCID=3 SLURM_STEP_ID=0 SLURM_NTASKS=4"))
  end)

  it("acc:autocast() as a block restores the previous autocast", function()
    local acc = new_acc { mixed_precision = "bf16" }
    local before = fp8.autocast_dtype()
    do
      local _ <close> = acc:autocast()
      assert.equal("bf16", fp8.autocast_dtype())
    end
    assert.equal(before, fp8.autocast_dtype())
    assert.equal("bf16", acc:autocast(function() return fp8.autocast_dtype() end))
  end)

  it("acc:autocast() turns on bf16 only: a prepared te model in eval mode stays out of FP8 inside it (use_autocast_during_eval=false)", function()
    fp8.manual_seed(5)
    local acc = new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} } }
    local m = acc:prepare(nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32)))
    local x = fp8.randn { 8, 32 }
    m:eval()
    local plain = m(x)
    local inside = acc:autocast(function() return m(x) end)
    local inside_block
    do local _ <close> = acc:autocast(); inside_block = m(x) end
    m:train()
    local fp8_out = fp8.no_grad(function() return m(x) end)
    assert.is_true((plain - fp8_out):abs():max():item() > 0)   -- training runs in FP8 and eval does not
    assert.are.equal(0, (inside - plain):abs():max():item())
    assert.are.equal(0, (inside_block - plain):abs():max():item())
    -- and inside an explicit fp8.fp8_autocast the eval forward still decides for itself, as te.fp8_autocast(enabled=)
    m:eval()
    assert.are.equal(0, (fp8.fp8_autocast(function() return m(x) end) - plain):abs():max():item())
  end)

  it("clip_grad_value_ clamps every gradient element", function()
    local acc = new_acc {}
    local lin = acc:prepare(nn.Linear(4, 3))
    acc:backward((lin(fp8.randn { 5, 4 }) * 100):sum())
    acc:clip_grad_value_(lin, 0.5)
    assert.is_true(lin.weight.grad:abs():max():item() <= 0.5)
    assert.near(0.5, lin.weight.grad:abs():max():item(), 1e-6)
    assert.has_error(function() acc:clip_grad_value_(lin, -1) end)
    assert.is_function(acc.clip_grad_norm_)
    assert.is_function(acc.unwrap_model)
  end)
end)

describe("skip_first_batches", function()
  local items = {}
  for i = 1, 10 do items[i] = i end
  local function epoch(l)
    local out = {}
    for x in l do out[#out + 1] = table.concat(x:totable(), ",") end
    return out
  end
  local function tail(list, from) return table.move(list, from, #list, 1, {}) end

  it("every loop leaves out the first batches of its epoch, in the wrapped loader's order", function()
    local a = fp8.data.DataLoader { items, batch_size = 2, shuffle = true, seed = 3 }
    local b = fp8.data.DataLoader { items, batch_size = 2, shuffle = true, seed = 3 }
    local s = fp8.skip_first_batches(b, 2)
    assert.are.equal(3, #s)
    assert.are.equal(2, s.batch_size)   -- the wrapped loader's fields read through
    for e = 1, 2 do
      local full = epoch(a)
      assert.are.same(tail(full, 3), epoch(s), "epoch " .. e)
      assert.are.equal(e, b.epoch)
    end
    assert.are.same(epoch(a), epoch(b))   -- the wrapped loader goes on with the next epoch
    assert.are.same(epoch(a), epoch(fp8.skip_first_batches(b, 0)))
    assert.are.same({}, epoch(fp8.skip_first_batches(b, 5)))
    assert.are.equal(0, #fp8.skip_first_batches(b, 5))
  end)

  it("a checkpoint saved while a skipper runs records the wrapped loader's absolute position", function()
    local dir = U.tmpdir()
    local function setup()
      local acc = new_acc { dataloader_config = fp8.DataLoaderConfiguration { use_stateful_dataloader = true } }
      local m, ld = acc:prepare(nn.Linear(1, 1), fp8.data.DataLoader { items, batch_size = 2, shuffle = true, seed = 9 })
      return acc, ld
    end
    local acc, ld = setup()
    local want = epoch(fp8.data.DataLoader { items, batch_size = 2, shuffle = true, seed = 9 })   -- epoch 1's order
    local n = 0
    for _ in acc:skip_first_batches(ld, 2) do   -- batches 3, 4, 5
      n = n + 1
      if n == 1 then acc:save_state(dir .. "/c") end   -- after batch 3 of epoch 1
    end
    local acc2, ld2 = setup()
    acc2:load_state(dir .. "/c")
    assert.are.same(tail(want, 4), epoch(ld2))   -- the next loop finishes epoch 1 from batch 4
    os.execute("rm -rf " .. sh_quote(dir))
  end)

  it("use_stateful_dataloader: load_state puts a loader at its saved batch (true) or its epoch's first (false, the default)", function()
    local dir = U.tmpdir()
    local function setup(stateful)
      local acc = new_acc { dataloader_config = stateful ~= nil
        and fp8.DataLoaderConfiguration { use_stateful_dataloader = stateful } or nil }
      local m, ld = acc:prepare(nn.Linear(1, 1), fp8.data.DataLoader { items, batch_size = 2, shuffle = true, seed = 9 })
      return acc, ld
    end
    local plain = fp8.data.DataLoader { items, batch_size = 2, shuffle = true, seed = 9 }
    local e1, e2, e3 = epoch(plain), epoch(plain), epoch(plain)
    local acc, ld = setup(nil)
    assert.is_false(acc.use_stateful_dataloader)
    for _ in ld do end   -- epoch 1
    local n = 0
    for _ in ld do n = n + 1; if n == 2 then acc:save_state(dir .. "/c"); break end end   -- after batch 2 of epoch 2
    for _, stateful in ipairs { false, true } do
      local acc2, ld2 = setup(stateful)
      assert.are.equal(stateful, acc2.use_stateful_dataloader)
      acc2:load_state(dir .. "/c")
      -- stateful: epoch 2 from batch 3; otherwise epoch 2 again, whole, in its own shuffled order (not epoch 1's)
      assert.are.same(stateful and tail(e2, 3) or e2, epoch(ld2))
      -- Accelerate's recipe, skip_first_batches of the done batches, resumes in place either way
      local acc3, ld3 = setup(stateful)
      acc3:load_state(dir .. "/c")
      assert.are.same(tail(e2, 3), epoch(acc3:skip_first_batches(ld3, 2)))
      assert.are.same(e3, epoch(ld3))   -- then epoch 3
    end
    assert.are_not.same(e1, e2)
    os.execute("rm -rf " .. sh_quote(dir))
  end)

  it("refuses what it cannot skip, naming the caller's line", function()
    local ld = fp8.data.DataLoader { items, batch_size = 4 }
    local acc = new_acc {}
    local line = debug.getinfo(1, "l").currentline + 1
    local ok, err = pcall(function() local s = fp8.skip_first_batches(ld, 4); return s end)
    assert.is_false(ok)
    assert.are.equal(("tests/spec/parity_spec.lua:%d: skip_first_batches: num_batches must be an integer from 0 "
      .. "to the loader's 3 batches, got 4"):format(line), err)
    line = debug.getinfo(1, "l").currentline + 1
    ok, err = pcall(function() local s = acc:skip_first_batches({ 1, 2 }, 1); return s end)
    assert.are.equal(("tests/spec/parity_spec.lua:%d: skip_first_batches: expected a DataLoader as argument #1, got a table")
      :format(line), err)
    U.fails_with("num_batches must be an integer", acc.skip_first_batches, acc, ld, 1.5)
    U.fails_with("num_batches must be an integer", acc.skip_first_batches, acc, ld, -1)
    U.fails_with("already skips 1 batches; call it on the loader it wraps (loader.loader)",
      fp8.skip_first_batches, fp8.skip_first_batches(ld, 1), 1)
  end)

  it("a prepared loader, or a skipper given to prepare, still ends the accumulation window with the epoch", function()
    for _, how in ipairs { "skip prepared", "prepare skipper" } do
      local acc = new_acc { gradient_accumulation_steps = 4 }
      local lin = nn.Linear(2, 1)
      local ld = fp8.data.DataLoader { items, batch_size = 2 }
      local s
      if how == "skip prepared" then
        lin, ld = acc:prepare(lin, ld)
        s = acc:skip_first_batches(ld, 3)
      else
        lin, s = acc:prepare(lin, fp8.skip_first_batches(ld, 3))
        assert.are.equal("SkipDataLoader", getmetatable(s).__name)
      end
      local syncs = {}
      for x in s do
        acc:accumulate(lin, function() syncs[#syncs + 1] = acc.sync_gradients end)
        assert.truthy(x)
      end
      assert.are.same({ false, true }, syncs, how)   -- batches 4 and 5 of 5: the last one ends the window
    end
  end)
end)

describe("free_memory", function()
  it("lets go of what was prepared; a new model trains with the recipe, the old optimizer refuses to step", function()
    local acc = new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} } }
    local m1 = nn.Sequential(nn.Linear(16, 16))
    local o1 = fp8.optim.AdamW(m1:parameters(), { lr = 1e-3 })
    local s1 = fp8.optim.lr_scheduler.LambdaLR(o1, function() return 1 end)
    m1, o1, s1 = acc:prepare(m1, o1, s1)
    acc:backward(m1(fp8.randn { 16, 16 }):sum()); o1:step()
    assert.are.equal(1, acc.step)
    local weak = setmetatable({ m1 }, { __mode = "v" })
    local r = table.pack(acc:free_memory(m1, o1))
    assert.are.equal(2, r.n)
    assert.is_nil(r[1]); assert.is_nil(r[2])
    assert.are.equal(0, acc.step)
    assert.are.same({}, acc._models); assert.are.same({}, acc._fp8_layers); assert.are.same({}, acc._optimizers)
    U.fails_with("optimizer:step: this optimizer was prepared before acc:free_memory(), which let it go; prepare it again",
      o1.step, o1)
    U.fails_with("scheduler:step: this scheduler was prepared before acc:free_memory()", s1.step, s1)
    local m2 = nn.Sequential(nn.Linear(16, 16))
    local o2 = fp8.optim.AdamW(m2:parameters(), { lr = 1e-3 })
    m2, o2 = acc:prepare(m2, o2)
    for _ = 1, 2 do acc:backward(m2(fp8.randn { 16, 16 }):sum()); o2:step(); o2:zero_grad() end
    assert.are.equal(2, acc.step)
    assert.are.equal(2, m2[1].fp8_meta:state().input.updates)   -- the recipe updates the new model's scales
    m1, o1, s1 = nil, nil, nil
    collectgarbage(); collectgarbage()
    assert.is_nil(weak[1], "the accelerator still holds the freed model")
    assert.are.equal(acc.free_memory, acc.clear)
    local n = select("#", fp8.release_memory(1, 2, 3))
    assert.are.equal(3, n)
  end)

  it("starts the accumulation windows afresh, as Accelerate's free_memory sets its step to 0", function()
    -- Accelerate 1.15 (Accelerator(cpu=True, gradient_accumulation_steps=3), two trials of 4 accumulate calls with
    -- free_memory between them): sync_gradients 0 0 1 0 in both trials, step 1 2 3 4 in both, 0 after free_memory
    local acc = new_acc { cpu = true, gradient_accumulation_steps = 3 }
    for _ = 1, 2 do
      local m = nn.Linear(2, 1)
      local o = fp8.optim.SGD(m, { lr = 0.1 })
      m, o = acc:prepare(m, o)
      local seen = {}
      for i = 1, 4 do
        acc:accumulate(m, function() acc:backward(m(fp8.ones { 1, 2 }):sum()); o:step(); o:zero_grad() end)
        seen[i] = (acc.sync_gradients and 1 or 0) .. ":" .. acc.gradient_state.step
      end
      assert.are.same({ "0:1", "0:2", "1:3", "0:4" }, seen)
      acc:free_memory(m, o)
      assert.are.equal(0, acc.gradient_state.step)
    end
  end)
end)

describe("unwrap_model", function()
  local function setup(mp, handler)
    local acc = new_acc { mixed_precision = mp, kwargs_handlers = handler and { handler } or nil }
    local m = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    local opt = optim.AdamW(m:parameters(), { lr = 1e-3 })
    m, opt = acc:prepare(m, opt)
    local function step() acc:backward(m(fp8.randn { 16, 32 }):sum()); opt:step(); opt:zero_grad() end
    return acc, m, step
  end

  it("by default changes nothing: the model goes on training in FP8 (it used to lose its FP8 autocast)", function()
    local acc, m, step = setup("fp8", fp8.TERecipeKwargs {})
    step(); step()
    assert.are.equal(2, m[1].fp8_meta:state().input.updates)
    assert.are.equal(m, acc:unwrap_model(m))
    assert.are.equal(m, acc:unwrap_model(m, { keep_fp32_wrapper = true }))
    step(); step()
    assert.are.equal(4, m[1].fp8_meta:state().input.updates)
  end)

  it("keep_fp32_wrapper=false takes the mixed-precision forward off (te: plain layers again)", function()
    local acc, m = setup("bf16")
    local seen
    local probe = m[1].forward
    rawset(m[1], "forward", function(self, x) seen = fp8.autocast_dtype(); return probe(self, x) end)
    m(fp8.randn { 2, 32 })
    assert.are.equal("bf16", seen)
    acc:unwrap_model(m, false)
    m(fp8.randn { 2, 32 })
    assert.are.equal("fp32", seen)
    local acc2, m2 = setup("fp8", fp8.TERecipeKwargs {})
    assert.is_true(fp8.has_fp8_layers(m2))
    assert.is_false(fp8.has_fp8_layers(acc2:unwrap_model(m2, { keep_fp32_wrapper = false })))
  end)

  it("refuses what it cannot take", function()
    local acc, m = setup("no")
    U.fails_with("unwrap_model: expected a model (an fp8.nn Module), got table", acc.unwrap_model, acc, {})
    U.fails_with("unwrap_model: keep_fp32_wrapper must be a boolean, got string", acc.unwrap_model, acc, m, "no")
    U.fails_with("keep_torch_compile", acc.unwrap_model, acc, m, { keep_torch_compile = true })
  end)
end)

describe("more of Accelerate's Accelerator", function()
  it("find_executable_batch_size retries on out-of-memory errors at x 0.9, as Accelerate 1.15", function()
    -- a real allocation failure (2^48 bytes); under ASan, whose allocator aborts on such a request (make sanitize
    -- sets no allocator_may_return_null), the core's message for it
    local asan = os.getenv("ASAN_OPTIONS") ~= nil
    local function oom_now()
      if asan then error("zeros: out of memory allocating 281474976710656 bytes on cpu") end
      local _ = fp8.zeros { 2 ^ 46 }
    end
    local tried = {}
    local train = fp8.find_executable_batch_size(function(batch_size, tag)
      tried[#tried + 1] = batch_size
      if batch_size > 100 then oom_now() end
      return batch_size, tag
    end, { starting_batch_size = 128 })
    assert.same({ 92, "x" }, { train("x") })
    assert.same({ 128, 115, 103, 92 }, tried)   -- Accelerate: int(128 * 0.9) = 115, 103, 92
    assert.same({ 92, "y" }, { train("y") })     -- the size found is kept
    assert.are.equal(5, #tried)
    U.fails_with("leave the batch size out of the call", train, 64, "x")
    -- another error is raised as it is; a size that reaches 0 is an error; a custom reduction
    U.fails_with("boom", fp8.find_executable_batch_size(function(_) error("boom") end))
    U.fails_with("the function takes no parameters", fp8.find_executable_batch_size(function() end))
    local oom = function(_) oom_now() end
    U.fails_with("no executable batch size found, reached zero",
      fp8.find_executable_batch_size(oom, { starting_batch_size = 3 }))
    local sizes = { 8, 2 }
    local halve = fp8.find_executable_batch_size(function(b) if b > 2 then oom() end return b end,
      { starting_batch_size = 16, reduce_batch_size_fn = function() return table.remove(sizes, 1) end })
    assert.are.equal(2, halve())
    U.fails_with("starting_batch_size must be an integer >= 1, got 0", fp8.find_executable_batch_size, oom,
      { starting_batch_size = 0 })
    U.fails_with("unknown option 'batch_size'", fp8.find_executable_batch_size, oom, { batch_size = 4 })
  end)

  it("has Accelerate's read-only properties as fields, with its values for this run", function()
    local acc = new_acc {}
    assert.is_nil(acc.project_dir); assert.is_nil(acc.logging_dir)
    assert.is_false(acc.split_batches); assert.is_false(acc.dispatch_batches); assert.is_false(acc.non_blocking)
    assert.is_true(acc.use_seedable_sampler); assert.is_false(acc.use_stateful_dataloader)   -- Accelerate's default
    assert.is_true(acc.should_save_model); assert.is_false(acc.multi_device)
    assert.is_false(acc.is_fsdp2); assert.is_false(acc.is_composable_parallelism_enabled)
    local pc = fp8.ProjectConfiguration { project_dir = "runs/x", automatic_checkpoint_naming = true }
    acc = new_acc { project_config = pc }
    -- Accelerate: accelerator.project_dir, and logging_dir defaulting to it
    assert.are.equal("runs/x", acc.project_dir); assert.are.equal("runs/x", acc.logging_dir)
  end)

  it("optimizer_step_was_skipped follows the fp16 GradScaler", function()
    local acc = new_acc { mixed_precision = "fp16" }
    local m = nn.Linear(4, 2)
    local opt = optim.SGD(m:parameters(), { lr = 0.1 })
    m, opt = acc:prepare(m, opt)
    assert.is_false(acc.optimizer_step_was_skipped)
    acc:backward(m(fp8.randn { 3, 4 }):sum() * math.huge); opt:step(); opt:zero_grad()
    assert.is_true(acc.optimizer_step_was_skipped)
    acc:backward(m(fp8.randn { 3, 4 }):sum()); opt:step(); opt:zero_grad()
    assert.is_false(acc.optimizer_step_was_skipped)
  end)

  it("the fp16 scale backs off no lower than a scale whose reciprocal is finite, and its state loads back", function()
    -- (200 skipped steps in a row took it to 0, as torch's: the next clean step unscaled by 1/0 and wrote NaN into
    -- every weight, and load_state_dict refused the scale 0 that state_dict had written)
    local acc = new_acc { mixed_precision = "fp16" }
    local m = nn.Linear(4, 2)
    local opt = optim.SGD(m:parameters(), { lr = 0.1 })
    m, opt = acc:prepare(m, opt)
    local bad = fp8.tensor { { 0 / 0, 1, 2, 3 } }
    for _ = 1, 200 do acc:backward(m(bad):sum()); opt:step(); opt:zero_grad() end
    assert.is_true(acc.optimizer_step_was_skipped)
    local s = acc.scaler:get_scale()
    assert.are.equal(2 ^ -127, s)                     -- 2^-128's reciprocal is inf in fp32
    acc:backward(m(fp8.randn { 3, 4 }):sum()); opt:step(); opt:zero_grad()   -- a clean step
    assert.is_false(acc.optimizer_step_was_skipped)
    for _, p in ipairs(m:parameters()) do
      local v = p:abs():sum():item()
      assert.is_true(v == v and v < math.huge, "a weight is not finite")
    end
    local sc = fp8.amp.GradScaler()
    sc:load_state_dict(acc.scaler:state_dict())
    assert.are.equal(2 ^ -127, sc:get_scale())
    U.fails_with("init_scale must be a number > 0 that fits fp32", fp8.amp.GradScaler, { init_scale = 1e-45 })
    U.fails_with("GradScalerKwargs: init_scale: expected a number > 0 that fits fp32", fp8.GradScalerKwargs,
      { init_scale = 1e-45 })
    U.fails_with("scale must be a number > 0 that fits fp32, its reciprocal too", sc.load_state_dict, sc,
      { scale = 1e-45 })
  end)

  it("get_state_dict and save (safetensors from the main process)", function()
    local acc = new_acc {}
    local m = acc:prepare(nn.Linear(4, 2))
    local sd = acc:get_state_dict(m)
    assert.are.same({ "bias", "weight" }, (function() local k = {} for n in pairs(sd) do k[#k + 1] = n end table.sort(k) return k end)())
    local dir = U.tmpdir()
    acc:save(sd, dir .. "/w.safetensors", { note = "x" })
    local f = fp8.safe_open(dir .. "/w.safetensors")
    assert.are.equal("x", f:metadata().note)
    assert.are.equal(0, (f:get_tensor("weight") - m.weight):abs():max():item())
    f:close()
    U.fails_with("save: expected a table of tensors", acc.save, acc, 5, dir .. "/x")
    U.fails_with("save: \"a\" must be a tensor, got number", acc.save, acc, { a = 1 }, dir .. "/x")
    U.fails_with("get_state_dict: unwrap must be a boolean", acc.get_state_dict, acc, m, 1)
    U.fails_with("get_state_dict: unwrap=false is not supported", acc.get_state_dict, acc, m, false)
    assert.are.same(sd.weight:totable(), acc:get_state_dict(m, true).weight:totable())
    os.execute("rm -rf " .. sh_quote(dir))
  end)

  it("one process: the on_* helpers, triggers, gather_object, local_main_process_first, pad_across_processes", function()
    local acc = new_acc {}
    assert.is_true(acc:is_last_process())
    assert.are.equal(7, acc:on_main_process(function(a) return a + 1 end)(6))
    assert.are.equal(7, acc:on_last_process(function(a) return a + 1 end)(6))
    assert.are.equal(7, acc:on_local_main_process(function(a) return a + 1 end)(6))
    assert.are.equal(7, acc:on_process(function(a) return a + 1 end, 0)(6))
    U.fails_with("on_process: process_index must be an integer from 0 to 0 (num_processes - 1), got 1", acc.on_process, acc,
      function() end, 1)
    U.fails_with("on_main_process: expected a function, got number", acc.on_main_process, acc, 5)
    assert.is_false(acc:check_trigger())
    acc:set_trigger()
    assert.is_true(acc:check_trigger())
    assert.is_false(acc:check_trigger())   -- a check clears it
    local list = { 1, "two", { 3 } }
    assert.are.equal(list, acc:gather_object(list))
    U.fails_with("gather_object: expected a list of plain values, got number", acc.gather_object, acc, 5)
    assert.are.same({ "a", "b" }, { acc:local_main_process_first(function() return "a", "b" end) })
    assert.are.same({ "a", "b" }, acc:gather_for_metrics({ "a", "b" }))   -- not tensors: through gather_object
    -- use_gather_object=true sends even tensors that way, where they cannot travel: refused with one process as
    -- with several (before 2026-12-05 one process returned them as given, so a script failed only under launch)
    local tl = { fp8.ones { 2 } }
    U.fails_with("gather_for_metrics: only plain values travel", acc.gather_for_metrics, acc, tl, true)
    assert.is_true(fp8.is_tensor(acc:gather_for_metrics(tl[1])))
    assert.are.equal(3, acc:gather_for_metrics(fp8.ones { 3 }):numel())
    U.fails_with("gather_for_metrics: use_gather_object must be a boolean, got number", acc.gather_for_metrics, acc,
      { "a" }, 1)
    local t = fp8.ones { 2, 3 }
    assert.are.equal(t, acc:pad_across_processes(t))
    U.fails_with("pad_across_processes: dim must be a non-zero integer", acc.pad_across_processes, acc, t, 0)
    U.fails_with("pad_across_processes: pad_first must be a boolean, got string", acc.pad_across_processes, acc, t, 1, 0, "y")
    U.fails_with("pad_across_processes: expected a tensor or a table of tensors, got string", acc.pad_across_processes, acc, "x")
  end)
end)

describe("fp16 with two optimizers", function()
  it("both optimizers' gradients are unscaled once, with their own scale; the scale moves once per iteration", function()
    -- growth_interval=1: every update doubles the scale, so an update between the two optimizers' steps shows
    local acc = new_acc { mixed_precision = "fp16", kwargs_handlers = { fp8.GradScalerKwargs { growth_interval = 1 } } }
    local a, b = nn.Linear(8, 8), nn.Linear(8, 4)
    local oa, ob = optim.SGD(a:parameters(), { lr = 0.1 }), optim.SGD(b:parameters(), { lr = 0.1 })
    a, b, oa, ob = acc:prepare(a, b, oa, ob)
    acc:backward(b(a(fp8.randn { 4, 8 })):mean())
    local scale = acc.scaler:get_scale()
    local ga, gb = a.weight.grad:clone(), b.weight.grad:clone()
    local wb = b.weight:clone()
    acc:unscale_gradients(ob)   -- the given optimizer's gradients only
    assert.are.equal(0, (b.weight.grad - gb / scale):abs():max():item())
    assert.are.equal(0, (a.weight.grad - ga):abs():max():item())
    acc:clip_grad_norm_(a:parameters(), 1e9)
    assert.are.equal(0, (a.weight.grad - ga / scale):abs():max():item())
    assert.are.equal(0, (b.weight.grad - gb / scale):abs():max():item())
    acc:unscale_gradients()   -- already unscaled this step: left as they are
    assert.are.equal(0, (b.weight.grad - gb / scale):abs():max():item())
    oa:step(); ob:step()
    assert.is_true((b.weight - (wb - 0.1 * gb / scale)):abs():max():item() < 1e-6)
    assert.is_false(acc.optimizer_step_was_skipped)
    U.fails_with("unscale_gradients: expected an optimizer (or a list of them), got number", acc.unscale_gradients, acc, 5)
    -- without clipping, each step unscales its own optimizer's gradients
    acc:backward(b(a(fp8.randn { 4, 8 })):mean())
    scale = acc.scaler:get_scale()
    gb, wb = b.weight.grad:clone(), b.weight:clone()
    oa:step(); ob:step()
    assert.is_true((b.weight - (wb - 0.1 * gb / scale)):abs():max():item() < 1e-6)
    -- one update per iteration, not one per optimizer: 65536 doubled twice
    assert.are.equal(65536 * 4, acc.scaler:get_scale())
  end)

  it("the launch flag's gradient_accumulation_steps beats the argument (Accelerate's order); every beaten value is named", function()
    local function has(acc, text)
      for _, n in ipairs(acc.settings.notices) do if n:find(text, 1, true) then return true end end
      return false
    end
    local acc = new_acc { gradient_accumulation_steps = 4, env = { FP8LAB_GRADIENT_ACCUMULATION_STEPS = "8" } }
    assert.are.equal(8, acc.gradient_accumulation_steps)
    assert.are.equal("env", acc.settings.sources.gradient_accumulation_steps)
    assert.is_true(has(acc, "the Accelerator's gradient_accumulation_steps=4 overridden by launch --gradient_accumulation_steps"))
    assert.are.equal(4, new_acc { gradient_accumulation_steps = 4 }.gradient_accumulation_steps)
    local same = new_acc { gradient_accumulation_steps = 8, env = { FP8LAB_GRADIENT_ACCUMULATION_STEPS = "8" } }
    assert.are.equal(0, #same.settings.notices)
    -- the plugin is an object, not a number the launcher can replace: it wins, naming what it beats
    local ap = new_acc { gradient_accumulation_plugin = fp8.GradientAccumulationPlugin { num_steps = 2 },
      env = { FP8LAB_GRADIENT_ACCUMULATION_STEPS = "8" } }
    assert.are.equal(2, ap.gradient_accumulation_steps)
    assert.is_true(has(ap, "FP8LAB_GRADIENT_ACCUMULATION_STEPS=8 overridden by the GradientAccumulationPlugin's num_steps=2"))
    local ac = new_acc { gradient_accumulation_steps = 2, config = { gradient_accumulation_steps = 4 } }
    assert.are.equal(2, ac.gradient_accumulation_steps)
    assert.is_true(has(ac, "the config file's gradient_accumulation_steps=4 overridden by the Accelerator's gradient_accumulation_steps=2"))
    -- the script's mixed_precision and a handler's fields win, as in Accelerate, with a notice
    local a2 = new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs { margin = 1 } },
      env = { FP8LAB_FP8_MARGIN = "3", FP8LAB_MIXED_PRECISION = "bf16" } }
    assert.are.equal(1, a2.fp8_recipe.margin)
    assert.is_true(has(a2, "FP8LAB_FP8_MARGIN=3 overridden by TERecipeKwargs{margin=1}"))
    assert.is_true(has(a2, 'FP8LAB_MIXED_PRECISION=bf16 overridden by the Accelerator\'s mixed_precision="fp8"'))
  end)

  it("split_between_processes pads with the list's last item, as Accelerate 1.15; gather_object takes lists only",
    function()
    -- process i of 3, as an accelerator's fields (a method refuses a self that is not an accelerator)
    local mt = getmetatable(new_acc {})
    local function rank(i) return setmetatable({ num_processes = 3, process_index = i }, mt) end
    local split = fp8.Accelerator.split_between_processes
    -- Accelerate 1.15 (PartialState.split_between_processes, apply_padding=True): [a, b], [c, d], [d, d]
    assert.are.same({ "c", "d" }, split(rank(1), { "a", "b", "c", "d" }, true))
    assert.are.same({ "d", "d" }, split(rank(2), { "a", "b", "c", "d" }, true))
    assert.are.same({ "a", "b" }, split(rank(0), { "a", "b", "c", "d" }, true))
    assert.are.same({ "b" }, split(rank(2), { "a", "b" }, true))   -- Accelerate's inputs[-1:]
    assert.are.same({}, split(rank(2), { "a", "b" }))
    local acc = new_acc {}
    U.fails_with("gather_object: expected a list, got a table with the key 'acc'", acc.gather_object, acc, { acc = 1 })
    U.fails_with("gather_object: expected a list, got a list with a hole at 2", acc.gather_object, acc, { 1, nil, 3 })
    U.fails_with("gather_for_metrics: expected a list, got a table with the key 'pred'", acc.gather_for_metrics, acc, { pred = "cat" })
    assert.are.same({ 1, false, 3 }, acc:gather_object { 1, false, 3 })
  end)

  it("project_dir, save_iteration and use_distributed read as Accelerate's properties", function()
    local acc = new_acc { project_config = fp8.ProjectConfiguration { project_dir = "/tmp/p", automatic_checkpoint_naming = true,
      iteration = 3 } }
    assert.are.equal("/tmp/p", acc.project_dir)
    assert.are.equal(3, acc.save_iteration)
    acc.project_configuration.iteration = 4
    assert.are.equal(4, acc.save_iteration)
    acc.project_configuration.project_dir = "/tmp/q"   -- (a field set when made kept reading "/tmp/p")
    assert.are.equal("/tmp/q", acc.project_dir)
    assert.is_false(acc.use_distributed)
    assert.is_nil(new_acc {}.project_dir)
  end)

  it("no_sync leaves sync_gradients alone, as Accelerate's: an optimizer step inside it steps", function()
    local acc = new_acc {}
    local m = nn.Linear(4, 2)
    local o = optim.SGD(m:parameters(), { lr = 0.1 })
    m, o = acc:prepare(m, o)
    local w = m.weight:clone()
    acc:no_sync(m, function()
      assert.is_true(acc.sync_gradients)
      acc:backward(m(fp8.randn { 3, 4 }):sum())
      o:step(); o:zero_grad()
    end)
    assert.is_true((m.weight - w):abs():max():item() > 0)
    assert.are.equal(1, acc.step)
    -- the model says whose synchronisation stops: one this accelerator prepared (anything was taken)
    for _, bad in ipairs { { nil, "got nil" }, { 5, "got number" }, { nn.Linear(4, 2), "got Linear" } } do
      U.fails_with("no_sync: model must be a model this accelerator prepared (acc:prepare(model)), " .. bad[2],
        acc.no_sync, acc, bad[1], function() end)
    end
  end)

  it("a coroutine may not yield inside autocast, fp8_autocast or no_sync (their setting would stay on while it waits)",
    function()
    local acc = new_acc { mixed_precision = "bf16" }
    local m = acc:prepare(nn.Linear(4, 2))
    local scopes = {
      { "autocast", function(f) return acc:autocast(f) end },
      { "autocast", function(f) return fp8.amp.autocast("bf16", f) end },
      { "fp8_autocast", function(f) return fp8.fp8_autocast(f) end },
      { "no_sync", function(f) return acc:no_sync(m, f) end },
    }
    for _, sc in ipairs(scopes) do
      local co = coroutine.wrap(function() return sc[2](function() coroutine.yield(1) end) end)
      local ok, err = pcall(co)
      assert.is_false(ok)
      assert.are.equal(sc[1] .. ": a coroutine yielded inside it (not allowed: its setting is process-wide, and would "
        .. "stay on for the rest of the program while the coroutine is suspended); yield outside it", err)
      -- and the setting is off again: the suspended coroutine kept bf16 / FP8 / no_sync on before
      assert.are.same({ "fp32", false, nil }, { fp8.autocast_dtype(), require("fp8.fp8_autocast").enabled(),
        rawget(acc, "_in_no_sync") })
    end
    -- results and errors pass through as before; a yield outside the scope is fine
    assert.are.same({ 3, "bf16" },
      { fp8.amp.autocast("bf16", function(a, b) return a + b, fp8.autocast_dtype() end, 1, 2) })
    local co = coroutine.wrap(function() acc:autocast(function() end); coroutine.yield(5); return 6 end)
    assert.are.same({ 5, 6 }, { co(), co() })
  end)

  it("no_grad, enable_grad and opt:step(closure) name themselves when a coroutine yields inside them", function()
    -- they reported Lua's bare "attempt to yield across a C-call boundary"
    local o = fp8.optim.SGD(nn.Linear(2, 2):parameters(), { lr = 0.1 })
    local cases = {
      { function(f) return fp8.no_grad(f) end, "no_grad: a coroutine yielded inside it (not allowed: grad mode is "
          .. "process-wide, and would stay off for the rest of the program while the coroutine is suspended); yield "
          .. "outside it" },
      { function(f) return fp8.enable_grad(f) end, "enable_grad: a coroutine yielded inside it (not allowed: grad mode "
          .. "is process-wide, and would stay on for the rest of the program while the coroutine is suspended); yield "
          .. "outside it" },
      { function(f) return o:step(f) end, "SGD:step: a coroutine yielded inside the closure (not allowed: it runs with "
          .. "grad mode on, which is process-wide and would stay on while the coroutine is suspended); yield outside "
          .. "opt:step(closure)" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(coroutine.wrap(function() return c[1](function() coroutine.yield(1) end) end))
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), err)
      assert.is_true(fp8.is_grad_enabled())
    end
    -- the closure's own error and result pass through as before
    assert.are.equal(7, o:step(function() return 7 end))
    local ok, err = pcall(o.step, o, function() error({ code = 1 }) end)
    assert.are.same({ false, 1 }, { ok, err.code })
  end)

  it("a backward after clipping and before the step is refused (it would add scaled gradients to unscaled ones)", function()
    local acc = new_acc { mixed_precision = "fp16", gradient_accumulation_steps = 2 }
    local m = nn.Linear(8, 4)
    local o = optim.SGD(m:parameters(), { lr = 0.1 })
    m, o = acc:prepare(m, o)
    local function micro() acc:backward(m(fp8.randn { 4, 8 }):pow(2):mean()) end
    acc:accumulate(m, micro)
    acc:clip_grad_norm_(m:parameters(), 1.0)   -- on a micro-step without sync: the gradients are unscaled now
    U.fails_with("backward: gradients were unscaled (clip_grad_norm_, clip_grad_value_ or unscale_gradients) and no "
      .. "optimizer step followed", function() acc:accumulate(m, micro) end)
    -- clipping only when the gradients sync is the working pattern
    local acc2 = new_acc { mixed_precision = "fp16", gradient_accumulation_steps = 2 }
    local m2 = nn.Linear(8, 4)
    local o2 = optim.SGD(m2:parameters(), { lr = 0.1 })
    m2, o2 = acc2:prepare(m2, o2)
    for _ = 1, 4 do
      acc2:accumulate(m2, function()
        acc2:backward(m2(fp8.randn { 4, 8 }):pow(2):mean())
        if acc2.sync_gradients then acc2:clip_grad_norm_(m2:parameters(), 1.0) end
        o2:step(); o2:zero_grad()
      end)
    end
    assert.are.equal(2, acc2.step)
  end)
end)

describe("errors through prepared objects", function()
  it("a bad argument to a prepared optimizer, scheduler or backward names the caller's line, not fp8's", function()
    local acc = new_acc { cpu = true }
    local m = fp8.nn.Linear(2, 2)
    local o = fp8.optim.SGD(m:parameters(), { lr = 0.1 })
    local s = fp8.optim.lr_scheduler.StepLR(o, { step_size = 1 })
    m, o, s = acc:prepare(m, o, s)
    for _, c in ipairs {
      { function() s:step(1.5) end, "StepLR:step: epoch must be an integer >= 0, got 1.5" },
      { function() o:step(5) end, "SGD:step: closure must be a function, got number" },
      { function() acc:backward(m(fp8.randn { 3, 2 })) end, "grad can be implicitly created only for scalar outputs" },
    } do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), err)
      assert.is_nil(tostring(err):find("lua/fp8/", 1, true), err)      -- was lua/fp8/accelerator.lua:436: ...
      assert.truthy(tostring(err):find("parity_spec.lua:%d+: "), err)
    end
  end)
end)

describe("what Accelerate has and fp8lab does not", function()
  it("options are refused by name, with the reason", function()
    for k, v in pairs { split_batches = true, deepspeed_plugin = {}, fsdp_plugin = {},
                        megatron_lm_plugin = {}, rng_types = { "generator" }, dynamo_backend = "inductor" } do
      U.fails_with({ ("Accelerator: %s is not supported: "):format(k) }, new_acc, { [k] = v })
    end
    -- Accelerate 1.x ignores its Accelerator's split_batches= (a leftover argument): here it points to where it works
    U.fails_with("Accelerator: split_batches is not supported: Accelerate 1.x takes it in its DataLoaderConfiguration "
      .. "only (its Accelerator argument is ignored); pass dataloader_config=fp8.DataLoaderConfiguration{split_batches="
      .. "true}", new_acc, { split_batches = false })
    -- the trackers fp8lab does not have (tensorboard it has: trackers_spec.lua)
    U.fails_with('Accelerator: log_with="wandb" is not available in fp8lab', new_acc, { log_with = "wandb" })
  end)

  it("DataLoaderConfiguration: even_batches and data_seed honoured, the other fields refused away from fp8lab's ways",
    function()
    local items = {}
    for i = 1, 10 do items[i] = { fp8.tensor { i }, i } end
    local function first(acc, seed)
      local l = acc:prepare(fp8.data.DataLoader { items, batch_size = 10, shuffle = true, seed = seed })
      for x in l do return table.concat(x:reshape { -1 }:tolist(), ",") end
    end
    local cfg = fp8.DataLoaderConfiguration { use_seedable_sampler = true, data_seed = 7 }
    local acc = new_acc { dataloader_config = cfg }
    -- data_seed wins over the loader's own seed: the order is that of a loader seeded 7
    assert.are.equal(first(new_acc {}, 7), first(acc, 5))
    assert.are_not.equal(first(new_acc {}, 5), first(acc, 5))
    assert.are.equal(7, acc.dataloader_config.data_seed)
    assert.is_false(new_acc { dataloader_config = fp8.DataLoaderConfiguration { even_batches = false } }.even_batches)
    assert.is_true(new_acc {}.dataloader_config.even_batches)
    -- split_batches (what it does under several processes: dist2_spec.lua, dist_spec.lua); one process: its loader
    local sa = new_acc { dataloader_config = fp8.DataLoaderConfiguration { split_batches = true } }
    assert.is_true(sa.split_batches)
    assert.matches("even_batches=true, split_batches=true, step_scheduler", tostring(sa:state()), 1, true)
    assert.are.equal(first(new_acc {}, 5), first(sa, 5))
    assert.is_false(new_acc {}.split_batches)
    for _, c in ipairs {
      { { split_batches = 1 }, "split_batches must be a boolean, got number" },
      { { dispatch_batches = true }, "dispatch_batches=true is not supported: every process reads its own share" },
      { { use_seedable_sampler = false }, "use_seedable_sampler=false is not supported: fp8lab's loaders always" },
      { { non_blocking = true }, "non_blocking=true is not supported: batches are copied to the device synchronously" },
      { { use_stateful_dataloader = 1 }, "use_stateful_dataloader must be a boolean, got number" },
      { { data_seed = 3 }, "data_seed seeds the seedable sampler: pass use_seedable_sampler=true with it" },
      { { even_batches = "no" }, "even_batches must be a boolean, got string" },
      { { dispatch_batche = false }, "unknown option 'dispatch_batche' (did you mean 'dispatch_batches'?)" },
    } do
      U.fails_with("DataLoaderConfiguration: " .. c[2], fp8.DataLoaderConfiguration, c[1])
    end
    U.fails_with("Accelerator: even_batches given twice", new_acc,
      { dataloader_config = fp8.DataLoaderConfiguration {}, even_batches = false })
    U.fails_with("Accelerator: dataloader_config must be an fp8.DataLoaderConfiguration{...}, got table", new_acc,
      { dataloader_config = {} })
  end)

  it("methods are refused by name, with the reason; other missing names stay nil", function()
    local acc = new_acc {}
    -- (end_training is not among them: it finishes the trackers, and Accelerate's ends the process group, which here
    -- ends at exit; nor are the tracker methods: trackers_spec.lua)
    for _, k in ipairs { "join_uneven_inputs", "prepare_pippy" } do
      U.fails_with(("Accelerator:%s is not supported: "):format(k), acc[k], acc)
    end
    assert.is_nil(acc.no_such_method)
  end)

  it("device_placement=false leaves models and loaders where they are", function()
    local cuda = require "fp8.cuda"
    local real = cuda.is_available
    cuda.is_available = function() return true end   -- as if a GPU were usable
    local ok, err = pcall(function()
      local acc = new_acc { device_placement = false }
      assert.are.equal("cuda", acc:device())
      local m, ld = acc:prepare(nn.Linear(4, 2), fp8.data.DataLoader { { 1, 2, 3 }, batch_size = 2 })
      assert.are.equal("cpu", m.weight:device())
      assert.are.equal("cpu", ld.device)
      -- the default moves them (on a machine without a GPU the move itself fails, which shows it was tried)
      local acc2 = new_acc {}
      local ok2, m2 = pcall(acc2.prepare, acc2, nn.Linear(4, 2))
      assert.is_true(not ok2 or m2.weight:device() == "cuda")
    end)
    cuda.is_available = real
    assert(ok, err)
    U.fails_with("Accelerator: device_placement must be a boolean, got string", new_acc, { device_placement = "no" })
  end)
end)

describe("prepare's model API, from a review against Accelerate", function()
  it("MS-AMP prepares one model with its optimizer, once (an optimizer prepared apart updated tensors the model dropped)", function()
    local function acc() return new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.FP8RecipeKwargs { backend = "msamp" } } } end
    local m = nn.Sequential(nn.Linear(16, 16))
    local a = acc()
    U.fails_with("pass a model and its optimizer together to acc:prepare() when using MS-AMP", a.prepare, a, m)
    U.fails_with("pass a model and its optimizer together", a.prepare, a, fp8.optim.AdamW(m:parameters()))
    U.fails_with("MS-AMP takes one model and one optimizer per prepare call, got 2 models", a.prepare, a, m, m, fp8.optim.AdamW(m:parameters()))
    local pm = a:prepare(m, fp8.optim.AdamW(m:parameters()))
    -- (an AdamW over pm's own parameters is refused as it is made: MS-AMP O2 keeps them in fp16)
    U.fails_with("AdamW: group 1 params[1] is fp16", fp8.optim.AdamW, pm:parameters())
    U.fails_with("this model is already prepared", a.prepare, a, pm, fp8.optim.AdamW(nn.Linear(16, 16):parameters()))
  end)

  it("an optimizer prepared again is returned as it is; a scheduler skips only when its own optimizer skipped", function()
    fp8.manual_seed(0)
    local a, b = nn.Linear(16, 16), nn.Linear(16, 16)
    local oa = fp8.optim.AdamW(a:parameters(), { lr = 1e-2 })
    local ob = fp8.optim.AdamW(b:parameters(), { lr = 1e-2 })
    local L = fp8.optim.lr_scheduler
    local sa, sb = L.StepLR(oa, { step_size = 1, gamma = 0.5 }), L.StepLR(ob, { step_size = 1, gamma = 0.5 })
    local acc = new_acc { mixed_precision = "fp16" }
    a, b, oa, ob, sa, sb = acc:prepare(a, b, oa, ob, sa, sb)
    assert.are.equal(oa, acc:prepare(oa))
    assert.are.equal(oa, acc:prepare_optimizer(oa))
    assert.are.equal(2, #acc._optimizers)
    local x = fp8.randn(4, 16)
    acc:backward(a(x):pow(2):mean() + b(x * 1e30):pow(2):mean())   -- b's gradients overflow
    oa:step(); ob:step()
    assert.is_false(rawget(oa, "step_was_skipped")); assert.is_true(rawget(ob, "step_was_skipped"))
    sa:step(); sb:step()
    assert.are.equal(0.005, sa:get_last_lr()[1])
    assert.are.equal(0.01, sb:get_last_lr()[1])
  end)

  it("unwrap_model(m, false) under te turns a converted root layer back; prepare_* take one argument", function()
    local acc = new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.FP8RecipeKwargs { backend = "te" } } }
    for _, make in ipairs { function() return nn.Linear(32, 32) end, function() return nn.LayerNorm(32) end } do
      local u = acc:unwrap_model(acc:prepare(make()), false)
      assert.is_false(fp8.has_fp8_layers(u))
      assert.is_nil(u:state_dict()["fp8_state"])
    end
    U.fails_with("prepare_model: takes one argument (Accelerate's device_placement and evaluation_mode are not supported)",
      acc.prepare_model, acc, nn.Linear(2, 2), false)
    U.fails_with("prepare_model: expected model, got number", acc.prepare_model, acc, 42)
    U.fails_with("prepare_optimizer: expected optimizer, got string", acc.prepare_optimizer, acc, "x")
  end)

  it("get_state_dict of an ao model loads into a plain model; the inf-norm clips MS-AMP's FP8 gradients", function()
    local acc = new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.AORecipeKwargs { module_filter_func = function() return true end } } }
    local m = acc:prepare(nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32)))
    local fresh = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    fresh:load_state_dict(acc:get_state_dict(m))   -- strict: no fp8_state keys
    local acc2 = new_acc { mixed_precision = "fp8", kwargs_handlers = { fp8.FP8RecipeKwargs { backend = "msamp" } } }
    local m2 = nn.Sequential(nn.Linear(16, 16))
    local opt
    m2, opt = acc2:prepare(m2, fp8.optim.AdamW(m2:parameters()))
    acc2:backward(m2(fp8.randn(4, 16)):pow(2):sum())
    local n = acc2:clip_grad_norm_(m2:parameters(), 1e-3, "inf")
    assert.is_true(n > 0 and n < math.huge)
  end)
end)
