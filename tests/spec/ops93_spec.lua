-- Changed on 2026-12-06 (stop 93): ops a survey against PyTorch 2.15 found slow (docs/performance.md, "Elementwise
-- ops a second survey found slow"): clamp in one or two passes over one new tensor, maximum/minimum as selects,
-- x^s's shortcuts; their values are those of the definitions below.
local inf, nan = math.huge, 0 / 0
local U = dofile("tests/spec/helpers/util.lua")

local bits_equal = U.same_number   -- NaN equals NaN; -0 and +0 differ
local f32 = U.f32

local SPECIAL = { 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, inf, -inf, nan, 1e-40, -1e-40, 3.4e38, -3.4e38,
  1.1754944e-38, 0.999999940395, 1.00000011920929, 7.3, -7.3 }

describe("clamp between numbers", function()
  -- maximum(x, lo) then minimum(., hi); NaN stays NaN; -0 below +0
  local function ref(x, lo, hi)
    if x ~= x then return x end
    local r = x
    if lo and (r < lo or (r == lo and 1 / r < 0 and 1 / lo > 0)) then r = lo end
    if hi and (r > hi or (r == hi and 1 / r > 0 and 1 / hi < 0)) then r = hi end
    return r
  end
  it("gives maximum-then-minimum's values, NaN, ±0 and infinities included, in every dtype and layout", function()
    local bounds = { { -1, 1 }, { 0.0, nil }, { nil, -0.0 }, { -0.0, 0.0 }, { -inf, 2 }, { 1, inf }, { 2, 1 }, { 0.5, 0.5 } }
    for _, dt in ipairs { "fp32", "bf16", "fp16" } do
      local base = fp8.tensor(SPECIAL):to(dt)
      local vals = base:totable()
      -- a strided view too (every other element of a 2-d layout's transpose)
      local x2 = fp8.tensor { SPECIAL, SPECIAL }:to(dt):t()
      for _, b in ipairs(bounds) do
        local lo, hi = b[1], b[2]
        local got = base:clamp(lo, hi):totable()
        local got2 = x2:clamp(lo, hi):select(2, 2):totable()
        for i, v in ipairs(vals) do
          local want = fp8.tensor { ref(v, lo and f32(lo), hi and f32(hi)) }:to(dt):item()
          assert.is_true(bits_equal(got[i], want), ("%s clamp(%s, %s) of %s: %s, want %s"):format(dt, tostring(lo),
            tostring(hi), tostring(v), tostring(got[i]), tostring(want)))
          assert.is_true(bits_equal(got2[i], want), ("%s strided clamp(%s, %s) of %s"):format(dt, tostring(lo),
            tostring(hi), tostring(v)))
        end
      end
    end
  end)
  it("gives NaN everywhere for a NaN bound, either side or alone (a pass skipped for a NaN bound once gave x)", function()
    local x = fp8.tensor { 1, -2, 3 }
    for _, b in ipairs { { 0, nan }, { nil, nan }, { nan, 2 }, { nan, nil } } do
      for _, v in ipairs(x:clamp(b[1], b[2]):totable()) do assert.is_true(v ~= v) end
    end
    for _, v in ipairs(x:clamp { max = nan }:totable()) do assert.is_true(v ~= v) end
  end)
  it("returns a new tensor, the input unchanged, and keeps torch's gradient", function()
    local x = fp8.tensor { -3, -1, 0, 0.5, 1, 4 }
    local y = x:clamp(-1, 1)
    y:fill_(9)
    assert.are.same({ -3, -1, 0, 0.5, 1, 4 }, x:totable())
    local xg = fp8.tensor { -3, -1, 0, 0.5, 1, 4 }:requires_grad_()
    xg:clamp(-1, 1):sum():backward()
    assert.are.same({ 0, 0, 1, 1, 0, 0 }, xg.grad:totable())   -- strictly inside only (2.15's rule)
    local xm = fp8.tensor { -3, -1, 0, 4 }:requires_grad_()
    xm:clamp_min(-1):sum():backward()
    assert.are.same({ 0, 0, 1, 1 }, xm.grad:totable())
  end)
end)

describe("maximum and minimum as selects", function()
  it("keep NaN in, NaN out and -0 < +0 against a scalar and a tensor", function()
    local x = fp8.tensor(SPECIAL)
    local vals = x:totable()
    for _, s in ipairs { 0.0, -0.0, 1.0, -inf, inf } do
      local mx, mn = x:maximum(fp8.tensor(s)):totable(), x:minimum(fp8.tensor(s)):totable()
      for i, v in ipairs(vals) do
        local wmx, wmn
        if v ~= v then wmx, wmn = v, v
        elseif v == s then
          wmx = (1 / v > 0 or 1 / s > 0) and math.abs(v) or v
          wmn = (1 / v < 0 or 1 / s < 0) and -math.abs(v) or v
          if v ~= 0 then wmx, wmn = v, v end
        else wmx, wmn = math.max(v, s), math.min(v, s) end
        assert.is_true(bits_equal(mx[i], wmx), ("maximum(%s, %s): %s"):format(v, s, mx[i]))
        assert.is_true(bits_equal(mn[i], wmn), ("minimum(%s, %s): %s"):format(v, s, mn[i]))
      end
    end
  end)
end)

describe("x^s by a number", function()
  it("takes the shortcuts with pow's values at the specials, and their gradients", function()
    local x = fp8.tensor(SPECIAL)
    local vals = x:totable()
    for _, s in ipairs { 2, 3, 4, 0.5, -1, -2, -0.5, 1, 0 } do
      local got = x:pow(s):totable()
      for i, v in ipairs(vals) do
        local want = f32(v ^ s)   -- Lua's pow in double, rounded to fp32 (the general path's definition)
        -- but ±0.5 at -0 and -inf: torch's sqrt and rsqrt (-0 and NaN, -inf and NaN; since stop 98, gaps15b_spec)
        if (s == 0.5 or s == -0.5) and (v == -math.huge or (v == 0 and 1 / v < 0)) then
          want = v == -math.huge and 0 / 0 or s == 0.5 and -0.0 or -math.huge
        end
        assert.is_true(bits_equal(got[i], want) or (got[i] ~= got[i] and want ~= want),
          ("%s^%s: %s, want %s"):format(v, s, got[i], want))
      end
    end
    local xg = fp8.tensor { -2, 0.5, 3 }:requires_grad_()
    xg:pow(2):sum():backward()
    assert.are.same({ -4, 1, 6 }, xg.grad:totable())
    local xr = fp8.tensor { 4, 0.25 }:requires_grad_()
    xr:pow(0.5):sum():backward()
    assert.are.same({ 0.25, 1 }, xr.grad:totable())   -- 0.5·x^-0.5
  end)
end)

describe("argmax, argmin and max/min along a dim", function()
  -- torch's rule: the first position of the extreme value (-0 == +0), the first NaN where there is one
  local function ref_arg(vals, want_min)
    local best, bv = 1, vals[1]
    for s = 2, #vals do
      if bv ~= bv then break end
      local v = vals[s]
      if v ~= v or (want_min and v < bv) or (not want_min and v > bv) then best, bv = s, v end
    end
    return best - 1
  end
  it("take the first extreme, ties, -0/+0 and NaN included, along every dim of every layout", function()
    fp8.manual_seed(93)
    local pool = { 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, nan, math.huge, -math.huge, 0.5 }
    for _, shape in ipairs { { 7, 300 }, { 300, 7 }, { 3, 5, 260 }, { 4, 513, 3 }, { 1, 1 }, { 9 } } do
      local n = 1
      for _, s in ipairs(shape) do n = n * s end
      -- mostly a few distinct values (ties everywhere), some rows with a NaN, some without
      local idx = (fp8.rand { n } * #pool):floor():totable()
      local v = {}
      for i = 1, n do v[i] = pool[math.floor(idx[i]) + 1]; if v[i] ~= v[i] and i % 3 ~= 0 then v[i] = 1.5 end end
      for _, dt in ipairs { "fp32", "bf16" } do
        local x = fp8.tensor(v):to(dt):reshape(shape)
        for d = 1, #shape do
          for _, want_min in ipairs { false, true } do
            local got = (want_min and x:argmin(d) or x:argmax(d)):reshape(-1):totable()
            local vals, ids
            if want_min then vals, ids = x:min(d) else vals, ids = x:max(d) end
            ids = ids:reshape(-1):totable()
            vals = vals:reshape(-1):totable()
            -- walk every line along d
            local xm = x:movedim(d, #shape):contiguous():reshape { -1, shape[d] }:totable()
            for l = 1, #xm do
              local want = ref_arg(xm[l], want_min)
              assert.are.equal(want, got[l], ("%s %s arg%s along %d, line %d"):format(dt, table.concat(shape, "x"),
                want_min and "min" or "max", d, l))
              assert.are.equal(want, ids[l])
              assert.is_true(bits_equal(vals[l], xm[l][want + 1]) or (vals[l] ~= vals[l] and xm[l][want + 1] ~= xm[l][want + 1]))
            end
          end
        end
      end
    end
  end)
end)

describe("flip, tril and triu in one pass on the CPU", function()
  local function walk(shape, f)   -- f(i, j, k) over a 3-d shape, 1-based
    for i = 1, shape[1] do for j = 1, shape[2] do for k = 1, shape[3] do f(i, j, k) end end end
  end
  it("flip reverses each listed dim, bits and all, in every dtype and layout, and flips the gradient back", function()
    fp8.manual_seed(11)
    local base = fp8.randn { 3, 4, 5 }
    base = base:masked_fill(base:gt(1.2), nan)
    for _, dt in ipairs { "fp32", "bf16", "fp16" } do
      for _, src in ipairs { base:to(dt), base:to(dt):transpose(1, 3):contiguous():transpose(1, 3) } do
        local v = src:totable()
        for _, dims in ipairs { { 1 }, { 2 }, { 3 }, { 1, 3 }, { 2, 3 }, { 1, 2, 3 }, { -1 } } do
          local flipped = {}
          for _, d in ipairs(dims) do flipped[d < 0 and d + 4 or d] = true end
          local got = src:flip(dims):totable()
          walk({ 3, 4, 5 }, function(i, j, k)
            local a = flipped[1] and 4 - i or i
            local b = flipped[2] and 5 - j or j
            local c = flipped[3] and 6 - k or k
            assert.is_true(bits_equal(got[i][j][k], v[a][b][c]), ("%s flip{%s} at %d,%d,%d"):format(dt,
              table.concat(dims, ","), i, j, k))
          end)
        end
      end
    end
    local g = fp8.randn { 3, 4 }:requires_grad_()
    local w = fp8.randn { 3, 4 }
    local y = g:flip { 1, 2 } * w
    y:sum():backward()
    assert.are.same(w:flip { 1, 2 }:totable(), g.grad:totable())
  end)
  it("tril and triu keep one side of diagonal k and put +0 elsewhere (NaN included), and mask the gradient", function()
    fp8.manual_seed(12)
    local base = fp8.randn { 2, 4, 5 }
    base = base:masked_fill(base:gt(1.0), nan):masked_fill(base:lt(-1.2), -0.0)
    for _, dt in ipairs { "fp32", "bf16" } do
      local x = base:to(dt)
      local v = x:totable()
      for _, k in ipairs { 0, 1, -1, 4, -4, 9, -9, math.maxinteger, math.mininteger } do
        local lo, up = x:tril(k):totable(), x:triu(k):totable()
        walk({ 2, 4, 5 }, function(b, i, j)
          local keep_lo = (j - 1) - (i - 1) <= k
          local keep_up = (j - 1) - (i - 1) >= k
          assert.is_true(bits_equal(lo[b][i][j], keep_lo and v[b][i][j] or 0.0), ("%s tril(%d) %d,%d,%d"):format(dt, k, b, i, j))
          assert.is_true(bits_equal(up[b][i][j], keep_up and v[b][i][j] or 0.0), ("%s triu(%d) %d,%d,%d"):format(dt, k, b, i, j))
        end)
      end
    end
    local g = fp8.randn { 3, 4 }:requires_grad_()
    g:tril(1):sum():backward()
    assert.are.same({ { 1, 1, 0, 0 }, { 1, 1, 1, 0 }, { 1, 1, 1, 1 } }, g.grad:totable())
  end)
end)

describe("cumsum along an outer dim", function()
  it("is each column's running sum in double rounded once, past a block of 512 columns too, and its gradient", function()
    fp8.manual_seed(13)
    for _, c in ipairs { { { 2, 5, 700 }, 2 }, { { 6, 3 }, 1 }, { { 4, 2, 3 }, 1 } } do
      local shape, d = c[1], c[2]
      local x = fp8.randn(shape)
      local got = x:cumsum(d):movedim(d, #shape):contiguous():reshape { -1, shape[d] }:totable()
      local v = x:movedim(d, #shape):contiguous():reshape { -1, shape[d] }:totable()
      for l = 1, #v do
        local acc = 0
        for s = 1, shape[d] do
          acc = acc + v[l][s]
          assert.are.equal(f32(acc), got[l][s], ("%s along %d, line %d, place %d"):format(table.concat(shape, "x"), d, l, s))
        end
      end
    end
    local g = fp8.randn { 3, 4 }:requires_grad_()
    g:cumsum(1):sum():backward()
    assert.are.same({ { 3, 3, 3, 3 }, { 2, 2, 2, 2 }, { 1, 1, 1, 1 } }, g.grad:totable())
  end)
end)

describe("sort of a whole line by its keys' bits", function()
  it("orders as torch (NaN largest, -0 = +0, ties by position) both ways, past 64 values", function()
    local pool = { 0.0, -0.0, 1.0, -1.0, nan, math.huge, -math.huge, 2.5, -2.5, 1e-40, -1e-40, 3.4e38 }
    for _, n in ipairs { 64, 65, 300 } do
      local v = {}
      for i = 1, n do v[i] = pool[(i * 7) % #pool + 1] end
      local x = fp8.tensor(v)
      local xv = x:totable()
      for _, desc in ipairs { false, true } do
        local order = {}
        for i = 1, n do order[i] = i end
        table.sort(order, function(a, b)   -- a total order: value (NaN largest, -0 = +0), then position
          local va, vb = xv[a], xv[b]
          local na, nb = va ~= va, vb ~= vb
          if na ~= nb then if desc then return na else return nb end end
          if not na and va ~= vb then if desc then return va > vb else return va < vb end end
          return a < b
        end)
        local vals, idx = x:sort(1, desc)
        local gv, gi = vals:totable(), idx:totable()
        for r = 1, n do
          assert.are.equal(order[r] - 1, gi[r], ("n %d desc %s place %d"):format(n, tostring(desc), r))
          assert.is_true(bits_equal(gv[r], xv[order[r]]))
        end
      end
    end
  end)
end)

describe("the scans and sorts on empty tensors and NaN columns (stop 93's review)", function()
  it("return at once for an empty tensor of many columns, and keep the running sum's NaN", function()
    assert.are.same({ 0, 1 << 62 }, fp8.zeros { 0, 1 << 62 }:cumsum(1):shape())
    assert.are.same({ 0, 1 << 62 }, (fp8.ones { 1, 1 }:expand(0, 1 << 62):sort(1)):shape())
    local n = 0 / 0
    local x = fp8.tensor { { -n, 1 }, { n, 2 } }   -- the first NaN (sign bit set) carries down the column
    local down, across = x:cumsum(1), x:t():contiguous():cumsum(2)
    local a, b = down[2][1], across[1][2]
    assert.is_true(a ~= a and b ~= b)
    assert.are.equal(tostring(b), tostring(a))
  end)
end)
