#!/usr/bin/env bash
# Configures and builds a preset (default: release). CUDA is compiled when nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] && export PATH=$PATH:/usr/local/cuda/bin
# SIEVE_CMAKE_ARGS: extra configure arguments (scripts/test.sh: -DSIEVE_WERROR=ON)
cmake --preset "$preset" ${SIEVE_CMAKE_ARGS:-} >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
