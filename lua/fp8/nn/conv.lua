-- conv.lua — torch's convolutions and pooling over images and sequences, built of differentiable ops: F.unfold /
-- F.fold (the core's im2col and col2im, core/im2col.c, from the geometry: no index tensor), F.conv1d / F.conv2d
-- (unfold, then one batched GEMM per group, which autocast runs in bf16 as torch's; on CPU tensors the columns made a
-- few samples at a time, core/conv_cols.c, and an fp32 or bf16 forward and backward by oneDNN's convolution
-- primitives, core/cpu/cpu_conv.c;
-- a depthwise one directly over the planes, core/conv_depthwise.c),
-- F.max_pool1d/2d (each window's maximum found directly, core/max_pool.c) and F.avg_pool1d/2d (each window's average
-- found directly, core/avg_pool.c), and their modules Conv1d, Conv2d, MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d,
-- Unfold and Fold. FP8
-- recipes convert Linear layers only (as TransformerEngine and torchao): a convolution runs in high precision under
-- every recipe.
-- The max pools' return_indices gives the flat 0-based input position of each maximum (fp32, exact to 2^24; torch's
-- are int64), which F.max_unpool1d/2d (lua/fp8/nn/unpool.lua) takes. Transposed convolutions:
-- lua/fp8/nn/conv_transpose.lua.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local O = require "fp8.opts"
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local init = require "fp8.nn.init_fns"

local G = require "fp8.nn.conv_geometry"
local pair, one_d, batched, opts_of = G.pair, G.one_d, G.batched, G.opts_of
local repr_field, repr_is = G.repr_field, G.repr_is
local NN = fp8._nn

local M = {}

local function shape_str(t) return t:shape_str() end

-- Errors here are raised without a position; a public function's come out at its caller's line (fp8.errfmt)
local public, strip = require("fp8.errfmt").public_of("conv.lua")

