-- bench_dist.lua STEPS [PRECISION] — data-parallel GPT step under mpirun -np N (scripts/bench_dist.sh):
-- per rank a batch of 8 sequences of 64 tokens of a 4-layer, d_model 128 GPT (the same model at every N:
-- weak scaling, N x the samples per step). Measures, median over STEPS after 3 warm-up steps:
--   step    forward + backward (+ bucketed all-reduce) + AdamW step
--   bwd     backward with the reducer armed, bwd_local the same backward without it (no_sync)
--   ar      one blocking fp32 all-reduce of all the gradients' bytes (the communication alone)
--   exposed the time the reducer blocked waiting for its buckets after backward, on the rank that
--           waited least (the last to arrive: the other ranks' waits also hold the skew between ranks)
-- hidden = 1 - exposed / ar: the share of the all-reduce that ran behind backward.
-- Rank 0 prints one line "row N step_ms bwd_ms bwd_local_ms ar_ms hidden wire_bytes fp32_bytes exposed_ms".
local fail = require("fp8.args").fail   -- a usage error: the message, no traceback
local USAGE = "usage: fp8lab scripts/bench_dist.lua [STEPS [PRECISION]]   (STEPS: an integer >= 1, default 10; "
  .. "PRECISION: no, te, ao or msamp, default no)"
local argv = arg or {}
if argv[1] == "-h" or argv[1] == "--help" then print(USAGE) return end
if #argv > 2 then fail(("bench_dist.lua: two arguments at most, got %d\n%s"):format(#argv, USAGE)) end
local steps, precision = math.tointeger(tonumber(argv[1] or "10")), argv[2] or "no"
if not steps or steps < 1 then
  fail(("bench_dist.lua: STEPS must be an integer >= 1, got '%s'\n%s"):format(argv[1], USAGE))
end
if not ({ no = true, te = true, ao = true, msamp = true })[precision] then
  fail(("bench_dist.lua: PRECISION must be no, te, ao or msamp, got '%s'\n%s"):format(precision, USAGE))
end
local D = require "fp8._dist"
local nn, data = fp8.nn, fp8.data
local handlers = { fp8.DistributedDataParallelKwargs { bucket_cap_mb = 1 } }
if precision ~= "no" then handlers[#handlers + 1] = fp8.FP8RecipeKwargs { backend = precision } end
local acc = fp8.Accelerator { cpu = true, mixed_precision = precision == "no" and "no" or "fp8", kwargs_handlers = handlers }
fp8.manual_seed(1)
local V, T, Bsz = 64, 64, 8
local model = nn.GPT { vocab_size = V, block_size = T, n_layer = 4, n_head = 4, n_embd = 128 }
local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-3 })
model, opt = acc:prepare(model, opt)
fp8.manual_seed(2 + acc.process_index)
local rows = {}
for b = 1, Bsz do
  rows[b] = {}
  for t = 1, T do rows[b][t] = (b * 31 + t * 7 + acc.process_index * 13) % V end
end
local x = fp8.tensor(rows)
local y = x
local clock = data.clock
local function median(t) table.sort(t); return t[(#t + 1) // 2] end
local st, sb, sl, sa, se = {}, {}, {}, {}, {}
local nbytes = 0
for _, p in ipairs(model:parameters()) do nbytes = nbytes + 4 * p:numel() end
local buf = fp8.zeros { nbytes // 4 }
for i = 1, steps + 3 do
  acc:wait_for_everyone()
  local t0 = clock()
  local _, loss = model(x, y)
  local t1 = clock()
  acc:backward(loss)
  local t2 = clock()
  opt:step(); opt:zero_grad()
  local t3 = clock()
  local exposed = 0
  if acc._ddp_reducer then
    local w = acc:gather(fp8.tensor { acc._ddp_reducer:stats().wait_s }):totable()
    exposed = math.min(table.unpack(w))
  end
  -- the same backward without communication
  acc:wait_for_everyone()
  local _, loss2 = model(x, y)
  local t4 = clock()
  acc:no_sync(model, function() acc:backward(loss2) end)
  local t5 = clock()
  opt:zero_grad()
  acc:wait_for_everyone()
  local t6 = clock()
  if acc.num_processes > 1 then D.all_reduce(buf, "sum") end
  local t7 = clock()
  if i > 3 then
    st[#st + 1], sb[#sb + 1], sl[#sl + 1], sa[#sa + 1], se[#se + 1] = t3 - t0, t2 - t1, t5 - t4, t7 - t6, exposed
  end
end
local s = acc._ddp_reducer and acc._ddp_reducer:stats() or { wire_bytes = 0 }
local b, l, a = median(sb), median(sl), median(sa)
local e = median(se)
local hidden = a > 0 and math.max(0, math.min(1, 1 - e / a)) or 0 / 0
acc:print(("row %d %.2f %.2f %.2f %.3f %.2f %d %d %.3f"):format(acc.num_processes, 1e3 * median(st), 1e3 * b, 1e3 * l,
  1e3 * a, hidden, s.wire_bytes, nbytes, 1e3 * e))
