#!/usr/bin/env bash
# bench_attn.sh BUILD — times one CPU bf16 attention call (scripts/bench_attn.c: the per-head kernels, AVX-512 BF16
# or AVX2 + FMA as the CPU has, and the batched oneDNN GEMMs) at the GPT bench's shape on 1 and 2 threads and
# rewrites its section of docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/perfdoc.sh
B=${1:-build}
SECTION="## CPU bf16 attention (one call)"
ARGS="16 4 128 64 1 300"

make_build "$B" "$B/bench_attn" "$B/bench_peak" >/dev/null
# Which per-head family this CPU runs (on AMX its products on the tiles), and the limit its arithmetic is set against
# (measured here, one thread).
# bf16_limit KIND: bench_peak's one-thread GFLOP/s of KIND (bf16_tile, bf16_dot), or the bench stops.
bf16_limit() {
  local out v
  out=$(run_ok "$B/bench_peak 1" "$B/bench_peak" 1)
  v=$(sed -n "s/^peak kind=$1 threads=1 gflops=\([0-9.]*\).*/\1/p" <<<"$out")
  [ -n "$v" ] || bench_fail "$B/bench_peak 1 gave no $1 line"
  echo "$v"
}
if cpu_has_bf16dot && grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null; then
  limit_words="against this CPU's bf16 tile limit of $(bf16_limit bf16_tile) per thread (\`build/bench_peak\`). The per-head kernels here are the
AVX-512 BF16 family (core/cpu/cpu_nn_attn_bf16.c) with its products on the AMX tiles (the row passes and the packing
on AVX-512); the batched GEMMs are the path before them, which still runs where neither family can."
elif cpu_has_bf16dot; then
  limit_words="against this CPU's bf16 dot limit of $(bf16_limit bf16_dot) per thread (\`build/bench_peak\`). The per-head kernels here are the AVX-512 BF16
family (core/cpu/cpu_nn_attn_bf16.c); the batched GEMMs are the path before them, which still runs where neither
family can."
else
  limit_words="against this CPU's fp32 FMA limit (\`build/bench_peak\`; no bf16 dot product here). The per-head kernels
here are the AVX2 + FMA family (core/cpu/cpu_nn_attn_fma.c), which rounds the operands to bf16 and sums their exact
products in fp32; the batched GEMMs are the path before them, which still runs where neither family can."
fi
machine=$(machine_line)
rows=()
for run in "1" "2" "1 kernel cold" "2 kernel cold" "1 kernel cold,packed" "2 kernel cold,packed"; do
  set -- $run
  out=$(run_ok "$B/bench_attn $ARGS ${2:-both} ${3:-} ($1 threads)" env OMP_NUM_THREADS="$1" "$B/bench_attn" $ARGS ${2:-both} ${3:-})
  need "$B/bench_attn ($run)" "$out" 'ms='
  echo "$out"
  rows+=("$(echo "$out" | awk '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      key = v["path"] " " v["threads"] " " v["cache"] " " v["layout"]; ms[key, v["dir"]] = v["ms"]; gf[key, v["dir"]] = v["gflops"]
      if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
    END { for (i = 1; i <= n; i++) { split(order[i], k, " ")
            printf "| %s%s%s | %s | %s | %s | %s | %s |\n", k[1] == "kernel" ? "per-head kernels" : "batched GEMMs",
                   k[4] == "packed" ? ", packed qkv" : "", k[3] == "cold" ? ", caches evicted" : "", k[2],
                   ms[order[i], "fwd"], gf[order[i], "fwd"], ms[order[i], "bwd"], gf[order[i], "bwd"] } }')")
done
body=$(cat <<MD
$SECTION

Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $machine, command \`make bench\`
(\`scripts/bench_attn.sh\`: \`$B/bench_attn $ARGS\`, best of 300 calls after 3 warm-up calls). One call of
\`fl_cpu_sdpa_causal_fwd\` / \`_bwd\` with bf16 = true at the GPT bench's shape (B=16, H=4, T=128, D=64, causal), as
each of its 4 layers makes per step. GFLOP/s counts 4·B·H·T²·D forward and twice that backward (the full products,
though causal attention needs about half of them), ${limit_words} "caches evicted": \`bench_attn $ARGS kernel cold\`, one ordinary store into each
line of a 64 MiB buffer before each call, so q, k, v, dO, the saved probabilities and the outputs come from memory, as
in a training step (before 2026-11-28 a memset of it, which on Zen 5 left most of the operands in the caches: figures
measured with it read closer to warm than to cold). "packed qkv" (\`... kernel
cold,packed\`): q, k and v read in place from one [B, T, 3·C] tensor and dq, dk, dv written into one, as the GPT's
attention does, where each head row is 256 bytes of a 3 KiB token row. The kernels prefetch the rows they are about
to write (scores, outputs, dq, dk, dv) since 2026-11-28; section "Zen 5 (AMD EPYC family 26)", "Cold operands".

| path | threads | fwd ms | fwd GFLOP/s | bwd ms | bwd GFLOP/s |
|---|---|---|---|---|---|
$(printf '%s\n' "${rows[@]}")
MD
)
write_section "$SECTION" "$body"
