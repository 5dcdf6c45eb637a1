#!/usr/bin/env python3
"""Side-by-side CPU throughput: `sieve bench` vs llama.cpp (bench/llama_cpp_bench.py) on the
same GGUF, thread counts and prompt lengths, in one run. Prints a markdown table with the
ratios and writes both raw JSON objects next to it (--out DIR).

    /opt/refenv/bin/python bench/compare_cpu.py MODEL.gguf [--sieve build/tools/sieve/sieve]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    print("$ " + " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--sieve", default=os.path.join(HERE, "..", "build", "tools", "sieve", "sieve"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--lengths", default="512,4096")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-extra-bufts", action="store_true", help="passed to llama_cpp_bench.py")
    a = ap.parse_args()
    sieve = run([a.sieve, "-q", "bench", "-m", a.model, "--threads-list", a.threads,
                 "--lengths", a.lengths, "--n-decode", str(a.gen), "--reps", str(a.reps)])
    print(json.dumps(sieve), file=sys.stderr, flush=True)  # kept even if the next part is cut off
    llama = run([sys.executable, os.path.join(HERE, "llama_cpp_bench.py"), a.model,
                 "--threads", *a.threads.split(","), "--lengths", *a.lengths.split(","),
                 "--gen", str(a.gen), "--reps", str(a.reps)] + (["--no-extra-bufts"] if a.no_extra_bufts else []))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        for name, obj in (("sieve", sieve), ("llama_cpp", llama)):
            with open(os.path.join(a.out, name + ".json"), "w") as f:
                json.dump(obj, f, indent=2)
    ref = {(r["threads"], r["prompt_tokens"]): r for r in llama["results"]}
    print(f"model: {os.path.basename(a.model)}; llama.cpp {llama.get('version', '?')}")
    print("| threads | prompt | sieve prefill tok/s | llama.cpp prefill tok/s | ratio | "
          "sieve decode tok/s | llama.cpp decode tok/s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in sieve["results"]:
        l = ref.get((r["threads"], r["prompt_tokens"]))
        if not l:
            continue
        print(f"| {r['threads']} | {r['prompt_tokens']} | {r['prefill_tok_s']:.1f} | "
              f"{l['prefill_tok_s']:.1f} | {r['prefill_tok_s'] / l['prefill_tok_s']:.2f}x | "
              f"{r['decode_tok_s']:.1f} | {l['decode_tok_s']:.1f} | "
              f"{r['decode_tok_s'] / l['decode_tok_s']:.2f}x |")


if __name__ == "__main__":
    main()
