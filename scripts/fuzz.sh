#!/usr/bin/env bash
# Builds the libFuzzer targets with the `fuzz` preset (clang, ASan + UBSan) and fuzzes one,
# several or all of them, SECONDS each (default 60), one after another.
#   scripts/fuzz.sh [all|TARGET[,TARGET...]] [SECONDS] [libFuzzer flags...]
#   scripts/fuzz.sh http 1800          # one target for half an hour
#   scripts/fuzz.sh all 20             # what CI runs (scripts/test.sh)
#   scripts/fuzz.sh 60                 # all targets, 60 s each
# Targets: gguf http request tokenizer chat_template policy head_plan sketch_basis (fuzz/*_fuzz.cpp).
# Seeds come from fuzz/corpus/<target> (fuzz/make_seeds.py writes them) with fuzz/<target>.dict
# when there is one; new corpus entries collect in build-fuzz/corpus-<target> (outside git) and
# crashes in build-fuzz/artifacts/<target>-*: turn each into a regression test beside the code.
# Prints one line per target (executions, exec/s, corpus size) and exits 1 if any target found
# a crash, leak, timeout or out-of-memory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
all_targets="gguf http request tokenizer chat_template policy head_plan sketch_basis"
targets=all
if [ $# -gt 0 ] && ! [[ $1 =~ ^[0-9]+$ ]]; then
  targets=$1
  shift
fi
secs=${1:-60}
shift $(( $# > 0 ? 1 : 0 ))
[ "$targets" = all ] && targets=$all_targets
targets=${targets//,/ }
for t in $targets; do
  [[ " $all_targets " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t' (targets: $all_targets)" >&2; exit 2; }
done
cd "$root"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "${SIEVE_BUILD_JOBS:-2}" --target $(printf '%s_fuzz ' $targets)
mkdir -p build-fuzz/artifacts
failed=0
for t in $targets; do
  mkdir -p "build-fuzz/corpus-$t"
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  log="build-fuzz/fuzz-$t.log"
  # malloc_limit_mb: a small input asking for a big allocation is a bug (sizes must be checked
  # against the input before anything is allocated), so fail on it instead of swapping.
  rc=0
  "build-fuzz/fuzz/${t}_fuzz" "build-fuzz/corpus-$t" "fuzz/corpus/$t" "${dict[@]}" \
    -max_total_time="$secs" -malloc_limit_mb=256 -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="build-fuzz/artifacts/$t-" -print_final_stats=1 "$@" >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corpus=$(find "build-fuzz/corpus-$t" -type f | wc -l)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz $t: ok, ${secs} s, ${runs:-?} runs, ${rate:-?} exec/s, corpus $corpus"
  else
    failed=1
    echo "fuzz $t: FAILED (rc $rc) after ${runs:-?} runs; log $log:"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written|round trip' "$log" | head -20 || true
  fi
done
exit $failed
