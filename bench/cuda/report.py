#!/usr/bin/env python3
"""Join bench_cuda's CSV with the PyTorch SDPA baseline of the same run; print ratios,
achieved bandwidth and the issue's targets (met / missed) as markdown.

  python3 bench/cuda/report.py ours.csv sdpa.csv [--md RESULTS-cuda.md]
"""
import argparse
import csv
import sys


def load(path):
    rows, meta = [], []
    with open(path) as f:
        lines = [l for l in f if l.strip()]
    meta = [l.strip("# \n") for l in lines if l.startswith("#")]
    for r in csv.DictReader([l for l in lines if not l.startswith("#")]):
        r["B"], r["N"] = int(r["B"]), int(r["N"])
        r["median_us"] = float(r["median_us"])
        r["GBps"] = float(r["GBps"])
        rows.append(r)
    return rows, meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("sdpa")
    ap.add_argument("--md", default=None)
    a = ap.parse_args()
    ours, meta_o = load(a.ours)
    try:
        sdpa, meta_s = load(a.sdpa)
    except FileNotFoundError:
        sdpa, meta_s = [], ["(no SDPA baseline)"]
    idx = {}
    for r in ours + sdpa:
        idx[(r["name"], r["model"], r["B"], r["N"])] = r

    def get(name, model, B, N):
        r = idx.get((name, model, B, N))
        return r["median_us"] if r else None

    out = []
    p = out.append
    p("Device / software: " + "; ".join(meta_o + meta_s))
    p("")
    copy = [r for r in ours + sdpa if r["group"] == "copy"]
    for r in copy:
        p(f"- {r['name']}: {r['GBps']:.0f} GB/s ({r['note']})")
    copy_bw = max((r["GBps"] for r in copy), default=0.0)
    p("")

    def fmt(x, nd=1):
        return "-" if x is None else f"{x:.{nd}f}"

    targets = []
    models = []
    for r in ours:
        if r["model"] not in models and r["model"] != "any":
            models.append(r["model"])
    # dense decode
    p("### Dense decode (one query per sequence, all N keys)")
    p("| model | B | N | cuDNN us | flash us | ours us | ours best us | cuDNN/ours | ours GB/s | % of copy BW |")
    p("|---|---|---|---|---|---|---|---|---|---|")
    for r in ours:
        if r["name"] != "decode_dense":
            continue
        m, B, N = r["model"], r["B"], r["N"]
        cd, fl = get("decode_cudnn", m, B, N), get("decode_flash", m, B, N)
        best = get("decode_dense_best", m, B, N)
        bw = r["GBps"]
        pct = 100.0 * bw / copy_bw if copy_bw else 0.0
        p(f"| {m} | {B} | {N} | {fmt(cd)} | {fmt(fl)} | {r['median_us']:.1f} | {fmt(best)} | "
          f"{fmt(cd / r['median_us'] if cd else None, 2)} | {bw:.0f} | {pct:.0f}% |")
        if m == "llama3-8b" and N >= 131072:
            targets.append((f"dense decode >= 90% of copy BW, {m} B={B} N={N}", pct >= 90.0, f"{pct:.0f}%"))
    p("")
    # sparse decode steps
    p("### Sparse decode step (score + select + attend), budget 2048 + 128 sinks + 512 window")
    p("| model | B | N | variant | step us (graph) | eager us | score us | select us | attend us | cuDNN dense us | speedup vs cuDNN |")
    p("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in ours:
        if r["group"] != "sparse" or not r["name"].endswith(".step"):
            continue
        m, B, N = r["model"], r["B"], r["N"]
        base = r["name"][: -len(".step")]
        cd = get("decode_cudnn", m, B, N)
        sp = cd / r["median_us"] if cd else None
        var = base[len("step_"):]
        p(f"| {m} | {B} | {N} | {var} | {r['median_us']:.1f} | {fmt(get(base + '.step_eager', m, B, N))} | "
          f"{fmt(get(base + '.score', m, B, N))} | {fmt(get(base + '.select', m, B, N))} | "
          f"{fmt(get(base + '.attend', m, B, N))} | {fmt(cd)} | {fmt(sp, 2)} |")
        if m == "llama3-8b" and sp is not None:
            if var.startswith("sketch") and N == 131072:
                targets.append((f"sparse step >= 10x cuDNN at 128K, {var} B={B}", sp >= 10, f"{sp:.1f}x"))
            if var.startswith("sketch") and N == 1048576:
                targets.append((f"sparse step >= 25x cuDNN at 1M, {var} B={B}", sp >= 25, f"{sp:.1f}x"))
            if var.startswith("exact_qk") and N == 1048576:
                targets.append((f"exact q.K step >= 1.8x cuDNN at 1M, B={B}", sp >= 1.8, f"{sp:.2f}x"))
        if m == "llama3-8b" and var in ("exact_qk", "sketch_fp8_kvhead_vote", "sketch_fused_fp8_shared_raw1",
                                        "exact_qk_fusedsel", "sketch_fp8_kvhead_vote_fusedsel"):
            sel = get(base + ".select", m, B, N)
            if sel is not None and m == "llama3-8b" and B == 1 and N in (131072, 1048576):
                lim = 20 if N == 131072 else 60
                rows = ("1 row per sequence, one launch" if "fused_" in var else
                        "8 rows, fused step's selection, one launch" if "fusedsel" in var else
                        "8 rows, fused hist")
                targets.append((f"selection <= {lim} us per layer at {N}, {var} ({rows})", sel <= lim,
                                f"{sel:.1f} us"))
            pl = get(base + ".select_per_layer", m, B, N)
            if pl is not None and B == 1 and N in (131072, 1048576):
                lim = 20 if N == 131072 else 60
                targets.append((f"selection <= {lim} us per layer at {N}, {var} (16 layers back to back in "
                                f"one graph, time / 16)", pl <= lim, f"{pl:.1f} us"))
    p("")
    p("Exact scoring, the two kernels apart (K read by score_qk; logits read by soft_vote):")
    p("")
    p("| model | B | N | score_qk us | K GB/s | soft_vote us |")
    p("|---|---|---|---|---|---|")
    for r in ours:
        if r["name"] == "step_exact_qk.score_qk":
            m, B, N = r["model"], r["B"], r["N"]
            p(f"| {m} | {B} | {N} | {r['median_us']:.1f} | {r['GBps']:.0f} | {fmt(get('step_exact_qk.soft_vote', m, B, N))} |")
    p("")
    # selection alone
    p("### Selection alone (8 rows per sequence; .full = memset + histogram + chain, .chain = after a fused histogram)")
    p("| B | N | budget / data | full us | chain us | fused (one launch) us | fused per layer (16 in a graph) us | mean selected |")
    p("|---|---|---|---|---|---|---|---|")
    for r in ours:
        if r["group"] != "select" or not r["name"].endswith(".full"):
            continue
        base = r["name"][: -len(".full")]
        ch = get(base + ".chain", "any", r["B"], r["N"])
        mean = r["note"].split("mean_selected=")[1].split()[0] if "mean_selected=" in r["note"] else "-"
        fu = get(base + ".fused", "any", r["B"], r["N"])
        fpl = get(base + ".fused_per_layer", "any", r["B"], r["N"])
        p(f"| {r['B']} | {r['N']} | {base[len('select_'):]} | {r['median_us']:.1f} | {fmt(ch)} | {fmt(fu)} | {fmt(fpl)} | {mean} |")
        if r["B"] == 1 and "topk2048" in base and ("softvote_sd2.5" in base or "real_smollm2" in base):
            lim = 20 if r["N"] == 131072 else 60
            data = base.split("topk2048_")[1]
            targets.append((f"standalone top-k selection <= {lim} us at {r['N']} (8 rows, {data}, incl. histogram)",
                            r["median_us"] <= lim, f"{r['median_us']:.1f} us"))
            if fu is not None:
                targets.append((f"standalone top-k selection <= {lim} us at {r['N']} (8 rows, {data}, fused one launch)",
                                fu <= lim, f"{fu:.1f} us"))
            fl = get(base + ".fused_per_layer", "any", r["B"], r["N"])
            if fl is not None:
                targets.append((f"standalone top-k selection <= {lim} us per layer at {r['N']} (8 rows, {data}, fused, 16 layers in one graph)",
                                fl <= lim, f"{fl:.1f} us"))
    p("")
    # prefill
    p("### Prefill chunk of 512 queries (Llama-3-8B shape, B=1)")
    p("| N | cuDNN dense us | flash dense us | ours dense us | variant | sparse step us | attend us | speedup vs cuDNN |")
    p("|---|---|---|---|---|---|---|---|")
    for r in ours:
        if r["group"] != "prefill" or not r["name"].endswith(".step"):
            continue
        m, N = r["model"], r["N"]
        cd = get("prefill512_cudnn", m, 1, N)
        sp = cd / r["median_us"] if cd else None
        base = r["name"][: -len(".step")]
        p(f"| {N} | {fmt(cd)} | {fmt(get('prefill512_flash', m, 1, N))} | {fmt(get('prefill_dense', m, 1, N))} | "
          f"{base[len('prefill_sparse_'):]} | {r['median_us']:.1f} | {fmt(get(base + '.attend', m, 1, N))} | {fmt(sp, 1)} |")
        if N == 1048576 and sp is not None:
            targets.append((f"512-query chunk with selection >= 20x cuDNN dense chunk at 1M, {base[len('prefill_sparse_'):]}",
                            sp >= 20, f"{sp:.1f}x"))
    p("")
    # dense prefill chunk, every shape: our CTA shapes against cuDNN and FlashAttention
    dense = [r for r in ours if r["name"] == "prefill_dense"]
    if dense:
        p("### Dense prefill chunk of 512 queries (B=1)")
        p("| model | N | cuDNN (PyTorch) us | flash us | ours us (splits) | 64 rows us | 128 rows us | ours TFLOPs | "
          "cuDNN/ours | cuDNN frontend (ours) us | paged us | faster |")
        p("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in dense:
            m, N = r["model"], r["N"]
            cd = get("prefill512_cudnn", m, 1, N)
            fe = get("prefill_cudnn", m, 1, N)
            note = dict(kv.split("=") for kv in r["note"].split() if "=" in kv)
            faster = "-" if fe is None else ("cuDNN frontend" if fe < r["median_us"] else "ours")
            p(f"| {m} | {N} | {fmt(cd)} | {fmt(get('prefill512_flash', m, 1, N))} | "
              f"{r['median_us']:.1f} ({note.get('splits', '?')}) | {fmt(get('prefill_dense_rows64', m, 1, N))} | "
              f"{fmt(get('prefill_dense_rows128', m, 1, N))} | {note.get('TFLOPs', '?')} | "
              f"{fmt(cd / r['median_us'] if cd else None, 2)} | {fmt(fe)} | "
              f"{fmt(get('prefill_cudnn_paged', m, 1, N))} | {faster} |")
        p("")
    other = [r for r in ours if r["group"] == "append"]
    if other:
        p("### KV append")
        for r in other:
            p(f"- {r['name']} ({r['note']}): {r['median_us']:.1f} us")
        p("")
    p("### Targets")
    for name, ok, val in targets:
        p(f"- [{'x' if ok else ' '}] {name}: {val}{'' if ok else '  (MISSED)'}")
    text = "\n".join(out)
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
