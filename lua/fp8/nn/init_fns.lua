-- init_fns.lua — parameter initialisers (fp8.nn.init): new fp32 tensors drawn from the seeded
-- generator (fp8.manual_seed), in-place fills of existing ones. Each returns the tensor.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua

local M = {}

-- A core call made for the initialiser fname: its values, or its error raised in fname's name at the first caller
-- outside this file (a layer's constructor, or the user's line), without the position in this file and the core
-- function's own name the message carried ("init_fns.lua:41: bad argument #1 to 'randn'", "randn: size of ...",
-- "tensor: too large: ...", "copy_: fp32 into e5m2: ...").
local SELF = debug.getinfo(1, "S").source
local function core(fname, f, ...)
  local r = table.pack(pcall(f, ...))
  if r[1] then return table.unpack(r, 2, r.n) end
  local err = r[2]
  if type(err) ~= "string" then error(err, 0) end
  err = err:gsub("^[^:\n]*init_fns%.lua:%d+: ", "")
  local n, detail = err:match("^bad argument #(%d+) to '[^']*' %((.*)%)$")
  if n then err = ("bad argument #%s to '%s' (%s)"):format(n, fname, detail)
  elseif err:match("^[%w_]+: ") then err = err:gsub("^[%w_]+: ", "") end
  if not n then err = fname .. ": " .. err end
  local level = 2
  while (debug.getinfo(level, "S") or {}).source == SELF do level = level + 1 end
  error(err, level)
end

-- shape: a list of sizes or one size (the sizes themselves are the core's to check)
local function check_shape(fname, shape)
  if type(shape) ~= "table" and type(shape) ~= "number" then
    error(("%s: shape must be a list of sizes {d1, d2, ...} or one size, got %s"):format(fname,
      require("fp8.opts").got(shape)), 3)
  end
end

-- torch's keyword arguments written as a Lua options table (normal_(t, {generator=g}), uniform_(t, {a=0}), where
-- the parameter is a number): not offered, and said so by name, where "mean must be a finite number, got table"
-- left the reader guessing. The initialisers that take a table (kaiming_*, trunc_normal_) check its keys themselves.
local PARAMS = { normal = "mean and std", normal_ = "mean and std", uniform = "a and b", uniform_ = "a and b",
                 constant_ = "val", xavier_uniform_ = "gain", xavier_normal_ = "gain", orthogonal_ = "gain",
                 dirac_ = "groups", sparse_ = "sparsity and std" }
local DRAWS = { normal = true, normal_ = true, uniform = true, uniform_ = true, xavier_uniform_ = true,
                xavier_normal_ = true, orthogonal_ = true, sparse_ = true }
