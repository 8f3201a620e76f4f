"""The report section of a books run (`memrisk books run`): loading the folder, then per-book Phase 1, Phase 2,
nv-recall and cost tables, matches and figures (Books paper Tables 1, 5–10 and Fig. 5)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrisk import layout
from memrisk.report import books, figures
from memrisk.report.markup import Html, Picture, figure_html, join, money, note, pct, picture, relative_link, table, tag
from memrisk.store import RecordStore


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


def books_pictures(run: Books, prefix: str) -> list[Picture]:
    """nv-recall bars and the book heatmap of a books run."""
    return [
        picture(f"{prefix}books-nv-recall", "nv-recall per book: share of the book's words inside near-verbatim blocks of the "
                "generation; the per-chapter union as a second bar where the run has it.",
                figures.nv_recall_figure(books.recall_bars(run.summary))),
        picture(f"{prefix}books-heatmap", "Where in each book text was extracted: the near-verbatim blocks (red) over the "
                "book's words (grey), one strip per book and per-chapter union.", figures.book_strips_figure(books.strips(run.summary))),
    ]


def books_section(run: Books, prefix: str, base: Path) -> tuple[Html, list[Picture]]:
    """The report section of a books run and its figures; file links are relative to the report folder `base`."""
    s, model = run.summary, run.summary["model"]
    price = s["price_per_million"]
    pics = books_pictures(run, prefix)
    parts: list[object] = [
        tag("h2", f"Books run: {run.label}"),
        tag("p", f"Model {model['provider']}:{model['name']}; spend cap {money(s['spend_cap_usd'])}, spent {money(s['spent_usd'])} "
                 f"({s['costs']['requests']} requests logged, {s['requests_sent']} sent by the last invocation). Price per million "
                 f"tokens: input ${price['input']:g}, cached input ${price['cached_input']:g}, output ${price['output']:g}."),
        tag("h3", "Books"), books_html_table(run, base),
        tag("h3", "Figures"), *map(figure_html, pics),
        tag("h3", "Cost per book and phase"),
        note("A book's phases include the requests of its per-chapter variant. The cache estimate uses the provider's cached-token "
             "counts, and where none are reported assumes the previous prompt of the same conversation was cached (Books App. C)."),
        books_cost_table(s),
        tag("h3", "Refusal and stop-string matches"), matches_table(s),
        *(tag("p", "nv-recall signature: ", tag("code", line), class_="note") for line in books.signatures(s)),
    ]
    return join(parts), pics
