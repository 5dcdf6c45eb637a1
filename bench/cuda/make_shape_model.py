#!/usr/bin/env python3
"""Writes a small random-weight llama GGUF whose attention has a chosen shape (default the
Llama-3-8B attention: 32 query heads, 8 KV heads, head_dim 128), with SmolLM2's tokenizer, so
the GPU session can be timed end to end on that shape (the dense prefill kernel choice,
SIEVE_GPU_PREFILL) without an 8B model. Its text is noise; only its speed means anything.

    python3 bench/cuda/make_shape_model.py SMOLLM2.gguf OUT.gguf [--layers 4] [--embd 256]
"""
import argparse

import numpy as np
import gguf
from gguf import quants


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokenizer_from", help="a llama GGUF whose tokenizer is copied (SmolLM2)")
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--ff", type=int, default=1024)
    ap.add_argument("--ctx", type=int, default=131072)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    src = gguf.GGUFReader(a.tokenizer_from)
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(f"llama-shape-{a.heads}x{a.kv_heads}x{a.head_dim}-random")
    w.add_block_count(a.layers)
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.embd)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_key_length(a.head_dim)
    w.add_value_length(a.head_dim)
    w.add_rope_dimension_count(a.head_dim)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    n_vocab = 0
    for field in src.fields.values():  # the tokenizer, as stored
        if not field.name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(field.parts[i]) for i in field.data]
            else:
                val = [field.parts[i].tolist()[0] for i in field.data]
            w.add_array(field.name, val)
            if field.name == "tokenizer.ggml.tokens":
                n_vocab = len(val)
        elif vtype == gguf.GGUFValueType.STRING:
            w.add_string(field.name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            w.add_key_value(field.name, field.parts[field.data[0]].tolist()[0], vtype)
    rng = np.random.default_rng(a.seed)

    def mat(name, rows, cols, scale):  # [rows, cols] in numpy order = GGUF ne (cols, rows), Q8_0
        x = (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype(np.float32)
        q = quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def ones(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    E, qd, kvd = a.embd, a.heads * a.head_dim, a.kv_heads * a.head_dim
    mat("token_embd.weight", n_vocab, E, 1.0)
    ones("output_norm.weight", E)
    for i in range(a.layers):
        p = f"blk.{i}."
        ones(p + "attn_norm.weight", E)
        mat(p + "attn_q.weight", qd, E, E ** -0.5)
        mat(p + "attn_k.weight", kvd, E, E ** -0.5)
        mat(p + "attn_v.weight", kvd, E, E ** -0.5)
        mat(p + "attn_output.weight", E, qd, qd ** -0.5)
        ones(p + "ffn_norm.weight", E)
        mat(p + "ffn_gate.weight", a.ff, E, E ** -0.5)
        mat(p + "ffn_up.weight", a.ff, E, E ** -0.5)
        mat(p + "ffn_down.weight", E, a.ff, a.ff ** -0.5)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
