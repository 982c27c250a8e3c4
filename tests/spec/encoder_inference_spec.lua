-- encoder_inference_spec.lua — TransformerEncoderLayer's inference forms against the composition they replace: the
-- feed-forward block's first linear, ReLU and bf16 rounding as one op under a bf16 autocast (F._linear_relu_bf16),
-- batch_first self-attention reading its packed projection in place (F.qkv_attention), and the residual adds inside
-- the post-norm LayerNorms (F._add_layer_norm); each bit for bit with the
-- layer's forward when a gradient is recorded (which takes the composition), and each skipped where a hook, a mask,
-- another activation or a gradient needs the composition.
local fp8 = fp8 or require "fp8"
local nn = fp8.nn
local F = nn.F

local U = dofile("tests/spec/helpers/util.lua")
local same_bits = U.same_bits

-- The batch_first forms' rows sit at other places in their GEMMs than the composition's ([N, L, E] against [L, N, E]).
-- oneDNN's AVX-512 fp32 and bf16 GEMMs give each row the same sums wherever it sits; its AVX2 GEMM (a CPU without
-- AVX-512) does not (a row in the M tail is summed in another order: 1.5e-5 apart in a [111, 64] · [64, 192] linear),
-- so there the layouts' results are compared to rounding: fp32 1e-5, bf16 one unit in the last place, relative.
local function same_layout_bits(name, got, want)
  if U.avx512_runs() then return same_bits(name, got, want) end
  assert.are.same(want:shape(), got:shape(), name .. ": shape")
  local tol = want:dtype() == "bf16" and 2 ^ -7 or 1e-5
  local g, w = got:to("fp32"):reshape(-1):totable(), want:to("fp32"):reshape(-1):totable()
  for i = 1, #w do
    if math.abs(g[i] - w[i]) > tol * math.max(1, math.abs(w[i])) then
      assert.is_true(false, ("%s[%d]: %.9g vs %.9g"):format(name, i, g[i], w[i]))
    end
  end
end

-- fn() with F[name] counting its calls; returns fn's result and the count
local function counting(name, fn)
  local orig, n = F[name], 0
  F[name] = function(...) n = n + 1 return orig(...) end
  local ok, res = pcall(fn)
  F[name] = orig
  if not ok then error(res, 0) end
  return res, n
end

local function run(mode, fn)
  if mode == "fp32" then return fn() end
  return fp8.amp.autocast(mode, fn)
end

