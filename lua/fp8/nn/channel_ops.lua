-- channel_ops.lua — torch's operations across the channels of [N, C, ...]: F.local_response_norm and
-- LocalResponseNorm (AlexNet's: each value divided by (k + alpha·mean of the squares over `size` neighbouring
-- channels)^beta, the window zero-padded as torch's), Softmax2d (a softmax over the channels at each position),
-- F.channel_shuffle and ChannelShuffle (ShuffleNet's interleaving of channel groups); and F.gumbel_softmax (samples
-- from the Gumbel-softmax distribution, straight-through one-hot with hard=true). Built of differentiable ops.
local fp8 = require "fp8.core"
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local O = require "fp8.opts"

local M = {}
local public, strip = require("fp8.errfmt").public_of("channel_ops.lua")

local function number(fname, what, v, default, check, want)
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or math.abs(v) == math.huge or not check(v) then
    error(("%s: %s must be %s, got %s"):format(fname, what, want, O.got(v)), 0)
  end
  return v
end

local function impl_lrn(x, size, opts, ...)
  O.no_more("local_response_norm", "(input, size [, {alpha=1e-4, beta=0.75, k=1}])", ...)
  if not fp8.is_tensor(x) or x:dim() < 3 then
    error(("local_response_norm: expected an input [N, C, ...] of 3 or more dims, got %s"):format(fp8.is_tensor(x)
      and x:shape_str() or O.got(x)), 0)
  end
  if math.type(size) ~= "integer" or size < 1 then
    error(("local_response_norm: size must be an integer >= 1, got %s"):format(O.got(size)), 0)
  end
  opts = O.check("local_response_norm", opts, { "alpha", "beta", "k" })
  local finite = function() return true end
  local alpha = number("local_response_norm", "alpha", opts.alpha, 1e-4, finite, "a finite number")
  local beta = number("local_response_norm", "beta", opts.beta, 0.75, finite, "a finite number")
  local k = number("local_response_norm", "k", opts.k, 1.0, finite, "a finite number")
  x = F._util.autocast_fp32(x)   -- fp32 under autocast, as torch's CPU autocast (its avg_pool3d)
  local shape = x:shape()
  local N, C = shape[1], shape[2]
  local P = x:numel() // math.max(1, N * C)
  -- the squares' mean over the window of channels c - size//2 .. c + (size-1)//2, zeros past the ends (torch's pad
  -- and avg_pool over a [N, 1, C, positions] view)
  local sq = (x * x):reshape({ N, 1, C, P })
  sq = F.pad(sq, { 0, 0, size // 2, (size - 1) // 2 })
  local div = F.avg_pool2d(sq, { size, 1 }, { stride = 1 }):reshape(shape)
  return x / (div * alpha + k) ^ beta
end
F.local_response_norm = public(impl_lrn)

local function impl_channel_shuffle(x, groups, ...)
  O.no_more("channel_shuffle", "(input, groups)", ...)
  if not fp8.is_tensor(x) or x:dim() < 3 then
    error(("channel_shuffle: expected an input [N, C, ...] of 3 or more dims, got %s"):format(fp8.is_tensor(x)
      and x:shape_str() or O.got(x)), 0)
  end
  local C = x:size(2)
  if math.type(groups) ~= "integer" or groups < 1 or C % groups ~= 0 then
    error(("channel_shuffle: groups must be a positive integer dividing the channels (%d), got %s"):format(C,
      O.got(groups)), 0)
  end
  local shape = x:shape()
  local split = { shape[1], groups, C // groups }
  for i = 3, #shape do split[#split + 1] = shape[i] end
  return x:reshape(split):transpose(2, 3):contiguous():reshape(shape)
end
F.channel_shuffle = public(impl_channel_shuffle)

-- gumbel_softmax(logits [, {tau=1, hard=false, dim=-1}]): softmax((logits + g) / tau) with g ~ Gumbel(0, 1) drawn
-- from fp8's generator; hard: the one-hot of each row's largest, whose gradient is the soft sample's (torch's
-- straight-through estimator)
local function impl_gumbel_softmax(logits, opts, ...)
  O.no_more("gumbel_softmax", "(logits [, {tau=1, hard=false, dim=-1}])", ...)
  if not fp8.is_tensor(logits) or logits:dim() < 1 then
    error(("gumbel_softmax: expected logits of 1 or more dims, got %s"):format(fp8.is_tensor(logits)
      and logits:shape_str() or O.got(logits)), 0)
  end
  if logits:is_fp8() then error(("gumbel_softmax: %s tensor: dequantize it first"):format(logits:dtype()), 0) end
  opts = O.check("gumbel_softmax", opts, { "tau", "hard", "dim" })
  local tau = number("gumbel_softmax", "tau", opts.tau, 1.0, function(v) return v > 0 end, "a finite number > 0")
  local hard = opts.hard
  if hard ~= nil and type(hard) ~= "boolean" then
    error(("gumbel_softmax: hard must be a boolean, got %s"):format(O.got(hard)), 0)
  end
  local nd = logits:dim()
  local dim = opts.dim
  if dim == nil then dim = -1 end
  if math.type(dim) ~= "integer" or dim == 0 or dim > nd or dim < -nd then
    error(("gumbel_softmax: dim must be an integer in 1..%d or -%d..-1, got %s"):format(nd, nd, O.got(dim)), 0)
  end
  if dim < 0 then dim = nd + dim + 1 end
  local u = fp8.rand(logits:shape(), { device = logits:device() })
  -- exponential draws -log(1 - u) (u in [0, 1), so > 0 but at u = 0), kept off 0; Gumbel = -log(exponential)
  local e = (-(1 - u):log()):clamp_min(1e-30)
  local g = -e:log()
  if logits:dtype() ~= "fp32" then g = g:to(logits:dtype()) end
  local y = F.softmax((logits + g) / tau, dim)
  -- bf16/fp16 logits keep their dtype, in and out of autocast, as torch's (softmax's kernel gives fp32: rounded once)
  if logits:dtype() ~= "fp32" and y:dtype() ~= logits:dtype() then y = y:to(logits:dtype()) end
  if not hard then return y end
  local _, idx = y:detach():max(dim, true)
  local onehot = fp8.zeros(y:shape(), { dtype = y:dtype(), device = y:device() }):scatter(dim, idx,
    fp8.ones(idx:shape(), { dtype = y:dtype(), device = y:device() }))
  return onehot - y:detach() + y
end
F.gumbel_softmax = public(impl_gumbel_softmax)

-- ---- the modules ------------------------------------------------------------------------------

-- LocalResponseNorm(size [, {alpha=1e-4, beta=0.75, k=1}])
M.LocalResponseNorm = Module.class("LocalResponseNorm")
function M.LocalResponseNorm:__init(size, opts, ...)
  local ok, err = pcall(function(...)
    O.no_more("LocalResponseNorm", "(size [, {alpha=, beta=, k=}])", ...)
    if math.type(size) ~= "integer" or size < 1 then
      error(("LocalResponseNorm: size must be an integer >= 1, got %s"):format(O.got(size)), 0)
    end
    opts = O.check("LocalResponseNorm", opts, { "alpha", "beta", "k" })
    local finite = function() return true end
    self.size = size
    self.alpha = number("LocalResponseNorm", "alpha", opts.alpha, 1e-4, finite, "a finite number")
    self.beta = number("LocalResponseNorm", "beta", opts.beta, 0.75, finite, "a finite number")
    self.k = number("LocalResponseNorm", "k", opts.k, 1.0, finite, "a finite number")
  end, ...)
  if not ok then error(strip(err), 3) end
end
function M.LocalResponseNorm:forward(x)
  return F.local_response_norm(x, self.size, { alpha = self.alpha, beta = self.beta, k = self.k })
end
function M.LocalResponseNorm:extra_repr()
  return ("%d, alpha=%s, beta=%s, k=%s"):format(self.size, self.alpha, self.beta, self.k)
end

-- Softmax2d(): softmax over the channels (dim -3) of [N, C, H, W] or [C, H, W]
M.Softmax2d = Module.class("Softmax2d")
function M.Softmax2d:__init(...)
  local ok, err = pcall(O.no_more, "Softmax2d", "no arguments", ...)
  if not ok then error(strip(err), 3) end
end
function M.Softmax2d:forward(x)
  if not fp8.is_tensor(x) or (x:dim() ~= 3 and x:dim() ~= 4) then
    error(("expected an input [N, C, H, W] or [C, H, W], got %s"):format(fp8.is_tensor(x) and x:shape_str()
      or O.got(x)), 0)
  end
  return F.softmax(x, -3)
end

-- ChannelShuffle(groups)
M.ChannelShuffle = Module.class("ChannelShuffle")
function M.ChannelShuffle:__init(groups, ...)
  local ok, err = pcall(function(...)
    O.no_more("ChannelShuffle", "(groups)", ...)
    if math.type(groups) ~= "integer" or groups < 1 then
      error(("ChannelShuffle: groups must be a positive integer, got %s"):format(O.got(groups)), 0)
    end
    self.groups = groups
  end, ...)
  if not ok then error(strip(err), 3) end
end
function M.ChannelShuffle:forward(x) return F.channel_shuffle(x, self.groups) end
function M.ChannelShuffle:extra_repr() return ("groups=%d"):format(self.groups) end

return M
