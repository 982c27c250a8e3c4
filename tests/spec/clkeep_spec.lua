-- Changed on 2026-12-07 (stop 101): a dense tensor that is not contiguous (torch's "non-overlapping and dense": a
-- channels_last one, NHWC memory seen as [N, C, H, W], which conv2d gives since stop 101's convcl, or any permutation)
-- keeps its layout through fp8lab's elementwise ops as through torch's (TensorIterator's fast setup): unary and binary
-- ops of operands with the same strides, ops with a number, the activations (relu, GELU, SiLU), clamp, the in-place
-- forms, and the conversions (to, float, bfloat16, clone) walk its memory in order and give a result with its strides
-- (core/ops.c dense_alike, core/nn.c activation, core/ops_grad.c fl_to), where they read it through its strides into
-- a contiguous result; a binary op with a broadcast operand (a bias) or a contiguous one takes the first operand's
-- layout where torch's does (core/ops.c layout_operand); a full reduction (sum, mean, amax, ...) reads its memory in order where it copied it to a
-- contiguous tensor first; a leaf's .grad takes the leaf's strides, as torch's AccumulateGrad gives them, and the
-- optimizers step such a parameter. docs/robustness.md and docs/performance.md, "channels_last carried through
-- (stop 101)". The strides are torch 2.15's (tests/data/clkeep_torch.lua, scripts/gen_clkeep.py); the values are
-- the contiguous tensor's bits; the contiguous inputs' bits are main's ff2d995e (its build/fp8lab, 1 and 2 threads).
-- Changed on 2026-12-07 (stop 102): the gradient handed between nodes keeps channels_last where torch's autograd's
-- does (core/autograd.c node_takes_dense, core/nn.c act_bwd_dense, core/conv_cols.c), and cat of channels-last
-- tensors is channels-last (core/ops_grad.c cat_raw): the "gradients between nodes" case and the cat ops, torch's
-- strides from scripts/gen_clkeep.py. docs/robustness.md, "Gradients between nodes on channels_last (stop 102)".
local U = dofile("tests/spec/helpers/util.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"
local nn = fp8.nn
local F = nn.F

local cl, same_list = U.cl, U.same_strides   -- channels_last of a contiguous tensor; a stride check

-- gen_clkeep.py's bias(x): 0, 1, ... along dim -3, ones elsewhere
local function bias(x)
  local shape = {}
  for i = 1, x:dim() do shape[i] = 1 end
  shape[x:dim() - 2] = x:size(x:dim() - 2)
  return fp8.arange(0, x:size(x:dim() - 2)):to(x:dtype()):reshape(shape)
end

-- scripts/gen_clkeep.py's LAYOUTS and OPS, as fp8lab spells them
local LAYOUTS = {
  cl = function(dt) return cl(fp8.randn({ 2, 3, 4, 5 }):to(dt)) end,
  cl1 = function(dt) return cl(fp8.randn({ 2, 1, 4, 5 }):to(dt)) end,
  perm = function(dt) return fp8.randn({ 4, 5, 3 }):to(dt):permute(3, 1, 2) end,
}
local OPS = {
  relu = function(x) return x:relu() end,
  gelu = function(x) return F.gelu(x) end,
  silu = function(x) return F.silu(x) end,
  sigmoid = function(x) return x:sigmoid() end,
  tanh = function(x) return x:tanh() end,
  exp = function(x) return x:exp() end,
  abs = function(x) return x:abs() end,
  neg = function(x) return -x end,
  add = function(x, y) return x + y end,
  mul = function(x, y) return x * y end,
  sub = function(x, y) return x - y end,
  div = function(x, y) return x / y end,
  maximum = function(x, y) return x:maximum(y) end,
  add_s = function(x) return x + 2 end,
  mul_s = function(x) return x * 0.5 end,
  rsub_s = function(x) return 1 - x end,
  clone = function(x) return x:clone() end,
  to_bf16 = function(x) return x:to("bf16") end,
  float = function(x) return x:float() end,
  relu_ = function(x) local c = x:clone(); c:relu_(); return c end,
  add_ = function(x, y) local c = x:clone(); c:add_(y); return c end,
  add_bias = function(x) return x + bias(x) end,
  bias_add = function(x) return bias(x) + x end,
  add_c = function(x, y) return x + y:contiguous() end,
  c_add = function(x, y) return y:contiguous() + x end,
  cat1 = function(x, y) return fp8.cat({ x, y }, 2) end,
  cat0 = function(x, y) return fp8.cat({ x, y }, 1) end,
  cat_c = function(x, y) return fp8.cat({ x, y:contiguous() }, 2) end,
}

describe("a dense permuted tensor keeps its layout through elementwise ops (torch 2.15's strides)", function()
  it("gives torch's result strides and the contiguous operands' values for every op, layout and dtype", function()
    local T = dofile("tests/data/clkeep_torch.lua")
    fp8.manual_seed(7)
    local n = 0
    for lname, make in pairs(LAYOUTS) do
      for _, dt in ipairs { "fp32", "bf16" } do
        local want = T[lname .. "_" .. dt]
        local x, y = make(dt), make(dt)
        same_list(lname .. " " .. dt .. " x", x:stride(), want.x)
        local xc, yc = x:contiguous(), y:contiguous()
        for oname, op in pairs(OPS) do
          local what = ("%s of %s %s"):format(oname, lname, dt)
          local r = op(x, y)
          same_list(what, r:stride(), want[oname])
          U.same_bits(what, r, op(xc, yc))
          n = n + 1
        end
        local leaf = make("fp32"):requires_grad_()
        local loss = (leaf:relu() * 2):sum()
        loss:backward()
        same_list(lname .. " " .. dt .. " .grad", leaf.grad:stride(), want.grad)
      end
    end
    assert.are.equal(168, n)
  end)

  it("writes an in-place op on a channels_last tensor in place, in memory order", function()
    fp8.manual_seed(8)
    local x = cl(fp8.randn({ 2, 16, 3, 3 }))
    local want = x:relu()
    local before = x:stride()
    x:relu_()
    same_list("relu_", x:stride(), before)
    U.same_bits("relu_", x, want)
  end)
end)

-- stop 102: gen_clkeep.py's grad_chains, as fp8lab spells them
local function grad_chains(dt)
  local b = cl(fp8.randn({ 2, 3, 4, 5 })):to(dt)
  local w = cl(fp8.randn({ 4, 3, 3, 3 }) * 0.3):to(dt)
  local w2 = (fp8.randn({ 4, 4, 3, 3 }) * 0.3):to(dt)
  local function conv(a, k) return F.conv2d(a, k, nil, { padding = 1 }) end
  return {
    relu = function(a) return a:relu() end,
    gelu = function(a) return F.gelu(a) end,
    silu = function(a) return F.silu(a) end,
    mul = function(a) return a * b end,
    add = function(a) return a + b end,
    sub = function(a) return b - a end,
    div = function(a) return a / (b:abs() + 1) end,
    relu2 = function(a) return a:relu() * 2 end,
    conv = function(a) return conv(a, w) end,
    cnn = function(a) return conv(conv(a, w):relu(), w2):relu() end,
  }
end

describe("gradients between nodes keep channels_last where torch's do (stop 102)", function()
  it("hands a channels_last intermediate torch's gradient strides through each chain, with the NCHW chain's values", function()
    local T = dofile("tests/data/clkeep_torch.lua")
    local n = 0
    for _, dt in ipairs { "fp32", "bf16" } do
      local want = T["grads_" .. dt]
      fp8.manual_seed(12)
      for cname, f in pairs(grad_chains(dt)) do
        for _, how in ipairs { "sum", "gy" } do
          -- add_sum: torch hands the sum's expanded gradient (strides 0) on through the add itself; fp8lab fills it
          -- for the add's node (autograd.c node_takes_broadcast names the activations only): left, not a layout
          if not (cname == "add" and how == "sum") then
            local what = ("%s %s %s"):format(cname, how, dt)
            local x0 = fp8.randn({ 2, 3, 4, 5 }):to(dt)
            local gy0
            local function run(x, layout)
              local leaf = x:detach():requires_grad_()
              local a = leaf * 1
              local seen
              a:register_hook(function(g) seen = g; return nil end)
              local y = f(a)
              if how == "sum" then y:sum():backward()
              else
                gy0 = gy0 or fp8.randn(y:size()):to(dt)
                y:backward(layout(gy0))
              end
              return seen
            end
            local gcl = run(cl(x0), cl)
            local gnc = run(x0, function(t) return t end)
            same_list(what, gcl:stride(), want[cname .. "_" .. how])
            -- the same values: elementwise chains bit for bit; a conv's NHWC kernels within the fp32 sums' rounding
            -- (bf16: a channels-last first layer may take the direct kernels where NCHW takes the columns, on
            -- AVX-512 hosts: within the bf16 roundings)
            if cname == "conv" or cname == "cnn" then
              U.same_values(what, gcl:contiguous(), gnc:totable(), dt == "bf16" and 3e-2 or 2e-5)
            else U.same_bits(what, gcl:contiguous(), gnc) end
            n = n + 1
          end
        end
      end
    end
    assert.are.equal(38, n)
  end)
end)

describe("a full reduction of a channels_last tensor reads its memory in order", function()
  it("sums as its NHWC memory sums and as the contiguous tensor, the same on 1 and 2 threads; max, min, amax too", function()
    -- 2·64·33·33 elements: many of the reduction's blocks (the sum is a double one, exact here in any order: these
    -- values' bits are the contiguous tensor's; docs/lua-api.md says when they can differ). The time was the change
    -- (a contiguous copy before), so this case passes on ff2d995e too.
    local code = [[
      local function cl(t) return t:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3) end
      local function b(v) return ("%08x"):format(string.unpack("<I4", string.pack("<f", v))) end
      fp8.manual_seed(9)
      local out = {}
      for _, dt in ipairs { "fp32", "bf16" } do
        local x0 = fp8.randn({ 2, 64, 33, 33 }):to(dt)
        local nhwc = x0:permute(1, 3, 4, 2):contiguous()
        local x = cl(x0)
        for _, op in ipairs { "sum", "mean" } do
          assert(b(x[op](x):item()) == b(nhwc[op](nhwc):item()), dt .. " " .. op .. ": not the memory order's bits")
          assert(b(x[op](x):item()) == b(x0[op](x0):item()), dt .. " " .. op .. ": not the contiguous tensor's bits")
          out[#out + 1] = b(x[op](x):item())
        end
        for _, op in ipairs { "amax", "max", "min" } do
          assert(b(x[op](x):item()) == b(x0[op](x0):item()), dt .. " " .. op .. ": not the contiguous tensor's")
        end
      end
      print(#out .. " " .. table.concat(out, " "))
    ]]
    local got = U.same_on_threads(BIN, code)
    assert.is_truthy(got:match("^4 "), got)
  end)
end)

describe("a leaf's .grad takes the leaf's strides (torch's AccumulateGrad)", function()
  it("a channels_last conv weight: its .grad channels_last, summed again in place, and SGD and AdamW step it", function()
    fp8.manual_seed(10)
    local x = fp8.randn({ 2, 8, 6, 6 })
    local w0 = fp8.randn({ 16, 8, 3, 3 }) * 0.2
    local function train(w, opt_new)
      w = w:clone():requires_grad_()
      local opt = opt_new({ w })
      for _ = 1, 2 do
        local y = F.conv2d(x, w, nil, { padding = 1 })
        y:relu():sum():backward()
        y = F.conv2d(x, w, nil, { padding = 1 })   -- a second backward: the sum into .grad
        y:relu():sum():backward()
        opt:step()
        opt:zero_grad()
      end
      return w
    end
    for _, new in ipairs { function(ps) return fp8.optim.SGD(ps, { lr = 0.01, momentum = 0.9 }) end,
                           function(ps) return fp8.optim.AdamW(ps, { lr = 0.01 }) end } do
      local wc = train(cl(w0), new)
      local wn = train(w0, new)
      same_list("the channels_last weight after its steps", wc:stride(), cl(w0):stride())
      U.same_values("channels_last weight", wc:contiguous(), wn:totable(), 1e-4)
    end
    local w = cl(w0):requires_grad_()
    F.conv2d(x, w, nil, { padding = 1 }):sum():backward()
    same_list("w.grad", w.grad:stride(), w:stride())
    F.conv2d(x, w, nil, { padding = 1 }):sum():backward()
    same_list("w.grad after a second backward", w.grad:stride(), w:stride())
  end)
end)

describe("contiguous operands keep their bits", function()
  it("gives main's hashes for the ops above on contiguous fp32 and bf16 operands (1 and 2 threads)", function()
    local code = U.HASH_BITS .. [[
      local h = hash_of
      fp8.manual_seed(11)
      local out = {}
      for _, dt in ipairs { "fp32", "bf16" } do
        local x, y = fp8.randn({ 4, 16, 9, 9 }):to(dt), fp8.randn({ 4, 16, 9, 9 }):to(dt)
        local F = fp8.nn.F
        for _, r in ipairs { x:relu(), F.gelu(x), F.silu(x), x:sigmoid(), x:tanh(), x:exp(), x + y, x * y, x - y, x / y,
                             x:maximum(y), x + 2, x * 0.5, 1 - x, x:clone(), x:to("bf16"), x:float(), x:clamp(-0.5, 0.5),
                             x:sum(), x:mean(), x:amax(), x:sum(2) } do
          out[#out + 1] = h(r)
        end
        local leaf = x:float():requires_grad_()
        local loss = (F.gelu(leaf) * y:float()):sum()
        loss:backward()
        out[#out + 1] = h(leaf.grad)
      end
      print(#out .. " " .. table.concat(out, " "))
    ]]
    -- main's ff2d995e build/fp8lab, OMP_NUM_THREADS 1 and 2 alike
    local want = table.concat({
      "46 5184:21ce6dfb2725 5184:323821be5e09 5184:80e5becec1ea 5184:51d0bd4fd38c 5184:eeb810fdaf2b 5184:e78be78aa9de",
      "5184:cc67dee001d8 5184:9ad70160a1a0 5184:2e3e47e25fe 5184:98734c8b66b5 5184:1ae28ab85d00 5184:54172c0135a3",
      "5184:1e11c99727e3 5184:32460fc835d0 5184:727c2f9727e3 5184:195d72b89825 5184:727c2f9727e3 5184:50bbc5b37a7b",
      "1:7dbdb3193a1f 1:bba53effc279 1:fcb9a73731ec 324:d024ea47d078 5184:8877158e5fa9 5184:71061d929825",
      "5184:651c963d4e1c 5184:46012cb9825 5184:e794d6839825 5184:53856bc79825 5184:b05bcfd79825 5184:8f2f40aa9825",
      "5184:6a7823a19825 5184:65840e8b9825 5184:58191af09825 5184:987972c39825 5184:5eaaafe69825 5184:b83325df9825",
      "5184:89fb91ba9825 5184:4a7d6cdf9825 5184:4a7d6cdf9825 5184:4a7d6cdf9825 5184:99aeb31f9825 1:bce42264b7df",
      "1:bccba0e0b7df 1:bdba1c1bb7df 324:331fba2c9cf5 5184:21be4aefec20",
    }, " ")
    assert.are.equal(want, (U.same_on_threads(BIN, code):gsub("%s+$", "")))
  end)
end)
