"""Corpus counts: how many times each window's suffix, and its whole prefix + suffix, occur in the model's training corpus,
and every other method's extraction rate by that count ((n,p) paper Fig. 6, with measured instead of planted counts).

The counts come from an index of the corpus in the model's token ids (memrisk.data.corpus_index); they cost no model
evaluation. The window count is the duplication measure: a suffix alone also occurs wherever its words are common.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from memrisk.data.corpus_index import CorpusIndex, open_corpus_index
from memrisk.data.sources import Document
from memrisk.methods.base import Chunk, Column, MethodDefaults
from memrisk.signature import signature

if TYPE_CHECKING:
    from memrisk.config import ExperimentConfig
    from memrisk.models.backend import LanguageModel

SUFFIX, WINDOW = "corpus_count.suffix", "corpus_count.window"
"""The record columns: occurrences of the suffix, and of prefix + suffix, in the training corpus."""


def count_bin(counts: np.ndarray) -> np.ndarray:
    """Log-spaced bin of each count: 0 → 0, 1 → 1, 2–3 → 2, 4–7 → 3, ... (bin b ≥ 1 holds 2^(b−1) … 2^b − 1)."""
    counts = np.asarray(counts, dtype=np.int64)
    return np.where(counts > 0, np.floor(np.log2(np.maximum(counts, 1))).astype(np.int64) + 1, 0)


def bin_range(index: int) -> tuple[int, int]:
    """The smallest and largest count of a bin."""
    return (0, 0) if index == 0 else (2 ** (index - 1), 2**index - 1)


def bin_label(index: int) -> str:
    """A bin as its counts read: `0`, `1`, `2–3`, `4–7`, ..."""
    low, high = bin_range(index)
    return str(low) if low == high else f"{low}–{high}"


def binned_rates(counts: np.ndarray, verdicts: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """Per non-empty count bin (ascending): its range, its windows and, per verdict label, how many it extracted."""
    bins = count_bin(counts)
    out = []
    for index in np.unique(bins):
        members = bins == index
        low, high = bin_range(int(index))
        out.append({"bin": bin_label(int(index)), "low": low, "high": high, "windows": int(members.sum()),
                    "extracted": {label: int(np.asarray(verdict, dtype=bool)[members].sum()) for label, verdict in verdicts.items()}})
    return out


def extraction_verdicts(column: Column, config: ExperimentConfig) -> dict[str, np.ndarray]:
    """Every other configured method's extraction verdict per window, by label (greedy exact, p_z ≥ τ_min per policy, CBS
    LB_E ≥ τ_min, Monte Carlo, PA-memorized: whichever the run has)."""
    from memrisk.methods import configured

    return {label: verdict for method in configured(config) if method.name != CorpusCounts.name
            for label, verdict in method.extracted(column, config).items()}


def _median(values: np.ndarray) -> float | None:
    return float(np.median(values)) if values.size else None


def count_stats(column: Column) -> dict[str, Any]:
    """Median and largest suffix and window counts, and how many windows occur in the corpus at all."""
    suffix, window = column(SUFFIX).astype(np.int64), column(WINDOW).astype(np.int64)
    return {"median_suffix": _median(suffix), "median_window": _median(window),
            "max_suffix": int(suffix.max(initial=0)), "max_window": int(window.max(initial=0)),
            "windows_in_corpus": int((window > 0).sum())}


class CorpusCounts(MethodDefaults):
    """Suffix and window occurrences in the indexed training corpus, looked up per window."""

    name = "corpus_counts"
    section = "corpus"

    def columns(self, config: ExperimentConfig) -> list[str]:
        return [SUFFIX, WINDOW]

    def cost_bound(self, config: ExperimentConfig, prefix_length: int, suffix_length: int) -> int:
        return 0

    def prepare(self, config: ExperimentConfig, lm: LanguageModel, documents: Mapping[str, list[Document]]) -> CorpusIndex:
        """The corpus's index under the model's tokenizer, opened from the cache or `index_dir`, built first when missing."""
        keys = [key for key, _ in config.document_sources() if key.startswith("corpus:")]
        texts = [document.text for key in keys for document in documents[key]] if keys else None
        return open_corpus_index(lm, texts, config.corpus.index_dir)

    def setup_info(self, setup: CorpusIndex) -> dict[str, Any]:
        return setup.info()

    def score(self, chunk: Chunk) -> list[dict[str, Any]]:
        index: CorpusIndex = chunk.setups[self.name]
        return [{SUFFIX: index.count(suffix), WINDOW: index.count(prefix + suffix)}
                for prefix, suffix in zip(chunk.prefixes, chunk.suffixes)]

    def summarise(self, column: Column, config: ExperimentConfig) -> dict[str, Any]:
        """Median and largest counts, the windows found in the corpus at all, and extraction by window-count bin."""
        window = column(WINDOW).astype(np.int64)
        return {"corpus_counts": count_stats(column) | {"by_window_count": binned_rates(window, extraction_verdicts(column, config))}}

    def signature(self, config: ExperimentConfig) -> str:
        return signature(self.name, engine="infini-gram", a=config.windows.prefix_length, T=config.windows.suffix_length)
