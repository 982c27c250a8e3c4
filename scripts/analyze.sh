#!/usr/bin/env bash
# analyze.sh — clang's static analyzer (clang --analyze) over the C sources of core/ and lua/, with the build's
# defines and include paths (`make cflags`: every feature the build finds, CUDA, NCCL and MPI among them, so the
# code under their #ifdefs is analyzed as built; GCC-only, warning and debug/optimization flags dropped). Prints
# each warning as file:line:col: message [checker]. A warning listed in scripts/analyze.reviewed (same file, same
# checker, same source line's text) has been read and found false; it is printed as reviewed with the reason.
# Exits 1 if a warning is not on that list.
# Not part of `make test` (about 2 minutes on 2 cores); run it after changing C code.
# usage: scripts/analyze.sh [FILE...]     (default: core/*.c core/cpu/*.c lua/*.c; JOBS=N files at a time)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang > /dev/null || { echo "analyze.sh: needs clang (apt-get install clang)" >&2; exit 2; }
FLAGS="$(make -s --no-print-directory cflags | tr ' ' '\n' | grep -v -E '^(-g|-O.*|-fvect-cost-model=.*|-W.*)$' | tr '\n' ' ') -Ilua"
if [ $# -gt 0 ]; then files=("$@"); else files=(core/*.c core/cpu/*.c lua/*.c); fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export FLAGS
printf '%s\n' "${files[@]}" | xargs -P "${JOBS:-$(nproc)}" -I{} sh -c \
  'clang --analyze -Xanalyzer -analyzer-output=text $FLAGS "$1" -o /dev/null 2>&1 | grep -E "^[^ ]+:[0-9]+:[0-9]+: warning:" || true' _ {} > "$out"
# reviewed: "file | checker | source line (trimmed) | why" lines; a warning matches on the first three
new=0 seen=0
while IFS= read -r w; do
  seen=$((seen + 1))
  f=${w%%:*}; rest=${w#*:}; line=${rest%%:*}
  checker=$(sed -E 's/.*\[([^]]+)\]$/\1/' <<< "$w")
  src=$(sed -n "${line}p" "$f" | sed -E 's/^[[:space:]]+//; s/[[:space:]]+$//')
  why=$(awk -F' [|] ' -v f="$f" -v c="$checker" -v s="$src" '$1 == f && $2 == c && $3 == s { print $4; exit }' \
        scripts/analyze.reviewed)
  if [ -n "$why" ]; then echo "reviewed: $w -- $why"; else echo "$w"; new=$((new + 1)); fi
done < <(sort -u "$out")
echo "analyze.sh: ${#files[@]} files, $seen warnings, $new not reviewed"
[ "$new" = 0 ]
