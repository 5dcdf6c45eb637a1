#!/usr/bin/env python3
"""Measure how far llama.cpp's logits (the logits fixtures) are from an f32 reference.

Offline tool (not part of the engine or its build; CI never runs it). A plain
numpy forward pass over weights dequantized by gguf-py (so: exact f32 math on
the same dequantized weights, no activation quantization, exact GELU) for the
two supported architectures, compared with tests/fixtures/logits_NAME.json at
the fixture's top-10 ids of every position. It prints statistics only; it
writes no fixture.

Usage:
    OPENBLAS_NUM_THREADS=1 /opt/refenv/bin/python tools/reference/numpy_ref_stats.py \
        --name smollm2 --model /tmp/models/smollm2.gguf [--prompts long_text chat ...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))

# --emulate: mimic the rounding steps of llama.cpp's CPU backend, to check that
# the remaining difference is explained by them.
EMULATE = False
WTYPE: dict[str, str] = {}
# activation format ggml pairs with each weight type (vec_dot_type)
ACT_FOR_WEIGHT = {"Q4_0": "q8_0", "Q5_0": "q8_0", "Q8_0": "q8_0", "Q4_1": "q8_1", "Q5_1": "q8_1",
                  "Q4_K": "q8_k", "Q5_K": "q8_k", "Q6_K": "q8_k", "F16": "f16", "F32": None}


def f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def quant_act(x, kind):
    """Round-trip activations through ggml's activation format (per row blocks)."""
    if kind is None:
        return x
    if kind == "f16":
        return f16(x)
    bs = 256 if kind == "q8_k" else 32
    shp = x.shape
    xb = x.reshape(-1, shp[-1] // bs, bs).astype(np.float32)
    amax = np.abs(xb).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(amax > 0, np.float32(127.0) / amax, 0).astype(np.float32)
    q = np.clip(np.round(xb * iscale), -127, 127)
    d = (amax / np.float32(127.0)).astype(np.float32)
    if kind in ("q8_0", "q8_1"):
        d = f16(d)  # block scale stored as fp16
    return (q * d).reshape(shp).astype(np.float32)


def mm(x, w, name):
    """x @ W.T with W = w[name] ([out, in])."""
    if EMULATE:
        x = quant_act(x, ACT_FOR_WEIGHT.get(WTYPE.get(name, "F32")))
    return x @ w[name].T


def load(path: str):
    r = GGUFReader(path, "r")
    meta = {}
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or not f.types:
            continue
        if len(f.types) == 1:
            v = f.parts[f.data[0]]
            meta[name] = bytes(v).decode("utf-8", "replace") if f.types[0].name == "STRING" else v[0]
    w = {}
    WTYPE.clear()
    for t in r.tensors:
        WTYPE[t.name] = t.tensor_type.name
        a = dequantize(t.data, t.tensor_type)
        shape = [int(d) for d in reversed(t.shape)]  # numpy order: (ne1, ne0)
        w[t.name] = np.asarray(a, dtype=np.float32).reshape(shape)
    return meta, w


def rmsnorm(x, w, eps):
    x64 = x.astype(np.float32)
    return (x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)) * w


def rope_norm(x, pos, base):
    # x [T, H, D]; rotate adjacent pairs (2i, 2i+1)
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    c = np.cos(ang)[:, None, :].astype(np.float32)
    s = np.sin(ang)[:, None, :].astype(np.float32)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def rope_neox(x, pos, base):
    # rotate pairs (i, i + d/2)
    d = x.shape[-1]
    h = d // 2
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    c = np.cos(ang)[:, None, :].astype(np.float32)
    s = np.sin(ang)[:, None, :].astype(np.float32)
    x0, x1 = x[..., :h], x[..., h:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)


