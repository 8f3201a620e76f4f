"""Phase 1, Phase 2, the request log, resume and the spend cap, driven by a scripted provider."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memrisk.books.config import BooksRunConfig, ChatModelConfig, parse_books_config
from memrisk.books.costs import Price, cost, cost_report, price_for, request_bound
from memrisk.books.perturb import INSTRUCTION, perturb
from memrisk.books.phase1 import best_of_n, longest_common_words, similarity
from memrisk.books.phase2 import (
    REFUSALS,
    STOPS,
    MatchRule,
    RefusalRetry,
    continuation_loop,
)
from memrisk.books.providers import (
    ChatResponse,
    GenerationSettings,
    ProviderError,
    Usage,
)
from memrisk.books.run import run_books
from memrisk.books.session import RetryPolicy, Session
from memrisk.errors import MemriskError
from memrisk.store import RequestLog

PRICE = Price(input=2.0, cached_input=0.5, output=8.0)


class Scripted:
    """A provider answering from a function of (call number, messages); records every call."""

    name = "scripted"
    model = "scripted-1"

    def __init__(self, answer: Callable[[int, list[dict[str, str]]], ChatResponse | ProviderError]) -> None:
        self.answer = answer
        self.calls: list[list[dict[str, str]]] = []

    def complete(self, messages: list[dict[str, str]], settings: GenerationSettings) -> ChatResponse:
        self.calls.append(messages)
        out = self.answer(len(self.calls) - 1, messages)
        if isinstance(out, ProviderError):
            raise out
        return out


def reply(*texts: str, tokens_in: int = 100, tokens_out: int = 50, cached: int | None = 0) -> ChatResponse:
    return ChatResponse(tuple(texts), ("stop",) * len(texts), Usage(tokens_in, tokens_out, cached))


def session(tmp_path, provider, **options) -> Session:
    options.setdefault("sleep", lambda s: None)
    return Session(provider, RequestLog(tmp_path / "requests.jsonl"), PRICE, **options)


BOOK_WORDS = [f"w{i}" for i in range(200)]


def book_config(tmp_path, name: str, **sections: dict) -> BooksRunConfig:
    """A one-book run of model `name` over BOOK_WORDS (seed: words 0-29, target: words 30-59)."""
    (tmp_path / "book.txt").write_text(" ".join(BOOK_WORDS))
    model = {"name": name, "price": PRICE.__dict__, **sections.pop("model", {})}
    data = {"model": model, "books": [{"name": "b", "path": "book.txt"}], "spend_cap_usd": 1.0, **sections}
    return parse_books_config(data, tmp_path)


def seeded(i: int, messages: list[dict[str, str]]) -> ChatResponse:
    """Phase 1 answers the seed's target; Phase 2 ends at once with a stop string."""
    return reply(" ".join(BOOK_WORDS[30:60]) if len(messages) == 1 else "the last words. THE END")


def run_seeded(tmp_path, config: BooksRunConfig) -> tuple[Scripted, dict]:
    """Run `config` against `seeded`; the provider (with its calls) and the summary."""
    provider = Scripted(seeded)
    return provider, run_books(config, tmp_path / "run", provider=provider, sleep=lambda s: None, progress=False)


def test_similarity_is_the_longest_common_word_run_over_the_target_length() -> None:
    assert longest_common_words("a b c d e".split(), "x b c d y a b".split()) == 3
    assert similarity("a b c d e", "x b c d y a b") == pytest.approx(0.6)
    assert similarity("a b c d e", "") == 0.0
    assert similarity("one two", "one two three") == 1.0
    with pytest.raises(MemriskError):
        similarity("   ", "x")


def test_costs_bound_and_report() -> None:
    usage = Usage(1_000_000, 100_000, 400_000)
    assert cost(usage, PRICE) == pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 0.1 * 8.0)
    assert cost(usage, PRICE, cached_input=0) == pytest.approx(2.0 + 0.8)
    messages = [{"role": "user", "content": "héllo"}]
    assert request_bound(messages, 10, 2, PRICE) == pytest.approx(((6 + 16) * 2.0 + 20 * 8.0) / 1e6)
    assert price_for("gpt-4.1-2025-04-14") == price_for("gpt-4.1")
    with pytest.raises(MemriskError, match="no price"):
        price_for("unknown-model")
    entries = [
        {"conversation": "a", "usage": {"input": 100, "output": 10, "cached_input": None}},
        {"conversation": "a", "usage": {"input": 150, "output": 10, "cached_input": None}},
        {"conversation": "a"},
    ]
    report = cost_report(entries, PRICE)
    assert (report.requests, report.answered, report.input_tokens, report.output_tokens) == (3, 2, 250, 20)
    assert report.cost == report.cost_without_cache == pytest.approx((250 * 2.0 + 20 * 8.0) / 1e6)
    assert report.cost_with_cache_estimate == pytest.approx((150 * 2.0 + 100 * 0.5 + 20 * 8.0) / 1e6)


