#!/usr/bin/env bash
# bench_recipes.sh BUILD — scripts/compare_recipes.lua on the full Fashion-MNIST (EPOCHS epochs, default 3,
# same seed for every recipe) and its table into docs/performance.md: test accuracy against fp32, loss,
# time per step, peak allocator memory, and bytes of training state per parameter from the allocator.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/perfdoc.sh
B=${1:-build}
EPOCHS=${EPOCHS:-3}
start=$(machine_line)
out=$(run_ok "scripts/compare_recipes.lua --epochs $EPOCHS" "$B/fp8lab" scripts/compare_recipes.lua --epochs "$EPOCHS" --out "$B/compare_recipes.csv")
echo "$out"
need "scripts/compare_recipes.lua" "$out" '^recipe '
table=$(awk '/^recipe /{on=1; next} /^loss curves/{exit} on && NF { printf "|"; for (i=1;i<=NF;i++) printf " %s |", $i; print "" }' <<<"$out")
table="| recipe | FP8 layers | test acc | vs first row | loss | ms / step | peak MiB | B / param |
|---|---|---|---|---|---|---|---|
$table"
[ -n "$table" ] || bench_fail "scripts/compare_recipes.lua printed no table rows"
body="## FP8 recipes on the Fashion-MNIST MLP (CPU)

Measured $(date -u '+%Y-%m-%d %H:%M UTC') on ${start}, command \`EPOCHS=$EPOCHS scripts/bench_recipes.sh\`
(\`scripts/compare_recipes.lua --epochs $EPOCHS\`): the 784-512-256-10 MLP, AdamW lr 1e-3 with cosine decay, batch 256,
seed 42 for every run, full training and test sets. FP8 = number of Linear layers running FP8 GEMMs (ao keeps the
first and last in high precision, te the 256→10 head whose width is not a multiple of 16). ms / step is training time
only (1 process, default threads). peak MiB: the allocator's peak above the start of training. B / param: bytes the
allocator holds after an optimizer step (weights, gradients, optimizer state, recipe state) per parameter.
\"vs fp32\" is in accuracy points.

${table}"
write_section "## FP8 recipes on the Fashion-MNIST MLP (CPU)" "$body"
