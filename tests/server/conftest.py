"""Fixtures for the tests against the running `sieve serve` binary.

The binary comes from $SIEVE_BIN (tests/server/run.sh sets it); the model is smollm2.gguf
from the directories src/gguf/test_models.h searches. Without either the tests skip.
"""
import http.client
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest


def find_model(name="smollm2.gguf"):
    dirs = [os.environ.get("SIEVE_TEST_MODEL_DIR", "")]
    if os.environ.get("SIEVE_HOME"):
        dirs.append(os.environ["SIEVE_HOME"] + "/models")
    dirs += [str(Path.home() / ".cache/sieve/models"), "/tmp/models"]
    for d in dirs:
        if d and (Path(d) / name).is_file():
            return str(Path(d) / name)
    return None


class Server:
    """A `sieve serve` process on a free loopback port."""

    def __init__(self, *args, env=None, binary=None, ctx=1024):
        """binary: the sieve to run (default $SIEVE_BIN; the fault tests pass $SIEVE_GPU_BIN)."""
        binary = binary or os.environ.get("SIEVE_BIN")
        if not binary or not os.access(binary, os.X_OK):
            pytest.skip("SIEVE_BIN does not name the sieve binary")
        model = find_model()
        if not model:
            pytest.skip("smollm2.gguf not found (sieve pull smollm2)")
        self.args = [binary, "serve", "-m", model, "--port", "0", "-t", "1", "-c", str(ctx), *args]
        self.log = []
        full_env = dict(os.environ, **(env or {}))
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                     env=full_env)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if "ready on" in line:
                break
        if self.port is None or self.proc.poll() is not None:
            raise RuntimeError("the server did not start:\n" + "".join(self.log))
        # keep draining stderr so the server never blocks on a full pipe
        import threading

        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.base = f"http://127.0.0.1:{self.port}"

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def request(self, method, path, body=None, headers=None, raw=None, timeout=120):
        """One request on a fresh connection: (status, parsed JSON or text, headers)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        text = r.read().decode("utf-8", "replace")
        conn.close()
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = text
        return r.status, parsed, dict(r.getheaders())

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def stream(self, path, body, headers=None):
        """A streamed request: the list of SSE `data:` payloads (parsed) and comment lines."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        conn.request("POST", path, body=json.dumps(body), headers=h)
        r = conn.getresponse()
        assert r.status == 200, r.read()
        assert r.getheader("Content-Type").startswith("text/event-stream")
        events, comments = [], []
        for raw in r:
            line = raw.decode("utf-8").rstrip("\r\n")
            if line.startswith(":"):
                comments.append(line)
            elif line.startswith("data: "):
                payload = line[6:]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
        conn.close()
        return events, comments

    def metrics(self, headers=None):
        status, text, _ = self.get("/metrics", headers=headers)
        assert status == 200
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def healthy(self):
        return self.get("/health")[0] == 200

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    s = Server("--ping-interval", "0.3", "--progress-interval", "0.05")
    yield s
    assert s.stop() == 0, "".join(s.log[-20:])


@pytest.fixture(scope="session")
def keyed_server():
    s = Server("--api-key", "test-key-123456", "--max-body-bytes", "4096")
    yield s
    assert s.stop() == 0, "".join(s.log[-20:])


@pytest.fixture
def make_server():
    started = []

    def make(*args, **kw):
        s = Server(*args, **kw)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()
