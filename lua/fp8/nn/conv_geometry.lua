-- conv_geometry.lua — what the convolutions, their transposes and the poolings share about sizes and windows: a size
-- argument as a pair, a 1-d one, the window counts, unfold and fold (the core's im2col and col2im), a batched view
-- of an input, an options table checked against the valid names and the refused values, and the adaptive windows
-- along one dim (adaptive pooling, interpolate's "area"). Errors are raised without a position
-- (level 0); the public functions that call these add the caller's (fp8.errfmt).
local fp8 = require "fp8.core"
local O = require "fp8.opts"

local G = {}

-- a size argument (kernel_size, stride, padding, dilation) as a pair {h, w} of integers >= lo: an integer is both
-- (at most 2^31 - 1: past it the output size and the window positions would wrap in 64 bits, and a huge dilation
-- gave a result of meaningless windows)
local MAX = 2 ^ 31 - 1
function G.pair(fname, what, v, lo)
  local given = v   -- (the message shows what the caller gave, not the pair made of it)
  if math.type(v) == "integer" then v = { v, v } end
  if type(v) ~= "table" or rawlen(v) ~= 2 or math.type(rawget(v, 1)) ~= "integer"
      or math.type(rawget(v, 2)) ~= "integer"
      or rawget(v, 1) < lo or rawget(v, 2) < lo or rawget(v, 1) > MAX or rawget(v, 2) > MAX then
    error(("%s: %s must be an integer in %d..2^31-1 or a pair of them, got %s"):format(fname, what, lo, O.got(given)), 0)
  end
  return { rawget(v, 1), rawget(v, 2) }
end

-- The window counts of a plane of h×w padded by pads {top, bottom, left, right} for kernel k, stride s and dilation
-- d (pairs): oh, ow, either < 1 where the kernel's span does not fit (the caller says so in its words).
function G.counts(h, w, k, s, d, pads)
  local oh = (h + pads[1] + pads[2] - d[1] * (k[1] - 1) - 1) // s[1] + 1
  local ow = (w + pads[3] + pads[4] - d[2] * (k[2] - 1) - 1) // s[2] + 1
  return oh, ow
end

-- unfold(x[N, C, H, W], k, s, d, pads [, value=0]) → [N, C, kh·kw, OH·OW]: each window's values, the kernel offset
-- outer (torch's im2col as [N, C, K, L]), the padding ({top, bottom, left, right}; bottom and right may reach past
-- the padding for ceil_mode) holding value; the core's im2col (core/im2col.c, no index tensor), differentiable.
local NN = fp8._nn
-- the core's error without this file's position (the callers' public wrappers strip only their own files')
local function nopos(ok, ...)
  if ok then return ... end
  local e = ...
  if type(e) == "string" then e = e:gsub("^[^:\n]*conv_geometry%.lua:%d+: ", "") end
  error(e, 0)
end
function G.unfold(x, k, s, d, pads, value)
  return nopos(pcall(NN.im2col, x, { k[1], k[2], s[1], s[2], d[1], d[2], pads[1], pads[2], pads[3], pads[4] }, value))
end

-- fold(cols[N, C, kh·kw, OH·OW], h, w, k, s, d, pads) → [N, C, h, w]: unfold's adjoint (col2im), each value added
-- into the position unfold reads it from, in fp32, rounded once to cols' dtype; bottom and right padding may be
-- negative (the windows then leave the last rows or columns at 0: a transposed convolution's output_padding).
function G.fold(cols, h, w, k, s, d, pads)
  return nopos(pcall(NN.col2im, cols, h, w, { k[1], k[2], s[1], s[2], d[1], d[2], pads[1], pads[2], pads[3], pads[4] }))
end

-- x: [N, C, H, W] or unbatched [C, H, W] (then returned without the batch dim: squeeze(out))
function G.batched(fname, x, dims)
  if not fp8.is_tensor(x) then error(("%s: expected a tensor input, got %s"):format(fname, O.got(x)), 0) end
  if x:dim() == dims then return x, false end
  if x:dim() == dims - 1 then return x:unsqueeze(1), true end
  error(("%s: expected a %d-D (batched) or %d-D (unbatched) input, got %s"):format(fname, dims, dims - 1,
    x:shape_str()), 0)
end

-- The index lists of pad's modes, adaptive pooling and interpolate are built here, a Lua number per position of the
-- output dim: a dim of more than 2^24 positions is refused (torch would take minutes' worth of a Lua loop here, and
-- such a dim is a size given by mistake).
G.MAX_POSITIONS = 1 << 24
function G.check_positions(fname, what, m, level)
  if m > G.MAX_POSITIONS then
    error(("%s: %s would have %.0f positions, more than the %d a resampled or padded dim may have"):format(fname,
      what, m, G.MAX_POSITIONS), level or 0)
  end
end

-- opts_of(fname, opts, valid [, refused]): opts checked against the valid names; refused maps a name to {the one
-- value allowed, why others are not}
function G.opts_of(fname, opts, valid, refused)
  if refused then
    for k, why in next, refused do
      if type(opts) == "table" and rawget(opts, k) ~= nil and rawget(opts, k) ~= why[1] then
        error(("%s: %s=%s is not supported (%s)"):format(fname, k, tostring(rawget(opts, k)), why[2]), 0)
      end
    end
  end
  return O.check(fname, opts, valid)
end

-- one_d(fname, v, lo, default [, strings]): a 1-d size: an integer >= lo or a one-element list of one; nil takes
-- default (required when default is nil); a string ("same", "valid") passes through where strings is true (padding).
function G.one_d(fname, v, lo, default, strings)
  if v == nil and default ~= nil then return default end
  if strings and type(v) == "string" then return v end
  if type(v) == "table" then
    if rawlen(v) ~= 1 then
      error(("%s: expected an integer or a one-element list, got %s"):format(fname, O.got(v)), 0)
    end
    v = rawget(v, 1)
  end
  if math.type(v) ~= "integer" or v < lo then
    error(("%s: expected an integer >= %d, got %s"):format(fname, lo, O.got(v)), 0)
  end
  if v > 0x7FFFFFFF then   -- as pair's bound (the core's windows take each number below 2^31)
    error(("%s: expected an integer in %d..2^31-1, got %s"):format(fname, lo, O.got(v)), 0)
  end
  return v
end

-- conv_args(name, dims, keys, cin, cout, ksize, opts): a convolution module's arguments (its transpose's too), given
-- as (in, out, kernel [, opts]) or one table of keys: in and out channels positive, the kernel a size (a pair for 2-d,
-- {1, k} for 1-d), groups dividing both, bias a boolean; returns cin, cout, k, groups, opts
function G.conv_args(name, dims, keys, cin, cout, ksize, opts)
  if type(cin) == "table" then
    if cout ~= nil then error(("%s: pass the options as one table or after the sizes, not both"):format(name), 0) end
    local o = O.check(name, cin, keys)
    cin, cout, ksize, opts = o.in_channels, o.out_channels, o.kernel_size, o
  else
    local valid = {}
    for i = 4, #keys do valid[#valid + 1] = keys[i] end
    opts = O.check(name, opts, valid)
  end
  for _, c in ipairs { { "in_channels", cin }, { "out_channels", cout } } do
    if math.type(c[2]) ~= "integer" or c[2] < 1 then
      error(("%s: %s must be a positive integer, got %s"):format(name, c[1], O.got(c[2])), 0)
    end
  end
  local k = dims == 2 and G.pair(name, "kernel_size", ksize, 1) or { 1, G.one_d(name .. ": kernel_size", ksize, 1) }
  local g = opts.groups or 1
  if math.type(g) ~= "integer" or g < 1 or cin % g ~= 0 or cout % g ~= 0 then
    error(("%s: groups must be a positive integer dividing in_channels (%d) and out_channels (%d), got %s"):format(
      name, cin, cout, O.got(g)), 0)
  end
  if opts.bias ~= nil and type(opts.bias) ~= "boolean" then
    error(("%s: bias must be a boolean, got %s"):format(name, O.got(opts.bias)), 0)
  end
  return cin, cout, k, g, opts
end

-- adaptive_dim(x, d, m, is_max): x pooled along dim d (1-based) to m positions, the mean or the max of each of
-- torch's adaptive windows floor(i·n/m) .. ceil((i+1)·n/m) - 1 (a reshape where m divides n, else one gather of the
-- windows padded to the longest by repeating their last position, which the max and the masked mean ignore)
function G.adaptive_dim(x, d, m, is_max)
  local n = x:size(d)
  if n == m then return x end
  local shape = x:shape()
  local function split(len)   -- x's shape with dim d split into [m, len]
    local s = {}
    for i = 1, d - 1 do s[#s + 1] = shape[i] end
    s[#s + 1] = m
    s[#s + 1] = len
    for i = d + 1, #shape do s[#s + 1] = shape[i] end
    return s
  end
  local function reduce(w, counts)
    if is_max then return (w:max(d + 1)) end
    local total = w:sum(d + 1)
    return counts == nil and total / w:size(d + 1) or total / counts
  end
  if n % m == 0 then return reduce(x:reshape(split(n // m))) end
  local starts, ends, L = {}, {}, 0
  for i = 0, m - 1 do
    starts[i + 1], ends[i + 1] = (i * n) // m, ((i + 1) * n + m - 1) // m
    L = math.max(L, ends[i + 1] - starts[i + 1])
  end
  local idx, mask, counts = {}, {}, {}
  for i = 1, m do
    for t = 0, L - 1 do
      local inside = starts[i] + t < ends[i]
      idx[#idx + 1] = inside and starts[i] + t or ends[i] - 1
      mask[#mask + 1] = inside and 1 or 0
    end
    counts[i] = ends[i] - starts[i]
  end
  local dev = x:device()
  local function on_dev(list) return require("fp8.tensor")._list_on(list, dev) end
  local w = x:index_select(d, on_dev(idx)):reshape(split(L))
  if is_max then return reduce(w) end
  local tail = {}   -- the mask and the counts broadcast over the dims after d
  for _ = d + 1, #shape do tail[#tail + 1] = 1 end
  local mshape, cshape = { m, L }, { m }
  for _, v in ipairs(tail) do mshape[#mshape + 1] = v; cshape[#cshape + 1] = v end
  local mk = on_dev(mask):reshape(mshape)
  local ct = on_dev(counts):reshape(cshape)
  return reduce(w * mk, ct)
end

-- A module's field as its repr shows it (tostring(module)): a list by its raw elements, at most 8 (a field written by
-- hand is shown as it is, torch's repr; a table whose __len lies made table.concat run for ever, sweep 110), an
-- integer as %d, anything else by tostring. The convolutions', their transposes' and the poolings' reprs.
function G.repr_field(v)
  if math.type(v) == "integer" then return ("%d"):format(v) end
  if type(v) ~= "table" then return tostring(v) end
  local n, out = rawlen(v), {}
  for i = 1, math.min(n, 8) do out[i] = tostring(rawget(v, i)) end
  if n > 8 then out[#out + 1] = "..." end
  return ("(%s)"):format(table.concat(out, ", "))
end

-- Whether a size field holds its default d as a repr leaves it out: the number d, or a list of one or two d, read raw
function G.repr_is(v, d)
  if type(v) ~= "table" then return v == d end
  local n = rawlen(v)
  return (n == 1 or n == 2) and rawget(v, 1) == d and (n == 1 or rawget(v, 2) == d)
end

-- called from a user's code, these name themselves in their errors (fp8.opts.internal_functions; stop 101)
require("fp8.opts").internal_functions(G, "fp8.nn.conv_geometry")
return G
