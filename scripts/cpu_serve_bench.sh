#!/usr/bin/env bash
# Serving under load on the CPU (issue 47): Sieve with the step planner, Sieve with
# `--max-step-ms 0` (token-budget chunking, the server before the planner) and llama.cpp's
# llama-server, on the same GGUF, the same cores and the same load, in one table with the
# issue's targets.
#
# The three servers start at once, each pinned (taskset) to the same THREADS cores with THREADS
# compute threads; an idle server uses no CPU. At every (clients x prompt tokens) point,
# `sieve bench serve` loads each server in turn (the order rotates from point to point), so the
# servers of one point run seconds apart. Each point's prompts are random token ids drawn from a
# seed of the point (the same prompts for every server; no prefix is shared across points, so
# no server's prompt cache helps). All clients send at once; streamed, greedy, ignore_eos, so
# every request produces exactly MAX_TOKENS tokens. TTFT and ITL are measured at the client; ITL
# is the gap between streamed tokens of one request, pooled over the point's requests.
#
# Builds nothing. Usage:
#   SIEVE=path/to/sieve MODEL=smollm2.gguf LLAMA_BIN=llama.cpp/build/bin scripts/cpu_serve_bench.sh [OUT]
# Environment (defaults in brackets):
#   SIEVE       the sieve binary (required)
#   MODEL       the GGUF both engines load (required)
#   LLAMA_BIN   a llama.cpp CPU build's bin/ directory holding llama-server
#               (llama-cpp-python's sdist vendor/llama.cpp; bench/build_llama_server.sh)
#   SKIP_LLAMA  1: sieve only
#   THREADS [2]        compute threads of every server
#   CORES [0-(THREADS-1)]        the cores every server is pinned to (taskset -c)
#   CLIENT_CORES [the others]    the load generator's cores ("" where there are none left)
#   CLIENTS ["1 4 8"]  PROMPTS ["1024 4096"]  MAX_TOKENS [64]  ROUNDS [1] (requests per client)
#   SIEVE_ARGS  extra `sieve serve` flags for both sieve servers
#   VERBOSE=1   sieve servers log every step (chunk sizes, predicted and measured ms)
#   SIEVE_ALT   a second sieve binary (e.g. before a change), run with the planner as a fourth
#               server, sieve_alt (rows only; the targets compare sieve)
#   LLAMA_ARGS  extra llama-server flags
#   PORT [18150]  the first of four ports
# OUT [/tmp/cpu-serve-bench]: commands, machine, server logs, points/<server>.<C>x<P>.json,
# table.md (the table printed at the end).
set -euo pipefail

OUT="${1:-${OUT:-/tmp/cpu-serve-bench}}"
: "${SIEVE:?set SIEVE to the sieve binary}" "${MODEL:?set MODEL to the GGUF file}"
LLAMA_BIN="${LLAMA_BIN:-}"
SKIP_LLAMA="${SKIP_LLAMA:-}"
THREADS="${THREADS:-2}"
CORES="${CORES:-0-$((THREADS - 1))}"
NCPU=$(nproc --all 2>/dev/null || nproc)
if [ -z "${CLIENT_CORES+x}" ]; then
  CLIENT_CORES=""
  [ "$NCPU" -gt "$THREADS" ] && CLIENT_CORES="$THREADS-$((NCPU - 1))"
