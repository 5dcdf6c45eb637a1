#!/usr/bin/env python3
"""Accuracy table over the `sieve eval` runs below a folder (every */samples.jsonl).

    samples_table.py DIR FIELD[,FIELD...] [--samples]

Groups samples by the named fields (model is shortened to its file name) and prints one
markdown row per group: the fields, n and accuracy (mean score x 100). --samples first prints
every sample: id, the grouping fields, score, answers and the start of the output.
"""
import collections
import glob
import json
import os
import sys


def field(d, name):
    v = d.get(name, "-")
    return os.path.basename(v) if name == "model" else v


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    root, fields = argv[1], argv[2].split(",")
    acc = collections.defaultdict(list)
    for path in sorted(glob.glob(os.path.join(root, "*", "samples.jsonl"))):
        for line in open(path):
            d = json.loads(line)
            key = tuple(field(d, f) for f in fields)
            acc[key].append(d["score"])
            if "--samples" in argv:
                print(d["id"], *key, d["score"], d.get("answers"), repr(d["output"][:40]),
                      "prefill_ms", round(d.get("prefill_ms", 0)))
    print("| " + " | ".join(fields) + " | n | accuracy |")
    print("|" + "---|" * (len(fields) + 2))
    for key, s in sorted(acc.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        print("| " + " | ".join(str(k) for k in key) + f" | {len(s)} | {100 * sum(s) / len(s):.1f} |")


if __name__ == "__main__":
    main(sys.argv)
