-- bench_profcost.lua — the profiler's cost on a training step: the Fashion-MNIST MLP (784-512-256-10, batch 256)
-- and the GPT at `make bench`'s shape (4 layers, d=256, 4 heads, T=128, batch 16, vocab 96), fp32, AdamW, unprofiled
-- and inside an active fp8.profiler window with more and more options. Process CPU time (os.clock) per step; the
-- configurations alternate within each round and the fastest step of all rounds counts; "stop" is the fastest
-- prof:stop() (the window's events made into Lua tables) per recorded step. scripts/bench_profcost_torch.py is the
-- PyTorch peer. Usage (one thread, as docs/performance.md's "The profiler's cost (stop 101)" ran it):
--   OMP_NUM_THREADS=1 build/fp8lab scripts/bench_profcost.lua [mlp|gpt|tiny] [ROUNDS] [STEPS]
-- ("tiny": 1000 calls each of a + b, c:add_(b), c:mul_(0.5) and c:addmm(a, b) on [4, 4] tensors under fp8.no_grad)
local nn, optim, F = fp8.nn, fp8.optim, fp8.nn.functional
local gpt_batch = dofile(((arg and arg[0] or "scripts/x.lua"):match("^(.*)/[^/]*$") or ".") .. "/bench_gpt_batch.lua")
local which, rounds, steps = arg[1] or "mlp", tonumber(arg[2] or 5), tonumber(arg[3] or 4)

local step
fp8.manual_seed(0)
if which == "mlp" then
  local model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
  local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
  local x = fp8.randn { 256, 784 }
  local labels = {}
  for j = 1, 256 do labels[j] = (j * 7) % 10 end
  local y = fp8.tensor(labels)
  step = function()
    local loss = F.cross_entropy(model(x), y)
    opt:zero_grad(); loss:backward(); opt:step()
  end
elseif which == "gpt" then
  local B, T, V = 16, 128, 96
  local model = nn.GPT { vocab_size = V, block_size = T, n_layer = 4, n_head = 4, n_embd = 256 }
  local opt = optim.AdamW(model:parameters(), { lr = 3e-4 })
  local x, y = gpt_batch(B, T, V)
  step = function()
    local loss = F.cross_entropy(model(x):view(B * T, V), y:view(B * T))
    opt:zero_grad(); loss:backward(); opt:step()
  end
elseif which == "tiny" then
  -- per call: 1000 calls of each tiny op on [4, 4] tensors (under no_grad, as an optimizer writes)
  local a, b, c = fp8.randn { 4, 4 }, fp8.randn { 4, 4 }, fp8.randn { 4, 4 }
  local N = 1000
  step = function()
    fp8.no_grad(function()
      for _ = 1, N do local _ = a + b end
      for _ = 1, N do c:add_(b) end
      for _ = 1, N do c:mul_(0.5) end
      for _ = 1, N do local _ = c:addmm(a, b) end
    end)
  end
else
  error("usage: bench_profcost.lua [mlp|gpt|tiny] [ROUNDS] [STEPS]")
end

local CONFIGS = {
  { "off" },
  { "times only", {} },
  { "record_shapes", { record_shapes = true } },
  { "with_flops", { with_flops = true } },
  { "profile_memory", { profile_memory = true } },
  { "with_modules", { with_modules = true } },
  { "all four", { record_shapes = true, with_flops = true, profile_memory = true, with_modules = true } },
}
for _ = 1, 2 do step() end
local best, stop_best, events = {}, {}, {}
for r = 1, rounds do
  for i = 1, #CONFIGS do
    local c = CONFIGS[(i + r - 2) % #CONFIGS + 1]   -- each round starts one configuration later
    local name, o = c[1], c[2]
    collectgarbage("collect")
    local prof
    if o then prof = fp8.profiler.profile(o); prof:start() end
    for _ = 1, steps do
      local t0 = os.clock()
      step()
      local dt = os.clock() - t0
      if dt < (best[name] or math.huge) then best[name] = dt end
    end
    if prof then
      local t0 = os.clock()
      prof:stop()
      local dt = (os.clock() - t0) / steps
      if dt < (stop_best[name] or math.huge) then stop_best[name] = dt end
      events[name] = #prof:events() // steps
    end
  end
end
local off = best.off
print(("model=%s rounds=%d steps=%d load=%s"):format(which, rounds, steps, io.open("/proc/loadavg"):read("l")))
for _, c in ipairs(CONFIGS) do
  local n = c[1]
  print(("%-16s step_ms=%8.3f overhead=%+6.1f%% stop_ms_per_step=%7.3f events_per_step=%d"):format(n, best[n] * 1e3,
    (best[n] / off - 1) * 100, (stop_best[n] or 0) * 1e3, events[n] or 0))
end
