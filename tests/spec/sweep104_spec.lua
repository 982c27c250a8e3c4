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

describe("an in-place method's released operand", function()
  -- the check for an operand that requires grad called v:requires_grad() on it first, whose own refusal named
  -- requires_grad ("calling 'requires_grad' on bad self"), not the method the user called
  local function freed(v) v:free(); return v end
  it("is named by the method and the argument", function()
    local cases = {
      { "clamp_", "min", function() return fp8.tensor { 1, 2, 3 }:clamp_(freed(fp8.tensor { 2 })) end },
      { "clamp_", "min", function() return fp8.tensor { 1, 2, 3 }:clamp_ { min = freed(fp8.tensor { 2 }) } end },
      { "clamp_", "max", function() return fp8.tensor { 1, 2, 3 }:clamp_(0, freed(fp8.tensor { 2 })) end },
      { "masked_fill_", "value", function()
        return fp8.tensor { 1, 2, 3 }:masked_fill_(fp8.tensor { 1, 0, 1 }:gt(0), freed(fp8.tensor(2)))
      end },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(c[3])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[1] .. ": " .. c[2] .. " has been released", 1, true), err)
    end
  end)
end)
