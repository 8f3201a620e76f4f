"""`memrisk books run`: the two-phase book extraction against a chat API, per book, with the
request log, resume, spend cap, nv-recall of the generation and the cost report.

A run folder holds `config.yaml` and `manifest.json` (the config fingerprint guards resume),
`requests.jsonl` (each invocation's resolved settings first, then every request, response,
error, match and halt), and per book `books/NAME/generation.txt`, `result.json` and
`diff.html`; `books_summary.json` gathers them with the settings. Re-running the same command
replays the answers in the log and continues where it stopped.
"""

from __future__ import annotations

import hashlib
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memrisk import closeness
from memrisk.books.config import BooksRunConfig, ChatModelConfig, PerChapterConfig
from memrisk.books.costs import Price, cost_report, run_price
from memrisk.books.diffview import diff_page
from memrisk.books.nvrecall import Block, NVRecall, nv_recall
from memrisk.books.phase1 import Phase1Result, best_of_n
from memrisk.books.phase2 import (
    MatchRule,
    Phase2Result,
    RefusalRetry,
    continuation_loop,
)
from memrisk.books.providers import ChatProvider, GenerationSettings, make_provider
from memrisk.books.session import RetryPolicy, Session
from memrisk.errors import MemriskError
from memrisk.layout import BOOK_RESULT, BOOKS_SUMMARY, DIFF, GENERATION, REQUESTS, book_file
from memrisk.lock import locked_folder
from memrisk.store import RecordStore, RequestLog


def provider_for(model: ChatModelConfig) -> ChatProvider:
    """The provider a config names: a chat API, a model run here (`local`) or a recorded log (`replay`)."""
    if model.provider == "replay":
        from memrisk.books.replay import ReplayProvider

        return ReplayProvider(str(model.log), model.name)
    if model.provider == "local":
        from memrisk.books.local import LocalChatProvider  # loads torch and the model only when asked

        return LocalChatProvider(model.name, seed=model.seed)
    return make_provider(model.provider, model.name, base_url=model.base_url, api_key_env=model.api_key_env, timeout_s=model.timeout_s)


def seed_split(text: str, prefix_words: int, target_words: int) -> tuple[str, str]:
    """The first `prefix_words` words as the Phase 1 prefix and the next `target_words` as its target."""
    words = text.split()
    if len(words) < prefix_words + target_words:
        raise MemriskError(f"the text has {len(words)} words; the Phase 1 seed needs {prefix_words} + {target_words}")
    return " ".join(words[:prefix_words]), " ".join(words[prefix_words : prefix_words + target_words])


def split_chapters(text: str, pattern: str) -> list[str]:
    """Chapters: text from each line matching `pattern` (case-insensitive) to the next; the
    heading line itself is dropped so each chapter's seed starts with its prose."""
    try:
        heading = re.compile(pattern, re.IGNORECASE | re.MULTILINE)
    except re.error as exc:
        raise MemriskError(f"invalid chapter_pattern {pattern!r}: {exc}") from exc
    starts = [m for m in heading.finditer(text)]
    if not starts:
        raise MemriskError(f"no chapter heading matches {pattern!r}")
    bounds = [m.end() for m in starts] + [len(text)]
    return [text[bounds[i] : starts[i + 1].start() if i + 1 < len(starts) else len(text)] for i in range(len(starts))]


def union_blocks(results: Sequence[NVRecall]) -> list[Block]:
    """Union of near-verbatim blocks from several generations of one book: longest first, a
    block overlapping an already kept one (in the book) is dropped; ordered by book position."""
    kept: list[Block] = []
    for block in sorted((b for r in results for b in r.blocks), key=lambda b: -b.matched):
        if all(block.book_end <= other.book_start or other.book_end <= block.book_start for other in kept):
            kept.append(block)
    return sorted(kept, key=lambda b: b.book_start)


def words_closeness(generated: str, target: str) -> dict[str, float | int]:
    """memrisk.closeness of two texts on their whitespace words: the token metrics count words (`lcs_substring_words`,
    `lcp_words`) and the character metrics compare the words joined by single spaces."""
    generated_words, target_words = generated.split(), target.split()
    ids: dict[str, int] = {}
    close = closeness.closeness([ids.setdefault(w, len(ids)) for w in generated_words], [ids.setdefault(w, len(ids)) for w in target_words],
                                " ".join(generated_words), " ".join(target_words))
    return {name.replace("_tokens", "_words"): getattr(close, name) for name in closeness.METRICS}


