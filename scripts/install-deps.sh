#!/usr/bin/env bash
# install-deps.sh — installs the Debian 12 packages fp8lab builds, tests and demos with.
# Idempotent: does nothing when everything is present. Needs root (or sudo) to install.
# `install-deps.sh fuzz` also installs clang and its sanitizer and libFuzzer runtime (libclang-rt-14-dev: only a
# Recommends of clang 14, which --no-install-recommends leaves out), which only `make fuzz` and `make analyze` need;
# `install-deps.sh bench` the peers `make bench` measures against (Debian's PyTorch with OpenBLAS, and PyTorch 2.x
# from PyPI in a virtual environment outside the repository, $TORCH2_VENV or /opt/torch2: several GB);
# `install-deps.sh test` the Python packages tests/spec/interop_spec.lua checks safetensors files with
# (safetensors, ml_dtypes, numpy from PyPI, via pip; the spec skips with a message without them).
set -euo pipefail
PKGS=(build-essential pkg-config lua5.4 liblua5.4-dev libdnnl-dev libyaml-dev zlib1g-dev
      libcjson-dev libreadline-dev lua-busted dataset-fashion-mnist fortunes
      openmpi-bin libopenmpi-dev gnuplot-nox xz-utils)
PIP=()
for group in "$@"; do
  case "$group" in
    fuzz) PKGS+=(clang libclang-rt-14-dev) ;;
    bench) PKGS+=(python3-torch libopenblas0-pthread python3-venv); TORCH2=1 ;;
    test) PIP+=(safetensors ml_dtypes numpy) ;;
    *) echo "install-deps: unknown group '$group' (known: fuzz, bench, test)" >&2; exit 2 ;;
  esac
done
if [ ${#PIP[@]} -gt 0 ] && ! python3 -c 'import safetensors, ml_dtypes, numpy' >/dev/null 2>&1; then
  echo "install-deps: pip installing ${PIP[*]}"
  python3 -m pip install -q "${PIP[@]}" ||
    echo "install-deps: pip could not install ${PIP[*]}; the Python interop spec will skip" >&2
fi
TORCH2=${TORCH2:-0}
torch2() {   # PyTorch 2.x from PyPI in its own virtual environment (bench only)
  local venv=${TORCH2_VENV:-/opt/torch2}
  [ "$TORCH2" = 1 ] || return 0
  "$venv/bin/python3" -c 'import torch' >/dev/null 2>&1 && return 0
  echo "install-deps: PyTorch 2.x into $venv (pip, several GB)"
  python3 -m venv "$venv" && "$venv/bin/pip" install -q torch numpy ||
    echo "install-deps: could not install PyTorch 2.x into $venv; make bench will skip its rows" >&2
}
if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: no apt-get/dpkg here: this script installs Debian 12 packages and cannot check or install" \
       "anything on this system; install the equivalents of these yourself: ${PKGS[*]}" >&2
  exit 1
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && { torch2; exit 0; }
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"
  else
    echo "install-deps: these Debian packages are missing: ${missing[*]}" >&2
    echo "install-deps: run as root (or with sudo): apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
torch2
