-- train_equiv.lua — one small seeded training run through fp8.Accelerator, used by
-- tests/spec/dist_spec.lua with 1 process (batch 2B) and 2 processes (batch B each):
--   fp8lab tests/dist/train_equiv.lua MODEL BATCH STEPS BUCKET_MB OUT [PRECISION] [ACCUM] [HOOK] [OPT] [SPLIT] [CKPT]
-- MODEL mlp|gpt; PRECISION no|te|ao|msamp (fp8 recipes); ACCUM gradient accumulation micro-steps per
-- optimizer step (through acc:no_sync); HOOK ddp comm_hook; OPT sgd|adamw; SPLIT "split": the loader's batches
-- are split across the processes (DataLoaderConfiguration{split_batches=true}, BATCH is then the total); CKPT
-- "ckpt": the GPT's blocks are recomputed in the backward (gradient_checkpointing).
-- Rank 0 writes OUT: one "loss <step> <mean
-- loss over all processes, %.9g>" line per optimizer step, then "param <name> <values...>" lines, and for
-- te "scale ..." lines; every rank writes OUT.rank<r> with its scales (te) to compare across ranks.
local model_kind, B, steps, bucket, out = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4]), arg[5]
local precision, accum, hook, optname = arg[6] or "no", tonumber(arg[7] or "1"), arg[8] or "no", arg[9] or "sgd"
local split = arg[10] == "split"
local ckpt = arg[11] == "ckpt"   -- the GPT's blocks through fp8.utils.checkpoint
local nn, optim, data = fp8.nn, fp8.optim, fp8.data

local handlers = { fp8.DistributedDataParallelKwargs { bucket_cap_mb = bucket, comm_hook = hook } }
-- PRECISION may name a variant: ao:rowwise (AORecipeKwargs config), msamp:O1 (opt_level)
local backend, variant = precision:match("^(%a+):?(%S*)$")
if backend == "ao" then
  handlers[#handlers + 1] = fp8.AORecipeKwargs { config = variant ~= "" and variant or nil }
elseif backend == "msamp" then
  handlers[#handlers + 1] = fp8.MSAMPRecipeKwargs { opt_level = variant ~= "" and variant or nil }
elseif precision ~= "no" then
  handlers[#handlers + 1] = fp8.FP8RecipeKwargs { backend = precision }
end
local acc = fp8.Accelerator { mixed_precision = precision == "no" and "no" or "fp8", kwargs_handlers = handlers,
  cpu = true, dataloader_config = fp8.DataLoaderConfiguration { split_batches = split } }

-- rank-dependent seed on purpose: prepare() must broadcast rank 0's weights
fp8.manual_seed(100 + acc.process_index)
local model, items
if model_kind == "mlp" then
  model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 48), nn.GELU(), nn.Linear(48, 10))
  fp8.manual_seed(7)
  items = {}
  for i = 1, 96 do items[i] = { fp8.randn { 32 }, i % 10 } end
else
  model = nn.GPT { vocab_size = 16, block_size = 16, n_layer = 2, n_head = 2, n_embd = 32, gradient_checkpointing = ckpt }
  fp8.manual_seed(7)
  items = {}
  for i = 1, 64 do
    local x, y = {}, {}
    for t = 1, 16 do x[t] = (i * 7 + t * 3 + (t * t) % 5) % 16; y[t] = (x[t] * 5 + 1) % 16 end
    items[i] = { fp8.tensor(x), fp8.tensor(y) }
  end
end
local loader = data.DataLoader { items, batch_size = B, shuffle = true, seed = 3, drop_last = true }
-- SGD by default: Adam divides by sqrt(v), so a gradient that is exactly zero in exact arithmetic (the
-- attention key bias) turns fp32 rounding noise into lr-sized steps, and two summation orders part ways
local opt = optname == "adamw" and optim.AdamW(model:parameters(), { lr = 1e-2, weight_decay = 0.01 })
  or optim.SGD(model:parameters(), { lr = 0.1, momentum = 0.9 })
model, opt, loader = acc:prepare(model, opt, loader)

local function loss_of(x, y)
  if model_kind == "mlp" then return nn.functional.cross_entropy(model(x), y) end
  local _, loss = model(x, y)
  return loss
end

local f = acc.process_index == 0 and assert(io.open(out, "w")) or nil
local step = 0
while step < steps do
  local micro = 0
  for x, y in loader do
    micro = micro + 1
    local loss
    if micro < accum then
      acc:no_sync(model, function() loss = loss_of(x, y); acc:backward(loss / accum) end)
    else
      loss = loss_of(x, y)
      acc:backward(loss / accum)
      opt:step(); opt:zero_grad()
      micro = 0
      step = step + 1
    end
    local mean = acc:reduce(loss:detach(), "mean"):item()
    if f then f:write(("loss %d %.9g\n"):format(step, mean)) end
    if step >= steps and micro == 0 then break end
  end
end
local function scales(w)
  for _, nm in ipairs(acc._fp8_layers) do
    local st = nm[2].fp8_meta:state()
    for _, role in ipairs { "input", "weight", "grad" } do
      local h = st[role].history
      local hs = {}
      for i = 1, math.min(#(h or {}), 32) do hs[i] = ("%.9g"):format(h[i]) end   -- fp32 values: exact in 9 digits
      w(("scale %s %s %.9g %s\n"):format(nm[1], role, st[role].scale, table.concat(hs, ",")))
    end
  end
end
if f then
  for _, np in ipairs(model:named_parameters()) do
    local v = np[2]:to("fp32"):reshape { -1 }:totable()
    for i = 1, #v do v[i] = ("%.9g"):format(v[i]) end
    f:write("param ", np[1], " ", table.concat(v, " "), "\n")
  end
  scales(function(s) f:write(s) end)
  if acc._ddp_reducer then
    local st = acc._ddp_reducer:stats()
    f:write(("ddp buckets=%d started_in_backward=%d wire_bytes=%d steps=%d\n"):format(st.buckets, st.started_in_backward,
      st.wire_bytes, st.steps))
    for _, row in ipairs(fp8.stats(model, { quiet = true })) do
      if row.layer == "(all-reduce)" then f:write(("fp8allreduce n=%d underflow_frac=%.6g saturated_frac=%.6g\n"):format(
        row.numel, row.underflow, row.saturated)) end
    end
  end
  f:close()
end
local g = assert(io.open(out .. ".rank" .. acc.process_index, "w"))
scales(function(s) g:write(s) end)
g:close()
