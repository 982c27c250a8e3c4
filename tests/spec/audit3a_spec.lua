-- Gaps left after the fourth round of hand audits' dtype fixes (docs/robustness.md, "Audited by hand, fourth
-- round"): bf16/fp16 results where torch keeps the input's dtype, and mixed dtypes torch refuses promoted to fp32.
local fp8 = fp8 or require "fp8"
local F = fp8.nn.functional

local function bf(t) return fp8.tensor(t):to("bf16") end

describe("nll_loss with a weight of another dtype", function()
  it("promotes to fp32 (torch refuses), as the other losses' weights; one low dtype keeps it", function()
    local lp = fp8.tensor({ { -1.5, -0.5, -2.25 }, { -0.75, -3, -1 } })
    local t = fp8.tensor { 2, 0 }
    for _, red in ipairs { "mean", "sum", "none" } do
      -- a bf16 input beside fp32 weights gave bf16
      assert.are.equal("fp32", F.nll_loss(lp:to("bf16"), t, { weight = fp8.tensor { 1, 2, 3 }, reduction = red }):dtype())
      assert.are.equal("fp32", F.nll_loss(lp:to("fp16"), t, { weight = bf { 1, 2, 3 }, reduction = red }):dtype())
      assert.are.equal("fp32", F.nll_loss(lp, t, { weight = bf { 1, 2, 3 }, reduction = red }):dtype())
      assert.are.equal("bf16", F.nll_loss(lp:to("bf16"), t, { weight = bf { 1, 2, 3 }, reduction = red }):dtype())
    end
    -- (3·2.25 + 1·0.75) / 4 = 1.875, exact
    assert.are.equal(1.875, F.nll_loss(lp:to("bf16"), t, { weight = fp8.tensor { 1, 2, 3 } }):item())
  end)
end)

describe("softmin, gumbel_softmax and x:relu() of a bf16/fp16 input", function()
  it("keep its dtype in and out of autocast, computed in fp32 and rounded once, as torch's", function()
    local x = fp8.tensor { { 0.3, -1.2, 2.5 }, { 1.1, 0.7, -0.4 } }
    for _, dt in ipairs { "bf16", "fp16" } do
      local v = x:to(dt)
      local got = { F.softmin(v, 2):dtype(), fp8.nn.Softmin(2)(v):dtype(), F.gumbel_softmax(v):dtype(),
                    F.gumbel_softmax(v, { hard = true }):dtype(), v:relu():dtype() }
      assert.are.same({ dt, dt, dt, dt, dt }, got)                -- all fp32 before
      local ac = fp8.amp.autocast("bf16", function()
        return { F.softmin(v, 2):dtype(), F.gumbel_softmax(v):dtype(), v:relu():dtype() }
      end)
      assert.are.same({ dt, dt, dt }, ac)
      -- the fp32 values rounded once (torch's bf16 softmin: 0.1787, 0.8008, 0.0198 / 0.1436, 0.2139, 0.6445)
      local ref = F.softmin(v:to("fp32"), 2):to(dt)
      assert.are.equal(1, F.softmin(v, 2):eq(ref):all():item())
      assert.are.equal(1, v:relu():eq(v:to("fp32"):clamp_min(0):to(dt)):all():item())
    end
    assert.are.equal(0.80078125, F.softmin(x:to("bf16"), 2)[1][2])
    -- the gradient still flows through the rounding
    local g = x:to("bf16"):requires_grad_()
    g:relu():sum():backward()
    assert.are.same({ { 1, 0, 1 }, { 1, 1, 0 } }, g.grad:to("fp32"):tolist())
    -- an fp32 input, and F.relu/F.softmax themselves, as before
    assert.are.equal("fp32", F.softmin(x, 2):dtype())
    assert.are.equal("fp32", F.relu(x:to("bf16")):dtype())
  end)
end)

describe("embedding_bag of a bf16/fp16 weight in the other forms", function()
  it("keeps the weight's dtype: 2-d input, fp16, per_sample_weights, autocast, the module's Parameter", function()
    local w = bf { { 1, 2 }, { 3, 4 }, { 5, 6 } }
    local i, o = fp8.tensor { 0, 1, 2 }, fp8.tensor { 0, 1 }
    local function check(r, dt, want)
      assert.are.equal(dt, r:dtype())
      assert.are.same(want, r:to("fp32"):tolist())
    end
    check(F.embedding_bag(fp8.tensor { { 0, 1 }, { 1, 2 } }, w), "bf16", { { 2, 3 }, { 4, 5 } })   -- failed in index_add
    check(F.embedding_bag(i, w:to("fp16"), o), "fp16", { { 1, 2 }, { 4, 5 } })
    check(F.embedding_bag(i, w, o, { mode = "sum", per_sample_weights = fp8.tensor { 1, 2, 3 } }), "bf16",
      { { 1, 2 }, { 21, 26 } })
    for _, mode in ipairs { "mean", "sum", "max" } do
      local r = fp8.amp.autocast("bf16", function() return F.embedding_bag(i, w, o, { mode = mode }) end)
      assert.are.equal("bf16", r:dtype())                    -- as torch's CPU autocast (not on its fp32 list)
    end
    local m = fp8.nn.EmbeddingBag(3, 2)
    m.weight = fp8.nn.Parameter(w:clone())
    check(m(i, o), "bf16", { { 1, 2 }, { 4, 5 } })
    -- the bag's sum in fp32, rounded once: 1.0078125 + 1.0078125 + 1.0078125 = 3.0234375 → 3.03125 (bf16, to even)
    local u = bf { { 1.0078125 } }
    assert.are.equal(3.03125, F.embedding_bag(fp8.tensor { 0, 0, 0 }, u, fp8.tensor { 0 }, { mode = "sum" })[1][1])
  end)
end)

describe("torch's CPU autocast fp32 list through the other doors", function()
  it("the modules, fp8.* functions, dims, fp16 inputs and the Accelerator's autocast give fp32", function()
    local x = fp8.randn { 1, 2, 4, 4 }:to("bf16")
    local a = fp8.randn { 3, 3 }:to("fp16")
    local acc = fp8.Accelerator { mixed_precision = "bf16", config = false }
    local h = acc:autocast()
    local got = { fp8.nn.ReflectionPad2d(1)(x):dtype(), fp8.nn.ReplicationPad1d(1)(x[1]):dtype(),
                  fp8.nn.LocalResponseNorm(2)(x):dtype(), fp8.trace(a):dtype(), fp8.prod(a):dtype(),
                  a:prod(2):dtype(), a:quantile(0.5, 1):dtype(), fp8.cdist(a, a):dtype(),
                  fp8.nn.ConstantPad1d(1, 0)(x[1]):dtype() }
    h:close()
    assert.are.same({ "fp32", "fp32", "fp32", "fp32", "fp32", "fp32", "fp32", "fp32", "bf16" }, got)
    assert.are.equal("fp16", a:prod(2):dtype())                     -- outside autocast: the input's dtype
  end)
end)
