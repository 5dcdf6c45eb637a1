#!/usr/bin/env bash
# Issue 42 item 3 on a GPU machine: decode tokens/s at depth of each sparse policy against dense
# in the same call (batch 1 and 8, `sieve bench --backend cuda --batch-seqs`), time to first
# token, KV bytes per token and sequences that fit in the pool, and llama.cpp's tg at the same
# depth (`llama-bench -d DEPTH -n 64 -p 0`, same GGUF) in the same call. One call runs one chunk
# of the matrix (env below) so that it stays under ~9 minutes; every call appends JSON lines to
# OUT and prints the table of its own rows (ratios only within a call). docs/gpu.md, "Decode at
# depth", has the chunks and their device-time estimates.
#
#   SIEVE=.carry/sieve MODEL=/tmp/llama8b.gguf HDR=.carry/llama8b.hdr OUT=/tmp/o/sparse.jsonl \
#     LLAMA_BIN=/path/to/llama.cpp/build/bin LENGTHS=131072 scripts/gpu_sparse_bench.sh
#   OUT=... scripts/gpu_sparse_bench.sh table        # the table of every call in OUT
#
# Env: SIEVE (default .carry/sieve), MODEL (a GGUF; when missing and HDR is set, it is filled
# from HDR with random_gguf.py: RANDOM_GGUF, default .carry/random_gguf.py), OUT (JSON lines),
# LENGTHS (default 131072), BATCHES (default 1,8; "fit" = as many as the pool holds),
# POLICIES (default dense,auto,sketch,stca,rtpurbo,uniprefill; a policy the GPU refuses gets a
# row with its error), SHARED_PREFILL (default dense: prefill each length once with it and decode
# every policy over it; empty: each policy decodes over its own prefill), OWN_TTFT (default 1:
# each policy also prefills its own copy once, for its time to first token; 0 at 512K and up,
# where dense's own prefill takes minutes), SETS (default positions=original,
# comma-separated --set knobs for every sparse policy), HEAD_PLAN (rtpurbo's heads.json),
# N_DECODE (64), REPS (2), WARMUP (1), LLAMA_BIN (dir with llama-bench; unset: no llama.cpp),
# LLAMA_DEPTHS (default: the LENGTHS up to 131072), LLAMA_REPS (2), TAG (a name for the call),
# SIEVE_TIMEOUT (seconds, default 480: rows measured before it stay), GPU_MEM_FRACTION (0.9),
# BACKEND (cuda; cpu runs the same on the CPU engine: a smoke test of the script without a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT (the JSON lines file)}"
if [ "${1:-}" = table ]; then
  exec python3 bench/cuda/sparse_table.py table "$OUT"
fi
SIEVE=${SIEVE:-.carry/sieve}
: "${MODEL:?set MODEL (a GGUF; with HDR it is filled when missing)}"
LENGTHS=${LENGTHS:-131072}
BATCHES=${BATCHES:-1,8}
POLICIES=${POLICIES:-dense,auto,sketch,stca,rtpurbo,uniprefill}
SHARED_PREFILL=${SHARED_PREFILL-dense}
OWN_TTFT=${OWN_TTFT:-1}
SETS=${SETS-positions=original}
N_DECODE=${N_DECODE:-64}
REPS=${REPS:-2}
WARMUP=${WARMUP:-1}
LLAMA_BIN=${LLAMA_BIN:-}
LLAMA_REPS=${LLAMA_REPS:-2}
TAG=${TAG:-L$LENGTHS}
GPU_MEM_FRACTION=${GPU_MEM_FRACTION:-0.9}
if [ -z "${LLAMA_DEPTHS+x}" ]; then
  LLAMA_DEPTHS=$(echo "$LENGTHS" | tr ',' '\n' | awk '$1 <= 131072' | paste -sd, -)
fi
mkdir -p "$(dirname "$OUT")"
RUN="$(date -u +%Y%m%dT%H%M%SZ)-$TAG"
LOGS="$(dirname "$OUT")/logs/$RUN"
mkdir -p "$LOGS"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOGS/log.txt"; }

if [ ! -f "$MODEL" ]; then
  [ -n "${HDR:-}" ] || { echo "gpu_sparse_bench: $MODEL is missing and no HDR is set" >&2; exit 1; }
  log "filling $MODEL from $HDR"
  python3 "${RANDOM_GGUF:-.carry/random_gguf.py}" fill "$HDR" "$MODEL" || exit 1
fi
[ -d .carry/lib ] && export LD_LIBRARY_PATH=$PWD/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
COMMIT=$(cat "$(dirname "$SIEVE")/commit.txt" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)

args=(bench --backend "${BACKEND:-cuda}" -m "$MODEL" --lengths "$LENGTHS" --batch-seqs "$BATCHES"
  --n-decode "$N_DECODE" --reps "$REPS" --warmup "$WARMUP" --policies "$POLICIES"
  --gpu-mem-fraction "$GPU_MEM_FRACTION" --rows-out "$LOGS/sieve_rows.jsonl")
IFS=',' read -ra set_list <<< "$SETS"
for s in "${set_list[@]}"; do [ -n "$s" ] && args+=(--set "$s"); done
[ -n "$SHARED_PREFILL" ] && args+=(--shared-prefill "$SHARED_PREFILL")
[ -n "$SHARED_PREFILL" ] && [ "$OWN_TTFT" = 1 ] && args+=(--own-ttft)
if [ -n "${HEAD_PLAN:-}" ] && [[ ",$POLICIES" == *",rtpurbo"* ]]; then args+=(--head-plan "$HEAD_PLAN"); fi
log "sieve ${args[*]}"
: > "$LOGS/sieve_rows.jsonl"
timeout "${SIEVE_TIMEOUT:-480}" "$SIEVE" "${args[@]}" > "$LOGS/sieve.json" 2> "$LOGS/sieve.log"
rc=$?
[ $rc -eq 0 ] || { log "sieve exited $rc (rows measured before it are kept)"; tail -5 "$LOGS/sieve.log"; }

if [ -n "$LLAMA_BIN" ] && [ -n "$LLAMA_DEPTHS" ]; then
  # the same GGUF, all layers on the GPU, flash attention, f16 KV; tg of 64 tokens at each depth
  log "llama-bench -d $LLAMA_DEPTHS"
  "$LLAMA_BIN/llama-bench" -m "$MODEL" -ngl 99 -fa 1 -p 0 -n 64 -d "$LLAMA_DEPTHS" -r "$LLAMA_REPS" \
    -o jsonl > "$LOGS/llama.jsonl" 2> "$LOGS/llama.log" || { log "llama-bench failed"; tail -5 "$LOGS/llama.log"; }
fi

python3 bench/cuda/sparse_table.py append "$OUT" --run "$RUN" --tag "$TAG" --model "$MODEL" \
  --device "$DEVICE" --commit "$COMMIT" --cmd "$SIEVE ${args[*]}" \
  --sieve-rows "$LOGS/sieve_rows.jsonl" --llama "$LOGS/llama.jsonl"
log "done; device $DEVICE, commit $COMMIT, logs in $LOGS"
python3 bench/cuda/sparse_table.py table "$OUT" --run "$RUN"
