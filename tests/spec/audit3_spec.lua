-- Gaps found by the fourth round of hand audits (docs/robustness.md, "Audited by hand, fourth round"): bf16/fp16
-- operands rounded at every step where torch computes in fp32 and rounds once (mixed-dtype pointwise ops, the norms,
-- convolutions, linear, addmm), and the norms' result dtype.
local fp8 = fp8 or require "fp8"
local F = fp8.nn.functional

local function bf(t) return fp8.tensor(t):to("bf16") end
local function f32(v) return (string.unpack("f", string.pack("f", v))) end   -- v rounded to fp32

describe("mixed-dtype pointwise ops", function()
  it("widen the low operands before computing, so an fp32 result is not of bf16 precision", function()
    local a = bf { 1.0078125 }
    local r = fp8.tensor { 0.0 }:addcmul(a, a)
    assert.are.equal("fp32", r:dtype())
    assert.are.equal(1.0078125 ^ 2, r:item())                       -- exact in fp32; was 1.015625 (bf16's)
    assert.are.equal(f32(1.0078125 / 7), fp8.tensor { 0.0 }:addcdiv(a, bf { 7 }):item())
    local x = fp8.tensor { 1 }:to("fp16"):xlogy(bf { 3 })          -- fp16 beside bf16: fp32, as torch's
    assert.are.equal("fp32", x:dtype())
    assert.are.equal(f32(math.log(3)), x:item())
    -- all one low dtype: computed in fp32, rounded once to it (as before)
    assert.are.equal("bf16", bf { 1 }:addcmul(a, a):dtype())
  end)
end)

describe("the norms of a bf16/fp16 input", function()
  it("compute in fp32 and round once to the input's dtype, fp32 weights or not (torch's)", function()
    local x = bf { { { 1.5, -0.75, 2.25, 0.125 } } }
    local g = F.group_norm(x, 1, fp8.ones { 1 }, fp8.zeros { 1 })
    assert.are.equal("bf16", g:dtype())
    assert.are.equal(1.2578125, g[1][1][3])                 -- torch's; op by op in bf16 gave 1.265625
    assert.are.equal("bf16", F.group_norm(x, 1):dtype())
    local y = fp8.randn { 2, 4, 5 }:to("bf16")
    assert.are.equal("bf16", F.batch_norm(y, fp8.zeros { 4 }, fp8.ones { 4 }, fp8.ones { 4 }, fp8.zeros { 4 }, false):dtype())
    assert.are.equal("bf16", F.instance_norm(y, nil, nil, fp8.ones { 4 }, fp8.zeros { 4 }):dtype())
    assert.are.equal("bf16", F.rms_norm(y, { 5 }, fp8.ones { 5 }):dtype())
    assert.are.equal("fp16", F.group_norm(y:to("fp16"), 2, fp8.ones { 4 }, fp8.zeros { 4 }):dtype())
    -- the value: the fp32 computation rounded once
    local ref = F.group_norm(y:to("fp32"), 2, fp8.ones { 4 }, fp8.zeros { 4 }):to("bf16")
    assert.are.equal(1, F.group_norm(y, 2, fp8.ones { 4 }, fp8.zeros { 4 }):eq(ref):all():item())
    local rref = F.rms_norm(y:to("fp32"), { 5 }, fp8.ones { 5 }):to("bf16")
    assert.are.equal(1, F.rms_norm(y, { 5 }, fp8.ones { 5 }):eq(rref):all():item())
    -- training batch_norm updates bf16 running statistics in their dtype
    local rm, rv = fp8.zeros { 4 }:to("bf16"), fp8.ones { 4 }:to("bf16")
    assert.are.equal("bf16", F.batch_norm(y, rm, rv, nil, nil, true):dtype())
    assert.are.equal("bf16", rm:dtype())
    assert.are.equal(1, rm:ne(0):any():item())
  end)
end)

describe("bf16 GEMMs with a bias", function()
  it("add the bias to the fp32 sums and round once (conv, linear, addmm, conv_transpose)", function()
    local x, w, b = bf { { { 1.015625, 1.015625 } } }, bf { { { 1.0078125, 1.0078125 } } }, bf { -2 }
    -- exact: 2·1.015625·1.0078125 − 2 = 0.047119140625; the product rounded first gave 0.046875
    local c = F.conv1d(x, w, b)
    assert.are.equal("bf16", c:dtype())
    assert.are.equal(0.047119140625, c:item())
    local l = F.linear(bf { { 1.015625, 1.015625 } }, bf { { 1.0078125, 1.0078125 } }, b)
    assert.are.equal("bf16", l:dtype())
    assert.are.equal(0.047119140625, l:item())
    local m = bf { { -2 } }:addmm(bf { { 1.015625, 1.015625 } }, bf { { 1.0078125 }, { 1.0078125 } })
    assert.are.equal(0.047119140625, m:item())
    fp8.manual_seed(5)
    local tx, tw, tb = fp8.randn { 1, 4, 9 }:to("bf16"), fp8.randn { 4, 3, 5 }:to("bf16"), fp8.randn { 3 }:to("bf16")
    local ct = F.conv_transpose1d(tx, tw, tb, { stride = 2 })
    local ref = F.conv_transpose1d(tx:to("fp32"), tw:to("fp32"), tb:to("fp32"), { stride = 2 }):to("bf16")
    assert.are.equal("bf16", ct:dtype())
    assert.are.equal(1, ct:eq(ref):all():item())
  end)
end)

describe("context handles and checkpoint's torch options", function()
  it("close an autocast or accumulate handle with :close(), once", function()
    local acc = fp8.Accelerator { mixed_precision = "bf16", config = false }
    local before = fp8.autocast_dtype()
    local h = acc:autocast()
    assert.are.equal("bf16", fp8.autocast_dtype())
    h:close()
    assert.are.equal(before, fp8.autocast_dtype())
    h:close()                                                   -- a second close does nothing
    assert.are.equal(before, fp8.autocast_dtype())
    acc:accumulate():close()
  end)

  it("take the options that name what checkpoint does, refuse the others, never pass them to fn", function()
    local ck = fp8.utils.checkpoint
    local x = fp8.randn { 3 }:requires_grad_()
    local y = ck.checkpoint(function(a, ...)
      assert.are.equal(0, select("#", ...))
      return a * 2
    end, x, { use_reentrant = true, preserve_rng_state = true, determinism_check = "default", debug = false })
    y:sum():backward()
    assert.are.equal(2, x.grad[1])
    local id = function(a) return a end
    for _, o in ipairs { { use_reentrant = false }, { preserve_rng_state = false }, { determinism_check = "none" },
                         { debug = true } } do
      local k = next(o)
      local ok, err = pcall(ck.checkpoint, id, x, o)
      assert.is_false(ok)
      assert.truthy(err:find(k .. "=", 1, true) and err:find("not supported", 1, true), err)
    end
    local ok, err = pcall(ck.checkpoint, id, x, { context_fn = id })
    assert.is_false(ok); assert.truthy(err:find("context_fn is not supported", 1, true), err)
    ok, err = pcall(ck.checkpoint, id, x, { use_reentrant = true, foo = 1 })
    assert.is_false(ok); assert.truthy(err:find("unknown option 'foo'", 1, true), err)
    -- a table without those names is fn's argument, as before
    assert.are.equal(6, ck.checkpoint(function(a, t) return a * t.k end, fp8.ones { 2 }, { k = 3 }):sum():item())
    local seq = fp8.nn.Sequential(fp8.nn.Linear(3, 3), fp8.nn.Linear(3, 3))
    assert.are.equal("[2, 3]", ck.checkpoint_sequential(seq, 2, fp8.randn { 2, 3 }:requires_grad_(),
      { use_reentrant = true }):shape_str())
    ok, err = pcall(ck.checkpoint_sequential, seq, 2, fp8.randn { 2, 3 }, { use_reentrant = false })
    assert.is_false(ok); assert.truthy(err:find("use_reentrant=false", 1, true), err)
  end)
end)

describe("torch's CPU autocast fp32 list and bf16 weights", function()
  it("prod, trace, quantile, cdist, local_response_norm and reflect/replicate pad give fp32 under autocast", function()
    local a, b = fp8.randn { 3, 4 }:to("bf16"), fp8.randn { 5, 4 }:to("bf16")
    local x = fp8.randn { 1, 4, 5, 5 }:to("bf16")
    local got = fp8.amp.autocast("bf16", function()
      return { fp8.cdist(a, b):dtype(), a:quantile(0.3):dtype(), F.local_response_norm(x, 2):dtype(),
               a:prod():dtype(), a:narrow(2, 1, 3):trace():dtype(), F.pad(x, { 1, 1, 1, 1 }, { mode = "reflect" }):dtype(),
               F.pad(x, { 1, 1, 1, 1 }, { mode = "replicate" }):dtype(),
               F.pad(x, { 1, 1, 1, 1 }, { mode = "circular" }):dtype(), F.pad(x, { 1, 1 }):dtype() }
    end)
    assert.are.same({ "fp32", "fp32", "fp32", "fp32", "fp32", "fp32", "fp32", "bf16", "bf16" }, got)
    -- outside autocast: the input's dtype
    assert.are.equal("bf16", a:prod():dtype())
    assert.are.equal("bf16", fp8.cdist(a, b):dtype())
  end)

  it("embedding_bag of a bf16 weight in every mode, and nll_loss with bf16 class weights, keep bf16", function()
    local w = fp8.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }):to("bf16")
    local i, o = fp8.tensor { 0, 1, 2 }, fp8.tensor { 0, 1 }
    local want = { mean = { 4, 5 }, sum = { 8, 10 }, max = { 5, 6 } }
    for mode, row in pairs(want) do
      local r = F.embedding_bag(i, w, o, { mode = mode })            -- "mean" and "sum" failed in index_add
      assert.are.equal("bf16", r:dtype())
      assert.are.same(row, r[2]:to("fp32"):tolist())
    end
    local s = F.embedding_bag(i, w, o, { mode = "sum", per_sample_weights = fp8.tensor({ 1, 2, 3 }):to("bf16") })
    assert.are.same({ 21, 26 }, s[2]:to("fp32"):tolist())
    local lp = fp8.randn { 2, 3 }:log_softmax(2):to("bf16")
    for _, red in ipairs { "mean", "sum", "none" } do
      local l = F.nll_loss(lp, fp8.tensor { 2, 0 }, { weight = fp8.tensor({ 1, 2, 3 }):to("bf16"), reduction = red })
      assert.are.equal("bf16", l:dtype())
    end
  end)

  it("logspace takes dtype= and device= as the other factories", function()
    local t = fp8.logspace(0, 1, 5, { dtype = "bf16" })
    assert.are.equal("bf16", t:dtype())
    assert.are.equal(1.78125, t[2])                                 -- torch's bf16 value
    local ok, err = pcall(fp8.logspace, 0, 1, 5, { dtype = "int8" })
    assert.is_false(ok); assert.truthy(err:find("logspace: unknown dtype 'int8'", 1, true), err)
  end)
