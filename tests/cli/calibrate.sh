#!/usr/bin/env bash
# sieve calibrate on the real model, small and fast: the head plan is deterministic for a
# seed, the indexer fit writes its projections, and bad input is one error line (exit 1).
# Skipped (77) without smollm2.gguf.
set -u
SIEVE=${1:?usage: calibrate.sh path/to/sieve [model.gguf]}
. "$(dirname "$0")/common.sh" "${2:-}"
[ -n "$MODEL" ] || { echo "smollm2.gguf not found; skipped"; exit 77; }

run() { "$SIEVE" -q calibrate -m "$MODEL" --samples 1 --ctx 384 "$@"; }

run --seed 5 --out "$tmp/a.json" >"$tmp/a.txt" 2>"$tmp/err"
check "calibrate runs" $?
run --seed 5 --out "$tmp/b.json" >/dev/null 2>>"$tmp/err"
cmp -s "$tmp/a.json" "$tmp/b.json"
check "same seed, same plan" $?
run --seed 6 --out "$tmp/c.json" >/dev/null 2>>"$tmp/err"
! cmp -s "$tmp/a.json" "$tmp/c.json"
check "another seed, other scores" $?
grep -q "retrieval heads: 41 of 270" "$tmp/a.txt"  # round(0.15 * 270 = 40.5)
check "15% of the heads by default" $?

run --fit-indexer --head-plan "$tmp/a.json" --steps 3 --queries 8 --out "$tmp/ix.json" >"$tmp/ix.txt" 2>>"$tmp/err"
check "fit-indexer runs" $?
grep -q '"d_idx": 8' "$tmp/ix.json"
check "indexer written with d_idx = head_dim / 8" $?
grep -q "^budget (held-out): top-p 0.95 keeps" "$tmp/ix.txt" && grep -q '"keep_oracle"' "$tmp/ix.json"
check "top-p budget reported and written" $?

expect_error() {  # name, expected substring, args...
  local name=$1 want=$2
  shift 2
  "$SIEVE" calibrate -m "$MODEL" "$@" >/dev/null 2>"$tmp/e"
  local rc=$?
  [ "$rc" -eq 1 ] && [ "$(grep -c '^error:' "$tmp/e")" -eq 1 ] && grep -q "$want" "$tmp/e"
  check "$name" $?
}
expect_error "missing --out" "out" --samples 1
expect_error "--head-plan needs --fit-indexer" "only with --fit-indexer" --head-plan "$tmp/a.json" --out "$tmp/x.json"
printf '{"format": "sieve-head-plan"' >"$tmp/bad.json"
expect_error "bad plan JSON" "not valid JSON" --fit-indexer --head-plan "$tmp/bad.json" --out "$tmp/x.json"
sed 's/"n_layer": 30/"n_layer": 29/' "$tmp/a.json" >"$tmp/shape.json"
expect_error "plan for another shape" "29" --fit-indexer --head-plan "$tmp/shape.json" --out "$tmp/x.json"
expect_error "ratio out of range" "ratio" --ratio 1.5 --out "$tmp/x.json"
expect_error "--budget-p needs --fit-indexer" "only with --fit-indexer" --budget-p 0.9 --out "$tmp/x.json"

if [ "$fail" -ne 0 ]; then
  cat "$tmp/err"
  exit 1
fi
