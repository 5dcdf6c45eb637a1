#!/usr/bin/env bash
# Puts what scripts/gpu_sparse_bench.sh needs on a bare GPU machine into git-ignored .carry/
# (well under the 64 MiB a call may carry): the sieve binary (stripped) from a CUDA build, the
# shared libraries it loads that such a machine may lack (libcudart, libfmt, libzip, libpcre2;
# cuBLAS is too large to carry and comes with the machine's CUDA), commit.txt, random_gguf.py,
# and the random-weight model headers (bench/cuda/llama3_8b_header.py; Qwen2.5-Coder-1.5B's own
# when its GGUF is in the model cache).
#
#   scripts/carry_sieve.sh [BUILD_DIR]        (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
bin="$BUILD/tools/sieve/sieve"
[ -x "$bin" ] || { echo "carry_sieve: $bin is missing: cmake --build $BUILD --target sieve" >&2; exit 1; }
RG=${RANDOM_GGUF:-/work/shared/tools/random_gguf.py}
MODELS=${SIEVE_MODELS:-$HOME/.cache/sieve/models}
mkdir -p .carry/lib
cp "$bin" .carry/sieve
strip .carry/sieve
for lib in libcudart.so libfmt.so libzip.so libpcre2-8.so; do
  path=$(ldd "$bin" | awk -v l="$lib" '$1 ~ "^"l {print $3; exit}')
  [ -n "$path" ] && cp -L "$path" ".carry/lib/$(basename "$path")"
done
dirty=$(git status --porcelain --untracked-files=no -- src tools | head -1)
echo "$(git rev-parse --short HEAD)${dirty:+ (plus uncommitted changes)}" > .carry/commit.txt
install -m 0755 "$RG" .carry/random_gguf.py
src_llama="$MODELS/smollm2.gguf"
[ -f .carry/llama8b.hdr ] || python3 bench/cuda/llama3_8b_header.py "$src_llama" .carry/llama8b.hdr
# the stated reduction for 1M tokens: 8 layers (bf16 KV of 32 layers at 1M is 128 GiB)
[ -f .carry/llama8b-L8.hdr ] || python3 bench/cuda/llama3_8b_header.py "$src_llama" .carry/llama8b-L8.hdr --layers 8
qwen="$MODELS/qwen2.5-coder-1.5b.gguf"
if [ -f "$qwen" ] && [ ! -f .carry/qwen15.hdr ]; then
  python3 .carry/random_gguf.py header "$qwen" .carry/qwen15.hdr
fi
du -sh .carry
