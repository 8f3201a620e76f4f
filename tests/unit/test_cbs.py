"""CBS against the exactness oracle: every continuation enumerated on tiny models (V = 8, T ≤ 4)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import memrisk
from memrisk import DecodingPolicy, MemriskError
from memrisk.distance import hamming, levenshtein
from memrisk.extraction.cbs import cbs, token_evaluation_limit
from tests.conftest import TINY_HIDDEN, tiny_gpt2
from tests.numerics import MOVED_DRAWS, assert_close, moved_hits, reorder_tolerance

VOCAB = 8
CASES = [([1, 2, 3], [1, 2, 3, 4]), ([4, 5], [0, 0, 1, 1]), ([7], [6, 5, 4, 3]), ([2, 2, 6, 1], [3, 1, 3])]
POLICIES = [DecodingPolicy(top_k=3), DecodingPolicy(top_k=4, temperature=0.7), DecodingPolicy(top_p=0.6)]
# Two computations of one number that batch rows differently (another layout, another cache, teacher forcing against
# the search) sum in other orders: they agree to the float32 reordering bound of tests/numerics.py, relative to
# max(1, |value|) for log-probabilities and absolutely for masses.
REORDER = reorder_tolerance(max(len(suffix) for _, suffix in CASES), VOCAB, TINY_HIDDEN)


def exact_masses(model, prefix: list[int], suffix: list[int], policy: DecodingPolicy) -> dict[tuple[str, int], float]:
    """p_{z,ε} for both distances and ε = 0…3 by enumerating all V^T continuations."""
    every = [list(v) for v in itertools.product(range(VOCAB), repeat=len(suffix))]
    log_p = memrisk.verbatim_logprob(memrisk.load_model(model, batch_size=512), [prefix] * len(every), every, policy)[:, 0]
    p = np.exp(log_p)
    out = {}
    for name, fn in (("hamming", hamming), ("levenshtein", levenshtein)):
        d = np.array([fn(v, suffix) for v in every])
        for eps in range(4):
            out[(name, eps)] = float(p[d <= eps].sum())
    return out


@pytest.fixture(scope="module")
def model():
    return tiny_gpt2(vocab_size=VOCAB, seed=3)


@pytest.fixture(scope="module")
def exact(model):
    return {(i, j): exact_masses(model, *CASES[i], POLICIES[j]) for i in range(len(CASES)) for j in range(len(POLICIES))}


VARIANTS = [
    {"prune": None},
    {"prune": "hamming"},
    {"prune": "hamming", "tail_closure": True},
    {"prune": "levenshtein"},
    {"prune": "levenshtein", "tighter_levenshtein": True},
]


@pytest.mark.parametrize("anchor", [True, False], ids=["anchored", "paper"])
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(str(x) for x in v.values()))
@pytest.mark.parametrize("beam_width", [1, 2, 5, 64])
@pytest.mark.parametrize("epsilon", [0, 1, 2])
def test_bounds_contain_the_exact_mass(model, exact, variant, beam_width, epsilon, anchor) -> None:
    prefixes, suffixes = [c[0] for c in CASES], [c[1] for c in CASES]
    for j, policy in enumerate(POLICIES):
        results = cbs(
            model, prefixes, suffixes, policy, beam_width=beam_width, epsilon=epsilon, batch_size=3, anchor=anchor, **variant
        )
        for i, result in enumerate(results):
            for distance in ("hamming", "levenshtein"):
                for eps in range(epsilon + 1 if variant["prune"] else 4):
                    truth = exact[(i, j)][(distance, eps)]
                    lower, upper = result.lower_bound(distance, eps), result.upper_bound(distance, eps)
                    assert lower <= truth + REORDER, (i, j, distance, eps, lower, truth)
                    assert truth <= upper + REORDER, (i, j, distance, eps, truth, upper)
            if beam_width == 64 and not variant.get("tail_closure"):
                distance = variant["prune"] or "levenshtein"
                assert result.lower_bound(distance, epsilon) == pytest.approx(exact[(i, j)][(distance, epsilon)], abs=REORDER)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(str(x) for x in v.values()))
def test_candidates_unique_and_scored_like_teacher_forcing(model, variant) -> None:
    prefixes, suffixes = [c[0] for c in CASES], [c[1] for c in CASES]
    for policy in POLICIES:
        for (prefix, suffix), result in zip(CASES, cbs(model, prefixes, suffixes, policy, beam_width=3, epsilon=2, **variant)):
            tokens = [list(c.tokens) for c in result.candidates]
            assert len({tuple(t) for t in tokens}) == len(tokens)
            if not tokens:
                continue
            forced = memrisk.verbatim_logprob(model, [prefix] * len(tokens), tokens, policy)[:, 0]
            assert_close([c.log_p for c in result.candidates], forced, REORDER)
            for c in result.candidates:
                assert (c.hamming, c.levenshtein) == (hamming(c.tokens, suffix), levenshtein(c.tokens, suffix))
                if variant["prune"]:
                    assert c.distance(variant["prune"]) <= 2


@pytest.mark.parametrize("beam_width", [1, 2, 5, 100])
def test_token_evaluations_follow_the_beam_sizes(model, beam_width: int) -> None:
    """The paper's k-CBS (no anchor): |L_t| = min(B, k^t) rows at every step."""
    k = 3
    for prefix, suffix in CASES:
        [result] = cbs(model, [prefix], [suffix], DecodingPolicy(top_k=k), beam_width=beam_width, prune=None, anchor=False)
        sizes, size = [], 1
        for _ in range(len(suffix) - 1):
            size = min(beam_width, size * k)
            sizes.append(size)
        assert result.token_evals == len(prefix) + sum(sizes)
        assert result.token_evals <= token_evaluation_limit(len(prefix), len(suffix), beam_width)
        assert len(result.candidates) == min(beam_width, k ** (len(suffix) - 1)) * k
        assert result.stop.reason == "completed"


