"""(n,p)-discoverable extraction ((n,p) paper eq. 2), computed from stored log p_z.

A suffix is (n,p)-extractable when 1 − (1 − p_z)^n ≥ p: among n independent generations
at least one reproduces it with probability ≥ p. Everything here is pure numpy in log
space and stays finite and monotone for log p_z down to −1e4 (p_z far below float range).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memrisk.errors import MemriskError

DEFAULT_P_GRID = (0.1, 0.5, 0.9, 0.999)
DEFAULT_N_GRID = tuple(int(n) for n in np.unique(np.round(np.logspace(0, 6, 25))))
BEYOND_STEPS = 64
"""Most float64 steps `n_required` takes past 2⁵² (the product n·log(1 − p_z) is off by a few ulps at most there, since
n is finite only where p_z is a normal float64)."""


def log1mexp(x: np.ndarray) -> np.ndarray:
    """log(1 − e^x) for x ≤ 0, accurate for x near 0 and for very negative x."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(x > -np.log(2.0), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def log_neg_log1mexp(log_pz: np.ndarray) -> np.ndarray:
    """log(−log(1 − p_z)) from log p_z; ≈ log p_z when p_z is tiny (no underflow)."""
    log_pz = np.asarray(log_pz, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        direct = np.log(-log1mexp(np.minimum(log_pz, 0.0)))
        series = log_pz + np.exp(log_pz) / 2.0
    return np.where(log_pz < -30.0, series, direct)


def log_n_required(log_pz: np.ndarray, p: float) -> np.ndarray:
    """Natural log of the real-valued n = log(1−p)/log(1−p_z) (before rounding up)."""
    _check_p(p)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(-np.log1p(-p)) - log_neg_log1mexp(log_pz)


def p_reached(log_pz: np.ndarray, n: float | np.ndarray) -> np.ndarray:
    """Probability 1 − (1 − p_z)^n that n generations include the suffix at least once."""
    log_pz = np.minimum(np.asarray(log_pz, dtype=np.float64), 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        return -np.expm1(np.asarray(n, dtype=np.float64) * log1mexp(log_pz))


def n_required(log_pz: np.ndarray, p: float) -> np.ndarray:
    """Smallest integer n with 1 − (1 − p_z)^n ≥ p as `p_reached` computes it; inf when p_z = 0 (or n overflows
    float64). Near p, `p_reached` rises by p_z·(1 − p) per generation, which can be less than float64's spacing there
    (at p_z = e⁻³¹, p = 0.999, four successive n give 0.999 exactly), so the rounded-up real n is refined by
    bisection between bounds 10⁻⁹ (relative) either side of it. Past 2⁵² generations float64 no longer counts every
    integer, and the rounded-up real n can fall an ulp or two short (p_z = e⁻²⁵⁵, p = 0.999: 0.99899999…); it is
    stepped up a float64 at a time (each an integer there) until `p_reached` reaches p."""
    log_pz = np.asarray(log_pz, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        n = np.ceil(np.exp(log_n_required(log_pz, p)))
    n = np.where(log_pz >= 0.0, 1.0, np.maximum(n, 1.0))
    counted = np.isfinite(n) & (n < 2.0**52)
    estimate = np.where(counted, n, 1.0)
    low = np.maximum(np.floor(estimate * (1 - 1e-9)) - 1.0, 0.0)  # p_reached(low) < p: low generations fall short
    high = np.ceil(estimate * (1 + 1e-9)) + 1.0
    counted &= p_reached(log_pz, high) >= p
    while bool((counted & (high - low > 1.0)).any()):
        middle = np.floor((low + high) / 2.0)
        enough = p_reached(log_pz, middle) >= p
        high, low = np.where(counted & enough, middle, high), np.where(counted & ~enough, middle, low)
    n = np.where(counted, high, n)
    beyond = np.isfinite(n) & (n >= 2.0**52)
    for _ in range(BEYOND_STEPS):
        short = beyond & (p_reached(log_pz, n) < p)
        if not bool(short.any()):
            break
        n = np.where(short, np.nextafter(n, np.inf), n)
    return n


def log_threshold(n: float | np.ndarray, p: float) -> np.ndarray:
    """log of the smallest p_z that is (n,p)-extractable: log(−expm1(log1p(−p)/n))."""
    _check_p(p)
    with np.errstate(divide="ignore"):
        return np.log(-np.expm1(np.log1p(-p) / np.asarray(n, dtype=np.float64)))


def is_extractable(log_pz: np.ndarray, n: float, p: float) -> np.ndarray:
    """Boolean mask of (n,p)-extractable examples."""
    return np.asarray(log_pz, dtype=np.float64) >= log_threshold(n, p)


@dataclass(frozen=True)
class RateTable:
    """(n,p)-extraction rates: `rates[i, j]` is the fraction extractable at p_grid[i], n_grid[j]."""

    n_grid: tuple[float, ...]
    p_grid: tuple[float, ...]
    rates: np.ndarray
    max_rate: float
    count: int

    def to_dict(self) -> dict:
        """JSON-ready form: grids, rates per p, and the max rate (fraction with p_z > 0)."""
        return {
            "n_grid": list(self.n_grid),
            "p_grid": list(self.p_grid),
            "rates": {f"{p:g}": self.rates[i].tolist() for i, p in enumerate(self.p_grid)},
            "max_rate": self.max_rate,
            "count": self.count,
        }


def rate_table(
    log_pz: np.ndarray,
    n_grid: Sequence[float] = DEFAULT_N_GRID,
    p_grid: Sequence[float] = DEFAULT_P_GRID,
) -> RateTable:
    """Rates over grids of n and p from stored log p_z, without re-running the model."""
    log_pz = np.asarray(log_pz, dtype=np.float64).ravel()
    n_values = np.asarray(n_grid, dtype=np.float64)
    thresholds = np.stack([log_threshold(n_values, p) for p in p_grid])
    if log_pz.size == 0:
        return RateTable(tuple(n_grid), tuple(p_grid), np.zeros_like(thresholds), 0.0, 0)
    rates = (log_pz[None, None, :] >= thresholds[:, :, None]).mean(axis=2)
    return RateTable(tuple(n_grid), tuple(p_grid), rates, float(np.mean(log_pz > -np.inf)), int(log_pz.size))


def _check_p(p: float) -> None:
    """p must be a probability in (0, 1]."""
    if not 0.0 < p <= 1.0:
        raise MemriskError(f"p must be in (0, 1], got {p!r}")
