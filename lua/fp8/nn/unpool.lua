-- unpool.lua — torch's partial inverse of max pooling: F.max_unpool1d / F.max_unpool2d and MaxUnpool1d /
-- MaxUnpool2d. Each value of the pooled input goes back to the flat position its index names (the indices a max pool
-- with return_indices=true gives) in an output of zeros, (in - 1)·stride - 2·padding + kernel_size per dim unless
-- output_size says otherwise (within a stride of that, torch's rule). A scatter, so the values' gradient is the
-- output's gradient read back at the indices.
local fp8 = require "fp8.core"
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local O = require "fp8.opts"
local G = require "fp8.nn.conv_geometry"

local M = {}
local public, strip = require("fp8.errfmt").public_of("unpool.lua")

-- kernel, stride, padding as pairs (a 1-d unpool's on a plane of height 1)
local function geometry(fname, dims, kernel_size, opts)
  if dims == 2 then
    local k = G.pair(fname, "kernel_size", kernel_size, 1)
    return k, G.pair(fname, "stride", opts.stride or k, 1), G.pair(fname, "padding", opts.padding or 0, 0)
  end
  local k = G.one_d(fname .. ": kernel_size", kernel_size, 1)
  return { 1, k }, { 1, G.one_d(fname .. ": stride", opts.stride, 1, k) },
    { 0, G.one_d(fname .. ": padding", opts.padding, 0, 0) }
end

local function unpool(fname, dims, x, indices, kernel_size, opts)
  local xb, unb = G.batched(fname, x, dims + 2)
  if not fp8.is_tensor(indices) then
    error(("%s: indices must be a tensor, got %s"):format(fname, O.got(indices)), 0)
  end
  local same = indices:dim() == x:dim()
  for d = 1, x:dim() do same = same and indices:size(d) == x:size(d) end
  if not same then
    error(("%s: indices %s must have the input's shape %s"):format(fname, indices:shape_str(), x:shape_str()), 0)
  end
  if xb:is_fp8() then error(("%s: %s tensor: dequantize it first"):format(fname, xb:dtype()), 0) end
  local k, s, p = geometry(fname, dims, kernel_size, opts)
  local N, C = xb:size(1), xb:size(2)
  local ins = dims == 2 and { xb:size(3), xb:size(4) } or { xb:size(3) }
  local default = {}
  for i = 1, dims do
    local j = dims == 2 and i or 2
    default[i] = (ins[i] - 1) * s[j] - 2 * p[j] + k[j]
  end
  local size = default
  if opts.output_size ~= nil then
    local o = opts.output_size
    if type(o) ~= "table" or getmetatable(o) ~= nil then
      error(("%s: output_size must be a list of sizes, got %s"):format(fname, O.got(o)), 0)
    end
    local n = rawlen(o)
    if n ~= dims and n ~= dims + 2 and n ~= dims + 1 then
      error(("%s: output_size must have %d elements (or the whole shape), got %d"):format(fname, dims, n), 0)
    end
    size = {}
    for i = 1, dims do
      local v, j = rawget(o, n - dims + i), dims == 2 and i or 2
      if math.type(v) ~= "integer" or v <= default[i] - s[j] or v >= default[i] + s[j] then
        error(("%s: output_size %s for dim %d must be between %d and %d (the default %d ± the stride, exclusive)")
          :format(fname, O.got(v), i, default[i] - s[j] + 1, default[i] + s[j] - 1, default[i]), 0)
      end
      size[i] = v
    end
  end
  for i = 1, dims do
    if size[i] < 1 then error(("%s: the output would be empty (%d along dim %d)"):format(fname, size[i], i + 2), 0) end
  end
  local P = dims == 2 and size[1] * size[2] or size[1]
  local L = xb:numel() // math.max(1, N * C)
  local ib = unb and indices:unsqueeze(1) or indices
  if ib:numel() > 0 then
    local lo, hi = ib:min():item(), ib:max():item()
    if lo < 0 or hi >= P or lo ~= math.floor(lo) or hi ~= math.floor(hi) then
      error(("%s: indices must be whole numbers in 0..%d (the output's %d positions), got %s"):format(fname, P - 1, P,
        O.got(lo < 0 and lo or hi)), 0)
    end
  end
  local planes = fp8.zeros({ N, C, P }, { dtype = xb:dtype(), device = xb:device() })
  local out = planes:scatter(3, ib:reshape({ N, C, L }):to(xb:device()), xb:reshape({ N, C, L }))
  out = dims == 2 and out:reshape({ N, C, size[1], size[2] }) or out:reshape({ N, C, size[1] })
  return unb and out:squeeze(1) or out
end

for dims = 1, 2 do
  local fname = ("max_unpool%dd"):format(dims)
  F[fname] = public(function(x, indices, kernel_size, opts, ...)
    O.no_more(fname, "(input, indices, kernel_size [, {stride=kernel_size, padding=0, output_size=}])", ...)
    return unpool(fname, dims, x, indices, kernel_size, O.check(fname, opts, { "stride", "padding", "output_size" }))
  end)
  local name = ("MaxUnpool%dd"):format(dims)
  local cls = Module.class(name)
  cls["__init"] = function(self, kernel_size, opts, ...)
    local ok, err = pcall(function(...)
      O.no_more(name, "(kernel_size [, {stride=, padding=}])", ...)
      opts = O.check(name, opts, { "stride", "padding" })
      geometry(name, dims, kernel_size, opts)   -- checked now
      self.kernel_size, self.stride, self.padding = kernel_size, opts.stride or kernel_size, opts.padding or 0
    end, ...)
    if not ok then error(strip(err), 3) end
  end
  -- forward(input, indices [, output_size])
  cls.forward = function(self, x, indices, output_size)
    return F[fname](x, indices, self.kernel_size, { stride = self.stride, padding = self.padding,
      output_size = output_size })
  end
  cls.extra_repr = function(self)
    local function f(v) return type(v) == "table" and "(" .. table.concat(v, ", ") .. ")" or tostring(v) end
    return ("kernel_size=%s, stride=%s, padding=%s"):format(f(self.kernel_size), f(self.stride), f(self.padding))
  end
  M[name] = cls
end

return M
