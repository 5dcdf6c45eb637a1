"""Every endpoint of `sieve serve`, through plain HTTP."""
import http.client
import json
import socket
import time

PROMPT = "The capital of France is"
GREEDY = {"temperature": 0}


def completion(server, **kw):
    body = {"prompt": PROMPT, "max_tokens": 8, **GREEDY, **kw}
    status, r, _ = server.post("/v1/completions", body)
    assert status == 200, r
    return r


def chat(server, **kw):
    body = {"messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 8, **GREEDY, **kw}
    status, r, _ = server.post("/v1/chat/completions", body)
    assert status == 200, r
    return r


def stream_text(events, chat_mode):
    assert events[-1] == "[DONE]"
    text, finish = "", None
    for e in events[:-1]:
        for c in e.get("choices", []):
            if chat_mode:
                text += c["delta"].get("content", "") or ""
            else:
                text += c["text"]
            if c["finish_reason"]:
                finish = c["finish_reason"]
    return text, finish


def test_health(server):
    status, r, _ = server.get("/health")
    assert status == 200 and r == {"status": "ok"}


def test_models_lists_the_context_length(server):
    status, r, _ = server.get("/v1/models")
    assert status == 200
    assert r["object"] == "list" and len(r["data"]) == 1
    m = r["data"][0]
    assert m["id"] == "smollm2" and m["object"] == "model"
    assert m["max_model_len"] == 1024 and m["context_length"] == 1024


def test_props(server):
    status, r, _ = server.get("/props")
    assert status == 200
    assert r["n_ctx"] == 1024 and r["chat_template"] == "chatml"


def test_completion_non_stream(server):
    r = completion(server)
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-")
    ch = r["choices"][0]
    assert ch["index"] == 0 and ch["finish_reason"] == "length" and ch["logprobs"] is None
    assert "Paris" in ch["text"]
    u = r["usage"]
    assert u["completion_tokens"] == 8
    assert u["total_tokens"] == u["prompt_tokens"] + 8
    assert "cached_tokens" in u["prompt_tokens_details"]
    # usage.prompt_tokens is what /tokenize counts for the same text
    status, t, _ = server.post("/tokenize", {"content": PROMPT})
    assert status == 200 and t["count"] == u["prompt_tokens"]


def test_completion_stream_equals_non_stream(server):
    want = completion(server, max_tokens=12)["choices"][0]["text"]
    events, _ = server.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 12, "stream": True, **GREEDY})
    text, finish = stream_text(events, False)
    assert text == want and finish == "length"
    for e in events[:-1]:
        assert e["object"] == "text_completion"
    # finish_reason stays null until the last chunk
    assert all(c["finish_reason"] is None for e in events[:-2] for c in e["choices"])


