-- 03_delayed_vs_current.lua — lesson 3 (docs/concepts.md, "Lesson 3: delayed vs current scaling"): one
-- FP8 Linear trained through the Accelerator under TransformerEngine's delayed scaling (amax history
-- with `max` or `most_recent`, with and without `margin`) and torchao's current scaling, fed inputs
-- that grow slowly and carry one injected amax spike. Prints, per recipe, what the spike and the
-- growth cost (saturated and underflowed values of the input cast), and plots the input scale over steps.
-- Run: build/fp8lab scripts/lessons/03_delayed_vs_current.lua [--quick] [--steps N] [--spike X] [--growth G]
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local fp8 = fp8 or require "fp8"
local nn = fp8.nn
local C = dofile(((arg and arg[0] or "scripts/lessons/x"):match("^(.*)/[^/]*$") or ".") .. "/common.lua")
local opts = C.parse(arg, "03_delayed_vs_current", "Lesson 3: delayed vs current scaling.", {
  -- the spike comes at step max(2, steps // 3) and needs a step before and after it
  size = { "steps", 60, 30, "training steps", 3 },
  extra = {
    { "spike", "num", 1e5, "factor of the one-step amax spike (> 0)" },
    { "growth", "num", 1.02, "per-step growth of the inputs' magnitude (> 0; growth^step x spike in [1e-30, 1e30])" },
    { "history", "int", 1024, "amax_history_len of the delayed recipes", 1 },
  } })
for _, k in ipairs { "spike", "growth" } do
  if not (opts[k] > 0 and opts[k] < math.huge) then
    fail(("option --%s expects a finite number > 0, got %s"):format(k, opts[k]))
  end
end
local N = opts.steps
local spike_at = math.max(2, N // 3)
-- step s's inputs are N(0,1) x gain(s); the loss is scaled by 1/gain(s). Past fp32's range (inf, zeros or
-- subnormals) the casts' counts below would describe inf and 0, not the scaling rules: such a run is refused
local function gain(s) return opts.growth ^ s * (s == spike_at and opts.spike or 1) end
for s = 1, N do
  local g = gain(s)
  if not (g >= 1e-30 and g <= 1e30) then
    fail(("options --growth %g --spike %g --steps %d: the inputs' magnitude growth^step (x spike at step %d) must stay "
      .. "in [1e-30, 1e30] (fp32 holds the inputs and 1/magnitude), got %g at step %d"):format(opts.growth, opts.spike,
      N, spike_at, g, s))
  end
end

local RECIPES = {
  { "delayed max", function() return fp8.TERecipeKwargs{amax_history_len = opts.history, amax_compute_algo = "max"} end },
  { "delayed most_recent", function() return fp8.TERecipeKwargs{amax_history_len = opts.history,
    amax_compute_algo = "most_recent"} end },
  { "delayed most_recent margin 2", function() return fp8.TERecipeKwargs{amax_history_len = opts.history,
    amax_compute_algo = "most_recent", margin = 2} end },
  { "current (ao tensorwise)", function() return fp8.AORecipeKwargs{config = "tensorwise",
    module_filter_func = function() return true end} end },
}
print(("Lesson 3 — delayed vs current scaling. One FP8 Linear(64, 64), %d steps; inputs N(0,1) x %g^step, "
  .. "x%g at step %d; amax_history_len %d."):format(N, opts.growth, opts.spike, spike_at, opts.history))

local function run(handler)
  fp8.manual_seed(opts.seed)
  local acc = fp8.Accelerator{mixed_precision = "fp8", kwargs_handlers = { handler() }}
  local model = nn.Sequential(nn.Linear(64, 64))
  local opt = fp8.optim.SGD(model:parameters(), {lr = 1e-3})
  model, opt = acc:prepare(model, opt)
  local out = {}
  for s = 1, N do
    local g = gain(s)
    local x = fp8.randn{32, 64} * g
    opt:zero_grad()
    acc:backward((model(x) * (1 / g)):sum())
    opt:step()
    for _, r in ipairs(fp8.stats(model, {quiet = true})) do
      if r.role == "input" then out[s] = { scale = r.scale, sat = r.saturated, unf = r.underflow, amax = r.amax } end
    end
  end
  return out
end

local results, res = {}, {}
print(("  %-30s %14s %14s %14s %12s"):format("recipe", "sat. at spike", "sat. otherwise", "underflow after",
  "scale back"))
for i, r in ipairs(RECIPES) do
  local o = run(r[2])
  results[i] = o
  local sat_other, unf_after, n_other, n_after = 0, 0, 0, 0
  for s = 1, N do
    if s ~= spike_at then sat_other, n_other = sat_other + o[s].sat, n_other + 1 end
    if s > spike_at then unf_after, n_after = unf_after + o[s].unf, n_after + 1 end
  end
  -- steps after the spike until the scale is within 2x of its value just before it
  local back = "never"
  for s = spike_at + 1, N do
    if o[s].scale >= o[spike_at - 1].scale / opts.growth ^ (s - spike_at + 1) / 2 then back = tostring(s - spike_at); break end
  end
  res[i] = { sat_spike = o[spike_at].sat, sat_other = sat_other / n_other, unf_after = unf_after / n_after, back = back }
  print(("  %-30s %13.2f%% %13.3f%% %13.2f%% %12s"):format(r[1], 100 * res[i].sat_spike, 100 * res[i].sat_other,
    100 * res[i].unf_after, back == "never" and "never" or back .. (back == "1" and " step" or " steps")))
end
print("  (share of the input's values; 'scale back': steps after the spike until the scale recovers)")
print("Look at: delayed scaling casts the spike with the previous step's scale, so the spike saturates;")
print("'max' over a long history then keeps the tiny scale for the whole window and the ordinary inputs")
print("underflow; 'most_recent' recovers after one step, but growing inputs saturate a little every step")
print("unless `margin` leaves head-room; current scaling takes the scale from the tensor being cast.")
print("The plot shows the scale fp8.stats reports after each step: for the delayed recipes that is the")
print("scale the NEXT step's cast will use; 'most_recent' and current scaling draw the same line.")
print("By hand: fp8.stats(model) after each step shows the scales of every role.")

local rows = {}
for s = 1, N do
  local row = { s }
  for i = 1, #RECIPES do row[#row + 1] = results[i][s].scale end
  for i = 1, #RECIPES do row[#row + 1] = results[i][s].sat end
  for i = 1, #RECIPES do row[#row + 1] = results[i][s].unf end
  rows[s] = row
end
local header = { "step" }
for _, what in ipairs { "scale", "saturated", "underflow" } do
  for _, r in ipairs(RECIPES) do header[#header + 1] = what .. ":" .. r[1]:gsub("[%s%(%)]+", "_") end
end
local csv = C.write_csv(opts.out .. "/03_delayed_vs_current.csv", header, rows)
local series = {}
for i, r in ipairs(RECIPES) do series[i] = { x = 1, y = i + 1, title = r[1] } end
C.plot{ csv = csv, png = opts.out .. "/03_delayed_vs_current.png", logy = true,
        title = ("Lesson 3: scale of the input cast over steps (x%g spike at step %d)"):format(opts.spike, spike_at),
        xlabel = "step", ylabel = "scale (log scale)", series = series }
print(("RESULT max_sat_spike=%.6f max_unf_after=%.6f max_back=%s recent_sat_spike=%.6f recent_unf_after=%.6f "
  .. "recent_back=%s recent_sat_other=%.6f margin_sat_other=%.6f current_sat_spike=%.6f current_unf_after=%.6f")
  :format(res[1].sat_spike, res[1].unf_after, res[1].back, res[2].sat_spike, res[2].unf_after, res[2].back,
    res[2].sat_other, res[3].sat_other, res[4].sat_spike, res[4].unf_after))
