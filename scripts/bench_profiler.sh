#!/usr/bin/env bash
# bench_profiler.sh [BUILD] — profiler overhead: the Fashion-MNIST MLP training step (784-512-256-10,
# batch 256, AdamW, fp32, as scripts/bench_train.lua --model mlp) with the profiler off and recording
# with more and more options; plus the cost of one recorded event on a tiny op. The machine is shared,
# so off and on are compared step by step: a profiler with schedule {wait=1, warmup=0, active=1}
# alternates unrecorded and recorded steps, and the median of the paired ratios counts. Writes the
# "## Profiler overhead" section of docs/performance.md. PAIRS (default 100) pairs per configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/perfdoc.sh
B=${1:-build}
PAIRS=${PAIRS:-100}
start=$(machine_line)
lua=$(mktemp /tmp/bench_profiler.XXXXXX.lua)
trap 'rm -f "$lua"' EXIT
cat > "$lua" <<'LUA'
local pairs_n = tonumber(arg[1])
local nn, optim, F, profiler = fp8.nn, fp8.optim, fp8.nn.functional, fp8.profiler
local clock = require("fp8._data").clock
fp8.manual_seed(0)
local model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
local acc = fp8.Accelerator{}
model, opt = acc:prepare(model, opt)
local x = fp8.randn{ 256, 784 }
local labels = {}
for j = 1, 256 do labels[j] = (j * 7) % 10 end
local y = fp8.tensor(labels)
local function train_step()
  local loss = F.cross_entropy(model(x), y)
  opt:zero_grad(); acc:backward(loss); opt:step()
end
local a = fp8.randn{ 4, 4 }
local TINY = 2000
local function tiny_step() for _ = 1, TINY do local _ = a + a end end

local function median(t)
  table.sort(t)
  local n = #t
  return n % 2 == 1 and t[(n + 1) // 2] or (t[n // 2] + t[n // 2 + 1]) / 2
end

-- Alternating unrecorded (wait) and recorded (active) steps under one profiler: median off time,
-- median paired overhead, events per recorded step, median prof:step() time after a recorded step
-- (the window's events turned into Lua tables).
local function measure(work, opts)
  local o = { schedule_option = { wait = 1, warmup = 0, active = 1 } }
  for k, v in pairs(opts) do o[k] = v end
  local prof = profiler.profile(o)
  for _ = 1, 4 do work() end
  collectgarbage("collect")
  prof:start()
  local off, ratio, fin = {}, {}, {}
  local last_off
  for k = 0, 2 * pairs_n - 1 do
    local t0 = clock()
    work()
    local t1 = clock()
    prof:step()
    local t2 = clock()
    if k % 2 == 0 then
      last_off = t1 - t0
      off[#off + 1] = last_off
    else
      ratio[#ratio + 1] = (t1 - t0) / last_off
      fin[#fin + 1] = t2 - t1
    end
  end
  prof:stop()
  return median(off), median(ratio) - 1, #prof:events() / pairs_n, median(fin)
end

local CONFIGS = {
  { "times only", {} },
  { "record_shapes + with_flops", { record_shapes = true, with_flops = true } },
  { "record_shapes + with_flops + profile_memory + with_modules",
    { record_shapes = true, with_flops = true, profile_memory = true, with_modules = true } },
}
for _ = 1, 3 do train_step() end
for _, c in ipairs(CONFIGS) do
  local off, over, ev, fin = measure(train_step, c[2])
  print(("mlp|%s|%.3f|%.3f|%+.1f%%|%.0f|%.3f"):format(c[1], off * 1e3, off * (1 + over) * 1e3, over * 100, ev, fin * 1e3))
end
for _, c in ipairs { CONFIGS[1], CONFIGS[2] } do
  local off, over, ev = measure(tiny_step, c[2])
  print(("tiny|%s|%.0f|%.0f|%.2f"):format(c[1], off / TINY * 1e9, off * over / TINY * 1e9, ev / TINY))
end
LUA
out=$(run_ok "the profiler bench ($lua $PAIRS)" "$B/fp8lab" "$lua" "$PAIRS")
need "the profiler bench" "$out" '^mlp\|'
need "the profiler bench" "$out" '^tiny\|'
echo "$out"
table=$(grep '^mlp|' <<<"$out" | awk -F'|' '{ printf "| %s | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $6, $7 }')
tiny=$(grep '^tiny|' <<<"$out" | awk -F'|' '{ printf "| %s | %s | %s | %s |\n", $2, $3, $4, $5 }')
body="## Profiler overhead

Measured $(date -u '+%Y-%m-%d %H:%M UTC') on ${start}, command \`scripts/bench_profiler.sh $B\`
(PAIRS=$PAIRS): one training step of the Fashion-MNIST MLP (784-512-256-10, batch 256, AdamW, fp32, through
fp8.Accelerator, as \`scripts/bench_train.lua --model mlp\`). The machine is shared and noisy (other builds and
benchmarks run beside this one), so off and on are compared step by step in one process: a profiler with
\`schedule_option={wait=1, warmup=0, active=1}\` alternates a step that is not recorded (the recorder is off: each op
pays one predictable branch on a global flag) with a recorded one, and the overhead is the median over $PAIRS pairs
of (recorded step time / preceding unrecorded step time) - 1; \"ms / step, on\" is the median off time times that.
\"window ms\" is the median time of the \`prof:step()\` that ends a recorded window (its events become Lua tables),
outside the step time.

| options | ms / step, off | ms / step, on | overhead | events / step | window ms |
|---|---|---|---|---|---|
${table}

The cost of one event, on a tiny op (\`a + a\` on [4, 4] tensors, 2000 per step, same pairing); the op time
includes the Lua call, the result's allocation and its collection:

| options | ns / op, off | extra ns / recorded op | events / op |
|---|---|---|---|
${tiny}"
write_section "## Profiler overhead" "$body"
