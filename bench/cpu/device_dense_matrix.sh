#!/usr/bin/env bash
# Dense accuracy baseline on a 16-core machine in one 10-minute device call: SmolLM2 at 8K on
# every task (two pinned processes of 4 threads) and Gemma 3 at 4K-32K (two more), each
# process capped by LIMIT seconds. samples.jsonl keeps every finished sample (a rerun resumes);
# the per-task table is printed from them at the end, so a capped run still reports.
#   bench/cpu/device_dense_matrix.sh SIEVE SMOLLM2.gguf GEMMA.gguf OUT [LIMIT]
set -u
SIEVE=$1 SMOL=$2 GEMMA=$3 OUT=$4 LIMIT=${5:-540}
T6=niah_single_1,niah_single_2,niah_multikey_1,vt,passkey,kv_retrieval
NIAH=niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multikey_2,niah_multikey_3,niah_multivalue
REST=niah_multiquery,vt,cwe,fwe,passkey,number_string,kv_retrieval,niah
common=(-t 4 --stop-newline --seed 7 --policy dense --grid-n 1)
run() { local cores=$1 dir=$2; shift 2
  timeout "$LIMIT" taskset -c "$cores" "$SIEVE" -q eval "${common[@]}" -o "$OUT/$dir" "$@" >>"$OUT/$dir.log" 2>&1; }
mkdir -p "$OUT"
run 0-3 smol8k-a -m "$SMOL" --tasks $NIAH --ctx 8K -n 2 &
run 4-7 smol8k-b -m "$SMOL" --tasks $REST --ctx 8K -n 2 &
run 8-11 gemma-lo -m "$GEMMA" --tasks $T6 --ctx 4K,8K,16K -n 1 &
run 12-15 gemma-32k -m "$GEMMA" --tasks passkey,niah_single_2,niah_multikey_1,vt,kv_retrieval,niah_single_1 --ctx 32K -n 1 &
wait
python3 "$(dirname "$0")/samples_table.py" "$OUT" model,ctx,task
