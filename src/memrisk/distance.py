"""Token-space distances between a continuation and its target suffix (pure functions)."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import numpy as np
import torch
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


def char_levenshtein(a: str, b: str) -> int:
    """Unit-cost edit distance between two decoded texts, in characters."""
    return Levenshtein.distance(a, b)


def sentence_bleu(candidate: str, reference: str) -> float:
    """Sentence BLEU of decoded texts split on whitespace, with nltk's defaults (4-gram, uniform, no smoothing)."""
    import warnings

    from nltk.translate.bleu_score import sentence_bleu as nltk_sentence_bleu

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(nltk_sentence_bleu([reference.split()], candidate.split()))


BLEU_ORDER = 4


def sentence_bleus(candidates: Sequence[str], reference: str) -> np.ndarray:
    """`sentence_bleu` of many candidates against one reference, value for value (tests check it against nltk).

    nltk recounts the reference's n-grams at every call (220 µs a pair at T = 50); here they are counted once and
    the candidates' clipped counts are taken together, then nltk's formula (no smoothing: a missing order counts as
    the smallest float) is applied in the same float operations, in the same order.
    """
    reference_words = reference.split()
    vocabulary = {word: index for index, word in enumerate(dict.fromkeys(reference_words))}
    unknown = len(vocabulary)
    span = (unknown + 1) ** BLEU_ORDER
    if span * max(len(candidates), 1) >= 2**62:  # n-gram keys would not fit in int64
        return np.array([sentence_bleu(candidate, reference) for candidate in candidates], dtype=np.float64)
    words = [candidate.split() for candidate in candidates]
    owners = np.repeat(np.arange(len(words)), [len(w) for w in words])
    codes = np.array([vocabulary.get(word, unknown) for ws in words for word in ws], dtype=np.int64)
    reference_codes = np.array([vocabulary[word] for word in reference_words], dtype=np.int64)
    numerators = np.zeros((len(words), BLEU_ORDER), dtype=np.int64)
    for n in range(1, BLEU_ORDER + 1):
        listed, available = np.unique(_ngrams(reference_codes, np.zeros_like(reference_codes), n, unknown)[1], return_counts=True)
        if not len(listed):
            continue
        gram_owners, grams = _ngrams(codes, owners, n, unknown)
        keys, counts = np.unique(gram_owners * span + grams, return_counts=True)
        key_owners, key_grams = np.divmod(keys, span)
        at = np.searchsorted(listed, key_grams).clip(max=len(listed) - 1)
        clipped = np.where(listed[at] == key_grams, np.minimum(counts, available[at]), 0)
        numerators[:, n - 1] = np.bincount(key_owners, weights=clipped, minlength=len(words))
    return np.array([_bleu(numerators[i].tolist(), len(w), len(reference_words)) for i, w in enumerate(words)], dtype=np.float64)


def _ngrams(codes: np.ndarray, owners: np.ndarray, n: int, unknown: int) -> tuple[np.ndarray, np.ndarray]:
    """The n-grams that lie within one owner and hold only reference words (any other clips to 0): their owners,
    and each as one integer (base unknown + 1 digits)."""
    starts = max(len(codes) - n + 1, 0)
    gram = np.zeros(starts, dtype=np.int64)
    kept = owners[:starts] == owners[n - 1:]
    for offset in range(n):
        digit = codes[offset: offset + starts]
        kept &= digit != unknown
        gram = gram * (unknown + 1) + digit
    return owners[:starts][kept], gram[kept]


def _bleu(numerators: list[int], hypothesis_length: int, reference_length: int) -> float:
    """nltk's sentence BLEU from clipped n-gram counts (uniform weights, no smoothing), in nltk's float operations."""
    if numerators[0] == 0:
        return 0.0
    if hypothesis_length > reference_length:
        penalty = 1.0
    else:
        penalty = math.exp(1 - reference_length / hypothesis_length)
    weight = 1 / BLEU_ORDER
    precisions = [
        numerator / max(1, hypothesis_length - n) if numerator else sys.float_info.min
        for n, numerator in enumerate(numerators)
    ]
    return float(penalty * math.exp(math.fsum(weight * math.log(p) for p in precisions)))


BAND_INF = 1 << 20


def band_init(rows: int, epsilon: int, device: torch.device | None = None) -> torch.Tensor:
    """Banded Wagner–Fischer row D[0, ·] for `rows` paths: D[0, j] = j on j ∈ [0, ε], +∞ elsewhere.

    Band index i at depth t holds D[t, j] with j = t − ε + i, so the band has 2ε + 1 cells.
    """
    offsets = torch.arange(2 * epsilon + 1, device=device) - epsilon
    row = torch.where(offsets >= 0, offsets, BAND_INF)
    return row.expand(rows, -1).clone()


def band_step(
    band: torch.Tensor, depth: torch.Tensor, tokens: torch.Tensor, targets: torch.Tensor, target_lengths: torch.Tensor
) -> torch.Tensor:
    """Advance banded rows from depth t−1 to t = `depth` after appending `tokens` (Ukkonen band).

    band: [R, 2ε+1] rows at depth t−1; depth, tokens, target_lengths: [R]; targets: [R, T_max].
    Cells outside 0 ≤ j ≤ T are +∞. Costs are unit (insert, delete, substitute).
    """
    width = band.shape[1]
    epsilon = (width - 1) // 2
    j = depth.unsqueeze(1) - epsilon + torch.arange(width, device=band.device)
    in_range = (j >= 0) & (j <= target_lengths.unsqueeze(1))
    target_index = (j - 1).clamp(0, targets.shape[1] - 1)
    mismatch = (targets.gather(1, target_index) != tokens.unsqueeze(1)).to(band.dtype)
    diagonal = band + mismatch
    from_above = torch.cat([band[:, 1:], torch.full_like(band[:, :1], BAND_INF)], dim=1) + 1
    base = torch.minimum(diagonal, from_above)
    base = torch.where(j == 0, depth.unsqueeze(1).to(band.dtype), base)
    base = torch.where(in_range, base, BAND_INF)
    index = torch.arange(width, device=band.device, dtype=band.dtype)
    row = torch.cummin(base - index, dim=1).values + index
    return torch.where(in_range, row, BAND_INF).clamp(max=BAND_INF)


def band_lower_bound(band: torch.Tensor, tighter: bool = False) -> torch.Tensor:
    """Least final distance reachable from each banded row: min_j D[t, j] (+ |t − j| if `tighter`)."""
    if not tighter:
        return band.min(dim=1).values
    epsilon = (band.shape[1] - 1) // 2
    gap = (torch.arange(band.shape[1], device=band.device) - epsilon).abs()
    return (band + gap).min(dim=1).values


def band_final(band: torch.Tensor) -> torch.Tensor:
    """D[T, T] of rows at depth T (the band's centre cell)."""
    return band[:, (band.shape[1] - 1) // 2]
