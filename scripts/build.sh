#!/usr/bin/env bash
# Configures and builds a preset (default: release). CUDA is compiled when nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] && export PATH=$PATH:/usr/local/cuda/bin
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