local function no_options(fname, v, level)
  if type(v) ~= "table" or fp8.is_tensor(v) then return end
  local keys = {}
  for k in next, v do keys[#keys + 1] = tostring(k) end   -- raw: a __pairs that never ends looped (sweep 115)
  table.sort(keys)
  local what = PARAMS[fname] or "the arguments"
  error(("%s: options are not offered (got a table {%s}): give %s as %s%s"):format(fname,
    table.concat(keys, ", "), what, what:find(" and ") and "numbers in order" or "a number", DRAWS[fname] and "; torch's generator= is not offered "
    .. "either: the draws come from the generator fp8.manual_seed seeds" or ""), level + 1)
end

-- The bounds of uniform and uniform_: finite, a <= b (torch's uniform_ refuses from > to: the draws would land in
-- (b, a] instead).
local function check_range(fname, a, b)
  local got = require("fp8.opts").got
  no_options(fname, a, 3); no_options(fname, b, 3)
  if a ~= nil and (type(a) ~= "number" or a ~= a or math.abs(a) == math.huge) then
    error(("%s: a must be a finite number, got %s"):format(fname, got(a)), 3)
  end
  if b ~= nil and (type(b) ~= "number" or b ~= b or math.abs(b) == math.huge) then
    error(("%s: b must be a finite number, got %s"):format(fname, got(b)), 3)
  end
  if (a or 0) > (b or 1) then
    error(("%s: the range [a, b) needs a <= b, got a=%s > b=%s"):format(fname, got(a or 0), got(b or 1)), 3)
  end
end

-- The largest value of dtype dt (mantissa bits: fp32 23, bf16 7, fp16 10) below b, in the normal range.
local MANT = { fp32 = 23, bf16 = 7, fp16 = 10 }
local MAXV = { fp32 = 3.4028234663852886e38, bf16 = 3.3895313892515355e38, fp16 = 65504 }
local function below(b, dt)
  local r = fp8.tensor({ b }, { dtype = dt }):item()   -- b on dt's grid, rounded to nearest
  if r < b then return r end
  local m, e = MANT[dt], 0
  local x = math.abs(r)
  if x == 0 then return -2.0 ^ -149 end
  while 2.0 ^ (e + 1) <= x do e = e + 1 end
  while 2.0 ^ e > x do e = e - 1 end
  -- one step down: within r's binade, or into the binade below when r > 0 is a power of two
  local step = (r > 0 and x == 2.0 ^ e) and 2.0 ^ (e - m - 1) or 2.0 ^ (e - m)
  return r - step
end

-- uniform(shape, a, b) → U[a, b)
-- _without_draws(fn, ...) -> fn's results, with uniform and normal (every initialiser's draws) giving zeros: for
-- modules built only to be overwritten (a layer copied from another one, torch's deepcopy, which draws nothing)
M._skip_draws = 0
function M._without_draws(fn, ...)
  M._skip_draws = M._skip_draws + 1
  local r = table.pack(pcall(fn, ...))
  M._skip_draws = M._skip_draws - 1
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

-- dt: the dtype the draws are for (bf16, fp16: drawn on its grid, as fp8.rand draws them, so that U[0, 1) stays
-- below 1 once written; the result is fp32 either way)
function M.uniform(shape, a, b, dt, ...)
  require("fp8.opts").no_more("uniform", "(shape, a, b [, dtype])", ...)   -- (torch's generator= was taken)
  check_range("uniform", a, b)
  check_shape("uniform", shape)
  dt = (dt == "bf16" or dt == "fp16") and dt or "fp32"
  a, b = a or 0, b or 1
  -- the bounds and their span in the dtype's range (torch's "to is out of bounds"; they drew inf)
  for _, bound in ipairs { { "a", a }, { "b", b } } do
    if math.abs(bound[2]) > MAXV[dt] then
      error(("uniform: %s = %s is past %s's largest value %s"):format(bound[1], tostring(bound[2]), dt,
        tostring(MAXV[dt])), 3)
    end
  end
  if b - a > MAXV.fp32 then error(("uniform: b - a = %s is past fp32's largest value"):format(tostring(b - a)), 3) end
  if M._skip_draws > 0 then return fp8.zeros(shape) end
  local t = core("uniform", fp8.rand, shape, dt)
  if t:dtype() ~= "fp32" then t = t:float() end
  if a == 0 and b == 1 then return t end
  t = t * (b - a) + a
  -- [a, b) in dt: a draw that rounds up to b (or past it) takes dt's value below b, as torch never gives b (in
  -- bf16 (100, 101) a quarter of the draws were 101)
  if dt ~= "fp32" then t = t:to(dt) end
  if t:numel() > 0 and t:max():item() >= b then   -- (max: one pass, no bool tensor)
    t = require("fp8.tensor").where(t:ge(b), math.max(a, below(b, dt)), t)
  end
  return dt ~= "fp32" and t:float() or t
end

-- normal(shape, mean, std) → N(mean, std²)
local function check_num(fname, what, v, min)
  if v == nil then return end
  no_options(fname, v, 3)
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge or (min and v < min) then
    error(("%s: %s must be a finite number%s, got %s"):format(fname, what, min and (" >= " .. min) or "", tostring(v)), 3)
  end
end

function M.normal(shape, mean, std, ...)
  require("fp8.opts").no_more("normal", "(shape [, mean [, std]])", ...)
  check_num("normal", "mean", mean); check_num("normal", "std", std, 0)
  check_shape("normal", shape)
  if M._skip_draws > 0 then return fp8.zeros(shape) end
  local t = core("normal", fp8.randn, shape)
  if (std or 1) ~= 1 then t = t * std end
  if (mean or 0) ~= 0 then t = t + mean end
  return t
end

local no_more = require("fp8.opts").no_more
function M.ones(shape, ...) no_more("ones", "(shape)", ...); check_shape("ones", shape); return (core("ones", fp8.ones, shape)) end
function M.zeros(shape, ...) no_more("zeros", "(shape)", ...); check_shape("zeros", shape); return (core("zeros", fp8.zeros, shape)) end

