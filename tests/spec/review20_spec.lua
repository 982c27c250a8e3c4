-- Found on 2026-12-07 (stop 103, review20: stop 102's code read again). docs/robustness.md, "Stop 102's code read
-- again (stop 103)".
-- fp8.hist of a tensor scaled per index along a dim (axis=): stop 102's faster path read the codes through a flat
-- reshape, which such a tensor refuses ('reshape: e4m3 tensor [37, 29] is scaled per index along dim 1 ...'); the
-- counts are checked against the cast's own bytes, counted here.
local F8 = fp8

-- each code's class counted from the cast's bytes (fp8.format's fields; the sign dropped)
local function classes(q, fmt)
  local f = F8.format(fmt)
  local emask = (1 << f.exp_bits) - 1
  local c = { zero = 0, sub = 0, nan = 0, inf = 0, normal = 0 }
  for _, b in ipairs(q:bytes()) do
    b = b & 0x7F
    local e = b >> f.mantissa_bits
    if b == 0 then c.zero = c.zero + 1
    elseif e == 0 then c.sub = c.sub + 1
    elseif fmt == "e4m3" and b == 0x7F or fmt == "e5m2" and e == emask and (b & 3) ~= 0 then c.nan = c.nan + 1
    elseif fmt == "e5m2" and e == emask then c.inf = c.inf + 1
    else c.normal = c.normal + 1 end
  end
  return c
end

local function source(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local v = {}
  for i = 1, n do v[i] = ((i * 7919) % 2003 - 1001) * 2.0 ^ ((i % 40) - 20) end
  v[3], v[5], v[7], v[9] = 0 / 0, 1 / 0, -1 / 0, 0.0
  return F8.tensor(v):reshape(shape)
end

describe("fp8.hist of a tensor scaled per index along a dim (stop 102's flat read refused it)", function()
  for _, case in ipairs {
    { shape = { 37, 29 }, axis = 1 }, { shape = { 37, 29 }, axis = 2 }, { shape = { 70, 100 }, axis = 1 },
    { shape = { 3, 5000 }, axis = 2 }, { shape = { 2, 3, 3000 }, axis = 2 }, { shape = { 5000 } },
  } do
    for _, fmt in ipairs { "e4m3", "e5m2" } do
      it(("%s %s axis %s: the counts of the cast's codes"):format(fmt, table.concat(case.shape, "x"),
        tostring(case.axis)), function()
        local x = source(case.shape)
        local q = x:quantize(fmt, { axis = case.axis })
        local want = classes(q, fmt)
        for _, h in ipairs { F8.hist(x, fmt, { axis = case.axis, quiet = true }), F8.hist(q, nil, { quiet = true }) } do
          assert.are.equal(x:numel(), h.n)
          assert.are.equal(want.nan, h.nan)
          assert.are.equal(want.inf, h.inf)
          assert.are.equal(want.sub, h.subnormal)
          assert.are.equal(want.zero, h.zero + h.underflow)
          local binned = h.saturated
          for _, c in pairs(h.bins) do binned = binned + c end
          assert.are.equal(want.normal, binned)
        end
      end)
    end
  end
end)
