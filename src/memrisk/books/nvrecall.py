"""Near-verbatim recall of a book in a long generation (Books paper §3.3, Algorithm 1).

Both texts are lightly normalized (App. C.3) and split on whitespace. Verbatim matching blocks
come from the greedy longest-common-run recursion (difflib's, autojunk off); two merge-and-
filter passes then stitch well-aligned nearby blocks into near-verbatim blocks and keep only
long ones. The matched count m sums the verbatim words of the kept blocks (gap words are not
counted); nv-recall = m / |B|.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from memrisk.books.blocks import matching_blocks
from memrisk.errors import MemriskError

PASSES: tuple[tuple[int, int, int], ...] = ((2, 1, 20), (10, 3, 100))

_PUNCTUATION = str.maketrans({
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u00ab": '"', "\u00bb": '"', "\u2033": '"',
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "\u2039": "'", "\u203a": "'",
    "\u2013": "\u2014", "\u2012": "\u2014", "\u2015": "\u2014", "\u2212": "\u2014",
    "\u2026": "...",
})
_SPACED_DOTS = re.compile(r"\.(?:\s+\.){2,}")
_ELLIPSIS_BEFORE_WORD = re.compile(r"\.\.\.(?=\w)")
_UNDERSCORE_ITALICS = re.compile(r"_([^_]+)_")


def normalize(text: str) -> str:
    """Books App. C.3: NFKC, quotes/dashes/ellipsis mapped, spaced dots joined, `_x_` → x, lowercase."""
    text = unicodedata.normalize("NFKC", text).translate(_PUNCTUATION)
    text = _SPACED_DOTS.sub("...", text)
    text = _ELLIPSIS_BEFORE_WORD.sub("... ", text)
    text = _UNDERSCORE_ITALICS.sub(r"\1", text)
    return text.lower()


@dataclass(frozen=True)
class Block:
    """A near-verbatim block: where it starts in B and G, the words it spans in each, and its
    matched length (verbatim words only)."""

    book_start: int
    generated_start: int
    book_span: int
    generated_span: int
    matched: int

    @property
    def book_end(self) -> int:
        """One past its last word in B."""
        return self.book_start + self.book_span

    @property
    def generated_end(self) -> int:
        """One past its last word in G."""
        return self.generated_start + self.generated_span


def merge(blocks: Sequence[Block], max_gap: int, max_misalignment: int) -> list[Block]:
    """Join consecutive blocks whose gaps (from the merged span's end) satisfy
    max(ΔB, ΔG) ≤ max_gap and |ΔB − ΔG| ≤ max_misalignment (Books Eq. 4)."""
    out: list[Block] = []
    for block in blocks:
        if out:
            last = out[-1]
            gap_b, gap_g = block.book_start - last.book_end, block.generated_start - last.generated_end
            if max(gap_b, gap_g) <= max_gap and abs(gap_b - gap_g) <= max_misalignment:
                out[-1] = Block(
                    last.book_start, last.generated_start, block.book_end - last.book_start,
                    block.generated_end - last.generated_start, last.matched + block.matched,
                )
                continue
        out.append(block)
    return out


def keep_long(blocks: Sequence[Block], min_length: int) -> list[Block]:
    """Blocks whose matched length is at least `min_length` (Books Eq. 5)."""
    return [b for b in blocks if b.matched >= min_length]


@dataclass(frozen=True)
class NVRecall:
    """nv-recall of book B in generation G, with the counts behind it and the final blocks."""

    matched: int
    nv_recall: float
    missing: int
    additional: int
    max_block: int
    blocks: list[Block]
    book_words: int
    generated_words: int
    passes: tuple[tuple[int, int, int], ...]
    stages: tuple[tuple[Block, ...], ...]
    """The blocks before the passes (verbatim runs) and after each merge-and-filter pass; the last are `blocks`."""

    @property
    def signature(self) -> str:
        """Reproducibility signature printed with every nv-recall."""
        return "nv-recall|normalize=books-c3|blocks=difflib-autojunk-off|passes=" + ",".join(
            f"({g},{a},{m})" for g, a, m in self.passes
        )


def nv_recall(
    book_text: str, generated_text: str, *, passes: Sequence[tuple[int, int, int]] = PASSES, normalized: bool = True,
) -> NVRecall:
    """nv-recall of `book_text` in `generated_text` (Books Algorithm 1).

    `passes` are (max gap, max misalignment, min length) merge-and-filter passes; with
    `normalized=False` the texts are only split on whitespace.
    """
    if not isinstance(book_text, str) or not isinstance(generated_text, str):
        raise MemriskError("nv_recall compares two texts (str)")
    book, generated = (normalize(book_text), normalize(generated_text)) if normalized else (book_text, generated_text)
    book_words, generated_words = book.split(), generated.split()
    if not book_words:
        raise MemriskError("the book text has no words")
    blocks = [Block(i, j, k, k, k) for i, j, k in matching_blocks(book_words, generated_words)]
    stages = [tuple(blocks)]
    for max_gap, max_misalignment, min_length in passes:
        blocks = keep_long(merge(blocks, max_gap, max_misalignment), min_length)
        stages.append(tuple(blocks))
    matched = sum(b.matched for b in blocks)
    return NVRecall(
        matched=matched,
        nv_recall=matched / len(book_words),
        missing=len(book_words) - matched,
        additional=len(generated_words) - matched,
        max_block=max((b.matched for b in blocks), default=0),
        blocks=blocks,
        book_words=len(book_words),
        generated_words=len(generated_words),
        passes=tuple(tuple(p) for p in passes),
        stages=tuple(stages),
    )
