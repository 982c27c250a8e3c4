-- Found on 2026-12-06 (stop 96): stop 95's speed code and test runner read again line by line (opspeed2's
-- fl_sum_squares, fl_logsumexp and FL_OP_RSQRT, the 16-lane sum, the exp/log plain blocks, run-tests.sh's C tests
-- beside the specs, FL_TEST_QUICK). docs/robustness.md, "Stop 95's speed code and test runner read again (stop 96)".
-- (The C side: tests/c/test_fused_reduce.c, and test_format.c's quick sample.)

describe("review13: logsumexp's private form takes one dim", function()
  -- x:_logsumexp(nil) passed luaL_checkany and reached core/ops.c as FL_ALL_DIMS (-1000), whose shape it read out of
  -- bounds: [2, 3] came back unreduced with values of no meaning (keepdim), or 'shape [2] is invalid for a tensor of
  -- 6 elements', or 'dim -999 of tensor [5] is empty'
  it("refuses nil as a dim, with or without keepdim, naming the problem", function()
    local msg = "logsumexp: expected one dim to reduce, got none (all dims)"
    for _, shape in ipairs({ { 2, 3 }, { 5 }, { 2, 3, 4 } }) do
      local x = fp8.randn(shape)
      assert.has_error(function() x:_logsumexp(nil) end, msg)
      assert.has_error(function() x:_logsumexp(nil, true) end, msg)
      assert.has_error(function() x:_logsumexp(nil, false) end, msg)
    end
  end)

  it("keeps its public form's answers: dim required, one dim through the core, a list of dims", function()
    local x = fp8.tensor({ { 1, 2, 3 }, { -math.huge, 0, math.huge } })
    assert.has_error(function() x:logsumexp() end, "logsumexp: dim is required (torch's: the dim to reduce), got nil")
    local r = x:logsumexp(2):tolist()
    assert.are.equal(math.huge, r[2])
    assert.is_true(math.abs(r[1] - 3.40760596444438) < 1e-6)
    assert.are.same({ 2, 1 }, x:logsumexp(2, true):shape())
  end)
end)
