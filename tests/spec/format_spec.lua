-- format_spec.lua — fp8.format(s), fp8.encode/decode and fp8.explain against references written
-- here from the bit layouts (docs/fp8-spec.md §1), never against the code under test.
local fp8 = fp8 or require "fp8"

local LAYOUT = { e4m3 = { E = 4, M = 3, bias = 7 }, e5m2 = { E = 5, M = 2, bias = 15 } }

-- Reference decoder from the bit fields.
local function ref_decode(b, fmt)
  local L = LAYOUT[fmt]
  local s = (b >> 7) & 1
  local e = (b >> L.M) & ((1 << L.E) - 1)
  local m = b & ((1 << L.M) - 1)
  local sign = s == 1 and -1 or 1
  if fmt == "e4m3" and e == 15 and m == 7 then return 0 / 0 end
  if fmt == "e5m2" and e == 31 then
    if m == 0 then return sign * math.huge end
    return 0 / 0
  end
  if e == 0 then return sign * 2.0 ^ (1 - L.bias) * (m / (1 << L.M)) end
  return sign * 2.0 ^ (e - L.bias) * (1 + m / (1 << L.M))
end

-- Reference encoder: nearest finite code by brute force, ties to the even code, then the overflow
-- policy for magnitudes that round past max (max + half an ulp is the rounding boundary).
local MAX = { e4m3 = 448, e5m2 = 57344 }
local ULP_AT_MAX = { e4m3 = 32, e5m2 = 8192 }
local function ref_encode(x, fmt, saturate)
  if x ~= x then return nil end -- NaN: checked separately (any NaN code)
  local sign = (x < 0 or (x == 0 and 1 / x < 0)) and 0x80 or 0
  local a = math.abs(x)
  local limit = MAX[fmt] + ULP_AT_MAX[fmt] / 2
  -- at exactly the boundary RNE picks the even neighbour: max for E4M3 (0x7E), 2^16 (→ inf) for E5M2
  if a > limit or (a == limit and fmt == "e5m2") then
    if saturate then return sign | (fmt == "e4m3" and 0x7E or 0x7B) end
    return fmt == "e4m3" and (sign | 0x7F) or (sign | 0x7C)
  end
  local best, bestd
  for b = 0, 0x7F do
    local v = ref_decode(b, fmt)
    if v == v and v ~= math.huge then
      local d = math.abs(v - a)
      if not bestd or d < bestd or (d == bestd and b % 2 == 0) then best, bestd = b, d end
    end
  end
  return sign | best
end

describe("fp8.format", function()
  it("gives the E4M3 traits", function()
    local f = fp8.format("e4m3")
    assert.are.equal("e4m3", f.name)
    assert.are.equal(8, f.bits)
    assert.are.equal(4, f.exp_bits)
    assert.are.equal(3, f.mantissa_bits)
    assert.are.equal(7, f.bias)
    assert.are.equal(448, f.max)
    assert.are.equal(2 ^ -6, f.min_normal)
    assert.are.equal(2 ^ -9, f.min_subnormal)
    assert.is_false(f.has_inf)
    assert.are.equal(2, f.nan_codes)
  end)
  it("gives the E5M2 traits", function()
    local f = fp8.format("e5m2")
    assert.are.equal(57344, f.max)
    assert.are.equal(15, f.bias)
    assert.are.equal(2 ^ -14, f.min_normal)
    assert.are.equal(2 ^ -16, f.min_subnormal)
    assert.is_true(f.has_inf)
    assert.are.equal(6, f.nan_codes)
  end)
  it("gives the 16- and 32-bit traits and accepts aliases", function()
    assert.are.equal(65504, fp8.format("fp16").max)
    assert.are.equal(16, fp8.format("bfloat16").bits)
    assert.are.equal(8, fp8.format("bf16").exp_bits)
    assert.are.equal(23, fp8.format("fp32").mantissa_bits)
    assert.are.equal("e4m3", fp8.format("float8_e4m3fn").name)
  end)
end)

