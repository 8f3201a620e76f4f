"""Token distances and the streaming banded Levenshtein state against full Wagner–Fischer."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from memrisk import MemriskError
from memrisk.distance import (
    BAND_INF,
    band_final,
    band_init,
    band_lower_bound,
    band_step,
    char_levenshtein,
    hamming,
    levenshtein,
    sentence_bleu,
)


def wagner_fischer(a: list[int], b: list[int]) -> list[list[int]]:
    """The full DP table D[i][j] = edit distance between a[:i] and b[:j]."""
    table = [[j for j in range(len(b) + 1)]]
    for i in range(1, len(a) + 1):
        row = [i]
        for j in range(1, len(b) + 1):
            row.append(min(table[i - 1][j - 1] + (a[i - 1] != b[j - 1]), table[i - 1][j] + 1, row[j - 1] + 1))
        table.append(row)
    return table


def test_hamming_and_levenshtein() -> None:
    assert hamming([1, 2, 3], [1, 0, 3]) == 1
    assert levenshtein([1, 2, 3, 4], [2, 3, 4, 5]) == 2
    assert hamming([1, 2, 3, 4], [2, 3, 4, 5]) == 4
    with pytest.raises(MemriskError):
        hamming([1], [1, 2])


token_lists = st.lists(st.integers(0, 3), min_size=1, max_size=9)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(token_lists, token_lists), min_size=1, max_size=4), st.integers(0, 4))
def test_banded_rows_equal_full_table_inside_the_band(pairs, epsilon: int) -> None:
    """Streaming several paths at once (ragged targets) reproduces Wagner–Fischer on the band."""
    steps = max(len(a) for a, _ in pairs)
    targets = torch.tensor([b + [0] * (10 - len(b)) for _, b in pairs])
    lengths = torch.tensor([len(b) for _, b in pairs])
    band = band_init(len(pairs), epsilon)
    for t in range(1, steps + 1):
        tokens = torch.tensor([a[t - 1] if t <= len(a) else 0 for a, _ in pairs])
        band = band_step(band, torch.full((len(pairs),), t), tokens, targets, lengths)
        for row, (a, b) in enumerate(pairs):
            if t > len(a):
                continue
            table = wagner_fischer(a[:t], b)
            for i in range(2 * epsilon + 1):
                j = t - epsilon + i
                want = table[t][j] if 0 <= j <= len(b) else None
                got = int(band[row, i])
                if want is None:
                    assert got == BAND_INF
                elif want <= epsilon:
                    assert got == want, (a[:t], b, t, j)
                else:
                    assert got > epsilon
            if t == len(a) == len(b):
                final = min(int(band_final(band[row : row + 1])[0]), BAND_INF)
                assert (final <= epsilon) == (levenshtein(a, b) <= epsilon)
                if final <= epsilon:
                    assert final == levenshtein(a, b)


@settings(max_examples=400, deadline=None)
@given(token_lists, st.lists(st.integers(0, 3), min_size=0, max_size=9), st.integers(0, 4), st.booleans())
def test_keep_rules_never_prune_a_path_with_a_completion_within_epsilon(full: list[int], target_seed: list[int], epsilon: int, tighter: bool) -> None:
    """Soundness: if some completion ends within ε of the target, every prefix of it is kept."""
    target = (target_seed + full)[: len(full)]
    if levenshtein(full, target) > epsilon:
        return
    band = band_init(1, epsilon)
    targets, lengths = torch.tensor([target]), torch.tensor([len(target)])
    for t in range(1, len(full) + 1):
        band = band_step(band, torch.tensor([t]), torch.tensor([full[t - 1]]), targets, lengths)
        assert int(band_lower_bound(band, tighter)[0]) <= epsilon
    assert int(band_final(band)[0]) == levenshtein(full, target)


def test_tighter_rule_prunes_paths_that_only_match_a_shorter_target_prefix() -> None:
    target = [1, 2, 3, 4, 5, 6]
    band = band_init(1, 2)
    targets, lengths = torch.tensor([target]), torch.tensor([6])
    for t, token in enumerate([7, 7, 1, 2], start=1):
        band = band_step(band, torch.tensor([t]), torch.tensor([token]), targets, lengths)
    assert int(band_lower_bound(band)[0]) <= 2 < int(band_lower_bound(band, tighter=True)[0])


def test_sentence_bleu_on_decoded_text() -> None:
    reference = "the cat sat on the mat and looked at the bird"
    assert sentence_bleu(reference, reference) == pytest.approx(1.0)
    one_word = sentence_bleu("the cat sat on the mat and looked at a bird", reference)
    # 1-4 gram precisions 10/11, 8/10, 7/9, 6/8, brevity penalty 1
    assert one_word == pytest.approx((10 / 11 * 8 / 10 * 7 / 9 * 6 / 8) ** 0.25)
    assert sentence_bleu("cat the", reference) < 1e-100
    assert sentence_bleu("", reference) < 1e-100


def test_char_levenshtein() -> None:
    assert char_levenshtein("kitten", "sitting") == 3
    assert char_levenshtein("", "abc") == 3
