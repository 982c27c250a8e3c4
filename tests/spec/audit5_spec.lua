-- Found on 2026-12-05 (stop 89) by a read of the CUDA code changed since its last GPU run against the CPU code and
-- torch: dropout's forward drops as x·0 (a NaN or an infinity stays NaN, a negative gives -0, as torch's x·mask/(1−p)),
-- but its backward wrote a literal 0 where it dropped, where torch's gradient is dy·mask·scale: a NaN or infinite
-- gradient at a dropped element vanished instead of reaching the leaf, and a negative one gave +0. Both devices
-- now compute dy·(mask ? scale : 0) (core/cpu/cpu_nn_act.c, kernels/activation.cu).

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
