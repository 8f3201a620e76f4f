"""The report of a study: one row per cell with each method's headline numbers, a CSV of the same
table, and each number drawn against every numeric grid axis (one line per setting of the others)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memrisk import layout
from memrisk.report.figures import new_figure
from memrisk.report.markup import Html, Picture, figure_html, join, note, picture, table, tag
from memrisk.report.paper import Reproduced, reproduce
from memrisk.report.study_data import StudyData, load_study_data

MetricRow = dict[str, Any]


def books_headline(summary: dict[str, Any]) -> dict[str, float | None]:
    """Per book of a books run: Phase 1 success (1 or 0) and attempts, nv-recall and matched words; and the run's cost."""
    out: dict[str, float | None] = {}
    for book in summary["books"]:
        name = book["name"]
        out[f"{name}.phase1_success"] = float(book["phase1"]["success"])
        out[f"{name}.phase1_attempts"] = book["phase1"]["attempts"]
        out[f"{name}.nv_recall"] = book["nv_recall"]["nv_recall"]
        out[f"{name}.matched"] = book["nv_recall"]["matched"]
    out["cost_usd"] = summary["costs"]["cost"]
    return out


def headline(summary: dict[str, Any]) -> dict[str, float | None]:
    """Per dataset the numbers a study compares: verbatim rates, CBS and Monte Carlo near-verbatim rates at
    the run's ε, the PA share, and token evaluations per window per method (for a books run: `books_headline`)."""
    if summary.get("kind") == "books":
        return books_headline(summary)
    out: dict[str, float | None] = {}
    for name, entry in summary.get("datasets", {}).items():
        for label, stats in (entry.get("probabilistic") or {}).items():
            out[f"{name}.p_z_rate.{label}"] = stats["rate"]
        if "greedy" in entry:
            out[f"{name}.greedy_rate"] = entry["greedy"]["rate"]
        if "cbs" in entry:
            rates = entry["cbs"]["rate"][entry["cbs"]["distance"]]
            out[f"{name}.cbs_rate"] = rates[max(rates, key=int)]
        if "mc" in entry:
            out[f"{name}.mc_rate"] = entry["mc"]["rate"][-1][-1]
        if "prior_aware" in entry:
            out[f"{name}.pa_share"] = entry["prior_aware"]["pa_share"]
        for method, cost in (entry.get("token_evals") or {}).items():
            out[f"{name}.token_evals_per_window.{method}"] = cost["per_window"]
    return out


def study_rows(study: StudyData) -> list[MetricRow]:
    """Per cell in study order, its settings and headline numbers (from each cell's summary.json, which the cell
    wrote when it completed; `memrisk report CELL` rebuilds one from its records)."""
    return [{"cell": cell.name, **cell.changes, **headline(cell.summary)} for cell in study.cells]


def csv_text(columns: Sequence[str], rows: Sequence[MetricRow]) -> str:
    """The study table as CSV (empty cells for numbers a cell does not have)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def axis_pictures(axes: list[str], metrics: list[str], rows: list[MetricRow]) -> list[Picture]:
    """For every numeric axis and every number: the number against the axis, one line per setting of the other axes."""
    pics = []
    for axis in axes:
        if not _numeric([row[axis] for row in rows]):
            continue
        others = [a for a in axes if a != axis]
        for metric in metrics:
            fig = new_figure(5.0, 3.4)
            ax = fig.add_subplot()
            groups: dict[tuple, list[MetricRow]] = {}
            for row in rows:
                groups.setdefault(tuple(row[a] for a in others), []).append(row)
            for key, group in groups.items():
                points = sorted((row[axis], row[metric]) for row in group if row.get(metric) is not None)
                if points:
                    label = ", ".join(f"{a.split('.')[-1]}={v}" for a, v in zip(others, key)) or None
                    ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label)
            ax.set_xlabel(axis)
            ax.set_ylabel(metric)
            if others and ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize="small")
            slug = f"study-{axis}-{metric}".replace("/", "-")
            pics.append(picture(slug, f"{metric} against {axis}", fig))
    return pics


def paper_section(reproduced: Sequence[Reproduced]) -> Html:
    """The papers' figures and tables this study has the data for, each under its caption, with its CSV."""
    if not reproduced:
        return join([tag("h2", "Paper figures"), note(
            "None of the papers' figures applies to this study's axes and methods; docs/figures.md lists what each one needs.")])
    parts = [tag("h2", "Paper figures"), note("Each figure's data is in figures/NAME.csv next to its image.")]
    for item in reproduced:
        csv_link = tag("a", "CSV", href=layout.figure_file(item.figure.slug, "csv"))
        if item.picture is not None:
            parts.append(figure_html(item.picture))
        else:
            columns = list(dict.fromkeys(k for row in item.rows for k in row))
            parts += [tag("h3", item.figure.caption),
                      table(columns, [[_shown(row.get(c)) for c in columns] for row in item.rows]) if item.rows
                      else note("No rows: the cells hold no windows this table counts.")]
        parts.append(tag("p", csv_link, class_="note"))
    return join(parts)


def _shown(value: Any) -> Any:
    return "—" if value is None else f"{value:.4g}" if isinstance(value, float) else value


def study_section(folder: Path) -> tuple[Html, list[Picture], str, list[Reproduced]]:
    """The study's HTML section, its figures, its CSV and the papers' figures it reproduces."""
    study = load_study_data(folder)
    axes, rows = study.axes, study_rows(study)
    reproduced = reproduce(study)
    metrics = list(dict.fromkeys(k for row in rows for k in row if k not in axes and k != "cell"))
    columns = ["cell", *axes, *metrics]
    shown = [[row.get(c) if not isinstance(row.get(c), float) else f"{row[c]:.4g}" for c in columns] for row in rows]
    pics = axis_pictures(axes, [m for m in metrics if "token_evals" not in m], rows)
    body = join([
        tag("h2", f"Study: {len(rows)} cells over {', '.join(axes) or 'named cells'}"),
        note(f"One row per cell ({layout.CELLS}/NAME, an ordinary books run folder). Per book: Phase 1 success and attempts, "
             f"nv-recall and matched words (Books paper §3); cost in US dollars. The same table is in {layout.STUDY_TABLE}.")
        if study.books else
        note(f"One row per cell ({layout.CELLS}/NAME, an ordinary run folder). Rates are shares of windows; "
             f"token evaluations are per window (CBS paper App. C.3). The same table is in {layout.STUDY_TABLE}."),
        table(columns, [["—" if v is None else v for v in r] for r in shown]),
        paper_section(reproduced),
        tag("h2", "Every number against every axis"),
        join(figure_html(pic) for pic in pics),
    ])
    return body, pics, csv_text(columns, rows), reproduced
