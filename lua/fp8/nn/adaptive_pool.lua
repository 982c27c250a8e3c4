-- adaptive_pool.lua — torch's adaptive pooling: F.adaptive_avg_pool1d/2d, F.adaptive_max_pool1d/2d and the modules
-- AdaptiveAvgPool1d/2d and AdaptiveMaxPool1d/2d. Output position i of a dim of size n pooled to m covers the input
-- positions floor(i·n/m) .. ceil((i+1)·n/m) - 1 (torch's windows: they overlap, or repeat, where m does not divide
-- n). A rectangle's mean or max is the mean or max over its rows of the mean or max over its columns, so a 2-d pool
-- is two 1-d ones; each gathers its windows (padded to the longest by repeating the last position, which neither
-- the max nor the masked mean counts twice) with index_select, so gradients flow as torch's. Where m divides n the
-- windows are a reshape, with no gather. A 1×1 average is torch's one mean over H·W. A channels_last input is pooled
-- in its memory ([N, H, W, C]) and gives a channels_last result and gradient, as torch's (stop 105). Elementwise
-- throughout: autocast leaves it in the input's precision, as torch's; bf16/fp16 are pooled in fp32 and rounded
-- once. return_indices is refused.
local fp8 = require "fp8.core"
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local O = require "fp8.opts"
local G = require "fp8.nn.conv_geometry"

local M = {}
local public, strip = require("fp8.errfmt").public_of("adaptive_pool.lua")

-- output_size as sizes for the last dims dims of xb: an integer (every dim), or a list with nil for "the input's"
local function sizes(fname, dims, output_size, xb)
  local out = {}
  if math.type(output_size) == "integer" then
    for i = 1, dims do out[i] = output_size end
  elseif type(output_size) == "table" and getmetatable(output_size) == nil then
    for k in next, output_size do
      if math.type(k) ~= "integer" or k < 1 or k > dims then
        error(("%s: output_size must be an integer or a list of %d (nil keeps the input's size), got %s"):format(
          fname, dims, O.got(output_size)), 0)
      end
    end
    for i = 1, dims do
      local v = rawget(output_size, i)
      out[i] = v == nil and xb:size(xb:dim() - dims + i) or v
    end
  else
    error(("%s: output_size must be an integer or a list of %d (nil keeps the input's size), got %s"):format(fname,
      dims, O.got(output_size)), 0)
  end
  for i = 1, dims do
    if math.type(out[i]) ~= "integer" or out[i] < 1 then
      error(("%s: output_size must hold integers >= 1, got %s"):format(fname, O.got(out[i])), 0)
    end
    G.check_positions(fname, "the output dim " .. i, out[i])
  end
  return out
end

local function adaptive(fname, dims, x, output_size, is_max)
  local xb, unb = G.batched(fname, x, dims + 2)
  if xb:is_fp8() then error(("%s: %s tensor: dequantize it first"):format(fname, xb:dtype()), 0) end
  local size = sizes(fname, dims, output_size, xb)
  for i = 1, dims do
    if xb:size(2 + i) == 0 then
      error(("%s: the input %s has an empty dim %d"):format(fname, xb:shape_str(), 2 + i), 0)
    end
  end
  local dt = xb:dtype()
  local cl = dims == 2 and xb:_channels_last()   -- torch's suggest_memory_format of xb
  local y = (dt == "bf16" or dt == "fp16") and xb:float() or xb   -- computed in fp32, rounded once (layout kept)
  local N, C, H, W = y:size(1), y:size(2), y:size(3), dims == 2 and y:size(4) or 1
  if dims == 2 and not is_max and size[1] == 1 and size[2] == 1 and H * W > 1 then
    -- torch's global pool: one mean over H·W (a view of either layout; the reduction reads a channels_last x in
    -- its memory order), its result [N, C, 1, 1] channels_last for a channels_last x ({C, 1, C, C}) and its
    -- gradient contiguous (MeanBackward's expand), as torch 2.15's
    y = y:reshape({ N, C, H * W }):mean(3)
    if y:dtype() ~= dt then y = y:to(dt) end   -- (before the permute: to() of [N, C, 1, 1] drops {C, 1, C, C})
    y = cl and y:reshape({ N, 1, 1, C }):permute(1, 4, 2, 3) or y:reshape({ N, C, 1, 1 })
  elseif cl then
    -- channels_last: the windows of the contiguous [N, H, W, C] view of x's memory, W then H as below (the same
    -- sums and maxima in the same order), permuted back: a channels_last result and gradient, as torch 2.15's, with
    -- no layout copy
    y = y:permute(1, 3, 4, 2)
    y = G.adaptive_dim(G.adaptive_dim(y, 3, size[2], is_max), 2, size[1], is_max)
    if y:dtype() ~= dt then y = y:to(dt) end
    y = y:permute(1, 4, 2, 3)
  else
    for i = dims, 1, -1 do y = G.adaptive_dim(y, 2 + i, size[i], is_max) end
  end
  if y:dtype() ~= dt then y = y:to(dt) end
  return unb and y:squeeze(1) or y
