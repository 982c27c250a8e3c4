# perfdoc.sh — sourced by the bench scripts: write_section HEADING BODY replaces (or appends) one
# "## " section of docs/performance.md, atomically (temp file + mv); the rest of the file is kept.
# cpu_has_bf16dot: whether this CPU has AVX-512 BF16 (vdpbf16ps), so whether the CPU kernels run their AVX-512 BF16
# families and the sections set bf16 and FP8 against the bf16 dot limit, or the AVX2 + FMA families and fp32 FMA.
write_section() {
  local sec=$1 body=$2 doc=docs/performance.md tmp
  mkdir -p docs
  tmp=$(mktemp "$doc.XXXXXX")
  if [ -f "$doc" ]; then
    awk -v sec="$sec" -v body="$body" '
      $0 == sec { skip = 1; if (!done) { print body; print ""; done = 1 }; next }
      skip && /^## / { skip = 0 }
      !skip { print }
      END { if (!done) { print ""; print body } }' "$doc" > "$tmp"
  else
    { echo "# fp8lab performance"; echo; echo "Every figure here comes with its command, machine and date."; echo; echo "$body"; } > "$tmp"
  fi
  mv "$tmp" "$doc"
  echo "wrote $sec to $doc"
}
machine_line() {
  local model
  model=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1)
  echo "${model:-unknown CPU} ($(nproc 2>/dev/null || echo '?') CPUs visible), load average at the start $(cut -d' ' -f1-3 /proc/loadavg)"
}
cpu_has_bf16dot() {
  grep -qw avx512f /proc/cpuinfo 2>/dev/null && grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null
}