def attention(q, k, v, scale, window=None):
    # q [T, Hq, D], k/v [T, Hkv, D]; causal (+ sliding window: p1 - p0 < window)
    T, Hq, D = q.shape
    Hkv = k.shape[1]
    g = Hq // Hkv
    p = np.arange(T)
    mask = p[None, :] > p[:, None]
    if window is not None:
        mask |= (p[:, None] - p[None, :]) >= window
    out = np.empty((T, Hq, v.shape[-1]), dtype=np.float32)
    if EMULATE:  # f16 KV cache; q and the probabilities converted to f16 for the matmuls
        q, k, v = f16(q), f16(k), f16(v)
    for h in range(Hq):
        kv = h // g
        s = (q[:, h, :] @ k[:, kv, :].T) * scale
        s[mask] = -np.inf
        s = s - s.max(axis=-1, keepdims=True)
        e = np.exp(s)
        e /= e.sum(axis=-1, keepdims=True)
        if EMULATE:
            e = f16(e)
        out[:, h, :] = e @ v[:, kv, :]
    return out


def forward_llama(meta, w, ids):
    a = "llama"
    nh = int(meta[f"{a}.attention.head_count"])
    nkv = int(meta[f"{a}.attention.head_count_kv"])
    eps = float(meta[f"{a}.attention.layer_norm_rms_epsilon"])
    base = float(meta[f"{a}.rope.freq_base"])
    nl = int(meta[f"{a}.block_count"])
    E = w["token_embd.weight"]
    h = E[ids].copy()
    T, n = h.shape
    dh = n // nh
    pos = np.arange(T)
    for l in range(nl):
        p = f"blk.{l}."
        x = rmsnorm(h, w[p + "attn_norm.weight"], eps)
        q = mm(x, w, p + "attn_q.weight").reshape(T, nh, dh)
        k = mm(x, w, p + "attn_k.weight").reshape(T, nkv, dh)
        v = mm(x, w, p + "attn_v.weight").reshape(T, nkv, dh)
        q, k = rope_norm(q, pos, base), rope_norm(k, pos, base)
        o = attention(q, k, v, 1.0 / math.sqrt(dh)).reshape(T, nh * dh)
        h = h + mm(o, w, p + "attn_output.weight")
        x = rmsnorm(h, w[p + "ffn_norm.weight"], eps)
        g = mm(x, w, p + "ffn_gate.weight")
        u = mm(x, w, p + "ffn_up.weight")
        h = h + mm((g / (1.0 + np.exp(-g))) * u, w, p + "ffn_down.weight")
    x = rmsnorm(h, w["output_norm.weight"], eps)
    return x, E


