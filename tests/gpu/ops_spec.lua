-- ops_spec.lua — every op of the "cuda" device against the CPU device, through the public Lua API:
-- the same random inputs on both, forward values and (for differentiable ops) every input gradient
-- compared, |gpu − cpu| ≤ atol + rtol·|cpu| with the tolerance named per op (exact for data movement,
-- casts, FP8 quantization, max/min and the dropout mask; fp32-rounding bounds where the GPU sums in
-- another order). Skips without a GPU. FP8LAB_TEST_DEVICE=cpu runs the same comparisons CPU against
-- CPU, which checks the spec itself on a machine without one.
local fp8 = fp8 or require "fp8"
local F = fp8.nn.functional

local DEV = os.getenv("FP8LAB_TEST_DEVICE") or "cuda"
local have = DEV == "cpu" or fp8.cuda.is_available()

local function flat(t) return (t:to("cpu"):to("fp32"):_values()) end

-- Compare a device result with the CPU result element by element; nan matches nan.
local function assert_close(cpu, dev, atol, rtol, what)
  assert.same(cpu:shape(), dev:shape(), what .. ": shape")
  assert.equals(DEV, dev:device(), what .. ": device")
  local a, b = flat(cpu), flat(dev)
  local worst, at = -1, 0
  for i = 1, #a do
    local x, y = a[i], b[i]
    local ok = (x ~= x and y ~= y) or x == y or math.abs(x - y) <= atol + rtol * math.abs(x)
    if not ok then
      local excess = math.abs(x - y) - (atol + rtol * math.abs(x))
      if excess > worst then worst, at = excess, i end
    end
  end
  assert(worst < 0, ("%s: element %d: cpu %.9g, %s %.9g (atol %g, rtol %g)"):format(what, at, a[at] or 0 / 0,
    DEV, b[at] or 0 / 0, atol, rtol))
end

local function exact(cpu, dev, what) assert_close(cpu, dev, 0, 0, what) end

-- A copy on the device that never shares memory with t (with DEV=cpu, to() would return t itself).
local function dcopy(t) return DEV == "cpu" and t:detach():clone() or t:detach():to(DEV) end

-- Leaf copies of CPU tensors on the device, requiring grad when the originals do.
local function on_dev(...)
  local out = {}
  for i, t in ipairs { ... } do
    local d = dcopy(t)
    if t:requires_grad() then d:requires_grad(true) end
    out[i] = d
  end
  return table.unpack(out)
end

local function leaf(shape, scale)
  local t = fp8.randn(shape) * (scale or 1)
  t = t:detach()
  t:requires_grad(true)
  return t
end

-- Run f on CPU inputs and on their device copies; compare outputs (and grads of a fixed random
-- projection of the output, so every element of every gradient is exercised).
local function check(what, f, inputs, atol, rtol, gatol, grtol)
  for _, t in ipairs(inputs) do t.grad = nil end
  local dins = { on_dev(table.unpack(inputs)) }
  local yc, yd = f(table.unpack(inputs)), f(table.unpack(dins))
  assert_close(yc, yd, atol, rtol, what .. " forward")
  local any = false
  for _, t in ipairs(inputs) do any = any or t:requires_grad() end
  if not any then return end
  local proj = fp8.randn(yc:shape());
  (yc * proj):sum():backward();
  (yd * proj:to(DEV)):sum():backward()
  for i, t in ipairs(inputs) do
    if t:requires_grad() then
      assert_close(t.grad, dins[i].grad, gatol or atol, grtol or rtol, ("%s grad of input %d"):format(what, i))
    end
  end
end

local SUM_RTOL = 2e-6    -- fp32 results of double-accumulated sums: one rounding apart at most
local GEMM_TOL = 2e-5    -- fp32 GEMMs: the GPU sums the K products in another order (K ≤ 512 here)

