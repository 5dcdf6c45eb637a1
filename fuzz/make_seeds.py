#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/).

gguf: small valid files that together use every value type, arrays of every type, custom
alignment, versions 2 and 3, vocab-only files and quantized tensors. The text targets (http,
request, tokenizer, chat_template, policy, head_plan, sketch_basis) get well-formed inputs of
each kind their harness reads; chat_template's carry the real models' templates from
tests/fixtures. Standard library only; run from anywhere."""
import json
import os
import re
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
OUT = os.path.join(CORPUS, "gguf")
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures")

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


def gguf_seeds():
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
    return seeds


def http_seeds():
    body = b'{"prompt": "hi", "max_tokens": 4}'
    cl = b"Content-Length: %d\r\n" % len(body)
    chunked = b"5\r\n{\"a\":\r\n3;ext=1\r\n 1}\r\n0\r\nTrailer: x\r\n\r\n"
    return {
        "get.txt": b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        "post_cl.txt": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + cl + b"\r\n" + body,
        "post_chunked.txt": b"POST /stream HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked,
        "keepalive_two.txt": b"GET /a HTTP/1.1\r\n\r\nPOST /b?x=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\nok",
        "http10.txt": b"GET /v1/../v1/./models HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        "expect.txt": b"POST /x HTTP/1.1\r\nExpect: 100-continue\r\n" + cl + b"\r\n" + body,
        "absolute.txt": b"GET http://host:80/%76%31//models/ HTTP/1.1\r\nX-Echo: a\tb\r\n\r\n",
        "too_big.txt": b"POST /x HTTP/1.1\r\nContent-Length: 99999\r\n\r\n",
        "conflict.txt": b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        "throw.txt": b"GET /throw HTTP/1.1\r\nConnection: close\r\n\r\n",
    }


def request_seeds():
    # first byte: 0 completions, 1 chat, 2 tokenize, 3 detokenize
    def j(ep, obj):
        return bytes([ep]) + json.dumps(obj).encode()
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    return {
        "completions.json": j(0, {"model": "m", "prompt": "Hello", "max_tokens": 8, "temperature": 0.7,
                                  "top_p": 0.9, "top_k": 40, "min_p": 0.05, "stop": ["\n", "END"],
                                  "seed": 7, "stream": True, "stream_options": {"include_usage": True},
                                  "logprobs": 2, "echo": False, "n": 1, "presence_penalty": 0.5,
                                  "frequency_penalty": -0.5, "repetition_penalty": 1.1,
                                  "penalty_last_n": 64, "ignore_eos": True, "priority": -3}),
        "completions_tokens.json": j(0, {"prompt": [1, 2, 3], "max_tokens": 2, "logit_bias": {}}),
        "completions_batch.json": j(0, {"prompt": [[5, 6]], "best_of": 1, "seed": -1}),
        "completions_sieve.json": j(0, {"prompt": "x", "sieve": {"policy": "sketch", "top_p": 0.9,
                                                                 "sinks": 4, "up_layers": [1, 2]}}),
        "completions_policy.json": j(0, {"prompt": "x", "policy": "streaming"}),
        "chat.json": j(1, {"messages": msgs, "max_completion_tokens": 5, "logprobs": True,
                           "top_logprobs": 3, "response_format": {"type": "text"}, "tools": [],
                           "tool_choice": "none", "return_progress": True}),
        "chat_parts.json": j(1, {"messages": [{"role": "developer", "content": [{"type": "text", "text": "a"}]},
                                              {"role": "user", "content": [{"type": "text", "text": "b"}]}],
                                 "add_generation_prompt": False}),
        "tokenize.json": j(2, {"content": "Hello", "add_special": True, "with_pieces": True}),
        "tokenize_chat.json": j(2, {"messages": msgs, "add_generation_prompt": True}),
        "detokenize.json": j(3, {"tokens": [1, 2, 99]}),
    }


def tokenizer_seeds():
    # byte 0: tokenizer, byte 1: flags (1 add_bos, 2 parse_special, 4 render_special, 8 ids)
    texts = ["hello world", "The quick brown fox 12345 \u00e9t\u00e9\n\n  tabs\there",
             "<|im_start|>user\nhi<|im_end|>", "<start_of_turn>user\nhi<end_of_turn>",
             "\u4f60\u597d\U0001f600 \u2581x", "aaaaa abc bcb hi hi", "'s 've 're ll"]
    out = {}
    for t in range(4):
        for i, text in enumerate(texts):
            flags = [0, 3, 6][i % 3]
            out[f"text_{t}_{i}.bin"] = bytes([t, flags]) + text.encode()
        ids = struct.pack("<8i", 0, 1, 2, 3, 255, 256, 300, 0x7fffffff) + struct.pack("<2i", -1, 10)
        out[f"ids_{t}.bin"] = bytes([t, 8 | 4]) + ids
    out["invalid_utf8.bin"] = bytes([0, 0]) + b"a\xff\xc3(\xe2\x82 \xf0\x9f\x98"
    return out


def fixture_template(name):
    path = os.path.join(FIXTURES, name)
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("tokenizer.chat_template: STRING = "):
                return json.loads(line.split(" = ", 1)[1])
    raise SystemExit(f"no chat template in {path}")


def test_gemma_template():
    # Gemma 3's template as src/model/chat_template_test.cpp holds it (the fixture has none).
    with open(os.path.join(HERE, "..", "src", "model", "chat_template_test.cpp"), encoding="utf-8") as f:
        m = re.search(r'kGemmaTemplate = R"\((.*?)\)";', f.read(), re.S)
    if not m:
        raise SystemExit("kGemmaTemplate not found in chat_template_test.cpp")
    return m.group(1)


def chat_template_seeds():
    # template NUL flags (1 add_generation_prompt, 2 bos text) then (role byte, content NUL)*
    msgs = [(0, "You are terse."), (1, "Hello there"), (2, " Hi! "), (1, "\nBye\n")]
    body = b"".join(bytes([r]) + c.encode() + b"\0" for r, c in msgs)
    out = {}
    templates = {"smollm2": fixture_template("smollm2_metadata.txt"),
                 "qwen2.5": fixture_template("qwen2.5-coder-0.5b_metadata.txt"),
                 "gemma3": test_gemma_template()}
    for name, tmpl in templates.items():
        out[name + ".bin"] = tmpl.encode() + b"\0\x03" + body
        out[name + "_user.bin"] = tmpl.encode() + b"\0\x00" + bytes([1]) + b"only\0"
    out["empty.bin"] = b"\0\x01" + body
    return out


def policy_seeds():
    # byte 0: 0 item + sets lines, 1 request JSON, 2 policy file, 3 item alone
    return {
        "item.txt": b"\0sketch:top_p=0.9:sinks=4\nlocal=64\nselection_cache=true",
        "item_dense.txt": b"\x04dense\ntop_k=16",
        "item_auto.txt": b"\0auto",
        "request.json": b"\1" + json.dumps({"policy": "quest", "block": 16, "top_k": 256, "theta": 0.5}).encode(),
        "request_knobs.json": b"\1" + json.dumps({"kv_budget": 1024, "keep_mass": 0.9,
                                                   "up_layers": [1, 3]}).encode(),
        "file.json": b"\2" + json.dumps({"policy": "h2o", "kv_budget": 512, "decay": 0.5}).encode(),
        "file_lines.txt": b"\2# comment\npolicy = tokenselect\ntop_k = 64 # inline\nraw_logits = true\n",
        "uniprefill.txt": b"\3uniprefill:up_queries=8:up_block=32:up_layers=auto",
        "stca.txt": b"\3stca:sketch_dim=16:sketch_shared=false:seed=5",
        "rtpurbo.txt": b"\0rtpurbo:rt_window=64:rt_gain=2",
    }


def head_plan(indexer):
    nl, nh, nkv, hd, d = 2, 4, 2, 4, 2
    plan = {"format": "sieve-head-plan", "version": 1,
            "model": {"name": "m", "arch": "llama", "sha256": ""},
            "shape": {"n_layer": nl, "n_head": nh, "n_head_kv": nkv, "head_dim": hd},
            "calibration": {"ratio": 0.25, "seed": 1, "samples": 4, "ctx": 512, "score": "needle"},
            "retrieval": [[1, 0, 0, 0], [0, 0, 1, 0]],
            "scores": [[0.9, 0.1, 0.2, 0.0], [0.3, 0.1, 0.8, 0.05]]}
    if indexer:
        w = [0.5, -0.25] * (hd * d // 2)
        fit = {"kl_init": 1.0, "kl_fit": 0.5, "recall_init": 0.5, "recall_fit": 0.9,
               "keep": 0.2, "keep_oracle": 0.1, "coverage": 0.95}
        plan["indexer"] = {"d_idx": d, "recall_k": 8, "recall_of": 64, "fit_ms": 1.5, "layers": [
            {"w_q": [w, None, None, None], "w_k": [w, None], "fit": [fit, None, None, None]},
            {"w_q": [None, None, w, None], "w_k": [None, w], "fit": [None, None, fit, None]}]}
    return json.dumps(plan, indent=1).encode()


def sketch_basis_seeds():
    def basis(nl, nkv, hd, d, fitted):
        units = nl * nkv
        return json.dumps({"format": "sieve-sketch-basis", "version": 1,
                           "model": {"name": "m", "arch": "llama"}, "n_layer": nl, "n_kv_head": nkv,
                           "head_dim": hd, "dim": d, "tokens": 1000, "fitted": fitted,
                           "captured": [0.9] * units,
                           "p": [((i * 7) % 5 - 2) / 4 for i in range(units * hd * d)]}).encode()
    return {"basis.json": basis(2, 2, 4, 2, [1, 0]), "basis_full.json": basis(1, 1, 2, 2, [1])}


def main():
    corpora = {"gguf": gguf_seeds(), "http": http_seeds(), "request": request_seeds(),
               "tokenizer": tokenizer_seeds(), "chat_template": chat_template_seeds(),
               "policy": policy_seeds(),
               "head_plan": {"plan.json": head_plan(False), "plan_indexer.json": head_plan(True)},
               "sketch_basis": sketch_basis_seeds()}
    # Inputs that found bugs (regress_*) are kept in the corpus beside these seeds; they are
    # committed files, not written here.
    for target, seeds in corpora.items():
        out = os.path.join(CORPUS, target)
        os.makedirs(out, exist_ok=True)
        total = 0
        for name, data in seeds.items():
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
            total += len(data)
        print(f"wrote {len(seeds)} seeds ({total} bytes) to {out}")


if __name__ == "__main__":
    main()
