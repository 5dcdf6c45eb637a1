"""A small run of bench/server_load.py: 16 concurrent streaming clients, all complete, and the
greedy outputs equal the single-request outputs (continuous batching changes nothing)."""
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "server_load.py"


def test_sixteen_concurrent_streams(server):
    r = subprocess.run([sys.executable, str(SCRIPT), "--url", server.base, "--clients", "16", "--prompt-tokens", "160",
                        "--max-tokens", "8", "--timeout", "300"], capture_output=True, text=True, timeout=360)
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(r.stdout)
    assert s["completed"] == 16 and s["failed"] == 0
    assert s["greedy_equal_single"] is True
    assert s["completion_tokens_total"] == 16 * 8
