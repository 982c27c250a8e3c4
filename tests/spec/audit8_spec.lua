-- Found or changed on 2026-12-06 (stop 92): the Lua layers pick a fused kernel by asking the device's op table
-- (fp8.core._device_has, core/device.c fl_device_has_entry) rather than by the device's name.
local F = fp8.nn.F
local core = require "fp8.core"   -- the C half, where the layers ask

-- runs f with core._device_has answering false for the entries in `off`
local function without(off, f)
  local real = core._device_has
  core._device_has = function(dev, entry)
    if off[entry] then return false end
    return real(dev, entry)
  end
  local ok, err = pcall(f)
  core._device_has = real
  assert(ok, err)
end

describe("fused paths chosen by the device's entries", function()
  it("answers from the op table and refuses what is not an entry", function()
    assert.is_true(core._device_has("cpu", "chnorm_fwd"))
    assert.is_true(core._device_has("cpu", "rmsprop"))
    assert.is_true(core._device_has("cpu", "matmul"))
    if not fp8.cuda.is_available() then
      assert.is_false(core._device_has("cuda", "matmul"))   -- no GPU: nothing to run it on
    end
    local ok, err = pcall(core._device_has, "cpu", "chnorm_forward")
    assert.is_false(ok)
    assert.matches("no device entry is called 'chnorm_forward'", err, 1, true)
    ok, err = pcall(core._device_has, "tpu", "matmul")
    assert.is_false(ok)
    assert.matches("unknown device 'tpu'", err, 1, true)
    ok, err = pcall(core._device_has, "cpu")
    assert.is_false(ok)
  end)

  it("group_norm takes the fused kernel only where the device has it", function()
    fp8.manual_seed(3)
    local x = fp8.randn { 4, 6, 5 }
    local w, b = fp8.randn { 6 }, fp8.randn { 6 }
    local xa = x:clone():requires_grad_()
    local ya = F.group_norm(xa, 3, w, b)
    local fused_fn = ya:grad_fn()
    local yb, xb
    without({ chnorm_fwd = true }, function()
      xb = x:clone():requires_grad_()
      yb = F.group_norm(xb, 3, w, b)
    end)
    assert.are_not.equal(fused_fn, yb:grad_fn())   -- the composite's last node
    ya:sum():backward(); yb:sum():backward()
    assert.is_true(((ya - yb):abs():max():item()) < 1e-5)
    assert.is_true(((xa.grad - xb.grad):abs():max():item()) < 1e-5)
  end)

  it("RMSprop and Adagrad call their kernels only where the device has them, with the same bits", function()
    local C = require "fp8._optim"
    for _, case in ipairs { { "RMSprop", "rmsprop", "rmsprop_step", { lr = 0.01, momentum = 0.9, centered = true } },
                            { "Adagrad", "adagrad", "adagrad_step", { lr = 0.1, lr_decay = 0.01 } } } do
      local name, entry, fn, opts = case[1], case[2], case[3], case[4]
      local function run()
        fp8.manual_seed(5)
        local p = fp8.randn { 40 }:requires_grad_()
        local opt = fp8.optim[name]({ p }, opts)
        for _ = 1, 3 do
          opt:zero_grad();
          (p * p):sum():backward()
          opt:step()
        end
        return p:detach()
      end
      local real, calls = C[fn], 0
      C[fn] = function(...) calls = calls + 1; return real(...) end
      local pa = run()
      local fused_calls = calls
      calls = 0
      local pb
      without({ [entry] = true }, function() pb = run() end)
      C[fn] = real
      assert.are.equal(3, fused_calls, name)
      assert.are.equal(0, calls, name)
      assert.are.same(pa:totable(), pb:totable())   -- the composite's bits
    end
  end)
end)