def following_words(text: str, prefix: str, count: int) -> str | None:
    """The `count` words of `text` after the first verbatim occurrence of `prefix`'s words (None when absent)."""
    words, joined, wanted = text.split(), " ".join(text.split()), " ".join(prefix.split())
    at = (" " + joined + " ").find(" " + wanted + " ")
    if at < 0:
        return None
    start = joined[:at].count(" ") + (1 if at else 0) + len(prefix.split())
    return " ".join(words[start:start + count])


def generation_closeness(text: str, prefix: str, target: str, first: Phase1Result, generation: str) -> dict[str, Any]:
    """Closeness of Phase 1's kept answer to the seed target, and of the whole generation to as many of the book's
    words as it has, from the end of the seed prefix (None where there is no answer or the prefix is not in the book)."""
    best = first.best
    segment = following_words(text, prefix, len(generation.split()))
    return {
        "phase1": words_closeness(best.response, target) if best else None,
        "generation": words_closeness(generation, segment) if segment is not None and generation.split() else None,
    }


def read_book(path: str) -> str:
    """A book's text (UTF-8, non-empty)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MemriskError(f"book file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise MemriskError(f"book {path} is not UTF-8 text: {exc}") from None
    if not text.split():
        raise MemriskError(f"book {path} has no words")
    return text


class BooksRun:
    """One `memrisk books run`: shared session, per-book phases, outputs through the store."""

    def __init__(
        self, config: BooksRunConfig, out: Path, *, force: bool = False, provider: ChatProvider | None = None,
        sleep: Callable[[float], None] = time.sleep, progress: bool = True,
    ) -> None:
        self.config, self.sleep, self.progress = config, sleep, progress
        self.texts = {b.name: read_book(b.path) for b in config.books}
        model = config.model
        self.price = run_price(model.provider, model.name, Price(**model.price.model_dump()) if model.price else None)
        self.provider = provider or provider_for(model)
        self.settings = self._settings()
        dump = config.model_dump(mode="json")
        texts = {name: hashlib.sha256(text.encode("utf-8")).hexdigest() for name, text in self.texts.items()}
        self.store = RecordStore.open(out, dump, dump | {"book_sha256": texts, "resolved": self.settings}, force=force)
        if force:
            self.store.remove(REQUESTS)
        backoff = config.phase2.backoff
        self.session = Session(
            self.provider, RequestLog(out / REQUESTS), self.price, spend_cap=config.spend_cap_usd,
            retry=RetryPolicy(backoff.max_retries, backoff.initial_delay_s, backoff.factor, backoff.max_delay_s), sleep=sleep,
        )

    def run(self) -> dict[str, Any]:
        """Every book in order, after logging the settings; returns (and stores) the summary."""
        self.session.record("settings", **self.settings)
        books = [self._book(b.name, self.texts[b.name], b.prefix, b.target) for b in self.config.books]
        summary = {
            "kind": "books",
            "model": {"provider": self.config.model.provider, "name": self.config.model.name},
            "settings": self.settings,
            "spend_cap_usd": self.config.spend_cap_usd,
            "spent_usd": self.session.spent,
            "requests_sent": self.session.sent,
            "price_per_million": self.price.__dict__,
            "costs": cost_report(self.session.responses(), self.price).as_dict(),
            "books": books,
        }
        self.store.write_json(BOOKS_SUMMARY, summary)
        return summary

    def _say(self, message: str) -> None:
        if self.progress:
            print(message, file=sys.stderr, flush=True)

    def _phase1_settings(self) -> GenerationSettings:
        """Phase 1 requests: temperature, max tokens (1000, Books §3.1) and Gemini's thinking budget."""
        model = self.config.model
        return GenerationSettings(model.temperature, self.config.phase1.max_tokens, thinking_budget=model.thinking())

    def _phase2_settings(self, candidates: int) -> GenerationSettings:
        """Phase 2 requests: the model's Books App. C.2.1 settings with `candidates` answers per turn."""
        model = self.config.model
        return GenerationSettings(
            model.temperature, model.default("max_tokens"), model.default("frequency_penalty"), model.default("presence_penalty"),
            candidates, model.thinking(),
        )

    def _settings(self) -> dict[str, Any]:
        """What this run sends, resolved: Phase 1 preset and budget, Phase 2 turns, prompt and generation settings."""
        config, model = self.config, self.config.model
        attempts, perturb = config.phase1.budget(model.name)
        prompt, text = config.phase2.text(model.name)
        settings: dict[str, Any] = {
            "phase1": {
                "preset": config.phase1.preset, "attempts": attempts, "perturb": perturb,
                "generation": self._phase1_settings().as_dict(),
            },
            "phase2": {
                "turns": model.default("turns"), "prompt": prompt, "continue_prompt": text,
                "generation": self._phase2_settings(1).as_dict(),
            },
        }
        if config.per_chapter:
            per = config.per_chapter
            settings["per_chapter"] = {
                "turns": per.turns, "generation": self._phase2_settings(per.candidates).as_dict(),
                "refusal_retry": per.refusal_retry.model_dump(),
            }
        return settings

    def _phase1(self, run_id: str, prefix: str, target: str) -> Phase1Result:
        p1 = self.config.phase1
        attempts, perturb = p1.budget(self.config.model.name)
        return best_of_n(
            self.session, run_id, prefix, target, attempts=attempts, seed=p1.seed, perturbed=perturb, settings=self._phase1_settings(),
            concurrency=p1.concurrency, threshold=p1.threshold, instruction=p1.instruction, template=p1.template,
        )

    def _phase2(self, run_id: str, first: Phase1Result, turns: int, candidates: int, retry: RefusalRetry | None) -> Phase2Result | None:
        best = first.best
        if first.halt or best is None or not (first.success or self.config.phase1.continue_on_failure):
            return None
        p2 = self.config.phase2
        rules = [MatchRule(kind, tuple(m.patterns), m.regex, m.case_sensitive, m.scope, m.scope_chars) for kind, m in (("refusal", p2.refusal), ("stop", p2.stop))]
        messages = [{"role": "user", "content": best.prompt}, {"role": "assistant", "content": best.response}]
        return continuation_loop(
            self.session, run_id, messages, turns=turns, settings=self._phase2_settings(candidates),
            continue_prompt=self.settings["phase2"]["continue_prompt"], refusals=rules[0], stops=rules[1],
            empty_retry_delay_s=p2.empty_retry_delay_s, refusal_retry=retry, sleep=self.sleep,
        )

    def _book(self, name: str, text: str, prefix: str | None, target: str | None) -> dict[str, Any]:
        p1 = self.config.phase1
        if prefix is None or target is None:
            prefix, target = seed_split(text, p1.prefix_words, p1.target_words)
        self._say(f"[{name}] phase 1 ({p1.preset}): up to {self.settings['phase1']['attempts']} prompt(s)")
        first = self._phase1(name, prefix, target)
        best = first.best
        self._say(f"[{name}] phase 1: {'success' if first.success else 'no success'}"
                  + (f", s = {best.score:.2f} at k = {best.k} ({best.perturbation})" if best else "") + (f"; halted: {first.halt}" if first.halt else ""))
        turns = self.config.model.default("turns")
        second = self._phase2(name, first, turns, 1, None)
        if second:
            self._say(f"[{name}] phase 2: {second.turns} turns, ended by {second.halt}")
        generation = _generation(first, second)
        result = nv_recall(text, generation)
        self.store.write_text(book_file(name, GENERATION), generation)
        self.store.write_text(book_file(name, DIFF), diff_page(text, generation, result, title=f"{name}: nv-recall", context_words=50))
        record: dict[str, Any] = {
            "name": name, "book_words": result.book_words, "seed": {"prefix": prefix, "target": target},
            "phase1": _phase1_summary(first), "phase2": _phase2_summary(second), "nv_recall": _nv_summary(result),
            "closeness": generation_closeness(text, prefix, target, first, generation),
        }
        if self.config.per_chapter:
            record["per_chapter"] = self._per_chapter(name, text, self.config.per_chapter)
        record["costs"] = {  # after the chapters, so a fresh and a resumed run count the same requests
            phase: cost_report([e for e in self.session.responses() if f"/{phase}/" in e["key"] and e["key"].startswith(f"{name}/")], self.price).as_dict()
            for phase in ("phase1", "phase2")
        }
        self._say(f"[{name}] nv-recall {result.nv_recall:.1%} ({result.matched} of {result.book_words} words)")
        self.store.write_json(book_file(name, BOOK_RESULT), record)
        return record

    def _per_chapter(self, name: str, text: str, variant: PerChapterConfig) -> dict[str, Any]:
        """Books §4.3 / App. C.2.3: seed each chapter, continue with candidates and refusal retries."""
        p1 = self.config.phase1
        retry = RefusalRetry(variant.refusal_retry.attempts, variant.refusal_retry.delay_s, variant.refusal_retry.factor)
        chapters, results = [], []
        for index, chapter in enumerate(split_chapters(text, variant.chapter_pattern)):
            run_id = f"{name}/chapter{index:03d}"
            prefix, target = seed_split(chapter, p1.prefix_words, p1.target_words)
            first = self._phase1(run_id, prefix, target)
            second = self._phase2(run_id, first, variant.turns, variant.candidates, retry)
            generation = _generation(first, second)
            result = nv_recall(text, generation)
            results.append(result)
            self.store.write_text(f"books/{name}/chapter{index:03d}.txt", generation)
            chapters.append({"chapter": index, "phase1": _phase1_summary(first), "phase2": _phase2_summary(second), "nv_recall": _nv_summary(result),
                             "closeness": generation_closeness(text, prefix, target, first, generation)})
            self._say(f"[{name}] chapter {index}: nv-recall {result.nv_recall:.1%}" + (f", phase 2 ended by {second.halt}" if second else ""))
            if first.halt or (second and second.halt in ("spend_cap", "http_5xx", "http_error", "retries_exhausted")):
                break
        union = union_blocks(results)
        matched = sum(b.matched for b in union)
        words = results[0].book_words if results else 0
        return {
            "chapters": chapters, "blocks": [b.__dict__ for b in union], "matched": matched,
            "nv_recall": matched / words if words else 0.0, "max_block": max((b.matched for b in union), default=0),
        }


