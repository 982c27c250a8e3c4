-- oom_ddp.lua RANK HOLE [MODE] — a DDP backward that runs out of memory on one process (tests/spec/oom3_spec.lua,
-- oom4_spec.lua): rank RANK (-1: every rank) takes its address space (under the caller's `ulimit -v`) but for a
-- hole of HOLE MiB (a freed tensor), then every rank runs a synchronising backward; each prints what it met, and the
-- next step on every rank. MODE: plain (the default: fp32 buckets), o1 (MS-AMP O1: FP8 weight gradients, each
-- all-reduced in E4M3 with a shared scale after an amax all-reduce), unused (find_unused_parameters=true, a layer
-- that only rank 0 uses), unused16 (the same with comm_hook="fp16": each bucket packed through an fp32 copy).
local who, hole, mode = tonumber(arg[1]), tonumber(arg[2]), arg[3] or "plain"
local wire16 = mode == "unused16"
if wire16 then mode = "unused" end
local h = { fp8.InitProcessGroupKwargs { backend = "mpi", timeout = 8 }, fp8.DistributedDataParallelKwargs {
  bucket_cap_mb = 1, find_unused_parameters = mode == "unused", comm_hook = wire16 and "fp16" or "no" } }
local opts = { cpu = true, kwargs_handlers = h }
if mode == "o1" then opts.mixed_precision = "fp8"; h[3] = fp8.MSAMPRecipeKwargs { opt_level = "O1" } end
local acc = fp8.Accelerator(opts)
local r = acc.process_index
fp8.manual_seed(1)
local m = fp8.nn.Sequential(fp8.nn.Linear(512, 1024), fp8.nn.GELU(), fp8.nn.Linear(1024, 512))
if mode ~= "plain" then m = fp8.nn.Sequential(m, fp8.nn.GELU(), fp8.nn.Linear(512, 512)) end
local model = mode == "unused" and fp8.nn.Sequential(m, fp8.nn.Linear(512, 512)) or m
local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-3 })
model, opt = acc:prepare(model, opt)
local function loss_of(x)
  if mode ~= "unused" then return model(x):sum() end
  local y = model[1](x)
  if r == 0 then y = model[2](y) end   -- the last Linear: used on rank 0 only
  return y:sum()
end
local x = fp8.randn { 64, 512 }
acc:backward(loss_of(x)); opt:step(); opt:zero_grad()   -- warm: every primitive and bucket made
collectgarbage("stop")
local keep, n = {}, 0
local loss = loss_of(x)
if r == who or who < 0 then
  local pad = hole > 0 and fp8.empty { hole * 262144 }   -- (a block of its own, given back where room is short)
  for _, sz in ipairs { 262144, 4096 } do
    while true do local ok, t = pcall(fp8.empty, { sz }); if not ok then break end n = n + 1; keep[n] = t end
  end
  if pad then pad:free() end
end
local ok, e = pcall(acc.backward, acc, loss)
for i = 1, n do keep[i]:free() end
collectgarbage("restart"); collectgarbage()
io.write(("rank %d: %s\n"):format(r, ok and "ran" or tostring(e):gsub("\n", " ")))
io.flush()
local ok2, e2 = pcall(function() opt:zero_grad(); acc:backward(loss_of(x)); opt:step() end)
io.write(("rank %d next: %s\n"):format(r, ok2 and "ran" or tostring(e2):gsub("\n", " ")))
