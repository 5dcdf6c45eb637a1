#!/usr/bin/env bash
# Every test on a fresh machine: install, build (release, with CUDA when nvcc exists), pull
# the models (tests against real models need them), run the tests, then build and run the
# unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
# Qwen2.5-Coder-0.5B (491 MB) is pulled for the qwen2 architecture's tests: about a minute
# to download and verify, 36 s for its golden test on 2 threads; the 1.5B is not (its tests
# skip).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# Formatting is checked before anything builds: one clang-format over every C++/CUDA file.
git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format --dry-run -Werror
SIEVE_CMAKE_ARGS=-DSIEVE_WERROR=ON scripts/build.sh release  # warnings fail CI
./build/tools/sieve/sieve pull smollm2 --quiet-progress >/dev/null
./build/tools/sieve/sieve pull gemma3-270m --quiet-progress >/dev/null
./build/tools/sieve/sieve pull qwen2.5-coder-0.5b --quiet-progress >/dev/null
export SIEVE_TEST_MODEL_DIR=${SIEVE_HOME:-$HOME/.cache/sieve}/models
ctest --preset release -j "$(nproc)" --timeout 900
# Every fuzz target briefly (20 s each; about 3 minutes and the fuzz build) when clang with
# libFuzzer is there: a crash, leak, timeout or sanitizer report fails CI (scripts/fuzz.sh).
if echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
  clang++ -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  scripts/fuzz.sh all "${SIEVE_FUZZ_SECONDS:-20}"
else
  echo "clang with libFuzzer not found: the fuzz targets are skipped"
fi
scripts/build.sh asan
# Under the sanitizers the golden-model tests (full forward passes over 1K-token prompts)
# use smaller workloads (SIEVE_TEST_SHORT); the llama.cpp golden comparisons (numerics, run
# above in the release build) are left out.
SIEVE_TEST_SHORT=1 ctest --preset asan -j "$(nproc)" --timeout 1800 -E Golden
