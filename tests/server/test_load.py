"""A small run of bench/server_load.py: 16 concurrent streaming clients, all complete, and the
greedy outputs equal the single-request outputs (continuous batching changes nothing).

The server takes whole prompts in one step (--max-batch-tokens 4096): the engine's prefill
numerics still depend on where a long prompt is split into chunks (docs/server.md), which
is not what this test is about."""
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "server_load.py"


def test_sixteen_concurrent_streams(make_server):
    s = make_server("--max-batch-tokens", "4096", "--no-prefix-cache")
    r = subprocess.run([sys.executable, str(SCRIPT), "--url", s.base, "--clients", "16", "--prompt-tokens", "160",
                        "--max-tokens", "8", "--timeout", "300"], capture_output=True, text=True, timeout=360)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["completed"] == 16 and out["failed"] == 0
    assert out["greedy_equal_single"] is True
    assert out["completion_tokens_total"] == 16 * 8
