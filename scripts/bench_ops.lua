-- bench_ops.lua [rounds [group]] — single ops against which PyTorch 2.x is the peer (scripts/bench_ops_torch.py runs
-- the same cases), forward under no_grad and forward + backward, each the fastest of `rounds` calls (default 4) in ms,
-- wall clock. Groups: resample (F.interpolate's bilinear, bicubic and trilinear modes, scale 2), embedding_bag
-- (EmbeddingBag(100000, 64) on [4096, 32] ids: sum, max, sum with per_sample_weights), transformer
-- (TransformerEncoderLayer(256, 8, {batch_first = true, dropout = 0}) on [16, 128, 256]: fp32, and under
-- fp8.amp.autocast("bf16") where torch's peer is the layer in bf16; forward in eval, forward + backward in training
-- mode with y:sum():backward()), transpose (a transposed view made contiguous: t() of fp32 [1024, 256] and
-- [4096, 4096] and of bf16 [4096, 1024], NCHW to NHWC of fp32 [32, 64, 32, 32]; the copy alone, no backward); default
-- all. For A/B runs,
-- alternate the binaries and the peer a few times over at one thread and compare the fastest figures
-- (docs/performance.md, "Resampling in one pass", "EmbeddingBag's max and per-sample weights in one pass",
-- "TransformerEncoderLayer under bf16 autocast", "Transposed copies in registers"):
--   OMP_NUM_THREADS=1 build/fp8lab scripts/bench_ops.lua 4 resample
local fail = require("fp8.args").fail
local GROUPS = { resample = true, embedding_bag = true, transformer = true, transpose = true, all = true }
local USAGE = "usage: fp8lab scripts/bench_ops.lua [ROUNDS [GROUP]]   (ROUNDS: an integer >= 1, default 4; GROUP: "
  .. "resample, embedding_bag, transformer, transpose or all, default all)"
local argv = arg or {}
if argv[1] == "-h" or argv[1] == "--help" then print(USAGE) return end
if #argv > 2 then fail(("bench_ops.lua: two arguments at most, got %d\n%s"):format(#argv, USAGE)) end
local rounds = math.tointeger(tonumber(argv[1] or "4"))
if not rounds or rounds < 1 then
  fail(("bench_ops.lua: ROUNDS must be an integer >= 1, got '%s'\n%s"):format(argv[1], USAGE))
end
local group = argv[2] or "all"
if not GROUPS[group] then fail(("bench_ops.lua: GROUP must be resample, embedding_bag, transformer, transpose or all, got '%s'\n%s"):format(
  group, USAGE)) end
local now = require("fp8._data").clock   -- wall-clock seconds, monotonic
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
