-- fp8_allreduce.lua — MS-AMP's FP8 gradient all-reduce against the fp32 all-reduce of the same
-- gradients, 2 processes (tests/spec/dist_spec.lua, docs/distributed.md):  fp8_allreduce.lua [ROWS] [FACTOR]
-- Each rank holds E4M3 gradients of different magnitudes (rank 1's are FACTOR x larger); the reducer averages
-- them in E4M3 with a shared scale; the reference is the fp32 mean of the same dequantized gradients.
-- Prints "fp8_allreduce nmse=<> max_rel=<> underflow=<> saturated=<> n=<>" on rank 0.
local R = require "fp8._fp8_layer"
local D = require "fp8._dist"
local acc = fp8.Accelerator { cpu = true }
local r = acc.process_index
fp8.manual_seed(11 + r)
local rows, factor = tonumber(arg[1] or "64"), tonumber(arg[2] or "8")
local params, names = {}, {}
for i = 1, 3 do
  local p = fp8.randn { rows, 32 }:to("fp16")
  p:requires_grad(true)
  R.set_grad_dtype(p, "e4m3")
  params[i], names[i] = p, "w" .. i
end
local red = D.ddp(params, names, { bucket_cap_mb = 25 })
local coef = {}
for i = 1, 3 do
  local c = fp8.randn { rows, 32 } * (r == 1 and factor or 1)
  c:set({ 1, 1 }, 1e-6)                 -- tiny: underflows once divided by N on the wire
  coef[i] = c
end
local loss = (params[1]:to("fp32") * coef[1]):sum() + (params[2]:to("fp32") * coef[2]):sum()
  + (params[3]:to("fp32") * coef[3]):sum()
-- the local FP8 gradients, dequantized, before the reduction overwrites them
loss:backward()   -- not armed: local gradients only
local ref = {}
for i = 1, 3 do
  local g = params[i].grad:dequantize()
  ref[i] = acc:reduce(g, "mean")
end
red:begin()
for i = 1, 3 do params[i].grad = nil end
loss = (params[1]:to("fp32") * coef[1]):sum() + (params[2]:to("fp32") * coef[2]):sum()
  + (params[3]:to("fp32") * coef[3]):sum()
loss:backward()
red:finish()
local se, ss, maxrel = 0, 0, 0
for i = 1, 3 do
  local got = params[i].grad:dequantize()
  local d = got - ref[i]
  se = se + (d * d):sum():item()
  ss = ss + (ref[i] * ref[i]):sum():item()
  maxrel = math.max(maxrel, d:abs():max():item() / ref[i]:abs():max():item())
end
local st = red:stats()
acc:print(("fp8_allreduce nmse=%.3g max_rel=%.3g underflow=%d saturated=%d n=%d wire_bytes=%d fp32_bytes=%d"):format(
  se / ss, maxrel, st.fp8_underflow, st.fp8_saturated, st.fp8_n, st.wire_bytes, 4 * st.fp8_n))
