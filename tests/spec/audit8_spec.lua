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
