#!/usr/bin/env bash
# sieve bench on the real model, small and fast: the policies' decode steps alternate in
# rounds (--round), and that must not change what any policy decodes - each keeps its own KV
# store, sparse state and logits. Skipped (77) without smollm2.gguf.
set -u
SIEVE=${1:?usage: bench.sh path/to/sieve [model.gguf]}
. "$(dirname "$0")/common.sh" "${2:-}"
[ -n "$MODEL" ] || { echo "smollm2.gguf not found; skipped"; exit 77; }

# Below the selection threshold every sparse preset attends densely, so the test lowers it:
# tokenselect with top_k 8 (+ 2 sinks + 4 recent) selects, and stca with a 64-token KV budget
# also evicts, from the first decode step of a 300-token prompt of real text - tight enough
# that the three policies decode three different continuations, so a policy that read
# another's state would show.
TEXT=$(dirname "$0")/../../examples/lighthouse-report.txt
bench() {
  "$SIEVE" -q bench -m "$MODEL" --threads-list 2 --lengths 300 --n-decode 24 --reps 1 --warmup 0 -f "$TEXT" \
    --policies dense,tokenselect:top_k=8:sinks=2:local=4,stca:top_k=8:sinks=2:local=4:kv_budget=64 "$@"
}
bench --round 0 >"$tmp/all.json" 2>"$tmp/err"
check "bench runs, policies one after another" $?
bench --round 1 >"$tmp/alt.json" 2>>"$tmp/err"
check "bench runs, policies taking turns token by token" $?
python3 - "$tmp/all.json" "$tmp/alt.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["results"] for p in sys.argv[1:3])
key = lambda r: (r["policy"], r["prompt_tokens"])
fa = {key(r): r["decode_tokens_fnv"] for r in a}
fb = {key(r): r["decode_tokens_fnv"] for r in b}
assert len(fa) == 3 and fa == fb, (fa, fb)
assert len(set(fa.values())) == 3, fa  # three different continuations
sel = [r for r in b if r["policy"] != "dense"]
assert all(r["selected_fraction"] < 0.2 for r in sel), [r["selected_fraction"] for r in sel]
assert any(r["tokens_evicted"] > 0 for r in sel), [r["tokens_evicted"] for r in sel]
PY
check "each policy decodes the same tokens either way; the three differ; sparse ones select, stca evicts" $?

# Decode at depth (--batch-seqs) on the CPU engine: one shared prefill, then batches that
# find the prompt's full pages in the prefix cache - for stca too, whose eviction rewrites the
# pages it holds alone (it runs last and re-prefills once); a policy that cannot be built
# gets rows with its error; --rows-out holds every row; --own-ttft times each policy's own prefill.
"$SIEVE" -q bench -m "$MODEL" --threads-list 2 --lengths 300 --n-decode 4 --reps 1 --warmup 0 \
  -f "$TEXT" --batch-seqs 1,2,fit --fit-cap 2 --shared-prefill dense --own-ttft --rows-out "$tmp/rows.jsonl" \
  --policies stca:top_k=8:sinks=2:local=4:kv_budget=64,dense,rtpurbo >"$tmp/depth.json" 2>>"$tmp/err"
check "bench --batch-seqs runs on the CPU engine" $?
python3 - "$tmp/depth.json" "$tmp/rows.jsonl" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
lines = [json.loads(l) for l in open(sys.argv[2])]
assert len(rows) == len(lines) == 9, (len(rows), len(lines))
ok = [r for r in rows if "error" not in r]
assert [r["batch"] for r in rows if r["policy"] == "rtpurbo"] == ["1", "2", "fit"], rows
assert all("head plan" in r["error"] for r in rows if r["policy"] == "rtpurbo")
assert len(ok) == 6 and all(r["cached_tokens"] == 288 and r["decode_tok_s"] > 0 for r in ok), ok
dense = {r["batch"]: r for r in ok if r["is_dense"]}
stca = {r["batch"]: r for r in ok if not r["is_dense"]}
assert stca["1"]["seqs_fit"] > dense["1"]["seqs_fit"], (stca["1"], dense["1"])
assert stca["fit"]["batch_seqs"] == 2 and stca["2"]["decode_vs_dense"] > 0
# --own-ttft: dense's time is the shared prefill's, stca prefilled its own copy
assert all(r["ttft_own"] for r in ok) and stca["1"]["prefill_cached_tokens"] == 0
assert stca["1"]["ttft_speedup_vs_dense"] > 0
PY
check "each batch hits the prefix cache; stca fits more sequences; refused and streamed rows" $?

[ "$fail" -eq 0 ] || { cat "$tmp/err"; exit 1; }
