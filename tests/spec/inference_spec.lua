-- inference_spec.lua — the inference forms of stop 92 against the compositions they replace, kept here as the
-- reference: bf16 activations read without an fp32 copy (GELU exact and tanh, SiLU rounded once), attention without
-- its probabilities under no_grad, BatchNorm's eval pass in one kernel. Bit for bit, on every bf16 value where the
-- input is elementwise.
local fp8 = fp8 or require "fp8"
local nn = fp8.nn
local F = nn.F

local same_bits = dofile("tests/spec/helpers/util.lua").same_bits

-- every bf16 value once (signs, zeros, subnormals, infinities, NaNs), as a bf16 tensor [256, 256]
local function all_bf16()
  local v = {}
  for u = 0, 65535 do
    local s, e, m = u >> 15, (u >> 7) & 0xFF, u & 0x7F
    local a
    if e == 0xFF then a = m == 0 and math.huge or 0 / 0
    elseif e == 0 then a = m * 2.0 ^ -133
    else a = (1 + m / 128) * 2.0 ^ (e - 127) end
    v[u + 1] = s == 1 and -a or a
  end
  return fp8.tensor(v):to("bf16"):reshape { 256, 256 }
end

describe("bf16 activations without an fp32 copy", function()
  local x = all_bf16()
  -- the fp32 copy the ops made before, kept as the reference
  local xw = x:to("fp32")

  it("gelu (exact and tanh) and relu of every bf16 value: the fp32 result of the widened input, bit for bit", function()
    for _, a in ipairs { "none", "tanh" } do
      same_bits("gelu " .. a, F.gelu(x, a), F.gelu(xw, a))
      same_bits("gelu " .. a .. " no_grad", fp8.no_grad(function() return F.gelu(x, a) end), F.gelu(xw, a))
      same_bits("nn.GELU " .. a, nn.GELU(a)(x), F.gelu(xw, a))
    end
    same_bits("relu", F.relu(x), F.relu(xw))   -- (the core's relu takes the same read)
  end)

  it("silu of every bf16 value under no_grad: the fp32 result rounded once, bit for bit", function()
    local y = fp8.no_grad(function() return F.silu(x) end)
    assert.are.equal("bf16", y:dtype())
    same_bits("silu", y, F.silu(xw):to("bf16"))
    same_bits("nn.SiLU", fp8.no_grad(function() return nn.SiLU()(x) end), F.silu(xw):to("bf16"))
  end)

  it("keeps the composite where a gradient is recorded, and for views and fp16", function()
    local r = fp8.randn { 64, 33 }
    local xb = r:to("bf16"):requires_grad_(true)
    local y = F.silu(xb)
    assert.are.equal("bf16", y:dtype())
    y:sum():backward()
    local xr = r:to("bf16"):to("fp32"):requires_grad_(true)
    F.silu(xr):to("bf16"):sum():backward()
    same_bits("silu grad", xb.grad, xr.grad:to(xb.grad:dtype()))
    local g = r:to("bf16"):requires_grad_(true)
    F.gelu(g):sum():backward()
    local gr = r:to("bf16"):to("fp32"):requires_grad_(true)
    F.gelu(gr):sum():backward()
    same_bits("gelu grad", g.grad, gr.grad:to(g.grad:dtype()))
    local v = x:t()   -- a view: the widening path
    same_bits("gelu of a view", F.gelu(v), F.gelu(xw:t()))
    same_bits("silu of a view", fp8.no_grad(function() return F.silu(v) end), F.silu(xw:t()):to("bf16"))
    local h = r:to("fp16")
    same_bits("silu fp16", fp8.no_grad(function() return F.silu(h) end), F.silu(h:to("fp32")):to("fp16"))
  end)

  it("the core's rounded form refuses what it does not take", function()
    local C = require("fp8.core")._nn
    assert.has_error(function() C.silu_bf16(fp8.randn { 3 }) end,
      "silu: the rounded form takes a bf16 input, got fp32")
    local q = fp8.randn { 3 }:to("bf16"):requires_grad_(true)
    assert.has_error(function() C.silu_bf16(q) end,
      "silu: the rounded form records no gradient; x requires grad (use the fp32 form)")
    assert.has_error(function() C.silu_bf16(1) end)
    assert.has_error(function() C.silu_bf16(x, 2) end)
  end)
end)

describe("attention without probabilities under no_grad", function()
  it("gives the bits of the forward that keeps them (fp32 and bf16 inputs, causal or not, odd lengths)", function()
    for _, s in ipairs { { 2, 3, 128, 32 }, { 1, 2, 37, 16 }, { 2, 2, 1, 8 } } do
      for _, dt in ipairs { "fp32", "bf16" } do
        for _, causal in ipairs { false, true } do
          local q, k, v = fp8.randn(s):to(dt), fp8.randn(s):to(dt), fp8.randn(s):to(dt)
          local o1 = fp8.no_grad(function() return F.scaled_dot_product_attention(q, k, v, { is_causal = causal }) end)
          local qg = q:detach():requires_grad_(true)
          local o2 = F.scaled_dot_product_attention(qg, k, v, { is_causal = causal })
          same_bits(("sdpa %s %s causal %s"):format(table.concat(s, "x"), dt, tostring(causal)), o1, o2:detach())
        end
      end
    end
  end)
end)

describe("BatchNorm's eval pass in one kernel", function()
  -- the composite of lua/fp8/nn/batch_norm.lua before stop 92 (its eval branch), kept as the reference
  local function ref(x, rm, rv, w, b, eps)
    local low = x:dtype() ~= "fp32" and x:dtype() or nil
    if low then x = x:to("fp32") end
    local bshape = { 1, x:size(2) }
    for _ = 3, x:dim() do bshape[#bshape + 1] = 1 end
    local y = (x - rm:reshape(bshape)) / (rv:reshape(bshape) + eps):sqrt()
    if w ~= nil then y = y * w:reshape(bshape) end
    if b ~= nil then y = y + b:reshape(bshape) end
    return low and y:to(low) or y
  end

  it("gives the composite's bits: shapes, affine or not, eps, bf16, zeros, infinities, NaN, zero variances", function()
    local shapes = { { 7, 5 }, { 3, 4, 9 }, { 2, 3, 5, 7 }, { 1, 16, 1 }, { 4, 2, 3, 2, 2 } }
    for si, s in ipairs(shapes) do
      local C = s[2]
      local x = fp8.randn(s) * 3
      if si == 2 then   -- specials in the input
        x = x:reshape(-1)
        local n = x:numel()
        local sp = fp8.tensor { 0, -0.0, math.huge, -math.huge, 0 / 0, 1e-40, -1e-40 }
        x = fp8.cat({ sp, x:narrow(1, 1, n - 7) }, 1):reshape(s)
      end
      local rm, rv = fp8.randn { C }, fp8.rand { C } * 2
      if si == 3 then rv = fp8.cat({ fp8.zeros { 1 }, rv:narrow(1, 2, C - 1) }, 1) end   -- a zero variance
      if si == 2 then rm = fp8.zeros { C } end   -- (−0 − 0) / d · w: signed zeros that an added +0 would lose
      for _, eps in ipairs { 1e-5, 0, 0.3 } do
        for _, affine in ipairs { { true, true }, { true, false }, { false, true }, { false, false } } do
          local w = affine[1] and fp8.randn { C } or nil
          local b = affine[2] and fp8.randn { C } or nil
          local name = ("shape %d eps %g w %s b %s"):format(si, eps, tostring(affine[1]), tostring(affine[2]))
          local y = fp8.no_grad(function() return F.batch_norm(x, rm, rv, w, b, false, 0.1, eps) end)
          same_bits(name, y, ref(x, rm, rv, w, b, eps))
          local xb = x:to("bf16")
          same_bits(name .. " bf16", fp8.no_grad(function() return F.batch_norm(xb, rm, rv, w, b, false, 0.1, eps) end),
            ref(xb, rm, rv, w, b, eps))
        end
      end
    end
  end)

  it("nn.BatchNorm2d in eval mode under no_grad, and its composite with gradients", function()
    local bn = nn.BatchNorm2d(6)
    local x = fp8.randn { 4, 6, 5, 5 }
    bn(x)   -- training: running statistics that are not 0 and 1
    bn:eval()
    local want = ref(x, bn.running_mean, bn.running_var, bn.weight:detach(), bn.bias:detach(), bn.eps)
    same_bits("eval no_grad", fp8.no_grad(function() return bn(x) end), want)
    local xg = x:detach():requires_grad_(true)
    local y = bn(xg)   -- grad mode: the composite, with its gradients
    same_bits("eval with grad", y:detach(), want)
    y:sum():backward()
    assert.is_not_nil(xg.grad)
    assert.is_not_nil(bn.weight.grad)
  end)

  it("the core's kernel checks its arguments", function()
    local C = require("fp8.core")._nn
    local x, m, d = fp8.randn { 2, 3, 4 }, fp8.zeros { 3 }, fp8.ones { 3 }
    assert.has_error(function() C._batch_norm_eval(fp8.randn { 3 }, m, d) end,
      "batch_norm: expected an input [N, C, ...], got [3]")
    assert.has_error(function() C._batch_norm_eval(x, fp8.zeros { 4 }, d) end,
      "batch_norm: running mean [4] does not match input [2, 3, 4] (expected [3])")
    assert.has_error(function() C._batch_norm_eval(x, m, d, fp8.ones { 2 }) end,
      "batch_norm: weight [2] does not match input [2, 3, 4] (expected [3])")
    assert.has_error(function() C._batch_norm_eval(x:detach():requires_grad_(true), m, d) end,
      "batch_norm: the eval kernel records no gradient, and an argument requires grad")
    assert.has_error(function() C._batch_norm_eval(x, m) end)
    assert.has_error(function() C._batch_norm_eval(x, m, d, nil, nil, 1) end)
  end)
end)
