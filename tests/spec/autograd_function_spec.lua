-- autograd_function_spec.lua — fp8.autograd.Function (torch.autograd.Function): values and gradients as torch's
-- rules give them, the ctx (save_for_backward and its version check, needs_input_grad, mark_non_differentiable,
-- set_materialize_grads, setup_context), results that keep the forward's bits, what the result's graph keeps alive,
-- and the refusals.
local U = dofile("tests/spec/helpers/util.lua")
local F = fp8.autograd.Function
local R = require "fp8._memory"

local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end

local Square = F { name = "Square",
  forward = function(ctx, x) ctx:save_for_backward(x); return x * x end,
  backward = function(ctx, g) local x = ctx.saved_tensors[1]; return g * 2 * x end }

describe("fp8.autograd.Function", function()
  it("gives the values and gradients of the same ops written out, bit for bit, and names its node", function()
    fp8.manual_seed(1)
    local x = fp8.randn(5, 7):requires_grad(true)
    local w = fp8.randn(5, 7)
    local y = Square.apply(x)
    assert.are.equal("SquareBackward", y:grad_fn())
    assert.is_true(y:requires_grad())
    local l1 = (y * w):sum()
    l1:backward()
    local g1 = x.grad:clone()
    x.grad = nil
    local l2 = (x * x * w):sum()
    l2:backward()
    assert.are.same(g1:totable(), x.grad:totable())
    assert.are.same((x * x):totable(), y:totable())
    -- called as a function too; through fp8.autograd.grad
    local gx = fp8.autograd.grad(Square(x):sum(), x)
    assert.are.same((x * 2):totable(), gx:totable())
  end)

  it("returns the forward's bits: -0.0, infinities and NaN pass through the link as they are", function()
    local Id = F { forward = function(_, a) return a:clone() end, backward = function(_, g) return g end }
    local x = fp8.tensor({ -0.0, math.huge, -math.huge, 0 / 0, 1.5 }):requires_grad(true)
    local y = Id(x)
    local v = y:totable()
    assert.are.equal(-math.huge, 1 / v[1])
    assert.are.equal(math.huge, v[2])
    assert.are.equal(-math.huge, v[3])
    assert.is_true(v[4] ~= v[4])
    assert.are.equal(1.5, v[5])
    y:sum():backward()
    assert.are.same({ 1, 1, 1, 1, 1 }, x.grad:totable())
  end)

  it("takes several arguments and results, numbers among them; unused results' gradients are zeros or nil", function()
    local seen
    local MulAdd = F {
      forward = function(ctx, a, b, k)
        ctx:save_for_backward(a, b)
        ctx.k = k
        assert.are.same({ n = 3, true, true, false }, ctx.needs_input_grad)
        return a * b * k, a + b, "tag"
      end,
      backward = function(ctx, gp, gq, gtag)
        seen = { gp:totable(), gq:totable(), gtag }
        local a, b = ctx.saved_tensors[1], ctx.saved_tensors[2]
        return gp * b * ctx.k + gq, gp * a * ctx.k + gq, nil
      end }
    local a, b = fp8.tensor({ 1, 2 }):requires_grad(true), fp8.tensor({ 3, 4 }):requires_grad(true)
    local p, q, tag = MulAdd(a, b, 5)
    assert.are.equal("tag", tag)
    local loss = (p * 2 + q):sum()
    loss:backward()
    assert.are.same({ { 2, 2 }, { 1, 1 } }, { seen[1], seen[2] })
    assert.is_nil(seen[3])
    assert.are.same({ 31, 41 }, a.grad:totable())
    assert.are.same({ 11, 21 }, b.grad:totable())
    -- q unused: its gradient comes as zeros (materialized), or nil after ctx:set_materialize_grads(false)
    a.grad, b.grad = nil, nil
    local p2 = MulAdd(a, b, 1)
    p2:sum():backward()
    assert.are.same({ 0, 0 }, seen[2])
    local got
    local Lazy = F {
      forward = function(ctx, x) ctx:set_materialize_grads(false); return x * 2, x * 3 end,
      backward = function(_, g1, g2) got = { g1 ~= nil, g2 ~= nil }; return g1 * 2 end }
    local r1 = Lazy(a)
    r1:sum():backward()
    assert.are.same({ true, false }, got)
  end)

  it("hands a result's gradient in the result's dtype, and sums a broadcast gradient down to the argument", function()
    local dt
    local ToBf16 = F { forward = function(_, x) return x:to("bf16") end,
      backward = function(_, g) dt = g:dtype(); return g end }
    local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
    local y = ToBf16(x)
    assert.are.equal("bf16", y:dtype())
    y:to("fp32"):sum():backward()
    assert.are.equal("bf16", dt)
    assert.are.equal("fp32", x.grad:dtype())
    local Wide = F { forward = function(_, v) return v:clone() end,
      backward = function(_, g) return g:expand({ 4, 2, 3 }) end }
    local v = fp8.tensor({ { 1, 2, 3 } }):requires_grad(true)
    Wide(v):sum():backward()
    assert.are.same({ { 8, 8, 8 } }, v.grad:totable())
  end)

  it("takes torch 2's setup_context form, and mark_non_differentiable results carry no gradient", function()
    local Scale = F {
      forward = function(x, k) return x * k, x:argmax() end,
      setup_context = function(ctx, inputs, output)
        assert.are.equal(2, #output)
        ctx.k = inputs[2]
        ctx:mark_non_differentiable(output[2])
      end,
      backward = function(ctx, g) return g * ctx.k, nil end }
    local x = fp8.tensor({ 1, 5, 2 }):requires_grad(true)
    local y, idx = Scale(x, 3)
    assert.is_false(idx:requires_grad())
    assert.is_true(y:requires_grad())
    y:sum():backward()
    assert.are.same({ 3, 3, 3 }, x.grad:totable())
  end)

  it("a straight-through FP8 cast: the forward on the E4M3 grid, the gradient passed as it is", function()
    local STE = F { name = "FakeQuantE4M3",
      forward = function(_, x) return x:quantize("e4m3", { scale = 1 }):dequantize() end,
      backward = function(_, g) return g end }
    local x = fp8.tensor({ 0.1, 1000, -3.3 }):requires_grad(true)
    local y = STE(x)
    assert.are.same({ 0.1015625, 448, -3.25 }, y:totable())
    local loss = (y * fp8.tensor({ 1, 2, 3 })):sum()
    loss:backward()
    assert.are.same({ 1, 2, 3 }, x.grad:totable())
  end)

  it("docs/concepts.md's example: the gradient cast to E5M2 without a scale loses what is under 2^-16", function()
    local GradE5M2 = F { name = "GradE5M2",
      forward = function(_, x) return x:clone() end,
      backward = function(_, g) return g:quantize("e5m2", { scale = 1 }):dequantize() end }
    local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
    local loss = (GradE5M2(x) * fp8.tensor({ 1e-6, 3e-5, 1e-3 })):sum()
    loss:backward()
    assert.are.same({ 0, 2 ^ -15, 2 ^ -10 }, x.grad:totable())
  end)

  it("runs again under retain_graph, not at all without gradients, and keeps no argument it did not save", function()
    local x = fp8.tensor({ 1, 2 }):requires_grad(true)
    local l = Square(x):sum()
    l:backward(nil, { retain_graph = true })
    l:backward()
    assert.are.same({ 4, 8 }, x.grad:totable())
    local y = fp8.no_grad(function() return Square(x) end)
    assert.is_false(y:requires_grad())
    assert.is_nil(y:grad_fn())
    -- an argument nothing saved: its 4 MB go once the caller drops it, though the result's graph lives on
    local Double = F { forward = function(_, a) return a * 2 end, backward = function(_, g) return g * 2 end }
    local w = fp8.ones(1000):requires_grad(true)
    local base = live()
    local h = w:expand({ 1000, 1000 }) * 2   -- 4 MB, made by an op that saves nothing: only the link could keep it
    local out = Double(h)
    h = nil
    local kept = live() - base
    assert.is_true(kept < 4000000 + 100000, ("%d bytes live: the argument was kept"):format(kept))
    out:sum():backward()
    assert.are.same(4000, w.grad:totable()[1])
  end)

  it("refuses a saved tensor written in place since the forward, as torch's version check", function()
    local w = fp8.tensor({ 1, 2 }):requires_grad(true)
    local a = w * 1
    local y = Square(a)
    assert.are.equal(0, a._version)
    fp8.no_grad(function() a:mul_(2) end)
    assert.are.equal(1, a._version)
    local loss = y:sum()
    U.fails_with("fp8.autograd.Function 'Square': saved tensor 1 ([2]) has been modified by an in-place operation "
      .. "since forward saved it: it is at version 1; expected version 0", function() loss:backward() end)
  end)

  it("checks what backward returns: the count, a gradient for a number, the shape, the kind", function()
    local x = fp8.tensor({ 1, 2 }):requires_grad(true)
    local function fails(needle, backward, ...)
      local Fn = F { forward = function(_, a) return a * 1 end, backward = backward }
      local y = Fn(x, ...)
      local loss = y:sum()
      U.fails_with(needle, function() loss:backward() end)
    end
    fails("backward returned an incorrect number of gradients (expected 2, one per forward argument, got 1)",
      function(_, g) return g end, 7)
    fails("backward returned a tensor as gradient 2, but forward's argument 2 was 7, not a tensor: return nil there",
      function(_, g) return g, g end, 7)
    fails("backward returned an invalid gradient 1: got [5] but expected shape compatible with [2]",
      function() return fp8.ones(5) end)
    fails('backward returned "x" (a string) as gradient 1; expected a tensor (or nil)', function() return "x" end)
    fails("ctx:save_for_backward is for forward (or setup_context), not after it",
      function(ctx, g) ctx:save_for_backward(g); return g end)
  end)

  it("survives a hostile backward: an error, a freed gradient, a yield; runs inside a checkpoint and a backward",
    function()
    local x = fp8.tensor({ 1, 2 }):requires_grad(true)
    local function fails(needle, backward)
      local G = F { forward = function(_, a) return a * 1 end, backward = backward }
      local loss = G(x):sum()
      U.fails_with(needle, function() loss:backward() end)
    end
    fails("boom", function() error("boom") end)
    fails("backward's gradient 1 has been released", function(_, g) g:free(); return g end)
    local G = F { forward = function(_, a) return a * 1 end,
      backward = function(_, g) coroutine.yield(1); return g end }
    local co = coroutine.wrap(function() local l = G(x):sum(); l:backward() end)
    U.fails_with("a coroutine yielded inside it", co)
    -- a gradient computed with history comes in without it
    x.grad = nil
    local H = F { forward = function(_, a) return a * 1 end,
      backward = function(_, g) return fp8.enable_grad(function() return g * x end) end }
    H(x):sum():backward()
    assert.are.same({ 1, 2 }, x.grad:totable())
    assert.is_false(x.grad:requires_grad())
    -- inside fp8.utils.checkpoint: the recomputation's backward runs the Function's
    x.grad = nil
    local y = fp8.utils.checkpoint.checkpoint(function(a) return Square(a) * 3 end, x)
    y:sum():backward()
    assert.are.same({ 6, 12 }, x.grad:totable())
    -- a backward inside the Function's backward
    x.grad = nil
    local N = F { forward = function(_, a) return a * 1 end, backward = function(_, g)
      local w = fp8.ones(2):requires_grad(true)
      fp8.enable_grad(function() local l = (w * 3):sum(); l:backward() end)
      return g * w.grad
    end }
    N(x):sum():backward()
    assert.are.same({ 3, 3 }, x.grad:totable())
  end)

  it("refuses what it cannot do, by name", function()
    local x = fp8.ones(2):requires_grad(true)
    U.fails_with("fp8.autograd.Function: backward must be a function, got nil", F, { forward = print })
    U.fails_with("unknown option 'backwrd' (did you mean 'backward'?)", F, { forward = print, backward = print,
      backwrd = print })
    U.fails_with("jvp: forward-mode AD (jvp) is not supported", F, { forward = print, backward = print, jvp = print })
    U.fails_with("expected a table {forward=function(ctx, ...), backward=function(ctx, ...)}, got 5", F, 5)
    U.fails_with("not F:apply(x, ...)", function() local r = Square:apply(x); return r end)
    U.fails_with("ctx:mark_dirty is not supported", F { forward = function(ctx, a) ctx:mark_dirty(a); return a end,
      backward = print }, x)
    U.fails_with("save_for_backward: argument 2 is 3; it saves tensors",
      F { forward = function(ctx, a) ctx:save_for_backward(a, 3); return a end, backward = print }, x)
    U.fails_with("ctx.saved_tensors is the ctx's own",
      F { forward = function(ctx, a) ctx.saved_tensors = {}; return a end, backward = print }, x)
    local freed = fp8.ones(2):requires_grad(true)
    freed:free()
    U.fails_with("argument 1 has been released", Square, freed)
  end)
end)
