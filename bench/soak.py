#!/usr/bin/env python3
"""Soak client (issue 44 item 4): mixed long and short completions against a running `sieve
serve` for N minutes, some streamed, some abandoned by their client on purpose (mid-prefill or
mid-decode), and a per-minute CSV of latency percentiles, the server's RSS and its KV pages.

A request counts as failed when it was well-formed, not abandoned, and did not end in a 200 with
a finish reason of length or stop (a 429 from the concurrency limit counts as failed too: the
client never runs more requests than the server allows). At the end the client waits for the
server to go idle and records RSS and KV pages again: with no growth, pages in use are back to 0
and RSS is near its value after warm-up.

scripts/soak.sh starts the server and runs this; standard library only.
  python3 bench/soak.py --url http://127.0.0.1:8080 --pid PID --minutes 60 --csv soak.csv
"""
import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time
from urllib.parse import urlparse

SHARED_PREFIX_SEED = 12345


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


class Client:
    def __init__(self, url):
        u = urlparse(url)
        self.host, self.port = u.hostname, u.port or 80

    def get(self, path, timeout=30):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read().decode("utf-8", "replace")
        c.close()
        return r.status, body

    def metrics(self):
        status, text = self.get("/metrics")
        out = {}
        if status != 200:
            return out
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    pass
        return out

    def completion(self, body, abandon_after_s=None, abandon_after_tokens=None, timeout=600):
        """One request on its own connection. Returns a dict: ok, abandoned, status, error,
        e2e_s, ttft_s, finish."""
        data = json.dumps(body).encode()
        t0 = time.time()
        res = {"ok": False, "abandoned": False, "status": 0, "error": "", "e2e_s": 0.0, "ttft_s": None,
               "finish": None}
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        try:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
            if abandon_after_s is not None:
                sock.settimeout(abandon_after_s)
            buf = b""
            head = None
            n_tok = 0
            while True:
                try:
                    chunk = sock.recv(65536)
                except socket.timeout:
                    if abandon_after_s is not None:
                        res["abandoned"] = True
                        return res
                    res["error"] = "timeout"
                    return res
                if not chunk:
                    break
                buf += chunk
                if head is None:
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        continue
                    head = buf[:end].decode("latin-1")
                    res["status"] = int(head.split(" ", 2)[1])
                    buf = buf[end + 4:]
                if body.get("stream"):
                    if b"data: " in buf and res["ttft_s"] is None and b'"text":"' in buf.replace(b'"text":""', b""):
                        res["ttft_s"] = time.time() - t0
                    n_tok = buf.count(b'"text":"') - buf.count(b'"text":""')
                    if abandon_after_tokens is not None and n_tok >= abandon_after_tokens:
                        res["abandoned"] = True
                        return res
                    if b"data: [DONE]" in buf:
                        break
                else:
                    lengths = [h.split(":", 1)[1] for h in head.split("\r\n") if h.lower().startswith("content-length:")]
                    if lengths and len(buf) >= int(lengths[0]):
                        break
            res["e2e_s"] = time.time() - t0
            if res["status"] != 200:
                res["error"] = f"HTTP {res['status']}: {buf[:200]!r}"
                return res
            if body.get("stream"):
                finish, err = None, None
                for line in buf.split(b"\n"):
                    if line.startswith(b"data: {"):
                        ev = json.loads(line[6:])
                        if "error" in ev:
                            err = ev["error"]
                        for ch in ev.get("choices") or []:
                            finish = ch.get("finish_reason") or finish
                if err:
                    res["error"] = f"stream error: {err}"
                    return res
                res["finish"] = finish
            else:
                r = json.loads(buf)
                res["finish"] = r["choices"][0]["finish_reason"]
                res["ttft_s"] = r.get("timings", {}).get("prompt_ms", 0) / 1000.0
            res["ok"] = res["finish"] in ("length", "stop")
            if not res["ok"]:
                res["error"] = f"finish_reason {res['finish']}"
            return res
        except (OSError, ValueError, KeyError, IndexError) as e:
            res["error"] = f"{type(e).__name__}: {e}"
            return res
        finally:
            sock.close()


