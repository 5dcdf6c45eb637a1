#!/usr/bin/env bash
# UniPrefill quality vs dense (issue 8) on the device's 16-core CPU: four pinned processes
# (4 threads each) on the same samples (seed 7), each stopped after LIMIT seconds
# (samples.jsonl keeps what finished; the log ends with the summary table).
#   bench/cpu/device_uniprefill_eval.sh SIEVE OUT LIMIT 4k SMOLLM2
#     dense, uniprefill with the scaled Llama schedule (7,11,...,27: the first auto default)
#     and two later schedules, from which the auto default was chosen
#   bench/cpu/device_uniprefill_eval.sh SIEVE OUT LIMIT 8k SMOLLM2 GEMMA
#     dense vs uniprefill (auto) at 8K on both models
set -u
SIEVE=$1 OUT=$2 LIMIT=$3 MODE=$4 SMOL=$5 GEMMA=${6:-}
T6=niah_single_1,niah_single_2,niah_multikey_1,vt,passkey,kv_retrieval
run() {
  local cores=$1 dir=$2; shift 2
  timeout "$LIMIT" taskset -c "$cores" "$SIEVE" -q eval -t 4 --stop-newline --seed 7 --tasks $T6 -o "$OUT/$dir" "$@" \
    >>"$OUT/$dir.log" 2>&1
}
mkdir -p "$OUT"
if [ "$MODE" = 4k ]; then
  run 0-3 dense -m "$SMOL" --ctx 4K -n 3 --policy dense &
  run 4-7 up_auto -m "$SMOL" --ctx 4K -n 3 --policy uniprefill --set up_layers=7,11,15,19,23,27 &
  run 8-11 up_late -m "$SMOL" --ctx 4K -n 3 --policy uniprefill --set up_layers=14,18,22,26 &
  run 12-15 up_late995 -m "$SMOL" --ctx 4K -n 3 --policy uniprefill --set up_layers=14,18,22,26 --set up_p=0.995 &
else
  run 0-3 gemma_dense -m "$GEMMA" --ctx 8K -n 3 --policy dense &
  run 4-7 gemma_up -m "$GEMMA" --ctx 8K -n 3 --policy uniprefill &
  run 8-11 smol_dense -m "$SMOL" --ctx 8K -n 2 --policy dense &
  run 12-15 smol_up -m "$SMOL" --ctx 8K -n 2 --policy uniprefill &
fi
wait
