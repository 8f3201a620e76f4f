"""The report section of a books run (`memrisk books run`): loading the folder, then per-book Phase 1, Phase 2,
nv-recall and cost tables, matches, charts (Books paper Tables 1, 5–10 and Fig. 5) and the books view: each book's
text with the blocks nv-recall kept, and its merges."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrisk import layout
from memrisk.books.nvrecall import NVRecall, normalize, nv_recall
from memrisk.errors import MemriskError
from memrisk.report import books, charts
from memrisk.report.markup import Html, Picture, chart, join, money, note, pct, relative_link, table, tag
from memrisk.store import RecordStore

CONTEXT_WORDS = 40
"""Words of the book shown on each side of a block in the books view; longer stretches are counted, not shown."""
SHORTEST_RUN_SHOWN = 3
"""The merges chart leaves out verbatim runs shorter than this (a long generation shares thousands of 1–2 word runs)."""


@dataclass(frozen=True)
class Books:
    """One books-run folder (`memrisk books run`), loaded for reporting."""

    store: RecordStore
    label: str
    summary: dict[str, Any]


def load_books(folder: Path) -> Books:
    """Read a books-run folder's `books_summary.json` (labelled by its provider and model name)."""
    store = RecordStore.existing(folder)
    summary = store.read_json(layout.BOOKS_SUMMARY)
    model = summary["model"]
    return Books(store, f"{model['provider']}:{model['name']} (books)", summary)


def book_row(run: Books, book: dict[str, Any], base: Path) -> list[object]:
    """One book: Phase 1, Phase 2, nv-recall, cost and links to its diff view and generation."""
    p1, p2, nv = book["phase1"], book["phase2"], book["nv_recall"]
    folder = run.store.root
    success = ("yes" if p1["success"] else "no") + (f" (halted: {p1['halt']})" if p1["halt"] else "")
    first = [success, "—" if p1["score"] is None else f"{p1['score']:.2f}", "—" if p1["best_k"] is None else p1["best_k"],
             p1["perturbation"] or "—", p1["attempts"]]
    second = [p2["turns"], p2["continuations"], p2["halt"], p2["empty"], p2["refusal_retries"], len(p2["matches"])] if p2 else ["not run", *["—"] * 5]
    links = join([tag("a", "diff", href=relative_link(folder / layout.book_file(book["name"], layout.DIFF), base)), " · ",
                  tag("a", layout.GENERATION, href=relative_link(folder / layout.book_file(book["name"], layout.GENERATION), base))])
    return [book["name"], *first, *second, pct(nv["nv_recall"]), nv["matched"], nv["missing"], nv["additional"], nv["max_block"],
            money(books.book_cost(book)), links]


def chapter_row(book: dict[str, Any]) -> list[object]:
    """The per-chapter variant of one book: chapter counts and the nv-recall of the union of its blocks."""
    union, totals = book["per_chapter"], books.chapter_totals(book["per_chapter"], book["nv_recall"]["book_words"])
    return [f"{book['name']} (per chapter, union)", f"{totals['successes']}/{totals['chapters']} chapters", "—", "—", "—", "—",
            totals["turns"], totals["continuations"], "—", totals["empty"], totals["refusal_retries"], totals["matches"],
            pct(union["nv_recall"]), totals["matched"], totals["missing"], "—", union["max_block"], "—", ""]


def books_html_table(run: Books, base: Path) -> Html:
    """Per book (and per-chapter union): Phase 1, Phase 2, nv-recall, words, longest block, cost, links."""
    header = ["book", "Phase 1 success", "s", "k", "perturbation", "attempts", "Phase 2 turns", "continuations", "halt",
              "empty answers", "refusal retries", "matches", "nv-recall", "matched words", "missing words", "additional words",
              "longest block", "cost", "files"]
    rows = []
    for book in run.summary["books"]:
        rows.append(book_row(run, book, base))
        if "per_chapter" in book:
            rows.append(chapter_row(book))
    return table(header, rows)


def books_cost_table(summary: dict[str, Any]) -> Html:
    """Requests, tokens and dollars per book and phase, with a total row (Books Tables 1, 5–10)."""
    rows = books.cost_rows(summary)

    def cells(report: dict[str, Any]) -> list[object]:
        return [report["requests"], report["answered"], report["input_tokens"], report["cached_input_tokens"], report["output_tokens"],
                money(report["cost"]), money(report["cost_without_cache"]), money(report["cost_with_cache_estimate"])]

    header = ["book", "phase", "requests", "answered", "input tokens", "cached input tokens", "output tokens", "cost",
              "cost without cache (upper bound)", "cost with cache estimate"]
    body = [[name, phase.replace("phase", "Phase "), *cells(report)] for name, phase, report in rows]
    return table(header, [*body, ["total", "", *cells(books.cost_total(rows))]])