describe("TransformerEncoderLayer in inference", function()
  fp8.manual_seed(7)

  it("under no_grad gives the bits of the forward that records a gradient (fp32 and bf16, both layouts)", function()
    for _, bf in ipairs { true, false } do
      for _, nf in ipairs { false, true } do
        local layer = nn.TransformerEncoderLayer(64, 4, { batch_first = bf, norm_first = nf, dim_feedforward = 96,
                                                          dropout = 0 })
        layer:eval()
        local x = fp8.randn(bf and { 3, 37, 64 } or { 37, 3, 64 }) * 2
        for _, mode in ipairs { "fp32", "bf16" } do
          local ref = run(mode, function() return layer(x) end):detach()   -- (the parameters require grad)
          local nln
          local got, nff = counting("_linear_relu_bf16", function()
            local y
            y, nln = counting("_add_layer_norm", function()
              return fp8.no_grad(function() return run(mode, function() return layer(x) end) end)
            end)
            return y
          end)
          assert.are.equal(mode == "bf16" and 1 or 0, nff, "the one-op feed-forward half ran")
          assert.are.equal(nf and 0 or 2, nln, "the residual adds went into the norms (post-norm)")
          same_layout_bits(("%s batch_first=%s norm_first=%s"):format(mode, bf, nf), got, ref)
        end
      end
    end
  end)

  it("batch_first self-attention reads the packed projection; masks, weights and the other layout do not", function()
    local mha = nn.MultiheadAttention(32, 4, { batch_first = true })
    mha:eval()
    local x = fp8.randn { 2, 9, 32 }
    for _, mode in ipairs { "fp32", "bf16" } do
      local ref = run(mode, function() return (mha(x, x, x, { need_weights = false })) end):detach()
      local got, n = counting("qkv_attention", function()
        return fp8.no_grad(function() return run(mode, function() return (mha(x, x, x, { need_weights = false })) end) end)
      end)
      assert.are.equal(1, n)
      same_layout_bits(mode .. " packed attention", got, ref)
      local mask = fp8.full({ 9, 9 }, -math.huge):triu(1)
      local _, m = counting("qkv_attention", function()
        return fp8.no_grad(function() return mha(x, x, x, { need_weights = false, attn_mask = mask }) end)
      end)
      assert.are.equal(0, m, "a mask takes the written-out path")
      local _, w = counting("qkv_attention", function() return fp8.no_grad(function() return mha(x, x, x) end) end)
      assert.are.equal(0, w, "need_weights takes the written-out path")
      local y = x:clone()
      local _, o = counting("qkv_attention", function()
        return fp8.no_grad(function() return mha(x, y, y, { need_weights = false }) end)
      end)
      assert.are.equal(0, o, "a key other than the query takes the separate projections")
    end
  end)

  it("leaves the feed-forward composition to hooks, gelu, dropout in training and recorded gradients", function()
    local layer = nn.TransformerEncoderLayer(32, 2, { batch_first = true, dim_feedforward = 48, dropout = 0 })
    layer:eval()
    local x = fp8.randn { 2, 5, 32 }
    local calls = 0
    local h = layer.linear1:register_forward_hook(function() calls = calls + 1 end)
    local _, n = counting("_linear_relu_bf16", function()
      return fp8.no_grad(function() return fp8.amp.autocast("bf16", function() return layer(x) end) end)
    end)
    h:remove()
    assert.are.equal(0, n)
    assert.are.equal(1, calls, "linear1's hook ran")
    local _, g = counting("_linear_relu_bf16", function()
      return fp8.amp.autocast("bf16", function() return layer(x) end)
    end)
    assert.are.equal(0, g, "a forward recording gradients takes the composition")
    local _, ga = counting("_add_layer_norm", function() return layer(x) end)
    assert.are.equal(0, ga, "a forward recording gradients adds, then norms")
    local gl = nn.TransformerEncoderLayer(32, 2, { batch_first = true, dim_feedforward = 48, activation = "gelu" })
    gl:eval()
    local _, ge = counting("_linear_relu_bf16", function()
      return fp8.no_grad(function() return fp8.amp.autocast("bf16", function() return gl(x) end) end)
    end)
    assert.are.equal(0, ge, "gelu takes the composition")
    local dl = nn.TransformerEncoderLayer(32, 2, { batch_first = true, dim_feedforward = 48, dropout = 0.5 })
    dl:train()
    local _, de = counting("_linear_relu_bf16", function()
      return fp8.no_grad(function() return fp8.amp.autocast("bf16", function() return dl(x) end) end)
    end)
    assert.are.equal(0, de, "an active dropout takes the composition")
  end)

  it("leaves it to a linear2 that a hook observes or another module replaces (it would see a bf16 input)", function()
    -- (stop 93's review: a pre-hook on linear2 saw bf16 under no_grad and fp32 when a gradient was recorded)
    local layer = nn.TransformerEncoderLayer(32, 2, { batch_first = true, dim_feedforward = 48, dropout = 0 })
    layer:eval()
    local x = fp8.randn { 2, 5, 32 }
    local seen = {}
    local h = layer.linear2:register_forward_pre_hook(function(_, args) seen[#seen + 1] = args[1]:dtype() end)
    local _, n = counting("_linear_relu_bf16", function()
      return fp8.no_grad(function() return fp8.amp.autocast("bf16", function() return layer(x) end) end)
    end)
    h:remove()
    assert.are.equal(0, n)
    assert.are.same({ "fp32" }, seen)
    layer.linear2 = nn.Sequential(nn.LayerNorm(48), nn.Linear(48, 32))
    local y0 = fp8.amp.autocast("bf16", function() return layer(x) end)
    local y1, n2 = counting("_linear_relu_bf16", function()
      return fp8.no_grad(function() return fp8.amp.autocast("bf16", function() return layer(x) end) end)
    end)
    assert.are.equal(0, n2)
    same_bits("replaced linear2", y1, y0:detach())
  end)

  it("F._linear_relu_bf16 refuses what it does not do, naming it", function()
    local x, w = fp8.randn { 4, 8 }, fp8.randn { 3, 8 }
    assert.has_error(function() F._linear_relu_bf16(x, w) end,
      "linear_relu: the rounded form runs under a bf16 autocast, got autocast fp32")
    fp8.amp.autocast("bf16", function()
      local y = fp8.no_grad(function() return F._linear_relu_bf16(x, w) end)
      assert.are.equal("bf16", y:dtype())
      same_bits("no bias", y, F.relu(F.linear(x, w)):to("bf16"))
      local wg = w:clone():requires_grad_()
      local ok, err = pcall(F._linear_relu_bf16, x, wg)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("records no gradient", 1, true))
      ok, err = pcall(F._linear_relu_bf16, x, fp8.randn { 3, 7 })
      assert.is_false(ok)
      assert.truthy(tostring(err):find("does not match weight", 1, true))
    end)
  end)
end)
