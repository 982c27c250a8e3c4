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

-- The bounds of uniform and uniform_: finite, a <= b (torch's uniform_ refuses from > to: the draws would land in
-- (b, a] instead).
local function check_range(fname, a, b)
  local got = require("fp8.opts").got
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

-- uniform(shape, a, b) → U[a, b)
function M.uniform(shape, a, b)
  check_range("uniform", a, b)
  check_shape("uniform", shape)
  a, b = a or 0, b or 1
  local t = core("uniform", fp8.rand, shape)
  if a == 0 and b == 1 then return t end
  return t * (b - a) + a
end

-- normal(shape, mean, std) → N(mean, std²)
local function check_num(fname, what, v, min)
  if v == nil then return end
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge or (min and v < min) then
    error(("%s: %s must be a finite number%s, got %s"):format(fname, what, min and (" >= " .. min) or "", tostring(v)), 3)
  end
end

function M.normal(shape, mean, std)
  check_num("normal", "mean", mean); check_num("normal", "std", std, 0)
  check_shape("normal", shape)
  local t = core("normal", fp8.randn, shape)
  if (std or 1) ~= 1 then t = t * std end
  if (mean or 0) ~= 0 then t = t + mean end
  return t
end

function M.ones(shape) check_shape("ones", shape); return (core("ones", fp8.ones, shape)) end
function M.zeros(shape) check_shape("zeros", shape); return (core("zeros", fp8.zeros, shape)) end

-- Replace the values of an existing tensor (a parameter) in place, keeping its identity.
local function copy_(fname, dst, src) return (core(fname, require("fp8._optim").copy_, dst, src)) end
function M.copy_(dst, src) return (copy_("copy_", dst, src)) end
local function check_tensor(fname, t)
  if not fp8.is_tensor(t) then error(("%s: expected a tensor, got %s"):format(fname, type(t)), 3) end
  if t:is_released() then error(("%s: the tensor has been released (freed or closed)"):format(fname), 3) end
end
function M.normal_(t, mean, std)
  check_num("normal_", "mean", mean); check_num("normal_", "std", std, 0)
  check_tensor("normal_", t)
  return (copy_("normal_", t, M.normal(t:shape(), mean or 0, std or 1)))
end
function M.uniform_(t, a, b)
  check_tensor("uniform_", t); check_range("uniform_", a, b)
  return (copy_("uniform_", t, M.uniform(t:shape(), a or 0, b or 1)))
end
function M.zeros_(t) check_tensor("zeros_", t); return (copy_("zeros_", t, fp8.zeros(t:shape()))) end
function M.ones_(t) check_tensor("ones_", t); return (copy_("ones_", t, fp8.ones(t:shape()))) end

return M
