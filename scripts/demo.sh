#!/usr/bin/env bash
# The main job on a fresh machine: install, build, pull the default model, and answer a
# question about a long document (examples/lighthouse-report.txt, ~7.6K tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
./build/tools/sieve/sieve pull smollm2
question=${1:-"What is the name of the station's cat?"}
./build/tools/sieve/sieve run --chat -f examples/lighthouse-report.txt -p "$question" -n 64
