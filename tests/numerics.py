"""Comparing records made under different float32 summation orders (thread counts, batch layouts).

A float32 sum of n terms, in any order, is within n·u of the exact sum relative to the sum of
the terms' magnitudes (u = 2^-24; the first-order bound of Higham, Accuracy and Stability of
Numerical Algorithms, §4.2). Two runs that sum in different orders (another thread count, rows
batched differently, so BLAS picks other kernels) therefore agree to twice that. The largest
reductions behind a stored number are the vocabulary (V) in each log-softmax and the hidden
size (d) in each matmul, and a log p_z or a CBS bound adds up T suffix positions, so numbers
agree to T·(V + d)·u relative to max(1, |value|); probabilities are exp of such sums, so the
same bound holds for them absolutely. Everything that is not a float (token ids, ranks,
candidates, stops) must be equal, but for Monte Carlo's samples: a draw inverts a float32 CDF, so
one that lands within the rounding of a token boundary may pick the neighbouring token in the
other order (about 1e-5 a token on the tiny models), and each such draw moves a hit count by at
most one (`moved_hits`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

UNIT_ROUNDOFF = 2.0**-24


def reorder_tolerance(positions: int, vocabulary: int, hidden: int) -> float:
    """Relative bound on the difference of one number computed in two float32 summation orders."""
    return 2 * positions * (vocabulary + hidden) * UNIT_ROUNDOFF


def assert_close(got: Any, want: Any, tolerance: float, where: str = "") -> None:
    """Floats within `tolerance` relative to max(1, |want|), everything else equal, recursively; NumPy arrays and
    scalars compare as the lists and Python numbers they hold."""
    got, want = (x.tolist() if isinstance(x, (np.ndarray, np.generic)) else x for x in (got, want))
    if isinstance(want, float) and isinstance(got, float):
        scale = max(1.0, abs(want)) if math.isfinite(want) else 1.0
        assert got == want or abs(got - want) <= tolerance * scale, (where, got, want)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, tolerance, f"{where}[{i}]")
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for key in want:
            assert_close(got[key], want[key], tolerance, f"{where}.{key}")
    else:
        assert got == want, (where, got, want)


def assert_same_records(got: list[dict], want: list[dict], tolerance: float) -> None:
    """Same examples in the same order, each record equal up to `tolerance` on its floats."""
    assert [r["example_id"] for r in got] == [r["example_id"] for r in want]
    for g, w in zip(got, want):
        assert_close(g, w, tolerance, w["example_id"])


MOVED_DRAWS = 2
"""Draws that float32 reordering may move across a token boundary in one comparison of a tiny model's Monte Carlo
runs: a few thousand draws at about 1e-5 each move about 0.05 on a host, and two allowed leave odds near 4e-5 (Poisson
tail) that a host fails, where runs drawn apart move their counts by up to √(n·p(1−p)), about 10 at n = 400."""


def moved_hits(a: Any, b: Any) -> int:
    """The largest difference between two Monte Carlo results' hit counts, at any budget of their curves and any ε."""
    hits = [np.rint(r.curve_estimate * r.curve_samples[:, None]).astype(int) for r in (a, b)]
    return int(np.abs(hits[0] - hits[1]).max())
