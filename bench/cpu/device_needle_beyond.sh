#!/usr/bin/env bash
# Needle and passkey retrieval beyond SmolLM2's 8K trained window (issue 6) under a policy
# (positions=auto takes compact positions past the trained length), more samples than
# device_compact_eval.sh in one capped 10-minute device call: one pinned process per job, of
# THREADS threads each (default 4: four jobs fill 16 cores). Dense's collapse past the window
# is in bench/RESULTS.md (every dense output a loop), so dense is not rerun here. Prints every
# finished sample and the per-(policy ran, ctx, task) table.
#   [POLICY=auto] [THREADS=4] [JOBS="dir task ctx n seed [--set k=v]...;..."]
#     bench/cpu/device_needle_beyond.sh SIEVE SMOLLM2.gguf OUT [LIMIT]
# The default jobs: niah_single_1 at 16K (2 x 8 samples, seeds 11 and 12), at 32K (4, seed 13),
# passkey at 16K (8, seed 14). Jobs with the same seed draw the same samples (paired A/B).
set -u
SIEVE=$1 SMOL=$2 OUT=$3 LIMIT=${4:-540} T=${THREADS:-4}
JOBS=${JOBS:-"n16a niah_single_1 16K 8 11;n16b niah_single_1 16K 8 12;n32 niah_single_1 32K 4 13;p16 passkey 16K 8 14"}
mkdir -p "$OUT"
core=0
IFS=';' read -ra jobs <<<"$JOBS"
for job in "${jobs[@]}"; do
  read -ra a <<<"$job"
  dir=${a[0]} task=${a[1]} ctx=${a[2]} n=${a[3]} seed=${a[4]}
  timeout "$LIMIT" taskset -c "$core-$((core + T - 1))" "$SIEVE" -q eval -m "$SMOL" -t "$T" --stop-newline \
    --policy "${POLICY:-auto}" "${a[@]:5}" --tasks "$task" --ctx "$ctx" -n "$n" --seed "$seed" \
    -o "$OUT/$dir" >>"$OUT/$dir.log" 2>&1 &
  core=$((core + T))
done
wait
python3 "$(dirname "$0")/samples_table.py" "$OUT" policy_ran,ctx,task --samples
