-- 04_tensorwise_vs_rowwise.lua — lesson 4 (docs/concepts.md, "Lesson 4: tensorwise vs rowwise"): a
-- matrix whose rows differ in magnitude (a few outlier rows, as activations of a transformer have),
-- cast to E4M3 with one scale for the whole tensor and with one scale per row (torchao's rowwise):
-- the relative error of each row under each, and the share of values that underflow.
-- Run: build/fp8lab scripts/lessons/04_tensorwise_vs_rowwise.lua [--quick] [--out DIR] [--outlier X]
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local fp8 = fp8 or require "fp8"
local C = dofile(((arg and arg[0] or "scripts/lessons/x"):match("^(.*)/[^/]*$") or ".") .. "/common.lua")
local opts = C.parse(arg, "04_tensorwise_vs_rowwise", "Lesson 4: tensorwise vs rowwise scaling.", {
  -- every 8th row (the first among them) is an outlier: two rows hold one of each
  size = { "rows", 64, 16, "rows of the matrix", 2 },
  extra = { { "outlier", "num", 5e4, "magnitude of the outlier rows relative to the others" } } })
-- the rows' fp32 values (N(0,1) times the gain) and their sums over 256 columns must stay finite and normal
if not (opts.outlier >= 1e-30 and opts.outlier <= 1e30) then
  fail(("option --outlier expects a number in [1e-30, 1e30] (the outlier rows' values and their sums stay finite in "
    .. "fp32), got %s"):format(opts.outlier))
end

local rows, cols = opts.rows, 256
fp8.manual_seed(opts.seed)
local x = fp8.randn{rows, cols}
-- every 8th row is an outlier row, `outlier` times larger
local gain = {}
for r = 1, rows do gain[r] = { (r - 1) % 8 == 0 and opts.outlier or 1 } end
x = x * fp8.tensor(gain)
print(("Lesson 4 — tensorwise vs rowwise. A %dx%d matrix of N(0,1) values, every 8th row x%g."):format(rows, cols,
  opts.outlier))

local function row_errors(q)
  local d = q:dequantize()
  local err = ((d - x):abs():sum(2)):totable()
  local ref = (x:abs():sum(2)):totable()
  local out = {}
  for r = 1, rows do out[r] = err[r] / ref[r] end
  return out, q:underflow() / x:numel()
end
local tw, tw_unf = row_errors(x:quantize("e4m3"))
local rw, rw_unf = row_errors(x:quantize("e4m3", {axis = 1}))
local function mean(t, pick)
  local s, n = 0, 0
  for r = 1, rows do if pick(r) then s, n = s + t[r], n + 1 end end
  return s / n
end
local function is_out(r) return (r - 1) % 8 == 0 end
local function is_norm(r) return not is_out(r) end
local res = { tw_normal = mean(tw, is_norm), tw_outlier = mean(tw, is_out), rw_normal = mean(rw, is_norm),
              rw_outlier = mean(rw, is_out) }
print(("  %-34s %14s %14s %11s"):format("E4M3 cast", "normal rows", "outlier rows", "underflow"))
print(("  %-34s %13.3f%% %13.3f%% %10.2f%%"):format("tensorwise (one scale)", 100 * res.tw_normal,
  100 * res.tw_outlier, 100 * tw_unf))
print(("  %-34s %13.3f%% %13.3f%% %10.2f%%"):format("rowwise (one scale per row)", 100 * res.rw_normal,
  100 * res.rw_outlier, 100 * rw_unf))
print("  (mean relative error per row: sum |dequantized - x| / sum |x|)")
print("Look at: with one scale the outlier rows set it, and the normal rows fall to the bottom of E4M3's")
print("range (subnormals, zeros); with a scale per row every row uses the whole range and errs ~2-3%.")
print("By hand: fp8.hist(x:narrow(1, 2, 1), \"e4m3\", {amax = x:abs():max():item()}) shows a normal row cast")
print("with the tensor's scale.")

local data_rows = {}
for r = 1, rows do data_rows[r] = { r, tw[r], rw[r] } end
local csv = C.write_csv(opts.out .. "/04_tensorwise_vs_rowwise.csv", { "row", "tensorwise", "rowwise" }, data_rows)
C.plot{ csv = csv, png = opts.out .. "/04_tensorwise_vs_rowwise.png", logy = true,
        title = ("Lesson 4: relative E4M3 error per row (every 8th row x%g)"):format(opts.outlier),
        xlabel = "row", ylabel = "relative error (log scale)",
        series = { { x = 1, y = 2, title = "tensorwise", style = "points" }, { x = 1, y = 3, title = "rowwise", style = "points" } } }
print(("RESULT tw_normal=%.6f tw_outlier=%.6f rw_normal=%.6f rw_outlier=%.6f tw_underflow=%.6f rw_underflow=%.6f")
  :format(res.tw_normal, res.tw_outlier, res.rw_normal, res.rw_outlier, tw_unf, rw_unf))
