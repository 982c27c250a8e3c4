#!/usr/bin/env bash
# gpu_check.sh BUILD OUTDIR [STAGE...] — the GPU checks of docs/cuda.md in one command, for a session that
# has a GPU for a few minutes. Every stage runs under its own time limit, so a hang costs that stage and
# not the run; logs go to OUTDIR; the last lines printed are a summary.
# Stages (default: env tests sanitize bench):
#   env       the GPU and driver, and where cuBLASLt, compute-sanitizer and PyTorch were found
#   tests     every gpu_* C test in its own process (PAR at a time: a crash is pinned on one test), and the
#             Lua specs of tests/gpu (every *_spec.lua there) (TAP output: a crash shows after the last "ok" line)
#   sanitize  compute-sanitizer: memcheck over every gpu_* C test (each alone) and the ops and training specs,
#             racecheck over the C tests of the kernels that use shared memory (casts+transpose, GEMM
#             epilogues, LayerNorm, reductions, softmax, attention). A test that makes no CUDA call (the
#             *_on_host ones) ends with the sanitizer's exit 255, "terminated before first instrumented
#             API call": nothing to check there.
#   step      one GPT training step configuration (scripts/bench_train.lua; STEP_FLAGS), full output kept
#   demo      the Fashion-MNIST demo, same seed, on the CPU and with --device cuda (DEMO_EPOCHS epochs)
#   bench     builds BUILD/bench_gpu (make), then scripts/bench_gpu.sh (GEMMs, casts, GPT step next to PyTorch);
#             docs/performance.md copied to OUT
# The tests, sanitize and demo stages run side by side (the GPU holds several processes); bench runs alone
# after them, since its figures need the GPU to itself.
# Each process of the tests and sanitize stages runs cores / PAR OpenMP threads (OMP_NUM_THREADS, when set, wins);
# the demo and step stages run with the default.
# Exits 1 when a stage failed (a test not ok, a sanitizer error, a non-zero exit; the summary's last line names
# them), 2 on an unknown stage.
set -uo pipefail
B=${1:?usage: gpu_check.sh BUILD OUTDIR [STAGE...]}; OUTD=${2:?usage: gpu_check.sh BUILD OUTDIR [STAGE...]}
shift 2
STAGES=${*:-env tests sanitize bench}
KNOWN="env tests sanitize step demo bench"
for st in $STAGES; do
  case " $KNOWN " in *" $st "*) ;; *) echo "gpu_check.sh: unknown stage '$st' (known: $KNOWN)" >&2; exit 2 ;; esac
done
source "$(dirname "$0")/perfdoc.sh"   # make_build
failed=()
PAR=${PAR:-6}; T_TEST=${T_TEST:-60}; T_SPEC=${T_SPEC:-240}; T_SAN=${T_SAN:-240}; T_DEMO=${T_DEMO:-240}
T_BENCH=${T_BENCH:-300}; DEMO_EPOCHS=${DEMO_EPOCHS:-10}; T_SAN_TEST=${T_SAN_TEST:-90}
SAN_TESTS=${SAN_TESTS:-.}; SAN_SPECS=${SAN_SPECS-ops train}   # which C tests (regex) and specs the sanitizers run
# The test and sanitizer processes run side by side (PAR C tests, the specs, both sanitizers): each gets its share of
# the cores, not all of them. With every process at the default (one OpenMP thread per core), the CPU side of the
# checks crawled on a 16-core machine and three C tests ran past their limits (2026-11-30).
CPUS=$(nproc 2>/dev/null || echo 1)
TEST_THREADS=${OMP_NUM_THREADS:-$(( CPUS / PAR > 0 ? CPUS / PAR : 1 ))}
mkdir -p "$OUTD"
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo)
summary=()

if has env; then
  (
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; smi=$?
    echo "compute-sanitizer: ${SAN:-not found}"
    echo "FP8LAB_CUBLASLT=${FP8LAB_CUBLASLT:-} CUDA_HOME=${CUDA_HOME:-}"
    python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' 2>&1 | tail -n 1
    echo "nproc $(nproc)"
    # the specs need busted (and its C modules) where fp8lab looks for Lua modules
    "$B/fp8lab" -e 'package.path = "/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua;" .. package.path
      require("busted.runner")' > /dev/null 2>&1 && echo "busted: found" ||
      echo "busted: NOT found: the specs cannot run (scripts/gpu_bundle.sh packs it with the build)"
    exit "$smi"
  ) > "$OUTD/env.log" 2>&1 || failed+=(env)
  cat "$OUTD/env.log"
