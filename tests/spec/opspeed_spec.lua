-- Changed on 2026-12-06 (stop 95): single ops a wider sweep against PyTorch 2.15 found slow (docs/performance.md,
-- "Single ops against PyTorch 2.15, a wider sweep (stop 95)"): a broadcast operand read as a number in one pass
-- (x + c, c [R, 1]), clamp between two numbers in one pass, x^s for a number s other than the shortcuts in
-- vectorised double code (core/cpu/cpu_vpow.h). Their values are the definitions' below, checked element by element
-- in Lua (whose floats are doubles: an fp32 sum, product or quotient is the double one rounded once to fp32, and
-- Lua's x ^ y is C's pow); tests/c/test_vpow.c measures the power's error over a sample of every float.
local inf, nan = math.huge, 0 / 0
local U = dofile("tests/spec/helpers/util.lua")

local f32 = U.f32
local same_bits = U.same_number   -- NaN equals NaN; -0 and +0 differ

local SPECIAL = { 0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 3.0, inf, -inf, nan, 1e-40, -1e-40, 3.4e38, -3.4e38, 7.3, -7.25,
  1.5, 2.5, -0.1, 1e-3 }
for i, v in ipairs(SPECIAL) do SPECIAL[i] = f32(v) end   -- the fp32 values the tensors hold

-- torch's definitions, in fp32
local function maximum(a, b)
  if a ~= a or b ~= b then return nan end
  if a == b then return (1 / a > 0) and a or b end   -- -0 < +0
  return a > b and a or b
end
local function minimum(a, b)
  if a ~= a or b ~= b then return nan end
  if a == b then return (1 / a < 0) and a or b end
  return a < b and a or b
end
local function remainder(a, b)
  local m = f32(math.fmod(a, b))
  if m ~= 0 and ((b < 0) ~= (m < 0)) then m = f32(m + b) end
  return m
end
local function bool(c) return c and 1.0 or 0.0 end
local OPS = {
  add = function(a, b) return f32(a + b) end, sub = function(a, b) return f32(a - b) end,
  mul = function(a, b) return f32(a * b) end, div = function(a, b) return f32(a / b) end,
  maximum = maximum, minimum = minimum,
  pow = function(a, b) return f32(a ^ b) end,
  atan2 = function(a, b) return f32(math.atan(a, b)) end,
  fmod = function(a, b) return f32(math.fmod(a, b)) end, remainder = remainder,
  eq = function(a, b) return bool(a == b) end, ne = function(a, b) return bool(a ~= b) end,
  lt = function(a, b) return bool(a < b) end, le = function(a, b) return bool(a <= b) end,
  gt = function(a, b) return bool(a > b) end, ge = function(a, b) return bool(a >= b) end,
}
local function apply(name, x, y)
  if name == "add" then return x + y elseif name == "sub" then return x - y elseif name == "mul" then return x * y
  elseif name == "div" then return x / y elseif name == "pow" then return x ^ y end
  return x[name](x, y)
end

describe("a broadcast operand read as a number", function()
  local n = #SPECIAL
  local rows = {}
  for i = 1, n do rows[i] = {} for j = 1, n do rows[i][j] = SPECIAL[(i + j) % n + 1] end end
  local x = fp8.tensor(rows)                                   -- [n, n]
  local col = fp8.tensor(SPECIAL):view(n, 1)                   -- [n, 1]: a number per row
  local row = fp8.tensor(SPECIAL)                              -- [n]: a run the same in every row
  local xs = x:totable()
  it("gives every binary op's values with a column on either side, a row, and a 0-d tensor", function()
    for name, ref in pairs(OPS) do
      local cases = {
        { apply(name, x, col), function(i, j) return ref(xs[i][j], SPECIAL[i]) end, "x op col" },
        { apply(name, col:expand(n, n):contiguous(), x), function(i, j) return ref(SPECIAL[i], xs[i][j]) end,
          "expanded col op x" },
        { apply(name, col, x), function(i, j) return ref(SPECIAL[i], xs[i][j]) end, "col op x" },
        { apply(name, x, row), function(i, j) return ref(xs[i][j], SPECIAL[j]) end, "x op row" },
        { apply(name, x, fp8.tensor(-2.5)), function(i, j) return ref(xs[i][j], -2.5) end, "x op 0-d" },
        { apply(name, x:t(), col), function(i, j) return ref(xs[j][i], SPECIAL[i]) end, "x:t() op col" },
      }
      for _, c in ipairs(cases) do
        local got = c[1]:totable()
        for i = 1, n do
          for j = 1, n do
            local want = c[2](i, j)
            assert(same_bits(got[i][j], want), ("%s, %s: at (%d, %d) got %s, want %s"):format(name, c[3], i, j,
              tostring(got[i][j]), tostring(want)))
          end
        end
      end
    end
  end)
  it("gives where's values with the condition or a value broadcast", function()
    local cond = fp8.tensor { 1, 0, -0.0, nan, 2 }:view(5, 1)
    local a = fp8.randn { 5, 7 }
    local b = fp8.tensor { 1.5, -0.0, inf, nan, 3, 4, 5 }
    local got, av = fp8.where(cond, a, b):totable(), a:totable()
    local cv, bv = { 1, 0, -0.0, nan, 2 }, { 1.5, -0.0, inf, nan, 3, 4, 5 }
    for i = 1, 5 do
      for j = 1, 7 do
        local want = (cv[i] ~= 0) and av[i][j] or bv[j]
        assert(same_bits(got[i][j], want), ("where at (%d, %d): %s, want %s"):format(i, j, tostring(got[i][j]),
          tostring(want)))
      end
    end
  end)
end)

