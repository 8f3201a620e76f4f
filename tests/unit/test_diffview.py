"""nv-recall diff view: exact segments on hand-built texts, partition property, stats, escaping, abbreviation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrisk import MemriskError
from memrisk.books.diffview import Segment, diff_page, segments
from memrisk.books.nvrecall import Block, normalize, nv_recall

BOOK = [f"book{i:03d}" for i in range(150)]
EXTRA = ["extra0", "extra1", "extra2", "extra3", "extra4"]
FOREIGN = ["foreign0", "foreign1", "foreign2", "foreign3", "foreign4"]


def copied(foreign_replaces_book_words: bool) -> list[str]:
    """EXTRA, then book words 10..129 with FOREIGN replacing words 70..74 (or inserted before word 70)."""
    after = BOOK[75:130] if foreign_replaces_book_words else BOOK[70:130]
    return EXTRA + BOOK[10:70] + FOREIGN + after


def assert_partition(segs: list[Segment], book_len: int, generated_len: int) -> None:
    """Matched/missing cover every B word once, matched/additional every G word once, in reading order."""
    book = [i for s in segs if s.kind != "additional" for i in range(s.book_start, s.book_end)]
    generated = [j for s in segs if s.kind != "missing" for j in range(s.generated_start, s.generated_end)]
    assert book == list(range(book_len))
    assert generated == list(range(generated_len))
    assert all(s.generated_start == s.generated_end for s in segs if s.kind == "missing")
    assert all(s.book_start == s.book_end for s in segs if s.kind == "additional")
    assert all(s.book_start < s.book_end or s.generated_start < s.generated_end for s in segs)


@pytest.mark.parametrize(
    "replace, passes, block",
    [
        (True, None, Block(10, 5, 120, 120, 115)),  # substitution: aligned gap, merged by the default passes
        (False, ((10, 5, 20),), Block(10, 5, 120, 125, 120)),  # insertion: G span longer than B span
    ],
)
def test_segments_of_a_hand_built_copy(replace: bool, passes, block: Block) -> None:
    generated = copied(replace)
    result = nv_recall(" ".join(BOOK), " ".join(generated), **({"passes": passes} if passes else {}))
    assert result.blocks == [block]
    segs = segments(BOOK, generated, result.blocks)
    assert segs == [
        Segment("missing", 0, 10, 0, 0),
        Segment("additional", 10, 10, 0, 5),
        Segment("matched", 10, 130, 5, block.generated_end),
        Segment("missing", 130, 150, block.generated_end, block.generated_end),
    ]
    assert_partition(segs, len(BOOK), len(generated))
    assert sum(s.book_end - s.book_start for s in segs if s.kind == "matched") == sum(b.book_span for b in result.blocks)


def test_html_shows_stats_signature_and_legend_counts() -> None:
    book, generated = " ".join(BOOK), " ".join(copied(True))
    page = diff_page(book, generated, title="Book <one>")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<title>Book &lt;one&gt;</title>" in page and "<h1>Book &lt;one&gt;</h1>" in page
    for label, value in [("nv-recall", "76.7%"), ("matched m", "115"), ("missing", "35"), ("additional", "10"),
                         ("max block", "115"), ("|B|", "150"), ("|G|", "125")]:
        assert f"<tr><th>{label}</th><td>{value}</td></tr>" in page
    assert "nv-recall|normalize=books-c3|blocks=difflib-autojunk-off|passes=(2,1,20),(10,3,100)" in page
    assert "matched: 120 B words in 1 blocks" in page
    assert "missing: 30 B words" in page and "additional: 5 G words" in page
    assert "normalized" in page and "Gap words inside merged blocks" in page
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")
    assert '<tr class="matched"><td><span class="pos">B[10:130]</span>book010' in page
    assert " ".join(FOREIGN) in page and "book005" in page  # gap words inside the block, full missing run
    assert page == diff_page(book, generated, nv_recall(book, generated), title="Book <one>")


def test_html_escapes_everything() -> None:
    attack = "<script>alert(1)</script> <img src=x onerror=alert(1)>"
    book = " ".join(BOOK[:40]) + " " + attack + " " + " ".join(BOOK[40:])
    generated = " ".join(BOOK[:20]) + " " + attack + " " + " ".join(BOOK[:60]) + " " + attack
    page = diff_page(book, generated)
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count("&lt;script&gt;") == 3  # once in B (matched) and twice in G


def test_context_words_abbreviates_unmatched_runs_only() -> None:
    book, generated = " ".join(BOOK), " ".join(copied(True))
    page = diff_page(book, generated, context_words=3)
    assert "book000 book001 book002 " in page and " book007 book008 book009" in page
    assert '<span class="skip">… 4 words …</span>' in page and "book005" not in page
    assert '<span class="skip">… 14 words …</span>' in page and "book140" not in page
    assert "extra0 extra1 extra2 extra3 extra4" in page  # 5 ≤ 2·3: shown whole
    assert " ".join(BOOK[10:70] + FOREIGN + BOOK[75:130]) in page  # matched blocks are never abbreviated
    assert '… 10 words …' in diff_page(book, generated, context_words=0)
    with pytest.raises(MemriskError):
        diff_page(book, generated, context_words=-1)


def test_unrelated_generation_is_all_missing_and_additional() -> None:
    generated = [f"other{i}" for i in range(40)]
    result = nv_recall(" ".join(BOOK), " ".join(generated))
    assert result.blocks == []
    assert segments(BOOK, generated, result.blocks) == [Segment("missing", 0, 150, 0, 0), Segment("additional", 150, 150, 0, 40)]
    page = diff_page(" ".join(BOOK), " ".join(generated), result)
    assert "<tr><th>nv-recall</th><td>0.0%</td></tr>" in page and "matched: 0 B words in 0 blocks" in page
    assert '<tr class="matched">' not in page
    assert segments(BOOK, [], []) == [Segment("missing", 0, 150, 0, 0)]


def test_inconsistent_inputs_are_rejected() -> None:
    with pytest.raises(MemriskError):
        segments(BOOK, BOOK, [Block(10, 10, 20, 20, 20), Block(25, 35, 5, 5, 5)])  # overlaps in B
    with pytest.raises(MemriskError):
        segments(BOOK, BOOK[:50], [Block(0, 40, 20, 20, 20)])  # past the end of G
    with pytest.raises(MemriskError):
        diff_page("a b c", "a b c", nv_recall("a b c d", "a b c"))


words = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=60)


@settings(max_examples=150, deadline=None)
@given(words.filter(bool), words, st.sampled_from([((2, 1, 1),), ((2, 1, 3), (10, 3, 5))]), st.none() | st.integers(0, 3))
def test_segments_partition_both_texts(book: list[str], generated: list[str], passes, context_words) -> None:
    book_text, generated_text = " ".join(book), " ".join(generated)
    result = nv_recall(book_text, generated_text, passes=passes)
    segs = segments(normalize(book_text).split(), normalize(generated_text).split(), result.blocks)
    assert_partition(segs, len(book), len(generated))
    matched = [s for s in segs if s.kind == "matched"]
    assert [(s.book_start, s.generated_start) for s in matched] == [(b.book_start, b.generated_start) for b in result.blocks]
    assert sum(s.book_end - s.book_start for s in matched) == sum(b.book_span for b in result.blocks)
    assert f"{result.nv_recall:.1%}" in diff_page(book_text, generated_text, result, context_words=context_words)
