"""Monte Carlo against exact enumeration on many windows: Wilson coverage, convergence to teacher forcing, one stream.

A tiny GPT-2 (V = 8) and T = 3: each window's p_{z,ε} is summed over all V^T continuations (CBS paper §C.1),
and at ε = 0 the estimates are the (n,p) paper's sampling check of teacher forcing (its Fig. 2).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from rapidfuzz.distance import Levenshtein
from scipy import stats

import memrisk
from memrisk import DecodingPolicy
from tests.conftest import TINY_HIDDEN, tiny_gpt2
from tests.numerics import MOVED_DRAWS, reorder_tolerance
from tests.unit.test_cbs import exact_masses

VOCAB, T, WINDOWS, SAMPLES, EPSILON, SEED = 8, 3, 240, 256, 2, 11
POLICIES = {"topk3": DecodingPolicy(top_k=3), "full": DecodingPolicy()}
EVERY = np.array(list(itertools.product(range(VOCAB), repeat=T)))  # all continuations, in lexicographic order
DISTANCES = {
    "hamming": (EVERY[:, None, :] != EVERY[None, :, :]).sum(-1),
    "levenshtein": np.array([[Levenshtein.distance(a, b) for b in EVERY.tolist()] for a in EVERY.tolist()]),
}
TAIL = 0.001  # each side of the coverage count's acceptance region
BUDGETS = [16, 64, 256, 1024, 4096]  # nested budgets of the convergence check
CONVERGENCE_WINDOWS = 24


@dataclass(frozen=True)
class Windows:
    """Prefixes, targets (indices into EVERY) and every continuation's log-probability per policy."""

    prefixes: list[list[int]]
    targets: np.ndarray
    log_p: dict[str, np.ndarray]

    @property
    def suffixes(self) -> list[list[int]]:
        return EVERY[self.targets].tolist()

    def mass(self, policy: str, distance: str, epsilon: int) -> np.ndarray:
        """Exact p_{z,ε} of every window: the probability of the continuations within ε of its target."""
        within = DISTANCES[distance][self.targets] <= epsilon
        return np.where(within, np.exp(self.log_p[policy]), 0.0).sum(-1)


def continuation_log_probs(lm: memrisk.LanguageModel, prefixes: list[list[int]], policy: DecodingPolicy) -> np.ndarray:
    """log Pr_φ(c | prefix) of every c in EVERY, [windows, V^T]: teacher forcing of the V^(T−1) histories."""
    histories = EVERY[::VOCAB, :-1]
    rows = [h + [0] for h in histories.tolist()]
    logits = lm.suffix_logits([p for p in prefixes for _ in rows], rows * len(prefixes))
    log_p = policy.log_probs(logits).double().cpu().numpy().reshape(len(prefixes), len(rows), T, VOCAB)
    path = np.take_along_axis(log_p[:, :, :-1], histories[None, :, :, None], axis=-1)[..., 0].sum(-1)
    return (path[:, :, None] + log_p[:, :, -1]).reshape(len(prefixes), -1)


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """The tiny model's operations are too small for threads to pay; one keeps this file fast on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def lm() -> memrisk.LanguageModel:
    return memrisk.load_model(tiny_gpt2(vocab_size=VOCAB, seed=3))


@pytest.fixture(scope="module")
def windows(lm) -> Windows:
    """Random prefixes of 1–4 tokens; each target drawn from its prefix's exact distribution under the full policy."""
    rng = np.random.default_rng(SEED)
    prefixes = [rng.integers(0, VOCAB, rng.integers(1, 5)).tolist() for _ in range(WINDOWS)]
    log_p = {name: continuation_log_probs(lm, prefixes, policy) for name, policy in POLICIES.items()}
    full = np.exp(log_p["full"])
    targets = np.array([rng.choice(len(EVERY), p=row / row.sum()) for row in full])
    return Windows(prefixes, targets, log_p)


def test_enumeration_matches_the_exactness_oracle(windows) -> None:
    for name, policy in POLICIES.items():
        assert np.allclose(np.exp(windows.log_p[name]).sum(-1), 1.0, atol=1e-5)
        for i in range(3):
            oracle = exact_masses(tiny_gpt2(vocab_size=VOCAB, seed=3), windows.prefixes[i], windows.suffixes[i], policy)
            for (distance, epsilon), mass in oracle.items():
                assert windows.mass(name, distance, epsilon)[i] == pytest.approx(mass, abs=reorder_tolerance(T, VOCAB, TINY_HIDDEN))


