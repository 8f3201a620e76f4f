"""Figures and tables of the Books paper (extracting books from production LLMs), from a study of books runs:
the model × book table (Tables 1, 4, 11; Fig. 5), word counts per model and book (Figs. 7, 12, 13), a
generation-setting sweep (Figs. 9a, 14) and Best-of-N Phase 1 success against N with its power-law fit.

Every number is read from the cells' books_summary.json (per book: Phase 1 attempts and scores, Phase 2
turns, nv-recall and its counts, costs per phase).
"""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np

from memrisk.books.powerlaw import FORM, fit_power_law, success_within
from memrisk.report.charts import tooltips
from memrisk.report.paper.base import PANEL_HEADER, PaperFigure, Rows, Spec, legend_toggle
from memrisk.report.study_data import StudyCell, StudyData

SETTING_KEYS = ("model.temperature", "model.max_tokens", "model.frequency_penalty", "model.presence_penalty",
                "model.turns", "phase2.prompt", "phase2.continue_prompt")
"""Generation settings a sweep may vary (Books Fig. 9a varies Gemini's frequency and presence penalties)."""
POOLED = "all"
PAPER = "Books"


def book_entries(cell: StudyCell) -> list[dict[str, Any]]:
    """The per-book results of a books cell, in config order."""
    return list(cell.summary["books"])


def first_success(book: dict[str, Any]) -> int | None:
    """The attempt index k of the book's first Phase 1 success (Books §3.1: s ≥ threshold), None if none."""
    phase1 = book["phase1"]
    return phase1["best_k"] if phase1["success"] else None


def bon_n(book: dict[str, Any]) -> int:
    """Best-of-N's N as Books Fig. 5 reports it: the attempts up to the first success, else every attempt sent."""
    k = first_success(book)
    return book["phase1"]["attempts"] if k is None else k + 1


def _cost(book: dict[str, Any], phase: str) -> float:
    return float(book["costs"][phase]["cost"])


def table_rows(study: StudyData) -> Rows:
    """Per cell (model) and book: Phase 1 success, N and requests sent (with `concurrency`, requests in flight at the
    first success are answered too), Phase 2 continue queries, nv-recall, m, missing, additional, |B|, |G|, max block
    and the cost of each phase."""
    rows = []
    for cell in study.cells:
        for book in book_entries(cell):
            nv, phase1, phase2 = book["nv_recall"], book["phase1"], book["phase2"]
            rows.append({
                "model": cell.name, "model_name": cell.summary["model"]["name"], "book": book["name"],
                "phase1_success": phase1["success"], "bon_n": bon_n(book), "phase1_requests": phase1["attempts"],
                "phase1_best_score": phase1["score"],
                "phase2_queries": phase2["turns"] if phase2 else None, "phase2_halt": phase2["halt"] if phase2 else None,
                "book_words": nv["book_words"], "generated_words": nv["generated_words"], "matched": nv["matched"],
                "missing": nv["missing"], "additional": nv["additional"], "max_block": nv["max_block"], "nv_recall": nv["nv_recall"],
                "phase1_cost_usd": _cost(book, "phase1"), "phase2_cost_usd": _cost(book, "phase2"),
            })
    return rows


def word_count_rows(study: StudyData) -> Rows:
    """Per cell and book: extracted words m, missing and additional, and the book's length |B| (Books Eqs. 6, 8)."""
    return [{key: row[key] for key in ("model", "book", "phase1_success", "matched", "missing", "additional", "book_words")}
            for row in table_rows(study)]


