-- channel_dropout.lua — torch's channel-wise dropout: F.dropout1d / F.dropout2d / F.dropout3d and Dropout1d /
-- Dropout2d / Dropout3d. In training each whole channel (every position of one sample's channel) is zeroed with
-- probability p and the others are scaled by 1/(1-p); the identity in eval. The mask is drawn from fp8's generator
-- (fp8.manual_seed) per sample and channel and broadcast over the positions. Inputs: 1d [N, C, L] or [C, L]; 2d
-- [N, C, H, W], or a 3-D input taken as [N, C, L] (torch 2.x's reading, which it warns about); 3d [N, C, D, H, W] or
-- [C, D, H, W].
local fp8 = require "fp8.core"
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local O = require "fp8.opts"
local Dropout = require "fp8.nn.dropout"

local M = {}
local public, strip = require("fp8.errfmt").public_of("channel_dropout.lua")

-- the input ranks each takes, and how many leading dims the mask covers for each rank
local RANKS = { [1] = { [2] = 1, [3] = 2 }, [2] = { [3] = 2, [4] = 2 }, [3] = { [4] = 1, [5] = 2 } }
local SHAPES = { [1] = "[N, C, L] or [C, L]", [2] = "[N, C, H, W] (or [N, C, L])",
  [3] = "[N, C, D, H, W] or [C, D, H, W]" }

local function channel_dropout(fname, dims, x, p, training)
  if not fp8.is_tensor(x) then error(("%s: expected a tensor input, got %s"):format(fname, O.got(x)), 0) end
  local lead = RANKS[dims][x:dim()]
  if lead == nil then error(("%s: expected an input %s, got %s"):format(fname, SHAPES[dims], x:shape_str()), 0) end
  if p == nil then p = 0.5 end
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    error(("%s: p must be a probability in [0, 1], got %s"):format(fname, O.got(p)), 0)
  end
  if training == nil then training = true end
  if type(training) ~= "boolean" then error(("%s: training must be a boolean, got %s"):format(fname, O.got(training)),
    0) end
  if not training or p == 0 then return x end
  if x:is_fp8() then error(("%s: %s tensor: dequantize it first"):format(fname, x:dtype()), 0) end
  local shape = x:shape()
  local mshape = {}
  for i = 1, #shape do mshape[i] = i <= lead and shape[i] or 1 end
  if p == 1 then return x * 0 end
  local keep = fp8.rand(mshape, { device = x:device() }):lt(1 - p)   -- 1 where the channel is kept
  if x:dtype() ~= "fp32" then keep = keep:to(x:dtype()) end
  return x * (keep / (1 - p))
end

for dims = 1, 3 do
  local fname = ("dropout%dd"):format(dims)
  F[fname] = public(function(x, p, training, ...)
    O.no_more(fname, "(input [, p=0.5 [, training=true]]) (no inplace)", ...)
    return channel_dropout(fname, dims, x, p, training)
  end)
  local name = ("Dropout%dd"):format(dims)
  local cls = Module.class(name)
  cls["__init"] = function(self, p, ...)
    local ok, err = pcall(function(...)
      O.no_more(name, "([p=0.5])", ...)
      if type(p) == "table" then
        if p[1] ~= nil then error(("%s: give p as %s(0.1) or %s{p=0.1}, got a list"):format(name, name, name), 0) end
        p = O.check(name, p, { "p" }).p   -- inplace is not offered (no in-place ops)
      end
      if p == nil then p = 0.5 end
      Dropout._check_p(name, "p", p, 0)
      self.p = p
    end, ...)
    if not ok then error(strip(err), 3) end
  end
  cls.forward = function(self, x) return F[fname](x, self.p, self.training) end
  cls.extra_repr = function(self) return ("p=%g"):format(self.p) end
  M[name] = cls
end

return M