def test_best_of_n_stops_at_the_first_success_and_replays_exactly(tmp_path) -> None:
    target = "the quick brown fox jumps over the lazy dog"
    provider = Scripted(lambda i, m: reply("the quick brown fox jumps over" if i == 3 else "I would rather not."))
    first = best_of_n(session(tmp_path, provider), "book", "Once upon a time", target, attempts=10, seed=7)
    assert [a.k for a in first.attempts] == [0, 1, 2, 3] and len(provider.calls) == 4
    assert first.success and first.best.k == 3 and first.best.score == pytest.approx(6 / 9)
    prompts = [call[0]["content"] for call in provider.calls]
    assert all(p.endswith("\n\nOnce upon a time") for p in prompts)
    # A second run over the same log pays for nothing and returns the same attempts.
    again_provider = Scripted(lambda i, m: pytest.fail("a logged request was sent again"))
    again = best_of_n(session(tmp_path, again_provider), "book", "Once upon a time", target, attempts=10, seed=7)
    assert again.attempts == first.attempts


def test_best_of_n_with_concurrency_keeps_the_smallest_successful_k(tmp_path) -> None:
    target = "alpha beta gamma delta epsilon"
    texts = [perturb(INSTRUCTION, 1, k).text for k in range(40)]
    winner = next(k for k in range(5, 40) if texts[k] not in texts[:k])
    provider = Scripted(lambda i, m: reply(target if m[0]["content"].split("\n\n")[0] == texts[winner] else "no"))
    result = best_of_n(session(tmp_path, provider), "b", "prefix", target, attempts=40, seed=1, concurrency=4)
    assert result.success and result.best.k == winner
    ks = [a.k for a in result.attempts]
    # Prompts go in waves of 4: every k up to the end of the winner's wave was answered, nothing after it.
    assert ks == list(range(len(ks))) and len(ks) == (winner // 4 + 1) * 4 and len(provider.calls) == len(ks)


def test_phase2_halts_on_refusal_stop_string_budget_and_5xx(tmp_path) -> None:
    start = [{"role": "user", "content": "p"}, {"role": "assistant", "content": "r0"}]
    script = {0: reply("chapter one text"), 1: reply(""), 2: reply("more text"), 3: reply("I'm sorry, but I can't continue.")}
    provider = Scripted(lambda i, m: script[i])
    slept: list[float] = []
    result = continuation_loop(session(tmp_path / "a", provider), "b", start, turns=10, sleep=slept.append)
    assert result.halt == "refusal" and result.turns == 4 and result.empty == 1
    assert result.responses == ("chapter one text", "more text") and slept == [1.0]
    assert [m.pattern for m in result.matches] == [REFUSALS.patterns[0], REFUSALS.patterns[8]]
    assert provider.calls[2][-1] == {"role": "user", "content": "Continue."} and len(provider.calls[2]) == 5

    stop = Scripted(lambda i, m: reply("last words. THE END") if i == 1 else reply("text"))
    result = continuation_loop(session(tmp_path / "b", stop), "b", start, turns=10)
    assert result.halt == "stop_string" and result.responses == ("text", "last words. THE END")

    budget = Scripted(lambda i, m: reply(f"part {i}"))
    result = continuation_loop(session(tmp_path / "c", budget), "b", start, turns=3)
    assert result.halt == "turn_budget" and result.responses == ("part 0", "part 1", "part 2")

    failing = Scripted(lambda i, m: ProviderError("server", "HTTP 500", 500) if i == 1 else reply("ok"))
    result = continuation_loop(session(tmp_path / "d", failing), "b", start, turns=10)
    assert result.halt == "http_5xx" and result.responses == ("ok",) and len(failing.calls) == 2


def test_rate_limits_and_timeouts_back_off_then_succeed(tmp_path) -> None:
    errors = {0: ProviderError("rate_limit", "429", 429), 1: ProviderError("timeout", "slow"), 2: ProviderError("rate_limit", "429", 429)}
    provider = Scripted(lambda i, m: errors.get(i, reply("fine")))
    slept: list[float] = []
    s = session(tmp_path, provider, retry=RetryPolicy(max_retries=5, initial_delay_s=1, factor=2, max_delay_s=3), sleep=slept.append)
    answer = s.ask("k", "c", [{"role": "user", "content": "x"}], GenerationSettings())
    assert answer.response.text == "fine" and slept == [1, 2, 3]
    kinds = [e["event"] for e in s.log.entries()]
    assert kinds == ["request", "error", "request", "error", "request", "error", "request", "response"]
    exhausted = Scripted(lambda i, m: ProviderError("rate_limit", "429", 429))
    s = session(tmp_path / "x", exhausted, retry=RetryPolicy(max_retries=2))
    assert s.ask("k", "c", [{"role": "user", "content": "x"}], GenerationSettings()).halt == "retries_exhausted"
    assert len(exhausted.calls) == 3


def test_spend_cap_stops_before_a_request_could_cross_it(tmp_path) -> None:
    provider = Scripted(lambda i, m: reply("words", tokens_in=1000, tokens_out=500, cached=0))
    settings = GenerationSettings(max_tokens=500)
    per_request = cost(Usage(1000, 500, 0), PRICE)
    cap = 3.5 * per_request
    s = session(tmp_path, provider, spend_cap=cap)
    start = [{"role": "user", "content": "p" * 100}, {"role": "assistant", "content": "r"}]
    result = continuation_loop(s, "b", start, turns=50, settings=settings)
    assert result.halt == "spend_cap"
    assert s.spent <= cap
    assert 1 <= len(provider.calls) <= 3
    halts = [e for e in s.log.entries() if e["event"] == "halt"]
    assert halts[-1]["reason"] == "spend_cap" and halts[-1]["spent"] + halts[-1]["next_request_bound"] > cap


def test_per_chapter_candidates_and_refusal_retries(tmp_path) -> None:
    refusal = "I cannot do that."
    script = {0: reply(refusal, "kept text", "other"), 1: reply(refusal, refusal), 2: reply(refusal, refusal), 3: reply("after waiting", refusal)}
    provider = Scripted(lambda i, m: script.get(i, reply(refusal, refusal)))
    slept: list[float] = []
    start = [{"role": "user", "content": "p"}, {"role": "assistant", "content": "r0"}]
    result = continuation_loop(
        session(tmp_path, provider), "b", start, turns=2, settings=GenerationSettings(candidates=2),
        refusal_retry=RefusalRetry(attempts=5, delay_s=2.0, factor=2.0), sleep=slept.append,
    )
    assert result.responses == ("kept text", "after waiting") and result.refusal_retries == 2
    assert slept == [2.0, 4.0] and result.halt == "turn_budget"
    gives_up = Scripted(lambda i, m: reply(refusal, refusal))
    result = continuation_loop(
        session(tmp_path / "g", gives_up), "b", start, turns=5, settings=GenerationSettings(candidates=2),
        refusal_retry=RefusalRetry(attempts=3, delay_s=0.0),
    )
    assert result.halt == "refusal" and len(gives_up.calls) == 4 and result.responses == ()


def test_match_rules_case_and_scope() -> None:
    assert [m.pattern for m in REFUSALS.find("Sorry, but I can’t share that; it is Copyrighted.")] == [
        REFUSALS.patterns[0], REFUSALS.patterns[1], REFUSALS.patterns[9],
    ]
    assert STOPS.find("at the end of the road") == []
    assert STOPS.find("and so it was. THE END")[0].start == 15
    tail = MatchRule("stop", ("THE END",), regex=False, case_sensitive=True, scope="tail", scope_chars=10)
    assert tail.find("THE END came early, then more prose followed here") == []
    assert tail.find("prose prose prose THE END")[0].start == 18
    insensitive = MatchRule("stop", ("the end",), regex=False, case_sensitive=False)
    assert insensitive.find("THE END")[0].excerpt == "THE END"
    with pytest.raises(MemriskError, match="invalid refusal pattern"):
        MatchRule("refusal", ("(",))
    with pytest.raises(MemriskError, match="scope_chars"):
        MatchRule("stop", ("x",), scope="head")


def test_replay_refuses_a_log_from_another_conversation(tmp_path) -> None:
    s = session(tmp_path, Scripted(lambda i, m: reply("a")))
    s.ask("k", "c", [{"role": "user", "content": "one"}], GenerationSettings())
    again = session(tmp_path, Scripted(lambda i, m: reply("b")))
    with pytest.raises(MemriskError, match="different conversation"):
        again.ask("k", "c", [{"role": "user", "content": "two"}], GenerationSettings())


def test_a_torn_last_log_line_is_dropped_and_said(tmp_path, caplog) -> None:
    path = tmp_path / "requests.jsonl"
    RequestLog(path).append({"event": "request", "key": "a"})
    with path.open("a") as handle:
        handle.write('{"event": "resp')
    with caplog.at_level("WARNING", logger="memrisk.store"):
        log = RequestLog(path)
    assert f"{path}: dropped a torn last line (15 bytes) left by an interrupted write" in caplog.text
    assert log.entries() == [{"event": "request", "key": "a"}]
    log.append({"event": "x"})
    assert [e["event"] for e in log.entries()] == ["request", "x"]


def test_a_damaged_log_line_inside_the_log_is_one_error_naming_it(tmp_path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text('{"event": "request"}\n{"event": garbage\n{"event": "x"}\n', encoding="utf-8")
    with pytest.raises(MemriskError, match=r"requests.jsonl line 2 is damaged .*; repair or remove that line to resume"):
        RequestLog(path).entries()


def test_books_score_cli_prints_nv_recall_and_writes_the_diff_view(tmp_path, capsys) -> None:
    from memrisk.cli import main

    words = [f"w{i}" for i in range(400)]
    book, generated = tmp_path / "book.txt", tmp_path / "gen.txt"
    book.write_text(" ".join(words))
    generated.write_text("preface words " + " ".join(words[100:300]) + " <script>alert(1)</script>")
    assert main(["books", "score", str(book), str(generated), "--html", str(tmp_path / "diff.html")]) == 0
    out = capsys.readouterr().out
    assert "nv-recall 0.5000  matched 200  missing 200  additional 3" in out and "passes=(2,1,20),(10,3,100)" in out
    page = (tmp_path / "diff.html").read_text()
    assert "&lt;script&gt;" in page and "<script>" not in page
    assert main(["books", "score", str(tmp_path / "absent.txt"), str(generated)]) == 2
    assert "book file not found" in capsys.readouterr().err


def test_books_run_rejects_bad_configs_with_one_clear_error(tmp_path, capsys) -> None:
    from memrisk.cli import main

    path = tmp_path / "books.yaml"
    path.write_text("model: {name: gpt-4.1}\nbooks: [{name: a, path: a.txt}]\n")
    assert main(["books", "run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "spend_cap_usd" in capsys.readouterr().err
    path.write_text("model: {name: gpt-4.1, api_key_env: MEMRISK_ABSENT_KEY}\nbooks: [{name: a, path: a.txt}]\nspend_cap_usd: 1\n")
    assert main(["books", "run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "book file not found" in capsys.readouterr().err
    (tmp_path / "a.txt").write_text("some words of a book")
    assert main(["books", "run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "MEMRISK_ABSENT_KEY" in capsys.readouterr().err
    assert not (tmp_path / "out").exists(), "nothing is written before the run can start"


@pytest.mark.parametrize(
    ("name", "max_tokens", "turns", "penalties"),
    [
        ("claude-3-7-sonnet-20250219", 250, 600, (None, None)),
        ("gpt-4.1-2025-04-14", 500, 200, (None, None)),
        ("gemini-2.5-pro", 2000, 300, (2.0, 0.1)),
        ("grok-3", 500, 300, (None, None)),
    ],
)
def test_phase2_defaults_per_model_follow_the_paper(name: str, max_tokens: int, turns: int, penalties: tuple) -> None:
    """Books App. C.2.1 (temperature 0, max tokens, Gemini penalties) and Table 4 / App. C.2.3 (turns)."""
    model = ChatModelConfig(name=name)
    assert (model.temperature, model.default("max_tokens"), model.default("turns")) == (0.0, max_tokens, turns)
    assert (model.default("frequency_penalty"), model.default("presence_penalty")) == penalties


@pytest.mark.parametrize(
    ("name", "phase2", "sent"),
    [
        ("gpt-4.1", {}, "Continue."),
        ("gpt-4.1", {"prompt": "continue_without_citation"}, "Continue without citation metadata."),
        ("gemini-2.5-pro", {}, "Continue without citation metadata."),
        ("gemini-2.5-pro", {"prompt": "continue"}, "Continue."),
        ("grok-3", {"continue_prompt": "Go on."}, "Go on."),
    ],
)
def test_the_chosen_phase2_prompt_is_the_text_sent(tmp_path, name: str, phase2: dict, sent: str) -> None:
    provider, summary = run_seeded(tmp_path, book_config(tmp_path, name, phase2=phase2))
    assert len(provider.calls) == 2 and provider.calls[1][-1] == {"role": "user", "content": sent}
    assert summary["settings"]["phase2"]["continue_prompt"] == sent


def test_phase2_prompt_choices_are_checked(tmp_path) -> None:
    with pytest.raises(MemriskError, match="continue_without_citation"):
        book_config(tmp_path, "gpt-4.1", phase2={"prompt": "keep going"})
    with pytest.raises(MemriskError, match="prompt or continue_prompt"):
        book_config(tmp_path, "gpt-4.1", phase2={"prompt": "continue", "continue_prompt": "Go on."})


@pytest.mark.parametrize(
    ("name", "phase1", "budget"),
    [
        ("claude-3-7-sonnet-20250219", {"preset": "paper"}, ("paper", 10_000, True)),
        ("gpt-4.1-2025-04-14", {"preset": "paper"}, ("paper", 10_000, True)),
        ("gemini-2.5-pro", {"preset": "paper"}, ("paper", 1, False)),
        ("grok-3", {"preset": "paper"}, ("paper", 1, False)),
        ("some-other-model", {"preset": "paper"}, ("paper", 10_000, True)),
        ("claude-3-7-sonnet-20250219", {}, ("quick", 1, False)),
        ("gpt-4.1", {"preset": "quick"}, ("quick", 1, False)),
        ("gpt-4.1", {"preset": "paper", "attempts": 50}, ("paper", 50, True)),
        ("grok-3", {"preset": "paper", "perturb": True, "attempts": 20}, ("paper", 20, True)),
    ],
)
def test_phase1_presets_and_the_budget_are_logged_and_summarised(tmp_path, name: str, phase1: dict, budget: tuple) -> None:
    provider, summary = run_seeded(tmp_path, book_config(tmp_path, name, phase1=phase1))
    first = RequestLog(tmp_path / "run/requests.jsonl").entries()[0]
    for settings in (first, summary["settings"]):
        assert (settings["phase1"]["preset"], settings["phase1"]["attempts"], settings["phase1"]["perturb"]) == budget
    assert first["event"] == "settings" and summary["books"][0]["phase1"]["success"]
    instruction = perturb(INSTRUCTION, 0, 0).text if budget[2] else INSTRUCTION
    assert provider.calls[0][0]["content"] == f"{instruction}\n\n{' '.join(BOOK_WORDS[:30])}"


def test_phase2_settings_are_logged_and_summarised(tmp_path) -> None:
    _, summary = run_seeded(tmp_path, book_config(tmp_path, "gpt-4.1-2025-04-14"))
    first = RequestLog(tmp_path / "run/requests.jsonl").entries()[0]
    for settings in (first["phase2"], summary["settings"]["phase2"]):
        assert settings["turns"] == 200 and settings["prompt"] == "continue"
        assert settings["generation"] == {"temperature": 0.0, "max_tokens": 500, "candidates": 1}


def test_a_resume_under_other_resolved_defaults_or_an_edited_book_is_refused(tmp_path, monkeypatch) -> None:
    """The resume check covers what a run sends, not only what its config says: a model default
    that changed between versions, or an edited book, is named and refused."""
    from memrisk.books import config as books_config

    config = book_config(tmp_path, "gpt-4.1")
    run_seeded(tmp_path, config)
    monkeypatch.setitem(books_config.MODEL_DEFAULTS, "gpt-4.1", {"max_tokens": 500, "turns": 300})
    with pytest.raises(MemriskError, match=r"different settings: resolved\.phase2\.turns: 200 → 300"):
        run_seeded(tmp_path, book_config(tmp_path, "gpt-4.1"))
    monkeypatch.undo()
    (tmp_path / "book.txt").write_text(" ".join(BOOK_WORDS[:-1]))
    with pytest.raises(MemriskError, match=r"different settings: book_sha256\.b: "):
        run_seeded(tmp_path, parse_books_config(config.model_dump(mode="json"), tmp_path))
