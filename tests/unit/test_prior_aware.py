"""Prior-aware memorization: shared-prefix scoring, the prior estimator's bias and variance, decisions."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memrisk
from memrisk import DecodingPolicy, MemriskError
from memrisk.data import Document
from memrisk.data.bank import PrefixBank
from memrisk.extraction.prior_aware import bank_log_probs, calibrate, default_m, prior_aware
from tests.conftest import TINY_HIDDEN, word_tokenizer
from tests.numerics import assert_close, reorder_tolerance

from conftest import tiny_gpt2

FULL = DecodingPolicy()


@pytest.fixture(scope="module")
def tiny() -> memrisk.LanguageModel:
    """Vocabulary 6, batches of 4 (bank chunks and suffix groups split unevenly)."""
    return memrisk.load_model(tiny_gpt2(vocab_size=6, seed=2), batch_size=4)


@pytest.mark.parametrize("policy", [FULL, DecodingPolicy(top_k=3), DecodingPolicy(temperature=0.7, top_p=0.8)])
def test_bank_scores_equal_teacher_forcing_of_each_pair(tiny, policy: DecodingPolicy) -> None:
    bank = PrefixBank.from_token_lists([[a, b, (a + b) % 6][: 1 + (a + b) % 3] for a in range(6) for b in range(3)])
    suffixes = [[1, 2, 3], [4], [0, 5], [2, 2, 2, 2, 1]]
    got = bank_log_probs(tiny, bank, suffixes, policy)
    pairs = [(list(q), s) for s in suffixes for q in bank.prefixes]
    want = memrisk.verbatim_logprob(tiny, [q for q, _ in pairs], [s for _, s in pairs], policy)[:, 0].reshape(len(suffixes), len(bank))
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    assert_close(got[finite], want[finite], reorder_tolerance(5, 6, TINY_HIDDEN))  # rows batched otherwise


def test_prior_estimate_is_unbiased_with_variance_below_one_over_4c(word_model) -> None:
    words = "the quick brown fox jumps over the lazy dog while a bird sang in the old tree by the river".split()
    corpus = [Document("a", " ".join(words[:12])), Document("b", " ".join(words[6:]))]
    length, c = 2, 6
    windows = [tuple(ids[i : i + length]) for ids in (word_model.encode(d.text) for d in corpus) for i in range(len(ids) - length + 1)]
    suffix = word_model.encode("the lazy")
    exact_terms = np.exp(bank_log_probs(word_model, PrefixBank.from_token_lists(windows), [suffix])[0])
    exact = exact_terms.mean()
    estimates = []
    for seed in range(400):
        bank = PrefixBank.from_documents(word_model, corpus, length=length, size=c, seed=seed)
        assert all(p in windows for p in bank.prefixes)
        scores = prior_aware(word_model, [word_model.encode("over")], [suffix], bank, m=0.0, n=1.0, trials=1)
        estimates.append(math.exp(scores.results[0].log_prior))
    estimates = np.array(estimates)
    standard_error = estimates.std(ddof=1) / math.sqrt(len(estimates))
    assert abs(estimates.mean() - exact) < 4 * standard_error
    assert estimates.var(ddof=1) <= 1 / (4 * c)
    assert estimates.var(ddof=1) == pytest.approx(exact_terms.var() / c, rel=0.35)


def test_trials_pool_to_the_mean_over_the_whole_bank(tiny) -> None:
    bank = PrefixBank.from_token_lists([[a, b] for a in range(6) for b in range(6)])
    scores = prior_aware(tiny, [[1, 1], [2, 3]], [[4, 0, 1], [5]], bank, n=2.0, trials=4)
    matrix = bank_log_probs(tiny, bank, [[4, 0, 1], [5]])
    for row, result in zip(matrix, scores.results):
        assert result.log_prior == pytest.approx(math.log(np.exp(row).mean()), abs=1e-9)
        parts = [math.log(np.exp(part).mean()) for part in np.split(row, 4)]
        np.testing.assert_allclose(result.log_prior_trials, parts, atol=1e-9)
        assert result.log_ratio == pytest.approx(result.log_p - result.log_prior)
        ratios = [result.log_p - t for t in parts]
        assert result.log_ratio_spread == pytest.approx(max(ratios) - min(ratios))
        assert result.prefixes_used == 36
    assert scores.prefixes_per_trial == 9
    assert "c=9|trials=4" in scores.signature


def test_decision_is_both_strict_inequalities(tiny) -> None:
    bank = PrefixBank.from_token_lists([[a, b] for a in range(6) for b in range(6)])
    prefixes, suffixes = [[a, a] for a in range(6)], [[a] for a in range(6)]
    free = prior_aware(tiny, prefixes, suffixes, bank, m=0.0, n=0.0, trials=1)
    for m, n in [(0.1, 1.0), (0.2, 1.2), (0.05, 0.9)]:
        scores = prior_aware(tiny, prefixes, suffixes, bank, m=m, n=n, trials=1)
        for base, result in zip(free.results, scores.results):
            assert result.extractable == (base.log_p > math.log(m))
            assert result.pa_memorized == (base.log_p > math.log(m) and base.log_ratio > math.log(n))
    assert any(r.pa_memorized for r in free.results) and not all(
        r.pa_memorized for r in prior_aware(tiny, prefixes, suffixes, bank, m=0.0, n=1.0, trials=1).results
    )


def test_own_document_is_left_out_of_the_prior(word_model) -> None:
    corpus = [Document("mine", "the quick brown fox jumps over"), Document("other", "a bird sang in the old tree")]
    bank = PrefixBank.from_documents(word_model, corpus, length=2, size=60, seed=3)
    target = word_model.encode("the quick brown fox jumps over")
    scores = prior_aware(word_model, [target[:2]], [target[2:]], bank, m=0.0, n=1.0, trials=3, documents=["mine"])
    others = [list(p) for p, d in zip(bank.prefixes, bank.documents) if d != "mine"]
    assert scores.results[0].prefixes_used == len(others)
    want = np.exp(bank_log_probs(word_model, PrefixBank.from_token_lists(others), [target[2:]])[0]).mean()
    assert_close(scores.results[0].log_prior, math.log(want), reorder_tolerance(len(target) - 2, len(word_tokenizer()), TINY_HIDDEN))


def test_calibration_is_the_mean_ratio_over_generic_halves(word_model) -> None:
    bank = PrefixBank.from_documents(word_model, [Document("d", " ".join(["the quick brown fox jumps over the lazy dog"] * 3))], length=3, size=10)
    generic = ["the quick brown fox jumps over", "a bird sang in the old tree by the river"]
    calibration = calibrate(word_model, bank, sequences=generic, trials=2)
    ratios = []
    for text in generic:
        ids = word_model.encode(text)
        half = len(ids) // 2
        result = prior_aware(word_model, [ids[:half]], [ids[half : 2 * half]], bank, m=0.0, n=1.0, trials=2).results[0]
        ratios.append(result.log_ratio)
    assert calibration.log_ratios == pytest.approx(tuple(ratios))
    assert calibration.n == pytest.approx(np.exp(ratios).mean())


def test_a_given_p_z_stands_in_for_the_teacher_forced_one(tiny) -> None:
    bank = PrefixBank.from_token_lists([[a, b] for a in range(6) for b in range(2)])
    prefixes, suffixes = [[1, 2], [3, 4], [5, 0]], [[3, 1], [2], [4, 4, 1]]
    computed = prior_aware(tiny, prefixes, suffixes, bank, m=0.0, n=1.0, trials=2)
    same = prior_aware(tiny, prefixes, suffixes, bank, m=0.0, n=1.0, trials=2, log_p=[r.log_p for r in computed.results])
    assert same.results == computed.results
    shifted = prior_aware(tiny, prefixes, suffixes, bank, m=0.0, n=1.0, trials=2, log_p=[r.log_p - 1.0 for r in computed.results])
    for base, result in zip(computed.results, shifted.results):
        assert (result.log_p, result.log_prior) == (base.log_p - 1.0, base.log_prior)
        assert result.log_ratio == pytest.approx(base.log_ratio - 1.0)
    with pytest.raises(MemriskError, match="one log-probability per example"):
        prior_aware(tiny, prefixes, suffixes, bank, m=0.0, n=1.0, trials=2, log_p=[0.0, 0.0])


def test_default_m_follows_suffix_length() -> None:
    assert default_m(4) == 1e-2 and default_m(50) == 1e-4


def test_bad_inputs_get_one_clear_error(tiny, word_model) -> None:
    bank = PrefixBank.from_token_lists([[1, 2], [3, 4]])
    with pytest.raises(MemriskError, match="trials"):
        prior_aware(tiny, [[1]], [[2]], bank, n=1.0, trials=3)
    with pytest.raises(MemriskError, match="m must be"):
        prior_aware(tiny, [[1]], [[2]], bank, m=1.5, n=1.0, trials=1)
    with pytest.raises(MemriskError, match="n must be"):
        prior_aware(tiny, [[1]], [[2]], bank, n=-1.0, trials=1)
    with pytest.raises(MemriskError, match="empty"):
        PrefixBank.from_token_lists([])
    with pytest.raises(MemriskError, match="no document"):
        PrefixBank.from_documents(word_model, [Document("x", "the fox")], length=5, size=3)
