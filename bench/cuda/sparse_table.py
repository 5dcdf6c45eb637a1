#!/usr/bin/env python3
"""The table of issue 42 item 3 from scripts/gpu_sparse_bench.sh's JSON lines.

  sparse_table.py append OUT --run ID --tag TAG --model PATH --device NAME --commit C --cmd CMD \
      [--sieve-rows ROWS.jsonl] [--llama LLAMA.jsonl]
      tag the rows of one call (sieve bench --rows-out lines, llama-bench -o jsonl lines) and
      append them to OUT
  sparse_table.py table OUT [--run ID]
      print, per model, length and batch, each policy's decode tok/s and its ratio to dense of
      the same call, time to first token, KV bytes per token, sequences that fit in the pool,
      and batch 1 against llama-bench's tg at the same depth of the same call; the targets of
      issue 42 item 3 beside them. Stdlib only (runs on a bare GPU machine).
"""
import argparse, json, os, sys

# issue 42 item 3: decode vs dense per (batch, length); TTFT and fit vs dense; vs llama.cpp.
DECODE_TARGETS = {("1", 131072): 1.8, ("1", 524288): 4.0, ("8", 131072): 2.5, ("8", 524288): 6.0}
TTFT_TARGET = (131072, 2.0)
FIT_TARGET = 3.0  # stca and rtpurbo
LLAMA_TARGET = (131072, 2.0)


def read_lines(path):
    out = []
    if not path or not os.path.exists(path):
        return out
    for line in open(path):
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut by a killed run
    return out


def append(a):
    meta = {"run": a.run, "tag": a.tag, "model": os.path.basename(a.model), "device": a.device,
            "commit": a.commit, "cmd": a.cmd}
    n = 0
    with open(a.out, "a") as f:
        for r in read_lines(a.sieve_rows):
            r.update(meta, engine="sieve")
            f.write(json.dumps(r) + "\n"); n += 1
        for r in read_lines(a.llama):
            if int(r.get("n_gen", 0)) <= 0:
                continue
            f.write(json.dumps(dict(meta, engine="llama.cpp", prompt_tokens=int(r.get("n_depth", 0)),
                                    batch="1", decode_tok_s=float(r["avg_ts"]),
                                    decode_tok_s_stddev=float(r.get("stddev_ts", 0)),
                                    n_decode=int(r["n_gen"]), llama_build=r.get("build_commit"),
                                    llama_args={k: r.get(k) for k in ("n_gpu_layers", "flash_attn", "type_k",
                                                                      "type_v", "n_ubatch")})) + "\n")
            n += 1
    print(f"appended {n} rows to {a.out}")


def fmt_len(n):
    return f"{n // 1048576}M" if n % 1048576 == 0 else f"{n // 1024}K" if n % 1024 == 0 else str(n)


def mark(v, target):
    if v is None or target is None:
        return ""
    return " ok" if v >= target else " MISS"