-- Replace the values of an existing tensor (a parameter) in place, keeping its identity.
local function copy_(fname, dst, src) return (core(fname, require("fp8._optim").copy_, dst, src)) end
function M.copy_(dst, src, ...) no_more("copy_", "(dst, src)", ...); return (copy_("copy_", dst, src)) end
local function check_tensor(fname, t)
  if not fp8.is_tensor(t) then error(("%s: expected a tensor, got %s"):format(fname, type(t)), 3) end
  if t:is_released() then error(("%s: the tensor has been released (freed or closed)"):format(fname), 3) end
end
function M.normal_(t, mean, std, ...)
  no_more("normal_", "(tensor [, mean=0 [, std=1]])", ...)   -- (torch's generator= was taken and not used)
  check_num("normal_", "mean", mean); check_num("normal_", "std", std, 0)
  check_tensor("normal_", t)
  return (copy_("normal_", t, M.normal(t:shape(), mean or 0, std or 1)))
end
function M.uniform_(t, a, b, ...)
  no_more("uniform_", "(tensor [, a=0 [, b=1]])", ...)
  check_tensor("uniform_", t); check_range("uniform_", a, b)
  return (copy_("uniform_", t, M.uniform(t:shape(), a or 0, b or 1, t:dtype())))
end
function M.zeros_(t, ...)
  no_more("zeros_", "(tensor)", ...); check_tensor("zeros_", t); return (copy_("zeros_", t, fp8.zeros(t:shape())))
end
function M.ones_(t, ...)
  no_more("ones_", "(tensor)", ...); check_tensor("ones_", t); return (copy_("ones_", t, fp8.ones(t:shape())))
end

-- constant_(t, val): every element val; eye_(t): a 2-d t as the identity (ones on the main diagonal), torch's.
function M.constant_(t, val, ...)
  require("fp8.opts").no_more("constant_", "(tensor, val)", ...)
  check_tensor("constant_", t); check_num("constant_", "val", val)
  if val == nil then error("constant_: val must be a finite number, got nil", 2) end
  return (copy_("constant_", t, fp8.full(t:shape(), val)))
end
function M.eye_(t, ...)
  require("fp8.opts").no_more("eye_", "(tensor)", ...)
  check_tensor("eye_", t)
  if t:dim() ~= 2 then error(("eye_: only 2-d tensors are supported, got %s"):format(t:shape_str()), 2) end
  return (copy_("eye_", t, require("fp8.tensor").eye(t:size(1), t:size(2))))
end

-- calculate_gain(nonlinearity [, param]): torch's recommended gains: 1 for linear, the convolutions and sigmoid,
-- 5/3 for tanh, √2 for relu, √(2 / (1 + slope²)) for leaky_relu (param: the negative slope, 0.01 by default), 3/4
-- for selu.
local GAIN = { linear = 1, conv1d = 1, conv2d = 1, conv3d = 1, conv_transpose1d = 1, conv_transpose2d = 1,
               conv_transpose3d = 1, sigmoid = 1, tanh = 5 / 3, relu = math.sqrt(2), selu = 3 / 4 }
local NONLINEARITIES = "linear, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d, "
  .. "sigmoid, tanh, relu, leaky_relu, selu"
local function gain_of(fname, nonlinearity, param, level)
  local got = require("fp8.opts").got
  if nonlinearity == "leaky_relu" then
    local slope = param
    if slope == nil then slope = 0.01 end
    if type(slope) ~= "number" or slope ~= slope then
      error(("%s: the negative slope must be a number, got %s"):format(fname, got(param)), level)
    end
    return math.sqrt(2 / (1 + slope * slope))
  end
  local g = type(nonlinearity) == "string" and GAIN[nonlinearity]
  if not g then
    error(("%s: unsupported nonlinearity %s (valid: %s)"):format(fname, got(nonlinearity), NONLINEARITIES), level)
  end
  return g
end
function M.calculate_gain(nonlinearity, param, ...)
  require("fp8.opts").no_more("calculate_gain", "(nonlinearity [, param])", ...)
  local g = gain_of("calculate_gain", nonlinearity, param, 3)
  return g
end

-- fan_in, fan_out of a weight [out, in, k...]: in·Πk and out·Πk (torch's _calculate_fan_in_and_fan_out)
local function fans(fname, t)
  if t:dim() < 2 then
    error(("%s: fan in and fan out need a tensor of 2 or more dims, got %s"):format(fname, t:shape_str()), 4)
  end
  local rf = 1
  for d = 3, t:dim() do rf = rf * t:size(d) end
  return t:size(2) * rf, t:size(1) * rf
end

local function check_gain(fname, gain)
  no_options(fname, gain, 3)
  -- (a negative one failed inside uniform/normal, naming neither)
  if gain ~= nil and (type(gain) ~= "number" or not (gain >= 0) or gain == math.huge) then
    error(("%s: gain must be a finite number >= 0, got %s"):format(fname, tostring(gain)), 3)
  end
  return gain or 1
end

-- xavier_uniform_(t [, gain=1]): U(−b, b), b = gain·√(6 / (fan_in + fan_out)); xavier_normal_(t [, gain=1]):
-- N(0, (gain·√(2 / (fan_in + fan_out)))²). Glorot and Bengio's, as torch's.
function M.xavier_uniform_(t, gain, ...)
  require("fp8.opts").no_more("xavier_uniform_", "(tensor [, gain])", ...)
  check_tensor("xavier_uniform_", t); gain = check_gain("xavier_uniform_", gain)
  local fi, fo = fans("xavier_uniform_", t)
  if t:numel() == 0 then return t end
  local b = gain * math.sqrt(6 / (fi + fo))
  return (copy_("xavier_uniform_", t, M.uniform(t:shape(), -b, b)))
end
function M.xavier_normal_(t, gain, ...)
  require("fp8.opts").no_more("xavier_normal_", "(tensor [, gain])", ...)
  check_tensor("xavier_normal_", t); gain = check_gain("xavier_normal_", gain)
  local fi, fo = fans("xavier_normal_", t)
  if t:numel() == 0 then return t end
  return (copy_("xavier_normal_", t, M.normal(t:shape(), 0, gain * math.sqrt(2 / (fi + fo)))))
end

-- kaiming_uniform_(t [, a=0 [, mode="fan_in" [, nonlinearity="leaky_relu"]]]) (or one table of those names after
-- t): U(−b, b), b = √3 · gain / √fan; kaiming_normal_: N(0, (gain / √fan)²); gain = calculate_gain(nonlinearity, a),
-- fan the weight's fan_in or fan_out. He et al.'s, as torch's (nn.Linear's own init is kaiming_uniform_ with a=√5).
local function kaiming(fname, t, a, mode, nonlinearity, ...)
  require("fp8.opts").no_more(fname, "(tensor [, a [, mode [, nonlinearity]]])", ...)
  check_tensor(fname, t)
  if type(a) == "table" then
    if a.generator ~= nil then   -- (torch's keyword; "unknown option" did not say it is not offered)
      error(("%s: generator= is not offered: the draws come from the generator fp8.manual_seed seeds"):format(fname), 4)
    end
    local o = require("fp8.opts").check(fname, a, { "a", "mode", "nonlinearity" }, 4)
    if mode ~= nil or nonlinearity ~= nil then
      error(("%s: give a, mode and nonlinearity either in order or in one table"):format(fname), 4)
    end
    a, mode, nonlinearity = o.a, o.mode, o.nonlinearity
  end
  check_num(fname, "a", a)
  mode, nonlinearity = mode or "fan_in", nonlinearity or "leaky_relu"
  if mode ~= "fan_in" and mode ~= "fan_out" then
    error(("%s: mode must be \"fan_in\" or \"fan_out\", got %s"):format(fname, require("fp8.opts").got(mode)), 4)
  end
  local gain = gain_of(fname, nonlinearity, a or 0, 4)
  local fi, fo = fans(fname, t)
  if t:numel() == 0 then return nil end
  return gain / math.sqrt(mode == "fan_in" and fi or fo)
end
function M.kaiming_uniform_(t, ...)
  local std = kaiming("kaiming_uniform_", t, ...)
  if std == nil then return t end
  local b = math.sqrt(3) * std
  return (copy_("kaiming_uniform_", t, M.uniform(t:shape(), -b, b)))
end
function M.kaiming_normal_(t, ...)
  local std = kaiming("kaiming_normal_", t, ...)
  if std == nil then return t end
  return (copy_("kaiming_normal_", t, M.normal(t:shape(), 0, std)))
end

-- erfinv of a tensor in (−1, 1), Giles' single-precision approximation ("Approximating the erfinv function",
-- GPU Computing Gems, 2011): two polynomials in w = −log(1 − x²), relative error under 4e-7
local function erfinv(x)
  local w = -((1 - x) * (1 + x)):log()
  local wc, wt = w - 2.5, w:clamp(5, math.huge):sqrt() - 3
  local pc, pt = 2.81022636e-08, -0.000200214257
  for _, c in ipairs { 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                       -0.00417768164, 0.246640727, 1.50140941 } do
    pc = wc * pc + c
  end
  for _, c in ipairs { 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                       0.00943887047, 1.00167406, 2.83297682 } do
    pt = wt * pt + c
  end
  return require("fp8.tensor").where(w:lt(5), pc, pt) * x
end

-- trunc_normal_(t [, mean=0 [, std=1 [, a=-2 [, b=2]]]]) (or one table of those names): N(mean, std²) cut to
-- [a, b] (a and b in the tensor's units, not in stds: torch's), drawn as torch draws it: uniform between the normal
-- CDF's values at a and b, through the inverse CDF, then clamped to [a, b].
function M.trunc_normal_(t, mean, std, a, b, ...)
  require("fp8.opts").no_more("trunc_normal_", "(tensor [, mean [, std [, a [, b]]]])", ...)
  check_tensor("trunc_normal_", t)
  if type(mean) == "table" then
    if std ~= nil or a ~= nil or b ~= nil then
      error("trunc_normal_: give mean, std, a and b either in order or in one table", 2)
    end
    if mean.generator ~= nil then
      error("trunc_normal_: generator= is not offered: the draws come from the generator fp8.manual_seed seeds", 2)
    end
    local o = require("fp8.opts").check("trunc_normal_", mean, { "mean", "std", "a", "b" }, 2)
    mean, std, a, b = o.mean, o.std, o.a, o.b
  end
  check_num("trunc_normal_", "mean", mean); check_num("trunc_normal_", "std", std, 0)
  check_num("trunc_normal_", "a", a); check_num("trunc_normal_", "b", b)
  mean, std, a, b = mean or 0, std or 1, a or -2, b or 2
  if not (a < b) then
    error(("trunc_normal_: the range [a, b] needs a < b, got a=%g, b=%g"):format(a, b), 2)
  end
  if t:numel() == 0 then return t end
  if std == 0 then return (copy_("trunc_normal_", t, fp8.full(t:shape(), math.min(math.max(mean, a), b)))) end
  local function cdf(x) return (1 + fp8.tensor({ x / math.sqrt(2) }):erf():item()) / 2 end
  local lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
  local u = M.uniform(t:shape(), 2 * lo - 1, 2 * hi - 1)
  -- the ends (±1 where the cut is far in the tails) would be ±inf through erfinv; the clamp below puts them at a, b
  u = u:clamp(-1 + 2 ^ -24, 1 - 2 ^ -24)
  local v = (erfinv(u) * (std * math.sqrt(2)) + mean):clamp(a, b)
  return (copy_("trunc_normal_", t, v))
end

-- orthogonal_(t [, gain=1]): torch's (Saxe et al.): t viewed as [rows, numel / rows] filled with the orthonormal
-- factor Q of a standard normal matrix's QR decomposition (of its transpose when rows < columns), the signs made
-- those of torch's (R's diagonal positive), times gain. Q by Gram-Schmidt with reorthogonalization (each column's
-- projections taken off twice), two matrix-vector products per step, in fp32 under any autocast.
function M.orthogonal_(t, gain, ...)
  require("fp8.opts").no_more("orthogonal_", "(tensor [, gain=1])", ...)
  check_tensor("orthogonal_", t)
  gain = check_gain("orthogonal_", gain)
  if t:dim() < 2 then
    error(("orthogonal_: only tensors with 2 or more dimensions are supported, got %s"):format(t:shape_str()), 2)
  end
  if t:numel() == 0 then return t end
  local rows = t:size(1)
  local cols = t:numel() // rows
  local A = M.normal({ rows, cols }, 0, 1)
  local wide = rows < cols
  if wide then A = A:t():contiguous() end
  local m, n = A:size(1), A:size(2)   -- m >= n: n orthonormal columns of length m
  local At = A:t():contiguous()       -- its columns as rows
  local Q = fp8.zeros({ n, m })       -- Q's columns as rows (Q transposed), filled one row a step
  -- in fp32 whatever autocast is on (its bf16 GEMM inputs would cost the orthogonality its digits)
  require("fp8.amp").autocast("no", fp8.no_grad, function()
    for j = 1, n do
      local v = At:select(1, j)
      if j > 1 then
        local done = Q:narrow(1, 1, j - 1)   -- [j-1, m], contiguous rows
        for _ = 1, 2 do v = v - done:matmul(v):reshape({ 1, j - 1 }):matmul(done):reshape({ m }) end
      end
      Q:narrow(1, j, 1):copy_((v / v:norm():item()):reshape({ 1, m }))
    end
  end)
  local out = wide and Q or Q:t()     -- [rows, cols]
  return (copy_("orthogonal_", t, (out * gain):reshape(t:shape())))
