-- lowlevel.lua MODE — fp8._dist's collectives under 2 processes (tests/spec/dist2_spec.lua):
--   agree   buffers that differ across ranks (dtype, element count, an FP8 tensor's scale) are one error on every rank,
--           never a sum or concatenation of unrelated bytes; FP8 bytes of one scale are combined and keep that scale
local D = require "fp8._dist"
local acc = fp8.Accelerator { cpu = true, kwargs_handlers = { fp8.InitProcessGroupKwargs { timeout = 20 } } }
local r = acc.process_index
local function vals(t) return table.concat(t:reshape { -1 }:to("fp32"):totable(), ",") end
local function try(what, f, ...)
  local ok, e = pcall(f, ...)
  print(("rank%d %s=%s"):format(r, what, ok and vals(e:is_fp8() and e:dequantize() or e) or tostring(e)))
end
try("ar_dtype", D.all_reduce, fp8.tensor({ 1, 2 }, { dtype = r == 0 and "fp32" or "bf16" }), "sum")
try("ar_numel", D.all_reduce, fp8.ones { 2 + r }, "sum")
try("ag_dtype", D.all_gather, fp8.tensor({ 1, 2 }, { dtype = r == 0 and "fp32" or "fp16" }))
-- amax 4 on rank 0, 8 on rank 1: two scales
try("ar_scale", D.all_reduce, fp8.tensor({ 1, 4 * (r + 1) }):quantize("e4m3"), "sum")
try("ag_scale", D.all_gather, fp8.tensor({ 1, 4 * (r + 1) }):quantize("e4m3"))
-- one scale (amax 112 everywhere, scale_inv 1/4): the values travel exactly
try("ag_fp8", D.all_gather, fp8.tensor({ 1 + r, 112 }):quantize("e4m3"))
try("ar_fp8", D.all_reduce, fp8.tensor({ 1 + r, 112 }):quantize("e4m3"), "sum")
try("rs_fp8", D.reduce_scatter, fp8.tensor({ 1 + r, 112, 2, 3 }):quantize("e4m3"), "sum")
