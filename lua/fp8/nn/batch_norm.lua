-- batch_norm.lua — torch's BatchNorm1d / BatchNorm2d, InstanceNorm1d/2d/3d and GroupNorm, and F.batch_norm /
-- F.instance_norm / F.group_norm: fused CPU kernels for fp32 (fl_channel_norm, core/cpu/cpu_nn_chnorm.c), a composite
-- of differentiable ops elsewhere. BatchNorm normalizes each channel (dim 2) over the
-- batch and the positions: in training by the batch's mean and biased variance, updating running_mean and running_var
-- (the unbiased variance) by momentum (nil: a cumulative average over num_batches_tracked), in eval by the running
-- statistics; track_running_stats=false keeps none and always uses the batch's. InstanceNorm normalizes each sample's
-- channel over its positions (running statistics, when tracked, the batch's average); GroupNorm each sample's
-- channel groups. num_batches_tracked is a 0-d fp32 buffer here (torch's is int64: there is no integer dtype).
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local O = require "fp8.opts"
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"

local M = {}

local function shape_str(t) return t:shape_str() end

-- Errors here are raised without a position; a public function's come out at its caller's line (fp8.errfmt)
local public, strip = require("fp8.errfmt").public_of("batch_norm.lua")

local function number(fname, what, v, default, lo)
  if v == nil then return default end
  if type(v) ~= "number" or not (v >= lo and v < math.huge) then
    error(("%s: %s must be a finite number >= %g, got %s"):format(fname, what, lo, O.got(v)), 0)
  end
  return v
end

-- x[N, C, ...] as [N, C, P] (P: the positions, 1 for [N, C])
local function per_channel(x) return x:reshape({ x:size(1), x:size(2), x:numel() // (x:size(1) * x:size(2)) }) end

-- bf16/fp16 operands are widened to fp32 and the result rounded once to a bf16/fp16 input's dtype: torch's CPU norms
-- compute in fp32 (a bf16 input beside fp32 weights gives bf16). Built of ops in the input's dtype, every step
-- rounded (10-16 bf16 ulps off), and fp32 weights gave fp32 values of bf16 precision.
local function low_of(x) return require("fp8.tensor")._low_dtype(x) end
local function wide(t)
  if t ~= nil and low_of(t) then return t:to("fp32") end
  return t
end

-- The fused kernels (fl_channel_norm, core/cpu/cpu_nn_chnorm.c): x, weight and bias fp32 (after wide) on a device
-- whose op table has them (the CPU's; fp8._device_has asks the device, not its name); elsewhere, and for an empty x,
-- the composite of elementwise ops below, which they match to fp32 rounding. groups > 0: GroupNorm's statistics; 0:
-- BatchNorm's over the batch. Returns y, mean, var (biased).
local function device_fuses(dev)
  return fp8._device_has(dev, "chnorm_fwd") and fp8._device_has(dev, "chnorm_bwd")
end
local function fused(x, weight, bias)
  if x:dtype() ~= "fp32" or x:numel() == 0 or not device_fuses(x:device()) then return false end
  for _, t in ipairs { weight or x, bias or x } do
    if t:dtype() ~= "fp32" or t:device() ~= x:device() then return false end
  end
  return true
end
local function channel_norm(x, groups, weight, bias, eps)
  return require("fp8._nn")._channel_norm(x, groups, weight, bias, eps)
end

-- A batch of 0 samples (torch's): an empty output of x's shape, with weight and bias still in the graph (their
-- gradients zeros) and the running statistics as they were (x:numel() // (N·C) divided by zero, a raw Lua error,
-- until 2026-12-05)
local function empty_batch(x, weight, bias, low)
  local bshape = { 1, x:size(2) }
  for _ = 3, x:dim() do bshape[#bshape + 1] = 1 end
  local y = x * 1
  if weight ~= nil then y = y * weight:reshape(bshape) end
  if bias ~= nil then y = y + bias:reshape(bshape) end
  return low and y:to(low) or y
end

-- an optional per-channel tensor of C elements (weight, bias, running statistics)
local function channel_vec(fname, what, t, C)
  if t == nil then return nil end
  if not fp8.is_tensor(t) or t:dim() ~= 1 or t:size(1) ~= C then
    error(("%s: %s must be [%d] (one per channel), got %s"):format(fname, what, C,
      fp8.is_tensor(t) and shape_str(t) or O.got(t)), 0)
  end
  return t
end

local function impl_batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, ...)
  O.no_more("batch_norm", "(input, running_mean, running_var [, weight [, bias [, training [, momentum [, eps]]]]])",
    ...)
  if not fp8.is_tensor(x) or x:dim() < 2 then
    error(("batch_norm: expected an input [N, C, ...], got %s"):format(fp8.is_tensor(x) and shape_str(x)
      or O.got(x)), 0)
  end
  local C = x:size(2)
  channel_vec("batch_norm", "running_mean", running_mean, C)
  channel_vec("batch_norm", "running_var", running_var, C)
  channel_vec("batch_norm", "weight", weight, C)
  channel_vec("batch_norm", "bias", bias, C)
  if training ~= nil and type(training) ~= "boolean" then
    error(("batch_norm: training must be a boolean, got %s"):format(O.got(training)), 0)
  end
  eps = number("batch_norm", "eps", eps, 1e-5, 0)
  momentum = number("batch_norm", "momentum", momentum, 0.1, 0)
  local bshape = { 1, C }
  for _ = 3, x:dim() do bshape[#bshape + 1] = 1 end
  if not training and (running_mean == nil or running_var == nil) then
    error("batch_norm: running_mean and running_var are needed outside training (torch's too)", 0)
  end
  local low = low_of(x)
  x, weight, bias = wide(x), wide(weight), wide(bias)
  local mean, var
  if training and (x:size(1) == 0 or C == 0) then return empty_batch(x, weight, bias, low) end
  if training then
    local n = x:numel() // C   -- (not of a reshape: a non-contiguous x would be copied for nothing)
    if training and n <= 1 then
      error(("batch_norm: expected more than 1 value per channel when training, got input %s"):format(shape_str(x)),
        0)
    end
    local y
    if fused(x, weight, bias) then
      y, mean, var = channel_norm(x, 0, weight, bias, eps)
    else
      local v = per_channel(x)
      mean = v:mean(3):mean(1)                                   -- [C]
      local centered = v - mean:reshape({ 1, C, 1 })
      var = (centered * centered):mean(3):mean(1)                -- biased, [C]
    end
    if training and running_mean ~= nil and running_var ~= nil then
      local m = momentum
      fp8.no_grad(function()
        local unbiased = var:detach() * (n / (n - 1))
        local C_ = require "fp8._optim"
        C_.copy_(running_mean, running_mean * (1 - m) + mean:detach() * m)
        C_.copy_(running_var, running_var * (1 - m) + unbiased * m)
      end)
    end
    if y ~= nil then return low and y:to(low) or y end
  else
    mean, var = wide(running_mean), wide(running_var)
    -- no gradient to record: the four ops below in one pass (core/cpu/cpu_nn_chnorm.c, fl_cpu_chnorm_eval: each
    -- operation in their order and rounding, the same bits), the per-channel sqrt(var + eps) by the same ops
    if fused(x, weight, bias) and fused(mean, var) and mean:device() == x:device() and x:numel() > 0
       and fp8._device_has(x:device(), "chnorm_eval")
       and not (fp8.is_grad_enabled() and (x:requires_grad() or mean:requires_grad() or var:requires_grad()
         or (weight ~= nil and weight:requires_grad()) or (bias ~= nil and bias:requires_grad()))) then
      local y = require("fp8._nn")._batch_norm_eval(x, mean, (var + eps):sqrt(), weight, bias)
      return low and y:to(low) or y
    end
  end
  local y = (x - mean:reshape(bshape)) / (var:reshape(bshape) + eps):sqrt()
  if weight ~= nil then y = y * weight:reshape(bshape) end
  if bias ~= nil then y = y + bias:reshape(bshape) end
  return low and y:to(low) or y
end
-- batch_norm(input, running_mean, running_var [, weight [, bias [, training=false [, momentum=0.1 [, eps=1e-5]]]]]):
-- torch's order of arguments; running statistics updated in place when training (nil ones: none kept)
F.batch_norm = public(impl_batch_norm)

local function impl_group_norm(x, num_groups, weight, bias, eps, ...)
  O.no_more("group_norm", "(input, num_groups [, weight [, bias [, eps]]])", ...)
  if not fp8.is_tensor(x) or x:dim() < 2 then
    error(("group_norm: expected an input [N, C, ...], got %s"):format(fp8.is_tensor(x) and shape_str(x)
      or O.got(x)), 0)
  end
  local N, C = x:size(1), x:size(2)
  if C == 0 then   -- torch's message (it returned an empty result here until 2026-12-06)
    error(("group_norm: expected number of channels to be greater than 0, got 0 (input %s)"):format(shape_str(x)), 0)
  end
  if math.type(num_groups) ~= "integer" or num_groups < 1 or C % num_groups ~= 0 then
    error(("group_norm: num_groups must be a positive integer dividing the channels (%d), got %s"):format(C,
      O.got(num_groups)), 0)
  end
  channel_vec("group_norm", "weight", weight, C)
  channel_vec("group_norm", "bias", bias, C)
  eps = number("group_norm", "eps", eps, 1e-5, 0)
  local low = low_of(x)
  x, weight, bias = wide(x), wide(weight), wide(bias)
  if N == 0 then return empty_batch(x, weight, bias, low) end
  if fused(x, weight, bias) then
    local y = channel_norm(x, num_groups, weight, bias, eps)
    return low and y:to(low) or y
  end
  local g = x:reshape({ N, num_groups, x:numel() // (N * num_groups) })
  local mean = g:mean(3, true)
  local centered = g - mean
  local var = (centered * centered):mean(3, true)
  local y = (centered / (var + eps):sqrt()):reshape(x:shape())
  local bshape = { 1, C }
  for _ = 3, x:dim() do bshape[#bshape + 1] = 1 end
  if weight ~= nil then y = y * weight:reshape(bshape) end
  if bias ~= nil then y = y + bias:reshape(bshape) end
  return low and y:to(low) or y
end
-- group_norm(input[N, C, ...], num_groups [, weight [, bias [, eps=1e-5]]]): torch's
F.group_norm = public(impl_group_norm)

local function impl_instance_norm(x, running_mean, running_var, weight, bias, use_input_stats, momentum, eps, ...)
  O.no_more("instance_norm", "(input [, running_mean [, running_var [, weight [, bias [, use_input_stats [, "
    .. "momentum [, eps]]]]]]])", ...)
  if not fp8.is_tensor(x) or x:dim() < 3 then
    error(("instance_norm: expected an input [N, C, ...] with positions, got %s"):format(fp8.is_tensor(x)
      and shape_str(x) or O.got(x)), 0)
  end
  local N, C = x:size(1), x:size(2)
  channel_vec("instance_norm", "running_mean", running_mean, C)
  channel_vec("instance_norm", "running_var", running_var, C)
  channel_vec("instance_norm", "weight", weight, C)
  channel_vec("instance_norm", "bias", bias, C)
  if use_input_stats == nil then use_input_stats = true end
  if type(use_input_stats) ~= "boolean" then
    error(("instance_norm: use_input_stats must be a boolean, got %s"):format(O.got(use_input_stats)), 0)
  end
  eps = number("instance_norm", "eps", eps, 1e-5, 0)
  momentum = number("instance_norm", "momentum", momentum, 0.1, 0)
  if not use_input_stats then   -- the running statistics, as batch_norm's eval
    if running_mean == nil or running_var == nil then
      error("instance_norm: use_input_stats=false needs running_mean and running_var", 0)
    end
    return F.batch_norm(x, running_mean, running_var, weight, bias, false, momentum, eps)
  end
  local low = low_of(x)
  x, weight, bias = wide(x), wide(weight), wide(bias)
  if N == 0 or C == 0 then return empty_batch(x, weight, bias, low) end
  local P = x:numel() // (N * C)
  if P <= 1 then
    error(("instance_norm: expected more than 1 position per channel, got input %s"):format(shape_str(x)), 0)
  end
  local y, mean, var
  if fused(x, weight, bias) then   -- GroupNorm with a group per channel; mean and var [N·C]
    -- (on a contiguous x: torch's instance_norm of a channels_last input gives a contiguous result and gradient,
    -- where its group_norm keeps channels_last, stop 103)
    y, mean, var = channel_norm(x:contiguous(), C, weight, bias, eps)
  else
    local v = per_channel(x)
    mean = v:mean(3, true)                                        -- [N, C, 1]: each sample's channel
    local centered = v - mean
    var = (centered * centered):mean(3, true)                     -- biased
    y = (centered / (var + eps):sqrt()):reshape(x:shape())
    local bshape = { 1, C }
    for _ = 3, x:dim() do bshape[#bshape + 1] = 1 end
    if weight ~= nil then y = y * weight:reshape(bshape) end
    if bias ~= nil then y = y + bias:reshape(bshape) end
  end
  if running_mean ~= nil and running_var ~= nil then   -- torch's: the batch's instances averaged, unbiased variance
    local m = momentum
    fp8.no_grad(function()
      local C_ = require "fp8._optim"
      C_.copy_(running_mean, running_mean * (1 - m) + mean:detach():reshape({ N, C }):mean(1) * m)
      C_.copy_(running_var, running_var * (1 - m) + (var:detach() * (P / (P - 1))):reshape({ N, C }):mean(1) * m)
    end)
  end
  return low and y:to(low) or y
end
-- instance_norm(input[N, C, ...] [, running_mean [, running_var [, weight [, bias [, use_input_stats=true [,
-- momentum=0.1 [, eps=1e-5]]]]]]]): torch's; each sample's channel normalized over its positions, running statistics
-- (when given) updated in place with the batch's average
F.instance_norm = public(impl_instance_norm)

-- BatchNorm1d / BatchNorm2d(num_features [, {eps=1e-5, momentum=0.1, affine=true, track_running_stats=true}])
-- (momentum=false: torch's None, the cumulative average)
local BN_KEYS = { "eps", "momentum", "affine", "track_running_stats" }
-- the setup BatchNorm and InstanceNorm share: num_features and the options (given after it or in one table with it),
-- checked; the affine parameters and the running statistics registered. default_on: affine's and
-- track_running_stats's default (true for BatchNorm, false for InstanceNorm, torch's)
local function norm_setup(self, name, n, opts, default_on)
  if type(n) == "table" then
    if opts ~= nil then
      error(("%s: pass the options as one table or after num_features, not both"):format(name), 0)
    end
    local o = O.check(name, n, { "num_features", "eps", "momentum", "affine", "track_running_stats" })
    n, opts = o.num_features, o
  else
    opts = O.check(name, opts, BN_KEYS)
  end
  if math.type(n) ~= "integer" or n < 1 then
    error(("%s: num_features must be a positive integer, got %s"):format(name, O.got(n)), 0)
  end
  for _, k in ipairs { "affine", "track_running_stats" } do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      error(("%s: %s must be a boolean, got %s"):format(name, k, O.got(opts[k])), 0)
    end
  end
  Module._check_size(name, 4, "num_features", n)
  self.num_features = n
  self.eps = number(name, "eps", opts.eps, 1e-5, 0)
  if opts.momentum == false then self.momentum = false   -- (an `and false or` would never give false)
  else self.momentum = number(name, "momentum", opts.momentum, 0.1, 0) end
  local function flag(v) if v == nil then return default_on end return v end
  self.affine = flag(opts.affine)
  self.track_running_stats = flag(opts.track_running_stats)
  if self.affine then
    self:register_parameter("weight", fp8.ones { n })
    self:register_parameter("bias", fp8.zeros { n })
  end
  if self.track_running_stats then
    self:register_buffer("running_mean", fp8.zeros { n })
    self:register_buffer("running_var", fp8.ones { n })
    self:register_buffer("num_batches_tracked", fp8.zeros {})
  end
end

-- torch's repr of BatchNorm and InstanceNorm
local function norm_repr(self)
  return ("%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s"):format(self.num_features, self.eps,
    self.momentum == false and "None" or ("%g"):format(self.momentum), tostring(self.affine),
    tostring(self.track_running_stats))
end

local function bn_class(name, dims)
  local cls = Module.class(name)
  local function setup(self, n, opts) norm_setup(self, name, n, opts, true) end
  cls["__init"] = function(self, n, opts)
    local ok, err = pcall(setup, self, n, opts)
    if not ok then error(strip(err), 3) end
  end
  cls.forward = function(self, x)
    local ok_dims = fp8.is_tensor(x) and (dims == 1 and (x:dim() == 2 or x:dim() == 3) or x:dim() == dims + 2)
    if not ok_dims or x:size(2) ~= self.num_features then
      Module._forward_error(self, ("expected input %s with %d channels, got %s"):format(dims == 1
        and "[N, C] or [N, C, L]" or "[N, C, H, W]", self.num_features, fp8.is_tensor(x) and shape_str(x) or O.got(x)))
    end
    -- (momentum false, torch's None: the cumulative average below; nil outside training, where it is unused)
    local m = self.momentum or nil
    if self.training and self.track_running_stats then
      fp8.no_grad(function()
        require("fp8._optim").copy_(self.num_batches_tracked, self.num_batches_tracked + 1)
      end)
      m = m or 1 / self.num_batches_tracked:item()
    end
    local use_batch = self.training or not self.track_running_stats
    return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_batch, m, self.eps)
  end
  cls.extra_repr = norm_repr
  return cls
end
M.BatchNorm1d = bn_class("BatchNorm1d", 1)
M.BatchNorm2d = bn_class("BatchNorm2d", 2)

-- InstanceNorm1d/2d/3d(num_features [, {eps=1e-5, momentum=0.1, affine=false, track_running_stats=false}]): torch's
-- (momentum=false: torch's None, which updates nothing); input [N, C, ...] or unbatched [C, ...]. num_batches_tracked
-- is kept as torch keeps it, never counted.
local function in_class(name, dims)
  local cls = Module.class(name)
  local function setup(self, n, opts) norm_setup(self, name, n, opts, false) end
  cls["__init"] = function(self, n, opts)
    local ok, err = pcall(setup, self, n, opts)
    if not ok then error(strip(err), 3) end
  end
  cls.forward = function(self, x)
    if not fp8.is_tensor(x) or (x:dim() ~= dims + 1 and x:dim() ~= dims + 2) then
      Module._forward_error(self, ("expected input [N, C, %s] or unbatched [C, %s], got %s"):format(dims == 1
        and "L" or dims == 2 and "H, W" or "D, H, W", dims == 1 and "L" or dims == 2 and "H, W" or "D, H, W",
        fp8.is_tensor(x) and shape_str(x) or O.got(x)))
    end
    local unb = x:dim() == dims + 1
    if unb then x = x:unsqueeze(1) end
    if x:size(2) ~= self.num_features and (self.affine or self.track_running_stats) then
      Module._forward_error(self, ("expected input's size at dim %d to match num_features (%d), got %d"):format(unb
        and 1 or 2, self.num_features, x:size(2)))
    end
    local use_input = self.training or not self.track_running_stats
    local y = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_input,
      self.momentum == false and 0 or self.momentum, self.eps)
    return unb and y:squeeze(1) or y
  end
  cls.extra_repr = norm_repr
  return cls
end
M.InstanceNorm1d = in_class("InstanceNorm1d", 1)
M.InstanceNorm2d = in_class("InstanceNorm2d", 2)
M.InstanceNorm3d = in_class("InstanceNorm3d", 3)

-- GroupNorm(num_groups, num_channels [, {eps=1e-5, affine=true}])
M.GroupNorm = Module.class("GroupNorm")
function M.GroupNorm:__init(groups, channels, opts)
  local ok, err = pcall(function()
    opts = O.check("GroupNorm", opts, { "eps", "affine" })
    if math.type(channels) ~= "integer" or channels < 1 then
      error(("GroupNorm: num_channels must be a positive integer, got %s"):format(O.got(channels)), 0)
    end
    if math.type(groups) ~= "integer" or groups < 1 or channels % groups ~= 0 then
      error(("GroupNorm: num_groups must be a positive integer dividing num_channels (%d), got %s"):format(channels,
        O.got(groups)), 0)
    end
    if opts.affine ~= nil and type(opts.affine) ~= "boolean" then
      error(("GroupNorm: affine must be a boolean, got %s"):format(O.got(opts.affine)), 0)
    end
    self.num_groups, self.num_channels = groups, channels
    self.eps = number("GroupNorm", "eps", opts.eps, 1e-5, 0)
    self.affine = opts.affine ~= false
    if self.affine then
      self:register_parameter("weight", fp8.ones { channels })
      self:register_parameter("bias", fp8.zeros { channels })
    end
  end)
  if not ok then error(strip(err), 3) end
end
function M.GroupNorm:forward(x) return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps) end
function M.GroupNorm:extra_repr()
  return ("%d, %d, eps=%g, affine=%s"):format(self.num_groups, self.num_channels, self.eps, tostring(self.affine))
end

return M
