"""Side-by-side HTML view of how nv-recall aligned a book B with a generation G.

The page is rendered from `segments`: the final nv-recall blocks (matched) and the B and G
words between them (missing, additional), in reading order, over the normalized words the
blocks index. The page is self-contained (inline CSS, no scripts) and every text is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from memrisk.books.nvrecall import Block, NVRecall, normalize, nv_recall
from memrisk.errors import MemriskError

Kind = Literal["matched", "missing", "additional"]


@dataclass(frozen=True)
class Segment:
    """B words [book_start, book_end) shown against G words [generated_start, generated_end)."""

    kind: Kind
    book_start: int
    book_end: int
    generated_start: int
    generated_end: int


def segments(book_words: Sequence[str], generated_words: Sequence[str], blocks: Sequence[Block]) -> list[Segment]:
    """The blocks (matched) and the B runs (missing) and G runs (additional) between them, in reading order."""
    out: list[Segment] = []
    b = g = 0
    end = Block(len(book_words), len(generated_words), 0, 0, 0)
    for block in [*blocks, end]:
        inside = block.book_end <= end.book_start and block.generated_end <= end.generated_start
        if block.book_start < b or block.generated_start < g or not inside:
            raise MemriskError("blocks must be increasing, non-overlapping and inside both word lists")
        if block.book_start > b:
            out.append(Segment("missing", b, block.book_start, g, g))
        if block.generated_start > g:
            out.append(Segment("additional", block.book_start, block.book_start, g, block.generated_start))
        if block is not end:
            out.append(Segment("matched", block.book_start, block.book_end, block.generated_start, block.generated_end))
        b, g = block.book_end, block.generated_end
    return out


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table.stats th { text-align: left; padding-right: 1em; font-weight: normal; color: #555; }
code { font-size: 0.85em; }
.note { color: #555; max-width: 60em; }
.legend span { display: inline-block; padding: 0.1em 0.6em; margin-right: 0.8em; }
table.align { border-collapse: collapse; width: 100%; table-layout: fixed; }
table.align th { text-align: left; border-bottom: 2px solid #999; }
table.align td { vertical-align: top; padding: 0.3em 0.5em; border-bottom: 1px solid #ddd; line-height: 1.5; }
.matched td, .legend .matched { background: #d8f0d8; }
.missing td:first-child, .legend .missing { background: #f6d5d5; }
.additional td:last-child, .legend .additional { background: #dce5f4; font-style: italic; }
.pos { font-size: 0.75em; color: #777; font-style: normal; margin-right: 0.4em; }
.skip { color: #777; font-style: normal; }
"""


def _cell(name: str, words: Sequence[str], start: int, end: int, context_words: int | None) -> str:
    """Escaped words[start:end] with their position; with `context_words` a long run keeps only its ends."""
    if start == end:
        return ""
    run = words[start:end]
    text = html.escape(" ".join(run))
    if context_words is not None and len(run) > 2 * context_words:
        head, tail = run[:context_words], run[len(run) - context_words:]
        skip = f'<span class="skip">… {len(run) - 2 * context_words} words …</span>'
        text = " ".join(part for part in (html.escape(" ".join(head)), skip, html.escape(" ".join(tail))) if part)
    return f'<span class="pos">{name}[{start}:{end}]</span>{text}'


def diff_page(
    book_text: str, generated_text: str, result: NVRecall | None = None, *,
    title: str = "nv-recall", context_words: int | None = None,
) -> str:
    """A self-contained HTML page showing the nv-recall alignment of B and G (computed if `result` is None).

    With `context_words`, missing and additional runs longer than twice that are abbreviated.
    """
    if context_words is not None and context_words < 0:
        raise MemriskError("context_words must be non-negative")
    book_words, generated_words = normalize(book_text).split(), normalize(generated_text).split()
    result = nv_recall(book_text, generated_text) if result is None else result
    if (result.book_words, result.generated_words) != (len(book_words), len(generated_words)):
        raise MemriskError("the nv-recall result was not computed on these (normalized) texts")
    segs = segments(book_words, generated_words, result.blocks)
    counts = dict.fromkeys(("matched", "missing", "additional"), 0)
    rows = []
    for s in segs:
        counts[s.kind] += s.generated_end - s.generated_start if s.kind == "additional" else s.book_end - s.book_start
        context = None if s.kind == "matched" else context_words
        book = _cell("B", book_words, s.book_start, s.book_end, context)
        generated = _cell("G", generated_words, s.generated_start, s.generated_end, context)
        rows.append(f'<tr class="{s.kind}"><td>{book}</td><td>{generated}</td></tr>')
    stats = [
        ("nv-recall", f"{result.nv_recall:.1%}"), ("matched m", result.matched), ("missing", result.missing),
        ("additional", result.additional), ("max block", result.max_block), ("|B|", result.book_words),
        ("|G|", result.generated_words),
    ]
    stat_rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{v}</td></tr>" for k, v in stats)
    escaped_title, body = html.escape(title), "\n".join(rows)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>{escaped_title}</title>
<style>{_CSS}</style>
</head>
<body>
<h1>{escaped_title}</h1>
<table class="stats">{stat_rows}</table>
<p><code>{html.escape(result.signature)}</code></p>
<p class="note">Words shown are the normalized, whitespace-split words that the blocks index.
Gap words inside merged blocks are shown as part of the block, so the word counts below differ
from nv-recall's missing and additional, which count only the verbatim words of the blocks as matched.</p>
<p class="legend"><span class="matched">matched: {counts["matched"]} B words in {len(result.blocks)} blocks</span>
<span class="missing">missing: {counts["missing"]} B words</span>
<span class="additional">additional: {counts["additional"]} G words</span></p>
<table class="align">
<thead><tr><th>book (B)</th><th>generation (G)</th></tr></thead>
<tbody>
{body}
</tbody>
</table>
</body>
</html>
"""
