#!/usr/bin/env python3
"""Print every metadata key and every tensor of a GGUF file.

Offline reference tool (not part of the engine or its build). Uses gguf-py's
GGUFReader as an implementation independent of Sieve's own parser.

Usage:
    /opt/refenv/bin/python tools/reference/dump_metadata.py MODEL.gguf [--no-hash]

Output (stable, diff-friendly text):
  * a header: file name, size, sha256, GGUF version, counts, alignment;
  * one line per metadata key: `key: TYPE = value`. Strings are printed as
    JSON strings (so newlines of chat templates stay on one line). Arrays are
    printed as `ARRAY<T>[n] = [first 8 ..., last 2]`;
  * one line per tensor: index, name, ggml type, shape (ne0, ne1, ... as in
    the file, i.e. ne0 is the contiguous dimension), byte size, data offset
    (relative to the start of the data section);
  * a summary: tensor types per tensor kind (the name with `blk.N.` removed)
    and the total bytes per type.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGMLQuantizationType

ARRAY_HEAD = 8
ARRAY_TAIL = 2


def scalar_repr(vtype: GGUFValueType, value) -> str:
    if vtype == GGUFValueType.STRING:
        if isinstance(value, (bytes, bytearray, memoryview, np.ndarray)):
            value = bytes(value).decode("utf-8", errors="backslashreplace")
        return json.dumps(value, ensure_ascii=False)
    if vtype == GGUFValueType.BOOL:
        return "true" if bool(value) else "false"
    if vtype in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        # repr of a Python float of the stored value: shortest round-trip form
        if vtype == GGUFValueType.FLOAT32:
            return repr(float(np.float32(value)))
        return repr(float(value))
    return str(int(value))


def field_line(field) -> str:
    types = field.types
    if not types:
        return f"{field.name}: <no type>"
    main = types[0]
    if main == GGUFValueType.ARRAY:
        sub = types[1] if len(types) > 1 else None
        n = len(field.data)
        if sub is None:
            return f"{field.name}: ARRAY<?>[{n}]"
        if sub == GGUFValueType.ARRAY:
            return f"{field.name}: ARRAY<ARRAY>[{n}] (nested arrays not expanded)"
        items = []
        idxs = list(range(n))
        if n > ARRAY_HEAD + ARRAY_TAIL:
            shown = idxs[:ARRAY_HEAD] + [None] + idxs[-ARRAY_TAIL:]
        else:
            shown = idxs
        for i in shown:
            if i is None:
                items.append("...")
                continue
            part = field.parts[field.data[i]]
            if sub == GGUFValueType.STRING:
                v = bytes(part)
            else:
                v = part[0]
            items.append(scalar_repr(sub, v))
        return f"{field.name}: ARRAY<{sub.name}>[{n}] = [{', '.join(items)}]"
    part = field.parts[field.data[0]]
    if main == GGUFValueType.STRING:
        v = bytes(part)
    else:
        v = part[0]
    return f"{field.name}: {main.name} = {scalar_repr(main, v)}"


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--no-hash", action="store_true", help="skip the sha256 of the file")
    args = ap.parse_args()

    reader = GGUFReader(args.model, "r")
    out = sys.stdout

    # GGUF.* pseudo-fields (magic, version, counts) are created by the reader
    version = None
    for name, field in reader.fields.items():
        if name == "GGUF.version":
            version = int(field.parts[field.data[0]][0])
    kv_fields = [f for n, f in reader.fields.items() if not n.startswith("GGUF.")]

    out.write(f"file: {os.path.basename(args.model)}\n")
    out.write(f"size_bytes: {os.path.getsize(args.model)}\n")
    if not args.no_hash:
        out.write(f"sha256: {sha256_of(args.model)}\n")
    out.write(f"gguf_version: {version}\n")
    out.write(f"metadata_kv_count: {len(kv_fields)}\n")
    out.write(f"tensor_count: {len(reader.tensors)}\n")
    out.write(f"alignment: {reader.alignment}\n")
    out.write(f"data_offset: {reader.data_offset}\n")
    out.write("\n== metadata ==\n")
    for field in kv_fields:
        out.write(field_line(field) + "\n")

    out.write("\n== tensors (index, name, type, shape ne0..neN, bytes, offset in data section) ==\n")
    kinds: dict[str, collections.Counter] = collections.OrderedDict()
    bytes_per_type: collections.Counter = collections.Counter()
    for i, t in enumerate(reader.tensors):
        ttype = GGMLQuantizationType(int(t.tensor_type)).name
        shape = "x".join(str(int(d)) for d in t.shape)
        rel = int(t.data_offset) - int(reader.data_offset)
        out.write(f"{i:4d} {t.name} {ttype} [{shape}] {int(t.n_bytes)} @{rel}\n")
        kind = re.sub(r"^blk\.\d+\.", "blk.N.", t.name)
        kinds.setdefault(kind, collections.Counter())[ttype] += 1
        bytes_per_type[ttype] += int(t.n_bytes)

    out.write("\n== summary: types per tensor kind ==\n")
    for kind, cnt in kinds.items():
        parts = ", ".join(f"{k} x{v}" for k, v in sorted(cnt.items()))
        out.write(f"{kind}: {parts}\n")
    # per-layer detail for kinds whose type varies by layer
    for kind, cnt in kinds.items():
        if len(cnt) > 1 and kind.startswith("blk.N."):
            layers = collections.defaultdict(list)
            for t in reader.tensors:
                m = re.match(r"^blk\.(\d+)\.(.*)$", t.name)
                if m and "blk.N." + m.group(2) == kind:
                    layers[GGMLQuantizationType(int(t.tensor_type)).name].append(int(m.group(1)))
            detail = "; ".join(f"{k}: layers {sorted(v)}" for k, v in sorted(layers.items()))
            out.write(f"  {kind} by layer -> {detail}\n")
    out.write("\n== summary: bytes per type ==\n")
    total = 0
    for k, v in sorted(bytes_per_type.items()):
        out.write(f"{k}: {v}\n")
        total += v
    out.write(f"total tensor bytes: {total}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
