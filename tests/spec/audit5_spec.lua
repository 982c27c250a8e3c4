-- Found on 2026-12-05 (stop 89) by a read of the CUDA code changed since its last GPU run against the CPU code and
-- torch: dropout's forward drops as x·0 (a NaN or an infinity stays NaN, a negative gives -0, as torch's
-- x·mask/(1−p)), but its backward wrote a literal 0 where it dropped, where torch's gradient is dy·mask·scale: a
-- NaN or infinite gradient at a dropped element vanished instead of reaching the leaf, and a negative one gave +0.
-- Both devices now compute dy·(mask ? scale : 0) (core/cpu/cpu_nn_act.c, kernels/activation.cu).
-- Then, comparing more composite ops with torch at NaN and infinite inputs: the p-norms' last step (the root of a sum
-- of |x|^p, taken where the sum is > 0 so that a zero row keeps a finite gradient) and |x|^p for p < 1 (likewise on
-- |x| > 0) sent a NaN to the "zero" side: the distance of a point with a NaN coordinate was 0 (cdist,
-- pairwise_distance, dist with p other than 1, 2 and inf) and normalize divided the row by eps (1e12 where torch's
-- gives NaN). Both select on ≠ 0 now (lua/fp8/tensor_math.lua).
-- A helper then ran 522 cases (losses, functional ops, reductions, modules, optimizers) with NaN and infinite inputs
-- against torch 2.15; the cases below are what it found where fp8lab hid a NaN or an infinity torch's keeps, or gave
-- a wrong gradient (the values expected are torch 2.15's).

describe("dropout's backward", function()
  local F = fp8.nn.functional

  local function grad_of(p, g)
    local x = fp8.tensor({ 1, -2, 3, 4 }):requires_grad_()
    F.dropout(x, p):backward(fp8.tensor(g))
    return x.grad:totable()
  end

  it("is dy·0 where it dropped, as torch's: a NaN or infinite gradient stays NaN, a negative one gives -0", function()
    local d = grad_of(1.0, { 0 / 0, math.huge, -3, 2 })   -- p = 1 drops every element
    assert.is_true(d[1] ~= d[1], "NaN · 0")
    assert.is_true(d[2] ~= d[2], "inf · 0")
    assert.are.equal("-0.0", ("%.1f"):format(d[3]))
    assert.are.equal("0.0", ("%.1f"):format(d[4]))
  end)

  it("scales what it kept and keeps a NaN there too", function()
    fp8.manual_seed(3)
    local x = fp8.tensor({ 1, 1, 1, 1, 1, 1, 1, 1 }):requires_grad_()
    local y = F.dropout(x, 0.5)
    local kept = y:totable()
    y:backward(fp8.tensor { 0 / 0, 0 / 0, 0 / 0, 0 / 0, -1, -1, -1, -1 })
    local d = x.grad:totable()
    for i = 1, 4 do assert.is_true(d[i] ~= d[i], "a NaN gradient reaches the leaf at " .. i) end
    for i = 5, 8 do
      if kept[i] == 2 then assert.are.equal(-2, d[i])
      else assert.are.equal("-0.0", ("%.1f"):format(d[i])) end
    end
  end)
end)

describe("the p-norms of a row with a NaN", function()
  local F = fp8.nn.functional
  local function all_nan(t)
    for _, v in ipairs(t:reshape(-1):totable()) do if v == v then return false end end
    return true
  end

  it("are NaN, as torch's: cdist, pairwise_distance, dist, normalize (before: 0, or the row divided by eps)", function()
    local x, o = fp8.tensor { { 0 / 0, 0, 1 } }, fp8.zeros(1, 3)
    for _, p in ipairs { 3, 0.5 } do
      assert.is_true(all_nan(fp8.cdist(x, o, p)), "cdist p " .. p)
      assert.is_true(all_nan(F.pairwise_distance(x, o, { p = p })), "pairwise_distance p " .. p)
      assert.is_true(all_nan(x:dist(o, p)), "dist p " .. p)
    end
    assert.is_true(all_nan(F.normalize(x, { dim = 2 })), "normalize p 2")
    assert.is_true(all_nan(F.normalize(x, { p = 3, dim = 2 })), "normalize p 3")
  end)

  it("and a zero row still has its finite norm 0 and gradient", function()
    local z = fp8.zeros(2, 3):requires_grad_()
    local y = F.normalize(z, { dim = 2 })
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, y:totable())
    y:sum():backward()
    for _, v in ipairs(z.grad:reshape(-1):totable()) do assert.is_true(math.abs(v - 1e12) < 1e6, "1/eps, got " .. v) end
    local a = fp8.tensor({ { 0, 0, 0 }, { 1, 0, 0 } }):requires_grad_()
    fp8.cdist(a, fp8.zeros(1, 3), 0.5):sum():backward()
    assert.are.same({ { 0, 0, 0 }, { 1, 0, 0 } }, a.grad:totable())
  end)
end)

