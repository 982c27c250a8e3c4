-- Gaps left after the fourth round of hand audits' dtype fixes (docs/robustness.md, "Audited by hand, fourth
-- round"): bf16/fp16 results where torch keeps the input's dtype, and mixed dtypes torch refuses promoted to fp32.
local fp8 = fp8 or require "fp8"
local F = fp8.nn.functional

local function bf(t) return fp8.tensor(t):to("bf16") end

describe("nll_loss with a weight of another dtype", function()
  it("promotes to fp32 (torch refuses), as the other losses' weights; one low dtype keeps it", function()
    local lp = fp8.tensor({ { -1.5, -0.5, -2.25 }, { -0.75, -3, -1 } })
    local t = fp8.tensor { 2, 0 }
    for _, red in ipairs { "mean", "sum", "none" } do
      -- a bf16 input beside fp32 weights gave bf16
      assert.are.equal("fp32", F.nll_loss(lp:to("bf16"), t, { weight = fp8.tensor { 1, 2, 3 }, reduction = red }):dtype())
      assert.are.equal("fp32", F.nll_loss(lp:to("fp16"), t, { weight = bf { 1, 2, 3 }, reduction = red }):dtype())
      assert.are.equal("fp32", F.nll_loss(lp, t, { weight = bf { 1, 2, 3 }, reduction = red }):dtype())
      assert.are.equal("bf16", F.nll_loss(lp:to("bf16"), t, { weight = bf { 1, 2, 3 }, reduction = red }):dtype())
    end
    -- (3·2.25 + 1·0.75) / 4 = 1.875, exact
    assert.are.equal(1.875, F.nll_loss(lp:to("bf16"), t, { weight = fp8.tensor { 1, 2, 3 } }):item())
  end)
end)
