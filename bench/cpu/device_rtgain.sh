#!/usr/bin/env bash
# RTPurbo's indexer gain (rt_gain) on Gemma 3 at 16K, on a 16-core machine in one capped
# device call: decode speed side by side (dense, rtpurbo at gain 1 and 8), then the six
# retrieval tasks in four pinned processes (dense and rtpurbo at gains 1, 3 and 8).
#   bench/cpu/device_rtgain.sh SIEVE MODEL PLAN OUT [EVAL_SECONDS]
set -u
SIEVE=$1 MODEL=$2 PLAN=$3 OUT=$4 CAP=${5:-420}
T6=niah_single_1,niah_multikey_1,passkey,niah_multivalue,niah_multiquery,number_string
mkdir -p "$OUT"
"$SIEVE" -q bench -m "$MODEL" --threads-list 16 --lengths 16384 --n-decode 32 --reps 1 --warmup 0 \
  --policies dense,rtpurbo,rtpurbo:rt_gain=8 --head-plan "$PLAN" -f data/haystack/essays.txt \
  >"$OUT/bench.json" 2>"$OUT/bench.log"
common=(-m "$MODEL" -t 4 --stop-newline --seed 7 --tasks $T6 --ctx 16K -n 2 --head-plan "$PLAN")
run() { local cores=$1 dir=$2; shift 2; timeout "$CAP" taskset -c "$cores" "$SIEVE" -q eval "${common[@]}" -o "$OUT/$dir" "$@" >>"$OUT/$dir.log" 2>&1; }
run 0-3 dense --policy dense &
run 4-7 g1 --policy rtpurbo &
run 8-11 g3 --policy rtpurbo:rt_gain=3 &
run 12-15 g8 --policy rtpurbo:rt_gain=8 &
wait
