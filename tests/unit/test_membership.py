"""Membership-inference scores and their ROC: the teacher-forced μ and σ against a direct log-softmax, the scores against
hand computations, AUC against a Mann–Whitney count, TPR at low FPR, bootstrap intervals, and ROC properties."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import mannwhitneyu

import memrisk
from memrisk import DecodingPolicy, MemriskError
from memrisk.extraction.membership import (
    lowest_share_mean, roc_auc, roc_curve, roc_summary, standardised_log_probs, window_scores, zlib_length,
)

PREFIX, SUFFIX = [1, 2, 3], [4, 0, 7, 7, 2]


def direct_moments(model, prefix: list[int], suffix: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Raw log p of each suffix token, and μ, σ of log p under p, from one plain forward pass and a full log-softmax."""
    with torch.no_grad():
        logits = model(torch.tensor([prefix + suffix])).logits[0, len(prefix) - 1:-1].double()
    log_p = torch.log_softmax(logits, dim=-1)
    p = log_p.exp()
    mu = (p * log_p).sum(-1)
    sigma = (p * (log_p - mu[:, None]) ** 2).sum(-1).sqrt()
    return log_p[torch.arange(len(suffix)), torch.tensor(suffix)], mu, sigma


def test_teacher_forcing_gives_raw_log_probs_and_their_moments_over_the_vocabulary(tiny_model) -> None:
    scores = memrisk.verbatim_scores(tiny_model, [PREFIX], [SUFFIX], [DecodingPolicy(top_k=2), DecodingPolicy()], moments=True)
    log_p, mu, sigma = direct_moments(tiny_model, PREFIX, SUFFIX)
    assert np.allclose(scores.raw_log_probs[0], log_p.numpy(), atol=1e-5)
    assert np.allclose(scores.log_prob_mean[0], mu.numpy(), atol=1e-5)
    assert np.allclose(scores.log_prob_std[0], sigma.numpy(), atol=1e-5)
    assert np.all(scores.log_prob_std[0] > 0)
    # the raw distribution is the `full` policy's; the policies' own columns are unchanged
    assert np.allclose(scores.raw_log_probs[0], scores.token_log_probs[0, 1], atol=1e-6)
    assert scores.log_p[0, 1] == pytest.approx(float(scores.token_log_probs[0, 1].astype(np.float64).sum()))
    assert scores.select([DecodingPolicy()]).log_prob_std is scores.log_prob_std


def test_moments_are_computed_only_when_asked_and_change_no_other_number(tiny_model) -> None:
    policies = [DecodingPolicy(top_k=2), DecodingPolicy(), DecodingPolicy(top_p=0.8)]
    plain = memrisk.verbatim_scores(tiny_model, [PREFIX, PREFIX], [SUFFIX, SUFFIX[:3]], policies)
    asked = memrisk.verbatim_scores(tiny_model, [PREFIX, PREFIX], [SUFFIX, SUFFIX[:3]], policies, moments=True)
    assert plain.raw_log_probs is None and plain.log_prob_mean is None and plain.log_prob_std is None
    assert asked.raw_log_probs.shape == asked.log_prob_std.shape == (2, len(SUFFIX))
    for name in ("log_p", "token_log_probs", "ranks", "suffix_lengths"):  # the same computation: equal bit for bit
        np.testing.assert_array_equal(getattr(plain, name), getattr(asked, name))


def test_moments_are_zero_past_a_shorter_suffix(tiny_model) -> None:
    scores = memrisk.verbatim_scores(tiny_model, [PREFIX, PREFIX], [SUFFIX, SUFFIX[:2]], DecodingPolicy(), moments=True)
    assert np.all(scores.raw_log_probs[1, 2:] == 0) and np.all(scores.log_prob_std[1, 2:] == 0)
    assert np.allclose(scores.log_prob_mean[1, :2], scores.log_prob_mean[0, :2], atol=1e-6)


def test_window_scores_are_the_papers_formulas() -> None:
    log_p = np.array([-1.0, -4.0, -0.5, -3.0, -2.0])
    mu = np.array([-1.5, -2.0, -1.0, -1.0, -2.5])
    sigma = np.array([0.5, 1.0, 2.0, 0.5, 1.0])
    reference = np.array([-2.0, -2.0, -2.0, -2.0, -2.0])
    text = "the quick brown fox the quick brown fox"
    scores = window_scores(log_p, mu, sigma, text, k=0.4, reference_log_p=reference)
    assert scores.loss == pytest.approx(-2.1)
    assert scores.zlib == pytest.approx(-2.1 / len(zlib.compress(text.encode("utf-8"))))
    assert scores.min_k == pytest.approx((-4.0 + -3.0) / 2)  # the lowest 2 of 5 tokens
    # z = (1.0, -2.0, 0.25, -4.0, 0.5): the lowest two are -4 and -2
    assert scores.min_k_pp == pytest.approx(-3.0)
    assert scores.reference == pytest.approx(-2.1 - -2.0)
    assert window_scores(log_p, mu, sigma, text, k=0.4).reference is None


def test_min_k_averages_at_least_one_token() -> None:
    assert lowest_share_mean(np.array([-1.0, -5.0, -2.0]), k=0.1) == -5.0
    assert lowest_share_mean(np.array([-1.0, -5.0, -2.0]), k=1.0) == pytest.approx(-8.0 / 3)
    with pytest.raises(MemriskError, match="at least one suffix token"):
        lowest_share_mean(np.array([]), k=0.2)


