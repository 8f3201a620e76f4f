"""Token-space distances between a continuation and its target suffix (pure functions)."""

from __future__ import annotations

from collections.abc import Sequence

from rapidfuzz.distance import Levenshtein

from memrisk.errors import MemriskError


def hamming(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of positions where two equal-length token sequences differ."""
    if len(a) != len(b):
        raise MemriskError(f"Hamming distance needs equal lengths, got {len(a)} and {len(b)}")
    return sum(x != y for x, y in zip(a, b))


def levenshtein(a: Sequence[int], b: Sequence[int]) -> int:
    """Unit-cost edit distance (insertions, deletions, substitutions) between token sequences."""
    return Levenshtein.distance(list(a), list(b))