end

-- dirac_(t [, groups=1]): a 3-, 4- or 5-d convolution weight [out, in, k...] that passes its input through: 1 at
-- the kernel's centre where the out channel (within its group) equals the in channel, 0 elsewhere; torch's
function M.dirac_(t, groups, ...)
  require("fp8.opts").no_more("dirac_", "(tensor [, groups=1])", ...)
  check_tensor("dirac_", t)
  local nd = t:dim()
  if nd < 3 or nd > 5 then
    error(("dirac_: only 3, 4 or 5-dimensional tensors are supported, got %s"):format(t:shape_str()), 2)
  end
  no_options("dirac_", groups, 2)
  groups = groups or 1
  if math.type(groups) ~= "integer" or groups < 1 or t:size(1) % groups ~= 0 then
    error(("dirac_: groups must be a positive integer dividing dim 1 (%d), got %s"):format(t:size(1),
      require("fp8.opts").got(groups)), 2)
  end
  local shape = t:shape()
  local per = shape[1] // groups
  local strides, s = {}, 1
  for i = nd, 1, -1 do strides[i] = s; s = s * shape[i] end
  local centre = 0
  for i = 3, nd do centre = centre + (shape[i] // 2) * strides[i] end
  local at = {}
  for g = 0, groups - 1 do
    for d = 0, math.min(per, shape[2]) - 1 do at[#at + 1] = (g * per + d) * strides[1] + d * strides[2] + centre end
  end
  local flat = fp8.zeros({ t:numel() })
  if #at > 0 then flat = flat:index_fill(1, fp8.tensor(at), 1) end
  return (copy_("dirac_", t, flat:reshape(shape)))
end

-- sparse_(t, sparsity [, std=0.01]): a 2-d t from N(0, std²) with ceil(sparsity·rows) elements of each column
-- zeroed, at rows drawn without replacement (Martens'), torch's
function M.sparse_(t, sparsity, std, ...)
  require("fp8.opts").no_more("sparse_", "(tensor, sparsity [, std=0.01])", ...)
  check_tensor("sparse_", t)
  if t:dim() ~= 2 then error(("sparse_: only 2-d tensors are supported, got %s"):format(t:shape_str()), 2) end
  no_options("sparse_", sparsity, 2)
  if type(sparsity) ~= "number" or not (sparsity >= 0 and sparsity <= 1) then
    error(("sparse_: sparsity must be a number in [0, 1], got %s"):format(require("fp8.opts").got(sparsity)), 2)
  end
  check_num("sparse_", "std", std, 0)
  local rows, cols = t:size(1), t:size(2)
  local v = M.normal({ rows, cols }, 0, std or 0.01)
  local nz = math.ceil(sparsity * rows)
  if nz > 0 and cols > 0 then
    local keep = {}
    for i = 1, rows * cols do keep[i] = 1 end
    for c = 0, cols - 1 do
      local perm = fp8.randperm(rows):tolist()
      for k = 1, nz do keep[math.tointeger(perm[k]) * cols + c + 1] = 0 end
    end
    v = v * fp8.tensor(keep):reshape({ rows, cols })
  end
  return (copy_("sparse_", t, v))
end

-- the initialisers above that are torch's further ones raise their errors at the caller's line, whichever helper
-- here found the fault
local at_caller = require("fp8.tensor")._at_caller
for _, k in ipairs { "constant_", "eye_", "calculate_gain", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
                     "kaiming_normal_", "trunc_normal_", "orthogonal_", "dirac_", "sparse_" } do
  M[k] = at_caller(M[k])
end

return M
