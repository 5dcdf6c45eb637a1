#!/usr/bin/env bash
# Create the Python virtualenv used by the offline reference tools
# (tools/reference/*.py, bench/llama_cpp_bench.py). Never used by the engine,
# its build, or CI.
#
# Usage: bash tools/reference/setup.sh [VENV_DIR]   (default /opt/refenv)
#
# Needs: python3 with venv (Debian: python3-venv), cmake, g++ (llama-cpp-python
# is an sdist on PyPI and compiles its vendored llama.cpp: ~15-25 min on 2 cores).
# Versions are the ones the committed fixtures were generated with.
set -euo pipefail

VENV="${1:-/opt/refenv}"
NUMPY_VERSION=2.4.6
GGUF_VERSION=0.19.0
LLAMA_CPP_PYTHON_VERSION=0.3.36

python3 -m venv "$VENV"
"$VENV/bin/pip" install "numpy==${NUMPY_VERSION}" "gguf==${GGUF_VERSION}"
# GGML_NATIVE=ON: tuned to this CPU (the fixtures were made on an AVX2/FMA/F16C
# machine without AVX-512). Logits can move in the last decimals on other SIMD
# paths; token ids never do.
CMAKE_ARGS="-DGGML_NATIVE=ON" "$VENV/bin/pip" install --no-cache-dir \
    "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}"
"$VENV/bin/python" -c "import llama_cpp, gguf; print('llama-cpp-python', llama_cpp.__version__)"
echo done
