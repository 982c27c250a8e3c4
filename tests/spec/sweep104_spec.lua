-- Found on 2026-12-06 (stop 96): the hostile API sweep (tests/fuzz/api_sweep.lua, seed 104, ASan + UBSan) over what
-- stop 95 added (the in-place tensor methods, the generator's state, hypot, sum_squares/logsumexp/rsqrt, the
-- schedulers' resume, clip_grad_norm_), and hand-written hostile cases for the in-place methods.
-- docs/robustness.md, "The hostile sweep over stop 95's additions (stop 96)".

describe("x:_logsumexp without a dim", function()
  -- the core reduced one dim and took FL_ALL_DIMS (-1000), the binding's "no dim", as an index: UBSan's "index -1000 out
  -- of bounds for type 'int64_t [8]'" (core/ops.c), a plain build's read of the memory before the shape
  it("is refused by the core, naming what it expects, and one dim still reduces", function()
    local x = fp8.ones { 2, 3 }
    local ok, err = pcall(function() return x:_logsumexp(nil) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("logsumexp: expected one dim", 1, true), err)
    ok, err = pcall(function() return x:_logsumexp() end)
    assert.is_false(ok)
    local r = x:_logsumexp(2)
    assert.are.same({ 2 }, r:shape())
    assert.are.equal(x:logsumexp(2):tolist()[1], r:tolist()[1])
  end)
end)