fi
CLIENTS="${CLIENTS:-1 4 8}"
PROMPTS="${PROMPTS:-1024 4096}"
MAX_TOKENS="${MAX_TOKENS:-64}"
ROUNDS="${ROUNDS:-1}"
SIEVE_ARGS="${SIEVE_ARGS:-}"
LLAMA_ARGS="${LLAMA_ARGS:-}"
PORT="${PORT:-18150}"
V=()
[ -n "${VERBOSE:-}" ] && V=(-v)
CLIENTS=${CLIENTS//,/ }
PROMPTS=${PROMPTS//,/ }

[ -x "$SIEVE" ] || { echo "SIEVE=$SIEVE is not an executable" >&2; exit 2; }
[ -f "$MODEL" ] || { echo "MODEL=$MODEL does not exist" >&2; exit 2; }
if [ -z "$SKIP_LLAMA" ]; then
  [ -x "$LLAMA_BIN/llama-server" ] ||
    { echo "no llama-server in LLAMA_BIN=$LLAMA_BIN (or set SKIP_LLAMA=1)" >&2; exit 2; }
fi
command -v taskset >/dev/null || { echo "taskset (util-linux) is needed" >&2; exit 2; }
mkdir -p "$OUT/points"
rm -f "$OUT"/points/*.json

# One context per request: the longest prompt, the output and a margin; one slot per client.
max_prompt=$(tr ' ' '\n' <<<"$PROMPTS" | sort -n | tail -1)
max_clients=$(tr ' ' '\n' <<<"$CLIENTS" | sort -n | tail -1)
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
  echo "$name (port $port): taskset -c $CORES $*" >>"$OUT/commands"
  taskset -c "$CORES" "$@" >"$OUT/$name.log" 2>&1 &
  pids+=($!)
  names+=("$name")
  ports+=("$port")
}

t_start=$(date +%s)
{
  date -u +"start %Y-%m-%dT%H:%M:%SZ"
  uname -srm
  echo "cpus $NCPU; servers on $CORES, $THREADS threads; client on ${CLIENT_CORES:-any core}"
  grep -m1 "model name" /proc/cpuinfo || true
  uptime
  "$SIEVE" --version 2>/dev/null || true
  sha256sum "$MODEL" 2>/dev/null | cut -c1-16 || true
} >"$OUT/machine"
: >"$OUT/commands"
# shellcheck disable=SC2086
start sieve "$PORT" "$SIEVE" "${V[@]}" serve -m "$MODEL" -t "$THREADS" -c "$CTX" \
  --max-running "$max_clients" --port "$PORT" $SIEVE_ARGS
# shellcheck disable=SC2086
start sieve_base $((PORT + 1)) "$SIEVE" "${V[@]}" serve -m "$MODEL" -t "$THREADS" -c "$CTX" \
  --max-running "$max_clients" --port $((PORT + 1)) --max-step-ms 0 $SIEVE_ARGS
if [ -n "${SIEVE_ALT:-}" ]; then
  # shellcheck disable=SC2086
  start sieve_alt $((PORT + 3)) "$SIEVE_ALT" "${V[@]}" serve -m "$MODEL" -t "$THREADS" -c "$CTX" \
    --max-running "$max_clients" --port $((PORT + 3)) $SIEVE_ARGS
fi
if [ -z "$SKIP_LLAMA" ]; then
  # -c is the total over the slots in llama-server: one slot of CTX tokens per client.
  # shellcheck disable=SC2086
  start llama_server $((PORT + 2)) "$LLAMA_BIN/llama-server" -m "$MODEL" -t "$THREADS" \
    -tb "$THREADS" -c $((CTX * max_clients)) -np "$max_clients" --port $((PORT + 2)) $LLAMA_ARGS
fi
for i in "${!names[@]}"; do
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:${ports[$i]}/health" >/dev/null 2>&1 && break
    kill -0 "${pids[$i]}" 2>/dev/null ||
      { echo "${names[$i]} exited; see $OUT/${names[$i]}.log" >&2; exit 1; }
    sleep 0.5
  done
done

client=("$SIEVE")
[ -n "$CLIENT_CORES" ] && client=(taskset -c "$CLIENT_CORES" "$SIEVE")
n=${#names[@]}
k=0
for c in $CLIENTS; do
  for p in $PROMPTS; do
    for j in $(seq 0 $((n - 1))); do
      i=$(((j + k) % n))
      name="${names[$i]}"
      warm=0
      [ "$k" -eq 0 ] && warm=2
      echo "[$(date -u +%H:%M:%S)] $name: $c clients x $p prompt tokens x $MAX_TOKENS" >&2
      "${client[@]}" bench serve --url "http://127.0.0.1:${ports[$i]}" --clients "$c" \
        --prompt-tokens "$p" --max-tokens "$MAX_TOKENS" --rounds "$ROUNDS" --warmup "$warm" \
        --seed $((c * 1000003 + p)) --vocab 32000 --timeout 1800 \
        --json "$OUT/points/$name.${c}x$p.json" >>"$OUT/client.log" 2>&1 ||
        echo "bench serve failed for $name at ${c}x$p (see $OUT/client.log)" >&2
    done
    k=$((k + 1))
  done
done
{
  uptime
  date -u +"end %Y-%m-%dT%H:%M:%SZ"
  echo "wall $(($(date +%s) - t_start)) s"
} >>"$OUT/machine"

python3 - "$OUT" "$MAX_TOKENS" <<'EOF'
import glob, json, os, sys
out, max_tokens = sys.argv[1], sys.argv[2]
data = {}
for f in sorted(glob.glob(f"{out}/points/*.json")):
    name = os.path.basename(f).split(".")[0]
    for p in json.load(open(f))["points"]:
        data.setdefault(name, {})[(p["clients"], p["prompt_tokens"])] = p
order = [n for n in ("sieve", "sieve_alt", "sieve_base", "llama_server") if n in data]
keys = sorted(set().union(*[d.keys() for d in data.values()]), key=lambda k: (k[1], k[0]))

def f0(x):
    return "-" if x is None else f"{x:.0f}"

lines = [f"Servers: sieve = the step planner (--max-step-ms auto), sieve_base = --max-step-ms 0,",
         f"llama_server. {max_tokens} output tokens per request; ms; out tok/s = output tokens / wall.",
         "",
         "| clients | prompt | server | out tok/s | TTFT p50 | ITL p50 | ITL p99 | p99/p50 | errors |",
         "|---|---|---|---|---|---|---|---|---|"]
for k in keys:
    for n in order:
        p = data[n].get(k)
        if not p:
            continue
        itl = p["itl_ms"]
        r = itl["p99"] / itl["p50"] if itl["p50"] else float("nan")
        lines.append(f"| {k[0]} | {k[1]} | {n} | {p['output_tok_s']:.1f} | {p['ttft_ms']['p50']:.0f} | "
                     f"{itl['p50']:.1f} | {itl['p99']:.1f} | {r:.2f} | {p['errors']} |")
lines += ["",
          "Targets (sieve against sieve_base and llama_server at each point): ITL p99 <= 3x ITL p50;",
          "ITL p99 <= llama-server's; out tok/s >= 0.95x and TTFT p50 <= 1.1x of sieve_base.",
          "",
          "| clients | prompt | ITL p99/p50 (<= 3) | ITL p99 / llama's (<= 1) | tok/s / base (>= 0.95) | TTFT p50 / base (<= 1.1) | met |",
          "|---|---|---|---|---|---|---|"]
misses = 0
for k in keys:
    s = data.get("sieve", {}).get(k)
    if not s:
        continue
    b = data.get("sieve_base", {}).get(k)
    l = data.get("llama_server", {}).get(k)
    checks = []
    def cell(v, ok):
        checks.append(ok)
        return f"{v:.2f}" + ("" if ok else " **miss**")
    itl = s["itl_ms"]
    c1 = cell(itl["p99"] / itl["p50"], itl["p99"] <= 3 * itl["p50"]) if itl["p50"] else "-"
    c2 = (cell(itl["p99"] / l["itl_ms"]["p99"], itl["p99"] <= l["itl_ms"]["p99"])
          if l and l["itl_ms"]["p99"] else "-")
    c3 = (cell(s["output_tok_s"] / b["output_tok_s"], s["output_tok_s"] >= 0.95 * b["output_tok_s"])
          if b and b["output_tok_s"] else "-")
    c4 = (cell(s["ttft_ms"]["p50"] / b["ttft_ms"]["p50"], s["ttft_ms"]["p50"] <= 1.1 * b["ttft_ms"]["p50"])
          if b and b["ttft_ms"]["p50"] else "-")
    errs = s["errors"] + (b["errors"] if b else 0) + (l["errors"] if l else 0)
    ok = all(checks) and errs == 0
    misses += not ok
    lines.append(f"| {k[0]} | {k[1]} | {c1} | {c2} | {c3} | {c4} | "
                 f"{'yes' if ok else 'no' + (f' ({errs} errors)' if errs else '')} |")
lines += ["", f"{len(keys) - misses} of {len(keys)} points meet every target."]
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
echo "results: $OUT (table.md, points/, server logs); wall $(($(date +%s) - t_start)) s" >&2