end)

describe("bf16 through embedding, dropout and attention", function()
  it("keep the input's dtype outside autocast, as torch's", function()
    local w = fp8.randn { 5, 3 }:to("bf16")
    local e = F.embedding(fp8.tensor { 1, 2 }, w)
    assert.are.equal("bf16", e:dtype())
    assert.are.equal(1, e[1]:eq(w[2]):all():item())
    assert.are.equal("bf16", F.dropout(fp8.randn { 100 }:to("bf16"), 0.1):dtype())
    assert.are.equal("fp16", F.dropout(fp8.randn { 100 }:to("fp16"), 0.5, true):dtype())
    local q = fp8.randn { 2, 2, 8, 16 }:to("bf16")
    local y = F.scaled_dot_product_attention(q, q, q, { is_causal = true })
    local ref = F.scaled_dot_product_attention(q:to("fp32"), q:to("fp32"), q:to("fp32"), { is_causal = true })
    assert.are.equal("bf16", y:dtype())
    assert.are.equal(1, y:eq(ref:to("bf16")):all():item())
    assert.are.equal("bf16", F.scaled_dot_product_attention(q, q, q, { attn_mask = fp8.zeros { 8, 8 } }):dtype())
    assert.are.equal("fp32", fp8.amp.autocast("bf16", function() return F.scaled_dot_product_attention(q, q, q):dtype() end))
  end)
end)

