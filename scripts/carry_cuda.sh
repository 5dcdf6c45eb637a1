#!/usr/bin/env bash
# Puts what a GPU machine needs to run the CUDA tests and benchmark into one folder (git-ignored
# .carry/cuda by default): test_cuda and bench_cuda (stripped) from a CUDA build, the shared
# libraries they load that a bare GPU machine lacks (libcudart, libfmt), and commit.txt naming
# the commit the binaries were built from (scripts/gpu_bench.sh reports it: the GPU machine's
# copy of the tree may not know the current commit).
#
#   scripts/carry_cuda.sh [BUILD_DIR] [OUT_DIR]      (defaults: build-cuda, .carry/cuda)
# then, on the GPU machine: LD_LIBRARY_PATH=$PWD/.carry/cuda/lib scripts/gpu_bench.sh .carry/cuda $OUT
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-cuda}
OUT=${2:-.carry/cuda}
test_bin="$BUILD/src/backend/cuda/test_cuda"
bench_bin="$BUILD/bench_cuda/bench_cuda"
for f in "$test_bin" "$bench_bin"; do
  [ -x "$f" ] || { echo "carry_cuda: $f is missing: build it first (ninja -C $BUILD test_cuda bench_cuda)" >&2; exit 1; }
done
mkdir -p "$OUT/lib"
cp "$test_bin" "$bench_bin" "$OUT/"
strip "$OUT/test_cuda" "$OUT/bench_cuda"
for lib in libcudart.so libfmt.so; do
  path=$(ldd "$bench_bin" | awk -v l="$lib" '$1 ~ "^"l {print $3; exit}')
  [ -n "$path" ] && cp -L "$path" "$OUT/lib/"
done
dirty=$(git status --porcelain --untracked-files=no -- src bench | head -1)
echo "$(git rev-parse --short HEAD)${dirty:+ (plus uncommitted changes)}" > "$OUT/commit.txt"
du -sh "$OUT"
