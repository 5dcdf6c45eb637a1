# Shared by the CLI test scripts (sourced): MODEL = $1 if given, else smollm2.gguf from the
# test model directories (empty when none has it); tmp = a scratch directory removed on exit;
# check NAME RC counts a failure in $fail.
MODEL=${1:-}
if [ -z "$MODEL" ]; then
  for d in "${SIEVE_TEST_MODEL_DIR:-}" "${SIEVE_HOME:-}/models" "$HOME/.cache/sieve/models" /tmp/models; do
    if [ -n "$d" ] && [ -f "$d/smollm2.gguf" ]; then MODEL="$d/smollm2.gguf"; break; fi
  done
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

check() {  # name, condition result
  if [ "$2" -ne 0 ]; then echo "FAIL $1"; fail=$((fail + 1)); else echo "ok   $1"; fi
}
