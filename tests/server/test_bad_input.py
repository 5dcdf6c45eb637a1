"""Bad input gets a 4xx with an OpenAI-style error object, and the server keeps serving."""
import socket

import pytest

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"


def assert_error(server, status, r, want_status, param=None, code=None, **kw):
    assert status == want_status, r
    assert isinstance(r, dict) and set(r) == {"error"}, r
    e = r["error"]
    assert isinstance(e["message"], str) and e["message"], e
    assert isinstance(e["type"], str) and e["type"], e
    assert "param" in e and "code" in e
    if param is not None:
        assert e["param"] == param, e
    if code is not None:
        assert e["code"] == code, e
    assert server.healthy()


@pytest.mark.parametrize("raw", [
    "", "{", "{\"prompt\": \"x\",}", "[1, 2]", "42", "null", "{\"prompt\": \"x\"} trailing",
    "{\"prompt\": NaN}", "{\"prompt\": \"x\", \"max_tokens\": Infinity}", "{\"max_tokens\": 1e400}",
    "{\"prompt\": \"\\ud800\"}", "[" * 100000, "{\"prompt\": \"\xff\xfe\"}",
])
def test_malformed_json(server, raw):
    status, r, _ = server.request("POST", COMPLETIONS, raw=raw.encode("latin-1"))
    assert_error(server, status, r, 400)


@pytest.mark.parametrize("field,value", [
    ("prompt", 5), ("prompt", None), ("prompt", {}), ("prompt", ""), ("prompt", []), ("prompt", ["a", 5]),
    ("max_tokens", -1), ("max_tokens", 2 ** 31), ("max_tokens", 2 ** 63), ("max_tokens", 1.5), ("max_tokens", "8"),
    ("n", 0), ("n", -1), ("n", 10 ** 6), ("logprobs", -1), ("logprobs", 21), ("logprobs", 10 ** 6),
    ("temperature", -1), ("temperature", 1e9), ("temperature", "hot"), ("top_p", -0.1), ("top_p", 1.1),
    ("top_k", -5), ("top_k", 2 ** 31), ("min_p", 1.5), ("presence_penalty", 9), ("frequency_penalty", -9),
    ("seed", -2), ("seed", 2 ** 64), ("seed", "abc"), ("stop", 5), ("stop", [1, 2]), ("stop", ["s"] * 100),
    ("stream", "yes"), ("logit_bias", {"1": 5}), ("echo", "yes"), ("sieve", "dense"), ("sieve", {"policy": 5}),
])
def test_bad_completion_fields(server, field, value):
    body = {"prompt": "hello", "max_tokens": 2}
    body[field] = value
    status, r, _ = server.post(COMPLETIONS, body)
    assert_error(server, status, r, 400)


@pytest.mark.parametrize("value", ["high", 1.5, True, [1], {}, 2 ** 31, -(2 ** 31) - 1])
def test_bad_priority_names_the_field(server, value):
    for path, body in ((COMPLETIONS, {"prompt": "hello", "max_tokens": 2}),
                       (CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})):
        body["priority"] = value
        status, r, _ = server.post(path, body)
        assert_error(server, status, r, 400, param="priority")
        assert "priority" in r["error"]["message"]


def test_priority_is_accepted(server):
    status, r, _ = server.post(COMPLETIONS, {"prompt": "hello", "max_tokens": 2, "priority": -5})
    assert status == 200, r


@pytest.mark.parametrize("prompt", [[-1], [49152], [2 ** 31 - 1], [2 ** 40], [1, "a"], [1.5]])
def test_invalid_token_ids(server, prompt):
    status, r, _ = server.post(COMPLETIONS, {"prompt": prompt, "max_tokens": 1})
    assert_error(server, status, r, 400, param="prompt", code="invalid_token_id")
    status, r, _ = server.post("/detokenize", {"tokens": prompt})
    assert_error(server, status, r, 400, param="tokens", code="invalid_token_id")


