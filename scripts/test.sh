#!/usr/bin/env bash
# Every test on a fresh machine: install, build (release, with CUDA when nvcc exists), pull
# both models (tests against real models need them), run the tests, then build and run the
# unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
./build/tools/sieve/sieve pull smollm2 --quiet-progress >/dev/null
./build/tools/sieve/sieve pull gemma3-270m --quiet-progress >/dev/null
export SIEVE_TEST_MODEL_DIR=${SIEVE_HOME:-$HOME/.cache/sieve}/models
ctest --preset release -j "$(nproc)" --timeout 900
scripts/build.sh asan
# Under the sanitizers the golden-model tests (full forward passes over 1K-token prompts)
# use smaller workloads (SIEVE_TEST_SHORT); the llama.cpp golden comparisons (numerics, run
# above in the release build) are left out.
SIEVE_TEST_SHORT=1 ctest --preset asan -j "$(nproc)" --timeout 1800 -E Golden