def test_stream_usage_chunk(server):
    events, _ = server.stream(
        "/v1/completions",
        {"prompt": PROMPT, "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}, **GREEDY})
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    assert "cached_tokens" in usage["usage"]["prompt_tokens_details"]
    assert all(e["usage"] is None for e in events[:-2])


def test_chat_non_stream_and_stream_agree(server):
    r = chat(server)
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    msg = r["choices"][0]["message"]
    assert msg["role"] == "assistant" and msg["content"]
    events, _ = server.stream("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 8, "stream": True, **GREEDY})
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    text, finish = stream_text(events, True)
    assert text == msg["content"] and finish == r["choices"][0]["finish_reason"]


def test_prefix_cache_reports_cached_tokens(server):
    doc = "Lighthouse log. " * 40
    first = completion(server, prompt=doc + "First question?", max_tokens=2)
    second = completion(server, prompt=doc + "Second question?", max_tokens=2)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] <= second["usage"]["prompt_tokens_details"][
        "cached_tokens"]
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= 64


def test_stop_strings_never_leak(server):
    # llama.cpp issue 13780: streamed stop strings that span tokens
    prompt = ("System: You are helpfull assistant.\nAssistant:\nHey! How could I help?\nUser:\nTell me a joke.\n"
              "Assistant:\n")
    body = {"prompt": prompt, "max_tokens": 32, "stop": ["User:\n", "Assistant:\n"], **GREEDY}
    events, _ = server.stream("/v1/completions", dict(body, stream=True))
    text, finish = stream_text(events, False)
    assert "User:" not in text and "Assistant:" not in text
    status, r, _ = server.post("/v1/completions", body)
    assert r["choices"][0]["text"] == text and r["choices"][0]["finish_reason"] == finish
    # a stop string taken from the middle of the greedy output cuts it exactly there
    free = completion(server, max_tokens=16)["choices"][0]["text"]
    stop = free[5:12]
    cut = completion(server, max_tokens=16, stop=[stop])
    assert cut["choices"][0]["text"] == free[:free.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"


def test_seed_makes_sampling_repeatable(server):
    body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 1.0}
    a = completion(server, **body, seed=7)["choices"][0]["text"]
    b = completion(server, **body, seed=7)["choices"][0]["text"]
    assert a == b
    others = {completion(server, **body, seed=s)["choices"][0]["text"] for s in (8, 9, 10)}
    assert others != {a}


def test_sampling_fields_are_accepted(server):
    r = completion(server, temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, presence_penalty=0.5,
                   frequency_penalty=0.5, repetition_penalty=1.1, seed=1, max_tokens=4)
    assert r["usage"]["completion_tokens"] == 4
    assert completion(server, max_tokens=0)["choices"][0] == {"index": 0, "text": "", "logprobs": None,
                                                              "finish_reason": "length"}


def test_completion_logprobs(server):
    r = completion(server, logprobs=3, max_tokens=6)
    lp = r["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 6
    for tok, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert value <= 0
        assert 1 <= len(top) <= 3 and all(v <= 0 for v in top.values())
        assert abs(max(top.values()) - value) < 1e-4  # greedy picks the most likely token
    assert "".join(lp["tokens"]) == r["choices"][0]["text"]


def test_chat_logprobs_stream_one_entry_per_chunk(server):
    body = {"messages": [{"role": "user", "content": "Count to three."}], "max_tokens": 6, "logprobs": True,
            "top_logprobs": 2, **GREEDY}
    r = chat(server, **body)
    content = r["choices"][0]["logprobs"]["content"]
    assert len(content) == r["usage"]["completion_tokens"]
    for e in content:
        assert e["logprob"] <= 0 and len(e["top_logprobs"]) == 2 and isinstance(e["bytes"], list)
    events, _ = server.stream("/v1/chat/completions", dict(body, stream=True))
    per_chunk = [e["choices"][0]["logprobs"] for e in events[1:-1] if e["choices"] and e["choices"][0]["logprobs"]]
    assert len(per_chunk) == len(content)
    assert all(len(x["content"]) == 1 for x in per_chunk)
    assert [x["content"][0]["token"] for x in per_chunk] == [e["token"] for e in content]


def test_sieve_extension_chooses_the_policy(server):
    r = completion(server, sieve={"policy": "dense"}, max_tokens=2)
    assert r["sieve"]["policy"].startswith("dense")
    assert 0 <= r["sieve"]["selected_fraction"] <= 1
    status, err, _ = server.post("/v1/completions", {"prompt": PROMPT, "sieve": {"policy": "dense", "no_such_knob": 1}})
    assert status == 400 and "no_such_knob" in err["error"]["message"] and err["error"]["param"] == "sieve"
    status, err, _ = server.post("/v1/completions", {"prompt": PROMPT, "sieve": {"policy": "magic"}})
    assert status == 400 and "magic" in err["error"]["message"]


def test_tokenize_and_detokenize(server):
    status, t, _ = server.post("/tokenize", {"content": "Hello world", "add_special": False})
    assert status == 200 and t["count"] == len(t["tokens"]) > 0 and t["max_model_len"] == 1024
    status, d, _ = server.post("/detokenize", {"tokens": t["tokens"]})
    assert status == 200 and d["content"] == "Hello world"
    status, p, _ = server.post("/tokenize", {"content": "Hello world", "add_special": False, "with_pieces": True})
    assert [x["id"] for x in p["tokens"]] == t["tokens"]
    assert "".join(x["piece"] for x in p["tokens"]) == "Hello world"
    # messages are rendered with the chat template, as /v1/chat/completions does
    msgs = [{"role": "user", "content": "Name a color."}]
    status, m, _ = server.post("/tokenize", {"messages": msgs})
    assert status == 200
    r = chat(server, messages=msgs, max_tokens=1)
    assert m["count"] == r["usage"]["prompt_tokens"]


def test_context_length_exceeded(server):
    for n in (1024, 1500):
        status, r, _ = server.post("/v1/completions", {"prompt": [1] * n, "max_tokens": 1})
        assert status == 400
        e = r["error"]
        assert e["code"] == "context_length_exceeded" and e["type"] == "invalid_request_error"
        assert e["n_prompt_tokens"] == n and e["n_ctx"] == 1024
        assert "exceeds the available context size" in e["message"]
    # one token short of the context: one token is generated, finish_reason length
    r = completion(server, prompt=[1] * 1023, max_tokens=5)
    assert r["usage"]["completion_tokens"] == 1 and r["choices"][0]["finish_reason"] == "length"


def test_metrics_exposition(server):
    completion(server, max_tokens=3)
    m = server.metrics()
    for name in ("sieve_requests_in_flight", "sieve_kv_pages_used", "sieve_kv_pages_total",
                 "sieve_sparse_selected_fraction", "sieve_selection_cache_hit_rate", "sieve_prompt_tokens_total",
                 "sieve_generation_tokens_total", "sieve_time_to_first_token_seconds_count",
                 "sieve_inter_token_latency_seconds_count", "sieve_requests_running", "sieve_requests_waiting"):
        assert name in m, name
    assert m["sieve_time_to_first_token_seconds_count"] >= 1
    assert m["sieve_inter_token_latency_seconds_count"] >= 2
    assert m['sieve_request_success_total{finish_reason="length"}'] >= 1
    assert m['sieve_http_requests_total{endpoint="completions",code="200"}'] >= 1
    status, text, headers = server.get("/metrics")
    assert headers["Content-Type"].startswith("text/plain")
    assert "# TYPE sieve_time_to_first_token_seconds histogram" in text


def test_pings_and_prefill_progress(make_server):
    # A long prompt prefilled in small steps, so the stream is silent for a while.
    s = make_server("--max-batch-tokens", "8", "--ping-interval", "0.05", "--progress-interval", "0.05")
    body = {"prompt": "word " * 200, "max_tokens": 2, "stream": True, **GREEDY}
    events, comments = s.stream("/v1/completions", dict(body, return_progress=True))
    progress = [e["prompt_progress"] for e in events[:-1] if "prompt_progress" in e]
    assert progress, "no prompt_progress event"
    assert all(p["total"] == progress[0]["total"] > 190 and p["time_ms"] >= 0 for p in progress)
    done = [p["processed"] for p in progress if "processed" in p]
    assert done == sorted(done) and all(0 <= d <= progress[0]["total"] for d in done)
    assert stream_text(events, False)[1] == "length"
    # without return_progress: SSE comment pings keep the silent stream alive
    events, comments = s.stream("/v1/completions", dict(body, prompt="other " * 200))
    assert comments and all(c == ": ping" for c in comments)
    assert not any("prompt_progress" in e for e in events[:-1])
    assert stream_text(events, False)[1] == "length"


def test_client_disconnect_cancels_and_frees_kv(server):
    for stream in (True, False):
        body = {"prompt": "Tell me a long story.", "max_tokens": 900, "ignore_eos": True, "stream": stream, **GREEDY}
        sock = socket.create_connection(("127.0.0.1", server.port))
        data = json.dumps(body).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
        if stream:
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        else:
            time.sleep(0.5)
        before = server.metrics()["sieve_client_disconnects_total"]
        sock.close()
        deadline = time.time() + 3
        while time.time() < deadline:
            m = server.metrics()
            if m["sieve_requests_in_flight"] == 0 and m["sieve_kv_sequences"] == 0:
                break
            time.sleep(0.05)
        assert m["sieve_requests_in_flight"] == 0 and m["sieve_kv_sequences"] == 0, m
        assert m["sieve_client_disconnects_total"] == before + 1
        assert m["sieve_requests_running"] == 0
    assert server.healthy()


def test_keep_alive_connection_serves_several_requests(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    for _ in range(3):
        conn.request("POST", "/v1/completions", body=json.dumps({"prompt": PROMPT, "max_tokens": 1, **GREEDY}),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["usage"]["completion_tokens"] == 1
    conn.close()
