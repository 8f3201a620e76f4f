"""The books view's classes of a book's words (memrisk.report.books): what nv-recall counted, merged over or dropped."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from memrisk.books.nvrecall import nv_recall
from memrisk.report import books


def words(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [f"w{rng.randrange(10**9)}" for _ in range(count)]


def test_a_merged_gap_and_a_dropped_run_are_told_apart() -> None:
    book = words(0, 600)
    # 140 words, a 3-word substitution (merged over by pass 1), 147 words, 20 foreign words, then a 20-word run that
    # pass 1 keeps (≥ 20 words) and pass 2 drops (< 100 words and too far to merge).
    generation = book[10:150] + ["x", "y", "z"] + book[153:300] + words(1, 20) + book[320:340]
    result = nv_recall(" ".join(book), " ".join(generation))
    assert [(b.book_start, b.book_span, b.matched) for b in result.blocks] == [(10, 290, 287)]
    classes = books.word_classes(len(book), result.stages)
    assert classes[10:150] == [books.MATCHED] * 140 and classes[150:153] == [books.MERGED] * 3
    assert classes[153:300] == [books.MATCHED] * 147 and classes[320:340] == [books.SHORT] * 20
    assert classes[:10] == [books.OUTSIDE] * 10 and classes[340:] == [books.OUTSIDE] * 260
    pieces = books.text_pieces(classes, result.blocks, context=5)
    assert [(p.kind, p.start, p.end, p.block, p.skipped) for p in pieces] == [
        ("outside", 0, 5, None, True), ("outside", 5, 10, None, False), ("matched", 10, 150, 0, False),
        ("merged", 150, 153, 0, False), ("matched", 153, 300, 0, False), ("outside", 300, 305, None, False),
        ("outside", 305, 320, None, True), ("short", 320, 340, None, False), ("outside", 340, 600, None, True)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 400), st.integers(1, 160), st.integers(0, 12)), min_size=1, max_size=6), st.integers(0, 10**6))
def test_the_counted_words_are_nv_recalls_matched_words(spans: list[tuple[int, int, int]], seed: int) -> None:
    """Whatever the generation copies, the words marked MATCHED are exactly nv-recall's m, and lie inside its blocks."""
    book = words(seed, 700)
    generation: list[str] = []
    for start, length, noise in spans:
        generation += book[start:start + length] + words(seed + start + 1, noise)
    result = nv_recall(" ".join(book), " ".join(generation))
    classes = books.word_classes(len(book), result.stages)
    assert classes.count(books.MATCHED) == result.matched
    inside = {i for b in result.blocks for i in range(b.book_start, b.book_end)}
    assert all(i in inside for i, kind in enumerate(classes) if kind in (books.MATCHED, books.MERGED))
    assert [sum(b.matched for b in stage) for stage in books.counted_runs(result.stages)] == [result.matched] * len(result.stages)
