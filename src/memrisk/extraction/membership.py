"""Membership-inference scores and their ROC analysis: pure numpy, per-token arrays in, numbers out.

Every score is oriented so that a higher value means "more likely a training member": LOSS (Yeom et al. 2018) as the
mean token log-likelihood, the zlib ratio (Carlini et al. 2021), Min-K% Prob (Shi et al. 2024), Min-K%++ (Zhang et al.
2024) and the reference-model log-likelihood ratio (Carlini et al. 2021). The ROC compares the scores of members
(role target) with those of non-members (role control): AUC, TPR at a fixed FPR, and seeded bootstrap intervals.

Ties: windows with equal scores enter the ROC together, as one diagonal step, so the AUC counts a tied
member/non-member pair as one half (the Mann–Whitney U statistic), and TPR at FPR x is read at the last ROC vertex
with FPR ≤ x (no interpolation inside a tied step).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memrisk.errors import MemriskError

BOOTSTRAP_CELLS = 4_000_000
"""Replicate weights held at once by the bootstrap (replicates × windows), to bound its memory."""


def zlib_length(text: str) -> int:
    """Bytes of the UTF-8 text after zlib compression at the default level (Carlini et al. 2021, §6.1)."""
    return len(zlib.compress(text.encode("utf-8")))


def lowest_share_mean(values: np.ndarray, k: float) -> float:
    """Mean of the lowest ⌊k·T⌋ of T values (at least one): Min-K% Prob's aggregate (Shi et al. 2024, eq. 1)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise MemriskError("a membership score needs at least one suffix token")
    count = max(1, math.floor(k * values.size))
    return float(np.sort(values)[:count].mean())


