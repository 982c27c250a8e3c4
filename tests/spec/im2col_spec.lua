-- im2col_spec.lua — the native windows (core/im2col.c: fp8.core._nn.im2col / col2im) against the gather and
-- scatter_add over fp32 flat positions that F.unfold, F.fold, the convolutions, the poolings and the transposed
-- convolutions were made of until 2026-12-06 (kept here as the reference): the same bits, forward and backward, on
-- random geometries (strides, paddings, dilations, groups, ceil_mode, bf16, unbatched, non-contiguous, empty), and
-- their refusals of bad arguments. (An fp32 conv2d's forward, oneDNN's direct convolution since stop 98, and its
-- gradients, oneDNN's backward primitives since stop 99, are within their sums' rounding of the reference, not its
-- bits.)
local U = dofile("tests/spec/helpers/util.lua")
local F = fp8.nn.functional
local NN = require("fp8.core")._nn

-- ---- the reference: the flat positions into the padded plane, gathered (the code conv.lua had) -------------------

-- index[k·L + l]: the padded plane's flat position kernel offset k of window l reads
local function positions(hp, wp, k, s, d)
  local oh = (hp - d[1] * (k[1] - 1) - 1) // s[1] + 1
  local ow = (wp - d[2] * (k[2] - 1) - 1) // s[2] + 1
  if oh < 1 or ow < 1 then return nil, oh, ow end
  local list = {}
  for i = 0, k[1] - 1 do
    for j = 0, k[2] - 1 do
      for y = 0, oh - 1 do
        for x = 0, ow - 1 do list[#list + 1] = (y * s[1] + i * d[1]) * wp + j * d[2] + x * s[2] end
      end
    end
  end
  return fp8.tensor(list), oh, ow
end

-- x [N, C, H, W] padded by pads {top, bottom, left, right} holding value: [N, C, K, L], oh, ow
local function ref_windows(x, k, s, d, pads, value)
  local N, C = x:size(1), x:size(2)
  local xp = (pads[1] + pads[2] + pads[3] + pads[4] > 0)
    and F.pad(x, { pads[3], pads[4], pads[1], pads[2] }, { value = value or 0 }) or x
  local hp, wp = xp:size(3), xp:size(4)
  local idx, oh, ow = positions(hp, wp, k, s, d)
  local KL = idx:numel()
  local cols = xp:reshape({ N, C, hp * wp }):gather(3, idx:reshape({ 1, 1, KL }):expand({ N, C, KL }))
  return cols:reshape({ N, C, k[1] * k[2], oh * ow }), oh, ow
end

-- cols [N, C, K, L] added into an h×w plane padded by pads (scatter_add, then the padding cropped)
local function ref_fold(cols, h, w, k, s, d, pads)
  local N, C = cols:size(1), cols:size(2)
  local hp, wp = h + pads[1] + pads[2], w + pads[3] + pads[4]
  local idx = positions(hp, wp, k, s, d)
  local KL = idx:numel()
  local planes = fp8.zeros({ N, C, hp * wp }, { dtype = cols:dtype() })
  local out = planes:scatter_add(3, idx:reshape({ 1, 1, KL }):expand({ N, C, KL }), cols:reshape({ N, C, KL }))
  out = out:reshape({ N, C, hp, wp })
  if pads[1] + pads[2] + pads[3] + pads[4] > 0 then out = F.pad(out, { -pads[3], -pads[4], -pads[1], -pads[2] }) end
  return out
end

-- ---- helpers -----------------------------------------------------------------------------------------------------

local function geometry(k, s, d, pads) return { k[1], k[2], s[1], s[2], d[1], d[2], pads[1], pads[2], pads[3], pads[4] } end

-- a and b hold the same bits (as fp32 values: NaN-free data; -0 and +0 are told apart by 1/x)
local function same_bits(what, a, b)
  assert.are.same(a:shape(), b:shape(), what .. ": shapes")
  assert.are.equal(a:dtype(), b:dtype(), what .. ": dtypes")
  if a:numel() == 0 then return end
  local fa, fb = U.flat(a:to("f32")), U.flat(b:to("f32"))
  for i = 1, #fa do
    if fa[i] ~= fb[i] or (fa[i] == 0 and 1 / fa[i] ~= 1 / fb[i]) then
      error(("%s: element %d is %.9g, the reference's %.9g"):format(what, i, fa[i], fb[i]), 2)
    end
  end
end

-- f(inputs...) and its inputs' gradients for the output gradient gout (a fixed random tensor)
local function with_grads(f, inputs, seed)
  local leaves = {}
  for i, t in ipairs(inputs) do leaves[i] = t:detach():requires_grad_(true) end
  local y = f(table.unpack(leaves))
  fp8.manual_seed(seed)
  local gout = fp8.randn(y:shape())
  y:backward(gout:to(y:dtype()))
  local grads = {}
  for i, l in ipairs(leaves) do grads[i] = l.grad end
  return y:detach(), grads
end

-- a within the fp32 sums' rounding of the reference b: since 2026-12-07 (stop 98) an fp32 conv2d's forward (but for
-- a 1×1 kernel at stride 1 without padding) is oneDNN's direct convolution (core/cpu/cpu_conv.c), its products summed
-- in the kernel's order, not the columns GEMM's; opspeed5_spec checks it against the definition in doubles. Since
-- stop 100 a bf16 one's too (oneDNN's bf16 primitives: the fp32 sums in the kernel's order, rounded to bf16 once), so
-- a bf16 result is within one bf16 rounding of the reference (2^-7 of the largest value; convbf16_spec checks it
-- against the definition in doubles)
local function close_values(what, a, b)
  assert.are.same(a:shape(), b:shape(), what .. ": shapes")
  assert.are.equal(a:dtype(), b:dtype(), what .. ": dtypes")
  local fa, fb = U.flat(a:to("f32")), U.flat(b:to("f32"))
  local scale = 0
  for i = 1, #fb do scale = math.max(scale, math.abs(fb[i])) end
  local tol = a:dtype() == "bf16" and 2 ^ -7 or 2 ^ -16
  for i = 1, #fa do
    if not (math.abs(fa[i] - fb[i]) <= scale * tol) then
      error(("%s: element %d is %.9g, the reference's %.9g"):format(what, i, fa[i], fb[i]), 2)
    end
  end
end

-- fp32_close: an fp32 or bf16 forward and its gradients compared by close_values (the conv2d's direct route: its
-- forward since stop 98, its backward by oneDNN's backward primitives since stop 99, bf16's both ways since stop 100;
-- convbwd_spec and convbf16_spec check those against the definition in doubles), else by their bits
local function same_with_grads(what, f, g, inputs, seed, fp32_close)
  local y1, g1 = with_grads(f, inputs, seed)
  local y2, g2 = with_grads(g, inputs, seed)
  local close = fp32_close and (y1:dtype() == "fp32" or y1:dtype() == "bf16")
  if close then close_values(what .. " (forward)", y1, y2)
  else same_bits(what .. " (forward)", y1, y2) end
  for i = 1, #inputs do
    if close then close_values(("%s (gradient %d)"):format(what, i), g1[i], g2[i])
    else same_bits(("%s (gradient %d)"):format(what, i), g1[i], g2[i]) end
  end
end

-- ---- the ops -----------------------------------------------------------------------------------------------------

describe("im2col / col2im (core/im2col.c)", function()
  it("unfold and fold give the gather's and the scatter_add's bits, forward and backward, on random geometries",
     function()
    math.randomseed(91)
    for case = 1, 60 do
      local k = { math.random(1, 3), math.random(1, 3) }
      local s = { math.random(1, 3), math.random(1, 3) }
      local d = { math.random(1, 2), math.random(1, 2) }
      local pads = { math.random(0, 2), math.random(0, 3), math.random(0, 2), math.random(0, 3) }
      local N, C = math.random(0, 2), math.random(1, 3)
      local H, W = math.random(1, 7), math.random(1, 7)
      local oh = (H + pads[1] + pads[2] - d[1] * (k[1] - 1) - 1) // s[1] + 1
      local ow = (W + pads[3] + pads[4] - d[2] * (k[2] - 1) - 1) // s[2] + 1
      local dt = case % 3 == 0 and "bf16" or "f32"
      local value = case % 4 == 0 and -math.huge or (case % 5 == 0 and 2.5 or 0)
      local what = ("case %d: %s x[%d,%d,%d,%d] k%s s%s d%s pads%s"):format(case, dt, N, C, H, W,
        table.concat(k, "x"), table.concat(s, "x"), table.concat(d, "x"), table.concat(pads, ","))
      fp8.manual_seed(case)
      local x = fp8.randn({ N, C, H, W }):to(dt)
      if case % 2 == 0 then x = fp8.randn({ N, C, W, H }):to(dt):transpose(3, 4) end   -- non-contiguous
      if oh < 1 or ow < 1 then
        U.fails_with("unfold: the", NN.im2col, x, geometry(k, s, d, pads))
      else
        local geo = geometry(k, s, d, pads)
        same_with_grads(what .. " unfold", function(t) return NN.im2col(t, geo, value) end,
          function(t) return (ref_windows(t, k, s, d, pads, value)) end, { x }, case)
        fp8.manual_seed(case + 1000)
        local cols = fp8.randn({ N, C, k[1] * k[2], oh * ow }):to(dt)
        same_with_grads(what .. " fold", function(t) return NN.col2im(t, H, W, geo) end,
          function(t) return ref_fold(t, H, W, k, s, d, pads) end, { cols }, case)
      end
    end
    -- windows as wide as the plane at stride 1 (each kernel offset's rows copied as one run): "same" paddings,
    -- uneven ones, dilation, a pad value, planes shorter than the kernel's reach, bf16
    local same = { { { 3, 3 }, { 1, 1 }, { 1, 1, 1, 1 } }, { { 2, 4 }, { 1, 1 }, { 0, 1, 1, 2 } },
      { { 3, 3 }, { 2, 2 }, { 2, 2, 2, 2 } }, { { 5, 3 }, { 1, 1 }, { 3, 1, 1, 1 } }, { { 7, 1 }, { 1, 1 }, { 4, 4, 0, 0 } } }
    for i, c in ipairs(same) do
      local k, d, pads = c[1], c[2], c[3]
      for _, hw in ipairs { { 5, 6 }, { 1, 4 }, { 3, 1 } } do
        fp8.manual_seed(200 + i)
        local x = fp8.randn({ 2, 3, hw[1], hw[2] }):to(i % 2 == 0 and "bf16" or "f32")
        local geo = geometry(k, { 1, 1 }, d, pads)
        local ok = pcall(NN.im2col, x, geo)
        if ok then
          same_with_grads(("same-width case %d on %dx%d"):format(i, hw[1], hw[2]),
            function(t) return NN.im2col(t, geo, 2.5) end,
            function(t) return (ref_windows(t, k, { 1, 1 }, d, pads, 2.5)) end, { x }, i)
        end
      end
    end
  end)

  it("keep the dtype, pad with the value given (-inf for max pooling), and fold's negative padding leaves rows at 0",
     function()
    local x = fp8.arange(1, 5):reshape({ 1, 1, 2, 2 }):to("bf16")
    local c = NN.im2col(x, { 2, 2, 1, 1, 1, 1, 1, 1, 1, 1 }, -math.huge)
    assert.are.equal("bf16", c:dtype())
    assert.are.same({ 1, 1, 4, 9 }, c:shape())
    assert.are.same({ -math.huge, -math.huge, -math.huge, -math.huge, 1, 2, -math.huge, 3, 4 },
      U.flat(c:select(3, 1)))
    -- a 3×3 plane, 2×2 windows of a 3×3 plane cut at the bottom and right by 1: only rows and columns 0..1 are written
    local ones = fp8.ones { 1, 1, 1, 1 }
    local y = NN.col2im(ones:expand({ 1, 1, 1, 4 }):contiguous(), 3, 3, { 1, 1, 1, 1, 1, 1, 0, -1, 0, -1 })
    assert.are.same({ 1, 1, 0, 1, 1, 0, 0, 0, 0 }, U.flat(y))
  end)

  it("take empty batches and channels, and an empty plane that the padding fills", function()
    local c = NN.im2col(fp8.zeros { 0, 3, 4, 4 }, { 2, 2, 1, 1, 1, 1, 0, 0, 0, 0 })
    assert.are.same({ 0, 3, 4, 9 }, c:shape())
    assert.are.same({ 2, 0, 4, 4 }, NN.col2im(fp8.zeros { 2, 0, 1, 16 }, 4, 4, { 1, 1, 1, 1, 1, 1, 0, 0, 0, 0 })
      :shape())
    local e = NN.im2col(fp8.zeros { 1, 1, 0, 0 }, { 1, 1, 1, 1, 1, 1, 1, 0, 1, 0 }, 7)
    assert.are.same({ 7 }, U.flat(e))
  end)

  it("refuse bad arguments with a message naming the problem", function()
    local x = fp8.zeros { 1, 1, 4, 4 }
    local geo = { 2, 2, 1, 1, 1, 1, 0, 0, 0, 0 }
    U.fails_with("im2col: expected the geometry {kh, kw, sh, sw, dh, dw, pt, pb, pl, pr} (10 integers) as argument 2, "
      .. "got no value", NN.im2col, x)
    U.fails_with("a table of another length", NN.im2col, x, { 1, 2, 3 })
    U.fails_with("im2col: the geometry's entry 3 must be an integer, got string", NN.im2col, x,
      { 2, 2, "1", 1, 1, 1, 0, 0, 0, 0 })
    U.fails_with("im2col: the geometry's entry 1 must be an integer, got number", NN.im2col, x,
      { 1.5, 2, 1, 1, 1, 1, 0, 0, 0, 0 })
    U.fails_with("unfold: kernel height must be in 1..2^31-1, got 0", NN.im2col, x, { 0, 2, 1, 1, 1, 1, 0, 0, 0, 0 })
    U.fails_with("unfold: stride width must be in 1..2^31-1, got -1", NN.im2col, x, { 2, 2, 1, -1, 1, 1, 0, 0, 0, 0 })
    U.fails_with("unfold: dilation height must be in 1..2^31-1, got 2147483648", NN.im2col, x,
      { 2, 2, 1, 1, 1 << 31, 1, 0, 0, 0, 0 })
    U.fails_with("unfold: padding top -1, bottom 0, left 0, right 0 out of range", NN.im2col, x,
      { 2, 2, 1, 1, 1, 1, -1, 0, 0, 0 })
    U.fails_with("unfold: the 4×4 plane padded to 4×4 is smaller than the kernel's span 5×2", NN.im2col, x,
      { 3, 2, 1, 1, 2, 1, 0, 0, 0, 0 })
    U.fails_with("unfold: expected a 4-D input [N, C, H, W], got [4, 4]", NN.im2col, fp8.zeros { 4, 4 }, geo)
    U.fails_with("unfold: e4m3 tensor: call :dequantize() first", NN.im2col, x:quantize("e4m3"), geo)
    U.fails_with("im2col: pad_value must be a number, got string", NN.im2col, x, geo, "0")
    U.fails_with("im2col: too many arguments", NN.im2col, x, geo, 0, 1)
    U.fails_with("expected a tensor, got string", NN.im2col, "x", geo)
    -- a huge kernel with a huge dilation: the span is refused, nothing overflows
    U.fails_with("smaller than the kernel's span", NN.im2col, x, { (1 << 31) - 1, 1, 1, 1, (1 << 31) - 1, 1, 0, 0,
      0, 0 })
    -- columns too many to hold (the window counts' product, checked before it is formed)
    U.fails_with("unfold: 2147483648×2147483648 windows are too many", NN.im2col, fp8.zeros { 1, 1, 1, 1 }, { 1, 1, 1, 1, 1, 1, 0, (1 << 31) - 1, 0,
      (1 << 31) - 1 })
    local cols = fp8.zeros { 1, 1, 4, 9 }
    U.fails_with("fold: columns [1, 1, 4, 8] do not match the windows of a 4×4 plane: expected [N, C, 4, 9]",
      NN.col2im, fp8.zeros { 1, 1, 4, 8 }, 4, 4, { 2, 2, 1, 1, 1, 1, 0, 0, 0, 0 })
    assert.are.same({ 1, 1, 4, 4 }, NN.col2im(cols, 4, 4, geo):shape())
    U.fails_with("col2im: h must be an integer >= 0, got -1", NN.col2im, cols, -1, 4, geo)
    U.fails_with("col2im: w must be an integer >= 0, got 2.5", NN.col2im, cols, 4, 2.5, geo)
    U.fails_with("fold: expected a 4-D input of columns [N, C, kh·kw, L], got [4, 9]", NN.col2im, fp8.zeros { 4, 9 },
      4, 4, geo)
    U.fails_with("col2im: too many arguments", NN.col2im, cols, 4, 4, geo, 1)
  end)
end)

-- ---- what is made of them: the old compositions as references ----------------------------------------------------

-- conv2d as it was: windows, one GEMM (a batched one per group), the bias
local function ref_conv2d(x, w, b, s, d, pads, g)
  local N, C, OC = x:size(1), x:size(2), w:size(1)
  local k = { w:size(3), w:size(4) }
  local cols, oh, ow = ref_windows(x, k, s, d, pads, 0)
  local K, L = k[1] * k[2], oh * ow
  local out
  if g == 1 then
    out = w:reshape({ OC, C * K }):matmul(cols:reshape({ N, C * K, L }))
  else
    local cg = C // g
    out = w:reshape({ g, OC // g, cg * K }):matmul(cols:reshape({ N, g, cg * K, L }))
  end
  out = out:reshape({ N, OC, oh, ow })
  if b ~= nil then out = out + b:reshape({ 1, OC, 1, 1 }) end
  return out
end

describe("the convolutions, poolings and transposed convolutions on the native windows", function()
  it("conv2d / conv1d give the old composition's bits, values and gradients (groups, strides, dilations, same)",
     function()
    math.randomseed(7)
    for case = 1, 24 do
      local g = ({ 1, 1, 2, 3 })[case % 4 + 1]
      local C, OC = g * math.random(1, 2), g * math.random(1, 2)
      if g > 1 then C = 2 * g end   -- (groups = in_channels is the depthwise path: its own test below)
      local k = { math.random(1, 3), math.random(1, 3) }
      local s = { math.random(1, 2), math.random(1, 2) }
      local d = { math.random(1, 2), math.random(1, 2) }
      local p = { math.random(0, 2), math.random(0, 2) }
      local N, H, W = math.random(1, 2), math.random(5, 8), math.random(5, 8)
      fp8.manual_seed(case)
      local x, w = fp8.randn { N, C, H, W }, fp8.randn { OC, C // g, k[1], k[2] }
      local b = case % 2 == 0 and fp8.randn { OC } or nil
      local what = ("case %d: conv2d g%d k%s s%s d%s p%s"):format(case, g, table.concat(k, "x"), table.concat(s, "x"),
        table.concat(d, "x"), table.concat(p, "x"))
      local opts = { stride = s, dilation = d, padding = p, groups = g }
      local ins = b and { x, w, b } or { x, w }
      same_with_grads(what, function(xx, ww, bb) return F.conv2d(xx, ww, bb, opts) end,
        function(xx, ww, bb) return ref_conv2d(xx, ww, bb, s, d, { p[1], p[1], p[2], p[2] }, g) end, ins, case, true)
    end
    -- "same" with an even kernel: the extra row and column at the bottom and right
    fp8.manual_seed(3)
    local x, w = fp8.randn { 2, 2, 6, 5 }, fp8.randn { 3, 2, 2, 4 }
    same_with_grads("same, even kernel", function(xx, ww) return F.conv2d(xx, ww, { padding = "same" }) end,
      function(xx, ww) return ref_conv2d(xx, ww, nil, { 1, 1 }, { 1, 1 }, { 0, 1, 1, 2 }, 1) end, { x, w }, 3, true)
    -- conv1d, unbatched
    local x1, w1, b1 = fp8.randn { 4, 9 }, fp8.randn { 2, 4, 3 }, fp8.randn { 2 }
    same_with_grads("conv1d unbatched", function(xx, ww, bb)
      return F.conv1d(xx, ww, bb, { stride = 2, padding = 1, dilation = 2 })
    end, function(xx, ww, bb)
      return ref_conv2d(xx:unsqueeze(1):unsqueeze(3), ww:unsqueeze(3), bb, { 1, 2 }, { 1, 2 }, { 0, 0, 1, 1 }, 1)
        :squeeze(3):squeeze(1)
    end, { x1, w1, b1 }, 4, true)
  end)

  it("depthwise conv2d (groups = in_channels, computed directly) gives the GEMM per group's bits (where oneDNN's "
    .. "AVX-512 GEMM is the reference), but for the weight's gradient (to fp32 rounding)", function()
    local function close(what, got, want, tol)
      assert.are.same(want:shape(), got:shape(), what)
      local a, b = U.flat(got:to("f32")), U.flat(want:to("f32"))
      for i = 1, #a do
        assert.is_true(math.abs(a[i] - b[i]) <= tol * math.max(1, math.abs(b[i])),
          ("%s[%d]: %.9g vs %.9g"):format(what, i, a[i], b[i]))
      end
    end
    math.randomseed(23)
    for case = 1, 16 do
      local C, m = math.random(2, 4), math.random(1, 2)
      local k = { math.random(1, 3), math.random(1, 4) }
      local s = { math.random(1, 2), math.random(1, 3) }
      local d = { math.random(1, 2), math.random(1, 2) }
      local p = { math.random(0, 2), math.random(0, 2) }
      local N, H, W = math.random(0, 3), math.random(6, 9), math.random(6, 9)
      fp8.manual_seed(case)
      local x, w, b = fp8.randn { N, C, H, W }, fp8.randn { C * m, 1, k[1], k[2] }, fp8.randn { C * m }
      if case % 2 == 0 then x = fp8.randn({ N, C, W, H }):transpose(3, 4) end   -- non-contiguous
      local what = ("case %d: depthwise C%d m%d k%s s%s d%s p%s"):format(case, C, m, table.concat(k, "x"),
        table.concat(s, "x"), table.concat(d, "x"), table.concat(p, "x"))
      local opts = { stride = s, dilation = d, padding = p, groups = C }
      local y1, g1 = with_grads(function(xx, ww, bb) return F.conv2d(xx, ww, bb, opts) end, { x, w, b }, case)
      local y2, g2 = with_grads(function(xx, ww, bb)
        return ref_conv2d(xx, ww, bb, s, d, { p[1], p[1], p[2], p[2] }, C)
      end, { x, w, b }, case)
      -- the forward and the input's gradient in the per-group path's order (fused multiply-adds over the kernel, the
      -- windows' sums unfused in kernel order): its bits; the weight's gradient sums over the batch and the windows in
      -- another order than the GEMM's
      if U.avx512_runs() then
        same_bits(what, y1, y2)
        same_bits(what .. " input's gradient", g1[1], g2[1])
      else   -- (oneDNN's AVX2 GEMM, the reference's, sums its K of 1 to 12 in another order: an ulp here and there)
        close(what, y1, y2, 1e-6)
        close(what .. " input's gradient", g1[1], g2[1], 1e-6)
      end
      close(what .. " weight's gradient", g1[2], g2[2], 1e-4)
      same_bits(what .. " bias's gradient", g1[3], g2[3])
    end
    -- bf16, unbatched conv1d, "same" with an even kernel
    fp8.manual_seed(2)
    local x, w = fp8.randn({ 3, 6, 7 }):to("bf16"), fp8.randn({ 6, 1, 2, 2 }):to("bf16")
    local y = F.conv2d(x, w, { padding = "same", groups = 3 })
    assert.are.equal("bf16", y:dtype())
    close("bf16 same", y, ref_conv2d(x:unsqueeze(1):to("f32"), w:to("f32"), nil, { 1, 1 }, { 1, 1 },
      { 0, 1, 0, 1 }, 3):squeeze(1), 1 / 128)
    local x1, w1 = fp8.randn { 4, 10 }, fp8.randn { 4, 1, 3 }
    close("conv1d depthwise", F.conv1d(x1, w1, { groups = 4, stride = 2, padding = 1 }),
      ref_conv2d(x1:unsqueeze(1):unsqueeze(3), w1:unsqueeze(3), nil, { 1, 2 }, { 1, 1 }, { 0, 0, 1, 1 }, 4)
        :squeeze(3):squeeze(1), 1e-5)
    -- the op's own refusals
    local geo = { 3, 3, 1, 1, 1, 1, 1, 1, 1, 1 }
    U.fails_with("conv_depthwise: expected an input [N, C, H, W] with C >= 1 and a weight [C·m, 1, 3, 3], got "
      .. "[1, 2, 4, 4] and [3, 1, 3, 3]", NN.conv_depthwise, fp8.zeros { 1, 2, 4, 4 }, fp8.zeros { 3, 1, 3, 3 }, geo)
    U.fails_with("conv_depthwise: the input's dtype bf16 differs from the weight's fp32", NN.conv_depthwise,
      fp8.zeros({ 1, 2, 4, 4 }):to("bf16"), fp8.zeros { 2, 1, 3, 3 }, geo)
    U.fails_with("conv_depthwise: padding must be in 0..2^31-1, got -1", NN.conv_depthwise, fp8.zeros { 1, 2, 4, 4 },
      fp8.zeros { 2, 1, 3, 3 }, { 3, 3, 1, 1, 1, 1, 1, -1, 1, 1 })
    U.fails_with("conv_depthwise: the 1×1 plane padded to 1×1 is smaller than the kernel's span 3×3",
      NN.conv_depthwise, fp8.zeros { 1, 2, 1, 1 }, fp8.zeros { 2, 1, 3, 3 }, { 3, 3, 1, 1, 1, 1, 0, 0, 0, 0 })
    U.fails_with("conv_depthwise: e4m3 tensor", NN.conv_depthwise, fp8.zeros({ 1, 2, 4, 4 }):quantize("e4m3"),
      fp8.zeros { 2, 1, 3, 3 }, geo)
    U.fails_with("conv_depthwise: too many arguments", NN.conv_depthwise, fp8.zeros { 1, 2, 4, 4 },
      fp8.zeros { 2, 1, 3, 3 }, geo, 1)
  end)

  it("bf16 convolutions: without a bias the old composition's bits; with one, the bf16 GEMM's fp32 sum plus the "
    .. "bias rounded once (the fp32 GEMM's but for its summation order; the gradients those of the fp32 compute but "
    .. "for the order, the output gradient being a bf16 value here)",
     function()
    fp8.manual_seed(11)
    local x, w, b = fp8.randn({ 2, 4, 7, 6 }):to("bf16"), fp8.randn({ 6, 2, 3, 3 }):to("bf16"), fp8.randn({ 6 })
      :to("bf16")
    same_bits("bf16 conv2d", F.conv2d(x, w, { padding = 1, groups = 2 }),
      ref_conv2d(x, w, nil, { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 2))
    local function old(xx, ww, bb)   -- (the widened operands, one rounding at the end: what conv2d did until now)
      return require("fp8.tensor")._low_in_fp32(function(x2, w2, b2)
        return ref_conv2d(x2, w2, b2, { 2, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 2)
      end, xx, ww, bb)
    end
    local function new(xx, ww, bb) return F.conv2d(xx, ww, bb, { stride = { 2, 1 }, padding = 1, groups = 2 }) end
    for _, big in ipairs { false, true } do
      if big then   -- a longer sum (576 products): the GEMM's order shows
        x, w, b = fp8.randn({ 2, 64, 8, 8 }):to("bf16"), (fp8.randn({ 8, 32, 3, 3 }) * 0.1):to("bf16"),
          fp8.randn({ 8 }):to("bf16")
      end
      local y1, g1 = with_grads(new, { x, w, b }, 12)
      local y2, g2 = with_grads(old, { x, w, b }, 12)
      assert.are.equal("bf16", y1:dtype())
      -- one bf16 ulp of the result, or the fp32 sums' order (1e-4 here: terms of about 0.1, a few hundred of them)
      -- where the sum cancels to near 0
      local a, c = U.flat(y1:to("fp32")), U.flat(y2:to("fp32"))
      for i = 1, #a do
        assert.is_true(math.abs(a[i] - c[i]) <= math.abs(c[i]) * 2 ^ -7 + 1e-4,
          ("y[%d]: %.9g vs %.9g"):format(i, a[i], c[i]))
      end
      for i = 1, 3 do
        assert.are.equal("fp32", g1[i]:dtype())
        local ga, gc = U.flat(g1[i]), U.flat(g2[i])
        for j = 1, #ga do
          assert.is_true(math.abs(ga[j] - gc[j]) <= 1e-5 * math.max(1, math.abs(gc[j])), ("gradient %d[%d]"):format(i, j))
        end
      end
    end
    -- its own refusals
    U.fails_with("matmul_wide: expected two bf16 or two fp16 operands, got fp32 and bf16", NN.matmul_wide,
      fp8.zeros { 2, 2 }, fp8.zeros({ 2, 2 }):to("bf16"))
    U.fails_with("matmul: shapes [2, 3] and [2, 2] are not aligned", NN.matmul_wide, fp8.zeros({ 2, 3 }):to("bf16"),
      fp8.zeros({ 2, 2 }):to("bf16"))
    assert.are.equal("fp32", NN.matmul_wide(fp8.ones({ 2, 3 }):to("bf16"), fp8.ones({ 3, 2 }):to("bf16")):dtype())
  end)

  it("unfold / fold (F.) keep their values and gradients, batched and unbatched", function()
    fp8.manual_seed(5)
    local x = fp8.randn { 2, 3, 6, 7 }
    local k, s, d, p = { 2, 3 }, { 2, 1 }, { 1, 2 }, { 1, 2 }
    local opts = { kernel_size = nil, stride = s, dilation = d, padding = p }
    same_with_grads("F.unfold", function(t) return F.unfold(t, k, opts) end, function(t)
      local c = ref_windows(t, k, s, d, { 1, 1, 2, 2 })
      return c:reshape({ 2, 3 * 6, c:size(4) })
    end, { x }, 5)
    same_with_grads("F.unfold unbatched", function(t) return F.unfold(t, k, opts) end, function(t)
      local c = ref_windows(t:unsqueeze(1), k, s, d, { 1, 1, 2, 2 })
      return c:reshape({ 3 * 6, c:size(4) })
    end, { x[1] }, 6)
    local cols = F.unfold(x, k, opts):detach()
    same_with_grads("F.fold", function(t) return F.fold(t, { 6, 7 }, k, opts) end, function(t)
      return ref_fold(t:reshape({ 2, 3, 6, t:size(3) }), 6, 7, k, s, d, { 1, 1, 2, 2 })
    end, { cols }, 7)
  end)

  it("max pools give the old values, gradients and indices (padding, dilation, ceil_mode, all -inf windows)",
     function()
    math.randomseed(13)
    for case = 1, 20 do
      local k = { math.random(1, 3), math.random(1, 3) }
      local p = { math.random(0, k[1] // 2), math.random(0, k[2] // 2) }
      local s = { math.random(1, 3), math.random(1, 3) }
      local d = { math.random(1, 2), math.random(1, 2) }
      local ceil = case % 2 == 0
      local N, C, H, W = math.random(1, 2), math.random(1, 2), math.random(3, 7), math.random(3, 7)
      if (H + 2 * p[1] - d[1] * (k[1] - 1) - 1) >= 0 and (W + 2 * p[2] - d[2] * (k[2] - 1) - 1) >= 0 then
        fp8.manual_seed(case)
        local x = fp8.randn { N, C, H, W }
        if case % 3 == 0 then x = x:clamp(-math.huge, -10):add(-math.huge) end   -- every value -inf
        local opts = { stride = s, padding = p, dilation = d, ceil_mode = ceil, return_indices = true }
        local y, at = F.max_pool2d(x, k, opts)
        -- the values: the max of the windows padded with -inf (no NaN here)
        local L = y:size(3) * y:size(4)
        local ext = { 0, 0 }
        if ceil then   -- ceil_mode reaches past the padding by what the output's extra window needs
          for i, n in ipairs { H, W } do
            local o = y:size(2 + i)
            ext[i] = math.max(0, (o - 1) * s[i] + d[i] * (k[i] - 1) + 1 - (n + 2 * p[i]))
          end
        end
        local win = ref_windows(x, k, s, d, { p[1], p[1] + ext[1], p[2], p[2] + ext[2] }, -math.huge)
        local want = (win:max(3))
        same_bits(("case %d: max_pool2d values"):format(case), y:reshape({ N, C, L }), want)
        -- the indices: flat 0-based input positions inside each window, holding its maximum (the first inside the
        -- input where all are -inf)
        local flat = U.flat(at)
        local xs = U.flat(x)
        local ys = U.flat(y)
        for i = 1, #flat do
          local pos = flat[i]
          assert.is_true(math.type(pos) == "integer" or pos == math.floor(pos), "whole")
          assert.is_true(pos >= 0 and pos < H * W, ("case %d: index %s out of the plane"):format(case, pos))
          local plane = (i - 1) // L
          assert.are.equal(ys[i], xs[plane * H * W + pos + 1], ("case %d: index %d"):format(case, i))
        end
        assert.are.equal("fp32", at:dtype())
        -- gradients: the same as the old composition's (max's first index, then the windows' adjoint)
        same_with_grads(("case %d: max_pool2d gradient"):format(case), function(t)
          return (F.max_pool2d(t, k, { stride = s, padding = p, dilation = d, ceil_mode = ceil }))
        end, function(t)
          if case % 3 == 0 then   -- all -inf: the gradient goes to each window's first position inside the input
            return (F.max_pool2d(t, k, { stride = s, padding = p, dilation = d, ceil_mode = ceil }))
          end
          local wv = ref_windows(t, k, s, d, { p[1], p[1] + ext[1], p[2], p[2] + ext[2] }, -math.huge)
          return (wv:max(3)):reshape(y:shape())
        end, { x }, case)
      end
    end
  end)

  it("max pools take a NaN first (its index and gradient), and a window of -inf alone its first input position",
     function()
    local nan = 0 / 0
    local x = fp8.tensor({ 1, nan, 7, nan, 2, 9 }):reshape({ 1, 1, 6 }):requires_grad_(true)
    local y, at = F.max_pool1d(x, 3, { return_indices = true })
    local v = U.flat(y)
    assert.is_true(v[1] ~= v[1] and v[2] ~= v[2])
    assert.are.same({ 1, 3 }, U.flat(at))   -- the first NaN of each window
    y:sum():backward()
    local gx = U.flat(x.grad)
    assert.are.same({ 0, 1, 0, 1, 0, 0 }, gx)
    local inf = -math.huge
    local z = fp8.tensor({ inf, inf, inf, inf, 3, inf }):reshape({ 1, 1, 6 }):requires_grad_(true)
    local yz, az = F.max_pool1d(z, 3, { stride = 2, padding = 1, return_indices = true })
    assert.are.same({ inf, inf, 3 }, U.flat(yz))
    assert.are.same({ 0, 1, 4 }, U.flat(az))   -- the first input position, not the padding
    yz:sum():backward()
    assert.are.same({ 1, 1, 0, 0, 1, 0 }, U.flat(z.grad))
    -- the op's refusals
    local geo = { 2, 2, 1, 1, 1, 1, 0, 0, 0, 0 }
    U.fails_with("max_pool: expected a 4-D input [N, C, H, W], got [2, 2]", NN.max_pool, fp8.zeros { 2, 2 }, geo)
    U.fails_with("max_pool: padding must be in 0..2^31-1, got -1", NN.max_pool, fp8.zeros { 1, 1, 2, 2 },
      { 2, 2, 1, 1, 1, 1, 0, -1, 0, 0 })
    U.fails_with("max_pool: the 1×1 plane padded to 1×1 is smaller than the kernel's span 2×2", NN.max_pool,
      fp8.zeros { 1, 1, 1, 1 }, geo)
    U.fails_with("max_pool: e4m3 tensor", NN.max_pool, fp8.zeros({ 1, 1, 2, 2 }):quantize("e4m3"), geo)
    U.fails_with("max_pool: too many arguments", NN.max_pool, fp8.zeros { 1, 1, 2, 2 }, geo, 1)
    local e, ei = NN.max_pool(fp8.zeros { 0, 3, 2, 2 }, geo)
    assert.are.same({ 0, 3, 1, 1 }, e:shape())
    assert.are.same({ 0, 3, 1, 1 }, ei:shape())
  end)

  it("max pool indices past the exactness of fp32 are refused, and the indices of a known case are pinned",
     function()
    local x = fp8.tensor({ { 1, 5, 2, 0 }, { 3, 4, 9, 8 }, { 7, 6, 0, 1 } }):reshape({ 1, 1, 3, 4 })
    local y, at = F.max_pool2d(x, 2, { stride = 2, ceil_mode = true, return_indices = true })
    assert.are.same({ 5, 9, 7, 1 }, U.flat(y))
    assert.are.same({ 1, 6, 8, 11 }, U.flat(at))
    local y1, at1 = F.max_pool1d(fp8.tensor { { 3, 1, 4, 1, 5 } }, 3, { stride = 2, padding = 1,
      return_indices = true })
    assert.are.same({ 3, 4, 5 }, U.flat(y1))
    assert.are.same({ 0, 2, 4 }, U.flat(at1))
  end)

  it("avg pools give the old composition's bits (count_include_pad, divisor_override, ceil_mode)", function()
    fp8.manual_seed(17)
    local x = fp8.randn { 2, 3, 7, 6 }
    local function ref_avg(t, k, s, p, ext, div)
      local w = ref_windows(t, k, s, { 1, 1 }, { p[1], p[1] + ext[1], p[2], p[2] + ext[2] }, 0)
      return w:sum(3) / div
    end
    same_with_grads("avg_pool2d", function(t) return F.avg_pool2d(t, 3, { stride = 2, padding = 1 }) end,
      function(t) return ref_avg(t, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 0, 0 }, 9):reshape({ 2, 3, 4, 3 }) end, { x }, 1)
    same_with_grads("avg_pool2d divisor", function(t) return F.avg_pool2d(t, { 2, 3 }, { divisor_override = 4 }) end,
      function(t) return ref_avg(t, { 2, 3 }, { 2, 3 }, { 0, 0 }, { 0, 0 }, 4):reshape({ 2, 3, 3, 2 }) end, { x }, 2)
    -- count_include_pad=false: divided by the count of input positions in each window (ones' windows summed)
    same_with_grads("avg_pool2d no pad count", function(t)
      return F.avg_pool2d(t, 3, { stride = 2, padding = 1, count_include_pad = false, ceil_mode = true })
    end, function(t)
      local ext = { 0, 1 }   -- 7 + 2 → 4 windows down (no extra), 6 + 2 → 4 across with ceil: one column past
      local cnt = ref_windows(fp8.ones { 1, 1, 7, 6 }, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 + ext[1], 1, 1 + ext[2] }, 0)
        :sum(3)
      return (ref_windows(t, { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 + ext[1], 1, 1 + ext[2] }, 0):sum(3) / cnt)
        :reshape({ 2, 3, 4, 4 })
    end, { x }, 3)
    same_with_grads("avg_pool1d bf16", function(t) return F.avg_pool1d(t, 2) end, function(t)
      return (ref_windows(t:unsqueeze(3), { 1, 2 }, { 1, 2 }, { 1, 1 }, { 0, 0, 0, 0 }):sum(3) / 2)
    end, { fp8.randn({ 2, 3, 9 }):to("bf16") }, 4)
  end)

  it("conv2d in chunks of samples (core/conv_cols.c) gives the bits of the whole batch's columns and GEMM: fp32, "
    .. "bf16 with and without a bias, groups, chunks that do not divide the batch, batches past 256 samples", function()
    -- the composite conv.lua ran until 2026-12-06: the batch's columns (the native im2col), one GEMM over the batch
    -- (bf16 with a bias: the GEMM's fp32 result plus the bias, rounded once), the bias added. A bf16 conv's backward
    -- now runs bf16 GEMMs of the output gradient rounded to bf16 (torch's): the reference for bf16 is the composite
    -- under autocast of the operands widened (exactly), whose matmul rounds them back and did just that.
    local function batch_conv2d(x, w, b, s, d, pads, g)
      if x:dtype() == "bf16" then
        local y = fp8.amp.autocast("bf16", function()
          local xf, wf = x:to("fp32"), w:to("fp32")
          local N, C, OC, k = xf:size(1), xf:size(2), wf:size(1), { wf:size(3), wf:size(4) }
          local cols = NN.im2col(xf, { k[1], k[2], s[1], s[2], d[1], d[2], pads[1], pads[2], pads[3], pads[4] })
          local K, L = k[1] * k[2], cols:size(4)
          local oh = (xf:size(3) + pads[1] + pads[2] - d[1] * (k[1] - 1) - 1) // s[1] + 1
          local out
          if g == 1 then out = wf:reshape({ OC, C * K }):matmul(cols:reshape({ N, C * K, L }))
          else out = wf:reshape({ g, OC // g, C // g * K }):matmul(cols:reshape({ N, g, C // g * K, L })) end
          assert(out:dtype() == "fp32")
          return out:reshape({ N, OC, oh, L // oh })
        end)
        if b ~= nil then y = y + b:to("fp32"):reshape({ 1, y:size(2), 1, 1 }) end
        return y:to("bf16")
      end
      local N, C, OC, k = x:size(1), x:size(2), w:size(1), { w:size(3), w:size(4) }
      local cols = NN.im2col(x, { k[1], k[2], s[1], s[2], d[1], d[2], pads[1], pads[2], pads[3], pads[4] })
      local K, L = k[1] * k[2], cols:size(4)
      local oh = (x:size(3) + pads[1] + pads[2] - d[1] * (k[1] - 1) - 1) // s[1] + 1
      local wide = b ~= nil and x:dtype() == "bf16"
      local function mm(a, c) if wide then return NN.matmul_wide(a, c) end return a:matmul(c) end
      local out
      if g == 1 then out = mm(w:reshape({ OC, C * K }), cols:reshape({ N, C * K, L }))
      else out = mm(w:reshape({ g, OC // g, C // g * K }), cols:reshape({ N, g, C // g * K, L })) end
      out = out:reshape({ N, OC, oh, L // oh })
      if wide then return (out + b:to("fp32"):reshape({ 1, OC, 1, 1 })):to("bf16") end
      if b ~= nil then out = out + b:reshape({ 1, OC, 1, 1 }) end
      return out
    end
    local cases = {
      -- N, C, OC, H, W, k, stride, padding, groups, dtype, bias: 16·9·1024 column values a sample, 3 samples a chunk
      { 5, 16, 8, 32, 32, 3, 1, 1, 1, "fp32", true },
      { 5, 16, 8, 32, 32, 3, 1, 1, 1, "bf16", false },
      { 4, 16, 8, 32, 32, 3, 1, 1, 1, "bf16", true },
      { 3, 32, 16, 32, 32, 3, 1, 1, 4, "fp32", false },   -- one sample a chunk, 4 groups
      { 4, 16, 6, 33, 31, 2, 2, 0, 2, "fp32", true },
      { 300, 3, 4, 5, 5, 3, 1, 1, 1, "fp32", true },      -- the weight's gradient summed in runs of 256 samples
      { 2, 16, 8, 40, 40, 5, 1, 2, 1, "fp16", false },
    }
    for i, c in ipairs(cases) do
      local N, C, OC, H, W, k, st, p, g, dt, bias = table.unpack(c)
      fp8.manual_seed(100 + i)
      local x = fp8.randn({ N, C, H, W }):to(dt)
      local w = (fp8.randn({ OC, C // g, k, k }) * 0.1):to(dt)
      local b = bias and fp8.randn({ OC }):to(dt) or nil
      local ins = b and { x, w, b } or { x, w }
      local what = ("chunked conv case %d (%s, N %d, C %d, groups %d)"):format(i, dt, N, C, g)
      same_with_grads(what, function(xx, ww, bb) return F.conv2d(xx, ww, bb, { stride = st, padding = p, groups = g }) end,
        function(xx, ww, bb) return batch_conv2d(xx, ww, bb, { st, st }, { 1, 1 }, { p, p, p, p }, g) end, ins, i, true)
    end
    -- a gradient that bf16 does not hold reaches a bf16 conv rounded to bf16 (torch's), and the gradients stay
    -- within that rounding of the fp32 backward's (the products of the exact gradient, what it was until 2026-12-06)
    fp8.manual_seed(31)
    local xb, wb = fp8.randn({ 3, 8, 12, 12 }):to("bf16"), (fp8.randn({ 8, 8, 3, 3 }) * 0.1):to("bf16")
    local function scaled(f) return function(xx, ww) return f(xx, ww):to("fp32") * 1.1 end end
    same_with_grads("bf16 conv, a gradient bf16 does not hold",
      scaled(function(xx, ww) return F.conv2d(xx, ww, nil, { padding = 1 }) end),
      scaled(function(xx, ww) return batch_conv2d(xx, ww, nil, { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1) end),
      { xb, wb }, 32)
    local _, g1 = with_grads(scaled(function(xx, ww) return F.conv2d(xx, ww, nil, { padding = 1 }) end), { xb, wb }, 32)
    local _, g2 = with_grads(scaled(function(xx, ww)
      return require("fp8.tensor")._low_in_fp32(function(x2, w2) return F.conv2d(x2, w2, nil, { padding = 1 }) end,
        xx, ww)
    end), { xb, wb }, 32)
    for i = 1, 2 do
      local a, c = U.flat(g1[i]), U.flat(g2[i])
      local scale = 0
      for j = 1, #c do scale = math.max(scale, math.abs(c[j])) end
      local worst = 0
      for j = 1, #a do worst = math.max(worst, math.abs(a[j] - c[j])) end
      assert.is_true(worst > 0, "the gradient was rounded")
      assert.is_true(worst <= scale * 2 ^ -7, ("gradient %d: %g off, of %g"):format(i, worst, scale))
    end
    -- under autocast (fp32 operands): the operands rounded, a bf16 GEMM with an fp32 result, the bias added in
    -- fp32, the backward in bf16: the composite's values within the fp32 sums' rounding (since stop 100 oneDNN's
    -- bf16 convolution, its sums in the kernel's order; the composite's bits before), chunked (3 samples a chunk)
    fp8.manual_seed(33)
    local xf, wf, bf = fp8.randn { 5, 16, 32, 32 }, fp8.randn { 8, 16, 3, 3 } * 0.1, fp8.randn { 8 }
    local function under_ac(f) return function(...) local a = table.pack(...)
      return fp8.amp.autocast("bf16", function() return f(table.unpack(a, 1, a.n)) end) end end
    same_with_grads("autocast bf16",
      under_ac(function(xx, ww, bb) return F.conv2d(xx, ww, bb, { padding = 1 }) end),
      under_ac(function(xx, ww, bb) return batch_conv2d(xx, ww, bb, { 1, 1 }, { 1, 1 }, { 1, 1, 1, 1 }, 1) end),
      { xf, wf, bf }, 34, true)
    assert.are.equal("fp32", under_ac(function() return F.conv2d(xf, wf, bf, { padding = 1 }) end)():dtype())
    -- the backward makes the columns again from the input: a write to it after the forward is refused, as torch's
    -- (its conv keeps the input); until 2026-12-06 the columns were a copy and the write went unnoticed. The bias is
    -- read for its shape only.
    local xi, wi, bi = fp8.randn { 2, 3, 8, 8 }, fp8.randn({ 4, 3, 3, 3 }):requires_grad_(true), fp8.randn { 4 }
    local yi = F.conv2d(xi, wi, bi, { padding = 1 })
    bi:mul_(2)
    xi:mul_(2)
    U.fails_with("backward: a tensor ConvolutionBackward needs (input 1, shape [2, 3, 8, 8]) was written in place after "
      .. "the forward", function() yi:sum():backward() end)
    -- the core op's refusals
    local geo = { 3, 3, 1, 1, 1, 1, 1, 1, 1, 1 }
    U.fails_with("conv2d_cols: expected an input and a weight of one dtype, fp32, bf16 or fp16, got fp32 and bf16",
      NN.conv2d_cols, fp8.zeros { 1, 2, 4, 4 }, fp8.zeros({ 2, 2, 3, 3 }):to("bf16"), nil, geo, 1, false, false)
    U.fails_with("conv2d_cols: wide (an fp32 result of 16-bit operands) needs bf16 or fp16 operands", NN.conv2d_cols,
      fp8.zeros { 1, 2, 4, 4 }, fp8.zeros { 2, 2, 3, 3 }, nil, geo, 1, true, false)
    U.fails_with("conv2d_cols: expected an input [N, C, H, W] and a weight [OC, C/groups, 3, 3] with C and OC divisible "
      .. "by groups = 2, got [1, 3, 4, 4] and [2, 1, 3, 3]", NN.conv2d_cols, fp8.zeros { 1, 3, 4, 4 },
      fp8.zeros { 2, 1, 3, 3 }, nil, geo, 2, false, false)
    U.fails_with("conv2d_cols: groups must be an integer >= 1, got 0", NN.conv2d_cols, fp8.zeros { 1, 2, 4, 4 },
      fp8.zeros { 2, 2, 3, 3 }, nil, geo, 0, false, false)
    U.fails_with("conv2d_cols: wide must be a boolean, got no value", NN.conv2d_cols, fp8.zeros { 1, 2, 4, 4 },
      fp8.zeros { 2, 2, 3, 3 }, nil, geo, 1)
    U.fails_with("conv2d_cols: bwd16 must be a boolean, got number", NN.conv2d_cols, fp8.zeros { 1, 2, 4, 4 },
      fp8.zeros { 2, 2, 3, 3 }, nil, geo, 1, false, 1)
    U.fails_with("conv2d_cols: the 1×1 plane padded to 1×1 is smaller than the kernel's span 3×3", NN.conv2d_cols,
      fp8.zeros { 1, 2, 1, 1 }, fp8.zeros { 2, 2, 3, 3 }, nil, { 3, 3, 1, 1, 1, 1, 0, 0, 0, 0 }, 1, false, false)
    U.fails_with("conv2d_cols: 4294967293×4294967293 windows are too many", NN.conv2d_cols, fp8.zeros { 1, 1, 1, 1 },
      fp8.zeros { 1, 1, 1, 1 }, nil,
      { 1, 1, 1, 1, 1, 1, (1 << 31) - 2, (1 << 31) - 2, (1 << 31) - 2, (1 << 31) - 2 }, 1, false, false)
    U.fails_with("conv2d_cols: the bias must be an fp32 CPU tensor [2] added to an fp32 result", NN.conv2d_cols,
      fp8.zeros({ 1, 2, 4, 4 }):to("bf16"), fp8.zeros({ 2, 2, 3, 3 }):to("bf16"), fp8.zeros { 2 }, geo, 1, false, false)
    U.fails_with("conv2d_cols: the bias must be an fp32 CPU tensor [2]", NN.conv2d_cols, fp8.zeros { 1, 2, 4, 4 },
      fp8.zeros { 2, 2, 3, 3 }, fp8.zeros { 3 }, geo, 1, false, false)
    U.fails_with("bad argument #3", NN.conv2d_cols, fp8.zeros { 1, 2, 4, 4 }, fp8.zeros { 2, 2, 3, 3 }, 5, geo, 1, false,
      false)
  end)

  it("avg pools computed directly (core/avg_pool.c) give the old composition's bits on random geometries, fp32, "
    .. "bf16 and fp16, values and gradients (windows of more than 256 offsets too), in the input's dtype", function()
    -- the old composition, as conv.lua had it until 2026-12-06: the windows summed over the kernel offsets and
    -- divided by K, the override, or the windows of ones (the counts); then in x's dtype (a bf16 sum over fp32 counts
    -- came out fp32: the one change)
    local function ceil_extra(n, k, s, p)
      local out = (n + 2 * p - k + s - 1) // s + 1
      if out > 1 and (out - 1) * s >= n + p then out = out - 1 end
      local e = (out - 1) * s + k - (n + 2 * p)
      return e > 0 and e or 0
    end
    local function old_avg(x, k, s, p, o)
      local H, W = x:size(3), x:size(4)
      local ext = o.ceil_mode and { ceil_extra(H, k[1], s[1], p[1]), ceil_extra(W, k[2], s[2], p[2]) } or { 0, 0 }
      local extra = ext[1] > 0 or ext[2] > 0
      local function win(t, pp) return (ref_windows(t, k, s, { 1, 1 }, { pp[1], pp[1] + ext[1], pp[2], pp[2] + ext[2] },
        0)) end
      local w, oh, ow = ref_windows(x, k, s, { 1, 1 }, { p[1], p[1] + ext[1], p[2], p[2] + ext[2] }, 0)
      local out
      if o.divisor_override then out = w:sum(3) / o.divisor_override
      elseif o.count_include_pad == false and (p[1] > 0 or p[2] > 0 or extra) then
        out = w:sum(3) / win(fp8.ones { 1, 1, H, W }, p):sum(3)
      elseif extra then out = w:sum(3) / win(fp8.ones { 1, 1, H + 2 * p[1], W + 2 * p[2] }, { 0, 0 }):sum(3)
      else out = w:sum(3) / (k[1] * k[2]) end
      return out:reshape({ x:size(1), x:size(2), oh, ow }):to(x:dtype())
    end
    math.randomseed(92)
    local dts = { "f32", "bf16", "fp16" }
    for case = 1, 60 do
      local k = { math.random(1, 4), math.random(1, 4) }
      local s = { math.random(1, 3), math.random(1, 3) }
      local p = { math.random(0, k[1] // 2), math.random(0, k[2] // 2) }
      local o = { stride = s, padding = p, ceil_mode = case % 3 == 0, count_include_pad = case % 4 ~= 1,
        divisor_override = case % 7 == 0 and math.random(1, 5) or nil }
      local dt = dts[case % 3 + 1]
      local N, C, H, W = math.random(1, 2), math.random(1, 3), math.random(k[1], 9), math.random(k[2], 9)
      fp8.manual_seed(case)
      local x = fp8.randn({ N, C, H, W }):to(dt)
      if case % 2 == 0 then x = fp8.randn({ N, C, W, H }):to(dt):transpose(3, 4) end   -- non-contiguous
      local what = ("case %d: %s x[%d,%d,%d,%d] k%s s%s p%s ceil %s count_pad %s div %s"):format(case, dt, N, C, H, W,
        table.concat(k, "x"), table.concat(s, "x"), table.concat(p, "x"), o.ceil_mode, o.count_include_pad,
        o.divisor_override)
      same_with_grads(what, function(t) return F.avg_pool2d(t, k, o) end,
        function(t) return old_avg(t, k, s, p, o) end, { x }, case)
      -- avg_pool1d: the same on a plane of height 1
      local o1 = { stride = s[2], padding = p[2], ceil_mode = o.ceil_mode, count_include_pad = o.count_include_pad }
      same_with_grads(what .. " (1d)", function(t) return F.avg_pool1d(t, k[2], o1) end,
        function(t) return old_avg(t:unsqueeze(3), { 1, k[2] }, { 1, s[2] }, { 0, p[2] }, o1):squeeze(3) end,
        { x:select(3, 1) }, case)
    end
    -- 17×17 = 289 offsets: the sum in runs of 256 offsets, as the reduction over the columns' middle dim summed them
    fp8.manual_seed(5)
    local big = fp8.randn { 2, 2, 20, 21 } * fp8.exp(fp8.randn { 2, 2, 20, 21 } * 8)   -- magnitudes 2^-30..2^30
    same_with_grads("17x17", function(t) return F.avg_pool2d(t, 17, { stride = 1, padding = 2 }) end,
      function(t) return old_avg(t, { 17, 17 }, { 1, 1 }, { 2, 2 }, {}) end, { big }, 6)
    -- unbatched
    same_with_grads("unbatched", function(t) return F.avg_pool2d(t, 2, { stride = 1 }) end,
      function(t) return old_avg(t:unsqueeze(1), { 2, 2 }, { 1, 1 }, { 0, 0 }, {}):squeeze(1) end,
      { fp8.randn { 3, 5, 4 } }, 7)
    -- the dtype: a bf16 average over counts is bf16 (it was fp32), torch's
    local xb = fp8.randn({ 1, 2, 7, 6 }):to("bf16")
    assert.are.equal("bf16", F.avg_pool2d(xb, 3, { stride = 2, padding = 1, count_include_pad = false }):dtype())
    assert.are.equal("bf16", F.avg_pool2d(xb, 3, { stride = 2, ceil_mode = true }):dtype())
    assert.are.equal("fp16", F.avg_pool1d(xb:to("fp16"):select(3, 1), 3, { stride = 2, ceil_mode = true }):dtype())
    -- the core op's refusals
    local geo = { 2, 2, 1, 1, 1, 1, 0, 0, 0, 0 }
    U.fails_with("avg_pool: dilation must be 1, got 2×1", NN.avg_pool, fp8.zeros { 1, 1, 4, 4 },
      { 2, 2, 1, 1, 2, 1, 0, 0, 0, 0 }, true, 0)
    U.fails_with("avg_pool: padding top 1, bottom 0", NN.avg_pool, fp8.zeros { 1, 1, 4, 4 },
      { 2, 2, 1, 1, 1, 1, 1, 0, 0, 0 }, true, 0)
    U.fails_with("avg_pool: divisor must be an integer >= 0 (0: the count), got -1", NN.avg_pool,
      fp8.zeros { 1, 1, 4, 4 }, geo, true, -1)
    U.fails_with("avg_pool: count_include_pad must be a boolean, got number", NN.avg_pool, fp8.zeros { 1, 1, 4, 4 },
      geo, 1, 0)
    U.fails_with("avg_pool: expected a 4-D input [N, C, H, W], got [4, 4]", NN.avg_pool, fp8.zeros { 4, 4 }, geo, true,
      0)
    U.fails_with("avg_pool: the 1×1 plane padded to 1×1 is smaller than the kernel 2×2", NN.avg_pool,
      fp8.zeros { 1, 1, 1, 1 }, geo, true, 0)
    U.fails_with("avg_pool: kernel and stride must be in 1..2^31-1, got 0", NN.avg_pool, fp8.zeros { 1, 1, 4, 4 },
      { 0, 2, 1, 1, 1, 1, 0, 0, 0, 0 }, true, 0)
    U.fails_with("avg_pool: e4m3 tensor: call :dequantize() first", NN.avg_pool, fp8.zeros({ 1, 1, 4, 4 }):quantize("e4m3"),
      geo, true, 0)
    -- windows whose count would wrap: refused before the product is formed (a top/left padding past half the kernel is
    -- refused first, as torch refuses it: windows wholly in the padding divided 0 by 0; the ceil excess still counts)
    U.fails_with("avg_pool: 2147483647×2147483647 windows are too many", NN.avg_pool, fp8.zeros { 1, 1, 1, 1 },
      { 1, 1, 1, 1, 1, 1, 0, (1 << 31) - 2, 0, (1 << 31) - 2 }, true, 0)
    U.fails_with("avg_pool: padding top 2, left 2 must be at most half the kernel 1×1", NN.avg_pool,
      fp8.ones { 1, 1, 3, 3 }, { 1, 1, 1, 1, 1, 1, 2, 2, 2, 2 }, false, 0)
  end)

  it("conv_transpose2d / 1d give the old composition's bits (output_padding past the padding, groups, dilation)",
     function()
    local function ref_ct(x, w, b, s, p, op, d, g)
      local N, C, H, W = x:size(1), x:size(2), x:size(3), x:size(4)
      local OC, k = w:size(2) * g, { w:size(3), w:size(4) }
      local hf, wf = (H - 1) * s[1] + d[1] * (k[1] - 1) + 1, (W - 1) * s[2] + d[2] * (k[2] - 1) + 1
      local K = k[1] * k[2]
      local cols
      if g == 1 then
        cols = w:reshape({ C, OC * K }):transpose(1, 2):matmul(x:reshape({ N, C, H * W }))
      else
        local cg, og = C // g, OC // g
        cols = w:reshape({ g, cg, og * K }):transpose(2, 3):matmul(x:reshape({ N, g, cg, H * W }))
      end
      local out = ref_fold(cols:reshape({ N, OC, K, H * W }), hf, wf, k, s, d, { 0, 0, 0, 0 })
      if p[1] > 0 or p[2] > 0 or op[1] > 0 or op[2] > 0 then
        out = F.pad(out, { -p[2], op[2] - p[2], -p[1], op[1] - p[1] })
      end
      if b ~= nil then out = out + b:reshape({ 1, OC, 1, 1 }) end
      return out
    end
    for case, c in ipairs {
      { s = { 2, 2 }, p = { 1, 1 }, op = { 0, 0 }, d = { 1, 1 }, g = 1 },
      { s = { 3, 2 }, p = { 0, 1 }, op = { 2, 1 }, d = { 1, 1 }, g = 2 },   -- output_padding past the padding
      { s = { 1, 2 }, p = { 2, 0 }, op = { 0, 1 }, d = { 2, 1 }, g = 1 },
    } do
      fp8.manual_seed(case)
      local x, w, b = fp8.randn { 2, 4, 4, 3 }, fp8.randn { 4, 3, 3, 2 }, fp8.randn { 3 * c.g }
      same_with_grads("conv_transpose2d case " .. case, function(xx, ww, bb)
        return F.conv_transpose2d(xx, ww, bb, { stride = c.s, padding = c.p, output_padding = c.op, dilation = c.d,
          groups = c.g })
      end, function(xx, ww, bb) return ref_ct(xx, ww, bb, c.s, c.p, c.op, c.d, c.g) end, { x, w, b }, case)
    end
    fp8.manual_seed(9)
    local x1, w1 = fp8.randn { 3, 5 }, fp8.randn { 3, 2, 3 }
    same_with_grads("conv_transpose1d unbatched", function(xx, ww)
      return F.conv_transpose1d(xx, ww, nil, { stride = 2, padding = 1, output_padding = 1 })
    end, function(xx, ww)
      return ref_ct(xx:unsqueeze(1):unsqueeze(3), ww:unsqueeze(3), nil, { 1, 2 }, { 0, 1 }, { 0, 1 }, { 1, 1 }, 1)
        :squeeze(3):squeeze(1)
    end, { x1, w1 }, 9)
  end)

  it("keep their refusals and messages", function()
    U.fails_with("conv2d: the input [1, 1, 2, 2], padded by 0×0, is smaller than the kernel 3×3 (dilation 1×1): the "
      .. "output would be 0×0", F.conv2d, fp8.zeros { 1, 1, 2, 2 }, fp8.zeros { 1, 1, 3, 3 })
    U.fails_with("max_pool2d: the input [1, 1, 2, 2], padded by 0×0, is smaller than the kernel 3×3",
      F.max_pool2d, fp8.zeros { 1, 1, 2, 2 }, 3)
    U.fails_with("fold: input [1, 4, 5] does not hold blocks of 2×2 over a 3×3 output", F.fold,
      fp8.zeros { 1, 4, 5 }, 3, 2)
    U.fails_with("unfold: expected a 4-D (batched) or 3-D (unbatched) input, got [3, 3]", F.unfold, fp8.zeros { 3, 3 },
      2)
  end)
end)
