-- bench_train.lua — times one training step (forward, backward, AdamW) of the Fashion-MNIST MLP
-- (784-512-256-10, batch 256) and of a small GPT (4 layers, d=256, 4 heads, T=128, batch 16,
-- vocab 96), fp32 unless --mixed-precision bf16. Prints one line per model:
--   model=mlp ms_per_step=… steps=… peak_rss_mib=…
-- scripts/bench.sh runs it next to scripts/bench_train_torch.py and writes docs/performance.md.
local nn, optim, F = fp8.nn, fp8.optim, fp8.nn.functional

local opts = { model = "all", steps = 20, warmup = 3, ["mixed-precision"] = "no" }
local i = 1
while i <= #arg do
  local k = arg[i]:match("^%-%-(.+)$")
  if not k or opts[k] == nil then
    error(("bench_train: unknown option '%s' (valid: --model mlp|gpt|all, --steps N, --warmup N, --mixed-precision no|bf16)"):format(arg[i]))
  end
  opts[k] = arg[i + 1]; i = i + 2
end
local steps, warmup = tonumber(opts.steps), tonumber(opts.warmup)
local amp = ({ no = "fp32", bf16 = "bf16" })[opts["mixed-precision"]]
assert(amp, "--mixed-precision must be no or bf16")
fp8.set_autocast_dtype(amp)

local function rss_peak_mib()
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local s = f:read("a"); f:close()
  return tonumber(s:match("VmHWM:%s+(%d+)")) / 1024
end

local function time_steps(step)
  for _ = 1, warmup do step() end
  local clock = require("fp8._data").clock   -- monotonic wall seconds
  local start = clock()
  for _ = 1, steps do step() end
  return (clock() - start) / steps * 1000
end

local function bench_mlp()
  fp8.manual_seed(0)
  local model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
  local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
  local x = fp8.randn{256, 784}
  local labels = {}
  for j = 1, 256 do labels[j] = (j * 7) % 10 end
  local y = fp8.tensor(labels)
  local function step()
    local loss = F.cross_entropy(model(x), y)
    opt:zero_grad(); loss:backward(); opt:step()
  end
  return time_steps(step)
end

local function bench_gpt()
  fp8.manual_seed(0)
  local B, T, V = 16, 128, 96
  local model = nn.GPT{ vocab_size = V, block_size = T, n_layer = 4, n_head = 4, n_embd = 256 }
  local opt = optim.AdamW(model:parameters(), { lr = 3e-4 })
  local ids = {}
  for b = 1, B do ids[b] = {} for t = 1, T + 1 do ids[b][t] = (b * 31 + t * 17) % V end end
  local function cols(a, z)
    local r = {}
    for b = 1, B do r[b] = {} for t = a, z do r[b][#r[b] + 1] = ids[b][t] end end
    return fp8.tensor(r)
  end
  local x, y = cols(1, T), cols(2, T + 1)
  local function step()
    local logits = model(x)
    local loss = F.cross_entropy(logits:view(B * T, V), y:view(B * T))
    opt:zero_grad(); loss:backward(); opt:step()
  end
  return time_steps(step)
end

if opts.model == "mlp" or opts.model == "all" then
  print(("model=mlp ms_per_step=%.2f steps=%d peak_rss_mib=%.0f"):format(bench_mlp(), steps, rss_peak_mib()))
end
if opts.model == "gpt" or opts.model == "all" then
  print(("model=gpt ms_per_step=%.2f steps=%d peak_rss_mib=%.0f"):format(bench_gpt(), steps, rss_peak_mib()))
end
