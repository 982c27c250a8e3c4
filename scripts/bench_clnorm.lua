-- bench_clnorm.lua REPS DTYPE LAYOUT (cl or nchw): docs/performance.md "channels_last through norms and pooling (stop
-- 104)" and "The bf16 channels_last CNN step on Zen 3 (stop 105)": batch_norm (training), group_norm, max_pool2d,
-- avg_pool2d, dropout and (stop 105) adaptive_avg_pool2d to 1×1 and adaptive_max_pool2d to 5×5, forward and backward, on
-- [16, 64, 32, 32], and a small CNN's training step with them (conv3x3 + batch_norm + relu + max_pool2d, twice, then
-- adaptive_avg_pool2d to 1×1 and a linear head), each the fastest of REPS calls after one warm-up (process CPU time,
-- ms; run it with OMP_NUM_THREADS=1)
if #arg > 3 then error(("three arguments at most, got %d"):format(#arg), 0) end
local reps, dt, lay = math.tointeger(tonumber(arg[1] or "5")), arg[2] or "fp32", arg[3] or "cl"
if not reps or reps < 1 then error(("REPS must be an integer >= 1, got '%s'"):format(arg[1]), 0) end
if dt ~= "fp32" and dt ~= "bf16" then error(("DTYPE must be fp32 or bf16, got '%s'"):format(dt), 0) end
if lay ~= "cl" and lay ~= "nchw" then error(("LAYOUT must be cl or nchw, got '%s'"):format(lay), 0) end
local F = fp8.nn.F
local function cl(t) return t:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3) end
local function mk(shape) local t = fp8.randn(shape):to(dt); return lay == "cl" and cl(t) or t end
fp8.manual_seed(1)
local function best(f)
  f()
  local b = math.huge
  for _ = 1, reps do local t0 = os.clock(); f(); local t = os.clock() - t0; if t < b then b = t end end
  return b * 1000
end
local C = 64
local x = mk({ 16, C, 32, 32 })
local gy = mk({ 16, C, 32, 32 })
local w, b = fp8.ones({ C }), fp8.zeros({ C })
local rm, rv = fp8.zeros({ C }), fp8.ones({ C })
local function fb(f)   -- forward, then backward of y with a gradient of y's layout
  return function()
    local leaf = x:detach():requires_grad_()
    local y = f(leaf)
    y:backward(y:dim() == 4 and y:size(3) == 32 and gy or (lay == "cl" and cl(fp8.ones(y:shape()):to(dt))
      or fp8.ones(y:shape()):to(dt)))
  end
end
local rows = {
  { "batch_norm", fb(function(t) return F.batch_norm(t, rm, rv, w, b, true) end) },
  { "group_norm", fb(function(t) return F.group_norm(t, 8, w, b) end) },
  { "max_pool2d", fb(function(t) return F.max_pool2d(t, 2) end) },
  { "avg_pool2d", fb(function(t) return F.avg_pool2d(t, 2) end) },
  { "dropout", fb(function(t) return F.dropout(t, 0.5, true) end) },
  -- (stop 105) the adaptive poolings: a CNN head's global average, and overlapping windows (32 -> 5: a gather)
  { "adaptive_avg_pool2d_1", fb(function(t) return F.adaptive_avg_pool2d(t, 1) end) },
  { "adaptive_max_pool2d_5", fb(function(t) return F.adaptive_max_pool2d(t, 5) end) },
}
for _, r in ipairs(rows) do io.write(("%s %.3f\n"):format(r[1], best(r[2]))) end
-- the CNN step: [16, 3, 32, 32] -> conv 32 -> bn -> relu -> pool -> conv 64 -> bn -> relu -> pool -> gap -> linear 10
local ws = { mk({ 32, 3, 3, 3 }) * 0.2, mk({ 64, 32, 3, 3 }) * 0.05 }
for i = 1, 2 do ws[i] = ws[i]:detach():float():requires_grad_() end
local head = (fp8.randn({ 10, 64 }) * 0.1):requires_grad_()
local params = { ws[1], ws[2], head }
local bnw, bnb, bnm, bnv = {}, {}, {}, {}
for i, c in ipairs { 32, 64 } do
  bnw[i], bnb[i] = fp8.ones({ c }):requires_grad_(), fp8.zeros({ c }):requires_grad_()
  bnm[i], bnv[i] = fp8.zeros({ c }), fp8.ones({ c })
  params[#params + 1], params[#params + 1] = bnw[i], bnb[i]
end
local opt = fp8.optim.SGD(params, { lr = 1e-3 })
local xi = mk({ 16, 3, 32, 32 })
local function step()
  local h = xi
  for i = 1, 2 do
    h = F.conv2d(h, dt == "fp32" and ws[i] or ws[i]:to(dt), nil, { padding = 1 })
    h = F.max_pool2d(F.batch_norm(h, bnm[i], bnv[i], bnw[i], bnb[i], true):relu(), 2)
  end
  h = F.adaptive_avg_pool2d(h, 1):reshape({ 16, 64 }):float()
  local loss = F.linear(h, head):pow(2):mean()
  opt:zero_grad()
  loss:backward()
  opt:step()
end
io.write(("cnn_step %.3f\n"):format(best(step)))
