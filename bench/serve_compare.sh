#!/usr/bin/env bash
# Serving under load, Sieve against llama.cpp's llama-server on the same GGUF, threads and load
# (issue 47). Every server is started at once on its own port (idle, a server uses no CPU);
# then at each (clients x prompt tokens) point `sieve bench serve` loads each server in turn,
# so the servers of one point are measured minutes apart, not a whole grid apart: on a shared
# machine whose speed drifts by 2-10x over tens of minutes, that is the only comparison that
# holds. The order of the servers rotates from point to point. Per server, OUT/<server>.json
# holds its points; OUT/table.md puts TTFT / ITL p50 and p99 and output tok/s side by side.
#
# Usage: bench/serve_compare.sh [OUT]       (default /tmp/serve-compare)
# Environment (defaults in brackets):
#   SIEVE         the sieve binary under test                 [build/tools/sieve/sieve]
#   SIEVE_BASE    a second sieve binary, e.g. before a change ["": none]
#   LLAMA_SERVER  llama-server (bench/build_llama_server.sh)  [/tmp/llama-server-src/build/bin/llama-server]
#   MODEL         GGUF file                                   [sieve's smollm2]
#   THREADS [2]  CLIENTS [1,4,8]  PROMPTS [1024,4096]  MAX_TOKENS [64]  ROUNDS [1]
#   SIEVE_ARGS    extra `sieve serve` flags for SIEVE only (e.g. --max-step-ms 0)
#   SKIP          points to leave out, e.g. "8x4096"
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
SKIP="${SKIP:-}"
mkdir -p "$OUT/points"

# Per-request context: the longest prompt, the output and a margin; one slot per client.
max_prompt=$(tr ',' '\n' <<<"$PROMPTS" | sort -n | tail -1)
max_clients=$(tr ',' '\n' <<<"$CLIENTS" | sort -n | tail -1)
CTX=$(((max_prompt + MAX_TOKENS + 255) / 256 * 256 + 256))

names=()
ports=()
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop_all EXIT

start() {  # name port command...
  local name="$1" port="$2"
  shift 2
  echo "== $name (port $port): $*" | tee -a "$OUT/commands"
  "$@" >"$OUT/$name.log" 2>&1 &
  pids+=($!)
  names+=("$name")
  ports+=("$port")
}

echo "$(date -u +"%Y-%m-%dT%H:%M:%SZ") start" >>"$OUT/date"
{ uname -m; nproc; grep -m1 "model name" /proc/cpuinfo || true; uptime; } >>"$OUT/machine"
# shellcheck disable=SC2086
start sieve 18150 "$SIEVE" serve -m "$MODEL" -t "$THREADS" -c "$CTX" --max-running "$max_clients" --port 18150 $SIEVE_ARGS
if [ -n "$SIEVE_BASE" ]; then
  start sieve_base 18151 "$SIEVE_BASE" serve -m "$MODEL" -t "$THREADS" -c "$CTX" --max-running "$max_clients" --port 18151
fi
if [ -x "$LLAMA_SERVER" ]; then
  # -c is the total over the slots in llama-server: one slot of CTX tokens per client.
  start llama_server 18152 "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -tb "$THREADS" -c $((CTX * max_clients)) \
    -np "$max_clients" --port 18152
else
  echo "no llama-server at $LLAMA_SERVER (bench/build_llama_server.sh builds one); skipped" >&2
fi
for i in "${!names[@]}"; do
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:${ports[$i]}/health" >/dev/null 2>&1 && break
    kill -0 "${pids[$i]}" 2>/dev/null || { echo "${names[$i]} exited; see $OUT/${names[$i]}.log" >&2; exit 1; }
    sleep 0.5
  done
done

n=${#names[@]}
k=0
for c in ${CLIENTS//,/ }; do
  for p in ${PROMPTS//,/ }; do
    if [[ " $SKIP " == *" ${c}x${p} "* ]]; then continue; fi
    for j in $(seq 0 $((n - 1))); do
      i=$(((j + k) % n))
      name="${names[$i]}"
      warm=0
      [ "$k" -eq 0 ] && warm=2
      "$SIEVE" bench serve --url "http://127.0.0.1:${ports[$i]}" --clients "$c" --prompt-tokens "$p" \
        --max-tokens "$MAX_TOKENS" --rounds "$ROUNDS" --warmup "$warm" --json "$OUT/points/$name.${c}x$p.json" |
        tail -n +5 | sed "s/^/$name /"
    done
    k=$((k + 1))
  done
done
{ uptime; } >>"$OUT/machine"
echo "$(date -u +"%Y-%m-%dT%H:%M:%SZ") end" >>"$OUT/date"

python3 - "$OUT" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
data = {}
for f in sorted(glob.glob(f"{out}/points/*.json")):
    name = os.path.basename(f).split(".")[0]
    for p in json.load(open(f))["points"]:
        data.setdefault(name, {})[(p["clients"], p["prompt_tokens"])] = p
for name, pts in data.items():
    json.dump({"server": name, "points": list(pts.values())}, open(f"{out}/{name}.json", "w"), indent=1)
runs = [n for n in ("sieve_base", "sieve", "llama_server") if n in data]
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