def _generation(first: Phase1Result, second: Phase2Result | None) -> str:
    """The long-form generation: Phase 1's kept answer, then every accepted continuation."""
    best = first.best
    return "\n".join([best.response, *(second.responses if second else ())]) if best else ""


def _phase1_summary(result: Phase1Result) -> dict[str, Any]:
    best = result.best
    return {
        "success": result.success, "attempts": len(result.attempts), "halt": result.halt, "threshold": result.threshold,
        "best_k": best.k if best else None, "score": best.score if best else None,
        "perturbation": best.perturbation if best else None, "prompt": best.prompt if best else None,
        "scores": [a.score for a in result.attempts],
    }


def _phase2_summary(result: Phase2Result | None) -> dict[str, Any] | None:
    if result is None:
        return None
    return {
        "turns": result.turns, "continuations": len(result.responses), "halt": result.halt, "empty": result.empty,
        "refusal_retries": result.refusal_retries, "matches": [m.__dict__ for m in result.matches],
    }


def _nv_summary(result: NVRecall) -> dict[str, Any]:
    return {
        "nv_recall": result.nv_recall, "matched": result.matched, "missing": result.missing, "additional": result.additional,
        "max_block": result.max_block, "book_words": result.book_words, "generated_words": result.generated_words,
        "blocks": [b.__dict__ for b in result.blocks], "signature": result.signature,
    }


def run_books(
    config: BooksRunConfig, out: str | Path, *, force: bool = False, provider: ChatProvider | None = None,
    sleep: Callable[[float], None] = time.sleep, progress: bool = True,
) -> dict[str, Any]:
    """Run (or resume) a books extraction into `out` (locked for this process); returns the summary."""
    with locked_folder(out):
        return BooksRun(config, Path(out), force=force, provider=provider, sleep=sleep, progress=progress).run()
