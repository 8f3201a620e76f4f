"""How close a generated continuation is to its target: ROUGE-L, longest common substring and prefix (tokens and
characters), character Levenshtein ratio and BLEU (pure functions; docs/closeness.md says what each one means).

Each metric comes from a library: the longest common substring from `cydifflib` (difflib's SequenceMatcher compiled,
autojunk off, same answers), common prefixes, the Levenshtein ratio and ROUGE-L's longest common subsequence from
`rapidfuzz` (ROUGE-L's F-measure from `rouge-score`, on whitespace words), and BLEU is the project's one BLEU
(`memrisk.distance`, nltk's). Many generations of one target (CBS candidates, Monte Carlo samples) go together: the
target is prepared once and each distinct generation is scored once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields

import cydifflib
import numpy as np
from rapidfuzz.distance import LCSseq, Levenshtein, Prefix
from rouge_score import scoring

from memrisk.distance import sentence_bleus


@dataclass(frozen=True)
class Closeness:
    """The closeness of one generation to its target; larger is closer for every metric."""

    rouge_l: float
    """ROUGE-L F-measure on whitespace words (rouge-score's F of the longest common word subsequence), in [0, 1]."""
    lcs_substring_tokens: int
    """Longest run of tokens found contiguously in both."""
    lcs_substring_chars: int
    """Longest run of characters found contiguously in both texts."""
    lcp_tokens: int
    """Tokens the generation shares with the target from the start."""
    lcp_chars: int
    """Characters the texts share from the start."""
    char_levenshtein_ratio: float
    """1 − character edit distance / the longer text's length (1 for two empty texts), in [0, 1]."""
    bleu: float
    """Sentence BLEU on whitespace words (nltk's: 4-gram, uniform weights, no smoothing), in [0, 1]."""


METRICS: tuple[str, ...] = tuple(f.name for f in fields(Closeness))
"""The metric names, in record-column order."""


def column_names(prefix: str) -> list[str]:
    """The record columns `<prefix>.<metric>`, one per metric."""
    return [f"{prefix}.{name}" for name in METRICS]


class WhitespaceWords:
    """rouge-score's tokenizer interface (an object with `tokenize`) over whitespace-separated words, case and
    punctuation kept (its default lowercases and keeps only ASCII letters and digits, which drops every word of a
    non-Latin text). Not a subclass of its `Tokenizer`: `rouge_score.tokenizers` imports nltk's stemmers, about 0.7 s
    of every memrisk process."""

    def tokenize(self, text: str) -> list[str]:
        return text.split()


WORDS = WhitespaceWords()


def closeness(generated_ids: Sequence[int], target_ids: Sequence[int], generated_text: str, target_text: str) -> Closeness:
    """Every metric of one generation against its target, from both token ids and decoded texts."""
    values = closeness_many([generated_ids], [generated_text], target_ids, target_text)
    return Closeness(**{name: values[name][0].item() for name in METRICS})


def closeness_many(
    generated_ids: Sequence[Sequence[int]], generated_texts: Sequence[str], target_ids: Sequence[int], target_text: str,
) -> dict[str, np.ndarray]:
    """Every metric of many generations of one target: per metric name, one value per generation (in their order)."""
    keys = [tuple(int(i) for i in ids) for ids in generated_ids]
    position: dict[tuple[int, ...], int] = {}
    distinct: list[int] = []
    for index, key in enumerate(keys):
        if key not in position:
            position[key] = len(distinct)
            distinct.append(index)
    where = np.array([position[key] for key in keys], dtype=np.int64)
    ids = [keys[i] for i in distinct]
    texts = [generated_texts[i] for i in distinct]
    target = tuple(int(i) for i in target_ids)
    values = {
        "rouge_l": rouge_l_many(texts, target_text),
        "lcs_substring_tokens": longest_common_substrings(ids, target),
        "lcs_substring_chars": longest_common_substrings(texts, target_text),
        "lcp_tokens": np.array([Prefix.similarity(g, target) for g in ids], dtype=np.int64),
        "lcp_chars": np.array([Prefix.similarity(g, target_text) for g in texts], dtype=np.int64),
        "char_levenshtein_ratio": np.array([Levenshtein.normalized_similarity(g, target_text) for g in texts], dtype=np.float64),
        "bleu": sentence_bleus(texts, target_text),
    }
    return {name: values[name][where] for name in METRICS}


def longest_common_substrings(generated: Iterable[Sequence[int] | str], target: Sequence[int] | str) -> np.ndarray:
    """Length of the longest run found contiguously in each generation and in the target (difflib's
    find_longest_match, autojunk off; `cydifflib` runs it compiled, 15× faster than the standard library)."""
    matcher = cydifflib.SequenceMatcher(None, "", target, autojunk=False)
    out = []
    for sequence in generated:
        matcher.set_seq1(sequence)
        out.append(matcher.find_longest_match(0, len(sequence), 0, len(target)).size)
    return np.array(out, dtype=np.int64)


def rouge_l_many(generated_texts: Iterable[str], target_text: str) -> np.ndarray:
    """ROUGE-L F-measure of each text against the target on whitespace words: rouge-score's LCS precision, recall
    and F (0 when either side has no word), with the longest common subsequence from rapidfuzz (rouge-score's own
    table is pure Python, 370 µs a pair at T = 50; rapidfuzz's 6 µs)."""
    target_words = WORDS.tokenize(target_text)
    out = []
    for text in generated_texts:
        words = WORDS.tokenize(text)
        if not words or not target_words:
            out.append(0.0)
            continue
        common = LCSseq.similarity(words, target_words)
        out.append(scoring.fmeasure(common / len(words), common / len(target_words)))
    return np.array(out, dtype=np.float64)


class SampleCloseness:
    """The mean and maximum of every metric over many generations of one target, fed in batches (Monte Carlo samples):
    the generations are scored as they come and dropped; the mean is exactly rounded (math.fsum), so it does not
    depend on how they were batched."""

    def __init__(self, target_ids: Sequence[int], target_text: str, decode: Callable[[Sequence[int]], str]) -> None:
        self.target_ids, self.target_text, self.decode = list(target_ids), target_text, decode
        self.values: dict[str, list[np.ndarray]] = {name: [] for name in METRICS}

    def add(self, generated_ids: Sequence[Sequence[int]]) -> None:
        """Score one batch of generations (token ids; decoded here)."""
        ids = [list(map(int, row)) for row in generated_ids]
        for name, values in closeness_many(ids, [self.decode(row) for row in ids], self.target_ids, self.target_text).items():
            self.values[name].append(values)

    def result(self) -> dict[str, tuple[float | None, float | None]]:
        """Per metric (mean, maximum) over every generation added; (None, None) before any."""
        out: dict[str, tuple[float | None, float | None]] = {}
        for name, batches in self.values.items():
            values = np.concatenate(batches) if batches else np.zeros(0)
            out[name] = (math.fsum(values.tolist()) / values.size, values.max().item()) if values.size else (None, None)
        return out


def summary(values: dict[str, Sequence[float]]) -> dict[str, dict[str, float | None]]:
    """Per metric the mean and median over windows (None when there are none; missing values are left out)."""
    out: dict[str, dict[str, float | None]] = {}
    for name, column in values.items():
        numbers = np.asarray([v for v in column if v is not None], dtype=np.float64)
        numbers = numbers[~np.isnan(numbers)]
        out[name] = {"mean": float(numbers.mean()), "median": float(np.median(numbers))} if numbers.size else {"mean": None, "median": None}
    return out
