"""(n,p)-discoverable extraction maths: exact small cases, stability, monotonicity."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from memrisk import MemriskError, is_extractable, log_n_required, n_required, p_reached, rate_table


def brute_force_n(p_z: float, p: float) -> int:
    """Smallest n with 1 − (1 − p_z)^n ≥ p by counting up in exact rational arithmetic, (1 − p_z)^n one factor at a
    time (a fresh power each step took 5 s for p_z = 0.001, p = 0.999)."""
    p_z, p = Fraction(str(p_z)), Fraction(str(p))
    n, missed = 1, 1 - p_z
    while 1 - missed < p:
        n, missed = n + 1, missed * (1 - p_z)
    return n


@pytest.mark.parametrize("p_z", [0.9, 0.5, 0.25, 0.1, 0.03, 0.001])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.75, 0.9, 0.999])
def test_n_required_matches_counting(p_z: float, p: float) -> None:
    assert n_required(math.log(p_z), p) == brute_force_n(p_z, p)


def test_exact_integer_boundary_is_not_rounded_up() -> None:
    assert n_required(math.log(0.5), 0.75) == 2
    assert n_required(math.log(0.5), 0.875) == 3


def test_edge_cases() -> None:
    assert n_required(-math.inf, 0.5) == math.inf
    assert n_required(0.0, 0.999) == 1
    assert p_reached(-math.inf, 10**6) == 0.0
    assert p_reached(0.0, 1) == 1.0
    assert p_reached(math.log(0.5), 2) == pytest.approx(0.75)
    assert not is_extractable(-math.inf, 1e6, 0.1)


def test_stable_for_log_p_down_to_minus_ten_thousand() -> None:
    log_pz = np.array([-1e4, -800.0, -50.0])
    log_n = log_n_required(log_pz, 0.5)
    assert np.all(np.isfinite(log_n))
    np.testing.assert_allclose(log_n, -log_pz + math.log(math.log(2)), rtol=1e-12)
    assert n_required(-800.0, 0.5) == math.inf
    reached = p_reached(log_pz, 1e6)
    assert np.all(np.isfinite(reached)) and reached[0] == 0.0 and reached[2] > 0.0
    assert p_reached(-50.0, 1e6) == pytest.approx(1e6 * math.exp(-50.0), rel=1e-6)


@given(st.floats(-1e4, 0.0), st.sampled_from([0.1, 0.5, 0.9, 0.999]))
@example(-31.0, 0.999)  # p_reached gives 0.999 exactly at four successive n
@example(-255.0, 0.999)  # past 2**52: the rounded-up real n gave 0.99899999…
def test_threshold_and_n_required_agree(log_pz: float, p: float) -> None:
    n = n_required(log_pz, p)
    if math.isfinite(n):
        assert is_extractable(log_pz, n, p) or p_reached(log_pz, n) >= p
        if 1 < n < 2**52:
            assert p_reached(log_pz, n - 1) < p


@given(st.lists(st.floats(-1e4, 0.0), min_size=1, max_size=30))
def test_rates_rise_with_n_and_fall_with_p(values: list[float]) -> None:
    table = rate_table(np.array(values))
    assert np.all(np.diff(table.rates, axis=1) >= 0)
    assert np.all(np.diff(table.rates, axis=0) <= 0)
    assert np.all(table.rates <= table.max_rate)


def test_rate_table_values_and_max_rate() -> None:
    log_pz = np.log([0.5, 0.01, 1e-7, 0.0 + 1e-300]).tolist() + [-math.inf]
    table = rate_table(np.array(log_pz), n_grid=[1, 100, 10**6], p_grid=[0.5, 0.9])
    assert table.max_rate == pytest.approx(0.8)
    assert table.rates[0].tolist() == pytest.approx([0.2, 0.4, 0.4])
    assert table.rates[1].tolist() == pytest.approx([0.0, 0.2, 0.4])
    assert table.to_dict()["rates"]["0.5"] == pytest.approx([0.2, 0.4, 0.4])


def test_empty_and_invalid() -> None:
    assert rate_table(np.array([])).max_rate == 0.0
    with pytest.raises(MemriskError):
        n_required(-1.0, 0.0)
    with pytest.raises(MemriskError):
        rate_table(np.array([-1.0]), p_grid=[1.5])