def test_pruned_search_stops_early_when_nothing_is_viable(model) -> None:
    prefix, suffix = CASES[0]
    far = [7 if t != 7 else 6 for t in suffix]
    [result] = cbs(model, [prefix], [far], DecodingPolicy(top_k=1), prune="hamming", epsilon=0)
    greedy = memrisk.greedy_extraction(model, [prefix], [far])[0]
    if greedy.hamming > 0:
        assert result.stop.reason == "no_viable" and result.candidates == []
        assert result.lower_bound("hamming", 0) == 0.0


def test_tau_min_early_stop_keeps_bounds_valid(model, exact) -> None:
    prefixes, suffixes = [c[0] for c in CASES], [c[1] for c in CASES]
    policy = POLICIES[0]
    results = cbs(model, prefixes, suffixes, policy, beam_width=2, prune="levenshtein", epsilon=1, tau_min=0.5)
    assert any(r.stop.reason == "tau_min" for r in results)
    for i, r in enumerate(results):
        if r.stop.reason == "tau_min":
            assert r.candidates == [] and r.lower_bound() == 0.0
        assert exact[(i, 0)][("levenshtein", 1)] <= r.upper_bound("levenshtein", 1) + REORDER


def test_eos_paths_are_removed_and_counted(model) -> None:
    prefix, suffix = CASES[1]
    [plain] = cbs(model, [prefix], [suffix], DecodingPolicy(top_k=3), beam_width=64, prune=None, eos_token_id=None)
    eos = plain.candidates[0].tokens[0]
    [ended] = cbs(model, [prefix], [suffix], DecodingPolicy(top_k=3), beam_width=64, prune=None, eos_token_id=eos)
    assert ended.eos_mass > 0
    assert all(eos not in c.tokens[:-1] for c in ended.candidates)
    assert ended.covered_mass + ended.eos_mass == pytest.approx(plain.covered_mass, abs=REORDER)


