#!/usr/bin/env python3
"""Benchmark llama.cpp (through llama-cpp-python) on a GGUF model.

Offline tool (not part of the engine or its build; CI never runs it). Needs
the reference venv made by tools/reference/setup.sh.

Usage:
    /opt/refenv/bin/python bench/llama_cpp_bench.py MODEL.gguf \
        [--threads 1 2] [--lengths 512 4096] [--gen 128] [--reps 3]

Method:
  * Llama(n_ctx=8192, n_batch=512, n_ubatch=512, n_threads=T, n_threads_batch=T,
    logits_all=False, flash_attn=False, f16 KV cache (defaults)): only the
    last position of each batch produces logits.
  * Prompt: deterministic token ids, the tokenization of the fixture text
    tools/reference/corpus.py:LONG_TEXT repeated and cut to the prompt length
    (with BOS when the model's vocab adds one).
  * For every (threads, prompt length): one warm-up run, then `reps` runs.
    A run = clear the KV cache, prefill the prompt (timed as one eval call of
    512-token batches), then generate `gen` tokens greedily (argmax of the
    last logits, each token fed with its own eval call; only the eval call is
    timed, per token).
  * prefill_tok_s = prompt_tokens / prefill seconds; decode_tok_s = gen /
    sum of the per-token seconds; both the median over the reps.
Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "reference"))
import corpus  # noqa: E402

import llama_cpp  # noqa: E402
import llama_cpp.llama  # noqa: E402
from llama_cpp import Llama  # noqa: E402

N_CTX = 8192
N_BATCH = 512
N_UBATCH = 512


def prompt_ids(llm: Llama, n: int) -> list[int]:
    text = corpus.LONG_TEXT
    ids = [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)]
    body = [int(t) for t in llm.tokenize(("\n\n" + text).encode("utf-8"), add_bos=False, special=False)]
    while len(ids) < n:
        ids.extend(body)
    return ids[:n]


def last_logits(llm: Llama) -> np.ndarray:
    # with logits_all=False llama-cpp-python does not copy logits into
    # llm.scores, so read the last output row from the context directly
    ptr = llm._ctx.get_logits_ith(-1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))


def one_run(llm: Llama, ids: list[int], gen: int) -> tuple[float, float, list[float]]:
    llm.reset()  # n_tokens = 0; eval() then drops the KV cache beyond it
    c0 = time.process_time()
    t0 = time.perf_counter()
    llm.eval(ids)
    t_prefill = time.perf_counter() - t0
    cpu_prefill = time.process_time() - c0
    per_token = []
    cpu_decode = 0.0
    row = last_logits(llm)
    for _ in range(gen):
        tok = int(np.argmax(row))
        c0 = time.process_time()
        t0 = time.perf_counter()
        llm.eval([tok])
        per_token.append(time.perf_counter() - t0)
        cpu_decode += time.process_time() - c0
        row = last_logits(llm)
    t_decode = sum(per_token)
    return {"prefill_s": t_prefill, "decode_s": t_decode, "per_token_s": per_token,
            "prefill_cpu_util": cpu_prefill / t_prefill, "decode_cpu_util": cpu_decode / t_decode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 4096])
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-extra-bufts", action="store_true",
                    help="plain CPU weight buffers, no repacking (llama.cpp's --no-repack): its AMX "
                         "repack segfaulted on an AMX VM (2026-12-06); slower than the repacked path")
    args = ap.parse_args()
    if args.no_extra_bufts:
        default_params = llama_cpp.llama_model_default_params

        def no_extra():
            p = default_params()
            p.use_extra_bufts = False
            return p

        llama_cpp.llama_model_default_params = no_extra
        llama_cpp.llama.llama_cpp.llama_model_default_params = no_extra

    results = []
    sysinfo = None
    load_start = os.getloadavg()
    for threads in args.threads:
        llm = Llama(model_path=args.model, n_ctx=N_CTX, n_batch=N_BATCH, n_ubatch=N_UBATCH,
                    n_threads=threads, n_threads_batch=threads, logits_all=False,
                    flash_attn=False, verbose=False)
        if sysinfo is None:
            sysinfo = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip()
        for n in args.lengths:
            assert n + args.gen <= N_CTX
            ids = prompt_ids(llm, n)
            one_run(llm, ids, args.gen)  # warm-up
            pre, dec, tok_ms, ucp, ucd = [], [], [], [], []
            for _ in range(args.reps):
                r = one_run(llm, ids, args.gen)
                pre.append(n / r["prefill_s"])
                dec.append(args.gen / r["decode_s"])
                tok_ms.append(statistics.median(r["per_token_s"]) * 1e3)
                ucp.append(r["prefill_cpu_util"])
                ucd.append(r["decode_cpu_util"])
            results.append({
                "threads": threads,
                "prompt_tokens": n,
                "prefill_tok_s": round(statistics.median(pre), 2),
                "decode_tok_s": round(statistics.median(dec), 2),
                "decode_median_ms_per_token": round(statistics.median(tok_ms), 3),
                "prefill_tok_s_reps": [round(x, 2) for x in pre],
                "decode_tok_s_reps": [round(x, 2) for x in dec],
                # process CPU seconds / wall seconds (all threads; includes
                # spin-waiting): well below `threads` means the cores were shared
                "prefill_cpu_util": round(statistics.median(ucp), 2),
                "decode_cpu_util": round(statistics.median(ucd), 2),
            })
            print(json.dumps(results[-1]), file=sys.stderr)
        del llm

    out = {
        "engine": "llama.cpp",
        "version": f"llama-cpp-python {llama_cpp.__version__}",
        "model": os.path.basename(args.model),
        "settings": {"n_ctx": N_CTX, "n_batch": N_BATCH, "n_ubatch": N_UBATCH, "flash_attn": False,
                     "kv_type": "f16 (default)", "gen_tokens": args.gen,
                     "reps": args.reps, "warmup_runs": 1, "statistic": "median",
                     "decode": "greedy, one eval call per token, eval time only"},
        "system_info": sysinfo,
        "extra_bufts": not args.no_extra_bufts,
        "cpu_count": os.cpu_count(),
        "loadavg_1_5_15_start": [round(x, 2) for x in load_start],
        "loadavg_1_5_15_end": [round(x, 2) for x in os.getloadavg()],
        "results": results,
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
