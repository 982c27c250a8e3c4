#!/usr/bin/env bash
# bench_train.sh BUILD — one training step of the MLP and the small GPT in fp8lab (fp32 and bf16
# autocast, 1 and 2 threads) and in PyTorch (Debian's python3-torch, fp32, 1 and 2 threads), all in
# one run; writes the table into docs/performance.md. Skips the PyTorch rows when torch is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/perfdoc.sh
B=${1:-build}
STEPS=${STEPS:-10}
rows=""
add() { # add IMPL THREADS PRECISION LINE
  local m ms rss
  m=$(sed -n 's/.*model=\([a-z]*\).*/\1/p' <<<"$4"); ms=$(sed -n 's/.*ms_per_step=\([0-9.]*\).*/\1/p' <<<"$4")
  rss=$(sed -n 's/.*peak_rss_mib=\([0-9.]*\).*/\1/p' <<<"$4")
  rows+="| $m | $1 | $3 | $2 | $ms | $rss |"$'\n'
  echo "$1 $3 threads=$2: $4"
}
for t in 1 2; do
  for mp in no bf16; do
    while read -r line; do add fp8lab "$t" "$([ $mp = no ] && echo fp32 || echo bf16-autocast)" "$line"; done \
      < <(OMP_NUM_THREADS=$t "$B/fp8lab" scripts/bench_train.lua --steps "$STEPS" --mixed-precision $mp)
  done
  if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    while read -r line; do add "PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')" "$t" fp32 "$line"; done \
      < <(OMP_NUM_THREADS=$t /usr/bin/python3 scripts/bench_train_torch.py "$t" "$STEPS")
  fi
done
body="## Training step vs PyTorch (CPU)

Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(machine_line), command \`make bench\` (\`scripts/bench_train.sh\`:
\`scripts/bench_train.lua\` and \`scripts/bench_train_torch.py\`, $STEPS timed steps after 3 warm-up steps, each process
measuring its own peak RSS). One step = forward, cross-entropy, backward, AdamW. MLP 784-512-256-10 at batch 256;
GPT 4 layers, d=256, 4 heads, T=128, batch 16, vocab 96 (pre-LN, GELU tanh, tied head; PyTorch 1.13 has no
fused attention, so its attention is written out as matmul + mask + softmax + matmul).

| model | implementation | precision | threads | ms / step | peak RSS (MiB) |
|---|---|---|---|---|---|
$rows"
write_section "## Training step vs PyTorch (CPU)" "$body"
