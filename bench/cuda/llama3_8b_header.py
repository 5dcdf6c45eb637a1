#!/usr/bin/env python3
"""Header of a random-weight GGUF in Llama-3-8B's shape and Q4_K_M types, for speed-only GPU runs
(scripts/gpu_sparse_bench.sh). Built from a small real llama-architecture GGUF (SmolLM2) with the
workplace's random_gguf.py: its metadata and tokenizer, reshaped to

  n_embd 4096, n_ff 14336, 32 layers (--layers), 32 query heads, 8 KV heads, head_dim 128,
  RoPE base 500000, context length 1048576 (--ctx), vocabulary 128256 (--vocab),
  llama.cpp's Q4_K_M mix (Q4_K; Q6_K for output.weight and a third of attn_v / ffn_down),
  an untied output.weight as Llama 3 has.

The vocabulary grows by appending control tokens <|reserved_special_token_N|> (as Llama 3 names
its reserved ones) to SmolLM2's 49152 BPE tokens: the tokenizer still loads, and token_embd and
output.weight get Llama 3's 128256 rows, so a decode step reads the bytes the real model's does.
The values are random: speed only, never quality.

  python3 bench/cuda/llama3_8b_header.py ~/.cache/sieve/models/smollm2.gguf .carry/llama8b.hdr
  # on the GPU machine (stdlib only; ~4.9 GB written):
  python3 .carry/random_gguf.py fill .carry/llama8b.hdr /tmp/llama8b-q4km.gguf

random_gguf.py is found at $RANDOM_GGUF, else beside this script's .carry/, else
/work/shared/tools/random_gguf.py.
"""
import argparse, importlib.util, os, sys


def load_random_gguf():
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.environ.get("RANDOM_GGUF"), os.path.join(here, "..", "..", ".carry", "random_gguf.py"),
              "/work/shared/tools/random_gguf.py"):
        if p and os.path.exists(p):
            spec = importlib.util.spec_from_file_location("random_gguf", p)
            m = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(m)
            return m
    sys.exit("random_gguf.py not found: set RANDOM_GGUF=/path/to/random_gguf.py")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", help="a real llama-architecture GGUF (SmolLM2)")
    ap.add_argument("out", help="the header to write (OUT and OUT.json)")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--ctx", type=int, default=1 << 20)
    ap.add_argument("--vocab", type=int, default=128256)
    a = ap.parse_args()
    rg = load_random_gguf()
    version, kv, tensors = rg.read_gguf(a.src)
    get = {k: v for k, _, v in kv}
    arch = get["general.architecture"]
    if arch != "llama":
        sys.exit(f"{a.src}: architecture {arch}; a llama-architecture GGUF is needed")
    names = {t["name"] for t in tensors}
    if "output.weight" not in names:  # tied embeddings (SmolLM2): Llama 3 has its own head
        emb = next(t for t in tensors if t["name"] == "token_embd.weight")
        tensors.append(dict(emb, name="output.weight"))
    sets = [f"{arch}.embedding_length=4096", f"{arch}.feed_forward_length=14336",
            f"{arch}.attention.head_count=32", f"{arch}.attention.head_count_kv=8",
            f"{arch}.block_count={a.layers}", f"{arch}.context_length={a.ctx}",
            f"{arch}.rope.freq_base=500000", f"{arch}.rope.dimension_count=128"]
    tensors = rg.reshape(kv, tensors, sets, "q4_k_m")
    n_vocab = len(next(v for k, _, v in kv if k == "tokenizer.ggml.tokens")[2])
    if a.vocab < n_vocab:
        sys.exit(f"--vocab {a.vocab} is below the tokenizer's {n_vocab} tokens")
    for row in kv:
        k, v = row[0], row[2]
        if k == "tokenizer.ggml.tokens":
            v[2].extend(f"<|reserved_special_token_{i}|>" for i in range(a.vocab - n_vocab))
        elif k == "tokenizer.ggml.token_type":
            v[2].extend([3] * (a.vocab - n_vocab))  # control, as Llama 3's reserved tokens
        elif k == f"{arch}.vocab_size":
            row[2] = a.vocab
    for t in tensors:
        if t["name"] in ("token_embd.weight", "output.weight"):
            t["dims"] = [t["dims"][0], a.vocab]
    rg.write_header(version, kv, tensors, a.out)


if __name__ == "__main__":
    main()
