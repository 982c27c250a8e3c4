-- conv_transpose.lua — torch's transposed convolutions: F.conv_transpose1d / F.conv_transpose2d and the modules
-- ConvTranspose1d and ConvTranspose2d, the adjoint of conv1d/conv2d with respect to its input (what upsampling
-- decoders, U-Nets and GANs use). Built of differentiable ops, as the convolutions are: one batched GEMM per group
-- (autocast runs it in bf16, as torch's) spreads each input position over a kernel's worth of output positions, and
-- col2im (the core's fold, core/im2col.c) adds them into the output plane, the padding cropped and output_padding's
-- rows and columns on the bottom and right left at 0. Runs in high precision under every FP8 recipe (recipes convert
-- Linear layers only).
-- padding_mode other than "zeros" is refused, as torch's.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local O = require "fp8.opts"
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local prof_op = require "fp8.prof_op"
local init = require "fp8.nn.init_fns"
local G = require "fp8.nn.conv_geometry"
local pair, one_d, batched, opts_of = G.pair, G.one_d, G.batched, G.opts_of

local M = {}
local public, strip = require("fp8.errfmt").public_of("conv_transpose.lua")

local OPT_KEYS = { "stride", "padding", "output_padding", "groups", "dilation" }

-- conv_transpose2d's work on [N, C, H, W] and a weight [C, OC/groups, kh, kw]; s, p, op, d pairs
local function transpose2d(fname, xb, w, b, s, p, op, d, g)
  if not fp8.is_tensor(w) or w:dim() ~= 4 then
    error(("%s: weight must be [in_channels, out_channels / groups, kh, kw], got %s"):format(fname,
      fp8.is_tensor(w) and w:shape_str() or O.got(w)), 0)
  end
  if math.type(g) ~= "integer" or g < 1 then
    error(("%s: groups must be an integer >= 1, got %s"):format(fname, O.got(g)), 0)
  end
  local N, C, H, W = xb:size(1), xb:size(2), xb:size(3), xb:size(4)
  if w:size(1) ~= C or C % g ~= 0 then
    error(("%s: input %s and weight %s do not agree with groups=%d (the weight's first dim is in_channels, %d, "
      .. "divisible by groups)"):format(fname, xb:shape_str(), w:shape_str(), g, C), 0)
  end
  local OC, k = w:size(2) * g, { w:size(3), w:size(4) }
  -- (an empty plane reached a raw error in the column positions until 2026-12-05; torch's refuses it too)
  if H < 1 or W < 1 then
    error(("%s: the input %s has no positions (only a batch or channels of 0 are taken)"):format(fname,
      xb:shape_str()), 0)
  end
  if k[1] < 1 or k[2] < 1 then
    error(("%s: the weight %s has a kernel of size 0"):format(fname, w:shape_str()), 0)
  end
  if b ~= nil and (not fp8.is_tensor(b) or b:dim() ~= 1 or b:size(1) ~= OC) then
    error(("%s: bias must be [%d] (one per output channel), got %s"):format(fname, OC,
      fp8.is_tensor(b) and b:shape_str() or O.got(b)), 0)
  end
  for i = 1, 2 do
    if op[i] >= s[i] and op[i] >= d[i] then
      error(("%s: output_padding %d×%d must be smaller than the stride %d×%d or the dilation %d×%d (torch's rule)")
        :format(fname, op[1], op[2], s[1], s[2], d[1], d[2]), 0)
    end
  end
  -- the full plane the windows cover, before the padding is cropped: (H - 1)·s + d·(k - 1) + 1
  local hf, wf = (H - 1) * s[1] + d[1] * (k[1] - 1) + 1, (W - 1) * s[2] + d[2] * (k[2] - 1) + 1
  local oh, ow = hf - 2 * p[1] + op[1], wf - 2 * p[2] + op[2]
  if oh < 1 or ow < 1 then
    error(("%s: the input %s with padding %d×%d gives an output of %d×%d"):format(fname, xb:shape_str(), p[1], p[2],
      oh, ow), 0)
  end
  -- bf16/fp16 operands compute in fp32 and the result is rounded once (torch's): in bf16 the overlapping windows'
  -- sums (col2im's) and the bias rounded at every step, up to 136 ulps off
  return require("fp8.tensor")._low_in_fp32(function(xb, w, b)
    local K = k[1] * k[2]
    local cols
    if g == 1 then   -- [N, OC·K, H·W]: each input position times every kernel offset of every output channel
      cols = w:reshape({ C, OC * K }):transpose(1, 2):matmul(xb:reshape({ N, C, H * W }))
    else
      local cg, og = C // g, OC // g
      cols = w:reshape({ g, cg, og * K }):transpose(2, 3):matmul(xb:reshape({ N, g, cg, H * W }))   -- [N, g, og·K, HW]
    end
    -- unfold's order is [N, OC, K, L], the kernel offset outer. The windows cover the full hf×wf plane: the
    -- output is its rows p .. hf - p + op - 1, so the padding is p on top and p - op at the bottom (negative where
    -- output_padding reaches past the windows: those rows stay 0)
    local out = G.fold(cols:reshape({ N, OC, K, H * W }), oh, ow, k, s, d, { p[1], p[1] - op[1], p[2], p[2] - op[2] })
    if b ~= nil then out = out + b:reshape({ 1, OC, 1, 1 }) end
    return out
  end, xb, w, b)
end

-- the options of a 2-d or 1-d transposed convolution, as pairs (a 1-d one's on a plane of height 1)
local function geometry(fname, dims, opts)
  if dims == 2 then
    return pair(fname, "stride", opts.stride or 1, 1), pair(fname, "padding", opts.padding or 0, 0),
      pair(fname, "output_padding", opts.output_padding or 0, 0), pair(fname, "dilation", opts.dilation or 1, 1)
  end
  return { 1, one_d(fname .. ": stride", opts.stride, 1, 1) }, { 0, one_d(fname .. ": padding", opts.padding, 0, 0) },
    { 0, one_d(fname .. ": output_padding", opts.output_padding, 0, 0) },
    { 1, one_d(fname .. ": dilation", opts.dilation, 1, 1) }
end

local function conv_transpose(fname, dims, x, w, b, opts)
  local xb, unb = batched(fname, x, dims + 2)
  local s, p, op, d = geometry(fname, dims, opts)
  if dims == 1 then
    xb = xb:unsqueeze(3)
    if fp8.is_tensor(w) and w:dim() == 3 then w = w:unsqueeze(3)
    else
      error(("%s: weight must be [in_channels, out_channels / groups, k], got %s"):format(fname,
        fp8.is_tensor(w) and w:shape_str() or O.got(w)), 0)
    end
  end
  -- one op in the profiler, torch's aten::conv_transpose2d (1d), which torch counts no FLOPs for: with_flops, the
  -- GEMM and fold inside count none either
  local out = prof_op(fname, nil, table.pack(x, w, b, s, p, op, opts.groups, d), transpose2d, fname, xb, w, b, s, p,
    op, d, opts.groups or 1)
  if dims == 1 then out = out:squeeze(3) end
  return unb and out:squeeze(1) or out
end

-- conv_transpose2d(input[N, C, H, W], weight[C, OC/groups, kh, kw] [, bias[OC]] [, {stride=1, padding=0,
-- output_padding=0, groups=1, dilation=1}]) → [N, OC, (H-1)·s - 2p + d·(kh-1) + output_padding + 1, ...]: torch's
local function impl_conv_transpose2d(x, w, b, opts, ...)
  O.no_more("conv_transpose2d", "(input, weight [, bias] [, {stride=, padding=, output_padding=, groups=, "
    .. "dilation=}])", ...)
  if type(b) == "table" and not fp8.is_tensor(b) and opts == nil then b, opts = nil, b end
  return conv_transpose("conv_transpose2d", 2, x, w, b, opts_of("conv_transpose2d", opts, OPT_KEYS))
end
-- conv_transpose1d(input[N, C, L], weight[C, OC/groups, k] [, bias] [, {...}]): conv_transpose2d on a plane of
-- height 1
local function impl_conv_transpose1d(x, w, b, opts, ...)
  O.no_more("conv_transpose1d", "(input, weight [, bias] [, {stride=, padding=, output_padding=, groups=, "
    .. "dilation=}])", ...)
  if type(b) == "table" and not fp8.is_tensor(b) and opts == nil then b, opts = nil, b end
  return conv_transpose("conv_transpose1d", 1, x, w, b, opts_of("conv_transpose1d", opts, OPT_KEYS))
end
F.conv_transpose2d = public(impl_conv_transpose2d)
F.conv_transpose1d = public(impl_conv_transpose1d)

-- ---- the modules ------------------------------------------------------------------------------

-- ConvTranspose1d / ConvTranspose2d(in_channels, out_channels, kernel_size [, {stride=1, padding=0,
-- output_padding=0, groups=1, bias=true, dilation=1, padding_mode="zeros"}]) (or one table with those names):
-- torch's; weight [in_channels, out_channels / groups, kh, kw] and bias U(-1/√fan_in, 1/√fan_in) with torch's fan_in
-- of that weight, out_channels / groups · kh · kw. forward(x [, output_size]): output_size (the spatial sizes, or the
-- whole shape) picks the output_padding that gives it, within the stride's range, as torch's.
local KEYS = { "in_channels", "out_channels", "kernel_size", "stride", "padding", "output_padding", "groups", "bias",
  "dilation", "padding_mode" }
local function transpose_class(name, dims)
  local cls = Module.class(name)
  local function setup(self, cin, cout, ksize, opts)
    local k, g
    cin, cout, k, g, opts = G.conv_args(name, dims, KEYS, cin, cout, ksize, opts)
    if opts.padding_mode ~= nil and opts.padding_mode ~= "zeros" then
      error(("%s: padding_mode must be \"zeros\" (torch's transposed convolutions take no other), got %s"):format(
        name, O.got(opts.padding_mode)), 0)
    end
    local s, p, op, d = geometry(name, dims, opts)
    for i = 1, 2 do
      if op[i] >= s[i] and op[i] >= d[i] then
        error(("%s: output_padding must be smaller than the stride or the dilation (torch's rule), got %s"):format(
          name, O.got(opts.output_padding)), 0)
      end
    end
    Module._check_size(name, 3, "in_channels * out_channels / groups * kernel", cin, cout // g, k[1] * k[2])
    self.in_channels, self.out_channels, self.groups = cin, cout, g
    self.kernel_size = dims == 2 and k or { k[2] }
    self.stride, self.padding = opts.stride or 1, opts.padding or 0
    self.output_padding, self.dilation = opts.output_padding or 0, opts.dilation or 1
    self.padding_mode = "zeros"
    local bound = 1 / math.sqrt(cout // g * k[1] * k[2])
    local shape = dims == 2 and { cin, cout // g, k[1], k[2] } or { cin, cout // g, k[2] }
    self:register_parameter("weight", init.uniform(shape, -bound, bound))
    if opts.bias ~= false then self:register_parameter("bias", init.uniform({ cout }, -bound, bound)) end
  end
  cls["__init"] = function(self, cin, cout, ksize, opts)
    local ok, err = pcall(setup, self, cin, cout, ksize, opts)
    if not ok then error(strip(err), 3) end
  end
  -- output_size: the output_padding that makes the output that size (torch's _output_padding)
  local function output_padding_for(self, x, size)
    local s, p, op, d = geometry(name, dims, self)
    if size == nil then return dims == 2 and op or op[2] end
    if type(size) ~= "table" then
      error(("output_size must be a list of sizes, got %s"):format(O.got(size)), 0)
    end
    local n, spatial = rawlen(size), {}
    local nonspatial = x:dim() - dims
    if n == dims + nonspatial then
      for i = nonspatial + 1, n do spatial[#spatial + 1] = rawget(size, i) end
    elseif n == dims then
      for i = 1, n do spatial[i] = rawget(size, i) end
    else
      error(("output_size must have %d or %d elements (the spatial sizes, or the whole shape), got %d"):format(
        dims, dims + nonspatial, n), 0)
    end
    local k = dims == 2 and self.kernel_size or { 1, self.kernel_size[1] }
    local res = { 0, 0 }
    for i = 1, dims do
      local j = dims == 2 and i or 2
      local v = spatial[i]
      local insize = x:size(x:dim() - dims + i)
      local lo = (insize - 1) * s[j] - 2 * p[j] + d[j] * (k[j] - 1) + 1
      local hi = lo + s[j] - 1
      if math.type(v) ~= "integer" or v < lo or v > hi then
        error(("output_size: requested %s, but valid sizes range from %d to %d (for an input of %s)"):format(
          O.got(v), lo, hi, x:shape_str()), 0)
      end
      res[j] = v - lo
    end
    return dims == 2 and res or res[2]
  end
  local fn = dims == 2 and F.conv_transpose2d or F.conv_transpose1d
  cls.forward = function(self, x, output_size)
    local op = self.output_padding
    if output_size ~= nil then
      if not fp8.is_tensor(x) then Module._forward_error(self, ("expected a tensor input, got %s"):format(O.got(x))) end
      op = output_padding_for(self, x, output_size)
    end
    return fn(x, self.weight, self.bias, { stride = self.stride, padding = self.padding, output_padding = op,
      groups = self.groups, dilation = self.dilation })
  end
  -- A field written by hand shown as it holds it (G.repr_field, the convolutions' repr since sweep 110): until stop 99
  -- a list field was joined by table.concat, so a table whose __len lies ran for ever in tostring(m), and a string
  -- in_channels or a fractional groups was string.format's raw error at this file's line. torch's order (dilation
  -- before output_padding; it was after)
  cls.extra_repr = function(self)
    local s, is = G.repr_field, G.repr_is
    return ("%s, %s, kernel_size=%s, stride=%s, padding=%s%s%s%s%s"):format(s(self.in_channels),
      s(self.out_channels), s(self.kernel_size), s(self.stride), s(self.padding),
      is(self.dilation, 1) and "" or ", dilation=" .. s(self.dilation),
      is(self.output_padding, 0) and "" or ", output_padding=" .. s(self.output_padding),
      self.groups ~= 1 and (", groups=%s"):format(s(self.groups)) or "", self.bias == nil and ", bias=false" or "")
  end
  return cls
end
M.ConvTranspose1d = transpose_class("ConvTranspose1d", 1)
M.ConvTranspose2d = transpose_class("ConvTranspose2d", 2)

return M