describe("NaN and infinities as torch 2.15 takes them", function()
  local F = fp8.nn.functional
  local NAN, INF = 0 / 0, math.huge
  local function same(a, b)   -- NaN with NaN, ±0 alike
    if a ~= a or b ~= b then return a ~= a and b ~= b end
    return a == b or math.abs(a - b) <= 1e-6 * math.abs(b)
  end
  local function like(want, t, what)
    local got = t:reshape(-1):totable()
    assert.are.equal(#want, #got, what)
    for i = 1, #want do
      assert.is_true(same(got[i], want[i]), ("%s [%d]: %s, torch's %s"):format(what, i, got[i], want[i]))
    end
  end

  it("0^x's gradient is -inf where x < 0 and NaN where x is NaN (it was 0 everywhere)", function()
    local x = fp8.tensor({ 2, 0, -1, NAN, INF, -INF }):requires_grad_()
    fp8.pow(0, x):backward(fp8.ones(6))
    like({ 0, 0, -INF, NAN, 0, -INF }, x.grad, "d 0^x / dx")
  end)

  it("prelu: a NaN weight leaves the positive inputs' gradients alone, an infinite input the weight's", function()
    local x = fp8.tensor({ { 1, -2, INF, NAN }, { -1, 2, -INF, 0 } }):requires_grad_()
    local w = fp8.tensor({ NAN }):requires_grad_()
    F.prelu(x, w):backward(fp8.ones(2, 4))
    like({ 1, NAN, 1, NAN, NAN, 1, NAN, NAN }, x.grad, "x.grad, NaN weight")
    x = fp8.tensor({ { 1, -2, INF, 3 }, { -1, 2, 5, 0 } }):requires_grad_()
    w = fp8.tensor({ 0.25 }):requires_grad_()
    F.prelu(x, w):backward(fp8.ones(2, 4))
    like({ -3 }, w.grad, "w.grad, an infinite input")
  end)

  it("clamp with two tensor bounds gives a NaN's gradient to the input alone (it gave it to all three)", function()
    local x = fp8.tensor({ 0.5, 2, NAN, -3, 0.5, NAN }):requires_grad_()
    local lo = fp8.tensor({ NAN, 0, 0, 0, 1, NAN }):requires_grad_()
    local hi = fp8.tensor({ 1, NAN, 1, 1, 0.7, NAN }):requires_grad_()
    local y = x:clamp(lo, hi)
    like({ NAN, NAN, NAN, 0, 0.7, NAN }, y, "clamp")
    y:backward(fp8.ones(6))
    like({ 1, 1, 1, 0, 0, 1 }, x.grad, "x.grad")
    like({ 0, 0, 0, 1, 0, 0 }, lo.grad, "min.grad")
    like({ 0, 0, 0, 0, 1, 0 }, hi.grad, "max.grad")
  end)

  it("poisson_nll_loss{full=true}: a NaN target takes Stirling's term, so its gradient is NaN", function()
    local x, t = fp8.tensor({ 0.5, 1, 2 }):requires_grad_(), fp8.tensor({ NAN, 3, 0.5 }):requires_grad_()
    F.poisson_nll_loss(x, t, { full = true, reduction = "none" }):backward(fp8.ones(3))
    local g = t.grad:totable()
    assert.is_true(g[1] ~= g[1], "a NaN target's gradient")
    assert.is_near(0.2653, g[2], 1e-4)
    assert.are.equal(-2, g[3])
  end)

  it("binary_cross_entropy_with_logits at infinite logits: torch's finite gradients (they were NaN at +inf)", function()
    for _, pw in ipairs { false, true } do
      local x = fp8.tensor({ INF, INF, INF }):requires_grad_()
      local y = fp8.tensor({ 0, 0.3, 1 }):requires_grad_()
      local l = F.binary_cross_entropy_with_logits(x, y,
        { reduction = "none", pos_weight = pw and fp8.tensor { 2 } or nil })
      like({ INF, INF, NAN }, l, "loss at +inf")
      l:backward(fp8.ones(3))
      like({ 1, 0.7, 0 }, x.grad, "x.grad at +inf")
      like({ -INF, -INF, -INF }, y.grad, "y.grad at +inf")
      x = fp8.tensor({ -INF, -INF, -INF }):requires_grad_()
      F.binary_cross_entropy_with_logits(x, fp8.tensor { 0, 0.3, 1 },
        { reduction = "none", pos_weight = pw and fp8.tensor { 2 } or nil }):backward(fp8.ones(3))
      like(pw and { 0, -0.6, -2 } or { 0, -0.3, -1 }, x.grad, "x.grad at -inf")
    end
  end)

  it("renorm passes the gradient of a slice it leaves unscaled, a NaN slice too (it was NaN throughout)", function()
    for _, p in ipairs { 2, 1, math.huge } do
      local x = fp8.tensor({ { NAN, 0.5, 1, 0.25 }, { 3, 4, 0, 1 }, { 0.1, 0.2, 0.3, 0.1 } }):requires_grad_()
      x:renorm(p, 1, 1.0):backward(fp8.tensor { { 1.25, 0.25, 0.5, 0.75 }, { 1, 2, 3, 4 }, { 0.5, 0.5, 0.5, 0.5 } })
      local g = x.grad:totable()
      like({ 1.25, 0.25, 0.5, 0.75 }, fp8.tensor(g[1]), "p " .. p .. ": the NaN slice")
      like({ 0.5, 0.5, 0.5, 0.5 }, fp8.tensor(g[3]), "p " .. p .. ": a slice under maxnorm")
      for _, v in ipairs(g[2]) do assert.is_true(v == v and v ~= INF and v ~= -INF, "the scaled slice") end
    end
  end)

  it("normalize takes p = math.huge, torch's largest |x| (it was refused)", function()
    local x = fp8.tensor({ { 1, -3, 3, 0 }, { 0, 0, 0, 0 } }):requires_grad_()
    local y = F.normalize(x, { p = math.huge, dim = 2 })
    like({ 1 / 3, -1, 1, 0, 0, 0, 0, 0 }, y, "normalize p=inf")
    y:backward(fp8.tensor { { 1, 2, 3, 4 }, { 1, 2, 3, 4 } })
    like({ 1 / 3, 0.8888889, 0.7777778, 4 / 3, 1e12, 2e12, 3e12, 4e12 }, x.grad, "its gradient")
  end)
end)

-- Found by a helper that put one NaN or infinity into each recipe's training for one step (stop 89): under te with
-- a large margin, one input spike of 1e37 set the input's scale to 2^-126 (scale_inv 8.5e37, the scale rule's floor);
-- the next FP8 GEMM's sa·sb overflowed fp32, the clean batch that the cast had flushed to zeros came out 0·inf = NaN,
-- and the run stayed NaN. Such a GEMM now applies the two scales in double (core/cpu/cpu_fp8_gemm.c).
-- A 32 → 64 → 16 MLP (seed 1) and its AdamW, prepared under mixed_precision "fp8" with this recipe handler;
-- init(model) runs before prepare.
local function fp8_mlp(handler, init)
  fp8.manual_seed(1)
  local model = fp8.nn.Sequential(fp8.nn.Linear(32, 64), fp8.nn.ReLU(), fp8.nn.Linear(64, 16))
  if init then init(model) end
  local acc = fp8.Accelerator { mixed_precision = "fp8", cpu = true, config = false, env = {},
    kwargs_handlers = { handler } }
  local model_p, opt = acc:prepare(model, fp8.optim.AdamW(model:parameters(), { lr = 3e-3 }))
  return model_p, opt, acc
