#!/usr/bin/env bash
# gpu_bundle.sh BUILD OUTDIR [--data] — a CUDA build made here, packed to run on a GPU machine that has the NVIDIA
# driver and CUDA libraries but not this build's Debian packages (a rented or lent GPU machine with a different
# distribution). OUTDIR gets:
#   bundle.txz   BUILD's fp8lab and test_core (and bench_gpu when built; debug sections stripped from the packed
#                copies), the shared libraries they link that are
#                not glibc's, the C++ runtime's, CUDA's or NCCL's, and the Lua modules the specs run on (busted and
#                what it loads, C modules included; symbolic links resolved); with --data also Debian's
#                Fashion-MNIST (the demo's dataset, ~30 MB). xz, not gzip: the device tool carries 64 MiB with the
#                working tree, and with --data a gzip bundle came to 63 MB (2026-12-04), this one to 48 MB
#   run.sh       on the GPU machine, from the repository's root: `OUTDIR/run.sh COMMAND...` unpacks the bundle
#                once (binaries into BUILD, the rest into OUTDIR/root), then runs COMMAND with the libraries and
#                Lua modules found there, NCCL from the system or from PyTorch's wheel (nvidia.nccl), e.g.
#                `OUTDIR/run.sh scripts/gpu_check.sh BUILD OUT env tests sanitize`
# fp8.data reads the dataset at Debian's path, so run.sh links the packed copy there when the machine has none.
set -euo pipefail
B=${1:?usage: gpu_bundle.sh BUILD OUTDIR [--data]}; OUTD=${2:?usage: gpu_bundle.sh BUILD OUTDIR [--data]}
DATA=0
[ "${3:-}" = --data ] && DATA=1
[ -n "${3:-}" ] && [ "$DATA" = 0 ] && { echo "gpu_bundle.sh: unknown option '$3' (known: --data)" >&2; exit 2; }
for f in fp8lab test_core; do
  [ -x "$B/$f" ] || { echo "gpu_bundle.sh: no $B/$f (make BUILD=$B all $B/test_core)" >&2; exit 1; }
done
bins=("$B/fp8lab" "$B/test_core")
[ -x "$B/bench_gpu" ] && bins+=("$B/bench_gpu")
# (grep -c reads to the end: with -q, fp8lab's write after grep has quit fails the pipeline under pipefail)
"$B/fp8lab" env 2>/dev/null | grep -c '^CUDA *built in' > /dev/null ||
  echo "gpu_bundle.sh: warning: $B/fp8lab is built without CUDA (make BUILD=$B CUDA=1)" >&2

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/root/lib" "$stage/root/lua" "$OUTD"
# Shared libraries: everything ldd resolves except the C library, the C++/GCC runtime (the GPU machine's own,
# usually newer), CUDA's and NCCL's (the driver's machine has its matching ones).
for b in "${bins[@]}"; do ldd "$b"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
  grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so|/libstdc\+\+\.so|/libgcc_s\.so|/libnccl|/libcu|/libnv' |
  while read -r lib; do cp -L "$lib" "$stage/root/lib/"; done
# Lua modules (Debian's /usr/share/lua and the C modules under /usr/lib/<triplet>/lua), links resolved.
for d in /usr/share/lua /usr/lib/x86_64-linux-gnu/lua; do
  [ -d "$d" ] && cp -rL "$d" "$stage/root/lua/$(basename "$(dirname "$d")")-$(basename "$d")"
done
if [ "$DATA" = 1 ]; then
  src=/usr/share/datasets/fashion-mnist
  [ -d "$src" ] || { echo "gpu_bundle.sh: --data: no $src (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
  mkdir -p "$stage/root/fashion-mnist" && cp -L "$src"/*.gz "$stage/root/fashion-mnist/"
fi
mkdir -p "$stage/bin"
for b in "${bins[@]}"; do strip --strip-debug -o "$stage/bin/$(basename "$b")" "$b"; done
rm -f "$OUTD/bundle.tgz"
XZ_OPT=${XZ_OPT:--T0} tar cJf "$OUTD/bundle.txz" -C "$stage" bin root
cat > "$OUTD/run.sh" <<EOF
#!/usr/bin/env bash
# run.sh COMMAND... — made by scripts/gpu_bundle.sh; run from the repository's root on the GPU machine.
set -euo pipefail
here=\$(cd "\$(dirname "\$0")" && pwd)
# (Python's lzma where the machine has no xz)
[ -d "\$here/root" ] || tar xJf "\$here/bundle.txz" -C "\$here" 2>/dev/null ||
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "\$here/bundle.txz" "\$here"
mkdir -p "$B"
for f in "\$here"/bin/*; do   # the packed binaries into $B unless already there (a copy, then a rename: never a busy file)
  t="$B/\$(basename "\$f")"
  cmp -s "\$f" "\$t" || { cp "\$f" "\$t.tmp" && mv "\$t.tmp" "\$t"; }
done
nccl=\$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0] + "/lib")' 2>/dev/null || true)
cuda=\${CUDA_HOME:-/usr/local/cuda}/lib64
export LD_LIBRARY_PATH="\$here/root/lib:\$cuda\${nccl:+:\$nccl}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
L=\$here/root/lua
export LUA_PATH="\$L/share-lua/5.4/?.lua;\$L/share-lua/5.4/?/init.lua;\$L/share-lua/5.1/?.lua;\$L/share-lua/5.1/?/init.lua;;"
export LUA_CPATH="\$L/x86_64-linux-gnu-lua/5.4/?.so;;"
if [ -d "\$here/root/fashion-mnist" ] && [ ! -e /usr/share/datasets/fashion-mnist ]; then
  mkdir -p /usr/share/datasets && ln -s "\$here/root/fashion-mnist" /usr/share/datasets/fashion-mnist
fi
exec "\$@"
EOF
chmod +x "$OUTD/run.sh"
echo "gpu_bundle.sh: $OUTD/bundle.txz ($(du -h "$OUTD/bundle.txz" | cut -f1)), $OUTD/run.sh; on the GPU machine, from the repository's root: $OUTD/run.sh COMMAND..."
