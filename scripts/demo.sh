#!/usr/bin/env bash
# The main job on a fresh machine: install, build, pull the default model, and answer a
# question about a long document (examples/lighthouse-report.txt, ~7.6K tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
./build/tools/sieve/sieve pull smollm2
# The default question is one SmolLM2-135M answers right from the 7.6K-token report, under
# dense attention and sparse alike ("7,350 pounds"); it misses most others (the cat's name,
# the foghorn's installer) under dense attention too: the model, not the policy.
question=${1:-"How much had the boathouse appeal raised by the end of December?"}
./build/tools/sieve/sieve run --chat -f examples/lighthouse-report.txt -p "$question" -n 64