describe("a split_batches loader in one process", function()
  it("records split_batches in its checkpoint, so the position resumes in place under another process count", function()
    local U = dofile("tests/spec/helpers/util.lua")
    local dir = U.tmpdir()
    local script = dir .. "/s.lua"
    U.write(script, [[
local mode, dir = arg[1], arg[2]
local acc = fp8.Accelerator{ cpu = true, config = false,
  dataloader_config = fp8.DataLoaderConfiguration{ split_batches = true, use_stateful_dataloader = true } }
fp8.manual_seed(7)
local items = {}
for i = 1, 32 do items[i] = { fp8.randn{4}, i % 3 } end
local model = fp8.nn.Linear(4, 3)
local loader = fp8.data.DataLoader{ items, batch_size = 4, shuffle = true, seed = 3 }
local opt = fp8.optim.SGD(model:parameters(), { lr = 0.1 })
model, opt, loader = acc:prepare(model, opt, loader)
if mode == "load" then acc:load_state(dir, { strict = false }) end
local n = 0
for x, y in loader do
  n = n + 1
  if mode == "save" and n == 3 then acc:save_state(dir); break end
end
print("batches", n)
]])
    local exe = arg and arg[-1] or "build/fp8lab"
    local out, ok = U.sh(U.q(exe) .. " " .. U.q(script) .. " save " .. U.q(dir .. "/c"))
    assert.is_true(ok, out)
    local f = assert(io.open(dir .. "/c/fp8lab_state.json")); local json = f:read("a"); f:close()
    assert.truthy(json:find('"split_batches":%s*true'), json)      -- (one process recorded nothing before)
    -- a checkpoint of a split loader, as two processes write it, resumes in place here (5 of 8 batches left)
    out, ok = U.sh(U.q(exe) .. " " .. U.q(script) .. " load " .. U.q(dir .. "/c"))
    assert.is_true(ok, out)
    assert.truthy(out:find("batches\t5", 1, true), out)
    assert.is_nil(out:find("restarts epoch", 1, true), out)
    os.execute("rm -rf " .. U.q(dir))
  end)
end)