def test_wilson_intervals_cover_the_exact_mass_at_the_nominal_rate(lm, windows) -> None:
    """The 95% Wilson intervals of 240 windows (256 samples each) cover the exact p_{z,ε} at the nominal rate,
    for each policy (top-k 3, full), distance and ε = 0…2.

    Windows draw from independent streams, so where the interval's normal approximation holds
    (n·p ≥ 5 and n·(1 − p) ≥ 5; N windows, 170–240 here) the coverage count is Binomial(N, 0.95):
    mean 0.95·N, sd √(0.0475·N) ≈ 3. Each cell passes when its count lies within
    binom.ppf(0.001) … binom.isf(0.001) of that law (e.g. 179 … 198 of N = 200), so intervals that are
    too narrow and too wide both fail; a correct estimator fails a cell with probability ≤ 0.2%. A ball
    of zero mass (top-k) must get no hit at all. The seed is fixed, so the outcome is deterministic.
    """
    for name, policy in POLICIES.items():
        for distance in DISTANCES:
            results = memrisk.monte_carlo(lm, windows.prefixes, windows.suffixes, policy, samples=SAMPLES,
                                          distance=distance, epsilon=EPSILON, seed=SEED)
            for epsilon in range(EPSILON + 1):
                truth = windows.mass(name, distance, epsilon)
                estimate, low, high = (np.array([getattr(r, f)[epsilon] for r in results]) for f in ("estimate", "ci_low", "ci_high"))
                assert (estimate[truth == 0] == 0).all(), (name, distance, epsilon)
                normal = (SAMPLES * truth >= 5) & (SAMPLES * (1 - truth) >= 5)
                n = int(normal.sum())
                covered = int(((low <= truth) & (truth <= high))[normal].sum())
                accepted = (stats.binom.ppf(TAIL, n, 0.95), stats.binom.isf(TAIL, n, 0.95))
                assert n >= 150 and accepted[0] <= covered <= accepted[1], (name, distance, epsilon, n, covered, accepted)


def test_estimates_at_eps_0_converge_to_teacher_forcing_like_one_over_root_n(lm, windows) -> None:
    """At ε = 0 the estimates tend to teacher forcing's p_z (memrisk.verbatim_logprob) as 1/√n over nested budgets
    n = 16 … 4096, on 24 windows per policy with 0.05 < p_z < 0.95.

    With σ_n = √(p_z(1 − p_z)/n): |p̂_n − p_z| ≤ 5·σ_n for every window and budget (each a binomial
    tail ≤ 1e-4), and at every budget the mean of ((p̂_n − p_z)/σ_n)² over the windows, 1 in
    expectation, lies in the central 99.9% of χ²_24 / 24 ([0.31, 2.23]): errors shrink neither
    slower nor faster than 1/√n.
    """
    accepted = (stats.chi2.ppf(0.0005, CONVERGENCE_WINDOWS) / CONVERGENCE_WINDOWS,
                stats.chi2.isf(0.0005, CONVERGENCE_WINDOWS) / CONVERGENCE_WINDOWS)
    n = np.array(BUDGETS)
    for name, policy in POLICIES.items():
        p_z = np.exp(memrisk.verbatim_logprob(lm, windows.prefixes, windows.suffixes, policy)[:, 0])
        assert np.allclose(p_z, windows.mass(name, "hamming", 0), rtol=0, atol=reorder_tolerance(T, VOCAB, TINY_HIDDEN))
        chosen = np.flatnonzero((p_z > 0.05) & (p_z < 0.95))[:CONVERGENCE_WINDOWS]
        assert len(chosen) == CONVERGENCE_WINDOWS
        results = memrisk.monte_carlo(lm, [windows.prefixes[i] for i in chosen], [windows.suffixes[i] for i in chosen], policy,
                                      samples=BUDGETS[-1], epsilon=0, seed=SEED, checkpoints=BUDGETS)
        truth = p_z[chosen, None]
        z = (np.array([r.curve_estimate[:, 0] for r in results]) - truth) / np.sqrt(truth * (1 - truth) / n)
        assert (np.abs(z) <= 5).all(), (name, np.abs(z).max())
        mean_square = (z**2).mean(axis=0)
        assert ((accepted[0] <= mean_square) & (mean_square <= accepted[1])).all(), (name, mean_square, accepted)


def test_nested_budgets_come_from_one_stream(lm, windows) -> None:
    """The first n samples of a budget of 300 are those of a budget of n, however the samples are batched: the same
    draws, whose tokens another batching's float32 rounding may move at a token boundary (tests/numerics.py). A moved
    draw moves its window's hits by at most one at each ε, so the windows' largest moves add up to at most the moved
    draws, which keeps the allowance below what n = 1 and 2 could move (one and two hits in each of six windows)."""
    prefixes, suffixes, policy = windows.prefixes[:6], windows.suffixes[:6], POLICIES["topk3"]
    nested = [1, 2, 7, 64]
    large = memrisk.monte_carlo(lm, prefixes, suffixes, policy, samples=300, distance="levenshtein", epsilon=EPSILON,
                                seed=SEED, checkpoints=nested + [300])
    for k, n in enumerate(nested):
        small = memrisk.monte_carlo(lm, prefixes, suffixes, policy, samples=n, distance="levenshtein", epsilon=EPSILON,
                                    seed=SEED, max_rows=5)
        moved = [np.abs(np.rint((a.estimate - b.curve_estimate[k]) * n)).max() for a, b in zip(small, large)]
        assert sum(moved) <= MOVED_DRAWS, (n, moved)
    for result in large:
        hits = result.curve_estimate * result.curve_samples[:, None]
        assert (np.diff(hits, axis=0) >= 0).all() and (np.diff(hits, axis=0) <= np.diff(result.curve_samples)[:, None]).all()
