#!/usr/bin/env bash
# UniPrefill time-to-first-token on the device's 16-core CPU (issue 8): every policy measured
# side by side in one process per model, one prompt chunk per UniPrefill prompt, 16 threads.
#   bench/cpu/device_uniprefill.sh SIEVE SMOLLM2 GEMMA OUT
set -u
SIEVE=$1 SMOL=$2 GEMMA=$3 OUT=$4
mkdir -p "$OUT"
common=(--threads-list 16 --n-decode 1 --reps 1 --warmup 1 -f data/haystack/essays.txt)
"$SIEVE" bench -m "$SMOL" "${common[@]}" --lengths 4096,8192 \
  --policies dense,uniprefill,tokenselect >"$OUT/ttft_smollm2.json" 2>"$OUT/ttft_smollm2.log"
"$SIEVE" bench -m "$GEMMA" "${common[@]}" --warmup 0 --lengths 8192,16384,32000 \
  --policies dense,uniprefill,tokenselect >"$OUT/ttft_gemma.json" 2>"$OUT/ttft_gemma.log"
# The later SmolLM2 layer schedule measured for quality (device_uniprefill_eval.sh).
"$SIEVE" bench -m "$SMOL" "${common[@]}" --lengths 4096,8192 --policies uniprefill \
  --set up_layers=14,18,22,26 >"$OUT/ttft_smollm2_late.json" 2>"$OUT/ttft_smollm2_late.log"
