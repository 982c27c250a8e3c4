#!/usr/bin/env bash
# analyze.sh — clang's static analyzer (clang --analyze) over the C sources of core/ and lua/, with the build's
# defines and include paths (`make cflags`: every feature the build finds, CUDA, NCCL and MPI among them, so the
# code under their #ifdefs is analyzed as built; GCC-only, warning and debug/optimization flags dropped). Prints
# each warning as file:line:col: message [checker]. A warning listed in scripts/analyze.reviewed (same file, same
# checker, same source line's text) has been read and found false; it is printed as reviewed with the reason.
# Exits 1 if a warning is not on that list, or if a file does not compile (clang's errors are printed: an
# unanalyzed file is not a clean one; each file is also compiled, clang -S -O0, for the errors that only code
# generation gives, as the fuzz targets' clang builds would meet them); 2 for a file that does not exist.
# Not part of `make test` (about 2 minutes on 2 cores); run it after changing C code.
# usage: scripts/analyze.sh [FILE...]     (default: core/*.c core/cpu/*.c lua/*.c; JOBS=N files at a time)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then files=("$@"); else files=(core/*.c core/cpu/*.c lua/*.c); fi
for f in "${files[@]}"; do [ -f "$f" ] || { echo "analyze.sh: no such file: $f" >&2; exit 2; }; done
command -v clang > /dev/null || { echo "analyze.sh: needs clang (apt-get install clang)" >&2; exit 2; }
FLAGS="$(make -s --no-print-directory cflags | tr ' ' '\n' | grep -v -E '^(-g|-O.*|-fvect-cost-model=.*|-W.*)$' | tr '\n' ' ') -Ilua"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export FLAGS
# each file's warnings; when clang fails (the file does not compile), "ERROR " lines with its errors
printf '%s\n' "${files[@]}" | xargs -P "${JOBS:-$(nproc)}" -I{} sh -c '
  o=$(clang --analyze -Xanalyzer -analyzer-output=text $FLAGS "$1" -o /dev/null 2>&1); rc=$?
  printf "%s\n" "$o" | grep -E "^[^ ]+:[0-9]+:[0-9]+: warning:"
  if [ "$rc" -ne 0 ] || printf "%s\n" "$o" | grep -qE "^[^ ]+:[0-9]+:[0-9]+: (fatal )?error:"; then
    printf "%s\n" "$o" | grep -E "(fatal )?error:" | head -n 10 | sed "s/^/ERROR /"
    echo "ERROR $1: clang exited $rc"
  else
    # the analyzer does not generate code, so it misses what only code generation refuses (an intrinsic inlined
    # into a function whose target attribute clang ignored): the file compiled for real, as the fuzz targets are
    o=$(clang -S -O0 -o /dev/null -Werror=ignored-attributes $FLAGS "$1" 2>&1); rc=$?
    if [ "$rc" -ne 0 ]; then
      printf "%s\n" "$o" | grep -E "(fatal )?error:" | head -n 10 | sed "s/^/ERROR /"
      echo "ERROR $1: clang exited $rc (compiling)"
    fi
  fi
  true' _ {} > "$out"
# reviewed: "file | checker | source line (trimmed) | why" lines; a warning matches on the first three
new=0 seen=0 errors=0
while IFS= read -r w; do
  case "$w" in ERROR\ *) echo "$w"; case "$w" in *": clang exited "*) errors=$((errors + 1)) ;; esac; continue ;; esac
  seen=$((seen + 1))
  f=${w%%:*}; rest=${w#*:}; line=${rest%%:*}
  checker=$(sed -E 's/.*\[([^]]+)\]$/\1/' <<< "$w")
  src=$(sed -n "${line}p" "$f" | sed -E 's/^[[:space:]]+//; s/[[:space:]]+$//')
  why=$(awk -F' [|] ' -v f="$f" -v c="$checker" -v s="$src" '$1 == f && $2 == c && $3 == s { print $4; exit }' \
        scripts/analyze.reviewed)
  if [ -n "$why" ]; then echo "reviewed: $w -- $why"; else echo "$w"; new=$((new + 1)); fi
done < <(sort -u "$out")
echo "analyze.sh: ${#files[@]} files, $seen warnings, $new not reviewed${errors:+, $errors not compiled}"
[ "$new" = 0 ] && [ "$errors" = 0 ]
