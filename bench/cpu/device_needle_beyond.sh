#!/usr/bin/env bash
# Needle and passkey retrieval beyond SmolLM2's 8K trained window (issue 6) under `auto`
# (TokenSelect; positions=auto takes compact positions past the trained length), more samples
# than device_compact_eval.sh in one capped 10-minute device call: four pinned processes of 4
# threads, each a different task / context / seed, so no sample repeats. Dense's collapse past
# the window is in bench/RESULTS.md (every dense output a loop), so dense is not rerun here.
# Prints every finished sample and the per-(policy, ctx, task) table.
#   [POLICY=auto] bench/cpu/device_needle_beyond.sh SIEVE SMOLLM2.gguf OUT [LIMIT]
set -u
SIEVE=$1 SMOL=$2 OUT=$3 LIMIT=${4:-540}
common=(-m "$SMOL" -t 4 --stop-newline --policy "${POLICY:-auto}")
run() { local cores=$1 dir=$2; shift 2
  timeout "$LIMIT" taskset -c "$cores" "$SIEVE" -q eval "${common[@]}" -o "$OUT/$dir" "$@" >>"$OUT/$dir.log" 2>&1; }
mkdir -p "$OUT"
run 0-3 n16a --tasks niah_single_1 --ctx 16K -n 8 --seed 11 &
run 4-7 n16b --tasks niah_single_1 --ctx 16K -n 8 --seed 12 &
run 8-11 n32 --tasks niah_single_1 --ctx 32K -n 4 --seed 13 &
run 12-15 p16 --tasks passkey --ctx 16K -n 8 --seed 14 &
wait
python3 - "$OUT" <<'PY'
import collections, glob, json, os, sys
acc = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*", "samples.jsonl"))):
    for line in open(f):
        d = json.loads(line)
        acc[(d["policy"], d["ctx"], d["task"])].append(d["score"])
        print(d["id"], d["policy"], d["score"], repr(d["output"][:40]), "prefill_ms", round(d["prefill_ms"]))
print("| policy | ctx | task | n | accuracy |\n|---|---|---|---|---|")
for (p, c, t), s in sorted(acc.items()):
    print(f"| {p} | {c} | {t} | {len(s)} | {100 * sum(s) / len(s):.1f} |")
PY
