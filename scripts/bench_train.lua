-- bench_train.lua — times one training step (forward, backward, AdamW) of the Fashion-MNIST MLP
-- (784-512-256-10, batch 256) and of a small GPT (4 layers, d=256, 4 heads, T=128, batch 16,
-- vocab 96) through fp8.Accelerator: --mixed-precision no|bf16|fp16|fp8, and under fp8 the recipe
-- (--fp8-backend te|ao|msamp with --fp8-format, --fp8-recipe, --fp8-opt-level). Prints one line per model:
--   model=mlp ms_per_step=… steps=… peak_rss_mib=… act_mib=…
-- (the GPT's line on the CPU ends with best_step_ms=…: the fastest single step, steadier than the mean on a
-- machine shared with other jobs). --profile N then profiles N more steps (self time per op; on a GPU sorted by
-- device time) and prints the table before the result line.
-- act_mib: what the allocator holds after the forward pass beyond the inputs (the activations saved
-- for backward), measured once.
-- scripts/bench.sh runs it next to scripts/bench_train_torch.py and writes docs/performance.md.
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local nn, optim, F = fp8.nn, fp8.optim, fp8.nn.functional
local gpt_batch = dofile(((arg and arg[0] or "scripts/x.lua"):match("^(.*)/[^/]*$") or ".") .. "/bench_gpt_batch.lua")

local opts = require("fp8.args").parse(arg or {}, {
  { "model", "str", "all", "mlp | gpt | all" },
  { "steps", "int", 20, "timed steps", 1 },
  { "warmup", "int", 3, "untimed steps first", 0 },
  { "mixed-precision", "str", "no", "no | bf16 | fp16 | fp8" },
  { "fp8-backend", "str", nil, "te | ao | msamp (default te; with --mixed-precision fp8)" },
  { "fp8-format", "str", nil, "te: HYBRID | E4M3 (default HYBRID)" },
  { "fp8-recipe", "str", nil, "ao: tensorwise | rowwise | rowwise_with_gw_hp (default tensorwise)" },
  { "fp8-opt-level", "str", nil, "msamp: O1 | O2 | O3 (default O2)" },
  { "layers", "int", nil, "GPT: transformer blocks (default 4)", 1 },
  { "d-model", "int", nil, "GPT: embedding width (default 256)", 1 },
  { "heads", "int", nil, "GPT: attention heads (default 4)", 1 },
  { "seq", "int", nil, "GPT: sequence length (default 128)", 1 },
  { "batch", "int", nil, "GPT: sequences per step (default 16)", 1 },
  { "vocab", "int", nil, "GPT: vocabulary size (default 96)", 2 },
  { "gradient-checkpointing", "flag", false, "GPT: each block through fp8.utils.checkpoint (recomputed in the "
    .. "backward: less activation memory, a second forward)" },
  { "peak-tflops", "num", nil, "dense bf16 peak of the GPU for MFU (default 989.4: H100/H200 SXM); on a GPU only", 0 },
  { "cpu", "flag", false, "stay on the CPU even when there is a GPU" },
  { "profile", "int", 0, "then run this many more steps under fp8.profiler (device time too on a GPU) and print "
    .. "where the time went, before the result line", 0 },
}, { usage = "usage: fp8lab scripts/bench_train.lua [options]", about = "Times training steps. Options:",
     default_text = false })
-- Every option is used or refused: an FP8 sub-option belongs to one backend, and only under --mixed-precision fp8.
if opts["gradient-checkpointing"] and opts.model ~= "gpt" then
  fail("--gradient-checkpointing is a GPT option: give --model gpt")
end

local function one_of(name, v, list)
  for _, x in ipairs(list) do if v == x then return end end
  fail(("--%s must be one of %s; got '%s'"):format(name, table.concat(list, ", "), v))
