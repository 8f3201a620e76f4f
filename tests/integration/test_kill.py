"""Killed at any moment, nothing lost.

`memrisk run` (locally and with `--ray`) and `memrisk books run` are SIGKILLed with their
process group at seeded random moments: inside the model load, while scoring, after a file's
temporary copy is fsynced but before its rename, right after a shard's rename, in the
manifest, summary and report writes, in the request log, or after a random delay. The kills
land on one folder, the same command is re-run after each (and may be killed again), and a
final uninterrupted run completes the folder. Then the records equal an uninterrupted run's,
no temporary file or lock is left, the summary counts the records, and a books run never sent
again a request whose answer it had logged, nor logged more spending than its cap.

Every run is a child of `tests/killpoint.py --serve`, forked into a session of its own after
memrisk was imported once (`tests/launcher.py`, the session's `launcher`): a fresh interpreter
spends ~6 s importing torch and transformers per kill on a small machine. MEMRISK_KILL_EXEC=1
starts every run as its own interpreter instead (`python tests/killpoint.py EVENT N -- ARGS`,
the command each table row can be replayed with).
The schedule comes from MEMRISK_KILL_SEED (a fresh seed when unset); each test prints it with
a table of its kills and their outcomes, shown by pytest on failure or with -s.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from chat_server import ChatServer

from memrisk.books.costs import Price, cost
from memrisk.books.providers import Usage
from memrisk.books.session import messages_digest
from tests.conftest import WORDS
from tests.integration.test_ray import assert_close, assert_same_records
from tests.integration.test_run import records, write_config
from tests.launcher import Child, Launcher

SEED = int(os.environ.get("MEMRISK_KILL_SEED") or random.SystemRandom().randrange(1_000_000))
LOCK = ".memrisk.lock"
# Doc-mode windows (one per document; the report then draws no book heatmap) in shards of one;
# one Ray worker, so a re-run's worker need not wait for the CPU of the killed run's worker.
EXPERIMENT = {
    "windows": {"mode": "doc", "prefix_length": 6, "suffix_length": 5},
    "shard_size": 1,
    "ray": {"workers": 1},
}


# -- starting and killing runs ----------------------------------------------------------------


@dataclass
class Kill:
    """One kill of the schedule and what it left."""

    moment: str  # a tests/killpoint.py event, or "time" (killpg after `delay` seconds)
    n: int = 0
    delay: float = 0.0
    status: int | None = None
    before: str = ""
    after: str = ""
    left: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"after {self.delay:.2f} s" if self.moment == "time" else f"{self.moment} #{self.n}"


def kill_run(launcher: Launcher, args: list[str], kill: Kill, env: dict[str, str] | None = None) -> Child:
    """Start the run and kill it at `kill`; an event that never came fails the test."""
    if kill.moment == "time":
        child = launcher.start(args, env=env)
        time.sleep(kill.delay)
        launcher.kill(child)
        kill.status = launcher.wait(child)
        return child
    child = launcher.start(args, kill.moment, kill.n, env)
    kill.status = launcher.wait(child)
    assert kill.status == -signal.SIGKILL, f"seed {SEED}: the kill point {kill.label} was never reached (exit {kill.status}):\n{child.tail()}"
    return child


def complete_run(launcher: Launcher, args: list[str], env: dict[str, str] | None = None) -> float:
    """An uninterrupted run that must succeed; returns its duration in seconds."""
    start = time.monotonic()
    child = launcher.start(args, env=env)
    status = launcher.wait(child)
    assert status == 0, f"seed {SEED}: the run failed (exit {status}):\n{child.tail()}"
    return time.monotonic() - start


def outcome(status: int | None) -> str:
    return "SIGKILL" if status == -signal.SIGKILL else f"exit {status}"


def show(title: str, kills: list[Kill], columns: tuple[str, str]) -> None:
    """Print the schedule as a table (pytest shows it on failure, or with -s)."""
    print(f"\n{title} (MEMRISK_KILL_SEED={SEED})")
    print(f"{'#':>3}  {'killed at':<28} {'outcome':<8} {columns[0]:<22} {columns[1]:<22} left behind")
    for i, k in enumerate(kills, 1):
        print(f"{i:>3}  {k.label:<28} {outcome(k.status):<8} {k.before:<22} {k.after:<22} {', '.join(k.left) or '-'}")


# -- run folders ------------------------------------------------------------------------------


def shards(out: Path) -> list[str]:
    """The shards the manifest commits ([] before the first)."""
    manifest = out / "manifest.json"
    return json.loads(manifest.read_text())["shards"] if manifest.exists() else []


def temporary_files(out: Path) -> list[str]:
    return sorted(str(path.relative_to(out)) for path in out.rglob(".*.tmp"))


def debris(out: Path) -> list[str]:
    """What a kill left: temporary files, shards the manifest does not commit, the lock file."""
    committed = set(shards(out))
    orphans = [f"records/{p.name} (uncommitted)" for p in sorted(out.glob("records/*.parquet")) if p.name not in committed]
    return temporary_files(out) + orphans + ([LOCK] if (out / LOCK).exists() else [])


def check_committed(out: Path, reference: dict[str, dict], exact: bool = True) -> int:
    """Every committed record of an interrupted folder is a final one: no duplicate, none unknown."""
    rows = records(out) if shards(out) else []
    ids = [r["example_id"] for r in rows]
    assert len(ids) == len(set(ids)), f"seed {SEED}: duplicate records {[i for i, c in Counter(ids).items() if c > 1]}"
    assert set(ids) <= set(reference), f"seed {SEED}: records of unknown examples {sorted(set(ids) - set(reference))}"
    if exact:
        for row in rows:
            assert row == reference[row["example_id"]], f"seed {SEED}: {row['example_id']} differs from the uninterrupted run"
    else:
        assert_same_records(rows, [reference[i] for i in ids])
    return len(rows)


def check_finished(out: Path, want: list[dict], exact: bool = True) -> None:
    """The folder of a completed run: its records are the uninterrupted run's, nothing is left over,
    and summary.json counts the records."""
    got = records(out)
    ids = [r["example_id"] for r in got]
    assert len(ids) == len(set(ids)), f"seed {SEED}: duplicate records"
    if exact:
        assert got == want, f"seed {SEED}: the records differ from the uninterrupted run's"
    else:
        assert_same_records(got, want)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["examples"] == len(got)
    per_dataset = Counter(r["dataset"] for r in got)
    assert {name: d["examples"] for name, d in summary["datasets"].items()} == dict(per_dataset)
    assert {name: d["windows"] for name, d in json.loads((out / "windows.json").read_text()).items()} == dict(per_dataset)
    assert sorted(p.name for p in out.glob("records/*.parquet")) == sorted(shards(out)), f"seed {SEED}: uncommitted shards left"
    assert not (out / LOCK).exists(), f"seed {SEED}: {LOCK} left after a clean exit"
    assert temporary_files(out) == [], f"seed {SEED}: temporary files left: {temporary_files(out)}"


@dataclass
class Experiment:
    """The experiment every `memrisk run` test kills, and its uninterrupted run."""

    path: Path
    reference: Path
    records: list[dict]
    seconds: float

    @property
    def by_id(self) -> dict[str, dict]:
        return {r["example_id"]: r for r in self.records}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory, model_dir, launcher) -> Experiment:
    folder = tmp_path_factory.mktemp("kill-experiment")
    path = write_config(folder, model_dir, **EXPERIMENT)
    reference = folder / "reference"
    seconds = complete_run(launcher, ["run", str(path), "--out", str(reference)])
    return Experiment(path, reference, records(reference), seconds)


# -- memrisk run ------------------------------------------------------------------------------

PER_CHUNK = ("score", "write:records/", "renamed:records/", "write:manifest.json")


def test_local_run_killed_at_random_moments_loses_nothing(tmp_path, launcher, experiment) -> None:
    """14 kills: the fresh folder's first write; then, in random order, the model load, scoring, a
    shard's write (fsynced, not renamed), the moment after its rename, a manifest write and a
    versions / windows write, each run committing at most one chunk; two kills after random
    delays; then the summary (before it is computed, written, renamed), a report figure and one
    more random delay. Both runs are children of the same server: the records are bitwise equal."""
    rng = random.Random(f"{SEED}/local")
    out = tmp_path / "killed"
    args = ["run", str(experiment.path), "--out", str(out)]
    chunks, figures = len(shards(experiment.reference)), len(list((experiment.reference / "figures").iterdir()))
    assert chunks >= 6 and figures >= 2
    creating = [rng.choice(["write:config.yaml", "write:manifest.json"])]  # the fresh folder's first file
    scoring = ["load", *PER_CHUNK, rng.choice(["write:versions.json", "write:windows.json"])]
    finishing = ["finish", "write:summary.json", "renamed:summary.json", "write:figures/", "time"]
    rng.shuffle(scoring)
    rng.shuffle(finishing)
    schedule = [*creating, *scoring, "time", "time", *finishing]
    kills: list[Kill] = []
    print(f"\nuninterrupted run: {len(experiment.records)} records in {chunks} shards, {experiment.seconds:.1f} s")
    for i, moment in enumerate(schedule):
        remaining = chunks - len(shards(out))
        later = sum(m in PER_CHUNK for m in schedule[i + 1 :])
        if moment == "time":
            kill = Kill("time", delay=rng.uniform(0.05, experiment.seconds))
        elif moment in PER_CHUNK:
            kill = Kill(moment, rng.randint(1, max(1, min(2, remaining - later - 2))))
        elif moment == "write:figures/":
            kill = Kill(moment, rng.randint(1, figures))
        else:
            kill = Kill(moment, 1)
        kills.append(kill)
        kill.before = f"{len(shards(out))}/{chunks} shards"
        kill_run(launcher, args, kill)
        kill.after = f"{len(shards(out))}/{chunks} shards" + (", summary" if (out / "summary.json").exists() else "")
        kill.left = debris(out)
        check_committed(out, experiment.by_id)
    complete_run(launcher, args)
    show("memrisk run, killed", kills, ("before", "after"))
    assert sum(k.status == -signal.SIGKILL for k in kills) >= 10
    assert json.loads((out / "summary.json").read_text()) == json.loads((experiment.reference / "summary.json").read_text())
    check_finished(out, experiment.records)


@pytest.mark.slow
def test_ray_driver_killed_at_random_moments_loses_nothing(tmp_path, launcher, experiment, ray_cluster) -> None:
    """The driver of `memrisk run --ray` killed at its own writes and after random delays; its
    workers die with it and fresh ones take over at the next run. Ray workers score with one
    thread and a local run with OMP_NUM_THREADS (one under the pytest-xdist workers, the machine's
    cores when run alone), so numbers agree to the float32 reordering bound rather than bitwise.
    Every run starts a Ray worker that imports torch and loads the model (6-10 s on two cores), so
    most kills are after random delays within the runs seen so far, which land in the worker
    start, the scoring and the commits alike."""
    rng = random.Random(f"{SEED}/ray")
    out = tmp_path / "killed"
    args = ["run", str(experiment.path), "--out", str(out), "--ray", ray_cluster]
    chunks = len(shards(experiment.reference))
    scoring = [rng.choice(PER_CHUNK[1:]) for _ in range(2)]
    schedule = [*scoring, *["time"] * 4, rng.choice(["write:ray_run.json", "finish", "write:summary.json"])]
    kills: list[Kill] = []
    longest = 0.0
    for i, moment in enumerate(schedule):
        remaining = chunks - len(shards(out))
        later = sum(m in PER_CHUNK for m in schedule[i + 1 :])
        if moment == "time":  # within the longest run seen so far
            kill = Kill("time", delay=rng.uniform(0.5, longest))
        elif moment in PER_CHUNK:
            kill = Kill(moment, rng.randint(1, max(1, min(2, remaining - later - 2))))
        else:
            kill = Kill(moment, 1)
        kills.append(kill)
        kill.before = f"{len(shards(out))}/{chunks} shards"
        start = time.monotonic()
        kill_run(launcher, args, kill)
        longest = max(longest, time.monotonic() - start)
        kill.after = f"{len(shards(out))}/{chunks} shards" + (", summary" if (out / "summary.json").exists() else "")
        kill.left = debris(out)
        check_committed(out, experiment.by_id, exact=False)
    seconds = complete_run(launcher, args)
    show(f"memrisk run --ray, driver killed (uninterrupted: {seconds:.1f} s)", kills, ("before", "after"))
    # every kill at a named moment lands; a timed one may come after a resumed run (less work left) already finished
    assert all(k.status == -signal.SIGKILL for k in kills if k.moment != "time"), kills
    assert sum(k.status == -signal.SIGKILL for k in kills if k.moment == "time") >= 2, kills
    reference = json.loads((experiment.reference / "summary.json").read_text())
    assert_close(json.loads((out / "summary.json").read_text()), reference, "summary")
    check_finished(out, experiment.records, exact=False)


# -- memrisk study ----------------------------------------------------------------------------


def test_study_killed_at_random_moments_completes_equal_and_keeps_finished_cells(tmp_path, launcher, experiment) -> None:
    """A 2 × 2 study (B × ε, one chunk per window) killed 8 times: while cells score, while a cell's summary is
    written or just renamed, while the study's manifest is written, and after random delays. Re-run, every cell's
    records are bitwise the uninterrupted study's (same server, same threads), and a cell complete before the last
    run is not recomputed (its summary.json is not rewritten)."""
    rng = random.Random(f"{SEED}/study")
    base = yaml.safe_load(experiment.path.read_text()) | {"methods": ["probabilistic", "cbs"]}
    study = experiment.path.with_name("study.yaml")  # beside the experiment, whose data paths are relative
    study.write_text(yaml.safe_dump({"base": base, "grid": {"cbs.beam_width": [1, 2], "cbs.epsilon": [0, 1]}}))
    reference, out = tmp_path / "reference", tmp_path / "killed"
    seconds = complete_run(launcher, ["study", str(study), "--out", str(reference)])
    cells = sorted(p.name for p in (reference / "cells").iterdir())
    windows = len(experiment.records)
    schedule = [Kill("write:manifest.json", 1), Kill("score", rng.randint(1, windows)), Kill("score", rng.randint(windows, 2 * windows)),
                Kill("write:summary.json", 1), Kill("renamed:summary.json", 1), Kill("score", rng.randint(1, windows)),
                Kill("time", delay=rng.uniform(0.05, seconds)), Kill("time", delay=rng.uniform(0.05, seconds))]
    args = ["study", str(study), "--out", str(out)]
    for kill in schedule:
        kill.before = f"{sum((out / 'cells' / c / 'summary.json').exists() for c in cells)}/4 cells"
        kill_run(launcher, args, kill)
        kill.after = f"{sum((out / 'cells' / c / 'summary.json').exists() for c in cells)}/4 cells"
        kill.left = [f"{c}: {item}" for c in cells if (out / "cells" / c).exists() for item in debris(out / "cells" / c)]
    show("memrisk study", schedule, ("before", "after"))
    finished = {c: (out / "cells" / c / "summary.json").stat().st_mtime_ns for c in cells if (out / "cells" / c / "summary.json").exists()}
    complete_run(launcher, args)
    for cell in cells:
        check_finished(out / "cells" / cell, records(reference / "cells" / cell))
        if cell in finished:
            assert (out / "cells" / cell / "summary.json").stat().st_mtime_ns == finished[cell], f"seed {SEED}: {cell} was recomputed"
    assert not (out / LOCK).exists() and temporary_files(out) == []


# -- memrisk books run ------------------------------------------------------------------------

KEY_VARIABLE = "MEMRISK_TEST_CHAT_KEY"
SECRET = "sk-test-kill"
PRICE = {"input": 2.0, "cached_input": 0.5, "output": 8.0}
BOOK = "\n".join(" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(10)) for i in range(20))
TURN_WORDS = 12


class OneTokenPerWord:
    """The chat template and tokenizer the chat server needs, without a model: one token per word."""

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True, tokenize: bool = False) -> str:
        return " ".join(f"<{m['role']}> {m['content']}" for m in messages) + (" <assistant>" if add_generation_prompt else "")

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [zlib.crc32(word.encode()) for word in text.split()]}


class CannedModel:
    name = "canned-chat"
    tokenizer = OneTokenPerWord()


class CannedChat(ChatServer):
    """tests/chat_server.py answering from a script: a Phase 1 attempt gets a wrong answer, Phase 2
    turn t the book's next words; `billed` holds (conversation digest, dollars) of every answer
    computed, delivered or not (what a provider would charge)."""

    def __init__(self) -> None:
        super().__init__(CannedModel())
        self.billed: list[tuple[str, float]] = []

    def reset(self) -> None:
        super().reset()
        self.billed = []

    def _generate(self, prompt: list[int], params: dict[str, Any]) -> list[tuple[str, str, int]]:
        time.sleep(0.03)
        turn = sum(m["role"] == "assistant" for m in params["messages"])
        words = BOOK.split()[26:]
        text = "I do not know this text." if turn == 0 else " ".join(words[(turn - 1) * TURN_WORDS : turn * TURN_WORDS])
        return [(text, "stop", len(text.split()))] * params["n"]

    def _complete(self, body: dict[str, Any], *args: Any) -> dict[str, Any] | None:
        answer = super()._complete(body, *args)
        if answer is not None:
            u = answer["usage"]
            usage = Usage(u["prompt_tokens"], u["completion_tokens"], u["prompt_tokens_details"]["cached_tokens"])
            self.billed.append((messages_digest(body["messages"]), cost(usage, Price(**PRICE))))
        return answer


@pytest.fixture(scope="module")
def chat() -> CannedChat:
    with CannedChat() as running:
        yield running


def books_config(chat: CannedChat, folder: Path, cap: float) -> Path:
    (folder / "book.txt").write_text(BOOK, encoding="utf-8")
    data = {
        "model": {
            "provider": "openai", "name": "canned-chat", "base_url": chat.base_url, "api_key_env": KEY_VARIABLE,
            "timeout_s": 20, "max_tokens": 16, "turns": 8, "price": PRICE,
        },
        "books": [{"name": "story", "path": str(folder / "book.txt")}],
        "spend_cap_usd": cap,
        "phase1": {
            "prefix_words": 14, "target_words": 12, "max_tokens": 16, "perturb": True, "attempts": 4, "concurrency": 2,
            "continue_on_failure": True,
        },
        "phase2": {"empty_retry_delay_s": 0.0, "backoff": {"initial_delay_s": 0.01, "max_delay_s": 0.05}},
    }
    path = folder / "books.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def log_entries(out: Path) -> list[dict]:
    """The complete entries of the request log (a line torn by a kill is not one)."""
    path = out / "requests.jsonl"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]


def responses(out: Path) -> list[dict]:
    return [e for e in log_entries(out) if e["event"] == "response"]


@dataclass
class BooksReference:
    """An uninterrupted books run with a loose cap."""

    folder: Path
    seconds: float
    requests: int
    spent: float


@pytest.fixture(scope="module")
def books_reference(tmp_path_factory, launcher, chat) -> BooksReference:
    folder = tmp_path_factory.mktemp("books-reference")
    chat.reset()
    path = books_config(chat, folder, 1.0)
    seconds = complete_run(launcher, ["books", "run", str(path), "--out", str(folder / "run")], {KEY_VARIABLE: SECRET})
    spent = sum(e["cost"] for e in responses(folder / "run"))
    return BooksReference(folder / "run", seconds, len(chat.requests), spent)


LOG_MOMENTS = ("log", "logged", "torn-log")


@pytest.mark.parametrize("cap", ["loose", "binding"])
def test_books_run_killed_at_random_moments_never_pays_twice(tmp_path, launcher, chat, books_reference, cap) -> None:
    """Kills in the request log (before an entry, after it, halfway through its line), in the
    per-book and summary writes and after random delays. No run sends a conversation whose answer
    the log already holds; the logged spending never passes the cap. The binding cap is what the
    uninterrupted run spent: the bound checked before each request exceeds the request's cost, so
    the run must stop at the cap before its last request."""
    rng = random.Random(f"{SEED}/books/{cap}")
    limit = 1.0 if cap == "loose" else books_reference.spent
    path = books_config(chat, tmp_path, limit)
    out = tmp_path / "killed"
    args, env = ["books", "run", str(path), "--out", str(out)], {KEY_VARIABLE: SECRET}
    chat.reset()
    logging = ["log", "log", "logged", "torn-log", "torn-log"]
    writing = ["write:books/", "write:books/", "write:books_summary.json", "time"]
    rng.shuffle(logging)
    rng.shuffle(writing)
    schedule = [rng.choice(["write:config.yaml", "write:manifest.json"]), *logging, "time", "time", *writing, "none"]
    kills: list[Kill] = []
    for moment in schedule:
        answered = {e["messages_sha256"] for e in responses(out)}
        pending = max(0, books_reference.requests - len(answered))
        first = len(chat.requests)
        if moment == "none":
            complete_run(launcher, args, env)
        else:
            if moment == "time":
                kill = Kill("time", delay=rng.uniform(0.05, books_reference.seconds))
            elif moment in LOG_MOMENTS:
                # a resumed run logs at least its Phase 1 result, and each request it still sends
                # twice; a capped one its halt too (whether the cap binds now is not known here)
                kill = Kill(moment, rng.randint(1, 2 if cap == "binding" else min(6, 1 + 2 * pending)))
            else:
                kill = Kill(moment, rng.randint(1, 3) if moment == "write:books/" else 1)
            kills.append(kill)
            kill.before = f"{len(answered)} answered"
            kill_run(launcher, args, kill, env)
            kill.after = f"{len(responses(out))} answered, {len(chat.requests) - first} sent"
            kill.left = debris(out)
        resent = [i for i, r in enumerate(chat.requests[first:], first) if messages_digest(r["messages"]) in answered]
        assert not resent, f"seed {SEED}: requests {resent} were answered in the log already, and sent again"
    show(f"memrisk books run, {cap} cap (${limit:.6f})", kills, ("log before", "log after, sent"))
    logged = responses(out)
    paid_twice = Counter(e["key"] for e in logged)
    assert max(paid_twice.values()) == 1, f"seed {SEED}: keys answered twice in the log: {paid_twice}"
    assert sum(e["cost"] for e in logged) <= limit
    summary = json.loads((out / "books_summary.json").read_text())
    assert summary["spent_usd"] == pytest.approx(sum(e["cost"] for e in logged))
    [book] = summary["books"]
    if cap == "binding":
        assert "spend_cap" in (book["phase1"]["halt"], (book["phase2"] or {}).get("halt"))
    else:
        assert (out / "books/story/generation.txt").read_text() == (books_reference.folder / "books/story/generation.txt").read_text()
        assert book["phase2"] == json.loads((books_reference.folder / "books_summary.json").read_text())["books"][0]["phase2"]
    # A request the server answered but the kill cut off before its log line is sent (and paid) again:
    # no client can log an answer it has not received. Shown, not asserted.
    print(f"{len(chat.requests)} requests sent in all ({books_reference.requests} uninterrupted); the server answered "
          f"{len(chat.billed)} for ${sum(c for _, c in chat.billed):.6f}, the log holds {len(logged)} for "
          f"${sum(e['cost'] for e in logged):.6f} (cap ${limit:.6f})")
    assert not (out / LOCK).exists(), f"seed {SEED}: {LOCK} left after a clean exit"
    assert temporary_files(out) == [], f"seed {SEED}: temporary files left: {temporary_files(out)}"


@pytest.mark.parametrize("command", ["run", "books run"])
def test_a_folder_killed_while_created_is_left_clean_by_the_next_run(tmp_path, launcher, experiment, chat, command) -> None:
    """Killed between the temporary copy of a new folder's first file and its rename, then run to
    the end at once (no resume in between, as the kill schedules above have)."""
    out = tmp_path / "out"
    if command == "run":
        args, env = ["run", str(experiment.path), "--out", str(out)], None
    else:
        args, env = ["books", "run", str(books_config(chat, tmp_path, 1.0)), "--out", str(out)], {KEY_VARIABLE: SECRET}
    kill_run(launcher, args, kill := Kill("write:config.yaml", 1), env)
    assert kill.status == -signal.SIGKILL and temporary_files(out)
    complete_run(launcher, args, env)
    assert not (out / LOCK).exists()
    assert temporary_files(out) == [], f"temporary files left: {temporary_files(out)}"
