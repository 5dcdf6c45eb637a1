"""Start-up, SIGTERM drain and shutdown of the `sieve serve` process."""
import json
import os
import signal
import socket
import subprocess
import threading
import time

from conftest import find_model


def read_stream(sock):
    """Reads an SSE response to the end: (status line, data payloads)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        if b"data: [DONE]" in data:
            break
    head, _, body = data.partition(b"\r\n\r\n")
    payloads = [line[6:].decode() for line in body.split(b"\n") if line.startswith(b"data: ")]
    return head.split(b"\r\n")[0], payloads


def start_stream(server, max_tokens, **kw):
    body = json.dumps({"prompt": "Tell me a story.", "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                       "temperature": 0, **kw}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return sock


def test_sigterm_drains_in_flight_requests(make_server):
    s = make_server("--shutdown-timeout", "60")
    socks = [start_stream(s, 24) for _ in range(3)]
    time.sleep(0.3)
    s.proc.send_signal(signal.SIGTERM)
    results = [read_stream(sock) for sock in socks]
    for status, payloads in results:
        assert status == b"HTTP/1.1 200 OK"
        assert payloads[-1] == "[DONE]"
        finish = [json.loads(p)["choices"][0]["finish_reason"] for p in payloads[:-1] if json.loads(p)["choices"]]
        assert finish[-1] == "length"
    assert s.proc.wait(30) == 0
    assert any("draining" in line for line in s.log)


def test_new_requests_get_503_while_draining(make_server):
    # A long prompt prefilled 8 tokens a step keeps one request in flight for a while.
    s = make_server("--shutdown-timeout", "60", "--max-batch-tokens", "8")
    sock = start_stream(s, 4, prompt="word " * 900)
    time.sleep(0.3)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    status, r, headers = s.get("/health")
    assert status == 503 and r["status"] == "draining"
    status, r, headers = s.post("/v1/completions", {"prompt": "x", "max_tokens": 1})
    assert status == 503 and r["error"]["code"] == "server_shutting_down"
    assert headers.get("Connection") == "close"
    _, payloads = read_stream(sock)
    assert payloads[-1] == "[DONE]"
    assert s.proc.wait(60) == 0


def test_shutdown_timeout_aborts_with_a_final_error_event(make_server):
    s = make_server("--shutdown-timeout", "0.5")
    sock = start_stream(s, 900)
    time.sleep(0.5)
    t0 = time.time()
    s.proc.send_signal(signal.SIGTERM)
    status, payloads = read_stream(sock)
    assert status == b"HTTP/1.1 200 OK"
    assert payloads[-1] == "[DONE]"
    last = json.loads(payloads[-2])
    assert last["error"]["code"] == "server_shutting_down"
    assert s.proc.wait(30) == 0
    assert time.time() - t0 < 15


def test_bad_model_is_a_clean_error(tmp_path):
    binary = os.environ.get("SIEVE_BIN")
    if not binary:
        import pytest

        pytest.skip("SIEVE_BIN not set")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 20)
    r = subprocess.run([binary, "serve", "-m", str(bad), "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.count("error:") == 1
    r = subprocess.run([binary, "serve", "-m", str(bad), "--policy", "magic"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "magic" in r.stderr
