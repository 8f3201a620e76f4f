"""Monte Carlo estimation against exact enumeration, determinism and the Wilson interval."""

from __future__ import annotations

import numpy as np
import pytest

import memrisk
from memrisk import DecodingPolicy, MemriskError
from memrisk.extraction.montecarlo import wilson_interval
from tests.conftest import tiny_gpt2
from tests.numerics import MOVED_DRAWS, moved_hits
from tests.unit.test_cbs import exact_masses

PREFIX = [4, 5]
POLICY = DecodingPolicy(top_k=3)


@pytest.fixture(scope="module")
def model():
    return tiny_gpt2(vocab_size=8, seed=3)


@pytest.fixture(scope="module")
def target(model) -> list[int]:
    """The most likely 4-token continuation, so that every ε-ball carries real mass."""
    [result] = memrisk.cbs(model, [PREFIX], [[0, 0, 0, 0]], POLICY, beam_width=64, prune=None)
    return list(result.candidates[0].tokens)


def test_intervals_cover_the_exact_mass_in_at_least_93_of_100_runs(model, target) -> None:
    exact = exact_masses(model, PREFIX, target, POLICY)
    truth = [exact[("levenshtein", e)] for e in range(3)]
    assert 0.05 < truth[0] < truth[2] < 0.95, truth
    covered = np.zeros(3, dtype=int)
    for seed in range(100):
        [result] = memrisk.monte_carlo(model, [PREFIX], [target], POLICY, samples=400, epsilon=2, seed=seed)
        covered += (result.ci_low <= truth) & (truth <= result.ci_high)
    assert (covered >= 93).all(), covered


def test_pooled_estimate_converges(model, target) -> None:
    exact = exact_masses(model, PREFIX, target, POLICY)[("hamming", 1)]
    [result] = memrisk.monte_carlo(model, [PREFIX], [target], POLICY, samples=5000, distance="hamming", epsilon=2, replicates=3)
    assert result.estimate[1] == pytest.approx(exact, abs=4 * np.sqrt(exact * (1 - exact) / 15000))
    assert result.curve_samples[-1] == 15000 and result.curve_estimate[-1, 1] == result.estimate[1]
    assert result.replicate_estimates.shape == (3, 3)
    assert np.all(np.diff(result.estimate) >= 0)


def test_deterministic_for_a_seed_and_independent_of_batching(model, target) -> None:
    """One seed and one batching give the same estimates bit for bit. Other batches draw the same numbers, and their
    float32 probabilities may round otherwise, so the hit counts may move by a few draws (tests/numerics.py)."""
    prefixes, suffixes = [PREFIX, [1, 2, 3]], [target, target]

    def sampled(seed: int, max_rows: int) -> list[memrisk.MonteCarloResult]:
        return memrisk.monte_carlo(model, prefixes, suffixes, POLICY, samples=300, epsilon=1, seed=seed, max_rows=max_rows)

    a = sampled(7, 300)
    for x, y in zip(a, sampled(7, 300)):
        assert np.array_equal(x.curve_estimate, y.curve_estimate)
    for max_rows in (64, 600):  # batches that split a window's samples and hold both windows', or hold all of both
        assert max(moved_hits(x, y) for x, y in zip(a, sampled(7, max_rows))) <= MOVED_DRAWS
    assert max(moved_hits(x, z) for x, z in zip(a, sampled(8, 300))) > MOVED_DRAWS  # another seed: past the allowance


def test_token_evaluations(model, target) -> None:
    [result] = memrisk.monte_carlo(model, [PREFIX], [target], POLICY, samples=50, epsilon=0, replicates=2)
    assert result.token_evals == len(PREFIX) + 2 * (len(target) - 1) * 50  # one prefill serves both replicates


def test_wilson_interval_edges() -> None:
    low, high = wilson_interval(np.array([0, 5, 10]), 10)
    assert low[0] == 0.0 and high[2] == 1.0
    assert low[1] < 0.5 < high[1]
    assert wilson_interval(np.array([0]), 0) == (np.array([0.0]), np.array([1.0]))


@pytest.mark.parametrize(("kwargs", "message"), [({"samples": 0}, "samples"), ({"distance": "bleu"}, "distance"), ({"epsilon": -1}, "epsilon"), ({"max_rows": 0}, "max_rows")])
def test_invalid_arguments(model, kwargs, message) -> None:
    with pytest.raises(MemriskError, match=message):
        memrisk.monte_carlo(model, [PREFIX], [[1, 2]], POLICY, **kwargs)