describe("resample: interpolate's weighted sums in one pass (core/resample.c)", function()
  local NN = require("fp8.core")._nn

  -- the composite it replaced: one index_select per tap, each times its weights, added left to right
  local function composite(x, d, taps, pos, w)
    local m = #pos // taps
    local shape = { m }
    for _ = d + 1, x:dim() do shape[#shape + 1] = 1 end
    local y
    for t = 1, taps do
      local p, ws = {}, {}
      for j = 1, m do p[j], ws[j] = pos[(j - 1) * taps + t], w[(j - 1) * taps + t] end
      local term = x:index_select(d, fp8.tensor(p)) * fp8.tensor(ws):reshape(shape)
      y = y and y + term or term
    end
    return y
  end

  it("gives the composite's bits forward and its gradient to rounding", function()
    fp8.manual_seed(11)
    local rng = fp8.Generator and nil
    for _, c in ipairs { { { 3, 5, 7 }, 3, 2, 11 }, { { 3, 5, 7 }, 2, 4, 9 }, { { 2, 6, 4, 5 }, 3, 4, 1 },
                         { { 4, 33 }, 1, 1, 6 }, { { 2, 3, 8, 9 }, 4, 4, 20 } } do
      local shape, d, taps, m = c[1], c[2], c[3], c[4]
      local n = shape[d]
      local pos, w = {}, {}
      for k = 1, m * taps do
        pos[k] = (k * 7 + 3) % n
        w[k] = fp8.randn({ 1 }):item()
      end
      local x = fp8.randn(shape)
      local xa, xb = x:clone():requires_grad_(), x:clone():requires_grad_()
      local ya, yb = NN.resample(xa, d, taps, pos, w), composite(xb, d, taps, pos, w)
      assert.are.same(yb:shape(), ya:shape())
      assert.are.equal(0, (ya - yb):abs():max():item())   -- the same bits
      assert.are.equal("ResampleBackward", ya:grad_fn())
      local g = fp8.randn(ya:shape())
      ya:backward(g); yb:backward(g)
      local err = (xa.grad - xb.grad):abs():max():item()
      assert.is_true(err <= 1e-5 * math.max(1, xb.grad:abs():max():item()), ("gradient off by %g"):format(err))
      -- a strided input reads the same values
      local xt = x:transpose(1, #shape):contiguous():transpose(1, #shape)
      assert.are.equal(0, (NN.resample(xt, d, taps, pos, w) - yb):abs():max():item())
    end
  end)

  it("refuses what it cannot compute, naming it", function()
    local x = fp8.randn { 2, 3, 4 }
    local cases = {
      { "source position 4 out of range 0..3 for dim 3", x, 3, 2, { 0, 4 }, { 1, 1 } },
      { "source position -1 out of range", x, 3, 1, { -1 }, { 1 } },
      { "pos and w must be lists of one equal length", x, 3, 2, { 0, 1 }, { 1 } },
      { "a positive multiple of taps 2", x, 3, 2, { 0, 1, 2 }, { 1, 1, 1 } },
      { "a positive multiple of taps 2", x, 3, 2, {}, {} },
      { "taps must be an integer in [1, 8]", x, 3, 9, { 0 }, { 1 } },
      { "dim must be an integer in [1, 3]", x, 4, 1, { 0 }, { 1 } },
      { "pos[2] must be an integer, got number", x, 3, 1, { 0, 1.5 }, { 1, 1 } },
      { "w[1] must be a number, got string", x, 3, 1, { 0 }, { "a" } },
      { "weight 1 of position 0 is inf", x, 3, 1, { 0 }, { math.huge } },
      { "expected an fp32 input, got bf16", x:to("bf16"), 3, 1, { 0 }, { 1 } },
      { "too many arguments", x, 3, 1, { 0 }, { 1 }, 5 },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(NN.resample, table.unpack(c, 2, #c))
      assert.is_false(ok, c[1])
      assert.matches(c[1], tostring(err), 1, true)
    end
  end)

  it("interpolate's linear and cubic modes take it, bicubic with torch's edge clamping", function()
    local x = fp8.randn { 1, 2, 5, 6 }
    local y = F.interpolate(x:clone():requires_grad_(), { size = { 7, 3 }, mode = "bicubic" })
    assert.are.equal("ResampleBackward", y:grad_fn())
    assert.are.same({ 1, 2, 7, 3 }, y:shape())
    -- a constant image stays constant: the four weights sum to 1 and the clamped edges repeat the border
    local c = F.interpolate(fp8.full({ 1, 1, 4, 4 }, 2.5), { scale_factor = 3, mode = "bicubic" })
    assert.is_true((c - 2.5):abs():max():item() <= 5e-7)   -- 2 ulps (torch: 1.4e-6, 6 ulps)
  end)
end)

describe("group_norm with no channels", function()
  it("is refused as torch refuses it (it returned an empty result)", function()
    local ok, err = pcall(F.group_norm, fp8.randn { 2, 0, 3 }, 1)
    assert.is_false(ok)
    assert.matches("group_norm: expected number of channels to be greater than 0, got 0", err, 1, true)
    assert.are.same({ 0, 4, 3 }, F.group_norm(fp8.randn { 0, 4, 3 }, 2):shape())   -- an empty batch stays allowed
  end)
end)

describe("EmbeddingBag's max mode and per_sample_weights in one pass (core/embedding_bag.c)", function()
  local nn = fp8.nn
  local function bits(name, a, b)
    assert.are.same(b:shape(), a:shape(), name)
    local x, y = a:reshape(-1):totable(), b:reshape(-1):totable()
    for i = 1, #x do
      assert.is_true(x[i] == y[i] or (x[i] ~= x[i] and y[i] ~= y[i]), ("%s[%d]: %.9g vs %.9g"):format(name, i, x[i], y[i]))
    end
  end
  -- the composites they replaced (lua/fp8/nn/embedding_bag.lua before): max over each bag's rows padded by its last
  -- kept entry, zeros for an empty bag; a weighted sum as the embedding times the weights, index_add into the bags
  local function ref_max(ids, starts, weight, pad)
    local B, D = #starts - 1, weight:size(2)
    local kept, Lmax = {}, 0
    for b = 1, B do
      local k = {}
      for j = starts[b] + 1, starts[b + 1] do if ids[j] ~= pad then k[#k + 1] = j end end
      kept[b], Lmax = k, math.max(Lmax, #k)
    end
    if Lmax == 0 then return fp8.zeros { B, D } + weight:sum() * 0 end
    local at, full = {}, {}
    for b = 1, B do
      local k = kept[b]
      for t = 1, Lmax do at[#at + 1] = ids[k[math.min(t, #k)] or 1] end
      full[b] = #k == 0 and 0 or 1
    end
    local e = F.embedding(fp8.tensor(at), weight):reshape({ B, Lmax, D })
    return e:max(2) * fp8.tensor(full):reshape({ B, 1 })
  end
  local function ref_psw(ids, starts, weight, psw, pad)
    local tok, bag_of, pos = {}, {}, {}
    for b = 1, #starts - 1 do
      for j = starts[b] + 1, starts[b + 1] do
        if ids[j] ~= pad then tok[#tok + 1] = ids[j]; bag_of[#bag_of + 1] = b - 1; pos[#pos + 1] = j - 1 end
      end
    end
    local e = F.embedding(fp8.tensor(tok), weight) * psw:index_select(1, fp8.tensor(pos)):reshape({ #pos, 1 })
    return fp8.zeros({ #starts - 1, weight:size(2) }):index_add(1, fp8.tensor(bag_of), e)
  end

  it("give the composite's bits, values and the weight's gradient; psw's gradient to rounding", function()
    local r = math.random
    math.randomseed(92)
    for case = 1, 30 do
      local V, D, n = r(1, 12), r(1, 40), r(1, 24)
      local pad = r() < 0.3 and r(0, V - 1) or nil
      local ids, starts = {}, { 0 }
      for i = 1, n do ids[i] = r(0, V - 1) end
      for _ = 1, r(1, 6) - 1 do starts[#starts + 1] = math.min(n, starts[#starts] + r(0, 6)) end
      starts[#starts + 1] = n
      local off = {}
      for b = 1, #starts - 1 do off[b] = starts[b] end
      local name = ("case %d V=%d D=%d n=%d pad=%s"):format(case, V, D, n, tostring(pad))
      -- max: rows with ties (few distinct values) and, in some cases, a NaN
      local mm = nn.EmbeddingBag(V, D, { mode = "max", padding_idx = pad })
      fp8.no_grad(function()
        mm.weight:copy_((fp8.randn { V, D } * 2):round())
        if case % 5 == 0 then mm.weight:narrow(1, 1, 1):narrow(2, 1, 1):fill_(0 / 0) end
      end)
      local y = mm(fp8.tensor(ids), fp8.tensor(off))
      assert.are.equal("EmbeddingBagBackward", y:grad_fn(), name)
      local w2 = mm.weight:detach():clone():requires_grad_()
      local want = ref_max(ids, starts, w2, pad)
      bits(name .. " max", y, want)
      local g = fp8.randn(y:shape())
      ;(y * g):sum():backward()
      ;(want * g):sum():backward()
      bits(name .. " max grad", mm.weight.grad, w2.grad)
      -- sum with per_sample_weights
      local ms = nn.EmbeddingBag(V, D, { mode = "sum", padding_idx = pad })
      local p = fp8.randn { n }:requires_grad_()
      local ys = ms(fp8.tensor(ids), fp8.tensor(off), p)
      assert.are.equal("EmbeddingBagBackward", ys:grad_fn(), name)
      local w3, p3 = ms.weight:detach():clone():requires_grad_(), p:detach():clone():requires_grad_()
      local want_s = ref_psw(ids, starts, w3, p3, pad)
      bits(name .. " psw", ys, want_s)
      local gs = fp8.randn(ys:shape())
      ;(ys * gs):sum():backward()
      ;(want_s * gs):sum():backward()
      bits(name .. " psw weight grad", ms.weight.grad, w3.grad)
      local err = (p.grad - p3.grad):abs():max():item()
      assert.is_true(err <= 1e-5 * math.max(1, p3.grad:abs():max():item()), name .. (" psw grad off by %g"):format(err))
    end
  end)

  it("torch's values for a max with a NaN and ties, and gradients that reach only the first maximum", function()
    local m = nn.EmbeddingBag(3, 2, { mode = "max" })
    fp8.no_grad(function() m.weight:copy_(fp8.tensor { { 1, 0 / 0 }, { 1, 5 }, { 2, 5 } }) end)
    local y = m(fp8.tensor { 1, 0, 2, 1 }, fp8.tensor { 0, 2, 2 })   -- bags {1, 0}, {}, {2, 1}
    local v = y:totable()
    assert.are.same({ 1, 5 }, { v[1][1], v[3][2] })
    assert.is_true(v[1][2] ~= v[1][2])                    -- the NaN wins
    assert.are.same({ 0, 0 }, v[2])                       -- an empty bag
    assert.are.same({ 2, 5 }, v[3])
    y:sum():backward()
    -- column 1 of bag 1: rows 1 and 0 tie at 1, the first (row 1) takes it; column 2 of bag 3: rows 2 and 1 tie at 5
    assert.are.same({ { 0, 1 }, { 1, 0 }, { 1, 1 } }, m.weight.grad:totable())
  end)

  it("keeps the composite for 16-bit weights and refuses per_sample_weights outside sum", function()
    local w = fp8.randn({ 5, 3 }):to("bf16"):requires_grad_()
    local y = F.embedding_bag(fp8.tensor { 1, 2 }, w, fp8.tensor { 0 }, { mode = "sum", per_sample_weights = fp8.tensor { 0.5, 2 } })
    assert.are_not.equal("EmbeddingBagBackward", y:grad_fn())
    local ok, err = pcall(nn.EmbeddingBag(5, 3, { mode = "max" }), fp8.tensor { 1, 2 }, fp8.tensor { 0 },
      fp8.tensor { 0.5, 2 })
    assert.is_false(ok)
    assert.matches("per_sample_weights are only supported for mode \"sum\"", err, 1, true)
  end)
end)

describe("a torch user's port (a review, 2026-12-06)", function()
  it("softmax without dim: torch's implicit choice up to 2-d, refused past it (the last dim was taken)", function()
    local x2 = fp8.tensor { { 1, 2, 3 }, { 0, 0, 1 } }
    assert.are.same(F.softmax(x2, 2):totable(), F.softmax(x2):totable())
    assert.are.same(F.log_softmax(fp8.tensor { 1, 2 }, 1):totable(), F.log_softmax(fp8.tensor { 1, 2 }):totable())
    local x3 = fp8.arange(8):reshape { 2, 2, 2 }
    for _, f in ipairs { { F.softmax, "softmax" }, { F.log_softmax, "log_softmax" }, { F.softmin, "softmin" } } do
      local ok, err = pcall(f[1], x3)
      assert.is_false(ok)
      assert.matches(f[2] .. ": give dim for a 3-d input (torch's implicit choice, deprecated, would take dim 1", err, 1,
        true)
    end
    local m = fp8.nn.Softmax()
    assert.are.equal("Softmax(dim=None)", tostring(m))
    local ok, err = pcall(m, fp8.randn { 1, 2, 2, 2 })
    assert.is_false(ok)
    assert.matches("would take dim 2, not the last", err, 1, true)
    local s = fp8.nn.Softmax(2)(x3):sum(2)   -- an explicit dim is taken as given
    assert.is_true((s - 1):abs():max():item() < 1e-6)
    assert.are.equal("GLU(dim=-1)", tostring(fp8.nn.GLU()))
  end)

  it("an autograd.Function's backward error is its own, not a hook's", function()
    local Fn = fp8.autograd.Function { forward = function(ctx, x) return x * 2 end,
                                       backward = function(ctx, g) error("my bug") end }
    local x = fp8.ones(2):requires_grad_()
    local ok, err = pcall(function() Fn.apply(x):sum():backward() end)
    assert.is_false(ok)
    assert.matches("my bug", err, 1, true)
    assert.is_nil(err:find("hook", 1, true), err)
    local Fn2 = fp8.autograd.Function { forward = function(ctx, x) return x * 2 end,
                                        backward = function(ctx, g) return g, g end }
    ok, err = pcall(function() Fn2.apply(x):sum():backward() end)
    assert.matches("backward returned an incorrect number of gradients", err, 1, true)
    assert.is_nil(err:find("hook raised", 1, true), err)
    -- a real hook's error keeps its prefix
    local t = fp8.ones(2):requires_grad_()
    t:register_hook(function() error("hook bug") end)
    ok, err = pcall(function() (t * 2):sum():backward() end)
    assert.matches("backward: a tensor's hook raised: .*hook bug", err)
  end)

  it("names a fractional or NaN index as such", function()
    local x = fp8.randn { 3, 4 }
    local cases = {
      { "gather: index 3.5 is not a whole number (dim 2 of size 4 takes 0..3)", function() return x:gather(2, fp8.full({ 3, 1 }, 3.5)) end },
      { "gather: index NaN for dim 2 of size 4", function() return x:gather(2, fp8.full({ 3, 1 }, 0 / 0)) end },
      { "gather: index 4 out of range 0..3 for dim 2 of size 4", function() return x:gather(2, fp8.full({ 3, 1 }, 4)) end },
      { "index_add: index 2.5 is not a whole number", function() return x:index_add(2, fp8.tensor { 2.5 }, fp8.ones { 3, 1 }) end },
      { "scatter: index 0.5 is not a whole number", function() return x:scatter(2, fp8.full({ 3, 1 }, 0.5), 1) end },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(c[2])
      assert.is_false(ok)
      assert.matches(c[1], err, 1, true)
    end
    local p = fp8.ones(2):requires_grad_()
    p.grad = fp8.tensor { 0 / 0, 1 }
    local ok, err = pcall(fp8.nn.utils.clip_grad_norm_, { p }, 1, 2, true)
    assert.is_false(ok)
    assert.matches("is non-finite (NaN)", err, 1, true)
  end)

  it("points a positional torch argument at its option name", function()
    local ok, err = pcall(F.cross_entropy, fp8.randn { 2, 3 }, fp8.tensor { 0, 1 }, fp8.ones { 3 })
    assert.is_false(ok)
    assert.matches("cross_entropy: options must be a table {name = value} (torch's later positional arguments go in "
      .. "it by name: ignore_index, label_smoothing, reduction, weight), got a tensor", err, 1, true)
    ok, err = pcall(F.pad, fp8.randn { 1, 2, 3 }, { 1, 1 }, "reflect")
    assert.matches("by name: mode, value), got \"reflect\"", err, 1, true)
  end)

  it("cat leaves out a 1-d empty tensor beside others, as torch's legacy rule", function()
    assert.are.same({ 2, 3 }, fp8.cat({ fp8.tensor {}, fp8.ones { 2, 3 } }):shape())
    assert.are.same({ 3, 3 }, fp8.cat({ fp8.ones { 2, 3 }, fp8.tensor {}, fp8.ones { 1, 3 } }):shape())
    assert.are.same({ 2, 6 }, fp8.cat({ fp8.tensor {}, fp8.ones { 2, 3 }, fp8.ones { 2, 3 } }, 2):shape())
    assert.are.same({ 0 }, fp8.cat({ fp8.tensor {}, fp8.tensor {} }):shape())
    local ok, err = pcall(fp8.cat, { fp8.zeros { 0, 3 }, fp8.ones { 2, 4 } })   -- a 2-d empty one is still checked
    assert.is_false(ok)
    assert.matches("they may differ only in dim 1", err, 1, true)
    local a = fp8.ones({ 2, 3 }):requires_grad_()
    fp8.cat({ fp8.tensor {}, a }):sum():backward()
    assert.are.equal(6, a.grad:sum():item())
  end)
end)

describe("checkpoints and settings (an Accelerate review, 2026-12-06)", function()
  local function tmpdir()
    local d = os.tmpname()
    os.remove(d)
    assert(os.execute("mkdir -p " .. d))
    return d
  end
  local function setup(mk_opt, mk_sched)
    local acc = fp8.Accelerator { config = false, env = {} }
    fp8.manual_seed(1)
    local m = fp8.nn.Linear(2, 2)
    local o = mk_opt(m:parameters())
    local s = mk_sched and mk_sched(o)
    if s then m, o, s = acc:prepare(m, o, s) else m, o = acc:prepare(m, o) end
    return acc, m, o, s
  end
  local SGD = function(p) return fp8.optim.SGD(p, { lr = 1 }) end
  local S = fp8.optim.lr_scheduler

  it("save_model refuses a save_state checkpoint's directory", function()
    local d = tmpdir()
    local acc, m, o = setup(SGD)
    acc:save_state(d .. "/ck")
    local ok, err = pcall(acc.save_model, acc, m, d .. "/ck")
    assert.is_false(ok)
    assert.matches("holds a save_state checkpoint", err, 1, true)
    ok, err = pcall(acc.save_model, acc, m, d .. "/ck", { max_shard_size = 100 })
    assert.is_false(ok)
    acc:load_state(d .. "/ck")   -- the checkpoint is whole
    assert.is_truthy(acc:save_model(m, d .. "/weights"))
    os.execute("rm -rf " .. d)
  end)

  it("load_state refuses a scheduler of other settings or class, and another optimizer", function()
    local d = tmpdir()
    local acc, _, o, s = setup(SGD, function(opt) return S.StepLR(opt, 1, 0.5) end)
    for _ = 1, 3 do o:step(); s:step() end
    acc:save_state(d .. "/ck")
    local a2, _, o2 = setup(SGD, function(opt) return S.StepLR(opt, 1, 0.5) end)
    a2:load_state(d .. "/ck")
    assert.are.equal(0.125, o2.param_groups[1].lr)
    for _, mk in ipairs { function(opt) return S.StepLR(opt, 10, 0.5) end,
                          function(opt) return S.StepLR(opt, 1, 0.1) end,
                          function(opt) return S.CosineAnnealingLR(opt, 4) end } do
      local a3, _, o3 = setup(SGD, mk)
      local ok, err = pcall(a3.load_state, a3, d .. "/ck")
      assert.is_false(ok)
      assert.matches("load_state: scheduler 1 of", err, 1, true)
      assert.are.equal(1, o3.param_groups[1].lr)   -- nothing changed
      a3:load_state(d .. "/ck", { strict = false })   -- this run's schedule from the saved step
    end
    local da = d .. "/adamw"
    local a4 = setup(function(p) return fp8.optim.AdamW(p) end)
    a4:save_state(da)
    local a5 = setup(function(p) return fp8.optim.Adam(p) end)
    local ok, err = pcall(a5.load_state, a5, da)
    assert.is_false(ok)
    assert.matches("holds AdamW's state, this run's optimizer is Adam", err, 1, true)
    ok, err = pcall(a5.load_state, a5, d .. "/nothing")
    assert.matches("does not exist", err, 1, true)
    os.execute("rm -rf " .. d)
  end)

  it("refuses handlers that would change nothing", function()
    local ok, err = pcall(fp8.Accelerator, { config = false, env = {}, kwargs_handlers = { fp8.AutocastKwargs { enabled = false } } })
    assert.is_false(ok)
    assert.matches("AutocastKwargs needs mixed precision", err, 1, true)
    local acc = fp8.Accelerator { config = false, env = {}, mixed_precision = "fp8",
                                  kwargs_handlers = { fp8.AORecipeKwargs { pad_inner_dim = false } } }
    ok, err = pcall(acc.prepare, acc, fp8.nn.Sequential(fp8.nn.Linear(32, 32), fp8.nn.Linear(32, 32)))
    assert.is_false(ok)
    assert.matches("pad_inner_dim=false changes nothing without a module_filter_func", err, 1, true)
  end)
end)

describe("the merged C code under hostile shapes (a review, 2026-12-06)", function()
  local NN = require("fp8._nn")
  it("attention with no gradient checks the probabilities' size (T·T wrapped: a segfault)", function()
    local q = fp8.zeros { 1, 1, 2 ^ 32, 0 }
    local ok, err = pcall(F.scaled_dot_product_attention, q, q, q)
    assert.is_false(ok)
    assert.matches("too large", err, 1, true)
    local e = fp8.zeros { 2, 3, 5, 0 }
    assert.are.same({ 2, 3, 5, 0 }, F.scaled_dot_product_attention(e, e, e):shape())
  end)

  it("an avg pool's window mostly in its padding visits only the positions it covers (it walked every offset)", function()
    local x = fp8.randn { 1, 2, 2, 2 }
    -- every window covers the whole 2 × 2 plane: each average is the plane's mean
    local y = F.avg_pool2d(x, { 16, 1 << 24 }, { stride = 1, padding = { 8, 1 << 23 }, count_include_pad = false })
    assert.are.same({ 1, 2, 3, 3 }, y:shape())
    for c = 1, 2 do
      local want = x:select(2, c):mean():item()
      local got = y:select(2, c)
      assert.is_true((got - want):abs():max():item() < 1e-6)
    end
    local xg = x:clone():requires_grad_()
    F.avg_pool2d(xg, { 16, 1 << 24 }, { stride = 1, padding = { 8, 1 << 23 }, count_include_pad = false }):sum():backward()
    assert.is_true((xg.grad - 9 / 4):abs():max():item() < 1e-6)   -- nine windows, each a quarter to every position
  end)

  it("a conv without input channels gives its bias", function()
    local y = NN.conv2d_cols(fp8.zeros { 2, 0, 3, 3 }, fp8.zeros { 4, 0, 1, 1 }, fp8.tensor { 1, 2, 3, 4 },
      { 1, 1, 1, 1, 1, 1, 0, 0, 0, 0 }, 1, false, false)
    assert.are.same({ 2, 4, 3, 3 }, y:shape())
    assert.are.equal(180, y:sum():item())
    assert.are.equal(4, y:select(2, 4):max():item())
  end)
end)
