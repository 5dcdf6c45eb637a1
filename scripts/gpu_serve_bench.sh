#!/usr/bin/env bash
# On a GPU machine: Sieve's CUDA backend against llama.cpp (CUDA, same GGUF) in one call.
#   1. decode tokens/s at depth: `sieve bench --backend cuda` vs `llama-bench -d`
#   2. serving: `sieve serve --backend cuda` vs `llama-server` under the same client
#      (bench/server_load.py: streamed, greedy, ignore_eos) at each clients x prompt point:
#      output tokens/s, TTFT and inter-token latency p50/p99
# The binaries are built elsewhere: SIEVE (the sieve binary), LLAMA_BIN (a llama.cpp CUDA build's
# bin/ with llama-server and llama-bench). MODEL: the GGUF both run, by default
# Qwen2.5-Coder-1.5B Q4_K_M from the model cache (scripts/gpu_model.sh: parts MODEL.part-* are
# joined first). Results go to OUT_DIR as JSON lines plus a log.
#
#   SIEVE=... LLAMA_BIN=... [MODEL=...] scripts/gpu_serve_bench.sh OUT_DIR
# Env: CLIENTS="1 8 32", PROMPTS="8192 32768", MAX_TOKENS=64, DEPTHS="8192,32768", SKIP_SERVE=1,
#      SKIP_DECODE=1, SKIP_LLAMA=1, SIEVE_EXTRA="--max-step-ms 8" (more `sieve serve` flags)
set -uo pipefail
OUT_DIR=${1:?usage: scripts/gpu_serve_bench.sh OUT_DIR}
mkdir -p "$OUT_DIR"
cd "$(dirname "$0")/.."
: "${SIEVE:?set SIEVE}"
. scripts/gpu_model.sh
gpu_model_resolve || exit 1
LLAMA_BIN=${LLAMA_BIN:-}
CLIENTS=${CLIENTS:-1 8 32}
PROMPTS=${PROMPTS:-8192 32768}
MAX_TOKENS=${MAX_TOKENS:-64}
DEPTHS=${DEPTHS:-8192,32768}
PORT=18080
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT_DIR/log.txt"; }

wait_up() {  # until /health answers 200 (llama-server: once the model is loaded), or 300 s
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

stop_server() {
  [ -n "${SRV_PID:-}" ] || return 0
  kill -TERM "$SRV_PID" 2>/dev/null
  for _ in $(seq 1 60); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$SRV_PID" 2>/dev/null
  SRV_PID=
}
trap stop_server EXIT

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT_DIR/env.txt"

if [ -z "${SKIP_DECODE:-}" ]; then
  log "sieve bench --backend cuda at $DEPTHS"
  "$SIEVE" bench --backend cuda -m "$MODEL" --lengths "$DEPTHS" --n-decode 128 \
    --policies dense,auto:positions=original > "$OUT_DIR/sieve_bench.json" 2> "$OUT_DIR/sieve_bench.log" || tail -5 "$OUT_DIR/sieve_bench.log"
  if [ -z "${SKIP_LLAMA:-}" ] && [ -n "$LLAMA_BIN" ]; then
    log "llama-bench -d $DEPTHS"
    "$LLAMA_BIN/llama-bench" -m "$MODEL" -ngl 99 -fa 1 -p 0 -n 128 -d "$DEPTHS" -r 3 -o json \
      > "$OUT_DIR/llama_bench.json" 2> "$OUT_DIR/llama_bench.log" || tail -5 "$OUT_DIR/llama_bench.log"
  fi
fi

if [ -z "${SKIP_SERVE:-}" ]; then
  for prompt in $PROMPTS; do
    for clients in $CLIENTS; do
      ctx=$((prompt * 9 / 8 + MAX_TOKENS + 64))  # the client calibrates its prompts to ~prompt tokens
      for server in sieve llama; do
        [ "$server" = llama ] && { [ -n "${SKIP_LLAMA:-}" ] || [ -z "$LLAMA_BIN" ]; } && continue
        if [ "$server" = sieve ]; then
          "$SIEVE" serve --backend cuda --policy dense -m "$MODEL" --port $PORT -c $ctx --max-running "$clients" \
            --no-prefix-cache ${SIEVE_EXTRA:-} > "$OUT_DIR/srv_${server}_${clients}x${prompt}.log" 2>&1 &
        else
          "$LLAMA_BIN/llama-server" -m "$MODEL" --port $PORT -ngl 99 -fa on -np "$clients" \
            -c $((ctx * clients)) --no-cache-prompt > "$OUT_DIR/srv_${server}_${clients}x${prompt}.log" 2>&1 &
        fi
        SRV_PID=$!
        if ! wait_up; then
          log "$server did not come up for $clients x $prompt"; tail -5 "$OUT_DIR/srv_${server}_${clients}x${prompt}.log"
          stop_server; continue
        fi
        single=--skip-single
        [ "$server" = sieve ] && [ "$clients" = 8 ] && single=  # concurrent == one by one, checked once
        log "$server: $clients clients x $prompt prompt tokens"
        python3 bench/server_load.py --url "http://127.0.0.1:$PORT" --clients "$clients" \
          --prompt-tokens "$prompt" --max-tokens "$MAX_TOKENS" --timeout 900 $single \
          > "$OUT_DIR/load_${server}_${clients}x${prompt}.json" 2> "$OUT_DIR/load_${server}_${clients}x${prompt}.err"
        echo "rc=$? $(head -c 600 "$OUT_DIR/load_${server}_${clients}x${prompt}.json")" | tee -a "$OUT_DIR/log.txt"
        stop_server
      done
    done
  done
fi
log done
