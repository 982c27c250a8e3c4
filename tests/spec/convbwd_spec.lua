-- Changed on 2026-12-07 (stop 99): conv2d's fp32 backward on the CPU runs oneDNN's backward-data and backward-weights
-- primitives (core/cpu/cpu_conv.c, the device entries conv2d_direct_bwd_data / _weights; the bias's gradient with the
-- weight's) where it made columns (im2col, GEMMs, col2im; still the route of a 1×1 kernel at stride 1 without padding,
-- of a padding wider than the image, of bf16/fp16 and of a geometry oneDNN has no direct kernel for), and a forward's
-- bias is added in the copy out of the kernel's layout (the same fp32 addition). Each gradient's products are summed
-- in the kernel's order, not the columns' bits: these cases compare the input's, weight's and bias's gradients with
-- the definition summed in Lua's doubles (U.ref_conv2d_bwd, within (K + 1)·2^-24·Σ|term|), over the common shapes
-- and hostile ones (groups, dilation, asymmetric stride and padding, one-pixel images, batch 1, many channels,
-- non-contiguous output gradients, channels-last inputs), and check that the chunks of samples give each sample's own
-- input gradient and the chunks' weight gradients summed in double, rounded once. docs/performance.md, "conv2d's
-- backward by oneDNN (stop 99)".
local F = fp8.nn.F

local U = dofile("tests/spec/helpers/util.lua")

local function flat(t) return t:float():contiguous():view(-1):tolist() end

