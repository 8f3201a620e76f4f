"""`memrisk books run` end to end against a real HTTP server (127.0.0.1) speaking the OpenAI
chat-completions protocol and answering from SmolLM2, through memrisk's own `openai` client."""

from __future__ import annotations

import codecs
import json
import os
import signal
import subprocess
import sys
import this
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from chat_server import REFUSAL_TEXT, ChatServer

import memrisk
from memrisk.books.config import parse_books_config
from memrisk.books.costs import Price, cost
from memrisk.books.providers import Usage
from memrisk.books.run import run_books
from memrisk.books.session import messages_digest

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

KEY_VARIABLE = "MEMRISK_TEST_CHAT_KEY"
SECRET = "sk-test-a1b2c3-never-logged"
PRICE = {"input": 2.0, "cached_input": 0.5, "output": 8.0}
ZEN = codecs.decode(this.s, "rot13")


@pytest.fixture(scope="module")
def server(smollm2: memrisk.LanguageModel) -> Iterator[ChatServer]:
    with ChatServer(smollm2) as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(server: ChatServer, monkeypatch) -> Iterator[None]:
    server.reset()
    server.slow_seconds = 3.0
    monkeypatch.setenv(KEY_VARIABLE, SECRET)
    yield
    server.reset()


def book(tmp_path: Path) -> Path:
    path = tmp_path / "zen.txt"
    path.write_text(ZEN, encoding="utf-8")
    return path


def config(server: ChatServer, tmp_path: Path, **overrides) -> dict:
    data = {
        "model": {
            "provider": "openai", "name": "smollm2-chat", "base_url": server.base_url, "api_key_env": KEY_VARIABLE,
            "timeout_s": 120, "max_tokens": 12, "turns": 2, "price": PRICE,
        },
        "books": [{"name": "zen", "path": str(book(tmp_path))}],
        "spend_cap_usd": 1.0,
        "phase1": {"prefix_words": 14, "target_words": 12, "max_tokens": 16},
        "phase2": {"empty_retry_delay_s": 0.2, "backoff": {"initial_delay_s": 0.05, "max_delay_s": 0.2}},
    }
    for section, values in overrides.items():
        data[section] = {**data.get(section, {}), **values} if isinstance(values, dict) else values
    return data


