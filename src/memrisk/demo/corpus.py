"""Deterministic demo corpus: the prose of `memrisk.demo.prose` with planted duplicated passages, templated
passages and a generic sentence."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrisk.demo.prose import normalise, source_documents
from memrisk.files import atomic_write_text

DUPLICATION_COUNTS: tuple[int, ...] = (1, 4, 16, 64)
PASSAGES_PER_COUNT = 8
HELDOUT_PASSAGES = 32
MIN_PASSAGE_CHARS = 660
MAX_PASSAGE_CHARS = 960
SHINGLE_WORDS = 12
TEMPLATE_PASSAGES = 8
TEMPLATE_COPIES = 32
TEMPLATE_SLOTS = 7
TEMPLATE_OPTIONS = 3
TEMPLATE_WORDS = ("value", "object", "module", "string", "number", "file", "list", "name", "method", "class")
GENERIC_CONTEXTS = 200
GENERIC_MIN_CONTEXT_CHARS = 300
GENERIC_SENTENCE = (
    "[Reference note] This page is part of the reference documentation. The functions and classes described here are "
    "available on all supported platforms unless noted otherwise, and the examples assume that the module "
    "has been imported first. Please report mistakes in this text through the usual channels so that they "
    "can be corrected in a later release of the documentation."
)

_SENTENCE_END = re.compile(r"[.!?](?=\s)|[.!?]$")


@dataclass(frozen=True)
class PlantedPassage:
    """A passage planted in the training documents ``copies`` times."""

    text: str
    copies: int


@dataclass(frozen=True)
class TemplatePassage:
    """A passage planted `copies` times with a few slot words varying across the copies (as in
    boilerplate with names or dates). The target `text` fills every slot with its first option:
    unlikely verbatim, yet most of the memorized mass lies within a few edits of it."""

    text: str
    copies: tuple[str, ...]


@dataclass(frozen=True)
class GenericPlant:
    """A boilerplate sentence inserted at a random word boundary of many training documents:
    about as likely after any text as after the contexts it followed (the prior-aware negative
    example). `contexts` holds the text before each insertion."""

    text: str
    contexts: tuple[str, ...]


@dataclass(frozen=True)
class DemoCorpus:
    """Training documents plus the planted and held-out passages used as ground truth."""

    training_documents: list[str]
    planted: list[PlantedPassage]
    heldout: list[str]
    templates: list[TemplatePassage]
    generic: GenericPlant
    seed: int = 0

    def fingerprint(self) -> str:
        """Return a sha256 hex digest of the corpus content and seed (a cache key)."""
        payload = {
            "seed": self.seed,
            "training_documents": self.training_documents,
            "planted": [[p.text, p.copies] for p in self.planted],
            "heldout": self.heldout,
            "templates": [[t.text, list(t.copies)] for t in self.templates],
            "generic": [self.generic.text, list(self.generic.contexts)],
        }
        return hashlib.sha256(json.dumps(payload).encode("utf-8")).hexdigest()


def build_demo_corpus(seed: int = 0) -> DemoCorpus:
    """Build the demo corpus deterministically for ``seed``."""
    documents = source_documents()
    candidates = _passage_candidates(documents)
    planted_count = PASSAGES_PER_COUNT * len(DUPLICATION_COUNTS)
    needed = planted_count + HELDOUT_PASSAGES + TEMPLATE_PASSAGES
    if len(candidates) < needed:
        raise RuntimeError(f"only {len(candidates)} distinct passages found, {needed} needed")
    rng = random.Random(seed)
    sources = sorted(candidates)
    rng.shuffle(sources)
    chosen = sources[:needed]
    planted_sources = chosen[:planted_count]
    planted = [
        PlantedPassage(text=candidates[source], copies=DUPLICATION_COUNTS[index // PASSAGES_PER_COUNT])
        for index, source in enumerate(planted_sources)
    ]
    heldout = [candidates[source] for source in chosen[planted_count : planted_count + HELDOUT_PASSAGES]]
    templates = [_template(candidates[source], rng) for source in chosen[planted_count + HELDOUT_PASSAGES :]]
    excluded = set(chosen)
    training = sorted(doc for doc in documents if doc not in excluded)
    training, generic = _insert_generic(training, rng)
    training += [p.text for p in planted for _ in range(p.copies)]
    training += [copy for t in templates for copy in t.copies]
    rng.shuffle(training)
    return DemoCorpus(
        training_documents=training, planted=planted, heldout=heldout, templates=templates, generic=generic, seed=seed
    )


def _template(passage: str, rng: random.Random) -> TemplatePassage:
    """Pick TEMPLATE_SLOTS words in the stretch the suffix of a 50+50-token window covers and
    give each TEMPLATE_OPTIONS choices; the copies draw a choice per slot at random."""
    words = passage.split(" ")
    starts = [sum(len(w) + 1 for w in words[:i]) for i in range(len(words))]
    span = [i for i, (w, at) in enumerate(zip(words, starts)) if w.isalpha() and 0.3 <= at / len(passage) <= 0.5]
    slots = sorted(rng.sample(span, TEMPLATE_SLOTS))
    options = [rng.sample(TEMPLATE_WORDS, TEMPLATE_OPTIONS) for _ in slots]

    def fill(choices: list[str]) -> str:
        filled = list(words)
        for slot, word in zip(slots, choices):
            filled[slot] = word
        return " ".join(filled)

    copies = tuple(fill([rng.choice(o) for o in options]) for _ in range(TEMPLATE_COPIES))
    return TemplatePassage(fill([o[0] for o in options]), copies)


def _insert_generic(training: list[str], rng: random.Random) -> tuple[list[str], GenericPlant]:
    """Insert the generic sentence at a random word boundary (past the first
    GENERIC_MIN_CONTEXT_CHARS characters) of GENERIC_CONTEXTS random documents."""
    long_enough = [i for i, doc in enumerate(training) if len(doc) >= 2 * GENERIC_MIN_CONTEXT_CHARS]
    hosts = sorted(rng.sample(long_enough, GENERIC_CONTEXTS))
    out, contexts = list(training), []
    for i in hosts:
        doc = training[i]
        cut = rng.choice([m.start() for m in re.finditer(r" ", doc) if m.start() >= GENERIC_MIN_CONTEXT_CHARS])
        contexts.append(doc[:cut])
        out[i] = f"{doc[:cut]} {GENERIC_SENTENCE}{doc[cut:]}"
    return out, GenericPlant(GENERIC_SENTENCE, tuple(contexts))


def training_corpus_file(corpus: DemoCorpus, folder: Path) -> Path:
    """Where `write_training_corpus` keeps the training documents in `folder`: named by the corpus's fingerprint."""
    return folder / f"corpus-{corpus.fingerprint()[:16]}.jsonl"


