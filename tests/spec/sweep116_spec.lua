-- Found on 2026-12-07 (stop 102): the hostile sweep's new values (83-93) over the whole API, the rest of their calls
-- (tests/fuzz/api_sweep.lua, seed 116, ASan + UBSan), and the ends stop 101 left: index_select at 0-d (torch 2.15's
-- rules, tests/data/sweep116_torch.lua from scripts/gen_sweep116.py), options tables that are proxies, and
-- `fp8lab test`'s status when its child is killed by a signal.
-- docs/robustness.md, "The hostile sweep's new values, the rest (stop 102)".
local U = dofile("tests/spec/helpers/util.lua")

local function err_of(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok)
  return tostring(err)
end

describe("index_select at 0-d, as torch 2.15's", function()
  local cases = dofile("tests/data/sweep116_torch.lua")
  local function idx(c)
    if c.index_0d then return fp8.tensor(c.index) end
    if #c.index == 0 then return fp8.zeros { 0 } end
    return fp8.tensor(c.index)
  end
  local function flat(t)
    if t:numel() == 0 then return {} end
    return t:reshape { -1 }:tolist()
  end
  for i, c in ipairs(cases) do
    it(("case %d: dim %d, index %s"):format(i, c.dim, c.index_0d and "0-d" or "a list"), function()
      local x = fp8.tensor(c.x):requires_grad(true)
      local dim = c.dim >= 0 and c.dim + 1 or c.dim   -- torch's 0-based dim as fp8's 1-based one
      if c.raises then
        local e = err_of(x.index_select, x, dim, idx(c))
        assert.truthy(e:find("index_select: ", 1, true), e)
        return
      end
      local r = x:index_select(dim, idx(c))
      assert.are.same(c.shape, r:shape())
      assert.are.same(c.values, flat(r))
      ;(r * 3):sum():backward()
      assert.are.same(c.grad, flat(x.grad))
      assert.are.same(x:shape(), x.grad:shape())
    end)
  end
  it("names the 0-d rules in its refusals", function()
    local x = fp8.tensor(5)
    assert.truthy(err_of(x.index_select, x, 1, fp8.tensor { 0, 0 })
      :find("index_select: the index into a 0-d tensor must have exactly 1 element, got 2", 1, true))
    assert.truthy(err_of(x.index_select, x, 2, fp8.tensor(0))
      :find("index_select: dim must be in 1..1 or -1..-1 (a 0-d tensor's one implicit dim), got 2", 1, true))
    assert.truthy(err_of(x.index_select, x, 1, fp8.zeros { 1, 1 })
      :find("index_select: the index must be 1-d (or 0-d), got [1, 1]", 1, true))
  end)
end)
