# perfdoc.sh — sourced by the bench scripts: write_section HEADING BODY replaces (or appends) one
# "## " section of docs/performance.md, atomically (temp file with the document's mode, fsync, mv, fsync of the
# directory); the rest of the file is kept. The body goes to awk through the environment, so its backslashes stay.
# A script calls it only after every run it reports has succeeded (a failed run exits before, the old section kept).
# make_build BUILD TARGET...: make in BUILD with the settings its flags stamp was made with ($BUILD/make.args, when
# no outer make passes its own), so a bench script's `make` does not rebuild the build with other flags.
# cpu_has_bf16dot: whether this CPU has AVX-512 BF16 (vdpbf16ps), so whether the CPU kernels run their AVX-512 BF16
# families and the sections set bf16 and FP8 against the bf16 dot limit, or the AVX2 + FMA families and fp32 FMA.
write_section() {
  local sec=$1 body=$2 doc=docs/performance.md tmp
  mkdir -p docs
  tmp=$(mktemp "$doc.XXXXXX")
  if [ -f "$doc" ]; then
    chmod --reference="$doc" "$tmp"
    FL_SEC=$sec FL_BODY=$body awk '
      BEGIN { sec = ENVIRON["FL_SEC"]; body = ENVIRON["FL_BODY"] }
      $0 == sec { skip = 1; if (!done) { print body; print ""; done = 1 }; next }
      skip && /^## / { skip = 0 }
      !skip { print }
      END { if (!done) { print ""; print body } }' "$doc" > "$tmp" || { rm -f "$tmp"; return 1; }
  else
    chmod "$(printf '%o' $(( 0666 & ~0$(umask) )))" "$tmp"
    { echo "# fp8lab performance"; echo; echo "Every figure here comes with its command, machine and date."; echo; printf '%s\n' "$body"; } > "$tmp"
  fi
  sync -- "$tmp" && mv -f "$tmp" "$doc" && sync -- "$(dirname "$doc")" || { rm -f "$tmp"; return 1; }
  echo "wrote $sec to $doc"
}
# bench_fail MESSAGE: the script stops (exit 1) before writing anything. run_ok DESC CMD...: CMD's stdout, or, when
# it fails, its stderr (last 40 lines) and bench_fail; call it as out=$(run_ok ...) (an assignment: set -e stops
# there; a pipe or a < <(...) would hide the failure). need DESC TEXT ERE: bench_fail unless a line of TEXT matches.
bench_fail() { echo "${0##*/}: $*; docs/performance.md left alone" >&2; exit 1; }
run_ok() {
  local desc=$1 err out rc=0; shift
  err=$(mktemp)
  out=$("$@" 2>"$err") || rc=$?
  if [ "$rc" != 0 ]; then
    printf '%s\n' "$out" | tail -n 20 >&2; tail -n 40 "$err" >&2; rm -f "$err"
    bench_fail "$desc failed (exit $rc)"
  fi
  rm -f "$err"
  printf '%s\n' "$out"
}
need() { grep -qE "$3" <<<"$2" || { printf '%s\n' "$2" | tail -n 20 >&2; bench_fail "$1 gave no result (no line matching $3)"; }; }
make_build() {
  local b=$1; shift
  if [ -z "${MAKEFLAGS:-}" ] && [ -f "$b/make.args" ]; then
    MAKEFLAGS="-- $(cat "$b/make.args")" make --no-print-directory BUILD="$b" "$@"
  else
    make --no-print-directory BUILD="$b" "$@"
  fi
}
machine_line() {
  # the family and model too: lscpu says only "AMD EPYC" on these hosts, which spans Zen 3 (family 25 model 1),
  # Zen 4 (25/17) and Zen 5 (26), and the sections must say which (the header of docs/performance.md)
  local model fam mod flags
  model=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1)
  fam=$(sed -n 's/^cpu family[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n1)
  mod=$(sed -n 's/^model[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n1)
  if cpu_has_bf16dot && grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null; then flags="AVX-512 with AVX512_BF16 and AMX-BF16"
  elif cpu_has_bf16dot; then flags="AVX-512 with AVX512_BF16"
  elif grep -qw avx512f /proc/cpuinfo 2>/dev/null; then flags="AVX-512, no AVX512_BF16"
  else flags="no AVX-512"; fi
  echo "${model:-unknown CPU} (family ${fam:-?} model ${mod:-?}, $flags; $(nproc 2>/dev/null || echo '?') CPUs visible), load average at the start $(cut -d' ' -f1-3 /proc/loadavg)"
}
cpu_has_bf16dot() {
  grep -qw avx512f /proc/cpuinfo 2>/dev/null && grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null
}
