#!/usr/bin/env bash
# Runs the pytest suite against a sieve binary: tests/server/run.sh path/to/sieve.
# Python: $SIEVE_PYTHON, else the git-ignored venv scripts/install-deps.sh makes (build-venv,
# with pytest and the openai client), else python3. Exits 77 (skipped) without pytest; the
# tests skip themselves when smollm2.gguf is not in the test model directories.
# SIEVE_GPU_BIN=path/to/a/cuda/build/of/sieve runs the fault tests (test_faults.py) on
# --backend cuda as well; without it those cases skip.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export SIEVE_BIN=${1:?usage: run.sh path/to/sieve}
py=""
for c in "${SIEVE_PYTHON:-}" "$root/build-venv/bin/python" python3; do
  if [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 && "$c" -c "import pytest" 2>/dev/null; then
    py=$c
    break
  fi
done
if [ -z "$py" ]; then
  echo "pytest not found: the server tests are skipped (scripts/install-deps.sh installs it)"
  exit 77
fi
export PYTHONDONTWRITEBYTECODE=1
args=()
# Sanitizer builds (SIEVE_TEST_SHORT): the endpoint and bad-input cases, not the 16-client
# load run, the shutdown timings or the faults under load.
[ -n "${SIEVE_TEST_SHORT:-}" ] && args=(-k "not test_load and not test_lifecycle and not test_faults")
exec "$py" -m pytest -q -p no:cacheprovider -o console_output_style=classic "$here" "${args[@]}"
