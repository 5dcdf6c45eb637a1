#!/usr/bin/env bash
# Runs the sparse-policy evaluation on a 16-core machine in four pinned processes (4 threads
# each) so that the whole matrix fits one 10-minute device call. Each process writes its own
# output directory (samples.jsonl is resumable); the summaries are merged afterwards with
# `sieve eval --report-only` over the concatenated samples.
#   bench/cpu/device_eval.sh SIEVE MODEL OUT
set -u
SIEVE=$1 MODEL=$2 OUT=$3
T6=niah_single_1,niah_single_2,niah_multikey_1,vt,passkey,kv_retrieval
common=(-m "$MODEL" -t 4 --stop-newline --seed 7)
run() { local cores=$1 dir=$2; shift 2; taskset -c "$cores" "$SIEVE" -q eval "${common[@]}" -o "$OUT/$dir" "$@" >>"$OUT/$dir.log" 2>&1; }
mkdir -p "$OUT"
( run 0-3 p1 --tasks $T6 --ctx 4K -n 3 --policy dense; run 0-3 p1 --tasks $T6 --ctx 8K -n 1 --policy dense ) &
( run 4-7 p2 --tasks $T6 --ctx 4K -n 3 --policy tokenselect; run 4-7 p2 --tasks $T6 --ctx 8K -n 1 --policy tokenselect;
  run 4-7 p2 --tasks passkey --ctx 16K -n 2 --policy tokenselect ) &
( run 8-11 p3 --tasks $T6 --ctx 4K -n 2 --policy sketch,stca,quest,streaming,h2o ) &
( run 12-15 p4 --tasks passkey --ctx 16K -n 1 --policy dense ) &
wait
