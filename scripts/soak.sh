#!/usr/bin/env bash
# Soak run (issue 44 item 4): starts `sieve serve` on SmolLM2, runs bench/soak.py against it for
# MINUTES (default 60) - mixed long and short completions, streamed and not, about 10% of
# them abandoned by their client mid-prefill or mid-decode - then stops the server with SIGTERM.
#   scripts/soak.sh [MINUTES] [`sieve serve` flags...]
# The server flags default to "-c 2048 --max-running 8 --kv-mib 96": a pool of about 3,900
# tokens, small enough that the prefix cache fills all of it within the first minutes, after
# which RSS must stay flat; flags given replace them.
# Environment: SIEVE_BIN (default build/tools/sieve/sieve), SIEVE_SOAK_MODEL (default smollm2.gguf
# from the test model directories), SIEVE_SOAK_OUT (default build/soak-<UTC time>),
# SIEVE_SOAK_ARGS (extra bench/soak.py flags, e.g. "--clients 8 --long-tokens 1500").
# Writes OUT/soak.csv (per minute: requests, completed, abandoned, failed, p50/p99 latency,
# p99 of short and long requests, p99 time to first token, server RSS, KV pages in use and
# cached, preemptions), OUT/summary.json (totals; RSS and KV pages after warm-up and at the
# idle end) and OUT/server.log. Exits 1 when a well-formed request failed, KV pages were still
# in use at the end, or the server did not exit 0 on SIGTERM.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
minutes=${1:-60}
shift $(( $# > 0 ? 1 : 0 ))
bin=${SIEVE_BIN:-$root/build/tools/sieve/sieve}
model=${SIEVE_SOAK_MODEL:-}
if [ -z "$model" ]; then
  for d in "${SIEVE_TEST_MODEL_DIR:-}" "${SIEVE_HOME:+$SIEVE_HOME/models}" "$HOME/.cache/sieve/models" /tmp/models; do
    if [ -n "$d" ] && [ -f "$d/smollm2.gguf" ]; then model=$d/smollm2.gguf; break; fi
  done
fi
[ -x "$bin" ] || { echo "soak.sh: no sieve binary at $bin (set SIEVE_BIN)" >&2; exit 2; }
[ -f "$model" ] || { echo "soak.sh: smollm2.gguf not found (sieve pull smollm2, or SIEVE_SOAK_MODEL)" >&2; exit 2; }
out=${SIEVE_SOAK_OUT:-$root/build/soak-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
py=python3
[ -x "$root/build-venv/bin/python" ] && py=$root/build-venv/bin/python

[ $# -gt 0 ] || set -- -c 2048 --max-running 8 --kv-mib 96
"$bin" serve -m "$model" --port 0 "$@" 2>"$out/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
port=""
for _ in $(seq 600); do
  port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$out/server.log" | head -1)
  grep -q "ready on" "$out/server.log" && [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || { echo "soak.sh: the server exited:" >&2; tail "$out/server.log" >&2; exit 1; }
  sleep 0.1
done
echo "soak.sh: server pid $pid on port $port; $minutes minutes; output in $out"
rc=0
# shellcheck disable=SC2086
"$py" "$root/bench/soak.py" --url "http://127.0.0.1:$port" --pid $pid --minutes "$minutes" \
  --csv "$out/soak.csv" ${SIEVE_SOAK_ARGS:-} >"$out/summary.json" || rc=$?
kill -TERM $pid
src=0
wait $pid || src=$?
trap - EXIT
cat "$out/summary.json"
echo "soak.sh: server exit status $src"
[ "$src" -eq 0 ] || rc=1
exit $rc
