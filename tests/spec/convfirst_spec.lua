-- Changed on 2026-12-07 (stop 98): conv2d's fp32 forward of a first layer (one group of under 16 input channels: an
-- image's 1-4) runs oneDNN's first-layer kernel reading the NCHW input in place (core/cpu/cpu_conv.c, cv_make), as
-- torch 2.15's mkldnn route does, where it reordered the input to NHWC for brgconv each call (1.5-2.1× torch's time).
-- docs/performance.md, "conv2d's first layer (stop 98)". Its sums run in that kernel's order, so these cases compare
-- against the definition in Lua's doubles within the fp32 sum's bound K·2^-24·Σ|x·w| (K the products an output sums):
-- 1-15 channels, output channels not a multiple of the kernel's block of 16 (its spare channels skipped), strides,
-- dilations, asymmetric padding, a bias, a channels-last view, the batch in chunks; that the route is taken is
-- test_core conv2d_fp32_first_layer_reads_nchw_in_place's to check (values cannot tell the kernels apart).
local F = fp8.nn.F

local function flat(t) return t:float():contiguous():view(-1):tolist() end

local U = dofile("tests/spec/helpers/util.lua")
local ref_conv2d, assert_close = U.ref_conv2d, U.conv_close   -- conv2d in doubles, and the fp32 bound

describe("conv2d's first layer (stop 98)", function()
  it("matches the definition in doubles for 1-15 input channels (and 16, the layouts' boundary)", function()
    local cases = {
      -- C, OC, N, H, W, k, stride, dilation, padding (top/bottom, left/right), bias
      { 3, 64, 2, 12, 12, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, true },
      { 3, 17, 2, 23, 19, { 7, 7 }, { 2, 2 }, { 1, 1 }, { 3, 3 }, true },
      { 1, 5, 3, 9, 11, { 3, 5 }, { 1, 2 }, { 1, 1 }, { 0, 2 }, false },
      { 4, 24, 1, 14, 13, { 5, 5 }, { 2, 1 }, { 2, 1 }, { 2, 1 }, true },
      { 8, 16, 2, 10, 10, { 3, 3 }, { 1, 1 }, { 2, 2 }, { 2, 2 }, false },
      { 15, 33, 1, 8, 9, { 3, 2 }, { 1, 1 }, { 1, 1 }, { 1, 0 }, true },
      { 2, 3, 2, 6, 7, { 1, 1 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, false },
      { 3, 8, 1, 7, 7, { 3, 3 }, { 3, 3 }, { 1, 1 }, { 0, 0 }, true },
      { 16, 20, 1, 8, 8, { 3, 3 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, true },
    }
    for i, c in ipairs(cases) do
      fp8.manual_seed(980 + i)
      local C, OC, N, H, W = c[1], c[2], c[3], c[4], c[5]
      local x, w = fp8.randn { N, C, H, W }, fp8.randn { OC, C, c[6][1], c[6][2] }
      local b = c[10] and fp8.randn { OC } or nil
      local y = fp8.no_grad(function()
        return F.conv2d(x, w, b, { stride = c[7], dilation = c[8], padding = c[9] })
      end)
      local want, mag, shape = ref_conv2d(x, w, b, c[7], c[8], { c[9][1], c[9][1], c[9][2], c[9][2] }, 1)
      local what = ("case %d: C%d OC%d N%d %dx%d k%s s%s d%s p%s"):format(i, C, OC, N, H, W, table.concat(c[6], "x"),
        table.concat(c[7], "x"), table.concat(c[8], "x"), table.concat(c[9], "x"))
      assert.are.same(shape, y:shape(), what .. ": shape")
      assert_close(what, y, want, mag, C * c[6][1] * c[6][2])
    end
  end)

  it("matches it with \"same\" padding of an even kernel, a channels-last input view and with a gradient", function()
    fp8.manual_seed(98)
    local x, w, b = fp8.randn { 2, 3, 9, 8 }, fp8.randn { 18, 3, 4, 2 }, fp8.randn { 18 }
    local y = fp8.no_grad(function() return F.conv2d(x, w, b, { padding = "same" }) end)
    local want, mag = ref_conv2d(x, w, b, { 1, 1 }, { 1, 1 }, { 1, 2, 0, 1 }, 1)
    assert_close("same, even kernel", y, want, mag, 24)
    local xl = fp8.randn({ 2, 11, 10, 3 }):permute { 1, 4, 2, 3 }
    assert.is_false(xl:is_contiguous())
    local wl = fp8.randn { 7, 3, 3, 3 }
    local yl = F.conv2d(xl, wl, nil, { stride = 2, padding = 1 })
    want, mag = ref_conv2d(xl, wl, nil, { 2, 2 }, { 1, 1 }, { 1, 1, 1, 1 }, 1)
    assert_close("channels-last view", yl, want, mag, 27)
    -- recorded for a gradient: the same forward, its bits
    local xg = x:clone():requires_grad_()
    local yg = F.conv2d(xg, w, b, { padding = "same" })
    local a, e = flat(yg:detach()), flat(y)
    for i = 1, #a do
      assert.are.equal(string.pack("<f", e[i]), string.pack("<f", a[i]), "with a gradient: element " .. i)
    end
  end)

  it("gives each sample its own bits when the batch runs in chunks", function()
    -- [5, 3, 600, 600] → 4, stride 2: 1.44 M input and output elements a sample, so chunks of two (2^22 a chunk)
    fp8.manual_seed(7)
    local x, w = fp8.randn { 5, 3, 600, 600 }, fp8.randn { 4, 3, 3, 3 }
    local y = fp8.no_grad(function() return F.conv2d(x, w, nil, { stride = 2, padding = 1 }) end)
    for n = 1, 5 do
      local yn = fp8.no_grad(function() return F.conv2d(x:narrow(1, n, 1), w, nil, { stride = 2, padding = 1 }) end)
      assert.are.equal(1, y:narrow(1, n, 1):eq(yn):all():item(), ("sample %d"):format(n))
    end
  end)
end)