end
one_of("model", opts.model, { "mlp", "gpt", "all" })
one_of("mixed-precision", opts["mixed-precision"], { "no", "bf16", "fp16", "fp8" })
if opts["fp8-backend"] ~= nil then one_of("fp8-backend", opts["fp8-backend"], { "te", "ao", "msamp" }) end
local GPT_DEFAULTS = { layers = 4, ["d-model"] = 256, heads = 4, seq = 128, batch = 16, vocab = 96 }
for _, k in ipairs { "layers", "d-model", "heads", "seq", "batch", "vocab" } do
  if opts[k] ~= nil and opts.model == "mlp" then fail(("--%s is a GPT option: give --model gpt or all"):format(k)) end
  if opts[k] == nil then opts[k] = GPT_DEFAULTS[k] end
end
if opts["fp8-backend"] ~= nil and opts["mixed-precision"] ~= "fp8" then
  fail(("--fp8-backend needs --mixed-precision fp8 (got %s)"):format(opts["mixed-precision"]))
end
opts["fp8-backend"] = opts["fp8-backend"] or "te"
if opts["peak-tflops"] ~= nil then   -- MFU is measured against a GPU's peak, on a GPU only
  if opts["peak-tflops"] <= 0 then fail(("--peak-tflops must be > 0, got %g"):format(opts["peak-tflops"])) end
  if opts.cpu or not fp8.cuda.is_available() or opts.model == "mlp" then
    fail("--peak-tflops is the GPU's peak for the GPT's MFU: it takes effect only on a GPU with --model gpt or all "
      .. "(not with --cpu)")
  end
end
opts["peak-tflops"] = opts["peak-tflops"] or 989.4
for name, owner in pairs { ["fp8-format"] = "te", ["fp8-recipe"] = "ao", ["fp8-opt-level"] = "msamp" } do
  if opts[name] ~= nil then
    if opts["mixed-precision"] ~= "fp8" then
      fail(("--%s needs --mixed-precision fp8 (got %s)"):format(name, opts["mixed-precision"]))
    end
    if opts["fp8-backend"] ~= owner then
      fail(("--%s belongs to --fp8-backend %s, not %s"):format(name, owner, opts["fp8-backend"]))
    end
  end
end
local steps, warmup = opts.steps, opts.warmup
local gpt_params = 0
local R = require "fp8._memory"   -- allocator counters

local function accelerator()
  local mp, h = opts["mixed-precision"], nil
  if mp == "fp8" then
    local b = opts["fp8-backend"]
    h = b == "te" and fp8.TERecipeKwargs{ fp8_format = opts["fp8-format"] or "HYBRID" }
      or b == "ao" and fp8.AORecipeKwargs{ config = opts["fp8-recipe"] or "tensorwise", module_filter_func = function(m)
        return m.in_features % 16 == 0 and m.out_features % 16 == 0 end }
      or b == "msamp" and fp8.MSAMPRecipeKwargs{ opt_level = opts["fp8-opt-level"] or "O2" }
      or fail("--fp8-backend must be te, ao or msamp")
  end
  return fp8.Accelerator{ mixed_precision = mp, kwargs_handlers = h and { h } or {}, cpu = opts.cpu }
end

local function live_mib(dev)
  collectgarbage("collect"); collectgarbage("collect")
  return (R.bytes(dev)) / 2 ^ 20
end

-- Queued GPU work finishes before a clock is read.
local function sync(dev) if dev == "cuda" then fp8.cuda.synchronize() end end

local function rss_peak_mib()
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local s = f:read("a"); f:close()
  return tonumber(s:match("VmHWM:%s+(%d+)")) / 1024
end

local function time_steps(step, fwd, dev)
  for _ = 1, warmup do step() end
  local before = live_mib(dev)
  local keep = fwd()                       -- the forward's output holds the graph and its saved tensors
  local act = live_mib(dev) - before
  keep = nil
  local clock = require("fp8._data").clock   -- monotonic wall seconds
  sync(dev)
  local start, best = clock(), math.huge
  for _ = 1, steps do
    local t0 = clock()
    step()
    if dev ~= "cuda" then best = math.min(best, clock() - t0) end   -- a GPU step's host time says nothing
  end
  sync(dev)
  local ms = (clock() - start) / steps * 1000
  if opts.profile > 0 then
    local gpu = dev == "cuda"
    local prof = fp8.profiler.profile{ activities = gpu and { "cpu", "cuda" } or { "cpu" } }
    prof:start()
    for _ = 1, opts.profile do step() end
    sync(dev)
    prof:stop()
    print(("profile steps=%d device=%s"):format(opts.profile, dev))
    print(prof:key_averages():table{ sort_by = gpu and "self_device_time_total" or "self_cpu_time_total", row_limit = 40 })
  end
  return ms, act, best * 1000
