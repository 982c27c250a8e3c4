-- upsample.lua — torch's resampling of images and sequences: F.interpolate and the modules Upsample,
-- UpsamplingNearest2d and UpsamplingBilinear2d; and the sub-pixel reshapes F.pixel_shuffle / F.pixel_unshuffle with
-- PixelShuffle and PixelUnshuffle.
--
-- interpolate resamples the last 1, 2 or 3 dims of [N, C, ...] ("nearest", "nearest-exact", "linear" / "bilinear" or
-- "bicubic" / "trilinear" for 3-, 4- and 5-D inputs, "area"). Each mode is separable: one dim after another, each a gather
-- (index_select) of source positions or, for the linear and cubic modes, a weighted sum of two or four of them (one
-- pass and one node, core/resample.c), so gradients flow as torch's. The source positions and weights follow torch's kernels step by step in fp32 (its float arithmetic
-- decides which pixel "nearest" picks at a boundary): scale = 1/scale_factor when one is given (and
-- recompute_scale_factor is not true), else in/out; nearest: floor(dst·scale) (the copy and the doubling exact);
-- nearest-exact: floor((dst + 0.5)·scale); linear: (dst + 0.5)·scale - 0.5 clamped at 0, or with align_corners
-- dst·(in - 1)/(out - 1); "bicubic" (4-D inputs) the weighted sum of four neighbours, cubic_dim below; "area" is
-- adaptive average pooling. antialias is refused by name.
local fp8 = require "fp8.core"
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local O = require "fp8.opts"
local G = require "fp8.nn.conv_geometry"
local NN = fp8._nn   -- resample: one dim as weighted sums of source positions (core/resample.c)

local M = {}
local public, strip = require("fp8.errfmt").public_of("upsample.lua")

local f32 = O.f32   -- x rounded to fp32, as torch's float
local function floor_int(x) return math.tointeger(math.floor(x)) end

local on_dev = require("fp8.tensor")._list_on   -- (list, device)

-- the scale torch's kernels use (compute_scales_value, in float): 1/scale_factor when given, else in/out
local function scale_of(n, m, sf)
  if sf ~= nil and sf > 0 then return f32(1 / sf) end
  return f32(n / m)
end

-- x resampled along dim d (1-based) from n to m positions, of k spatial dims: torch's 2-D nearest kernel copies a
-- dim whose size stays and halves the index where it doubles (nearest_idx); its 1-D and 3-D kernels do not
local function nearest_dim(x, d, m, sf, exact, k)
  local n = x:size(d)
  local idx = {}
  local shortcuts = not exact and k == 2
  if shortcuts and m == n then return x end
  local scale = scale_of(n, m, sf)
  for dst = 0, m - 1 do
    local src
    if exact then src = floor_int(f32((dst + 0.5) * scale))
    elseif shortcuts and m == 2 * n then src = dst // 2
    else src = floor_int(f32(dst * scale)) end
    idx[dst + 1] = math.min(src, n - 1)
  end
  return x:index_select(d, on_dev(idx, x:device()))
end

local function linear_dim(x, d, m, sf, align)
  local n = x:size(d)
  if m == n then return x end   -- torch's compute_source_index_and_lambda copies a dim whose size stays
  local scale
  if align then scale = m > 1 and f32((n - 1) / (m - 1)) or 0
  else scale = scale_of(n, m, sf) end
  local pos, w = {}, {}   -- per output position its two sources and their weights (core/resample.c)
  for dst = 0, m - 1 do
    local src
    if align then src = f32(scale * dst)
    else
      src = f32(f32(scale * (dst + 0.5)) - 0.5)
      if src < 0 then src = 0 end
    end
    local a = math.min(floor_int(src), n - 1)
    local lam = math.min(math.max(f32(src - a), 0), 1)
    pos[2 * dst + 1], pos[2 * dst + 2] = a, a + (a < n - 1 and 1 or 0)
    w[2 * dst + 1], w[2 * dst + 2] = f32(1 - lam), lam
  end
  return NN.resample(x, d, 2, pos, w)
