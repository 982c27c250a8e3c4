#!/usr/bin/env bash
# check-omp.sh [DIR...] — fails where a C file of core/ or lua/ (or the DIRs named) opens an OpenMP parallel region
# other than through core/cpu/par.h's FL_PAR_FOR, FL_PAR_FOR_SIMD and FL_PARALLEL, which run the region serially where it
# would get a team of one (libgomp allocates such a team at every region and exits the process where it cannot:
# docs/robustness.md, stop 104), or where a block holds a construct that allocates a work share outside a team.
# Run by `make test`; tests/spec/omp_team_spec.lua checks that it fails on each kind of line.
set -u
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- core lua
bad=0
files=$(find "$@" \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cpp' \) ! -path core/cpu/par.h | sort)
[ -n "$files" ] || { echo "check-omp: no C files under $*" >&2; exit 2; }
# The files as logical lines, "FILE:LINE:text" (LINE the first physical one): a line ended by a backslash joined to the
# next, and so is one where an FL_PRAGMA( or _Pragma( is still open (its argument goes on below), so that a directive
# split across lines is read whole (stop 105: `#pragma omp \` over `parallel for` passed the line-by-line grep).
logical() {
    awk 'function open_at(s,    i, j, n, c) {
             i = 0
             while (match(substr(s, i + 1), /(FL_PRAGMA|_Pragma)[[:space:]]*\(/)) i += RSTART + RLENGTH - 1
             if (i == 0) return 0
             n = 1
             for (j = i + 1; j <= length(s); j++) { c = substr(s, j, 1); if (c == "(") n++; else if (c == ")") n-- }
             return n > 0
         }
         FNR == 1 && buf != "" { print name ":" start ":" buf; buf = "" }
         {
             if (buf == "") { start = FNR; name = FILENAME; buf = $0; k = 0 } else { buf = buf " " $0; k++ }
             if (buf ~ /\\[[:space:]]*$/) { sub(/\\[[:space:]]*$/, "", buf); next }
             if (k < 20 && open_at(buf)) next
             print name ":" start ":" buf; buf = ""
         }
         END { if (buf != "") print name ":" start ":" buf }' "$@"
}
# A parallel construct in any spelling: #pragma, _Pragma("..."), FL_PRAGMA(...), `#  pragma`, combined constructs.
if hits=$(logical $files | grep -E '(#[[:space:]]*pragma|_Pragma[[:space:]]*\([[:space:]]*"|FL_PRAGMA[[:space:]]*\()[[:space:]]*omp[[:space:]]+((target|teams|distribute)[[:space:]]+)*parallel\b'); then
    echo "check-omp: a parallel region opened outside core/cpu/par.h's macros (use FL_PAR_FOR, FL_PAR_FOR_SIMD or FL_PARALLEL):"
    echo "$hits"
    bad=1
fi
# Serially a block's orphaned constructs run with no team; these allocate a work share there (libgomp's
# gomp_work_share_start), so the block must not hold them.
if hits=$(logical $files | grep -E '(#[[:space:]]*pragma|_Pragma[[:space:]]*\([[:space:]]*"|FL_PRAGMA[[:space:]]*\()[[:space:]]*omp[[:space:]]+(for|sections|ordered|loop)\b.*(schedule[[:space:]]*\([[:space:]]*(dynamic|guided|runtime|auto)|ordered|sections)|omp[[:space:]]+(sections|ordered)\b'); then
    echo "check-omp: a work share that allocates outside a team (a dynamic, guided, runtime or auto schedule, sections, ordered):"
    echo "$hits"
    bad=1
fi
[ $bad -eq 0 ] && echo "check-omp: $(echo "$files" | wc -l) files, no bare parallel region"
exit $bad
