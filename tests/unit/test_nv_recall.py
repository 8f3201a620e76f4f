"""nv-recall: difflib parity of the matching blocks, the merge/filter rules, normalization, identities."""

from __future__ import annotations

import difflib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memrisk
from memrisk import MemriskError
from memrisk.books.blocks import matching_blocks
from memrisk.books.nvrecall import Block, keep_long, merge, normalize, nv_recall

words = st.lists(st.sampled_from("a b c d e f".split()), max_size=80)


def distinct(prefix: str, count: int) -> list[str]:
    """`count` words that match nothing else."""
    return [f"{prefix}{i}" for i in range(count)]


@settings(max_examples=400, deadline=None)
@given(words, words, st.data())
def test_blocks_match_difflib(a: list[str], b: list[str], data) -> None:
    if data.draw(st.booleans()):
        b = [w if data.draw(st.integers(0, 9)) else "z" for w in a]
    want = [tuple(m) for m in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()[:-1]]
    assert matching_blocks(a, b) == want


def test_blocks_match_difflib_on_long_prose() -> None:
    from memrisk.demo.prose import source_documents

    book = " ".join(source_documents()[:60]).split()
    generated = [w if i % 37 else "changed" for i, w in enumerate(book) if i % 101]
    want = [tuple(m) for m in difflib.SequenceMatcher(None, book, generated, autojunk=False).get_matching_blocks()[:-1]]
    assert matching_blocks(book, generated) == want


@settings(max_examples=200, deadline=None)
@given(words, words)
def test_missing_and_additional_identities(a: list[str], b: list[str]) -> None:
    result = nv_recall(" ".join(a) or "x", " ".join(b), passes=((2, 1, 2), (10, 3, 3)))
    assert result.missing == result.book_words - result.matched
    assert result.additional == result.generated_words - result.matched
    assert result.nv_recall == pytest.approx(result.matched / result.book_words)
    assert result.max_block == max((blk.matched for blk in result.blocks), default=0)


def test_first_pass_stitches_short_aligned_gaps_and_counts_only_verbatim_words() -> None:
    blocks = [Block(0, 0, 10, 10, 10), Block(12, 12, 8, 8, 8), Block(21, 22, 5, 5, 5)]
    merged = merge(blocks, 2, 1)
    assert merged == [Block(0, 0, 26, 27, 23)]  # gaps (2, 2) then (1, 2), measured from the merged span's end


@pytest.mark.parametrize(
    "second, merged",
    [
        (Block(13, 12, 8, 8, 8), False),  # gap 3 in B exceeds max_gap 2
        (Block(12, 10, 8, 8, 8), False),  # gaps (2, 0): misaligned by 2 > 1
        (Block(11, 10, 8, 8, 8), True),  # gaps (1, 0): misaligned by 1
    ],
)
def test_merge_conditions(second: Block, merged: bool) -> None:
    out = merge([Block(0, 0, 10, 10, 10), second], 2, 1)
    assert (len(out) == 1) == merged
    if merged:
        assert out[0].matched == 18


def test_filter_keeps_blocks_at_least_as_long_as_the_threshold() -> None:
    blocks = [Block(0, 0, 19, 19, 19), Block(30, 30, 20, 20, 20), Block(60, 60, 25, 25, 21)]
    assert keep_long(blocks, 20) == blocks[1:]


def test_two_passes_consolidate_a_fragmented_passage() -> None:
    """Books Fig. 4a: punctuation splits a passage into blocks; pass 1 stitches the tiny gaps,
    pass 2 joins the 20+-word pieces into one block of 141 verbatim words."""
    pieces = [distinct("p", 30), distinct("q", 25), distinct("r", 3), distinct("s", 30), distinct("t", 3), distinct("u", 50)]
    book, generated = [], []
    gaps = [("x1", "y1"), ("x2 x3", "y2 y3"), ("x4", "y4"), ("x5 x6 x7 x8 x9", "y5 y6 y7 y8 y9 y10"), ("x10", "y11")]
    for piece, gap in zip(pieces, gaps + [("", "")]):
        book += piece + gap[0].split()
        generated += piece + gap[1].split()
    result = nv_recall(" ".join(book), " ".join(generated))
    assert result.matched == 141 == sum(len(p) for p in pieces)
    assert len(result.blocks) == 1 and result.max_block == 141
    assert result.missing == len(book) - 141 and result.additional == len(generated) - 141


def test_coincidental_short_matches_do_not_count() -> None:
    """Books Fig. 4b: scattered verbatim matches shorter than 20 words are filtered out."""
    book = " ".join(distinct("b", 40) + ["the", "old", "house"] + distinct("c", 40))
    generated = " ".join(distinct("g", 40) + ["the", "old", "house"] + distinct("h", 40))
    result = nv_recall(book, generated)
    assert result.matched == 0 and result.blocks == [] and result.nv_recall == 0.0


def test_out_of_order_text_counts_as_missing_and_additional() -> None:
    first, second = distinct("a", 150), distinct("b", 150)
    result = memrisk.nv_recall(" ".join(first + second), " ".join(second + first))
    assert result.matched == 150 and result.missing == 150 and result.additional == 150


def test_normalization() -> None:
    text = "\u201cWell\u201d \u2014 she said \u2013 \u2018it\u2019s\u2026fine\u2019 . . . _Really_ \uff21BC"
    assert normalize(text) == "\"well\" \u2014 she said \u2014 'it's... fine' ... really abc"
    assert nv_recall("It was \u201cfine\u201d", "it was \"FINE\"", passes=((2, 1, 1),)).matched == 3


def test_signature_and_bad_input() -> None:
    assert nv_recall("a b c", "a b c").signature == "nv-recall|normalize=books-c3|blocks=difflib-autojunk-off|passes=(2,1,20),(10,3,100)"
    with pytest.raises(MemriskError, match="no words"):
        nv_recall("   ", "a b")
