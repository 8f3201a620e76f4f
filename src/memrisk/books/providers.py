"""Chat-API providers behind one interface: messages in; texts, finish reasons, usage, status out.

OpenAI-compatible servers (OpenAI, xAI, vLLM, llama.cpp, ...) go through the official `openai`
SDK; Anthropic and Gemini through theirs (optional extras). Keys come only from environment
variables and are never part of a response, a log entry or a record. Failures are mapped to
one `ProviderError` whose `kind` tells the caller what to do: retry (`rate_limit`, `timeout`),
halt (`server`), or give up (`client`).
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from memrisk.errors import MemriskError

ErrorKind = Literal["rate_limit", "timeout", "server", "client"]


@dataclass(frozen=True)
class GenerationSettings:
    """Per-request generation settings (Books App. C.2.1 defaults: temperature 0; None: not sent,
    the model's own default, for models that refuse the parameter). `thinking_budget` is Gemini's
    (Books §4.3 minimises it)."""

    temperature: float | None = 0.0
    max_tokens: int = 500
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    candidates: int = 1
    thinking_budget: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The settings as logged with every request."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class Usage:
    """Tokens billed for one request; `cached_input` is part of `input` (None: not reported)."""

    input: int = 0
    output: int = 0
    cached_input: int | None = None


@dataclass(frozen=True)
class ChatResponse:
    """One answered request: a text per candidate, why each ended, usage and the HTTP status."""

    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...]
    usage: Usage
    status: int = 200
    model: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The first candidate's text."""
        return self.texts[0] if self.texts else ""


class ProviderError(MemriskError):
    """A failed request; `kind` is rate_limit / timeout (retry), server (halt) or client (stop)."""

    def __init__(self, kind: ErrorKind, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


class ChatProvider(Protocol):
    """What the book-extraction loop needs from a chat API."""

    name: str
    model: str

    def complete(self, messages: list[dict[str, str]], settings: GenerationSettings) -> ChatResponse:
        """Answer a conversation (roles `user` / `assistant`) or raise `ProviderError`."""
        ...


def api_key(variable: str) -> str:
    """The API key held in environment variable `variable` (never read from files or configs)."""
    key = os.environ.get(variable)
    if not key:
        raise MemriskError(f"environment variable {variable} is not set; export the API key there")
    return key


def _status_kind(status: int) -> ErrorKind:
    """429 is a rate limit, 408 a timeout, 5xx a server failure, anything else a client error."""
    if status == 429:
        return "rate_limit"
    if status == 408:
        return "timeout"
    return "server" if status >= 500 else "client"


@contextmanager
def _sdk_errors(sdk: Any) -> Iterator[None]:
    """Map the errors the openai and anthropic SDKs share by name to `ProviderError`."""
    try:
        yield
    except sdk.APITimeoutError as exc:
        raise ProviderError("timeout", f"request timed out: {exc}") from exc
    except sdk.APIConnectionError as exc:
        raise ProviderError("timeout", f"connection failed: {exc}") from exc
    except sdk.APIStatusError as exc:
        raise ProviderError(_status_kind(exc.status_code), f"HTTP {exc.status_code}: {exc.message}", exc.status_code) from exc


class OpenAIProvider:
    """Any server speaking OpenAI chat completions, through the official `openai` SDK."""

    name = "openai"

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 120.0) -> None:
        try:
            import openai
        except ImportError as exc:
            raise MemriskError("the openai provider needs the openai package: pip install 'memrisk[books]'") from exc
        self.model = model
        self._openai = openai
        self._client = openai.OpenAI(api_key=api_key(api_key_env), base_url=base_url, timeout=timeout_s, max_retries=0)

    def complete(self, messages: list[dict[str, str]], settings: GenerationSettings) -> ChatResponse:
        """One chat-completions request with `settings.candidates` choices."""
        options: dict[str, Any] = {"max_tokens": settings.max_tokens}
        if settings.candidates > 1:
            options["n"] = settings.candidates
        for name in ("temperature", "frequency_penalty", "presence_penalty"):
            if getattr(settings, name) is not None:
                options[name] = getattr(settings, name)
        with _sdk_errors(self._openai):
            raw = self._client.chat.completions.with_raw_response.create(model=self.model, messages=messages, **options)
        completion = raw.parse()
        usage = completion.usage
        details = getattr(usage, "prompt_tokens_details", None) if usage else None
        return ChatResponse(
            texts=tuple(choice.message.content or "" for choice in completion.choices),
            finish_reasons=tuple(str(choice.finish_reason) for choice in completion.choices),
            usage=Usage(
                input=usage.prompt_tokens if usage else 0,
                output=usage.completion_tokens if usage else 0,
                cached_input=getattr(details, "cached_tokens", None),
            ),
            status=raw.http_response.status_code,
            model=completion.model,
            metadata={"id": completion.id, "system_fingerprint": completion.system_fingerprint},
        )


class AnthropicProvider:
    """Anthropic's Messages API through the `anthropic` SDK (one request per candidate)."""

    name = "anthropic"

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = "ANTHROPIC_API_KEY", timeout_s: float = 120.0) -> None:
        try:
            import anthropic
        except ImportError as exc:
            raise MemriskError("the anthropic provider needs the anthropic package: pip install 'memrisk[anthropic]'") from exc
        self.model = model
        self._anthropic = anthropic
        self._client = anthropic.Anthropic(api_key=api_key(api_key_env), base_url=base_url, timeout=timeout_s, max_retries=0)

    def complete(self, messages: list[dict[str, str]], settings: GenerationSettings) -> ChatResponse:
        """`settings.candidates` Messages requests; usage is their sum."""
        texts, reasons, total = [], [], Usage(0, 0, 0)
        model = self.model
        for _ in range(settings.candidates):
            with _sdk_errors(self._anthropic):
                message = self._client.messages.create(  # anthropic >= 1.0 takes temperature only as extra_body
                    model=self.model, messages=messages, max_tokens=settings.max_tokens,
                    extra_body={} if settings.temperature is None else {"temperature": settings.temperature},
                )
            texts.append("".join(getattr(block, "text", "") for block in message.content))
            reasons.append(str(message.stop_reason))
            cached = getattr(message.usage, "cache_read_input_tokens", None) or 0
            total = Usage(total.input + message.usage.input_tokens + cached, total.output + message.usage.output_tokens, (total.cached_input or 0) + cached)
            model = message.model
        return ChatResponse(tuple(texts), tuple(reasons), total, 200, model)