def table(a):
    rows = read_lines(a.out)
    if a.run:
        rows = [r for r in rows if r.get("run") == a.run]
    if not rows:
        print("no rows")
        return
    sieve = [r for r in rows if r.get("engine") == "sieve"]
    llama = [r for r in rows if r.get("engine") == "llama.cpp"]
    # ratios only within one call (run): dense and the policy measured side by side
    keyf = lambda r: (r["model"], r["prompt_tokens"], str(r["batch"]))
    groups = {}
    for r in sieve:
        groups.setdefault(keyf(r), []).append(r)
    print("| model | context | batch | policy | decode tok/s | x dense (target) | step ms | TTFT ms | "
          "TTFT x dense | KiB/token | seqs fit | fit x dense | x llama.cpp (target) | read % | hits % | run |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2] != "1", k[2])):
        model, L, batch = key
        for r in groups[key]:
            run = r["run"]
            dense = next((d for d in groups[key] if d.get("is_dense") and d["run"] == run and "decode_tok_s" in d),
                         None)
            lb = next((x for x in reversed(llama) if x["run"] == run and x["model"] == model
                       and x["prompt_tokens"] == L), None)
            if "error" in r:
                print(f"| {model} | {fmt_len(L)} | {batch} | {r['policy']} | refused: {r['error'][:160]} "
                      f"| | | | | | | | | | | {run} |")
                continue
            d = r["decode_tok_s"]
            xd = d / dense["decode_tok_s"] if dense and not r.get("is_dense") else None
            tgt = DECODE_TARGETS.get((batch, L))
            ttft = r.get("ttft_ms")
            xt = (dense["ttft_ms"] / ttft if dense and not r.get("is_dense") and r.get("ttft_own")
                  and dense.get("ttft_own") and ttft else None)
            fit = r.get("seqs_fit")
            xf = fit / dense["seqs_fit"] if dense and not r.get("is_dense") and dense.get("seqs_fit") else None
            xl = d / lb["decode_tok_s"] if lb and batch == "1" else None
            cells = [
                model, fmt_len(L), f"{batch}" + (f" ({r['batch_seqs']})" if batch == "fit" else ""), r["policy"][:60],
                f"{d:.1f}",
                (f"{xd:.2f}x" + (f" ({tgt}x{mark(xd, tgt)})" if tgt else "")) if xd else "-",
                f"{r['step_ms']:.2f}",
                (f"{ttft:.0f}" + ("" if r.get("ttft_own") else " (shared)")) if ttft else "-",
                (f"{xt:.2f}x" + (f" ({TTFT_TARGET[1]}x{mark(xt, TTFT_TARGET[1])})" if L == TTFT_TARGET[0] else ""))
                if xt else "-",
                f"{r['kv_bytes_per_token'] / 1024:.1f}",
                f"{fit}",
                (f"{xf:.2f}x" + (f" ({FIT_TARGET}x{mark(xf, FIT_TARGET)})"
                                 if r["policy"].startswith(("stca", "rtpurbo")) else "") if xf else "-"),
                (f"{xl:.2f}x of {lb['decode_tok_s']:.1f}" +
                 (f" ({LLAMA_TARGET[1]}x{mark(xl, LLAMA_TARGET[1])})" if L == LLAMA_TARGET[0] and not r.get("is_dense")
                  else "")) if xl else "-",
                f"{100 * r.get('selected_fraction', 0):.1f}",
                f"{100 * r.get('cache_hit_rate', 0):.0f}",
                run,
            ]
            print("| " + " | ".join(cells) + " |")
            if r.get("is_dense") and r.get("distinct_kv_floor_ms") and r["step_ms"] < r["distinct_kv_floor_ms"]:
                print(f"|  |  |  | (dense step {r['step_ms']:.2f} ms is below the {r['distinct_kv_floor_ms']:.2f} ms "
                      f"floor of distinct KV reads: the shared prefix is served from L2 in part) | | | | | | | | | | | | |")
    for x in llama:
        if x["prompt_tokens"] not in {r["prompt_tokens"] for r in sieve if r["run"] == x["run"]}:
            print(f"| {x['model']} | {fmt_len(x['prompt_tokens'])} | 1 | llama.cpp (llama-bench) | "
                  f"{x['decode_tok_s']:.1f} | | | | | | | | | | | {x['run']} |")
    pools = {(r["model"], r.get("kv_pool_bytes")) for r in sieve if r.get("kv_pool_bytes")}
    for m, b in sorted(pools):
        print(f"\nKV pool of {m}: {b / 2**30:.1f} GiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd_name", required=True)
    p = sub.add_parser("append")
    p.add_argument("out")
    for k in ("--run", "--tag", "--model", "--device", "--commit", "--cmd"):
        p.add_argument(k, default="")
    p.add_argument("--sieve-rows")
    p.add_argument("--llama")
    t = sub.add_parser("table")
    t.add_argument("out")
    t.add_argument("--run")
    a = ap.parse_args()
    append(a) if a.cmd_name == "append" else table(a)


if __name__ == "__main__":
    sys.exit(main())
