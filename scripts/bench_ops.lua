-- bench_ops.lua [rounds [group]] — single ops against which PyTorch 2.x is the peer (scripts/bench_ops_torch.py runs
-- the same cases), forward under no_grad and forward + backward, each the fastest of `rounds` calls (default 4) in ms,
-- wall clock. Groups: resample (F.interpolate's bilinear, bicubic and trilinear modes, scale 2), embedding_bag
-- (EmbeddingBag(100000, 64) on [4096, 32] ids: sum, max, sum with per_sample_weights), transformer
-- (TransformerEncoderLayer(256, 8, {batch_first = true, dropout = 0}) on [16, 128, 256]: fp32, and under
-- fp8.amp.autocast("bf16") where torch's peer is the layer in bf16; forward in eval, forward + backward in training
-- mode with y:sum():backward()), transpose (a transposed view made contiguous: t() of fp32 [1024, 256] and
-- [4096, 4096] and of bf16 [4096, 1024], NCHW to NHWC of fp32 [32, 64, 32, 32]; the copy alone, no backward), sweep
-- (~60 single ops a training script calls, most on x = [4096, 1024] fp32, a few with forward + backward: the
-- activations, softmaxes, norms, reductions along each dim, selects, losses, joins, bf16 arithmetic, odd matmuls, a
-- small conv2d, and the ops stop 93 left slow; docs/performance.md, "Single ops against PyTorch 2.15, a wider sweep
-- (stop 95)"; a third argument runs only the sweep's rows whose name holds it); default all. For A/B runs,
-- alternate the binaries and the peer a few times over at one thread and compare the fastest figures
-- (docs/performance.md, "Resampling in one pass", "EmbeddingBag's max and per-sample weights in one pass",
-- "TransformerEncoderLayer under bf16 autocast", "Transposed copies in registers"):
--   OMP_NUM_THREADS=1 build/fp8lab scripts/bench_ops.lua 4 resample
-- On a loaded host, BENCH_CLOCK=cpu times by process CPU time (os.clock; torch's peer: time.process_time), which at one
-- thread is the op's own time whatever else runs (docs/performance.md, "The ops against PyTorch on Zen 3").
local fail = require("fp8.args").fail
local GROUPS = { resample = true, embedding_bag = true, transformer = true, transpose = true, sweep = true, all = true }
local USAGE = "usage: fp8lab scripts/bench_ops.lua [ROUNDS [GROUP [FILTER]]]   (ROUNDS: an integer >= 1, default 4; "
  .. "GROUP: resample, embedding_bag, transformer, transpose, sweep or all, default all; FILTER: the sweep's rows whose "
  .. "name holds it)"
local argv = arg or {}
if argv[1] == "-h" or argv[1] == "--help" then print(USAGE) return end
if #argv > 3 then fail(("bench_ops.lua: three arguments at most, got %d\n%s"):format(#argv, USAGE)) end
local rounds = math.tointeger(tonumber(argv[1] or "4"))
if not rounds or rounds < 1 then
  fail(("bench_ops.lua: ROUNDS must be an integer >= 1, got '%s'\n%s"):format(argv[1], USAGE))
end
local group = argv[2] or "all"
if not GROUPS[group] then fail(("bench_ops.lua: GROUP must be resample, embedding_bag, transformer, transpose, sweep or all, "
  .. "got '%s'\n%s"):format(group, USAGE)) end
local filter = argv[3]
if filter and group ~= "sweep" then   -- (the other groups have no rows to pick: taken and ignored before)
  fail(("bench_ops.lua: FILTER picks rows of the sweep group only, got GROUP '%s'\n%s"):format(group, USAGE))
end
local clock = os.getenv("BENCH_CLOCK") or "wall"
if clock ~= "wall" and clock ~= "cpu" then
  fail(("bench_ops.lua: BENCH_CLOCK must be wall or cpu, got '%s'"):format(clock))
end
local now = clock == "cpu" and os.clock or require("fp8._data").clock   -- process CPU or wall-clock seconds
local F, nn = fp8.nn.F, fp8.nn

local function best(f)
  local b = math.huge
  for _ = 1, rounds do
    collectgarbage()
    local t = now()
    f()
    b = math.min(b, now() - t)
  end
  return b * 1e3
end
local function report(name, fwd, both)
  print(("%-38s forward %8.2f ms  forward + backward %8.2f ms"):format(name, fwd, both))
end

fp8.manual_seed(1)
if group == "all" or group == "resample" then
  local x4, x5 = fp8.randn { 16, 64, 32, 32 }, fp8.randn { 2, 16, 16, 32, 32 }
  for _, c in ipairs { { "bilinear", x4 }, { "bicubic", x4 }, { "trilinear", x5 } } do
    local mode, x = c[1], c[2]
    local o = { scale_factor = 2, mode = mode, align_corners = false }
    local xg = x:clone():requires_grad_()
    report(mode .. " " .. x:shape_str(), best(function() fp8.no_grad(function() F.interpolate(x, o) end) end),
      best(function() F.interpolate(xg, o):sum():backward() end))
  end
end
if group == "all" or group == "embedding_bag" then
  local ids = (fp8.rand { 4096, 32 } * 100000):floor()
  local psw = fp8.rand { 4096, 32 }
  for _, c in ipairs { { "sum" }, { "max" }, { "sum", psw } } do
    local m = nn.EmbeddingBag(100000, 64, { mode = c[1] })
    report(("EmbeddingBag %s%s"):format(c[1], c[2] and " per_sample_weights" or ""),
      best(function() fp8.no_grad(function() m(ids, nil, c[2]) end) end),
      best(function() m(ids, nil, c[2]):sum():backward() end))
  end
end
if group == "all" or group == "transformer" then
  local layer = nn.TransformerEncoderLayer(256, 8, { batch_first = true, dropout = 0 })
  local x = fp8.randn { 16, 128, 256 }
  for _, mode in ipairs { "no", "bf16" } do
    local function fwd()
      layer:eval()
      fp8.no_grad(function() fp8.amp.autocast(mode, function() return layer(x) end) end)
    end
    local function both()
      layer:train()
      fp8.amp.autocast(mode, function() return layer(x) end):sum():backward()
      layer:zero_grad()
    end
    report(("TransformerEncoderLayer %s"):format(mode == "no" and "fp32" or "bf16 autocast"), best(fwd), best(both))
  end
end
if group == "all" or group == "transpose" then
  local cases = { { "t() fp32", fp8.randn { 1024, 256 } }, { "t() fp32", fp8.randn { 4096, 4096 } },
    { "t() bf16", fp8.randn { 4096, 1024 }:to("bf16") }, { "permute NCHW->NHWC fp32", fp8.randn { 32, 64, 32, 32 } } }
  for _, c in ipairs(cases) do
    local x = c[2]
    local v = x:dim() == 2 and x:t() or x:permute { 1, 3, 4, 2 }
    print(("%-38s copy %8.3f ms"):format(c[1] .. " " .. x:shape_str(), best(function() v:contiguous() end)))
  end
end
if group == "all" or group == "sweep" then
  -- Each row: a name, the forward (run under no_grad), and for some the forward + backward on a leaf that requires
  -- grad (the loss a sum, as torch's peer). scripts/bench_ops_torch.py's sweep has the same rows, named the same.
  local x, y = fp8.randn { 4096, 1024 }, fp8.randn { 4096, 1024 }
  local xg = x:clone():requires_grad_()
  local xb, yb = x:to("bf16"), y:to("bf16")
  local xbg = xb:clone():requires_grad_()
  local col, row = fp8.randn { 4096, 1 }, fp8.randn { 1024 }
  local pos = x:abs() + 0.5
  local mask = fp8.randn({ 4096, 1024 }):gt(0)
  local w, b = fp8.randn { 1024 }, fp8.randn { 1024 }
  local idx64 = (fp8.rand { 4096, 64 } * 1024):floor()
  local ids = (fp8.rand { 2048 } * 4096):floor()
  local ids512 = (fp8.rand { 512 } * 1024):floor()
  local tgt = (fp8.rand { 4096 } * 1024):floor()
  local a1, b1 = fp8.randn { 1000, 999 }, fp8.randn { 999, 1001 }
  local a2, b2 = fp8.randn { 4097, 65 }, fp8.randn { 65, 257 }
  local img, ker = fp8.randn { 16, 32, 32, 32 }, fp8.randn { 32, 32, 3, 3 }
  local imgg = img:clone():requires_grad_()
  local G = function(f) return function() f(xg):sum():backward() end end
  local rows = {
    { "softmax dim2", function() F.softmax(x, 2) end, G(function(t) return F.softmax(t, 2) end) },
    { "softmax dim1", function() F.softmax(x, 1) end, G(function(t) return F.softmax(t, 1) end) },
    { "log_softmax dim2", function() F.log_softmax(x, 2) end, G(function(t) return F.log_softmax(t, 2) end) },
    { "log_softmax dim1", function() F.log_softmax(x, 1) end, G(function(t) return F.log_softmax(t, 1) end) },
    { "layer_norm 1024", function() F.layer_norm(x, w, b) end },
    { "rms_norm 1024", function() F.rms_norm(x, 1024, w) end },
    { "gelu none", function() F.gelu(x) end, G(function(t) return F.gelu(t) end) },
    { "gelu tanh", function() F.gelu(x, "tanh") end, G(function(t) return F.gelu(t, "tanh") end) },
    { "silu", function() F.silu(x) end, G(function(t) return F.silu(t) end) },
    { "sigmoid", function() x:sigmoid() end },
    { "tanh", function() x:tanh() end },
    { "relu", function() F.relu(x) end },
    { "sum dim1", function() x:sum(1) end },
    { "sum dim2", function() x:sum(2) end },
    { "mean dim1", function() x:mean(1) end },
    { "mean dim2", function() x:mean(2) end },
    { "var dim1", function() x:var(1) end },
    { "var dim2", function() x:var(2) end },
    { "std dim1", function() x:std(1) end },
    { "std dim2", function() x:std(2) end },
    { "sum all", function() x:sum() end },
    { "amax |x| dim2", function() x:amax(2) end },
    { "max dim1", function() x:max(1) end },
    { "min dim2", function() x:min(2) end },
    { "where", function() fp8.where(mask, x, y) end },
    { "masked_fill", function() x:masked_fill(mask, 0) end },
    { "abs", function() x:abs() end },
    { "neg", function() x:neg() end },
    { "sqrt", function() pos:sqrt() end },
    { "rsqrt", function() pos:rsqrt() end },
    { "div", function() return x / pos end },
    { "div scalar", function() return x / 3 end },
    { "mul", function() return x * y end },
    { "sub", function() return x - y end },
    { "lt", function() x:lt(y) end },
    { "eq scalar", function() x:eq(0) end },
    { "cross_entropy", function() F.cross_entropy(x, tgt) end, G(function(t) return F.cross_entropy(t, tgt) end) },
    { "mse_loss", function() F.mse_loss(x, y) end, G(function(t) return F.mse_loss(t, y) end) },
    { "dropout 0.1", function() F.dropout(x, 0.1, true) end },
    { "index_select dim1", function() x:index_select(1, ids) end },
    { "index_select dim2", function() x:index_select(2, ids512) end },
    { "cat dim1", function() fp8.cat({ x, y }, 1) end },
    { "cat dim2", function() fp8.cat({ x, y }, 2) end },
    { "stack", function() fp8.stack({ x, y }, 1) end },
    { "transpose contiguous", function() x:transpose(1, 2):contiguous() end },
    { "bf16 add", function() return xb + yb end },
    { "bf16 mul", function() return xb * yb end },
    { "bf16 gelu", function() F.gelu(xb) end, function() F.gelu(xbg):sum():backward() end },
    { "to bf16", function() x:to("bf16") end },
    { "bf16 to fp32", function() xb:to("fp32") end },
    { "bf16 softmax dim2", function() F.softmax(xb, 2) end },   -- (an fp32 result: docs/lua-api.md; torch's bf16)
    { "bf16 log_softmax dim2", function() F.log_softmax(xb, 2) end },
    { "bf16 sum all", function() xb:sum() end },
    { "matmul [1000,999]x[999,1001]", function() a1:matmul(b1) end },
    { "matmul [4097,65]x[65,257]", function() a2:matmul(b2) end },
    { "conv2d 16x32x32x32 k3", function() F.conv2d(img, ker, nil, { padding = 1 }) end,
      function() F.conv2d(imgg, ker, nil, { padding = 1 }):sum():backward() end },
    { "pow 3.5", function() pos:pow(3.5) end },
    { "pow 2.7 of x", function() x:pow(2.7) end },
    { "norm 2 dim2", function() x:norm(2, 2) end },
    { "norm 2 dim1", function() x:norm(2, 1) end },
    { "add column [4096,1]", function() return x + col end },
    { "mul column [4096,1]", function() return x * col end },
    { "add row [1024]", function() return x + row end },
    { "clamp -1 1", function() x:clamp(-1, 1) end },
    { "gather dim2 [4096,64]", function() x:gather(2, idx64) end },
  }
  for _, r in ipairs(rows) do
    if not filter or r[1]:find(filter, 1, true) then
      local fwd = best(function() fp8.no_grad(r[2]) end)
      if r[3] then report(r[1], fwd, best(r[3]))
      else print(("%-38s forward %8.2f ms"):format(r[1], fwd)) end
    end
  end
end
