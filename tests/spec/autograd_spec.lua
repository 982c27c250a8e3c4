-- autograd_spec.lua — the Lua autograd API end to end: requires_grad, t.grad, backward options,
-- no_grad/enable_grad, detach, zero_grad, autocast modes, the C NN ops (fp8.core._nn) and errors.
local fp8 = require "fp8"
local C = require("fp8.core")._nn
local U = dofile("tests/spec/helpers/util.lua")

local function close(a, b, tol) return math.abs(a - b) <= (tol or 1e-5) * (1 + math.abs(b)) end

describe("autograd", function()
  it("computes gradients of a scalar loss into t.grad", function()
    local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
    assert.is_true(x:requires_grad())
    assert.is_true(x:is_leaf())
    local y = (x * x + x * 3):sum()
    assert.are.equal("SumBackward", y:grad_fn())
    assert.is_false(y:is_leaf())
    y:backward()
    local g = x.grad:totable()
    for i, v in ipairs({ 1, 2, 3 }) do assert.is_true(close(g[i], 2 * v + 3)) end
    assert.is_true(x:grad() == x.grad)         -- t:grad() reads the same field
    U.fails_with("grad: takes no arguments; got 1 more argument", function() return x:grad(true) end)
  end)

  it("requires_grad_ is torch's spelling: true by default, returns the tensor, refuses a non-leaf", function()
    local x = fp8.tensor { 1, 2 }
    assert.are.equal(x, x:requires_grad_())
    assert.is_true(x:requires_grad())
    x:requires_grad_(false)
    assert.is_false(x:requires_grad())
    U.fails_with("expected a boolean, got number", x.requires_grad_, x, 1)
    local y = fp8.tensor({ 1 }):requires_grad_() * 2
    U.fails_with("only leaf tensors can change requires_grad", y.requires_grad_, y, false)
  end)

  it("abs backward is torch's g·sgn(x) (0 at 0 and at NaN since stop 102); sign() has a zero gradient", function()
    local x = fp8.tensor({ -2, 0, 3, -0.5, 0 / 0 }):requires_grad(true)
    local s = x:sign():totable()
    assert.are.same({ -1, 0, 1, -1 }, { s[1], s[2], s[3], s[4] })
    assert.is_true(s[5] ~= s[5])
    assert.are.equal("AbsBackward", x:abs():grad_fn())
    x:abs():backward(fp8.tensor({ 10, 20, 30, 40, 50 }))
    local g = x.grad:totable()
    assert.are.same({ -10, 0, 30, -40, 0 }, { g[1], g[2], g[3], g[4], g[5] })
    x.grad = nil
    x:sign():sum():backward()
    assert.are.same({ 0, 0, 0, 0, 0 }, x.grad:totable())
  end)

  it("accumulates across backward calls and zero_grad / t.grad = nil clears", function()
    local x = fp8.tensor({ 1, 2 }):requires_grad(true)
    x:sum():backward()
    x:sum():backward()
    assert.are.same({ 2, 2 }, x.grad:totable())
    x:zero_grad()
    assert.is_nil(x.grad)
    x:sum():backward()
    x.grad = nil
    assert.is_nil(x.grad)
    x.grad = fp8.tensor({ 5, 6 })
    assert.are.same({ 5, 6 }, x.grad:totable())
    assert.has_error(function() x.grad = fp8.zeros(3) end)
    assert.has_error(function() x.grad = 3 end)
  end)

  it("backward with an explicit gradient and retain_graph", function()
    local x = fp8.tensor({ 1, 2 }):requires_grad(true)
    local y = x * 2
    y:backward(fp8.tensor({ 1, 10 }), { retain_graph = true })
    assert.are.same({ 2, 20 }, x.grad:totable())
    y:backward(fp8.tensor({ 1, 1 }))
    assert.are.same({ 4, 22 }, x.grad:totable())
    local ok, err = pcall(function() y:backward(fp8.tensor({ 1, 1 })) end)
    assert.is_false(ok)
    assert.truthy(err:find("second time %(use retain_graph=true%)"))
  end)

  it("reports clear errors", function()
    local x = fp8.randn(4, 3):requires_grad(true)
    local ok, err = pcall(function() (x * 2):backward() end)
    assert.is_false(ok)
    assert.truthy(err:find("grad can be implicitly created only for scalar outputs; got shape [4, 3]", 1, true))
    ok, err = pcall(function() fp8.zeros(2):sum():backward() end)
    assert.truthy(err:find("does not require grad"))
    ok, err = pcall(function() x:sum():backward(nil, { retain = true }) end)
    assert.truthy(err:find("unknown option 'retain'"))
    ok, err = pcall(function() (x * 2):requires_grad(false) end)
    assert.truthy(err:find("only leaf tensors"))
    ok, err = pcall(function() x:requires_grad("yes") end)
    assert.truthy(err:find("expected a boolean"))
    ok, err = pcall(function() fp8.randn(4, 4):quantize("e4m3"):requires_grad(true) end)
    assert.truthy(err:find("cannot require gradients"))
  end)

  it("no_grad and enable_grad restore the mode, even on error", function()
    local x = fp8.tensor({ 1 }):requires_grad(true)
    local y, extra = fp8.no_grad(function(a) return x * a, "extra" end, 2)
    assert.is_false(y:requires_grad())
    assert.are.equal("extra", extra)
    assert.is_true(fp8.is_grad_enabled())
    local ok, err = pcall(fp8.no_grad, function() error("boom") end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("boom"))
    assert.is_true(fp8.is_grad_enabled())
    fp8.no_grad(function()
      assert.is_false(fp8.is_grad_enabled())
      fp8.enable_grad(function() assert.is_true((x * 2):requires_grad()) end)
      assert.is_false(fp8.is_grad_enabled())
    end)
    assert.is_true(fp8.set_grad_enabled(false))   -- returns the previous mode
    assert.is_false(fp8.is_grad_enabled())
    fp8.set_grad_enabled(true)
    assert.has_error(function() fp8.no_grad(42) end)
  end)

  it("detach shares data without history; views stay differentiable", function()
    local x = fp8.randn(2, 3):requires_grad(true)
    local d = x:detach()
    assert.is_false(d:requires_grad())
    local v = x:view(6)
    assert.are.equal("ViewBackward", v:grad_fn())
    local t = x:t()
    assert.are.equal("TransposeBackward", t:grad_fn())
    local w = fp8.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } })
    ;(t * w):sum():backward()
    assert.are.same({ { 1, 3, 5 }, { 2, 4, 6 } }, x.grad:totable())
    x:zero_grad()
    x[2]:sum():backward()            -- x[i] is a differentiable select
    assert.are.same({ { 0, 0, 0 }, { 1, 1, 1 } }, x.grad:totable())
  end)

  it("autocast dtype: set, query, validate", function()
    assert.are.equal("fp32", fp8.autocast_dtype())
    assert.are.equal("fp32", fp8.set_autocast_dtype("bf16"))
    local x, w = fp8.randn(8, 16), fp8.randn(4, 16):requires_grad(true)
    local y = C.linear(x, w)
    assert.are.equal("fp32", y:dtype())
    y:sum():backward()
    assert.are.equal("fp32", w.grad:dtype())
    fp8.set_autocast_dtype("fp32")
    local ok, err = pcall(fp8.set_autocast_dtype, "e4m3")
    assert.is_false(ok)
    assert.truthy(err:find("fp32, bf16, fp16"))
  end)

  it("a division's gradient to the divisor is finite where b² would overflow or underflow, as torch's", function()
    -- d(a/b)/db = -a/b²: torch computes -g·((a/b)/b); b·b is inf for |b| > 2^64 and 0 (or a subnormal) below 2^-63
    local a, b = fp8.tensor({ 1e25, 1e-20 }):requires_grad(true), fp8.tensor({ 1e25, 1e-20 }):requires_grad(true)
    ;(a / b):backward(fp8.ones(2))
    local g = b.grad:totable()
    assert.is_true(close(g[1], -1e-25), tostring(g[1]))   -- was -0 (g·a / inf)
    assert.is_true(close(g[2], -1e20), tostring(g[2]))    -- was off by 5e-6 relative (b² a subnormal)
    -- a number over a tensor: d(s/x)/dx = -s/x², here -1e-40 (a subnormal), not -0
    local x = fp8.tensor({ 1e20, 4 }):requires_grad(true)
    ;(1 / x):backward(fp8.ones(2))
    g = x.grad:totable()
    assert.is_true(g[1] < 0 and close(g[1], -1e-40, 1e-4), tostring(g[1]))
    assert.are.equal(-1 / 16, g[2])
  end)

  it("maximum, minimum, clamp and max/min route an inf or NaN gradient by selection, as torch's", function()
    -- these multiplied g by a 0/1 mask, so inf·0 put NaN into the elements that were not chosen
    local g = fp8.tensor({ 1 / 0, 0 / 0, 1 / 0 })
    local cases = {
      { "maximum", function(x) return x:maximum(fp8.zeros(3)) end, { 0, nil, 1 / 0 } },
      { "maximum(number)", function(x) return x:maximum(0) end, { 0, nil, 1 / 0 } },
      { "minimum(number)", function(x) return x:minimum(1) end, { 1 / 0, 0, 1 / 0 } },
      { "clamp", function(x) return x:clamp(0, 1) end, { 0, 0, 1 / 0 } },
      { "max()", function(x) return x:max():reshape({ 1 }):expand(3) end, { 0, nil, 0 } },
      { "max(dim)", function(x) return (x:max(1, true)):expand(3) end, { 0, nil, 0 } },
      { "min()", function(x) return x:min():reshape({ 1 }):expand(3) end, { nil, 0, 0 } },
    }
    for _, c in ipairs(cases) do
      local x = fp8.tensor({ -1, 2, 0.5 }):requires_grad(true)
      c[2](x):backward(g)
      local got = x.grad:totable()
      for i = 1, 3 do
        if c[3][i] == nil then assert.is_true(got[i] ~= got[i], c[1] .. " element " .. i .. ": " .. tostring(got[i]))
        else assert.are.equal(c[3][i], got[i], c[1] .. " element " .. i) end
      end
    end
  end)

  it("a 0-d tensor's one implicit dim is 1 or -1, as torch's 0 and -1 (reductions, softmax, transpose)", function()
    local F = fp8.nn.functional
    for _, d in ipairs({ 1, -1 }) do
      local x = fp8.tensor(3):requires_grad(true)
      local v, i = x:max(d)
      assert.are.same({ {}, 3, 0 }, { v:shape(), v:item(), i:item() })
      assert.are.equal(3, x:sum(d, true):item())
      assert.are.equal(0, #x:mean({ d }):shape())
      assert.are.equal(0, x:argmin(d):item())
      assert.is_true(x:var(d):item() ~= x:var(d):item())   -- one element, correction 1: NaN, as torch's
      assert.are.equal(x, x:transpose(d, d))
      assert.are.equal(1, F.softmax(x, d):item())
      local y = F.log_softmax(x, d) * 2 + x:amax(d)
      assert.are.same({}, y:shape())
      y:backward()
      assert.are.equal(1, x.grad:item())   -- log_softmax of one element is constant: only amax's 1 flows
    end
    assert.has_error(function() fp8.tensor(3):sum(2) end,
      "sum: dim 2 out of range for a 0-d tensor (valid: 1 or -1, its one implicit dim)")
  end)

  describe("register_hook", function()
    it("a leaf's hook runs once with its whole gradient, before .grad; what it returns is used instead", function()
      local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
      local seen = {}
      local h = x:register_hook(function(g)
        seen[#seen + 1] = g:totable()
        return g * 10
      end)
      assert.is_true(math.type(h.id) == "integer")
      assert.matches("^RemovableHandle%(id=%d+%)$", tostring(h))
      ;((x * x):sum() + x:sum()):backward()    -- two uses: one call with 2x + 1
      assert.are.same({ { 3, 5, 7 } }, seen)
      assert.are.same({ 30, 50, 70 }, x.grad:totable())
      h:remove(); h:remove()                     -- a second remove does nothing
      x.grad = nil
      ;(x * 2):sum():backward()
      assert.are.same({ 2, 2, 2 }, x.grad:totable())
      assert.are.equal(1, #seen)
      do   -- a <close> handle removes it at the block's end (its __close takes the error object too: it failed)
        local hc <close> = x:register_hook(function(g) return g * 0 end)
      end
      x.grad = nil
      ;(x * 2):sum():backward()
      assert.are.same({ 2, 2, 2 }, x.grad:totable())
    end)

    it("a result's hook runs though the result itself is gone (collected before the backward), as torch's", function()
      -- torch keeps a result's hooks on its grad_fn; before 2026-12-02 they went with the tensor's Lua box, and a hook
      -- on an intermediate nothing held any more was silently skipped (activation checkpointing relies on it)
      local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
      local calls = 0
      local function make()
        local z = x * 2
        z:register_hook(function(g) calls = calls + 1; return g * 10 end)
        local h = z:register_hook(function() calls = calls + 100 end)
        h:remove()   -- a removed hook stays removed
        return (z * 3):sum()
      end
      local loss = make()
      collectgarbage(); collectgarbage()
      loss:backward()
      assert.are.equal(1, calls)
      assert.are.same({ 60, 60, 60 }, x.grad:totable())   -- 2 · (10 · 3)
      -- fp8.autograd.grad runs it too
      local y = make()
      collectgarbage(); collectgarbage()
      assert.are.same({ 60, 60, 60 }, fp8.autograd.grad(y, x):totable())
      assert.are.equal(2, calls)
    end)

    it("a result's hook changes the gradient that flows on, and what retain_grad keeps; hooks run in order", function()
      local a = fp8.tensor({ 1, 2 }):requires_grad(true)
      local m = a * 3
      local order = {}
      m:register_hook(function(g) order[#order + 1] = "first"; return g * 2 end)
      local h2 = m:register_hook(function(g) order[#order + 1] = "second"; assert.are.same({ 10, 10 }, g:totable()) end)
      m:retain_grad()
      ;(m * 5):sum():backward()
      assert.are.same({ "first", "second" }, order)
      assert.are.same({ 10, 10 }, m.grad:totable())
      assert.are.same({ 30, 30 }, a.grad:totable())   -- 3 · (2 · 5)
      h2:remove()
      -- a hook that removes the next one: that one is still called in this backward (torch 2.15 calls the hooks of a
      -- copy of the list taken as it starts: gaps15_spec; it was skipped until stop 98), not in the next
      local b = fp8.tensor({ 1 }):requires_grad(true)
      local calls, hb = {}, nil
      b:register_hook(function() calls[#calls + 1] = 1; hb:remove() end)
      hb = b:register_hook(function() calls[#calls + 1] = 2 end)
      ;(b * 1):sum():backward()
      assert.are.same({ 1, 2 }, calls)
      ;(b * 1):sum():backward()
      assert.are.same({ 1, 2, 1 }, calls)
    end)

    it("a leaf's hook added during a backward (by another hook) takes what reaches the leaf after it: none is lost",
      function()
      local x = fp8.tensor({ 1, 2 }):requires_grad(true)
      local a = x * 3
      a:register_hook(function() x:register_hook(function(gx) return gx * 10 end) end)
      ;(a * x):sum():backward()                 -- x's direct share (3x) came first, a's (3x) through the new hook
      assert.are.same({ 33, 66 }, x.grad:totable())
    end)

    it("a hook that runs backward through the graph under way is refused (it crashed), one that frees tensors is safe",
      function()
      local x = fp8.tensor({ 1, 2 }):requires_grad(true)
      local a = x * 3
      local loss = (a * a):sum()
      local inner
      a:register_hook(function() inner = select(2, pcall(function() loss:backward() end)) end)
      loss:backward()                            -- the outer one completes
      assert.matches("backward: the graph through MulBackward is being run by an unfinished backward", inner)
      assert.are.same({ 18, 36 }, x.grad:totable())
      local w = fp8.tensor({ 1, 2 }):requires_grad(true)
      local c = w * 3
      local l = (c * c):sum()
      c:register_hook(function(g) c:free(); w:free(); g:free() end)
      l:backward()                               -- the frees wait for the backward, which holds what it uses
      assert.is_true(w:is_released())
    end)

    it("stays on the tensor when its handle is dropped (torch's), and steers what the optimizer steps with", function()
      local w = fp8.tensor({ 1, 2 }):requires_grad(true)
      w:register_hook(function(g) return g * 0 end)
      collectgarbage(); collectgarbage()
      local opt = fp8.optim.SGD({ w }, { lr = 1 })
      ;(w * w):sum():backward()
      opt:step()
      assert.are.same({ 1, 2 }, w:totable())
    end)

    it("refuses what it cannot honour, naming it", function()
      U.fails_with("register_hook: the tensor does not require grad",
        function() fp8.tensor({ 1 }):register_hook(print) end)
      local z = fp8.tensor({ 1 }):requires_grad(true)
      U.fails_with("expected a function (hook), got number", function() z:register_hook(5) end)
      U.fails_with("register_hook: takes (hook); got 1 more argument", function() z:register_hook(print, 1) end)
      local cases = {
        { function() error("boom", 0) end, "backward: a tensor's hook raised: boom" },
        { function() return fp8.ones(2) end,
          "backward: a tensor's hook returned a tensor of shape [2] for a gradient of shape [1]" },
        { function() return 5 end, "backward: a tensor's hook returned number; it returns nothing, or a tensor" },
        { function(g) return g:quantize("e4m3") end, "backward: a tensor's hook returned an e4m3 tensor" },
      }
      for _, c in ipairs(cases) do
        local y = fp8.tensor({ 1 }):requires_grad(true)
        local h = y:register_hook(c[1])
        U.fails_with(c[2], function() (y * 2):sum():backward() end)
        h:remove()
      end
      -- a bf16 gradient returned is taken as fp32
      local y = fp8.tensor({ 1 }):requires_grad(true)
      y:register_hook(function(g) return g:to("bf16") end)
      ;(y * 3):sum():backward()
      assert.are.same({ 3 }, y.grad:totable())
    end)

    it("on an FP8Linear's output: shown the handed-over E5M2 gradient dequantized; a replacement goes on in fp32",
      function()
      local nn = fp8.nn
      local function run(hook)
        fp8.manual_seed(6)
        local m = fp8.convert_model(nn.Sequential(nn.Linear(32, 64), nn.Linear(64, 16)),
          { recipe = { backend = "te" } })
        local x = fp8.randn(8, 32)
        local h = fp8.fp8_autocast(function() return m[1](x) end)
        local got
        if hook then h:register_hook(function(g) got = g:clone(); return hook(g) end) end
        local c = fp8.randn(8, 16)
        fp8.fp8_autocast(function() (m[2]:forward_gelu(h) * c):sum():backward() end)
        return got, m[1].fp8_meta:state().dy_handovers, m[1].weight.grad:totable()
      end
      local _, handed0, w0 = run(nil)
      local seen, handed, w = run(function() end)
      assert.are.equal(1, handed0)
      assert.are.equal(1, handed)                -- kept: the FP8 gradient went on as it was
      assert.are.same(w0, w)
      assert.are.equal("fp32", seen:dtype())
      local _, handed2, wz = run(function(g) return g * 0 end)
      assert.are.equal(0, handed2)               -- replaced: the layer took an fp32 gradient
      for _, row in ipairs(wz) do for _, v in ipairs(row) do assert.are.equal(0, v) end end
    end)
  end)

  describe("register_post_accumulate_grad_hook", function()
    it("runs once per backward after .grad holds the whole sum, with the tensor itself (keyed tables find it)",
      function()
      local w = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
      local seen, by_param = {}, { [w] = "w" }
      local h = w:register_post_accumulate_grad_hook(function(p)
        seen[#seen + 1] = { rawequal(p, w), by_param[p], p.grad:totable() }
      end)
      assert.matches("^RemovableHandle%(id=%d+%)$", tostring(h))
      ;((w * w):sum() + w:sum()):backward()     -- two uses, one call, after both are added: 2w + 1
      assert.are.same({ { true, "w", { 3, 5, 7 } } }, seen)
      ;(w * 2):sum():backward()                  -- .grad accumulates across backwards; the hook sees the total
      assert.are.same({ 5, 7, 9 }, seen[2][3])
      h:remove(); h:remove()
      ;(w * 2):sum():backward()
      assert.are.equal(2, #seen)
      -- a tensor backward is called on directly (a leaf root) has one too
      local r = fp8.tensor({ 4 }):requires_grad(true)
      local calls = 0
      local hr <close> = r:register_post_accumulate_grad_hook(function(p)
        calls = calls + 1
        assert.are.same({ 1 }, p.grad:totable())
      end)
      r:backward()
      assert.are.equal(1, calls)
    end)

    it("runs after the leaf's gradient hooks, in the order added; a leaf outside the graph is not called", function()
      local w = fp8.tensor({ 1, 2 }):requires_grad(true)
      local other = fp8.tensor({ 1 }):requires_grad(true)
      local order = {}
      w:register_post_accumulate_grad_hook(function(p) order[#order + 1] = "post1 " .. p.grad:totable()[2] end)
      w:register_hook(function(g) order[#order + 1] = "grad"; return g * 10 end)
      w:register_post_accumulate_grad_hook(function() order[#order + 1] = "post2" end)
      other:register_post_accumulate_grad_hook(function() order[#order + 1] = "other" end)
      ;(w * 3):sum():backward()
      assert.are.same({ "grad", "post1 30.0", "post2" }, order)
    end)

    it("steps an optimizer per parameter during the backward (torch's optimizer-in-backward), as a step after it",
      function()
      local nn = fp8.nn
      local function model()
        fp8.manual_seed(3)
        return nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 2))
      end
      local x = fp8.randn(5, 6)
      local ref = model()
      local opt = fp8.optim.AdamW(ref:parameters(), { lr = 0.01 })
      for _ = 1, 3 do
        opt:zero_grad(); (ref(x) ^ 2):sum():backward(); opt:step()
      end
      local m = model()
      local opts = {}
      for _, p in ipairs(m:parameters()) do
        opts[p] = fp8.optim.AdamW({ p }, { lr = 0.01 })
        p:register_post_accumulate_grad_hook(function(q) opts[q]:step(); opts[q]:zero_grad() end)
      end
      for _ = 1, 3 do (m(x) ^ 2):sum():backward() end
      for i, p in ipairs(m:parameters()) do
        assert.is_nil(p.grad)
        assert.are.same(ref:parameters()[i]:totable(), p:totable())
      end
    end)

    it("help() finds both methods, a handle and its remove (the entry that documents them)", function()
      local help = require "fp8.help"
      local t = fp8.ones(2):requires_grad(true)
      local h, hp = t:register_hook(function() end), t:register_post_accumulate_grad_hook(function() end)
      for _, v in ipairs { t.register_hook, t.register_post_accumulate_grad_hook, h, h.remove, hp.remove } do
        local e = help.lookup(v)
        assert.are.equal("Tensor:backward", e and e.name)
      end
      h:remove(); hp:remove()
    end)

    it("refuses what it cannot honour, naming it", function()
      U.fails_with("register_post_accumulate_grad_hook: only a leaf tensor has its gradient accumulated into .grad; "
        .. "this one was made by MulBackward", function()
        (fp8.tensor({ 1 }):requires_grad(true) * 2):register_post_accumulate_grad_hook(print)
      end)
      U.fails_with("register_post_accumulate_grad_hook: the tensor does not require grad",
        function() fp8.tensor({ 1 }):register_post_accumulate_grad_hook(print) end)
      local z = fp8.tensor({ 1 }):requires_grad(true)
      U.fails_with("expected a function (hook), got number", function() z:register_post_accumulate_grad_hook(5) end)
      U.fails_with("register_post_accumulate_grad_hook: takes (hook); got 1 more argument",
        function() z:register_post_accumulate_grad_hook(print, 1) end)
      local cases = {
        { function() error("boom", 0) end, "backward: a tensor's post-accumulate-grad hook raised: boom" },
        { function(p) return p.grad end,
          "backward: a tensor's post-accumulate-grad hook returned a tensor; it returns nothing" },
      }
      for _, c in ipairs(cases) do
        local y = fp8.tensor({ 1 }):requires_grad(true)
        local h = y:register_post_accumulate_grad_hook(c[1])
        U.fails_with(c[2], function() (y * 2):sum():backward() end)
        h:remove()
      end
    end)
  end)

  describe("fp8.autograd.backward", function()
    it("is one backward from several tensors: each leaf's hook once with its whole gradient, a leaf among them too",
      function()
      local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
      local calls = 0
      x:register_hook(function() calls = calls + 1 end)
      local a, b = x * 2, (x * x):sum()
      fp8.autograd.backward({ a, b }, { fp8.ones(3) })          -- b's seed: ones (one element)
      assert.are.same({ 4, 6, 8 }, x.grad:totable())          -- 2 + 2x
      assert.are.equal(1, calls)
      x.grad = nil
      local c = (x * 3):sum()
      fp8.autograd.backward({ c, x }, { nil, fp8.tensor({ 10, 20, 30 }) })   -- x is a tensor and in c's graph
      assert.are.same({ 13, 23, 33 }, x.grad:totable())
      assert.are.equal(2, calls)
      local y = fp8.tensor({ 1 }):requires_grad(true)
      fp8.autograd.backward({ y, y }, { fp8.tensor({ 2 }), fp8.tensor({ 3 }) })   -- a leaf alone, listed twice
      assert.are.same({ 5 }, y.grad:totable())
      -- retain_graph and inputs= as backward's
      local w = fp8.tensor({ 1, 2 }):requires_grad(true)
      local m = w * w
      local l1, l2 = m:sum(), (m * 2):sum()
      fp8.autograd.backward({ l1, l2 }, { retain_graph = true, inputs = { m } })
      assert.is_nil(w.grad)
      assert.are.same({ 3, 3 }, m.grad:totable())
      fp8.autograd.backward({ l1, l2 })
      assert.are.same({ 6, 12 }, w.grad:totable())             -- 3 · 2w
      U.fails_with("backward: trying to backward through the graph a second time", function()
        fp8.autograd.backward(l1)
      end)
    end)

    it("refuses what it cannot honour, naming it", function()
      local x = fp8.tensor({ 1, 2 }):requires_grad(true)
      local y = (x * x):sum()
      U.fails_with("backward: tensors is empty", function() fp8.autograd.backward({}) end)
      U.fails_with("backward: create_graph=true is not supported",
        function() fp8.autograd.backward(y, { create_graph = true }) end)
      U.fails_with("backward: grad_variables is torch's old name",
        function() fp8.autograd.backward(y, { grad_variables = {} }) end)
      U.fails_with("backward: unknown option 'retain'", function() fp8.autograd.backward(y, { retain = true }) end)
      U.fails_with("backward: grad can be implicitly created only for scalar outputs; got shape [2]",
        function() fp8.autograd.backward(x * 2) end)
      U.fails_with("backward: 2 grad_tensors for 1 tensors",
        function() fp8.autograd.backward(y, { fp8.ones({}), fp8.ones({}) }) end)
      U.fails_with("backward: tensors[2] is 5; expected a tensor", function() fp8.autograd.backward({ y, 5 }) end)
      U.fails_with("backward: inputs is empty", function() fp8.autograd.backward(y, { inputs = {} }) end)
      U.fails_with("backward: takes (tensors [, grad_tensors] [, {options}]); got 1 more argument",
        function() fp8.autograd.backward(y, nil, nil, 1) end)
      fp8.autograd.backward(y)                                   -- still usable
      assert.are.same({ 2, 4 }, x.grad:totable())
    end)
  end)

  describe("backward's inputs=", function()
    it("fills only the inputs' .grad (a leaf's with its hooks, a result's too), running the graph between", function()
      local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
      local w = fp8.tensor({ 0.5, -1, 2 }):requires_grad(true)
      local h = x * w
      local y = (h * h):sum()
      local calls = {}
      w:register_hook(function(g) calls[#calls + 1] = "w"; return g * 2 end)
      w:register_post_accumulate_grad_hook(function(p) calls[#calls + 1] = "w post " .. p.grad:totable()[1] end)
      x:register_hook(function() calls[#calls + 1] = "x" end)
      y:backward { inputs = { w, h }, retain_graph = true }
      assert.is_nil(x.grad)
      assert.are.same({ 2, -16, 72 }, w.grad:totable())   -- 2 · 2h·x
      assert.are.same({ 1, -4, 12 }, h.grad:totable())
      assert.are.same({ "w", "w post 2.0" }, calls)
      y:backward { inputs = x }                  -- a lone tensor
      assert.are.same({ 0.5, 4, 24 }, x.grad:totable())
      assert.are.same({ 2, -16, 72 }, w.grad:totable())
    end)

    it("refuses what it cannot honour, naming it", function()
      local x = fp8.tensor({ 1, 2 }):requires_grad(true)
      local y = (x * x):sum()
      U.fails_with("backward: inputs is empty", function() y:backward { inputs = {} } end)
      U.fails_with("backward: inputs[2] is number; expected a tensor", function() y:backward { inputs = { x, 5 } } end)
      U.fails_with("backward: inputs must be a tensor or a list of tensors, got string",
        function() y:backward { inputs = "x" } end)
      U.fails_with("backward: inputs[1] does not require grad", function() y:backward { inputs = fp8.ones(2) } end)
      y:backward { inputs = { x } }              -- still usable
      assert.are.same({ 2, 4 }, x.grad:totable())
    end)
  end)

  describe("fp8.autograd.grad", function()
    it("gives backward's gradients for leaves and results, one value per input, and changes no .grad", function()
      local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
      local w = fp8.tensor({ 0.5, -1, 2 }):requires_grad(true)
      local h = x * w
      local y = (h * h):sum()                   -- dy/dh = 2h, dy/dx = 2h·w, dy/dw = 2h·x
      local gx, gw, gh = fp8.autograd.grad(y, { x, w, h }, { retain_graph = true })
      assert.are.same({ 0.5, 4, 24 }, gx:totable())
      assert.are.same({ 1, -8, 36 }, gw:totable())
      assert.are.same({ 1, -4, 12 }, gh:totable())
      assert.is_nil(x.grad); assert.is_nil(w.grad); assert.is_nil(h.grad)
      assert.are.same({ 0.5, 4, 24 }, fp8.autograd.grad(y, x):totable())   -- a lone tensor: one value
      U.fails_with("backward: trying to backward through the graph a second time", function()
        fp8.autograd.grad(y, x)                  -- the call before freed what it ran
      end)
      -- several outputs, their gradients given (nil: ones, for a one-element output); a leaf output is its own seed
      local a, b = x * 3, (x * x):sum()
      local g = fp8.autograd.grad({ a, b }, x, { fp8.tensor({ 1, 0, 2 }) })
      assert.are.same({ 5, 4, 12 }, g:totable())    -- (3, 0, 6) + 2x
      assert.are.same({ 7, 8, 9 }, fp8.autograd.grad(x, x, { fp8.tensor({ 7, 8, 9 }) }):totable())
    end)

    it("runs only the graph between the outputs and the inputs: hooks off it are not called, its nodes not freed",
      function()
      local x = fp8.tensor({ 1, 2 }):requires_grad(true)
      local w = fp8.tensor({ 3, 4 }):requires_grad(true)
      local u = w * 2
      local off, on = 0, {}
      u:register_hook(function() off = off + 1 end)
      w:register_hook(function() off = off + 1 end)
      x:register_hook(function(gx) on[#on + 1] = gx:totable(); return gx * 10 end)   -- once, summed, and used
      x:register_post_accumulate_grad_hook(function() off = off + 1 end)
      local m = x * x
      m:retain_grad()
      local y = (m + x):sum() + u:sum()
      assert.are.same({ 30, 50 }, fp8.autograd.grad(y, x):totable())   -- 10 · (2x + 1)
      assert.are.same({ { 3, 5 } }, on)
      assert.are.equal(0, off)
      assert.are.same({ 1, 1 }, m.grad:totable())   -- retain_grad fills .grad in autograd.grad too (torch 2.15's)
      u:sum():backward()                         -- u's node did not run, so it was not freed
      assert.are.same({ 2, 2 }, w.grad:totable())
    end)

    it("says which input no gradient reaches, unless allow_unused (nil) or materialize_grads (zeros)", function()
      local x = fp8.tensor({ 1, 2 }):requires_grad(true)
      local z = fp8.tensor({ 5 }):requires_grad(true)
      local y = (x * 2):sum()
      U.fails_with("grad: inputs[2] is not on the graph of the outputs (no gradient reaches it)", function()
        fp8.autograd.grad(y, { x, z }, { retain_graph = true })
      end)
      local gx, gz = fp8.autograd.grad(y, { x, z }, { allow_unused = true, retain_graph = true })
      assert.are.same({ 2, 2 }, gx:totable())
      assert.is_nil(gz)
      local _, zz = fp8.autograd.grad(y, { x, z }, { materialize_grads = true })
      assert.are.same({ 0 }, zz:totable())
      assert.are.equal("fp32", zz:dtype())
    end)

    it("matches backward through FP8 layers (inputs and weights)", function()
      local nn = fp8.nn
      local function run()
        fp8.manual_seed(11)
        local m = fp8.convert_model(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16)),
          { recipe = { backend = "te" } })
        local x = fp8.randn(8, 32):requires_grad(true)
        local c = fp8.randn(8, 16)
        local loss = fp8.fp8_autocast(function() return (m(x) * c):sum() end)
        return m, x, loss
      end
      local m1, x1, l1 = run()
      l1:backward()
      local m2, x2, l2 = run()
      local gx, gw1, gw2 = fp8.autograd.grad(l2, { x2, m2[1].weight, m2[3].weight })
      assert.are.same(x1.grad:totable(), gx:totable())
      assert.are.same(m1[1].weight.grad:totable(), gw1:totable())
      assert.are.same(m1[3].weight.grad:totable(), gw2:totable())
      assert.is_nil(m2[1].weight.grad)
    end)

    it("refuses what it cannot honour, naming it", function()
      local x = fp8.tensor({ 1, 2 }):requires_grad(true)
      local y = (x * x):sum()
      U.fails_with("grad: create_graph=true is not supported",
        function() fp8.autograd.grad(y, x, { create_graph = true }) end)
      U.fails_with("grad: is_grads_batched=true is not supported",
        function() fp8.autograd.grad(y, x, nil, { is_grads_batched = true }) end)
      U.fails_with("grad: unknown option 'retain_grph' (did you mean 'retain_graph'?)",
        function() fp8.autograd.grad(y, x, { retain_grph = true }) end)
      U.fails_with("grad: allow_unused must be a boolean, got 1",
        function() fp8.autograd.grad(y, x, { allow_unused = 1 }) end)
      U.fails_with("grad: materialize_grads=true needs allow_unused",
        function() fp8.autograd.grad(y, x, { materialize_grads = true, allow_unused = false }) end)
      U.fails_with("grad: inputs must be a tensor or a list of tensors, got 5", function() fp8.autograd.grad(y, 5) end)
      U.fails_with("grad: inputs[2] is nil; expected a tensor", function() fp8.autograd.grad(y, { x, nil, x }) end)
      U.fails_with("grad: outputs is empty", function() fp8.autograd.grad({}, x) end)
      U.fails_with("grad: input 1 does not require grad", function() fp8.autograd.grad(y, fp8.ones(2)) end)
      U.fails_with("grad: grad can be implicitly created only for scalar outputs; got shape [2]",
        function() fp8.autograd.grad(x * 2, x) end)
      U.fails_with("grad: 2 grad_outputs for 1 outputs",
        function() fp8.autograd.grad(y, x, { fp8.ones(1), fp8.ones(1) }) end)
      U.fails_with("grad: grad has shape [3] but the tensor has shape []",
        function() fp8.autograd.grad(y, x, { fp8.ones(3) }) end)
      U.fails_with("grad: takes (outputs, inputs [, grad_outputs] [, {options}]); got 1 more argument",
        function() fp8.autograd.grad(y, x, nil, nil, 1) end)
      local gone = fp8.tensor({ 1 }):requires_grad(true)
      local lg = (gone * 2):sum()
      local g1 = fp8.ones({})
      g1:free()
      U.fails_with("grad: grad_outputs[1] has been released (freed or closed)",
        function() fp8.autograd.grad(lg, gone, { g1 }) end)
      gone:free()
      U.fails_with("grad: inputs[1] has been released (freed or closed)", function() fp8.autograd.grad(lg, gone) end)
      U.fails_with("backward: inputs[1] has been released (freed or closed)",
        function() lg:backward { inputs = { gone } } end)
      -- still usable after every refusal above
      assert.are.same({ 2, 4 }, fp8.autograd.grad(y, x):totable())
    end)
  end)

  describe("retain_grad", function()
    it("fills the .grad of a result a backward passes through, and accumulates as a leaf's", function()
      local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
      local h = x * x
      assert.is_false(h:retains_grad())
      assert.are.equal(h, h:retain_grad())      -- returns the tensor (torch's returns None)
      assert.is_true(h:retains_grad())
      local y = (h * h):sum()                   -- ∂y/∂h = 2h
      y:backward { retain_graph = true }
      assert.are.same({ 2, 8, 18 }, h.grad:totable())
      assert.are.same({ 4, 32, 108 }, x.grad:totable())   -- ∂y/∂x = 4x³: the graph below h is unchanged
      y:backward()
      assert.are.same({ 4, 16, 36 }, h.grad:totable())   -- added up, as a leaf's
      h:zero_grad()
      assert.is_nil(h.grad)
      -- without it a result's .grad stays nil, as torch's
      local h2 = x * 2
      h2:sum():backward()
      assert.is_nil(h2.grad)
    end)

    it("sums the gradients of every use, on views and on the root itself", function()
      local x = fp8.tensor({ { 1, 2 }, { 3, 4 } }):requires_grad(true)
      local h = (x + 1):retain_grad()
      local v = h:view(4):retain_grad()         -- a view has its own node, so its own gradient
      local loss = (h * 3 + v:view(2, 2) * 5):sum():retain_grad()
      loss:backward()
      assert.are.same({ { 8, 8 }, { 8, 8 } }, h.grad:totable())
      assert.are.same({ 5, 5, 5, 5 }, v.grad:totable())
      assert.are.equal(1, loss.grad:item())
    end)

    it("is a no-op on a leaf and refused on a tensor that does not require grad", function()
      local w = fp8.tensor({ 1, 2 }):requires_grad(true)
      assert.are.equal(w, w:retain_grad())
      assert.is_false(w:retains_grad())         -- torch: a leaf's retains_grad is false
      U.fails_with("retain_grad: the tensor does not require grad", function() fp8.tensor({ 1 }):retain_grad() end)
      U.fails_with("retain_grad: the tensor does not require grad",
        function() return fp8.no_grad(function() return w * 2 end):retain_grad() end)
      U.fails_with("retain_grad: takes no arguments", function() (w * 2):retain_grad(true) end)
    end)

    it("a result freed before the backward is dropped from it (no write to freed memory)", function()
      local x = fp8.tensor({ 1, 2 }):requires_grad(true)
      local h = (x * 3):retain_grad()
      local y = (h * 2):sum()
      h:free()                                  -- the node stays (y's graph holds it), the tensor is gone
      h = nil
      collectgarbage(); collectgarbage()
      y:backward()
      assert.are.same({ 6, 6 }, x.grad:totable())
    end)

    it("through FP8 layers: an FP8Linear's output, also where the next layer hands it an FP8 gradient", function()
      local nn = fp8.nn
      local function run(fused, retain)
        fp8.manual_seed(5)
        local m = fp8.convert_model(nn.Sequential(nn.Linear(32, 64), nn.Linear(64, 16)),
          { recipe = { backend = "te" } })
        local x = fp8.randn(8, 32)
        local h = fp8.fp8_autocast(function() return m[1](x) end)
        if retain then h:retain_grad() end
        local g = not fused and nn.functional.gelu(h, "tanh") or nil
        if g and retain then g:retain_grad() end
        local c = fp8.randn(8, 16)
        fp8.fp8_autocast(function()
          local y = fused and m[2]:forward_gelu(h) or m[2](g)
          ;(y * c):sum():backward()
        end)
        return { h = h, g = g, handed = m[1].fp8_meta:state().dy_handovers, w = m[1].weight.grad:totable() }
      end
      local u, f = run(false, true), run(true, true)
      assert.are.equal(0, u.handed)
      assert.are.equal(1, f.handed)            -- the fused GELU's backward cast dY for the first layer
      assert.are.same({ 8, 64 }, u.h.grad:shape())
      -- unfused: GELU's backward of the gradient that reached GELU's output, bit for bit
      local hl = u.h:detach():requires_grad(true)
      nn.functional.gelu(hl, "tanh"):backward(u.g.grad)
      assert.are.same(hl.grad:totable(), u.h.grad:totable())
      -- fused: the E5M2 cast the first layer's backward read, dequantized: within E5M2's half step (2^-3 of the
      -- value) of the fp32 gradient
      local a, b = u.h.grad:totable(), f.h.grad:totable()
      for r = 1, 8 do
        for k = 1, 64 do
          assert.is_true(math.abs(a[r][k] - b[r][k]) <= 0.125 * math.abs(a[r][k]) + 2^-16,
            ("[%d][%d] %.9g %.9g"):format(r, k, a[r][k], b[r][k]))
        end
      end
      -- retaining changes nothing else: the weight gradients are the same bits without it
      assert.are.same(run(false, false).w, u.w)
      assert.are.same(run(true, false).w, f.w)
    end)
  end)
end)

describe("fp8.core._nn", function()
  it("linear matches x·Wᵀ + b and its gradients", function()
    local x = fp8.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }):requires_grad(true)
    local w = fp8.tensor({ { 1, 0 }, { 0, 1 }, { 1, 1 } }):requires_grad(true)
    local b = fp8.tensor({ 10, 20, 30 }):requires_grad(true)
    local y = C.linear(x, w, b)
    assert.are.same({ { 11, 22, 33 }, { 13, 24, 37 }, { 15, 26, 41 } }, y:totable())
    y:sum():backward()
    assert.are.same({ { 2, 2 }, { 2, 2 }, { 2, 2 } }, x.grad:totable())
    assert.are.same({ { 9, 12 }, { 9, 12 }, { 9, 12 } }, w.grad:totable())
    assert.are.same({ 3, 3, 3 }, b.grad:totable())
    local ok, err = pcall(C.linear, fp8.zeros(32, 100), fp8.zeros(512, 784))
    assert.truthy(err:find("linear: input [32, 100] does not match weight [512, 784] (in_features 784)", 1, true))
  end)

  it("cross_entropy, softmax, activations, layer_norm, embedding, dropout, sdpa run and differentiate", function()
    local logits = fp8.randn(4, 5):requires_grad(true)
    local loss = C.cross_entropy(logits, fp8.tensor({ 0, 1, 2, 3 }), { label_smoothing = 0.1, ignore_index = 3 })
    loss:backward()
    assert.are.same({ 4, 5 }, logits.grad:shape())
    assert.are.same({ 0, 0, 0, 0, 0 }, logits.grad:totable()[4])   -- ignored row
    local ok, err = pcall(C.cross_entropy, logits, fp8.tensor({ 0, 1, 2, 3 }), { smoothing = 0.1 })
    assert.truthy(err:find("unknown option 'smoothing'"))
    local s = C.softmax(fp8.randn(2, 3), 1)
    local cols = s:sum(1):totable()
    for _, v in ipairs(cols) do assert.is_true(close(v, 1)) end
    assert.has_error(function() C.softmax(fp8.randn(2, 3), 3) end)
    assert.are.same({ 0, 0, 2 }, C.relu(fp8.tensor({ -1, 0, 2 })):totable())
    assert.is_true(close(C.gelu(fp8.tensor({ 1 }), "tanh"):item(), 0.8411920, 1e-5))
    assert.has_error(function() C.gelu(fp8.tensor({ 1 }), "fast") end)
    -- each row normalized: mean 0 and (biased) variance 1 within eps; then the affine w·x̂ + b per column
    local xs = fp8.randn(3, 8)
    local ln = C.layer_norm(xs, fp8.ones(8), fp8.zeros(8)):totable()
    for _, row in ipairs(ln) do
      local m, v = 0, 0
      for _, x in ipairs(row) do m = m + x / 8 end
      for _, x in ipairs(row) do v = v + (x - m) ^ 2 / 8 end
      assert.is_true(math.abs(m) < 1e-5 and math.abs(v - 1) < 1e-3, ("row mean %g, variance %g"):format(m, v))
    end
    local w, b = fp8.arange(1, 9), fp8.full({ 8 }, 0.5)
    local aff = C.layer_norm(xs, w, b):totable()
    for i = 1, 3 do for j = 1, 8 do assert.is_true(close(aff[i][j], j * ln[i][j] + 0.5, 1e-5)) end end
    local e = C.embedding(fp8.tensor({ 2, 0 }), fp8.tensor({ { 1, 1 }, { 2, 2 }, { 3, 3 } }))
    assert.are.same({ { 3, 3 }, { 1, 1 } }, e:totable())
    fp8.manual_seed(7)
    local d1 = C.dropout(fp8.ones(100), 0.5, true):totable()
    fp8.manual_seed(7)
    local d2 = C.dropout(fp8.ones(100), 0.5, true):totable()
    assert.are.same(d1, d2)
    -- inverted dropout: each element 0 or 1/(1 - p) = 2, about half of each (Binomial(100, 0.5): 30..70 is > 5 sigma)
    local zeros = 0
    for _, v in ipairs(d1) do
      assert.is_true(v == 0 or v == 2, "dropout value " .. v)
      if v == 0 then zeros = zeros + 1 end
    end
    assert.is_true(zeros >= 30 and zeros <= 70, zeros .. " of 100 dropped")
    assert.are.same(fp8.ones(3):totable(), C.dropout(fp8.ones(3), 0.5, false):totable())
    local q = fp8.randn(1, 2, 4, 8):requires_grad(true)
    local o = C.scaled_dot_product_attention(q, q, q, { is_causal = true })
    o:sum():backward()
    assert.are.same({ 1, 2, 4, 8 }, q.grad:shape())
    -- the packed form gives the same bits as splitting the projection by hand, forward and backward
    local F = require "fp8.nn.functional"
    for _, causal in ipairs { true, false } do
      local B, T, H, D = 2, 5, 3, 4
      local C3 = 3 * H * D
      local x1 = fp8.randn(B, T, C3):requires_grad(true)
      local x2 = x1:detach():requires_grad(true)
      local y1 = F.qkv_attention(x1, H, { is_causal = causal })
      local function head(i) return x2:narrow(3, i * H * D + 1, H * D):reshape { B, T, H, D }:transpose(2, 3):contiguous() end
      local y2 = F.scaled_dot_product_attention(head(0), head(1), head(2), { is_causal = causal })
      y2 = y2:transpose(2, 3):contiguous():reshape { B, T, H * D }
      assert.are.same(y2:totable(), y1:totable())
      local w = fp8.randn(B, T, H * D)
      y1:mul(w):sum():backward()
      y2:mul(w):sum():backward()
      assert.are.same(x2.grad:totable(), x1.grad:totable())
    end
    assert.has_error(function() F.qkv_attention(fp8.randn(2, 3, 10), 2) end)     -- 10 is not 3·C with C % 2 == 0
    assert.has_error(function() F.qkv_attention(fp8.randn(2, 3, 12), 0) end)
    assert.has_error(function() F.qkv_attention(fp8.randn(6, 12), 2) end)
    assert.has_error(function() F.qkv_attention(fp8.randn(2, 3, 12), 2, { causal = true }) end)
    assert.is_true(close(C.mse_loss(fp8.tensor({ 1, 2 }), fp8.tensor({ 0, 0 })):item(), 2.5))
  end)

  it("refuses a backward through a tensor written in place after the forward (torch's version counter)", function()
    local F = fp8.nn.F
    -- the embedding's indices: the backward wrote rows at them unchecked (a segfault with 1e9)
    local w = fp8.randn(4, 3):requires_grad(true)
    local idx = fp8.tensor { 0, 1 }
    local out = F.embedding(idx, w)
    idx[1] = 1e9
    local ok, err = pcall(function() out:sum():backward() end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("EmbeddingBackward needs (saved tensor 1, shape [2]) was written in place", 1, true), tostring(err))
    -- a linear's input: silently wrong weight gradients before
    local x = fp8.tensor { { 1, 2, 3 } }
    local lw = fp8.ones(1, 3):requires_grad(true)
    local y = F.linear(x, lw)
    x[1][1] = 100
    ok, err = pcall(function() y:sum():backward() end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("LinearBackward needs (saved tensor 1, shape [1, 3])", 1, true), tostring(err))
    -- a write before the forward, or to a copy, is fine
    local x2 = fp8.tensor { { 1, 2, 3 } }
    x2[1][1] = 5
    local c = x2:clone()
    local y2 = F.linear(x2, lw)
    c[1][1] = 7
    y2:sum():backward()
    assert.are.same({ { 5, 2, 3 } }, lw.grad:totable())
  end)

  it("a gradient accumulated into a .grad a graph saved is a write in place: that graph's backward is refused", function()
    local x = fp8.tensor({ 1, 1, 1 }):requires_grad(true)
    ;(x * 2):sum():backward()
    local w = fp8.tensor({ 1, 1, 1 }):requires_grad(true)
    local y = (w * x.grad):sum()     -- saves x.grad (2, 2, 2)
    ;(x * 3):sum():backward()        -- x.grad becomes (5, 5, 5) in place
    local ok, err = pcall(y.backward, y)
    assert.is_false(ok)              -- it gave w.grad = 5 silently
    assert.truthy(tostring(err):find("MulBackward needs (saved tensor 2, shape [3]) was written in place", 1, true), tostring(err))
  end)

  it("GradScaler:unscale_ of a .grad a graph saved is a write in place: that graph's backward is refused", function()
    local x = fp8.tensor({ 1, 1, 1 }):requires_grad(true)
    x.grad = fp8.ones(3)
    local w = fp8.tensor({ 1, 1, 1 }):requires_grad(true)
    local y = (w * x.grad):sum()     -- saves x.grad (1, 1, 1)
    local opt = fp8.optim.SGD({ x }, { lr = 0.1 })
    fp8.amp.GradScaler({ init_scale = 4 }):unscale_(opt)   -- x.grad becomes (0.25, ...) in place
    U.fails_with("MulBackward needs (saved tensor 2, shape [3]) was written in place", y.backward, y)  -- was w.grad 0.25
  end)

  it("the collectives write in place: a graph that saved their tensor refuses its backward (one process here)", function()
    local D = require "fp8._dist"
    for _, call in ipairs { function(t) D.all_reduce(t, "sum") end, function(t) D.broadcast(t, 0) end,
                            function(t) D.all_reduce_async(t, "sum"):wait() end } do
      local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
      local y = (x * x):sum()
      call(x)                          -- a broadcast from rank 0 that changed x read its values silently
      U.fails_with("MulBackward needs (saved tensor 1, shape [3]) was written in place", y.backward, y)
    end
  end)

  it("t.grad = g: never t itself or a view of it; an expanded g is copied", function()
    local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
    for _, g in ipairs { x, x:narrow(1, 1, 3) } do
      local ok, err = pcall(function() x.grad = g end)
      assert.is_false(ok)
      assert.matches("shares the tensor's own storage", err, 1, true)
    end
    x.grad = fp8.zeros(1):expand(3)   -- accumulated into in place: every element aliased one float
    ;(x * fp8.tensor { 1, 2, 3 }):sum():backward()
    assert.are.same({ 1, 2, 3 }, x.grad:totable())
    assert.are.same({ 1, 2, 3 }, x:totable())
  end)

  it("an element write to a tensor in a graph is refused under grad mode (its gradient would pass unchanged)", function()
    local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
    local y = x * 2
    U.fails_with("x[i] = v: the tensor is part of an autograd graph", function() y[1] = 0 end)
    U.fails_with("set: the tensor requires grad", x.set, x, { 1 }, 0)
    local m = (fp8.ones(2, 2):requires_grad(true) * 1)
    U.fails_with("is part of an autograd graph", function() local r = m[1]; r[2] = 5 end)
    fp8.no_grad(function() x[1] = 7 end)   -- an optimizer's write: allowed, as torch's
    assert.are.same({ 7, 2, 3 }, x:totable())
    local d = fp8.tensor { 1, 2 }
    d[1] = 3                               -- no grad involved: as before
    assert.are.same({ 3, 2 }, d:totable())
  end)

  it("quantize and dequantize pass the gradient straight through, as torch's casts to float8", function()
    local w = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
    local wq = w:quantize("e4m3"):dequantize()
    assert.is_true(wq:requires_grad())
    assert.are.equal("DequantizeBackward", wq:grad_fn())
    ;(w * 2 + wq):sum():backward()
    assert.are.same({ 3, 3, 3 }, w.grad:totable())   -- was 2: the cast cut the graph silently
    local v = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
    ;(v:quantize("e5m2", { axis = 1 }):dequantize("bf16") * fp8.tensor({ 1, 2, 3 }, "bf16")):sum():backward()
    assert.are.same({ 1, 2, 3 }, v.grad:totable())
    assert.is_nil(fp8.no_grad(function() return w:quantize("e4m3"):grad_fn() end))
  end)

  it("an FP8 tensor's to(dtype), float(), half() and bfloat16() pass the gradient as dequantize does", function()
    local x = fp8.tensor({ 1, 2, 3 }):requires_grad(true)
    local q = x:quantize("e4m3")
    assert.are.equal("DequantizeBackward", q:to("fp32"):grad_fn())
    -- was { 1, 1, 1 }: to() dequantized without recording, so both casts' gradients were dropped silently
    ;(q:to("fp32"):sum() + q:half():float():sum() + q:bfloat16():sum() + x:sum()):backward()
    assert.are.same({ 4, 4, 4 }, x.grad:totable())
  end)

  it("refuses only writes to what the backward reads (torch's rule): an add's operand may change", function()
    local a, b = fp8.tensor({ 1, 2, 3 }):requires_grad(true), fp8.tensor { 1, 1, 1 }
    local y = (a + b):sum()
    b[1] = 3                          -- AddBackward needs only the shapes
    y:backward()
    assert.are.same({ 1, 1, 1 }, a.grad:totable())
    local x = fp8.tensor({ 1, 5, 2 }):requires_grad(true)
    local m = x:max()
    fp8.no_grad(function() x[3] = 9 end)   -- max's backward compares x with the result: refused
    local ok, err = pcall(m.backward, m)
    assert.is_false(ok)
    assert.matches("MaxBackward needs (input 1, shape [3])", err, 1, true)
  end)

  it("a backward that fails part way frees the nodes that ran: running it again is refused, not added twice", function()
    local a, b = fp8.tensor({ 1, 2 }):requires_grad(true), fp8.tensor({ 1, 2 }):requires_grad(true)
    local x = fp8.tensor { 3, 4 }
    local y = (a * x):sum() + (b * b):sum()   -- b * b's backward runs first, then a * x's is refused
    x[1] = 5
    U.fails_with("MulBackward needs (saved tensor 2, shape [2]) was written in place", y.backward, y)
    assert.is_nil(a.grad)
    assert.are.same({ 2, 4 }, b.grad:totable())
    -- torch: "Trying to backward through the graph a second time"; it gave b.grad = { 4, 8 } here
    U.fails_with("second time", y.backward, y)
    assert.are.same({ 2, 4 }, b.grad:totable())
    -- with retain_graph the graph stays whole, as torch's: the same error again
    local c = fp8.tensor({ 1, 2 }):requires_grad(true)
    local z = (c * x):sum()
    x[2] = 6
    for _ = 1, 2 do U.fails_with("written in place", z.backward, z, { retain_graph = true }) end
  end)

  it("an input takes a gradient only if it required grad when the op ran (torch's graph records it then)", function()
    local a, b = fp8.tensor({ 1, 2 }):requires_grad(true), fp8.tensor { 3, 4 }
    local y = (a * b):sum()
    b:requires_grad(true)             -- after the forward: torch gives b no gradient
    y:backward()
    assert.are.same({ 3, 4 }, a.grad:totable())
    assert.is_nil(b.grad)             -- was { 1, 2 }
    -- a linear whose weight was frozen in the forward: no weight gradient (the forward kept nothing for one)
    local lin = fp8.nn.Linear(3, 2)
    lin:requires_grad_(false)
    local x = fp8.randn(4, 3):requires_grad(true)
    local out = lin(x):sum()
    lin:requires_grad_(true)
    out:backward()
    assert.is_nil(lin.weight.grad)
    assert.is_nil(lin.bias.grad)
    assert.are.same({ 4, 3 }, x.grad:shape())
    -- turned off after the forward: no gradient either, as torch
    local c = fp8.tensor({ 1, 2 }):requires_grad(true)
    local z = (c * c):sum()
    c:requires_grad(false)
    z:backward()
    assert.is_nil(c.grad)
  end)

  it("relu keeps its output for the backward, as torch: its input may be written after, its output not", function()
    local F = fp8.nn.F
    local x = fp8.tensor({ -1, 0, 2, 0 / 0, -0.0, 3 }):requires_grad(true)
    local h = x * 1
    local y = F.relu(h)
    fp8.no_grad(function() h[3] = -100; h[6] = 0 end)   -- was refused: "ReluBackward needs (saved tensor 1 ..."
    y:backward(fp8.tensor { 1, 2, 3, 4, 5, 6 })
    -- torch 2.15: [0, 0, 3, 4, 0, 6] (the output's signs; a NaN passes the gradient)
    local g = x.grad:totable()
    assert.same({ 0, 0, 3, 4, 0, 6 }, g)
    local x2 = fp8.randn(4):requires_grad(true)
    local y2 = F.relu(x2)
    fp8.no_grad(function() y2[1] = 5 end)
    U.fails_with("ReluBackward needs (saved tensor 1, shape [4]) was written in place", y2.backward, y2, fp8.ones(4))
    -- a bf16 input: the same gradients as its fp32 values give
    local xb = fp8.tensor({ -1.5, 0.5, 2 }, "bf16"):requires_grad(true)
    F.relu(xb):sum():backward()
    assert.same({ 0, 1, 1 }, xb.grad:float():totable())
  end)

  it("softmax, log_softmax and relu keep only their outputs: their inputs go when nothing else holds them", function()
    local R = require "fp8._memory"
    local F = fp8.nn.F
    local x = fp8.randn(256, 1024):requires_grad(true)
    local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end
    local before = live()
    local y, y2, r = F.softmax(x * 1), F.log_softmax(x * 1), F.relu(x * 1)
    -- the three outputs (the graph's saved tensors are they); the softmaxes' inputs x * 1 were kept too (5)
    assert.are.equal(3, (live() - before) / (256 * 1024 * 4))
    ;(y:sum() + y2:sum() + r:sum()):backward()
    assert.are.same({ 256, 1024 }, x.grad:shape())
  end)

  it("ops whose backward reads no value of their input (x * 2, x + 1, exp, tanh, ...) do not keep it", function()
    local R = require "fp8._memory"
    local x = fp8.randn(256, 1024):requires_grad(true)
    local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end
    local before = live()
    local y = ((x * 1):exp() * 2 + 1):tanh()
    -- exp's and tanh's outputs, which their backwards read; x * 1, exp(..) * 2 and the + 1 were kept too (5)
    assert.are.equal(2, (live() - before) / (256 * 1024 * 4))
    y:sum():backward()
    local xs = x:detach()
    local e = xs:exp()
    local want = ((e * 2 + 1):tanh():square() * -1 + 1) * e * 2   -- torch's chain rule, by hand
    assert.is_true(((x.grad - want):abs():max():item()) < 1e-5)
  end)

  it("ops whose backward reads only shapes (+, sum, cat, copies, where's values, dropout) keep no input", function()
    local R = require "fp8._memory"
    local F = fp8.nn.F
    local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end
    local N = 256 * 1024
    local x = fp8.randn(256, 1024):requires_grad(true)
    local m = x:detach():gt(0)
    local before = live()
    local function held() return math.floor((live() - before) / (N * 4) * 4 + 0.5) / 4 end   -- 0-d ones: 0
    local a = (x * 1) + (x * 1) - (x * 1)
    assert.are.equal(1, held())                  -- the result alone (was 5: every operand and the first sum)
    local s = (x * 1):sum() + (x * 1):mean()
    assert.are.equal(1, held())                  -- and two numbers (was 2 more: both operands)
    local c = fp8.cat({ x * 1, x * 1 }, 1)
    assert.are.equal(3, held())                  -- and c (was 4 more: both parts)
    local t = (x * 1):t():contiguous() + (x * 1):to("bf16"):t()
    assert.are.equal(4, held())                  -- and t (was 4.5 more: x * 1 twice, both copies)
    local w = fp8.where(m, x * 1, x * 2)
    assert.are.equal(5.25, held())               -- w and its byte mask (was 6 more, then 2: m:eq(0) too)
    local d = F.dropout(x * 1, 0.5, true)
    assert.are.equal(6.25, held())               -- d (was 2 more: x * 1 too); its byte mask is no tensor
    ;(a:sum() + s + c:sum() + t:sum() + w:sum() + d:sum()):backward()
    local xs, ds = x:detach(), d:detach()
    local want = fp8.where(m, 1, 2) + 1 + 1 + 1 / N + 2 + 2 + fp8.where(ds:ne(0), 2, 0)
    assert.is_true((x.grad - want):abs():max():item() < 1e-6)
  end)

  it("where is one node that keeps a byte per element of its condition, as torch keeps its bool condition", function()
    -- it was where(cond, a) + where(cond == 0, b): two nodes that kept cond and cond == 0 (3 units with the result
    -- where torch holds 1.25)
    local R = require "fp8._memory"
    local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end
    local N = 256 * 1024
    local x = fp8.randn(256, 1024):requires_grad(true)
    local before = live()
    local w = fp8.where(x:detach():gt(0), x * 1, x * 2)
    assert.are.equal(N * 4 + N + 4, live() - before)   -- w, the mask's bytes and its scale
    assert.are.equal("WhereBackward", w:grad_fn())
    local g = fp8.randn(256, 1024)
    w:backward(g)
    local m = x:detach():gt(0)
    assert.are.same((fp8.where(m, g, 0) + fp8.where(m, 0, g) * 2):totable(), x.grad:totable())
    -- a condition of another shape (an attention mask): the bytes of the condition's shape, broadcast
    local y = fp8.randn(4, 8, 8):requires_grad(true)
    local rows = {}
    for i = 1, 8 do rows[i] = {} for j = 1, 8 do rows[i][j] = j <= i and 1 or 0 end end
    local causal = fp8.tensor(rows)
    local yb = live()
    local s = y:masked_fill(causal:eq(0), -math.huge)
    assert.are.equal(4 * 64 * 4 + 64 + 4, live() - yb)
    s:sum():backward()
    assert.are.same(causal:view(1, 8, 8):expand(4, 8, 8):totable(), y.grad:totable())
    -- a bf16 or fp16 condition no longer rounds a number taken beside an fp32 tensor to its dtype (torch's 1.1 in
    -- fp32 was bf16's 1.1015625); and the values' dtypes rule as before
    local cb = fp8.tensor({ 1, 0 }, "bf16")
    local f32 = fp8.tensor { 1.1 }[1]
    assert.are.same({ f32, 3 }, fp8.where(cb, 1.1, fp8.tensor { 2, 3 }):totable())
    assert.are.equal(f32, fp8.where(cb:half(), 1.1, fp8.zeros(2))[1])
    assert.are.equal("bf16", fp8.where(cb, 1.1, fp8.tensor({ 2, 3 }, "bf16")):dtype())
    assert.are.equal(1.1015625, fp8.where(cb, 1.1, fp8.tensor({ 2, 3 }, "bf16"))[1])
    assert.are.equal("fp32", fp8.where(cb, fp8.tensor({ 2, 3 }, "fp16"), fp8.tensor({ 2, 3 }, "bf16")):dtype())
  end)

  it("refuses an element write under grad mode to a view made under no_grad of a tensor that requires grad", function()
    -- torch: "A view was created in no_grad mode and is being modified inplace with grad mode enabled"; it was
    -- taken here, and x's gradient then passed through the overwritten element
    local ng = fp8.no_grad
    local x = fp8.randn(3, 4):requires_grad(true)
    local h = x * 2
    local views = {
      function() return ng(function() return x:view(12) end) end,
      function() return ng(function() return x[2] end) end,                   -- select
      function() return ng(function() return x:narrow(2, 2, 2):t() end) end,  -- a view of a view
      function() return ng(function() return x:t() end):t() end,              -- a grad-mode view of one
      function() return ng(function() return h:view(12) end) end,             -- of a non-leaf
    }
    for _, mk in ipairs(views) do
      local v = mk()
      local idx = v:dim() == 1 and { 1 } or { 1, 1 }
      U.fails_with("made under fp8.no_grad", v.set, v, idx, 5)
      if v:dim() == 1 then U.fails_with("made under fp8.no_grad", function() v[1] = 5 end) end
      ng(function() v:set(idx, 5) end)   -- under no_grad, as torch's
    end
    -- torch takes these: a detached tensor, a copy, a view of a tensor without grad, one whose base no longer
    -- requires grad; and refuses one whose base was given requires_grad after the view was made
    local d = x:detach()
    d[1]:set({ 1 }, 1)
    local c = ng(function() return x:clone() end)
    c:set({ 1, 1 }, 1)
    local k = fp8.randn(4)
    local kv = ng(function() return k:view(2, 2) end)
    kv:set({ 1, 1 }, 1)
    local l = fp8.randn(4):requires_grad(true)
    local lv = ng(function() return l:view(2, 2) end)
    l:requires_grad(false)
    lv:set({ 1, 1 }, 1)
    k:requires_grad(true)
    U.fails_with("made under fp8.no_grad", kv.set, kv, { 1, 1 }, 2)
  end)

  it("max(dim) and min(dim) give a tie's whole gradient to the returned index and keep the indices alone", function()
    -- torch's MaxBackward for a dim scatters g to its indices (first of a tie, a NaN wins); the gradient was split
    -- evenly among the tied elements (torch's rule for max() without dim, which stays) and the input was kept
    local x = fp8.tensor({ { 1, 3, 3, 2 }, { 0 / 0, 1, 0 / 0, 0 }, { -0.0, 0, -1, 0 } }):requires_grad(true)
    local v, i = x:max(2)
    assert.are.same({ 1, 0, 0 }, i:totable())
    assert.are.equal(-math.huge, 1 / v:totable()[3])   -- -0, the first of the ±0 tie, as torch's values
    ;(v * fp8.tensor { 1, 2, 3 }):sum():backward()
    assert.are.same({ { 0, 1, 0, 0 }, { 2, 0, 0, 0 }, { 3, 0, 0, 0 } }, x.grad:totable())   -- torch 2.15's
    x:zero_grad()
    local vm, im = x:min(1, true)                       -- keepdim, the other dim
    assert.are.same({ { 1, 2, 1, 1 } }, im:totable())
    vm:backward(fp8.tensor { { 1, 2, 3, 4 } })
    assert.are.same({ { 0, 0, 0, 0 }, { 1, 0, 3, 4 }, { 0, 2, 0, 0 } }, x.grad:totable())   -- torch 2.15's
    local b = fp8.tensor({ { 5, 5 }, { 2, 7 } }, "bf16"):requires_grad(true)
    b:max(2):sum():backward()
    assert.are.same({ { 1, 0 }, { 0, 1 } }, b.grad:totable())
    local c = fp8.tensor({ 5, 3, 5 }):requires_grad(true)
    c:max():backward()                                  -- without dim: still split, as torch's max()
    assert.are.same({ 0.5, 0, 0.5 }, c.grad:totable())
    local R = require "fp8._memory"
    local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end
    local big = fp8.randn(256, 1024):requires_grad(true)
    local before = live()
    local bv, bi = (big * 1):max(2)
    assert.are.equal(2 * 256 * 4, live() - before)      -- the values and the indices (x * 1 was kept too: 1 MiB)
    local s = bv:sum()
    bv, bi = nil, nil
    assert.are.equal(256 * 4 + 4, live() - before)      -- s and the node's indices
    s:backward()
    local want = fp8.zeros(256, 1024)
    local am = big:detach():argmax(2):totable()
    for r = 1, 256 do want:set({ r, am[r] + 1 }, 1) end
    assert.are.same(want:totable(), big.grad:totable())
    local w = fp8.tensor({ 1, 2 }):requires_grad(true)
    local wv, wi = w:max(1, true)
    wi:set({ 1 }, 0)                                    -- the saved indices written: refused, as torch's
    U.fails_with("written in place", wv.backward, wv)
  end)

  it("clamp between two numbers keeps its input alone, as torch's (not maximum's result too)", function()
    local R = require "fp8._memory"
    local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end
    local x = fp8.randn(256, 1024):requires_grad(true)
    local before = live()
    local y = (x * 1):clamp(-0.5, 0.5)
    -- y and x * 1 (torch's count); maximum(x * 1, -0.5) was kept too (3)
    assert.are.equal(2, (live() - before) / (256 * 1024 * 4))
    assert.are.equal("ClampBackward", y:grad_fn())
    -- torch 2.15's gradient (the minimum-norm subgradient): where -0.5 < x < 0.5 only, none at a bound or for NaN
    local t = fp8.tensor({ -1, -0.5, 0, 0.5, 1, 0 / 0 }):requires_grad(true)
    t:clamp(-0.5, 0.5):backward(fp8.tensor { 2, 3, 4, 5, 6, 7 })
    assert.are.same({ 0, 0, 4, 0, 0, 0 }, t.grad:totable())
    -- one number bound masks one side only: clamp_max lets -inf through, clamp_min +inf
    local v = fp8.tensor({ -math.huge, 0.5, 2 }):requires_grad(true)
    v:clamp_max(0.5):sum():backward()
    assert.are.same({ 1, 0, 0 }, v.grad:totable())
    local w = fp8.tensor({ math.huge, -1, 0 }):requires_grad(true)
    w:clamp_min(-1):sum():backward()
    assert.are.same({ 1, 0, 1 }, w.grad:totable())
    local u = fp8.tensor({ -1, 0, 1 }):requires_grad(true)
    u:clamp(0.5, -0.5):sum():backward()   -- min > max: max everywhere, and no gradient
    assert.are.same({ 0, 0, 0 }, u.grad:totable())
  end)

  it("gelu on a bf16 input keeps that input, not an fp32 copy of it beside", function()
    local R = require "fp8._memory"
    local F = fp8.nn.F
    local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end
    local x = fp8.randn(256, 1024):to("bf16"):requires_grad(true)
    local before = live()
    local y = F.gelu(x * 1)
    -- y (fp32: 1 unit) and x * 1 (bf16: 0.5, torch's saved tensor); its fp32 copy was kept too (2.5)
    assert.are.equal(1.5, (live() - before) / (256 * 1024 * 4))
    local g = fp8.randn(256, 1024)
    y:backward(g)
    local gx = x.grad:clone()
    x:zero_grad()
    F.gelu(x:float()):backward(g)   -- the same values in fp32: the same gradient, bit for bit
    assert.are.same(gx:totable(), x.grad:totable())
  end)

  it("h * c, c * h and h / c with c constant keep c alone: h is read only for the gradient c does not take", function()
    local R = require "fp8._memory"
    local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end
    local x = fp8.randn(256, 1024):requires_grad(true)
    local c = fp8.rand(256, 1024) + 1
    local before = live()
    local y = (x * 1) * c + c * (x * 2) + (x * 3) / c
    -- y alone (torch's count); x * 1, x * 2 and x * 3 were kept too (4)
    assert.are.equal(1, (live() - before) / (256 * 1024 * 4))
    y:sum():backward()
    local want = c * 3 + fp8.ones(256, 1024) * 3 / c
    assert.is_true((x.grad - want):abs():max():item() < 1e-5)
  end)

  it("h @ c and c @ h with c constant keep c alone (batched or 1-D too): h is read only for c's gradient", function()
    local R = require "fp8._memory"
    local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end
    local x = fp8.randn(4, 256, 256):requires_grad(true)
    local c, v = fp8.randn(256, 256), fp8.randn(256)
    local before = live()
    local y = (x * 1):matmul(c):sum() + c:matmul(x * 2):sum() + (x * 3):matmul(v):sum() + v:matmul(x * 4):sum()
    -- four numbers; x * 1, x * 2, x * 3 and x * 4 were kept too (4 units)
    assert.are.equal(0, math.floor((live() - before) / (4 * 256 * 256 * 4) * 2 + 0.5) / 2)
    y:backward()
    local want = (c:sum(2) + v * 3):view(1, 1, 256) + (c:sum(1) * 2 + v * 4):view(1, 256, 1)
    assert.is_true((x.grad - want):abs():max():item() < 1e-3)
  end)

  it("a frozen Linear keeps no input: x is read only for the weight's gradient, which it does not take", function()
    local R = require "fp8._memory"
    local F = fp8.nn.F
    local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end
    local x = fp8.randn(256, 512):requires_grad(true)
    local lin = fp8.nn.Linear(512, 256)
    lin:requires_grad_(false)
    local before = live()
    local y = lin(x * 1)
    -- y alone ([256, 256]: 0.5 units of x's size); x * 1 was kept too (1.5)
    local held = (live() - before) / (256 * 512 * 4)
    local c = fp8.randn(256, 512)
    local z = F.linear(c, x * 1)                         -- z and c, a constant input, not x * 1 (was 2.5)
    local held2 = (live() - before) / (256 * 512 * 4) - held
    local prev = fp8.set_autocast_dtype("bf16")
    local yb = lin(x * 2)                                -- and the weight's bf16 copy (was 1.5: x * 2's too)
    local held3 = (live() - before) / (256 * 512 * 4) - held - held2
    local yw = F.linear(x * 3, x * 4)                    -- both copies, not x * 4 itself (was 2.5)
    fp8.set_autocast_dtype(prev)
    local held4 = (live() - before) / (256 * 512 * 4) - held - held2 - held3
    assert.are.equal(1.5, held4)
    yw = nil
    assert.are.equal(0.5, held)
    assert.are.equal(1.5, held2)
    assert.are.equal(1, held3)
    ;(y:sum() + yb:sum()):backward()
    local want = lin.weight:sum(1):view(1, 512) * 3
    assert.is_true((x.grad - want):abs():max():item() < 1e-2)
    x:zero_grad()
    z:sum():backward()
    assert.is_true((x.grad - c:sum(1):view(1, 512)):abs():max():item() < 1e-3)
  end)

  it("attention on head views keeps its q, k, v copies, not the views' packed storage", function()
    local R = require "fp8._memory"
    local F = fp8.nn.F
    local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end
    local x = fp8.randn(4, 256, 192):requires_grad(true)
    local function heads(t) return t:view(4, 256, 2, 32):transpose(2, 3) end
    local before = live()
    local q, k, v = (x * 1):split(64, 3)
    local y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), { is_causal = true })
    q, k, v = nil, nil, nil
    -- y, the three copies and the probabilities [4, 2, 256, 256]; x * 1 was kept too (15)
    assert.are.equal(12, (live() - before) / (4 * 256 * 64 * 4))
    local g = fp8.randn(4, 2, 256, 32)
    y:backward(g)
    local gx = x.grad:clone()
    x:zero_grad()
    local p = {}
    for i, t in ipairs { x:split(64, 3) } do p[i] = heads(t):contiguous() end
    F.scaled_dot_product_attention(p[1], p[2], p[3], { is_causal = true }):backward(g)
    assert.are.same(x.grad:totable(), gx:totable())
  end)

  it("under bf16 autocast linear and matmul keep their operands' bf16 copies, not the fp32 operands", function()
    local R = require "fp8._memory"
    local F = fp8.nn.F
    local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end
    local x, w = fp8.randn(256, 512):requires_grad(true), fp8.randn(256, 512):requires_grad(true)
    local wt = w:detach():t():contiguous():requires_grad(true)
    local prev = fp8.set_autocast_dtype("bf16")
    local before = live()
    local y = F.linear(x * 1, w)
    -- y (fp32, [256, 256]) and the bf16 copies of x * 1 and w; x * 1 itself was kept too (2.5)
    local held = (live() - before) / (256 * 512 * 4)
    local z = (x * 1):matmul(wt * 1)
    local held2 = (live() - before) / (256 * 512 * 4) - held   -- was 3.5: both fp32 operands
    local c = (x * 1):matmul(fp8.randn(512, 256))              -- its copy alone (was 2.5, then 1.5: x * 1's too)
    local held3 = (live() - before) / (256 * 512 * 4) - held - held2
    c = nil
    local yr, zr = F.linear(x, w), x:matmul(wt)                -- the same GEMMs on the leaves themselves
    fp8.set_autocast_dtype(prev)
    assert.are.equal(1.5, held)
    assert.are.equal(1.5, held2)
    assert.are.equal(1, held3)
    y:sum():backward()
    local gx, gw = x.grad:clone(), w.grad:clone()
    x:zero_grad(); w:zero_grad()
    yr:sum():backward()
    assert.are.same(gx:totable(), x.grad:totable())
    assert.are.same(gw:totable(), w.grad:totable())
    x:zero_grad(); w:zero_grad()
    z:sum():backward()
    gx, gw = x.grad:clone(), wt.grad:clone()
    x:zero_grad(); wt:zero_grad()
    zr:sum():backward()
    assert.are.same(gx:totable(), x.grad:totable())
    assert.are.same(gw:totable(), wt.grad:totable())
  end)

  it("a write to an operand only another input's gradient reads is refused only when that input takes one", function()
    -- torch keeps a product's operand (a quotient's dividend, a matmul's, a linear's) only for the other one's
    -- gradient, and where's values not at all: writing r, the one that takes the gradient, passes there
    local F = fp8.nn.F
    local ops = {
      function(r, o) return r * o end, function(r, o) return r / o end, function(r, o) return r:matmul(o) end,
      function(r, o) return F.linear(r, o) end, function(r, o) return fp8.where(o:gt(1.5), r, 0) end,
    }
    for k, f in ipairs(ops) do
      local r, o = fp8.rand(3, 3):requires_grad(true), fp8.rand(3, 3) + 1
      local y = f(r, o):sum()
      fp8.no_grad(function() r:set({ 1, 1 }, -2) end)
      y:backward()            -- was refused: "needs (saved tensor 1, shape [3, 3]) was written in place"
      assert.are.same({ 3, 3 }, r.grad:shape())
      if k < 5 then           -- o is what r's gradient reads: refused, as torch
        local r2 = fp8.rand(3, 3):requires_grad(true)
        local y2 = f(r2, o):sum()
        o:set({ 1, 1 }, 2)
        U.fails_with("written in place", y2.backward, y2)
      end
    end
    local r, o = fp8.tensor({ 1, 2 }):requires_grad(true), fp8.tensor { 3, 4 }
    local y = (r * o):sum()
    fp8.no_grad(function() r[1] = 9 end)
    y:backward()
    assert.are.same({ 3, 4 }, r.grad:totable())
  end)
end)
