"""Anchored CBS against exact enumeration (V = 8, T = 3): the target's own path never leaves the
beam, so LB_0 = p_z, LB_ε ≥ p_z for every ε, LB ≤ exact p_{z,ε} ≤ UB in every prune mode, and
`anchor=False` is the paper's k-CBS (the target can fall out of a small beam)."""

from __future__ import annotations

import math

import pytest
import torch

import memrisk
from memrisk import DecodingPolicy
from memrisk.extraction.cbs import cbs
from tests.conftest import tiny_gpt2
from tests.numerics import reorder_tolerance
from tests.unit.test_cbs import VARIANTS, VOCAB, exact_masses

# CBS scores a path step by step from a KV cache, teacher forcing in one pass: the same float32
# sums in another order, so probabilities agree to the reordering bound of tests/numerics.py
# (relative; T = 3 positions, V = 8, d = 16), and to 1e-6 absolutely.
RELATIVE = reorder_tolerance(3, VOCAB, 16)


def assert_equal_mass(got: float, want: float) -> None:
    assert abs(got - want) <= min(1e-6, RELATIVE * want), (got, want)

PREFIXES = [[1, 2, 3], [4, 5], [7], [2, 2, 6, 1], [0, 3], [6, 6, 6]]
POLICIES = [DecodingPolicy(top_k=6), DecodingPolicy(), DecodingPolicy(top_p=0.9), DecodingPolicy(top_k=5, temperature=1.5)]


def near_greedy_suffix(lm: memrisk.LanguageModel, prefix: list[int], swap_at: int, length: int = 3) -> list[int]:
    """The greedy continuation with its token at `swap_at` replaced by the third most likely one:
    a likely suffix whose own path a beam of width 1 or 2 drops at that step."""
    tokens = list(prefix)
    suffix = []
    for position in range(length):
        logits = lm.model(torch.tensor([tokens])).logits[0, -1]
        choice = int(torch.argsort(logits, descending=True, stable=True)[2 if position == swap_at else 0])
        suffix.append(choice)
        tokens.append(choice)
    return suffix


@pytest.fixture(scope="module")
def model():
    return tiny_gpt2(vocab_size=VOCAB, seed=5)


@pytest.fixture(scope="module")
def cases(model) -> list[tuple[list[int], list[int]]]:
    lm = memrisk.load_model(model)
    with torch.inference_mode():
        return [(prefix, near_greedy_suffix(lm, prefix, swap_at=i % 2 + 1)) for i, prefix in enumerate(PREFIXES)]


@pytest.fixture(scope="module")
def truth(model, cases):
    """Exact p_{z,ε} (both distances, ε = 0..3) and teacher-forced p_z, per (case, policy)."""
    lm = memrisk.load_model(model)
    exact = {(i, j): exact_masses(model, *case, policy) for i, case in enumerate(cases) for j, policy in enumerate(POLICIES)}
    forced = {
        j: memrisk.verbatim_logprob(lm, [c[0] for c in cases], [c[1] for c in cases], policy)[:, 0].tolist()
        for j, policy in enumerate(POLICIES)
    }
    return exact, forced


@pytest.mark.parametrize("tau_min", [None, 1e-3, 0.2], ids=["no-tau", "tau-1e-3", "tau-0.2"])
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(str(x) for x in v.values()))
@pytest.mark.parametrize("epsilon", [0, 1, 2, 3])
def test_anchored_bounds_hold_and_lb0_is_p_z(model, cases, truth, variant, epsilon, tau_min) -> None:
    exact, forced = truth
    for j, policy in enumerate(POLICIES):
        for beam_width in (1, 2):
            results = cbs(model, [c[0] for c in cases], [c[1] for c in cases], policy, beam_width=beam_width,
                          epsilon=epsilon, tau_min=tau_min, batch_size=4, anchor=True, **variant)
            for i, r in enumerate(results):
                p_z = math.exp(forced[j][i])
                for distance in ("hamming", "levenshtein"):
                    for eps in range(epsilon + 1 if variant["prune"] else 4):
                        lower, upper = r.lower_bound(distance, eps), r.upper_bound(distance, eps)
                        mass = exact[(i, j)][(distance, eps)]
                        assert lower <= mass * (1 + RELATIVE) and mass <= upper * (1 + RELATIVE), (i, j, distance, eps)
                        if tau_min is None or p_z >= tau_min:
                            assert lower >= p_z * (1 - RELATIVE), (i, j, distance, eps, lower, p_z)
                if tau_min is None or p_z >= tau_min:
                    assert_equal_mass(r.lower_bound("levenshtein", 0), p_z)
                assert r.token_evals <= len(cases[i][0]) + (len(cases[i][1]) - 1) * (beam_width + 1)
                assert len({c.tokens for c in r.candidates}) == len(r.candidates)


