"""DecodingPolicy: scored distributions, tie rules, edge cases, and sampling matching scoring."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from memrisk import DecodingPolicy, MemriskError
from memrisk.decoding import LARGEST_BLOCK, largest, rank_and_score, score_policies, tokens_ahead


def reference_log_probs(logits: list[float], policy: DecodingPolicy) -> list[float]:
    """Policy log-probs by plain Python sorting, written independently of memrisk.decoding."""
    v = len(logits)
    beta = 1.0 if policy.top_k == 1 else policy.temperature
    scaled = [x / beta for x in logits]
    order = sorted(range(v), key=lambda i: (-scaled[i], i))
    kept = order[: policy.top_k] if policy.top_k else order
    top = max(scaled[i] for i in kept)
    z = sum(math.exp(scaled[i] - top) for i in kept)
    probs = {i: math.exp(scaled[i] - top) / z for i in kept}
    if policy.top_p is not None and policy.top_k != 1:
        nucleus, mass = [], 0.0
        for i in sorted(kept, key=lambda i: (-probs[i], i)):
            if mass >= policy.top_p:
                break
            nucleus.append(i)
            mass += probs[i]
        probs = {i: probs[i] / mass for i in nucleus}
    return [math.log(probs[i]) if i in probs else -math.inf for i in range(v)]


policies = st.builds(
    DecodingPolicy,
    temperature=st.sampled_from([0.5, 1.0, 1.7]),
    top_k=st.one_of(st.none(), st.integers(1, 12)),
    top_p=st.one_of(st.none(), st.sampled_from([0.3, 0.75, 0.9, 1.0])),
)
logit_rows = st.lists(st.integers(-6, 6), min_size=2, max_size=10).map(lambda xs: [x / 2 for x in xs])


@settings(max_examples=300, deadline=None)
@given(logit_rows, policies)
def test_log_probs_match_independent_reference(logits: list[float], policy: DecodingPolicy) -> None:
    got = policy.log_probs(torch.tensor([logits])).squeeze(0).double().numpy()
    want = np.array(reference_log_probs(logits, policy))
    assert np.array_equal(np.isneginf(got), np.isneginf(want)), (got, want)
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], atol=1e-5)


@settings(max_examples=200, deadline=None)
@given(logit_rows, policies)
def test_scored_distribution_sums_to_one_over_kept_set(logits: list[float], policy: DecodingPolicy) -> None:
    log_p = policy.log_probs(torch.tensor([logits]))
    assert not torch.isnan(log_p).any()
    assert log_p.exp().sum().item() == pytest.approx(1.0, abs=1e-5)
    kept = torch.isfinite(log_p).sum().item()
    if policy.top_k is not None:
        assert kept <= policy.top_k
        if policy.top_p is None:
            assert kept == min(policy.top_k, len(logits))


def test_top_k_tie_keeps_lower_token_ids() -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0, 2.0, 2.0, 0.0]])
    kept = torch.isfinite(DecodingPolicy(top_k=3).log_probs(logits))[0].tolist()
    assert kept == [False, True, True, True, False, False]


def test_top_k_at_least_vocabulary_is_full_softmax() -> None:
    logits = torch.randn(3, 7)
    for k in (7, 8, 1000):
        torch.testing.assert_close(DecodingPolicy(top_k=k).log_probs(logits), torch.log_softmax(logits, -1))


def test_top_p_keeps_smallest_prefix_reaching_mass() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    log_p = DecodingPolicy(top_p=0.8).log_probs(probs.log())
    assert torch.isfinite(log_p).tolist() == [[True, True, False, False]]
    torch.testing.assert_close(log_p.exp(), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    assert torch.isfinite(DecodingPolicy(top_p=0.81).log_probs(probs.log())).sum() == 3


def test_greedy_keeps_argmax_and_ignores_temperature() -> None:
    logits = torch.tensor([[0.1, 2.0, 2.0, -1.0]])
    greedy = DecodingPolicy(temperature=0.01, top_k=1).log_probs(logits)
    assert greedy.tolist() == [[-math.inf, 0.0, -math.inf, -math.inf]]
    assert DecodingPolicy.greedy().name == "greedy"


def test_target_outside_kept_set_is_minus_inf_not_nan() -> None:
    logits = torch.tensor([[5.0, 4.0, -math.inf, 1.0]])
    log_p = DecodingPolicy(top_k=2).log_probs(logits)
    assert log_p[0, 3] == -math.inf and log_p[0, 2] == -math.inf
    assert not torch.isnan(log_p).any()


@pytest.mark.parametrize(
    "kwargs",
    [{"top_k": 0}, {"top_k": -3}, {"top_p": 0.0}, {"top_p": 1.5}, {"temperature": 0.0}, {"temperature": -1.0},
     {"temperature": float("nan")}],
)
def test_invalid_policies_are_rejected(kwargs: dict) -> None:
    with pytest.raises(MemriskError):
        DecodingPolicy(**kwargs)


@pytest.mark.parametrize("policy", [DecodingPolicy(), DecodingPolicy(temperature=0.7, top_k=4), DecodingPolicy(top_k=6, top_p=0.8)])
def test_sampling_frequencies_match_scored_probabilities(tiny_model, policy: DecodingPolicy) -> None:
    with torch.no_grad():
        logits = tiny_model(torch.tensor([[1, 2, 3]])).logits[0, -1]
    expected = policy.log_probs(logits).exp().double()
    generator = torch.Generator().manual_seed(1234)
    draws = policy.sample(logits.expand(20000, -1), generator=generator)
    counts = torch.bincount(draws, minlength=len(expected)).double()
    kept = expected > 0
    assert counts[~kept].sum() == 0, "sampled a token outside the kept set"
    expected_counts = expected[kept] / expected[kept].sum() * counts.sum()
    result = chisquare(counts[kept].numpy(), expected_counts.numpy())
    assert result.pvalue > 1e-3, result


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(-6, 6), min_size=6, max_size=6).map(lambda xs: [x / 2 for x in xs]), min_size=1, max_size=4), policies, st.data())
def test_score_equals_gathered_log_probs(rows: list[list[float]], policy: DecodingPolicy, data) -> None:
    logits = torch.tensor(rows)
    targets = torch.tensor(data.draw(st.lists(st.integers(0, 5), min_size=len(rows), max_size=len(rows))))
    want = policy.log_probs(logits).gather(-1, targets[:, None]).squeeze(-1)
    got = policy.score(logits, targets)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_score_falls_back_when_the_nucleus_is_wide() -> None:
    logits = torch.zeros(2, 1000)
    logits[1, :3] = 10.0
    targets = torch.tensor([700, 1])
    policy = DecodingPolicy(top_p=0.9)
    torch.testing.assert_close(policy.score(logits, targets), policy.log_probs(logits).gather(-1, targets[:, None]).squeeze(-1))
    assert policy.score(logits, targets)[0] == pytest.approx(-math.log(900))


@settings(max_examples=100, deadline=None)
@given(st.lists(policies, min_size=1, max_size=4), st.data())
def test_scoring_several_policies_at_once_matches_each_distribution(many: list[DecodingPolicy], data) -> None:
    logits = torch.tensor(data.draw(st.lists(st.lists(st.integers(-6, 6), min_size=7, max_size=7), min_size=1, max_size=3))) / 2
    targets = torch.tensor(data.draw(st.lists(st.integers(0, 6), min_size=len(logits), max_size=len(logits))))
    for policy, got in zip(many, score_policies(many, logits, targets)):
        want = policy.log_probs(logits).gather(-1, targets[:, None]).squeeze(-1)
        assert torch.equal(torch.isinf(got), torch.isinf(want))
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(-3, 3), min_size=8, max_size=8).map(lambda xs: [x / 2 for x in xs]), min_size=1, max_size=5), policies, st.integers(1, 8))
def test_top_children_are_the_most_likely_kept_tokens_in_order(rows: list[list[float]], policy: DecodingPolicy, width: int) -> None:
    logits = torch.tensor(rows)
    values, tokens, kept = policy.top_children(logits, width)
    for row, got_values, got_tokens, got_kept in zip(rows, values, tokens, kept):
        want = reference_log_probs(row, policy)
        order = [i for i in sorted(range(len(row)), key=lambda i: (-want[i], i)) if want[i] > -math.inf]
        assert int(got_kept) == len(order)
        assert got_tokens.tolist()[: len(order)] == order[:width]
        np.testing.assert_allclose(got_values.double().numpy()[: len(order)], [want[i] for i in order[:width]], atol=1e-5)


@pytest.mark.parametrize("policy", [DecodingPolicy(top_k=40), DecodingPolicy(temperature=0.7, top_k=5), DecodingPolicy(top_k=1)])
def test_top_k_sampling_over_the_kept_set_draws_what_the_full_inverse_cdf_draws(policy: DecodingPolicy) -> None:
    generator = torch.Generator().manual_seed(3)
    for _ in range(10):
        logits = torch.randn(256, 500, generator=generator) * 3
        logits[:128, ::5] = logits[:128, ::5].round()  # ties, some across the k-th place (the full path)
        uniforms = torch.rand(256, generator=generator, dtype=torch.float64)
        cdf = torch.cumsum(policy.log_probs(logits).exp().double(), dim=-1)
        expected = torch.searchsorted(cdf, (uniforms.unsqueeze(-1) * cdf[:, -1:]), right=True).squeeze(-1).clamp(max=499)
        assert torch.equal(policy.sample(logits, uniforms=uniforms), expected)
        assert policy.log_probs(logits).gather(-1, expected.unsqueeze(-1)).isfinite().all()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(-3, 3), min_size=12, max_size=12).map(lambda xs: [x / 2 for x in xs]), min_size=1, max_size=5),
       st.integers(1, 6), st.sampled_from([0.7, 1.0]), st.integers(0, 5), st.data())
def test_children_and_draws_looked_for_among_candidates_are_those_of_the_whole_row(
    rows: list[list[float]], k: int, temperature: float, extra: int, data
) -> None:
    """`within` (a screened head's candidates): each row's ids holding its k + 1 largest logits, in any order, with
    other ids or not. Integer halves make ties, inside the top and across the k-th place, common."""
    policy = DecodingPolicy(temperature=temperature, top_k=k)
    logits = torch.tensor(rows)
    width = k + 1 + extra
    within = []
    for row in rows:
        order = sorted(range(len(row)), key=lambda i: (-row[i], data.draw(st.integers(0, 99))))  # ties in any order
        others = data.draw(st.permutations(order[k + 1:]))[:extra]
        within.append(data.draw(st.permutations(order[: k + 1] + others)))
    within = torch.tensor(within).view(len(rows), width)
    for got, want in zip(policy.top_children(logits, 8, within), policy.top_children(logits, 8)):
        assert torch.equal(got, want)
    uniforms = torch.rand(len(rows), generator=torch.Generator().manual_seed(data.draw(st.integers(0, 9))), dtype=torch.float64)
    assert torch.equal(policy.sample(logits, uniforms=uniforms, within=within), policy.sample(logits, uniforms=uniforms))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3), st.sampled_from([64 * 16, 64 * 40, 64 * 40 + 3]), st.integers(1, 10), st.sampled_from([2, 6, 10**6]),
       st.integers(0, 2**31))
def test_largest_values_are_top_ks_and_ids_hold_them(rows: int, vocab: int, count: int, levels: int, seed: int) -> None:
    """By blocks where the vocabulary splits into at least 4 × count of them (1,024 and 2,560 ids), by one top-k where it
    does not (2,563 ids: not whole blocks); a few `levels` make ties common, across blocks and the count-th place; a million make them rare."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(0, levels, (rows, 2, vocab), generator=generator).float()
    values[..., torch.randint(0, vocab, (3,), generator=generator)] = float("-inf")
    got, ids = largest(values, count)
    assert got.shape == ids.shape == (rows, 2, count)
    assert torch.equal(got, torch.topk(values, count, dim=-1).values)
    assert torch.equal(values.gather(-1, ids), got)
    assert bool((ids.sort(dim=-1).values.diff(dim=-1) > 0).all())  # distinct ids


def test_largest_finds_values_in_one_block_and_spread_over_many() -> None:
    values = torch.zeros(2, 64 * LARGEST_BLOCK)
    values[0, 128:138] = torch.arange(10.0) + 1  # all ten in one block
    values[1, torch.arange(10) * LARGEST_BLOCK + 5] = torch.arange(10.0) + 1  # one in each of ten blocks
    got, ids = largest(values, 10)
    assert got.tolist() == [list(range(10, 0, -1))] * 2
    assert ids[0].tolist() == list(range(137, 127, -1)) and ids[1].tolist() == [j * LARGEST_BLOCK + 5 for j in range(9, -1, -1)]


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6), st.sampled_from([50, 300]), st.sampled_from([2, 5, 10**6]), st.integers(0, 2**31),
       st.sampled_from([[DecodingPolicy(top_k=3)], [DecodingPolicy(top_p=0.5)], [DecodingPolicy()],
                        [DecodingPolicy(top_k=40), DecodingPolicy(top_p=0.9, temperature=0.7)]]))
def test_ranks_from_the_shared_top_k_are_the_full_counts(rows: int, vocab: int, levels: int, seed: int, policies: list) -> None:
    """Targets above, at and below each row's smallest kept logit, with ties among the kept ones (few `levels`), get
    the ranks `tokens_ahead` counts over the whole row; the scores are `score_policies`'."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randint(0, levels, (rows, 2, vocab), generator=generator).float()
    targets = torch.randint(0, vocab, (rows, 2), generator=generator)
    targets[0, 0] = int(logits[0, 0].argmax())
    ahead, scores = rank_and_score(policies, logits, targets)
    assert torch.equal(ahead, tokens_ahead(logits, targets))
    for got, want in zip(scores, score_policies(policies, logits, targets)):
        assert torch.equal(got, want)
