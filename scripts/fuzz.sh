#!/usr/bin/env bash
# Builds the libFuzzer targets with the `fuzz` preset (clang, ASan + UBSan) and fuzzes the
# GGUF reader for SECONDS (default 60). Extra arguments go to libFuzzer (e.g. -jobs=4).
# New corpus entries collect in build-fuzz/corpus-gguf (outside git); crashes are written to
# build-fuzz/artifacts/ - turn each into a regression test in src/gguf/.
# Usage: scripts/fuzz.sh [SECONDS] [libFuzzer flags...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
shift $(( $# > 0 ? 1 : 0 ))
cd "$root"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target gguf_fuzz -j "${SIEVE_BUILD_JOBS:-2}"
mkdir -p build-fuzz/corpus-gguf build-fuzz/artifacts
# malloc_limit_mb: a small input asking for a big allocation is a bug (counts must be checked
# against the file size before anything is allocated), so fail on it instead of swapping.
exec build-fuzz/fuzz/gguf_fuzz build-fuzz/corpus-gguf fuzz/corpus/gguf \
  -dict=fuzz/gguf.dict -max_total_time="$secs" -malloc_limit_mb=256 -rss_limit_mb=2048 \
  -timeout=10 -artifact_prefix=build-fuzz/artifacts/ -print_final_stats=1 "$@"
