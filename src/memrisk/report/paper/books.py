"""Figures and tables of the Books paper (extracting books from production LLMs), from a study of books runs:
the model × book table (Tables 1, 4, 11; Fig. 5), word counts per model and book (Figs. 7, 12, 13), a
generation-setting sweep (Figs. 9a, 14) and Best-of-N Phase 1 success against N with its power-law fit.

Every number is read from the cells' books_summary.json (per book: Phase 1 attempts and scores, Phase 2
turns, nv-recall and its counts, costs per phase).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from memrisk.books.powerlaw import FORM, fit_power_law, success_within
from memrisk.report.figures import SERIES, new_figure
from memrisk.report.paper.base import PaperFigure, Rows
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


def word_count_figure(rows: Rows) -> Figure:
    """One panel per book: m, missing and additional bars per model, |B| dotted (Books Figs. 7, 12, 13)."""
    books = list(dict.fromkeys(r["book"] for r in rows))
    fig = new_figure(3.4 * len(books), 3.4)
    axes = fig.subplots(1, len(books), squeeze=False)[0]
    for ax, book in zip(axes, books):
        part = [r for r in rows if r["book"] == book]
        x = np.arange(len(part))
        for i, (key, color) in enumerate((("matched", SERIES[0]), ("missing", SERIES[1]), ("additional", SERIES[2]))):
            ax.bar(x + (i - 1) * 0.27, [r[key] for r in part], 0.27, color=color, label=key)
        ax.axhline(part[0]["book_words"], color="grey", linestyle=":", label="|B|")
        ax.set_xticks(x, [r["model"] + ("" if r["phase1_success"] else " †") for r in part], rotation=30, ha="right", fontsize="small")
        ax.set_title(book)
        ax.set_ylabel("words")
    axes[0].legend(fontsize="small")
    return fig


def _sweep_keys(study: StudyData) -> list[str]:
    return [key for key in SETTING_KEYS if study.varies(key)]


def _sweep_applies(study: StudyData) -> bool:
    return study.books and bool(_sweep_keys(study))


def setting(cell: StudyCell, keys: list[str]) -> str:
    """A cell's generation setting as a label: `temperature=0.7, max_tokens=96`."""
    return ", ".join(f"{key.split('.')[-1]}={cell.value(key)}" for key in keys)


def sweep_rows(study: StudyData) -> Rows:
    """Per setting (cell) and book: nv-recall, m and Phase 1 success (Books Fig. 9a)."""
    keys = _sweep_keys(study)
    return [{"cell": cell.name, "setting": setting(cell, keys), **{key.split(".")[-1]: cell.value(key) for key in keys},
             "book": book["name"], "phase1_success": book["phase1"]["success"], "matched": book["nv_recall"]["matched"],
             "nv_recall": book["nv_recall"]["nv_recall"]}
            for cell in study.cells for book in book_entries(cell)]


def sweep_figure(rows: Rows) -> Figure:
    """nv-recall per book, one bar per setting (Books Fig. 9a)."""
    books, settings = list(dict.fromkeys(r["book"] for r in rows)), list(dict.fromkeys(r["setting"] for r in rows))
    fig = new_figure(max(5.0, 1.3 * len(books) * len(settings) / 2), 3.6)
    ax = fig.add_subplot()
    width = 0.8 / len(settings)
    for i, label in enumerate(settings):
        values = {r["book"]: r["nv_recall"] for r in rows if r["setting"] == label}
        ax.bar(np.arange(len(books)) + (i - (len(settings) - 1) / 2) * width, [values.get(b, 0.0) for b in books], width,
               color=SERIES[i % len(SERIES)], label=label)
    ax.set_xticks(np.arange(len(books)), books)
    ax.set_ylabel("nv-recall")
    ax.legend(fontsize="small")
    return fig


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


def best_figure(rows: Rows) -> Figure:
    """Per book the best nv-recall over the settings, and their mean ± standard deviation (Books Fig. 14)."""
    fig = new_figure(max(4.5, 1.2 * len(rows)), 3.4)
    ax = fig.add_subplot()
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["best_nv_recall"] for r in rows], 0.4, color=SERIES[0], label="best setting")
    ax.bar(x + 0.2, [r["mean_nv_recall"] for r in rows], 0.4, yerr=[r["std_nv_recall"] for r in rows], color=SERIES[1],
           capsize=3, label="mean ± std over settings")
    ax.set_xticks(x, [r["book"] for r in rows])
    ax.set_ylabel("nv-recall")
    ax.legend(fontsize="small")
    return fig


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


def bon_figure(rows: Rows) -> Figure:
    """Phase 1 success against N on a log axis, one line per model, the fitted power law dashed."""
    fig = new_figure(5.4, 3.6)
    ax = fig.add_subplot()
    for i, model in enumerate(dict.fromkeys(r["model"] for r in rows)):
        part = [r for r in rows if r["model"] == model]
        color = SERIES[i % len(SERIES)]
        ax.step([r["n"] for r in part], [r["success_rate"] for r in part], where="post", color=color, label=model)
        if part[0]["fit_a"] is not None:
            ax.plot([r["n"] for r in part], [r["fit_rate"] for r in part], "--", color=color,
                    label=f"{model}: a = {part[0]['fit_a']:.3g}, b = {part[0]['fit_b']:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("N (Best-of-N attempts)")
    ax.set_ylabel("Phase 1 success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(FORM, fontsize="small")
    ax.legend(fontsize="small")
    return fig


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
