-- Found on 2026-12-06 (stop 94): a differential fuzzer of the tensor ops against PyTorch 2.15
-- (scripts/diff_ops_torch.py: random ops on non-contiguous views, broadcasting, 0-d and empty tensors, fp32/bf16/fp16,
-- values and gradients). docs/robustness.md, "Tensor ops against PyTorch by a differential fuzzer (stop 94)".
-- The expected values are torch's, from the python lines quoted beside each case (/opt/torch2/bin/python, torch 2.15).

describe("masked_select broadcasts the tensor and the mask together (torch.masked_select)", function()
  it("a mask larger than the tensor repeats its elements; the gradient sums back", function()
    -- x = torch.tensor([[1., 2.]], requires_grad=True); m = torch.tensor([[1, 0], [1, 1], [0, 1]]).bool()
    -- y = x.masked_select(m)  # [1, 1, 2, 2]; y.backward(torch.tensor([1., 2, 3, 4])); x.grad  # [[3, 7]]
    local x = fp8.tensor { { 1, 2 } }:requires_grad_()
    local y = x:masked_select(fp8.tensor { { 1, 0 }, { 1, 1 }, { 0, 1 } })
    assert.are.same({ 1, 1, 2, 2 }, y:totable())
    y:backward(fp8.tensor { 1, 2, 3, 4 })
    assert.are.same({ { 3, 7 } }, x.grad:totable())
  end)
  it("a 0-d tensor under a 2-d mask, and a function form", function()
    -- a = torch.tensor(5., requires_grad=True); y = a.masked_select(torch.tensor([[1, 0, 1], [1, 1, 1]]).bool())
    -- y  # [5, 5, 5, 5, 5]; y.sum().backward(); a.grad  # 5
    local a = fp8.tensor(5.0):requires_grad_()
    local y = fp8.masked_select(a, fp8.tensor { { 1, 0, 1 }, { 1, 1, 1 } })
    assert.are.same({ 5, 5, 5, 5, 5 }, y:totable())
    y:sum():backward()
    assert.are.equal(5, a.grad:item())
  end)
  it("shapes that do not broadcast are refused naming both", function()
    local ok, err = pcall(function() return fp8.tensor { 1, 2, 3 }:masked_select(fp8.tensor { 1, 0 }) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("masked_select: the mask's shape [2] and the tensor's [3] do not broadcast together",
      1, true))
  end)
end)

describe("cat's left-out 1-d empty tensor still counts in the result's dtype (torch's type promotion)", function()
  it("an fp32 torch.tensor([]) before a bf16 tensor gives fp32, the gradient reaching the bf16 one", function()
    -- b = torch.tensor([1.5, 2.5]).bfloat16().requires_grad_(); y = torch.cat([torch.tensor([]), b])
    -- y.dtype  # torch.float32; (y * torch.tensor([2., 3.])).sum().backward(); b.grad  # [2, 3]
    local b = fp8.tensor { 1.5, 2.5 }:to("bf16"):requires_grad_()
    local y = fp8.cat { fp8.tensor {}, b }
    assert.are.equal("fp32", y:dtype())
    assert.are.same({ 1.5, 2.5 }, y:totable())
    ;(y * fp8.tensor { 2, 3 }):sum():backward()
    assert.are.same({ 2, 3 }, b.grad:totable())
    -- torch.cat([b, torch.tensor([]).half()]).dtype  # torch.float32
    assert.are.equal("fp32", fp8.cat({ b, fp8.tensor({}):to("fp16") }):dtype())
    -- torch.cat([torch.tensor([]).bfloat16(), b]).dtype  # torch.bfloat16
    assert.are.equal("bf16", fp8.cat({ fp8.tensor({}):to("bf16"), b }):dtype())
  end)
end)

describe("hypot's gradient beside an infinity (torch's x/h)", function()
  it("the finite operand gets 0, the infinite one NaN, as torch's", function()
    -- a = torch.tensor([1., inf, -inf, 3.], requires_grad=True); b = torch.tensor([inf, 1., 2., 4.], requires_grad=True)
    -- torch.hypot(a, b).sum().backward(); a.grad  # [0, nan, nan, 0.6]; b.grad  # [nan, 0, 0, 0.8]
    local a = fp8.tensor { 1, math.huge, -math.huge, 3 }:requires_grad_()
    local b = fp8.tensor { math.huge, 1, 2, 4 }:requires_grad_()
    local y = a:hypot(b)
    assert.are.same({ math.huge, math.huge, math.huge, 5 }, y:totable())
    y:sum():backward()
    local ga, gb = a.grad:totable(), b.grad:totable()
    assert.are.equal(0, ga[1]); assert.is_true(ga[2] ~= ga[2]); assert.is_true(ga[3] ~= ga[3])
    assert.is_true(math.abs(ga[4] - 0.6) < 1e-6)
    assert.is_true(gb[1] ~= gb[1]); assert.are.equal(0, gb[2]); assert.are.equal(0, gb[3])
    assert.is_true(math.abs(gb[4] - 0.8) < 1e-6)
  end)
end)