def test_the_paper_search_loses_targets_that_anchoring_keeps(model, cases, truth) -> None:
    """The cases are built so a narrow beam drops the target: unanchored LB_0 < p_z somewhere,
    anchored LB_0 = p_z everywhere, at the cost of at most one extra row per step."""
    _, forced = truth
    policy = POLICIES[0]
    prefixes, suffixes = [c[0] for c in cases], [c[1] for c in cases]
    paper = cbs(model, prefixes, suffixes, policy, beam_width=1, prune="levenshtein", epsilon=2, anchor=False)
    anchored = cbs(model, prefixes, suffixes, policy, beam_width=1, prune="levenshtein", epsilon=2, anchor=True)
    lost = [i for i, r in enumerate(paper) if r.lower_bound("levenshtein", 0) < 0.5 * math.exp(forced[0][i])]
    assert len(lost) >= 3
    for i, r in enumerate(anchored):
        assert_equal_mass(r.lower_bound("levenshtein", 0), math.exp(forced[0][i]))
        assert paper[i].token_evals <= r.token_evals <= paper[i].token_evals + len(suffixes[i]) - 1


def test_anchor_off_when_the_target_is_in_the_beam_changes_nothing(model, cases) -> None:
    """With a beam wide enough to hold every path, anchoring adds no row and no candidate."""
    prefixes, suffixes = [c[0] for c in cases], [c[1] for c in cases]
    wide = {"beam_width": VOCAB**3, "prune": "levenshtein", "epsilon": 1}
    for a, b in zip(cbs(model, prefixes, suffixes, POLICIES[0], anchor=True, **wide),
                    cbs(model, prefixes, suffixes, POLICIES[0], anchor=False, **wide)):
        assert [c.tokens for c in a.candidates] == [c.tokens for c in b.candidates]
        assert (a.token_evals, a.stop, a.bank) == (b.token_evals, b.stop, b.bank)


def test_a_capped_nucleus_still_expands_the_target(model, cases, truth) -> None:
    """max_children = 1 under the full distribution: the target's token is added as the one extra child."""
    _, forced = truth
    prefixes, suffixes = [c[0] for c in cases], [c[1] for c in cases]
    for i, r in enumerate(cbs(model, prefixes, suffixes, POLICIES[1], beam_width=1, prune="levenshtein", epsilon=1,
                              max_children=1, anchor=True)):
        assert_equal_mass(r.lower_bound("levenshtein", 0), math.exp(forced[1][i]))


@pytest.mark.parametrize("anchor", [True, False], ids=["anchored", "paper"])
@pytest.mark.parametrize("policy", [DecodingPolicy(top_k=6), DecodingPolicy(top_p=0.9), DecodingPolicy()], ids=lambda p: p.name)
def test_a_tau_min_stop_only_drops_windows_whose_lower_bound_stays_below_tau_min(model, cases, policy, anchor) -> None:
    """The τ_min rule's promise (CBS App. D.2): a window stopped early would not have reached
    τ_min had the search gone on; checked against the same search run to the end, for k-CBS and
    nucleus CBS (k = the most children a beam element gets), anchored or not."""
    prefixes, suffixes = [c[0] for c in cases], [c[1] for c in cases]
    for tau_min in (0.5, 0.05, 1e-3):
        kwargs = {"beam_width": 2, "prune": "levenshtein", "epsilon": 2, "anchor": anchor, "max_children": 4}
        stopped = cbs(model, prefixes, suffixes, policy, tau_min=tau_min, **kwargs)
        full = cbs(model, prefixes, suffixes, policy, **kwargs)
        for early, late in zip(stopped, full):
            if early.stop.reason == "tau_min":
                assert late.lower_bound("levenshtein", 2) < tau_min
            else:
                assert [c.tokens for c in early.candidates] == [c.tokens for c in late.candidates]