def matches_table(summary: dict[str, Any]) -> Html:
    """Every logged refusal and stop-string match, with the text around it."""
    rows = [(m["book"], m["source"], m["kind"], m["pattern"], f"{m['start']}–{m['end']}", tag("div", m["excerpt"], class_="text"))
            for m in books.match_rows(summary)]
    if not rows:
        return note("No refusal or stop string was matched.")
    return table(["book", "where", "kind", "pattern", "characters", "excerpt"], rows)


def books_charts(run: Books, prefix: str) -> list[tuple[Html, Picture]]:
    """nv-recall bars and the strips of each book's blocks (Books Fig. 5), as interactive charts."""
    return [
        chart(charts.nv_recall_chart(books.recall_bars(run.summary), f"{run.label}: nv-recall per book"), f"{prefix}books-nv-recall",
              "nv-recall per book: share of the book's words inside near-verbatim blocks of the generation; the per-chapter "
              "union as a second bar where the run has it. Hover a bar for its value."),
        chart(charts.book_strips_chart(books.strips(run.summary), f"{run.label}: where each book was extracted"), f"{prefix}books-heatmap",
              "Where in each book text was extracted: the near-verbatim blocks (red) over the book's words (grey), one strip "
              "per book and per-chapter union. Hover a block for its words; drag to pan, scroll to zoom."),
    ]


def book_texts(run: Books, name: str) -> tuple[str, str]:
    """The book's text (from the path in the run's config, checked against the hash the run recorded) and its
    generation; a MemriskError says which cannot be read."""
    config = run.store.read_yaml(layout.CONFIG)
    path = next(Path(b["path"]) for b in config["books"] if b["name"] == name)
    try:
        text = path.read_text(encoding="utf-8")
        generation = (run.store.root / layout.book_file(name, layout.GENERATION)).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MemriskError(f"cannot read {exc.filename if isinstance(exc, OSError) else path}: {exc}") from None
    recorded = run.store.manifest.get("identity", {}).get("book_sha256", {}).get(name)
    if recorded is not None and hashlib.sha256(text.encode("utf-8")).hexdigest() != recorded:
        raise MemriskError(f"{path} changed since the run read it (its SHA-256 differs)")
    return text, generation


def stage_names(result: NVRecall) -> list[str]:
    """A name per nv-recall stage: the verbatim runs, then each pass with its settings (Books Eqs. 4–5)."""
    return [f"verbatim runs (≥ {SHORTEST_RUN_SHOWN} words shown)"] + [
        f"pass {i}: gap ≤ {gap}, misalignment ≤ {misalignment}, ≥ {length} words" for i, (gap, misalignment, length)
        in enumerate(result.passes, start=1)]


def merge_rows(name: str, result: NVRecall, book_words: list[str]) -> list[dict[str, Any]]:
    """The merges chart's rows: every block of every stage, whether nv-recall counts it, and the final block it opens."""
    counted = books.counted_runs(result.stages)
    rows = []
    names = stage_names(result)
    for stage, blocks, counted_blocks in zip(names, result.stages, counted):
        kept = set(counted_blocks)
        for block in blocks:
            if stage == names[0] and block.book_span < SHORTEST_RUN_SHOWN:
                continue
            final = next((i for i, f in enumerate(result.blocks) if f.book_start <= block.book_start and block.book_end <= f.book_end), None)
            rows.append({"stage": stage, "start": block.book_start, "end": block.book_end, "g_start": block.generated_start,
                         "g_end": block.generated_end, "matched": block.matched,
                         "words": " ".join(book_words[block.book_start:block.book_start + 8]) + " …",
                         "kept": "counted by nv-recall" if block in kept else "dropped by a later pass",
                         **({"anchor": block_anchor(name, final)} if final is not None else {})})
    return rows


def block_anchor(book: str, index: int) -> str:
    """The element id of a final block in the books view."""
    return f"book-{book}-block-{index}"


def book_text_html(name: str, result: NVRecall, book_words: list[str]) -> Html:
    """The book's words (normalized, as nv-recall reads them) with its classes marked; far from every block only the
    number of words is shown."""
    pieces = books.text_pieces(books.word_classes(len(book_words), result.stages), result.blocks, CONTEXT_WORDS)
    parts, opened = [], set()
    for piece in pieces:
        if piece.skipped:
            parts.append(tag("span", f" [… {piece.end - piece.start:,} words …] ", class_="skip"))
            continue
        attrs: dict[str, object] = {"class_": f"book-{piece.kind}"}
        if piece.block is not None:
            block = result.blocks[piece.block]
            attrs["title"] = (f"block {piece.block + 1}: book words {block.book_start}–{block.book_end}, generation words "
                              f"{block.generated_start}–{block.generated_end}, {block.matched} verbatim words")
            if piece.block not in opened:
                attrs["id"] = block_anchor(name, piece.block)
                opened.add(piece.block)
        parts.append(tag("span", " ".join(book_words[piece.start:piece.end]) + " ", **attrs))
    return tag("div", *parts, class_="text book-text")