def gelu_tanh(x):
    if EMULATE:  # ggml's GELU_FP16 table: fp16 input, fp16 result
        x = f16(x)
        return f16(0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x))))
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def forward_gemma3(meta, w, ids):
    a = "gemma3"
    nh = int(meta[f"{a}.attention.head_count"])
    nkv = int(meta[f"{a}.attention.head_count_kv"])
    dk = int(meta[f"{a}.attention.key_length"])
    eps = float(meta[f"{a}.attention.layer_norm_rms_epsilon"])
    base = float(meta[f"{a}.rope.freq_base"])
    base_swa = float(meta.get(f"{a}.rope.freq_base_swa", 10000.0))
    win = int(meta[f"{a}.attention.sliding_window"])
    nl = int(meta[f"{a}.block_count"])
    E = w["token_embd.weight"]
    n = E.shape[1]
    h = E[ids] * np.float32(math.sqrt(n))
    T = h.shape[0]
    pos = np.arange(T)
    for l in range(nl):
        p = f"blk.{l}."
        swa = (l % 6) < 5
        x = rmsnorm(h, w[p + "attn_norm.weight"], eps)
        q = mm(x, w, p + "attn_q.weight").reshape(T, nh, dk)
        k = mm(x, w, p + "attn_k.weight").reshape(T, nkv, dk)
        v = mm(x, w, p + "attn_v.weight").reshape(T, nkv, dk)
        q = rmsnorm(q, w[p + "attn_q_norm.weight"], eps)
        k = rmsnorm(k, w[p + "attn_k_norm.weight"], eps)
        b = base_swa if swa else base
        q, k = rope_neox(q, pos, b), rope_neox(k, pos, b)
        o = attention(q, k, v, 1.0 / math.sqrt(dk), win if swa else None).reshape(T, nh * dk)
        o = mm(o, w, p + "attn_output.weight")
        h = h + rmsnorm(o, w[p + "post_attention_norm.weight"], eps)
        x = rmsnorm(h, w[p + "ffn_norm.weight"], eps)
        f = mm(gelu_tanh(mm(x, w, p + "ffn_gate.weight")) * mm(x, w, p + "ffn_up.weight"), w, p + "ffn_down.weight")
        h = h + rmsnorm(f, w[p + "post_ffw_norm.weight"], eps)
    x = rmsnorm(h, w["output_norm.weight"], eps)
    return x, E


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True, choices=["smollm2", "gemma3"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--fixture", default=None)
    ap.add_argument("--prompts", nargs="*", default=None)
    ap.add_argument("--max-positions", type=int, default=0,
                    help="compare at most this many evenly spaced positions per prompt (0 = all)")
    ap.add_argument("--emulate", action="store_true",
                    help="mimic llama.cpp's activation quantization, f16 KV/attention and fp16 GELU")
    args = ap.parse_args()
    global EMULATE
    EMULATE = args.emulate
    fx_path = args.fixture or os.path.join(HERE, "..", "..", "tests", "fixtures", f"logits_{args.name}.json")
    fx = json.load(open(fx_path))
    t0 = time.time()
    meta, w = load(args.model)
    print(f"loaded + dequantized in {time.time() - t0:.1f}s", file=sys.stderr)
    fwd = forward_llama if args.name == "smollm2" else forward_gemma3
    all_diffs = []
    summary = []
    for p in fx["prompts"]:
        if args.prompts and p["label"] not in args.prompts:
            continue
        t0 = time.time()
        ids = np.array(p["ids"], dtype=np.int64)
        x, E = fwd(meta, w, ids)
        diffs, top1_same, top1_same_clear, n_clear, top10_overlap = [], 0, 0, 0, []
        worst_gap = 0.0  # largest llama.cpp top1-top2 gap at a position where the argmaxes differ
        positions = list(range(len(p["top10"])))
        if args.max_positions and len(positions) > args.max_positions:
            sel = np.unique(np.linspace(0, len(positions) - 1, args.max_positions).round().astype(int))
            positions = sel.tolist()
        for i in positions:
            top = p["top10"][i]
            xi = quant_act(x[i], ACT_FOR_WEIGHT[WTYPE["token_embd.weight"]]) if EMULATE else x[i]
            ref = E @ xi  # full f32 logits row
            lid = np.array([t[0] for t in top])
            lval = np.array([t[1] for t in top])
            d = np.abs(ref[lid] - lval)
            diffs.append(d)
            r_top = int(np.argmax(ref))
            gap = lval[0] - lval[1]
            top1_same += r_top == lid[0]
            if r_top != lid[0]:
                worst_gap = max(worst_gap, float(gap))
            if gap > 0.25:
                n_clear += 1
                top1_same_clear += r_top == lid[0]
            r10 = set(np.argpartition(-ref, 10)[:10].tolist())
            top10_overlap.append(len(r10 & set(lid.tolist())))
        d = np.concatenate(diffs)
        all_diffs.append(d)
        maxlogit = max(abs(t[1]) for i in positions for t in p["top10"][i])
        rel = float(np.max(d) / max(1e-9, maxlogit))
        s = {
            "prompt": p["label"], "n_tokens": len(ids),
            "absdiff_mean": round(float(d.mean()), 4), "absdiff_p50": round(float(np.median(d)), 4),
            "absdiff_p99": round(float(np.quantile(d, 0.99)), 4), "absdiff_max": round(float(d.max()), 4),
            "max_over_max_abs_logit": round(rel, 5),
            "positions_compared": len(positions),
            "top1_agree": f"{top1_same}/{len(positions)}",
            "top1_agree_where_gap_gt_0.25": f"{top1_same_clear}/{n_clear}",
            "max_gap_where_top1_differs": round(worst_gap, 4),
            "top10_overlap_mean": round(float(np.mean(top10_overlap)), 3),
            "seconds": round(time.time() - t0, 1),
        }
        summary.append(s)
        print(json.dumps(s), file=sys.stderr)
    d = np.concatenate(all_diffs)
    out = {"model": args.name, "emulate_llama_cpp_rounding": EMULATE, "per_prompt": summary,
           "overall": {"absdiff_mean": round(float(d.mean()), 4), "absdiff_p99": round(float(np.quantile(d, 0.99)), 4),
                       "absdiff_max": round(float(d.max()), 4)}}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