def _httpx_modules() -> tuple[Any, ...]:
    """The installed httpx flavours (google-genai 3 uses httpx2, older ones httpx); it raises their errors unwrapped."""
    modules = []
    for name in ("httpx", "httpx2"):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            pass
    return tuple(modules)


class GeminiProvider:
    """Google's Gemini API through the `google-genai` SDK."""

    name = "gemini"

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = "GEMINI_API_KEY", timeout_s: float = 120.0) -> None:
        try:
            from google import genai
            from google.genai import errors, types
        except ImportError as exc:
            raise MemriskError("the gemini provider needs the google-genai package: pip install 'memrisk[gemini]'") from exc
        self.model = model
        self._types, self._errors = types, errors
        httpx = _httpx_modules()
        self._timeouts = tuple(module.TimeoutException for module in httpx)
        self._transport_errors = tuple(module.TransportError for module in httpx)
        options = types.HttpOptions(timeout=int(timeout_s * 1000), base_url=base_url)
        self._client = genai.Client(api_key=api_key(api_key_env), http_options=options)

    def complete(self, messages: list[dict[str, str]], settings: GenerationSettings) -> ChatResponse:
        """One generate_content request with `settings.candidates` candidates and, when set, a thinking budget."""
        types = self._types
        contents = [
            types.Content(role="model" if m["role"] == "assistant" else "user", parts=[types.Part(text=m["content"])])
            for m in messages
        ]
        thinking = None if settings.thinking_budget is None else types.ThinkingConfig(thinking_budget=settings.thinking_budget)
        config = types.GenerateContentConfig(
            temperature=settings.temperature, max_output_tokens=settings.max_tokens, candidate_count=settings.candidates,
            frequency_penalty=settings.frequency_penalty, presence_penalty=settings.presence_penalty, thinking_config=thinking,
        )
        try:
            response = self._client.models.generate_content(model=self.model, contents=contents, config=config)
        except self._errors.APIError as exc:
            raise ProviderError(_status_kind(int(exc.code)), f"HTTP {exc.code}: {exc.message}", int(exc.code)) from exc
        except self._timeouts as exc:
            raise ProviderError("timeout", f"request timed out: {exc}") from exc
        except self._transport_errors as exc:
            raise ProviderError("timeout", f"connection failed: {exc}") from exc
        candidates = response.candidates or []
        meta = response.usage_metadata
        return ChatResponse(
            texts=tuple("".join(p.text or "" for p in (c.content.parts or [])) if c.content else "" for c in candidates) or ("",),
            finish_reasons=tuple(c.finish_reason.value if c.finish_reason else "None" for c in candidates) or ("empty",),
            usage=Usage(
                input=(meta.prompt_token_count or 0) if meta else 0,
                output=((meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0)) if meta else 0,
                cached_input=meta.cached_content_token_count if meta else None,
            ),
            model=response.model_version or self.model,
            metadata={"prompt_feedback": str(response.prompt_feedback) if response.prompt_feedback else None},
        )


PROVIDERS = {"openai": OpenAIProvider, "anthropic": AnthropicProvider, "gemini": GeminiProvider}


def make_provider(provider: str, model: str, *, base_url: str | None = None, api_key_env: str | None = None, timeout_s: float = 120.0) -> ChatProvider:
    """A provider by name ("openai", "anthropic", "gemini"); the key is read from `api_key_env`."""
    if provider not in PROVIDERS:
        raise MemriskError(f"unknown provider {provider!r}; choose one of {', '.join(PROVIDERS)}")
    cls = PROVIDERS[provider]
    options: dict[str, Any] = {"base_url": base_url, "timeout_s": timeout_s}
    if api_key_env:
        options["api_key_env"] = api_key_env
    return cls(model, **options)


def timed(provider: ChatProvider, messages: list[dict[str, str]], settings: GenerationSettings) -> tuple[ChatResponse, float]:
    """A completion and its wall-clock latency in seconds."""
    start = time.perf_counter()
    response = provider.complete(messages, settings)
    return response, time.perf_counter() - start