-- conv2d of x, w (and b) with opts, the output gradient gy (made by mk_gy from the output's shape), against doubles.
-- ref = { stride, dilation, { pt, pb, pl, pr }, groups }; needs = which of x, w, b want a gradient.
local function check(what, x, w, b, opts, ref, needs, mk_gy)
  local xg = needs.x and x:detach():requires_grad_() or x
  local wg = needs.w and w:detach():requires_grad_() or w
  local bg = b and (needs.b and b:detach():requires_grad_() or b) or nil
  local y = F.conv2d(xg, wg, bg, opts)
  local gy = mk_gy(y:shape())
  y:backward(gy)
  local r = U.ref_conv2d_bwd(x, w, gy, ref[1], ref[2], ref[3], ref[4])
  if needs.x then U.conv_close(what .. ": the input's gradient", xg.grad, r.dx, r.dxm, r.K[1]) end
  if needs.w then U.conv_close(what .. ": the weight's gradient", wg.grad, r.dw, r.dwm, r.K[2]) end
  if b and needs.b then U.conv_close(what .. ": the bias's gradient", bg.grad, r.db, r.dbm, r.K[3]) end
  if not needs.x then assert.is_nil(xg.grad, what) end
  if not needs.w then assert.is_nil(wg.grad, what) end
end

local function randn_gy(shape) return fp8.randn(shape) end
-- a non-contiguous output gradient: an NHWC tensor seen as NCHW
local function nhwc_gy(shape) return fp8.randn { shape[1], shape[3], shape[4], shape[2] }:permute(1, 4, 2, 3) end
-- an expanded one (stride 0 over the batch), as y:sum():backward() gives a broadcast one
local function expanded_gy(shape)
  return fp8.randn { 1, shape[2], shape[3], shape[4] }:expand(shape)
end

local ALL, XW, X, W, WB = { x = true, w = true, b = true }, { x = true, w = true }, { x = true }, { w = true },
  { w = true, b = true }

describe("conv2d's fp32 backward by oneDNN's primitives (stop 99)", function()
  it("gives the input's, weight's and bias's gradients of the definition on the common shapes", function()
    fp8.manual_seed(99)
    -- name, x, w, bias?, opts, reference geometry, needs, output gradient
    local cases = {
      { "3x3 stride 1", { 2, 16, 6, 6 }, { 16, 16, 3, 3 }, true, { padding = 1 }, { { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 }, ALL },
      { "3x3 stride 2", { 2, 16, 7, 7 }, { 24, 16, 3, 3 }, false, { padding = 1, stride = 2 },
        { { 2, 2 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 }, XW },
      { "1x1 stride 2", { 2, 32, 5, 5 }, { 16, 32, 1, 1 }, true, { stride = 2 }, { { 2, 2 }, { 1, 1 }, { 0, 0, 0, 0 }, 1 },
        ALL },
      { "1x1 stride 1 (the columns)", { 2, 8, 4, 5 }, { 6, 8, 1, 1 }, true, {}, { { 1, 1 }, { 1, 1 }, { 0, 0, 0, 0 }, 1 },
        ALL },
      { "a first layer of 3 channels", { 2, 3, 8, 8 }, { 16, 3, 3, 3 }, true, { padding = 1 },
        { { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 }, ALL },
      { "a first layer, weight and bias only", { 2, 3, 8, 8 }, { 16, 3, 3, 3 }, true, { padding = 1 },
        { { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 }, WB },
      { "7x7 stride 2", { 1, 3, 12, 12 }, { 8, 3, 7, 7 }, false, { padding = 3, stride = 2 },
        { { 2, 2 }, { 1, 1 }, { 3, 3, 3, 3 }, 1 }, XW },
      { "the input's gradient alone", { 2, 16, 6, 6 }, { 16, 16, 3, 3 }, false, { padding = 1 },
        { { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 }, X },
      { "the weight's alone", { 2, 16, 6, 6 }, { 16, 16, 3, 3 }, false, { padding = 1 },
        { { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 }, W },
    }
    for _, c in ipairs(cases) do
      local x, w = fp8.randn(c[2]), fp8.randn(c[3])
      local b = c[4] and fp8.randn { c[3][1] } or nil
      check(c[1], x, w, b, c[5], c[6], c[7], randn_gy)
    end
  end)

  it("gives them on hostile geometries and layouts", function()
    fp8.manual_seed(991)
    local cases = {
      { "groups 2", { 2, 8, 6, 5 }, { 12, 4, 3, 3 }, true, { padding = 1, groups = 2 },
        { { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 2 } },
      { "groups 4, 2 channels each, dilated", { 2, 8, 10, 9 }, { 8, 2, 3, 3 }, false,
        { padding = 2, dilation = 2, groups = 4 }, { { 1, 1 }, { 2, 2 }, { 2, 2, 2, 2 }, 4 } },
      { "dilation 2, strides (1, 2), padding (2, 1)", { 2, 16, 9, 8 }, { 16, 16, 3, 3 }, true,
        { padding = { 2, 1 }, dilation = { 2, 1 }, stride = { 1, 2 } }, { { 1, 2 }, { 2, 1 }, { 2, 2, 1, 1 }, 1 } },
      { "an even kernel's 'same' padding (0 before, 1 after)", { 2, 16, 6, 7 }, { 16, 16, 2, 2 }, false,
        { padding = "same" }, { { 1, 1 }, { 1, 1 }, { 0, 1, 0, 1 }, 1 } },
      { "one-pixel images", { 3, 16, 1, 1 }, { 16, 16, 3, 3 }, true, { padding = 1 },
        { { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 } },
      { "a one-pixel output of a 5x5 kernel", { 2, 16, 5, 5 }, { 8, 16, 5, 5 }, true, {},
        { { 1, 1 }, { 1, 1 }, { 0, 0, 0, 0 }, 1 } },
      { "batch 1, 200 channels", { 1, 200, 3, 3 }, { 24, 200, 3, 3 }, true, { padding = 1 },
        { { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1 } },
      { "padding wider than the image (the columns)", { 1, 16, 2, 2 }, { 8, 16, 3, 3 }, true, { padding = 3 },
        { { 1, 1 }, { 1, 1 }, { 3, 3, 3, 3 }, 1 } },
      { "kernel 3x1, stride (2, 1), 17 channels", { 2, 17, 7, 4 }, { 19, 17, 3, 1 }, true,
        { stride = { 2, 1 }, padding = { 1, 0 } }, { { 2, 1 }, { 1, 1 }, { 1, 1, 0, 0 }, 1 } },
    }
    for i, c in ipairs(cases) do
      local x, w = fp8.randn(c[2]), fp8.randn(c[3])
      local b = c[4] and fp8.randn { c[3][1] } or nil
      local gy = ({ randn_gy, nhwc_gy, expanded_gy })[i % 3 + 1]
      check(c[1], x, w, b, c[5], c[6], ALL, gy)
      -- the input as a channels-last view (NHWC memory seen as NCHW)
      local s = c[2]
      local xl = fp8.randn { s[1], s[3], s[4], s[2] }:permute(1, 4, 2, 3)
      check(c[1] .. ", a channels-last input", xl, w, b, c[5], c[6], ALL, gy)
    end
  end)

  it("takes a large batch in chunks: each sample's input gradient, the chunks' weight gradients summed once", function()
    -- 2·250000 input and output values a sample: four samples a chunk (about 4M values), six samples, a tail of two
    fp8.manual_seed(13)
    local x, w, b = fp8.randn { 6, 2, 500, 500 }, fp8.randn { 2, 2, 3, 3 }, fp8.randn { 2 }
    local gy = fp8.randn { 6, 2, 500, 500 }
    local function grads(lo, n)
      local xg, wg, bg = x:narrow(1, lo, n):detach():requires_grad_(), w:detach():requires_grad_(),
        b:detach():requires_grad_()
      F.conv2d(xg, wg, bg, { padding = 1 }):backward(gy:narrow(1, lo, n))
      return xg.grad, flat(wg.grad), flat(bg.grad)
    end
    local dx, dw, db = grads(1, 6)
    local _, dw1, db1 = grads(1, 4)   -- the first chunk, alone: one call of the primitive, as in the batch
    local _, dw2, db2 = grads(5, 2)   -- the tail
    for n = 1, 6 do
      local dxn = grads(n, 1)
      assert.are.equal(1, dx:narrow(1, n, 1):eq(dxn):all():item(), ("sample %d's input gradient"):format(n))
    end
    local function summed(what, got, a, c)
      for i = 1, #got do
        assert.are.equal(string.pack("<f", a[i] + c[i]), string.pack("<f", got[i]), ("%s %d"):format(what, i))
      end
    end
    summed("the weight's gradient", dw, dw1, dw2)
    summed("the bias's gradient", db, db1, db2)
  end)
end)
