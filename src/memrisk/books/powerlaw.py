"""Best-of-N success against N (Books §3.1 uses Best-of-N, Hughes et al. 2024) and its power-law fit.

Hughes et al. find that the attack success rate ASR(N) of Best-of-N follows −log ASR(N) = a · N^(−b);
taking logs twice makes it a line, log(−log ASR) = log a − b · log N, fitted here by least squares
over the N where 0 < ASR < 1 (where both logs are finite).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memrisk.errors import MemriskError

FORM = "-log ASR(N) = a * N^(-b)"


def success_within(first_success: Sequence[int | None], budgets: Sequence[int]) -> list[float]:
    """For each N in `budgets`, the fraction of probes whose first success came at attempt index k < N (None: never)."""
    if not first_success:
        raise MemriskError("Best-of-N success needs at least one probe")
    return [sum(k is not None and k < n for k in first_success) / len(first_success) for n in budgets]


@dataclass(frozen=True)
class PowerLaw:
    """−log ASR(N) = a · N^(−b), fitted on `points` values of N."""

    a: float
    b: float
    points: int

    def rate(self, n: float) -> float:
        """The fitted success rate at N = n."""
        return math.exp(-self.a * n ** (-self.b))


def fit_power_law(budgets: Sequence[float], rates: Sequence[float]) -> PowerLaw | None:
    """Least-squares fit of log(−log ASR) = log a − b · log N over the points with 0 < ASR < 1; None unless those
    points hold at least two distinct rates (a flat run of one level is no curve to fit)."""
    n, asr = np.asarray(budgets, dtype=np.float64), np.asarray(rates, dtype=np.float64)
    if n.shape != asr.shape or np.any(n <= 0):
        raise MemriskError("a power-law fit needs as many rates as budgets, every budget N > 0")
    keep = (asr > 0) & (asr < 1)
    if len(np.unique(asr[keep])) < 2:
        return None
    slope, intercept = np.polyfit(np.log(n[keep]), np.log(-np.log(asr[keep])), 1)
    return PowerLaw(a=float(np.exp(intercept)), b=float(-slope), points=int(keep.sum()))