end

-- bicubic along dim d: torch's cubic convolution (A = -0.75) over the four source positions floor(src) - 1 ..
-- floor(src) + 2, each clamped into [0, n - 1], src = (dst + 0.5)·scale - 0.5 not clamped at 0 (or dst·scale with
-- align_corners); the weights computed in double and rounded once to fp32 (torch rounds each step in float: a
-- constant image then drifts by 6-12 ulps there, 0-2 here; against float64 both stay within ~3.5e-6 on unit-size
-- inputs), the sum t0·w0 + t1·w1 + t2·w2 + t3·w3 left to right (core/resample.c)
local CUBIC_A = -0.75
local function cubic_weights(t)
  local A = CUBIC_A
  local function c1(v) return f32((((A + 2) * v) - (A + 3)) * v * v + 1) end
  local function c2(v) return f32(((A * v - 5 * A) * v + 8 * A) * v - 4 * A) end
  local u = 1 - t
  return { c2(t + 1), c1(t), c1(u), c2(u + 1) }
end

local function cubic_dim(x, d, m, sf, align)
  local n = x:size(d)
  if m == n then return x end   -- src = dst, t = 0: the weights are 0, 1, 0, 0
  local scale
  if align then scale = m > 1 and f32((n - 1) / (m - 1)) or 0
  else scale = scale_of(n, m, sf) end
  local pos, wts = {}, {}
  for dst = 0, m - 1 do
    local src = align and f32(scale * dst) or f32(f32(scale * (dst + 0.5)) - 0.5)
    local a = floor_int(src)
    local w = cubic_weights(f32(src - a))
    for j = 1, 4 do
      pos[4 * dst + j] = math.min(math.max(a - 2 + j, 0), n - 1)
      wts[4 * dst + j] = w[j]
    end
  end
  return NN.resample(x, d, 4, pos, wts)
end

local MODES = { nearest = 1, ["nearest-exact"] = 1, linear = 1, bilinear = 2, bicubic = 2, trilinear = 3, area = 1 }
local LINEAR = { linear = true, bilinear = true, bicubic = true, trilinear = true }   -- (those taking align_corners)

-- a size or a scale_factor: one value for every spatial dim, or a list of one per dim
local function per_dim(fname, what, v, k, check)
  local list = {}
  if type(v) == "table" and getmetatable(v) == nil then
    if rawlen(v) ~= k then
      error(("%s: %s must be a number or a list of %d (one per spatial dim), got %s"):format(fname, what, k,
        O.got(v)), 0)
    end
    for i = 1, k do list[i] = rawget(v, i) end
  else
    for i = 1, k do list[i] = v end
  end
  for i = 1, k do check(list[i]) end
  return list
end