-- The padded 4-D input's windows: [N, C, K, L] (K = kh·kw, L = OH·OW), with OH and OW. value pads; extra: rows and
-- columns past the padding on the bottom and right (ceil_mode's, an uneven "same").
local function windows(fname, x, k, s, p, d, value, extra)
  local eh, ew = extra and extra[1] or 0, extra and extra[2] or 0
  local pads = { p[1], p[1] + eh, p[2], p[2] + ew }
  local oh, ow = G.counts(x:size(3), x:size(4), k, s, d, pads)
  if oh < 1 or ow < 1 then
    error(("%s: the input %s, padded by %d×%d, is smaller than the kernel %d×%d (dilation %d×%d): the output would "
      .. "be %d×%d"):format(fname, shape_str(x), p[1], p[2], k[1], k[2], d[1], d[2], oh, ow), 0)
  end
  return G.unfold(x, k, s, d, pads, value), oh, ow
end

-- unfold(input[N, C, H, W], kernel_size [, {dilation=1, padding=0, stride=1}]) → [N, C·kh·kw, L]: torch's im2col
local function impl_unfold(x, kernel_size, opts, ...)
  O.no_more("unfold", "(input, kernel_size [, {dilation=, padding=, stride=}])", ...)
  local xb, unb = batched("unfold", x, 4)
  opts = opts_of("unfold", opts, { "dilation", "padding", "stride" })
  local k = pair("unfold", "kernel_size", kernel_size, 1)
  local cols = windows("unfold", xb, k, pair("unfold", "stride", opts.stride or 1, 1),
    pair("unfold", "padding", opts.padding or 0, 0), pair("unfold", "dilation", opts.dilation or 1, 1), 0)
  local N, C = xb:size(1), xb:size(2)
  local out = cols:reshape({ N, C * k[1] * k[2], cols:size(4) })
  return unb and out:squeeze(1) or out
end

-- fold(input[N, C·kh·kw, L], output_size, kernel_size [, {dilation=1, padding=0, stride=1}]) → [N, C, H, W]: torch's
-- col2im, unfold's adjoint: each column's values added into the positions unfold read them from
local function impl_fold(x, output_size, kernel_size, opts, ...)
  O.no_more("fold", "(input, output_size, kernel_size [, {dilation=, padding=, stride=}])", ...)
  local xb, unb = batched("fold", x, 3)
  opts = opts_of("fold", opts, { "dilation", "padding", "stride" })
  local size = pair("fold", "output_size", output_size, 1)
  local k = pair("fold", "kernel_size", kernel_size, 1)
  local s, p = pair("fold", "stride", opts.stride or 1, 1), pair("fold", "padding", opts.padding or 0, 0)
  local d = pair("fold", "dilation", opts.dilation or 1, 1)
  local pads = { p[1], p[1], p[2], p[2] }
  local oh, ow = G.counts(size[1], size[2], k, s, d, pads)
  local fits = oh >= 1 and ow >= 1
  local K, N = k[1] * k[2], xb:size(1)
  if not fits or xb:size(2) % K ~= 0 or xb:size(3) ~= oh * ow then
    error(("fold: input %s does not hold blocks of %d×%d over a %d×%d output (padding %d×%d, stride %d×%d, dilation "
      .. "%d×%d: [N, C·%d, %d] expected)"):format(shape_str(xb), k[1], k[2], size[1], size[2], p[1], p[2], s[1], s[2],
      d[1], d[2], K, fits and oh * ow or 0), 0)
  end
  local out = G.fold(xb:reshape({ N, xb:size(2) // K, K, oh * ow }), size[1], size[2], k, s, d, pads)
  return unb and out:squeeze(1) or out
end

-- padding as conv2d takes it: an integer, a pair, "valid" (0) or "same" (stride 1: the output the input's size; an
-- odd total split with the extra on the right and bottom, as torch's) → {top, bottom, left, right}
local function conv_padding(fname, padding, k, s, d)
  if padding == "valid" then return { 0, 0, 0, 0 } end
  if padding == "same" then
    if s[1] ~= 1 or s[2] ~= 1 then
      error(("%s: padding=\"same\" needs stride 1 (torch's too), got stride %d×%d"):format(fname, s[1], s[2]), 0)
    end
    local th, tw = d[1] * (k[1] - 1), d[2] * (k[2] - 1)
    return { th // 2, th - th // 2, tw // 2, tw - tw // 2 }
  end
  if type(padding) == "string" then
    error(("%s: padding must be an integer, a pair, \"valid\" or \"same\", got \"%s\""):format(fname, padding), 0)
  end
  local p = pair(fname, "padding", padding, 0)
  return { p[1], p[1], p[2], p[2] }
end

local prof_op = require "fp8.prof_op"

local function conv2d(fname, x, w, b, opts)
  local xb, unb = batched(fname, x, 4)
  if not fp8.is_tensor(w) or w:dim() ~= 4 then
    error(("%s: weight must be [out_channels, in_channels / groups, kh, kw], got %s"):format(fname,
      fp8.is_tensor(w) and shape_str(w) or O.got(w)), 0)
  end
  local g = opts.groups or 1
  if math.type(g) ~= "integer" or g < 1 then error(("%s: groups must be an integer >= 1, got %s"):format(fname,
    O.got(g)), 0) end
  local N, C, OC = xb:size(1), xb:size(2), w:size(1)
  if C % g ~= 0 or OC % g ~= 0 or w:size(2) * g ~= C then
    error(("%s: input %s and weight %s do not agree with groups=%d (in_channels %d = weight's %d × groups, "
      .. "out_channels divisible by groups)"):format(fname, shape_str(xb), shape_str(w), g, C, w:size(2), g), 0)
  end
  if b ~= nil and (not fp8.is_tensor(b) or b:dim() ~= 1 or b:size(1) ~= OC) then
    error(("%s: bias must be [%d] (one per output channel), got %s"):format(fname, OC,
      fp8.is_tensor(b) and shape_str(b) or O.got(b)), 0)
  end
  local k = { w:size(3), w:size(4) }
  if k[1] < 1 or k[2] < 1 then   -- (a raw 'attempt to divide by zero' until 2026-12-05; torch's refuses it too)
    error(("%s: the weight %s has a kernel of size 0"):format(fname, shape_str(w)), 0)
  end
  local s = pair(fname, "stride", opts.stride or 1, 1)
  local d = pair(fname, "dilation", opts.dilation or 1, 1)
  local pd = conv_padding(fname, opts.padding or 0, k, s, d)
  -- wide: bf16 operands and bias outside autocast: the GEMM in bf16 with an fp32 result (fl_matmul_wide), the bias
  -- added in fp32 and the sum rounded once, as the fp32 compute of the widened operands did (the same products,
  -- summed in the GEMM's order; the composite's backward in fp32, as that compute's; the chunked path's in bf16)
  local function compute(xb, w, b, wide)
    -- depthwise (groups = in_channels, one dtype, outside autocast): computed directly over the planes
    -- (core/conv_depthwise.c), not as a GEMM per group of one channel
    if g == C and g > 1 and xb:dtype() == w:dtype() and fp8.autocast_dtype() == "fp32" then
      local oh, ow = G.counts(xb:size(3), xb:size(4), k, s, d, pd)
      if oh < 1 or ow < 1 then
        error(("%s: the input %s, padded by %d×%d, is smaller than the kernel %d×%d (dilation %d×%d): the output "
          .. "would be %d×%d"):format(fname, shape_str(xb), pd[1], pd[3], k[1], k[2], d[1], d[2], oh, ow), 0)
      end
      local out = NN.conv_depthwise(xb, w, { k[1], k[2], s[1], s[2], d[1], d[2], pd[1], pd[2], pd[3], pd[4] })
      if b ~= nil then out = out + b:reshape({ 1, OC, 1, 1 }) end
      return out
    end
    -- ("same" with an even kernel pads unevenly: the extra row and column on the bottom and right)
    local out
    -- CPU tensors of one dtype outside autocast: im2col and the GEMM a few samples at a time (core/conv_cols.c:
    -- the bits of the batch's columns and GEMM below, whose buffer went to memory; since stop 98 an fp32 forward is
    -- oneDNN's direct convolution there, but for a 1×1 kernel at stride 1 without padding, and since stop 99 its
    -- gradients oneDNN's backward primitives, but for a 1×1 kernel's and a first layer's input gradient: within the
    -- sums' rounding of those values, not their bits; since stop 100 a bf16 one's both ways, but for a 1×1 kernel
    -- and a first layer, also under autocast: the fp32 sums in the kernel's order, a bf16 result rounded once, so
    -- within one bf16 rounding of the columns'). (A 1×1 conv of one channel to one keeps the composite: its
    -- weight's gradient sums over the batch in SIMD lanes.)
    -- A bf16 conv's backward on the columns runs its GEMMs in bf16, the output gradient rounded to bf16 (torch's: its gradient of
    -- a bf16 output is bf16; until 2026-12-06 they were fp32 GEMMs of the fp32 gradient); fp16's stay fp32 (its
    -- range would flush small gradients). Under autocast (fp32 operands, as its matmul did): the operands rounded
    -- first, then a 16-bit GEMM with an fp32 result, the backward in the 16-bit dtype, the same bits as before.
    local dt, ac = xb:dtype(), fp8.autocast_dtype()
    local x2, w2, wide2, bwd16 = xb, w, wide == true, dt == "bf16"
    if ac ~= "fp32" and dt == "fp32" and w:dtype() == "fp32" and (b == nil or b:dtype() == "fp32") then
      x2, w2, wide2, bwd16 = xb:to(ac), w:to(ac), true, true
    elseif ac ~= "fp32" then
      x2 = nil
    end
    if x2 and x2:device() == "cpu" and w2:device() == "cpu" and x2:dtype() == w2:dtype()
        and (dt == "fp32" or dt == "bf16" or dt == "fp16") and OC * C * k[1] * k[2] > 1 then
      local oh, ow = G.counts(xb:size(3), xb:size(4), k, s, d, pd)
      if oh >= 1 and ow >= 1 then
        -- (the bias added there when the result is fp32, as the add below: an fp32 bias, or a 16-bit one widened)
        local fb = b ~= nil and (wide or (dt == "fp32" and b:dtype() == "fp32")) and b:to("fp32") or nil
        out = NN.conv2d_cols(x2, w2, fb, { k[1], k[2], s[1], s[2], d[1], d[2], pd[1], pd[2], pd[3], pd[4] }, g,
          wide2, bwd16)
        -- (a channels-last result, the core's since stop 101, stays so: `to` keeps a dense tensor's strides)
        if wide then return out:to(xb:dtype()) end
        if b ~= nil and not fb then out = out + b:reshape({ 1, OC, 1, 1 }) end
        return out
      end
    end
    local cols, oh, ow = windows(fname, xb, k, s, { pd[1], pd[3] }, d, 0, { pd[2] - pd[1], pd[4] - pd[3] })
    local K, L = k[1] * k[2], cols:size(4)
    local function mm(a, c) if wide then return NN.matmul_wide(a, c) end return a:matmul(c) end
    if g == 1 then
      out = mm(w:reshape({ OC, C * K }), cols:reshape({ N, C * K, L }))                       -- [N, OC, L]
    else
      local cg = C // g
      out = mm(w:reshape({ g, OC // g, cg * K }), cols:reshape({ N, g, cg * K, L }))          -- [N, g, OC/g, L]
    end
    out = out:reshape({ N, OC, oh, ow })
    if wide then return (out + b:to("fp32"):reshape({ 1, OC, 1, 1 })):to(xb:dtype()) end
    if b ~= nil then out = out + b:reshape({ 1, OC, 1, 1 }) end
    return out
  end
  -- With a bias, bf16/fp16 operands compute in fp32 and the sum is rounded once (torch's; the product rounded to
  -- bf16 and then the sum was up to 7 bf16 ulps off, 32 in fp16); without one the GEMM rounds once already
  local out
  if b ~= nil and xb:dtype() == "bf16" and w:dtype() == "bf16" and b:dtype() == "bf16" and not (g == C and g > 1)
      and fp8.autocast_dtype() == "fp32" then
    out = compute(xb, w, b, true)
  else
    out = b ~= nil and require("fp8.tensor")._low_in_fp32(compute, xb, w, b) or compute(xb, w, b)
  end
  return unb and out:squeeze(1) or out
end

-- conv2d(input[N, C, H, W], weight[OC, C/groups, kh, kw] [, bias[OC]] [, {stride=1, padding=0, dilation=1,
-- groups=1}]): torch's (padding also "valid" or "same")
local function impl_conv2d(x, w, b, opts, ...)
  O.no_more("conv2d", "(input, weight [, bias] [, {stride=, padding=, dilation=, groups=}])", ...)
  if type(b) == "table" and not fp8.is_tensor(b) and opts == nil then b, opts = nil, b end
  opts = opts_of("conv2d", opts, { "stride", "padding", "dilation", "groups" })
  -- one op in the profiler, torch's aten::conv2d, whichever route computes it (oneDNN's, the columns' GEMMs, the
  -- depthwise kernel, the composite): with_flops, torch's count 2·N·OC·OH·OW·(C/groups)·kh·kw on it (the bias not
  -- counted) and none on the ops inside
  return prof_op("conv2d", function(out) return 2 * out:numel() * w:size(2) * w:size(3) * w:size(4) end,
    table.pack(x, w, b, opts.stride, opts.padding, opts.dilation, opts.groups), conv2d, "conv2d", x, w, b, opts)
end

-- conv1d(input[N, C, L], weight[OC, C/groups, k] [, bias] [, {stride=1, padding=0, dilation=1, groups=1}]): conv2d
-- over a plane of height 1
local function impl_conv1d(x, w, b, opts, ...)
  O.no_more("conv1d", "(input, weight [, bias] [, {stride=, padding=, dilation=, groups=}])", ...)
  if type(b) == "table" and not fp8.is_tensor(b) and opts == nil then b, opts = nil, b end
  opts = opts_of("conv1d", opts, { "stride", "padding", "dilation", "groups" })
  local xb, unb = batched("conv1d", x, 3)
  if not fp8.is_tensor(w) or w:dim() ~= 3 then
    error(("conv1d: weight must be [out_channels, in_channels / groups, k], got %s"):format(
      fp8.is_tensor(w) and shape_str(w) or O.got(w)), 0)
  end
  local p = one_d("conv1d: padding", opts.padding, 0, 0, true)
  local o2 = { stride = { 1, one_d("conv1d: stride", opts.stride, 1, 1) }, groups = opts.groups,
    dilation = { 1, one_d("conv1d: dilation", opts.dilation, 1, 1) },
    padding = type(p) == "string" and p or { 0, p } }
  -- one op in the profiler, torch's aten::conv1d, which torch counts no FLOPs for (with_flops: none inside either)
  local out = prof_op("conv1d", nil, table.pack(x, w, b, opts.stride, opts.padding, opts.dilation, opts.groups),
    conv2d, "conv1d", xb:unsqueeze(3), w:unsqueeze(3), b, o2):squeeze(3)
  return unb and out:squeeze(1) or out
end

-- max_pool2d / avg_pool2d(input, kernel_size [, {stride=kernel_size, padding=0, dilation=1 (max only),
-- ceil_mode=false, count_include_pad=true, divisor_override= (avg only)}]): torch's; the max's gradient goes to one
-- maximum of each window, as torch's. padding at most half the kernel, as torch's. ceil_mode rounds the output size
-- up: the last windows may reach past the padding, and what lies there counts for nothing (not in the average's
-- divisor either).

-- ceil_mode's extra: how far past the padded input (n + 2p) the last window reaches when the output size rounds up,
-- torch's rule: ceil((n + 2p - span) / s) + 1 windows, less the last when it would start past the input and its
-- left padding (n + p)
local function ceil_extra(n, k, s, p, d)
  local span = d * (k - 1) + 1
  local out = (n + 2 * p - span + s - 1) // s + 1
  if out > 1 and (out - 1) * s >= n + p then out = out - 1 end
  local e = (out - 1) * s + span - (n + 2 * p)
  return e > 0 and e or 0
end
-- A pooling's geometry as pairs {h, w} (a 1-d pooling's on a plane of height 1), its options checked: kernel, stride
-- (the kernel's by default), padding (at most half the kernel, torch's rule), dilation (max only), and the average's
-- count_include_pad and divisor_override. Pooling functions and modules both check through it.
local function pool_geometry(fname, dims, kernel_size, opts, is_max)
  local k, s, p, d
  if dims == 2 then
    k = pair(fname, "kernel_size", kernel_size, 1)
    s = pair(fname, "stride", opts.stride or k, 1)
    p = pair(fname, "padding", opts.padding or 0, 0)
    d = pair(fname, "dilation", is_max and opts.dilation or 1, 1)
  else
    local k1 = one_d(fname .. ": kernel_size", kernel_size, 1)
    k = { 1, k1 }
    s = { 1, one_d(fname .. ": stride", opts.stride, 1, k1) }
    p = { 0, one_d(fname .. ": padding", opts.padding, 0, 0) }
    d = { 1, is_max and one_d(fname .. ": dilation", opts.dilation, 1, 1) or 1 }
  end
  if 2 * p[1] > k[1] or 2 * p[2] > k[2] then
    error(("%s: padding %d×%d must be at most half the kernel %d×%d (torch's rule)"):format(fname, p[1], p[2], k[1],
      k[2]), 0)
  end
  if opts.count_include_pad ~= nil and type(opts.count_include_pad) ~= "boolean" then
    error(("%s: count_include_pad must be a boolean, got %s"):format(fname, O.got(opts.count_include_pad)), 0)
  end
  local div = opts.divisor_override
  if div ~= nil and (math.type(div) ~= "integer" or div < 1) then
    error(("%s: divisor_override must be an integer >= 1, got %s"):format(fname, O.got(div)), 0)
  end
  if opts.return_indices ~= nil and type(opts.return_indices) ~= "boolean" then
    error(("%s: return_indices must be a boolean, got %s"):format(fname, O.got(opts.return_indices)), 0)
  end
  if opts.ceil_mode ~= nil and type(opts.ceil_mode) ~= "boolean" then
    error(("%s: ceil_mode must be a boolean, got %s"):format(fname, O.got(opts.ceil_mode)), 0)
  end
  return k, s, p, d
end

-- pool(fname, dims, x, kernel_size, opts, is_max): the max or the mean of each window of x ([N, C, H, W] or
-- [N, C, L], or either without the batch dim)
local function pool(fname, dims, x, kernel_size, opts, is_max)
  local xb, unb = batched(fname, x, dims + 2)
  local k, s, p, d = pool_geometry(fname, dims, kernel_size, opts, is_max)
  if dims == 1 then xb = xb:unsqueeze(3) end
  local N, C, H, W = xb:size(1), xb:size(2), xb:size(3), xb:size(4)
  local extra = opts.ceil_mode and { ceil_extra(H, k[1], s[1], p[1], d[1]), ceil_extra(W, k[2], s[2], p[2], d[2]) }
  if extra and extra[1] == 0 and extra[2] == 0 then extra = nil end
  local eh, ew = extra and extra[1] or 0, extra and extra[2] or 0
  local out
  if is_max then
    -- each window's maximum and its flat input position, computed directly (core/max_pool.c: argmax's rule over the
    -- window padded with -inf, a window of -inf alone taking its first input position, as torch's kernel)
    local pads = { p[1], p[1] + eh, p[2], p[2] + ew }
    local oh, ow = G.counts(H, W, k, s, d, pads)
    if oh < 1 or ow < 1 then
      error(("%s: the input %s, padded by %d×%d, is smaller than the kernel %d×%d (dilation %d×%d): the output would "
        .. "be %d×%d"):format(fname, shape_str(xb), p[1], p[2], k[1], k[2], d[1], d[2], oh, ow), 0)
    end
    if opts.return_indices then   -- positions of the input's plane, fp32 (the index dtype): exact to 2^24
      O.exact_positions(fname, H * W - 1, ("the positions in the %d×%d input plane"):format(H, W))
    end
    local at
    out, at = NN.max_pool(xb, { k[1], k[2], s[1], s[2], d[1], d[2], pads[1], pads[2], pads[3], pads[4] })
    local function shaped(t)
      if dims == 1 then t = t:squeeze(3) end
      return unb and t:squeeze(1) or t
    end
    if opts.return_indices then return shaped(out), shaped(at) end
    return shaped(out)
  end
  local pads = { p[1], p[1] + eh, p[2], p[2] + ew }
  local oh, ow = G.counts(H, W, k, s, d, pads)
  if oh >= 1 and ow >= 1 and oh * ow > 1 then
    -- each window's sum and divisor computed directly (core/avg_pool.c: the bits of the columns' sum and division
    -- below, which a single window per plane keeps: its sum is a contiguous run's, summed in SIMD lanes)
    out = NN.avg_pool(xb, { k[1], k[2], s[1], s[2], 1, 1, pads[1], pads[2], pads[3], pads[4] },
      opts.count_include_pad ~= false, opts.divisor_override or 0)
    out = dims == 2 and out or out:squeeze(3)
    return unb and out:squeeze(1) or out
  end
  local win
  win, oh, ow = windows(fname, xb, k, s, p, d, 0, extra)
  local K = k[1] * k[2]
  -- how many of each window's positions the average counts: torch's, the padding's (count_include_pad) but never
  -- those past it that ceil_mode's last windows reach
  local function counts(of_input)
    local ones = fp8.ones({ 1, 1, of_input and H or H + 2 * p[1], of_input and W or W + 2 * p[2] },
      { device = xb:device() })
    return (windows(fname, ones, k, s, of_input and p or { 0, 0 }, d, 0, extra)):sum(3)
  end
  if opts.divisor_override ~= nil then
    out = win:sum(3) / opts.divisor_override
  elseif opts.count_include_pad == false and (p[1] > 0 or p[2] > 0 or extra) then
    out = win:sum(3) / counts(true)
  elseif extra then
    out = win:sum(3) / counts(false)
  else
    out = win:sum(3) / K
  end
  out = dims == 2 and out:reshape({ N, C, oh, ow }) or out:reshape({ N, C, ow })
  -- (a bf16 or fp16 sum over fp32 counts came out fp32 until 2026-12-06; torch's is the input's dtype)
  if out:dtype() ~= xb:dtype() then out = out:to(xb:dtype()) end
  return unb and out:squeeze(1) or out
end

local MAX_KEYS = { "stride", "padding", "dilation", "ceil_mode", "return_indices" }
local AVG2_KEYS = { "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override" }
local AVG1_KEYS = { "stride", "padding", "ceil_mode", "count_include_pad" }
local function impl_max_pool2d(x, kernel_size, opts, ...)
  O.no_more("max_pool2d", "(input, kernel_size [, {stride=, padding=, dilation=, ceil_mode=, return_indices=}])", ...)
  return pool("max_pool2d", 2, x, kernel_size, opts_of("max_pool2d", opts, MAX_KEYS), true)
end
local function impl_avg_pool2d(x, kernel_size, opts, ...)
  O.no_more("avg_pool2d", "(input, kernel_size [, {stride=, padding=, ceil_mode=, count_include_pad=, "
    .. "divisor_override=}])", ...)
  return pool("avg_pool2d", 2, x, kernel_size, opts_of("avg_pool2d", opts, AVG2_KEYS), false)
end
local function impl_max_pool1d(x, kernel_size, opts, ...)
  O.no_more("max_pool1d", "(input, kernel_size [, {stride=, padding=, dilation=, ceil_mode=, return_indices=}])", ...)
  return pool("max_pool1d", 1, x, kernel_size, opts_of("max_pool1d", opts, MAX_KEYS), true)
end
local function impl_avg_pool1d(x, kernel_size, opts, ...)
  O.no_more("avg_pool1d", "(input, kernel_size [, {stride=, padding=, ceil_mode=, count_include_pad=}])", ...)
  return pool("avg_pool1d", 1, x, kernel_size, opts_of("avg_pool1d", opts, AVG1_KEYS), false)
end

for name, impl in pairs { unfold = impl_unfold, fold = impl_fold, conv2d = impl_conv2d, conv1d = impl_conv1d,
  max_pool2d = impl_max_pool2d, avg_pool2d = impl_avg_pool2d, max_pool1d = impl_max_pool1d,
  avg_pool1d = impl_avg_pool1d } do
  F[name] = public(impl)
end

-- ---- the modules ------------------------------------------------------------------------------

-- Conv1d / Conv2d(in_channels, out_channels, kernel_size [, {stride=1, padding=0, dilation=1, groups=1, bias=true,
-- padding_mode="zeros" | "reflect" | "replicate" | "circular"}]) (or one table with those names): torch's, weight
-- and bias U(-1/√fan_in, 1/√fan_in) (kaiming_uniform with a = √5, torch's default), fan_in = in_channels / groups ·
-- kh · kw
local PADDING_MODES = { zeros = true, reflect = true, replicate = true, circular = true }
local CONV_KEYS = { "in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias",
  "padding_mode" }
local function conv_class(name, dims)
  local cls = Module.class(name)
  local function setup(self, cin, cout, ksize, opts)
    local k, g
    cin, cout, k, g, opts = G.conv_args(name, dims, CONV_KEYS, cin, cout, ksize, opts)
    local pm = opts.padding_mode or "zeros"
    if not PADDING_MODES[pm] then
      error(("%s: padding_mode must be one of \"zeros\", \"reflect\", \"replicate\", \"circular\", got %s"):format(
        name, O.got(pm)), 0)
    end
    self.padding_mode = pm
    Module._check_size(name, 3, "out_channels * in_channels / groups * kernel", cout, cin // g, k[1] * k[2])
    self.in_channels, self.out_channels, self.groups = cin, cout, g
    self.kernel_size = dims == 2 and k or { k[2] }
    self.stride, self.padding, self.dilation = opts.stride or 1, opts.padding or 0, opts.dilation or 1
    local bound = 1 / math.sqrt(cin // g * k[1] * k[2])
    local shape = dims == 2 and { cout, cin // g, k[1], k[2] } or { cout, cin // g, k[2] }
    self:register_parameter("weight", init.uniform(shape, -bound, bound))
    if opts.bias ~= false then self:register_parameter("bias", init.uniform({ cout }, -bound, bound)) end
    -- the geometry checked now, not at the first forward
    if dims == 2 then
      conv_padding(name, self.padding, k, pair(name, "stride", self.stride, 1),
        pair(name, "dilation", self.dilation, 1))
    else
      local pd = one_d(name .. ": padding", self.padding, 0, 0, true)
      conv_padding(name, type(pd) == "string" and pd or { 0, pd }, k, { 1, one_d(name .. ": stride", self.stride, 1) },
        { 1, one_d(name .. ": dilation", self.dilation, 1) })
    end
  end
  cls["__init"] = function(self, cin, cout, ksize, opts)
    local ok, err = pcall(setup, self, cin, cout, ksize, opts)
    if not ok then error(strip(err), 3) end
  end
  local fn = dims == 2 and F.conv2d or F.conv1d
  cls.forward = function(self, x)
    local padding = self.padding
    if self.padding_mode ~= "zeros" then
      -- torch's: the input padded in that mode ({left, right[, top, bottom]}, "same" split as the zeros' is), then
      -- convolved without padding
      local k, pd = self.kernel_size
      if dims == 2 then
        pd = conv_padding(name, padding, k, pair(name, "stride", self.stride, 1),
          pair(name, "dilation", self.dilation, 1))
      else
        local p1 = one_d(name .. ": padding", padding, 0, 0, true)
        pd = conv_padding(name, type(p1) == "string" and p1 or { 0, p1 }, { 1, k[1] },
          { 1, one_d(name .. ": stride", self.stride, 1) }, { 1, one_d(name .. ": dilation", self.dilation, 1) })
      end
      if pd[1] + pd[2] + pd[3] + pd[4] > 0 then
        local ok, r = pcall(F.pad, x, dims == 2 and { pd[3], pd[4], pd[1], pd[2] } or { pd[3], pd[4] },
          { mode = self.padding_mode })
        if not ok then error(strip(r), 0) end
        x = r
      end
      padding = 0
    end
    return fn(x, self.weight, self.bias, { stride = self.stride, padding = padding, dilation = self.dilation,
      groups = self.groups })
  end
  cls.extra_repr = function(self)
    -- (torch's order; a dilation other than 1 shown, as torch's repr shows it: until stop 99 it was left out)
    local s = repr_field
    return ("%s, %s, kernel_size=%s, stride=%s, padding=%s%s%s%s%s"):format(s(self.in_channels),
      s(self.out_channels), s(self.kernel_size), s(self.stride), s(self.padding),
      repr_is(self.dilation, 1) and "" or ", dilation=" .. s(self.dilation),
      self.groups ~= 1 and (", groups=%s"):format(s(self.groups)) or "", self.bias == nil and ", bias=false" or "",
      self.padding_mode ~= "zeros" and (", padding_mode=%s"):format(s(self.padding_mode)) or "")
  end
  return cls
end
M.Conv1d = conv_class("Conv1d", 1)
M.Conv2d = conv_class("Conv2d", 2)

-- MaxPool1d/2d, AvgPool1d/2d(kernel_size [, {stride=kernel_size, padding=0, ...}]) (or one table with kernel_size)
local function pool_class(name, fn, valid, dims, is_max)
  local cls = Module.class(name)
  local function setup(self, ksize, opts)
    if type(ksize) == "table" and rawget(ksize, "kernel_size") ~= nil then
      if opts ~= nil then
        error(("%s: pass the options as one table or after kernel_size, not both"):format(name), 0)
      end
      opts = ksize
      ksize = opts.kernel_size
    end
    local keys = { "kernel_size" }
    for _, k in ipairs(valid) do keys[#keys + 1] = k end
    self.opts = opts_of(name, opts, keys)
    self.kernel_size = ksize
    pool_geometry(name, dims, ksize, self.opts, is_max)   -- the options checked now, as the function checks them
  end
  cls["__init"] = function(self, ksize, opts)
    local ok, err = pcall(setup, self, ksize, opts)
    if not ok then error(strip(err), 3) end
  end
  cls._call_opts = function(self)
    local o = {}
    for k, v in next, self.opts do if k ~= "kernel_size" then o[k] = v end end
    return o
  end
  cls.forward = function(self, x) return fn(x, self.kernel_size, self:_call_opts()) end
  cls.extra_repr = function(self)
    local s = repr_field
    local parts = { "kernel_size=" .. s(self.kernel_size) }
    local keys = {}
    for k in next, self.opts do if k ~= "kernel_size" then keys[#keys + 1] = k end end
    table.sort(keys)
    for _, k in ipairs(keys) do parts[#parts + 1] = ("%s=%s"):format(k, s(self.opts[k])) end
    return table.concat(parts, ", ")
  end
  return cls
end
M.MaxPool2d = pool_class("MaxPool2d", F.max_pool2d, MAX_KEYS, 2, true)
M.AvgPool2d = pool_class("AvgPool2d", F.avg_pool2d, AVG2_KEYS, 2, false)
M.MaxPool1d = pool_class("MaxPool1d", F.max_pool1d, MAX_KEYS, 1, true)
M.AvgPool1d = pool_class("AvgPool1d", F.avg_pool1d, AVG1_KEYS, 1, false)

-- Unfold(kernel_size [, {dilation, padding, stride}]) and Fold(output_size, kernel_size [, {...}]): torch's modules
M.Unfold = Module.class("Unfold")
function M.Unfold:__init(ksize, opts)
  local ok, err = pcall(function()
    self.kernel_size, self.opts = ksize, O.check("Unfold", opts, { "dilation", "padding", "stride" })
    pair("Unfold", "kernel_size", ksize, 1)
  end)
  if not ok then error(strip(err), 3) end
end
function M.Unfold:forward(x) return F.unfold(x, self.kernel_size, self.opts) end
M.Fold = Module.class("Fold")
function M.Fold:__init(size, ksize, opts)
  local ok, err = pcall(function()
    self.output_size, self.kernel_size = size, ksize
    self.opts = O.check("Fold", opts, { "dilation", "padding", "stride" })
    pair("Fold", "output_size", size, 1)
    pair("Fold", "kernel_size", ksize, 1)
  end)
  if not ok then error(strip(err), 3) end
end
function M.Fold:forward(x) return F.fold(x, self.output_size, self.kernel_size, self.opts) end

return M
