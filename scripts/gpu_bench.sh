#!/usr/bin/env bash
# Runs the CUDA tests and benchmarks plus the PyTorch SDPA baseline in one call on a GPU
# machine, then joins them (bench/cuda/report.py). Binaries are built elsewhere and
# carried in BIN (default .carry/: test_cuda, bench_cuda; scripts/carry_cuda.sh fills it).
#
# With SIEVE= (a sieve binary) it also times the whole model on the GPU: `sieve bench --backend
# cuda` on MODEL (default Qwen2.5-Coder-1.5B from the model cache, scripts/gpu_model.sh; parts
# MODEL.part-* are joined first) at MODEL_LENGTHS, dense and auto, into OUT_DIR/model_bench.json.
#
#   scripts/gpu_bench.sh [BIN_DIR] [OUT_DIR] [bench args...]
# Env: SKIP_TESTS=1, SKIP_BENCH=1, SKIP_SDPA=1, BENCH_ARGS="--quick", SDPA_ARGS="--quick",
#      SIEVE=..., MODEL=..., MODEL_LENGTHS=8192,32768
set -uo pipefail
BIN=${1:-.carry}
OUT_DIR=${2:-${OUT:-/tmp/sieve-gpu-bench}}
mkdir -p "$OUT_DIR"
cd "$(dirname "$0")/.." || exit 1

{
  date -u +"date %Y-%m-%dT%H:%M:%SZ"
  # the binaries' commit (scripts/carry_cuda.sh writes it); the tree's own HEAD otherwise
  echo "commit $(cat "$BIN/commit.txt" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
} > "$OUT_DIR/env.txt" 2>&1
cat "$OUT_DIR/env.txt"

rc=0
if [ -z "${SKIP_TESTS:-}" ]; then
  "$BIN/test_cuda" --gtest_output=xml:"$OUT_DIR/test_cuda.xml" > "$OUT_DIR/test_cuda.log" 2>&1 || rc=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|tests ran" "$OUT_DIR/test_cuda.log" | tail -30
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  "$BIN/bench_cuda" --out "$OUT_DIR/ours.csv" ${BENCH_ARGS:-} > "$OUT_DIR/bench_cuda.log" 2>&1 || { rc=1; tail -20 "$OUT_DIR/bench_cuda.log"; }
fi
if [ -z "${SKIP_SDPA:-}" ]; then
  PYTHONUNBUFFERED=1 python3 bench/cuda/sdpa_baseline.py --out "$OUT_DIR/sdpa.csv" ${SDPA_ARGS:-} > "$OUT_DIR/sdpa.log" 2>&1 || { rc=1; tail -20 "$OUT_DIR/sdpa.log"; }
fi
if [ -n "${SIEVE:-}" ]; then
  . scripts/gpu_model.sh
  if gpu_model_resolve; then
    "$SIEVE" bench --backend cuda -m "$MODEL" --lengths "${MODEL_LENGTHS:-8192,32768}" --n-decode 128 \
      --policies dense,auto:positions=original > "$OUT_DIR/model_bench.json" 2> "$OUT_DIR/model_bench.log" \
      || { rc=1; tail -5 "$OUT_DIR/model_bench.log"; }
  else
    rc=1
  fi
fi
python3 bench/cuda/report.py "$OUT_DIR/ours.csv" "$OUT_DIR/sdpa.csv" --md "$OUT_DIR/RESULTS-cuda.md" || rc=1
exit $rc