def make_request(rng, args, shared_prefix):
    long = rng.random() < args.long_share
    if long:
        n = rng.randint(args.long_tokens // 2, args.long_tokens)
        ids = [rng.randrange(300, 20000) for _ in range(n)]
        if rng.random() < 0.3:  # a shared system prefix: exercises the prefix cache
            ids = shared_prefix + ids[len(shared_prefix):]
        max_tokens = rng.randint(8, args.max_tokens)
    else:
        ids = [rng.randrange(300, 20000) for _ in range(rng.randint(8, args.short_tokens))]
        max_tokens = rng.randint(4, args.max_tokens)
    body = {"prompt": ids, "max_tokens": max_tokens, "ignore_eos": True, "temperature": rng.choice([0, 0.8]),
            "stream": rng.random() < 0.5}
    abandon_s = abandon_tok = None
    if rng.random() < args.disconnect_share:
        if body["stream"] and rng.random() < 0.5:
            abandon_tok = rng.randint(1, max(1, max_tokens // 2))  # mid-decode
            body["max_tokens"] = max(max_tokens, abandon_tok + 4)
        else:
            abandon_s = rng.uniform(0.02, 0.5) if long else rng.uniform(0.005, 0.05)  # mid-prefill
    return ("long" if long else "short"), body, abandon_s, abandon_tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server's process id (for RSS)")
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--clients", type=int, default=6, help="concurrent clients")
    ap.add_argument("--long-share", type=float, default=0.2)
    ap.add_argument("--long-tokens", type=int, default=900, help="longest long prompt (tokens)")
    ap.add_argument("--short-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--disconnect-share", type=float, default=0.1)
    ap.add_argument("--warmup-s", type=float, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--csv", required=True)
    args = ap.parse_args()

    cl = Client(args.url)
    lock = threading.Lock()
    window = []  # results of the current minute
    totals = {"requests": 0, "completed": 0, "abandoned": 0, "failed": 0}
    failures = []
    stop_at = time.time() + args.warmup_s + args.minutes * 60
    measuring = threading.Event()
    shared_prefix = [random.Random(SHARED_PREFIX_SEED).randrange(300, 20000) for _ in range(256)]

    def worker(i):
        rng = random.Random(args.seed * 1000 + i)
        while time.time() < stop_at:
            kind, body, abandon_s, abandon_tok = make_request(rng, args, shared_prefix)
            r = cl.completion(body, abandon_s, abandon_tok)
            r["kind"] = kind
            r["t"] = time.time()
            if not measuring.is_set():
                continue
            with lock:
                window.append(r)
                totals["requests"] += 1
                if r["abandoned"]:
                    totals["abandoned"] += 1
                elif r["ok"]:
                    totals["completed"] += 1
                else:
                    totals["failed"] += 1
                    failures.append(r["error"])

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.clients)]
    for t in threads:
        t.start()
    time.sleep(args.warmup_s)
    m0 = cl.metrics()
    start = {"rss_mib": rss_mib(args.pid), "kv_pages_used": m0.get("sieve_kv_pages_used", float("nan")),
             "kv_pages_cached": m0.get("sieve_kv_pages_cached", float("nan")),
             "kv_pages_total": m0.get("sieve_kv_pages_total", float("nan"))}
    measuring.set()
    t_start = time.time()
    cols = ["minute", "requests", "completed", "abandoned", "failed", "p50_s", "p99_s", "p99_short_s",
            "p99_long_s", "ttft_p99_s", "rss_mib", "kv_pages_used", "kv_pages_cached", "preemptions_total"]
    with open(args.csv, "w") as out:
        out.write(",".join(cols) + "\n")
        minute = 0
        while time.time() < stop_at:
            time.sleep(max(0.0, min(t_start + (minute + 1) * 60, stop_at) - time.time()))
            minute += 1
            with lock:
                rs, window[:] = list(window), []
            m = cl.metrics()
            ok = [r for r in rs if r["ok"]]
            lat = [r["e2e_s"] for r in ok]
            row = [minute, len(rs), len(ok), sum(r["abandoned"] for r in rs),
                   sum(1 for r in rs if not r["ok"] and not r["abandoned"]),
                   percentile(lat, 50), percentile(lat, 99),
                   percentile([r["e2e_s"] for r in ok if r["kind"] == "short"], 99),
                   percentile([r["e2e_s"] for r in ok if r["kind"] == "long"], 99),
                   percentile([r["ttft_s"] for r in ok if r["ttft_s"] is not None], 99),
                   rss_mib(args.pid), m.get("sieve_kv_pages_used", float("nan")),
                   m.get("sieve_kv_pages_cached", float("nan")), m.get("sieve_preemptions_total", float("nan"))]
            out.write(",".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row) + "\n")
            out.flush()
            print(",".join(str(v) if not isinstance(v, float) else f"{v:.3f}" for v in row), file=sys.stderr)
    for t in threads:
        t.join(timeout=600)
    # Idle: abandoned requests are cancelled within a step; wait for the engine to drain.
    deadline = time.time() + 60
    m = cl.metrics()
    while time.time() < deadline and (m.get("sieve_requests_in_flight", 0) > 0 or m.get("sieve_kv_pages_used", 0) > 0):
        time.sleep(0.5)
        m = cl.metrics()
    end = {"rss_mib": rss_mib(args.pid), "kv_pages_used": m.get("sieve_kv_pages_used", float("nan")),
           "kv_pages_cached": m.get("sieve_kv_pages_cached", float("nan")),
           "kv_pages_total": m.get("sieve_kv_pages_total", float("nan"))}
    summary = {"minutes": args.minutes, "clients": args.clients, **totals, "start": start, "end": end,
               "client_disconnects_total": m.get("sieve_client_disconnects_total"),
               "preemptions_total": m.get("sieve_preemptions_total"),
               "failures": failures[:20], "csv": args.csv}
    print(json.dumps(summary, indent=1))
    return 0 if totals["failed"] == 0 and end["kv_pages_used"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