def test_a_flat_distribution_standardises_to_zero_and_an_impossible_token_to_minus_inf() -> None:
    z = standardised_log_probs(np.array([-math.log(4), -np.inf, -1.0]), np.array([-math.log(4), -math.log(4), -2.0]),
                               np.array([0.0, 0.0, 0.5]))
    assert z.tolist() == [0.0, -math.inf, 2.0]


def test_zlib_length_counts_compressed_utf8_bytes() -> None:
    assert zlib_length("é" * 100) == len(zlib.compress(("é" * 100).encode("utf-8")))
    assert zlib_length("a" * 1000) < zlib_length("".join(chr(33 + (i * 37) % 90) for i in range(1000)))


def test_auc_is_the_mann_whitney_count_with_ties_as_halves() -> None:
    members, non_members = [3.0, 2.0, 2.0, 1.0], [2.0, 0.0, -np.inf]
    # 3 beats all three; each 2 ties one (½) and beats two; 1 beats two: (3 + 2.5 + 2.5 + 2) / 12
    assert roc_auc(members, non_members) == pytest.approx(10 / 12)
    curve = roc_curve(members, non_members)
    assert curve.fpr.tolist() == pytest.approx([0, 0, 1 / 3, 1 / 3, 2 / 3, 1])
    assert curve.tpr.tolist() == pytest.approx([0, 0.25, 0.75, 1, 1, 1])
    assert curve.thresholds.tolist() == [3.0, 2.0, 1.0, 0.0, -np.inf]


def test_tpr_at_low_fpr_is_read_at_the_last_vertex_within_the_rate() -> None:
    members, non_members = [5.0, 4.0, 3.0], [4.5] + [0.0] * 99
    curve = roc_curve(members, non_members)
    assert curve.tpr_at(0.01) == 1.0  # one false positive of 100 is allowed: every member outscores the rest
    assert curve.tpr_at(0.001) == pytest.approx(1 / 3)  # none is allowed: only the member above 4.5
    summary = roc_summary(members, non_members, [0.01, 0.001], bootstrap=0, seed=0, confidence=0.95)
    assert summary.to_dict()["tpr_at_fpr"] == {"0.01": {"estimate": 1.0, "low": None, "high": None},
                                               "0.001": {"estimate": pytest.approx(1 / 3), "low": None, "high": None}}


def test_bootstrap_intervals_are_seeded_and_cover_the_estimate() -> None:
    rng = np.random.default_rng(1)
    members, non_members = rng.normal(1.0, 1.0, 60), rng.normal(0.0, 1.0, 80)
    one = roc_summary(members, non_members, [0.01], bootstrap=300, seed=7, confidence=0.9)
    assert one == roc_summary(members, non_members, [0.01], bootstrap=300, seed=7, confidence=0.9)
    other = roc_summary(members, non_members, [0.01], bootstrap=300, seed=8, confidence=0.9)
    assert other.auc.low != one.auc.low
    assert one.auc.low < one.auc.estimate < one.auc.high
    assert 0.0 <= one.tpr_at[0.01].low <= one.tpr_at[0.01].high <= 1.0
    assert (one.members, one.non_members) == (60, 80)
    wider = roc_summary(members, non_members, [0.01], bootstrap=300, seed=7, confidence=0.99)
    assert wider.auc.high - wider.auc.low > one.auc.high - one.auc.low


def test_separated_scores_have_auc_one_in_every_resample() -> None:
    summary = roc_summary([5.0, 6.0, 7.0], [1.0, 2.0], [0.01], bootstrap=50, seed=0, confidence=0.95)
    assert (summary.auc.estimate, summary.auc.low, summary.auc.high) == (1.0, 1.0, 1.0)
    assert summary.tpr_at[0.01].estimate == 1.0


def test_nan_or_missing_scores_are_refused() -> None:
    with pytest.raises(MemriskError, match="1 member scores are NaN"):
        roc_auc([1.0, float("nan")], [0.0])
    with pytest.raises(MemriskError, match="at least one non-member score"):
        roc_auc([1.0], [])


scores = st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(scores, scores)
def test_auc_lies_in_zero_one_and_equals_mann_whitney(members, non_members) -> None:
    auc = roc_auc(members, non_members)
    assert 0.0 <= auc <= 1.0
    expected = mannwhitneyu(members, non_members).statistic / (len(members) * len(non_members))
    assert auc == pytest.approx(expected, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=2, max_size=40, unique=True), st.integers(1, 39))
def test_negated_scores_reverse_the_auc_without_ties(values, split) -> None:
    members, non_members = values[: split % (len(values) - 1) + 1], values[split % (len(values) - 1) + 1:]
    negated = roc_auc([-v for v in members], [-v for v in non_members])
    assert roc_auc(members, non_members) + negated == pytest.approx(1.0, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(scores, scores)
def test_roc_runs_from_origin_to_one_and_tpr_grows_with_fpr(members, non_members) -> None:
    curve = roc_curve(members, non_members)
    assert (curve.fpr[0], curve.tpr[0], curve.fpr[-1], curve.tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert np.all(np.diff(curve.fpr) >= 0) and np.all(np.diff(curve.tpr) >= 0)
    rates = [0.0, 0.001, 0.01, 0.1, 0.5, 1.0]
    at = [curve.tpr_at(r) for r in rates]
    assert at == sorted(at) and at[-1] == 1.0
