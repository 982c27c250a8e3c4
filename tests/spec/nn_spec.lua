-- nn_spec.lua — fp8.nn: module trees and their printing, parameter names and counts (GPT against a
-- hand formula), state_dict round trips and load errors, train/eval, initialisation statistics,
-- forward passes against float64 Lua loops, error messages with layer context, clip_grad_norm_.
local fp8 = fp8 or require "fp8"
local nn = fp8.nn
local U = dofile("tests/spec/helpers/util.lua")

local flat = U.flat

local function stats(t)
  local v = flat(t)
  local s, s2, lo, hi = 0, 0, math.huge, -math.huge
  for _, x in ipairs(v) do s = s + x; s2 = s2 + x * x; lo = math.min(lo, x); hi = math.max(hi, x) end
  local mean = s / #v
  return mean, math.sqrt(s2 / #v - mean * mean), lo, hi
end

local function names(list)
  local out = {}
  for i, np in ipairs(list) do out[i] = np[1] end
  return out
end

local function has_autograd()
  return fp8.randn { 1 }.requires_grad ~= nil and pcall(function() return nn.F.relu(fp8.zeros { 1 }) end)
end

describe("fp8.nn modules", function()
  before_each(function() fp8.manual_seed(1234) end)

  it("prints a model tree like PyTorch", function()
    local m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10, false))
    assert.are.equal(
      "Sequential(\n"
      .. "  (0): Linear(in_features=784, out_features=512, bias=true)\n"
      .. "  (1): ReLU()\n"
      .. "  (2): Linear(in_features=512, out_features=10, bias=false)\n"
      .. ")", tostring(m))
    local s = tostring(nn.Sequential(nn.Sequential(nn.LayerNorm(8), nn.GELU("tanh")), nn.Dropout(0.1), nn.Embedding(5, 8)))
    assert.are.equal(
      "Sequential(\n"
      .. "  (0): Sequential(\n"
      .. "    (0): LayerNorm((8,), eps=1e-05, elementwise_affine=true, bias=true)\n"
      .. "    (1): GELU(approximate='tanh')\n"
      .. "  )\n"
      .. "  (1): Dropout(p=0.1)\n"
      .. "  (2): Embedding(5, 8)\n"
      .. ")", s)
    -- torch 2.15: GELU(approximate='none'); LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=False) for
    -- bias=False, and bias=False without elementwise_affine (no bias either way)
    assert.are.equal("GELU(approximate='none')", tostring(nn.GELU()))
    assert.are.equal("LayerNorm((4,), eps=1e-05, elementwise_affine=true, bias=false)",
      tostring(nn.LayerNorm(4, { bias = false })))
    assert.are.equal("LayerNorm((4,), eps=1e-05, elementwise_affine=false, bias=false)",
      tostring(nn.LayerNorm(4, { elementwise_affine = false })))
  end)

  it("names parameters with dotted paths in registration order", function()
    local m = nn.Sequential { nn.Linear(4, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 2), nn.LayerNorm(2)) }
    assert.are.same({ "0.weight", "0.bias", "2.0.weight", "2.0.bias", "2.1.weight", "2.1.bias" }, names(m:named_parameters()))
    assert.are.equal(6, #m:parameters())
    assert.are.equal(4 * 3 + 3 + 3 * 2 + 2 + 2 + 2, m:num_parameters())
    assert.are.equal(3, #m)
    assert.are.equal(m:children()[3], m[3])
    assert.are.same({ 3, 4 }, m[1].weight:shape())
  end)

  it("registers submodules and parameters by assignment in a custom Module", function()
    local Net = nn.Module.class("Net")
    function Net:__init(d)
      self.enc = nn.Linear(d, d)
      self.scale = self:register_parameter("scale", fp8.ones { d })
      self.head = nn.Linear(d, 1)
      self:register_buffer("steps", fp8.zeros { 1 })
      self.note = "plain field"
    end
    function Net:forward(x) return self.head(self.enc(x) * self.scale) end
    local n = Net(4)
    assert.are.same({ "scale", "enc.weight", "enc.bias", "head.weight", "head.bias" }, names(n:named_parameters()))
    assert.are.same({ "steps" }, names(n:named_buffers()))
    assert.are.equal("plain field", n.note)
    -- torch's order: module by module, its own parameters, its own buffers, then its children (torch 2.15)
    assert.are.same({ "scale", "steps", "enc.weight", "enc.bias", "head.weight", "head.bias" }, n:state_dict_keys())
    assert.are.same({ "scale", "steps", "enc.bias", "head.weight", "head.bias" },
      n:load_state_dict({ ["enc.weight"] = fp8.zeros { 4, 4 } }, false).missing_keys)
    assert.truthy(tostring(n):find("(enc): Linear(in_features=4, out_features=4, bias=true)", 1, true))
    local seen = {}
    n:apply(function(m) seen[#seen + 1] = m:type_name() end)
    assert.are.same({ "Linear", "Linear", "Net" }, seen)
    -- relu keeps a NaN (an overflow stays visible), as torch's; its gradient passes there, as torch 2.15's
    -- (threshold_backward: out <= 0 ? 0 : grad, false for a NaN): x.grad is {1, 0, 1}, not {0, 0, 1}
    local rx = fp8.tensor { 0 / 0, -1, 2 }:requires_grad(true)
    local ry = nn.F.relu(rx)
    assert.is_true(ry:totable()[1] ~= ry:totable()[1])
    assert.are.same({ 0, 2 }, { ry:totable()[2], ry:totable()[3] })
    ry:sum():backward()
    assert.are.same({ 1, 0, 1 }, rx.grad:totable())
    -- a tensor an op made, assigned to a parameter, would never train: refused, here and by optimizers
    U.fails_with("cannot assign a tensor made by MulBackward to parameter 'weight'",
      function() n.enc.weight = n.enc.weight * 2 end)
    U.fails_with("AdamW: group 1 params[1] was made by MulBackward: an optimizer updates leaf tensors", fp8.optim.AdamW,
      { fp8.randn(3):requires_grad(true) * 2 })
    n.enc.weight = fp8.zeros { 4, 4 }   -- a leaf: a frozen parameter, in its place
    assert.are.same({ "scale", "enc.weight", "enc.bias", "head.weight", "head.bias" }, names(n:named_parameters()))
  end)

  it("propagates train/eval to every submodule", function()
    local g = nn.GPT { vocab_size = 11, block_size = 8, n_layer = 2, n_head = 2, n_embd = 8, dropout = 0.1 }
    assert.is_true(g.training)
    g:eval()
    for _, m in ipairs(g:modules()) do assert.is_false(m.training, m:type_name()) end
    g:train()
    for _, m in ipairs(g:modules()) do assert.is_true(m.training, m:type_name()) end
    g.blocks:train(false)
    assert.is_true(g.training)
    assert.is_false(g.blocks[2].attn.resid_dropout.training)
  end)

  it("GPT, TransformerBlock and CausalSelfAttention refuse a bad dropout by its name, at the caller's line", function()
    -- (the Dropout they made refused it as "lua/fp8/nn/gpt.lua:47: Dropout: p must be ...")
    for _, c in ipairs {
      { function() nn.GPT { vocab_size = 5, block_size = 4, n_layer = 1, n_head = 1, n_embd = 4, dropout = 2 } end,
        "GPT: dropout must be a probability in [0, 1], got 2" },
      { function() nn.GPT { vocab_size = 5, block_size = 4, n_layer = 1, n_head = 1, n_embd = 4, dropout = "x" } end,
        'GPT: dropout must be a probability in [0, 1], got "x" (a string)' },
      { function() nn.TransformerBlock { n_embd = 4, n_head = 1, dropout = -0.5 } end,
        "TransformerBlock: dropout must be a probability in [0, 1], got -0.5" },
      { function() nn.CausalSelfAttention { n_embd = 4, n_head = 1, dropout = 1.5 } end,
        "CausalSelfAttention: dropout must be a probability in [0, 1], got 1.5" },
      { function() nn.Dropout(1.5) end, "Dropout: p must be a probability in [0, 1], got 1.5" },
    } do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find("^tests/spec/nn_spec%.lua:%d+: " .. c[2]:gsub("%p", "%%%0") .. "$"), err)
    end
  end)

  it("counts GPT parameters as the hand formula says (tied head counted once)", function()
    local V, T, L, d = 37, 16, 3, 24
    local g = nn.GPT { vocab_size = V, block_size = T, n_layer = L, n_head = 4, n_embd = d }
    -- per block: ln1 2d, qkv 3d²+3d, proj d²+d, ln2 2d, fc 4d²+4d, fc2 4d²+d  = 12d² + 13d
    local want = V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d
    assert.are.equal(want, g:num_parameters())
    local ns = names(g:named_parameters())
    assert.are.equal("wte.weight", ns[1])
    assert.are.equal("blocks.1.attn.qkv.bias", ns[2 + 12 + 4])   -- 12 tensors per block
    assert.are.equal("ln_f.bias", ns[#ns])
  end)

  it("initialises like PyTorch (Linear, Embedding, LayerNorm) and nanoGPT (GPT)", function()
    local lin = nn.Linear(400, 300)
    local b = 1 / math.sqrt(400)
    local mean, std, lo, hi = stats(lin.weight)
    assert.is_true(lo >= -b and hi <= b, ("weight range [%g, %g] vs ±%g"):format(lo, hi, b))
    assert.is_true(math.abs(mean) < 0.02 * b * 3, "mean " .. mean)
    assert.is_true(math.abs(std - b / math.sqrt(3)) < 0.02 * b, ("std %g vs %g"):format(std, b / math.sqrt(3)))
    local _, _, blo, bhi = stats(lin.bias)
    assert.is_true(blo >= -b and bhi <= b)
    local emb = nn.Embedding(200, 100)
    mean, std = stats(emb.weight)
    assert.is_true(math.abs(mean) < 0.02 and math.abs(std - 1) < 0.02, ("N(0,1): mean %g std %g"):format(mean, std))
    local ln = nn.LayerNorm(7)
    assert.are.same({ 1, 1, 1, 1, 1, 1, 1 }, ln.weight:totable())
    assert.are.same({ 0, 0, 0, 0, 0, 0, 0 }, ln.bias:totable())
    local L = 4
    local g = nn.GPT { vocab_size = 50, block_size = 32, n_layer = L, n_head = 4, n_embd = 64 }
    _, std = stats(g.blocks[1].attn.qkv.weight)
    assert.is_true(math.abs(std - 0.02) < 0.001, "qkv std " .. std)
    _, std = stats(g.blocks[1].attn.proj.weight)
    local want = 0.02 / math.sqrt(2 * L)
    assert.is_true(math.abs(std - want) < 0.1 * want, ("proj std %g vs %g"):format(std, want))
    _, std = stats(g.blocks[2].mlp[3].weight)
    assert.is_true(math.abs(std - want) < 0.1 * want, ("mlp proj std %g vs %g"):format(std, want))
    local _, _, zlo, zhi = stats(g.blocks[1].attn.qkv.bias)
    assert.are.equal(0, zlo); assert.are.equal(0, zhi)
  end)

  it("round-trips state_dict into a fresh model", function()
    local function make() return nn.Sequential(nn.Linear(5, 4), nn.GELU(), nn.LayerNorm(4), nn.Linear(4, 2)) end
    local a, b = make(), make()
    local sd = a:state_dict()
    assert.are.equal(6, (function() local n = 0 for _ in pairs(sd) do n = n + 1 end return n end)())
    assert.are_not.same(a[1].weight:totable(), b[1].weight:totable())
    local w_before = b[1].weight
    b:load_state_dict(sd)
    for _, np in ipairs(a:named_parameters()) do
      assert.are.same(np[2]:totable(), sd[np[1]]:totable())
    end
    assert.are.same(a[1].weight:totable(), b[1].weight:totable())
    assert.are.same(a[4].bias:totable(), b[4].bias:totable())
    assert.are.equal(w_before, b[1].weight)          -- copied in place: optimizers keep their tensors
    -- the state_dict holds copies: changing the model afterwards does not change it
    local saved = sd["0.weight"]:totable()
    fp8.nn.init.zeros_(a[1].weight)
    assert.are.same(saved, sd["0.weight"]:totable())
  end)

  it("reports missing, unexpected and mis-shaped keys in load_state_dict", function()
    local m = nn.Sequential(nn.Linear(3, 2))
    local sd = m:state_dict()
    sd["0.bias"] = nil
    sd["1.weight"] = fp8.zeros { 1 }
    local ok, err = pcall(m.load_state_dict, m, sd)
    assert.is_false(ok)
    assert.truthy(err:find('missing key(s) in state_dict: "0.bias"', 1, true), err)
    assert.truthy(err:find('unexpected key(s) in state_dict: "1.weight"', 1, true), err)
    local r = m:load_state_dict(sd, false)
    assert.are.same({ "0.bias" }, r.missing_keys)
    assert.are.same({ "1.weight" }, r.unexpected_keys)
    local sd2 = m:state_dict()
    sd2["0.weight"] = fp8.zeros { 3, 2 }
    ok, err = pcall(m.load_state_dict, m, sd2)
    assert.is_false(ok)
    assert.truthy(err:find('size mismatch for "0.weight"', 1, true), err)
    assert.truthy(err:find("[3, 2]", 1, true) and err:find("[2, 3]", 1, true), err)
    ok, err = pcall(m.load_state_dict, m, "nope")
    assert.is_false(ok)
    assert.truthy(err:find("expected a table", 1, true), err)
  end)

  it("rejects bad constructor arguments with clear messages", function()
    local cases = {
      { function() nn.Linear(0, 3) end, "in_features must be a positive integer" },
      { function() nn.Linear(3, 2.5) end, "out_features must be a positive integer" },
      { function() nn.Dropout(1.5) end, "p must be a probability" },
      { function() nn.GELU("fast") end, 'approximate must be "none" or "tanh"' },
      { function() nn.Sequential(nn.ReLU(), 3) end, "layer 2 must be a Module" },
      { function() nn.GPT { vocab_size = 10, block_size = 8, n_layer = 1, n_head = 3, n_embd = 8 } end,
        "must be divisible by n_head" },
      { function() nn.GPT { vocab_size = 10, block_size = 8, n_layer = 1, n_head = 2, n_embd = 8, heads = 2 } end,
        "unknown option 'heads'" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), tostring(err))
    end
  end)

  it("names the layer and both shapes when the input shape is wrong", function()
    local lin = nn.Linear(784, 10)
    local ok, err = pcall(lin, fp8.zeros { 32, 100 })
    assert.is_false(ok)
    assert.are.equal("Linear forward: expected input [..., 784], got [32, 100]", err)
    local m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(100, 10))
    ok, err = pcall(m, fp8.zeros { 32, 100 })
    assert.is_false(ok)
    assert.are.equal("in layer 0 (Linear) forward: expected input [..., 784], got [32, 100]", err)
    local outer = nn.Sequential(nn.Sequential(nn.Dropout(0), nn.Linear(5, 2)))
    ok, err = pcall(outer, fp8.zeros { 2, 4 })
    assert.is_false(ok)
    assert.are.equal("in layer 0 (Sequential) forward: in layer 1 (Linear) forward: expected input [..., 5], got [2, 4]", err)
  end)
end)

describe("Module:requires_grad_", function()
  it("sets every parameter's requires_grad, as torch's (freezing a model); returns the module", function()
    local m = fp8.nn.Sequential(fp8.nn.Linear(2, 3), fp8.nn.LayerNorm(3))
    assert.are.equal(m, m:requires_grad_(false))
    for _, p in ipairs(m:parameters()) do assert.is_false(p:requires_grad()) end
    m:requires_grad_()
    for _, p in ipairs(m:parameters()) do assert.is_true(p:requires_grad()) end
    assert.has_error(function() m:requires_grad_(0) end, "requires_grad_: expected a boolean, got 0")
  end)
end)

describe("fp8.nn forward passes (need autograd bindings)", function()
  if not has_autograd() then
    pending("autograd bindings not in this build")
    return
  end
  before_each(function() fp8.manual_seed(7) end)

  it("Linear computes x·Wᵀ + b (float64 reference)", function()
    local lin = nn.Linear(5, 3)
    local x = fp8.randn { 4, 5 }
    local y = lin(x):totable()
    local X, W, B = x:totable(), lin.weight:totable(), lin.bias:totable()
    for i = 1, 4 do
      for j = 1, 3 do
        local s = B[j]
        for k = 1, 5 do s = s + X[i][k] * W[j][k] end
        assert.is_true(math.abs(y[i][j] - s) < 1e-5, ("y[%d][%d] = %g, want %g"):format(i, j, y[i][j], s))
      end
    end
    assert.is_true(lin.weight:requires_grad())
    assert.is_true(lin.weight:is_leaf())
  end)

  it("Sequential MLP forward equals the composition of its layers", function()
    local m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    local x = fp8.randn { 6, 3 }
    local X, W1, B1, W2, B2 = x:totable(), m[1].weight:totable(), m[1].bias:totable(), m[3].weight:totable(), m[3].bias:totable()
    local y = m(x):totable()
    for i = 1, 6 do
      local h = {}
      for j = 1, 4 do
        local s = B1[j]
        for k = 1, 3 do s = s + X[i][k] * W1[j][k] end
        h[j] = math.max(s, 0)
      end
      for j = 1, 2 do
        local s = B2[j]
        for k = 1, 4 do s = s + h[k] * W2[j][k] end
        assert.is_true(math.abs(y[i][j] - s) < 1e-5)
      end
    end
  end)

  it("GPT's loss leaves out targets of -100 (torch's ignore_index) and refuses nanoGPT's -1", function()
    fp8.manual_seed(4)
    local g = nn.GPT { vocab_size = 7, block_size = 4, n_layer = 1, n_head = 1, n_embd = 8 }
    local logits, loss = g(fp8.tensor { { 1, 2, 3 } }, fp8.tensor { { -100, 4, 5 } })
    local want = nn.F.cross_entropy(logits:reshape { 3, 7 }:narrow(1, 2, 2), fp8.tensor { 4, 5 }):item()
    assert.is_true(math.abs(loss:item() - want) < 1e-6)
    assert.has_error(function() g(fp8.tensor { { 1, 2, 3 } }, fp8.tensor { { -1, 4, 5 } }) end,
      "GPT forward: cross_entropy: target -1 at row 0 is out of range [0, 7)")
  end)

  it("GPT returns logits [B, T, V] and a loss near log(V) at init, and generates tokens", function()
    local V = 13
    local g = nn.GPT { vocab_size = V, block_size = 8, n_layer = 2, n_head = 2, n_embd = 16 }
    local idx = fp8.tensor { { 1, 2, 3, 4, 5 }, { 6, 7, 8, 9, 10 } }
    local logits, loss = g(idx, fp8.tensor { { 2, 3, 4, 5, 6 }, { 7, 8, 9, 10, 11 } })
    assert.are.same({ 2, 5, V }, logits:shape())
    assert.is_true(math.abs(loss:item() - math.log(V)) < 0.3, "loss " .. loss:item())
    local out = g:generate(idx, 6, { temperature = 1.0, top_k = 5, seed = 42 })
    assert.are.same({ 2, 11 }, out:shape())
    for _, row in ipairs(out:totable()) do
      for _, t in ipairs(row) do assert.is_true(t >= 0 and t < V and t == math.floor(t)) end
    end
    assert.are.same(out:totable(), g:generate(idx, 6, { temperature = 1.0, top_k = 5, seed = 42 }):totable())
    local ok, err = pcall(g, fp8.zeros { 1, 9 })
    assert.is_false(ok)
    assert.truthy(err:find("longer than block_size 8", 1, true), err)
    -- an empty batch gives an empty result, as torch's; a row without a token has nothing to continue
    assert.are.same({ 0, 9 }, g:generate(fp8.zeros(0, 3), 6, { temperature = 0 }):shape())
    U.fails_with("generate: idx [1, 0] holds no context", g.generate, g, fp8.zeros(1, 0), 2, { temperature = 0 })
  end)

  it("GPT:generate refuses a NaN temperature and logits that are not finite instead of drawing one token", function()
    -- (a NaN temperature, or a model whose weights went NaN, made every probability NaN: the draw then took the
    -- last token every time, greedy decoding the first, without a word; torch's multinomial refuses them)
    fp8.manual_seed(3)
    local g = nn.GPT { vocab_size = 5, block_size = 4, n_layer = 1, n_head = 1, n_embd = 8 }
    local idx = fp8.tensor { { 1, 2 } }
    U.fails_with("generate: temperature must be a number >= 0, got", g.generate, g, idx, 2, { temperature = 0 / 0 })
    assert.are.same({ 1, 4 }, g:generate(idx, 2, { temperature = math.huge, seed = 1 }):shape())   -- uniform draws
    fp8.no_grad(function() g.ln_f.bias:set({ 1 }, 0 / 0) end)
    for _, o in ipairs { { seed = 1 }, { temperature = 0 }, { top_k = 2, seed = 1 } } do
      U.fails_with("generate: the logits of row 1 hold NaN at token 0: the model's weights or inputs are not finite",
        g.generate, g, idx, 2, o)
    end
  end)

  it("GPT:generate takes an integer seed (a whole float as that integer) and refuses any other by name", function()
    -- (a whole float, a boolean or a fraction failed inside the private generator with an error about its locals;
    -- a numeric string was taken as its number)
    fp8.manual_seed(3)
    local g = nn.GPT { vocab_size = 7, block_size = 4, n_layer = 1, n_head = 1, n_embd = 8 }
    local idx = fp8.tensor { { 1, 2 } }
    assert.are.same(g:generate(idx, 6, { seed = 2 }):totable(), g:generate(idx, 6, { seed = 2.0 }):totable())
    for _, s in ipairs { 1.5, 0 / 0, math.huge, true, "2" } do
      U.fails_with("generate: seed must be an integer, got " .. require("fp8.opts").got(s), g.generate, g, idx, 2,
        { seed = s })
    end
  end)

  it("GPT:evaluate is the batch-weighted mean loss in eval mode, without a graph, and restores the mode", function()
    fp8.manual_seed(1)
    local g = nn.GPT { vocab_size = 8, block_size = 4, n_layer = 1, n_head = 1, n_embd = 8, dropout = 0.5 }
    local x1, y1 = fp8.tensor { { 1, 2, 3, 4 }, { 0, 1, 2, 3 } }, fp8.tensor { { 2, 3, 4, 5 }, { 1, 2, 3, 4 } }
    local x2, y2 = fp8.tensor { { 7, 6, 5, 4 } }, fp8.tensor { { 6, 5, 4, 3 } }
    local function loader()
      local b, i = { { x1, y1 }, { x2, y2 } }, 0
      return function() i = i + 1; if b[i] then return b[i][1], b[i][2] end end
    end
    local got = g:evaluate(loader())
    assert.is_true(g.training)                        -- restored
    assert.are.equal(got, g:evaluate(loader()))       -- no dropout: the same value twice
    g:eval()
    local l1 = fp8.no_grad(function() local _, l = g(x1, y1); return l:item() end)
    local l2 = fp8.no_grad(function() local _, l = g(x2, y2); return l:item() end)
    assert.is_true(math.abs(got - (2 * l1 + l2) / 3) < 1e-6)
    assert.is_false(g.training)                       -- eval mode kept as it was
    assert.has_error(function() g:evaluate(function() return nil end) end, "GPT:evaluate: the loader gave no batch")
    -- a loader of inputs only (no targets) broke inside: "gpt.lua:238: attempt to index a nil value (local 'loss')"
    assert.has_error(function() g:evaluate(fp8.data.DataLoader { { { x1[1] }, { x1[2] } }, batch_size = 2 }) end,
      "GPT:evaluate: the loader gave a batch without targets: it must give (x, y), token ids and their next tokens")
    assert.is_false(g.training)                       -- the mode is restored after the error too
    -- a module is callable but no loader: its forward complained of the loop's arguments ("Linear forward: takes (x)")
    U.fails_with("GPT:evaluate: expected a data loader (what `for x, y in loader do` loops over), got a module (Linear)",
      function() g:evaluate(fp8.nn.Linear(3, 2)) end)
  end)

  it("GPT:generate and GPT:evaluate give each submodule back its own mode, a frozen one's eval mode too", function()
    -- (they restored the model's mode with train(was_training), which turned every submodule to it)
    fp8.manual_seed(2)
    local g = nn.GPT { vocab_size = 6, block_size = 4, n_layer = 2, n_head = 1, n_embd = 8, dropout = 0.1 }
    local function loader()
      local done
      return function() if not done then done = true; return fp8.tensor { { 1, 2 } }, fp8.tensor { { 2, 3 } } end end
    end
    for _, run in ipairs { function() g:generate(fp8.tensor { { 1, 2 } }, 2, { seed = 1 }) end,
                           function() g:evaluate(loader()) end } do
      g:train(); g.blocks[1]:eval(); g.drop:eval()
      run()
      assert.is_true(g.training); assert.is_true(g.blocks.training); assert.is_true(g.blocks[2].training)
      assert.is_false(g.blocks[1].training); assert.is_false(g.blocks[1].attn.training)
      assert.is_false(g.drop.training)
      g:eval(); g.blocks[2]:train()
      run()
      assert.is_false(g.training); assert.is_true(g.blocks[2].training); assert.is_true(g.blocks[2].mlp.training)
      assert.is_false(g.blocks[1].training)
    end
  end)

  it("causal attention: a later token does not change earlier outputs", function()
    local a = nn.CausalSelfAttention { n_embd = 8, n_head = 2 }
    local x = fp8.randn { 1, 4, 8 }
    local y1 = a(x):totable()
    local x2 = x:clone()
    for d = 1, 8 do x2:set({ 1, 4, d }, 5.0) end
    local y2 = a(x2):totable()
    for t = 1, 3 do
      for d = 1, 8 do assert.is_true(math.abs(y1[1][t][d] - y2[1][t][d]) < 1e-6) end
    end
  end)

  it("packed qkv attention equals q, k, v split by hand, bit for bit, under fp32 and bf16 autocast", function()
    -- The packed path reads heads in place where the device can (the CPU's bf16 kernels); the split path
    -- copies them into [B, H, T, D]. Same kernels, same operands: the same bits, forward and backward.
    local B, T, H, D = 2, 37, 3, 16
    local C = H * D
    for _, dt in ipairs { "fp32", "bf16" } do
      for _, causal in ipairs { true, false } do
        fp8.manual_seed(7)
        local base = fp8.randn { B, T, 3 * C }
        local r = fp8.randn { B, T, C }
        local function heads(t, i) return t:narrow(3, i * C + 1, C):view(B, T, H, D):transpose(2, 3) end
        local q1 = base:clone():requires_grad(true)
        local q2 = base:clone():requires_grad(true)
        local y1, y2 = fp8.amp.autocast(dt, function()
          local a = nn.functional.qkv_attention(q1, H, { is_causal = causal })
          local b = nn.functional.scaled_dot_product_attention(heads(q2, 0), heads(q2, 1), heads(q2, 2), { is_causal = causal })
          b = b:transpose(2, 3):contiguous():view(B, T, C)
          ;(a * r):sum():backward()
          ;(b * r):sum():backward()
          return a, b
        end)
        local a, b, ga, gb = y1:totable(), y2:totable(), q1.grad:totable(), q2.grad:totable()
        for i = 1, B do for t = 1, T do
          for c = 1, C do
            assert(a[i][t][c] == b[i][t][c], ("%s causal=%s out[%d][%d][%d]: %.9g vs %.9g"):format(dt, causal, i, t, c, a[i][t][c], b[i][t][c]))
          end
          for c = 1, 3 * C do
            assert(ga[i][t][c] == gb[i][t][c], ("%s causal=%s dqkv[%d][%d][%d]: %.9g vs %.9g"):format(dt, causal, i, t, c, ga[i][t][c], gb[i][t][c]))
          end
        end end
      end
    end
  end)

  it("attention gradients match central finite differences", function()
    local a = nn.CausalSelfAttention { n_embd = 4, n_head = 2 }
    local x = fp8.randn { 2, 3, 4 }
    local r = fp8.randn { 2, 3, 4 }
    local function f() return fp8.no_grad(function() return (a(x) * r):sum():item() end) end
    a:zero_grad()
    ;(a(x) * r):sum():backward()
    local w = a.qkv.weight
    local g = w.grad:totable()
    for _, ij in ipairs { { 1, 1 }, { 5, 2 }, { 9, 3 }, { 12, 4 } } do   -- a q, a k and two v rows
      local i, j = ij[1], ij[2]
      local w0, h = w:get { i, j }, 1e-2
      local function put(v) fp8.no_grad(function() w:set({ i, j }, v) end) end   -- a parameter: written as an optimizer does
      put(w0 + h); local fp = f()
      put(w0 - h); local fm = f()
      put(w0)
      local num = (fp - fm) / (2 * h)
      assert.is_true(math.abs(num - g[i][j]) < 2e-3 + 2e-2 * math.abs(num),
        ("dW[%d][%d]: autograd %g, finite difference %g"):format(i, j, g[i][j], num))
    end
  end)

  it("a small GPT learns a repeating sequence and every parameter gets a gradient", function()
    fp8.manual_seed(0)
    local g = nn.GPT { vocab_size = 8, block_size = 16, n_layer = 2, n_head = 2, n_embd = 32 }
    local seq = {}
    for i = 1, 17 do seq[i] = (i * 3) % 8 end
    local x, y = fp8.tensor { table.move(seq, 1, 16, 1, {}) }, fp8.tensor { table.move(seq, 2, 17, 1, {}) }
    local opt = fp8.optim.AdamW(g, { lr = 1e-2, weight_decay = 0 })
    local first, last
    for step = 1, 30 do
      opt:zero_grad()
      local _, loss = g(x, y)
      loss:backward()
      if step == 1 then
        for _, np in ipairs(g:named_parameters()) do assert.is_not_nil(np[2].grad, np[1] .. " has no grad") end
      end
      nn.utils.clip_grad_norm_(g:parameters(), 1.0)
      opt:step()
      first = first or loss:item()
      last = loss:item()
    end
    assert.is_true(first > 1.5 and last < 0.1, ("loss %g → %g"):format(first, last))
    local out = g:generate(fp8.tensor { { seq[1] } }, 8, { temperature = 0 }):totable()[1]
    for i = 1, 9 do assert.are.equal(seq[i], out[i]) end
  end)

  it("cross_entropy's reductions mean, sum and none, with ignore_index and label smoothing, are torch's", function()
    -- the values torch 1.13 gives for the same logits and targets (losses, and the first row's gradient of their sum)
    local x = fp8.tensor { { 1.0, 2.0, 0.5 }, { 0.1, -1.0, 3.0 }, { 2.0, 2.0, 2.0 }, { 0.3, 0.2, 0.1 } }
    local t = fp8.tensor { 2, 0, 1, 1 }
    local g_all = { 0.23122388124465942, 0.6285316944122314, -0.8597556352615356 }
    for _, c in ipairs {
      { {}, 1.7839245796203613, { 0.057805970311164856, 0.15713292360305786, -0.2149389088153839 } },
      { { reduction = "sum" }, 7.135698318481445, g_all },
      { { reduction = "none" }, { 1.9643688201904297, 2.9707744121551514, 1.0986123085021973, 1.101942777633667 },
        g_all },
      { { reduction = "none", ignore_index = 1 }, { 1.9643688201904297, 2.9707744121551514, 0, 0 }, g_all },
      { { reduction = "sum", label_smoothing = 0.1, ignore_index = 1 }, 4.808476448059082,
        { 0.19789054989814758, 0.5951983332633972, -0.793088972568512 } },
    } do
      local xx = x:clone():requires_grad(true)
      local l = nn.functional.cross_entropy(xx, t, c[1])
      local s = l:dim() == 0 and l or l:sum()
      s:backward()
      local got, want = l:dim() == 0 and { l:item() } or l:tolist(), type(c[2]) == "table" and c[2] or { c[2] }
      for i = 1, #want do assert.is_near(want[i], got[i], 1e-5, fp8.kwargs.repr(c[1])) end
      for j = 1, 3 do assert.is_near(c[3][j], xx.grad:tolist()[1][j], 1e-6, fp8.kwargs.repr(c[1])) end
    end
    U.fails_with('cross_entropy: reduction must be "mean", "sum" or "none", got "avg"', nn.functional.cross_entropy, x,
      t, { reduction = "avg" })
    -- a -inf logit at a class that is not the target (a masked vocabulary): finite losses, as torch's (it was NaN)
    local masked = fp8.tensor { { -math.huge, 1, 2 }, { 0.5, 1, 2 } }
    assert.is_near(2.2776, nn.functional.cross_entropy(masked, fp8.tensor { 2, 0 }, { reduction = "sum" }):item(), 1e-4)
    local rows = nn.functional.cross_entropy(masked, fp8.tensor { 2, 0 }, { reduction = "none" }):totable()
    assert.is_near(0.3133, rows[1], 1e-4); assert.is_near(1.9644, rows[2], 1e-4)
    U.fails_with("cross_entropy: target 5 at row 2 is out of range [0, 3)", nn.functional.cross_entropy, x,
      fp8.tensor { 0, 1, 5, 0 }, { reduction = "none" })
    -- no rows: torch's 0 (sum) and [0] (none), with a graph; was "where: shapes [0] and [0, 5] cannot be broadcast"
    local none = fp8.zeros(0, 5):requires_grad(true)
    local s0 = nn.functional.cross_entropy(none, fp8.zeros(0), { reduction = "sum" })
    assert.are.equal(0, s0:item())
    s0:backward()
    assert.are.same({ 0, 5 }, none.grad:shape())
    assert.are.same({ 0 }, nn.functional.cross_entropy(none, fp8.zeros(0), { reduction = "none" }):shape())
  end)

  it("cross_entropy takes class-probability targets [N, C], as torch's, differentiable in both", function()
    -- torch 2.x's values for these logits and targets (losses; the gradients of the smoothed mean)
    local x0 = fp8.tensor { { 1, 2, 3 }, { 0.5, -1, 2 } }
    local t0 = fp8.tensor { { 0.2, 0.3, 0.5 }, { 1, 0, 0 } }
    for _, c in ipairs {
      { {}, { 1.424458622932434 } },
      { { label_smoothing = 0.1 }, { 1.4394586086273193 } },
      { { reduction = "sum", label_smoothing = 0.1 }, { 2.8789172172546387 } },
      { { reduction = "none" }, { 1.1076059341430664, 1.7413113117218018 } },
    } do
      local l = nn.functional.cross_entropy(x0, t0, c[1])
      local got = l:dim() == 0 and { l:item() } or l:tolist()
      for i = 1, #c[2] do assert.is_near(c[2][i], got[i], 1e-5, fp8.kwargs.repr(c[1])) end
    end
    local x, t = x0:clone():requires_grad(true), t0:clone():requires_grad(true)
    nn.functional.cross_entropy(x, t, { label_smoothing = 0.1 }):backward()
    local gx = { -0.06165137141942978, -0.029302425682544708, 0.09095384180545807, -0.37902146577835083,
      0.0028896182775497437, 0.3761318325996399 }
    local gt = { 1.0834226608276367, 0.6334226131439209, 0.18342266976833344, 0.7835900783538818, 1.458590030670166,
      0.10859009623527527 }
    for i = 1, 6 do
      assert.is_near(gx[i], x.grad:reshape { 6 }:tolist()[i], 1e-6)
      assert.is_near(gt[i], t.grad:reshape { 6 }:tolist()[i], 1e-6)
    end
    U.fails_with("cross_entropy: ignore_index applies to class-id targets, not to class probabilities",
      nn.functional.cross_entropy, x0, t0, { ignore_index = 1 })
    U.fails_with("cross_entropy: targets must be [2] (class ids) or [2, 3] (class probabilities) to match "
      .. "logits [2, 3], got [1, 2]", nn.functional.cross_entropy, x0, fp8.tensor { { 1, 2 } })
    -- class ids that require grad: refused under every reduction (sum and none took them, the mean refused them)
    for _, red in ipairs { "mean", "sum", "none" } do
      U.fails_with("cross_entropy: target holds class indices and cannot require grad", nn.functional.cross_entropy,
        x0, fp8.tensor { 0, 2 }:requires_grad(true), { reduction = red })
    end
  end)

  it("clip_grad_norm_ returns the float64 total norm and scales grads to max_norm", function()
    local a, b = fp8.zeros { 2, 2 }:requires_grad(true), fp8.zeros { 3 }:requires_grad(true)
    local ga, gb = fp8.tensor { { 3, 0 }, { 0, 4 } }, fp8.tensor { 12, 0, 0 }
    local loss = (a * ga):sum() + (b * gb):sum()
    loss:backward()
    local total = nn.utils.clip_grad_norm_({ a, b }, 6.5)
    assert.is_true(math.abs(total - 13) < 1e-9, "norm " .. total)
    local coef = 6.5 / (13 + 1e-6)
    local A, B = a.grad:totable(), b.grad:totable()
    assert.is_true(math.abs(A[1][1] - 3 * coef) < 1e-6 and math.abs(A[2][2] - 4 * coef) < 1e-6)
    assert.is_true(math.abs(B[1] - 12 * coef) < 1e-6)
    -- below the limit: untouched
    assert.is_true(math.abs(nn.utils.clip_grad_norm_({ a, b }, 100) - 6.5) < 1e-5)
    assert.is_true(math.abs(a.grad:totable()[1][1] - 3 * coef) < 1e-7)
  end)

  it("get_total_norm and clip_grads_with_norm_ are clip_grad_norm_'s halves; parameters_to_vector and back", function()
    local a, b = fp8.zeros { 2, 2 }:requires_grad(true), fp8.zeros { 3 }:requires_grad(true)
    local loss = (a * fp8.tensor { { 3, 0 }, { 0, 4 } }):sum() + (b * fp8.tensor { 12, 0, 0 }):sum()
    loss:backward()
    local NU = nn.utils
    assert.is_true(math.abs(NU.get_total_norm({ a.grad, b.grad }) - 13) < 1e-9)
    assert.is_true(math.abs(NU.get_total_norm(b.grad, "inf") - 12) < 1e-9)
    assert.are.equal(19, NU.get_total_norm({ a.grad, b.grad }, 1))
    NU.clip_grads_with_norm_({ a, b }, 6.5, 13)
    local coef = 6.5 / (13 + 1e-6)
    assert.is_true(math.abs(b.grad:totable()[1] - 12 * coef) < 1e-6)
    NU.clip_grads_with_norm_({ a, b }, 100, fp8.tensor(6.5))   -- a one-element tensor as torch's total_norm is: kept
    assert.is_true(math.abs(b.grad:totable()[1] - 12 * coef) < 1e-6)
    U.fails_with("get_total_norm: the total norm of order 2 of the gradients is non-finite",
      NU.get_total_norm, { fp8.tensor { math.huge } }, 2, true)
    U.fails_with("clip_grads_with_norm_: total_norm must be a number", NU.clip_grads_with_norm_, { a }, 1, "x")
    -- parameters_to_vector: every parameter flattened in order, differentiable; vector_to_parameters: back, in place
    local m = nn.Linear(3, 2)
    local v = NU.parameters_to_vector(m)
    assert.are.same({ 8 }, v:shape())
    assert.are.equal("CatBackward", v:grad_fn())
    local want = {}
    for _, p in ipairs(m:parameters()) do for _, x in ipairs(p:reshape(-1):totable()) do want[#want + 1] = x end end
    assert.are.same(want, v:totable())
    NU.vector_to_parameters(fp8.tensor { 1, 2, 3, 4, 5, 6, 7, 8 }, m:parameters())
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, m.weight:totable())
    assert.are.same({ 7, 8 }, m.bias:totable())
    assert.is_true(m.weight:is_leaf())
    U.fails_with("vector_to_parameters: vec has 3 elements, the parameters 8", NU.vector_to_parameters,
      fp8.ones { 3 }, m)
  end)

  it("get_submodule, get_parameter and get_buffer find what the named_ lists name, and name what is missing",
    function()
    local g = nn.GPT { vocab_size = 8, block_size = 4, n_layer = 2, n_head = 2, n_embd = 8 }
    for _, nm in ipairs(g:named_parameters()) do assert.are.equal(nm[2], g:get_parameter(nm[1])) end
    for _, nm in ipairs(g:named_modules()) do assert.are.equal(nm[2], g:get_submodule(nm[1])) end
    local l = nn.Linear(2, 2)
    l:register_buffer("scale", fp8.ones { 1 })
    assert.are.equal(l.scale, nn.Sequential(l):get_buffer("0.scale"))
    U.fails_with("get_submodule: TransformerBlock has no submodule 'nope' (at 'blocks.1')", g.get_submodule, g,
      "blocks.1.nope.x")
    U.fails_with("get_parameter: CausalSelfAttention has no parameter 'w'", g.get_parameter, g, "blocks.1.attn.w")
    U.fails_with("get_buffer: target is empty; name the buffer", g.get_buffer, g, "")
    U.fails_with("get_submodule: target must be a dotted name (a string), got 5", g.get_submodule, g, 5)
  end)

  it("clip_grad_norm_ takes any p-norm, as torch's (values from torch 1.13 and 2.15)", function()
    for _, c in ipairs { { 1, 10.5 }, { 2, 5.5 }, { 3, 4.6435220236879 }, { 0.5, 46.968692760438 },
                         { math.huge, 4 }, { "inf", 4 } } do
      local a = fp8.tensor { 1, -2, 3 }:requires_grad(true)
      local b = fp8.tensor { { 0.5, -4 } }:requires_grad(true)
      local loss = (a * fp8.tensor { 1, -2, 3 }):sum() + (b * fp8.tensor { { 0.5, -4 } }):sum()
      loss:backward()
      assert.is_near(c[2], nn.utils.clip_grad_norm_({ a, b }, 1e9, c[1]), 1e-6 * c[2], tostring(c[1]))
    end
    -- clipped by the 1-norm: 3 and 4 sum to 7, scaled to 1
    local a = fp8.tensor { 3, 4 }:requires_grad(true)
    local loss = (a * fp8.tensor { 3, 4 }):sum()
    loss:backward()
    assert.are.equal(7, nn.utils.clip_grad_norm_({ a }, 1, 1))
    assert.is_near(3 / 7, a.grad:totable()[1], 1e-6)
    for _, bad in ipairs { 0, -1, 0 / 0, "two" } do
      U.fails_with("clip_grad_norm_: norm_type must be a number > 0 or math.huge", nn.utils.clip_grad_norm_, { a }, 1,
        bad)
    end
  end)

  it("clip_grad_value_ clamps every gradient element, as torch's; checks before it touches any", function()
    local a, b = fp8.zeros { 3 }:requires_grad(true), fp8.zeros { 2 }:requires_grad(true)
    local loss = (a * fp8.tensor { -3, 0.5, 2 }):sum() + (b * fp8.tensor { 1, -1 }):sum()
    loss:backward()
    nn.utils.clip_grad_value_({ a, b }, 1)
    assert.are.same({ -1, 0.5, 1 }, a.grad:totable())
    assert.are.same({ 1, -1 }, b.grad:totable())
    U.fails_with("clip_grad_value_: clip_value must be a number >= 0, got", nn.utils.clip_grad_value_, { a }, -1)
    U.fails_with("clip_grad_value_: takes (params, clip_value)", nn.utils.clip_grad_value_, { a }, 1, true)
  end)

  it("clip_grad_norm_'s sums over a list: each gradient's Σg² added in order, as one at a time", function()
    local C = require "fp8._optim"
    fp8.manual_seed(11)
    local ts = { fp8.randn { 33, 17 }, fp8.randn { 5 }:to("bf16"), fp8.randn { 8, 9 }:t(), fp8.zeros { 0 },
                 fp8.randn { 40 }:quantize("e4m3") }
    local want = 0.0
    for _, t in ipairs(ts) do want = want + C.sumsq(t) end
    assert.are.equal(want, C.sumsq(ts))                 -- the same double, bit for bit
    assert.are.equal(0.0, C.sumsq({}))
    local ok, err = pcall(C.sumsq, { ts[1], "x" })
    assert.is_false(ok)
    assert.matches("element 2 of the list: expected a tensor, got string", err, 1, true)
    local gone = fp8.zeros { 2 }
    gone:free()
    ok, err = pcall(C.sumsq, { gone })
    assert.is_false(ok)
    assert.matches("element 1 of the list: a tensor has been released", err, 1, true)
  end)

  it("trains a 2-layer MLP on XOR-like data with AdamW", function()
    fp8.manual_seed(3)
    -- 4 clusters: label = xor of the signs
    local xs, ys = {}, {}
    local pts = { { -1, -1, 0 }, { -1, 1, 1 }, { 1, -1, 1 }, { 1, 1, 0 } }
    local noise = fp8.randn { 64, 2 }:totable()
    for i = 1, 64 do
      local p = pts[(i - 1) % 4 + 1]
      xs[i] = { p[1] + 0.1 * noise[i][1], p[2] + 0.1 * noise[i][2] }
      ys[i] = p[3]
    end
    local x, y = fp8.tensor(xs), fp8.tensor(ys)
    local model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))
    local opt = fp8.optim.AdamW(model:parameters(), { lr = 0.05, weight_decay = 0 })
    local first, last
    for step = 1, 150 do
      opt:zero_grad()
      local loss = nn.cross_entropy(model(x), y)
      loss:backward()
      opt:step()
      if step == 1 then first = loss:item() end
      last = loss:item()
    end
    assert.is_true(first > 0.5, "initial loss " .. first)
    assert.is_true(last < 0.05, ("final loss %g (from %g)"):format(last, first))
  end)

  it("F.linear takes no input features or no output features, as torch's (rows counted, not inferred)", function()
    -- in_features 0: y is the bias alone; was "shape [-1, 0] is invalid for a tensor of 0 elements"
    local x, w = fp8.zeros(2, 0):requires_grad(true), fp8.ones(3, 0):requires_grad(true)
    local b = fp8.ones(3):requires_grad(true)
    local y = nn.F.linear(x, w, b)
    assert.are.same({ { 1, 1, 1 }, { 1, 1, 1 } }, y:totable())
    y:sum():backward()
    assert.are.same({ 2, 0 }, x.grad:shape())
    assert.are.same({ 3, 0 }, w.grad:shape())
    assert.are.same({ 2, 2, 2 }, b.grad:totable())
    assert.are.same({ 3 }, nn.F.linear(fp8.zeros(0), fp8.ones(3, 0)):shape())
    -- out_features 0: an empty output, and an empty dY in the backward
    local x2, w2 = fp8.ones(2, 4):requires_grad(true), fp8.ones(0, 4):requires_grad(true)
    local y2 = nn.F.linear(x2, w2)
    assert.are.same({ 2, 0 }, y2:shape())
    y2:sum():backward()
    assert.are.same({ { 0, 0, 0, 0 }, { 0, 0, 0, 0 } }, x2.grad:totable())
  end)

  it("F.cross_entropy and F.nll_loss take torch's [N, C, d1, ...] and unbatched [C] (torch 2.15's values)", function()
    local F = nn.F
    local function same(name, got, want) U.same_values(name, got, want, 2e-6) end
    -- (refused as not [N, C] before 2026-12-02) x = fill([2, 3, 4], 1): 2 samples, 3 classes, 4 positions; gradients
    -- of (y · fill(y's shape, 0)):sum(), or of y for a scalar
    local T = fp8.tensor { { 0, 1, 1, 2 }, { 2, 0, -100, 1 } }
    local function run(f)
      local x = U.fill({ 2, 3, 4 }, 1):requires_grad(true)
      local y = f(x)
      ;(y:dim() > 0 and (y * U.fill(y:shape(), 0)):sum() or y):backward()
      return y, x.grad
    end
    for _, c in ipairs {
      { "ce", function(x) return F.cross_entropy(x, T) end, { 1.771048188 },
        { -0.115265936, 0.008568255, 0.075818419, 0.02759121, 0.096302792, -0.112950996, -0.127927616, 0.096302792,
      0.018963143, 0.104382731, 0.052109189, -0.123894006, 0.075818419, -0.115265936, 0.0, 0.075818419,
      0.014929531, 0.096302792, 0.0, -0.127927616, -0.09074796, 0.018963143, 0.0, 0.052109189 } },
      { "ce none", function(x) return F.cross_entropy(x, T, { reduction = "none" }) end,
        { 1.644347906, 1.563780904, 2.258503914, 2.019347906, 1.008503914, 1.644347906, 0.0, 2.258503914 },
        { 1.109434605, 0.022491669, -0.398046702, 0.193138465, -0.926914334, -0.296496361, 0.671619952, 0.674119532,
      -0.182520255, 0.274004668, -0.27357322, -0.867258012, -0.066341117, 1.00857687, 0.0, -0.33170557,
      -0.01306334, -0.8426494, 0.0, 0.559683323, 0.079404458, -0.1659275, 0.0, -0.227977693 } },
      { "ce ls weight", function(x)
          return F.cross_entropy(x, T, { label_smoothing = 0.2, weight = fp8.tensor { 0.5, 2, 1 } })
        end, { 1.74274826 },
        { -0.034556922, 0.008513993, 0.104407743, 0.018471453, 0.032623224, -0.149948642, -0.171304181, 0.062584095,
      0.001933696, 0.141434625, 0.066896431, -0.081055544, 0.057231843, -0.034556922, 0.0, 0.104407743,
      -0.002815896, 0.032623224, 0.0, -0.171304181, -0.054415949, 0.001933696, 0.0, 0.066896431 } },
      { "nll sum", function(x) return F.nll_loss(F.log_softmax(x, 2), T, { reduction = "sum" }) end, { 12.39733696 },
        { -0.80686152, 0.059977785, 0.530728936, 0.193138465, 0.674119532, -0.790656924, -0.895493269, 0.674119532,
      0.132742003, 0.730679095, 0.364764303, -0.867258012, 0.530728936, -0.80686152, 0.0, 0.530728936, 0.104506716,
      0.674119532, 0.0, -0.895493269, -0.635235667, 0.132742003, 0.0, 0.364764303 } },
      { "ce probs", function(x) return F.cross_entropy(x, F.softmax(U.fill({ 2, 3, 4 }, 2), 2)) end, { 1.645895123 },
        { -0.042198807, -0.058843896, 0.042198807, -0.042198807, 0.0712016, 0.013104542, -0.0712016, 0.0712016,
      -0.029002788, 0.045739349, 0.029002788, -0.029002788, 0.042198807, -0.042198807, -0.016645087, 0.058843892,
      -0.0712016, 0.0712016, -0.058097057, -0.013104545, 0.029002788, -0.029002788, 0.074742138, -0.045739349 } },
    } do
      local y, g = run(c[2])
      same(c[1], y, c[3])
      same(c[1] .. " dx", g, c[4])
    end
    assert.are.same({ 2, 4 }, F.cross_entropy(U.fill({ 2, 3, 4 }, 1), T, { reduction = "none" }):shape())
    local x1 = U.fill({ 3 }, 1):requires_grad(true)
    local y1 = F.cross_entropy(x1, fp8.tensor(2))
    y1:backward()
    same("ce [C]", y1, { 0.535929143 })
    same("ce [C] dx", x1.grad, { 0.31319502, 0.101679534, -0.414874613 })
    assert.are.same({}, F.cross_entropy(x1, fp8.tensor(2), { reduction = "none" }):shape())
    U.fails_with("cross_entropy: logits [2, 3, 4] takes a target [2, 4] (class ids) or [2, 3, 4] (class "
      .. "probabilities), got [2, 3]", F.cross_entropy, U.fill({ 2, 3, 4 }, 1), fp8.zeros { 2, 3 })
  end)

  it("F.layer_norm and F.rms_norm take torch's normalized_shape of several last dims (torch 2.15's values)", function()
    local F = nn.F
    local function same(name, got, want) U.same_values(name, got, want, 2e-6) end
    -- (refused before 2026-12-02) x = fill([2, 3, 4], 1), normalized over [3, 4]; weight fill(2), bias fill(3);
    -- the first row of y and of each gradient
    local x, w, b = U.fill({ 2, 3, 4 }, 1):requires_grad(true), U.fill({ 3, 4 }, 2):requires_grad(true),
      U.fill({ 3, 4 }, 3):requires_grad(true)
    local y = F.layer_norm(x, { 3, 4 }, w, b, 1e-3)
    ;(y * U.fill(y:shape(), 0)):sum():backward()
    same("ln y", y:select(1, 1):select(1, 1), { -0.195621923, -1.609529734, -0.129177138, -1.209236026 })
    same("ln dx", x.grad:select(1, 1):select(1, 1), { -2.844264269, -0.444934726, 0.321177483, 0.54406774 })
    same("ln dw", w.grad:select(1, 1), { -0.494353533, -0.860303462, -0.744740307, -1.181312203 })
    same("ln db", b.grad:select(1, 1), { -1.875, 1.625, -0.625, 0.0 })
    local xr, wr = U.fill({ 2, 3, 4 }, 1):requires_grad(true), U.fill({ 3, 4 }, 2):requires_grad(true)
    local yr = F.rms_norm(xr, { 3, 4 }, wr, 1e-3)
    ;(yr * U.fill(yr:shape(), 0)):sum():backward()
    same("rms y", yr:select(1, 1):select(1, 1), { 0.0, -0.34623304, -0.673230946, -0.538584769 })
    same("rms dx", xr.grad:select(1, 1):select(1, 1), { -2.327455521, 0.10516274, 0.813570619, 1.072614789 })
    same("rms dw", wr.grad:select(1, 1), { -0.538584769, -0.904052973, -0.78864193, -1.077169418 })
    U.fails_with("layer_norm: weight must be [3, 4] to match input [2, 3, 4], got [12]", F.layer_norm, x, { 3, 4 },
      fp8.ones { 12 })
  end)

  it("F.layer_norm takes torch's (input, normalized_shape, weight, bias, eps) too: the last dimension", function()
    -- it said "layer_norm: weight must be a tensor, got table" for torch's F.layer_norm(x, (8,), w, b)
    local x, w, b = fp8.randn(2, 3, 8), fp8.randn(8), fp8.randn(8)
    local want = nn.F.layer_norm(x, w, b, 0.1):totable()
    assert.are.same(want, nn.F.layer_norm(x, { 8 }, w, b, 0.1):totable())
    assert.are.same(want, nn.F.layer_norm(x, 8, w, b, 0.1):totable())
    assert.are.same(nn.F.layer_norm(x, nil, nil):totable(), nn.F.layer_norm(x, { 8 }):totable())
    U.fails_with("layer_norm: normalized_shape {7} must be the input's last dimension, 8 (input [2, 3, 8])",
      nn.F.layer_norm, x, { 7 }, w, b)
    U.fails_with("layer_norm: normalized_shape {2, 8} must be the input's last 2 dims (input [2, 3, 8])",
      nn.F.layer_norm, x, { 2, 8 })
    U.fails_with("layer_norm: takes (input, normalized_shape, weight, bias [, eps]); got 1 more argument",
      nn.F.layer_norm, x, 8, w, b, 1e-5, 0)
  end)
end)

describe("fp8.nn refuses what it would otherwise drop (torch's options it does not offer, extra arguments)", function()
  local F = nn.F
  local cases = {
    { function() return F.embedding(fp8.tensor { 0, 1, 0 }, fp8.randn(2, 2), 0, 2.0) end,
      "embedding: takes (indices, weight [, padding_idx | {padding_idx=, max_norm=, norm_type=}]); got 1 more "
        .. "argument" },
    { function() return F.relu(fp8.ones(2), true) end, "relu: takes (input) (no inplace)" },
    { function() return F.softmax(fp8.ones(2), 1, "bf16") end, "softmax: takes (input [, dim]) (no dtype)" },
    { function() return F.linear(fp8.ones(1, 2), fp8.ones(3, 2), nil, 5) end, "linear: takes (input, weight [, bias])" },
    { function() return F.gelu(fp8.ones(2), { approx = "tanh" }) end, "gelu: unknown option 'approx' (did you mean 'approximate'?)" },
    { function() return F.dropout(fp8.ones(2), 0.5, "yes") end, "dropout: training must be a boolean, got string" },
    { function() return F.mse_loss(fp8.ones(2), fp8.ones(2), { reduction = "avg" }) end, 'mse_loss: reduction must be "mean", "sum" or "none", got "avg"' },
    { function() return F.cross_entropy(fp8.zeros(3, 0), fp8.zeros(3)) end, "cross_entropy: logits [3, 0] have no classes" },
    { function() return F.softmax(fp8.tensor(1.0), 2) end, "softmax: dim 2 out of range for a 0-d tensor" },
    { function() return nn.Sequential({ nn.Linear(2, 3), nil, nn.Linear(3, 4) }) end, "Sequential: layer 2 must be a Module, got nil" },
    { function() return nn.Sequential(nn.Linear(2, 3), nil, nn.Linear(3, 4)) end, "Sequential: layer 2 must be a Module, got nil" },
    { function() return nn.Dropout { 0.1 } end, "Dropout: give p as Dropout(0.1) or Dropout{p=0.1}" },
    { function() return nn.Dropout { p = 0.1, inplace = true } end, "Dropout: unknown option 'inplace'" },
    { function() return nn.Embedding { num_embeddings = 5, embedding_dim = 2, sparse = true } end,
      "Embedding: sparse=true is not supported" },
    { function() return nn.Embedding(5, 2, 0, { max_norm = 1 }) end, "Embedding: takes at most 3 arguments, got 4" },
    { function() local m = nn.Sequential(nn.Linear(2, 2)); return m:named_modules("x", {}, {}) end,
      "Sequential:named_modules: takes (prefix); got 2 more arguments" },
    { function() return nn.Linear(2, 2):named_modules(3) end, "named_modules: expected ([prefix string]), got number" },
    { function() return nn.ReLU(true) end, "ReLU: takes at most 0 arguments, got 1" },
    { function() return nn.Linear(3, 4, true, { x = 1 }) end, "Linear: takes at most 3 arguments, got 4" },
    { function() return nn.LayerNorm(4, { bias = "no" }) end, "LayerNorm: bias must be a boolean, got string" },
    { function() return nn.LayerNorm(4, { elementwise_affine = 0 }) end, "LayerNorm: elementwise_affine must be a boolean" },
    { function() return nn.LayerNorm(4, { eps = -1 }) end, "LayerNorm: eps must be a finite number >= 0, got -1" },
    { function() return nn.GPT { vocab_size = 5, block_size = 4, n_layer = 1, n_head = 1, n_embd = 4, bias = "no" } end, "GPT: bias must be a boolean" },
    { function() local m = nn.Linear(2, 2); m:register_buffer("buf", fp8.ones(1)); m.buf = 5 end, "cannot assign number to buffer 'buf'" },
    -- torch: "attribute 'x' already exists"; both would be kept and state_dict would save both
    { function() local m = nn.Linear(2, 2); m:register_buffer("weight", fp8.ones(1)) end,
      "register_buffer('weight'): the name is already a parameter of this module" },
    { function() local m = nn.Sequential(nn.Linear(2, 2)); m:register_parameter("0", fp8.ones(1)) end,
      "register_parameter('0'): the name is already a submodule of this module" },
    { function() local m = nn.Linear(2, 2); m:add_module("bias", nn.ReLU()) end,
      "add_module('bias'): the name is already a parameter of this module" },
    { function()
        local m = nn.Linear(2, 2); m:register_buffer("b", fp8.ones(1)); m:register_parameter("b", fp8.ones(1))
      end,
      "register_parameter('b'): the name is already a buffer of this module" },
    -- a NaN label_smoothing gave NaN under "sum", and was ignored for class probabilities (the mean's core refused it)
    { function()
        return F.cross_entropy(fp8.randn(2, 3), fp8.tensor { 0, 1 }, { label_smoothing = 0 / 0, reduction = "sum" })
      end,
      "cross_entropy: label_smoothing must be a number in [0, 1]" },
    { function() return F.cross_entropy(fp8.randn(2, 3), fp8.rand(2, 3), { label_smoothing = 0 / 0 }) end,
      "cross_entropy: label_smoothing must be a number in [0, 1]" },
    { function() return F.dropout(fp8.ones(2), 0 / 0) end, "dropout: p must be a probability in [0, 1]" },
    -- torch's uniform_ refuses from > to; the draws would land in (b, a]
    { function() return nn.init.uniform({ 3 }, 1, 0) end, "uniform: the range [a, b) needs a <= b, got a=1 > b=0" },
    { function() return nn.init.uniform_(fp8.zeros(3), 2) end,
      "uniform_: the range [a, b) needs a <= b, got a=2 > b=1" },
    { function() return nn.init.uniform_(fp8.zeros(3), "x") end, 'uniform_: a must be a finite number, got "x"' },
    -- as assignment refuses it: the tensor would never hold a .grad of its own
    { function() local m = nn.Module(); m:register_parameter("p", fp8.ones(2):requires_grad(true) * 2) end,
      "register_parameter('p'): the tensor was made by MulBackward: it would never get a gradient" },
    { function() local m = nn.Linear(2, 2); return m:load_state_dict(m:state_dict(), { strcit = false }) end, "load_state_dict: unknown option 'strcit' (did you mean 'strict'?)" },
    { function() local m = nn.Linear(2, 2); return m:load_state_dict(m:state_dict(), "false") end, "load_state_dict: strict must be a boolean, got string" },
  }
  it("names each problem", function()
    for i, c in ipairs(cases) do
      local ok, err = pcall(c[1])
      assert.is_false(ok, "case " .. i .. " ran: " .. c[2])
      assert.truthy(tostring(err):find(c[2], 1, true), ("case %d: %s"):format(i, tostring(err)))
    end
  end)

  it("mse_loss's mean gradient stays finite under a GradScaler scale of 2^127, as torch's 2/numel times the grad",
    function()
    local x = fp8.tensor { 1.5, -1, 0.5, 2 }:requires_grad(true)
    local scaler = fp8.amp.GradScaler { init_scale = 2.0 ^ 127 }
    scaler:scale(F.mse_loss(x, fp8.zeros(4))):backward()
    -- torch.amp.GradScaler("cpu", init_scale=2.**127): x * 2^126, finite (2 * 2^127 first was inf, a skipped step)
    assert.are.same({ 1.5 * 2 ^ 126, -2.0 ^ 126, 0.5 * 2 ^ 126, 2.0 ^ 127 }, x.grad:totable())
  end)

  it("mse_loss takes torch's reductions; a module registered twice is one child but runs at both places", function()
    local a, b = fp8.tensor { 1, 2, 3 }, fp8.tensor { 0, 0, 0 }
    assert.are.equal(14, F.mse_loss(a, b, { reduction = "sum" }):item())
    assert.are.same({ 1, 4, 9 }, F.mse_loss(a, b, { reduction = "none" }):totable())
    assert.is_true(math.abs(F.mse_loss(a, b):item() - 14 / 3) < 1e-6)
    local x = fp8.tensor { 1, 2, 3 }:requires_grad(true)
    F.mse_loss(x, b, { reduction = "sum" }):backward()
    assert.are.same({ 2, 4, 6 }, x.grad:totable())
    local l = nn.Linear(2, 2)
    local s = nn.Sequential(l, l)
    local calls = 0
    s:apply(function(m) if m == l then calls = calls + 1 end end)
    assert.are.equal(1, calls)
    assert.are.equal(1, #s:children())
    local y = s(fp8.ones(1, 2))
    assert.is_true(((y - l(l(fp8.ones(1, 2)))):abs():max():item()) == 0)
  end)
end)

describe("Module and Sequential as torch's (torch 2.15's answers in the comments)", function()
  it("Sequential indexes by position, as torch's s[i - 1], also after a layer is removed and in a subclass", function()
    local s = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.GELU())
    local gelu = s[3]
    s["1"] = nil   -- torch: delattr(s, "1"); len(s) == 2, s[1] and s[-1] are the GELU, the names stay '0', '2'
    assert.are.equal(2, #s)
    assert.are.equal(gelu, s[2])
    assert.are.equal(gelu, s[-1])
    assert.is_nil(s[3])
    local MySeq = nn.Module.class("MySeq", nn.Sequential)
    local ms = MySeq(nn.Linear(2, 2), nn.ReLU())
    assert.are.equal("ReLU", ms[2]:type_name())
    assert.are.equal("Linear", ms[-2]:type_name())
  end)

  it("Sequential's s[i] = m replaces the layer under its name, as torch's __setitem__; refuses what it cannot",
    function()
    local s = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    local g = nn.GELU()
    s[2] = g   -- torch: s[1] = nn.GELU() prints (1): GELU(...)
    assert.are.equal(g, s["1"])
    assert.are.equal(g, s:children()[2])
    assert.is_nil(rawget(s, 2))
    local lin = nn.Linear(2, 3)
    s[-2] = lin
    assert.are.same({ "0.weight", "0.bias" }, names(s:named_parameters()))
    assert.are.equal(lin.weight, s:parameters()[1])
    U.fails_with("Sequential: index 3 is out of range (2 layers)", function() s[3] = nn.ReLU() end)
    U.fails_with("Sequential: layer 1 must be a Module, got number", function() s[1] = 5 end)
    U.fails_with({ "to remove one: s:pop(1)", 's["0"] = nil' }, function() s[1] = nil end)
  end)

  it("register_parameter, register_buffer and add_module refuse a plain field's or a method's name, as torch's",
    function()
    -- torch: m.x = 5; m.register_parameter("x", ...) → KeyError "attribute 'x' already exists" (also for "forward");
    -- here the plain field would hide the parameter (m.x stayed 5) and a parameter named "train" would hide the method
    local m = nn.Module()
    m.x = 5
    U.fails_with("register_parameter('x'): the name is already a plain field of this module",
      function() m:register_parameter("x", fp8.ones(1)) end)
    U.fails_with("register_buffer('x'): the name is already a plain field",
      function() m:register_buffer("x", fp8.ones(1)) end)
    U.fails_with("add_module('x'): the name is already a plain field", function() m:add_module("x", nn.ReLU()) end)
    U.fails_with("register_parameter('forward'): the name is already an attribute of Module (a method or class field)",
      function() m:register_parameter("forward", fp8.ones(1)) end)
    U.fails_with("add_module('train'): the name is already an attribute",
      function() m:add_module("train", nn.ReLU()) end)
    assert.are.equal(5, m.x)
    assert.are.equal(0, #m:parameters() + #m:buffers() + #m:children())
    m.x = nil
    local p = m:register_parameter("x", fp8.ones(1))
    assert.are.equal(p, m.x)
    assert.are.equal(p, m:register_parameter("x", p))   -- registering the same kind again replaces, as torch's
  end)

  it("Sequential:append refuses a name a layer holds after a removal, where torch's replaces that layer", function()
    -- torch: s = Sequential(Linear(2,3), ReLU(), Linear(3,1)); delattr(s, "1"); s.append(GELU()) → (0): Linear,
    -- (2): GELU: the last Linear is gone without a word
    local s = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    local last = s[3]
    s["1"] = nil
    U.fails_with("Sequential:append: the new layer's name '2' (the layer count) is a layer's already",
      function() s:append(nn.GELU()) end)
    assert.are.equal(last, s["2"])
    assert.are.equal(2, #s)
    s:add_module("5", nn.GELU())
    s:append(nn.ReLU())   -- a free name appends as before
    assert.are.same({ "0", "2", "5", "3" }, names(s:named_children()))
  end)

  -- names and types of the layers in order, "0:Linear 1:GELU ..."
  local function layout(s)
    local t = {}
    for _, nc in ipairs(s:_all_children()) do t[#t + 1] = nc[1] .. ":" .. nc[2]:type_name() end   -- (every name)
    return table.concat(t, " ")
  end

  it("Sequential:insert and pop as torch's insert(i - 1, m) and pop(i - 1): the layers renamed 0..n-1 in order",
    function()
    local s = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    local last = s[3]
    assert.are.equal(s, s:insert(2, nn.GELU()))   -- torch: s.insert(1, GELU()) → 0 Linear, 1 GELU, 2 ReLU, 3 Linear
    assert.are.equal("0:Linear 1:GELU 2:ReLU 3:Linear", layout(s))
    assert.are.same({ "0.weight", "0.bias", "3.weight", "3.bias" }, s:state_dict_keys())   -- torch's keys
    assert.are.equal(last, s["3"])
    s:insert(-1, nn.Dropout())       -- torch: insert(-1, Dropout()): before the last
    assert.are.equal("0:Linear 1:GELU 2:ReLU 3:Dropout 4:Linear", layout(s))
    s:insert(#s + 1, nn.ReLU())      -- torch: insert(len(s), ...): at the end
    s:insert(-#s, nn.GELU())         -- torch: insert(-len(s), ...): first
    assert.are.equal("0:GELU 1:Linear 2:GELU 3:ReLU 4:Dropout 5:Linear 6:ReLU", layout(s))
    assert.are.equal("GELU", s:pop(3):type_name())   -- torch: pop(2) → GELU; 1.weight ... 4.bias
    assert.are.equal("0:GELU 1:Linear 2:ReLU 3:Dropout 4:Linear 5:ReLU", layout(s))
    assert.are.same({ "1.weight", "1.bias", "4.weight", "4.bias" }, s:state_dict_keys())
    assert.are.equal("ReLU", s:pop(-1):type_name())  -- torch: pop(-1) → the last
    assert.are.equal(last, s:pop(-1))
    assert.are.equal("0:GELU 1:Linear 2:ReLU 3:Dropout", layout(s))
    -- a layer held twice: pop takes the position only (torch: Sequential(l, ReLU(), l).pop(0) → 0 ReLU, 1 Linear)
    local l = nn.Linear(2, 2)
    local r = nn.Sequential(l, nn.ReLU(), l)
    assert.are.equal(l, r:pop(1))
    assert.are.equal("0:ReLU 1:Linear", layout(r))
    assert.are.equal(l, r[2])
    -- the layers run in the new order
    local m = nn.Sequential(nn.Linear(3, 2))
    m:insert(1, nn.ReLU())
    local x = fp8.tensor { { -1, 2, -3 } }
    assert.are.same(m[2](nn.F.relu(x)):tolist(), m(x):tolist())
    assert.are_not.same(m[2](x):tolist(), m(x):tolist())
  end)

  it("Sequential:insert and pop rename given names too (torch's pop does; its insert raises KeyError there)",
    function()
    -- torch: s = Sequential(Linear, ReLU, Linear); delattr(s, "1"); s.pop(0) → 0 Linear (the last one)
    local s = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    local last = s[3]
    s["1"] = nil
    s:pop(1)
    assert.are.same({ "0" }, names(s:named_children()))
    assert.are.equal(last, s["0"])
    s = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    s["1"] = nil
    s:insert(1, nn.GELU())   -- "0", "2" were left: now 0 GELU, 1 Linear, 2 Linear, and append has a free name again
    assert.are.equal("0:GELU 1:Linear 2:Linear", layout(s))
    s:append(nn.ReLU())
    assert.are.equal("0:GELU 1:Linear 2:Linear 3:ReLU", layout(s))
    s = nn.Sequential()
    s:add_module("a", nn.ReLU())
    s:add_module("b", nn.GELU())
    s:pop(1)                 -- torch: Sequential(OrderedDict(a=ReLU(), b=GELU())).pop(0) → 0 GELU
    assert.are.equal("0:GELU", layout(s))
  end)

  it("Sequential:insert and pop move Module.generation (what the Accelerator's walk for FP8 layers is kept by)",
    function()
    local s = nn.Sequential(nn.ReLU(), nn.Linear(2, 2))
    local g = nn.Module.generation()
    s:insert(1, nn.GELU())
    assert.is_true(nn.Module.generation() > g)
    g = nn.Module.generation()
    s:pop(2)
    assert.is_true(nn.Module.generation() > g)
    g = nn.Module.generation()
    s:extend { nn.ReLU() }
    assert.is_true(nn.Module.generation() > g)
  end)

  it("Sequential:extend appends a list's or a Sequential's layers, as torch's; checks them all first", function()
    local s = nn.Sequential(nn.Linear(2, 2))
    assert.are.equal(s, s:extend { nn.ReLU(), nn.GELU() })   -- torch: extend([ReLU(), GELU()]) → 1 ReLU, 2 GELU
    s:extend(nn.Sequential(nn.Dropout()))
    assert.are.equal("0:Linear 1:ReLU 2:GELU 3:Dropout", layout(s))
    s:extend {}
    assert.are.equal(4, #s)
    s:extend(s)   -- its layers as before the call (torch raises "dictionary changed size" after adding one)
    assert.are.equal("0:Linear 1:ReLU 2:GELU 3:Dropout 4:Linear 5:ReLU 6:GELU 7:Dropout", layout(s))
    assert.are.equal(s[1], s[5])
    -- torch: extend([ReLU(), 5]) adds the ReLU, then TypeError "int is not a Module subclass"; here nothing is added
    U.fails_with("Sequential:extend: item 2 must be a Module, got 5", function() s:extend { nn.ReLU(), 5 } end)
    U.fails_with("Sequential:extend: item 2 must be a Module, got nil",
      function() s:extend { nn.ReLU(), nil, nn.GELU() } end)
    assert.are.equal(8, #s)
    -- torch: extend(Linear(2, 2)) → TypeError "'Linear' object is not iterable"
    U.fails_with("Sequential:extend: expected a list of Modules or a Sequential, got a Linear",
      function() s:extend(nn.Linear(2, 2)) end)
    U.fails_with("Sequential:extend: expected a list of Modules or a Sequential, got 5", function() s:extend(5) end)
    U.fails_with('Sequential:extend: expected a list of Modules, got key "a"',
      function() s:extend { a = nn.ReLU() } end)
    -- a name a removal left a layer's (see append): refused before any is added, where torch's replaces the layer
    local r = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    r["1"] = nil
    U.fails_with("Sequential:extend: the name '2' for item 1 (the layer count) is a layer's already",
      function() r:extend { nn.GELU(), nn.ReLU() } end)
    assert.are.equal("0:Linear 2:Linear", layout(r))
  end)

  it("Sequential:insert and pop refuse out-of-range indices (torch's IndexError), non-integers and non-Modules",
    function()
    local s = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.GELU())
    -- torch: insert(4, m) / insert(-4, m) on 3 layers → IndexError "Index out of range"
    U.fails_with("Sequential:insert: index 5 is out of range (3 layers: 1..4, or -3..-1 from the end; positions count "
      .. "from 1)", function() s:insert(5, nn.ReLU()) end)
    U.fails_with("Sequential:insert: index -4 is out of range", function() s:insert(-4, nn.ReLU()) end)
    U.fails_with("Sequential:insert: index 0 is out of range", function() s:insert(0, nn.ReLU()) end)
    -- torch: AssertionError "module should be of type: Module"
    U.fails_with("Sequential:insert: expected a Module, got 5", function() s:insert(1, 5) end)
    U.fails_with("Sequential:insert: index must be an integer, got a ReLU (the index comes first",
      function() s:insert(nn.ReLU()) end)
    U.fails_with("Sequential:insert: index must be an integer, got 1.5", function() s:insert(1.5, nn.ReLU()) end)
    -- torch: pop(3) / pop(-4) on 3 layers → IndexError "index 3 is out of range"
    U.fails_with("Sequential:pop: index 4 is out of range (3 layers: 1..3, or -3..-1 from the end",
      function() s:pop(4) end)
    U.fails_with("Sequential:pop: index -4 is out of range", function() s:pop(-4) end)
    U.fails_with("Sequential:pop: index 0 is out of range", function() s:pop(0) end)
    U.fails_with("Sequential:pop: index 1 is out of range (no layers", function() nn.Sequential():pop(1) end)
    U.fails_with("Sequential:pop: index must be an integer, got nil", function() s:pop() end)
    U.fails_with('Sequential:pop: index must be an integer, got "1" (a string)', function() s:pop("1") end)
    U.fails_with("Sequential:pop: takes (index); got 1 more argument", function() s:pop(1, 2) end)
    assert.are.equal("0:Linear 1:ReLU 2:GELU", layout(s))
    assert.are.equal("ReLU", s:pop(2.0):type_name())   -- a float with an integer value is that integer
    -- a new name that is another kind's here is refused before anything changes
    s:register_parameter("2", fp8.ones(1))
    U.fails_with("Sequential:insert: the layers are renamed \"0\"..\"2\", and '2' is a parameter of this Sequential",
      function() s:insert(1, nn.ReLU()) end)
    assert.are.equal("0:Linear 1:GELU", layout(s))
  end)

  it("register_buffer(name, t, false) keeps a buffer out of state_dict and its keys, as torch's persistent=False",
    function()
    -- torch: m = Linear(2, 2); m.register_buffer("mask", zeros(2), persistent=False): named_buffers has 'mask',
    -- state_dict has ['weight', 'bias']; loading a state_dict with "mask" → Unexpected key(s) in state_dict: "mask"
    local m = nn.Linear(2, 2)
    local mask = m:register_buffer("mask", fp8.ones(2), false)
    m:register_buffer("kept", fp8.zeros(1))
    assert.are.same({ "mask", "kept" }, names(m:named_buffers()))
    assert.are.same({ "weight", "bias", "kept" }, m:state_dict_keys())
    local sd = m:state_dict()
    assert.is_nil(sd.mask)
    assert.is_not_nil(sd.kept)
    local r = nn.Sequential(m):load_state_dict({ ["0.weight"] = sd.weight, ["0.bias"] = sd.bias, ["0.kept"] = sd.kept })
    assert.are.same({ {}, {} }, { r.missing_keys, r.unexpected_keys })
    sd.mask = fp8.zeros(2)
    U.fails_with('unexpected key(s) in state_dict: "mask"', function() m:load_state_dict(sd) end)
    r = m:load_state_dict(sd, false)
    assert.are.same({ {}, { "mask" } }, { r.missing_keys, r.unexpected_keys })
    assert.are.same({ 1, 1 }, mask:totable())   -- not written
    m.mask = fp8.zeros(2)   -- reassigned: still not persistent, as torch's
    assert.is_nil(m:state_dict().mask)
    m:register_buffer("mask", fp8.ones(2))   -- registered again, persistent by default
    assert.is_not_nil(m:state_dict().mask)
    U.fails_with("register_buffer('b'): persistent must be a boolean, got", function()
      m:register_buffer("b", fp8.ones(1), "no") end)
  end)

  it("Module:to refuses a dtype by name, saying the module's dtype does not change", function()
    -- torch: Linear(2, 2).to(torch.bfloat16) converts the parameters; fp8lab's answer named only devices
    local l = nn.Linear(2, 2)
    U.fails_with("to: a module's parameters keep their dtype, got 'bf16'", function() l:to("bf16") end)
    U.fails_with("got 'half'", function() l:to("half") end)
    U.fails_with('to: device must be "cpu" or "cuda", got \'tpu\'', function() l:to("tpu") end)
    assert.are.equal("fp32", l.weight:dtype())
  end)

  it("a Module assigned over a plain field is registered, as torch's __setattr__ registers it", function()
    -- Lua's __newindex never saw the second assignment: the layer was not in parameters(), so nothing trained it
    local M = nn.Module.class("PlainThenModule")
    function M:__init() self.proj = false; self.a = nn.Linear(2, 2); self.proj = nn.Linear(2, 3) end
    function M:forward(x) return self.proj(self.a(x)) end
    local m = M()
    local names = {}
    for _, np in ipairs(m:named_parameters()) do names[#names + 1] = np[1] end
    assert.same({ "a.weight", "a.bias", "proj.weight", "proj.bias" }, names)
    assert.is_nil(rawget(m, "proj"))
    assert.truthy(tostring(m):find("(proj): Linear(in_features=2, out_features=3", 1, true))
    assert.truthy(m:state_dict()["proj.weight"])
    assert.same({ 1, 3 }, m(fp8.ones(1, 2)):shape())
  end)

  it("m:half(), m:bfloat16(), m:double() are refused by name; m:float() is self where everything is fp32", function()
    -- torch's names: they were "attempt to call a nil value (method 'half')"
    local l = nn.Linear(2, 2)
    U.fails_with("half: a module's parameters keep their dtype (torch's m.half() is not offered: lower precision",
      function() l:half() end)
    U.fails_with("bfloat16: a module's parameters keep their dtype", function() l:bfloat16() end)
    U.fails_with("double: a module's parameters keep their dtype (torch's m.double() is not offered: fp8lab has no "
      .. "float64 tensors)", function() l:double() end)
    assert.are.equal(l, l:float())
    assert.are.equal("fp32", l.weight:dtype())
    -- a tensor of another dtype is named, not converted behind the optimizer's back
    l:register_buffer("b16", fp8.ones(2):to("bf16"))
    U.fails_with("float: buffer 'b16' is bf16, and a module's tensors are not converted in place",
      function() l:float() end)
  end)

  it("load_state_dict takes a shared tensor under its other names, as torch's state_dict lists it, never missing",
    function()
    -- torch: Sequential(l, l).state_dict() has 0.weight ... 1.bias; loading them matches every key, the last one wins
    local l = nn.Linear(2, 2)
    local s = nn.Sequential(l, l)
    local r = s:load_state_dict({ ["0.weight"] = fp8.ones(2, 2), ["0.bias"] = fp8.ones(2),
      ["1.weight"] = fp8.zeros(2, 2), ["1.bias"] = fp8.ones(2) })
    assert.are.same({ {}, {} }, { r.missing_keys, r.unexpected_keys })
    assert.are.same({ { 0, 0 }, { 0, 0 } }, l.weight:totable())
    r = s:load_state_dict(s:state_dict())   -- fp8lab's own state_dict lists it once: the other name is not missing
    assert.are.same({ {}, {} }, { r.missing_keys, r.unexpected_keys })
    U.fails_with('size mismatch for "1.weight": copying a tensor of shape [3, 2]', s.load_state_dict, s,
      { ["0.weight"] = fp8.ones(2, 2), ["0.bias"] = fp8.ones(2), ["1.weight"] = fp8.zeros(3, 2) })
    U.fails_with('unexpected key(s) in state_dict: "2.weight"', s.load_state_dict, s,
      { ["0.weight"] = fp8.ones(2, 2), ["0.bias"] = fp8.ones(2), ["2.weight"] = fp8.zeros(2, 2) })
  end)
end)

describe("Module forward hooks (torch's register_forward_pre_hook / register_forward_hook)", function()
  local function max_abs(t) return t:abs():max():item() end

  it("a pre-hook changes the arguments, a forward hook sees them and the results and may replace those", function()
    fp8.manual_seed(1)
    local lin = nn.Linear(3, 2)
    local x = fp8.randn(4, 3)
    local want = lin(x * 2)
    local seen = {}
    local pre = lin:register_forward_pre_hook(function(m, args)
      assert.are.equal(lin, m)
      assert.are.equal(1, args.n)
      return args[1] * 2                        -- one value: the only argument (torch wraps it so too)
    end)
    local post = lin:register_forward_hook(function(m, args, out)
      seen[#seen + 1] = { args[1], out }
    end)
    local y = lin(x)
    assert.are.equal(0, max_abs(y - want))
    assert.are.equal(1, #seen)
    assert.are.equal(0, max_abs(seen[1][1] - x * 2))   -- the arguments forward got
    assert.are.equal(y, seen[1][2])
    pre:remove()
    local h2 = lin:register_forward_hook(function(_, _, out) return out * 0 end)
    assert.are.equal(0, max_abs(lin(x)))
    assert.are.equal(2, #seen)
    assert.is_true(h2.id > post.id)
    h2:remove(); h2:remove()                    -- a second remove does nothing
    assert.are.equal(0, max_abs(lin(x) - lin:forward(x)))
    post:remove()
    -- a table from a pre-hook is the argument list; several results of forward go to the hook and can be replaced
    local M = nn.Module.class("TwoOut")
    function M:forward(a, b) return a + b, a - b end
    local m = M()
    m:register_forward_pre_hook(function(_, args) return { args[2], args[1] } end)
    m:register_forward_hook(function(_, args, s, d)
      assert.are.equal(2, args.n)
      return d, s
    end)
    local first, second = m(fp8.tensor { 5 }, fp8.tensor { 2 })
    -- forward(2, 5) gives 7, -3; the hook returns them swapped
    assert.are.same({ { -3 }, { 7 } }, { first:totable(), second:totable() })
  end)

  it("help() has an entry for each hook method and the handle", function()
    local help = require "fp8.help"
    local lin = nn.Linear(2, 2)
    local h = lin:register_forward_hook(function() end)
    for _, v in ipairs { lin.register_forward_hook, lin.register_forward_pre_hook, lin.register_full_backward_hook,
                         lin.register_full_backward_pre_hook, h, h.remove } do
      assert.is_truthy(help.lookup(v))
    end
    h:remove()
  end)

  it("runs hooks in registration order, prepend first; a hook removing itself leaves this call's order", function()
    local m = nn.ReLU()
    local order = {}
    local h1
    h1 = m:register_forward_hook(function() order[#order + 1] = "a"; h1:remove() end)
    m:register_forward_hook(function() order[#order + 1] = "b" end)
    m:register_forward_hook(function() order[#order + 1] = "c" end, { prepend = true })
    m(fp8.ones(1))
    m(fp8.ones(1))
    assert.are.same({ "c", "a", "b", "c", "b" }, order)
    do
      local h <close> = m:register_forward_pre_hook(function() order[#order + 1] = "pre" end)
    end                                          -- closed: removed
    m(fp8.ones(1))
    assert.are.same({ "c", "a", "b", "c", "b", "c", "b" }, order)
  end)

  it("refuses what it cannot honour and names a failing hook's module", function()
    local lin = nn.Linear(2, 2)
    U.fails_with("register_forward_hook: expected a function (hook), got 5", lin.register_forward_hook, lin, 5)
    U.fails_with("register_forward_pre_hook: unknown option 'always_call' (valid: prepend, with_kwargs)",
      lin.register_forward_pre_hook, lin, print, { always_call = true })
    U.fails_with("register_forward_hook: with_kwargs=true is not supported", lin.register_forward_hook, lin, print,
      { with_kwargs = true })
    U.fails_with("register_forward_hook: prepend must be a boolean, got 1", lin.register_forward_hook, lin, print,
      { prepend = 1 })
    U.fails_with("called without its object", lin.register_forward_hook)
    local callable = setmetatable({}, { __call = function(_, m, args, out) return out + 1 end })
    lin:register_forward_hook(callable)         -- a table with __call is a function as well
    local s = nn.Sequential(nn.ReLU(), lin)
    lin:register_forward_hook(function() error("boom", 0) end)
    U.fails_with("in layer 1 (Linear) forward hook: boom", s, fp8.ones(1, 2))   -- names count from 0
    local lying = nn.Linear(2, 2)
    lying:register_forward_pre_hook(function() return setmetatable({}, { __len = function() return 1 << 62 end }) end)
    U.fails_with("Linear forward pre-hook: its table of arguments: too many results to unpack", lying, fp8.ones(1, 2))
    local s2 = nn.Sequential(nn.ReLU())
    s2[1]:register_forward_pre_hook(function() error("early", 0) end)
    U.fails_with("in layer 0 (ReLU) forward pre-hook: early", s2, fp8.ones(1))
  end)

  it("always_call: the hook also runs when forward raises, with the arguments and no results", function()
    local lin = nn.Linear(2, 2)
    local calls = {}
    lin:register_forward_hook(function(_, args, ...) calls[#calls + 1] = { args.n, select("#", ...) } end,
      { always_call = true })
    lin:register_forward_hook(function() calls[#calls + 1] = "plain" end)
    assert.has_error(function() lin(fp8.ones(1, 3)) end)
    assert.are.same({ { 1, 0 } }, calls)        -- the plain hook did not run
    lin(fp8.ones(1, 2))
    assert.are.same({ { 1, 0 }, { 1, 1 }, "plain" }, calls)   -- on success once each, not twice
  end)

  it("a hooked module is called, never fused away: GELU inside an FP8Linear's cast, a LayerNorm in the projection's",
    function()
    local function model()
      fp8.manual_seed(2)
      return fp8.convert_model(nn.Sequential(nn.Linear(16, 32), nn.GELU("tanh"), nn.Linear(32, 16)),
        { recipe = { backend = "te" } })
    end
    local x = fp8.randn(4, 16)
    local plain = model()
    local want = fp8.fp8_autocast(function() return plain(x) end)
    assert.are.equal(1, plain[3].fp8_meta:state().fused_input_casts)   -- the fused path, unhooked
    local m = model()
    local seen = 0
    local h = m[2]:register_forward_hook(function(_, _, out) seen = seen + 1; return out end)
    local got = fp8.fp8_autocast(function() return m(x) end)
    assert.are.equal(1, seen)
    assert.are.equal(0, m[3].fp8_meta:state().fused_input_casts)
    assert.is_true(max_abs(got - want) <= 1e-6 * (1 + max_abs(want)))
    h:remove()
    fp8.fp8_autocast(function() return m(x) end)
    assert.are.equal(1, m[3].fp8_meta:state().fused_input_casts)      -- removed: fused again
    -- in a GPT trained through the Accelerator: the first block's LayerNorm and attention, hooked, run as modules;
    -- an activation captured by a hook keeps its gradient (retain_grad)
    fp8.manual_seed(3)
    local gpt = nn.GPT { vocab_size = 16, block_size = 8, n_layer = 1, n_head = 2, n_embd = 32 }
    local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} }, cpu = true }
    gpt = acc:prepare(gpt)
    local captured
    local blk = gpt.blocks[1]
    local hl = blk.ln1:register_forward_hook(function(_, _, out) captured = out:retain_grad() end)
    local ids = fp8.tensor { { 1, 2, 3, 4, 5, 6, 7, 8 } }
    local _, loss = gpt(ids, ids)
    acc:backward(loss)
    assert.are.same({ 1, 8, 32 }, captured.grad:shape())
    assert.is_true(max_abs(captured.grad) > 0)
    assert.are.equal(0, blk.attn.qkv.fp8_meta:state().fused_input_casts)
    hl:remove()
  end)

  it("backward hooks: the pre-hook gets grad_output, the full hook grad_input and grad_output; both may replace them",
    function()
    fp8.manual_seed(4)
    local function model() return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)) end
    local x = fp8.randn(3, 4):requires_grad(true)
    -- the reference: the gradients a plain backward gives at the last layer's input and output
    fp8.manual_seed(5)
    local ref = model()
    local h1 = ref[2](ref[1](x)):retain_grad()
    local out = ref[3](h1):retain_grad()
    ;(out * out):sum():backward()
    fp8.manual_seed(5)
    local m = model()
    local log = {}
    m[3]:register_full_backward_pre_hook(function(mod, go)
      assert.are.equal(m[3], mod)
      log[#log + 1] = { "pre", go[1] }
    end)
    local h = m[3]:register_full_backward_hook(function(_, gi, go) log[#log + 1] = { "full", gi[1], go[1] } end)
    m[1]:register_full_backward_hook(function(_, gi, go) log[#log + 1] = { "first", gi[1], go[1] } end)
    x.grad = nil
    local y = m(x)
    ;(y * y):sum():backward()
    assert.are.same({ "pre", "full", "first" }, { log[1][1], log[2][1], log[3][1] })
    assert.are.equal(0, max_abs(log[1][2] - out.grad))
    assert.are.equal(0, max_abs(log[2][2] - h1.grad))
    assert.are.equal(0, max_abs(log[2][3] - out.grad))
    assert.are.same({ 3, 4 }, log[3][2]:shape())  -- x requires grad: the first layer's input gradient
    assert.are.equal(0, max_abs(m[1].weight.grad - ref[1].weight.grad))
    h:remove()
    -- replacing: grad_input zeroed stops what reaches the layers before; grad_output doubled doubles the layer's own
    fp8.manual_seed(5)
    local z = model()
    z[3]:register_full_backward_hook(function(_, gi) return { gi[1] * 0 } end)
    z[3]:register_full_backward_pre_hook(function(_, go) return { go[1] * 2 } end)
    local yz = z(x)
    ;(yz * yz):sum():backward()
    assert.are.equal(0, max_abs(z[1].weight.grad))
    assert.is_true(max_abs(z[3].weight.grad - ref[3].weight.grad * 2) <= 1e-6 * max_abs(ref[3].weight.grad))
  end)

  it("backward hooks take a forward with several results of which one requires grad (the others pass as they are)",
    function()
    local M = nn.Module.class("Aux")
    function M:forward(x) return 7, x * 3, x:detach() * 2 end
    local m = M()
    local seen = {}
    m:register_full_backward_pre_hook(function(_, go)
      seen.pre = { go.n, go[1], go[2]:totable(), go[3] }
      return { nil, go[2] * 10 }
    end)
    m:register_full_backward_hook(function(_, gi, go) seen.full = { gi[1]:totable(), go.n, go[2]:totable() } end)
    local x = fp8.tensor({ 1, 2 }):requires_grad(true)
    local a, y, d = m(x)
    assert.are.equal(7, a)
    assert.is_false(d:requires_grad())
    assert.are.same({ 2, 4 }, d:totable())
    y:sum():backward()
    assert.are.same({ 3, nil, { 1, 1 }, nil }, seen.pre)
    assert.are.same({ { 30, 30 }, 3, { 10, 10 } }, seen.full)   -- the replaced gradient went into the module
    assert.are.same({ 30, 30 }, x.grad:totable())
    -- a pre-hook's table without the gradient where the result is: named
    local m2 = M()
    m2:register_full_backward_pre_hook(function() return { 5 } end)
    local _, y2 = m2(x)
    U.fails_with("Aux backward hook: pre-hook returned a table; it returns nothing or a table like grad_output (the "
      .. "gradient at 2)", function() y2:sum():backward() end)
  end)

  it("a backward-hooked call's results are freed with the caller's last reference (no hook holds them)", function()
    local mem = require "fp8._memory"
    local M = nn.Module.class("Aux3")
    function M:forward(x) return 7, x * 3 end
    local m = M()
    m:register_full_backward_pre_hook(function() end)
    local x = fp8.ones(1000):requires_grad(true)
    local function settle()   -- collect, then let the hooks' table drop the functions of freed hooks
      collectgarbage(); collectgarbage()
      fp8.ones(1):requires_grad(true):register_hook(print):remove()
      collectgarbage(); collectgarbage()
    end
    settle()
    local base = mem.bytes()
    for _ = 1, 50 do local _, y = m(x); y = nil end
    settle()
    assert.is_true(mem.bytes() - base < 4000, ("%d bytes kept"):format(mem.bytes() - base))   -- one result: 4000
  end)

  it("backward hooks run in registration order, prepend=true first", function()
    local lin = nn.Linear(2, 2)
    local order = {}
    lin:register_full_backward_pre_hook(function() order[#order + 1] = "pre a" end)
    lin:register_full_backward_pre_hook(function() order[#order + 1] = "pre b" end, { prepend = true })
    lin:register_full_backward_hook(function() order[#order + 1] = "full a" end)
    lin:register_full_backward_hook(function() order[#order + 1] = "full b" end, { prepend = true })
    lin(fp8.ones(1, 2):requires_grad(true)):sum():backward()
    assert.are.same({ "pre b", "pre a", "full b", "full a" }, order)
  end)

  it("backward hooks see every argument's and result's gradient at once (torch 2.15's values)", function()
    local M = nn.Module.class("Two")
    function M:forward(a, b) return a * b, a + b end
    local two = M()
    local log = {}
    local function list(t, n)
      local r = {}
      for i = 1, n do r[i] = t[i] and t[i]:totable() or "nil" end
      return r
    end
    two:register_full_backward_pre_hook(function(_, go) log[#log + 1] = { "pre", list(go, 2) } end)
    two:register_full_backward_hook(function(_, gi, go)
      log[#log + 1] = { "full", list(gi, 2), list(go, 2) }
      return { gi[1] * 10, nil }
    end)
    local a, b = fp8.tensor({ 1, 2 }):requires_grad(true), fp8.tensor({ 3, 4 }):requires_grad(true)
    local p, q = two(a, b)
    assert.are.equal("BackwardHookFunctionBackward", p:grad_fn())
    local loss = (p * 2 + q):sum()
    loss:backward()
    -- torch: [('pre', [[2, 2], [1, 1]]), ('full', [[7, 9], [3, 5]], [[2, 2], [1, 1]])], a.grad [70, 90], b.grad None
    assert.are.same({ { "pre", { { 2, 2 }, { 1, 1 } } }, { "full", { { 7, 9 }, { 3, 5 } }, { { 2, 2 }, { 1, 1 } } } },
      log)
    assert.are.same({ 70, 90 }, a.grad:totable())
    assert.are.same({ 0, 0 }, b.grad:totable())   -- (torch leaves it None: here the link hands it zeros)
    -- one result used: the other's gradient is nil (torch: None), both arguments' come
    log, a.grad, b.grad = {}, nil, nil
    local p2 = two(a, b)
    p2:sum():backward()
    assert.are.same({ { "pre", { { 1, 1 }, "nil" } }, { "full", { { 3, 4 }, { 1, 2 } }, { { 1, 1 }, "nil" } } }, log)
    assert.are.same({ 30, 40 }, a.grad:totable())
    -- a pre-hook must give a tensor wherever a gradient came
    local t2 = M()
    t2:register_full_backward_pre_hook(function(_, go) return { go[1] } end)
    local p3, q3 = t2(a, b)
    local l3 = (p3 + q3):sum()
    U.fails_with("Two backward hook: pre-hook returned a table; it returns nothing or a table like grad_output (the "
      .. "gradient at 2)", function() l3:backward() end)
  end)

  it("backward hooks: refused where they cannot be honoured, silent without grad, and no fused path", function()
    local lin = nn.Linear(2, 2)
    lin:register_full_backward_hook(function() return 5 end)
    U.fails_with("Linear backward hook: returned 5; it returns nothing or a table like grad_input",
      function() lin(fp8.ones(1, 2):requires_grad(true)):sum():backward() end)
    local lin2 = nn.Linear(2, 2)
    lin2:register_full_backward_hook(function() return { "x" } end)
    U.fails_with('Linear backward hook: returned "x" (a string) as grad_input[1]; it is a tensor (the gradient to use) '
      .. "or nil", function() lin2(fp8.ones(1, 2):requires_grad(true)):sum():backward() end)
    U.fails_with("register_full_backward_hook: unknown option 'always_call' (valid: prepend)",
      lin.register_full_backward_hook, lin, print, { always_call = true })
    -- no_grad: nothing is wrapped, no hook runs
    local called = false
    local l2 = nn.Linear(2, 2)
    l2:register_full_backward_pre_hook(function() called = true end)
    local y = fp8.no_grad(function() return l2(fp8.ones(1, 2)) end)
    assert.is_false(y:requires_grad())
    assert.is_false(called)
    -- a GELU with a backward hook before an FP8Linear: called as a module, not inside the next layer's cast
    fp8.manual_seed(2)
    local s = fp8.convert_model(nn.Sequential(nn.Linear(16, 32), nn.GELU("tanh"), nn.Linear(32, 16)),
      { recipe = { backend = "te" } })
    local seen = 0
    s[2]:register_full_backward_hook(function() seen = seen + 1 end)
    fp8.fp8_autocast(function() s(fp8.randn(4, 16)):sum():backward() end)
    assert.are.equal(1, seen)
    assert.are.equal(0, s[3].fp8_meta:state().fused_input_casts)
  end)

  it("fp8.convert_model's replacements keep the hooks of the layers they replace", function()
    local s = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16))
    local calls = 0
    local h = s[1]:register_forward_hook(function() calls = calls + 1 end)
    s[2]:register_forward_pre_hook(function() calls = calls + 10 end)
    fp8.convert_model(s, { recipe = { backend = "te" } })
    assert.are.equal("FP8Linear", s[1]:type_name())
    fp8.fp8_autocast(function() return s(fp8.randn(2, 16)) end)
    assert.are.equal(11, calls)
    h:remove()                                  -- the handle removes it from the replacement too
    fp8.fp8_autocast(function() return s(fp8.randn(2, 16)) end)
    assert.are.equal(21, calls)
    -- a model that is itself a Linear, prepared (converted at the root) and unwrapped back to a plain one
    local lin = nn.Linear(16, 16)
    local n = 0
    lin:register_forward_hook(function() n = n + 1 end)
    local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} }, cpu = true }
    local fl = acc:prepare(lin)
    assert.are.equal("FP8Linear", fl:type_name())
    fl(fp8.randn(2, 16))
    local plain = acc:unwrap_model(fl, false)   -- keep_fp32_wrapper=false: back to a plain Linear
    assert.are.equal("Linear", plain:type_name())
    plain(fp8.randn(2, 16))
    assert.are.equal(2, n)
  end)
end)

describe("ModuleList and ModuleDict (torch's containers)", function()
  local nn = fp8.nn
  local U = dofile("tests/spec/helpers/util.lua")

  it("register their layers for the model's own forward: parameters, state_dict, printing, list and dict methods",
    function()
      local Net = nn.Module.class("ListDictNet")
      function Net:__init()
        self.layers = nn.ModuleList { nn.Linear(4, 4), nn.Linear(4, 2) }
        self.heads = nn.ModuleDict { b = nn.Linear(2, 1), a = nn.Linear(2, 3) }
      end
      function Net:forward(x)
        for _, l in ipairs(self.layers) do x = l(x) end
        return self.heads.a(x), self.heads["b"](x)
      end
      local m = Net()
      assert.are.equal(8, #m:parameters())
      local keys = {}
      for k in pairs(m:state_dict()) do keys[#keys + 1] = k end
      table.sort(keys)
      assert.are.same({ "heads.a.bias", "heads.a.weight", "heads.b.bias", "heads.b.weight", "layers.0.bias",
        "layers.0.weight", "layers.1.bias", "layers.1.weight" }, keys)
      local a, b = m(fp8.randn { 3, 4 })
      assert.are.same({ 3, 3 }, a:shape())
      assert.are.same({ 3, 1 }, b:shape())
      -- gradients reach the layers, so an optimizer trains them
      local before = m.layers[1].weight:clone()
      local opt = fp8.optim.SGD(m:parameters(), { lr = 0.1 })
      local y = m(fp8.randn { 3, 4 })
      y:sum():backward()
      opt:step()
      assert.is_true((m.layers[1].weight - before):abs():max():item() > 0)
      -- the list: positions, # and ipairs, Sequential's methods under its own name
      local l = m.layers
      assert.are.equal(2, #l)
      l:append(nn.Linear(2, 2))
      assert.are.equal(3, #l)
      assert.are.equal(l[3], l[-1])
      l:insert(1, nn.ReLU())
      assert.are.equal("ReLU", l[1]:type_name())
      assert.are.equal("ReLU", l:pop(1):type_name())
      local n = 0
      for _ in ipairs(l) do n = n + 1 end
      assert.are.equal(3, n)
      U.fails_with("ModuleList:append: expected a Module, got number", l.append, l, 3)
      U.fails_with("ModuleList: index 9 is out of range (3 layers)", function() l[9] = nn.ReLU() end)
      U.fails_with("ModuleList has no forward", function() return l(fp8.randn { 1, 4 }) end)
      U.fails_with("ModuleList: item 2 must be a Module, got 1", nn.ModuleList, { nn.ReLU(), 1 })
      U.fails_with("ModuleList: expected a list of Modules ({m1, m2, ...}), got a Linear (wrap it: ModuleList{m})",
        nn.ModuleList, nn.Linear(1, 1))
      U.fails_with("ModuleList: takes at most 1 argument", nn.ModuleList, { nn.ReLU() }, { nn.ReLU() })
      assert.are.equal(2, #nn.ModuleList(nn.Sequential(nn.ReLU(), nn.ReLU())))   -- another container's layers
      -- the dict: names sorted from a table, in order from a list of pairs, then in the order added
      local d = m.heads
      assert.are.same({ "a", "b" }, d:keys())
      assert.are.equal(2, #d)
      d:update { c = nn.ReLU() }
      assert.are.same({ "a", "b", "c" }, d:keys())
      assert.are.equal(d.c, d:values()[3])
      assert.are.equal("c", d:items()[3][1])
      assert.are.same({ "z", "y" }, nn.ModuleDict({ { "z", nn.ReLU() }, { "y", nn.ReLU() } }):keys())
      assert.are.equal("ReLU", d:pop("c"):type_name())
      assert.are.same({ "a", "b" }, d:keys())
      U.fails_with("ModuleDict:pop: no layer named \"zz\"", d.pop, d, "zz")
      U.fails_with("ModuleDict: 'keys' is a method of ModuleDict", nn.ModuleDict, { keys = nn.ReLU() })
      U.fails_with("ModuleDict:update: a name must be a non-empty string without '.', got \"a.b\"",
        d.update, d, { ["a.b"] = nn.ReLU() })
      U.fails_with("ModuleDict: 'x' must be a Module, got 3", nn.ModuleDict, { x = 3 })
      U.fails_with("ModuleDict has no forward", function() return d(fp8.randn { 1, 2 }) end)
      local e = nn.ModuleDict { p = nn.ReLU() }
      e:clear()
      assert.are.equal(0, #e)
    end)

  it("a plain Lua table of layers registers nothing, as a Python list in torch, and a notice names it once", function()
    local out, ok = U.sh(("%q -e %q"):format(FP8LAB_BIN, [[
      local P = fp8.nn.Module.class("PlainNet")
      function P:__init() self.layers = { fp8.nn.Linear(2, 2) }; self.cfg = { n = 2, name = "x" } end
      function P:forward(x) return x end
      local p = P()
      print("params", #p:parameters(), #p:parameters())]]))
    assert.is_true(ok, out)
    assert.truthy(out:find("params\t0\t0", 1, true), out)
    local _, count = out:gsub("fp8lab: notice: PlainNet%.layers is a plain Lua table holding Modules: they are not "
      .. "registered %(not in parameters%(%), state_dict%(%), :to%(%) or the FP8 conversion%); use "
      .. "fp8%.nn%.ModuleList{%.%.%.} or fp8%.nn%.ModuleDict{%.%.%.}", "")
    assert.are.equal(1, count, out)
    assert.falsy(out:find("PlainNet.cfg", 1, true), out)
  end)
end)

describe("SiLU, RMSNorm, NLLLoss, one_hot, Flatten, Softmax, Identity, the loss modules (PyTorch 2.x's values)",
  function()
  local nn, F = fp8.nn, fp8.nn.functional
  local U = dofile("tests/spec/helpers/util.lua")
  local ref = dofile("tests/data/nn_parity_torch.lua")   -- scripts/gen_nn_parity.py
  local X = { { 0.5, -1.25, 2.0, 0.0 }, { -3.0, 0.75, 1.5, -0.5 }, { 1e-3, -2e-3, 4.0, 8.0 } }
  local W = { 1.0, 0.5, -2.0, 1.5 }
  local G = { { 1.0, -1.0, 0.5, 2.0 }, { 0.25, 3.0, -0.5, 1.0 }, { -2.0, 1.0, 1.0, 0.5 } }
  local LP = { { -0.1, -2.5, -3.0 }, { -1.2, -0.4, -2.2 }, { -2.0, -1.0, -0.6 }, { -0.7, -0.9, -2.1 } }
  -- sin(i·a + b) over the shape (a 0.71, b 0.5 unless given), in fp32 as scripts/gen_nn_parity.py's wave makes it
  local function wave(shape, a, b)
    local n = 1
    for _, d in ipairs(shape) do n = n * d end
    return (fp8.arange(n) * (a or 0.71) + (b or 0.5)):sin():reshape(shape)
  end
  local function same(name, got, want, tol)
    local g = type(got) == "number" and { got } or got:reshape(-1):totable()
    local w = {}
    local function flat(t) if type(t) == "number" then w[#w + 1] = t else for _, v in ipairs(t) do flat(v) end end end
    flat(want)
    assert.are.equal(#w, #g, name)
    for i = 1, #w do
      assert.is_true(math.abs(g[i] - w[i]) <= (tol or 2e-6) * math.max(1, math.abs(w[i])),
        ("%s[%d]: %.9g vs %.9g"):format(name, i, g[i], w[i]))
    end
  end

  it("silu, rms_norm (values and gradients) and their modules", function()
    same("silu", F.silu(fp8.tensor(X)), ref.silu)
    same("SiLU", nn.SiLU()(fp8.tensor(X)), ref.silu)
    for name, eps in pairs { rms = false, rms_eps = 1e-2 } do
      local x, w = fp8.tensor(X):requires_grad_(), fp8.tensor(W):requires_grad_()
      local y = F.rms_norm(x, 4, w, eps or nil)
      ;(y * fp8.tensor(G)):sum():backward()
      same(name, y, ref[name])
      same(name .. "_dx", x.grad, ref[name .. "_dx"])
      same(name .. "_dw", w.grad, ref[name .. "_dw"])
    end
    local m = nn.RMSNorm(4)
    m.weight = fp8.tensor(W):requires_grad_()
    same("RMSNorm", m(fp8.tensor(X)), ref.rms)
    same("RMSNorm eps", nn.RMSNorm({ 4 }, { eps = 1e-2 })(fp8.tensor(X)) * fp8.tensor(W), ref.rms_eps)
    assert.are.equal(0, #nn.RMSNorm(4, { elementwise_affine = false }):parameters())
    U.fails_with("rms_norm: normalized_shape 3 must be the input's last dimension, 4", F.rms_norm, fp8.tensor(X), 3)
    U.fails_with("rms_norm: weight must be [4]", F.rms_norm, fp8.tensor(X), 4, fp8.ones { 3 })
    U.fails_with("rms_norm: eps must be a finite number >= 0, got -1", F.rms_norm, fp8.tensor(X), 4, nil, -1)
    U.fails_with("RMSNorm: normalized_shape must be a positive integer (the last dimension), got 0", nn.RMSNorm, 0)
    U.fails_with("RMSNorm: unknown option 'bias'", nn.RMSNorm, 4, { bias = false })
    U.fails_with("RMSNorm forward: expected input [..., 4], got [2]",
      function() return nn.RMSNorm(4)(fp8.ones { 2 }) end)
  end)

  it("Embedding's padding_idx and from_pretrained: the padding row takes no gradient (torch 2.15's values)", function()
    local EW = { { 0.5, -1.0, 2.0 }, { 1.5, 0.25, -0.5 }, { -2.0, 1.0, 0.0 }, { 3.0, -0.75, 1.25 } }
    local EIDS = fp8.tensor { { 0, 1, 2 }, { 1, 3, 1 } }
    local EG = fp8.tensor { { { 1.0, -1.0, 0.5 }, { 2.0, 0.25, 3.0 }, { -0.5, 1.0, 1.0 } },
                            { { 0.5, 2.0, -1.0 }, { 1.0, 1.0, 1.0 }, { -2.0, 0.5, 0.25 } } }
    for key, pad in pairs { emb_pad1 = 1, emb_pad_last = -1 } do
      local w = fp8.tensor(EW):requires_grad(true)
      local y = F.embedding(EIDS, w, pad)
      same(key, y, ref[key])
      local l = (y * EG):sum()
      l:backward()
      same(key .. "_dw", w.grad, ref[key .. "_dw"])
    end
    -- the module zeros the padding row at construction (a negative index counts from the end) and passes it on
    fp8.manual_seed(3)
    local e = nn.Embedding(4, 3, -1)
    assert.are.equal(3, e.padding_idx)
    assert.are.same({ 0, 0, 0 }, e.weight:select(1, 4):totable())
    assert.are.equal("Embedding(4, 3, padding_idx=3)", tostring(e):match("Embedding%b()"))
    local ye = e(EIDS)
    local le = (ye * EG):sum()
    le:backward()
    assert.are.same({ 0, 0, 0 }, e.weight.grad:select(1, 4):totable())
    assert.are.equal(3, nn.Embedding { num_embeddings = 4, embedding_dim = 3, padding_idx = 3 }.padding_idx)
    -- from_pretrained: a copy, frozen unless freeze=false, its padding row as given
    local src = fp8.tensor(EW)
    local p = nn.Embedding.from_pretrained(src)
    assert.is_false(p.weight:requires_grad())
    assert.are.same(EW, p.weight:totable())
    local p2 = nn.Embedding.from_pretrained(src, { freeze = false, padding_idx = 1 })
    assert.is_true(p2.weight:requires_grad())
    assert.are.same(EW[2], p2.weight:select(1, 2):totable())
    local l2 = (p2(EIDS) * EG):sum()
    l2:backward()
    same("from_pretrained dw", p2.weight.grad, ref.emb_pad1_dw)
    U.fails_with("Embedding: padding_idx must be an integer in [-4, 4) (a negative one counts from the end), got 4",
      nn.Embedding, 4, 3, 4)
    U.fails_with("embedding: padding_idx must be an integer in [-4, 4)", F.embedding, EIDS, fp8.tensor(EW), 0.5)
    U.fails_with("Embedding.from_pretrained: unknown option 'freez' (did you mean 'freeze'?)",
      nn.Embedding.from_pretrained, src, { freez = true })
    U.fails_with("Embedding.from_pretrained: embeddings must be a 2-D tensor", nn.Embedding.from_pretrained,
      fp8.ones { 3 })
    -- embedding_bag and EmbeddingBag: each mode, an empty bag, include_last_offset, per_sample_weights, padding_idx,
    -- a 2-D input (torch 2.15's outputs and gradients)
    local EBI, EBO = fp8.tensor { 1, 2, 4, 5, 4, 3, 2, 0 }, fp8.tensor { 0, 3, 3, 5 }
    for _, c in ipairs { { "eb_mean", EBI, EBO, {} }, { "eb_sum_psw", EBI, EBO, { mode = "sum" }, true },
      { "eb_max", EBI, EBO, { mode = "max" } },
      { "eb_last", EBI, fp8.tensor { 0, 2, 8 }, { mode = "sum", include_last_offset = true } },
      { "eb_pad", EBI, EBO, { padding_idx = 4 } }, { "eb_2d", EBI:reshape { 2, 4 }, nil, { mode = "max" } } } do
      local w = fp8.tensor(ref.eb_weight):requires_grad(true)
      local psw = c[5] and fp8.linspace(0.5, 2.0, 8):requires_grad(true) or nil
      local o = { per_sample_weights = psw }
      for k, v in pairs(c[4]) do o[k] = v end
      local y = c[3] and F.embedding_bag(c[2], w, c[3], o) or F.embedding_bag(c[2], w, o)
      ;(y * wave(y:shape(), 0.71, 0.5)):sum():backward()
      same(c[1], y, ref[c[1]], 1e-5)
      same(c[1] .. " dw", w.grad, ref[c[1] .. "_dw"], 1e-5)
      if psw then same(c[1] .. " dpsw", psw.grad, ref[c[1] .. "_dpsw"], 1e-5) end
    end
    local bag = nn.EmbeddingBag(6, 3, { mode = "sum" })
    fp8.no_grad(function() nn.init.copy_(bag.weight, fp8.tensor(ref.eb_weight)) end)
    same("EmbeddingBag", bag(EBI, EBO, fp8.linspace(0.5, 2.0, 8)), ref.eb_sum_psw, 1e-5)
    assert.are.equal("EmbeddingBag(6, 3, mode='sum')", tostring(bag))
    U.fails_with("embedding_bag: per_sample_weights are only supported for mode \"sum\" (torch's), got mode \"mean\"",
      F.embedding_bag, EBI, fp8.ones { 6, 3 }, EBO, { per_sample_weights = fp8.ones { 8 } })
    U.fails_with("embedding_bag: a 1-D input needs offsets", F.embedding_bag, EBI, fp8.ones { 6, 3 })
    U.fails_with("embedding_bag: offsets must be nil for a 2-D input", F.embedding_bag, EBI:reshape { 2, 4 },
      fp8.ones { 6, 3 }, EBO)
    U.fails_with("embedding_bag: index 6 at 1 is out of range for 6 embeddings", F.embedding_bag, fp8.tensor { 6 },
      fp8.ones { 6, 3 }, fp8.tensor { 0 })
    U.fails_with("EmbeddingBag: mode must be \"sum\", \"mean\" or \"max\", got \"min\"", nn.EmbeddingBag, 6, 3,
      { mode = "min" })
    -- max_norm: the rows looked up renormalized in place, as torch's (the norm's 2 and 1); the options table
    for key, o in pairs { emb_maxnorm = { max_norm = 1.0 }, emb_maxnorm1 = { max_norm = 2.5, norm_type = 1.0 } } do
      local m = nn.Embedding(5, 3, o)
      fp8.no_grad(function() nn.init.copy_(m.weight, wave({ 5, 3 }, 0.7, 0.3) * 4) end)
      local y = m(fp8.tensor { { 1, 3 }, { 1, 0 } })
      ;(y * wave(y:shape(), 0.71, 0.5)):sum():backward()
      same(key, y, ref[key], 1e-5)
      same(key .. " weight after", m.weight, ref[key .. "_w"], 1e-5)
      same(key .. " dw", m.weight.grad, ref[key .. "_dw"], 1e-5)
    end
    assert.are.equal("Embedding(5, 3, max_norm=2.5, norm_type=1.0)",
      tostring(nn.Embedding(5, 3, { max_norm = 2.5, norm_type = 1.0 })))
    U.fails_with("Embedding: sparse=true is not supported (there are no sparse gradients here)", nn.Embedding, 5, 3,
      { sparse = true })
    U.fails_with("embedding: scale_grad_by_freq=true is not supported", F.embedding, EIDS, fp8.tensor(EW),
      { scale_grad_by_freq = true })
    U.fails_with("embedding: index 7 is out of range for 4 embeddings", F.embedding, fp8.tensor { 7 }, fp8.tensor(EW),
      { max_norm = 1 })
    U.fails_with("Embedding: unknown option 'max_nrom' (did you mean 'max_norm'?)", nn.Embedding, 5, 3,
      { max_nrom = 1 })
  end)

  it("conv1d/conv2d, max/avg pooling, unfold and fold give torch 2.15's values and gradients", function()
    local CX, CW, CB, CX1 = fp8.tensor(ref.conv_x), fp8.tensor(ref.conv_w), fp8.tensor(ref.conv_b),
      fp8.tensor(ref.conv_x1)
    local CWT = CW:transpose(1, 2):contiguous()   -- [4, 6, 3, 3]: a transposed convolution's weight
    local function with_weights(m, w, b)   -- a convolution module holding the fixture's weight and bias
      fp8.no_grad(function() nn.init.copy_(m.weight, w); nn.init.copy_(m.bias, b) end)
      return function(x) return m(x) end
    end
    local cases = {
      { "c2_s2p1", function(x, w, b) return F.conv2d(x, w, b, { stride = 2, padding = 1 }) end, CX, CW, CB },
      { "c2_d2", function(x, w) return F.conv2d(x, w, { dilation = 2, padding = { 2, 1 } }) end, CX, CW },
      { "c2_g2_same", function(x, w) return F.conv2d(x, w, { groups = 2, padding = "same" }) end, CX,
        CW:narrow(2, 1, 2):narrow(3, 1, 2):contiguous() },
      { "c2_s21", function(x, w, b) return F.conv2d(x, w, b, { stride = { 2, 1 } }) end, CX, CW, CB },
      { "c1", function(x, w, b) return F.conv1d(x, w, b, { stride = 2, padding = 1, dilation = 2 }) end, CX1,
        CW:select(3, 1):contiguous(), CB },
      { "c1_same_g2", function(x, w) return F.conv1d(x, w, { padding = "same", groups = 2 }) end, CX1,
        CW:select(3, 1):narrow(2, 1, 2):narrow(3, 1, 2):contiguous() },
      { "mp2", function(x) return F.max_pool2d(x, 2) end, CX },
      { "mp3s2p1", function(x) return F.max_pool2d(x, 3, { stride = 2, padding = 1 }) end, CX },
      { "mp_d2", function(x) return F.max_pool2d(x, 2, { stride = 1, dilation = 2 }) end, CX },
      { "ap3s2p1", function(x) return F.avg_pool2d(x, 3, { stride = 2, padding = 1 }) end, CX },
      { "ap_nopad", function(x) return F.avg_pool2d(x, 3, { stride = 2, padding = 1, count_include_pad = false }) end,
        CX },
      { "ap_div", function(x) return F.avg_pool2d(x, { 2, 3 }, { divisor_override = 4 }) end, CX },
      { "mp1", function(x) return F.max_pool1d(x, 3, { stride = 2, padding = 1 }) end, CX1 },
      { "ap1", function(x) return F.avg_pool1d(x, 2) end, CX1 },
      { "ct2", function(x, w, b)
          return F.conv_transpose2d(x, w, b, { stride = 2, padding = 1, output_padding = 1 })
        end, CX, CWT, CB },
      { "ct2_g2_d2", function(x, w)
          return F.conv_transpose2d(x, w, { stride = { 1, 2 }, padding = { 2, 0 }, groups = 2, dilation = { 2, 1 } })
        end, CX, CWT:narrow(2, 1, 3):narrow(3, 1, 2):contiguous() },
      { "ct1", function(x, w, b)
          return F.conv_transpose1d(x, w, b, { stride = 3, padding = 2, output_padding = 1, dilation = 2 })
        end, CX1, CWT:select(3, 1):contiguous(), CB },
      { "ct2_size", function(x)
          local m = nn.ConvTranspose2d(4, 6, 3, { stride = 2, padding = 1 })
          fp8.no_grad(function() nn.init.copy_(m.weight, CWT); nn.init.copy_(m.bias, CB) end)
          return m(x, { 12, 14 })
        end, CX },
      { "aap2", function(x) return F.adaptive_avg_pool2d(x, { 4, 3 }) end, CX },
      { "aap2_1", function(x) return F.adaptive_avg_pool2d(x, 1) end, CX },
      { "aap2_none", function(x) return F.adaptive_avg_pool2d(x, { nil, 5 }) end, CX },
      { "amp2", function(x) return F.adaptive_max_pool2d(x, { 4, 5 }) end, CX },
      { "amp2_div", function(x) return F.adaptive_max_pool2d(x, { 3, 7 }) end, CX },
      { "aap1", function(x) return F.adaptive_avg_pool1d(x, 4) end, CX1 },
      { "aap1_up", function(x) return F.adaptive_avg_pool1d(x, 12) end, CX1 },
      { "amp1", function(x) return F.adaptive_max_pool1d(x, 5) end, CX1 },
      { "ip_nearest_sz", function(x) return F.interpolate(x, { size = { 9, 5 } }) end, CX },
      { "ip_nearest_sf", function(x) return F.interpolate(x, { scale_factor = { 1.7, 0.6 } }) end, CX },
      { "ip_nearest_rc", function(x)
          return F.interpolate(x, { scale_factor = { 1.7, 0.6 }, recompute_scale_factor = true })
        end, CX },
      { "ip_nearest2x", function(x) return F.interpolate(x, { scale_factor = 2 }) end, CX },
      { "ip_nexact", function(x) return F.interpolate(x, { 4, 10 }, { mode = "nearest-exact" }) end, CX },
      { "ip_bilinear", function(x) return F.interpolate(x, { size = { 9, 5 }, mode = "bilinear" }) end, CX },
      { "ip_bilinear_ac", function(x)
          return F.interpolate(x, { scale_factor = 1.5, mode = "bilinear", align_corners = true })
        end, CX },
      { "ip_bilinear_sf", function(x)
          return F.interpolate(x, { scale_factor = { 0.75, 2.5 }, mode = "bilinear" })
        end, CX },
      { "ip_bicubic", function(x) return F.interpolate(x, { size = { 9, 5 }, mode = "bicubic" }) end, CX },
      { "ip_bicubic_ac", function(x)
          return F.interpolate(x, { scale_factor = 1.5, mode = "bicubic", align_corners = true })
        end, CX },
      { "ip_bicubic_sf", function(x)
          return F.interpolate(x, { scale_factor = { 0.75, 2.5 }, mode = "bicubic" })
        end, CX },
      { "ip_linear", function(x) return F.interpolate(x, 14, { mode = "linear" }) end, CX1 },
      { "ip_linear_ac", function(x) return F.interpolate(x, { size = 5, mode = "linear", align_corners = true }) end,
        CX1 },
      { "ip_nearest1d", function(x) return F.interpolate(x, { scale_factor = 2.3 }) end, CX1 },
      { "ip_trilinear", function(x) return F.interpolate(x, { size = { 3, 8, 5 }, mode = "trilinear" }) end,
        CX:reshape { 1, 2, 4, 6, 7 } },
      { "ip_area", function(x) return F.interpolate(x, { size = { 4, 3 }, mode = "area" }) end, CX },
      { "pixel_shuffle", function(x) return F.pixel_shuffle(x, 2) end, CX },
      { "pixel_unshuffle", function(x) return F.pixel_unshuffle(x, 3) end, CX:narrow(4, 1, 6):contiguous() },
      { "bilinear", function(a, b, w, bias) return F.bilinear(a, b, w, bias) end, wave({ 2, 3, 4 }, 0.29, 0.4),
        wave({ 2, 3, 5 }, 0.31, 0.1), wave({ 6, 4, 5 }, 0.53, 0.3), wave({ 6 }, 1.1, 0.2) },
      { "lrn3", function(x) return F.local_response_norm(x, 3) end, CX },
      { "lrn4_1d", function(x) return nn.LocalResponseNorm(4, { alpha = 0.1, beta = 0.5, k = 2.0 })(x) end, CX1 },
      { "softmax2d", function(x) return nn.Softmax2d()(x) end, CX },
      { "channel_shuffle", function(x) return nn.ChannelShuffle(2)(x) end, CX },
      { "mp_ceil", function(x) return F.max_pool2d(x, 2, { stride = 2, padding = 1, ceil_mode = true }) end, CX },
      { "mp_ceil_d2", function(x)
          return F.max_pool2d(x, 3, { stride = { 2, 3 }, dilation = { 1, 2 }, ceil_mode = true })
        end, CX },
      { "ap_ceil", function(x) return F.avg_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true }) end, CX },
      { "ap_ceil_nopad", function(x)
          return F.avg_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false })
        end, CX },
      { "ap_ceil_div", function(x)
          return F.avg_pool2d(x, { 2, 3 }, { stride = { 3, 2 }, ceil_mode = true, divisor_override = 5 })
        end, CX },
      { "mp1_ceil", function(x) return F.max_pool1d(x, 2, { stride = 2, ceil_mode = true }) end, CX1 },
      { "ap1_ceil", function(x) return F.avg_pool1d(x, 4, { stride = 3, padding = 2, ceil_mode = true }) end, CX1 },
      { "unfold", function(x) return F.unfold(x, { 2, 3 }, { dilation = { 1, 2 }, padding = 1, stride = { 2, 1 } }) end,
        CX },
      { "fold", function(c)
          return F.fold(c, { 6, 7 }, { 2, 3 }, { dilation = { 1, 2 }, padding = 1, stride = { 2, 1 } })
        end, F.unfold(CX, { 2, 3 }, { dilation = { 1, 2 }, padding = 1, stride = { 2, 1 } }) },
      { "pad_reflect1", function(x) return F.pad(x, { 3, 2 }, { mode = "reflect" }) end, CX1 },
      { "pad_replicate2", function(x) return F.pad(x, { 2, 1, 0, 3 }, { mode = "replicate" }) end, CX },
      { "pad_circular2", function(x) return F.pad(x, { -1, 3, 2, 2 }, { mode = "circular" }) end, CX },
      { "pad_reflect_unb", function(x) return F.pad(x, { 1, 2, 3, -1 }, { mode = "reflect" }) end, CX:select(1, 1) },
      { "pad_circular3", function(x) return F.pad(x, { 1, 1, 2, 0, 1, 1 }, { mode = "circular" }) end,
        CX:reshape { 1, 2, 4, 6, 7 } },
      { "c2_reflect", with_weights(nn.Conv2d(4, 6, 3, { padding = { 2, 1 }, padding_mode = "reflect" }), CW, CB), CX },
      { "c2_circular_s2", with_weights(nn.Conv2d(4, 6, 3, { padding = 1, stride = 2, padding_mode = "circular" }), CW,
        CB), CX },
      { "c1_replicate_same", with_weights(nn.Conv1d(4, 6, 2, { padding = "same", dilation = 3,
        padding_mode = "replicate" }), CW:select(3, 1):narrow(3, 1, 2):contiguous(), CB), CX1 },
    }
    for _, c in ipairs(cases) do
      local ins = {}
      for i = 3, #c do ins[#ins + 1] = c[i]:detach():clone():requires_grad(true) end
      local y = c[2](table.unpack(ins))
      same(c[1], y, ref[c[1]], 1e-5)
      local l = (y * wave(y:shape())):sum()
      l:backward()
      for j, t in ipairs(ins) do same(("%s d%d"):format(c[1], j), t.grad, ref[("%s_d%d"):format(c[1], j)], 1e-5) end
    end
    -- the modules: torch's shapes of parameters and outputs, unbatched inputs, and the refusals
    fp8.manual_seed(1)
    local conv = nn.Conv2d(4, 6, 3, { stride = 2, padding = 1 })
    assert.are.same({ 6, 4, 3, 3 }, conv.weight:shape())
    assert.is_true(conv.weight:abs():max():item() <= 1 / math.sqrt(36))
    fp8.no_grad(function() nn.init.copy_(conv.weight, CW); nn.init.copy_(conv.bias, CB) end)
    same("Conv2d", conv(CX), ref.c2_s2p1, 1e-5)
    same("Conv2d unbatched", conv(CX:select(1, 1)), conv(CX):select(1, 1):totable(), 1e-6)
    assert.are.same({ 2, 6, 4 }, nn.Conv1d(4, 6, 3, { stride = 2, padding = 1, dilation = 2 })(CX1):shape())
    assert.are.equal(1, #nn.Conv1d { in_channels = 4, out_channels = 2, kernel_size = 2, bias = false }:parameters())
    same("MaxPool2d", nn.MaxPool2d(3, { stride = 2, padding = 1 })(CX), ref.mp3s2p1, 1e-6)
    same("AvgPool2d", nn.AvgPool2d { kernel_size = 3, stride = 2, padding = 1 }(CX), ref.ap3s2p1, 1e-6)
    same("MaxPool1d", nn.MaxPool1d(3, { stride = 2, padding = 1 })(CX1), ref.mp1, 1e-6)
    same("AvgPool1d", nn.AvgPool1d(2)(CX1), ref.ap1, 1e-6)
    same("Unfold", nn.Unfold({ 2, 3 }, { dilation = { 1, 2 }, padding = 1, stride = { 2, 1 } })(CX), ref.unfold, 1e-6)
    U.fails_with("Conv2d: groups must be a positive integer dividing in_channels (4) and out_channels (6), got 4",
      nn.Conv2d, 4, 6, 3, { groups = 4 })
    U.fails_with("conv2d: padding=\"same\" needs stride 1", F.conv2d, CX, CW, { padding = "same", stride = 2 })
    -- Bilinear: torch's shapes, init bound and repr; the function's value through the module
    local bl = nn.Bilinear(4, 5, 6)
    assert.are.same({ 6, 4, 5 }, bl.weight:shape())
    assert.is_true(bl.weight:abs():max():item() <= 0.5 and bl.bias:abs():max():item() <= 0.5)
    fp8.no_grad(function()
      nn.init.copy_(bl.weight, wave({ 6, 4, 5 }, 0.53, 0.3)); nn.init.copy_(bl.bias, wave({ 6 }, 1.1, 0.2))
    end)
    same("Bilinear", bl(wave({ 2, 3, 4 }, 0.29, 0.4), wave({ 2, 3, 5 }, 0.31, 0.1)), ref.bilinear, 1e-5)
    assert.are.equal("Bilinear(in1_features=4, in2_features=5, out_features=6, bias=true)", tostring(bl))
    U.fails_with("bilinear: input1 [2, 4] and input2 [3, 5] must have the same leading dims", F.bilinear,
      fp8.ones { 2, 4 }, fp8.ones { 3, 5 }, bl.weight)
    U.fails_with("bilinear: input1 must be [..., 4] and input2 [..., 5] with the same leading dims, got [2, 5] and "
      .. "[2, 5]", F.bilinear, fp8.ones { 2, 5 }, fp8.ones { 2, 5 }, bl.weight)
    U.fails_with("Bilinear: out_features must be a positive integer, got 0", nn.Bilinear, 4, 5, 0)
    -- the transposed convolutions: torch's weight shape and init bound, output_size, and the refusals
    local ct = nn.ConvTranspose2d(4, 6, 3, { stride = 2, padding = 1, output_padding = 1, groups = 2 })
    assert.are.same({ 4, 3, 3, 3 }, ct.weight:shape())
    assert.is_true(ct.weight:abs():max():item() <= 1 / math.sqrt(27))
    assert.are.equal("ConvTranspose2d(4, 6, kernel_size=(3, 3), stride=2, padding=1, output_padding=1, groups=2)",
      tostring(ct))
    assert.are.same({ 6, 12, 14 }, ct(CX:select(1, 1)):shape())
    assert.are.same({ 2, 6, 11, 13 }, ct(CX, { 2, 6, 11, 13 }):shape())
    U.fails_with("ConvTranspose2d forward: output_size: requested 15, but valid sizes range from 13 to 14 (for an "
      .. "input of [2, 4, 6, 7])", ct, CX, { 12, 15 })
    U.fails_with("ConvTranspose2d forward: output_size must have 2 or 4 elements", ct, CX, { 12 })
    U.fails_with("ConvTranspose2d: padding_mode must be \"zeros\"", nn.ConvTranspose2d, 4, 6, 3,
      { padding_mode = "circular" })
    U.fails_with("ConvTranspose1d: output_padding must be smaller than the stride or the dilation", nn.ConvTranspose1d,
      4, 6, 3, { output_padding = 2, stride = 2 })
    U.fails_with("conv_transpose2d: output_padding 1×1 must be smaller than the stride 1×1 or the dilation 1×1",
      F.conv_transpose2d, CX, CWT, { output_padding = 1 })
    U.fails_with("conv_transpose1d: weight must be [in_channels, out_channels / groups, k], got [4, 6, 3, 3]",
      F.conv_transpose1d, CX1, CWT)
    U.fails_with("conv_transpose2d: input [2, 4, 6, 7] and weight [6, 4, 3, 3] do not agree with groups=1",
      F.conv_transpose2d, CX, CW)
    U.fails_with("conv_transpose2d: the input [2, 4, 6, 7] with padding 5×5 gives an output of -2×-1",
      F.conv_transpose2d, CX, CWT, { padding = 5 })
    U.fails_with("max_pool2d: ceil_mode must be a boolean, got 1", F.max_pool2d, CX, 2, { ceil_mode = 1 })
    -- ceil_mode's modules, and torch's one window over an input shorter than the kernel
    same("MaxPool2d ceil", nn.MaxPool2d(2, { stride = 2, padding = 1, ceil_mode = true })(CX), ref.mp_ceil, 1e-6)
    -- the resampling modules: interpolate's values, torch's reprs, and the refusals
    same("Upsample", nn.Upsample { size = { 9, 5 }, mode = "bilinear" }(CX), ref.ip_bilinear, 1e-5)
    same("UpsamplingBilinear2d", nn.UpsamplingBilinear2d { scale_factor = 1.5 }(CX), ref.ip_bilinear_ac, 1e-5)
    same("UpsamplingNearest2d", nn.UpsamplingNearest2d { size = { 9, 5 } }(CX), ref.ip_nearest_sz, 1e-6)
    same("PixelShuffle", nn.PixelShuffle(2)(CX), ref.pixel_shuffle, 0)
    same("PixelUnshuffle unbatched", nn.PixelUnshuffle(3)(CX:select(1, 1):narrow(3, 1, 6)),
      F.pixel_unshuffle(CX:narrow(4, 1, 6), 3):select(1, 1):totable(), 0)
    assert.are.equal("Upsample(scale_factor=2.0, mode=bilinear)",
      tostring(nn.Upsample { scale_factor = 2, mode = "bilinear" }))
    assert.are.equal("UpsamplingNearest2d(size=(4, 5), mode=nearest)",
      tostring(nn.UpsamplingNearest2d { size = { 4, 5 } }))
    assert.are.equal("PixelShuffle(upscale_factor=2)", tostring(nn.PixelShuffle(2)))
    assert.are.equal("bf16", F.interpolate(CX:to("bf16"), { scale_factor = 2, mode = "bilinear" }):dtype())
    assert.are.equal("Upsample(scale_factor=2.0, mode=bicubic)",
      tostring(nn.Upsample { scale_factor = 2, mode = "bicubic", align_corners = false }))
    U.fails_with("interpolate: mode \"bicubic\" takes a 4-D input, got [2, 4, 9] (3-D)", F.interpolate, CX1,
      { size = 3, mode = "bicubic" })
    U.fails_with("interpolate: antialias=true is not supported", F.interpolate, CX,
      { size = 3, mode = "bicubic", antialias = true })
    U.fails_with("interpolate: antialias=true is not supported", F.interpolate, CX,
      { size = 3, mode = "bilinear", antialias = true })
    U.fails_with("interpolate: mode \"linear\" takes a 3-D input, got [2, 4, 6, 7] (4-D)", F.interpolate, CX,
      { size = 3, mode = "linear" })
    U.fails_with("interpolate: align_corners applies to the linear modes", F.interpolate, CX,
      { size = 3, align_corners = false })
    U.fails_with("interpolate: give one of size and scale_factor, got both", F.interpolate, CX,
      { size = 3, scale_factor = 2 })
    U.fails_with("interpolate: size must be a number or a list of 2 (one per spatial dim), got a table",
      F.interpolate, CX, { size = { 1, 2, 3 } })
    U.fails_with("interpolate: scale_factor 0.1 makes dim 3 of [2, 4, 6, 7] empty", F.interpolate, CX,
      { scale_factor = 0.1 })
    U.fails_with("Upsample: mode must be one of", nn.Upsample, { scale_factor = 2, mode = "cubic" })
    U.fails_with("Upsample: takes an options table", nn.Upsample, 2)
    U.fails_with("UpsamplingBilinear2d: unknown option 'mode'", nn.UpsamplingBilinear2d,
      { scale_factor = 2, mode = "nearest" })
    U.fails_with("pixel_shuffle: the channels 4 of [2, 4, 6, 7] are not divisible by upscale_factor² = 9",
      F.pixel_shuffle, CX, 3)
    U.fails_with("pixel_unshuffle: the height 6 and width 7 of [2, 4, 6, 7] must be divisible by downscale_factor 2",
      F.pixel_unshuffle, CX, 2)
    -- max pooling's indices (torch's flat positions in the unpadded input) and max_unpool back from them
    local v2, i2 = F.max_pool2d(CX, 3, { stride = 2, padding = 1, return_indices = true })
    same("mpi2 idx", i2, ref.mpi2_idx, 0)
    same("mpi2 values", v2, ref.mp3s2p1, 1e-6)
    local _, id = nn.MaxPool2d(2, { stride = { 1, 2 }, dilation = { 2, 1 }, ceil_mode = true,
      return_indices = true })(CX)
    same("mpi2_d idx", id, ref.mpi2_d_idx, 0)
    local v1, i1 = F.max_pool1d(CX1, 2, { stride = 2, return_indices = true })
    same("mpi1 idx", i1, ref.mpi1_idx, 0)
    for _, c in ipairs { { "mpi2", v2, function(v) return F.max_unpool2d(v, i2, 3, { stride = 2, padding = 1,
      output_size = { 6, 7 } }) end }, { "mpi1", v1, function(v) return nn.MaxUnpool1d(2)(v, i1, { 9 }) end } } do
      local v = c[2]:detach():clone():requires_grad(true)
      local y = c[3](v)
      same(c[1] .. " unpool", y, ref[c[1]], 1e-6)
      ;(y * wave(y:shape())):sum():backward()
      same(c[1] .. " unpool grad", v.grad, ref[c[1] .. "_d1"], 1e-6)
    end
    assert.are.same({ 2, 4, 6 }, F.max_unpool1d(v1:narrow(3, 1, 3), i1:narrow(3, 1, 3), 2):shape())
    U.fails_with("max_unpool2d: output_size 9 for dim 1 must be between 4 and 6", F.max_unpool2d, v2, i2, 3,
      { stride = 2, padding = 1, output_size = { 9, 7 } })
    U.fails_with("max_unpool1d: indices must be whole numbers in 0..7 (the output's 8 positions), got 8",
      F.max_unpool1d, v1, i1 + 1, 2)
    U.fails_with("max_unpool2d: indices [2, 4, 3, 4] must have the input's shape [2, 4, 2, 2]", F.max_unpool2d,
      v2:narrow(3, 1, 2):narrow(4, 1, 2), i2, 3)
    U.fails_with("max_pool2d: return_indices must be a boolean, got 1", F.max_pool2d, CX, 2, { return_indices = 1 })
    -- the adaptive pooling modules: torch's reprs, the functions' values, and the refusals
    same("AdaptiveMaxPool1d", nn.AdaptiveMaxPool1d(5)(CX1), ref.amp1, 1e-6)
    same("AdaptiveAvgPool2d", nn.AdaptiveAvgPool2d { output_size = { 4, 3 } }(CX), ref.aap2, 1e-6)
    same("AdaptiveAvgPool2d unbatched", nn.AdaptiveAvgPool2d({ nil, 5 })(CX:select(1, 2)),
      F.adaptive_avg_pool2d(CX, { nil, 5 }):select(1, 2):totable(), 1e-6)
    assert.are.equal("AdaptiveAvgPool2d(output_size=(None, 5))", tostring(nn.AdaptiveAvgPool2d({ nil, 5 })))
    assert.are.equal("AdaptiveMaxPool1d(output_size=5)", tostring(nn.AdaptiveMaxPool1d(5)))
    assert.are.equal("bf16", F.adaptive_avg_pool1d(CX1:to("bf16"), 4):dtype())
    U.fails_with("AdaptiveMaxPool2d: return_indices=true is not supported", nn.AdaptiveMaxPool2d, 2,
      { return_indices = true })
    U.fails_with("adaptive_avg_pool2d: output_size must hold integers >= 1, got 0", F.adaptive_avg_pool2d, CX, { 0, 1 })
    U.fails_with("AdaptiveAvgPool1d: output_size must be an integer or a list of 1 (nil keeps the input's size), got "
      .. "\"x\"", nn.AdaptiveAvgPool1d, "x")
    U.fails_with("adaptive_max_pool1d: expected a 3-D (batched) or 2-D (unbatched) input, got [2, 4, 6, 7]",
      F.adaptive_max_pool1d, CX, 2)
    U.fails_with("adaptive_avg_pool2d: takes (input, output_size), got a third argument", F.adaptive_avg_pool2d, CX, 1,
      {})
    assert.are.same({ { { 1 } } }, F.max_pool1d(fp8.ones { 1, 1, 1 }, 2, { ceil_mode = true }):totable())
    assert.are.same({ { { 0, 1.5, 3.5 } } }, F.avg_pool1d(fp8.arange(5):view(1, 1, 5), 2, { stride = 2, padding = 1,
      ceil_mode = true }):totable())
    U.fails_with("AvgPool2d: count_include_pad must be a boolean, got 1", nn.AvgPool2d, 2, { count_include_pad = 1 })
    U.fails_with("max_pool2d: padding 2×2 must be at most half the kernel 3×3", F.max_pool2d, CX, 3, { padding = 2 })
    U.fails_with("conv2d: the input [2, 4, 6, 7], padded by 0×0, is smaller than the kernel 9×9", F.conv2d, CX,
      fp8.zeros { 1, 4, 9, 9 })
    U.fails_with("conv2d: expected a 4-D (batched) or 3-D (unbatched) input, got [4, 6]", F.conv2d, fp8.zeros { 4, 6 },
      CW)
    -- 1-d sizes: a missing kernel and a string where only conv1d's padding takes one are named, not compared
    U.fails_with("AvgPool1d: kernel_size: expected an integer >= 1, got nil", nn.AvgPool1d)
    U.fails_with("MaxPool1d: kernel_size: expected an integer >= 1, got nil", nn.MaxPool1d, nil)
    U.fails_with("Conv1d: kernel_size: expected an integer >= 1, got nil", nn.Conv1d, 4, 2)
    U.fails_with("avg_pool1d: kernel_size: expected an integer >= 1, got \"same\"", F.avg_pool1d, CX1, "same")
    U.fails_with("max_pool1d: stride: expected an integer >= 1, got \"x\"", F.max_pool1d, CX1, 2, { stride = "x" })
    U.fails_with("conv1d: stride: expected an integer >= 1, got \"x\"", F.conv1d, CX1, fp8.zeros { 2, 4, 2 }, nil,
      { stride = "x" })
  end)

  it("multi_margin_loss, multilabel_margin_loss, multilabel_soft_margin_loss and their modules: torch 2.15's values "
    .. "and gradients", function()
    local MX = { { 0.1, 0.2, 0.4, 0.8 }, { 0.5, -0.3, 0.2, 0.1 }, { -1.0, 2.0, 0.3, 0.3 } }
    local MT, MW = fp8.tensor { 3, 0, 2 }, fp8.tensor { 0.5, 1.0, 2.0, 1.5 }
    local MLT = fp8.tensor { { 3, 0, -1, 1 }, { 1, 1, -1, 0 }, { 2, 1, 0, 3 } }
    local MLS = fp8.tensor { { 1, 0, 0, 1 }, { 0, 1, 1, 0 }, { 1, 1, 0, 0 } }
    for _, c in ipairs { { "mm", F.multi_margin_loss, MT, {} },
      { "mm_p2w", F.multi_margin_loss, MT, { p = 2, margin = 0.7, weight = MW } },
      { "mlm", F.multilabel_margin_loss, MLT, {} }, { "mls", F.multilabel_soft_margin_loss, MLS, {} },
      { "mls_w", F.multilabel_soft_margin_loss, MLS, { weight = MW } } } do
      for _, red in ipairs { "mean", "sum", "none" } do
        local o = { reduction = red }
        for k, v in pairs(c[4]) do o[k] = v end
        local x = fp8.tensor(MX):requires_grad_()
        local y = c[2](x, c[3], o)
        local key = c[1] .. "_" .. red
        same(key, y, ref[key], 1e-6)
        ;(y * (fp8.arange(y:numel()) + 1):reshape(y:shape())):sum():backward()
        same(key .. " dx", x.grad, ref[key .. "_dx"], 1e-6)
      end
    end
    same("mm unbatched", F.multi_margin_loss(fp8.tensor(MX[1]), fp8.tensor(3)), ref.mm_unbatched, 1e-6)
    same("MultiMarginLoss", nn.MultiMarginLoss { p = 2, margin = 0.7, weight = MW }(fp8.tensor(MX), MT),
      ref.mm_p2w_mean, 1e-6)
    same("MultiLabelMarginLoss", nn.MultiLabelMarginLoss()(fp8.tensor(MX), MLT), ref.mlm_mean, 1e-6)
    same("MultiLabelSoftMarginLoss", nn.MultiLabelSoftMarginLoss { reduction = "sum" }(fp8.tensor(MX), MLS),
      ref.mls_sum, 1e-6)
    U.fails_with("multi_margin_loss: target 4 is not a class index in 0..3", F.multi_margin_loss, fp8.tensor(MX),
      fp8.tensor { 3, 4, 0 })
    U.fails_with("multi_margin_loss: p must be 1 or 2 (torch's), got 3", F.multi_margin_loss, fp8.tensor(MX), MT,
      { p = 3 })
    U.fails_with("multi_margin_loss: target must be [3] (one class per sample), got [2]", F.multi_margin_loss,
      fp8.tensor(MX), fp8.tensor { 1, 2 })
    U.fails_with("multilabel_margin_loss: target 0.5 is not a class index in 0..3", F.multilabel_margin_loss,
      fp8.tensor(MX), fp8.tensor { { 0.5, -1, 0, 0 }, { 0, -1, 0, 0 }, { 0, -1, 0, 0 } })
    U.fails_with("multilabel_soft_margin_loss: weight must be [4] (one per class), got [3]",
      F.multilabel_soft_margin_loss, fp8.tensor(MX), MLS, { weight = fp8.ones { 3 } })
    U.fails_with("MultiMarginLoss: unknown option 'reduce'", nn.MultiMarginLoss, { reduce = true })
  end)

  it("utils.rnn.pad_sequence and unpad_sequence batch sequences of different lengths, as torch's", function()
    local R = nn.utils.rnn
    local a = fp8.arange(3):reshape({ 3, 1 }):requires_grad(true)
    local b, c = fp8.arange(5):reshape { 5, 1 }, fp8.arange(1):reshape { 1, 1 }
    local p = R.pad_sequence { a, b, c }
    -- torch 2.15: pad_sequence([a, b, c]) and (batch_first=True, padding_value=-1, padding_side="left")
    assert.are.same({ { 0, 0, 0 }, { 1, 1, 0 }, { 2, 2, 0 }, { 0, 3, 0 }, { 0, 4, 0 } }, p:reshape({ 5, 3 }):totable())
    assert.are.same({ { -1, -1, 0, 1, 2 }, { 0, 1, 2, 3, 4 }, { -1, -1, -1, -1, 0 } }, R.pad_sequence({ a, b, c },
      { batch_first = true, padding_value = -1, padding_side = "left" }):reshape({ 3, 5 }):totable())
    local u = R.unpad_sequence(p, fp8.tensor { 3, 5, 1 })
    assert.are.same({ a:totable(), b:totable(), c:totable() }, { u[1]:totable(), u[2]:totable(), u[3]:totable() })
    p:sum():backward()
    assert.are.same({ { 1 }, { 1 }, { 1 } }, a.grad:totable())
    -- an LSTM over the padded batch, then each sequence's own steps back
    local out = nn.LSTM(1, 2)(R.pad_sequence { b, c })
    assert.are.same({ 5, 2, 2 }, out:shape())
    U.fails_with("pad_sequence: sequence 2 is fp32 [2, 2], sequence 1 fp32 [3, 1]: all must share the dims after the "
      .. "first and the dtype", R.pad_sequence, { a, fp8.ones { 2, 2 } })
    U.fails_with("pad_sequence: padding_side must be \"right\" or \"left\", got \"up\"", R.pad_sequence, { a },
      { padding_side = "up" })
    U.fails_with("unpad_sequence: length 2 must be an integer in 0..5, got 6", R.unpad_sequence, p, { 3, 6, 1 })
    U.fails_with("unpad_sequence: lengths must be a list (or a 1-d tensor) of 3 lengths", R.unpad_sequence, p, { 3 })
  end)

  it("gumbel_softmax draws soft samples over dim, and with hard=true one-hots whose gradient is the soft one's",
    function()
    fp8.manual_seed(11)
    local logits = fp8.tensor({ { 2.0, 0.5, -1.0, 0.0 }, { -3.0, 3.0, 0.1, 0.2 } }):requires_grad(true)
    local y = F.gumbel_softmax(logits, { tau = 0.5 })
    for _, s in ipairs(y:sum(2):totable()) do assert.is_true(math.abs(s - 1) < 1e-6) end
    assert.is_true(y:min():item() >= 0)
    -- hard: exactly one 1 per row, at the soft sample's largest; gradients flow as through the soft sample
    fp8.manual_seed(12)
    local h = F.gumbel_softmax(logits, { hard = true })
    fp8.manual_seed(12)
    local soft = F.gumbel_softmax(logits:detach())
    local rows, srows = h:totable(), soft:totable()
    for r = 1, 2 do
      local ones, best = 0, 1
      for c = 1, 4 do
        if rows[r][c] == 1 then ones = ones + 1 else assert.are.equal(0, rows[r][c]) end
        if srows[r][c] > srows[r][best] then best = c end
      end
      assert.are.equal(1, ones)
      assert.are.equal(1, rows[r][best])
    end
    ;(h * fp8.tensor { { 1, 2, 3, 4 }, { 4, 3, 2, 1 } }):sum():backward()
    assert.is_true(logits.grad:abs():sum():item() > 0)
    -- over many draws the argmax follows softmax(logits): the first row's class 1 ~ 0.69 of the time
    fp8.manual_seed(13)
    local big = fp8.tensor({ 2.0, 0.5, -1.0, 0.0 }):reshape({ 1, 4 }):expand({ 4000, 4 }):contiguous()
    local picks = F.gumbel_softmax(big, { hard = true }):sum(1):totable()
    local p1 = math.exp(2) / (math.exp(2) + math.exp(0.5) + math.exp(-1) + 1)
    assert.is_true(math.abs(picks[1] / 4000 - p1) < 0.03, tostring(picks[1] / 4000))
    -- dim: the samples sum to 1 along it
    local yd = F.gumbel_softmax(logits, { dim = 1 })
    for _, s in ipairs(yd:sum(1):totable()) do assert.is_true(math.abs(s - 1) < 1e-6) end
    U.fails_with("gumbel_softmax: tau must be a finite number > 0, got 0", F.gumbel_softmax, logits, { tau = 0 })
    U.fails_with("gumbel_softmax: unknown option 'eps'", F.gumbel_softmax, logits, { eps = 1e-10 })
    U.fails_with("local_response_norm: size must be an integer >= 1, got 0", F.local_response_norm,
      fp8.ones { 1, 2, 3 }, 0)
    U.fails_with("channel_shuffle: groups must be a positive integer dividing the channels (3), got 2",
      F.channel_shuffle, fp8.ones { 1, 3, 2 }, 2)
    U.fails_with("Softmax2d forward: expected an input [N, C, H, W] or [C, H, W], got [2, 3]", nn.Softmax2d(),
      fp8.ones { 2, 3 })
    assert.are.equal("LocalResponseNorm(3, alpha=0.0001, beta=0.75, k=1.0)", tostring(nn.LocalResponseNorm(3)))
  end)

  it("Dropout1d/2d/3d zero whole channels with probability p and scale the rest, as torch's", function()
    fp8.manual_seed(7)
    for _, c in ipairs { { F.dropout1d, { 20, 200, 3 }, { 3 } }, { F.dropout2d, { 10, 400, 2, 3 }, { 3, 4 } },
      { F.dropout3d, { 4000, 2, 1, 2 }, { 2, 3, 4 } } } do   -- the last: unbatched [C, D, H, W]
      local x = fp8.ones(c[2])
      local y = c[1](x, 0.3)
      local positions = x:numel() // y:sum(c[3]):numel()
      local zeros, n = 0, 0
      for _, v in ipairs(y:sum(c[3]):reshape(-1):tolist()) do   -- each channel all zero or all 1/(1-p)
        n = n + 1
        if v == 0 then zeros = zeros + 1
        else assert.is_true(math.abs(v - positions / 0.7) < 1e-4 * positions, tostring(v)) end
      end
      assert.is_true(math.abs(zeros / n - 0.3) < 0.03, ("%d of %d channels dropped"):format(zeros, n))
    end
    local x = fp8.ones({ 2, 3, 4 }):requires_grad(true)
    local y = F.dropout1d(x, 0.5)
    y:sum():backward()
    assert.are.same(y:totable(), x.grad:totable())   -- the gradient is the mask, scaled
    assert.are.same(fp8.ones { 2, 3 }:totable(), F.dropout1d(fp8.ones { 2, 3 }, 0.9, false):totable())
    assert.are.same(fp8.zeros { 2, 3 }:totable(), F.dropout1d(fp8.ones { 2, 3 }, 1):totable())
    local d = nn.Dropout2d(0.4)
    assert.are.equal("Dropout2d(p=0.4)", tostring(d))
    d:eval()
    assert.are.same(fp8.ones { 2, 3, 4, 5 }:totable(), d(fp8.ones { 2, 3, 4, 5 }):totable())
    U.fails_with("dropout3d: expected an input [N, C, D, H, W] or [C, D, H, W], got [2, 3]", F.dropout3d,
      fp8.ones { 2, 3 })
    U.fails_with("Dropout2d: p must be a probability in [0, 1], got 2", nn.Dropout2d, 2)
    U.fails_with("dropout1d: training must be a boolean, got 1", F.dropout1d, fp8.ones { 2, 3 }, 0.5, 1)
  end)

  it("InstanceNorm1d/2d and F.instance_norm give torch 2.15's values, gradients and running statistics", function()
    local CX, CX1 = fp8.tensor(ref.conv_x), fp8.tensor(ref.conv_x1)
    local m = nn.InstanceNorm2d(4, { affine = true, track_running_stats = true })
    fp8.no_grad(function()
      nn.init.copy_(m.weight, fp8.tensor { 1.0, 0.5, 2.0, -1.0 })
      nn.init.copy_(m.bias, fp8.tensor { 0.0, 0.1, -0.2, 0.3 })
    end)
    for stepi, xin in ipairs { CX, CX * 2 + 0.5 } do
      local x = xin:detach():clone():requires_grad(true)
      local y = m(x)
      same("in2 y" .. stepi, y, ref["in2_y" .. stepi], 1e-5)
      ;(y * wave(y:shape())):sum():backward()
      same("in2 dx" .. stepi, x.grad, ref["in2_dx" .. stepi], 1e-5)
    end
    same("in2 dw", m.weight.grad, ref.in2_dw, 1e-5)
    same("in2 db", m.bias.grad, ref.in2_db, 1e-5)
    same("in2 running_mean", m.running_mean, ref.in2_rm, 1e-5)
    same("in2 running_var", m.running_var, ref.in2_rv, 1e-5)
    assert.are.equal(0, m.num_batches_tracked:item())   -- torch's InstanceNorm never counts
    m:eval()
    same("in2 eval", m(CX), ref.in2_eval, 1e-5)
    for key, c in pairs { in2_plain = { nn.InstanceNorm2d(4), CX:select(1, 1) },
      in1 = { nn.InstanceNorm1d(4, { affine = true }), CX1 } } do
      local x = c[2]:detach():clone():requires_grad(true)
      local y = c[1](x)
      same(key, y, ref[key], 1e-5)
      ;(y * wave(y:shape())):sum():backward()
      same(key .. " dx", x.grad, ref[key .. "_d1"], 1e-5)
    end
    -- momentum=false is torch's None: the running statistics stay as they were
    local frozen = nn.InstanceNorm2d(4, { track_running_stats = true, momentum = false })
    frozen(CX)
    assert.are.same({ 0, 0, 0, 0 }, frozen.running_mean:totable())
    assert.are.same({ 1, 1, 1, 1 }, frozen.running_var:totable())
    assert.are.equal("InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=false, track_running_stats=false)",
      tostring(nn.InstanceNorm2d(4)))
    assert.are.same({}, nn.InstanceNorm1d(4):parameters())
    same("F.instance_norm", F.instance_norm(CX), nn.InstanceNorm2d(4)(CX):totable(), 0)
    U.fails_with("InstanceNorm2d forward: expected input's size at dim 2 to match num_features (3), got 4",
      nn.InstanceNorm2d(3, { affine = true }), CX)
    U.fails_with("InstanceNorm1d forward: expected input [N, C, L] or unbatched [C, L], got [2, 4, 6, 7]",
      nn.InstanceNorm1d(4), CX)
    U.fails_with("instance_norm: expected more than 1 position per channel", F.instance_norm, fp8.ones { 2, 3, 1 })
    U.fails_with("instance_norm: use_input_stats=false needs running_mean and running_var", F.instance_norm, CX, nil,
      nil, nil, nil, false)
  end)

  it("RNN, LSTM, GRU and their cells give torch 2.15's outputs, states and every gradient", function()
    local function case(key, m, x, state, cell)
      for i, np in ipairs(m:named_parameters()) do
        local w = wave(np[2]:shape(), 0.37 + 0.01 * (i - 1), 0.1 * (i - 1)) * 0.5
        fp8.no_grad(function() nn.init.copy_(np[2], w) end)
      end
      x = x:detach():clone():requires_grad(true)
      local st = state
      if type(state) == "table" then st = { state[1]:clone():requires_grad(true), state[2]:clone():requires_grad(true) }
      elseif state then st = state:clone():requires_grad(true) end
      local outs
      if cell then outs = { m(x, st) }
      else
        local y, s = m(x, st)
        outs = { y }
        if type(s) == "table" then outs[2], outs[3] = s[1], s[2] else outs[2] = s end
      end
      local loss = 0
      for j, o in ipairs(outs) do
        same(("%s y%d"):format(key, j - 1), o, ref[("%s_y%d"):format(key, j - 1)], 2e-5)
        loss = loss + (o * wave(o:shape(), 0.71 + 0.05 * (j - 1), 0.5)):sum()
      end
      loss:backward()
      same(key .. " dx", x.grad, ref[key .. "_dx"], 2e-5)
      if st then
        for j, t in ipairs(type(st) == "table" and st or { st }) do
          same(("%s ds%d"):format(key, j - 1), t.grad, ref[("%s_ds%d"):format(key, j - 1)], 2e-5)
        end
      end
      for _, np in ipairs(m:named_parameters()) do
        same(key .. " d_" .. np[1], np[2].grad, ref[("%s_d_%s"):format(key, np[1])], 2e-5)
      end
    end
    case("lstm", nn.LSTM(5, 8, { num_layers = 2, bidirectional = true, batch_first = true, proj_size = 3 }),
      wave({ 4, 7, 5 }, 0.29, 0.4), { wave({ 4, 4, 3 }, 0.53, 0.2), wave({ 4, 4, 8 }, 0.61, 0.7) })
    case("gru", nn.GRU(5, 6, { num_layers = 2 }), wave({ 7, 2, 5 }, 0.31, 0.1))
    case("rnn_relu", nn.RNN(5, 6, { nonlinearity = "relu", bias = false, bidirectional = true }),
      wave({ 7, 5 }, 0.23, 0.3), wave({ 2, 6 }, 0.41, 0.2))
    case("lstmcell", nn.LSTMCell(5, 6), wave({ 2, 5 }, 0.29, 0.4), { wave({ 2, 6 }, 0.53, 0.2),
      wave({ 2, 6 }, 0.61, 0.7) }, true)
    case("grucell", nn.GRUCell(5, 6), wave({ 2, 5 }, 0.29, 0.4), wave({ 2, 6 }, 0.53, 0.2), true)
    case("rnncell", nn.RNNCell(5, 6), wave({ 5 }, 0.29, 0.4), nil, true)
    -- torch's parameter names and shapes (so state dicts load both ways), reprs, and the refusals
    local names = {}
    for _, np in ipairs(nn.GRU(3, 4, { bidirectional = true }):named_parameters()) do
      names[#names + 1] = np[1] .. "=" .. np[2]:shape_str()
    end
    assert.are.same({ "weight_ih_l0=[12, 3]", "weight_hh_l0=[12, 4]", "bias_ih_l0=[12]", "bias_hh_l0=[12]",
      "weight_ih_l0_reverse=[12, 3]", "weight_hh_l0_reverse=[12, 4]", "bias_ih_l0_reverse=[12]",
      "bias_hh_l0_reverse=[12]" }, names)
    assert.are.equal("LSTM(5, 8, proj_size=3, num_layers=2, batch_first=True, bidirectional=True)",
      tostring(nn.LSTM(5, 8, { num_layers = 2, bidirectional = true, batch_first = true, proj_size = 3 })))
    assert.are.equal("RNNCell(5, 6, bias=False, nonlinearity=relu)", tostring(nn.RNNCell(5, 6, false, "relu")))
    local lstm = nn.LSTM(3, 4)
    assert.is_true(lstm.weight_ih_l0:abs():max():item() <= 0.5)   -- U(-1/√4, 1/√4)
    local y, st = lstm(fp8.zeros { 5, 2, 3 })
    local y2 = lstm(fp8.zeros { 5, 2, 3 }, st)   -- the state fed back, torch's (h, c) tuple as a list
    assert.are.same({ 5, 2, 4 }, y2:shape())
    assert.are.equal(lstm, lstm:flatten_parameters())
    U.fails_with("LSTM: proj_size 8 must be smaller than hidden_size 8", nn.LSTM, 5, 8, { proj_size = 8 })
    U.fails_with("RNN: nonlinearity must be \"tanh\" or \"relu\", got \"gelu\"", nn.RNN, 5, 8,
      { nonlinearity = "gelu" })
    U.fails_with("GRU: unknown option 'proj_size'", nn.GRU, 5, 8, { proj_size = 2 })
    U.fails_with("GRU: dropout must be a probability in [0, 1], got 2", nn.GRU, 5, 8, { dropout = 2 })
    U.fails_with("LSTM forward: expected input [T, N, 3] or unbatched [T, 3], got [5, 2, 4]", lstm,
      fp8.zeros { 5, 2, 4 })
    U.fails_with("LSTM forward: hx must be a list {h_0, c_0} of two tensors, got", lstm, fp8.zeros { 5, 2, 3 },
      fp8.zeros { 1, 2, 4 })
    U.fails_with("LSTM forward: c_0 must be [1, 2, 4] (num_layers · directions, batch, hidden), got [1, 3, 4]", lstm,
      fp8.zeros { 5, 2, 3 }, { fp8.zeros { 1, 2, 4 }, fp8.zeros { 1, 3, 4 } })
    U.fails_with("GRUCell forward: hx must be [2, 6] for an input [2, 5], got [6]", nn.GRUCell(5, 6),
      fp8.zeros { 2, 5 }, fp8.zeros { 6 })
    U.fails_with("LSTMCell: takes (input_size, hidden_size [, bias]), got a fourth argument", nn.LSTMCell, 5, 6, true,
      "relu")
    -- dropout between layers acts in training only
    local drop = nn.GRU(3, 4, { num_layers = 2, dropout = 0.5 })
    drop:eval()
    local a, b = drop(fp8.ones { 5, 2, 3 }), drop(fp8.ones { 5, 2, 3 })
    assert.are.same(a:totable(), b:totable())
    drop:train()
    assert.are_not.same(drop(fp8.ones { 5, 2, 3 }):totable(), drop(fp8.ones { 5, 2, 3 }):totable())
  end)

  it("BatchNorm1d/2d and GroupNorm give torch 2.15's values, gradients and running statistics", function()
    local CX, CX1 = fp8.tensor(ref.conv_x), fp8.tensor(ref.conv_x1)
    local bn = nn.BatchNorm2d(4)
    fp8.no_grad(function()
      nn.init.copy_(bn.weight, fp8.tensor { 1.0, 0.5, 2.0, -1.0 })
      nn.init.copy_(bn.bias, fp8.tensor { 0.0, 0.1, -0.2, 0.3 })
    end)
    for step, xin in ipairs { CX, CX * 2 + 0.5 } do
      local x = xin:detach():clone():requires_grad(true)
      local y = bn(x)
      same("bn2 y" .. step, y, ref["bn2_y" .. step], 1e-5)
      local l = (y * wave(y:shape())):sum()
      l:backward()
      same("bn2 dx" .. step, x.grad, ref["bn2_dx" .. step], 1e-5)
    end
    same("bn2 dw", bn.weight.grad, ref.bn2_dw, 1e-5)
    same("bn2 db", bn.bias.grad, ref.bn2_db, 1e-5)
    same("bn2 running_mean", bn.running_mean, ref.bn2_rm, 1e-5)
    same("bn2 running_var", bn.running_var, ref.bn2_rv, 1e-5)
    assert.are.equal(2, bn.num_batches_tracked:item())
    bn:eval()
    same("bn2 eval", bn(CX), ref.bn2_eval, 1e-5)
    -- momentum=false is torch's None: the cumulative average; [N, C] and [N, C, L] inputs
    local bn1 = nn.BatchNorm1d(4, { momentum = false })
    same("bn1 y", bn1(CX1), ref.bn1_y, 1e-5)
    same("bn1 y2", bn1(CX1:select(3, 1) * 3), ref.bn1_y2, 1e-5)
    same("bn1 running_mean", bn1.running_mean, ref.bn1_rm, 1e-5)
    same("bn1 running_var", bn1.running_var, ref.bn1_rv, 1e-5)
    local free = nn.BatchNorm2d(4, { track_running_stats = false, affine = false })
    free:eval()
    same("no running stats", free(CX), ref.bn_nots, 1e-5)
    assert.are.equal(0, #free:parameters())
    assert.are.same({ "running_mean", "running_var", "num_batches_tracked" },
      (function() local r = {} for _, nb in ipairs(nn.BatchNorm2d(2):named_buffers()) do r[#r + 1] = nb[1] end
        return r end)())
    for key, groups in pairs { gn2 = 2, gn4 = 4 } do
      local gn = nn.GroupNorm(groups, 4)
      fp8.no_grad(function()
        nn.init.copy_(gn.weight, fp8.tensor { 1.0, 0.5, 2.0, -1.0 })
        nn.init.copy_(gn.bias, fp8.tensor { 0.0, 0.1, -0.2, 0.3 })
      end)
      local x = CX:detach():clone():requires_grad(true)
      local y = gn(x)
      same(key, y, ref[key], 1e-5)
      local l = (y * wave(y:shape())):sum()
      l:backward()
      same(key .. " dx", x.grad, ref[key .. "_dx"], 1e-5)
      same(key .. " dw", gn.weight.grad, ref[key .. "_dw"], 1e-5)
    end
    U.fails_with("batch_norm: expected more than 1 value per channel when training", function()
      return nn.BatchNorm1d(3)(fp8.ones { 1, 3 })
    end)
    U.fails_with("GroupNorm: num_groups must be a positive integer dividing num_channels (4), got 3", nn.GroupNorm, 3,
      4)
    U.fails_with("batch_norm: running_mean and running_var are needed outside training", F.batch_norm, CX)
    U.fails_with("batch_norm: momentum must be a finite number >= 0, got false", F.batch_norm, CX, fp8.zeros { 4 },
      fp8.ones { 4 }, nil, nil, true, false)
    U.fails_with("BatchNorm2d: unknown option 'momentun' (did you mean 'momentum'?)", nn.BatchNorm2d, 4,
      { momentun = 0.1 })
  end)

  it("cross_entropy's and nll_loss's class weights: torch's values and gradients, each reduction", function()
    local CW, CE_T = fp8.tensor { 1.0, 2.5, 0.5 }, fp8.tensor { 2, 0, 1, 1 }
    for _, red in ipairs { "mean", "sum", "none" } do
      for key, o in pairs { [""] = {}, _ls = { label_smoothing = 0.2 }, _ii = { ignore_index = 1 },
                            _ls_ii = { label_smoothing = 0.3, ignore_index = 0 } } do
        local x = fp8.tensor(LP):requires_grad(true)
        o.weight, o.reduction = CW, red
        local loss = F.cross_entropy(x, CE_T, o)
        local name = ("cew_%s%s"):format(red, key)
        same(name, loss, ref[name])
        loss:sum():backward()
        same(name .. "_dx", x.grad, ref[name .. "_dx"])
      end
      local x = fp8.tensor(LP):requires_grad(true)
      local probs = fp8.tensor { { 0.2, 0.5, 0.3 }, { 1, 0, 0 }, { 0.1, 0.1, 0.8 }, { 0, 0.6, 0.4 } }
      local loss = F.cross_entropy(x, probs, { weight = CW, reduction = red, label_smoothing = 0.1 })
      same("cew_prob_" .. red, loss, ref["cew_prob_" .. red])
      loss:sum():backward()
      same("cew_prob_" .. red .. "_dx", x.grad, ref["cew_prob_" .. red .. "_dx"])
      for key, o in pairs { [""] = {}, _ii = { ignore_index = 1 } } do
        local xn = fp8.tensor(LP):requires_grad(true)
        o.weight, o.reduction = CW, red
        local ln = F.nll_loss(xn, CE_T, o)
        local name = ("nllw_%s%s"):format(red, key)
        same(name, ln, ref[name])
        ln:sum():backward()
        same(name .. "_dx", xn.grad, ref[name .. "_dx"])
      end
    end
    -- the modules take it; a weight of the wrong size or kind is named
    same("CrossEntropyLoss weight", nn.CrossEntropyLoss { weight = CW }(fp8.tensor(LP), CE_T), ref.cew_mean)
    same("NLLLoss weight", nn.NLLLoss { weight = CW, reduction = "sum" }(fp8.tensor(LP), CE_T), ref.nllw_sum)
    U.fails_with("cross_entropy: weight must be a float tensor of 3 class weights (one per class), got fp32 [2]",
      F.cross_entropy, fp8.tensor(LP), CE_T, { weight = fp8.ones { 2 } })
    U.fails_with("nll_loss: weight must be a float tensor of 3 class weights (one per class), got a table",
      F.nll_loss, fp8.tensor(LP), CE_T, { weight = { 1, 2, 3 } })
  end)

  it("nll_loss's reductions and ignore_index, with gradients, and NLLLoss / CrossEntropyLoss / MSELoss", function()
    for _, red in ipairs { "mean", "sum", "none" } do
      for _, ii in ipairs { false, 1 } do
        local lp = fp8.tensor(LP):requires_grad_()
        local t = fp8.tensor(ii and { 2, 0, 1, 1 } or { 2, 0, -100, 1 })
        local key = "nll_" .. red .. (ii and "_ii1" or "")
        local loss = F.nll_loss(lp, t, { reduction = red, ignore_index = ii or nil })
        same(key, loss, ref[key])
        loss:sum():backward()
        same(key .. "_grad", lp.grad, ref[key .. "_grad"])
      end
    end
    same("NLLLoss", nn.NLLLoss { reduction = "sum" }(fp8.tensor(LP), fp8.tensor { 2, 0, -100, 1 }), ref.nll_sum)
    local logits, tg = fp8.randn { 5, 3 }, fp8.tensor { 0, 2, 1, 1, 0 }
    assert.are.equal(F.cross_entropy(logits, tg, { label_smoothing = 0.2 }):item(),
      nn.CrossEntropyLoss { label_smoothing = 0.2 }(logits, tg):item())
    assert.are.equal(F.mse_loss(logits, logits * 2, { reduction = "sum" }):item(),
      nn.MSELoss { reduction = "sum" }(logits, logits * 2):item())
    U.fails_with("nll_loss: target 3 at row 0 is out of range [0, 3)", F.nll_loss, fp8.tensor { { -1, -1, -1 } },
      fp8.tensor { 3 })
    U.fails_with("nll_loss: an unbatched input [1] takes a 0-d class id as its target, got [1]", F.nll_loss,
      fp8.tensor { -1 }, fp8.tensor { 0 })
    U.fails_with("nll_loss: reduction must be \"mean\", \"sum\" or \"none\"", F.nll_loss, fp8.tensor(LP),
      fp8.tensor { 0, 0, 0, 0 }, { reduction = "avg" })
    U.fails_with("CrossEntropyLoss: unknown option 'weights' (did you mean 'weight'?)", nn.CrossEntropyLoss,
      { weights = fp8.ones { 3 } })
    U.fails_with("MSELoss: reduction must be \"mean\", \"sum\" or \"none\", got \"avg\"", nn.MSELoss,
      { reduction = "avg" })
  end)

  it("leaky_relu, elu, softplus, l1_loss, binary_cross_entropy_with_logits and their modules (values, gradients)",
    function()
      local Y = { { 0.0, 1.0, 0.5, 1.0 }, { 1.0, 0.0, 0.25, 0.0 }, { 1.0, 1.0, 0.0, 0.0 } }
      for key, c in pairs {
        leaky = { function(x) return F.leaky_relu(x, 0.2) end, function(x) return nn.LeakyReLU(0.2)(x) end },
        elu = { function(x) return F.elu(x, 1.5) end, function(x) return nn.ELU { alpha = 1.5 }(x) end },
        softplus = { function(x) return F.softplus(x, 2.0, 3.0) end, function(x) return nn.Softplus(2, 3)(x) end },
      } do
        for _, fn in ipairs(c) do
          local x = fp8.tensor(X):requires_grad_()
          local y = fn(x)
          ;(y * fp8.tensor(G)):sum():backward()
          same(key, y, ref[key])
          same(key .. "_dx", x.grad, ref[key .. "_dx"])
        end
      end
      for _, red in ipairs { "mean", "sum", "none" } do
        local x = fp8.tensor(X):requires_grad_()
        local loss = F.binary_cross_entropy_with_logits(x, fp8.tensor(Y), { reduction = red })
        loss:sum():backward()
        same("bce_" .. red, loss, ref["bce_" .. red])
        same("bce_" .. red .. "_dx", x.grad, ref["bce_" .. red .. "_dx"])
        same("l1_" .. red, F.l1_loss(fp8.tensor(X), fp8.tensor(Y), { reduction = red }), ref["l1_" .. red])
        same("L1Loss " .. red, nn.L1Loss { reduction = red }(fp8.tensor(X), fp8.tensor(Y)), ref["l1_" .. red])
      end
      local x = fp8.tensor(X):requires_grad_()
      local loss = nn.BCEWithLogitsLoss { pos_weight = fp8.tensor { 2.0, 0.5, 1.0, 3.0 } }(x, fp8.tensor(Y))
      loss:backward()
      same("bce_pw", loss, ref.bce_pw)
      same("bce_pw_dx", x.grad, ref.bce_pw_dx)
      -- a weight broadcast over the rows (a 0 among it), with and without pos_weight (torch 2.15's)
      for _, red in ipairs { "mean", "sum", "none" } do
        for key, pw in pairs { [""] = false, _pw = fp8.tensor { 2.0, 0.5, 1.0, 3.0 } } do
          local xw = fp8.tensor(X):requires_grad_()
          local o = { weight = fp8.tensor { 0.5, 2.0, 1.0, 0.0 }, pos_weight = pw or nil, reduction = red }
          local lw = F.binary_cross_entropy_with_logits(xw, fp8.tensor(Y), o)
          local name = ("bce_w_%s%s"):format(red, key)
          same(name, lw, ref[name])
          lw:sum():backward()
          same(name .. "_dx", xw.grad, ref[name .. "_dx"])
        end
      end
      same("BCEWithLogitsLoss weight", nn.BCEWithLogitsLoss { weight = fp8.tensor { 0.5, 2.0, 1.0, 0.0 },
        reduction = "sum" }(fp8.tensor(X), fp8.tensor(Y)), ref.bce_w_sum)
      -- no overflow far out: torch gives 0 and 100 for these
      same("bce far", F.binary_cross_entropy_with_logits(fp8.tensor { 100, -100 }, fp8.tensor { 1, 1 },
        { reduction = "none" }), { 0, 100 })
      U.fails_with("leaky_relu: negative_slope must be a finite number, got", F.leaky_relu, fp8.ones { 1 }, 0 / 0)
      U.fails_with("softplus: beta must be nonzero", F.softplus, fp8.ones { 1 }, 0)
      U.fails_with("l1_loss: input [2] and target [3] must have the same shape", F.l1_loss, fp8.ones { 2 },
        fp8.ones { 3 })
      U.fails_with("binary_cross_entropy_with_logits: weight must be a tensor", F.binary_cross_entropy_with_logits,
        fp8.ones { 2 }, fp8.ones { 2 }, { weight = 1 })
      U.fails_with("binary_cross_entropy_with_logits: weight [3] must broadcast to the input [2]",
        F.binary_cross_entropy_with_logits, fp8.ones { 2 }, fp8.ones { 2 }, { weight = fp8.ones { 3 } })
      U.fails_with("l1_loss: reduction must be \"mean\", \"sum\" or \"none\"", F.l1_loss, fp8.ones { 2 },
        fp8.ones { 2 }, { reduction = "avg" })
      U.fails_with("ELU: alpha must be a finite number", nn.ELU, "x")
    end)

  it("the padding layers (ZeroPad, ConstantPad, ReflectionPad, ReplicationPad, CircularPad 1d/2d/3d) are F.pad's "
    .. "modes, as torch's", function()
    local x = fp8.arange(12):reshape { 1, 3, 4 }
    -- torch 2.15: nn.ReflectionPad2d(1)(torch.arange(12.).reshape(1, 3, 4)).flatten()[:16]
    assert.are.same({ 5, 4, 5, 6, 7, 6, 1, 0, 1, 2, 3, 2, 5, 4, 5, 6 },
      nn.ReflectionPad2d(1)(x):reshape(-1):narrow(1, 1, 16):totable())
    for _, c in ipairs {
      { nn.ZeroPad2d { 1, 1, 2, 0 }, { 1, 1, 2, 0 }, {}, "ZeroPad2d((1, 1, 2, 0))" },
      { nn.ZeroPad1d(2), { 2, 2 }, {}, "ZeroPad1d((2, 2))" },
      { nn.ConstantPad1d(2, 3.5), { 2, 2 }, { value = 3.5 }, "ConstantPad1d(padding=(2, 2), value=3.5)" },
      { nn.ConstantPad3d({ 1, 0, 0, 1, 1, 1 }, -1), { 1, 0, 0, 1, 1, 1 }, { value = -1 },
        "ConstantPad3d(padding=(1, 0, 0, 1, 1, 1), value=-1)" },
      { nn.ReflectionPad1d { 2, 1 }, { 2, 1 }, { mode = "reflect" }, "ReflectionPad1d((2, 1))" },
      { nn.ReplicationPad2d(1), { 1, 1, 1, 1 }, { mode = "replicate" }, "ReplicationPad2d((1, 1, 1, 1))" },
      { nn.CircularPad1d { -1, 2 }, { -1, 2 }, { mode = "circular" }, "CircularPad1d((-1, 2))" },
      { nn.CircularPad2d { 1, 0, 2, 1 }, { 1, 0, 2, 1 }, { mode = "circular" }, "CircularPad2d((1, 0, 2, 1))" },
    } do
      assert.are.same(F.pad(x, c[2], c[3]):totable(), c[1](x):totable())
      assert.are.equal(c[4], tostring(c[1]))
    end
    local xr = x:detach():clone():requires_grad(true)
    nn.ReplicationPad1d(2)(xr):sum():backward()   -- each edge element counted three times
    assert.are.same({ 3, 1, 1, 3 }, xr.grad:select(2, 1):reshape(-1):totable())
    U.fails_with("ReflectionPad2d: padding must be an integer or a list of 4 integers, got a table", nn.ReflectionPad2d,
      { 1, 2 })
    U.fails_with("ConstantPad2d: value must be a number, got nil", nn.ConstantPad2d, 1)
    U.fails_with("ZeroPad2d: takes (padding) only (it pads with zeros), got a second argument 2", nn.ZeroPad2d, 1, 2)
    U.fails_with("ReflectionPad1d forward: pad: mode \"reflect\" needs each amount less than the dim's size",
      nn.ReflectionPad1d(5), x)
  end)

  it("normalize (values, gradients) and pad (constant, cropping, gradients)", function()
    for key, o in pairs { norm2 = {}, norm1_dim1 = { p = 1, dim = 1 }, norm3 = { p = 3 } } do
      local x = fp8.tensor(X):requires_grad_()
      local y = F.normalize(x, o)
      ;(y * fp8.tensor(G)):sum():backward()
      same(key, y, ref[key], 1e-5)
      same(key .. "_dx", x.grad, ref[key .. "_dx"], 1e-5)
    end
    local z = fp8.arange(6):view(2, 3):requires_grad_()
    local p = F.pad(z, { 1, 2, 0, 1 }, { value = -1 })
    assert.are.same({ { -1, 0, 1, 2, -1, -1 }, { -1, 3, 4, 5, -1, -1 }, { -1, -1, -1, -1, -1, -1 } }, p:totable())
    p:sum():backward()
    assert.are.same({ { 1, 1, 1 }, { 1, 1, 1 } }, z.grad:totable())
    assert.are.same({ 1, 2 }, F.pad(fp8.arange(5), { -1, -2 }):totable())   -- torch's negative pads crop
    U.fails_with("pad: amounts must be integers, got nil", F.pad, z, { nil, 1 })   -- a hole, not an arithmetic error
    U.fails_with("pad: mode must be one of \"constant\", \"reflect\", \"replicate\", \"circular\", got \"edge\"",
      F.pad, z, { 1, 1 }, { mode = "edge" })
    -- the other modes: torch's limits (reflect's amounts under the size, circular's at most it, no value, the last
    -- 1-3 dims of an unbatched or batched input), and circular's crop to nothing
    U.fails_with("pad: mode \"reflect\" needs each amount less than the dim's size: {3, 0} for dim 2 of [2, 3]",
      F.pad, z, { 3, 0 }, { mode = "reflect" })
    U.fails_with("pad: mode \"circular\" wraps around once at most: {0, 4} for dim 2 of [2, 3] exceeds the size 3",
      F.pad, z, { 0, 4 }, { mode = "circular" })
    U.fails_with("pad: mode \"replicate\" takes no value", F.pad, z, { 1, 1 }, { mode = "replicate", value = 2 })
    U.fails_with("pad: mode \"replicate\" pads the last 1, 2 or 3 dims of an unbatched or batched input (2 amounts "
      .. "take a 2-D or 3-D input), got 2 amounts for [6]", F.pad, fp8.arange(6), { 1, 1 }, { mode = "replicate" })
    U.fails_with("pad: padding dim 2 of size 3 by {-2, -1} leaves nothing", F.pad, z, { -2, -1 }, { mode = "reflect" })
    assert.are.same({ 2, 0 }, F.pad(z, { -2, -1 }, { mode = "circular" }):shape())
    U.fails_with("pad: e4m3 tensor: dequantize it first", F.pad, z:quantize("e4m3"), { 1, 1 })
    assert.are.same({ { 2, 1, 0, 1, 2, 1 } }, F.pad(fp8.arange(3):view(1, 3), { 2, 1 }, { mode = "reflect" }):totable())
    U.fails_with("Conv2d: padding_mode must be one of \"zeros\", \"reflect\", \"replicate\", \"circular\", got "
      .. "\"same\"", nn.Conv2d, 1, 1, 3, { padding_mode = "same" })
    U.fails_with("Conv2d forward: pad: mode \"reflect\" needs each amount less than the dim's size: {3, 3}",
      nn.Conv2d(1, 1, 3, { padding = 3, padding_mode = "reflect" }), fp8.ones { 1, 1, 3, 3 })
    assert.are.equal("Conv1d(1, 1, kernel_size=(3), stride=1, padding=1, padding_mode=circular)",
      tostring(nn.Conv1d(1, 1, 3, { padding = 1, padding_mode = "circular" })))
    U.fails_with("pad: pad must be a list of an even number of integers", F.pad, z, { 1 })
    U.fails_with("pad: 3 pairs pad 3 dims, but the input [2, 3] has 2", F.pad, z, { 1, 1, 1, 1, 1, 1 })
    U.fails_with("pad: padding dim 1 of size 3 by {-2, -2} leaves nothing", F.pad, fp8.ones { 3 }, { -2, -2 })
    U.fails_with("normalize: p must be a number (math.huge and -math.huge included, NaN not), got \"2\" (a string)",
      F.normalize, z, { p = "2" })   -- (p < 1 was refused until stop 98; torch 2.15 takes it: gaps15b_spec)
    -- index_select: the rows of an index, in order (a repeat's gradients add)
    local x = fp8.arange(12):view(3, 4):requires_grad_()
    local y = x:index_select(1, fp8.tensor { 2, 0, 2 })
    assert.are.same({ { 8, 9, 10, 11 }, { 0, 1, 2, 3 }, { 8, 9, 10, 11 } }, y:totable())
    y:sum():backward()
    assert.are.same({ { 1, 1, 1, 1 }, { 0, 0, 0, 0 }, { 2, 2, 2, 2 } }, x.grad:totable())
    assert.are.same({ 3, 0 }, fp8.index_select(fp8.arange(4), 1, fp8.tensor { 3, 0 }):totable())
    U.fails_with("index_select: index 5 out of range 0..2 for dim 1 of size 3", x.index_select, x, 1,
      fp8.tensor { 5 })
    U.fails_with("index_select: the index must be 1-d", x.index_select, x, 1, fp8.zeros { 1, 1 })
  end)

  it("one_hot, Flatten, Softmax, Sigmoid, Tanh, Identity", function()
    same("one_hot", F.one_hot(fp8.tensor { { 2, 0 }, { 1, 3 } }, 5), ref.one_hot)
    assert.are.same({ 2, 4 }, F.one_hot(fp8.tensor { 3, 0 }):shape())
    U.fails_with("one_hot: class ids must be whole numbers >= 0, got 1.5 at position 1", F.one_hot, fp8.tensor { 1.5 })
    U.fails_with("one_hot: class id 3 is not below num_classes = 2", F.one_hot, fp8.tensor { 3 }, 2)
    U.fails_with("one_hot: num_classes must be a positive integer or -1, got 0", F.one_hot, fp8.tensor { 1 }, 0)
    assert.are.same(ref.flatten, nn.Flatten()(fp8.zeros { 2, 3, 4, 5 }):shape())
    assert.are.same(ref.flatten_13, nn.Flatten(1, 3)(fp8.zeros { 2, 3, 4, 5 }):shape())
    assert.are.same(ref.flatten_13, nn.Flatten { start_dim = 1, end_dim = -2 }(fp8.zeros { 2, 3, 4, 5 }):shape())
    U.fails_with("Flatten: start_dim must be a nonzero integer", nn.Flatten, 0)
    same("Softmax(1)", nn.Softmax(1)(fp8.tensor(X)), ref.softmax0)
    same("Sigmoid", nn.Sigmoid()(fp8.tensor { 0, 2 }), { 0.5, 1 / (1 + math.exp(-2)) })
    same("Tanh", nn.Tanh()(fp8.tensor { 0, 1 }), { 0, math.tanh(1) })
    local x = fp8.ones { 2 }
    assert.are.equal(x, nn.Identity(3, "anything")(x))   -- torch's Identity drops its constructor arguments
  end)

  it("hardtanh, relu6, hardsigmoid, hardswish, mish, selu, celu, logsigmoid, softmin, glu, hardshrink, softshrink: "
    .. "values and gradients, the kinks included", function()
    local K = { { -4.0, -3.0, -1.0, 0.0 }, { 0.5, 3.0, 6.0, 7.0 }, { -3.5, 2.9, 6.5, -0.2 } }
    local cases = {
      hardtanh = { F.hardtanh, nn.Hardtanh() }, hardtanh_m3_3 = { function(t) return F.hardtanh(t, -3, 3) end,
      nn.Hardtanh { min_val = -3, max_val = 3 } }, relu6 = { F.relu6, nn.ReLU6() },
      hardsigmoid = { F.hardsigmoid, nn.Hardsigmoid() }, hardswish = { F.hardswish, nn.Hardswish() },
      mish = { F.mish, nn.Mish() }, selu = { F.selu, nn.SELU() }, celu = { function(t) return F.celu(t, 0.5) end,
      nn.CELU(0.5) }, logsigmoid = { F.logsigmoid, nn.LogSigmoid() },
      softmin = { function(t) return F.softmin(t, 2) end, nn.Softmin(2) },
      log_softmax0 = { function(t) return F.log_softmax(t, 1) end, nn.LogSoftmax(1) },
      hardshrink = { F.hardshrink, nn.Hardshrink() }, softshrink = { F.softshrink, nn.Softshrink() },
      hardshrink3 = { function(t) return F.hardshrink(t, 3) end, nn.Hardshrink(3) },
      softshrink3 = { function(t) return F.softshrink(t, 3) end, nn.Softshrink { lambd = 3 } },
    }
    for key, c in pairs(cases) do
      for i, fn in ipairs(c) do
        local x = fp8.tensor(K):requires_grad_()
        local y = fn(x)
        same(key .. " " .. i, y, ref["act_" .. key])
        ;(y * fp8.tensor(G)):sum():backward()
        same(key .. " " .. i .. " dx", x.grad, ref["act_" .. key .. "_dx"])
      end
    end
    local x = fp8.tensor(X):requires_grad_()
    local y = nn.GLU(2)(x)
    same("glu", y, ref.glu)
    ;(y * fp8.tensor(G):narrow(2, 1, 2)):sum():backward()
    same("glu dx", x.grad, ref.glu_dx)
    U.fails_with("glu: dim 1 must have an even size, got shape [3, 4]", F.glu, fp8.tensor(X), 1)
    U.fails_with("hardtanh: min_val 2 is above max_val 1", F.hardtanh, fp8.tensor(X), 2)
    U.fails_with("celu: alpha must be nonzero", F.celu, fp8.tensor(X), 0)
    U.fails_with("softshrink: lambd must be >= 0, got -1", F.softshrink, fp8.tensor(X), -1)
    U.fails_with("Hardtanh: max_val must be a finite number", nn.Hardtanh, -1, "x")
    U.fails_with("LogSoftmax: dim must be a nonzero integer", nn.LogSoftmax, 0)
    local nan = F.hardsigmoid(fp8.tensor { 0 / 0 }):item()
    assert.is_true(nan ~= nan)   -- NaN stays NaN, as torch's
  end)

  it("smooth_l1_loss, huber_loss, kl_div and their modules: each reduction, beta/delta/log_target, gradients",
    function()
    local Y = { { 0.0, 1.0, 0.5, 1.0 }, { 1.0, 0.0, 0.25, 0.0 }, { 1.0, 1.0, 0.0, 0.0 } }
    local PT = { { 0.2, 0.0, 0.5, 0.3 }, { 0.25, 0.25, 0.25, 0.25 }, { 0.0, 0.0, 1.0, 0.0 } }
    local losses = {
      sl1 = { F.smooth_l1_loss, {}, nn.SmoothL1Loss }, sl1_b05 = { F.smooth_l1_loss, { beta = 0.5 }, nn.SmoothL1Loss },
      sl1_b0 = { F.smooth_l1_loss, { beta = 0 }, nn.SmoothL1Loss }, huber = { F.huber_loss, {}, nn.HuberLoss },
      huber_d2 = { F.huber_loss, { delta = 2 }, nn.HuberLoss },
    }
    for _, red in ipairs { "mean", "sum", "none" } do
      for key, c in pairs(losses) do
        local o = { reduction = red }
        for k, v in pairs(c[2]) do o[k] = v end
        for i, fn in ipairs { function(a, b) return c[1](a, b, o) end, c[3](o) } do
          local x = fp8.tensor(X):requires_grad_()
          local l = fn(x, fp8.tensor(Y))
          same(("%s_%s %d"):format(key, red, i), l, ref[key .. "_" .. red])
          ;(red == "none" and l * fp8.tensor(G) or l):sum():backward()
          same(("%s_%s %d dx"):format(key, red, i), x.grad, ref[key .. "_" .. red .. "_dx"])
        end
      end
      for _, lt in ipairs { false, true } do
        for _, r in ipairs(red == "sum" and { "sum", "batchmean" } or { red }) do
          local x = fp8.tensor(X):requires_grad_()
          local t = lt and F.log_softmax(fp8.tensor(G), 2) or fp8.tensor(PT)
          local l = nn.KLDivLoss { reduction = r, log_target = lt }(F.log_softmax(x, 2), t)
          local key = "kl_" .. r .. (lt and "_lt" or "")
          same(key, l, ref[key])
          ;(r == "none" and l * fp8.tensor(G) or l):sum():backward()
          same(key .. " dx", x.grad, ref[key .. "_dx"])
        end
      end
    end
    U.fails_with('kl_div: reduction must be "mean", "batchmean", "sum" or "none", got "x"',
      F.kl_div, fp8.tensor(X), fp8.tensor(X), { reduction = "x" })
    U.fails_with('KLDivLoss: reduction must be "mean", "batchmean", "sum" or "none"', nn.KLDivLoss, { reduction = 1 })
    U.fails_with('SmoothL1Loss: reduction must be "mean", "sum" or "none"',
      nn.SmoothL1Loss, { reduction = "batchmean" })
    U.fails_with("smooth_l1_loss: beta must be a finite number >= 0, got -1",
      F.smooth_l1_loss, fp8.tensor(X), fp8.tensor(X), { beta = -1 })
    U.fails_with("huber_loss: delta must be positive, got 0", F.huber_loss, fp8.tensor(X), fp8.tensor(X), { delta = 0 })
    U.fails_with("kl_div: log_target must be a boolean", F.kl_div, fp8.tensor(X), fp8.tensor(X), { log_target = 1 })
    U.fails_with("kl_div: input [3, 4] and target [4] must have the same shape",
      F.kl_div, fp8.tensor(X), fp8.ones { 4 })
    local nan = F.kl_div(fp8.tensor { 0 }, fp8.tensor { -1 }, { reduction = "sum" }):item()
    assert.is_true(nan ~= nan)   -- a negative target: NaN, as torch's xlogy
  end)

  it("scaled_dot_product_attention: an additive attn_mask, causal over more keys than queries, grouped k/v heads "
    .. "(values and the gradients of q, k, v), dropout_p", function()
    local function inputs(shape, off)
      local v = {}
      for i = 0, shape[1] * shape[2] * shape[3] * shape[4] - 1 do v[#v + 1] = math.sin(0.37 * i + off) end
      return fp8.tensor(v):view(shape):requires_grad_()
    end
    local MASK = { { 0.0, -1.5, -math.huge, 0.5 }, { 0.0, 0.0, -2.0, -math.huge }, { 1.0, 0.0, 0.0, 0.0 } }
    local cases = {
      sdpa_mask = { { { 1, 2, 3, 4 }, { 1, 2, 4, 4 }, { 1, 2, 4, 4 } }, { attn_mask = fp8.tensor(MASK) } },
      sdpa_causal_tq2 = { { { 1, 2, 2, 4 }, { 1, 2, 4, 4 }, { 1, 2, 4, 4 } }, { is_causal = true } },
      sdpa_gqa = { { { 2, 4, 3, 4 }, { 2, 2, 3, 4 }, { 2, 2, 3, 4 } }, { enable_gqa = true, scale = 0.3 } },
    }
    for key, c in pairs(cases) do
      local q, k, v = inputs(c[1][1], 0), inputs(c[1][2], 1), inputs(c[1][3], 2)
      local y = F.scaled_dot_product_attention(q, k, v, c[2])
      same(key, y, ref[key])
      local w = {}
      for i = 0, y:numel() - 1 do w[#w + 1] = math.cos(i) end
      ;(y * fp8.tensor(w):view(y:shape())):sum():backward()
      same(key .. " dq", q.grad, ref[key .. "_dq"]); same(key .. " dk", k.grad, ref[key .. "_dk"])
      same(key .. " dv", v.grad, ref[key .. "_dv"])
    end
    -- the same attention by the fused kernel and written out: is_causal against its additive mask, dropout_p = 0
    local q, k, v = fp8.randn { 2, 2, 5, 8 }, fp8.randn { 2, 2, 5, 8 }, fp8.randn { 2, 2, 5, 8 }
    local fused = F.scaled_dot_product_attention(q, k, v, { is_causal = true, dropout_p = 0 })
    local causal = fp8.where(fp8.ones { 5, 5 }:tril(), 0, -math.huge)
    local out = F.scaled_dot_product_attention(q, k, v, { attn_mask = causal })
    same("fused vs written out", out, fused:totable(), 1e-5)
    -- dropout_p: everything dropped at 1; at 0.5 a share of the probabilities is zeroed and the rest doubled
    assert.are.equal(0, F.scaled_dot_product_attention(q, k, v, { dropout_p = 1 }):abs():max():item())
    fp8.manual_seed(3)
    local a = F.scaled_dot_product_attention(q, k, v, { dropout_p = 0.5 })
    fp8.manual_seed(3)
    same("dropout reproducible", F.scaled_dot_product_attention(q, k, v, { dropout_p = 0.5 }), a:totable(), 0)
    assert.is_true((a - F.scaled_dot_product_attention(q, k, v)):abs():max():item() > 1e-3)
    local S = "scaled_dot_product_attention: "
    U.fails_with(S .. "attn_mask holds only 0s and 1s", F.scaled_dot_product_attention, q, k, v,
      { attn_mask = fp8.ones { 5, 5 }:tril() })
    U.fails_with(S .. "give either is_causal=true or an attn_mask, not both", F.scaled_dot_product_attention, q, k, v,
      { is_causal = true, attn_mask = fp8.zeros { 5, 5 } })
    U.fails_with(S .. "dropout_p must be a probability in [0, 1], got 2", F.scaled_dot_product_attention, q, k, v,
      { dropout_p = 2 })
    U.fails_with(S .. "expected k [B, H, Tk, D]", F.scaled_dot_product_attention, q, k:narrow(2, 1, 1), v)
    U.fails_with("(Hk dividing H: enable_gqa)", F.scaled_dot_product_attention, fp8.randn { 1, 3, 2, 4 },
      fp8.randn { 1, 2, 2, 4 }, fp8.randn { 1, 2, 2, 4 }, { enable_gqa = true })
    U.fails_with(S .. "unknown option 'need_weights'", F.scaled_dot_product_attention, q, k, v, { need_weights = true })
  end)
end)

describe("fp8.nn.isinstance", function()
  local nn = fp8.nn
  local U = dofile("tests/spec/helpers/util.lua")
  it("is Python's isinstance for modules: the class or an ancestor, a list of classes, false for the rest", function()
    local A = nn.Module.class("IsA")
    local B = nn.Module.class("IsB", A)
    local b = B()
    assert.is_true(nn.isinstance(b, A)); assert.is_true(nn.isinstance(b, B))
    assert.is_true(nn.isinstance(b, nn.Module))
    assert.is_false(nn.isinstance(A(), B)); assert.is_false(nn.isinstance(b, nn.Linear))
    assert.is_true(nn.isinstance(nn.Linear(2, 2), { A, nn.Linear }))
    -- an FP8Linear is a Linear (the class the nn table loaded: busted reloads modules between spec files, so a
    -- model converted by fp8.convert_model here may hold another copy of the classes)
    assert.is_true(rawget(nn.FP8Linear, "super") == nn.Linear)
    local f = setmetatable({}, nn.FP8Linear)
    assert.is_true(nn.isinstance(f, nn.Linear)); assert.is_true(nn.isinstance(f, nn.FP8Linear))
    assert.are.equal("FP8Linear", fp8.convert_model(nn.Sequential(nn.Linear(16, 16)))[1]:type_name())
    assert.is_false(nn.isinstance(3, A)); assert.is_false(nn.isinstance({}, A))
    assert.is_false(nn.isinstance(fp8.ones { 1 }, A))
    local seen = 0
    nn.Sequential(nn.Linear(2, 2), nn.GELU(), nn.Linear(2, 2)):apply(function(m)
      if nn.isinstance(m, nn.Linear) then nn.init.zeros_(m.weight); seen = seen + 1 end
    end)
    assert.are.equal(2, seen)
    U.fails_with("isinstance: arg 2 must be a Module class", function() nn.isinstance(b, 3) end)
    U.fails_with("isinstance: arg 2 must be a Module class", function() nn.isinstance(b, { A, "x" }) end)
    U.fails_with("isinstance: expected a Module class or a list of them, got an empty table",
      function() nn.isinstance(b, {}) end)
  end)
end)

describe("fp8.nn.init: torch's Xavier, Kaiming, truncated normal, constant and eye initialisers", function()
  local nn, I = fp8.nn, fp8.nn.init
  local function close(a, b, rel, what) assert.is_true(math.abs(a - b) <= rel * math.abs(b), ("%s: %.6g vs %.6g"):format(what, a, b)) end

  it("calculate_gain: torch 2.15's values", function()
    for _, c in ipairs { { "linear", nil, 1 }, { "conv2d", nil, 1 }, { "sigmoid", nil, 1 }, { "tanh", nil, 1.6666666666666667 },
      { "relu", nil, 1.4142135623730951 }, { "leaky_relu", nil, 1.4141428569978354 },
      { "leaky_relu", 0.2, 1.3867504905630728 }, { "selu", nil, 0.75 } } do
      close(I.calculate_gain(c[1], c[2]), c[3], 1e-15, c[1])
    end
  end)

  it("draw within torch's bounds and with its spreads; keep the tensor and its autograd flags", function()
    fp8.manual_seed(7)
    local w = nn.Linear(512, 256).weight   -- fan_in 512, fan_out 256
    local same = I.xavier_uniform_(w)
    assert.are.equal(w, same)
    assert.is_true(w:requires_grad())
    local b = math.sqrt(6 / 768)
    assert.is_true(w:abs():max():item() <= b)
    close(w:abs():max():item(), b, 1e-3, "xavier_uniform_ bound")
    close(w:std():item(), b / math.sqrt(3), 0.02, "xavier_uniform_ std")
    I.xavier_normal_(w, 2)
    close(w:std():item(), 2 * math.sqrt(2 / 768), 0.02, "xavier_normal_ std")
    I.kaiming_uniform_(w, math.sqrt(5))   -- nn.Linear's own: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    close(w:abs():max():item(), 1 / math.sqrt(512), 1e-3, "kaiming_uniform_ a=sqrt(5) bound")
    I.kaiming_normal_(w, { mode = "fan_out", nonlinearity = "relu" })
    close(w:std():item(), math.sqrt(2) / math.sqrt(256), 0.02, "kaiming_normal_ fan_out relu std")
    I.kaiming_normal_(w, 0, "fan_in", "linear")
    close(w:std():item(), 1 / math.sqrt(512), 0.02, "kaiming_normal_ linear std")
    -- [out, in, k, k]: the fans take the receptive field (torch's: 120 and 90 for [3, 4, 5, 6])
    local c = fp8.zeros { 3, 4, 5, 6 }
    I.xavier_uniform_(c)
    close(c:abs():max():item(), math.sqrt(6 / 210), 0.05, "receptive field")
    I.constant_(w, 0.25)
    assert.are.equal(0.25, w:min():item())
    assert.are.equal(0.25, w:max():item())
    assert.are.same({ { 1, 0, 0 }, { 0, 1, 0 } }, I.eye_(fp8.zeros { 2, 3 }):tolist())
    assert.are.same({ 0, 4 }, I.kaiming_uniform_(fp8.zeros { 0, 4 }):shape())   -- no elements: nothing to draw
  end)

  it("orthogonal_, dirac_ and sparse_ are torch's initialisers", function()
    local I = nn.init
    -- orthogonal_: QᵀQ = gain²·I (QQᵀ for a wide one), and Q is the QR factor of the normal draws with R's diagonal
    -- positive (torch's signs): the same draws, redone, give Qᵀ·A upper triangular with a positive diagonal
    for _, sh in ipairs { { 6, 4 }, { 4, 6 }, { 8, 2, 3 } } do
      fp8.manual_seed(21)
      local w = I.orthogonal_(fp8.zeros(sh), 1.5)
      local m = w:reshape({ sh[1], -1 })
      local rows, cols = m:size(1), m:size(2)
      local g = rows >= cols and m:t():matmul(m) or m:matmul(m:t())
      assert.is_true((g - fp8.eye(g:size(1)) * 2.25):abs():max():item() < 1e-5)
      fp8.manual_seed(21)
      local A = I.normal({ rows, cols }, 0, 1)
      if rows < cols then A, m = A:t(), m:t() end
      local R = (m / 1.5):t():matmul(A):totable()
      for i = 1, #R do
        assert.is_true(R[i][i] > 0, ("R[%d][%d] = %g"):format(i, i, R[i][i]))
        for j = 1, i - 1 do assert.is_true(math.abs(R[i][j]) < 1e-5, ("R[%d][%d] = %g"):format(i, j, R[i][j])) end
      end
    end
    -- dirac_: torch 2.15's dirac_(zeros(4, 2, 3), groups=2) and dirac_(zeros(3, 3, 3, 3))'s nonzero positions
    assert.are.same({ { 0, 1, 0, 0, 0, 0 }, { 0, 0, 0, 0, 1, 0 }, { 0, 1, 0, 0, 0, 0 }, { 0, 0, 0, 0, 1, 0 } },
      I.dirac_(fp8.zeros { 4, 2, 3 }, 2):reshape({ 4, 6 }):totable())
    assert.are.same({ { 0, 0, 1, 1 }, { 1, 1, 1, 1 }, { 2, 2, 1, 1 } },
      I.dirac_(fp8.ones { 3, 3, 3, 3 }):nonzero():totable())
    -- sparse_: ceil(sparsity·rows) zeros in every column, the rest N(0, std²)
    local s = I.sparse_(fp8.zeros { 40, 30 }, 0.25, 0.5)
    for _, z in ipairs(s:eq(0):sum(1):totable()) do assert.are.equal(10, z) end
    local nz = s:masked_select(s:ne(0))
    assert.is_true(math.abs(nz:std():item() - 0.5) < 0.06)
    U.fails_with("orthogonal_: only tensors with 2 or more dimensions are supported, got [3]", I.orthogonal_,
      fp8.zeros { 3 })
    U.fails_with("dirac_: only 3, 4 or 5-dimensional tensors are supported, got [2, 2]", I.dirac_, fp8.zeros { 2, 2 })
    U.fails_with("dirac_: groups must be a positive integer dividing dim 1 (4), got 3", I.dirac_, fp8.zeros { 4, 2, 3 },
      3)
    U.fails_with("sparse_: sparsity must be a number in [0, 1], got 2", I.sparse_, fp8.zeros { 2, 2 }, 2)
  end)

  it("trunc_normal_: the truncated normal's moments, inside [a, b] (a and b in the tensor's units)", function()
    fp8.manual_seed(3)
    local w = fp8.zeros { 256, 512 }
    I.trunc_normal_(w, 0, 0.02)   -- [-2, 2] is 100 stds out: a plain N(0, 0.02²)
    close(w:std():item(), 0.02, 0.02, "std 0.02")
    I.trunc_normal_(w, { a = -1, b = 1 })   -- N(0, 1) cut at ±1: std sqrt(1 - 2φ(1)/(Φ(1) - Φ(-1))) = 0.53956
    close(w:std():item(), 0.53956, 0.01, "cut at 1")
    assert.is_true(w:min():item() >= -1 and w:max():item() <= 1)
    I.trunc_normal_(w, 0, 1, 3, 4)   -- a tail: mean (φ(3) − φ(4)) / (Φ(4) − Φ(3)) = 3.2606
    close(w:mean():item(), 3.2606, 0.005, "tail [3, 4]")
    assert.is_true(w:min():item() >= 3 and w:max():item() <= 4)
    I.trunc_normal_(w, 1.5, 0)
    assert.are.equal(1.5, w:max():item())
  end)

  it("refuse what torch refuses, by name, at the caller's line", function()
    local w = fp8.zeros { 4, 4 }
    for _, c in ipairs {
      { function() I.xavier_uniform_(fp8.zeros { 3 }) end, "xavier_uniform_: fan in and fan out need a tensor of 2 or more dims, got [3]" },
      { function() I.calculate_gain("foo") end, 'calculate_gain: unsupported nonlinearity "foo"' },
      { function() I.calculate_gain("leaky_relu", "x") end, 'calculate_gain: the negative slope must be a number, got "x"' },
      { function() I.kaiming_uniform_(w, 0, "fan_avg") end, 'kaiming_uniform_: mode must be "fan_in" or "fan_out", got "fan_avg"' },
      { function() I.kaiming_normal_(w, { a = 1, mod = "x" }) end, "kaiming_normal_: unknown option 'mod' (did you mean 'mode'?)" },
      { function() I.kaiming_normal_(w, {}, "fan_in") end, "kaiming_normal_: give a, mode and nonlinearity either in order or in one table" },
      { function() I.eye_(fp8.zeros { 2, 2, 2 }) end, "eye_: only 2-d tensors are supported, got [2, 2, 2]" },
      { function() I.trunc_normal_(w, 0, 1, 2, 1) end, "trunc_normal_: the range [a, b] needs a < b, got a=2, b=1" },
      { function() I.trunc_normal_(w, 0, -1) end, "trunc_normal_: std must be a finite number >= 0, got -1" },
      { function() I.constant_(w) end, "constant_: val must be a finite number, got nil" },
      { function() I.xavier_uniform_(w, 1, 2) end, "xavier_uniform_: takes (tensor [, gain]); got 1 more argument" },
      { function() I.xavier_normal_(3) end, "xavier_normal_: expected a tensor, got number" },
    } do
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.truthy(err:find(c[2], 1, true), err)
      assert.truthy(err:find("^[^:]*nn_spec%.lua:%d+: "), err)   -- the caller's line
    end
  end)
end)

describe("nn.MultiheadAttention (PyTorch 2.x's values and gradients)", function()
  local nn = fp8.nn
  local U = dofile("tests/spec/helpers/util.lua")
  local ref = dofile("tests/data/nn_parity_torch.lua")   -- scripts/gen_nn_parity.py
  local fill = U.fill
  local function same(name, got, want, tol) U.same_values(name, got, want, tol or 2e-6) end
  -- the cases of scripts/gen_nn_parity.py
  local CASES = {
    { "self", { 8, 2 }, { 5, 3, 8 }, nil, nil, {} },
    { "cross", { 8, 4, { batch_first = true } }, { 3, 5, 8 }, { 3, 4, 8 }, { 3, 4, 8 },
      { attn_mask = "causal", key_padding_mask = "pad", average_attn_weights = false } },
    { "kvdim", { 8, 2, { kdim = 6, vdim = 4, bias = false } }, { 5, 2, 8 }, { 3, 2, 6 }, { 3, 2, 4 },
      { need_weights = false } },
    { "unbatched", { 8, 2 }, { 5, 8 }, { 4, 8 }, { 4, 8 }, { key_padding_mask = "pad" } },
    { "biaskv_zero", { 8, 2, { add_bias_kv = true, add_zero_attn = true } }, { 5, 3, 8 }, { 4, 3, 8 }, { 4, 3, 8 },
      { attn_mask = "causal", key_padding_mask = "pad" } },
    { "zero_self", { 8, 4, { add_zero_attn = true, batch_first = true } }, { 3, 5, 8 }, nil, nil,
      { attn_mask = "causal", need_weights = false } },
    { "biaskv_unbatched", { 8, 2, { add_bias_kv = true, bias = false } }, { 5, 8 }, { 4, 8 }, { 4, 8 },
      { key_padding_mask = "pad", average_attn_weights = false } },
  }

  it("matches torch's outputs, weights and the gradients of inputs and parameters (named as torch's)", function()
    for _, c in ipairs(CASES) do
      local name, bf = c[1], c[2][3] and c[2][3].batch_first
      local m = nn.MultiheadAttention(table.unpack(c[2]))
      local named = m:named_parameters()
      table.sort(named, function(a, b) return a[1] < b[1] end)
      for j, np in ipairs(named) do nn.init.copy_(np[2], fill(np[2]:shape(), j, 0.25)) end
      local q = fill(c[3], 11, 1.0):requires_grad(true)
      local k = c[4] and fill(c[4], 12, 1.0):requires_grad(true) or q
      local v = c[5] and fill(c[5], 13, 1.0):requires_grad(true) or q
      local kw = {}
      for key, val in pairs(c[6]) do kw[key] = val end
      local L = bf and c[3][2] or c[3][1]
      local S = bf and (c[4] or c[3])[2] or (c[4] or c[3])[1]
      if kw.attn_mask == "causal" then kw.attn_mask = fp8.full({ L, S }, -math.huge):triu(1) end
      if kw.key_padding_mask == "pad" then
        local row = {}
        for s = 1, S do row[s] = s == S and -math.huge or 0 end
        local kpm = fp8.tensor(row)
        if #c[3] == 3 then
          local Nb = bf and (c[4] or c[3])[1] or (c[4] or c[3])[2]
          kpm = kpm:reshape { 1, S }:expand { Nb, S }
        end
        kw.key_padding_mask = kpm
      end
      local y, w = m(q, k, v, kw)
      local loss = (y * fill(y:shape(), 21, 1.0)):sum()
      if kw.need_weights == false then
        assert.is_nil(w)
        assert.is_nil(ref["mha_" .. name .. "_w"])
      else
        loss = loss + (w * fill(w:shape(), 22, 1.0)):sum()
        same(name .. " weights", w, ref["mha_" .. name .. "_w"])
      end
      loss:backward()
      same(name .. " output", y, ref["mha_" .. name])
      same(name .. " dq", q.grad, ref["mha_" .. name .. "_dq"], 1e-5)
      if k ~= q then same(name .. " dk", k.grad, ref["mha_" .. name .. "_dk"], 1e-5) end
      if v ~= q then same(name .. " dv", v.grad, ref["mha_" .. name .. "_dv"], 1e-5) end
      for _, np in ipairs(named) do
        same(name .. " d" .. np[1], np[2].grad, ref["mha_" .. name .. "_d_" .. np[1]:gsub("%.", "_")], 1e-5)
      end
    end
  end)

  it("is torch's in its parameters, its need_weights=false fast path, dropout, and FP8 conversion", function()
    fp8.manual_seed(1)
    local m = nn.MultiheadAttention(16, 4)
    local keys = m:state_dict_keys()
    table.sort(keys)
    assert.are.same({ "in_proj_bias", "in_proj_weight", "out_proj.bias", "out_proj.weight" }, keys)
    assert.are.equal(0, m.in_proj_bias:abs():max():item())
    assert.are.equal(0, m.out_proj.bias:abs():max():item())
    assert.is_true(m.in_proj_weight:abs():max():item() <= math.sqrt(6 / (16 + 48)))   -- xavier_uniform_
    local x = fp8.randn { 7, 2, 16 }
    local y1, w = m(x, x, x)
    local y2, none = m(x, x, x, { need_weights = false })
    assert.is_nil(none)
    assert.is_true((y1 - y2):abs():max():item() < 1e-5)
    assert.are.same({ 2, 7, 7 }, w:shape())
    assert.is_true((w:sum(-1) - 1):abs():max():item() < 1e-5)
    -- dropout: on in training, off in eval
    local d = nn.MultiheadAttention(16, 4, 0.5)
    local a = d(x, x, x, { need_weights = false })
    local b = d(x, x, x, { need_weights = false })
    assert.is_true((a - b):abs():max():item() > 0)
    d:eval()
    assert.are.same(d(x, x, x):tolist(), d(x, x, x):tolist())
    -- under an FP8 Accelerator the output projection is an FP8Linear
    local model = nn.Sequential(nn.Linear(16, 16))
    model.attn = m
    local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} } }
    model = acc:prepare(model)
    assert.are.equal("FP8Linear", model.attn.out_proj:type_name())
    local y = model.attn(x, x, x)
    assert.are.same({ 7, 2, 16 }, y:shape())
  end)

  it("refuses what it does not take, by name", function()
    local m = nn.MultiheadAttention(8, 2)
    local x = fp8.randn { 5, 3, 8 }
    for _, c in ipairs {
      { function() nn.MultiheadAttention(8, 3) end, "num_heads must be a positive integer dividing embed_dim=8, got 3" },
      { function() nn.MultiheadAttention(8, 2, { add_bias_kv = 1 }) end, "add_bias_kv must be a boolean, got 1" },
      { function() nn.MultiheadAttention(8, 2, { add_zero_attn = "yes" }) end,
        'add_zero_attn must be a boolean, got "yes"' },
      { function() nn.MultiheadAttention(8, 2, { device = "cpu" }) end, "unknown option 'device'" },
      { function() nn.MultiheadAttention(8, 2, { dropout = 2 }) end, "dropout must be a probability in [0, 1], got 2" },
      { function() nn.MultiheadAttention(8, 2, { kdim = 0 }) end, "kdim must be a positive integer, got 0" },
      { function() m(x, x, x, { foo = 1 }) end, "unknown option 'foo'" },
      { function() m(x, x, x, { is_causal = true }) end, "is_causal=true needs attn_mask" },
      { function() m(x, x, x, { attn_mask = fp8.ones { 5, 5 }:triu(1) }) end, "attn_mask holds only 0s and 1s" },
      { function() m(x, x, x, { key_padding_mask = fp8.ones { 3, 5 } }) end,
        "key_padding_mask holds only 0s and 1s" },
      { function() m(x, x, x, { attn_mask = fp8.zeros { 4, 5 } }) end, "attn_mask must be [L, S] = [5, 5]" },
      { function() m(x, x, x, { key_padding_mask = fp8.zeros { 5, 3 } }) end, "key_padding_mask must be [N, S] = [3, 5]" },
      { function() m(x, x, fp8.randn { 4, 3, 8 }) end, "key and value must be [S, N, ...]" },
      { function() m(x, x, fp8.randn { 5, 3, 6 }) end, "expected query [..., 8], key [..., 8] and value [..., 8]" },
      { function() m(fp8.randn { 8 }, x, x) end, "query must be [L, N, E]" },
      { function() m(x, x, 3) end, "expected tensors (query, key, value), got 3 for value" },
      { function() m(x, x, x, fp8.zeros { 3, 5 }) end, "options must be a table" },
    } do
      U.fails_with({ c[2] }, c[1])
    end
  end)
end)

describe("nn.TransformerEncoderLayer and nn.TransformerEncoder (PyTorch 2.x's values and gradients)", function()
  local nn = fp8.nn
  local U = dofile("tests/spec/helpers/util.lua")
  local ref = dofile("tests/data/nn_parity_torch.lua")   -- scripts/gen_nn_parity.py
  local fill = U.fill
  local function same(name, got, want, tol) U.same_values(name, got, want, tol or 1e-5) end
  local CASES = {   -- scripts/gen_nn_parity.py's
    { "post", { dim_feedforward = 16, dropout = 0 }, { 5, 3, 8 }, true, true, 0 },
    { "pre_gelu", { dim_feedforward = 16, dropout = 0, activation = "gelu", batch_first = true, norm_first = true,
      layer_norm_eps = 1e-3 }, { 3, 5, 8 }, false, true, 0 },
    { "enc", { dim_feedforward = 16, dropout = 0 }, { 5, 3, 8 }, true, false, 2 },
  }

  it("matches torch's outputs and gradients, post- and pre-norm, with masks, stacked with a final norm", function()
    for _, c in ipairs(CASES) do
      local name, kw = c[1], c[2]
      local layer = nn.TransformerEncoderLayer(8, 2, kw)
      local named = layer:named_parameters()
      table.sort(named, function(a, b) return a[1] < b[1] end)
      for j, np in ipairs(named) do nn.init.copy_(np[2], fill(np[2]:shape(), j, 0.25)) end
      local m = layer
      if c[6] > 0 then m = nn.TransformerEncoder(layer, c[6], { norm = nn.LayerNorm(8) }) end
      local x = fill(c[3], 11, 1.0):requires_grad(true)
      local S = kw.batch_first and c[3][2] or c[3][1]
      local Nb = kw.batch_first and c[3][1] or c[3][2]
      local fkw = {}
      if c[4] then fkw[c[6] > 0 and "mask" or "src_mask"] = fp8.full({ S, S }, -math.huge):triu(1) end
      if c[5] then
        local row = {}
        for s = 1, S do row[s] = s == S and -math.huge or 0 end
        fkw.src_key_padding_mask = fp8.tensor(row):reshape { 1, S }:expand { Nb, S }
      end
      local y = m(x, fkw)
      local loss = (y * fill(y:shape(), 21, 1.0)):sum()
      loss:backward()
      same(name, y, ref["tel_" .. name])
      same(name .. " dx", x.grad, ref["tel_" .. name .. "_dx"])
      local checked = 0
      for _, np in ipairs(m:named_parameters()) do
        local key = "tel_" .. name .. "_d_" .. np[1]:gsub("%.", "_")
        if ref[key] then same(name .. " d" .. np[1], np[2].grad, ref[key]); checked = checked + 1 end
      end
      assert.are.equal(c[6] > 0 and 6 or 3, checked)
    end
  end)

  it("copies the layer (its weights, not the object), trains under FP8, and refuses what it does not take", function()
    fp8.manual_seed(2)
    local layer = nn.TransformerEncoderLayer(16, 4, { dim_feedforward = 32, batch_first = true })
    local enc = nn.TransformerEncoder(layer, 3)
    assert.are.equal(3, #enc.layers)
    assert.are_not.equal(layer, enc.layers[1])
    assert.are_not.equal(enc.layers[1].linear1.weight, enc.layers[2].linear1.weight)
    assert.are.same(layer.linear1.weight:tolist(), enc.layers[3].linear1.weight:tolist())
    -- bias=false: no bias in the projections, the feed-forward block or the norms (torch's)
    local nb = nn.TransformerEncoderLayer(16, 4, { dim_feedforward = 32, bias = false })
    for _, np in ipairs(nb:named_parameters()) do assert.falsy(np[1]:find("bias"), np[1]) end
    assert.are.equal(6, #nb:parameters())   -- in_proj, out_proj, linear1, linear2 weights; norm1, norm2 weights
    local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} } }
    local head = nn.Linear(16, 16)   -- (dims of 16: FP8 too)
    local model = nn.Sequential(enc, head)
    local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
    model, opt = acc:prepare(model, opt)
    assert.are.equal("FP8Linear", model[1].layers[1].linear1:type_name())
    local x = fp8.randn { 4, 6, 16 }
    local t = fp8.tensor { 0, 1, 2, 3 }
    local first, last
    for step = 1, 30 do
      local logits = model(x):mean(2)
      local loss = fp8.nn.functional.cross_entropy(logits, t)
      if step == 1 then first = loss:item() end
      last = loss:item()
      acc:backward(loss); opt:step(); opt:zero_grad()
    end
    assert.is_true(last < first * 0.5, ("loss %g -> %g"):format(first, last))
    for _, c in ipairs {
      { function() nn.TransformerEncoderLayer(8, 3) end, "nhead must be a positive integer dividing d_model=8, got 3" },
      { function() nn.TransformerEncoderLayer(8, 2, { activation = "tanh" }) end,
        'activation must be "relu", "gelu" or a function, got "tanh"' },
      { function() nn.TransformerEncoderLayer(8, 2, { device = "cpu" }) end, "unknown option 'device'" },
      { function() nn.TransformerEncoder(nn.Linear(8, 8), 2) end, "encoder_layer must be a TransformerEncoderLayer" },
      { function() nn.TransformerEncoder(layer, 0) end, "num_layers must be an integer in 1..4096, got 0" },
      { function() nn.TransformerEncoder(layer, 2, { enable_nested_tensor = true }) end,
        "enable_nested_tensor=true is not supported" },
      { function() nn.TransformerEncoder(layer, 2, { mask_check = false }) end, "mask_check is not supported" },
      { function() layer(fp8.randn { 2, 3, 16 }, { mask = fp8.zeros { 3, 3 } }) end, "unknown option 'mask'" },
      { function() enc(fp8.randn { 2, 3, 16 }, { src_mask = fp8.zeros { 3, 3 } }) end, "unknown option 'src_mask'" },
    } do
      U.fails_with({ c[2] }, c[1])
    end
  end)
end)

describe("nn.TransformerDecoderLayer, nn.TransformerDecoder and nn.Transformer (PyTorch 2.x's values and gradients)",
  function()
  local nn = fp8.nn
  local U = dofile("tests/spec/helpers/util.lua")
  local ref = dofile("tests/data/nn_parity_torch.lua")   -- scripts/gen_nn_parity.py
  local fill = U.fill
  local function same(name, got, want, tol) U.same_values(name, got, want, tol or 1e-5) end
  local CASES = {   -- scripts/gen_nn_parity.py's TDL
    { "post", { dim_feedforward = 16, dropout = 0 }, { 4, 3, 8 }, { 5, 3, 8 }, true, true, false, 0 },
    { "pre_gelu", { dim_feedforward = 16, dropout = 0, activation = "gelu", batch_first = true, norm_first = true,
      layer_norm_eps = 1e-3 }, { 3, 4, 8 }, { 3, 5, 8 }, true, false, true, 0 },
    { "dec", { dim_feedforward = 16, dropout = 0 }, { 4, 3, 8 }, { 5, 3, 8 }, true, true, false, 2 },
    { "full", { dim_feedforward = 16, dropout = 0 }, { 4, 3, 8 }, { 5, 3, 8 }, true, true, true, -1 },
  }
  local function fill_sorted(m)
    local named = m:named_parameters()
    table.sort(named, function(a, b) return a[1] < b[1] end)
    for j, np in ipairs(named) do nn.init.copy_(np[2], fill(np[2]:shape(), j, 0.25)) end
  end
  local function pad_last(Nb, len)
    local row = {}
    for s = 1, len do row[s] = s == len and -math.huge or 0 end
    return fp8.tensor(row):reshape { 1, len }:expand { Nb, len }
  end

  it("match torch's outputs and gradients: post- and pre-norm, masks, a stack with a norm, the whole model", function()
    for _, c in ipairs(CASES) do
      local name, kw, nl = c[1], c[2], c[8]
      local m
      if nl >= 0 then
        local layer = nn.TransformerDecoderLayer(8, 2, kw)
        fill_sorted(layer)
        m = nl == 0 and layer or nn.TransformerDecoder(layer, nl, { norm = nn.LayerNorm(8) })
      else
        local o = { d_model = 8, nhead = 2, num_encoder_layers = 1, num_decoder_layers = 2 }
        for k, v in pairs(kw) do o[k] = v end
        m = nn.Transformer(o)
        fill_sorted(m)
      end
      local tgt = fill(c[3], 11, 1.0):requires_grad(true)
      local mem = fill(c[4], 12, 1.0):requires_grad(true)
      local bf = kw.batch_first
      local T, S, Nb = bf and c[3][2] or c[3][1], bf and c[4][2] or c[4][1], bf and c[3][1] or c[3][2]
      local fkw = {}
      if c[5] then fkw.tgt_mask = nn.Transformer.generate_square_subsequent_mask(T) end
      if c[6] then
        fkw.memory_key_padding_mask = pad_last(Nb, S)
        if nl < 0 then fkw.src_key_padding_mask = pad_last(Nb, S) end
      end
      if c[7] then fkw.tgt_key_padding_mask = pad_last(Nb, T) end
      local y
      if nl < 0 then y = m(mem, tgt, fkw) else y = m(tgt, mem, fkw) end
      assert.are.same(c[3], y:shape())
      local loss = (y * fill(y:shape(), 21, 1.0)):sum()
      loss:backward()
      same(name, y, ref["tdl_" .. name])
      same(name .. " dtgt", tgt.grad, ref["tdl_" .. name .. "_dtgt"])
      same(name .. " dmem", mem.grad, ref["tdl_" .. name .. "_dmem"])
      local checked = 0
      for _, np in ipairs(m:named_parameters()) do
        local key = "tdl_" .. name .. "_d_" .. np[1]:gsub("%.", "_")
        if ref[key] then same(name .. " d" .. np[1], np[2].grad, ref[key]); checked = checked + 1 end
      end
      assert.are.equal(({ [0] = 3, [2] = 6, [-1] = 8 })[nl], checked, name)
    end
  end)

  it("names its parameters as torch's, copies layers, draws Xavier weights, trains under FP8, refuses bad input",
    function()
    fp8.manual_seed(3)
    local m = nn.Transformer { d_model = 16, nhead = 4, num_encoder_layers = 2, num_decoder_layers = 3,
      dim_feedforward = 32, dropout = 0, batch_first = true }
    assert.are.equal(2, #m.encoder.layers)
    assert.are.equal(3, #m.decoder.layers)
    local names = {}
    for _, np in ipairs(m:named_parameters()) do names[np[1]] = np[2] end
    for _, k in ipairs { "encoder.layers.1.self_attn.in_proj_weight", "encoder.norm.weight", "decoder.norm.bias",
      "decoder.layers.2.multihead_attn.out_proj.weight", "decoder.layers.0.norm3.bias" } do
      assert.truthy(names[k], k)
    end
    -- torch's count: 2 encoder layers of 2,224 (in_proj 816, out_proj 272, linear1 544, linear2 528, two norms 64),
    -- 3 decoder layers of 3,344 (two attentions, three norms) and the two final norms of 32
    local count = 0
    for _, p in ipairs(m:parameters()) do count = count + p:numel() end
    assert.are.equal(2 * 2224 + 3 * 3344 + 64, count)
    -- Xavier-uniform redrawn over every matrix: within its bound sqrt(6 / (fan_in + fan_out)), copies differ
    local w = names["decoder.layers.0.linear1.weight"]
    assert.is_true(w:abs():max():item() <= math.sqrt(6 / (16 + 32)) + 1e-7)
    assert.are_not.same(w:tolist(), names["decoder.layers.1.linear1.weight"]:tolist())
    assert.are.same({ 0, -math.huge, -math.huge }, nn.Transformer.generate_square_subsequent_mask(3):tolist()[1])
    -- a copy-task under te: tgt = src shifted, the loss falls
    local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} } }
    local head = nn.Linear(16, 16)
    local model = nn.ModuleList { m, head }
    local opt = fp8.optim.AdamW(model:parameters(), { lr = 3e-3 })
    model, opt = acc:prepare(model, opt)
    assert.are.equal("FP8Linear", m.decoder.layers[1].linear1:type_name())
    local src = fp8.randn { 4, 6, 16 }
    local tgt = fp8.randn { 4, 5, 16 }
    local target = fp8.tensor { 0, 1, 2, 3 }
    local mask = nn.Transformer.generate_square_subsequent_mask(5)
    local first, last
    for step = 1, 30 do
      local logits = head(m(src, tgt, { tgt_mask = mask, tgt_is_causal = true })):mean(2)
      local loss = fp8.nn.functional.cross_entropy(logits, target)
      if step == 1 then first = loss:item() end
      last = loss:item()
      acc:backward(loss); opt:step(); opt:zero_grad()
    end
    assert.is_true(last < first * 0.5, ("loss %g -> %g"):format(first, last))
    -- custom_encoder / custom_decoder take the stacks' places; the layer options reach every layer
    local ce = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0 }), 1)
    local cm = nn.Transformer { d_model = 8, nhead = 2, dim_feedforward = 16, dropout = 0, custom_encoder = ce }
    assert.is_true(rawequal(ce, cm.encoder))
    assert.are.equal(6, #cm.decoder.layers)
    local s8, t8 = fp8.randn { 5, 2, 8 }, fp8.randn { 3, 2, 8 }
    U.same_values("custom_encoder", cm(s8, t8), cm.decoder(t8, ce(s8)):tolist(), 0)
    local nb = nn.Transformer { d_model = 8, nhead = 2, num_encoder_layers = 1, num_decoder_layers = 1,
      dim_feedforward = 16, bias = false, norm_first = true, layer_norm_eps = 1e-3 }
    for _, np in ipairs(nb:named_parameters()) do assert.falsy(np[1]:find("bias"), np[1]) end
    assert.is_true(nb.decoder.layers[1].norm_first and nb.encoder.layers[1].norm_first)
    assert.are.equal(1e-3, nb.decoder.layers[1].norm3.eps)
    local layer = nn.TransformerDecoderLayer(8, 2)
    local x, mem = fp8.randn { 3, 2, 8 }, fp8.randn { 4, 2, 8 }
    for _, c in ipairs {
      { function() nn.TransformerDecoderLayer(8, 3) end, "nhead must be a positive integer dividing d_model=8, got 3" },
      { function() nn.TransformerDecoder(nn.TransformerEncoderLayer(8, 2), 2) end,
        "decoder_layer must be a TransformerDecoderLayer" },
      { function() nn.TransformerDecoder(layer, 2, { norm = 3 }) end, "norm must be a module" },
      { function() nn.Transformer { d_model = 8, nhead = 2, num_decoder_layers = 0 } end,
        "num_decoder_layers must be an integer in 1..4096, got 0" },
      { function() nn.Transformer { d_model = 8, nhead = 2, custom_encoder = "enc" } end,
        "custom_encoder must be a module" },
      { function() nn.Transformer { d_model = 8, nhead = 2, device = "cpu" } end, "unknown option 'device'" },
      { function() nn.Transformer(8, 2, { activation = "tanh" }) end, 'activation must be "relu", "gelu" or a function' },
      { function() layer(x) end, "expected a tensor memory, got nil" },
      { function() layer(x, mem, { tgt_is_causal = 1 }) end, "tgt_is_causal must be a boolean, got 1" },
      { function() layer(x, mem, { src_mask = x }) end, "unknown option 'src_mask'" },
      { function() layer(x, mem, { tgt_is_causal = true }) end, "is_causal=true needs attn_mask" },
      { function() m(fp8.randn { 4, 6, 16 }, fp8.randn { 3, 5, 16 }) end, "the batch number of src and tgt must be equal" },
      { function() m(fp8.randn { 4, 6, 16 }, fp8.randn { 4, 5, 8 }) end,
        "the feature number of src and tgt must be equal to d_model=16" },
      { function() nn.Transformer.generate_square_subsequent_mask(0) end, "sz must be an integer in 1..65536, got 0" },
    } do
      U.fails_with({ c[2] }, c[1])
    end
  end)
end)

describe("softsign, tanhshrink, threshold, prelu, pairwise distance, the embedding and likelihood losses "
  .. "(PyTorch 2.x's values and gradients)", function()
  local nn, F = fp8.nn, fp8.nn.functional
  local U = dofile("tests/spec/helpers/util.lua")
  local ref = dofile("tests/data/nn_parity_torch.lua")   -- scripts/gen_nn_parity.py
  local function same(name, got, want) U.same_values(name, got, want, 2e-6) end
  local X = { { 0.5, -1.25, 2.0, 0.0 }, { -3.0, 0.75, 1.5, -0.5 }, { 1e-3, -2e-3, 4.0, 8.0 } }
  local G = { { 1.0, -1.0, 0.5, 2.0 }, { 0.25, 3.0, -0.5, 1.0 }, { -2.0, 1.0, 1.0, 0.5 } }
  local NAMED = {
    X = X, G = G, X2 = { { 0.25, -0.5, 1.5, 2.0 }, { 1.0, 0.75, -1.5, 0.5 }, { 0.0, -2.0, 3.0, 1.0 } },
    x0 = { 0.5, -1.0, 2.0 }, x1 = { 1.0, -1.5, 2.0 }, Y3 = { 1.0, -1.0, 1.0 },
    SIGNS = { { 1.0, -1.0, 1.0, -1.0 }, { -1.0, -1.0, 1.0, 1.0 }, { 1.0, 1.0, -1.0, -1.0 } },
    VAR = { { 0.5, 1e-9, 2.0, 1.0 }, { 1.0, 0.25, 3.0, 0.5 }, { 2.0, 1.0, 0.1, 4.0 } },
    VAR1 = { { 0.25 }, { 1.0 }, { 0.75 } },
    COUNTS = { { 0.0, 1.0, 3.0, 2.0 }, { 5.0, 0.0, 1.0, 1.0 }, { 2.0, 4.0, 0.0, 7.0 } },
    RATES = { { 0.5, 1.25, 2.0, 0.0 }, { 3.0, 0.75, 1.5, 0.5 }, { 1e-3, 2e-3, 4.0, 8.0 } },
  }
  local PAIR = {   -- scripts/gen_nn_parity.py's PAIR; the option tables take what torch's keywords give
    { "pdist", F.pairwise_distance, { "X", "X2" }, {} },
    { "pdist_p1k", F.pairwise_distance, { "X", "X2" }, { p = 1.0, keepdim = true, eps = 0.0 } },
    { "pdist_inf", F.pairwise_distance, { "X", "X2" }, { p = math.huge } },
    { "pdist_same", F.pairwise_distance, { "X", "X" }, {} },
    { "margin_rank", F.margin_ranking_loss, { "x0", "x1", "Y3" }, { margin = 0.5 } },
    { "margin_rank_sum", F.margin_ranking_loss, { "x0", "x1", "Y3" }, { reduction = "sum" } },
    { "triplet", F.triplet_margin_loss, { "X", "X2", "G" }, {} },
    { "triplet_swap", F.triplet_margin_loss, { "X", "X2", "G" }, { margin = 2.0, p = 1.0, swap = true,
      reduction = "none" } },
    { "cos_emb", F.cosine_embedding_loss, { "X", "X2", "Y3" }, { margin = 0.1, reduction = "none" } },
    { "cos_emb_mean", F.cosine_embedding_loss, { "X", "G", "Y3" }, {} },
    { "hinge", F.hinge_embedding_loss, { "X", "SIGNS" }, { margin = 1.5 } },
    { "hinge_none", F.hinge_embedding_loss, { "X", "SIGNS" }, { reduction = "none" } },
    { "soft_margin", F.soft_margin_loss, { "X", "SIGNS" }, {} },
    { "soft_margin_sum", F.soft_margin_loss, { "X", "SIGNS" }, { reduction = "sum" } },
    { "gauss", F.gaussian_nll_loss, { "X", "X2", "VAR" }, {} },
    { "gauss_full", F.gaussian_nll_loss, { "X", "X2", "VAR1" }, { full = true, eps = 0.5, reduction = "sum" } },
    { "poisson", F.poisson_nll_loss, { "X", "COUNTS" }, {} },
    { "poisson_rate", F.poisson_nll_loss, { "RATES", "COUNTS" }, { log_input = false, full = true,
      reduction = "none" } },
  }

  it("the exponential activations keep their tails' digits, as torch's expm1 and log1p do", function()
    -- (exp(x) - 1 and log(1 + exp(x)) gave softplus(-20) = 0 for torch's 2.06e-9, elu(-1e-5) 0.14% off)
    for _, c in ipairs { { "elu", F.elu }, { "celu", function(t) return F.celu(t, 0.5) end }, { "selu", F.selu },
                         { "softplus", F.softplus }, { "softplus_b2", function(t) return F.softplus(t, 2.0, 3.0) end },
                         { "logsigmoid", F.logsigmoid }, { "mish", F.mish } } do
      -- (TAIL of scripts/gen_nn_parity.py)
      local x = fp8.tensor({ { -1e-5, -1e-3, -0.3, -20.0 }, { -30.0, -87.0, -90.0, -100.0 },
        { 20.0, 30.0, 1e-6, -5.0 } })
      x:requires_grad(true)
      local y = c[2](x)
      local loss = (y * fp8.tensor(G)):sum()
      loss:backward()
      for _, pair in ipairs { { y, ref["tail_" .. c[1]], "" }, { x.grad, ref["tail_" .. c[1] .. "_dx"], " dx" } } do
        local g, w = pair[1]:reshape(-1):totable(), {}
        for _, row in ipairs(pair[2]) do for _, v in ipairs(row) do w[#w + 1] = v end end
        for i = 1, #w do
          -- (below 1e-37, fp32's subnormals: torch's mish takes sigmoid(-90) as 1/(1 + inf) = 0 there)
          assert.is_true(math.abs(g[i] - w[i]) <= 2e-6 * math.abs(w[i]) + 1e-37,
            ("%s%s[%d]: %.9g vs torch's %.9g"):format(c[1], pair[3], i, g[i], w[i]))
        end
      end
    end
  end)

  it("tanh's gradient is 1 - y² as torch rounds it, and a NaN takes elu's positive side, as torch's", function()
    -- torch 2.15: tanhshrink's gradient at ±1e-6 is 0 (tanh² = 1e-12 gone in 1 - (1 - y²)); (1 - y)(1 + y) gave 6e-8
    local x = fp8.tensor({ 1e-6, -1e-6 }):requires_grad(true)
    local l = F.tanhshrink(x):sum()
    l:backward()
    assert.are.same({ 0, 0 }, x.grad:totable())
    -- elu, celu, selu at NaN: torch's backward takes x <= 0 as the exponential side, so a NaN passes the gradient
    for _, c in ipairs { { F.elu, 1 }, { function(t) return F.celu(t, 0.5) end, 1 }, { F.selu, 1.0507009873554805 } } do
      local n = fp8.tensor({ 0 / 0, -1 }):requires_grad(true)
      local y = c[1](n)
      assert.is_true(y:totable()[1] ~= y:totable()[1])
      local ly = y:sum()
      ly:backward()
      assert.is_true(math.abs(n.grad:totable()[1] - c[2]) < 1e-6, tostring(n.grad:totable()[1]))
    end
  end)

  it("NaN and the infinities take torch's branches in the piecewise activations and losses (torch 2.15's)", function()
    -- x = {0.5, -1.5, v, 2, -0.25}, the gradient of the sum; only element 3 (v) is checked. Before 2026-12-02:
    -- threshold and softshrink turned NaN into their constant, hardtanh and relu6 stopped its gradient, the untaken
    -- pieces of hardswish, smooth_l1 and huber made 0·inf = NaN gradients at ±inf, softplus's clamp stopped NaN's.
    local nan, inf = 0 / 0, math.huge
    local Z = fp8.zeros { 5 }
    local none = { reduction = "none" }
    for _, c in ipairs {
      { "threshold", function(t) return F.threshold(t, 0, 5) end, nan, nan, 1 },
      { "softshrink", F.softshrink, nan, nan, 1 },
      { "hardtanh", F.hardtanh, nan, nan, 1 },
      { "relu6", F.relu6, nan, nan, 1 },
      { "hardswish", F.hardswish, nan, nan, 1 },
      { "hardswish", F.hardswish, inf, inf, 1 },
      { "hardswish", F.hardswish, -inf, 0, 0 },   -- (torch's value there is NaN: -inf·0)
      { "softplus", F.softplus, nan, nan, nan },
      { "logsigmoid", F.logsigmoid, nan, nan, nan },
      { "smooth_l1_loss", function(t) return F.smooth_l1_loss(t, Z, none) end, inf, inf, 1 },
      { "smooth_l1_loss", function(t) return F.smooth_l1_loss(t, Z, none) end, -inf, inf, -1 },
      { "huber_loss", function(t) return F.huber_loss(t, Z, none) end, inf, inf, 1 },
      { "huber_loss", function(t) return F.huber_loss(t, Z, none) end, -inf, inf, -1 },
    } do
      local x = fp8.tensor({ 0.5, -1.5, c[3], 2, -0.25 }):requires_grad(true)
      local y = c[2](x)
      y:sum():backward()
      local got, dx = y:totable()[3], x.grad:totable()[3]
      local tag = ("%s(%s)"):format(c[1], tostring(c[3]))
      for _, p in ipairs { { got, c[4], "" }, { dx, c[5], " dx" } } do
        if p[2] ~= p[2] then assert.is_true(p[1] ~= p[1], tag .. p[3] .. ": " .. tostring(p[1]) .. " vs NaN")
        else assert.are.equal(p[2], p[1], tag .. p[3]) end
      end
    end
    -- softshrink within ±lambd is x·0, as torch's: -0.0 for a negative x
    local sz = F.softshrink(fp8.tensor { -0.25, 0.25 }):totable()
    assert.are.same({ -1, 1 }, { 1 / sz[1] > 0 and 1 or -1, 1 / sz[2] > 0 and 1 or -1 })
  end)

  it("the activations match torch's values and gradients (PReLU's weight's too)", function()
    for _, c in ipairs { { "softsign", F.softsign }, { "tanhshrink", F.tanhshrink },
                         { "threshold", function(t) return F.threshold(t, 0.5, -7.0) end } } do
      local x = fp8.tensor(X):requires_grad(true)
      local y = c[2](x)
      local loss = (y * fp8.tensor(G)):sum()
      loss:backward()
      same(c[1], y, ref["act_" .. c[1]])
      same(c[1] .. " dx", x.grad, ref["act_" .. c[1] .. "_dx"])
    end
    for _, c in ipairs { { "prelu1", { 0.25 } }, { "prelu4", { 0.1, -0.5, 2.0, 0.0 } } } do
      local x = fp8.tensor(X):requires_grad(true)
      local w = fp8.tensor(c[2]):requires_grad(true)
      local y = F.prelu(x, w)
      local loss = (y * fp8.tensor(G)):sum()
      loss:backward()
      same(c[1], y, ref["act_" .. c[1]])
      same(c[1] .. " dx", x.grad, ref["act_" .. c[1] .. "_dx"])
      same(c[1] .. " dw", w.grad, ref["act_" .. c[1] .. "_dw"])
    end
    -- the modules: PReLU's learned slope (torch's 0.25 to start), one per channel
    local m = nn.PReLU(4, 0.1)
    U.same_values("PReLU weight", m.weight, { 0.1, 0.1, 0.1, 0.1 }, 1e-7)
    U.same_values("PReLU", m(fp8.tensor(X)), F.prelu(fp8.tensor(X), fp8.full({ 4 }, 0.1)):tolist(), 0)
    assert.are.equal(1, #nn.PReLU():parameters())
    U.same_values("Softsign", nn.Softsign()(fp8.tensor(X)), ref.act_softsign, 2e-6)
    U.same_values("Threshold", nn.Threshold(0.5, -7.0)(fp8.tensor(X)), ref.act_threshold, 0)
    assert.are.same({ 2, 3, 2, 5 }, nn.Unflatten(2, { 3, -1 })(fp8.zeros { 2, 6, 5 }):shape())
  end)

  it("the distance and the losses match torch's values and every input's gradient", function()
    for _, c in ipairs(PAIR) do
      local ts = {}
      for j, n in ipairs(c[3]) do
        ts[j] = fp8.tensor(NAMED[n])
        if n ~= "Y3" and n ~= "SIGNS" and n ~= "COUNTS" then ts[j]:requires_grad(true) end
      end
      ts[#ts + 1] = c[4]
      local y = c[2](table.unpack(ts))
      same(c[1], y, ref["pl_" .. c[1]])
      local w = fp8.arange(y:numel()):reshape(y:shape()) + 1
      local loss = (y * w):sum()
      loss:backward()
      for j = 1, #c[3] do
        local want = ref[("pl_%s_d%d"):format(c[1], j)]
        if want then same(("%s d%d"):format(c[1], j), ts[j].grad, want) end
      end
    end
  end)

  it("the modules take the functions' options, and bad input is refused by name", function()
    local a, b = fp8.tensor(X), fp8.tensor(NAMED.X2)
    U.same_values("PairwiseDistance", nn.PairwiseDistance { p = 1.0, keepdim = true, eps = 0.0 }(a, b),
      ref.pl_pdist_p1k, 2e-6)
    U.same_values("TripletMarginLoss", nn.TripletMarginLoss { margin = 2.0, p = 1.0, swap = true,
      reduction = "none" }(a, b, fp8.tensor(G)), ref.pl_triplet_swap, 2e-6)
    U.same_values("GaussianNLLLoss", nn.GaussianNLLLoss { full = true, eps = 0.5, reduction = "sum" }(a, b,
      fp8.tensor(NAMED.VAR1)), ref.pl_gauss_full, 2e-6)
    U.same_values("PoissonNLLLoss", nn.PoissonNLLLoss()(a, fp8.tensor(NAMED.COUNTS)), ref.pl_poisson, 2e-6)
    -- eps takes effect where torch's formulas read it: inside the triplet's distances, and in log(input + eps)
    local r, c = fp8.tensor(NAMED.RATES), fp8.tensor(NAMED.COUNTS)
    assert.is_true(math.abs(F.poisson_nll_loss(r, c, { log_input = false, eps = 0.5 }):item()
      - F.poisson_nll_loss(r, c, { log_input = false }):item()) > 0.1)
    local g3 = fp8.tensor(G)
    assert.are_not.equal(F.triplet_margin_loss(a, b, g3, { eps = 1.0 }):item(), F.triplet_margin_loss(a, b, g3):item())
    U.same_values("CosineEmbeddingLoss", nn.CosineEmbeddingLoss { margin = 0.1, reduction = "none" }(a, b,
      fp8.tensor(NAMED.Y3)), ref.pl_cos_emb, 2e-6)
    for _, c in ipairs {
      { function() F.threshold(a, 0.5) end, "threshold: takes (input, threshold, value): both numbers are needed" },
      { function() nn.Threshold(0.5) end, "Threshold: value must be a finite number, got nil" },
      { function() F.prelu(a, fp8.ones { 3 }) end, "prelu: weight has 3 elements, the input [3, 4] has 4 channels" },
      { function() nn.PReLU(0) end, "PReLU: num_parameters must be an integer in 1..2^24, got 0" },
      { function() nn.Unflatten(2, 3) end, "Unflatten: unflattened_size must be a list of sizes, got 3" },
      { function() nn.Unflatten(2, { 4, -1 })(fp8.zeros { 2, 6 }) end, "unflatten: dim 2 of size 6 cannot take" },
      { function() F.pairwise_distance(a, b, 0 / 0) end, "pairwise_distance: p must be a number (math.huge and -math.huge included, NaN not), got" },
      { function() F.margin_ranking_loss(a, b, fp8.ones { 3 }) end, "must have the same number of dims" },
      { function() F.triplet_margin_loss(a, b, b, { margin = 0 }) end, "triplet_margin_loss: margin must be positive" },
      { function() F.triplet_margin_loss(a, b, b, { swap = 1 }) end, "triplet_margin_loss: swap must be a boolean" },
      { function() F.cosine_embedding_loss(a, b, fp8.ones { 3, 1 }) end, "the target must be 0-d or 1-d" },
      { function() F.cosine_embedding_loss(a, b, fp8.ones {}) end, "a 0-d target takes 1-d inputs" },
      { function() F.hinge_embedding_loss(a, b, { reduction = "avg" }) end, 'reduction must be "mean", "sum" or "none"' },
      { function() F.gaussian_nll_loss(a, b, -1.0) end, "gaussian_nll_loss: var has negative entry/entries" },
      { function() F.gaussian_nll_loss(a, b, fp8.ones { 3, 2 }) end, "gaussian_nll_loss: var is of incorrect size [3, 2]" },
      { function() F.gaussian_nll_loss(a, b, fp8.ones { 3, 4 }, { full = "yes" }) end, "full must be a boolean" },
      { function() F.poisson_nll_loss(a, b, { eps = -1 }) end, "poisson_nll_loss: eps must be a finite number >= 0" },
      { function() nn.SoftMarginLoss { margin = 1 } end, "unknown option 'margin'" },
    } do
      U.fails_with({ c[2] }, c[1])
    end
  end)
end)

describe("F.binary_cross_entropy / nn.BCELoss and F.cosine_similarity / nn.CosineSimilarity (PyTorch 2.x's values)",
  function()
  local nn, F = fp8.nn, fp8.nn.functional
  local U = dofile("tests/spec/helpers/util.lua")
  local ref = dofile("tests/data/nn_parity_torch.lua")   -- scripts/gen_nn_parity.py
  local X = { { 0.5, -1.25, 2.0, 0.0 }, { -3.0, 0.75, 1.5, -0.5 }, { 1e-3, -2e-3, 4.0, 8.0 } }
  local G = { { 1.0, -1.0, 0.5, 2.0 }, { 0.25, 3.0, -0.5, 1.0 }, { -2.0, 1.0, 1.0, 0.5 } }
  local BX = { { 0.0, 1e-12, 0.3, 0.5 }, { 1.0, 0.999, 0.7, 0.05 } }
  local BY = { { 1.0, 1.0, 0.2, 0.5 }, { 0.0, 1.0, 0.7, 0.0 } }
  local BW = { { 1.0, 2.0, 0.5, 1.0 }, { 3.0, 1.0, 1.0, 0.25 } }
  -- torch's ±inf (the target's gradient where x is 0 or 1) is ±3.4e38 here, divided by the count under "mean": an
  -- infinite reference wants a value of its sign past 1e30; the rest are compared as U.same_values does
  local function same(name, got, want, tol)
    local g, w = got:reshape(-1):totable(), {}
    local function flat(t) if type(t) == "number" then w[#w + 1] = t else for _, v in ipairs(t) do flat(v) end end end
    flat(want)
    assert.are.equal(#w, #g, name)
    for i = 1, #w do
      if math.abs(w[i]) == math.huge then
        assert.is_true(g[i] * w[i] > 0 and math.abs(g[i]) > 1e30, ("%s[%d]: %.9g vs %.9g"):format(name, i, g[i], w[i]))
      else
        assert.is_true(math.abs(g[i] - w[i]) <= (tol or 2e-6) * math.max(1, math.abs(w[i])),
          ("%s[%d]: %.9g vs %.9g"):format(name, i, g[i], w[i]))
      end
    end
  end

  it("binary_cross_entropy: each reduction, a weight, probabilities 0 and 1 (the logs clamped at -100), and torch's "
    .. "gradients of input and target", function()
    for _, red in ipairs { "mean", "sum", "none" } do
      for _, wk in ipairs { false, true } do
        local key = "bcep_" .. red .. (wk and "_w" or "")
        local x = fp8.tensor(BX):requires_grad(true)
        local y = fp8.tensor(BY):requires_grad(true)
        local loss = F.binary_cross_entropy(x, y, { weight = wk and fp8.tensor(BW) or nil, reduction = red })
        same(key, loss, ref[key])
        local s = red == "none" and (loss * fp8.tensor { G[1], G[2] }):sum() or loss
        s:backward()
        same(key .. " dx", x.grad, ref[key .. "_dx"])
        same(key .. " dy", y.grad, ref[key .. "_dy"])
      end
    end
    -- a weight of 0 where x is 0 or 1: finite (0) loss and gradients there, as torch's value (its target gradient
    -- is NaN there: 0·inf)
    local xz = fp8.tensor { 0.0, 1.0, 0.5 }:requires_grad(true)
    local yz = fp8.tensor { 1.0, 0.0, 0.5 }:requires_grad(true)
    local lz = F.binary_cross_entropy(xz, yz, { weight = fp8.tensor { 0.0, 0.0, 1.0 }, reduction = "sum" })
    assert.is_true(math.abs(lz:item() - math.log(2)) < 1e-6)
    lz:backward()
    assert.are.same({ 0, 0 }, { xz.grad:tolist()[1], yz.grad:tolist()[1] })
    -- the module takes the options when made
    local m = nn.BCELoss { reduction = "sum", weight = fp8.tensor(BW) }
    same("BCELoss", m(fp8.tensor(BX), fp8.tensor(BY)), ref.bcep_sum_w)
    for _, c in ipairs {
      { function() F.binary_cross_entropy(fp8.tensor { 1.5 }, fp8.tensor { 1 }) end,
        "binary_cross_entropy: all elements of input should be between 0 and 1" },
      { function() F.binary_cross_entropy(fp8.tensor { 0 / 0 }, fp8.tensor { 1 }) end,
        "binary_cross_entropy: all elements of input should be between 0 and 1" },
      { function() F.binary_cross_entropy(fp8.tensor { 0.5 }, fp8.tensor { 1.5 }) end,
        "binary_cross_entropy: all elements of target should be between 0 and 1" },
      { function() F.binary_cross_entropy(fp8.tensor { 0.5, 0.5 }, fp8.tensor { 1 }) end,
        "binary_cross_entropy: input [2] and target [1] must have the same shape" },
      { function() F.binary_cross_entropy(fp8.tensor { 0.5 }, fp8.tensor { 1 }, { pos_weight = 2 }) end,
        "binary_cross_entropy: unknown option 'pos_weight'" },
      { function() nn.BCELoss { reduction = "avg" } end, 'BCELoss: reduction must be "mean", "sum" or "none", got "avg"' },
    } do
      U.fails_with({ c[2] }, c[1])
    end
  end)

  it("cosine_similarity: along a dim, broadcast, a zero vector (eps), both gradients", function()
    for _, c in ipairs { { "cos_d2", X, G, 2 }, { "cos_d1", X, G, 1 },
                         { "cos_zero", { { 0, 0, 0, 0 }, X[2] }, { G[1], G[2] }, 2 }, { "cos_bcast", { X[1] }, G, 2 } } do
      local a = fp8.tensor(c[2]):requires_grad(true)
      local b = fp8.tensor(c[3]):requires_grad(true)
      local y = F.cosine_similarity(a, b, c[4])
      local wts = {}
      for i = 1, y:numel() do wts[i] = i end
      local loss = (y * fp8.tensor(wts):reshape(y:shape())):sum()
      loss:backward()
      same(c[1], y, ref[c[1]], 1e-6)
      same(c[1] .. " da", a.grad, ref[c[1] .. "_da"], 1e-5)
      same(c[1] .. " db", b.grad, ref[c[1] .. "_db"], 1e-5)
    end
    -- eps: the clamp of a small norm (|x2| = 1e-3 under eps 0.1 divides by 0.1: the cosine 0.01, not 1)
    local small = F.cosine_similarity(fp8.tensor { { 1, 0 } }, fp8.tensor { { 1e-3, 0 } }, 2, 0.1):item()
    assert.is_true(math.abs(small - 0.01) < 1e-6, small)
    assert.is_true(math.abs(F.cosine_similarity(fp8.tensor { { 1, 0 } }, fp8.tensor { { 1e-3, 0 } }):item() - 1) < 1e-6)
    -- the default dim is torch's dim=1, the second; the module takes dim and eps
    assert.are.same(F.cosine_similarity(fp8.tensor(X), fp8.tensor(G)):tolist(),
      nn.CosineSimilarity { dim = 2 }(fp8.tensor(X), fp8.tensor(G)):tolist())
    for _, c in ipairs {
      { function() F.cosine_similarity(fp8.ones { 2, 3 }, fp8.ones { 2, 4 }) end,
        "cosine_similarity: x1 [2, 3] and x2 [2, 4] do not broadcast" },
      { function() F.cosine_similarity(fp8.ones { 2, 3 }, fp8.ones { 2, 3 }, 3) end,
        "cosine_similarity: dim 3 out of range for a 2-d tensor" },
      { function() F.cosine_similarity(fp8.ones { 2 }, fp8.ones { 2 }, 1, -1) end,
        "cosine_similarity: eps must be a finite number >= 0, got -1" },
      { function() nn.CosineSimilarity { dim = 1, epz = 1 } end, "CosineSimilarity: unknown option 'epz'" },
    } do
      U.fails_with({ c[2] }, c[1])
    end
  end)
end)

describe("nn.ParameterList and nn.ParameterDict (torch's parameter containers)", function()
  local nn = fp8.nn
  local U = dofile("tests/spec/helpers/util.lua")

  it("register each tensor as a parameter under torch's names, and train with the model", function()
    fp8.manual_seed(4)
    local M = nn.Module.class("PerHead")
    function M:__init()
      self.scales = nn.ParameterList { fp8.ones { 4 }, fp8.ones { 4 } }
      self.bias = nn.ParameterDict { b = fp8.zeros { 4 } }
    end
    function M:forward(x)
      for _, s in ipairs(self.scales) do x = x * s end
      return x + self.bias.b
    end
    local m = M()
    local keys = m:state_dict_keys()
    table.sort(keys)
    assert.are.same({ "bias.b", "scales.0", "scales.1" }, keys)
    assert.are.equal(3, #m:parameters())
    assert.is_true(m.scales[1]:requires_grad())
    local opt = fp8.optim.SGD(m:parameters(), { lr = 0.1 })
    local x, want = fp8.tensor { { 1, 2, 3, 4 } }, fp8.tensor { { 2, 2, 2, 2 } }
    local first
    for i = 1, 20 do
      local loss = fp8.nn.functional.mse_loss(m(x), want)
      if i == 1 then first = loss:item() end
      opt:zero_grad(); loss:backward(); opt:step()
    end
    assert.is_true(fp8.nn.functional.mse_loss(m(x), want):item() < first / 10)
    -- a state_dict round trip into a fresh model
    local m2 = M()
    m2:load_state_dict(m:state_dict())
    assert.are.same(m(x):tolist(), m2(x):tolist())
  end)

  it("ParameterList: positions, append, extend, replace, #, ipairs; refusals by name", function()
    local l = nn.ParameterList()
    assert.are.equal(0, #l)
    assert.are.equal(l, l:append(fp8.zeros { 3 }))
    l:extend { fp8.ones { 2 }, fp8.ones { 1 } }
    l:extend(nn.ParameterList { fp8.ones { 5 } })
    assert.are.equal(4, #l)
    assert.are.same({ 2 }, l[2]:shape())
    assert.are.same({ 5 }, l[-1]:shape())
    assert.is_nil(l[9])
    l[1] = fp8.full({ 3 }, 7)
    assert.are.same({ 7, 7, 7 }, l[1]:tolist())
    local n = 0
    for i, p in ipairs(l) do n = n + 1; assert.are.equal(l[i], p) end
    assert.are.equal(4, n)
    assert.truthy(tostring(l):find("(3): Parameter containing: [fp32 of size 5]", 1, true))
    local made = fp8.ones { 2 }:requires_grad(true) * 2
    for _, c in ipairs {
      { function() nn.ParameterList { 1 } end, "ParameterList: item 1 must be a tensor, got 1" },
      { function() nn.ParameterList { a = fp8.ones { 1 } } end, "ParameterList: expected a list of tensors {t1, t2, ...}, got a table with the key \"a\"" },
      { function() l:append(made) end, "ParameterList:append: the value was made by MulBackward" },
      { function() l[9] = fp8.ones { 1 } end, "ParameterList: index 9 is out of range (4 parameters; append adds one)" },
      { function() l:extend(nn.Linear(1, 1)) end, "ParameterList:extend: expected a list of tensors, got a Linear" },
      { function() l() end, "ParameterList has no forward" },
    } do
      U.fails_with({ c[2] }, c[1])
    end
  end)

  it("ParameterDict: names sorted or in the pairs' order, update, pop, clear; refusals by name", function()
    local d = nn.ParameterDict { { "z", fp8.ones { 1 } }, { "a", fp8.ones { 2 } } }
    assert.are.same({ "z", "a" }, d:keys())
    d:update { m = fp8.zeros { 3 }, b = fp8.zeros { 4 } }
    assert.are.same({ "z", "a", "b", "m" }, d:keys())
    assert.are.equal(4, #d)
    assert.are.same({ 3 }, d.m:shape())
    assert.are.same({ 2 }, d["a"]:shape())
    assert.are.equal(d.z, d:items()[1][2])
    assert.are.same({ 1 }, d:pop("z"):shape())
    assert.are.same({ "a", "b", "m" }, d:keys())
    for _, c in ipairs {
      { function() d:pop("nope") end, 'ParameterDict:pop: no parameter named "nope"' },
      { function() d:update { keys = fp8.ones { 1 } } end, "ParameterDict:update: 'keys' is a method of ParameterDict" },
      { function() d:update { ["a.b"] = fp8.ones { 1 } } end, "a name must be a non-empty string without '.'" },
      { function() d:update { x = 3 } end, "ParameterDict:update: 'x' must be a tensor, got 3" },
      { function() nn.ParameterDict(5) end, "ParameterDict: expected a table of tensors by name, got 5" },
    } do
      U.fails_with({ c[2] }, c[1])
    end
    d:clear()
    assert.are.equal(0, #d)
  end)
end)

describe("the losses' options, weights, targets and dtypes as torch 2.15 takes them", function()
  local F = fp8.nn.functional
  local X2 = fp8.tensor { { 0.3, -1.2, 2.0 }, { 1.1, 0.2, -0.7 } }

  it("cross_entropy's class probabilities take a negative ignore_index (torch's default -100) and a weight's grad",
    function()
      local P = fp8.tensor { { 0.2, 0.3, 0.5 }, { 1, 0, 0 } }
      -- torch 2.15: 0.9769682 with ignore_index -100 or -1, the same as without (it was refused, the default too)
      for _, ii in ipairs { -100, -1 } do
        assert.is_near(0.9769682, F.cross_entropy(X2, P, { ignore_index = ii }):item(), 1e-6)
        assert.is_near(0.9769682, nn.CrossEntropyLoss { ignore_index = ii }(X2, P):item(), 1e-6)
      end
      -- one >= 0 would name a class: refused, as torch's "ignore_index is not supported for floating point target"
      U.fails_with({ "cross_entropy: ignore_index applies to class-id targets, not to class probabilities, got 0",
        "not supported for floating point target" }, F.cross_entropy, X2, P, { ignore_index = 0 })
      -- the weight is a factor of this form's loss: torch differentiates it (loss and weight.grad torch 2.15's)
      for red, want in pairs { mean = { 1.3701417446136475, { 0.4139019846916199, 0.5384579300880432,
        0.08627495169639587 } }, sum = { 2.740283489227295, { 0.8278039693832397, 1.0769158601760864,
        0.17254990339279175 } } } do
        local w = fp8.tensor({ 0.5, 2.0, 1.0 }):requires_grad(true)
        local l = F.cross_entropy(X2, P, { weight = w, reduction = red, label_smoothing = 0.1 })
        l:backward()
        assert.is_near(want[1], l:item(), 1e-6)
        U.same_values("weight.grad " .. red, w.grad, want[2], 1e-5)
      end
    end)

  it("reduction=false and ignore_index=false are refused, not taken as the defaults", function()
    local T = fp8.tensor { 0, 1 }
    for _, c in ipairs {
      { function() return F.cross_entropy(X2, T, { reduction = false }) end, "cross_entropy: reduction must be" },
      { function() return F.nll_loss(X2, T, { reduction = false }) end, "nll_loss: reduction must be" },
      { function() return F.mse_loss(X2, X2, { reduction = false }) end, "mse_loss: reduction must be" },
      { function() return F.cross_entropy(X2, T, { ignore_index = false }) end,
        "cross_entropy: ignore_index must be an integer, got false" },
      { function() return F.cross_entropy(X2, T, { ignore_index = false, reduction = "sum" }) end,
        "cross_entropy: ignore_index must be an integer, got false" },
      { function() return F.nll_loss(X2, T, { ignore_index = false }) end,
        "nll_loss: ignore_index must be an integer, got false" },
      { function() return F.cross_entropy(X2, T, { ignore_index = math.huge, reduction = "none" }) end,
        "cross_entropy: ignore_index must be an integer, got inf" },
      -- the modules refuse it when made, as they refuse a bad reduction
      { function() return nn.CrossEntropyLoss { ignore_index = false } end,
        "CrossEntropyLoss: ignore_index must be an integer, got false" },
      { function() return nn.NLLLoss { ignore_index = 1.5 } end, "NLLLoss: ignore_index must be an integer, got 1.5" },
      -- the other options defaulted with `or` (false took the default)
      { function() return F.cross_entropy(X2, T, { label_smoothing = false, reduction = "sum" }) end,
        "cross_entropy: label_smoothing must be a number in [0, 1], got false" },
      { function() return F.multi_margin_loss(X2, T, { p = false }) end,
        "multi_margin_loss: p must be 1 or 2 (torch's), got false" },
      { function() return F.triplet_margin_loss(X2, X2, X2, { p = false }) end,
        "triplet_margin_loss: p must be a number (math.huge and -math.huge included, NaN not), got false" },
      { function() return F.triplet_margin_loss(X2, X2, X2, { eps = false }) end,
        "triplet_margin_loss: eps must be a finite number, got false" },
      { function() return F.pairwise_distance(X2, X2, false) end, "pairwise_distance: p must be a number (math.huge and -math.huge included, NaN not), got false" },
    } do
      U.fails_with({ c[2] }, c[1])
    end
    assert.is_near(F.cross_entropy(X2, T):item(), F.cross_entropy(X2, T, { ignore_index = 5.0 }):item(), 0)
  end)

  it("a weight, pos_weight or soft_margin_loss's target broadcasts to the input's shape, or is refused by name",
    function()
      local x, y = fp8.tensor { 0.5, 0.2, 0.3 }, fp8.tensor { 0, 1, 0 }
      for _, c in ipairs {
        -- larger than the input: torch's "output with shape [3] doesn't match the broadcast shape [2, 3]" (the loss
        -- grew to [2, 3], its mean over 6 elements)
        { function() return F.binary_cross_entropy(x, y, { weight = fp8.tensor { { 1, 1, 1 }, { 0, 0, 0 } } }) end,
          "binary_cross_entropy: weight [2, 3] must broadcast to the input [3]" },
        { function() return F.binary_cross_entropy_with_logits(x, y, { pos_weight = fp8.ones { 2, 3 } }) end,
          "binary_cross_entropy_with_logits: pos_weight [2, 3] must broadcast to the input [3]" },
        { function() return F.binary_cross_entropy_with_logits(x, y, { weight = fp8.ones { 1, 3 } }) end,
          "binary_cross_entropy_with_logits: weight [1, 3] must broadcast to the input [3]" },
        { function()
            return F.soft_margin_loss(x, fp8.tensor { { 1, 1, 1 }, { -1, -1, -1 } }, { reduction = "none" })
          end, "soft_margin_loss: target [2, 3] must broadcast to the input [3]" },
        -- not broadcasting at all: named (it was "lua/fp8/nn/functional.lua:635: mul: shapes ...")
        { function() return F.binary_cross_entropy(x, y, { weight = fp8.ones { 2 } }) end,
          "binary_cross_entropy: weight [2] must broadcast to the input [3]" },
        { function() return F.binary_cross_entropy_with_logits(x, y, { pos_weight = fp8.ones { 2 } }) end,
          "binary_cross_entropy_with_logits: pos_weight [2] must broadcast to the input [3]" },
        { function() return F.soft_margin_loss(x, fp8.ones { 2 }) end,
          "soft_margin_loss: target [2] must broadcast to the input [3]" },
      } do
        local err = U.fails_with({ c[2] }, c[1])
        assert.is_nil(err:find("lua/fp8/", 1, true), err)
      end
      -- smaller ones broadcast, as torch's (torch 2.15's values)
      local x2 = fp8.tensor { { 0.5, 0.2, 0.3 }, { 0.5, 0.2, 0.3 } }
      U.same_values("bce weight [3]", F.binary_cross_entropy(x2, fp8.tensor { { 0, 1, 0 }, { 0, 1, 0 } },
        { weight = fp8.tensor { 1, 2, 3 }, reduction = "none" }), { { 0.6931, 3.2189, 1.0700 },
        { 0.6931, 3.2189, 1.0700 } }, 1e-4)
      U.same_values("soft_margin target [3]", F.soft_margin_loss(x2, fp8.tensor { 1, 1, -1 }, { reduction = "none" }),
        { { 0.4741, 0.5981, 0.8544 }, { 0.4741, 0.5981, 0.8544 } }, 1e-4)
      U.same_values("soft_margin 0-d target", F.soft_margin_loss(x, fp8.tensor(1), { reduction = "none" }),
        { 0.4741, 0.5981, 0.5544 }, 1e-4)
    end)

  it("a weight torch takes no gradient for is refused when it requires grad (grad mode on), as torch 2.15's", function()
    local rg = function(t) return t:clone():requires_grad(true) end
    local P, Y = fp8.tensor { 0.5, 0.2, 0.3 }, fp8.tensor { 0, 1, 0 }
    local cases = {
      { "cross_entropy", "weight", function() return F.cross_entropy(X2, fp8.tensor { 0, 1 },
        { weight = rg(fp8.ones { 3 }) }) end },
      { "cross_entropy", "weight", function() return F.cross_entropy(X2, fp8.tensor { 0, 1 },
        { weight = rg(fp8.ones { 3 }), reduction = "none" }) end },
      { "nll_loss", "weight", function()
        return F.nll_loss(X2, fp8.tensor { 0, 1 }, { weight = rg(fp8.ones { 3 }) }) end },
      { "binary_cross_entropy", "weight", function() return F.binary_cross_entropy(P, Y, { weight = rg(P) }) end },
      { "binary_cross_entropy_with_logits", "weight", function()
        return F.binary_cross_entropy_with_logits(P, Y, { weight = rg(P) }) end },
      { "binary_cross_entropy_with_logits", "pos_weight", function()
        return F.binary_cross_entropy_with_logits(P, Y, { pos_weight = rg(fp8.ones { 3 }) }) end },
      { "multi_margin_loss", "weight", function()
        return F.multi_margin_loss(X2, fp8.tensor { 0, 1 }, { weight = rg(fp8.ones { 3 }) }) end },
      { "soft_margin_loss", "target", function() return F.soft_margin_loss(P, rg(fp8.tensor { 1, -1, 1 })) end },
    }
    for _, c in ipairs(cases) do
      -- torch: "The function '...' is not differentiable with respect to argument 'weight'"
      U.fails_with(("%s: %s requires grad, but the loss is not differentiable with respect to it"):format(c[1], c[2]),
        c[3])
      -- under no_grad there is no graph to drop it from: taken, as torch's
      assert.is_true(fp8.is_tensor(fp8.no_grad(c[3])), c[1])
    end
    -- the others torch differentiates: multilabel_soft_margin_loss's weight, the targets of the elementwise losses
    local w = rg(fp8.ones { 3 })
    F.multilabel_soft_margin_loss(X2, fp8.tensor { { 0, 1, 1 }, { 1, 0, 0 } }, { weight = w }):backward()
    assert.is_not_nil(w.grad)
    local t = rg(Y)
    F.binary_cross_entropy(P, t):backward()
    assert.is_not_nil(t.grad)
  end)

  it("multilabel_margin_loss checks every target entry, those after the first -1 too (torch's 'out of range')",
    function()
      local x = fp8.tensor { { 0.3, -1.2, 2.0, 0.5 }, { 1.1, 0.2, -0.7, 0 }, { -0.4, 0.9, 0.1, 1.5 } }
      U.fails_with("multilabel_margin_loss: target 9 is not a class index in 0..3 or -1", F.multilabel_margin_loss, x,
        fp8.tensor { { 1, -1, 9, 0 }, { 0, 0, 0, 0 }, { -1, 2, 1, 0 } }, { reduction = "none" })
      U.fails_with("multilabel_margin_loss: target -2 is not a class index in 0..3 or -1", F.multilabel_margin_loss,
        x[1], fp8.tensor { 1, -1, -2, 0 })
      -- -1 after the first is taken, as torch's (2.35 for the first row)
      U.same_values("mlm", F.multilabel_margin_loss(x[1], fp8.tensor { 1, -1, -1, 3 }, { reduction = "none" }),
        { 2.35 }, 1e-6)
    end)

  it("shape, p and class-id problems are named by the loss, in the same words under every reduction", function()
    for _, c in ipairs {
      -- (they named an inner op and its position: "lua/fp8/nn/embedding_losses.lua:24: sub: shapes ...")
      { function() return F.margin_ranking_loss(fp8.tensor { 1, 2, 3 }, fp8.tensor { 1, 2 }, fp8.tensor { 1, -1, 1 })
        end, "margin_ranking_loss: input1 [3], input2 [2] and target [3] do not broadcast" },
      { function() return F.triplet_margin_loss(fp8.ones { 2, 3 }, fp8.ones { 2, 4 }, fp8.ones { 2, 3 }) end,
        "triplet_margin_loss: anchor [2, 3], positive [2, 4] and negative [2, 3] do not broadcast" },
      { function() return F.triplet_margin_loss(fp8.ones { 1, 3 }, fp8.ones { 2, 3 }, fp8.ones { 5, 3 }) end,
        "triplet_margin_loss: anchor [1, 3], positive [2, 3] and negative [5, 3] do not broadcast" },
      { function() return F.triplet_margin_loss(fp8.ones { 2, 3 }, fp8.ones { 2, 3 }, fp8.ones { 2, 3 }, { p = 0 / 0 })
        end, "triplet_margin_loss: p must be a number (math.huge and -math.huge included, NaN not), got" },
      { function() return nn.TripletMarginLoss { p = "2" }(fp8.ones { 2, 3 }, fp8.ones { 2, 3 }, fp8.ones { 2, 3 })
        end, "triplet_margin_loss: p must be a number (math.huge" },
    } do
      local err = U.fails_with({ c[2] }, c[1])
      assert.is_nil(err:find("lua/fp8/", 1, true), err)
    end
    -- broadcasting as torch's: anchor [2, 3] against a positive [1, 3] (torch 2.15: [1, 1] with ones everywhere)
    U.same_values("triplet bcast", F.triplet_margin_loss(fp8.ones { 2, 3 }, fp8.ones { 1, 3 }, fp8.ones { 2, 3 },
      { reduction = "none" }), { 1, 1 }, 0)
    U.same_values("margin_ranking bcast", F.margin_ranking_loss(fp8.tensor { 1, 2, 3 }, fp8.tensor { 1 },
      fp8.tensor { 1, -1, 1 }, { reduction = "none" }), { 0, 1, 0 }, 0)
    -- 0-d inputs: a distance of one coordinate, as torch's (it refused them in pairwise_distance's words)
    assert.are.equal(0, F.triplet_margin_loss(fp8.tensor(1), fp8.tensor(2), fp8.tensor(3)):item())
    -- a fractional class id: "not a whole number" under each reduction (sum and none said "out of range")
    for _, red in ipairs { "mean", "sum", "none" } do
      U.fails_with("cross_entropy: target 1.5 at row 0 is not a whole number (class indices are integers)",
        F.cross_entropy, X2, fp8.tensor { 1.5, 0 }, { reduction = red })
      U.fails_with("cross_entropy: target 1.5 at row 0 is not a whole number (class indices are integers)",
        F.cross_entropy, X2, fp8.tensor { 1.5, 0 }, { reduction = red, weight = fp8.ones { 3 } })
      U.fails_with("nll_loss: target 1.5 at row 0 is not a whole number (class indices are integers)",
        F.nll_loss, X2, fp8.tensor { 1.5, 0 }, { reduction = red })
      U.fails_with("cross_entropy: target 3 at row 1 is out of range [0, 3)", F.cross_entropy, X2, fp8.tensor { 0, 3 },
        { reduction = red })
    end
  end)

  it("under bf16 autocast the losses on torch's CPU fp32 list compute in fp32 and return fp32 (torch 2.15's values)",
    function()
      local b = "bf16"
      local X = fp8.tensor { { 0.5, -1.25, 2.0, 0.25 }, { 1.5, 0.125, -0.75, 0.0 }, { -0.5, 1.0, 0.375, 2.5 } }
      local T = fp8.tensor { { 0.25, 0.5, 1.0, 0.0 }, { 1.0, 0.0, 0.5, 0.75 }, { 0.0, 0.25, 0.125, 1.0 } }
      local P = fp8.tensor { { 0.25, 0.5, 0.625, 0.125 }, { 0.875, 0.25, 0.5, 0.75 }, { 0.375, 0.25, 0.125, 1.0 } }
      local S = fp8.tensor { { 1, -1, 1, -1 }, { -1, -1, 1, 1 }, { 1, 1, -1, -1 } }
      local Y3 = fp8.tensor { 1, -1, 1 }
      local C3 = fp8.tensor { 3, 0, 2 }
      local function lo(t) return t:to(b) end
      -- name, the call (on bf16 tensors), torch's value under torch.autocast("cpu", dtype=torch.bfloat16) and its
      -- dtype; torch's value outside autocast (nil: torch has no bf16 CPU kernel) and fp8lab's dtype there
      local cases = {
        { "l1_loss", function() return F.l1_loss(lo(X), lo(T)) end, 0.739583313, "fp32", 0.73828125, b },
        { "mse_loss", function() return F.mse_loss(lo(X), lo(T), { reduction = "sum" }) end, 9.703125, "fp32",
          9.6875, b },
        { "huber_loss", function() return F.huber_loss(lo(X), lo(T), { delta = 0.5 }) end, 0.258463532, "fp32",
          0.2578125, b },
        { "smooth_l1_loss", function() return F.smooth_l1_loss(lo(X), lo(T), { beta = 0.5 }) end, 0.516927063, "fp32",
          0.515625, b },
        { "kl_div", function() return F.kl_div(lo(X), lo(T), { reduction = "batchmean" }) end, -2.42795396, "fp32",
          -2.421875, b },
        { "poisson_nll_loss", function() return F.poisson_nll_loss(lo(X), lo(T)) end, 2.4363277, "fp32", 2.4375, b },
        { "binary_cross_entropy", function() return F.binary_cross_entropy(lo(P), lo(T)) end, 0.412068486, "fp32",
          0.412109375, b },
        { "binary_cross_entropy_with_logits", function() return F.binary_cross_entropy_with_logits(lo(X), lo(T),
          { pos_weight = lo(fp8.tensor { 2, 1, 0.5, 1 }) }) end, 0.624994695, "fp32", 0.625, "fp32" },
        { "cosine_embedding_loss", function() return F.cosine_embedding_loss(lo(X), lo(T), lo(Y3)) end, 0.327410996,
          "fp32", 0.328125, b },
        { "hinge_embedding_loss", function() return F.hinge_embedding_loss(lo(X), lo(S)) end, 0.5625, "fp32", 0.5625,
          b },
        { "margin_ranking_loss", function() return F.margin_ranking_loss(lo(X[1]), lo(T[1]), lo(S[1]),
          { margin = 0.5 }) end, 0.25, "fp32", 0.25, b },
        { "soft_margin_loss", function() return F.soft_margin_loss(lo(X), lo(S)) end, 0.894354641, "fp32", 0.89453125,
          b },
        { "triplet_margin_loss", function() return F.triplet_margin_loss(lo(X), lo(T), lo(P)) end, 0.872730911, "fp32",
          0.87109375, b },
        { "multilabel_margin_loss", function() return F.multilabel_margin_loss(lo(X), fp8.tensor { { 3, 0, -1, 1 },
          { 1, -1, 0, 0 }, { 2, 1, 0, 3 } }) end, 0.71875, "fp32", nil, b },
        { "multi_margin_loss", function() return F.multi_margin_loss(lo(X), C3,
          { weight = lo(fp8.tensor { 0.5, 1, 2, 1.5 }) }) end, 1.3125, "fp32", nil, b },
        { "nll_loss", function() return F.nll_loss(lo(X), C3) end, -0.708333313, "fp32", -0.70703125, b },
        { "cross_entropy", function() return F.cross_entropy(lo(X), C3, { reduction = "sum" }) end, 5.02592134, "fp32",
          5, "fp32" },
        -- torch's Python losses, of ops its autocast leaves alone: the input's dtype
        { "gaussian_nll_loss", function() return F.gaussian_nll_loss(lo(X), lo(T), lo(P)) end, 0.283203125, b,
          0.283203125, b },
        { "multilabel_soft_margin_loss", function() return F.multilabel_soft_margin_loss(lo(X), lo(T)) end, 0.62890625,
          b, 0.62890625, b },
      }
      for _, c in ipairs(cases) do
        local r = fp8.amp.autocast(b, c[2])
        assert.are.equal(c[4], r:dtype(), c[1] .. " under autocast")
        assert.is_near(c[3], r:item(), c[4] == "fp32" and 2e-6 * math.max(1, math.abs(c[3])) or 1e-2, c[1])
        -- outside autocast: the input's dtype, as torch's (cross_entropy's and the logits' BCE stay fp32)
        local o = c[2]()
        assert.are.equal(c[6], o:dtype(), c[1] .. " outside autocast")
        if c[5] then assert.is_near(c[5], o:item(), 1e-2 * math.max(1, math.abs(c[5])), c[1] .. " outside") end
      end
      -- fp16 autocast too, and the gradient reaches the bf16 leaf
      local x = lo(X):requires_grad(true)
      local l = fp8.amp.autocast("fp16", function() return F.smooth_l1_loss(x, lo(T), { beta = 0.5 }) end)
      assert.are.equal("fp32", l:dtype())
      l:backward()
      assert.is_not_nil(x.grad)
    end)
end)