end

local function bench_mlp()
  fp8.manual_seed(0)
  local model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
  local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
  local acc = accelerator()
  model, opt = acc:prepare(model, opt)
  local x = fp8.randn{256, 784}
  local labels = {}
  for j = 1, 256 do labels[j] = (j * 7) % 10 end
  local y = fp8.tensor(labels)
  local dev = acc:device()
  x, y = x:to(dev), y:to(dev)
  local function fwd() return F.cross_entropy(model(x), y) end
  local function step()
    local loss = fwd()
    opt:zero_grad(); acc:backward(loss); opt:step()
  end
  return time_steps(step, fwd, dev)
end

local function bench_gpt()
  fp8.manual_seed(0)
  local B, T, V = opts.batch, opts.seq, opts.vocab
  local model = nn.GPT{ vocab_size = V, block_size = T, n_layer = opts.layers, n_head = opts.heads,
    n_embd = opts["d-model"], gradient_checkpointing = opts["gradient-checkpointing"] }
  gpt_params = model:num_parameters() - T * opts["d-model"]   -- position embeddings do no matmul
  local opt = optim.AdamW(model:parameters(), { lr = 3e-4 })
  local acc = accelerator()
  model, opt = acc:prepare(model, opt)
  local dev = acc:device()
  local x, y = gpt_batch(B, T, V)
  x, y = x:to(dev), y:to(dev)
  local function fwd() return F.cross_entropy(model(x):view(B * T, V), y:view(B * T)) end
  local function step()
    local loss = fwd()
    opt:zero_grad(); acc:backward(loss); opt:step()
  end
  return time_steps(step, fwd, dev)
end

if opts.model == "mlp" or opts.model == "all" then
  local ms, act = bench_mlp()
  -- 6 FLOPs per weight per example (forward 2, backward 4): 784·512 + 512·256 + 256·10 weights, batch 256
  local gflop = 6 * (784 * 512 + 512 * 256 + 256 * 10) * 256 / 1e9
  print(("model=mlp ms_per_step=%.2f steps=%d peak_rss_mib=%.0f act_mib=%.1f gflop_per_step=%.3f"):format(ms, steps,
    rss_peak_mib(), act, gflop))
end
if opts.model == "gpt" or opts.model == "all" then
  local ms, act, best = bench_gpt()
  local line = ("model=gpt ms_per_step=%.2f steps=%d peak_rss_mib=%.0f act_mib=%.1f"):format(ms, steps, rss_peak_mib(), act)
  -- Throughput and model FLOPs utilisation (PaLM's count: 6·N per token for the weights, 12·L·d·T for
  -- attention scores and values, forward and backward), against the GPU's dense bf16 peak.
  local tokens = opts.batch * opts.seq
  local flops = tokens * (6 * gpt_params + 12 * opts.layers * opts["d-model"] * opts.seq)
  line = line .. (" params=%d tokens_per_s=%.0f tflops=%.1f gflop_per_step=%.3f"):format(gpt_params, tokens / (ms / 1000),
    flops / (ms / 1000) / 1e12, flops / 1e9)
  if not opts.cpu and fp8.cuda.is_available() then
    line = line .. (" mfu=%.1f%% gpu_peak_gib=%.2f"):format(100 * flops / (ms / 1000) / (opts["peak-tflops"] * 1e12),
      fp8.cuda.max_memory_allocated() / 2 ^ 30)
  end
  if best < math.huge then line = line .. (" best_step_ms=%.2f"):format(best) end
  print(line)
end
