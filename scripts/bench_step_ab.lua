-- bench_step_ab.lua — the GPT training step of scripts/bench_train.lua (4 layers, d=256, 4 heads, T=128, batch 16,
-- vocab 96, AdamW, through fp8.Accelerator) for several precisions in ONE process, interleaved: every round runs
-- --per-round steps of each precision in turn, so a slow moment of a shared machine falls on all of them alike.
-- Prints, per precision, the fastest and the median single step (ms) over all rounds:
--   ab precision=te min_ms=… median_ms=… steps=…
-- Precisions: fp32, bf16, te (HYBRID), te-e4m3, ao (tensorwise), ao-rowwise, msamp (O2).
-- scripts/bench_train.sh runs it to compare the FP8 step with the bf16 step (docs/performance.md).
-- --profile N then runs N more steps of each precision under fp8.profiler and prints its table (self time per op and
-- input shape, summed over the N steps), the breakdown in docs/performance.md's "Where the GPT step's time goes".
-- --clock cpu times each step by the process's CPU time (os.clock: every thread's, spinning OpenMP waits included)
-- instead of the wall clock: with OMP_NUM_THREADS=1 on a shared, busy host that is the step's own work, where the
-- wall clock counts the other processes' turns too (docs/performance.md, "The te step on Zen 3 again").
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local nn, optim, F = fp8.nn, fp8.optim, fp8.nn.functional
local gpt_batch = dofile(((arg and arg[0] or "scripts/x.lua"):match("^(.*)/[^/]*$") or ".") .. "/bench_gpt_batch.lua")
local clock = require("fp8._data").clock

local opts = require("fp8.args").parse(arg or {}, {
  { "precisions", "str", "bf16,te,ao,msamp", "comma-separated: fp32, bf16, te, te-e4m3, ao, ao-rowwise, msamp" },
  { "rounds", "int", 8, "rounds", 1 },
  { "per-round", "int", 3, "timed steps of each precision per round", 1 },
  { "warmup", "int", 3, "untimed steps of each precision first", 0 },
  { "clock", "str", "wall", "what times a step: wall (the wall clock) or cpu (the process's CPU time, all threads)" },
  { "profile", "int", 0, "then run this many steps of each precision under fp8.profiler and print where the time went", 0 },
}, { usage = "usage: fp8lab scripts/bench_step_ab.lua [options]", about = "Times GPT steps, precisions interleaved. Options:" })

if opts.clock ~= "wall" and opts.clock ~= "cpu" then
  fail(("--clock must be wall or cpu; got '%s'"):format(opts.clock))
end
if opts.clock == "cpu" then clock = os.clock end

local PRECISIONS = {}
for name in opts.precisions:gmatch("[^,]+") do PRECISIONS[#PRECISIONS + 1] = name end
if #PRECISIONS == 0 then
  fail(("--precisions: no precision given ('%s'); one or more of fp32, bf16, te, te-e4m3, ao, ao-rowwise, msamp")
    :format(opts.precisions))
end

local HANDLERS = {
  fp32 = function() return "no", {} end,
  bf16 = function() return "bf16", {} end,
  te = function() return "fp8", { fp8.TERecipeKwargs{ fp8_format = "HYBRID" } } end,
  ["te-e4m3"] = function() return "fp8", { fp8.TERecipeKwargs{ fp8_format = "E4M3" } } end,
  -- every Linear whose dims are multiples of 16, as bench_train.lua's ao row (torchao's default filter would keep
  -- the first and last in high precision)
  ao = function() return "fp8", { fp8.AORecipeKwargs{ config = "tensorwise", module_filter_func = function(m)
    return m.in_features % 16 == 0 and m.out_features % 16 == 0 end } } end,
  ["ao-rowwise"] = function() return "fp8", { fp8.AORecipeKwargs{ config = "rowwise", module_filter_func = function(m)
    return m.in_features % 16 == 0 and m.out_features % 16 == 0 end } } end,
  msamp = function() return "fp8", { fp8.MSAMPRecipeKwargs{ opt_level = "O2" } } end,
}

local B, T, V = 16, 128, 96
local function setup(name)
  local make = HANDLERS[name]
  if not make then
    fail(("--precisions: unknown precision '%s' (fp32, bf16, te, te-e4m3, ao, ao-rowwise, msamp)"):format(name))
  end
  fp8.manual_seed(0)
  local model = nn.GPT{ vocab_size = V, block_size = T, n_layer = 4, n_head = 4, n_embd = 256 }
  local opt = optim.AdamW(model:parameters(), { lr = 3e-4 })
  local mp, h = make()
  local acc = fp8.Accelerator{ mixed_precision = mp, kwargs_handlers = h, cpu = true }
  model, opt = acc:prepare(model, opt)
  local x, y = gpt_batch(B, T, V)
  return function()
    local loss = F.cross_entropy(model(x):view(B * T, V), y:view(B * T))
    opt:zero_grad(); acc:backward(loss); opt:step()
  end
end

local names, steps, times = {}, {}, {}
for name in opts.precisions:gmatch("[^,]+") do
  names[#names + 1] = name
  steps[#steps + 1] = setup(name)
  times[#times + 1] = {}
  for _ = 1, opts.warmup do steps[#steps]() end
end
for _ = 1, opts.rounds do
  for i = 1, #names do
    for _ = 1, opts["per-round"] do
      local t0 = clock()
      steps[i]()
      times[i][#times[i] + 1] = (clock() - t0) * 1000
    end
  end
end
for i, name in ipairs(names) do
  local t = times[i]
  table.sort(t)
  local n = #t
  local median = n % 2 == 1 and t[(n + 1) // 2] or (t[n // 2] + t[n // 2 + 1]) / 2
  print(("ab precision=%s min_ms=%.2f median_ms=%.2f steps=%d%s"):format(name, t[1], median, n,
    opts.clock == "cpu" and " clock=cpu" or ""))
end
if opts.profile > 0 then
  for i, name in ipairs(names) do
    local prof = fp8.profiler.profile{ record_shapes = true }
    prof:start()
    for _ = 1, opts.profile do steps[i]() end
    prof:stop()
    print(("profile precision=%s steps=%d"):format(name, opts.profile))
    print(prof:key_averages{ group_by_input_shape = true }:table{ sort_by = "self_cpu_time_total", row_limit = 40 })
  end
end
