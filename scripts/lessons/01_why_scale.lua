-- 01_why_scale.lua — lesson 1 (docs/concepts.md, "Lesson 1: why scale at all"): the real weight
-- gradients of the tiny char GPT, cast to E4M3 and E5M2 without a scale (scale 1) and with a
-- per-tensor scale (fp8_max / amax): the fraction that underflows to zero; then the same short
-- training run with its gradients cast each way (cast, then decoded back, before AdamW's step).
-- Run: build/fp8lab scripts/lessons/01_why_scale.lua [--quick] [--steps N] [--out DIR]
local fp8 = fp8 or require "fp8"
local C = dofile(((arg and arg[0] or "scripts/lessons/x"):match("^(.*)/[^/]*$") or ".") .. "/common.lua")
local opts = C.parse(arg, "01_why_scale", "Lesson 1: why FP8 needs a scale.",
  { size = { "steps", 150, 30, "training steps", 1 }, gpt = true, quick_more = true })   -- (--quick drops two runs)

local model, next_batch, _, path = C.gpt(opts)
print(("Lesson 1 — why scale at all. Tiny char GPT (%d parameters) on %s."):format(model:num_parameters(), path))
local grads = C.gradients(model, next_batch, 10)

-- Fraction of nonzero gradient values that a cast turns into zero, over every weight matrix.
local function underflow(fmt, scaled)
  local unf, n = 0, 0
  for _, g in ipairs(grads) do
    local q = g[2]:quantize(fmt, scaled and {} or {scale = 1})
    unf, n = unf + q:underflow(), n + g[2]:numel()
  end
  return unf / n
end
local amax = 0
for _, g in ipairs(grads) do amax = math.max(amax, g[2]:abs():max():item()) end
local res = { e4m3 = underflow("e4m3", false), e5m2 = underflow("e5m2", false),
              e4m3_scaled = underflow("e4m3", true), e5m2_scaled = underflow("e5m2", true) }
print(("\nWeight gradients after 10 steps: %d matrices, largest |g| = %.3g."):format(#grads, amax))
print(("  %-28s %10s %10s"):format("cast", "E4M3", "E5M2"))
print(("  %-28s %9.2f%% %9.2f%%"):format("no scale (scale = 1)", 100 * res.e4m3, 100 * res.e5m2))
print(("  %-28s %9.2f%% %9.2f%%"):format("per-tensor fp8_max / amax", 100 * res.e4m3_scaled, 100 * res.e5m2_scaled))
print("  (share of gradient values that underflow to zero)")
print("Look at: E4M3's smallest subnormal is 2^-9 ≈ 0.002, far above most gradients; E5M2 reaches 2^-16;")
print("a per-tensor scale moves the largest |g| to the top of the format and almost nothing is lost.")
print(("One matrix by hand: fp8.hist(g, \"e4m3\", {scale=1}) vs fp8.hist(g, \"e4m3\") — here %s:"):format(grads[1][1]))
fp8.hist(grads[1][2], "e4m3", {scale = 1, width = 30})

-- The same run from the same seed, the gradients cast each way before the optimizer sees them.
-- zeroed[i]: gradient values the cast turned into zero, and all values seen, over run i
local zeroed = {}
local function cast(fmt, scaled)
  return function(_, p)
    local q = p.grad:quantize(fmt, scaled and {} or {scale = 1})
    local z = zeroed[#zeroed]
    z[1], z[2] = z[1] + q:underflow(), z[2] + p.grad:numel()
    p.grad = q:dequantize()
  end
end
local runs = {
  { "fp32 gradients", nil },
  { "E4M3, no scale", cast("e4m3", false) },
  { "E5M2, no scale", cast("e5m2", false) },
  { "E4M3, per-tensor scale", cast("e4m3", true) },
  { "E5M2, per-tensor scale", cast("e5m2", true) },
}
print(("\nTraining %d steps (AdamW, lr 3e-3, no weight decay) from the same seed, gradients cast before each step"
  .. " (loss: first step -> mean of the last %d):"):format(opts.steps, math.min(10, opts.steps)))
local curves = {}
if opts.quick then table.remove(runs, 5); table.remove(runs, 3) end   -- fp32, E4M3 unscaled, E4M3 scaled
for i, r in ipairs(runs) do
  local m, nb = C.gpt(opts)
  zeroed[i] = { 0, 0 }
  local start = {}
  for j, np in ipairs(m:named_parameters()) do start[j] = np[2]:clone() end
  curves[i] = C.train(m, nb, opts.steps, r[2])
  -- weights that never moved: their gradient was zero at every step (AdamW without weight decay)
  local frozen, nw = 0, 0
  for j, np in ipairs(m:named_parameters()) do
    local moved = (np[2] - start[j]):abs():sign():sum():item()
    frozen, nw = frozen + np[2]:numel() - moved, nw + np[2]:numel()
  end
  local first, last = curves[i][1], 0
  local k = math.min(10, opts.steps)
  for s = opts.steps - k + 1, opts.steps do last = last + curves[i][s] / k end
  local z = zeroed[i][2] > 0 and zeroed[i][1] / zeroed[i][2] or 0
  res[i] = { first = first, last = last, drop = first - last, zeroed = z, frozen = frozen / nw }
  print(("  %-24s loss %.3f -> %.3f; gradient values zeroed %6.2f%%; weights never moved %6.2f%%"):format(r[1],
    first, last, 100 * z, 100 * frozen / nw))
end
print("Look at: in the unscaled E4M3 run more than half of the gradient values are zero at a typical step, and")
print("the weights whose gradient was zero at every step did not move at all: that part of the model stalled. AdamW")
print("moves the weights whose gradients survive (it normalises their size), so on this tiny model the loss")
print("lags rather than stops; the scaled runs follow the fp32 curve.")

local rows = {}
for s = 1, opts.steps do
  local row = { s }
  for i = 1, #runs do row[#row + 1] = curves[i][s] end
  rows[s] = row
end
local header = { "step" }
for i, r in ipairs(runs) do header[i + 1] = r[1]:gsub("[, ]+", "_") end
local csv = C.write_csv(opts.out .. "/01_why_scale.csv", header, rows)
local series = {}
for i, r in ipairs(runs) do series[i] = { x = 1, y = i + 1, title = r[1] } end
C.plot{ csv = csv, png = opts.out .. "/01_why_scale.png", title = "Lesson 1: training loss with gradients cast to FP8",
        xlabel = "step", ylabel = "training loss", series = series }

-- What the spec (tests/spec/lessons_spec.lua) checks, printed in one parseable line.
print(("RESULT underflow_e4m3=%.6f underflow_e5m2=%.6f underflow_e4m3_scaled=%.6f underflow_e5m2_scaled=%.6f "
  .. "drop_fp32=%.4f drop_e4m3_noscale=%.4f drop_e4m3_scaled=%.4f zeroed_e4m3_noscale=%.6f zeroed_e4m3_scaled=%.6f frozen_fp32=%.6f frozen_e4m3_noscale=%.6f frozen_e4m3_scaled=%.6f")
  :format(res.e4m3, res.e5m2, res.e4m3_scaled, res.e5m2_scaled, res[1].drop, res[2].drop,
  res[opts.quick and 3 or 4].drop, res[2].zeroed, res[opts.quick and 3 or 4].zeroed, res[1].frozen, res[2].frozen, res[opts.quick and 3 or 4].frozen))
