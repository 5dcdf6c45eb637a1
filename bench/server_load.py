#!/usr/bin/env python3
"""Load test of `sieve serve` on loopback: N concurrent streaming clients with long prompts.

Runs every client at once (greedy, streaming), then each prompt alone, and checks that every
request completed and that the concurrent greedy outputs equal the single-request outputs.
Reports throughput and p50/p99 time to first token (TTFT) and inter-token latency (ITL), as
JSON on stdout (--markdown adds a table for bench/RESULTS.md). Exit code 1 when a request
failed or an output differs. Bounded: --clients requests of --max-tokens tokens, --timeout.

  bench/server_load.py --sieve build/tools/sieve/sieve -m smollm2.gguf --clients 16 --prompt-tokens 1500
  bench/server_load.py --url http://127.0.0.1:8080 --clients 16      # a running server
Only the Python standard library is used.
"""
import argparse
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import urllib.parse

WORDS = ("harbor lantern keeper tide signal beacon rock storm gull rope fog horn shore wave cliff ledger "
         "night watch oil wick brass glass north south east west boat anchor chart reef current mast").split()


def make_prompt(i, n_words):
    """A distinct document per client (no shared prefix), ending in a question."""
    rng = random.Random(1000 + i)
    words = [rng.choice(WORDS) for _ in range(n_words)]
    lines = [" ".join(words[k:k + 12]) + "." for k in range(0, len(words), 12)]
    return f"Log {i}.\n" + "\n".join(lines) + f"\nQuestion {i}: what did the keeper record last?\nAnswer:"


