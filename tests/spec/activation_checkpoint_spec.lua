-- activation_checkpoint_spec.lua — fp8.utils.checkpoint (torch.utils.checkpoint) and nn.GPT's gradient_checkpointing:
-- the same values, gradients, recipe state and random stream as the run without it, bit for bit, with less memory
-- kept between the forward and the backward; and the refusals.
local U = dofile("tests/spec/helpers/util.lua")
local CKP = fp8.utils.checkpoint
local R = require "fp8._memory"

local function live() collectgarbage(); collectgarbage(); return R.bytes("cpu") end

-- a few AdamW steps of a small GPT through the Accelerator: the losses, each FP8 layer's recipe state, the bytes
-- still live after each forward (before its backward) beyond those before it, and the next random number
local function gpt_run(ck, precision, dropout)
  fp8.manual_seed(3)
  local model = fp8.nn.GPT { vocab_size = 32, block_size = 16, n_layer = 3, n_head = 2, n_embd = 32, dropout = dropout,
    gradient_checkpointing = ck }
  local acc = fp8.Accelerator { mixed_precision = precision, cpu = true, config = false, env = {},
    kwargs_handlers = precision == "fp8" and { fp8.TERecipeKwargs {} } or nil }
  local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
  model, opt = acc:prepare(model, opt)
  local losses, kept = {}, 0
  for step = 1, 4 do
    fp8.manual_seed(100 + step)
    local idx, tgt = fp8.randint(0, 32, { 8, 16 }), fp8.randint(0, 32, { 8, 16 })
    local before = live()
    local _, loss = model(idx, tgt)
    kept = math.max(kept, live() - before)   -- (a collection here also drops every box the checkpoint made)
    acc:backward(loss); opt:step(); opt:zero_grad()
    losses[step] = loss:item()
  end
  local states = {}
  for _, nm in ipairs(acc._fp8_layers or {}) do
    local s = nm[2].fp8_meta:state()
    states[#states + 1] = { nm[1], s.input.scale, s.weight.scale, s.grad.scale, s.input.amax, s.grad.amax }
  end
  return losses, states, kept, fp8.rand({ 1 }):item()
end

describe("fp8.utils.checkpoint", function()
  it("gives a module's values and every gradient bit for bit, dropout's masks replayed, the random stream kept", function()
    local nn = fp8.nn
    fp8.manual_seed(1)
    local blk = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.3), nn.Linear(16, 8))
    local head = nn.Linear(8, 3)
    local x = fp8.randn { 4, 8 }
    local function run(ck)
      for _, p in ipairs(blk:parameters()) do p.grad = nil end
      for _, p in ipairs(head:parameters()) do p.grad = nil end
      local xi = x:detach():requires_grad(true)
      fp8.manual_seed(5)
      local h = ck and CKP.checkpoint(blk, xi) or blk(xi)
      local loss = head(h):pow(2):mean()
      loss:backward()
      return { loss:item(), xi.grad:tolist(), blk[1].weight.grad:tolist(), blk[4].bias.grad:tolist(),
        head.weight.grad:tolist(), fp8.rand({ 1 }):item() }
    end
    assert.are.same(run(false), run(true))
    -- a plain function of several tensors, one taking no gradient, and a number; results that are not tensors pass
    local a, b = fp8.randn({ 3, 4 }):requires_grad(true), fp8.randn { 3, 4 }
    local w = fp8.randn({ 4, 2 }):requires_grad(true)
    local function f(p, q, k) return (p * q + k):matmul(w):tanh(), "tag" end
    local y1 = f(a, b, 0.5)
    ;(y1 * y1):sum():backward()
    local g1 = { a.grad:tolist(), w.grad:tolist() }
    a.grad, w.grad = nil, nil
    local y2, tag = CKP.checkpoint(f, a, b, 0.5)
    assert.are.equal("tag", tag)
    assert.are.same(y1:tolist(), y2:tolist())
    ;(y2 * y2):sum():backward()
    assert.are.same(g1, { a.grad:tolist(), w.grad:tolist() })   -- w: closed over, its .grad filled all the same
    -- a result that is the argument itself: its gradient once, through the recomputation
    local xa = fp8.tensor({ 1, 2 }):requires_grad(true)
    local same, twice = CKP.checkpoint(function(v) return v, v * 2 end, xa)
    ;(same:sum() + twice:sum()):backward()
    assert.are.same({ 3, 3 }, xa.grad:tolist())
    -- no argument takes a gradient (the first layer's input): the parameters still get theirs
    local lin = nn.Linear(4, 2)
    CKP.checkpoint(lin, fp8.ones { 3, 4 }):sum():backward()
    assert.are.same({ 3, 3 }, lin.bias.grad:tolist())
    -- without gradients it is the function itself
    local plain = fp8.no_grad(function() return CKP.checkpoint(lin, fp8.ones { 3, 4 }) end)
    assert.is_false(plain:requires_grad())
  end)

  it("GPT{gradient_checkpointing=true}: the same losses and FP8 recipe state over AdamW steps, less memory kept",
    function()
    for _, c in ipairs { { "no", 0.1 }, { "fp8", 0.1 } } do
      local l1, s1, kept1, r1 = gpt_run(false, c[1], c[2])
      local l2, s2, kept2, r2 = gpt_run(true, c[1], c[2])
      assert.are.same(l1, l2)
      assert.are.same(s1, s2)
      assert.are.equal(r1, r2)
      if c[1] == "fp8" then
        assert.are.equal(12, #s1)
        assert.is_true(s1[1][2] ~= 1, "the recipe updated its scales")
      end
      -- only each block's input and output stay live between the forward and the backward (measured: fp32 0.89 MB ->
      -- 0.15 MB, te 0.74 MB -> 0.25 MB)
      assert.is_true(kept2 < kept1 / 2, ("%s: %d bytes kept with checkpoints, %d without"):format(c[1], kept2, kept1))
    end
    -- train_char_gpt.lua --gradient-checkpointing reports the same losses (on a tiny text, te-hybrid)
    local dir = U.tmpdir()
    local f = assert(io.open(dir .. "/t.txt", "w"))
    f:write(("a tiny text for a tiny gpt, checkpointed or not.\n"):rep(30))
    f:close()
    local function report(flag)
      local p = assert(io.popen(("timeout 120 %s scripts/train_char_gpt.lua --text %s/t.txt --layers 2 --d-model 16 "
        .. "--heads 2 --block-size 16 --batch-size 4 --sample-len 0 --eval-every 1 --steps 3 --recipe te-hybrid "
        .. "--csv '' %s 2>&1"):format(FP8LAB_BIN or "build/fp8lab", dir, flag)))
      local out = p:read("a")
      p:close()
      local t = {}
      for l in out:gmatch("(step %d/3  train_loss=%S+  val_loss=%S+)") do t[#t + 1] = l end
      assert.are.equal(3, #t, out)
      return t
    end
    assert.are.same(report(""), report("--gradient-checkpointing"))
    local g = fp8.nn.GPT { vocab_size = 8, block_size = 4, n_layer = 1, n_head = 1, n_embd = 4 }
    assert.is_false(g.is_gradient_checkpointing)
    g:gradient_checkpointing_enable()
    assert.is_true(g.is_gradient_checkpointing and g.config.gradient_checkpointing)
    g:gradient_checkpointing_disable()
    assert.is_false(g.is_gradient_checkpointing)
  end)

  it("checkpoint_sequential checkpoints all segments but the last, with the same gradients", function()
    local nn = fp8.nn
    fp8.manual_seed(2)
    local seq = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 2))
    local x = fp8.randn { 5, 6 }
    local function grads(out)
      out:pow(2):sum():backward()
      local g = {}
      for i, p in ipairs(seq:parameters()) do g[i] = p.grad:tolist(); p.grad = nil end
      return g
    end
    local want = grads(seq(x))
    for _, segs in ipairs { 1, 2, 3, 5, 9 } do
      assert.are.same(want, grads(CKP.checkpoint_sequential(seq, segs, x)), "segments " .. segs)
    end
    assert.are.same(want, grads(CKP.checkpoint_sequential({ seq[1], seq[2], seq[3], seq[4], seq[5] }, 2, x)))
  end)

  it("returns the function's bits: an infinity among the arguments or results, and -0.0, pass as they are", function()
    -- (the link summed the arguments times 0 before: one infinity made every result NaN, and -0.0 came back +0.0)
    local x = fp8.tensor({ 1, math.huge, -0.0, 3 }):requires_grad(true)
    local y = CKP.checkpoint(function(a) return a * 2 end, x)
    local v = y:totable()
    assert.are.same({ 2, math.huge, 6 }, { v[1], v[2], v[4] })
    assert.are.equal(-math.huge, 1 / v[3])
    y:sum():backward()
    assert.are.same({ 2, 2, 2, 2 }, x.grad:totable())
  end)

  it("refuses what it cannot do, by name", function()
    local lin = fp8.nn.Linear(2, 2)
    local y = CKP.checkpoint(lin, fp8.ones { 1, 2 })
    y:sum():backward({ retain_graph = true })
    local x = fp8.ones({ 1, 2 }):requires_grad(true)
    local yg = CKP.checkpoint(lin, x)
    local yi = CKP.checkpoint(lin, x)
    local released = fp8.ones { 2 }
    released:free()
    for _, c in ipairs {
      { function() CKP.checkpoint(3, fp8.ones { 1 }) end, "checkpoint: expected a function or a module to run, got 3" },
      { function() CKP.checkpoint(function() return 1 end) end, "checkpoint: the function returned no float tensor" },
      { function() CKP.checkpoint(lin, released) end, "checkpoint: argument 1 has been released" },
      { function() y:sum():backward() end, "checkpoint: this call's backward has run already" },
      { function() fp8.autograd.grad(yg:sum(), x) end, "checkpoint: not with fp8.autograd.grad or backward's inputs=" },
      { function() yi:sum():backward({ inputs = { x } }) end, "checkpoint: not with fp8.autograd.grad or backward's" },
      { function() CKP.checkpoint_sequential("m", 2, fp8.ones { 1 }) end, "functions must be a Sequential or a list" },
      { function() CKP.checkpoint_sequential({ lin, 4 }, 2, fp8.ones { 1, 2 }) end, "functions[2] is 4" },
      { function() CKP.checkpoint_sequential({ lin }, 0, fp8.ones { 1, 2 }) end, "segments must be an integer >= 1" },
      { function() fp8.nn.GPT { vocab_size = 8, block_size = 4, n_layer = 1, n_head = 1, n_embd = 4,
          gradient_checkpointing = 1 } end, "GPT: gradient_checkpointing must be a boolean, got 1" },
    } do
      U.fails_with({ c[2] }, c[1])
    end
  end)
end)
