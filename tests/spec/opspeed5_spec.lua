-- Changed on 2026-12-07 (stop 98): conv2d's fp32 forward on the CPU runs oneDNN's direct convolution
-- (core/cpu/cpu_conv.c; docs/performance.md, "conv2d and the ops stop 97 left slow (stop 98)") where it made columns
-- and a GEMM (core/conv_cols.c, still the route of a 1×1 kernel at stride 1 without padding and of bf16/fp16; of the
-- backward until stop 99). Each output's products are summed in oneDNN's kernel's order, so the values are not the columns' bits:
-- these cases compare against the convolution's definition summed in Lua's doubles (within the fp32 sum's error bound
-- K·2^-24·Σ|x·w|, K the products an output sums), over groups, dilations, strides, asymmetric and mode padding,
-- strided views and a bias, and check that the forward recorded for a gradient is the one without, that the chunks of
-- samples give each sample's own bits, and the gradients against doubles (oneDNN's backward primitives since stop 99:
-- convbwd_spec).
local F, nn = fp8.nn.F, fp8.nn

local function flat(t) return t:float():contiguous():view(-1):tolist() end

local U = dofile("tests/spec/helpers/util.lua")
local ref_conv2d, assert_close = U.ref_conv2d, U.conv_close   -- conv2d in doubles, and the fp32 bound

local function bits_equal(what, a, b)
  assert.are.same(a:shape(), b:shape(), what .. ": shapes")
  local fa, fb = flat(a), flat(b)
  for i = 1, #fa do
    if string.pack("<f", fa[i]) ~= string.pack("<f", fb[i]) then
      error(("%s: element %d is %.9g, want %.9g"):format(what, i, fa[i], fb[i]), 2)
    end
  end
end

