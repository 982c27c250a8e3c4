-- crash_writer.lua DIR [verify] — for crash_spec.lua: resumes from the latest checkpoint in DIR/checkpoints
-- (if any), then forever: one training step, print "pre N LOSS" (N the checkpoint about to be
-- written, LOSS the eval loss of the state it holds, %a), save_state(). The spec kills it with -9. With "verify": load the latest checkpoint, print
-- "loaded N LOSS", exit.
local dir = arg[1]
io.stdout:setvbuf("line")
local nn, F = fp8.nn, fp8.nn.functional
fp8.manual_seed(0)
local model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 128))
local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-3 })
local pc = fp8.ProjectConfiguration { project_dir = dir, automatic_checkpoint_naming = true, total_limit = 2 }
local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.MSAMPRecipeKwargs { opt_level = "O2" } },
                              project_config = pc, config = false, env = {}, cpu = true }
model, opt = acc:prepare(model, opt)
local C = require "fp8._checkpoint"
local have = false   -- a complete checkpoint_N (a killed save leaves only checkpoint_N.tmp)
for _, n in ipairs(C.listdir(dir .. "/checkpoints") or {}) do have = have or n:match("^checkpoint_%d+$") ~= nil end
if have then acc:load_state() end
fp8.manual_seed(42)
local x, y = fp8.randn { 16, 128 }, fp8.randn { 16, 128 }
local function eval_loss()
  model:eval()
  local l = fp8.no_grad(function() return F.mse_loss(model(x), y):item() end)
  model:train()
  return l
end
if arg[2] == "verify" then   -- the state of the latest checkpoint, as the writer saw it
  if not have then print("no checkpoint yet") return end
  print(("loaded %d %a"):format(pc.iteration - 1, eval_loss()))
  return
end
print("ready")
local deadline = os.time() + 60   -- bounded even if nobody kills it
while os.time() < deadline do
  local loss = F.mse_loss(model(x), y)
  acc:backward(loss); opt:step(); opt:zero_grad()
  print(("pre %d %a"):format(pc.iteration, eval_loss()))
  acc:save_state()
end
