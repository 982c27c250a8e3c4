#!/usr/bin/env bash
# run-tests.sh BUILD [gpu] — runs the C core tests and the busted specs inside BUILD/fp8lab (side by side; the GPU
# ones one after the other), then prints how long each part took (wall seconds) and one closing line
# "N passed, N failed" summing both.
set -uo pipefail
B=${1:-build}; MODE=${2:-}
log=$(mktemp); trap 'rm -f "$log"' EXIT
rc=0
if [ "$MODE" = gpu ]; then
  "$B/test_core" gpu_ 2>&1 | tee -a "$log" || rc=1
  "$B/fp8lab" tests/busted.lua tests/gpu 2>&1 | tee -a "$log" || rc=1
else
  # The C tests run beside the specs (the machine's second core is idle through much of the specs, which are mostly
  # one Lua thread); their report is printed when the specs are done.
  # A run stopped early (Ctrl-C, a TERM from CI's timeout) stops test_core too and prints what it had written (which
  # C tests passed; a hung one is the next): before stop 96 its report was deleted unseen and a TERM left it running.
  clog=$(mktemp)
  t0=$SECONDS
  ( trap 'kill "$tc" 2>/dev/null; wait "$tc"; exit 143' TERM
    s=$SECONDS; "$B/test_core" > "$clog" 2>&1 & tc=$!
    wait "$tc"; c=$?; echo $((SECONDS - s)) > "$clog.t"; exit $c ) &
  cpid=$!
  shown=0
  stop_c() {
    if [ "$shown" = 0 ]; then
      kill "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null
      echo "(the run was stopped before the C core tests ended; what they printed:)"; cat "$clog"
    fi
    rm -f "$log" "$clog" "$clog.t"
  }
  trap stop_c EXIT; trap 'exit 130' INT; trap 'exit 143' TERM
  "$B/fp8lab" tests/busted.lua tests/spec 2>&1 | tee -a "$log" || rc=1
  t1=$SECONDS
  wait "$cpid" || rc=1
  shown=1
  tee -a "$log" < "$clog"
  times="C core tests $(cat "$clog.t" 2>/dev/null || echo '?') s beside the busted specs $((t1 - t0)) s; $((SECONDS - t0)) s in all"
fi
# C runner lines: "N passed, N failed"; busted: "N successes / N failures / N errors / N pending"
read -r p f < <(awk '
  /^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3 }
  /[0-9]+ successes? \/ [0-9]+ failures? \/ [0-9]+ errors? \// { p += $1; f += $4 + $7 }
  END { print p+0, f+0 }' "$log")
echo
[ -n "${times:-}" ] && echo "$times"
echo "$p passed, $f failed"
[ "$rc" -eq 0 ] && [ "$f" -eq 0 ] && [ "$p" -gt 0 ]