-- (options_only: check o for an input of x's rank and stop, as a module's constructor does)
local function interpolate(fname, x, o, options_only)
  if not fp8.is_tensor(x) then error(("%s: expected a tensor input, got %s"):format(fname, O.got(x)), 0) end
  if x:is_fp8() then error(("%s: %s tensor: dequantize it first"):format(fname, x:dtype()), 0) end
  local mode = o.mode or "nearest"
  if MODES[mode] == nil then
    error(("%s: mode must be one of \"nearest\", \"nearest-exact\", \"linear\", \"bilinear\", \"bicubic\", "
      .. "\"trilinear\", \"area\", got %s"):format(fname, O.got(mode)), 0)
  end
  if o.antialias ~= nil and o.antialias ~= false then
    error(("%s: antialias=%s is not supported (only false)"):format(fname, O.got(o.antialias)), 0)
  end
  local k = x:dim() - 2
  if k < 1 or k > 3 then
    error(("%s: expected a 3-D, 4-D or 5-D input [N, C, ...] (1, 2 or 3 spatial dims), got %s"):format(fname,
      x:shape_str()), 0)
  end
  if LINEAR[mode] and MODES[mode] ~= k then
    error(("%s: mode \"%s\" takes a %d-D input, got %s (%d-D)"):format(fname, mode, MODES[mode] + 2, x:shape_str(),
      x:dim()), 0)
  end
  local align = o.align_corners
  if align ~= nil then
    if type(align) ~= "boolean" then
      error(("%s: align_corners must be a boolean, got %s"):format(fname, O.got(align)), 0)
    end
    if not LINEAR[mode] then
      error(("%s: align_corners applies to the linear modes (linear, bilinear, bicubic, trilinear), not to \"%s\"")
        :format(fname, mode), 0)
    end
  end
  local recompute = o.recompute_scale_factor
  if recompute ~= nil and type(recompute) ~= "boolean" then
    error(("%s: recompute_scale_factor must be a boolean, got %s"):format(fname, O.got(recompute)), 0)
  end
  if (o.size == nil) == (o.scale_factor == nil) then
    error(("%s: give one of size and scale_factor, got %s"):format(fname,
      o.size == nil and "neither" or "both"), 0)
  end
  local sizes, scales
  if o.size ~= nil then
    if recompute then
      error(("%s: recompute_scale_factor applies to a scale_factor, not to a size"):format(fname), 0)
    end
    sizes = per_dim(fname, "size", o.size, k, function(v)
      if math.type(v) ~= "integer" or v < 1 then
        error(("%s: size must hold integers >= 1, got %s"):format(fname, O.got(v)), 0)
      end
    end)
  else
    local factors = per_dim(fname, "scale_factor", o.scale_factor, k, function(v)
      if type(v) ~= "number" or not (v > 0) or v == math.huge then
        error(("%s: scale_factor must hold finite numbers > 0, got %s"):format(fname, O.got(v)), 0)
      end
    end)
    if options_only then return end
    sizes = {}
    for i = 1, k do
      sizes[i] = math.floor(x:size(2 + i) * factors[i])
      G.check_positions(fname, "output dim " .. (2 + i), sizes[i])
      sizes[i] = math.tointeger(sizes[i])
      if sizes[i] < 1 then
        error(("%s: scale_factor %s makes dim %d of %s empty"):format(fname, O.got(factors[i]), 2 + i,
          x:shape_str()), 0)
      end
    end
    if not recompute then scales = factors end
  end
  for i = 1, k do
    if x:size(2 + i) == 0 then
      error(("%s: the input %s has an empty dim %d"):format(fname, x:shape_str(), 2 + i), 0)
    end
    G.check_positions(fname, "output dim " .. (2 + i), sizes[i])
  end
  local dt = x:dtype()
  local y = (dt == "bf16" or dt == "fp16") and x:float() or x   -- in fp32, rounded once
  for i = k, 1, -1 do
    local d, m, sf = 2 + i, sizes[i], scales and scales[i]
    if mode == "area" then y = G.adaptive_dim(y, d, m, false)
    elseif mode == "bicubic" then y = cubic_dim(y, d, m, sf, align == true)
    elseif LINEAR[mode] then y = linear_dim(y, d, m, sf, align == true)
    else y = nearest_dim(y, d, m, sf, mode == "nearest-exact", k) end
  end
  if y:dtype() ~= dt then y = y:to(dt) end
  if y == x then y = x * 1 end   -- a new tensor, as torch's
  return y
end

local KEYS = { "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias" }