def standardised_log_probs(log_p: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """(log p(x_t) − μ_t) / σ_t per token (Min-K%++, Zhang et al. 2024, eq. 3); where σ_t = 0 (p uniform over its
    support) the target scores 0 when it lies in the support and −inf when it does not."""
    log_p, mean, std = (np.asarray(a, dtype=np.float64) for a in (log_p, mean, std))
    flat = std == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (log_p - mean) / np.where(flat, 1.0, std)
    return np.where(flat, np.where(np.isneginf(log_p), -np.inf, 0.0), z)


def mean_log_likelihood(log_p: np.ndarray) -> float:
    """Mean token log-likelihood: the negative LOSS of Yeom et al. 2018 (higher: more likely a member)."""
    return float(np.mean(np.asarray(log_p, dtype=np.float64)))


def log_likelihood_ratio(target: float, reference: float) -> float:
    """Target minus reference mean log-likelihood (Carlini et al. 2021's reference-model score, as a log ratio);
    −inf when the target cannot emit the suffix, +inf when only the reference cannot."""
    if math.isinf(target) and target < 0:
        return -math.inf
    return target - reference


@dataclass(frozen=True)
class WindowScores:
    """The membership scores of one window (higher: more likely a member)."""

    loss: float
    zlib: float
    min_k: float
    min_k_pp: float
    reference: float | None


def window_scores(log_p: np.ndarray, mean: np.ndarray, std: np.ndarray, text: str, k: float,
                  reference_log_p: np.ndarray | None = None) -> WindowScores:
    """Every score of one suffix from its T raw token log-probabilities, the per-step μ and σ of log p, its text and K;
    the reference ratio when the reference model's T log-probabilities are given."""
    loss = mean_log_likelihood(log_p)
    return WindowScores(
        loss=loss,
        zlib=loss / zlib_length(text),
        min_k=lowest_share_mean(log_p, k),
        min_k_pp=lowest_share_mean(standardised_log_probs(log_p, mean, std), k),
        reference=None if reference_log_p is None else log_likelihood_ratio(loss, mean_log_likelihood(reference_log_p)),
    )


@dataclass(frozen=True)
class RocCurve:
    """ROC vertices from (0, 0) to (1, 1), one per distinct score (descending thresholds), and the class sizes."""

    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray
    members: int
    non_members: int

    @property
    def auc(self) -> float:
        """Area under the vertices (trapezoids): P(member score > non-member score) + ½ P(tie), the Mann–Whitney U / n₁n₀."""
        return float(np.sum(np.diff(self.fpr) * (self.tpr[1:] + self.tpr[:-1])) / 2.0)

    def tpr_at(self, fpr: float) -> float:
        """TPR at the last vertex whose FPR is at most `fpr` (no interpolation)."""
        return float(self.tpr[_within_fpr(np.round(self.fpr * self.non_members), fpr, self.non_members)].max())


def _within_fpr(false_positives: np.ndarray, fpr: float, non_members: int) -> np.ndarray:
    """Which false-positive counts make an FPR of at most `fpr` (counted in windows, so 0.01 · 300 allows 3)."""
    return false_positives <= math.floor(fpr * non_members + 1e-9)


def _scores(values: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    """Scores as float64, refused when empty or NaN."""
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size == 0:
        raise MemriskError(f"a ROC needs at least one {what} score")
    if np.isnan(array).any():
        raise MemriskError(f"{int(np.isnan(array).sum())} {what} scores are NaN; a ROC needs ordered scores")
    return array


@dataclass(frozen=True)
class _Ranked:
    """Members and non-members pooled and sorted by descending score, with where each run of tied scores starts."""

    order: np.ndarray
    is_member: np.ndarray
    starts: np.ndarray
    thresholds: np.ndarray
    members: int
    non_members: int

    @classmethod
    def of(cls, members: Sequence[float] | np.ndarray, non_members: Sequence[float] | np.ndarray) -> _Ranked:
        m, c = _scores(members, "member"), _scores(non_members, "non-member")
        pooled = np.concatenate([m, c])
        order = np.argsort(-pooled, kind="stable")
        ranked = pooled[order]
        starts = np.concatenate([[0], np.flatnonzero(ranked[1:] != ranked[:-1]) + 1])
        is_member = np.concatenate([np.ones(m.size, dtype=bool), np.zeros(c.size, dtype=bool)])[order]
        return cls(order, is_member, starts, ranked[starts], int(m.size), int(c.size))

    def counts(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cumulative true and false positives at each vertex, (0, 0) first, for rows of weights over the sorted windows."""
        tp = np.add.reduceat(weights * self.is_member, self.starts, axis=1).cumsum(axis=1)
        fp = np.add.reduceat(weights * ~self.is_member, self.starts, axis=1).cumsum(axis=1)
        zero = np.zeros((weights.shape[0], 1))
        return np.hstack([zero, tp]), np.hstack([zero, fp])


def roc_curve(members: Sequence[float] | np.ndarray, non_members: Sequence[float] | np.ndarray) -> RocCurve:
    """The ROC of telling members from non-members by score (higher: member), ties entering together."""
    ranked = _Ranked.of(members, non_members)
    tp, fp = ranked.counts(np.ones((1, ranked.order.size)))
    return RocCurve(fp[0] / ranked.non_members, tp[0] / ranked.members, ranked.thresholds, ranked.members, ranked.non_members)


def roc_auc(members: Sequence[float] | np.ndarray, non_members: Sequence[float] | np.ndarray) -> float:
    """AUC of the ROC: the probability that a random member outscores a random non-member, ties counting one half."""
    return roc_curve(members, non_members).auc


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap percentile interval (None without bootstrap)."""

    estimate: float
    low: float | None
    high: float | None

    def to_dict(self) -> dict[str, float | None]:
        """As summary.json holds it."""
        return {"estimate": self.estimate, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class RocSummary:
    """AUC and TPR at each of `fprs`, each with its interval, over `members` and `non_members` windows."""

    auc: Interval
    tpr_at: dict[float, Interval]
    members: int
    non_members: int

    def to_dict(self) -> dict[str, object]:
        """As summary.json holds it: class sizes, AUC and TPR per FPR (keyed '0.01'), each {estimate, low, high}."""
        return {"members": self.members, "non_members": self.non_members, "auc": self.auc.to_dict(),
                "tpr_at_fpr": {f"{fpr:g}": interval.to_dict() for fpr, interval in self.tpr_at.items()}}


def roc_summary(members: Sequence[float] | np.ndarray, non_members: Sequence[float] | np.ndarray, fprs: Sequence[float],
                bootstrap: int, seed: int, confidence: float) -> RocSummary:
    """AUC and TPR at each FPR of `fprs`, with percentile intervals at `confidence` from `bootstrap` stratified resamples
    (members and non-members each drawn with replacement at their own size; seeded, so the same inputs give the same
    intervals). `bootstrap` = 0 gives the estimates alone."""
    ranked = _Ranked.of(members, non_members)
    curve = roc_curve(members, non_members)
    replicates = _bootstrap(ranked, fprs, bootstrap, seed)
    tail = (1.0 - confidence) / 2.0

    def interval(estimate: float, values: np.ndarray | None) -> Interval:
        if values is None:
            return Interval(estimate, None, None)
        low, high = np.quantile(values, [tail, 1.0 - tail])
        return Interval(estimate, float(low), float(high))

    return RocSummary(
        auc=interval(curve.auc, None if replicates is None else replicates[:, 0]),
        tpr_at={fpr: interval(curve.tpr_at(fpr), None if replicates is None else replicates[:, 1 + j]) for j, fpr in enumerate(fprs)},
        members=ranked.members, non_members=ranked.non_members,
    )


def _resampled_counts(rng: np.random.Generator, rows: int, size: int) -> np.ndarray:
    """How often each of `size` items is drawn in each of `rows` resamples of `size` draws with replacement."""
    drawn = rng.integers(0, size, size=(rows, size)) + size * np.arange(rows)[:, None]
    return np.bincount(drawn.ravel(), minlength=rows * size).reshape(rows, size)


def _bootstrap(ranked: _Ranked, fprs: Sequence[float], replicates: int, seed: int) -> np.ndarray | None:
    """Per replicate: AUC, then TPR at each FPR of `fprs` (None for no replicates)."""
    if replicates == 0:
        return None
    rng = np.random.default_rng(seed)
    n1, n0 = ranked.members, ranked.non_members
    block = max(1, BOOTSTRAP_CELLS // (n1 + n0))
    out = []
    for start in range(0, replicates, block):
        rows = min(block, replicates - start)
        weights = np.hstack([_resampled_counts(rng, rows, n1), _resampled_counts(rng, rows, n0)])[:, ranked.order]
        tp, fp = ranked.counts(weights.astype(np.float64))
        auc = np.sum(np.diff(fp, axis=1) * (tp[:, 1:] + tp[:, :-1]), axis=1) / (2.0 * n1 * n0)
        tprs = [np.where(_within_fpr(fp, fpr, n0), tp, 0.0).max(axis=1) / n1 for fpr in fprs]
        out.append(np.column_stack([auc, *tprs]))
    return np.vstack(out)
