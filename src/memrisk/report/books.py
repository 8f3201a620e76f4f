"""Report metrics of a books run (`books_summary.json`): pure functions, the summary dict in, rows and
figure data out (Books paper Tables 1, 5–10 and Fig. 5), and the books view's classes of a book's words under
nv-recall's merge passes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memrisk.books.nvrecall import Block


PHASES = ("phase1", "phase2")
COST_FIELDS = (
    "requests", "answered", "input_tokens", "cached_input_tokens", "output_tokens", "cost", "cost_without_cache",
    "cost_with_cache_estimate",
)


def book_cost(book: dict[str, Any]) -> float:
    """Dollars spent on one book, over both phases."""
    return sum(book["costs"][phase]["cost"] for phase in PHASES)


def cost_rows(summary: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(book, phase, cost report) per book and phase, in the summary's order."""
    return [(book["name"], phase, book["costs"][phase]) for book in summary["books"] for phase in PHASES]


def cost_total(rows: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    """Field-wise sum of the cost reports of `rows`."""
    return {field: sum(report[field] for _, _, report in rows) for field in COST_FIELDS}


def match_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Every logged refusal / stop-string match with its book and where it came from (Phase 2 or a chapter)."""
    rows = []
    for book in summary["books"]:
        sources = [("phase 2", book["phase2"])]
        sources += [(f"chapter {c['chapter']}", c["phase2"]) for c in book.get("per_chapter", {}).get("chapters", [])]
        rows += [{"book": book["name"], "source": source, **match} for source, phase2 in sources if phase2 for match in phase2["matches"]]
    return rows


@dataclass(frozen=True)
class RecallBar:
    """nv-recall of one book's generation and, when the run has it, of the per-chapter union."""

    name: str
    nv_recall: float
    per_chapter: float | None


def recall_bars(summary: dict[str, Any]) -> list[RecallBar]:
    """One bar (pair) per book."""
    return [
        RecallBar(b["name"], b["nv_recall"]["nv_recall"], b["per_chapter"]["nv_recall"] if "per_chapter" in b else None)
        for b in summary["books"]
    ]


@dataclass(frozen=True)
class Strip:
    """A book of `book_words` words and the word spans (start, length) of its extracted blocks."""

    label: str
    book_words: int
    spans: tuple[tuple[int, int], ...]

    @property
    def covered(self) -> int:
        """Words inside extracted blocks (blocks never overlap)."""
        return sum(span for _, span in self.spans)


def strips(summary: dict[str, Any]) -> list[Strip]:
    """Per book the strip of its generation's blocks, then one of the per-chapter union when present."""
    out = []
    for book in summary["books"]:
        words = book["nv_recall"]["book_words"]
        out.append(Strip(book["name"], words, _spans(book["nv_recall"]["blocks"])))
        if "per_chapter" in book:
            out.append(Strip(f"{book['name']} (per chapter)", words, _spans(book["per_chapter"]["blocks"])))
    return out


def _spans(blocks: list[dict[str, Any]]) -> tuple[tuple[int, int], ...]:
    """(book_start, book_span) of each block."""
    return tuple((b["book_start"], b["book_span"]) for b in blocks)


def signatures(summary: dict[str, Any]) -> list[str]:
    """The distinct nv-recall signatures of the run's books, in order."""
    return list(dict.fromkeys(b["nv_recall"]["signature"] for b in summary["books"]))


def chapter_totals(per_chapter: dict[str, Any], book_words: int) -> dict[str, Any]:
    """Counts over the chapters of the per-chapter variant, and its union's matched and missing words."""
    chapters = per_chapter["chapters"]
    phase2 = [c["phase2"] for c in chapters if c["phase2"]]
    totals = {key: sum(p[key] for p in phase2) for key in ("turns", "continuations", "empty", "refusal_retries")}
    return {
        "chapters": len(chapters), "successes": sum(c["phase1"]["success"] for c in chapters), **totals,
        "matches": sum(len(p["matches"]) for p in phase2), "matched": per_chapter["matched"],
        "missing": book_words - per_chapter["matched"],
    }


MATCHED, MERGED, SHORT, OUTSIDE = "matched", "merged", "short", "outside"
"""Classes of a book's words in the books view: counted by nv-recall (inside a verbatim run that every pass kept),
stitched over by a merge (inside a kept block, not counted), in a verbatim run a pass dropped, or none of these."""


def counted_runs(stages: Sequence[Sequence[Block]]) -> list[list[Block]]:
    """Per stage, its blocks that end up inside a final block: a pass merges consecutive blocks and drops whole merged
    blocks, so a block is counted exactly when a counted block of the next stage contains it (Books Algorithm 1)."""
    kept = [list(stages[-1])]
    for stage in reversed(stages[:-1]):
        above = kept[0]
        kept.insert(0, [b for b in stage if any(a.book_start <= b.book_start and b.book_end <= a.book_end for a in above)])
    return kept


def word_classes(book_words: int, stages: Sequence[Sequence[Block]]) -> list[str]:
    """The class of every word of the book (MATCHED, MERGED, SHORT, OUTSIDE), from nv-recall's stages."""
    classes = [OUTSIDE] * book_words
    for run in stages[0]:
        classes[run.book_start:run.book_end] = [SHORT] * run.book_span
    for block in stages[-1]:
        classes[block.book_start:block.book_end] = [MERGED] * block.book_span
    for run in counted_runs(stages)[0]:
        classes[run.book_start:run.book_end] = [MATCHED] * run.book_span
    return classes


@dataclass(frozen=True)
class TextPiece:
    """Words [start, end) of the book of one class, inside final block `block` (its index) or None; `skipped` marks a
    stretch of OUTSIDE words far from every block, shown as its word count."""

    kind: str
    start: int
    end: int
    block: int | None
    skipped: bool = False


def text_pieces(classes: Sequence[str], blocks: Sequence[Block], context: int) -> list[TextPiece]:
    """The book as runs of one class; OUTSIDE words more than `context` words away from every final block are skipped."""
    near = [False] * len(classes)
    owner: list[int | None] = [None] * len(classes)
    for index, block in enumerate(blocks):
        near[max(0, block.book_start - context):block.book_end + context] = [True] * (
            min(len(classes), block.book_end + context) - max(0, block.book_start - context))
        owner[block.book_start:block.book_end] = [index] * block.book_span
    pieces: list[TextPiece] = []
    start = 0
    for i in range(1, len(classes) + 1):
        if i < len(classes) and (classes[i], owner[i], near[i]) == (classes[start], owner[start], near[start]):
            continue
        pieces.append(TextPiece(classes[start], start, i, owner[start], skipped=classes[start] == OUTSIDE and not near[start]))
        start = i
    return pieces
