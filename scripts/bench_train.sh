#!/usr/bin/env bash
# bench_train.sh BUILD — one training step of the MLP and the small GPT, all in one run:
#   fp8lab: fp32, bf16 autocast, and the FP8 recipes (te HYBRID, ao tensorwise, msamp O2) through
#           fp8.Accelerator, at 1 and 2 threads;
#   PyTorch 2.x from PyPI in a virtual environment outside the repository (TORCH2_PYTHON, default
#           /opt/torch2/bin/python3; `python3 -m venv /opt/torch2 && /opt/torch2/bin/pip install torch`):
#           fp32 and bf16 autocast, eager and torch.compile, 1 and 2 threads — the main peer;
#   PyTorch (Debian's python3-torch 1.13): fp32 and bf16 autocast, 1 and 2 threads;
#   the CPU's arithmetic limits (scripts/bench_peak.c: fp32 FMA, bf16 dot, bf16 tile) at 1 and 2 threads;
# then writes the table, the ratios against each peer's best setting, each step's fraction of the limit, and
# the activation memory into docs/performance.md. Skips a peer's rows when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/perfdoc.sh
B=${1:-build}
STEPS=${STEPS:-10}
rows="" results=""
declare -A GFLOP   # per model: FLOPs of one step, from fp8lab's lines (the peers train the same models)
add() { # add IMPL THREADS PRECISION LINE
  local m ms rss act gf
  m=$(sed -n 's/.*model=\([a-z]*\).*/\1/p' <<<"$4"); ms=$(sed -n 's/.*ms_per_step=\([0-9.]*\).*/\1/p' <<<"$4")
  rss=$(sed -n 's/.*peak_rss_mib=\([0-9.]*\).*/\1/p' <<<"$4"); act=$(sed -n 's/.*act_mib=\([0-9.]*\).*/\1/p' <<<"$4")
  gf=$(sed -n 's/.*gflop_per_step=\([0-9.]*\).*/\1/p' <<<"$4")
  [ -n "$gf" ] && GFLOP[$m]=$gf
  [ -z "$ms" ] && { echo "$1 $3 threads=$2: no result: $4"; return; }
  rows+="| $m | $1 | $3 | $2 | $ms | $rss | ${act:-–} |"$'\n'
  results+="$m|$1|$3|$2|$ms|${act:-}"$'\n'
  echo "$1 $3 threads=$2: $4"
}
# The limits first, on a quiet machine: fp32 FMA and bf16 dot GFLOP/s at 1 and 2 threads.
make_build "$B" "$B/bench_peak" >/dev/null
peaks=$(run_ok "$B/bench_peak 1 2" "$B/bench_peak" 1 2)
need "$B/bench_peak 1 2" "$peaks" 'kind=fp32_fma threads=2 '
# The instruction the FP8 GEMMs run on here, as `fp8lab env` names their family: the limit the bf16 and FP8 rows
# are set against (AMX tiles: bf16 tile; AVX512_BF16: bf16 dot; the FMA families, Intel without AMX and CPUs
# without AVX512_BF16: fp32 FMA).
family=$("$B/fp8lab" env 2>/dev/null | sed -n 's/^FP8 GEMM *\([a-z0-9_]*\):.*/\1/p')
case "$family" in
  amx_bf16) LIMK=bf16_tile; LIML="bf16 tile" ;;
  avx512_bf16) LIMK=bf16_dot; LIML="bf16 dot" ;;
  *) LIMK=fp32_fma; LIML="fp32 FMA" ;;
esac
echo "$peaks"
# peak KIND THREADS: that limit's GFLOP/s (0 where the CPU has not got the instruction)
peak() { sed -n "s/.*kind=$1 threads=$2 gflops=\([0-9.]*\).*/\1/p" <<<"$peaks" | head -n1; }
# A 2-thread limit under 1.5x the 1-thread one means other work held a core while it was measured.
busy_note=$(awk -v a="$(peak fp32_fma 1)" -v b="$(peak fp32_fma 2)" 'BEGIN {
  if (a + 0 > 0 && b + 0 < 1.5 * a) printf "The 2-thread fp32 FMA limit came out below 1.5x the 1-thread one: other work held a core while it was measured, so the 2-thread fractions of it below are too high."
}')
TORCH2=${TORCH2_PYTHON:-/opt/torch2/bin/python3}
have_torch2=0
[ -x "$TORCH2" ] && "$TORCH2" -c 'import torch' 2>/dev/null && have_torch2=1
tv2=""
[ $have_torch2 = 1 ] && tv2="PyTorch $("$TORCH2" -c 'import torch; print(torch.__version__.split("+")[0])')"
FP8LAB_RECIPES=("no:fp32" "bf16:bf16-autocast" "fp8 --fp8-backend te:fp8 te HYBRID"
                "fp8 --fp8-backend ao:fp8 ao tensorwise" "fp8 --fp8-backend msamp:fp8 msamp O2")
