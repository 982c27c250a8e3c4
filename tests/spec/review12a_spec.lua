-- Found on 2026-12-06 (stop 95's review): the two audits merged that day (audit11b: hypot's node, the 69 in-place
-- forms, CyclicLR's base_lrs; audit11a: clip_grad_norm_'s blocks, the generator's state, a prepared
-- ReduceLROnPlateau's load_state) read again against torch 2.15 and Accelerate.
-- docs/robustness.md, "The two audits of stop 95, reviewed (stop 95)".
local U = dofile("tests/spec/helpers/util.lua")
local S = fp8.optim.lr_scheduler

describe("an in-place write with an operand that requires grad", function()
  -- The new values were computed from detached operands, so under grad mode x:mul_(w) wrote w's values into x and
  -- recorded nothing: a loss of x gave w no gradient, without a word (torch records the write: x gets MulBackward and
  -- w.grad comes). The same for the 69 forms of stop 95 (x:atan2_(w), x:addcmul_(w, w), ...), copy_, fill_, lerp_,
  -- masked_fill_, clamp_ and the scatter/index family.
  it("is refused under grad mode, naming the method and the operand, and x is left as it was", function()
    local w = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
    local x = fp8.tensor({ 4, 5, 6 })
    U.fails_with({ "mul_: other requires grad", "y = x:mul(...)", "fp8.no_grad" }, function() return x:mul_(w) end)
    assert.same({ 4, 5, 6 }, x:totable())
    assert.are.equal(0, x._version)
    U.fails_with("add_: other is part of an autograd graph", function() return x:add_(w * 2) end)
    U.fails_with("atan2_: argument 1 requires grad", function() return x:atan2_(w) end)
    U.fails_with("hypot_: argument 1 requires grad", function() return x:hypot_(w) end)
    U.fails_with("addcmul_: argument 1 requires grad", function() return x:addcmul_(w, w) end)
    U.fails_with("pow_: argument 1 requires grad", function() return x:pow_(w) end)
    U.fails_with("copy_: the source requires grad", function() return x:copy_(w) end)
    U.fails_with("fill_: value is part of an autograd graph", function() return x:fill_(w:sum()) end)
    U.fails_with("lerp_: end requires grad", function() return x:lerp_(w, 0.5) end)
    U.fails_with("lerp_: weight requires grad", function() return x:lerp_(fp8.zeros(3), w) end)
    U.fails_with("clamp_: min requires grad", function() return x:clamp_(w, nil) end)
    U.fails_with("clamp_: max requires grad", function() return x:clamp_({ max = w }) end)
    U.fails_with("masked_fill_: value is part", function() return x:masked_fill_(fp8.tensor({ 1, 0, 1 }), w:sum()) end)
    U.fails_with("index_add_: the source requires grad", function()
      return x:index_add_(1, fp8.tensor({ 0, 1, 2 }), w)
    end)
    assert.same({ 4, 5, 6 }, x:totable())
    assert.are.equal(0, x._version)
  end)

  it("is taken under fp8.no_grad, and for the comparisons and logical ops (no gradient in torch either)", function()
    local w = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
    local x = fp8.tensor({ 4, 5, 6 })
    fp8.no_grad(function() x:mul_(w); x:copy_(x + w) end)
    assert.same({ 5, 12, 21 }, x:totable())
    assert.same({ 0, 1, 0 }, fp8.tensor({ 4, 2, 6 }):eq_(w):totable())
    assert.same({ 0, 0, 1 }, fp8.tensor({ 1, 0, 1 }):logical_xor_(w:lt(2)):totable())
    assert.same({ 2, 8, 18 }, fp8.tensor({ 1, 2, 3 }):mul_(w:detach() * 2):totable())
  end)
end)
