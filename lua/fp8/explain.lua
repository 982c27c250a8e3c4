-- fp8.explain(x, fmt [, {saturate=bool, quiet=bool}]) — for teaching: how one number is stored in
-- an FP8 format (bit fields, byte), what comes back, its neighbours, the rounding error and flags.
local O = require "fp8.opts"
local core = require "fp8.core"

-- Sorted distinct values of a format (±inf included where the format has them), built once per format.
local grids = {}
local function grid(fmt)
  if grids[fmt] then return grids[fmt] end
  local seen, vals = {}, {}
  for b = 0, 255 do
    local v = core.decode(b, fmt)
    if v == v then
      if v == 0 then v = 0.0 end          -- -0 and +0 are one point on the number line
      if not seen[v] then seen[v] = true; vals[#vals + 1] = v end
    end
  end
  table.sort(vals)
  grids[fmt] = vals
  return vals
end

local function bits(n, width)
  local s = {}
  for i = width - 1, 0, -1 do s[#s + 1] = ((n >> i) & 1 == 1) and "1" or "0" end
  return table.concat(s)
end

local function num(v)
  if v == nil then return "none" end
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
  return ("%.9g"):format(v)
end

-- A number as the fewest digits (9 at least) that read back as it: the input 17 + 1e-9, which rounds up to 18 in
-- E4M3, must not show as 17 (a tie, which goes to 16), nor E5M2's 2^-16 as 1.52587891e-05.
local function exact(v)
  if v ~= v or v == math.huge or v == -math.huge then return num(v) end
  for d = 9, 17 do
    local s = ("%." .. d .. "g"):format(v)
    if tonumber(s) == v then return s end
  end
  return ("%.17g"):format(v)
end

local function explain(x, fmt, opts, ...)
  O.no_more("explain", "(x, format [, options])", ...)
  if type(x) ~= "number" then
    error(("bad argument #1 to 'explain' (expected a number, got %s)"):format(type(x)), 2)
  end
  if type(fmt) ~= "string" then
    error(("bad argument #2 to 'explain' (expected an FP8 format name (e4m3, e5m2), got %s)"):format(type(fmt)), 2)
  end
  local ok, f = pcall(core.format, fmt)
  if not ok or not f.is_fp8 then
    error(("explain: unknown FP8 format '%s' (valid: e4m3, e5m2)"):format(fmt), 2)
  end
  opts = opts or {}
  if type(opts) ~= "table" then error("explain: options must be a table {saturate=bool, quiet=bool}", 2) end
  O.check("explain", opts, { "saturate", "quiet" }, 2)
  for _, k in ipairs { "saturate", "quiet" } do   -- (a 0 or "false" would read as true: Lua's truthiness)
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      error(("explain: %s must be a boolean, got %s"):format(k, type(opts[k])), 2)
    end
  end
  local saturate = opts.saturate ~= false
  fmt = f.name

  local byte = core.encode(x, fmt, saturate)
  local value = core.decode(byte, fmt)
  local E, M = f.exp_bits, f.mantissa_bits
  local s = byte >> 7
  local e = (byte >> M) & ((1 << E) - 1)
  local m = byte & ((1 << M) - 1)
  local is_nan = value ~= value
  local is_inf = value == math.huge or value == -math.huge

  local r = {
    input = x, format = fmt, byte = byte,
    hex = ("0x%02X"):format(byte), binary = bits(byte, 8),
    sign = bits(s, 1), exponent = bits(e, E), mantissa = bits(m, M),
    value = value, nan = is_nan, inf = is_inf,
    subnormal = (not is_nan) and e == 0 and m ~= 0,
    underflow = x ~= 0 and x == x and value == 0,
    -- clamped: what the IEEE policy would have overflowed (an infinity, or a finite value past max + half an ulp;
    -- a value up to there rounds to max by ties-to-even, as 460 and 464 do in E4M3)
    saturated = saturate and x == x and math.abs(value) == f.max
      and (math.abs(x) == math.huge or not (math.abs(core.decode(core.encode(x, fmt, false), fmt)) <= f.max)),
    overflow = (not saturate) and x == x and math.abs(x) ~= math.huge and (is_nan or is_inf) and math.abs(x) > f.max,
  }
  -- Neighbours: the representable values just below and above the stored one.
  if not is_nan then
    local g = grid(fmt)
    for _, v in ipairs(g) do
      if v < value then r.below = v end
      if v > value and r.above == nil then r.above = v end
    end
  end
  if x == x and math.abs(x) ~= math.huge and not is_nan and not is_inf then
    r.abs_error = math.abs(value - x)
    r.rel_error = x ~= 0 and r.abs_error / math.abs(x) or 0
  end
  -- What the fields mean: (-1)^s · 2^(e-bias) · 1.m, or 2^(1-bias) · 0.m for subnormals.
  if is_nan then
    r.meaning = "NaN code"
  elseif is_inf then
    r.meaning = (s == 1 and "-" or "+") .. "infinity (exponent all ones, mantissa 0)"
  elseif e == 0 then
    r.meaning = ("%s2^%d × %d/%d  (subnormal: 0.%s)"):format(s == 1 and "-" or "+", 1 - f.bias, m, 1 << M, r.mantissa)
    if m == 0 then r.meaning = (s == 1 and "-" or "+") .. "zero" end
  else
    r.meaning = ("%s2^%d × (1 + %d/%d)  (1.%s)"):format(s == 1 and "-" or "+", e - f.bias, m, 1 << M, r.mantissa)
  end

  if not opts.quiet then
    local flags = {}
    if r.underflow then flags[#flags + 1] = "underflowed: a nonzero input became zero" end
    if r.subnormal then flags[#flags + 1] = "subnormal (below the smallest normal " .. exact(f.min_normal) .. ")" end
    if r.saturated then flags[#flags + 1] = "saturated: clamped to ±max " .. num(f.max) end
    if r.overflow then flags[#flags + 1] = "overflowed (IEEE policy): became " .. (is_nan and "NaN" or "inf") end
    if x ~= x then flags[#flags + 1] = "input is NaN" end
    if x == math.huge or x == -math.huge then flags[#flags + 1] = "input is infinite" end
    if #flags == 0 then flags[1] = value == x and "exact" or "rounded to nearest (ties to even)" end
    print(("%s in %s%s"):format(exact(x), fmt, saturate and "" or " (IEEE overflow)"))
    print(("  bits       %s | %s | %s   (sign | exponent, %d bits, bias %d | mantissa, %d bits)")
      :format(r.sign, r.exponent, r.mantissa, E, f.bias, M))
    print(("  byte       %s = 0b%s = %d"):format(r.hex, r.binary, byte))
    print(("  value      %s = %s"):format(exact(value), r.meaning))
    if not is_nan then
      print(("  neighbours %s < %s < %s"):format(r.below and exact(r.below) or num(nil), exact(value),
        r.above and exact(r.above) or num(nil)))
    end
    if r.abs_error then
      print(("  error      abs %s, rel %s"):format(num(r.abs_error), num(r.rel_error)))
    end
    print("  result     " .. table.concat(flags, "; "))
  end
  -- At the prompt the returned table echoes as this one line, not as its ~25 fields.
  local short = ("%s in %s -> %s (byte %s)"):format(exact(x), fmt, exact(value), r.hex)
  return setmetatable(r, { __tostring = function() return short end })
end

return explain
