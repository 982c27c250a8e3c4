#!/usr/bin/env bash
# run-tests.sh BUILD [gpu] — runs the C core tests and the busted specs inside BUILD/fp8lab (in two lanes; the GPU
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
  # Two lanes, one a core (make test's machine has two; a spec file is mostly one Lua thread). The background lane
  # runs test_core, then takes spec files; this shell takes spec files from the start. Each spec file is its own
  # busted run (its own fp8lab process) whose report is printed whole when it ends. Both lanes walk one list, the
  # slowest files first (scripts/spec-times.txt; a file it does not list goes before them all), a lane claiming a
  # file by making its directory (mkdir is atomic), so the lanes end within about one small file of each other.
  # Until stop 97 the specs were one busted run beside test_core: the second core idled for the last ~60% of the
  # run. BUILD/spec-times.txt gets this run's times, in the list's form.
  # A run stopped early (Ctrl-C, a TERM from CI's timeout) stops test_core and the spec runs and prints what the C
  # tests had written (which passed; a hung one is the next): before stop 96 that report was deleted unseen.
  work=$(mktemp -d)
  clog=$work/c.log
  # the spec files, slowest first: lines "SECONDS FILE" of scripts/spec-times.txt; files it lacks get 999999
  mapfile -t specs < <(for f in tests/spec/*_spec.lua; do echo "$f"; done | awk -v tf=scripts/spec-times.txt '
    BEGIN { while ((getline l < tf) > 0) if (l !~ /^#/ && split(l, w, " ") == 2) t[w[2]] = w[1] }
    { print (($0 in t) ? t[$0] : 999999), $0 }' | sort -k1,1gr -k2,2 | cut -d' ' -f2-)
  now() { echo "${EPOCHREALTIME/,/.}"; }
  # run_spec I: spec file I in the background of this (sub)shell, so that a TERM trap runs at once and can stop it
  run_spec() {
    local i=$1 f=${specs[$1]} s r
    s=$(now)
    "$B/fp8lab" tests/busted.lua "$f" > "$work/$i.out" 2>&1 & child=$!
    wait "$child"; r=$?; child=
    awk -v s="$s" -v e="$(now)" -v f="$f" 'BEGIN { printf "%.1f %s\n", e - s, f }' > "$work/$i.t"
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
    s=$SECONDS; "$B/test_core" > "$clog" 2>&1 & child=$!
    wait "$child"; c=$?; child=; echo $((SECONDS - s)) > "$clog.t"
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
  wait "$cpid" || rc=1
  shown=1
  tee -a "$log" < "$clog"
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
