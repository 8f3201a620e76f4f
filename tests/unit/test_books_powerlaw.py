"""Best-of-N success within N and the power-law fit −log ASR(N) = a · N^(−b) (Hughes et al. 2024)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memrisk.books.powerlaw import PowerLaw, fit_power_law, success_within
from memrisk.errors import MemriskError


def test_success_within_counts_probes_whose_first_success_index_is_below_n() -> None:
    firsts = [0, 2, 2, 7, None]
    assert success_within(firsts, [1, 2, 3, 8, 100]) == [0.2, 0.2, 0.6, 0.8, 0.8]
    with pytest.raises(MemriskError, match="at least one probe"):
        success_within([], [1])


def test_the_fit_recovers_known_parameters_exactly_from_the_law_itself() -> None:
    n = np.array([1, 2, 4, 8, 16, 32, 64, 128, 1024])
    rates = np.exp(-2.5 * n ** -0.4)
    fit = fit_power_law(n, rates)
    assert fit is not None
    assert fit.a == pytest.approx(2.5, rel=1e-9)
    assert fit.b == pytest.approx(0.4, rel=1e-9)
    assert fit.points == 9
    assert fit.rate(10) == pytest.approx(math.exp(-2.5 * 10 ** -0.4))


def test_the_fit_recovers_parameters_from_sampled_probes_within_tolerance() -> None:
    """5,000 probes whose first success index follows the law: the empirical curve's fit lands near (a, b)."""
    rng = np.random.default_rng(0)
    a, b = 3.0, 0.5
    budgets = np.arange(1, 401)
    law = np.exp(-a * budgets ** -b)
    u = rng.random(5000)
    firsts = [int(np.searchsorted(law, x, side="right")) if x < law[-1] else None for x in u]
    fit = fit_power_law(budgets, success_within(firsts, budgets))
    assert fit is not None
    assert fit.a == pytest.approx(a, rel=0.05)
    assert fit.b == pytest.approx(b, rel=0.05)


def test_points_at_zero_or_one_are_left_out_and_fewer_than_two_levels_mean_no_fit() -> None:
    assert fit_power_law([1, 2, 3], [0.0, 0.5, 1.0]) is None
    assert fit_power_law([1, 2, 3, 4], [0.0, 0.25, 0.25, 0.25]) is None
    fit = fit_power_law([1, 2, 4, 8], [0.0, math.exp(-1.0), math.exp(-0.5), 1.0])
    assert fit == PowerLaw(a=pytest.approx(2.0), b=pytest.approx(1.0), points=2)
    with pytest.raises(MemriskError, match="every budget N > 0"):
        fit_power_law([0, 1], [0.5, 0.6])
