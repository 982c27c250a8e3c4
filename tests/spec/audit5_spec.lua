-- Found on 2026-12-05 (stop 89) by a read of the CUDA code changed since its last GPU run against the CPU code and
-- torch: dropout's forward drops as x·0 (a NaN or an infinity stays NaN, a negative gives -0, as torch's x·mask/(1−p)),
-- but its backward wrote a literal 0 where it dropped, where torch's gradient is dy·mask·scale: a NaN or infinite
-- gradient at a dropped element vanished instead of reaching the leaf, and a negative one gave +0. Both devices
-- now compute dy·(mask ? scale : 0) (core/cpu/cpu_nn_act.c, kernels/activation.cu).
-- Then, comparing more composite ops with torch at NaN and infinite inputs: the p-norms' last step (the root of a sum
-- of |x|^p, taken where the sum is > 0 so that a zero row keeps a finite gradient) and |x|^p for p < 1 (likewise on
-- |x| > 0) sent a NaN to the "zero" side: the distance of a point with a NaN coordinate was 0 (cdist,
-- pairwise_distance, dist with p other than 1, 2 and inf) and normalize divided the row by eps (1e12 where torch's
-- gives NaN). Both select on ≠ 0 now (lua/fp8/tensor_math.lua).

describe("dropout's backward", function()
  local F = fp8.nn.functional

  local function grad_of(p, g)
    local x = fp8.tensor({ 1, -2, 3, 4 }):requires_grad_()
    F.dropout(x, p):backward(fp8.tensor(g))
    return x.grad:totable()
  end

  it("is dy·0 where it dropped, as torch's: a NaN or infinite gradient stays NaN, a negative one gives -0", function()
    local d = grad_of(1.0, { 0 / 0, math.huge, -3, 2 })   -- p = 1 drops every element
    assert.is_true(d[1] ~= d[1], "NaN · 0")
    assert.is_true(d[2] ~= d[2], "inf · 0")
    assert.are.equal("-0.0", ("%.1f"):format(d[3]))
    assert.are.equal("0.0", ("%.1f"):format(d[4]))
  end)

  it("scales what it kept and keeps a NaN there too", function()
    fp8.manual_seed(3)
    local x = fp8.tensor({ 1, 1, 1, 1, 1, 1, 1, 1 }):requires_grad_()
    local y = F.dropout(x, 0.5)
    local kept = y:totable()
    y:backward(fp8.tensor { 0 / 0, 0 / 0, 0 / 0, 0 / 0, -1, -1, -1, -1 })
    local d = x.grad:totable()
    for i = 1, 4 do assert.is_true(d[i] ~= d[i], "a NaN gradient reaches the leaf at " .. i) end
    for i = 5, 8 do
      if kept[i] == 2 then assert.are.equal(-2, d[i])
      else assert.are.equal("-0.0", ("%.1f"):format(d[i])) end
    end
  end)
end)

describe("the p-norms of a row with a NaN", function()
  local F = fp8.nn.functional
  local function all_nan(t)
    for _, v in ipairs(t:reshape(-1):totable()) do if v == v then return false end end
    return true
  end

  it("are NaN, as torch's: cdist, pairwise_distance, dist, normalize (before: 0, or the row divided by eps)", function()
    local x, o = fp8.tensor { { 0 / 0, 0, 1 } }, fp8.zeros(1, 3)
    for _, p in ipairs { 3, 0.5 } do
      assert.is_true(all_nan(fp8.cdist(x, o, p)), "cdist p " .. p)
      assert.is_true(all_nan(F.pairwise_distance(x, o, { p = p })), "pairwise_distance p " .. p)
      assert.is_true(all_nan(x:dist(o, p)), "dist p " .. p)
    end
    assert.is_true(all_nan(F.normalize(x, { dim = 2 })), "normalize p 2")
    assert.is_true(all_nan(F.normalize(x, { p = 3, dim = 2 })), "normalize p 3")
  end)

  it("and a zero row still has its finite norm 0 and gradient", function()
    local z = fp8.zeros(2, 3):requires_grad_()
    local y = F.normalize(z, { dim = 2 })
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, y:totable())
    y:sum():backward()
    for _, v in ipairs(z.grad:reshape(-1):totable()) do assert.is_true(math.abs(v - 1e12) < 1e6, "1/eps, got " .. v) end
    local a = fp8.tensor({ { 0, 0, 0 }, { 1, 0, 0 } }):requires_grad_()
    fp8.cdist(a, fp8.zeros(1, 3), 0.5):sum():backward()
    assert.are.same({ { 0, 0, 0 }, { 1, 0, 0 } }, a.grad:totable())
  end)
end)