def book_view(run: Books, book: dict[str, Any], prefix: str, base: Path) -> tuple[Html, list[Picture]]:
    """One book of the books view: its merges chart and its text with the blocks nv-recall kept."""
    name = book["name"]
    heading = tag("h4", name)
    try:
        text, generation = book_texts(run, name)
    except MemriskError as exc:
        return join([heading, note(f"The book's text cannot be shown: {exc}.")]), []
    result = nv_recall(text, generation)
    if result.signature != book["nv_recall"]["signature"] or result.matched != book["nv_recall"]["matched"]:
        return join([heading, note(f"The book's text cannot be shown: nv-recall of the stored generation now gives "
                                   f"{result.matched} matched words ({result.signature}), the run recorded "
                                   f"{book['nv_recall']['matched']} ({book['nv_recall']['signature']}).")]), []
    words = normalize(text).split()
    html, pic = chart(charts.merge_stages_chart(merge_rows(name, result, words), f"{name}: nv-recall's merges"),
                      f"{prefix}books-merges-{name}", f"{name}: the verbatim runs shared by the book and the generation, then "
                      "the blocks after each merge-and-filter pass; red blocks are counted by nv-recall. Hover a block for its "
                      "words in the book and the generation; click it to see it in the text below.")
    diff = relative_link(run.store.root / layout.book_file(name, layout.DIFF), base)
    summary = (f"{result.matched} of {result.book_words} words in {len(result.blocks)} blocks (nv-recall {pct(result.nv_recall)}); "
               f"the generation has {result.generated_words} words.")
    legend = tag("p", tag("span", "counted verbatim", class_="book-matched"), " ", tag("span", "merged over (gap words)", class_="book-merged"),
                 " ", tag("span", "verbatim run a pass dropped", class_="book-short"), " ",
                 tag("span", "not recalled", class_="book-outside"), class_="note")
    return join([heading, note(summary), html, legend,
                 note(f"The book's words as nv-recall reads them (normalized, Books App. C.3), {CONTEXT_WORDS} words of context "
                      "around each block; hover a block for where it is in the generation."),
                 tag("p", tag("a", "side-by-side alignment with the generation", href=diff), class_="note"),
                 book_text_html(name, result, words)]), [pic]


def books_view(run: Books, prefix: str, base: Path) -> tuple[Html, list[Picture]]:
    """The books view: per book, nv-recall's merges and the book's text with its blocks."""
    parts: list[object] = [tag("h3", "Books view")]
    pics: list[Picture] = []
    for book in run.summary["books"]:
        html, drawn = book_view(run, book, prefix, base)
        parts.append(html)
        pics += drawn
    return join(parts), pics


def books_section(run: Books, prefix: str, base: Path) -> tuple[Html, list[Picture]]:
    """The report section of a books run and its figures; file links are relative to the report folder `base`."""
    s, model = run.summary, run.summary["model"]
    price = s["price_per_million"]
    drawn = books_charts(run, prefix)
    view, view_pics = books_view(run, prefix, base)
    parts: list[object] = [
        tag("h2", f"Books run: {run.label}"),
        tag("p", f"Model {model['provider']}:{model['name']}; spend cap {money(s['spend_cap_usd'])}, spent {money(s['spent_usd'])} "
                 f"({s['costs']['requests']} requests logged, {s['requests_sent']} sent by the last invocation). Price per million "
                 f"tokens: input ${price['input']:g}, cached input ${price['cached_input']:g}, output ${price['output']:g}."),
        tag("h3", "Books"), books_html_table(run, base),
        tag("h3", "Figures"), *(html for html, _ in drawn), view,
        tag("h3", "Cost per book and phase"),
        note("A book's phases include the requests of its per-chapter variant. The cache estimate uses the provider's cached-token "
             "counts, and where none are reported assumes the previous prompt of the same conversation was cached (Books App. C)."),
        books_cost_table(s),
        tag("h3", "Refusal and stop-string matches"), matches_table(s),
        *(tag("p", "nv-recall signature: ", tag("code", line), class_="note") for line in books.signatures(s)),
    ]
    return join(parts), [pic for _, pic in drawn] + view_pics
