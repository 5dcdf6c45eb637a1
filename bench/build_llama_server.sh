#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU only) from the llama-cpp-python sdist's
# vendored llama.cpp, for bench/serve_compare.sh. The source and the build stay
# outside the repository (default /tmp/llama-server-src); never commit them.
#
# Usage: bash bench/build_llama_server.sh [DIR]   -> DIR/build/bin/llama-server
# Takes 20-40 min on 2 shared cores (niced, -j2).
set -euo pipefail

DIR="${1:-/tmp/llama-server-src}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"  # the version tools/reference/setup.sh pins
mkdir -p "$DIR"
cd "$DIR"
if [ ! -d llama_cpp_python-"$VERSION" ]; then
    pip download "llama-cpp-python==${VERSION}" --no-binary llama-cpp-python --no-deps -d .
    tar xzf llama_cpp_python-"$VERSION".tar.gz
fi
SRC="$DIR/llama_cpp_python-$VERSION/vendor/llama.cpp"
# Not GGML_NATIVE: on the 2-core VM (its CPU reports AVX-512 with FP16, VNNI, AMX-era flags)
# the -march=native llama-server died with SIGILL/SIGSEGV right after its thread pool started
# (possibly objects from a shared ccache compiled elsewhere for "native"); explicit AVX2/FMA/F16C
# runs. This makes llama.cpp's CPU path AVX2 while sieve may dispatch AVX-512 kernels: say so
# next to any figure.
nice -n 19 cmake -S "$SRC" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF \
    -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON
nice -n 19 cmake --build "$DIR/build" --target llama-server -j2
echo "$DIR/build/bin/llama-server"
