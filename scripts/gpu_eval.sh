#!/usr/bin/env bash
# On a GPU machine: the long-context accuracy matrix of `sieve eval --backend cuda` (issue 41
# item 5), in slices that fit one device command (10 minutes at most): each call runs what is
# missing until its time budget, and the next call with the same OUT_DIR goes on from there.
#
#   SIEVE=build/tools/sieve/sieve [MODEL=...gguf] scripts/gpu_eval.sh [OUT_DIR]
#
# The matrix (Qwen2.5-Coder-1.5B by default, scripts/gpu_model.sh; 64K and 128K under YaRN x4
# over 32768, `--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768`, recorded as the
# model name plus "+yarn4"):
#   dense        4K 8K 16K 32K   64K 128K (YaRN)
#   tokenselect  16K 32K
#   auto         16K 32K         64K 128K (YaRN)
# on TASKS (default passkey and niah_single_1), N samples per task and length (default 20).
# One `sieve eval` per length (the model is loaded once per length); samples run CONCURRENCY at
# once through the engine, capped so that a batch holds about WINDOW_TOKENS prompt tokens (a
# batch stopped by the budget is lost, the samples before it are kept).
#
# Env: N=20, TASKS=passkey,niah_single_1, LENGTHS="4K 8K 16K 32K 64K 128K" and
#      POLICIES="dense tokenselect auto" (subsets run only those cells), BUDGET_S=540 (no
#      length starts after it, the running one is stopped at it), CONCURRENCY=32,
#      WINDOW_TOKENS=1048576, SEED=42, TOK_S=20000 (prefill tokens/s assumed for the estimate
#      until this OUT_DIR has timings), PLAN=1 (print the cells, what is left and the estimate;
#      run nothing), EXTRA="..." (more `sieve eval` flags, e.g. --stop-newline).
# Prints "matrix complete" when nothing is left; OUT_DIR/summary.md, summary.json and
# report.html then cover every sample (they are rewritten after each call).
set -uo pipefail
OUT_DIR=${1:-${OUT:-/tmp/sieve-gpu-eval}}
cd "$(dirname "$0")/.." || exit 1
. scripts/gpu_model.sh
SIEVE=${SIEVE:-build/tools/sieve/sieve}
N=${N:-20}
TASKS=${TASKS:-passkey,niah_single_1}
LENGTHS=${LENGTHS:-4K 8K 16K 32K 64K 128K}
POLICIES=${POLICIES:-dense tokenselect auto}
BUDGET_S=${BUDGET_S:-540}
CONCURRENCY=${CONCURRENCY:-32}
WINDOW_TOKENS=${WINDOW_TOKENS:-1048576}
SEED=${SEED:-42}
TOK_S=${TOK_S:-20000}
START=$(date +%s)
mkdir -p "$OUT_DIR"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT_DIR/gpu_eval.log"; }
gpu_model_resolve || exit 1
[ -x "$SIEVE" ] || { echo "SIEVE=$SIEVE is not an executable sieve binary" >&2; exit 1; }

# The cells of one length: the policies that run there (in $POLICIES) and whether under YaRN.
cells_of() {
  local want=() p
  case $1 in
    4K | 8K) want=(dense) ;;
    16K | 32K) want=(dense tokenselect auto) ;;
    64K | 128K) want=(dense auto) ;;
    *) echo "gpu_eval: length $1 is not in the matrix (4K 8K 16K 32K 64K 128K)" >&2; return 1 ;;
  esac
  for p in "${want[@]}"; do
    if [[ " $POLICIES " == *" $p "* ]]; then echo "$p"; fi
  done
}
yarn_at() { [ "$1" = 64K ] || [ "$1" = 128K ]; }
tokens_of() { echo $((${1%K} * 1024)); }

# Samples still missing in samples.jsonl for LENGTH and its policies (a sample counts once per
# task and index; the recorded model is the file name, +yarn4 under YaRN).
missing() {  # LENGTH POLICY...
  local len=$1
  shift
  python3 - "$OUT_DIR/samples.jsonl" "$(basename "$MODEL")$(yarn_at "$len" && echo +yarn4)" \
    "$(tokens_of "$len")" "$TASKS" "$N" "$@" <<'EOF'
import json, sys
path, model, ctx, tasks, n, pols = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(","), int(sys.argv[5]), sys.argv[6:]
done = set()
try:
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if (r.get("model") == model and r.get("backend") == "cuda" and r.get("ctx") == ctx
                and r.get("format") == "raw" and not r.get("stop")
                and r.get("task") in tasks and r.get("index", n) < n):
            done.add((r.get("policy", "").split(" ")[0], r["task"], r["index"]))
except FileNotFoundError:
    pass
print(sum(1 for p in pols for t in tasks for i in range(n) if (p, t, i) not in done))
EOF
}

