"""One run's gateway to a chat API: every request and response goes to the append-only log,
answers already in the log are replayed instead of paid for again, a spend cap is checked
against a worst-case bound before each request, and rate limits and timeouts are retried
with exponential backoff."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memrisk.books.costs import Price, cost, request_bound
from memrisk.books.providers import (
    ChatProvider,
    ChatResponse,
    GenerationSettings,
    ProviderError,
    Usage,
    timed,
)
from memrisk.errors import MemriskError
from memrisk.store import RequestLog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for 429s and timeouts: delays initial·factor^i, capped, at most `max_retries` retries."""

    max_retries: int = 8
    initial_delay_s: float = 1.0
    factor: float = 2.0
    max_delay_s: float = 60.0

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (0-based)."""
        return min(self.initial_delay_s * self.factor**retry, self.max_delay_s)


@dataclass(frozen=True)
class Answer:
    """A request's outcome: a response (fresh or replayed from the log) or why the run must halt."""

    key: str
    response: ChatResponse | None
    halt: str | None = None
    replayed: bool = False


def messages_digest(messages: list[dict[str, str]]) -> str:
    """SHA-256 of a conversation, to check that a replayed answer belongs to the same request."""
    return hashlib.sha256(json.dumps(messages, ensure_ascii=False).encode("utf-8")).hexdigest()


class Session:
    """Sends one run's requests (thread-safe): log, replay, spend cap, backoff."""

    def __init__(
        self, provider: ChatProvider, request_log: RequestLog, price: Price, *, spend_cap: float | None = None,
        retry: RetryPolicy = RetryPolicy(), sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.provider, self.log, self.price, self.spend_cap, self.retry, self.sleep = provider, request_log, price, spend_cap, retry, sleep
        entries = request_log.entries()
        self._answers = {e["key"]: e for e in entries if e.get("event") == "response"}
        self.spent = sum(e["cost"] for e in self._answers.values())
        self.sent = 0
        self._reserved = 0.0
        self._lock = threading.Lock()

    def record(self, event: str, **fields: Any) -> None:
        """Append an event (halt, match, phase result, ...) to the log."""
        with self._lock:
            self.log.append({"event": event, "time": time.time(), "model": self.provider.model, **fields})

    def ask(self, key: str, conversation: str, messages: list[dict[str, str]], settings: GenerationSettings) -> Answer:
        """The answer to `messages` under the unique request `key` (replayed when logged)."""
        digest = messages_digest(messages)
        if key in self._answers:
            return self._replay(key, digest)
        bound = request_bound(messages, settings.max_tokens, settings.candidates, self.price)
        with self._lock:
            if self.spend_cap is not None and self.spent + self._reserved + bound > self.spend_cap:
                halt = True
            else:
                halt = False
                self._reserved += bound
        if halt:
            self.record("halt", key=key, reason="spend_cap", spent=self.spent, next_request_bound=bound, spend_cap=self.spend_cap)
            return Answer(key, None, "spend_cap")
        try:
            return self._send(key, conversation, messages, settings, digest)
        finally:
            with self._lock:
                self._reserved -= bound

    def _replay(self, key: str, digest: str) -> Answer:
        entry = self._answers[key]
        if entry["messages_sha256"] != digest:
            raise MemriskError(f"the request log answers {key} for a different conversation; start a new --out folder")
        response = ChatResponse(
            tuple(entry["texts"]), tuple(entry["finish_reasons"]), Usage(**entry["usage"]), entry["status"],
            entry.get("response_model", ""), entry.get("metadata", {}),
        )
        return Answer(key, response, replayed=True)

    def _send(self, key: str, conversation: str, messages: list[dict[str, str]], settings: GenerationSettings, digest: str) -> Answer:
        common = {"key": key, "conversation": conversation, "provider": self.provider.name, "settings": settings.as_dict(), "messages_sha256": digest}
        attempt = 0
        while True:
            self.record("request", attempt=attempt, messages=len(messages), new_message=messages[-1]["content"], **common)
            with self._lock:
                self.sent += 1
            try:
                response, latency = timed(self.provider, messages, settings)
            except ProviderError as exc:
                retryable = exc.kind in ("rate_limit", "timeout") and attempt < self.retry.max_retries
                self.record("error", attempt=attempt, kind=exc.kind, status=exc.status, message=str(exc), **common)
                if retryable:
                    delay = self.retry.delay(attempt)
                    log.info("%s: %s, retrying in %.1f s", key, exc.kind, delay)
                    self.sleep(delay)
                    attempt += 1
                    continue
                reason = {"server": "http_5xx", "client": "http_error"}.get(exc.kind, "retries_exhausted")
                self.record("halt", reason=reason, status=exc.status, **common)
                return Answer(key, None, reason)
            price = cost(response.usage, self.price)
            entry = {
                "event": "response", "time": time.time(), "model": self.provider.model, "attempt": attempt, **common,
                "status": response.status, "latency_s": latency, "usage": response.usage.__dict__, "cost": price,
                "texts": list(response.texts), "finish_reasons": list(response.finish_reasons),
                "response_model": response.model, "metadata": response.metadata,
            }
            with self._lock:
                self.log.append(entry)
                self.spent += price
                self._answers[key] = entry
            return Answer(key, response)

    def responses(self) -> list[dict[str, Any]]:
        """Logged response entries (this run and earlier ones of the same folder)."""
        return list(self._answers.values())
