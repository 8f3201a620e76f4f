"""`provider: replay` answers a books run from a recorded request log, exactly and never made up; `provider: local`
lays out conversations for models without a chat template."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from memrisk.books.config import load_books_config
from memrisk.books.providers import ChatResponse, GenerationSettings, Usage
from memrisk.books.replay import ReplayProvider
from memrisk.books.run import run_books
from memrisk.errors import MemriskError
from memrisk.models.backend import plain_chat

WORDS = [f"w{i}" for i in range(300)]


class Recorder:
    """A deterministic fake chat model: a Phase 1 prompt whose digest is 0 mod 3 (mod 5 at a temperature > 0) gets the
    book's next words; Phase 2 turns continue the book 40 words at a time."""

    name = "fake"
    model = "fake-1"

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages: list[dict[str, str]], settings: GenerationSettings) -> ChatResponse:
        self.calls += 1
        digest = int(hashlib.sha256(json.dumps(messages).encode()).hexdigest(), 16)
        if len(messages) == 1:
            text = " ".join(WORDS[10:30]) if digest % (3 if not settings.temperature else 5) == 0 else f"no idea {digest % 97}"
        else:
            start = 30 + 40 * (len(messages) // 2 - 1)
            text = " ".join(WORDS[start : start + 40])
        return ChatResponse((text,), ("stop",), Usage(input=10 * len(messages), output=len(text.split())), 200, self.model)


def write_config(folder, model: dict, **phase1) -> str:
    (folder / "book.txt").write_text(" ".join(WORDS))
    data = {
        "model": {"name": "fake-1", "price": {"input": 2.0, "cached_input": 0.5, "output": 8.0}, "turns": 4, **model},
        "spend_cap_usd": 5.0, "books": [{"name": "b", "path": "book.txt"}, {"name": "c", "path": "book.txt", "prefix": "w100 w101",
                                                                             "target": "w102 w103 w104"}],
        "phase1": {"perturb": True, "attempts": 12, "concurrency": 3, "prefix_words": 10, "target_words": 20, **phase1},
    }
    path = folder / "books.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture()
def recorded(tmp_path):
    """A run recorded with the fake model, and its summary."""
    config = load_books_config(write_config(tmp_path, {}))
    recorder = Recorder()
    summary = run_books(config, tmp_path / "recorded", provider=recorder, sleep=lambda s: None, progress=False)
    assert recorder.calls > 4
    return tmp_path, summary


def test_replay_reproduces_the_recorded_run_exactly(recorded) -> None:
    folder, summary = recorded
    config = load_books_config(write_config(folder, {"provider": "replay", "log": "recorded/requests.jsonl"}))
    assert config.model.log == str((folder / "recorded" / "requests.jsonl").resolve())
    replayed = run_books(config, folder / "replayed", progress=False)
    assert replayed["books"] == summary["books"]
    assert replayed["costs"] == summary["costs"]
    assert summary["spent_usd"] > 0 and replayed["spent_usd"] == pytest.approx(summary["spent_usd"])
    assert [b["phase1"]["success"] for b in summary["books"]] == [True, False]
    assert replayed["model"] == {"provider": "replay", "name": "fake-1"}
    for name in ("b", "c"):
        assert (folder / "replayed/books" / name / "generation.txt").read_text() == (folder / "recorded/books" / name / "generation.txt").read_text()


def test_a_request_missing_from_the_log_is_one_clear_error(recorded) -> None:
    folder, _ = recorded
    log = folder / "recorded" / "requests.jsonl"
    config = load_books_config(write_config(folder, {"provider": "replay", "log": "recorded/requests.jsonl"}, max_tokens=999))
    with pytest.raises(MemriskError, match=r"has no answer to conversation [0-9a-f]{64}\|\{.*\"max_tokens\": 999.*\}") as caught:
        run_books(config, folder / "other", progress=False)
    assert str(log.resolve()) in str(caught.value)


def test_identical_requests_get_the_recorded_answers_in_order_and_no_more(tmp_path) -> None:
    log = tmp_path / "requests.jsonl"
    settings = GenerationSettings(max_tokens=5)
    messages = [{"role": "user", "content": "hi"}]
    digest = hashlib.sha256(json.dumps(messages, ensure_ascii=False).encode()).hexdigest()
    entries = [{"event": "response", "messages_sha256": digest, "settings": settings.as_dict(), "texts": [text], "finish_reasons": ["stop"],
                "usage": {"input": 3, "output": 1, "cached_input": None}, "status": 200} for text in ("one", "two")]
    log.write_text("".join(json.dumps(e) + "\n" for e in [{"event": "settings"}, *entries]))
    provider = ReplayProvider(log, "m")
    assert [provider.complete(messages, settings).text for _ in range(2)] == ["one", "two"]
    with pytest.raises(MemriskError, match="no more answers"):
        provider.complete(messages, settings)


def test_replay_configs_need_a_log_and_a_log_needs_replay(tmp_path) -> None:
    with pytest.raises(MemriskError, match="provider replay needs log"):
        load_books_config(write_config(tmp_path, {"provider": "replay"}))
    with pytest.raises(MemriskError, match="provider replay needs log"):
        load_books_config(write_config(tmp_path, {"provider": "local", "log": "x.jsonl"}))
    with pytest.raises(MemriskError, match="request log not found"):
        ReplayProvider(tmp_path / "missing.jsonl", "m")


def test_plain_chat_layout_for_models_without_a_template() -> None:
    text = plain_chat([{"role": "user", "content": "Continue: a b"}, {"role": "assistant", "content": "c d"}, {"role": "user", "content": "Continue."}])
    assert text == "User: Continue: a b\n\nAssistant: c d\n\nUser: Continue.\n\nAssistant:"
    with pytest.raises(MemriskError, match="chat role must be one of"):
        plain_chat([{"role": "robot", "content": "x"}])