end

describe("an FP8 GEMM whose two scales' product leaves fp32's range", function()
  it("recovers from one input spike under te with margin 16 (the run stayed NaN)", function()
    local F = fp8.nn.functional
    local model, opt, acc = fp8_mlp(fp8.TERecipeKwargs { margin = 16 })
    local X = fp8.randn { 32, 32 }
    local Y = X:matmul(fp8.randn { 32, 16 }):argmax(2)
    local losses = {}
    for step = 1, 8 do
      local x = X:clone()
      if step == 5 then x:set({ 3, 5 }, 1e37) end
      local loss = F.cross_entropy(model(x), Y)
      acc:backward(loss); opt:step(); opt:zero_grad()
      losses[step] = loss:item()
      if step == 5 then assert.is_true(model[1].fp8_meta:state().input.scale_inv > 1e37, "the spike's scale_inv") end
    end
    for step = 6, 8 do
      assert.is_true(losses[step] == losses[step] and losses[step] < 5, "step " .. step .. ": " .. losses[step])
    end
    assert.is_true(losses[8] < losses[1])
  end)
end)

-- The same helper: MS-AMP's weights (and its warm-up casts) take a fresh scale each cast, and an all-zero or NaN
-- weight's scale jumped to the floor's 2^48 where MS-AMP's compute_scaling_factor keeps the previous one
-- (docs/fp8-spec.md §4 says so; the cast's bytes are the same either way): the scale kept now (core/scaling.c).
describe("MS-AMP's fresh scales", function()
  it("keep the previous scale for an all-zero weight (a zero-initialised layer), as MS-AMP's (it read 2^48)", function()
    local model = fp8_mlp(fp8.MSAMPRecipeKwargs { opt_level = "O2" }, function(m) m[3].weight.data:zero_() end)
    model(fp8.randn(8, 32))
    assert.are.equal(1, model[3].fp8_meta:state().weight.scale)
    assert.are.equal(2048, model[1].fp8_meta:state().weight.scale)
  end)
end)

-- The same helper: under fp16, a script that clips (which unscales) and then skips opt:step() by hand had every later
-- backward refused, and the message's hint spoke of gradient accumulation only; it names the way out now.
describe("a step skipped by hand under fp16", function()
  it("is refused at the next backward with the way out named, and acc.scaler:update() is that way", function()
    local F = fp8.nn.functional
    local model = fp8.nn.Linear(8, 4)
    local opt = fp8.optim.SGD(model:parameters(), { lr = 0.1 })
    local acc = fp8.Accelerator { mixed_precision = "fp16", cpu = true, config = false, env = {} }
    model, opt = acc:prepare(model, opt)
    local function backward()
      acc:backward(F.mse_loss(model(fp8.randn(4, 8)), fp8.zeros(4, 4)))
      acc:clip_grad_norm_(model:parameters(), 1.0)
    end
    backward()
    opt:zero_grad()   -- the step skipped
    local ok, err = pcall(backward)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("call opt:zero_grad() and then acc.scaler:update()", 1, true), tostring(err))
    opt:zero_grad()
    acc.scaler:update()
    backward()
    opt:step()
  end)
end)

