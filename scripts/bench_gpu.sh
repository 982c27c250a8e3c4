#!/usr/bin/env bash
# bench_gpu.sh BUILD — runs BUILD/bench_gpu (scripts/bench_gpu.cu; `make bench-gpu` builds it) and, when
# a GPU ran it, replaces the "## GPU" section of docs/performance.md. Without a GPU the binary prints
# "no GPU (...)", and this script exits 0 and leaves the document alone. Without the binary, when it fails, or
# when one of fp8lab's GPT steps gives no GPU figures (it failed, or ran on the CPU), it exits 1 and leaves the
# document alone too (PyTorch's rows say why they are empty: the peer may be missing).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/perfdoc.sh
B=${1:-build}
REPS=${REPS:-20}
SECTION="## GPU"

# Each program runs under its own limit (seconds), so a hang costs one row, not the run.
T_GEMM=${T_GEMM:-180}; T_STEP=${T_STEP:-240}; T_COMPILE=${T_COMPILE:-300}
fail() { echo "bench_gpu.sh: $*; docs/performance.md left alone" >&2; exit 1; }
[ -x "$B/bench_gpu" ] || fail "no $B/bench_gpu (a CUDA build's \`make BUILD=$B $B/bench_gpu\` builds it)"
rc=0
out=$(timeout -k 5 "$T_GEMM" "$B/bench_gpu" "$REPS" 2>&1) || rc=$?
echo "$out"
case "$out" in
  "no GPU"*) [ "$rc" = 0 ] && exit 0 ;;
esac
[ "$rc" = 0 ] || fail "$B/bench_gpu $REPS failed (exit $rc$( [ "$rc" -ge 124 ] && echo ", limit ${T_GEMM}s T_GEMM"))"

# A GPT training step on the GPU (GPT-2 medium shape, ~350M parameters, sequence 1024): ours in bf16 and
# every FP8 recipe, next to PyTorch in bf16 and with torch._scaled_mm FP8 (scripts/bench_gpt_torch_gpu.py).
L=${GPT_LAYERS:-24}; D=${GPT_D:-1024}; H=${GPT_HEADS:-16}; T=${GPT_SEQ:-1024}; BS=${GPT_BATCH:-8}; V=${GPT_VOCAB:-50304}
GSTEPS=${GPT_STEPS:-10}; GWARM=${GPT_WARMUP:-3}; PEAK=${PEAK_TFLOPS:-989.4}
gpt_args=(--model gpt --layers "$L" --d-model "$D" --heads "$H" --seq "$T" --batch "$BS" --vocab "$V"
          --steps "$GSTEPS" --warmup "$GWARM" --peak-tflops "$PEAK")
rows=""
row() {   # name, output line
  local ms tps tf mfu mem
  ms=$(sed -n 's/.*ms_per_step=\([0-9.]*\).*/\1/p' <<<"$2"); tps=$(sed -n 's/.*tokens_per_s=\([0-9]*\).*/\1/p' <<<"$2")
  tf=$(sed -n 's/.*tflops=\([0-9.]*\).*/\1/p' <<<"$2"); mfu=$(sed -n 's/.*mfu=\([0-9.]*%\).*/\1/p' <<<"$2")
  mem=$(sed -n 's/.*gpu_peak_gib=\([0-9.]*\).*/\1/p' <<<"$2")
  if [ -z "$ms" ]; then
    rows+="| $1 | – | – | – | – | – | ${2:+$(head -c 120 <<<"$2" | tr '\n|' '  ')}${2:-no result: over the ${T_STEP}s limit (T_STEP) or killed} |"$'\n'; return
  fi
  rows+="| $1 | $ms | $tps | $tf | $mfu | $mem | |"$'\n'
}
for cfg in "bf16|--mixed-precision bf16" "fp8 te HYBRID|--mixed-precision fp8 --fp8-backend te --fp8-format HYBRID" \
           "fp8 ao tensorwise|--mixed-precision fp8 --fp8-backend ao --fp8-recipe tensorwise" \
           "fp8 ao rowwise|--mixed-precision fp8 --fp8-backend ao --fp8-recipe rowwise" \
           "fp8 msamp O2|--mixed-precision fp8 --fp8-backend msamp --fp8-opt-level O2"; do
  name=${cfg%%|*}; flags=${cfg#*|}
  # shellcheck disable=SC2086
  rc=0
  full=$(timeout -k 5 "$T_STEP" "$B/fp8lab" scripts/bench_train.lua "${gpt_args[@]}" $flags 2>&1) || rc=$?
  line=$(tail -n 1 <<<"$full")
  echo "fp8lab $name: $line"
  # a GPU step's line has gpu_peak_gib=; without it the step failed or ran on the CPU
  [ "$rc" = 0 ] && [[ "$line" == *gpu_peak_gib=* ]] ||
    { echo "$full" >&2; fail "fp8lab's GPT step ($name) gave no GPU figures (exit $rc)"; }
  row "fp8lab $name" "$line"
done
for mode in bf16 bf16-compile fp8; do
  lim=$T_STEP; [[ $mode == *-compile ]] && lim=$T_COMPILE   # the compilation runs inside the warm-up steps
  line=$(timeout -k 5 "$lim" python3 scripts/bench_gpt_torch_gpu.py "$mode" "$L" "$D" "$H" "$T" "$BS" "$V" "$GSTEPS" "$GWARM" "$PEAK" 2>&1 | tail -n 1) || true
  echo "PyTorch $mode: $line"
  tv=$(sed -n 's/.*torch=\(.*\)/\1/p' <<<"$line")
  row "PyTorch ${tv:-?} $mode" "$line"
done

body=$(cat <<MD
$SECTION

Command \`make bench-gpu\` (\`$B/bench_gpu $REPS\`, source scripts/bench_gpu.cu; then scripts/bench_train.lua and
scripts/bench_gpt_torch_gpu.py); host: $(machine_line); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1).
Goals (issue 14): FP8 ≥ 1.7× bf16 and ≥ 1300 TFLOP/s on H100; casts ≥ 85% of the copy's GB/s; our FP8 GPT
step ≥ 1.3× our bf16 step and faster than PyTorch's.

$out

GPT training step: $L layers, d=$D, $H heads, sequence $T, batch $BS, vocab $V (tied head), AdamW, $GSTEPS timed
steps after $GWARM; MFU = (6·N + 12·L·d·T) FLOPs per token against a dense bf16 peak of $PEAK TFLOP/s (FP8
runs too). PyTorch uses flash attention (F.scaled_dot_product_attention), fused AdamW, and for fp8
torch._scaled_mm with dynamic per-tensor scales on the blocks' Linears; bf16-compile is its bf16 model through
torch.compile (default mode, compiled in the warm-up steps).

| run | ms / step | tokens/s | TFLOP/s | MFU | peak GiB | note |
|---|---|---|---|---|---|---|
$rows
MD
)
write_section "$SECTION" "$body"