@pytest.mark.parametrize("messages", [
    None, [], "hi", [1], [{"role": "hacker", "content": "x"}], [{"role": "user"}],
    [{"role": "user", "content": None}], [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
    [{"role": "tool", "content": "x"}],
])
def test_bad_chat_messages(server, messages):
    status, r, _ = server.post(CHAT, {"messages": messages, "max_tokens": 2})
    assert_error(server, status, r, 400)


def test_unknown_policy_knob_names_the_knob(server):
    status, r, _ = server.post(COMPLETIONS, {"prompt": "x", "sieve": {"policy": "dense", "bogus_knob": 3}})
    assert_error(server, status, r, 400, param="sieve", code="invalid_policy")
    assert "bogus_knob" in r["error"]["message"]
    status, r, _ = server.post(COMPLETIONS, {"prompt": "x", "sieve": {"policy": "tokenselect", "top_k": -7}})
    assert_error(server, status, r, 400, param="sieve")


def test_unknown_endpoint_and_method(server):
    status, r, _ = server.get("/v1/nope")
    assert_error(server, status, r, 404)
    status, r, _ = server.get(COMPLETIONS)
    assert_error(server, status, r, 405)
    status, r, _ = server.request("DELETE", "/v1/models")
    assert_error(server, status, r, 405)


def test_oversize_body(keyed_server):
    s = keyed_server
    status, r, _ = s.post(COMPLETIONS, {"prompt": "x" * 10000}, headers={"Authorization": "Bearer test-key-123456"})
    assert status == 413 and r["error"]["type"] == "invalid_request_error"
    assert s.healthy()


def test_raw_transport_garbage(server):
    for raw in (b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"POST /v1/completions HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n", b"GET /health HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n"):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        sock.sendall(raw)
        reply = sock.recv(4096)
        sock.close()
        assert reply.split(b" ")[1][:1] == b"4" or reply.split(b" ")[1] == b"505", reply
    assert server.healthy()


AUTH = {"Authorization": "Bearer test-key-123456"}


def test_api_key(keyed_server):
    s = keyed_server
    assert s.get("/health")[0] == 200  # public
    for path in ("/v1/models", "/metrics", "/props", "//v1/models", "/v1/./models", "/v1/../v1/models",
                 "/%76%31/models", "/v1/models/", "/V1/models", "/nope"):
        status, r, headers = s.get(path)
        assert_error(s, status, r, 401, code="invalid_api_key")
        assert headers.get("WWW-Authenticate") == "Bearer"
        status, r, _ = s.get(path, headers={"Authorization": "Bearer wrong-key-0000"})
        assert_error(s, status, r, 401)
    for path in ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"):
        status, r, _ = s.post(path, {"prompt": "x"})
        assert_error(s, status, r, 401)
    assert s.get("/v1/models", headers=AUTH)[0] == 200
    assert s.get("//v1/models/", headers=AUTH)[0] == 200
    assert s.get("/v1/models", headers={"X-Api-Key": "test-key-123456"})[0] == 200
    assert s.get("/v1/models", headers={"Authorization": "Basic dGVzdC1rZXktMTIzNDU2"})[0] == 401
    status, r, _ = s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1, "temperature": 0}, headers=AUTH)
    assert status == 200, r
    assert "test-key-123456" not in "".join(s.log)  # the key is never logged


def test_concurrency_limit(make_server):
    s = make_server("--max-concurrent", "1")
    body = b'{"prompt": "Tell me a story.", "max_tokens": 400, "ignore_eos": true, "stream": true, "temperature": 0}'
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    status, r, headers = s.post(COMPLETIONS, {"prompt": "x", "max_tokens": 1})
    assert_error(s, status, r, 429, code="too_many_requests")
    assert headers.get("Retry-After") == "1"
    sock.close()
    import time

    deadline = time.time() + 5
    while time.time() < deadline and s.metrics()["sieve_requests_in_flight"] > 0:
        time.sleep(0.05)
    status, r, _ = s.post(COMPLETIONS, {"prompt": "x", "max_tokens": 1})
    assert status == 200, r