-- A fifth helper ran about 1,470 cases of zero-size tensors against torch 2.15 (and 120,000 fuzzed calls; no crash):
-- results of nothing (prod, logsumexp or median over an empty dim, an empty diagonal, take with no index, a bag of no
-- ids) came back as constants outside the graph, so the input's .grad stayed nil inside a larger loss and a backward
-- of them alone failed (torch's gives zeros); a batch of 0 in batch/group/instance norm, a conv weight with a kernel
-- of 0 and a transposed conv of an empty plane raised raw Lua errors ("attempt to divide by zero", "attempt to index
-- a nil value").
describe("zero-size tensors", function()
  local F = fp8.nn.functional
  local function grad_of(leaf, f)
    f(leaf):sum():backward()
    return leaf.grad
  end

  it("results of nothing stay in the graph: the input's gradient is zeros of its shape, as torch's", function()
    for name, c in pairs {
      prod = { fp8.ones(3, 0), function(x) return x:prod(2) end },
      logsumexp = { fp8.ones(3, 0), function(x) return x:logsumexp(2) end },
      median = { fp8.ones(0), function(x) return x:median() end },
      diagonal = { fp8.ones(3, 3), function(x) return x:diagonal(5) end },
      trace = { fp8.zeros(0, 0), function(x) return x:trace() end },
      take = { fp8.ones(3, 4), function(x) return x:take(fp8.zeros(0)) end },
      embedding_bag = { fp8.ones(5, 3), function(w) return F.embedding_bag(fp8.zeros(0), w, fp8.zeros(2)) end },
    } do
      local leaf = c[1]:requires_grad_()
      local g = grad_of(leaf, c[2])
      assert.truthy(g, name .. ": no gradient")
      assert.are.same(leaf:shape(), g:shape(), name)
      assert.are.equal(0, g:numel() == 0 and 0 or g:abs():sum():item(), name)
    end
    -- the values are the same as before: 1, -inf, NaN, empty
    assert.are.same({ 1, 1, 1 }, fp8.ones(3, 0):prod(2):totable())
    assert.are.same({ -math.huge, -math.huge }, fp8.ones(2, 0):logsumexp(2):totable())
  end)

  it("a batch of 0 in batch, group and instance norm gives an empty output (torch's), statistics untouched", function()
    local x = fp8.zeros(0, 4, 3):requires_grad_()
    local w, b = fp8.ones(4):requires_grad_(), fp8.zeros(4):requires_grad_()
    local rm, rv = fp8.zeros(4), fp8.ones(4)
    local y = F.batch_norm(x, rm, rv, w, b, true)
    assert.are.same({ 0, 4, 3 }, y:shape())
    assert.are.same({ 0, 0, 0, 0 }, rm:totable())
    assert.are.same({ 1, 1, 1, 1 }, rv:totable())
    y:sum():backward()
    assert.are.same({ 0, 0, 0, 0 }, w.grad:totable())
    assert.are.same({ 0, 4, 3 }, F.group_norm(fp8.zeros(0, 4, 3), 2):shape())
    assert.are.same({ 0, 4, 3 }, F.instance_norm(fp8.zeros(0, 4, 3)):shape())
    local bn = fp8.nn.BatchNorm2d(4)
    assert.are.same({ 0, 4, 2, 2 }, bn(fp8.zeros(0, 4, 2, 2)):shape())
  end)

  it("tensordot and inner over a contracted size of 0 give torch's zeros (a reshape error before)", function()
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, fp8.tensordot(fp8.ones(2, 0), fp8.ones(0, 3), 1):totable())
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, fp8.ones(2, 0):inner(fp8.ones(3, 0)):totable())
  end)

  it("a conv kernel of size 0 and a transposed conv of an empty plane are refused by name", function()
    local U = dofile("tests/spec/helpers/util.lua")
    U.fails_with("conv1d: the weight [2, 3, 1, 0] has a kernel of size 0", F.conv1d, fp8.zeros(1, 3, 5),
      fp8.zeros(2, 3, 0))
    U.fails_with("conv2d: the weight [1, 2, 0, 4] has a kernel of size 0", F.conv2d, fp8.zeros(1, 2, 5, 5),
      fp8.zeros(1, 2, 0, 4))
    U.fails_with("conv_transpose2d: the input [1, 2, 0, 4] has no positions", F.conv_transpose2d,
      fp8.zeros(1, 2, 0, 4), fp8.zeros(2, 2, 3, 3))
    assert.are.same({ 0, 2, 5, 5 }, F.conv_transpose2d(fp8.zeros(0, 2, 3, 3), fp8.zeros(2, 2, 3, 3)):shape())
  end)
end)