end

local REFUSED = { return_indices = { false, "no indices are returned: take them from unfold and max" } }
local function impl(fname, dims, is_max)
  return function(x, output_size, opts, ...)
    O.no_more(fname, is_max and "(input, output_size [, {return_indices=false}])" or "(input, output_size)", ...)
    if is_max then G.opts_of(fname, opts, { "return_indices" }, REFUSED)
    elseif opts ~= nil then error(("%s: takes (input, output_size), got a third argument %s"):format(fname,
      O.got(opts)), 0) end
    return adaptive(fname, dims, x, output_size, is_max)
  end
end
F.adaptive_avg_pool1d = public(impl("adaptive_avg_pool1d", 1, false))
F.adaptive_avg_pool2d = public(impl("adaptive_avg_pool2d", 2, false))
F.adaptive_max_pool1d = public(impl("adaptive_max_pool1d", 1, true))
F.adaptive_max_pool2d = public(impl("adaptive_max_pool2d", 2, true))

-- AdaptiveAvgPool1d/2d(output_size), AdaptiveMaxPool1d/2d(output_size [, {return_indices=false}]) (or one table
-- {output_size=, ...})
local function class(name, fn, dims, is_max)
  local cls = Module.class(name)
  cls["__init"] = function(self, output_size, opts, ...)
    local ok, err = pcall(function(...)
      O.no_more(name, is_max and "(output_size [, {return_indices=false}])" or "(output_size)", ...)
      if type(output_size) == "table" and rawget(output_size, "output_size") ~= nil then
        if opts ~= nil then
          error(("%s: pass the options as one table or after output_size, not both"):format(name), 0)
        end
        opts = output_size
        output_size = opts.output_size
        opts = G.opts_of(name, opts, is_max and { "output_size", "return_indices" } or { "output_size" }, REFUSED)
      elseif is_max then G.opts_of(name, opts, { "return_indices" }, REFUSED)
      elseif opts ~= nil then error(("%s: takes (output_size), got a second argument %s"):format(name, O.got(opts)),
        0) end
      -- checked now against a stand-in of the right rank (nil entries keep the input's size at forward)
      if math.type(output_size) ~= "integer" then
        if type(output_size) ~= "table" or getmetatable(output_size) ~= nil then
          error(("%s: output_size must be an integer or a list of %d (nil keeps the input's size), got %s"):format(
            name, dims, O.got(output_size)), 0)
        end
        local copy = {}
        for k, v in next, output_size do copy[k] = v end
        output_size = copy
      end
      sizes(name, dims, output_size, fp8.zeros(dims == 2 and { 1, 1, 1, 1 } or { 1, 1, 1 }))
      self.output_size = output_size
    end, ...)
    if not ok then error(strip(err), 3) end
  end
  cls.forward = function(self, x) return fn(x, self.output_size) end
  cls.extra_repr = function(self)
    local s = self.output_size
    if type(s) == "table" then
      local parts = {}
      for i = 1, dims do parts[i] = s[i] == nil and "None" or tostring(s[i]) end
      s = "(" .. table.concat(parts, ", ") .. ")"
    end
    return "output_size=" .. tostring(s)
  end
  return cls
end
M.AdaptiveAvgPool1d = class("AdaptiveAvgPool1d", F.adaptive_avg_pool1d, 1, false)
M.AdaptiveAvgPool2d = class("AdaptiveAvgPool2d", F.adaptive_avg_pool2d, 2, false)
M.AdaptiveMaxPool1d = class("AdaptiveMaxPool1d", F.adaptive_max_pool1d, 1, true)
M.AdaptiveMaxPool2d = class("AdaptiveMaxPool2d", F.adaptive_max_pool2d, 2, true)

return M
