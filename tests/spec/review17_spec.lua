-- Found on 2026-12-07 (stop 100): stop 99's code read again as a reviewer who assumes it is wrong (conv2d's backward
-- by oneDNN and its primitive cache, the norms' rescue in the core and its CUDA kernels, the LR schedulers' torch
-- state, the profiler's restart, fp8.opts.strict_functions and nn.Parameter, clamp, bf16 add/mul, gather in place,
-- tanh). docs/robustness.md, "Stop 99's code read again (stop 100)".
local nn = fp8.nn

describe("nn.Parameter of a tensor an op made", function()
  -- torch 2.15: nn.Parameter(a * 2) and nn.Parameter(a * 2, requires_grad=False) are leaves sharing the data
  -- (Parameter is data.detach() with the flag set); here the first came back with its history, which a module then
  -- refused, and the second raised requires_grad's own message at lua/fp8/nn/init.lua's line.
  it("gives a new leaf sharing the data, with the flag asked", function()
    local a = fp8.tensor { 1, 2, 3 }:requires_grad_()
    local t = a * 2
    local p = nn.Parameter(t)
    assert.is_true(p:is_leaf())
    assert.is_true(p:requires_grad())
    assert.is_false(t:is_leaf())   -- t itself keeps its history
    fp8.no_grad(function() p:mul_(0.5) end)
    assert.are.same({ 1, 2, 3 }, t:tolist())   -- the same data
    local q = nn.Parameter(a * 2, false)
    assert.is_true(q:is_leaf())
    assert.is_false(q:requires_grad())
    local m = nn.Linear(3, 2)
    m.weight = nn.Parameter(fp8.ones { 2, 3 }:requires_grad_() * 1)   -- a module takes it
    assert.are.equal(2, #m:parameters())
    -- a leaf is still marked in place and returned as it is
    local w = fp8.zeros { 2 }
    assert.are.equal(w, nn.Parameter(w))
    assert.is_true(w:requires_grad())
    assert.are.equal(w, nn.Parameter(w, false))
    assert.is_false(w:requires_grad())
  end)

  it("refuses an FP8 tensor that would require grad by its own name", function()
    local x8 = fp8.ones { 3 }:quantize("e4m3")
    local ok, err = pcall(nn.Parameter, x8)
    assert.is_false(ok)
    assert.truthy(err:find("^Parameter: an e4m3 tensor cannot require gradients"), err)
    assert.is_false(nn.Parameter(x8, false):requires_grad())
  end)
end)