class Client:
    def __init__(self, host, port, key):
        self.host, self.port = host, port
        self.headers = {"Content-Type": "application/json"}
        if key:
            self.headers["Authorization"] = "Bearer " + key

    def post(self, path, body, timeout):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        conn.request("POST", path, body=json.dumps(body), headers=self.headers)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, json.loads(data)

    def stream(self, body, timeout):
        """One streamed completion: text, token arrival times, usage, finish_reason."""
        out = {"text": "", "times": [], "usage": None, "finish": None, "error": None}
        t0 = time.perf_counter()
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            conn.request("POST", "/v1/completions", body=json.dumps(body), headers=self.headers)
            r = conn.getresponse()
            if r.status != 200:
                out["error"] = f"HTTP {r.status}: {r.read()[:300]!r}"
                return out
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                payload = line[6:]
                if payload == "[DONE]":
                    break
                ev = json.loads(payload)
                if "error" in ev:
                    out["error"] = ev["error"]
                    break
                if ev.get("usage"):
                    out["usage"] = ev["usage"]
                for c in ev.get("choices", []):
                    if c.get("text"):
                        out["times"].append(time.perf_counter() - t0)
                        out["text"] += c["text"]
                    if c.get("finish_reason"):
                        out["finish"] = c["finish_reason"]
            conn.close()
        except Exception as e:  # noqa: BLE001 - a failed request is a result here
            out["error"] = repr(e)
        out["elapsed"] = time.perf_counter() - t0
        return out


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def start_server(args):
    cmd = [args.sieve, "serve", "-m", args.model, "--port", "0", "-c", str(args.ctx), "--max-running",
           str(args.max_running), "--max-batch-tokens", str(args.max_batch_tokens)]
    if args.threads:
        cmd += ["-t", str(args.threads)]
    if not args.prefix_cache:
        cmd += ["--no-prefix-cache"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    port = None
    while True:
        line = proc.stderr.readline()
        if not line:
            raise SystemExit("the server exited during start-up")
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready on" in line:
            break
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc, "127.0.0.1", port, " ".join(cmd)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (otherwise --sieve starts one)")
    ap.add_argument("--sieve", help="the sieve binary to start")
    ap.add_argument("-m", "--model", default=os.path.expanduser("~/.cache/sieve/models/smollm2.gguf"))
    ap.add_argument("--api-key", default=os.environ.get("SIEVE_API_KEY", ""))
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=1500, help="approximate prompt length")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--max-running", type=int, default=16)
    ap.add_argument("--max-batch-tokens", type=int, default=512)
    ap.add_argument("--prefix-cache", action="store_true", help="leave the server's prefix cache on")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds for the whole test")
    ap.add_argument("--skip-single", action="store_true", help="no single-request reference runs")
    ap.add_argument("--markdown", action="store_true", help="also print a markdown table")
    args = ap.parse_args()

    proc, server_cmd = None, None
    if args.url:
        u = urllib.parse.urlparse(args.url)
        host, port = u.hostname, u.port or 80
    else:
        if not args.sieve:
            ap.error("give --url or --sieve")
        proc, host, port, server_cmd = start_server(args)
    client = Client(host, port, args.api_key)
    deadline = time.time() + args.timeout
    try:
        # ~0.25 words per token is off for this vocabulary; calibrate with /tokenize.
        probe = make_prompt(0, 200)
        _, tk = client.post("/tokenize", {"content": probe}, 60)
        n_probe = tk["count"] if "count" in tk else len(tk.get("tokens", []))  # sieve / llama-server
        words = max(8, int(200 * args.prompt_tokens / max(1, n_probe)))
        prompts = [make_prompt(i, words) for i in range(args.clients)]
        bodies = [{"prompt": p, "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                   "stream_options": {"include_usage": True}} for p in prompts]

        results = [None] * args.clients

        def run(i):
            results[i] = client.stream(bodies[i], max(1, deadline - time.time()))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(args.clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(1, deadline - time.time()))
        wall = time.perf_counter() - t0

        singles = []
        if not args.skip_single:
            for b in bodies:
                singles.append(client.stream(b, max(1, deadline - time.time())))
    finally:
        if proc:
            proc.terminate()
            proc.wait(60)

    failed = [i for i, r in enumerate(results) if r is None or r["error"] or r["finish"] is None]
    mismatched = [i for i, (r, s) in enumerate(zip(results, singles)) if r and s and r["text"] != s["text"]]
    # where each differing output first departs from its single-request run (characters)
    first_diff = {i: next((k for k, (a, b) in enumerate(zip(results[i]["text"], singles[i]["text"])) if a != b),
                          min(len(results[i]["text"]), len(singles[i]["text"]))) for i in mismatched}
    ok = [r for r in results if r and not r["error"]]
    ttft = [r["times"][0] for r in ok if r["times"]]
    itl = [b - a for r in ok for a, b in zip(r["times"], r["times"][1:])]
    completion_tokens = sum((r["usage"] or {}).get("completion_tokens", 0) for r in ok)
    prompt_tokens = sum((r["usage"] or {}).get("prompt_tokens", 0) for r in ok)
    single_ttft = [s["times"][0] for s in singles if s["times"]]
    single_itl = [b - a for s in singles for a, b in zip(s["times"], s["times"][1:])]
    summary = {
        "clients": args.clients,
        "completed": args.clients - len(failed),
        "failed": len(failed),
        "greedy_equal_single": None if args.skip_single else not mismatched,
        "mismatched": mismatched,
        "first_diff_char": first_diff,
        "prompt_tokens_total": prompt_tokens,
        "prompt_tokens_mean": prompt_tokens / max(1, len(ok)),
        "completion_tokens_total": completion_tokens,
        "wall_s": wall,
        "output_tok_s": completion_tokens / wall,
        "total_tok_s": (prompt_tokens + completion_tokens) / wall,
        "requests_per_s": len(ok) / wall,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p99_s": percentile(ttft, 99),
        "itl_p50_ms": percentile(itl, 50) * 1000,
        "itl_p99_ms": percentile(itl, 99) * 1000,
        "single_ttft_p50_s": percentile(single_ttft, 50),
        "single_itl_p50_ms": percentile(single_itl, 50) * 1000,
        "server": server_cmd or args.url,
    }
    print(json.dumps(summary, indent=2))
    if args.markdown:
        print()
        print("| clients | prompt tok (mean) | out tok each | wall s | out tok/s | total tok/s | TTFT p50 / p99 s "
              "| ITL p50 / p99 ms | single TTFT p50 s | single ITL p50 ms | all done | greedy == single |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        print(f"| {args.clients} | {summary['prompt_tokens_mean']:.0f} | {args.max_tokens} | {wall:.1f} | "
              f"{summary['output_tok_s']:.1f} | {summary['total_tok_s']:.0f} | {summary['ttft_p50_s']:.2f} / "
              f"{summary['ttft_p99_s']:.2f} | {summary['itl_p50_ms']:.0f} / {summary['itl_p99_ms']:.0f} | "
              f"{summary['single_ttft_p50_s']:.2f} | {summary['single_itl_p50_ms']:.0f} | "
              f"{'yes' if not failed else 'NO'} | {summary['greedy_equal_single']} |")
    return 1 if failed or mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