def word_count_figure(rows: Rows) -> Spec:
    """One panel per book: m, missing and additional bars per model, |B| dotted (Books Figs. 7, 12, 13); a model whose
    Phase 1 failed is marked †. Hover a bar for its count."""
    bars = [{"book": r["book"], "model": r["model"] + ("" if r["phase1_success"] else " †"), "words": key, "count": r[key],
             "book_words": r["book_words"]} for r in rows for key in ("matched", "missing", "additional")]
    kinds = legend_toggle("words")
    bar = alt.Chart().mark_bar().encode(
        x=alt.X("model:N", title=None, axis=alt.Axis(labelAngle=-30)), xOffset=alt.XOffset("words:N", sort=["matched", "missing", "additional"]),
        y=alt.Y("count:Q", title="words"), color=alt.Color("words:N", title="words", sort=["matched", "missing", "additional"]),
        opacity=alt.condition(kinds, alt.value(1.0), alt.value(0.15)),
        tooltip=tooltips("book:N", "model:N", "words:N", alt.Tooltip("count:Q", title="words"), alt.Tooltip("book_words:Q", title="|B|")),
    ).add_params(kinds)
    book = alt.Chart().mark_rule(strokeDash=[2, 3], color="grey").encode(y=alt.Y("book_words:Q"), tooltip=[alt.Tooltip("book_words:Q", title="|B|")])
    books = list(dict.fromkeys(r["book"] for r in rows))
    return alt.layer(bar, book, data=alt.Data(values=bars), width=alt.Step(18), height=220).facet(
        column=alt.Column("book:N", title=None, header=PANEL_HEADER, sort=books)).resolve_scale(x="independent").properties(
        title="Words matched (m), missing and additional per model and book; dotted |B|; † Phase 1 failed").to_dict(validate=False)


def _sweep_keys(study: StudyData) -> list[str]:
    return [key for key in SETTING_KEYS if study.varies(key)]


def _sweep_applies(study: StudyData) -> bool:
    return study.books and bool(_sweep_keys(study))


def setting(cell: StudyCell, keys: list[str]) -> str:
    """A cell's generation setting as a label: `temperature=0.7, max_tokens=96`."""
    return ", ".join(f"{key.split('.')[-1]}={cell.value(key)}" for key in keys)


def sweep_rows(study: StudyData) -> Rows:
    """Per setting (cell) and book: nv-recall, m, the book's length |B| and Phase 1 success (Books Fig. 9a)."""
    keys = _sweep_keys(study)
    return [{"cell": cell.name, "setting": setting(cell, keys), **{key.split(".")[-1]: cell.value(key) for key in keys},
             "book": book["name"], "phase1_success": book["phase1"]["success"], "matched": book["nv_recall"]["matched"],
             "nv_recall": book["nv_recall"]["nv_recall"], "book_words": book["nv_recall"]["book_words"]}
            for cell in study.cells for book in book_entries(cell)]


