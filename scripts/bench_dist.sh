#!/usr/bin/env bash
# bench_dist.sh BUILD — the data-parallel table of docs/performance.md: the GPT of
# scripts/bench_dist.lua at 1 and 2 processes (1 thread each, mpirun), fp32 and MS-AMP (FP8 gradient
# all-reduce). Skipped with a message without mpirun or an MPI build.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/perfdoc.sh
B=${1:-build}
SECTION="## Data parallel (MPI, CPU)"
if ! command -v mpirun >/dev/null || ! "$B/fp8lab" -e 'os.exit(require("fp8._dist").info().mpi_built and 0 or 1)'; then
  echo "bench_dist: skipped (needs mpirun and an MPI build)"; exit 0
fi
STEPS=${BENCH_DIST_STEPS:-15}
root=""; [ "$(id -u)" = 0 ] && root="--allow-run-as-root"
run() {  # run NP PRECISION
  local np=$1 prec=$2 out line
  # run in a $(...): a failure exits that subshell, and the caller's assignment stops the script
  if [ "$np" = 1 ]; then out=$(run_ok "fp8lab scripts/bench_dist.lua $STEPS $prec" env OMP_NUM_THREADS=1 "$B/fp8lab" scripts/bench_dist.lua "$STEPS" "$prec") || exit 1
  else out=$(run_ok "mpirun -np $np fp8lab scripts/bench_dist.lua $STEPS $prec" timeout 300 mpirun --oversubscribe $root -np "$np" -x OMP_NUM_THREADS=1 "$B/fp8lab" scripts/bench_dist.lua "$STEPS" "$prec") || exit 1; fi
  need "$np process(es), $prec" "$out" '^row '
  line=$(grep -m1 '^row ' <<<"$out")
  read -r _ n step bwd bwdl ar hidden wire f32 exposed <<<"$line"
  if [ "$n" = 1 ]; then ar="—"; hidden="—"; wire="0"; exposed="—"; fi
  echo "| $n | $prec | $step | $bwd | $bwdl | $ar | $exposed | $hidden | $wire | $f32 |"
}
r1=$(run 1 no); r2=$(run 2 no); r3=$(run 2 msamp)
rows="$r1"$'\n'"$r2"$'\n'"$r3"
echo "$rows"
body=$(cat <<MD
$SECTION

Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(machine_line), command \`make bench\`
(\`scripts/bench_dist.sh\`: \`mpirun -np N fp8lab scripts/bench_dist.lua $STEPS PRECISION\`, 1 OpenMP thread per
process, median of $STEPS steps after 3 warm-up steps). The GPT: 4 layers, d_model 128, 4 heads, vocabulary 64, a batch of
8 × 64 tokens per process (weak scaling), AdamW, \`bucket_cap_mb=1\`. *backward* is \`acc:backward(loss)\` with the
reducer armed (bucket all-reduces start from the autograd hook, all waited at its end); *backward, no comm* is the same
backward inside \`acc:no_sync\`; *all-reduce alone* is one blocking fp32 \`MPI_Allreduce\` of all the gradients' bytes;
*exposed* is the time the reducer blocked after backward waiting for its buckets, on the rank that waited least (the
last to arrive; the others' waits also hold the skew between ranks); *hidden* = 1 − exposed / all-reduce alone, clamped
to [0, 1]. Wire bytes are per rank and step:
fp32 buckets, or MS-AMP's E4M3 weight gradients (1 byte per value + a 4-byte amax) plus fp32 buckets for the rest.
With 2 processes on 2 shared cores any other work on the machine shows up as one
rank waiting for the other inside the all-reduce, which the *backward* and *step* columns count: read them as upper bounds.

| processes | recipe | step ms | backward ms | backward, no comm ms | all-reduce alone ms | exposed ms | hidden | wire bytes | fp32 gradient bytes |
|---|---|---|---|---|---|---|---|---|---|
$rows
MD
)
write_section "$SECTION" "$body"
