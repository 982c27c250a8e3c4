-- 02_why_hybrid.lua — lesson 2 (docs/concepts.md, "Lesson 2: why HYBRID"): the real weight gradients of
-- the tiny char GPT, each cast with a per-tensor scale (fp8_max / amax) to E4M3 and to E5M2: the
-- relative error of each (E4M3 has one more mantissa bit) against the share of values each loses to
-- underflow (E5M2 spans 2^32 against E4M3's 2^18), and how many binades the gradient spans.
-- Run: build/fp8lab scripts/lessons/02_why_hybrid.lua [--quick] [--steps N (training before the look)]
local fp8 = fp8 or require "fp8"
local C = dofile(((arg and arg[0] or "scripts/lessons/x"):match("^(.*)/[^/]*$") or ".") .. "/common.lua")
local opts = C.parse(arg, "02_why_hybrid", "Lesson 2: E4M3 vs E5M2 for gradients.",
  { size = { "steps", 100, 10, "training steps before the gradients are taken", 1 }, gpt = true })

local model, next_batch, _, path = C.gpt(opts, { layers = 2 })
print(("Lesson 2 — why HYBRID. Tiny char GPT (%d parameters) on %s, gradients after %d training steps.")
  :format(model:num_parameters(), path, opts.steps))
local grads = C.gradients(model, next_batch, opts.steps)

local function cast(g, fmt)
  local q = g:quantize(fmt)
  local err = (q:dequantize() - g):abs():sum():item() / g:abs():sum():item()
  return err, q:underflow() / g:numel()
end
print(("  %-26s %8s %12s %12s %12s %12s"):format("weight gradient", "binades", "err E4M3", "err E5M2", "unfl E4M3",
  "unfl E5M2"))
local rows, tot = {}, { e4 = 0, e5 = 0, u4 = 0, u5 = 0, n = 0 }
for i, g in ipairs(grads) do
  local t = g[2]
  local amax = t:abs():max():item()
  -- binades from the smallest nonzero |g| to amax: the dynamic range the format must hold
  local minnz = math.huge
  for _, v in ipairs(t:reshape(t:numel()):totable()) do
    local a = math.abs(v)
    if a > 0 and a < minnz then minnz = a end
  end
  local span = math.log(amax / minnz, 2)
  local e4, u4 = cast(t, "e4m3")
  local e5, u5 = cast(t, "e5m2")
  local n = t:numel()
  tot.e4, tot.e5, tot.u4, tot.u5, tot.n = tot.e4 + e4 * n, tot.e5 + e5 * n, tot.u4 + u4 * n, tot.u5 + u5 * n, tot.n + n
  rows[i] = { i, e4, e5, u4, u5, span, g[1] }
  print(("  %-26s %8.1f %11.3f%% %11.3f%% %11.3f%% %11.3f%%"):format(g[1], span, 100 * e4, 100 * e5, 100 * u4, 100 * u5))
end
local res = { e4 = tot.e4 / tot.n, e5 = tot.e5 / tot.n, u4 = tot.u4 / tot.n, u5 = tot.u5 / tot.n }
print(("  %-26s %8s %11.3f%% %11.3f%% %11.3f%% %11.3f%%"):format("all (weighted by size)", "", 100 * res.e4,
  100 * res.e5, 100 * res.u4, 100 * res.u5))
print("  (err: sum |dequantized - g| / sum |g|; unfl: share of nonzero values cast to zero)")
print("Look at: E4M3 rounds about twice as finely (its error is about half E5M2's). With a fresh")
print("per-tensor scale these gradients still fit E4M3's range (2^-9 .. 448, 2^18) with little loss.")

-- The range side: a scale that is k binades too small, as after an amax spike in a delayed recipe's
-- `max` history (lesson 3) or when the gradients shrink between scale updates.
print("\nThe same gradients cast with a scale 2^k too small (amax over-estimated by 2^k):")
print(("  %4s %12s %12s %12s %12s"):format("k", "unfl E4M3", "unfl E5M2", "err E4M3", "err E5M2"))
local sweep = {}
for k = 0, 16, 2 do
  local u4, u5, e4, e5, n = 0, 0, 0, 0, 0
  for _, g in ipairs(grads) do
    local t = g[2]
    local amax = t:abs():max():item() * 2.0 ^ k
    local ref = t:abs():sum():item()
    for _, fmt in ipairs { "e4m3", "e5m2" } do
      local q = t:quantize(fmt, {amax = amax})
      local err = (q:dequantize() - t):abs():sum():item() / ref * t:numel()
      if fmt == "e4m3" then u4, e4 = u4 + q:underflow(), e4 + err else u5, e5 = u5 + q:underflow(), e5 + err end
    end
    n = n + t:numel()
  end
  sweep[#sweep + 1] = { k, u4 / n, u5 / n, e4 / n, e5 / n }
  print(("  %4d %11.3f%% %11.3f%% %11.3f%% %11.3f%%"):format(k, 100 * u4 / n, 100 * u5 / n, 100 * e4 / n, 100 * e5 / n))
end
res.u4_k8, res.u5_k8 = sweep[5][2], sweep[5][3]
print("Look at: as k grows E4M3 loses more and more of the small gradient values and, where its error")
print("passes E5M2's, precision no longer pays; E5M2's 2^32 range absorbs nearly all of the 16 binades (see its")
print("underflow column: only the smallest values, ~21 binades below the largest, reach its bottom). Gradients, whose magnitude moves")
print("the most from step to step, get E5M2; activations and weights, which need precision, get E4M3.")
print(("By hand: fp8.hist(g, \"e4m3\", {amax = 256 * amax}) on one gradient — here %s with k = 8:"):format(grads[1][1]))
fp8.hist(grads[1][2], "e4m3", {width = 30, amax = 256 * grads[1][2]:abs():max():item()})

C.write_csv(opts.out .. "/02_why_hybrid_matrices.csv", { "matrix", "err_e4m3", "err_e5m2", "underflow_e4m3",
  "underflow_e5m2", "binades", "name" }, rows)
local csv = C.write_csv(opts.out .. "/02_why_hybrid.csv", { "k", "underflow_e4m3", "underflow_e5m2", "err_e4m3",
  "err_e5m2" }, sweep)
C.plot{ csv = csv, png = opts.out .. "/02_why_hybrid.png",
        title = "Lesson 2: GPT weight gradients cast with a scale 2^k too small, E4M3 vs E5M2",
        xlabel = "k (binades of mis-scaling)", ylabel = "share of values",
        series = { { x = 1, y = 2, title = "underflow E4M3", style = "points" },
                   { x = 1, y = 3, title = "underflow E5M2", style = "points" },
                   { x = 1, y = 4, title = "relative error E4M3", style = "points" },
                   { x = 1, y = 5, title = "relative error E5M2", style = "points" } } }
print(("RESULT err_e4m3=%.6f err_e5m2=%.6f underflow_e4m3=%.6f underflow_e5m2=%.6f underflow_e4m3_k8=%.6f "
  .. "underflow_e5m2_k8=%.6f"):format(res.e4, res.e5, res.u4, res.u5, res.u4_k8, res.u5_k8))
