-- bench_clkeep.lua REPS DTYPE LAYOUT (cl or nchw): the ops of docs/performance.md "channels_last carried through (stop
-- 101)" on [32, 128, 32, 32] and a small CNN step, each the fastest of REPS calls after one warm-up (process CPU time, ms)
if #arg > 3 then error(("three arguments at most, got %d"):format(#arg), 0) end
local reps, dt, lay = math.tointeger(tonumber(arg[1] or "5")), arg[2] or "fp32", arg[3] or "cl"
if not reps or reps < 1 then error(("REPS must be an integer >= 1, got '%s'"):format(arg[1]), 0) end
if dt ~= "fp32" and dt ~= "bf16" then error(("DTYPE must be fp32 or bf16, got '%s'"):format(dt), 0) end
if lay ~= "cl" and lay ~= "nchw" then error(("LAYOUT must be cl or nchw, got '%s'"):format(lay), 0) end
local F = fp8.nn.F
local function cl(t) return t:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3) end
local function mk(shape) local t = fp8.randn(shape):to(dt); return lay == "cl" and cl(t) or t end
fp8.manual_seed(1)
local x, y = mk({ 32, 128, 32, 32 }), mk({ 32, 128, 32, 32 })
local function best(f)
  f()
  local b = math.huge
  for _ = 1, reps do local t0 = os.clock(); f(); local t = os.clock() - t0; if t < b then b = t end end
  return b * 1000
end
local other = dt == "fp32" and "bf16" or "fp32"
local rows = {
  { "relu", function() return x:relu() end },
  { "add", function() return x + y end },
  { "mul", function() return x * y end },
  { "gelu", function() return F.gelu(x) end },
  { "silu", function() return F.silu(x) end },
  { "to_" .. other, function() return x:to(other) end },
  { "sum", function() return x:sum() end },
  { "amax", function() return x:amax() end },
}
for _, r in ipairs(rows) do io.write(("%s %.3f\n"):format(r[1], best(r[2]))) end
-- a small CNN's training step: three conv3x3+relu layers (3 -> 32 -> 64 -> 64 at [16, 3, 32, 32]), the mean of the
-- last, backward, SGD
-- fp32 weights (the masters), cast to the dtype in the forward
local w = { mk({ 32, 3, 3, 3 }) * 0.2, mk({ 64, 32, 3, 3 }) * 0.05, mk({ 64, 64, 3, 3 }) * 0.04 }
for i = 1, 3 do w[i] = w[i]:detach():float():requires_grad_() end
local opt = fp8.optim.SGD(w, { lr = 1e-3 })
local xi = mk({ 16, 3, 32, 32 })
local function step()
  local h = xi
  for i = 1, 3 do h = F.conv2d(h, dt == "fp32" and w[i] or w[i]:to(dt), nil, { padding = 1 }):relu() end
  h:float():mean():backward()
  opt:step()
  opt:zero_grad()
end
io.write(("cnn_step %.3f\n"):format(best(step)))