# Prefill tokens/s measured by earlier calls into this OUT_DIR (timing.tsv: tokens seconds).
rate() {
  awk -v d="$TOK_S" '{t += $1; s += $2} END {if (s > 30) printf "%d", t / s; else print d}' \
    "$OUT_DIR/timing.tsv" 2>/dev/null || echo "$TOK_S"
}

# The plan: every cell with what is left, and the estimate.
left_tokens=0
plan=()
for len in $LENGTHS; do
  pols=$(cells_of "$len" | tr '\n' ' ') || exit 1
  [ -n "$pols" ] || continue
  # shellcheck disable=SC2086
  m=$(missing "$len" $pols)
  log "$len$(yarn_at "$len" && echo ' (YaRN x4)'): policies $pols- $m samples left of $(($(echo "$pols" | wc -w) * N * $(echo "$TASKS" | tr ',' ' ' | wc -w)))"
  left_tokens=$((left_tokens + m * $(tokens_of "$len")))
  [ "$m" -gt 0 ] && plan+=("$len")
done
r=$(rate)
log "left: $((left_tokens / 1024))K prompt tokens, about $((left_tokens / r / 60 + 1)) min at $r tok/s ($(((left_tokens / r + BUDGET_S - 1) / BUDGET_S)) call(s) of ${BUDGET_S}s)"
if [ ${#plan[@]} -eq 0 ]; then
  log "matrix complete"
  "$SIEVE" eval -o "$OUT_DIR" --report-only > /dev/null 2>&1 || true
  exit 0
fi
[ -n "${PLAN:-}" ] && exit 0

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> "$OUT_DIR/env.txt" 2>&1
rc=0
for len in "${plan[@]}"; do
  remain=$((BUDGET_S - ($(date +%s) - START)))
  if [ "$remain" -lt 60 ]; then
    log "budget spent: rerun the same command to go on"
    break
  fi
  pols=$(cells_of "$len" | tr '\n' ',')
  ctx=$(tokens_of "$len")
  conc=$((WINDOW_TOKENS / ctx))
  [ "$conc" -gt "$CONCURRENCY" ] && conc=$CONCURRENCY
  [ "$conc" -lt 1 ] && conc=1
  # shellcheck disable=SC2086
  before=$(missing "$len" ${pols//,/ })
  log "sieve eval --ctx $len --policy ${pols%,} --concurrency $conc (at most ${remain}s)"
  rope=()
  yarn_at "$len" && rope=(--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768)
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout --signal=TERM --kill-after=10 "$remain" "$SIEVE" eval --backend cuda -m "$MODEL" \
    "${rope[@]}" --tasks "$TASKS" --ctx "$len" --policy "${pols%,}" \
    -n "$N" --seed "$SEED" --concurrency "$conc" -o "$OUT_DIR" ${EXTRA:-} \
    > "$OUT_DIR/eval_$len.md" 2>> "$OUT_DIR/eval_$len.log"
  erc=$?
  secs=$(($(date +%s) - t0))
  # shellcheck disable=SC2086
  after=$(missing "$len" ${pols//,/ })
  echo "$(((before - after) * ctx)) $secs" >> "$OUT_DIR/timing.tsv"
  if [ "$erc" -eq 124 ] || [ "$erc" -eq 137 ]; then
    log "$len: stopped at the budget after ${secs}s, $((before - after)) samples done; rerun to go on"
    break
  elif [ "$erc" -ne 0 ]; then
    log "$len: sieve eval failed (rc $erc):"
    tail -5 "$OUT_DIR/eval_$len.log" | tee -a "$OUT_DIR/gpu_eval.log"
    rc=1
  else
    log "$len: done in ${secs}s, $((before - after)) samples"
  fi
done
"$SIEVE" eval -o "$OUT_DIR" --report-only > /dev/null 2>> "$OUT_DIR/gpu_eval.log" || true
left=0
for len in $LENGTHS; do
  pols=$(cells_of "$len" | tr '\n' ' ')
  # shellcheck disable=SC2086
  [ -n "$pols" ] && left=$((left + $(missing "$len" $pols)))
done
if [ "$left" -eq 0 ]; then log "matrix complete"; else log "$left samples left"; fi
exit $rc