describe("remainder's gradient for the divisor is -g·(a // b), torch's floor division", function()
  it("1 % 0.1 takes 9 of fp32's 0.1 (1/0.1 rounds up to 10), and -1.5 % inf takes -1", function()
    -- a = torch.tensor([1.0, -1.4971, 7.0, 0.3, 5, -0.0, 3, 0, -0.5], requires_grad=True)
    -- b = torch.tensor([0.1, inf, 0.7, 0.1, 0, 2, -2, -3, 4], requires_grad=True)
    -- a.remainder(b).sum().backward(); b.grad  # [-9, 1, -10, -3, -inf, 0, 2, 0, 1]; a.grad  # all 1
    local a = fp8.tensor { 1.0, -1.4971, 7.0, 0.3, 5, -0.0, 3, 0, -0.5 }:requires_grad_()
    local b = fp8.tensor { 0.1, math.huge, 0.7, 0.1, 0, 2, -2, -3, 4 }:requires_grad_()
    a:remainder(b):sum():backward()
    local want = { -9, 1, -10, -3, -math.huge, 0, 2, 0, 1 }
    local got = b.grad:totable()
    for i = 1, #want do
      assert.are.equal(want[i], got[i], "b.grad[" .. i .. "]")
      if want[i] == 0 then assert.are.equal(1 / want[i], 1 / got[i], "the sign of b.grad[" .. i .. "]") end
    end
    assert.are.same({ 1, 1, 1, 1, 1, 1, 1, 1, 1 }, a.grad:totable())
    -- x = torch.tensor([0.1, 0.7], requires_grad=True); (1.0 % x) has no derivative in torch (scalar first);
    -- here -(1 // x): [-9, -1], the value 1 - (1 // x)·x's
    local x = fp8.tensor { 0.1, 0.7 }:requires_grad_()
    ;(1.0 % x):sum():backward()
    assert.are.same({ -9, -1 }, x.grad:totable())
  end)
end)

describe("cov and corrcoef of a single row are 0-d, as torch's (it squeezes the [1, 1] result)", function()
  it("cov, its gradient, corrcoef", function()
    -- x = torch.tensor([[1., 2, 4]], requires_grad=True); c = torch.cov(x); c  # tensor(2.3333), shape []
    -- c.backward(); x.grad  # [[-1.3333, -0.3333, 1.6667]]; torch.corrcoef(x.detach())  # tensor(1.)
    local x = fp8.tensor { { 1, 2, 4 } }:requires_grad_()
    local c = fp8.cov(x)
    assert.are.same({}, c:shape())
    assert.is_true(math.abs(c:item() - 7 / 3) < 1e-6)
    c:backward()
    local g = x.grad:totable()[1]
    for i, w in ipairs { -4 / 3, -1 / 3, 5 / 3 } do assert.is_true(math.abs(g[i] - w) < 1e-6) end
    local r = fp8.corrcoef(x:detach())
    assert.are.same({}, r:shape())
    assert.are.equal(1, r:item())
    -- torch.cov(torch.tensor([[1., 2, 4], [0, 1, 1]])).shape  # [2, 2]: two variables stay a matrix
    assert.are.same({ 2, 2 }, fp8.cov(fp8.tensor { { 1, 2, 4 }, { 0, 1, 1 } }):shape())
  end)
end)

describe("scaled_dot_product_attention's attn_mask must broadcast to the scores (torch refuses more query rows)", function()
  it("a [T, T] mask beside a one-token q is refused; masks that broadcast are taken", function()
    -- q, k, v = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 3, 4), torch.randn(2, 3, 3, 4)
    -- F.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(2, 3))
    --   RuntimeError: output with shape [2, 3, 1, 3] doesn't match the broadcast shape [2, 3, 2, 3]
    -- (fp8lab returned a [2, 3, 2, 4] output, two query rows for one)
    local F = fp8.nn.functional
    local q, k, v = fp8.randn { 2, 3, 1, 4 }, fp8.randn { 2, 3, 3, 4 }, fp8.randn { 2, 3, 3, 4 }
    local ok, err = pcall(F.scaled_dot_product_attention, q, k, v, { attn_mask = fp8.zeros { 2, 3 } })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("attn_mask [2, 3] does not broadcast to the scores [B, H, Tq, Tk] = [2, 3, 1, 3]",
      1, true))
    for _, m in ipairs { fp8.zeros { 1, 3 }, fp8.zeros { 3, 1, 3 }, fp8.zeros { 2, 1, 1, 1 } } do
      assert.are.same({ 2, 3, 1, 4 }, F.scaled_dot_product_attention(q, k, v, { attn_mask = m }):shape())
    end
  end)
end)
