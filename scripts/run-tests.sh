#!/usr/bin/env bash
# run-tests.sh BUILD [gpu] — runs the C core tests and the busted specs inside BUILD/fp8lab (side by side; the GPU
# ones one after the other), then prints how long each part took (wall seconds) and one closing line
# "N passed, N failed" summing both.
# Each part has a time limit, about ten times its usual time here so that only a hang reaches it (a hung test would
# otherwise hold make test until CI's 90 minutes): FL_TEST_TIMEOUT_C seconds for the C tests (default 1500),
# FL_TEST_TIMEOUT_SPECS for the specs (default 3000); 0 means none. A part that reaches it is stopped (coreutils'
# timeout: TERM to its process group, KILL 10 s later), the run says which part and, for the C tests, which test
# was running, and fails.
set -uo pipefail
B=${1:-build}; MODE=${2:-}
limit_of() {   # limit_of VAR DEFAULT: the variable's value, a whole number of seconds, or the default
  local v=${!1:-$2}
  if ! [[ $v =~ ^[0-9]+$ ]]; then
    echo "run-tests.sh: $1 must be a whole number of seconds (0: no limit), got '$v'" >&2
    exit 2
  fi
  echo "$v"
}
CLIM=$(limit_of FL_TEST_TIMEOUT_C 1500) || exit 2
SLIM=$(limit_of FL_TEST_TIMEOUT_SPECS 3000) || exit 2
log=$(mktemp); trap 'rm -f "$log"' EXIT
rc=0

# limited LIMIT OUT CMD...: CMD under timeout in the background (a process group of its own), its output to OUT;
# sets lp to timeout's pid. Its status is CMD's, 124 (or 137 after the KILL) where the limit stopped it.
limited() {
  local lim=$1 out=$2; shift 2
  timeout -k 10 "$lim" "$@" > "$out" 2>&1 & lp=$!
}
# stopped STATUS SECONDS LIMIT: whether the limit stopped the part (not a test that died of a KILL of its own)
stopped() { [ "$3" -gt 0 ] && { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; } && [ "$2" -ge "$3" ]; }
# The test test_core was running when stopped: the first of `test_core --list FILTER` without a line in its output
# (it prints "ok  NAME ..." or "FAIL NAME ..." after each test, in the list's order).
running_test() {
  local out=$1; shift
  "$B/test_core" --list "$@" 2>/dev/null | awk 'NR == FNR { if ($1 == "ok" || $1 == "FAIL") done[$2] = 1; next }
    !($1 in done) { print; found = 1; exit } END { if (!found) print "(not known)" }' "$out" -
}
c_timed_out() {   # c_timed_out OUT FILTER...: the C tests' message
  local out=$1; shift
  echo "run-tests.sh: the C core tests ($B/test_core) ran past their limit of $CLIM s (FL_TEST_TIMEOUT_C) and were" \
       "stopped, their process group killed, while running test $(running_test "$out" "$@")"
}
s_timed_out() {
  echo "run-tests.sh: the busted specs ($B/fp8lab tests/busted.lua $1) ran past their limit of $SLIM s" \
       "(FL_TEST_TIMEOUT_SPECS) and were stopped, their process group killed"
}
# A foreground part: CMD under its limit, its output shown as it comes (tail) and added to the log; sets prc.
foreground() {
  local lim=$1 out=$2 s=$SECONDS; shift 2
  : > "$out"   # (emptied here: tail must not read an earlier part's output before timeout's redirection)
  limited "$lim" "$out" "$@"; fp=$lp
  tail -f -n +1 --pid="$fp" "$out" & ft=$!
  wait "$fp"; prc=$?; psecs=$((SECONDS - s))
  wait "$ft"
  cat "$out" >> "$log"
  fp= ft=
}
fp= ft=
stop_fg() { [ -n "$fp" ] && kill "$fp" 2>/dev/null; [ -n "$ft" ] && kill "$ft" 2>/dev/null; }

if [ "$MODE" = gpu ]; then
  glog=$(mktemp)
  trap 'stop_fg; rm -f "$log" "$glog"' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM
  foreground "$CLIM" "$glog" "$B/test_core" gpu_
  [ "$prc" -eq 0 ] || rc=1
  if stopped "$prc" "$psecs" "$CLIM"; then c_timed_out "$glog" gpu_ | tee -a "$log"; fi
  foreground "$SLIM" "$glog" "$B/fp8lab" tests/busted.lua tests/gpu
  [ "$prc" -eq 0 ] || rc=1
  if stopped "$prc" "$psecs" "$SLIM"; then s_timed_out tests/gpu | tee -a "$log"; fi
else
  # The C tests run beside the specs (the machine's second core is idle through much of the specs, which are mostly
  # one Lua thread); their report is printed when the specs are done.
  # A run stopped early (Ctrl-C, a TERM from CI's timeout) stops test_core too and prints what it had written (which
  # C tests passed; a hung one is the next): before stop 96 its report was deleted unseen and a TERM left it running.
  clog=$(mktemp); slog=$(mktemp)
  t0=$SECONDS
  ( trap 'kill "$lp" 2>/dev/null; wait "$lp"; exit 143' TERM
    s=$SECONDS; limited "$CLIM" "$clog" "$B/test_core"
    wait "$lp"; c=$?; echo $((SECONDS - s)) > "$clog.t"; exit $c ) &
  cpid=$!
  shown=0
  stop_c() {
    stop_fg
    if [ "$shown" = 0 ]; then
      kill "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null
      echo "(the run was stopped before the C core tests ended; what they printed:)"; cat "$clog"
    fi
    rm -f "$log" "$clog" "$clog.t" "$slog"
  }
  trap stop_c EXIT; trap 'exit 130' INT; trap 'exit 143' TERM
  foreground "$SLIM" "$slog" "$B/fp8lab" tests/busted.lua tests/spec
  [ "$prc" -eq 0 ] || rc=1
  if stopped "$prc" "$psecs" "$SLIM"; then s_timed_out tests/spec | tee -a "$log"; fi
  t1=$SECONDS
  wait "$cpid"; c=$?
  [ "$c" -eq 0 ] || rc=1
  shown=1
  tee -a "$log" < "$clog"
  if stopped "$c" "$(cat "$clog.t" 2>/dev/null || echo 0)" "$CLIM"; then c_timed_out "$clog" | tee -a "$log"; fi
  times="C core tests $(cat "$clog.t" 2>/dev/null || echo '?') s beside the busted specs $((t1 - t0)) s; $((SECONDS - t0)) s in all"
fi
# C runner lines: "N passed, N failed"; busted: "N successes / N failures / N errors / N pending" ("1 success": it
# was not counted, a run of one spec file of one case summed to 0 passed, until stop 97)
read -r p f < <(awk '
  /^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3 }
  /[0-9]+ success(es)? \/ [0-9]+ failures? \/ [0-9]+ errors? \// { p += $1; f += $4 + $7 }
  END { print p+0, f+0 }' "$log")
echo
[ -n "${times:-}" ] && echo "$times"
echo "$p passed, $f failed"
[ "$rc" -eq 0 ] && [ "$f" -eq 0 ] && [ "$p" -gt 0 ]
