#!/usr/bin/env python3
"""A toy of the CPU server's step loop under issue 47's load, to see which step-planner rules can
meet its targets at once (bench/LOG.md, "Serving under load: the planner's levers").

C requests arrive together, each with an L-token prompt and M output tokens. Every step
carries one token of every running stream and prefill chunks (first come, first served); its
time comes from a cost model shaped like the CPU engine (src/backend/cpu/matmul_gemm.h):
  base0                      per step (norms, barriers, sampling, HTTP)
  + gemv                     a step of one row (the matrix-vector kernels), or
  + G + grp * ceil(rows/8)   a step of more rows (the GEMM: weights unpacked once, 8 rows a pass)
  + tok * rows + kd * keys read by decodes + kc * keys attended by chunks.
The defaults are the 2-core VM's, from bench_matmul's SmolLM2 step (1 thread: 8.1 ms at one
row, 18 ms at 2-8, +9.5 ms per 8 rows) halved for 2 threads, and last session's quiet figures
(1K prompt ~1.3 s, 4K ~10.6 s, single-stream ITL 8-13 ms). The planner is assumed to know the
true costs. Statistics as `sieve bench serve` computes them: TTFT p50 over requests, ITL
p50/p99 over every gap of every request, output tok/s = C*M / wall.

  python3 bench/planner_sim.py [key=value ...]   e.g. G=8 base0=6
"""
import itertools
import math
import sys

P = dict(base0=3.5, gemv=4.5, G=4.3, grp=4.75, tok=0.1, kc=0.69e-3, kd=1.5e-3)
MAX_BATCH = 512


def pct(v, q):
    v = sorted(v)
    pos = q / 100 * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def cost(dec_depths, chunks):
    rows = len(dec_depths) + sum(n for n, _ in chunks)
    t = P["base0"] + (P["gemv"] if rows == 1 else P["G"] + P["grp"] * math.ceil(rows / 8))
    t += P["tok"] * rows + P["kd"] * sum(dec_depths)
    t += P["kc"] * sum(n * d + n * (n + 1) / 2 for n, d in chunks)
    return t


def eff_budget(dec, depth, full, eff):
    """The auto rule: the shortest step whose prefill rate is eff x a full chunk's."""
    rate = lambda n: n / cost(dec, [(n, depth)])
    want = eff * rate(full)
    for n in range(1, full + 1):
        if rate(n) >= want:
            return cost(dec, [(n, depth)])
    return cost(dec, [(full, depth)])


def run(C, L, M, budget_rule):
    pend, done, gen = [L] * C, [0] * C, [0] * C
    ttft, last, gaps, t = [0.0] * C, [0.0] * C, [], 0.0
    while any(g < M for g in gen):
        dec = [i for i in range(C) if pend[i] == 0 and gen[i] < M]
        wait = [i for i in range(C) if pend[i] > 0]
        dd = [done[i] + gen[i] for i in dec]
        chunks, left = {}, MAX_BATCH - len(dec)
        budget = None
        if wait and dec and budget_rule:
            budget = budget_rule(dd, done[wait[0]], min(MAX_BATCH, MAX_BATCH - len(dec)))
        for j, i in enumerate(wait):
            if left <= 0:
                break
            cap = min(pend[i], MAX_BATCH, left)
            if budget is None:
                n = cap
            else:
                others = [(m, done[k]) for k, m in chunks.items()]
                lo, hi = 0, cap
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if cost(dd, others + [(mid, done[i])]) <= budget:
                        lo = mid
                    else:
                        hi = mid - 1
                n = max(lo, min(16, cap)) if j == 0 else lo
            if n <= 0:
                break
            chunks[i] = n
            left -= n
        t += cost(dd, [(n, done[i]) for i, n in chunks.items()])
        for i in dec:
            gen[i] += 1
            gaps.append(t - last[i])
            last[i] = t
        for i, n in chunks.items():
            pend[i] -= n
            done[i] += n
            if pend[i] == 0:
                gen[i], ttft[i], last[i] = 1, t, t
    return pct(ttft, 50), pct(gaps, 50), pct(gaps, 99), C * M / t * 1000


def auto(eff):
    return lambda dd, depth, full: eff_budget(dd, depth, full, eff)


def itl_cap(ratio, floor_eff):
    """At most `ratio` x the decode-only step, but at least the floor_eff auto budget."""
    return lambda dd, depth, full: min(eff_budget(dd, depth, full, 0.9),
                                       max(ratio * cost(dd, []), eff_budget(dd, depth, full, floor_eff)))


RULES = {"auto 0.95": auto(0.95), "auto 0.9": auto(0.9), "auto 0.8": auto(0.8),
         "3x decode, >= 0.8": itl_cap(3, 0.8), "3x decode": itl_cap(3, 0.0)}

if __name__ == "__main__":
    for kv in sys.argv[1:]:
        k, v = kv.split("=")
        P[k] = float(v)
    print(f"cost model: {P}")
    print("| point | rule | TTFT p50 / base | ITL p50 ms | ITL p99 ms | p99/p50 | out tok/s / base |")
    print("|---|---|---|---|---|---|---|")
    for C, L in itertools.product([4, 8], [1024, 4096]):
        bt, b50, b99, btps = run(C, L, 64, None)
        print(f"| {C} x {L} | token budget (base) | {bt / 1000:.2f} s | {b50:.0f} | {b99:.0f} | {b99 / b50:.1f} | {btps:.1f} tok/s |")
        for name, rule in RULES.items():
            tt, g50, g99, tps = run(C, L, 64, rule)
            print(f"| | {name} | {tt / bt:.2f} | {g50:.0f} | {g99:.0f} | {g99 / g50:.1f} | {tps / btps:.2f} |")
