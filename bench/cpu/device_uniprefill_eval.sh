#!/usr/bin/env bash
# UniPrefill quality vs dense (issue 8) on the device's 16-core CPU: four pinned processes
# (4 threads each) on the same samples (seed 7): dense, uniprefill with the auto layer
# schedule, and two later schedules (the layer default is chosen from these), each process
# stopped after LIMIT seconds (samples.jsonl keeps what finished); merge with
# `sieve eval --report-only` over the concatenated samples.
#   bench/cpu/device_uniprefill_eval.sh SIEVE MODEL OUT LIMIT
set -u
SIEVE=$1 MODEL=$2 OUT=$3 LIMIT=$4
T6=niah_single_1,niah_single_2,niah_multikey_1,vt,passkey,kv_retrieval
run() {
  local cores=$1 dir=$2; shift 2
  timeout "$LIMIT" taskset -c "$cores" "$SIEVE" -q eval -m "$MODEL" -t 4 --stop-newline -o "$OUT/$dir" "$@" \
    >>"$OUT/$dir.log" 2>&1
}
mkdir -p "$OUT"
run 0-3 dense --tasks $T6 --ctx 4K -n 3 --seed 7 --policy dense &
run 4-7 up_auto --tasks $T6 --ctx 4K -n 3 --seed 7 --policy uniprefill &
run 8-11 up_late --tasks $T6 --ctx 4K -n 3 --seed 7 --policy uniprefill --set up_layers=14,18,22,26 &
run 12-15 up_late995 --tasks $T6 --ctx 4K -n 3 --seed 7 --policy uniprefill --set up_layers=14,18,22,26 --set up_p=0.995 &
wait
