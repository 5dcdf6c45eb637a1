#!/usr/bin/env bash
# Serving under load, Sieve against llama.cpp's llama-server on the same GGUF, threads and load
# (issue 47): each server is started in turn, loaded with `sieve bench serve` at every
# (clients x prompt tokens) point, and stopped; the points go to OUT/<server>.json and one
# markdown table (OUT/table.md) with TTFT / ITL p50 and p99 and output tok/s side by side.
#
# Usage: bench/serve_compare.sh [OUT]       (default /tmp/serve-compare)
# Environment (defaults in brackets):
#   SIEVE         the sieve binary under test                 [build/tools/sieve/sieve]
#   SIEVE_BASE    a second sieve binary, e.g. before a change ["": skipped]
#   LLAMA_SERVER  llama-server (bench/build_llama_server.sh)  [/tmp/llama-server-src/build/bin/llama-server]
#   MODEL         GGUF file                                   [sieve's smollm2]
#   THREADS [2]  CLIENTS [1,4,8]  PROMPTS [1024,4096]  MAX_TOKENS [64]  ROUNDS [1]
#   SIEVE_ARGS    extra `sieve serve` flags for SIEVE only (e.g. --max-step-ms 0)
#   SERVERS       which to run now [sieve sieve_base llama_server]; the table takes every
#                 <server>.json in OUT, so servers may be run at different times
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-/tmp/serve-compare}"
SIEVE="${SIEVE:-$ROOT/build/tools/sieve/sieve}"
SIEVE_BASE="${SIEVE_BASE:-}"
LLAMA_SERVER="${LLAMA_SERVER:-/tmp/llama-server-src/build/bin/llama-server}"
MODEL="${MODEL:-$HOME/.cache/sieve/models/smollm2.gguf}"
THREADS="${THREADS:-2}"
CLIENTS="${CLIENTS:-1,4,8}"
PROMPTS="${PROMPTS:-1024,4096}"
MAX_TOKENS="${MAX_TOKENS:-64}"
ROUNDS="${ROUNDS:-1}"
SIEVE_ARGS="${SIEVE_ARGS:-}"
SERVERS="${SERVERS:-sieve sieve_base llama_server}"
PORT=18147
mkdir -p "$OUT"

# Per-request context: the longest prompt, the output and a margin; one slot per client.
max_prompt=$(tr ',' '\n' <<<"$PROMPTS" | sort -n | tail -1)
max_clients=$(tr ',' '\n' <<<"$CLIENTS" | sort -n | tail -1)
CTX=$(( (max_prompt + MAX_TOKENS + 255) / 256 * 256 + 256 ))

server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap stop_server EXIT

wait_ready() {
  for _ in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$server_pid" 2>/dev/null; then echo "the server exited; see $1" >&2; return 1; fi
    sleep 0.5
  done
  echo "the server did not get ready; see $1" >&2
  return 1
}

load() {  # name, then the server command
  local name="$1"
  shift
  echo "== $name: $*" | tee "$OUT/$name.cmd"
  "$@" >"$OUT/$name.log" 2>&1 &
  server_pid=$!
  wait_ready "$OUT/$name.log"
  "$SIEVE" bench serve --url "http://127.0.0.1:$PORT" --clients "$CLIENTS" --prompt-tokens "$PROMPTS" \
    --max-tokens "$MAX_TOKENS" --rounds "$ROUNDS" --json "$OUT/$name.json" | tee "$OUT/$name.table"
  stop_server
}

echo "$(date -u +"%Y-%m-%dT%H:%M:%SZ") start: $SERVERS" >>"$OUT/date"
{ uname -m; nproc; grep -m1 "model name" /proc/cpuinfo || true; uptime; } >>"$OUT/machine"
want() { [[ " $SERVERS " == *" $1 "* ]]; }
if want sieve; then
  # shellcheck disable=SC2086
  load sieve "$SIEVE" serve -m "$MODEL" -t "$THREADS" -c "$CTX" --max-running "$max_clients" --port "$PORT" $SIEVE_ARGS
fi
if want sieve_base && [ -n "$SIEVE_BASE" ]; then
  load sieve_base "$SIEVE_BASE" serve -m "$MODEL" -t "$THREADS" -c "$CTX" --max-running "$max_clients" --port "$PORT"
fi
if ! want llama_server; then
  :
elif [ -x "$LLAMA_SERVER" ]; then
  # -c is the total over the slots in llama-server: one slot of CTX tokens per client.
  load llama_server "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -tb "$THREADS" -c $((CTX * max_clients)) \
    -np "$max_clients" --port "$PORT"
else
  echo "no llama-server at $LLAMA_SERVER (bench/build_llama_server.sh builds one); skipped" >&2
fi
{ uptime; } >>"$OUT/machine"

python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
runs = [n for n in ("sieve_base", "sieve", "llama_server") if os.path.exists(f"{out}/{n}.json")]
data = {n: {(p["clients"], p["prompt_tokens"]): p for p in json.load(open(f"{out}/{n}.json"))["points"]} for n in runs}
keys = sorted(set().union(*[d.keys() for d in data.values()]), key=lambda k: (k[1], k[0]))
cols = ["TTFT p50 ms", "ITL p50 ms", "ITL p99 ms", "p99/p50", "out tok/s", "errors"]
lines = ["| clients | prompt | server | " + " | ".join(cols) + " |", "|---|---|---|" + "---|" * len(cols)]
for k in keys:
    for n in runs:
        p = data[n].get(k)
        if not p:
            continue
        itl = p["itl_ms"]
        ratio = itl["p99"] / itl["p50"] if itl["p50"] else 0
        lines.append(f"| {k[0]} | {k[1]} | {n} | {p['ttft_ms']['p50']:.0f} | {itl['p50']:.0f} | {itl['p99']:.0f} | "
                     f"{ratio:.1f} | {p['output_tok_s']:.1f} | {p['errors']} |")
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
