#!/usr/bin/env python3
"""Writes the seed corpus of the GGUF fuzzer (fuzz/corpus/gguf/): small valid files that
together use every value type, arrays of every type, custom alignment, versions 2 and 3,
vocab-only files and quantized tensors. Standard library only; run from anywhere."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "gguf")

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
       U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (block elements, block bytes)
TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         10: (256, 84), 12: (256, 144), 13: (256, 176), 14: (256, 210), 20: (32, 18),
         30: (1, 2)}


def gstr(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, x) for x in items)
    return struct.pack(FMT[t], v)


def gguf(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, ggml type, dims)] packed in order."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += gstr(key) + struct.pack("<I", t) + value(t, v)
    pad = lambda n: (n + alignment - 1) // alignment * alignment
    offset, blobs = 0, []
    for i, (name, typ, dims) in enumerate(tensors):
        blk, size = TYPES[typ]
        rows = 1
        for d in dims[1:]:
            rows *= d
        nbytes = dims[0] // blk * size * rows
        out += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", typ, offset)
        blobs.append((offset, bytes((j * 31 + i * 7 + 1) & 0xFF for j in range(nbytes))))
        offset = pad(offset + nbytes)
    if tensors:
        out += b"\0" * (pad(len(out)) - len(out))
        data = bytearray(max(o + len(b) for o, b in blobs))
        for o, b in blobs:
            data[o:o + len(b)] = b
        out += bytes(data)
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {}
    seeds["minimal.gguf"] = gguf([], [])
    seeds["all_types.gguf"] = gguf(
        [("general.architecture", STR, "llama"),
         ("t.u8", U8, 200), ("t.i8", I8, -5), ("t.u16", U16, 60000), ("t.i16", I16, -300),
         ("t.u32", U32, 4000000000), ("t.i32", I32, -7), ("t.f32", F32, 1.5), ("t.bool", BOOL, 1),
         ("t.u64", U64, 2**63), ("t.i64", I64, -2**40), ("t.f64", F64, -2.25),
         ("t.str", STR, "h\u00e9llo"),
         ("a.u8", ARR, (U8, [1, 2, 255])), ("a.i8", ARR, (I8, [-1, 2])),
         ("a.u16", ARR, (U16, [7])), ("a.i16", ARR, (I16, [-7, 8])),
         ("a.u32", ARR, (U32, [1, 2, 3])), ("a.i32", ARR, (I32, [-1])),
         ("a.f32", ARR, (F32, [0.5, -1.0])), ("a.bool", ARR, (BOOL, [1, 0])),
         ("a.str", ARR, (STR, ["x", "", "yz"])), ("a.u64", ARR, (U64, [5])),
         ("a.i64", ARR, (I64, [-5])), ("a.f64", ARR, (F64, [3.25])), ("a.empty", ARR, (U32, []))],
        [("token_embd.weight", 8, [32, 2]), ("output_norm.weight", 0, [8]),
         ("blk.0.attn_q.weight", 1, [4, 3])])
    seeds["align64.gguf"] = gguf(
        [("general.alignment", U32, 64), ("general.architecture", STR, "llama")],
        [("a", 2, [32, 2]), ("b", 3, [64]), ("c", 0, [3])], alignment=64)
    seeds["align1.gguf"] = gguf(
        [("general.alignment", U32, 1)], [("a", 0, [3]), ("b", 1, [5]), ("c", 30, [1])],
        alignment=1)
    toks = ["<|endoftext|>", "<|im_start|>"] + [chr(0x120) + "t%d" % i for i in range(30)]
    seeds["vocab.gguf"] = gguf(
        [("general.architecture", STR, "llama"), ("tokenizer.ggml.model", STR, "gpt2"),
         ("tokenizer.ggml.pre", STR, "smollm"), ("tokenizer.ggml.tokens", ARR, (STR, toks)),
         ("tokenizer.ggml.token_type", ARR, (I32, [3, 3] + [1] * 30)),
         ("tokenizer.ggml.merges", ARR, (STR, ["\u0120 t", "t 1"])),
         ("tokenizer.ggml.bos_token_id", U32, 0), ("tokenizer.ggml.add_bos_token", BOOL, 0)], [])
    seeds["v2_kquants.gguf"] = gguf(
        [("general.architecture", STR, "gemma3"), ("gemma3.block_count", U32, 1)],
        [("k4", 12, [256, 1, 1, 2]), ("k6", 14, [256]), ("k5", 13, [256]), ("q5", 6, [32, 2]),
         ("q51", 7, [32])], version=2)
    seeds["unsupported.gguf"] = gguf([], [("iq4nl", 20, [32]), ("q2k", 10, [256])])
    total = 0
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        total += len(data)
    print(f"wrote {len(seeds)} seeds ({total} bytes) to {OUT}")


if __name__ == "__main__":
    main()
