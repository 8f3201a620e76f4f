"""Anthropic and Gemini providers end to end through their official SDKs.

Each SDK is pointed (via the provider's `base_url`) at `FakeAPI`, a stdlib `ThreadingHTTPServer`
on 127.0.0.1 that records every request and answers from a queue of scripted replies in the wire
format of the Anthropic Messages API (`POST /v1/messages`) or the Gemini API
(`POST /{version}/models/{model}:generateContent`). The tests check what the SDKs send (key
header, body), how answers map onto `ChatResponse`, and how HTTP failures, slow answers and
refused connections map onto `ProviderError` kinds, with SDK retries off (one request each).
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memrisk.books.config import parse_books_config
from memrisk.books.providers import (
    AnthropicProvider,
    GeminiProvider,
    GenerationSettings,
    OpenAIProvider,
    ProviderError,
    Usage,
    make_provider,
)
from memrisk.books.run import run_books
from memrisk.errors import MemriskError

ANTHROPIC_ENV, ANTHROPIC_KEY = "MEMRISK_TEST_ANTHROPIC_KEY", "sk-ant-test-0123"
GEMINI_ENV, GEMINI_KEY = "MEMRISK_TEST_GEMINI_KEY", "gemini-test-key-4567"
CONVERSATION = [
    {"role": "user", "content": "Continue: It was the best of times"},
    {"role": "assistant", "content": "it was the worst of times"},
    {"role": "user", "content": "Go on."},
]


@dataclass
class Reply:
    """One scripted answer: HTTP status, JSON body, and seconds to wait before sending it."""

    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Recorded:
    """One request as the server saw it (header names lower-cased)."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeAPI:
    """A local JSON API answering POSTs from `replies` (first in, first out) and recording them."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.replies: deque[Reply] = deque()
        self.stopping = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                api.requests.append(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                reply = api.replies.popleft() if api.replies else Reply(500, {"error": "no reply scripted"})
                if reply.delay and api.stopping.wait(reply.delay):
                    return
                data = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def queue(self, *replies: Reply) -> None:
        """Script the next answers."""
        self.replies.extend(replies)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAPI]:
    """A running `FakeAPI`, test keys in the environment, and no proxy or Vertex settings in the way."""
    monkeypatch.setenv(ANTHROPIC_ENV, ANTHROPIC_KEY)
    monkeypatch.setenv(GEMINI_ENV, GEMINI_KEY)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "*")
    for name in ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_GENAI_API_VERSION", "GOOGLE_GENAI_HTTP_CLIENT"):
        monkeypatch.delenv(name, raising=False)
    fake = FakeAPI()
    fake.thread.start()
    yield fake
    fake.stopping.set()
    fake.server.shutdown()
    fake.server.server_close()
    fake.thread.join(timeout=5)


def anthropic(api: FakeAPI, timeout_s: float = 10.0) -> AnthropicProvider:
    """An Anthropic provider talking to `api`."""
    return AnthropicProvider("claude-test", base_url=api.url, api_key_env=ANTHROPIC_ENV, timeout_s=timeout_s)


def gemini(api: FakeAPI, timeout_s: float = 10.0) -> GeminiProvider:
    """A Gemini provider talking to `api`."""
    return GeminiProvider("gemini-test", base_url=api.url, api_key_env=GEMINI_ENV, timeout_s=timeout_s)


def message(text: str, stop_reason: str = "end_turn", input_tokens: int = 20, output_tokens: int = 7, cached: int | None = None) -> Reply:
    """A successful Anthropic Messages answer."""
    usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    if cached is not None:
        usage["cache_read_input_tokens"] = cached
    return Reply(body={
        "id": "msg_test", "type": "message", "role": "assistant", "model": "claude-test-20250101",
        "content": [{"type": "text", "text": text}], "stop_reason": stop_reason, "stop_sequence": None, "usage": usage,
    })


def sent_anthropic_key(request: Recorded) -> str | None:
    """The key the Anthropic SDK sent: as `x-api-key` (older SDKs) or `Authorization: Bearer` (newer ones)."""
    bearer = request.headers.get("authorization", "")
    return request.headers.get("x-api-key") or (bearer.removeprefix("Bearer ") if bearer.startswith("Bearer ") else None)


def anthropic_error(status: int, error_type: str) -> Reply:
    """An Anthropic error answer."""
    return Reply(status, {"type": "error", "error": {"type": error_type, "message": f"injected {error_type}"}})


def generated(*candidates: tuple[str, str], usage: dict[str, int] | None = None) -> Reply:
    """A successful Gemini generateContent answer with (text, finishReason) candidates."""
    return Reply(body={
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": reason, "index": i}
            for i, (text, reason) in enumerate(candidates)
        ],
        "usageMetadata": usage or {"promptTokenCount": 11, "candidatesTokenCount": 4, "totalTokenCount": 15},
        "modelVersion": "gemini-test-001",
    })


def google_error(status: int, name: str) -> Reply:
    """A Google API error answer."""
    return Reply(status, {"error": {"code": status, "message": f"injected {name}", "status": name}})


# --- Anthropic -------------------------------------------------------------------------------


def test_anthropic_request_and_response(api: FakeAPI) -> None:
    api.queue(message("it was the age of wisdom", input_tokens=30, output_tokens=6, cached=12))
    response = anthropic(api).complete(CONVERSATION, GenerationSettings(temperature=0.0, max_tokens=250))

    assert response.texts == ("it was the age of wisdom",)
    assert response.text == "it was the age of wisdom"
    assert response.finish_reasons == ("end_turn",)
    assert response.usage == Usage(input=42, output=6, cached_input=12)
    assert response.status == 200
    assert response.model == "claude-test-20250101"

    (request,) = api.requests
    assert request.path == "/v1/messages"
    assert sent_anthropic_key(request) == ANTHROPIC_KEY
    assert "anthropic-version" in request.headers
    assert request.body["model"] == "claude-test"
    assert request.body["max_tokens"] == 250
    assert request.body["temperature"] == 0.0
    assert request.body["messages"] == CONVERSATION


def test_temperature_none_is_not_sent(api: FakeAPI) -> None:
    api.queue(message("it was", input_tokens=3, output_tokens=2))
    anthropic(api).complete(CONVERSATION, GenerationSettings(temperature=None, max_tokens=8))
    api.queue(Reply(body={"candidates": [{"content": {"parts": [{"text": "it was"}], "role": "model"}, "finishReason": "STOP"}]}))
    gemini(api).complete(CONVERSATION, GenerationSettings(temperature=None, max_tokens=8))
    anthropic_request, gemini_request = api.requests
    assert "temperature" not in anthropic_request.body and anthropic_request.body["max_tokens"] == 8
    assert "temperature" not in gemini_request.body["generationConfig"] and gemini_request.body["generationConfig"]["maxOutputTokens"] == 8


def test_anthropic_candidates_are_separate_requests_with_summed_usage(api: FakeAPI) -> None:
    api.queue(
        message("first", input_tokens=10, output_tokens=3),
        message("second", "max_tokens", input_tokens=10, output_tokens=5, cached=8),
        message("third", input_tokens=10, output_tokens=4, cached=8),
    )
    response = anthropic(api).complete(CONVERSATION, GenerationSettings(temperature=1.0, max_tokens=5, candidates=3))

    assert response.texts == ("first", "second", "third")
    assert response.finish_reasons == ("end_turn", "max_tokens", "end_turn")
    assert response.usage == Usage(input=46, output=12, cached_input=16)
    assert len(api.requests) == 3
    assert all(r.body["temperature"] == 1.0 and r.body["max_tokens"] == 5 for r in api.requests)


@pytest.mark.parametrize(
    ("status", "error_type", "kind"),
    [
        (429, "rate_limit_error", "rate_limit"),
        (500, "api_error", "server"),
        (529, "overloaded_error", "server"),
        (400, "invalid_request_error", "client"),
        (401, "authentication_error", "client"),
    ],
)
def test_anthropic_http_errors(api: FakeAPI, status: int, error_type: str, kind: str) -> None:
    api.queue(anthropic_error(status, error_type))
    with pytest.raises(ProviderError) as caught:
        anthropic(api).complete(CONVERSATION, GenerationSettings())
    assert (caught.value.kind, caught.value.status) == (kind, status)
    assert str(status) in str(caught.value)
    assert ANTHROPIC_KEY not in str(caught.value)
    assert len(api.requests) == 1  # no SDK retries


def test_anthropic_timeout(api: FakeAPI) -> None:
    api.queue(Reply(body=message("too late").body, delay=2.0))
    with pytest.raises(ProviderError) as caught:
        anthropic(api, timeout_s=0.5).complete(CONVERSATION, GenerationSettings())
    assert caught.value.kind == "timeout"
    assert caught.value.status is None
    assert len(api.requests) == 1


# --- Gemini ----------------------------------------------------------------------------------


def test_gemini_request_and_response(api: FakeAPI) -> None:
    api.queue(generated(
        ("it was the age of wisdom", "STOP"),
        usage={"promptTokenCount": 40, "candidatesTokenCount": 6, "cachedContentTokenCount": 32, "thoughtsTokenCount": 9},
    ))
    settings = GenerationSettings(temperature=0.0, max_tokens=2000, frequency_penalty=2.0, presence_penalty=0.1)
    response = gemini(api).complete(CONVERSATION, settings)

    assert response.texts == ("it was the age of wisdom",)
    assert response.finish_reasons == ("STOP",)
    assert response.usage == Usage(input=40, output=15, cached_input=32)
    assert response.status == 200
    assert response.model == "gemini-test-001"

    (request,) = api.requests
    assert re.fullmatch(r"/v1(beta)?/models/gemini-test:generateContent", request.path)
    assert request.headers["x-goog-api-key"] == GEMINI_KEY
    assert [c["role"] for c in request.body["contents"]] == ["user", "model", "user"]
    assert [c["parts"] for c in request.body["contents"]] == [[{"text": m["content"]}] for m in CONVERSATION]
    assert request.body["generationConfig"] == {
        "temperature": 0.0, "maxOutputTokens": 2000, "candidateCount": 1, "frequencyPenalty": 2.0, "presencePenalty": 0.1,
    }


def test_gemini_candidates_in_one_request(api: FakeAPI) -> None:
    api.queue(generated(("first", "STOP"), ("second", "MAX_TOKENS")))
    response = gemini(api).complete(CONVERSATION, GenerationSettings(temperature=0.7, max_tokens=4, candidates=2))

    assert response.texts == ("first", "second")
    assert response.finish_reasons == ("STOP", "MAX_TOKENS")
    assert response.usage == Usage(input=11, output=4, cached_input=None)
    (request,) = api.requests
    config = request.body["generationConfig"]
    assert (config["candidateCount"], config["temperature"], config["maxOutputTokens"]) == (2, 0.7, 4)
    assert "frequencyPenalty" not in config and "presencePenalty" not in config


def test_gemini_blocked_prompt_has_no_candidates(api: FakeAPI) -> None:
    api.queue(Reply(body={"promptFeedback": {"blockReason": "OTHER"}, "usageMetadata": {"promptTokenCount": 9}}))
    response = gemini(api).complete(CONVERSATION, GenerationSettings())
    assert response.texts == ("",)
    assert response.finish_reasons == ("empty",)
    assert response.usage == Usage(input=9, output=0, cached_input=None)
    assert response.model == "gemini-test"
    assert "OTHER" in response.metadata["prompt_feedback"]


def thinking_config(body: dict[str, Any]) -> dict[str, Any] | None:
    """generationConfig.thinkingConfig in camel case (proto JSON takes both spellings; google-genai 3 writes
    the inner fields in snake case, older releases in camel case)."""
    config = body["generationConfig"].get("thinkingConfig")
    return None if config is None else {re.sub(r"_(\w)", lambda m: m.group(1).upper(), k): v for k, v in config.items()}


def gemini_run(api: FakeAPI, tmp_path: Any, **model: Any) -> list[dict[str, Any]]:
    """A books run of a Gemini model against `api`: Phase 1 meets its target, Phase 2 stops at once; the request bodies."""
    words = [f"w{i}" for i in range(80)]
    (tmp_path / "book.txt").write_text(" ".join(words))
    api.queue(generated((" ".join(words[30:60]), "STOP")), generated(("w60 w61 THE END", "STOP")))
    config = parse_books_config({
        "model": {"provider": "gemini", "base_url": api.url, "api_key_env": GEMINI_ENV, "price": {"input": 1, "cached_input": 0.25, "output": 10}, **model},
        "books": [{"name": "b", "path": "book.txt"}], "spend_cap_usd": 1.0,
    }, tmp_path)
    run_books(config, tmp_path / "run", progress=False)
    assert all(re.fullmatch(rf"/v1(beta)?/models/{model['name']}:generateContent", r.path) for r in api.requests)
    return [r.body for r in api.requests]


def test_gemini_2_5_pro_runs_with_the_papers_settings(api: FakeAPI, tmp_path) -> None:
    """Books §4.3 and App. C.2.1: thinking budget at its minimum (128 for 2.5 Pro, which cannot turn thinking
    off), "Continue without citation metadata.", 2000 tokens, penalties 2.0 / 0.1, temperature 0."""
    phase1, phase2 = gemini_run(api, tmp_path, name="gemini-2.5-pro")
    assert thinking_config(phase1) == thinking_config(phase2) == {"thinkingBudget": 128}
    assert {k: v for k, v in phase1["generationConfig"].items() if k != "thinkingConfig"} == {
        "temperature": 0.0, "maxOutputTokens": 1000, "candidateCount": 1,
    }
    assert {k: v for k, v in phase2["generationConfig"].items() if k != "thinkingConfig"} == {
        "temperature": 0.0, "maxOutputTokens": 2000, "candidateCount": 1, "frequencyPenalty": 2.0, "presencePenalty": 0.1,
    }
    assert phase2["contents"][-1] == {"role": "user", "parts": [{"text": "Continue without citation metadata."}]}


@pytest.mark.parametrize(
    ("model", "thinking"),
    [
        ({"name": "gemini-2.5-flash"}, {"thinkingBudget": 0}),
        ({"name": "gemini-2.5-flash-lite"}, {"thinkingBudget": 0}),
        ({"name": "gemini-2.5-pro", "thinking_budget": 1024}, {"thinkingBudget": 1024}),
        ({"name": "gemini-2.5-pro", "thinking_budget": -1}, {"thinkingBudget": -1}),
        ({"name": "gemini-2.5-pro", "thinking_budget": None}, None),
        ({"name": "gemini-2.0-flash"}, None),
    ],
)
def test_gemini_thinking_budget_setting(api: FakeAPI, tmp_path, model: dict[str, Any], thinking: dict[str, int] | None) -> None:
    for body in gemini_run(api, tmp_path, **model):
        assert thinking_config(body) == thinking


@pytest.mark.parametrize(
    ("model", "problem"),
    [
        ({"name": "gpt-4.1", "thinking_budget": 128}, r"model: thinking_budget 128 is a gemini setting; the openai provider takes none"),
        ({"provider": "gemini", "name": "gemini-2.5-pro", "thinking_budget": -2}, r"model.thinking_budget: .*got -2"),
        ({"provider": "gemini", "name": "gemini-2.5-pro", "thinking_budget": "max"}, r"model.thinking_budget: .*got 'max'"),
    ],
)
def test_thinking_budget_is_checked(model: dict[str, Any], problem: str) -> None:
    with pytest.raises(MemriskError, match=problem):
        parse_books_config({"model": model, "books": [{"name": "b", "path": "b.txt"}], "spend_cap_usd": 1})


@pytest.mark.parametrize(
    ("status", "name", "kind"),
    [
        (429, "RESOURCE_EXHAUSTED", "rate_limit"),
        (500, "INTERNAL", "server"),
        (503, "UNAVAILABLE", "server"),
        (400, "INVALID_ARGUMENT", "client"),
        (403, "PERMISSION_DENIED", "client"),
    ],
)
def test_gemini_http_errors(api: FakeAPI, status: int, name: str, kind: str) -> None:
    api.queue(google_error(status, name))
    with pytest.raises(ProviderError) as caught:
        gemini(api).complete(CONVERSATION, GenerationSettings())
    assert (caught.value.kind, caught.value.status) == (kind, status)
    assert f"injected {name}" in str(caught.value)
    assert GEMINI_KEY not in str(caught.value)
    assert len(api.requests) == 1  # no SDK retries


def test_gemini_timeout(api: FakeAPI) -> None:
    api.queue(Reply(body=generated(("too late", "STOP")).body, delay=2.0))
    with pytest.raises(ProviderError) as caught:
        gemini(api, timeout_s=0.5).complete(CONVERSATION, GenerationSettings())
    assert caught.value.kind == "timeout"
    assert "timed out" in str(caught.value)
    assert len(api.requests) == 1


def test_refused_connection_is_retryable(api: FakeAPI) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    for provider in (
        AnthropicProvider("claude-test", base_url=closed, api_key_env=ANTHROPIC_ENV, timeout_s=2.0),
        GeminiProvider("gemini-test", base_url=closed, api_key_env=GEMINI_ENV, timeout_s=2.0),
    ):
        with pytest.raises(ProviderError) as caught:
            provider.complete(CONVERSATION, GenerationSettings())
        assert caught.value.kind == "timeout", provider.name
        assert "connection failed" in str(caught.value)


# --- keys and construction -------------------------------------------------------------------


@pytest.mark.parametrize("cls", [OpenAIProvider, AnthropicProvider, GeminiProvider])
def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch, cls: type) -> None:
    monkeypatch.delenv("MEMRISK_TEST_UNSET_KEY", raising=False)
    with pytest.raises(MemriskError, match="MEMRISK_TEST_UNSET_KEY"):
        cls("some-model", base_url="http://127.0.0.1:9", api_key_env="MEMRISK_TEST_UNSET_KEY")


def test_make_provider(api: FakeAPI) -> None:
    provider = make_provider("anthropic", "claude-test", base_url=api.url, api_key_env=ANTHROPIC_ENV, timeout_s=5.0)
    assert isinstance(provider, AnthropicProvider) and provider.name == "anthropic"
    api.queue(message("ok"))
    assert provider.complete(CONVERSATION, GenerationSettings()).texts == ("ok",)
    assert sent_anthropic_key(api.requests[0]) == ANTHROPIC_KEY

    provider = make_provider("gemini", "gemini-test", base_url=api.url, api_key_env=GEMINI_ENV)
    assert isinstance(provider, GeminiProvider) and provider.model == "gemini-test"

    with pytest.raises(MemriskError, match="nope"):
        make_provider("nope", "m")