have_torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && have_torch=1
tv=""
[ $have_torch = 1 ] && tv="PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
for t in 1 2; do
  for r in "${FP8LAB_RECIPES[@]}"; do
    args=${r%%:*} label=${r#*:}
    # ours must give both models' lines (a peer's missing rows are skipped, with a message)
    # shellcheck disable=SC2086
    out=$(run_ok "fp8lab scripts/bench_train.lua --mixed-precision $args ($t threads)" \
          env OMP_NUM_THREADS="$t" "$B/fp8lab" scripts/bench_train.lua --steps "$STEPS" --mixed-precision $args)
    need "fp8lab $label ($t threads), the MLP" "$out" '^model=mlp ms_per_step=[0-9]'
    need "fp8lab $label ($t threads), the GPT" "$out" '^model=gpt ms_per_step=[0-9]'
    while read -r line; do add fp8lab "$t" "$label" "$line"; done < <(grep '^model=' <<<"$out")
  done
  if [ $have_torch2 = 1 ]; then
    for mode in eager compile; do
      for p in fp32 bf16; do
        while read -r line; do add "$tv2 $mode" "$t" "$([ $p = fp32 ] && echo fp32 || echo bf16-autocast)" "$line"; done \
          < <(OMP_NUM_THREADS=$t "$TORCH2" scripts/bench_train_torch.py "$t" "$STEPS" "$p" all "$mode" 2>/dev/null | grep '^model=')
      done
    done
  fi
  if [ $have_torch = 1 ]; then
    for p in fp32 bf16; do
      while read -r line; do add "$tv" "$t" "$([ $p = fp32 ] && echo fp32 || echo bf16-autocast)" "$line"; done \
        < <(OMP_NUM_THREADS=$t /usr/bin/python3 scripts/bench_train_torch.py "$t" "$STEPS" "$p")
    done
  fi
done
limits=""
for m in "${!GFLOP[@]}"; do limits+="$m ${GFLOP[$m]}"$'\n'; done

# FP8 against bf16 in one process, interleaved (scripts/bench_step_ab.lua), at 2 threads: the fastest and the
# median single step of each, as ratios to bf16 and as fractions of the limit of the FP8 GEMMs' instruction ($LIMK).
ab=$(run_ok "scripts/bench_step_ab.lua" env OMP_NUM_THREADS=2 "$B/fp8lab" scripts/bench_step_ab.lua --precisions bf16,te,ao,msamp --rounds 10)
for p in bf16 te ao msamp; do need "scripts/bench_step_ab.lua ($p)" "$ab" "^ab .*precision=$p( |\$)"; done
echo "$ab"
abtable=$(awk -v peaks="$peaks" -v gf="${GFLOP[gpt]:-0}" -v limk="$LIMK" -v liml="$LIML" '
  BEGIN { np = split(peaks, pl, "\n")
          for (i = 1; i <= np; i++) if (pl[i] ~ ("kind=" limk " threads=2 ")) { match(pl[i], /gflops=[0-9.]+/); lim = substr(pl[i], RSTART + 7, RLENGTH - 7) + 0 }
          kind = liml
          if (lim <= 0) for (i = 1; i <= np; i++) if (pl[i] ~ /kind=fp32_fma threads=2 /) {
            match(pl[i], /gflops=[0-9.]+/); lim = substr(pl[i], RSTART + 7, RLENGTH - 7) + 0; kind = "fp32 FMA" } }
  /^ab / { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
           name[++n] = v["precision"]; mn[n] = v["min_ms"] + 0; md[n] = v["median_ms"] + 0; st[n] = v["steps"]
           if (v["precision"] == "bf16") { bmn = mn[n]; bmd = md[n] } }
  END { print "| precision | fastest step (ms) | median step (ms) | fastest / bf16 | median / bf16 | GFLOP/s at the fastest, % of " kind " " lim " |"
        print "|---|---|---|---|---|---|"
        for (i = 1; i <= n; i++) {
          g = (mn[i] > 0 && gf > 0) ? gf / (mn[i] / 1000) : 0
          printf "| %s | %.1f | %.1f | %.3f | %.3f | %.1f, %.0f%% |\n", name[i], mn[i], md[i], bmn ? mn[i] / bmn : 0, bmd ? md[i] / bmd : 0, g, lim ? 100 * g / lim : 0 } }' <<<"$ab")

# Ratios: each fp8lab row against each peer's best fp32 and best bf16 step (over thread counts and eager /
# compile), and the step's GFLOP/s as a fraction of the limit at its thread count (fp32 rows: fp32 FMA;
# bf16 and FP8 rows: the FP8 GEMMs' instruction, $LIMK).
ratios=$(awk -F'|' -v peaks="$peaks" -v limits="$limits" -v limk="$LIMK" -v liml="$LIML" '
  BEGIN { np = split(peaks, pl, "\n")
          for (i = 1; i <= np; i++) if (match(pl[i], /kind=[a-z0-9_]+ threads=[0-9]+ gflops=[0-9.]+/)) {
            split(substr(pl[i], RSTART, RLENGTH), pf, /[ =]/); peak[pf[2] SUBSEP pf[4]] = pf[6] }
          nl = split(limits, ll, "\n"); for (i = 1; i <= nl; i++) { split(ll[i], lg, " "); if (lg[1] != "") gf[lg[1]] = lg[2] } }
  { m=$1; impl=$2; prec=$3; ms=$5+0; if (ms <= 0) next
    if (impl ~ /^PyTorch/) { v = impl; sub(/ (eager|compile)$/, "", v)
      if (!(v in seenv)) { seenv[v] = 1; peers[++npeer] = v }
      k = m SUBSEP v SUBSEP (prec ~ /bf16/ ? "bf16" : "fp32"); if (!(k in best) || ms < best[k]) { best[k] = ms; how[k] = $4 "t " (impl ~ /compile$/ ? "compile" : "eager") }; next }
    k = m SUBSEP prec; if (!(k in ours) || ms < ours[k]) { ours[k] = ms; th[k] = $4 }
    order[++n] = k }
  END {
    hdr = "| model | fp8lab precision | best ms (threads) | GFLOP/s, % of the limit |"; sep = "|---|---|---|---|"
    for (p = 1; p <= npeer; p++) { hdr = hdr " " peers[p] " fp32 best / ours | " peers[p] " bf16 best / ours |"; sep = sep "---|---|" }
    print hdr; print sep
    for (i = 1; i <= n; i++) { k = order[i]; if (seen[k]++) continue; split(k, a, SUBSEP)
      g = gf[a[1]] + 0; rate = g > 0 ? g / (ours[k] / 1000) : 0
      kind = a[2] == "fp32" ? "fp32_fma" : limk; lim = peak[kind SUBSEP th[k]] + 0
      if (lim <= 0) { kind = "fp32_fma"; lim = peak[kind SUBSEP th[k]] + 0 }
      line = sprintf("| %s | %s | %.2f (%s) | %s |", a[1], a[2], ours[k], th[k],
        rate > 0 && lim > 0 ? sprintf("%.1f, %.0f%% of %s %.0f", rate, 100 * rate / lim, kind == "fp32_fma" ? "fp32 FMA" : liml, lim) : "–")
      for (p = 1; p <= npeer; p++) {
        f = best[a[1] SUBSEP peers[p] SUBSEP "fp32"]; b = best[a[1] SUBSEP peers[p] SUBSEP "bf16"]
        line = line sprintf(" %s | %s |", f ? sprintf("%.2fx (%s)", f / ours[k], how[a[1] SUBSEP peers[p] SUBSEP "fp32"]) : "–",
                                         b ? sprintf("%.2fx (%s)", b / ours[k], how[a[1] SUBSEP peers[p] SUBSEP "bf16"]) : "–") }
      print line } }' <<<"$results")
echo "$ratios"

if [ "$family" = amx_bf16 ]; then
costs="What FP8 costs and saves against bf16 on a CPU with AMX (its tile unit does bf16 products; it has no FP8 arithmetic):
the FP8 GEMMs are fp8lab's own AMX family (\`core/cpu/cpu_fp8_mm_amx.c\`, section \"Intel Xeon with AMX\"). They
decode the FP8 bytes to bf16 by byte tables while packing their tile panels and apply the scales, the bias and a
residual add as they store the output; dY's cast also sums the bias gradient, GELU and LayerNorm cast the next
layer's input in their own pass, and the tensors kept for backward are one byte per element (act MiB). The bf16
step runs oneDNN's bf16 GEMMs, on the tiles too, after converting each fp32 operand in a pass of its own. Both
precisions share the rest: attention (the per-head kernels on the tiles), LayerNorm, GELU, AdamW, in fp32 between
the GEMMs."
elif [ "$family" = avx512_bf16 ]; then
costs="What FP8 costs and saves against bf16 on a CPU without FP8 arithmetic (AVX-512 BF16 is its narrowest dot product): the
FP8 GEMMs are fp8lab's own (\`core/cpu/cpu_fp8_mm.c\`, section \"CPU FP8 GEMM\"). They read the FP8 bytes and decode
them by table lookup while packing their panels — the pass every blocked GEMM, oneDNN's bf16 kernel included, makes
over its operands anyway — and apply the scales and the bias as they store the output. dY's cast also sums the bias
gradient (one read of dY), and the tensors kept for backward are one byte per element (act MiB). The bf16 step
instead converts each fp32 operand to bf16 in a pass of its own before oneDNN packs it, adds the bias in another
pass and sums the bias gradient in a third. Both precisions share the rest: attention (per-head AVX-512 BF16
kernels on the packed qkv), LayerNorm, GELU, AdamW, all in fp32 between the GEMMs."
else
costs="What FP8 costs and saves against bf16 on a CPU whose FP8 GEMMs run fp32 FMAs (no AVX512_BF16, or Intel's, at
half the FMA's rate): every precision's GEMMs run the same fp32 FMAs in fp8lab's FMA family, AVX-512 or AVX2 + FMA
(\`core/cpu/cpu_fp8_mm_fma.c\`, sections \"CPUs without AVX-512 (Zen 3)\" and \"Intel without the tiles\"), which
decodes the FP8 bytes (shifts and F16C) or widens bf16 (a shift) to fp32 while it packs its panels, and applies the
scales and the bias as it stores the output. So FP8 saves no arithmetic here: it halves the bytes of every GEMM
operand and keeps one byte per element for the backward (act MiB), and pays for its casts and its scale
bookkeeping. Both precisions share the rest: attention (the per-head kernels on the packed qkv), LayerNorm, GELU,
AdamW, all in fp32 between the GEMMs."
fi
body="## Training step vs PyTorch (CPU)

Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(machine_line), command \`make bench\` (\`scripts/bench_train.sh\`:
\`scripts/bench_train.lua\` and \`scripts/bench_train_torch.py\`, $STEPS timed steps after 3 warm-up steps, each process
measuring its own peak RSS). One step = forward, cross-entropy, backward, AdamW. MLP 784-512-256-10 at batch 256;
GPT 4 layers, d=256, 4 heads, T=128, batch 16, vocab 96 (pre-LN, GELU tanh, tied head). fp8lab runs every precision
through \`fp8.Accelerator\`; the FP8 rows convert the Linear layers whose dims are multiples of 16 (all of the GPT's
block layers; the MLP's 256→10 head stays bf16) and run the other ops under bf16 autocast. Peers: ${tv2:-PyTorch 2.x (not installed: see scripts/bench_train.sh)}
from PyPI in a virtual environment, attention through \`F.scaled_dot_product_attention\`, eager and \`torch.compile\`
(the main peer); ${tv:-PyTorch 1.13 (not installed)} from Debian (python3-torch with OpenBLAS, \`libopenblas0-pthread\`; it has no
fused attention, so its attention is written out as matmul + mask + softmax + matmul). \"act MiB\" is what the
allocator holds after the forward pass beyond the inputs (the tensors kept for backward), measured once per run.
The limits (\`scripts/bench_peak.c\`, register-only FMA chains, best of 3): $(tr '\n' ';' <<<"$peaks" | sed 's/peak kind=//g; s/;$//; s/;/; /g').${busy_note:+ ${busy_note}}

| model | implementation | precision | threads | ms / step | peak RSS (MiB) | act MiB |
|---|---|---|---|---|---|---|
${rows}
Ratios (higher = fp8lab faster), each side at its fastest setting (threads, and eager or compile for PyTorch 2.x);
GFLOP/s counts 6 FLOPs per weight per token plus attention's 12·L·d·T (the GPT) and is set against the limit at
the row's thread count ($([ "$LIMK" = fp32_fma ] && echo "fp32 FMA for every row: this CPU's FP8 GEMMs (family ${family:-unknown}) run fp32 FMAs" || echo "fp32: fp32 FMA; bf16 and FP8: ${LIML}, the instruction of the FP8 GEMMs' family ${family}")):

${ratios}

FP8 against bf16 in one process (\`scripts/bench_step_ab.lua --rounds 10\`, 2 threads, the GPT above): ten rounds, each
running three steps of every precision in turn, so a slow moment of this shared machine falls on all of them; the
fastest single step and the median of the 30 (te = HYBRID, ao = tensorwise, msamp = O2):

${abtable}

${costs}
"
write_section "## Training step vs PyTorch (CPU)" "$body"