-- interpolate(input, {size= | scale_factor=, mode="nearest", align_corners=, recompute_scale_factor=,
-- antialias=false}) or interpolate(input, size [, {...}])
local function impl_interpolate(x, o, more, ...)
  O.no_more("interpolate", "(input, {size= | scale_factor=, mode=, align_corners=, recompute_scale_factor=})", ...)
  if math.type(o) == "integer" or (type(o) == "table" and getmetatable(o) == nil and rawget(o, 1) ~= nil) then
    local opts = O.check("interpolate", more, { "mode", "align_corners", "antialias" })
    local copy = { size = o }
    for key, v in next, opts do copy[key] = v end
    o = copy
  elseif more ~= nil then
    error(("interpolate: takes (input, size [, options]) or (input, options), got a third argument %s"):format(
      O.got(more)), 0)
  else
    if o == nil then error("interpolate: give size= or scale_factor= (an options table), got none", 0) end
    o = O.check("interpolate", o, KEYS)
  end
  return interpolate("interpolate", x, o)
end
F.interpolate = public(impl_interpolate)

-- pixel_shuffle(x [N, C·r², H, W], r) → [N, C, H·r, W·r] and pixel_unshuffle, its inverse: torch's reshapes
local function check_factor(fname, what, r)
  if math.type(r) ~= "integer" or r < 1 then
    error(("%s: %s must be an integer >= 1, got %s"):format(fname, what, O.got(r)), 0)
  end
