"""Teacher-forced scoring and greedy extraction, checked exactly on tiny random models."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import memrisk
from memrisk import DecodingPolicy, MemriskError
from tests.conftest import TINY_HIDDEN
from tests.numerics import assert_close, reorder_tolerance
from tests.unit.test_decoding import reference_log_probs

POLICIES = [DecodingPolicy(), DecodingPolicy(top_k=3), DecodingPolicy(temperature=0.6, top_k=5), DecodingPolicy(top_p=0.7)]


def stepwise_log_p(model, prefix: list[int], suffix: list[int], policy: DecodingPolicy) -> float:
    """log p_z by running the model once per suffix token on the growing history."""
    total = 0.0
    with torch.no_grad():
        for t, token in enumerate(suffix):
            logits = model(torch.tensor([prefix + suffix[:t]])).logits[0, -1].tolist()
            total += reference_log_probs(logits, policy)[token]
    return total


def test_log_p_equals_sum_of_independent_per_step_log_probs(tiny_model) -> None:
    rng = np.random.default_rng(0)
    prefixes = [rng.integers(0, 8, size=n).tolist() for n in (3, 5, 1, 4)]
    suffixes = [rng.integers(0, 8, size=n).tolist() for n in (4, 2, 6, 4)]
    got = memrisk.verbatim_logprob(tiny_model, prefixes, suffixes, POLICIES)
    assert got.shape == (4, len(POLICIES))
    for i, (prefix, suffix) in enumerate(zip(prefixes, suffixes)):
        for j, policy in enumerate(POLICIES):
            want = stepwise_log_p(tiny_model, prefix, suffix, policy)
            if math.isinf(want):
                assert got[i, j] == -math.inf
            else:
                assert_close(float(got[i, j]), want, reorder_tolerance(len(suffix), 8, TINY_HIDDEN))  # another layout


def test_top_k_probabilities_sum_to_one_over_all_continuations(tiny_model) -> None:
    prefix, length, vocab = [2, 5], 3, 8
    every = [[a, b, c] for a in range(vocab) for b in range(vocab) for c in range(vocab)]
    for policy in (DecodingPolicy(top_k=3), DecodingPolicy(top_p=0.6), DecodingPolicy(temperature=1.5)):
        log_p = memrisk.verbatim_logprob(tiny_model, [prefix] * len(every), every, policy)[:, 0]
        assert np.exp(log_p).sum() == pytest.approx(1.0, abs=1e-4)
        assert not np.isnan(log_p).any()
        assert len(every) == vocab**length


def test_target_outside_top_k_gives_minus_inf(tiny_model) -> None:
    scores = memrisk.verbatim_scores(tiny_model, [[1, 2]], [[0, 1, 2, 3]], [DecodingPolicy(top_k=1), DecodingPolicy()])
    assert scores.log_p[0, 1] > -math.inf
    if (scores.ranks[0] > 1).any():
        assert scores.log_p[0, 0] == -math.inf
    assert not scores.argmax_match[0] or scores.log_p[0, 0] == 0.0


def test_ranks_are_one_based_with_lower_id_ties(tiny_model) -> None:
    prefix, suffix = [3, 1, 4], [1, 5, 2]
    scores = memrisk.verbatim_scores(tiny_model, [prefix], [suffix], DecodingPolicy())
    with torch.no_grad():
        for t, token in enumerate(suffix):
            logits = tiny_model(torch.tensor([prefix + suffix[:t]])).logits[0, -1].tolist()
            order = sorted(range(8), key=lambda i: (-logits[i], i))
            assert scores.ranks[0, t] == order.index(token) + 1


def test_ragged_batches_match_one_at_a_time(tiny_model) -> None:
    prefixes, suffixes = [[1], [2, 3, 4, 5, 6], [7, 7]], [[1, 2, 3], [4], [5, 6]]
    batched = memrisk.verbatim_logprob(memrisk.load_model(tiny_model, batch_size=3), prefixes, suffixes, POLICIES)
    single = np.vstack([memrisk.verbatim_logprob(tiny_model, [p], [s], POLICIES) for p, s in zip(prefixes, suffixes)])
    assert_close(batched, single, reorder_tolerance(3, 8, TINY_HIDDEN))  # rows batched otherwise


def test_greedy_extraction_agrees_with_generate_and_teacher_forcing(tiny_model) -> None:
    prefixes = [[1, 2, 3], [4, 0, 6, 6], [5]]
    with torch.no_grad():
        generated = [
            tiny_model.generate(
                torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0,
            )[0, len(p):].tolist()
            for p in prefixes
        ]
    results = memrisk.greedy_extraction(tiny_model, prefixes, generated)
    assert [r.continuation for r in results] == generated
    assert all(r.exact and r.teacher_forced_exact and r.agrees for r in results)
    assert all(r.hamming == 0 and r.levenshtein == 0 for r in results)


def test_greedy_distances_to_a_different_suffix(tiny_model) -> None:
    [base] = memrisk.greedy_extraction(tiny_model, [[1, 2, 3]], [[0] * 6])
    target = list(base.continuation)
    target[2] = (target[2] + 1) % 8
    shifted = target[1:] + [target[0]]
    r1, r2 = memrisk.greedy_extraction(tiny_model, [[1, 2, 3]] * 2, [target, shifted])
    assert (r1.exact, r1.hamming, r1.levenshtein, r1.teacher_forced_exact) == (False, 1, 1, False)
    assert r2.levenshtein <= r2.hamming and not r2.exact


def test_strings_are_encoded_with_the_tokenizer(word_model) -> None:
    by_text = memrisk.verbatim_logprob(word_model, ["the quick brown"], ["fox jumps"], DecodingPolicy())
    by_ids = memrisk.verbatim_logprob(word_model, [word_model.encode("the quick brown")], [word_model.encode("fox jumps")], DecodingPolicy())
    assert by_text[0, 0] == by_ids[0, 0]


@pytest.mark.parametrize(
    ("prefixes", "suffixes", "message"),
    [
        ([[1, 2]], [[1], [2]], "pair up"),
        ([[1, 2]], [[]], "empty"),
        ([[]], [[1]], "BOS"),
        ([[1, 99]], [[1]], "outside the vocabulary"),
        ("text", [[1]], "single string"),
    ],
)
def test_bad_inputs_raise_one_clear_error(tiny_model, prefixes, suffixes, message) -> None:
    with pytest.raises(MemriskError, match=message):
        memrisk.verbatim_logprob(tiny_model, prefixes, suffixes, DecodingPolicy())


def test_policies_argument_is_validated(tiny_model) -> None:
    with pytest.raises(MemriskError, match="policies"):
        memrisk.verbatim_logprob(tiny_model, [[1]], [[2]], [])


@pytest.mark.parametrize("threads", [1, 2])
def test_positions_scored_a_few_at_a_time_equal_all_at_once_bit_for_bit(monkeypatch, threads) -> None:
    """`score_positions` goes over a CPU's positions in parts (one size for the ranks and scores, another for the
    moments); with at least two positions per thread in each part, every rank, policy score and moment is the one of
    all positions at once (the same reductions), with or without the moments."""
    from memrisk.extraction import probabilistic

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 37, 5000, generator=generator) * 4
    logits[0, 0, :10] = logits[0, 0, 10]  # a tie at the top: ranks and the nucleus apply the tie rule
    targets = torch.randint(0, 5000, (3, 37), generator=generator)
    kept = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for name in ("SCORED_POSITIONS", "CACHED_POSITIONS"):  # one part: all at once
            monkeypatch.setattr(probabilistic, name, logits.shape[0] * logits.shape[1])
        whole = probabilistic.score_positions(POLICIES, logits, targets, moments=True)
        for name, rows in (("SCORED_POSITIONS", 4), ("CACHED_POSITIONS", 6)):
            monkeypatch.setattr(probabilistic, name, rows)
        parts = probabilistic.score_positions(POLICIES, logits, targets, moments=True)
        without = probabilistic.score_positions(POLICIES, logits, targets)
    finally:
        torch.set_num_threads(kept)
    assert torch.equal(whole[0], parts[0]) and torch.equal(without[0], parts[0])
    assert len(parts[2]) == 3 and without[2] == []
    for got, want in zip(parts[1] + parts[2] + without[1], whole[1] + whole[2] + whole[1]):
        assert got.shape == targets.shape and torch.equal(got, want)
    assert torch.isneginf(whole[1][1]).any() and torch.isfinite(whole[1][0]).all()