def test_compaction_and_padded_batches_give_the_same_results(model) -> None:
    prefixes, suffixes = [c[0] for c in CASES] * 3, [c[1] for c in CASES] * 3
    kwargs = {"beam_width": 3, "prune": "levenshtein", "epsilon": 1, "tau_min": 0.05, "batch_size": 4}
    compact = cbs(model, prefixes, suffixes, POLICIES[0], compaction=True, **kwargs)
    padded = cbs(model, prefixes, suffixes, POLICIES[0], compaction=False, **kwargs)
    for a, b in zip(compact, padded):
        assert [c.tokens for c in a.candidates] == [c.tokens for c in b.candidates]
        assert_close([c.log_p for c in a.candidates], [c.log_p for c in b.candidates], REORDER)
        assert (a.stop, a.token_evals) == (b.stop, b.token_evals)
        assert a.bank == pytest.approx(b.bank, abs=REORDER)


def test_either_prefix_cache_gives_the_same_searches_and_samples(model) -> None:
    """Rows after one prefix reading its cache in place or each holding a copy: the attention sums the same terms in
    another order (two softmax parts joined, against one), so log-probabilities agree to the float32 reordering bound
    (REORDER, about 1e-5) and the searches are the same. A sample is drawn by inverse CDF on those probabilities, which
    a difference this small moves across a draw with odds about 1e-5 per token: over these 200 × 8 samples of up to
    4 tokens, about 0.06 draws on a host, each moving a hit count by at most one (tests/numerics.py, MOVED_DRAWS)."""
    prefixes, suffixes = [c[0] for c in CASES] * 2, [c[1] for c in CASES] * 2
    shared, per_row = (memrisk.load_model(model, prefix_cache=mode) for mode in ("shared", "per_row"))
    for kwargs in ({"prune": None, "beam_width": 5}, {"prune": "levenshtein", "epsilon": 1, "beam_width": 3, "batch_size": 3}):
        for a, b in zip(cbs(shared, prefixes, suffixes, POLICIES[2], **kwargs), cbs(per_row, prefixes, suffixes, POLICIES[2], **kwargs)):
            assert [c.tokens for c in a.candidates] == [c.tokens for c in b.candidates]
            assert_close([c.log_p for c in a.candidates], [c.log_p for c in b.candidates], REORDER)
            assert (a.stop, a.token_evals) == (b.stop, b.token_evals)
    sampled = [memrisk.monte_carlo(lm, prefixes, suffixes, POLICIES[0], samples=200, epsilon=2) for lm in (shared, per_row)]
    moved = [moved_hits(a, b) for a, b in zip(*sampled)]
    assert max(moved) <= MOVED_DRAWS, moved


def test_results_do_not_depend_on_batch_size(model) -> None:
    prefixes, suffixes = [c[0] for c in CASES], [c[1] for c in CASES]
    one = cbs(model, prefixes, suffixes, POLICIES[1], beam_width=4, prune="hamming", epsilon=1, batch_size=1)
    many = cbs(model, prefixes, suffixes, POLICIES[1], beam_width=4, prune="hamming", epsilon=1, batch_size=4)
    for a, b in zip(one, many):
        assert [c.tokens for c in a.candidates] == [c.tokens for c in b.candidates]
        assert a.lower_bound("hamming", 1) == pytest.approx(b.lower_bound("hamming", 1), abs=REORDER)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"beam_width": 0}, "beam_width"),
        ({"prune": "jaccard"}, "prune"),
        ({"epsilon": -1}, "epsilon"),
        ({"tau_min": 0.0}, "tau_min"),
        ({"tau_min": 2.0}, "tau_min"),
        ({"tail_closure": True}, "tail_closure"),
    ],
)
def test_invalid_parameters(model, kwargs, message) -> None:
    with pytest.raises(MemriskError, match=message):
        cbs(model, [[1]], [[2, 3]], **kwargs)


def test_bound_queries_are_checked(model) -> None:
    [result] = cbs(model, [[1]], [[2, 3]], prune="hamming", epsilon=1)
    with pytest.raises(MemriskError, match="pruned at epsilon=1"):
        result.lower_bound("hamming", 2)
    with pytest.raises(MemriskError, match="distance"):
        result.upper_bound("cosine", 1)
    assert math.isfinite(result.upper_bound("levenshtein", 1))
