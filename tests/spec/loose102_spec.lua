-- Found on 2026-12-07 (stop 102): the 1-norm's gradient at a NaN element was NaN where torch 2.15's is 0 (abs's
-- backward multiplied by sign(x), NaN at a NaN; torch's by sgn(x), 0 there), and what fp8lab keeps at the ±inf
-- norms of F.normalize and renorm over a slice holding ±inf (torch's gradient is NaN on the whole slice, from 0·inf
-- in its norm backward; fp8lab's is the derivative, checked here against one worked in float64).
-- The torch values: tests/data/norm_edges_torch.lua (scripts/gen_norm_edges.py).
-- docs/robustness.md, "The profiler's last FLOPs, the norms' edges (stop 102)".
local U = dofile("tests/spec/helpers/util.lua")
local ref = dofile("tests/data/norm_edges_torch.lua")
local F = fp8.nn.functional

local NAN_IN = { { 1, 0 / 0, -2 }, { 0.5, 3, 4 } }   -- the fixture's "nan" input
local function other(n)
  local vals, t = { 0.5, 1.0, -1.0, 2.0, -0.75, 0.125 }, {}
  for i = 1, n do t[i] = vals[i] end
  return t
end
local function flat(t) return t:detach():float():reshape({ -1 }):tolist() end
local function same_list(want, got, where)
  assert.are.equal(#want, #got, where)
  for i = 1, #want do
    local a, b = want[i], got[i]
    if a ~= a then assert.is_true(b ~= b, ("%s [%d]: want NaN, got %s"):format(where, i, tostring(b)))
    elseif a == math.huge or a == -math.huge then assert.are.equal(a, b, ("%s [%d]"):format(where, i))
    else
      assert.is_true(b == b and math.abs(a - b) <= 1e-2 * math.abs(a) + 1e-30 and (a ~= 0 or 1 / a == 1 / b),
        ("%s [%d]: want %s, got %s"):format(where, i, tostring(a), tostring(b)))
    end
  end
end

describe("the 1-norm's gradient at a NaN element is torch's 0", function()
  local OPS = {
    norm = function(x) return x:norm(1) end,
    norm_dim = function(x) return x:norm(1, 2) end,
    dist = function(x) return x:dist(fp8.tensor(other(6), { dtype = x:dtype() }):reshape({ 2, 3 }), 1) end,
  }
  for _, op in ipairs { "norm", "norm_dim", "dist" } do
    it(op .. ": torch's gradient (fp32, bf16, fp16)", function()
      local n = 0
      for _, r in ipairs(ref) do
        if r.op == op and r.input == "nan" and r.p == 1 and r.g then
          local x = fp8.tensor(NAN_IN, { dtype = r.dtype }):requires_grad_(true)
          OPS[op](x):sum():backward()
          same_list(r.g, flat(x.grad), ("%s %s"):format(op, r.dtype))
          n = n + 1
        end
      end
      assert.are.equal(3, n)
    end)
  end
  it("pairwise_distance at p = 1 too, and cdist keeps torch's NaN there (its kernel's sign of the difference)", function()
    local n = 0
    for _, r in ipairs(ref) do
      if (r.op == "pairwise_distance" or r.op == "cdist") and r.input == "nan" and r.p == 1 and r.g then
        local x = fp8.tensor(NAN_IN, { dtype = r.dtype }):requires_grad_(true)
        local o = fp8.tensor(other(6), { dtype = r.dtype }):reshape({ 2, 3 })
        local y = r.op == "cdist" and fp8.cdist(x, o, 1) or F.pairwise_distance(x, o, 1)
        same_list(r.y, flat(y), ("%s %s y"):format(r.op, r.dtype))
        y:sum():backward()
        same_list(r.g, flat(x.grad), ("%s %s"):format(r.op, r.dtype))
        n = n + 1
      end
    end
    assert.are.equal(4, n)   -- pairwise_distance in three dtypes, cdist in fp32 (torch refuses bf16 and fp16)
  end)
  it("abs's own gradient is g·sgn(x): +0 at NaN and at ±0, NaN where g is inf and x is NaN, as torch's", function()
    -- torch 2.15: x = [nan, -0, 0, 2, -3], x.abs().sum().backward() gives [0, 0, 0, 1, -1]
    for _, dt in ipairs { "fp32", "bf16", "fp16" } do
      local x = fp8.tensor({ 0 / 0, -0.0, 0, 2, -3 }, { dtype = dt }):requires_grad_(true)
      x:abs():sum():backward()
      local g = flat(x.grad)
      same_list({ 0, 0, 0, 1, -1 }, g, dt)
    end
    -- (y.abs() * inf).sum(): the gradient inf·sgn(NaN) = inf·0 is NaN, torch's [nan, inf]
    local y = fp8.tensor({ 0 / 0, 1 }):requires_grad_(true)
    local z = y:abs() * math.huge
    z:sum():backward()
    same_list({ 0 / 0, math.huge }, flat(y.grad), "inf g")
  end)
end)

describe("F.normalize and renorm at p = ±inf over a slice holding ±inf keep the derivative (torch: NaN)", function()
  -- y = x / n with n the slice's ±inf norm. Off the element(s) that set n, ∂n/∂x is 0 and the gradient of y's sum is
  -- 1/n; on that element it is 1/n − Σ x / n² (for p = -inf, times sgn x). Worked here in Lua's doubles.
  local X = { { 1, math.huge, -2 }, { -math.huge, 3, 4 } }
  local function expected(p)
    local out = {}
    for _, row in ipairs(X) do
      local n, arg = p < 0 and math.huge or 0, nil
      for j, v in ipairs(row) do
        local a = math.abs(v)
        if (p < 0 and a < n) or (p > 0 and a > n) then n, arg = a, j end
      end
      local s = 0
      for _, v in ipairs(row) do s = s + v end
      for j, v in ipairs(row) do
        local sg = v > 0 and 1 or (v < 0 and -1 or 0)
        out[#out + 1] = j == arg and (1 / n - sg * s / (n * n)) or 1 / n
      end
    end
    return out
  end
  it("normalize: torch's values, and the float64 derivative where torch's gradient is NaN", function()
    for _, p in ipairs { -math.huge, math.huge } do
      local x = fp8.tensor(X):requires_grad_(true)
      local y = F.normalize(x, { p = p, dim = 2 })
      for _, r in ipairs(ref) do
        if r.op == "normalize" and r.input == "inf" and r.p == p and r.dtype == "fp32" then
          same_list(r.y, flat(y), "normalize y p=" .. p)
          -- torch's gradient is NaN wherever the derivative is finite
          for i, v in ipairs(expected(p)) do
            if v == v and math.abs(v) < math.huge then assert.is_true(r.g[i] ~= r.g[i], "torch's gradient is NaN") end
          end
        end
      end
      y:sum():backward()
      same_list(expected(p), flat(x.grad), "normalize grad p=" .. p)
    end
  end)
  -- stop 103: the root of torch's NaN slices is the ±inf norm's own backward, which multiplies the gradient by a 0/1
  -- mask (an inf or NaN norm gradient times 0 is NaN off the element that sets the norm), where torch's max(dim) of
  -- |x|, the same function, selects (0 there); fp8lab's ±inf norm gives max's gradient, an inf or NaN included
  it("the ±inf norm along a dim at an inf or NaN upstream gradient: torch's max(dim) of |x|, not its norm's NaN", function()
    local n = 0
    for _, r in ipairs(ref) do
      if r.op == "norm_dim_upstream" then
        local x = fp8.tensor({ { 1, 5, -2 }, { -3, math.huge, 0.5 } })
        if r.dtype ~= "fp32" then x = x:to(r.dtype) end
        x:requires_grad_(true)
        local y = x:norm(r.p, 2)
        same_list(r.y, flat(y), ("y %s p=%s"):format(r.dtype, r.p))
        y:backward(fp8.full({ 2 }, r.go))
        same_list(r.g_max, flat(x.grad), ("g %s p=%s go=%s"):format(r.dtype, r.p, r.go))
        n = n + 1
      end
    end
    assert.are.equal(18, n)
  end)
  it("renorm at p = inf (maxnorm 1): the gradient is the same derivative", function()
    local x = fp8.tensor(X):requires_grad_(true)
    x:renorm(math.huge, 1, 1.0):sum():backward()
    same_list(expected(math.huge), flat(x.grad), "renorm grad")
  end)
end)
