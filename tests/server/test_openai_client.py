"""The stock `openai` Python client against `sieve serve`: both endpoints, streaming and not."""
import pytest

openai = pytest.importorskip("openai")

KEY = "test-key-123456"


@pytest.fixture(scope="module")
def client(keyed_server):
    return openai.OpenAI(base_url=keyed_server.base + "/v1", api_key=KEY, max_retries=0, timeout=120)


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["smollm2"]


def test_completions(client):
    r = client.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=8, temperature=0,
                                  seed=1)
    assert r.object == "text_completion"
    assert "Paris" in r.choices[0].text and r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 8 and r.usage.prompt_tokens > 0
    assert r.usage.prompt_tokens_details.cached_tokens >= 0
    stream = client.completions.create(model="smollm2", prompt="The capital of France is", max_tokens=8,
                                       temperature=0, stream=True, stream_options={"include_usage": True})
    text, finish, usage = "", None, None
    for chunk in stream:
        for c in chunk.choices:
            text += c.text
            finish = c.finish_reason or finish
        usage = chunk.usage or usage
    assert text == r.choices[0].text and finish == "length"
    assert usage.completion_tokens == 8


def test_chat(client):
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a fruit."}]
    r = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=10, temperature=0, logprobs=True,
                                       top_logprobs=2)
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert len(c.logprobs.content) == r.usage.completion_tokens
    assert all(len(t.top_logprobs) == 2 for t in c.logprobs.content)
    stream = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=10, temperature=0,
                                            stream=True)
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert text == c.message.content and finish == c.finish_reason


def test_extra_body_and_errors(client):
    r = client.completions.create(model="smollm2", prompt="Hi", max_tokens=2, temperature=0,
                                  extra_body={"top_k": 5, "min_p": 0.1, "sieve": {"policy": "dense"}})
    assert r.usage.completion_tokens <= 2
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="smollm2", prompt="Hi", max_tokens=-3)
    assert e.value.status_code == 400 and "max_tokens" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="smollm2", prompt=[1] * 1100, max_tokens=1)
    assert e.value.code == "context_length_exceeded"
    bad = openai.OpenAI(base_url=client.base_url, api_key="wrong-key-000", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
