-- ddp_fault.lua MODE — a DDP step under FP8LAB_FAULT_DIST (core/fault.h, a test hook) on two processes
-- (tests/spec/ddpfault_spec.lua): a warm step, then the step the fault lands in, then one more; each rank prints what
-- each step met and its parameters' sum after them, so that a rank whose step ran while the other's failed shows.
-- MODE: plain (fp32 buckets), unused (find_unused_parameters=true, the last Linear used on rank 0 only: rank 1's
-- write-back makes its .grad), o1 (MS-AMP O1: each FP8 weight gradient after its amax's blocking all-reduce), te
-- (TransformerEngine's delayed scaling: one all-reduce of every amax in the step), fp16 (plain with comm_hook="fp16":
-- each bucket packed through an fp32 copy).
local mode = arg[1] or "plain"
local h = { fp8.InitProcessGroupKwargs { backend = "mpi", timeout = 30 },
  fp8.DistributedDataParallelKwargs { bucket_cap_mb = 1, find_unused_parameters = mode == "unused",
    comm_hook = mode == "fp16" and "fp16" or "no" } }
local opts = { cpu = true, kwargs_handlers = h }
if mode == "o1" then opts.mixed_precision = "fp8"; h[3] = fp8.MSAMPRecipeKwargs { opt_level = "O1" } end
if mode == "te" then opts.mixed_precision = "fp8"; h[3] = fp8.TERecipeKwargs {} end
local acc = fp8.Accelerator(opts)
local r = acc.process_index
fp8.manual_seed(1)
local body = fp8.nn.Sequential(fp8.nn.Linear(32, 32), fp8.nn.GELU(), fp8.nn.Linear(32, 32))
local model = mode == "unused" and fp8.nn.Sequential(body, fp8.nn.Linear(32, 32)) or body
local opt = (mode == "o1" and fp8.optim.AdamW or fp8.optim.SGD)(model:parameters(), { lr = 0.01 })
model, opt = acc:prepare(model, opt)
fp8.manual_seed(10 + r)   -- each rank its own batch
local x = fp8.randn { 16, 32 }
local function loss_of()
  if mode ~= "unused" then return model(x):sum() end
  local y = model[1](x)
  if r == 0 then y = model[2](y) end
  return y:sum()
end
local function step()
  opt:zero_grad()
  acc:backward(loss_of())
  opt:step()
end
local function psum()
  local s = 0
  for _, p in ipairs(model:parameters()) do s = s + p:to("f32"):sum():item() end
  return s
end
step()
for _, name in ipairs { "step", "next" } do
  local ok, e = pcall(step)
  io.write(("rank %d %s: %s\n"):format(r, name, ok and "ran" or tostring(e):gsub("\n", " ")))
  io.flush()
end
io.write(("rank %d sum: %.9g\n"):format(r, psum()))
io.flush()