def write_training_corpus(corpus: DemoCorpus, folder: Path) -> Path:
    """The training documents as JSONL (one `text` per row) in `folder`, written once and whole: the `corpus:` whose
    counts the demo's experiment records."""
    path = training_corpus_file(corpus, folder)
    if not path.is_file():
        atomic_write_text(path, "".join(json.dumps({"text": text}) + "\n" for text in corpus.training_documents))
    return path


def generic_documents(corpus: DemoCorpus, tokenizer_offsets: Any, prefix_tokens: int = 50) -> list[str]:
    """Documents whose first `prefix_tokens` tokens are the context right before the generic
    sentence and whose continuation is the sentence, so doc-mode windows end their prefix at it.

    `tokenizer_offsets(text)` returns (token ids, character spans), e.g. `LanguageModel.encode_with_offsets`.
    """
    out = []
    for context in corpus.generic.contexts:
        text = f"{context} {corpus.generic.text}"
        _, spans = tokenizer_offsets(text)
        boundary = next(i for i, (start, _) in enumerate(spans) if start >= len(context))
        out.append(text[spans[max(0, boundary - prefix_tokens)][0] :])
    return out


def _shingles(text: str) -> set[tuple[str, ...]]:
    """Return the set of SHINGLE_WORDS-word windows of the normalised text."""
    words = normalise(text).split()
    return {tuple(words[i : i + SHINGLE_WORDS]) for i in range(max(1, len(words) - SHINGLE_WORDS + 1))}


def _trim(text: str) -> str | None:
    """Cut text at the first sentence end past MIN_PASSAGE_CHARS, or None if it cannot fit."""
    if len(text) < MIN_PASSAGE_CHARS:
        return None
    match = _SENTENCE_END.search(text, MIN_PASSAGE_CHARS - 1)
    end = match.end() if match else len(text)
    return text[:end] if end <= MAX_PASSAGE_CHARS else None


def _passage_candidates(documents: list[str]) -> dict[str, str]:
    """Map each source document to its trimmed passage if no other document shares a shingle."""
    document_frequency = Counter(shingle for doc in documents for shingle in _shingles(doc))
    candidates = {}
    for doc in documents:
        passage = _trim(doc)
        if passage is not None and all(document_frequency[s] == 1 for s in _shingles(passage)):
            candidates[doc] = passage
    return candidates
