#!/usr/bin/env bash
# UniPrefill time-to-first-token on the device's 16-core CPU (issue 8): every policy measured
# side by side in one process per model, one prompt chunk per UniPrefill prompt, 16 threads.
# Dense is also measured with the whole prompt in one chunk, so the chunk size is not what
# makes the difference.
#   bench/cpu/device_uniprefill.sh SIEVE SMOLLM2 GEMMA OUT
set -u
SIEVE=$1 SMOL=$2 GEMMA=$3 OUT=$4
mkdir -p "$OUT"
common=(--threads-list 16 --n-decode 1 --reps 1 -f data/haystack/essays.txt)
"$SIEVE" bench -m "$SMOL" "${common[@]}" --warmup 1 --lengths 4096,8192 \
  --policies dense,uniprefill,tokenselect >"$OUT/ttft_smollm2.json" 2>"$OUT/ttft_smollm2.log"
"$SIEVE" bench -m "$SMOL" "${common[@]}" --warmup 1 --lengths 4096,8192 --batch 8192 \
  --policies dense >"$OUT/ttft_smollm2_dense_one_chunk.json" 2>"$OUT/ttft_smollm2_dense_one_chunk.log"
"$SIEVE" bench -m "$GEMMA" "${common[@]}" --warmup 0 --lengths 8192,16384,32000 \
  --policies dense,uniprefill,tokenselect >"$OUT/ttft_gemma.json" 2>"$OUT/ttft_gemma.log"
