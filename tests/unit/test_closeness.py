"""Closeness metrics of a generation against its target: exact values on hand-made pairs, properties, and agreement
with the libraries they come from."""

from __future__ import annotations

import difflib
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz.distance import Levenshtein
from rouge_score import rouge_scorer

from memrisk.closeness import METRICS, WORDS, Closeness, SampleCloseness, closeness, closeness_many, summary
from memrisk.distance import sentence_bleu, sentence_bleus

TEXT = "the quick brown fox jumps over the lazy dog near the river bank"


def test_identical_pairs_reach_every_maximum() -> None:
    ids = list(range(13))
    assert closeness(ids, ids, TEXT, TEXT) == Closeness(rouge_l=1.0, lcs_substring_tokens=13, lcs_substring_chars=len(TEXT),
                                                        lcp_tokens=13, lcp_chars=len(TEXT), char_levenshtein_ratio=1.0, bleu=1.0)


def test_disjoint_pairs_are_zero_everywhere() -> None:
    assert closeness([1, 2, 3], [4, 5, 6], "abcdef", "xyzuvw") == Closeness(0.0, 0, 0, 0, 0, 0.0, 0.0)


def test_a_known_prefix_and_substring() -> None:
    close = closeness([7, 1, 2, 3, 9], [7, 8, 1, 2, 3], "the cat sat on mats", "the cat sit on mats")
    assert (close.lcp_tokens, close.lcs_substring_tokens) == (1, 3)
    assert (close.lcp_chars, close.lcs_substring_chars) == (9, len(" on mats") + 1)  # "the cat s" / "t on mats"
    assert close.char_levenshtein_ratio == 1 - 1 / 19
    assert close.rouge_l == pytest.approx(0.8, abs=1e-15)  # 4 of 5 words in order: P = R = 4/5
    assert close.bleu == sentence_bleu("the cat sat on mats", "the cat sit on mats") > 0


def test_bleu_is_nltks_unsmoothed_bleu_so_short_texts_score_almost_nothing() -> None:
    assert closeness([1], [1], "a b c", "a b c").bleu == math.exp(0.25 * math.log(1e0) * 3 + 0.25 * math.log(2.2250738585072014e-308))


words = st.lists(st.sampled_from(["a", "b", "c", "d", "the", "The", "é", "b."]), max_size=12)


@settings(max_examples=200, deadline=None)
@given(words, words)
def test_values_are_bounded_and_ordered(generated: list[str], target: list[str]) -> None:
    vocabulary = {w: i for i, w in enumerate(sorted(set(generated + target)))}
    g_ids, t_ids = [vocabulary[w] for w in generated], [vocabulary[w] for w in target]
    g_text, t_text = " ".join(generated), " ".join(target)
    close = closeness(g_ids, t_ids, g_text, t_text)
    for name in ("rouge_l", "char_levenshtein_ratio", "bleu"):
        assert 0.0 <= getattr(close, name) <= 1.0
    assert close.lcp_tokens <= close.lcs_substring_tokens <= min(len(g_ids), len(t_ids))
    assert close.lcp_chars <= close.lcs_substring_chars <= min(len(g_text), len(t_text))
    swapped = closeness(t_ids, g_ids, t_text, g_text)
    for name in ("rouge_l", "lcs_substring_tokens", "lcs_substring_chars", "lcp_tokens", "lcp_chars", "char_levenshtein_ratio"):
        assert getattr(swapped, name) == getattr(close, name), f"{name} is symmetric"


@settings(max_examples=200, deadline=None)
@given(words, words)
def test_each_metric_agrees_with_a_direct_library_call(generated: list[str], target: list[str]) -> None:
    g_text, t_text = " ".join(generated), " ".join(target)
    close = closeness([ord(c) for c in g_text], [ord(c) for c in t_text], g_text, t_text)
    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=WORDS)
    assert close.rouge_l == scorer.score(t_text, g_text)["rougeL"].fmeasure
    longest = difflib.SequenceMatcher(None, g_text, t_text, autojunk=False).find_longest_match(0, len(g_text), 0, len(t_text)).size
    assert close.lcs_substring_chars == close.lcs_substring_tokens == longest
    assert close.lcp_chars == len(os.path.commonprefix([g_text, t_text]))
    assert close.char_levenshtein_ratio == Levenshtein.normalized_similarity(g_text, t_text)
    assert close.bleu == sentence_bleu(g_text, t_text)


@settings(max_examples=100, deadline=None)
@given(st.lists(words, max_size=8), words)
def test_the_batched_bleu_is_nltks_value_for_value(candidates: list[list[str]], reference: list[str]) -> None:
    texts = [" ".join(c) for c in candidates]
    assert sentence_bleus(texts, " ".join(reference)).tolist() == [sentence_bleu(t, " ".join(reference)) for t in texts]


def test_many_generations_score_as_each_alone_repeats_included() -> None:
    target_ids, target = [1, 2, 3, 4], "one two three four"
    generated = [([1, 2, 3, 4], "one two three four"), ([1, 2, 9], "one two nine"), ([1, 2, 3, 4], "one two three four"), ([], "")]
    values = closeness_many([g for g, _ in generated], [t for _, t in generated], target_ids, target)
    assert set(values) == set(METRICS)
    for i, (ids, text) in enumerate(generated):
        assert {name: values[name][i].item() for name in METRICS} == closeness(ids, target_ids, text, target).__dict__


def test_sample_closeness_gives_the_exact_mean_and_maximum_whatever_the_batches() -> None:
    samples = [[1, 2, 3], [1, 2, 4], [5, 6, 7], [1, 2, 3]]

    def decode(ids: list[int]) -> str:
        return " ".join(f"w{i}" for i in ids)

    one, two = SampleCloseness([1, 2, 3], decode([1, 2, 3]), decode), SampleCloseness([1, 2, 3], decode([1, 2, 3]), decode)
    one.add(samples)
    two.add(samples[:1])
    two.add(samples[1:])
    alone = closeness_many(samples, [decode(s) for s in samples], [1, 2, 3], decode([1, 2, 3]))
    assert one.result() == two.result()
    assert one.result()["lcp_tokens"] == (math.fsum([3, 2, 0, 3]) / 4, 3)
    assert one.result()["rouge_l"] == (math.fsum(alone["rouge_l"].tolist()) / 4, 1.0)
    assert SampleCloseness([1], "w1", decode).result()["bleu"] == (None, None)


def test_summary_gives_mean_and_median_leaving_out_missing_values() -> None:
    assert summary({"bleu": [0.0, 1.0, None, 0.5], "lcp_chars": np.array([], dtype=float)}) == {
        "bleu": {"mean": 0.5, "median": 0.5}, "lcp_chars": {"mean": None, "median": None}}


def test_the_batched_bleu_falls_back_to_nltk_when_n_gram_keys_would_not_fit_in_int64() -> None:
    reference = " ".join(f"w{i}" for i in range(50_000))
    candidate = reference.replace("w25000 ", "other ")
    assert sentence_bleus([candidate], reference).tolist() == [sentence_bleu(candidate, reference)] and 0 < sentence_bleu(candidate, reference) < 1
