#!/usr/bin/env bash
# bench_checkpoint.sh [BUILD] — checkpoint throughput (scripts/bench_checkpoint.lua): save (atomic, with
# fsync) and load of a 350M-parameter fp32 + AdamW state (4.2 GB), or the largest that fits in 80% of half
# the available memory and disk, next to `cp` of the same file on the same disk (build/). Writes the
# "## Checkpoint save/load" section of docs/performance.md. PARAMS=N overrides the size.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/perfdoc.sh
B=${1:-build}
mem=$(( $(awk '/MemAvailable/ {print $2}' /proc/meminfo) * 1024 ))
disk=$(df -B1 --output=avail "$B" | tail -n1)
fit=$(( (mem < disk ? mem : disk) * 8 / 10 / 24 ))
PARAMS=${PARAMS:-$(( fit < 350000000 ? fit : 350000000 ))}
start=$(machine_line)
dir=$(mktemp -d -p "$B" ckpt-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT
table=$(run_ok "scripts/bench_checkpoint.lua $PARAMS" nice "$B/fp8lab" scripts/bench_checkpoint.lua "$PARAMS" "$dir")
need "scripts/bench_checkpoint.lua" "$table" '^\|'
echo "$table"
SECTION="## Checkpoint save/load"
body=$(cat <<MD
$SECTION

Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $start, command \`make bench\` (\`PARAMS=$PARAMS bash scripts/bench_checkpoint.sh\`).
One safetensors file of fp32 weights and AdamW's two fp32 moments (12 bytes per parameter) written by
\`fp8.save_file\` (temp file, fsync, rename, fsync of the directory) and read back by \`fp8.load_file\` (validated
header, pread into fresh tensors), next to \`cp\` of the same file on the same disk, with and without \`sync\` of
the copy, best of three interleaved rounds. The file was just written, so reads come from the page cache for both. Goals (docs/checkpoints.md):
save ≥ 50% of cp + sync, load ≥ 80% of cp. The machine is shared; runs vary by 2× or more.

$table
MD
)
write_section "$SECTION" "$body"
