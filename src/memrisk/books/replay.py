"""A provider that answers from a recorded `requests.jsonl` of an earlier `memrisk books run`, so studies of
book runs can be replayed offline, exactly and at no cost.

A request is matched to recorded responses by its conversation key: the SHA-256 of its messages and
its generation settings. Several recorded answers to one key are given in recorded order. Nothing is
ever made up: a request the log does not answer is a MemriskError naming the key and the log.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from pathlib import Path

from memrisk.books.providers import ChatResponse, GenerationSettings, Usage
from memrisk.books.session import messages_digest
from memrisk.errors import MemriskError
from memrisk.store import read_request_log


def conversation_key(digest: str, settings: dict) -> str:
    """The key a request is replayed under: its messages digest and its settings (as logged)."""
    return f"{digest}|{json.dumps(settings, sort_keys=True)}"


class ReplayProvider:
    """Answers each request with the next recorded response of the same conversation key."""

    name = "replay"

    def __init__(self, log: str | Path, model: str) -> None:
        self.log, self.model = Path(log), model
        self._answers: dict[str, deque[ChatResponse]] = {}
        for entry in read_request_log(self.log):
            if entry.get("event") == "response":
                response = ChatResponse(
                    tuple(entry["texts"]), tuple(entry["finish_reasons"]), Usage(**entry["usage"]), entry["status"],
                    entry.get("response_model", ""), entry.get("metadata", {}),
                )
                self._answers.setdefault(conversation_key(entry["messages_sha256"], entry["settings"]), deque()).append(response)
        if not self._answers:
            raise MemriskError(f"the request log {self.log} holds no responses to replay")
        self._lock = threading.Lock()

    def complete(self, messages: list[dict[str, str]], settings: GenerationSettings) -> ChatResponse:
        """The recorded response to this conversation under these settings."""
        key = conversation_key(messages_digest(messages), settings.as_dict())
        with self._lock:
            recorded = self._answers.get(key)
            if not recorded:
                raise MemriskError(
                    f"the request log {self.log} has {'no more answers' if recorded is not None else 'no answer'} to conversation "
                    f"{key} (messages SHA-256 | settings); replay only the run that recorded it, with its books and settings"
                )
            return recorded.popleft()