describe("conv2d's fp32 forward by oneDNN's direct convolution (stop 98)", function()
  it("matches the definition in doubles: groups, dilations, strides, padding, bias, on random geometries", function()
    math.randomseed(98)
    for case = 1, 40 do
      local g = ({ 1, 1, 2, 4 })[case % 4 + 1]
      local C, OC = g * math.random(1, 3), g * math.random(1, 3)
      local k = { math.random(1, 4), math.random(1, 4) }
      local s = { math.random(1, 3), math.random(1, 3) }
      local d = { math.random(1, 3), math.random(1, 2) }
      local p = { math.random(0, 3), math.random(0, 2) }
      local N = math.random(1, 3)
      local H = math.max(math.random(3, 11), d[1] * (k[1] - 1) + 1 - 2 * p[1])
      local W = math.max(math.random(3, 11), d[2] * (k[2] - 1) + 1 - 2 * p[2])
      fp8.manual_seed(case)
      local x, w = fp8.randn { N, C, H, W }, fp8.randn { OC, C // g, k[1], k[2] }
      local b = case % 3 == 0 and fp8.randn { OC } or nil
      local y = fp8.no_grad(function()
        return F.conv2d(x, w, b, { stride = s, dilation = d, padding = p, groups = g })
      end)
      local want, mag, shape = ref_conv2d(x, w, b, s, d, { p[1], p[1], p[2], p[2] }, g)
      local what = ("case %d: N%d C%d OC%d %dx%d g%d k%s s%s d%s p%s%s"):format(case, N, C, OC, H, W, g,
        table.concat(k, "x"), table.concat(s, "x"), table.concat(d, "x"), table.concat(p, "x"), b and " bias" or "")
      assert.are.same(shape, y:shape(), what .. ": shape")
      assert.are.equal("fp32", y:dtype())
      assert_close(what, y, want, mag, C // g * k[1] * k[2])
    end
  end)

  it("matches the definition with \"same\" padding of an even kernel (more at the bottom and right), a strided "
    .. "input view and padding modes", function()
    fp8.manual_seed(5)
    local x, w, b = fp8.randn { 2, 3, 7, 6 }, fp8.randn { 4, 3, 2, 4 }, fp8.randn { 4 }
    local y = fp8.no_grad(function() return F.conv2d(x, w, b, { padding = "same" }) end)
    local want, mag = ref_conv2d(x, w, b, { 1, 1 }, { 1, 1 }, { 0, 1, 1, 2 }, 1)
    assert_close("same, even kernel", y, want, mag, 24)
    -- an input stored channels-last (a permuted view), stride 2, dilation 2
    local xl = fp8.randn({ 2, 9, 10, 4 }):permute { 1, 4, 2, 3 }
    assert.is_false(xl:is_contiguous())
    local w2 = fp8.randn { 5, 4, 3, 3 }
    local y2 = F.conv2d(xl, w2, nil, { stride = 2, padding = 2, dilation = 2 })
    want, mag = ref_conv2d(xl, w2, nil, { 2, 2 }, { 2, 2 }, { 2, 2, 2, 2 }, 1)
    assert_close("permuted input", y2, want, mag, 36)
    -- a module with circular padding: the padded input, then the convolution without padding
    for _, mode in ipairs { "circular", "reflect", "replicate" } do
      local m = nn.Conv2d(3, 2, 3, { padding = 1, padding_mode = mode })
      local xm = fp8.randn { 1, 3, 5, 6 }
      local ym = fp8.no_grad(function() return m:forward(xm) end)
      local xp = F.pad(xm, { 1, 1, 1, 1 }, { mode = mode })
      want, mag = ref_conv2d(xp, m.weight:detach(), m.bias:detach(), { 1, 1 }, { 1, 1 }, { 0, 0, 0, 0 }, 1)
      assert_close("padding_mode " .. mode, ym, want, mag, 27)
    end
    -- conv1d (a conv2d of one row)
    local x1, w1 = fp8.randn { 2, 3, 17 }, fp8.randn { 4, 3, 5 }
    local y1 = F.conv1d(x1, w1, nil, { stride = 2, padding = 3, dilation = 2 })
    want, mag = ref_conv2d(x1:unsqueeze(4), w1:unsqueeze(4), nil, { 2, 1 }, { 2, 1 }, { 3, 3, 0, 0 }, 1)
    assert_close("conv1d", y1, want, mag, 15)
  end)

  it("gives the same forward with a gradient recorded, and the gradients of the definition", function()
    fp8.manual_seed(11)
    local x, w, b = fp8.randn { 3, 4, 9, 8 }, fp8.randn { 6, 2, 3, 3 }, fp8.randn { 6 }
    local o = { stride = { 1, 2 }, padding = { 1, 2 }, dilation = { 2, 1 }, groups = 2 }
    local y0 = fp8.no_grad(function() return F.conv2d(x, w, b, o) end)
    local xg, wg, bg = x:clone():requires_grad_(), w:clone():requires_grad_(), b:clone():requires_grad_()
    local y = F.conv2d(xg, wg, bg, o)
    bits_equal("forward with grad", y:detach(), y0)
    local gy = fp8.randn(y:shape())
    y:backward(gy)
    -- the gradients in doubles: dx[n, c, h, w] = Σ gy·w over the outputs that read it, dw = Σ gy·x, db = Σ gy
    local want, mag = ref_conv2d(x, w, b, { 1, 2 }, { 2, 1 }, { 1, 1, 2, 2 }, 2)
    assert_close("forward", y:detach(), want, mag, 18)
    local gv, xv = flat(gy), flat(x)
    local db = {}
    for oc = 1, 6 do db[oc] = 0 end
    local oh, ow = y:size(3), y:size(4)
    for i = 1, #gv do local oc = ((i - 1) // (oh * ow)) % 6 + 1; db[oc] = db[oc] + gv[i] end
    local gb = flat(bg.grad)
    for oc = 1, 6 do assert.is_true(math.abs(gb[oc] - db[oc]) <= 1e-4 * (1 + math.abs(db[oc])), "bias gradient") end
    -- the weight's and input's gradients as a conv2d of doubles: dw[o, c, p, q] = Σ_n,i,j gy[n,o,i,j]·x[n, ci, ...]
    local dwv = flat(wg.grad)
    local k = 0
    for oo = 0, 5 do
      local grp = oo // 3
      for c = 0, 1 do
        for p = 0, 2 do
          for q = 0, 2 do
            local acc, m = 0.0, 0.0
            for n = 0, 2 do
              for i = 0, oh - 1 do
                for j = 0, ow - 1 do
                  local hi, wi = i - 1 + 2 * p, j * 2 - 2 + q
                  if hi >= 0 and hi < 9 and wi >= 0 and wi < 8 then
                    local t = gv[((n * 6 + oo) * oh + i) * ow + j + 1] * xv[((n * 4 + grp * 2 + c) * 9 + hi) * 8 + wi + 1]
                    acc, m = acc + t, m + math.abs(t)
                  end
                end
              end
            end
            k = k + 1
            assert.is_true(math.abs(dwv[k] - acc) <= 200 * 2 ^ -24 * m + 1e-30, ("weight gradient %d"):format(k))
          end
        end
      end
    end
    assert.are.same({ 3, 4, 9, 8 }, xg.grad:shape())
  end)

  it("runs a large batch in chunks of samples, each sample with its own bits", function()
    -- 2·250000 input and output values a sample: four samples a chunk (about 4M values), six samples, a tail of two
    fp8.manual_seed(13)
    local x, w = fp8.randn { 6, 2, 500, 500 }, fp8.randn { 2, 2, 3, 3 }
    local y = F.conv2d(x, w, nil, { padding = 1 })
    for n = 1, 6 do
      local yn = F.conv2d(x:narrow(1, n, 1), w, nil, { padding = 1 })
      assert.are.equal(1, y:narrow(1, n, 1):eq(yn):all():item(), ("sample %d"):format(n))
    end
    -- and the values of one corner against the definition
    local corner = x:narrow(1, 6, 1):narrow(3, 1, 6):narrow(4, 495, 6):contiguous()
    local want, mag = ref_conv2d(corner, w, nil, { 1, 1 }, { 1, 1 }, { 1, 0, 0, 1 }, 1)
    assert_close("corner", y:narrow(1, 6, 1):narrow(3, 1, 5):narrow(4, 496, 5), want, mag, 18)
  end)
end)
