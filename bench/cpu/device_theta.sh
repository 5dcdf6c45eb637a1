#!/usr/bin/env bash
# TokenSelect decode speed against the Selection Cache threshold theta, at 16K and 32K on a
# 16-core machine in one device call: dense and tokenselect at theta 0.9 (the paper's
# default), 0.7 and 0.5, side by side (dense rows prefilled by tokenselect: dense decode reads
# every key whatever they hold). Attention ms/token includes the planning. Writes
# OUT/theta.json and prints the per-row summary.
#   [LENGTHS=16384,32768] [POLICIES=dense,...] [N_DECODE=32] bench/cpu/device_theta.sh SIEVE SMOLLM2.gguf OUT [THREADS]
set -u
SIEVE=$1 SMOL=$2 OUT=$3 T=${4:-16}
mkdir -p "$OUT"
"$SIEVE" bench -m "$SMOL" --threads-list "$T" --lengths "${LENGTHS:-16384,32768}" --n-decode "${N_DECODE:-32}" --reps 1 \
  --warmup 0 --policies "${POLICIES:-dense,tokenselect,tokenselect:theta=0.7,tokenselect:theta=0.5}" \
  --dense-prefill tokenselect -f examples/lighthouse-report.txt >"$OUT/theta.json" 2>"$OUT/theta.log"
python3 - "$OUT/theta.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print("| context | policy | decode tok/s | vs dense | keys read | cache hits | attention ms/token | planning ms/token | prefill tok/s |")
print("|---|---|---|---|---|---|---|---|---|")
for r in j["results"]:
    print(f"| {r['prompt_tokens']} | {r['policy']} | {r['decode_tok_s']:.1f} | {r.get('decode_vs_dense', 0):.2f} | "
          f"{100 * r['selected_fraction']:.1f}% | {100 * r['selection_cache_hit_rate']:.0f}% | "
          f"{r.get('decode_attention_ms_per_token', 0):.2f} | {r.get('decode_select_ms_per_token', 0):.2f} | "
          f"{r['prefill_tok_s']:.0f} |")
PY
