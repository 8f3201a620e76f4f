"""Token-space distances between a continuation and its target suffix (pure functions)."""

from __future__ import annotations

from collections.abc import Sequence

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