def sweep_figure(rows: Rows) -> Spec:
    """nv-recall per book, one bar per setting (Books Fig. 9a); hover a bar for the setting, its cell and m of |B| words."""
    settings = legend_toggle("setting")
    bars = [r | {"of": f"{r['matched']:,} of {r['book_words']:,}"} for r in rows]
    books, order = (list(dict.fromkeys(r[key] for r in rows)) for key in ("book", "setting"))
    return alt.Chart(alt.Data(values=bars)).mark_bar().encode(
        x=alt.X("book:N", title=None, sort=books, axis=alt.Axis(labelAngle=0)), xOffset=alt.XOffset("setting:N", sort=order),
        y=alt.Y("nv_recall:Q", title="nv-recall", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("setting:N", title="setting", sort=order, legend=alt.Legend(labelLimit=400)),
        opacity=alt.condition(settings, alt.value(1.0), alt.value(0.15)),
        tooltip=tooltips("book:N", "setting:N", "cell:N", alt.Tooltip("nv_recall:Q", title="nv-recall", format=".3f"),
                         alt.Tooltip("of:N", title="matched words (m of |B|)"), "phase1_success:N"),
    ).add_params(settings).properties(width=max(240, 60 * len(books)), height=240,
                                      title="nv-recall per book and generation setting").to_dict(validate=False)


def best_rows(study: StudyData) -> Rows:
    """Per book over the settings: the best nv-recall and its setting, and the mean and standard deviation (Books Fig. 14)."""
    rows = sweep_rows(study)
    out = []
    for book in dict.fromkeys(r["book"] for r in rows):
        part = [r for r in rows if r["book"] == book]
        values = np.array([r["nv_recall"] for r in part])
        best = part[int(np.argmax(values))]
        out.append({"book": book, "settings": len(part), "best_nv_recall": float(values.max()), "best_setting": best["setting"],
                    "mean_nv_recall": float(values.mean()), "std_nv_recall": float(values.std())})
    return out


def best_figure(rows: Rows) -> Spec:
    """Per book the best nv-recall over the settings, and their mean ± standard deviation as an error bar (Books Fig. 14);
    hover a bar for its setting, the error bar for the mean, std and their range."""
    bars = [{"book": r["book"], "statistic": label, "nv_recall": r[key], "std": r["std_nv_recall"] if error else None,
             "low": r[key] - r["std_nv_recall"], "high": r[key] + r["std_nv_recall"],
             "setting": f"{r['settings']} settings" if error else r["best_setting"]}
            for r in rows for label, key, error in (("best setting", "best_nv_recall", False),
                                                     ("mean ± std over settings", "mean_nv_recall", True))]
    statistics = legend_toggle("statistic")
    x = alt.X("book:N", title=None, sort=[r["book"] for r in rows], axis=alt.Axis(labelAngle=0))
    bar = alt.Chart().mark_bar().encode(
        x=x, xOffset=alt.XOffset("statistic:N"), y=alt.Y("nv_recall:Q", title="nv-recall"), color=alt.Color("statistic:N", title=None),
        opacity=alt.condition(statistics, alt.value(1.0), alt.value(0.15)),
        tooltip=tooltips("book:N", "statistic:N", "setting:N", alt.Tooltip("nv_recall:Q", title="nv-recall", format=".3f"),
                         alt.Tooltip("std:Q", title="std", format=".3f")),
    ).add_params(statistics)
    error = alt.Chart().mark_rule(color="black", strokeWidth=1.5).encode(
        x=x, xOffset=alt.XOffset("statistic:N"), y=alt.Y("low:Q"), y2=alt.Y2("high:Q"),
        tooltip=tooltips("book:N", "setting:N", alt.Tooltip("nv_recall:Q", title="mean nv-recall", format=".3f"),
                         alt.Tooltip("std:Q", title="std", format=".3f"), alt.Tooltip("low:Q", title="mean − std", format=".3f"),
                         alt.Tooltip("high:Q", title="mean + std", format=".3f")),
    ).transform_filter("datum.std > 0")
    return alt.layer(bar, error, data=alt.Data(values=bars), width=max(200, 80 * len(rows)), height=240,
                     title="Best setting's nv-recall against the mean ± std over settings").to_dict(validate=False)


def _bon_applies(study: StudyData) -> bool:
    return study.books and any(book["phase1"]["attempts"] > 1 for cell in study.cells for book in book_entries(cell))


def bon_rows(study: StudyData) -> Rows:
    """Per model (cell) and pooled over every cell: the fraction of (book, seed) probes whose Phase 1 succeeded within
    N attempts, for N = 1 … the largest budget, with the power-law fit of FORM on those points."""
    probes = {cell.name: [first_success(book) for book in book_entries(cell)] for cell in study.cells}
    if len(probes) > 1:
        probes[POOLED] = [k for values in list(probes.values()) for k in values]
    budget = max(int(cell.summary["settings"]["phase1"]["attempts"]) for cell in study.cells)
    budgets = list(range(1, budget + 1))
    rows = []
    for model, firsts in probes.items():
        rates = success_within(firsts, budgets)
        fit = fit_power_law(budgets, rates)
        for n, rate in zip(budgets, rates):
            rows.append({"model": model, "n": n, "probes": len(firsts), "succeeded": round(rate * len(firsts)), "success_rate": rate,
                         "fit_form": FORM, "fit_a": fit.a if fit else None, "fit_b": fit.b if fit else None,
                         "fit_rate": fit.rate(n) if fit else None})
    return rows


def bon_figure(rows: Rows) -> Spec:
    """Phase 1 success against N on a log axis, one step line per model, the fitted power law dashed; hover gives the
    succeeded probes as k of n and the fit's a and b."""
    points = [r | {"series": r["model"], "within": f"{r['succeeded']} of {r['probes']}"} for r in rows]
    fits = [r | {"series": r["model"], "fit": f"a = {r['fit_a']:.3g}, b = {r['fit_b']:.3g}"} for r in rows if r["fit_a"] is not None]
    models = legend_toggle("series")
    x = alt.X("n:Q", title="N (Best-of-N attempts)", scale=alt.Scale(type="log", domain=[1, max(r["n"] for r in rows)]),
              axis=alt.Axis(format="~s"))
    colour, opacity = alt.Color("series:N", title="model"), alt.condition(models, alt.value(1.0), alt.value(0.1))
    measured = alt.Chart(alt.Data(values=points)).mark_line(interpolate="step-after", point=True).encode(
        x=x, y=alt.Y("success_rate:Q", title="Phase 1 success rate", scale=alt.Scale(domain=[0, 1])), color=colour, opacity=opacity,
        tooltip=tooltips("series:N", "n:Q", alt.Tooltip("success_rate:Q", title="success rate", format=".3f"),
                         alt.Tooltip("within:N", title="probes succeeded")),
    ).add_params(models)
    fitted = alt.Chart(alt.Data(values=fits)).mark_line(strokeDash=[5, 3]).encode(
        x=x, y=alt.Y("fit_rate:Q"), color=colour, opacity=opacity,
        tooltip=tooltips("series:N", alt.Tooltip("fit:N", title=FORM), "n:Q", alt.Tooltip("fit_rate:Q", title="fitted rate", format=".3f")))
    return alt.layer(measured, fitted, width=420, height=260,
                     title=f"Phase 1 success within N attempts; dashed: the fit {FORM}").interactive().to_dict(validate=False)


def _books(study: StudyData) -> bool:
    return study.books


FIGURES: tuple[PaperFigure, ...] = (
    PaperFigure("books-table-models-books", PAPER, "Tables 1, 4, 11; Fig. 5",
                "per model and book: Phase 1 success and Best-of-N N, Phase 2 continue queries, nv-recall, m, missing, additional, "
                "|B|, |G|, longest block and cost (paper, Harry Potter 1, |B| = 82,382; Figs. 1 and 5, Tables 1 and 11: Claude 3.7 "
                "Sonnet N = 258, 480 queries, $119.97, max |β| 6658, m = 76,001, nv-recall 0.923; GPT-4.1 N = 5179, 31 queries, "
                "$1.37, max |β| 821, m = 3,182, 0.039; Gemini 2.5 Pro N = 0, 171 queries, $2.44, max |β| 9070, m = 60,974, 0.740; "
                "Grok 3 N = 0, 52 queries, $8.16, max |β| 6337, m = 56,870, 0.690)",
                _books, table_rows),
    PaperFigure("books-fig7-word-counts", PAPER, "Figs. 7, 12, 13",
                "extracted words m, missing and additional per model and book, |B| dotted, † Phase 1 failed (paper, Grok 3 on "
                "Harry Potter 1: m = 56,870, missing 25,512, additional 15,208 of |B| = 82,382, Table 11)",
                _books, word_count_rows, word_count_figure),
    PaperFigure("books-fig9a-settings", PAPER, "Fig. 9a",
                "nv-recall per book under each generation setting (paper: Gemini 2.5 Pro on Harry Potter 1 over 9 frequency × "
                "presence penalty settings at 2000 max tokens; Table 11 gives 0.740 for the fixed 2.0 / 0.1 setting)",
                _sweep_applies, sweep_rows, sweep_figure),
    PaperFigure("books-fig14-best-vs-mean", PAPER, "Fig. 14",
                "per book the best nv-recall over the generation settings against their mean ± std (paper: 9 Gemini 2.5 Pro "
                "settings per book; the fixed one is best for Harry Potter 1, not for The Great Gatsby)",
                _sweep_applies, best_rows, best_figure),
    PaperFigure("books-bon-power-law", PAPER, "§3.1 Best-of-N",
                f"fraction of (book, seed) probes whose Phase 1 succeeded (s ≥ threshold) within N attempts, every book of the "
                f"cells (negative controls included), with the least-squares fit of {FORM} in log(−log) space (after Hughes et al. "
                f"2024; paper: N ≤ 10,000, Claude 3.7 Sonnet needed N = 258 and GPT-4.1 N = 5179 on Harry Potter 1)",
                _bon_applies, bon_rows, bon_figure),
)