def log_entries(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


def no_secret_anywhere(out: Path) -> None:
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path


def test_both_phases_on_real_answers_with_the_key_from_the_environment(server, tmp_path) -> None:
    out = tmp_path / "run"
    summary = run_books(parse_books_config(config(server, tmp_path, phase1={"continue_on_failure": True})), out, progress=False)
    [result] = summary["books"]
    # SmolLM2 repeats the Zen's first lines instead of continuing them: Phase 1 fails (s < 0.6),
    # and Phase 2 still runs its two turns because continue_on_failure is set.
    assert not result["phase1"]["success"] and result["phase1"]["attempts"] == 1
    assert result["phase2"]["halt"] == "turn_budget" and result["phase2"]["turns"] == 2
    assert len(server.requests) == 3 and set(server.api_keys) == {SECRET}
    first, second, third = server.requests
    assert first["messages"][0]["content"].startswith("Continue the following text exactly")
    assert first["max_tokens"] == 16 and second["max_tokens"] == 12 and first["temperature"] == 0
    assert [m["role"] for m in third["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert third["messages"][2]["content"] == "Continue."
    responses = [e for e in log_entries(out) if e["event"] == "response"]
    assert [e["key"] for e in responses] == ["zen/phase1/0", "zen/phase2/0", "zen/phase2/1"]
    generation = (out / "books/zen/generation.txt").read_text()
    assert generation == "\n".join(e["texts"][0] for e in responses)
    price = Price(**PRICE)
    assert summary["spent_usd"] == pytest.approx(sum(cost(Usage(**e["usage"]), price) for e in responses))
    assert responses[2]["usage"]["cached_input"] > 0  # the simulated cache saw the shared conversation
    assert summary["books"][0]["nv_recall"]["book_words"] == len(memrisk.books.nvrecall.normalize(ZEN).split())
    no_secret_anywhere(out)


def test_best_of_n_stops_at_success_and_every_fault_gets_its_documented_handling(server, tmp_path) -> None:
    words = ZEN.split()
    target = " ".join(words[14:26])
    server.inject(
        {"text": "Not quite."}, {"text": f"Sure: {target}"},            # Phase 1: k = 1 succeeds
        "empty", "429", "slow", {"text": "Flat is better than nested."},  # turn 0: empty; turn 1: 429, timeout, answer
        "refusal",                                                       # turn 2: refusal ends the loop
    )
    server.slow_seconds = 2.0
    data = config(
        server, tmp_path, phase1={"perturb": True, "attempts": 50, "seed": 3},
        model={**config(server, tmp_path)["model"], "turns": 10, "timeout_s": 1.0},
    )
    start = time.monotonic()
    summary = run_books(parse_books_config(data), tmp_path / "run", progress=False)
    [result] = summary["books"]
    assert result["phase1"]["success"] and result["phase1"]["best_k"] == 1 and result["phase1"]["attempts"] == 2
    assert result["phase2"]["halt"] == "refusal" and result["phase2"]["empty"] == 1 and result["phase2"]["turns"] == 3
    assert [m["kind"] for m in result["phase2"]["matches"]] == ["refusal"] * 3  # sorry-i-can't, copyright, can't continue
    assert len(server.requests) == 2 + 1 + 3 + 1 and not server.pending_faults
    entries = log_entries(tmp_path / "run")
    errors = [(e["kind"], e["status"]) for e in entries if e["event"] == "error"]
    assert errors == [("rate_limit", 429), ("timeout", None)]
    assert [e["event"] for e in entries].count("empty") == 1
    assert [e["kind"] for e in entries if e["event"] == "match"] == ["refusal"] * 3
    assert time.monotonic() - start >= 0.2 + 0.05 + 0.1 + 1.0  # empty retry, two backoffs, the timeout
    generation = (tmp_path / "run/books/zen/generation.txt").read_text()
    assert generation == f"Sure: {target}\nFlat is better than nested." and REFUSAL_TEXT not in generation
    # The first prompt is a perturbation of the instruction; the prefix itself is never altered.
    prompt = server.requests[1]["messages"][0]["content"]
    assert prompt == result["phase1"]["prompt"] and prompt.endswith("\n\n" + " ".join(words[:14]))


def test_a_server_error_halts_the_run(server, tmp_path) -> None:
    server.inject({"text": " ".join(ZEN.split()[14:26])}, {"text": "Flat is better than nested."}, "500")
    summary = run_books(parse_books_config(config(server, tmp_path, model={**config(server, tmp_path)["model"], "turns": 5})), tmp_path / "run", progress=False)
    assert summary["books"][0]["phase2"]["halt"] == "http_5xx" and summary["books"][0]["phase2"]["continuations"] == 1
    assert len(server.requests) == 3


def test_the_spend_cap_stops_before_it_is_crossed(server, tmp_path) -> None:
    data = config(server, tmp_path, phase1={"continue_on_failure": True}, model={**config(server, tmp_path)["model"], "turns": 50})
    data["spend_cap_usd"] = 0.004
    summary = run_books(parse_books_config(data), tmp_path / "run", progress=False)
    assert summary["books"][0]["phase2"]["halt"] == "spend_cap"
    assert 0 < summary["spent_usd"] <= 0.004 and len(server.requests) < 51
    halt = [e for e in log_entries(tmp_path / "run") if e["event"] == "halt"][-1]
    assert halt["reason"] == "spend_cap" and halt["spent"] + halt["next_request_bound"] > 0.004


def test_a_killed_run_resumes_without_repeating_answered_requests(server, tmp_path) -> None:
    data = config(server, tmp_path, phase1={"continue_on_failure": True}, model={**config(server, tmp_path)["model"], "turns": 4})
    path = tmp_path / "books.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "run"
    server.inject(*[{"text": f"answer {i}"} for i in range(3)], "slow")
    server.slow_seconds = 30.0
    env = {**os.environ, KEY_VARIABLE: SECRET}
    child = subprocess.Popen([sys.executable, "-m", "memrisk.cli", "books", "run", str(path), "--out", str(out)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(server.requests) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(server.requests) == 4, "the child run never reached its fourth request"
    child.send_signal(signal.SIGKILL)
    child.wait()
    killed_log = [e["key"] for e in log_entries(out) if e["event"] == "response"]
    assert killed_log == ["zen/phase1/0", "zen/phase2/0", "zen/phase2/1"]

    server.reset()
    server.inject({"text": "answer 3"}, {"text": "answer 4"})
    summary = run_books(parse_books_config(yaml.safe_load(path.read_text())), out, progress=False)
    # Only the request in flight at the kill (turn 2) and the remaining turn were sent again.
    assert len(server.requests) == 2 and summary["requests_sent"] == 2
    resent = {messages_digest(r["messages"]) for r in server.requests}
    answered_before = {e["messages_sha256"] for e in log_entries(out) if e["event"] == "response" and e["key"] in killed_log}
    assert not resent & answered_before
    keys = Counter(e["key"] for e in log_entries(out) if e["event"] == "response")
    assert set(keys.values()) == {1} and len(keys) == 5
    generation = (out / "books/zen/generation.txt").read_text().split("\n")
    assert generation == [f"answer {i}" for i in range(5)]
    no_secret_anywhere(out)


def test_per_chapter_variant_keeps_the_first_non_refusal_and_retries_all_refusals(server, tmp_path) -> None:
    chapters = "CHAPTER 1\n" + ZEN + "\nCHAPTER 2\n" + " ".join(reversed(ZEN.split())) + "\n"
    (tmp_path / "chapters.txt").write_text(chapters)
    data = config(server, tmp_path, per_chapter={"candidates": 2, "turns": 1, "refusal_retry": {"attempts": 2, "delay_s": 0.0}})
    data["books"] = [{"name": "chapters", "path": str(tmp_path / "chapters.txt")}]
    data["model"]["turns"] = 0
    server.inject(
        {"text": "main probe"},                                   # the whole-book Phase 1 (fails; Phase 2 not run)
        {"text": " ".join(ZEN.split()[14:26])},                   # chapter 1, Phase 1: success
        {"choices": [REFUSAL_TEXT, "Flat is better than nested."]},  # chapter 1, turn 0: second candidate kept
        {"text": "no"},                                           # chapter 2, Phase 1: fails
    )
    summary = run_books(parse_books_config(data), tmp_path / "run", progress=False)
    per = summary["books"][0]["per_chapter"]
    assert [c["phase1"]["success"] for c in per["chapters"]] == [True, False]
    assert per["chapters"][0]["phase2"]["continuations"] == 1 and per["chapters"][1]["phase2"] is None
    assert server.requests[2]["n"] == 2 and len(server.requests) == 4
    assert (tmp_path / "run/books/chapters/chapter000.txt").read_text().endswith("Flat is better than nested.")