describe("fp8.formats", function()
  it("prints a row per format; formats(true) returns the traits without printing", function()
    local lines = {}
    local saved = print
    _G.print = function(...) lines[#lines + 1] = table.concat({ ... }, "\t") end
    local ok, ret = pcall(fp8.formats)
    local ok2, list = pcall(fp8.formats, true)
    _G.print = saved
    assert.is_true(ok, ret)
    assert.is_nil(ret)            -- nothing to print twice at the prompt
    assert.is_true(ok2, list)
    assert.are.equal(5, #list)
    assert.are.equal(448, list.e4m3.max)
    assert.are.equal(6, #lines) -- header + 5 formats
    local text = table.concat(lines, "\n")
    for _, name in ipairs({ "e4m3", "e5m2", "fp16", "bf16", "fp32" }) do
      assert.truthy(text:find(name, 1, true), name)
    end
    assert.truthy(text:find("57344", 1, true))
  end)
end)

describe("fp8.encode / fp8.decode", function()
  it("matches the issue's example (464 ties to 448; IEEE overflow is NaN)", function()
    assert.are.equal(126, fp8.encode(464, "e4m3"))
    assert.are.equal(127, fp8.encode(465, "e4m3", { saturate = false }))
  end)

  for _, fmt in ipairs({ "e4m3", "e5m2" }) do
    it("decodes all 256 " .. fmt .. " codes like the bit-field reference", function()
      for b = 0, 255 do
        local got, want = fp8.decode(b, fmt), ref_decode(b, fmt)
        if want ~= want then
          assert.is_true(got ~= got, ("code %d should be NaN"):format(b))
        else
          assert.are.equal(want, got, ("code %d"):format(b))
        end
      end
    end)

    it("encodes like the brute-force nearest-even reference (" .. fmt .. ")", function()
      local xs = { 0, -0.0, 1, -1, 0.1, 3.14159, 1e-3, 2 ^ -10, 2 ^ -17, 300, 448, 449, 465, 480, 1e5, 57344, 61440, 1e9 }
      -- every midpoint between neighbouring codes: the ties
      for b = 0, 0x7D do
        local v0, v1 = ref_decode(b, fmt), ref_decode(b + 1, fmt)
        if v0 == v0 and v1 == v1 and v1 ~= math.huge then xs[#xs + 1] = (v0 + v1) / 2 end
      end
      math.randomseed(7)
      for _ = 1, 300 do xs[#xs + 1] = (math.random() - 0.5) * 2 ^ math.random(-20, 18) end
      for _, x in ipairs(xs) do
        for _, sat in ipairs({ true, false }) do
          assert.are.equal(ref_encode(x, fmt, sat), fp8.encode(x, fmt, { saturate = sat }),
            ("%s(%.17g, saturate=%s)"):format(fmt, x, tostring(sat)))
        end
      end
    end)
  end

  it("saturates by default and overflows under {saturate=false}", function()
    assert.are.equal(0x7E, fp8.encode(1e6, "e4m3"))
    assert.are.equal(0xFE, fp8.encode(-1e6, "e4m3"))
    assert.are.equal(0x7B, fp8.encode(1e6, "e5m2"))
    assert.are.equal(0x7C, fp8.encode(1e6, "e5m2", { saturate = false }))
    assert.are.equal(math.huge, fp8.decode(0x7C, "e5m2"))
  end)

  it("keeps NaN as NaN in both formats and policies", function()
    for _, fmt in ipairs({ "e4m3", "e5m2" }) do
      for _, saturate in ipairs({ true, false }) do
        local v = fp8.decode(fp8.encode(0 / 0, fmt, { saturate = saturate }), fmt)
        assert.is_true(v ~= v, ("%s saturate=%s"):format(fmt, tostring(saturate)))
      end
    end
  end)

  it("rounds a Lua number once (no double rounding through fp32)", function()
    -- 1.125 is the tie between 1.0 and 1.25 in E5M2; a hair above must round up.
    assert.are.equal(1.0, fp8.decode(fp8.encode(1.125, "e5m2"), "e5m2"))
    assert.are.equal(1.25, fp8.decode(fp8.encode(1.125 + 2 ^ -30, "e5m2"), "e5m2"))
    assert.are.equal(-1.25, fp8.decode(fp8.encode(-1.125 - 2 ^ -30, "e5m2"), "e5m2"))
  end)

  it("accepts integral floats as bytes", function()
    assert.are.equal(448, fp8.decode(126.0, "e4m3"))
  end)
end)

describe("fp8.explain", function()
  local function quiet(x, fmt, opts)
    opts = opts or {}
    opts.quiet = true
    return fp8.explain(x, fmt, opts)
  end

  it("shows the fields, byte, neighbours and error of 0.1 in E4M3", function()
    local r = quiet(0.1, "e4m3")
    assert.are.equal(0x1D, r.byte)
    assert.are.equal("0x1D", r.hex)
    assert.are.equal("00011101", r.binary)
    assert.are.equal("0", r.sign)
    assert.are.equal("0011", r.exponent)
    assert.are.equal("101", r.mantissa)
    assert.are.equal(0.1015625, r.value)
    assert.are.equal(0.09375, r.below)
    assert.are.equal(0.109375, r.above)
    assert.is_true(math.abs(r.abs_error - 0.0015625) < 1e-15)
    assert.is_true(math.abs(r.rel_error - 0.015625) < 1e-12)
    assert.is_false(r.underflow)
    assert.is_false(r.subnormal)
    assert.is_false(r.saturated)
  end)

  it("flags underflow, subnormals and saturation", function()
    local u = quiet(1e-5, "e4m3")
    assert.is_true(u.underflow)
    assert.are.equal(0, u.value)
    local s = quiet(0.003, "e4m3")   -- 0.003 / 2^-9 = 1.536 → 2 · 2^-9
    assert.is_true(s.subnormal)
    assert.are.equal(2 * 2 ^ -9, s.value)
    assert.are.equal("0000", s.exponent)
    local sat = quiet(1000, "e4m3")
    assert.is_true(sat.saturated)
    assert.are.equal(448, sat.value)
    assert.is_nil(sat.above)
    -- saturated is what the cast counts: past max + half an ulp (460 and the tie 464 round to 448), infinities
    for _, c in ipairs { { 448, false }, { 460, false }, { 464, false }, { 465, true }, { math.huge, true }, { -math.huge, true } } do
      assert.are.equal(c[2], quiet(c[1], "e4m3").saturated, tostring(c[1]))
      assert.are.equal(c[2] and 1 or 0, fp8.tensor { c[1] }:quantize("e4m3", { scale = 1 }):saturated(), tostring(c[1]))
    end
    assert.is_false(quiet(59392, "e5m2").saturated)   -- below the midpoint 61440 between 57344 and 2^16
    assert.is_true(quiet(61440, "e5m2").saturated)    -- the tie goes to the even code: the overflow
    assert.is_false(fp8.explain(1000, "e4m3", { quiet = true, saturate = false }).saturated)
  end)

  it("quantize refuses a scale or amax that fp32 cannot hold (it used to drop them, or decode with an inf)", function()
    local x = fp8.tensor { 1e-30, 3e37, 0 }
    for _, c in ipairs { { { scale = 1e-50 }, "scale must be in fp32's range" },
                         { { amax = 1e-50 }, "amax must be in fp32's range" },
                         { { amax = 1e39 }, "amax must be in fp32's range" },
                         { { scale = 1e-40 }, "so that its reciprocal is finite too), got 1e-40" } } do
      local ok, err = pcall(x.quantize, x, "e4m3", c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), err)
    end
    assert.are.same({ 0, 0, 0 }, x:quantize("e4m3", { scale = 3e-39 }):dequantize():mul(0):totable())
  end)

  it("handles NaN and infinite inputs", function()
    local n = quiet(0 / 0, "e4m3")
    assert.is_true(n.nan)
    assert.is_nil(n.abs_error)
    local i = quiet(math.huge, "e5m2", { saturate = false })
    assert.is_true(i.inf)
    assert.are.equal(0x7C, i.byte)
    local o = quiet(1e6, "e5m2", { saturate = false })
    assert.is_true(o.overflow)
    local si = quiet(-math.huge, "e4m3")
    assert.are.equal(-448, si.value)
  end)

  it("shows the input and the values with the digits that tell them apart (17 + 1e-9 showed as 17 -> 18)", function()
    local lines = {}
    local saved = print
    _G.print = function(...) lines[#lines + 1] = table.concat({ ... }, "\t") end
    local ok, err = pcall(function()
      fp8.explain(17 + 1e-9, "e4m3")   -- above the tie 17 (which goes to 16): rounds up to 18
      fp8.explain(1e-5, "e5m2")        -- 2^-16 exactly
    end)
    _G.print = saved
    assert.is_true(ok, err)
    local text = table.concat(lines, "\n")
    assert.truthy(text:find("17.000000001 in e4m3", 1, true), text)
    assert.truthy(text:find("value      1.52587890625e-05 = ", 1, true), text)
    assert.truthy(text:find("0 < 1.52587890625e-05 < 3.0517578125e-05", 1, true), text)
    assert.matches("^17%.000000001 in e4m3 %-> 18 ", tostring(fp8.explain(17 + 1e-9, "e4m3", { quiet = true })))
    assert.matches("^0%.1 in e4m3 %-> 0%.1015625 ", tostring(fp8.explain(0.1, "e4m3", { quiet = true })))
  end)

  it("refuses a saturate or quiet that is not a boolean (saturate=0 explained the saturating cast)", function()
    for _, o in ipairs { { saturate = 0 }, { saturate = "false" }, { quiet = 1, saturate = false } } do
      local ok, err = pcall(fp8.explain, 1000, "e4m3", o)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("must be a boolean, got ", 1, true), err)
    end
  end)

  it("prints a readable report", function()
    local lines = {}
    local saved = print
    _G.print = function(...) lines[#lines + 1] = table.concat({ ... }, "\t") end
    local ok, err = pcall(fp8.explain, 0.1, "e4m3")
    _G.print = saved
    assert.is_true(ok, err)
    local text = table.concat(lines, "\n")
    assert.truthy(text:find("0x1D", 1, true))
    assert.truthy(text:find("0.1015625", 1, true))
    assert.truthy(text:find("0.09375", 1, true))
  end)
end)