end
local function lead_shape(x) local s = x:shape(); local l = {}; for i = 1, #s - 3 do l[i] = s[i] end; return l end
local function with(lead, ...) local t = {}; for i, v in ipairs(lead) do t[i] = v end
  for _, v in ipairs { ... } do t[#t + 1] = v end; return t end
local function impl_pixel_shuffle(x, r, ...)
  O.no_more("pixel_shuffle", "(input, upscale_factor)", ...)
  if not fp8.is_tensor(x) or x:dim() < 3 then
    error(("pixel_shuffle: expected a tensor [..., C·r², H, W], got %s"):format(fp8.is_tensor(x) and x:shape_str()
      or O.got(x)), 0)
  end
  check_factor("pixel_shuffle", "upscale_factor", r)
  local nd = x:dim()
  local C, H, W = x:size(nd - 2), x:size(nd - 1), x:size(nd)
  if C % (r * r) ~= 0 then
    error(("pixel_shuffle: the channels %d of %s are not divisible by upscale_factor² = %d"):format(C, x:shape_str(),
      r * r), 0)
  end
  local lead, c = lead_shape(x), C // (r * r)
  local L = #lead
  local y = x:reshape(with(lead, c, r, r, H, W))
  local perm = {}
  for i = 1, L do perm[i] = i end
  for _, p in ipairs { 1, 4, 2, 5, 3 } do perm[#perm + 1] = L + p end   -- [c, H, r, W, r]
  return y:permute(perm):reshape(with(lead, c, H * r, W * r))
end
local function impl_pixel_unshuffle(x, r, ...)
  O.no_more("pixel_unshuffle", "(input, downscale_factor)", ...)
  if not fp8.is_tensor(x) or x:dim() < 3 then
    error(("pixel_unshuffle: expected a tensor [..., C, H·r, W·r], got %s"):format(fp8.is_tensor(x) and
      x:shape_str() or O.got(x)), 0)
  end
  check_factor("pixel_unshuffle", "downscale_factor", r)
  local nd = x:dim()
  local C, H, W = x:size(nd - 2), x:size(nd - 1), x:size(nd)
  if H % r ~= 0 or W % r ~= 0 then
    error(("pixel_unshuffle: the height %d and width %d of %s must be divisible by downscale_factor %d"):format(H, W,
      x:shape_str(), r), 0)
  end
  local lead = lead_shape(x)
  local L = #lead
  local y = x:reshape(with(lead, C, H // r, r, W // r, r))
  local perm = {}
  for i = 1, L do perm[i] = i end
  for _, p in ipairs { 1, 3, 5, 2, 4 } do perm[#perm + 1] = L + p end   -- [C, r, r, H/r, W/r]
  return y:permute(perm):reshape(with(lead, C * r * r, H // r, W // r))
end
F.pixel_shuffle = public(impl_pixel_shuffle)
F.pixel_unshuffle = public(impl_pixel_unshuffle)

-- ---- the modules ------------------------------------------------------------------------------

-- Upsample{size= | scale_factor=, mode="nearest", align_corners=, recompute_scale_factor=}: interpolate's, checked
-- when made (against a stand-in input of the mode's rank)
local function format_value(v, float)   -- as torch prints them: a scale factor is a float (2.0)
  if type(v) == "table" then
    local parts = {}
    for i, e in ipairs(v) do parts[i] = format_value(e, float) end
    return "(" .. table.concat(parts, ", ") .. ")"
  end
  if float and v == math.floor(v) then return ("%.1f"):format(v) end
  return tostring(v)
end

local function upsample_class(name, fixed)
  local cls = Module.class(name)
  cls["__init"] = function(self, o, ...)
    local ok, err = pcall(function(...)
      O.no_more(name, "({size= | scale_factor=, ...})", ...)
      if fixed then
        o = O.check(name, o, { "size", "scale_factor" })
        local copy = { mode = fixed.mode, align_corners = fixed.align_corners }
        for key, v in next, o do copy[key] = v end
        o = copy
      else
        if o == nil or type(o) ~= "table" or getmetatable(o) ~= nil or rawget(o, 1) ~= nil then
          error(("%s: takes an options table {size= | scale_factor=, mode=, align_corners=, "
            .. "recompute_scale_factor=}, got %s"):format(name, O.got(o)), 0)
        end
        o = O.check(name, o, { "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor" })
      end
      local rank = MODES[o.mode or "nearest"]
      if o.mode == nil or not LINEAR[o.mode] then rank = (type(o.size) == "table" and rawlen(o.size))
        or (type(o.scale_factor) == "table" and rawlen(o.scale_factor)) or 2 end
      if type(rank) ~= "number" or rank < 1 or rank > 3 then rank = 2 end
      local stand_in = { 1, 1 }
      for _ = 1, rank do stand_in[#stand_in + 1] = 1 end
      interpolate(name, fp8.zeros(stand_in), o, true)
      self.size, self.scale_factor, self.mode = o.size, o.scale_factor, o.mode or "nearest"
      self.align_corners, self.recompute_scale_factor = o.align_corners, o.recompute_scale_factor
    end, ...)
    if not ok then error(strip(err), 3) end
  end
  cls.forward = function(self, x)
    return interpolate(name, x, { size = self.size, scale_factor = self.scale_factor, mode = self.mode,
      align_corners = self.align_corners, recompute_scale_factor = self.recompute_scale_factor })
  end
  cls.extra_repr = function(self)
    local s = self.scale_factor ~= nil and "scale_factor=" .. format_value(self.scale_factor, true)
      or "size=" .. format_value(self.size)
    return s .. ", mode=" .. self.mode
  end
  return cls
end
M.Upsample = upsample_class("Upsample")
-- UpsamplingNearest2d{size= | scale_factor=} and UpsamplingBilinear2d{...} (align_corners=true, as torch's)
M.UpsamplingNearest2d = upsample_class("UpsamplingNearest2d", { mode = "nearest" })
M.UpsamplingBilinear2d = upsample_class("UpsamplingBilinear2d", { mode = "bilinear", align_corners = true })

local function shuffle_class(name, fn, what)
  local cls = Module.class(name)
  cls["__init"] = function(self, r, ...)
    local ok, err = pcall(function(...)
      O.no_more(name, ("(%s)"):format(what), ...)
      check_factor(name, what, r)
      self[what] = r
    end, ...)
    if not ok then error(strip(err), 3) end
  end
  cls.forward = function(self, x) return fn(x, self[what]) end
  cls.extra_repr = function(self) return ("%s=%d"):format(what, self[what]) end
  return cls
end
M.PixelShuffle = shuffle_class("PixelShuffle", F.pixel_shuffle, "upscale_factor")
M.PixelUnshuffle = shuffle_class("PixelUnshuffle", F.pixel_unshuffle, "downscale_factor")

return M