fi

run_c_tests() {   # every gpu_* test alone; one line per test in c_tests.log
  export OMP_NUM_THREADS=$TEST_THREADS
  "$B/test_core" --list gpu_ > "$OUTD/c_names.txt"
  xargs -P "$PAR" -I{} bash -c '
    out=$(timeout -k 5 '"$T_TEST"' "$0" "={}" 2>&1); rc=$?
    case $rc in 0) st=ok ;; 1) st=FAIL ;; 124|137) st=TIMEOUT ;; *) st="CRASH($rc)" ;; esac
    printf "%s %s\n" "$st" "{}" >> "$1/c_tests.log"
    [ "$st" = ok ] || { printf "==== %s %s\n%s\n" "$st" "{}" "$out" >> "$1/c_failures.log"; }
  ' "$B/test_core" "$OUTD" < "$OUTD/c_names.txt"
}

run_specs() {
  export OMP_NUM_THREADS=$TEST_THREADS
  for s in tests/gpu/*_spec.lua; do
    n=$(basename "$s" .lua)
    ( timeout -k 5 "$T_SPEC" "$B/fp8lab" tests/busted.lua -o TAP "$s" > "$OUTD/$n.log" 2>&1
      echo "exit $?" >> "$OUTD/$n.log" ) &
  done
  wait
}

# One sanitizer tool over the named C tests, PAR at a time, each alone, until the stage's deadline.
san_c_tests() {   # tool log deadline (then test names on stdin)
  xargs -P "$PAR" -I{} bash -c '
    left=$(( $4 - $(date +%s) ))
    if [ "$left" -lt 10 ]; then printf "==== %s skipped: out of time\n" "{}" >> "$3"; exit 0; fi
    out=$(timeout -k 5 $(( left < $5 ? left : $5 )) "$0" --tool "$2" --print-limit 20 --error-exitcode 99 "$1" "={}" 2>&1)
    rc=$?
    printf "==== %s exit %s\n%s\n" "{}" "$rc" "$(grep -vE "^(ok|FAIL) |passed, " <<<"$out" | tail -n 30)" >> "$3"
  ' "$SAN" "$B/test_core" "$1" "$2" "$3" "$T_SAN_TEST"
}

run_sanitize() {
  export OMP_NUM_THREADS=$TEST_THREADS
  [ -n "$SAN" ] || { echo "compute-sanitizer not found" > "$OUTD/san_memcheck.log"; return; }
  local deadline=$(( $(date +%s) + T_SAN ))
  : > "$OUTD/san_memcheck.log"; : > "$OUTD/san_racecheck.log"
  ( "$B/test_core" --list gpu_ | grep -E "$SAN_TESTS" | san_c_tests memcheck "$OUTD/san_memcheck.log" "$deadline" ) &
  for s in $SAN_SPECS; do
    ( timeout -k 5 "$T_SAN" "$SAN" --tool memcheck --leak-check no --print-limit 40 --error-exitcode 99 \
        "$B/fp8lab" tests/busted.lua -o TAP "tests/gpu/${s}_spec.lua" > "$OUTD/san_memcheck_$s.log" 2>&1
      echo "exit $?" >> "$OUTD/san_memcheck_$s.log" ) &
  done
  ( "$B/test_core" --list gpu_ | grep -E "$SAN_TESTS" |
      grep -E 'cast_transpose|gemm|layernorm|sum|amax|softmax|cross_entropy|sdpa|attention|fp8_linear' |
      san_c_tests racecheck "$OUTD/san_racecheck.log" "$deadline" ) &
  wait
}

run_demo() {
  for dev in cpu cuda; do
    ( timeout -k 5 "$T_DEMO" "$B/fp8lab" scripts/train_fashion_mnist.lua --mixed-precision fp8 --epochs "$DEMO_EPOCHS" \
        --device "$dev" --quiet --out "$OUTD/demo_$dev.csv" > "$OUTD/demo_$dev.log" 2>&1
      echo "exit $?" >> "$OUTD/demo_$dev.log" ) &
  done
  wait
}

pids=()
if has tests; then run_c_tests & pids+=($!); run_specs & pids+=($!); fi
if has sanitize; then run_sanitize & pids+=($!); fi
if has demo; then run_demo & pids+=($!); fi
for p in "${pids[@]}"; do wait "$p"; done

if has tests; then
  summary+=("C tests: $(grep -c '^ok ' "$OUTD/c_tests.log" 2>/dev/null) ok of $(wc -l < "$OUTD/c_names.txt"); not ok: $(grep -v '^ok ' "$OUTD/c_tests.log" 2>/dev/null | tr '\n' ' ')")
  for s in tests/gpu/*_spec.lua; do
    n=$(basename "$s" .lua)
    summary+=("$n: $(grep -c '^ok ' "$OUTD/$n.log") ok, $(grep -c '^not ok ' "$OUTD/$n.log") not ok, $(tail -n 1 "$OUTD/$n.log")")
    [ "$(tail -n 1 "$OUTD/$n.log")" = "exit 0" ] || failed+=("tests:$n")
  done
  # every listed test has an ok line
  [ "$(grep -c '^ok ' "$OUTD/c_tests.log" 2>/dev/null)" = "$(wc -l < "$OUTD/c_names.txt")" ] &&
    [ -s "$OUTD/c_names.txt" ] || failed+=("tests:C")
fi
if has sanitize; then
  for f in san_memcheck san_memcheck_ops san_memcheck_train san_racecheck; do
    [ -f "$OUTD/$f.log" ] || continue
    summary+=("$f: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUTD/$f.log" | sort | uniq -c | tr '\n' ';' | head -c 300) $(grep -oE 'exit [0-9]+' "$OUTD/$f.log" | sort | uniq -c | tr '\n' ' ')")
    # exit 0, or 255 for a test that makes no CUDA call (see above); 99 is a sanitizer error
    if grep -oE 'exit [0-9]+' "$OUTD/$f.log" | grep -qvE '^exit (0|255)$' || grep -q 'compute-sanitizer not found' "$OUTD/$f.log"; then
      failed+=("sanitize:$f")
    fi
  done
fi
if has demo; then
  for dev in cpu cuda; do
    summary+=("demo $dev: $(grep -iE 'accuracy|acc' "$OUTD/demo_$dev.log" | tail -n 1 | head -c 200) $(tail -n 1 "$OUTD/demo_$dev.log")")
    [ "$(tail -n 1 "$OUTD/demo_$dev.log")" = "exit 0" ] || failed+=("demo:$dev")
  done
fi
if has step; then
  timeout -k 5 "$T_BENCH" "$B/fp8lab" scripts/bench_train.lua --model gpt --layers 24 --d-model 1024 --heads 16 \
    --seq 1024 --batch 8 --vocab 50304 --steps "${GPT_STEPS:-5}" --warmup "${GPT_WARMUP:-2}" ${STEP_FLAGS:-} > "$OUTD/step.log" 2>&1
  rc=$?; echo "exit $rc" >> "$OUTD/step.log"; [ "$rc" = 0 ] || failed+=(step)
  summary+=("step ${STEP_FLAGS:-}: $(tail -n 2 "$OUTD/step.log" | tr '\n' ' ')")
fi
if has bench; then
  if make_build "$B" "$B/bench_gpu" > "$OUTD/bench.log" 2>&1; then
    timeout -k 5 "$T_BENCH" bash scripts/bench_gpu.sh "$B" >> "$OUTD/bench.log" 2>&1; rc=$?
  else
    rc=$?; echo "make BUILD=$B $B/bench_gpu failed" >> "$OUTD/bench.log"
  fi
  echo "exit $rc" >> "$OUTD/bench.log"; [ "$rc" = 0 ] || failed+=(bench)
  cp docs/performance.md "$OUTD/performance.md" 2>/dev/null
  summary+=("bench: $(tail -n 1 "$OUTD/bench.log")")
  sed -n '/^| M×N×K/,$p' "$OUTD/bench.log" | grep -E '^\||^fp8lab|^PyTorch' | head -n 30
fi
echo
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then echo "gpu_check.sh: failed: ${failed[*]}"; exit 1; fi
echo "gpu_check.sh: every stage passed ($STAGES)"
