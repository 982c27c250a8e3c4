#!/usr/bin/env bash
# run-tests.sh BUILD [gpu] — runs the C core tests and the busted specs inside BUILD/fp8lab (in two lanes; the GPU
# ones one after the other), then prints how long each part took (wall seconds) and one closing line
# "N passed, N failed" summing both.
# Each part has a time limit, about ten times its usual time here so that only a hang reaches it (a hung test would
# otherwise hold make test until CI's 90 minutes): FL_TEST_TIMEOUT_C seconds for the C tests (default 1500),
# FL_TEST_TIMEOUT_SPECS for each spec file's busted run (default 900; the slowest file takes ~40 s alone, a few
# times that under the sanitizers or a loaded machine); 0 means none. A part that reaches it is stopped (coreutils'
# timeout: TERM to its process group, KILL 10 s later), the run says which part and, for the C tests, which test
# was running, and fails; the other spec files still run.
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
SLIM=$(limit_of FL_TEST_TIMEOUT_SPECS 900) || exit 2
log=$(mktemp); trap 'rm -f "$log"' EXIT
rc=0

# limited LIMIT OUT CMD...: CMD under timeout in the background (a process group of its own), its output to OUT;
# sets lp to timeout's pid. Its status is CMD's, 124 (or 137 after the KILL) where the limit stopped it. A TERM sent
# to timeout reaches CMD's whole group.
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
s_timed_out() {   # s_timed_out WHAT: the specs' message
  echo "run-tests.sh: the busted specs ($B/fp8lab tests/busted.lua $1) ran past their limit of $SLIM s" \
       "(FL_TEST_TIMEOUT_SPECS) and were stopped, their process group killed"
}

if [ "$MODE" = gpu ]; then
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
  glog=$(mktemp)
  trap '[ -n "$fp" ] && kill "$fp" 2>/dev/null; [ -n "$ft" ] && kill "$ft" 2>/dev/null; rm -f "$log" "$glog"' EXIT
  trap 'exit 130' INT; trap 'exit 143' TERM
  foreground "$CLIM" "$glog" "$B/test_core" gpu_
  [ "$prc" -eq 0 ] || rc=1
  if stopped "$prc" "$psecs" "$CLIM"; then c_timed_out "$glog" gpu_ | tee -a "$log"; fi
  foreground "$SLIM" "$glog" "$B/fp8lab" tests/busted.lua tests/gpu
  [ "$prc" -eq 0 ] || rc=1
  if stopped "$prc" "$psecs" "$SLIM"; then s_timed_out tests/gpu | tee -a "$log"; fi