describe("clamp between two numbers in one pass", function()
  it("gives minimum(maximum(x, lo), hi), rounded once for bf16 and fp16, on a view too", function()
    local x = fp8.tensor(SPECIAL)
    for _, dt in ipairs { "fp32", "bf16", "fp16" } do
      local xd = x:to(dt)
      local xv = fp8.tensor { SPECIAL, SPECIAL }:to(dt):t():select(2, 2)
      local vals = xd:totable()
      for _, b in ipairs { { -1, 1 }, { -0.0, 0.0 }, { 0.1, 0.3 }, { 2, 1 }, { -6e4, 1e-40 }, { 60000, 65504 } } do
        local got, gotv = xd:clamp(b[1], b[2]):totable(), xv:clamp(b[1], b[2]):totable()
        for i, v in ipairs(vals) do
          local want = fp8.tensor { minimum(maximum(v, f32(b[1])), f32(b[2])) }:to(dt):item()
          assert(same_bits(got[i], want) and same_bits(gotv[i], want), ("%s clamp(%s, %s) of %s: %s, %s, want %s")
            :format(dt, b[1], b[2], tostring(v), tostring(got[i]), tostring(gotv[i]), tostring(want)))
        end
      end
    end
  end)
  it("keeps the gradient strictly inside and refuses FP8", function()
    local xg = fp8.tensor { -3, -1, 0, 0.5, 1, 4 }:requires_grad_()
    xg:clamp(-1, 1):sum():backward()
    assert.are.same({ 0, 0, 1, 1, 0, 0 }, xg.grad:totable())
    local ok, err = pcall(function() return fp8.tensor { 1, 2 }:to("e4m3"):clamp(-1, 1) end)
    assert.is_false(ok)
    assert.matches("e4m3", tostring(err))
  end)
end)

describe("x^s for a number s in vectorised double code", function()
  local EXPS = { 3.5, 2.7, -1.5, 1 / 3, 7, -7, 6, -0.1, 100.5, 1e10, -1e10 }
  local vals = {}
  for _, v in ipairs(SPECIAL) do vals[#vals + 1] = v end
  for _, v in ipairs { 1e-45, -1e-45, 2 ^ -126, 0.999999940395, 1.00000011920929, -1.00000011920929, 65504, 88.5,
    -3, 12345.678 } do vals[#vals + 1] = v end
  fp8.manual_seed(95)
  for _, v in ipairs(fp8.randn({ 300 }):totable()) do vals[#vals + 1] = v * 4 end
  for _, v in ipairs(fp8.rand({ 300 }):totable()) do vals[#vals + 1] = v * 1e-30 end
  it("gives C's pow of the double, rounded once, at the special values and a sample, on a view too", function()
    local x = fp8.tensor(vals)
    local xv = fp8.tensor { vals, vals }:t():select(2, 1)
    for _, s in ipairs(EXPS) do
      local got, gotv = (x ^ s):totable(), xv:pow(s):totable()
      for i, v in ipairs(vals) do
        local want = f32(f32(v) ^ s)
        assert(same_bits(got[i], want) and same_bits(gotv[i], want), ("(%s)^%s: %s, %s, want %s"):format(
          tostring(v), tostring(s), tostring(got[i]), tostring(gotv[i]), tostring(want)))
      end
    end
  end)
  it("keeps pow's gradient s·x^(s-1)", function()
    local xg = fp8.tensor { 0.5, 2, 3 }:requires_grad_()
    local y = xg ^ 2.5
    y:sum():backward()
    local g = xg.grad:totable()
    for i, v in ipairs { 0.5, 2, 3 } do
      local want = 2.5 * v ^ 1.5
      assert(math.abs(g[i] - want) <= 1e-6 * want, ("grad at %s: %s, want %s"):format(v, g[i], want))
    end
  end)
end)

describe("index_select along the last dim, an element at a time", function()
  it("picks each row's elements at the index's positions (repeats, any order), in every dtype, 2-d and 3-d", function()
    fp8.manual_seed(5)
    local idx = fp8.tensor { 3, 0, 0, 6, 2, 6, 1 }
    for _, dt in ipairs { "fp32", "bf16", "fp16" } do
      for _, shape in ipairs { { 5, 7 }, { 2, 3, 7 }, { 7 } } do
        local x = fp8.randn(shape):to(dt)
        local flat, got = x:reshape(-1):totable(), x:index_select(#shape, idx):reshape(-1):totable()
        local rows, k = #flat // 7, 7
        for r = 0, rows - 1 do
          for j = 1, k do
            local want = flat[r * 7 + idx:totable()[j] + 1]
            assert(same_bits(got[r * k + j], want), ("%s %s: row %d, position %d: %s, want %s"):format(dt,
              table.concat(shape, "x"), r, j, tostring(got[r * k + j]), tostring(want)))
          end
        end
      end
    end
  end)
end)
