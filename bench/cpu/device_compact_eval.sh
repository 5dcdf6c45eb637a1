#!/usr/bin/env bash
# Retrieval beyond SmolLM2's 8K trained window (issue 6): tokenselect (positions=auto picks
# compact positions past the trained length) against dense on the same samples at 16K, and
# tokenselect at 32K, in one capped 10-minute device call: four pinned processes of 4 threads.
# Prints every finished sample and the per-(policy, ctx, task) table.
#   bench/cpu/device_compact_eval.sh SIEVE SMOLLM2.gguf OUT [LIMIT]
set -u
SIEVE=$1 SMOL=$2 OUT=$3 LIMIT=${4:-520}
common=(-m "$SMOL" -t 4 --stop-newline --seed 7)
run() { local cores=$1 dir=$2; shift 2
  timeout "$LIMIT" taskset -c "$cores" "$SIEVE" -q eval "${common[@]}" -o "$OUT/$dir" "$@" >>"$OUT/$dir.log" 2>&1; }
mkdir -p "$OUT"
run 0-3 ts16-a --tasks passkey --ctx 16K -n 4 --policy tokenselect &
run 4-7 ts16-b --tasks niah_single_1,niah_single_2 --ctx 16K -n 2 --policy tokenselect &
run 8-11 ts32 --tasks passkey,niah_single_1 --ctx 32K -n 1 --policy tokenselect &
run 12-15 dense16 --tasks passkey,niah_single_1 --ctx 16K -n 2 --policy dense &
wait
python3 "$(dirname "$0")/samples_table.py" "$OUT" policy,ctx,task --samples