else
  # Two lanes, one a core (make test's machine has two; a spec file is mostly one Lua thread). The background lane
  # runs test_core, then takes spec files; this shell takes spec files from the start. Each spec file is its own
  # busted run (its own fp8lab process, under its own time limit) whose report is printed whole when it ends. Both
  # lanes walk one list, the slowest files first (scripts/spec-times.txt; a file it does not list goes before them
  # all), a lane claiming a file by making its directory (mkdir is atomic), so the lanes end within about one small
  # file of each other. Until stop 97 the specs were one busted run beside test_core: the second core idled for the
  # last ~60% of the run. BUILD/spec-times.txt gets this run's times, in the list's form.
  # A run stopped early (Ctrl-C, a TERM from CI's timeout) stops test_core and the spec runs and prints what the C
  # tests had written (which passed; a hung one is the next): before stop 96 that report was deleted unseen.
  work=$(mktemp -d)
  clog=$work/c.log
  # the spec files, slowest first: lines "SECONDS FILE" of scripts/spec-times.txt; files it lacks get 999999
  mapfile -t specs < <(for f in tests/spec/*_spec.lua; do echo "$f"; done | awk -v tf=scripts/spec-times.txt '
    BEGIN { while ((getline l < tf) > 0) if (l !~ /^#/ && split(l, w, " ") == 2) t[w[2]] = w[1] }
    { print (($0 in t) ? t[$0] : 999999), $0 }' | sort -k1,1gr -k2,2 | cut -d' ' -f2-)
  now() { echo "${EPOCHREALTIME/,/.}"; }
  # run_spec I: spec file I under its limit, in the background of this (sub)shell (child: timeout's pid), so that a
  # TERM trap runs at once and can stop it
  run_spec() {
    local i=$1 f=${specs[$1]} s s0=$SECONDS r
    s=$(now)
    limited "$SLIM" "$work/$i.out" "$B/fp8lab" tests/busted.lua "$f"; child=$lp
    wait "$child"; r=$?; child=
    awk -v s="$s" -v e="$(now)" -v f="$f" 'BEGIN { printf "%.1f %s\n", e - s, f }' > "$work/$i.t"
    if stopped "$r" "$((SECONDS - s0))" "$SLIM"; then s_timed_out "$f" >> "$work/$i.out"; fi
    [ "$r" -eq 0 ] || echo "$f (exit status $r)" >> "$work/failed"
    { flock 9; cat "$work/$i.out"; cat "$work/$i.out" >> "$log"; } 9> "$work/lock"
  }
  take_specs() {
    local i
    for i in "${!specs[@]}"; do
      mkdir "$work/claim.$i" 2>/dev/null && run_spec "$i"
    done
    return 0
  }
  t0=$SECONDS
  child=
  ( trap '[ -n "$child" ] && kill "$child" 2>/dev/null && wait "$child"; exit 143' TERM
    s=$SECONDS; limited "$CLIM" "$clog" "$B/test_core"; child=$lp
    wait "$child"; c=$?; child=; echo $((SECONDS - s)) > "$clog.t"
    if stopped "$c" "$((SECONDS - s))" "$CLIM"; then c_timed_out "$clog" > "$work/c.stopped"; fi
    take_specs; echo $((SECONDS - s)) > "$work/lane2.t"; exit $c ) &
  cpid=$!
  shown=0
  stop_c() {
    if [ "$shown" = 0 ]; then
      [ -n "$child" ] && kill "$child" 2>/dev/null
      kill "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null
      if [ -e "$clog.t" ]; then echo "(the run was stopped before the specs ended; what the C core tests printed:)"
      else echo "(the run was stopped before the C core tests ended; what they printed:)"; fi
      cat "$clog"
    fi
    rm -rf "$log" "$work"
  }
  trap stop_c EXIT; trap 'exit 130' INT; trap 'exit 143' TERM
  take_specs
  t1=$SECONDS
  wait "$cpid"; c=$?
  [ "$c" -eq 0 ] || rc=1
  shown=1
  tee -a "$log" < "$clog"
  [ -e "$work/c.stopped" ] && tee -a "$log" < "$work/c.stopped"
  if [ -s "$work/failed" ]; then rc=1; echo "spec runs that exited non-zero:"; cat "$work/failed"; fi
  cat "$work"/*.t 2>/dev/null | awk 'NF == 2' | sort -k1,1gr -k2,2 > "$B/spec-times.txt.tmp" \
    && mv "$B/spec-times.txt.tmp" "$B/spec-times.txt" 2>/dev/null
  times="C core tests $(cat "$clog.t" 2>/dev/null || echo '?') s, then specs, in $(cat "$work/lane2.t" 2>/dev/null \
    || echo '?') s; beside them the other lane's specs $((t1 - t0)) s (${#specs[@]} spec files, their times in \
$B/spec-times.txt); $((SECONDS - t0)) s in all"
fi
# C runner lines: "N passed, N failed"; busted: "N successes / N failures / N errors / N pending", "1 success / ..."
# (until stop 97 the pattern read "successes?", which "1 success" does not match: one spec file with one test)
read -r p f < <(awk '
  /^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3 }
  /[0-9]+ success(es)? \/ [0-9]+ failures? \/ [0-9]+ errors? \// { p += $1; f += $4 + $7 }
  END { print p+0, f+0 }' "$log")
echo
[ -n "${times:-}" ] && echo "$times"
echo "$p passed, $f failed"
[ "$rc" -eq 0 ] && [ "$f" -eq 0 ] && [ "$p" -gt 0 ]