describe("the cuda device against the CPU device", function()
  if not have then
    it("skips: no GPU", function() print("  skipped: no GPU (" .. tostring(fp8.cuda.unavailable_reason()) .. ")") end)
    return
  end
  before_each(function() fp8.manual_seed(1234) end)

  it("unscales a list of gradients as the CPU does: the same values, inf/NaN found in any of them", function()
    local C = require "fp8._data"
    local cpu = { fp8.randn { 300, 70 } * 1000, fp8.randn { 5 }, fp8.randn { 64, 64 }:t(), fp8.zeros { 0 } }
    local dev = {}
    for i, t in ipairs(cpu) do dev[i] = dcopy(t) end
    assert.is_false(C.unscale_(cpu, 1 / 1024))
    assert.is_false(C.unscale_(dev, 1 / 1024))
    for i = 1, #cpu do exact(cpu[i], dev[i], "unscaled gradient " .. i) end
    for _, bad in ipairs { math.huge, -math.huge, 0 / 0 } do
      for where = 1, 3 do
        local c, d = {}, {}
        for i = 1, 3 do
          local v = fp8.randn({ 40 }):totable()
          if i == where then v[17] = bad end
          c[i] = fp8.tensor(v)
        end
        for i = 1, 3 do d[i] = dcopy(c[i]) end
        assert.is_true(C.unscale_(d, 0.5), ("%s in gradient %d of 3"):format(tostring(bad), where))
        assert.is_true(C.unscale_(c, 0.5))
        for i = 1, 3 do exact(c[i], d[i], "scaled beside the non-finite one, gradient " .. i) end
      end
    end
  end)

  it("moves tensors both ways bit for bit, every dtype, FP8 with its scale", function()
    local x = fp8.randn { 37, 53 } * 100
    for _, dt in ipairs { "fp32", "bf16", "fp16" } do
      local c = x:to(dt)
      exact(c, c:to(DEV), "to " .. dt)
      assert.equals(dt, c:to(DEV):dtype())
    end
    for _, fmt in ipairs { "e4m3", "e5m2" } do
      local q = x:quantize(fmt)
      local d = q:to(DEV)
      assert.equals(fmt, d:dtype())
      assert.equals(q:scale_inv(), d:scale_inv())
      assert.same(q:bytes(), d:to("cpu"):bytes())
      exact(q:dequantize(), d:dequantize(), "dequantize " .. fmt)
    end
    local e = fp8.zeros { 0, 3 }
    assert.same({ 0, 3 }, e:to(DEV):shape())
  end)

  it("copies strided views and converts dtypes exactly", function()
    local x = fp8.randn { 6, 7, 5 } * 1e3
    local d = x:to(DEV)
    exact(x:transpose(1, 3):contiguous(), d:transpose(1, 3):contiguous(), "transpose copy")
    exact(x:narrow(2, 2, 3):contiguous(), d:narrow(2, 2, 3):contiguous(), "narrow copy")
    exact(x:narrow(1, 2, 1):expand { 4, 7, 5 }:contiguous(), d:narrow(1, 2, 1):expand { 4, 7, 5 }:contiguous(), "expand copy")
    for _, a in ipairs { "fp32", "bf16", "fp16" } do
      for _, b in ipairs { "fp32", "bf16", "fp16" } do
        exact(x:to(a):transpose(1, 2):to(b), d:to(a):transpose(1, 2):to(b), a .. " -> " .. b)
      end
    end
  end)

  it("fills and makes factories on the device", function()
    exact(fp8.full({ 3, 4 }, 0.1, { dtype = "bf16" }), fp8.full({ 3, 4 }, 0.1, { dtype = "bf16", device = DEV }), "full bf16")
    exact(fp8.zeros { 5 }, fp8.zeros({ 5 }, { device = DEV }), "zeros")
    exact(fp8.ones({ 2, 2 }, "fp16"), fp8.ones({ 2, 2 }, { dtype = "fp16", device = DEV }), "ones fp16")
  end)

  it("binary ops with broadcasting, scalars and dtype promotion", function()
    for _, op in ipairs { "add", "sub", "mul", "div" } do
      check(op, function(a, b) return a[op](a, b) end, { leaf { 4, 1, 6 }, leaf { 3, 1 } }, 0, 0, 1e-6, 1e-6)
      check(op .. " scalar", function(a) return a[op](a, 0.37) end, { leaf { 129, 33 } }, 0, 0)
    end
    for _, op in ipairs { "maximum", "minimum" } do
      check(op, function(a, b) return a[op](a, b) end, { leaf { 4, 1, 6 }, leaf { 3, 1 } }, 0, 0)
      check(op .. " scalar", function(a) return a[op](a, 0.1) end, { leaf { 500 } }, 0, 0)
    end
    check("clamp", function(a) return a:clamp(-0.5, 0.5) end, { leaf { 777 } }, 0, 0)
    check("clamp by tensors", function(a, lo) return a:clamp(lo, lo + 1) end, { leaf { 9, 77 }, leaf { 77 } }, 0, 0)
    check("where", function(a, b) return fp8.where(a:gt(0), a, b) end, { leaf { 4, 1, 6 }, leaf { 3, 1 } }, 0, 0)
    check("masked_fill", function(a) return a:masked_fill(a:lt(-1), -1 / 0) end, { leaf { 300 } }, 0, 0)
    -- pow: double pow on both sides, CUDA's within 2 ulp of a double of glibc's: one fp32 rounding apart
    local base = (leaf { 300 }:abs() + 0.1):detach()
    base:requires_grad(true)
    check("pow scalar", function(a) return a ^ 2.5 end, { base }, 0, 1.2e-7, 0, 4e-7)
    check("scalar pow", function(a) return 1.7 ^ a end, { leaf { 300 } }, 0, 1.2e-7, 0, 4e-7)
    check("pow tensor", function(a, b) return a:pow(b) end, { base, fp8.randn { 300 } }, 0, 1.2e-7, 0, 4e-7)
    -- comparisons: exact 1/0, ties included (bf16 operands of a few values tie often)
    local u, v = (fp8.randn { 40, 50 } * 2):to("bf16"), (fp8.randn { 50 } * 2):to("bf16")
    for _, op in ipairs { "eq", "ne", "lt", "le", "gt", "ge" } do
      exact(u[op](u, v), u:to(DEV)[op](u:to(DEV), v:to(DEV)), op)
      exact(u[op](u, 0.5), u:to(DEV)[op](u:to(DEV), 0.5), op .. " scalar")
      exact(fp8.Tensor[op](0.5, u), fp8.Tensor[op](0.5, u:to(DEV)), op .. " scalar first")
    end
    check("scalar first", function(a) return 2.5 / a end, { leaf { 300 } }, 0, 0, 0, 1e-6)
    local a, b = fp8.randn { 8, 9 }:to("bf16"), fp8.randn { 9 }:to("fp16")
    exact(a + b, a:to(DEV) + b:to(DEV), "bf16 + fp16")
    exact(a * a, a:to(DEV) * a:to(DEV), "bf16 * bf16")
  end)

  it("unary ops", function()
    for _, op in ipairs { "abs", "neg", "exp", "log", "sqrt", "tanh", "sigmoid" } do
      local x = leaf { 1000 }
      if op == "log" or op == "sqrt" then x = (x:abs() + 0.01):detach(); x:requires_grad(true) end
      -- exp/log/sqrt: CUDA's expf/logf are within 1-2 ulp of glibc's; tanh/sigmoid: double on both sides
      local tol = (op == "abs" or op == "neg") and 0 or 3e-7
      check(op, function(t) return t[op](t) end, { x }, 0, tol, 0, 4e-7)
    end
  end)

  it("the further unary ops, atan2, fmod and remainder, with their gradients", function()
    -- double functions on both sides, CUDA's within 2 ulp of a double of glibc's: one fp32 rounding apart; the
    -- gradients are device ops on such values (a few roundings more)
    for _, op in ipairs { "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "erf", "log1p", "expm1",
                          "log2", "log10", "exp2" } do
      local x = leaf { 1000 }
      if op == "log1p" or op == "log2" or op == "log10" then x = x:abs() + 0.01 end
      if op == "asin" or op == "acos" then x = x:tanh() * 0.99 end
      x = x:detach()
      x:requires_grad(true)
      check(op, function(t) return t[op](t) end, { x }, 0, 3e-7, 0, 1e-6)
    end
    -- atan2's gradients are exact fp32 arithmetic on both sides, summed over the broadcast dims; a number
    -- operand becomes a 0-d device tensor in the backward
    check("atan2", function(y, x) return y:atan2(x) end, { leaf { 4, 1, 6 }, leaf { 3, 1 } }, 0, 3e-7, 1e-6, 1e-6)
    check("atan2 scalar", function(y) return y:atan2(0.7) end, { leaf { 300 } }, 0, 3e-7, 0, 1e-6)
    check("scalar atan2", function(x) return fp8.Tensor.atan2(-0.4, x) end, { leaf { 300 } }, 0, 3e-7, 0, 1e-6)
    -- fmod and remainder are exact; the divisor's gradient -g·trunc (floor) of the quotient is exact
    -- elementwise and summed over the broadcast dims
    for _, op in ipairs { "fmod", "remainder" } do
      check(op, function(a, b) return a[op](a, b) end, { leaf({ 4, 1, 6 }, 3), leaf { 3, 1 } }, 0, 0, 1e-6, 1e-6)
      check(op .. " scalar", function(a) return a[op](a, 0.75) end, { leaf({ 300 }, 3) }, 0, 0)
      check("scalar " .. op, function(b) return fp8.Tensor[op](1.5, b) end, { leaf { 300 } }, 0, 0)
    end
  end)

  it("reductions over everything and along each dim", function()
    local x = leaf { 17, 33, 9 }
    for _, op in ipairs { "sum", "mean" } do
      check(op, function(t) return t[op](t) end, { x }, 1e-6, SUM_RTOL)
      for d = 1, 3 do check(op .. " dim " .. d, function(t) return t[op](t, d) end, { x }, 1e-6, SUM_RTOL) end
    end
    for _, op in ipairs { "max", "min", "amax" } do
      local y = fp8.randn { 17, 33, 9 }
      exact(y[op](y), y:to(DEV)[op](y:to(DEV)), op)
      for d = 1, 3 do exact(y[op](y, d), y:to(DEV)[op](y:to(DEV), d), op .. " dim " .. d) end
    end
    for _, op in ipairs { "argmax", "argmin" } do   -- read back to the host, the indices sent to the device
      local y = fp8.randn { 17, 33, 9 }
      exact(y[op](y), y:to(DEV)[op](y:to(DEV)), op)
      for d = 1, 3 do exact(y[op](y, d, true), y:to(DEV)[op](y:to(DEV), d, true), op .. " dim " .. d) end
    end
    local big = fp8.randn { 3000000 }
    assert_close(big:sum(), big:to(DEV):sum(), 1e-6, SUM_RTOL, "sum of 3M")
  end)

  it("cat and stack join device tensors as on the CPU, with gradients", function()
    local a, b = fp8.randn { 3, 5 }, fp8.randn { 3, 2 }
    exact(fp8.cat({ a, b }, 2), fp8.cat({ a:to(DEV), b:to(DEV) }, 2), "cat")
    exact(fp8.stack({ a, a }, 1), fp8.stack({ a:to(DEV), a:to(DEV) }, 1), "stack")
    local x = a:to(DEV):requires_grad(true)
    fp8.cat({ x, x }, 1):sum():backward()
    exact(fp8.full({ 3, 5 }, 2), x.grad, "cat grad")
  end)

  it("matmul: 2-D, batched, broadcast, transposed, bf16/fp16", function()
    check("2-D", function(a, b) return a:matmul(b) end, { leaf { 64, 96 }, leaf { 96, 80 } }, 1e-5, GEMM_TOL)
    check("batched", function(a, b) return a:matmul(b) end, { leaf { 3, 5, 16 }, leaf { 3, 16, 7 } }, 1e-5, GEMM_TOL)
    check("broadcast", function(a, b) return a:matmul(b) end, { leaf { 4, 2, 5, 16 }, leaf { 16, 3 } }, 1e-5, GEMM_TOL)
    check("transposed", function(a, b) return a:transpose(1, 2):matmul(b:transpose(1, 2)) end,
      { leaf { 48, 32 }, leaf { 40, 48 } }, 1e-5, GEMM_TOL)
    check("vector", function(a, b) return a:matmul(b) end, { leaf { 33 }, leaf { 33, 9 } }, 1e-5, GEMM_TOL)
    for _, dt in ipairs { "bf16", "fp16" } do
      local a, b = fp8.randn { 32, 64 }:to(dt), fp8.randn { 64, 48 }:to(dt)
      -- products of bf16/fp16 values are exact in fp32; rounding of the result to the dtype dominates
      assert_close(a:matmul(b), a:to(DEV):matmul(b:to(DEV)), 1e-2, dt == "bf16" and 8e-3 or 1e-3, "matmul " .. dt)
    end
  end)

  it("quantize and dequantize bit for bit, per tensor and per row", function()
    local x = fp8.randn { 48, 64 } * 3
    for _, fmt in ipairs { "e4m3", "e5m2" } do
      for _, opts in ipairs { {}, { axis = 1 }, { axis = 2 }, { scale = 2 }, { margin = 2 } } do
        local q, d = x:quantize(fmt, opts), x:to(DEV):quantize(fmt, opts)
        assert.same(q:bytes(), d:to("cpu"):bytes())
        local sc, sd = q:scale_inv(), d:scale_inv()
        if type(sc) == "number" then assert.equals(sc, sd) else exact(sc, sd, fmt .. " scale_inv") end
        assert.same({ q:underflow(), q:saturated() }, { d:underflow(), d:saturated() })
        exact(q:dequantize(), d:dequantize(), fmt .. " dequantize")
      end
    end
  end)

  it("activations, softmax and log-softmax", function()
    check("relu", F.relu, { leaf { 1000 } }, 0, 0)
    check("gelu tanh", function(x) return F.gelu(x, "tanh") end, { leaf { 4096 } }, 1e-7, 2e-6, 1e-7, 4e-6)
    check("gelu exact", F.gelu, { leaf { 4096 } }, 1e-7, 2e-6, 1e-7, 4e-6)
    for _, cols in ipairs { 1, 10, 257, 5000 } do
      check("softmax " .. cols, F.softmax, { leaf({ 7, cols }, 4) }, 1e-7, 2e-6, 1e-7, 4e-6)
      -- the gradient g - softmax·Σg carries the rounding of a sum of `cols` terms (first H100 run: 3e-6
      -- absolute at 5000 columns), hence an absolute bound that grows with cols
      check("log_softmax " .. cols, F.log_softmax, { leaf({ 7, cols }, 4) }, 1e-6, 2e-6, math.max(1e-7, cols * 4e-9), 4e-6)
    end
  end)

  it("losses: cross-entropy (ignore_index, label smoothing), MSE; bad targets are errors", function()
    local tgt = fp8.tensor { 3, 0, 9, 9, 1, 5, 2, 7 }
    for _, opts in ipairs { {}, { ignore_index = 9 }, { label_smoothing = 0.1 }, { ignore_index = 9, label_smoothing = 0.2 } } do
      local lg = leaf({ 8, 10 }, 3)
      local dlg = on_dev(lg)
      local lc, ld = F.cross_entropy(lg, tgt, opts), F.cross_entropy(dlg, tgt:to(DEV), opts)
      assert_close(lc, ld, 1e-6, 1e-6, "cross_entropy")
      lc:backward(); ld:backward()
      assert_close(lg.grad, dlg.grad, 1e-7, 2e-6, "cross_entropy grad")
    end
    local ok, err = pcall(F.cross_entropy, fp8.randn({ 2, 3 }):to(DEV), fp8.tensor({ 0, 5 }):to(DEV))
    assert.is_false(ok)
    assert.matches("out of range", err)
    check("mse", F.mse_loss, { leaf { 33, 7 }, leaf { 33, 7 } }, 1e-6, SUM_RTOL, 1e-7, 1e-6)
  end)

  it("layer norm, with and without affine parameters", function()
    for _, cols in ipairs { 1, 64, 768, 3000 } do
      check("layer_norm " .. cols, function(x, w, b) return F.layer_norm(x, w, b, 1e-5) end,
        { leaf({ 9, cols }, 2), leaf { cols }, leaf { cols } }, 1e-5, 1e-5, 1e-5, 1e-4)
    end
    check("layer_norm plain", function(x) return F.layer_norm(x, nil, nil, 1e-5) end, { leaf { 5, 33 } }, 1e-5, 1e-5)
  end)

  it("embedding forward and (deterministic) backward; out-of-range ids are errors", function()
    local ids = fp8.tensor { { 1, 5, 5, 0 }, { 9, 5, 1, 1 } }
    local w = leaf { 10, 24 }
    local dw = on_dev(w)
    local yc, yd = F.embedding(ids, w), F.embedding(ids:to(DEV), dw)
    exact(yc, yd, "embedding")
    local proj = fp8.randn(yc:shape());
    (yc * proj):sum():backward();
    (yd * proj:to(DEV)):sum():backward()
    assert_close(w.grad, dw.grad, 1e-6, 1e-6, "embedding grad")
    local g1 = dw.grad:to("cpu"):totable()
    dw.grad = nil;
    (F.embedding(ids:to(DEV), dw) * proj:to(DEV)):sum():backward()
    assert.same(g1, dw.grad:to("cpu"):totable())   -- same order of sums: bit for bit, run to run
    local ok, err = pcall(F.embedding, fp8.tensor({ 10 }):to(DEV), dw)
    assert.is_false(ok)
    assert.matches("range", err)
  end)

  it("dropout draws the CPU's mask for the same seed", function()
    local x = leaf { 5000 }
    local dx = on_dev(x)
    fp8.manual_seed(7)
    local yc = F.dropout(x, 0.3, true)
    fp8.manual_seed(7)
    local yd = F.dropout(dx, 0.3, true)
    exact(yc, yd, "dropout")
    yc:sum():backward(); yd:sum():backward()
    exact(x.grad, dx.grad, "dropout grad")
  end)

  it("scaled-dot-product attention, causal and not", function()
    for _, c in ipairs { { 2, 3, 17, 8 }, { 1, 2, 1, 5 }, { 2, 4, 64, 32 } } do
      for _, causal in ipairs { true, false } do
        check(("sdpa %s causal=%s"):format(table.concat(c, "x"), tostring(causal)),
          function(q, k, v) return F.scaled_dot_product_attention(q, k, v, { is_causal = causal }) end,
          { leaf(c), leaf(c), leaf(c) }, 1e-5, GEMM_TOL, 1e-5, 1e-4)
      end
    end
  end)

  it("attention on the packed qkv projection", function()
    for _, c in ipairs { { 2, 17, 3 * 32, 4 }, { 1, 1, 3 * 5, 1 }, { 2, 64, 3 * 128, 4 } } do
      check(("qkv_attention %dx%dx%d heads %d"):format(c[1], c[2], c[3], c[4]),
        function(qkv) return F.qkv_attention(qkv, c[4], { is_causal = true }) end,
        { leaf { c[1], c[2], c[3] } }, 1e-5, GEMM_TOL, 1e-5, 1e-4)
    end
  end)

  it("linear with bias, fp32, bf16 and under bf16 autocast", function()
    check("linear", F.linear, { leaf { 33, 64 }, leaf { 48, 64 }, leaf { 48 } }, 1e-5, GEMM_TOL)
    -- bf16 x, w and b (core/linear.c: the GEMM to fp32, the bf16 bias added in fp32, one rounding to bf16): the
    -- fp32 sums differ by the GEMM bound (atol), the rounding by one bf16 ulp (2^-7 relative at most); the
    -- gradients are fp32 GEMMs and a sum of dY rounded to the leaves' bf16, so one bf16 ulp apart as the output
    local function bf16_leaf(shape)
      local t = fp8.randn(shape):to("bf16")
      t:requires_grad(true)
      return t
    end
    check("linear bf16", F.linear, { bf16_leaf { 33, 64 }, bf16_leaf { 48, 64 }, bf16_leaf { 48 } }, 1e-3, 8e-3)
    fp8.set_autocast_dtype("bf16")
    local ok, err = pcall(check, "linear autocast bf16", F.linear, { leaf { 32, 64 }, leaf { 48, 64 }, leaf { 48 } },
      1e-4, 1e-3)
    fp8.set_autocast_dtype("fp32")
    assert(ok, err)
  end)

  it("optimizer steps match the CPU's to fp32 rounding", function()
    for _, mk in ipairs {
      function(ps) return fp8.optim.AdamW(ps, { lr = 1e-2, weight_decay = 0.1 }) end,
      function(ps) return fp8.optim.SGD(ps, { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 1e-3 }) end,
    } do
      local p = leaf { 1000 }
      local dp = on_dev(p)
      local oc, od = mk { p }, mk { dp }
      for _ = 1, 3 do
        local g = fp8.randn { 1000 }
        p.grad = g; dp.grad = dcopy(g)
        oc:step(); od:step()
      end
      assert_close(p, dp, 1e-7, 1e-6, "optimizer step")
    end
  end)

  it("clip_grad_norm_ and the fp16 loss scaler's inf check", function()
    local p = leaf { 100 }
    local dp = on_dev(p)
    p.grad = fp8.randn { 100 } * 10; dp.grad = dcopy(p.grad)
    local nc = fp8.nn.utils.clip_grad_norm_({ p }, 1.0)
    local nd = fp8.nn.utils.clip_grad_norm_({ dp }, 1.0)
    assert.is_true(math.abs(nc - nd) <= 1e-6 * nc)
    assert_close(p.grad, dp.grad, 1e-7, 1e-6, "clipped grad")
  end)
end)
