#!/usr/bin/env python3
"""Generate tokenizer and logits fixtures with llama-cpp-python.

Offline reference tool (not part of the engine or its build; CI never runs it).
llama-cpp-python (PyPI, compiled from its sdist) is the independent
implementation. See tools/reference/README.md.

Usage:
    /opt/refenv/bin/python tools/reference/make_fixtures.py \
        --name smollm2 --model /tmp/models/smollm2.gguf [--out tests/fixtures] \
        (names: smollm2, gemma3, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b)
        [--what tokenizer|logits|all] [--threads 2]

Writes:
    OUT/tokenizer_NAME.json
    OUT/logits_NAME.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

import llama_cpp  # noqa: E402
import llama_cpp.llama  # noqa: E402
from llama_cpp import Llama  # noqa: E402

# No "extra" (repacked) CPU weight buffers: on a CPU with AMX, GGML_NATIVE builds repack
# weights for AMX tiles, and eval segfaulted on such a VM (2026-12-06, llama-cpp-python
# 0.3.36, Qwen2.5 and SmolLM2 alike). The plain CPU buffers compute the same model.
_default_model_params = llama_cpp.llama_model_default_params


def _model_params_without_extra_bufts():
    p = _default_model_params()
    p.use_extra_bufts = False
    return p


llama_cpp.llama_model_default_params = _model_params_without_extra_bufts
llama_cpp.llama.llama_cpp.llama_model_default_params = _model_params_without_extra_bufts

TOPK = 10
N_GEN = 32
N_CTX = 2048
N_BATCH = 512


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------
# tokenizer cases
# --------------------------------------------------------------------------

COMMON_TEXTS: list[tuple[str, str]] = [
    ("plain", "Hello world"),
    ("plain_sentence", "The quick brown fox jumps over the lazy dog."),
    ("plain_mixed_case", "Hello, we can use GPUs and CPUs; the iPhone's API isn't NASA's."),
    ("contractions", "I'm sure they'll say it's what we'd've done, but you're wrong and we've lost."),
    ("leading_space", " leading space"),
    ("leading_spaces", "   three leading spaces"),
    ("trailing_space", "trailing space "),
    ("trailing_spaces", "trailing spaces   "),
    ("multiple_spaces", "  multiple   spaces    between     words"),
    ("only_spaces", "     "),
    ("single_space", " "),
    ("tabs", "a\tb\t\tc\t\t\td"),
    ("newlines", "line one\nline two\n\nline four\n\n\n\nline eight\n"),
    ("crlf", "windows\r\nline\r\nendings\r\n"),
    ("mixed_whitespace", " \t \n  \t\n\n \r\n  x"),
    ("single_newline", "\n"),
    ("digits", "0 1 2 3 4 5 6 7 8 9 10 11 99 100"),
    ("long_numbers", "Hello world! 123 and 4567890123456789, pi=3.14159265358979, 1,000,000 and 1e-10 and -42."),
    ("dates_times", "On 2024-03-15 at 09:45:30 UTC the price rose 12.5% to $1,234.56 (was €999)."),
    ("python_code", (
        "def fibonacci(n: int) -> int:\n"
        "    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
        "    if n < 2:\n"
        "        return n\n"
        "    a, b = 0, 1\n"
        "    for _ in range(n - 1):\n"
        "        a, b = b, a + b\n"
        "    return b\n"
        "\n"
        "print([fibonacci(i) for i in range(10)])  # [0, 1, 1, 2, ...]\n"
    )),
    ("c_code", (
        "#include <stdio.h>\n"
        "\n"
        "int main(int argc, char **argv) {\n"
        "\tfor (int i = 0; i < argc; ++i) {\n"
        "\t\tprintf(\"%d: %s\\n\", i, argv[i]);\n"
        "\t}\n"
        "\treturn 0;\n"
        "}\n"
    )),
    ("accents", "Café déjà vu. Crème brûlée, naïve façade, Ångström, Øresund, Łódź, São Paulo."),
    ("german_french", "Größenordnung über Straße; l'œuvre d'art élégante à Noël."),
    ("cjk", "你好，世界！这是一个测试。日本語のテキストも含まれています。한국어 문장입니다."),
    ("emoji", "I love pizza 🍕🍕 and cats 🐱! Family: 👨‍👩‍👧‍👦, flag: 🇫🇷, skin tone: 👍🏽"),
    ("arabic", "مرحبا بالعالم، هذا اختبار للنص العربي ١٢٣"),
    ("hebrew_russian_greek", "שלום עולם; Привет, мир! Γειά σου κόσμε."),
    ("combining_marks", "e\u0301 vs \u00e9, n\u0303, a\u0308\u0304, Z\u0351\u0345a\u0306\u0327lgo"),
    ("zero_width", "zero\u200bwidth\u200djoiner\ufeffbom"),
    ("punctuation_runs", "Wait... what?!?! No way!!! (really??) --- [ok] {fine} <<>> ;;; ::: ``` ~~~ @@@ ###"),
    ("quotes_and_dashes", "\u201cSmart quotes\u201d and \u2018single\u2019 \u2014 em dash \u2013 en dash \u2026"),
    ("urls", "See https://example.com/path/to/page?query=1&lang=en#section and http://a.b.co/x_y-z.html or www.test.org."),
    ("email_path", "Mail me at first.last+tag@example.org or open /usr/local/bin/python3 or C:\\Windows\\System32."),
    ("json", "{\"name\": \"Sieve\", \"version\": [1, 2, 3], \"ok\": true, \"nested\": {\"x\": null}}"),
    ("markdown", "# Title\n\n* item one\n* **bold** and _italic_ and `code`\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"),
    ("repeated_chars", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bbbbbbbbbbbb ================================"),
    ("empty", ""),
    ("paragraph_2k", corpus.PARAGRAPH_2K),
]

SMOLLM2_TEXTS: list[tuple[str, str]] = [
    ("chat_special", corpus.SMOLLM2_CHAT),
    ("chat_special_tight", "<|im_start|>user<|im_end|><|endoftext|>text<|im_start|>"),
    ("special_like", "<|im_start |> <im_start> <|im_start|x"),
    ("other_specials", "<repo_name>sieve<file_sep>main.cpp<filename>x<gh_stars>10<|endoftext|>"),
]

GEMMA3_TEXTS: list[tuple[str, str]] = [
    ("chat_special", corpus.GEMMA3_CHAT),
    ("chat_special_bos", "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn><eos>"),
    ("special_like", "<start_of_turn > <start_of_turn <end_of_turn>x<pad><unk><mask>"),
    ("byte_fallback", "\u0000\u0001\u007f control chars and rare \U0001f9ec\U00010348 \uf8ff"),
]


QWEN2_TEXTS: list[tuple[str, str]] = [
    ("chat_special", corpus.QWEN2_CHAT),
    ("chat_special_tight", "<|im_start|>user<|im_end|><|endoftext|>text<|im_start|>"),
    ("special_like", "<|im_start |> <im_start> <|im_start|x <|fim_prefix |>"),
    ("fim", "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n    return c<|fim_middle|>"),
    ("code_newlines", "if x:\n\n\treturn 1;\r\n  \n// done!!\n\n\n}"),
    ("case_contractions", "I'M SURE HE'S HERE, WE'LL SEE. It'S ok'Ll"),
]

# Names of the models in the sieve cache that use each extra text list.
MODEL_TEXTS = {"smollm2": SMOLLM2_TEXTS, "gemma3": GEMMA3_TEXTS,
               "qwen2.5-coder-0.5b": QWEN2_TEXTS, "qwen2.5-coder-1.5b": QWEN2_TEXTS}


def tokenizer_fixture(name: str, model_path: str) -> dict:
    llm = Llama(model_path=model_path, vocab_only=True, verbose=False)
    texts = list(COMMON_TEXTS) + MODEL_TEXTS[name]
    cases = []
    for label, text in texts:
        for add_bos in (False, True):
            for special in (False, True):
                ids = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)
                cases.append({
                    "label": label,
                    "text": text,
                    "add_bos": add_bos,
                    "parse_special": special,
                    "ids": [int(t) for t in ids],
                })
    # sanity: round trip of the plain (no bos, no special) tokenization
    mismatches = []
    for c in cases:
        if not c["add_bos"] and not c["parse_special"]:
            back = llm.detokenize(c["ids"]).decode("utf-8", errors="replace")
            if back != c["text"]:
                mismatches.append(c["label"])
    return {
        "model": name,
        "model_file": os.path.basename(model_path),
        "model_sha256": sha256_of(model_path),
        "llama_cpp_python": llama_cpp.__version__,
        "notes": (
            "ids from Llama.tokenize(text.encode('utf-8'), add_bos=add_bos, special=parse_special). "
            "add_bos maps to llama_tokenize's add_special: llama.cpp adds BOS only if the vocab's "
            "tokenizer.ggml.add_bos_token allows it (false for smollm2, true for gemma3). "
            "Every text appears with the 4 combinations of add_bos and parse_special."
        ),
        "detokenize_roundtrip_mismatch_labels": mismatches,
        "cases": cases,
    }


# --------------------------------------------------------------------------
# logits
# --------------------------------------------------------------------------

def topk_pairs(row: np.ndarray, k: int = TOPK) -> list[list]:
    idx = np.argpartition(-row, k)[:k]
    # sort by logit descending, ties by id ascending (stable, reproducible)
    order = sorted(idx.tolist(), key=lambda i: (-float(row[i]), i))
    return [[int(i), round(float(row[i]), 4)] for i in order]


def prompts_for(name: str) -> list[dict]:
    out = [
        {"label": "long_text", "text": corpus.LONG_TEXT, "parse_special": False},
    ]
    if name == "smollm2":
        out.append({"label": "chat", "text": corpus.SMOLLM2_CHAT, "parse_special": True})
    elif name.startswith("qwen2"):
        out.append({"label": "chat", "text": corpus.QWEN2_CHAT, "parse_special": True})
    else:
        out.append({"label": "chat_turns", "text": corpus.GEMMA3_CHAT, "parse_special": True})
    out.append({"label": "completion_short", "text": corpus.COMPLETION_SHORT, "parse_special": False})
    out.append({"label": "completion_story", "text": corpus.COMPLETION_STORY, "parse_special": False})
    out.append({"label": "code", "text": corpus.CODE_PROMPT, "parse_special": False})
    return out


def logits_fixture(name: str, model_path: str, threads: int, yarn: tuple[float, int] | None = None) -> dict:
    kw = {}
    if yarn:  # llama.cpp's --rope-scaling yarn --rope-scale F --yarn-orig-ctx N
        kw = {"rope_scaling_type": llama_cpp.LLAMA_ROPE_SCALING_TYPE_YARN,
              "rope_freq_scale": 1.0 / yarn[0], "yarn_orig_ctx": yarn[1]}
    llm = Llama(model_path=model_path, logits_all=True, n_ctx=N_CTX, n_threads=threads,
                n_threads_batch=threads, n_batch=N_BATCH, n_ubatch=N_BATCH, verbose=False, **kw)
    n_vocab = llm.n_vocab()
    results = []
    prompts = prompts_for(name)
    if yarn:  # the short prompts only: the scaling is checked, not the long text again
        prompts = [p for p in prompts if p["label"] != "long_text"]
    for p in prompts:
        t0 = time.time()
        ids = [int(t) for t in llm.tokenize(p["text"].encode("utf-8"), add_bos=True,
                                             special=p["parse_special"])]
        assert len(ids) + N_GEN <= N_CTX, (p["label"], len(ids))
        llm.reset()
        llm.eval(ids)
        scores = np.asarray(llm.scores[: len(ids)], dtype=np.float32)
        positions = [topk_pairs(scores[i]) for i in range(len(ids))]
        # greedy continuation: argmax at each step, then feed that token
        steps = []
        row = scores[-1].copy()
        for _ in range(N_GEN):
            top = topk_pairs(row)
            chosen = top[0][0]
            assert chosen == int(np.argmax(row))
            steps.append({
                "id": chosen,
                "logit": top[0][1],
                "gap": round(float(row[chosen]) - float(top[1][1]), 4),
                "top10": top,
            })
            llm.eval([chosen])
            row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32).copy()
        gen_ids = [s["id"] for s in steps]
        results.append({
            "label": p["label"],
            "text": p["text"],
            "add_bos": True,
            "parse_special": p["parse_special"],
            "ids": ids,
            "n_tokens": len(ids),
            "top10": positions,
            "greedy": {
                "ids": gen_ids,
                "text": llm.detokenize(gen_ids).decode("utf-8", errors="replace"),
                "steps": steps,
            },
            "seconds": round(time.time() - t0, 2),
        })
        print(f"  {name}/{p['label']}: {len(ids)} tokens, {time.time() - t0:.1f}s, "
              f"greedy={results[-1]['greedy']['text']!r}", file=sys.stderr)
    return {
        "model": name,
        "model_file": os.path.basename(model_path),
        "model_sha256": sha256_of(model_path),
        "llama_cpp_python": llama_cpp.__version__,
        "n_vocab": n_vocab,
        "settings": {"n_ctx": N_CTX, "n_batch": N_BATCH, "n_ubatch": N_BATCH, "n_threads": threads,
                     "logits_all": True, "topk": TOPK, "n_gen": N_GEN, "logit_decimals": 4,
                     "rope_scaling": ({"type": "yarn", "factor": yarn[0], "original_context": yarn[1]}
                                      if yarn else None)},
        "notes": (
            "For each prompt: ids fed (tokenize(text, add_bos=True, special=parse_special)), then "
            "top10[i] = the 10 highest (token id, logit) pairs of the logits at position i, i.e. the "
            "prediction for token i+1, sorted by logit desc then id asc. greedy.steps[j] is the argmax "
            "of the logits after the prompt plus the first j generated tokens; gap = top1 - top2 logit. "
            "llama.cpp quantizes matmul activations (Q8_1 for Q4_1 weights, Q8_0 for Q5_0/Q8_0, Q8_K for "
            "K-quants), so an exact f32 engine differs by about 1e-2..1e-1 in logits; compare ranks "
            "and use loose tolerances, and allow greedy divergence after small gaps."
        ),
        "prompts": results,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True, choices=sorted(MODEL_TEXTS))
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures"))
    ap.add_argument("--what", default="all", choices=["tokenizer", "logits", "all"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--yarn", type=float, default=0.0,
                    help="logits with YaRN of this factor (file logits_NAME_yarnF.json)")
    ap.add_argument("--yarn-orig-ctx", type=int, default=32768)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    if args.what in ("tokenizer", "all"):
        fx = tokenizer_fixture(args.name, args.model)
        path = os.path.join(args.out, f"tokenizer_{args.name}.json")
        with open(path, "w", encoding="utf-8") as f:
            # one case per line: readable diffs, compact ids
            cases = fx.pop("cases")
            head = json.dumps(fx, ensure_ascii=False, indent=1)
            f.write(head[:-2] + ",\n \"cases\": [\n")
            f.write(",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases))
            f.write("\n ]\n}\n")
            fx["cases"] = cases
        print(f"wrote {path}: {len(fx['cases'])} cases, roundtrip mismatches: "
              f"{fx['detokenize_roundtrip_mismatch_labels']}", file=sys.stderr)
    if args.what in ("logits", "all"):
        yarn = (args.yarn, args.yarn_orig_ctx) if args.yarn else None
        fx = logits_fixture(args.name, args.model, args.threads, yarn)
        suffix = f"_yarn{args.yarn:g}" if yarn else ""
        path = os.path.join(args.out, f"logits_{args.name}{suffix}.json")
        with open(path, "w", encoding="utf-8") as f:
            # compact: one prompt's arrays would be huge with indent
            json.dump(fx, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {path}: {os.path.getsize(path)} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
