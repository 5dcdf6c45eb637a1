#!/usr/bin/env python3
"""PyTorch SDPA baseline for bench_cuda: the same shapes, the same timing method
(cold L2 via a 256 MB read before every run, CUDA events, median), CSV rows in the
bench_cuda format (group,name,model,B,N,median_us,p10_us,p90_us,bytes,GBps,note).

  python3 bench/cuda/sdpa_baseline.py --out sdpa.csv [--quick]
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [("llama3-8b", 32, 8, 128), ("smollm2", 9, 3, 64), ("gemma3-270m", 4, 1, 256)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="sdpa.csv")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--prefill-only", action="store_true", help="skip the decode shapes")
    args = ap.parse_args()
    dev = torch.device("cuda")
    # cold L2 by READING 256 MB (a write flush leaves dirty lines whose write-back the timed
    # kernel would pay); the same method as bench_cuda
    flush = torch.ones(64 << 20, dtype=torch.float32, device=dev)
    out = open(args.out, "w")
    props = torch.cuda.get_device_properties(dev)
    out.write(f"# device={props.name} torch={torch.__version__} cudnn={torch.backends.cudnn.version()}\n")
    out.write("group,name,model,B,N,median_us,p10_us,p90_us,bytes,GBps,note\n")

    def timeit(fn, iters=args.iters):
        fn()
        fn()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for i, (a, b) in enumerate(ev):
            flush.sum()
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize()
        t = sorted(a.elapsed_time(b) * 1000.0 for a, b in ev)
        return t[iters // 2], t[iters // 10], t[(iters * 9) // 10]

    def report(group, name, model, B, N, st, nbytes, note=""):
        med, p10, p90 = st
        gbps = nbytes / (med * 1e-6) / 1e9 if nbytes else 0.0
        out.write(f"{group},{name},{model},{B},{N},{med:.2f},{p10:.2f},{p90:.2f},{nbytes:.0f},{gbps:.1f},{note}\n")
        out.flush()
        print(f"{group:8s} {name:24s} {model:11s} B={B} N={N:<8d} {med:10.2f} us {gbps:8.1f} GB/s {note}", flush=True)

    # copy ceiling
    a = torch.empty(2 << 30, dtype=torch.uint8, device=dev).fill_(1)
    b = torch.empty_like(a)
    report("copy", "torch_copy_2GiB", "any", 1, 0, timeit(lambda: b.copy_(a)), 2.0 * a.numel(), "read+write")
    del a, b

    # decode: one query per sequence against all N keys, GQA
    def decode_fn(backend, q, k, v):
        def run():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        return run

    Ns = [32768, 131072] if args.quick else [32768, 131072, 524288, 1048576]
    for model, hq, hkv, d in [] if args.prefill_only else SHAPES:
        for N in Ns:
            for B in (1, 8):
                q = torch.randn(B, hq, 1, d, device=dev, dtype=torch.bfloat16)
                k = torch.randn(B, hkv, N, d, device=dev, dtype=torch.bfloat16)
                v = torch.randn(B, hkv, N, d, device=dev, dtype=torch.bfloat16)
                nbytes = 2.0 * k.numel() * 2
                for bname, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                    fn = decode_fn(backend, q, k, v)
                    note = "enable_gqa"
                    try:
                        fn()
                    except Exception as e:  # fall back to a stride-0 head expansion (no copy)
                        rep = hq // hkv
                        ke = k[:, :, None].expand(B, hkv, rep, N, d).flatten(1, 2)
                        ve = v[:, :, None].expand(B, hkv, rep, N, d).flatten(1, 2)

                        def fn2(backend=backend, ke=ke, ve=ve):
                            with sdpa_kernel([backend]):
                                return F.scaled_dot_product_attention(q, ke, ve)
                        try:
                            fn2()
                            fn = fn2
                            note = "expanded heads (stride 0)"
                        except Exception as e2:
                            print(f"skip decode {bname} {model} B={B} N={N}: {type(e).__name__}: {str(e)[:120]} / {str(e2)[:120]}", file=sys.stderr)
                            continue
                    report("sdpa", f"decode_{bname}", model, B, N, timeit(fn), nbytes, note)
                del q, k, v
                torch.cuda.empty_cache()

    # prefill chunk: 512 queries against all N keys (no mask: the chunk is the newest tokens),
    # every shape
    for (model, hq, hkv, d), N in [(sh, n) for sh in SHAPES for n in Ns if n != 524288]:
        q = torch.randn(1, hq, 512, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, hkv, N, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, hkv, N, d, device=dev, dtype=torch.bfloat16)
        flop = 4.0 * 512 * hq * N * d
        for bname, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            fn = decode_fn(backend, q, k, v)
            try:
                fn()
            except Exception as e:
                print(f"skip prefill {bname} N={N}: {str(e)[:160]}", file=sys.stderr)
                continue
            st = timeit(fn, iters=5 if N >= 524288 else 10)
            report("sdpa", f"prefill512_{bname}", model, 1, N, st, 0, f"TFLOPs={flop / (st[0] * 1e-6) / 1e12:.0f}")
        del q, k, v
        torch.cuda.empty_cache()
    out.close()
    print("done")


if __name__ == "__main__":
    main()
