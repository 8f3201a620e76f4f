"""The report of a study: one row per cell with each method's headline numbers, a CSV of the same
table, the papers' figures the study reproduces, each number drawn against every numeric grid axis (one line per
setting of the others), and a window explorer per cell; every chart is interactive and a window's mark opens it."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import altair as alt

from memrisk import layout
from memrisk.report.charts import tooltips
from memrisk.report.markup import Html, Picture, chart, count_rate, join, note, table, tag
from memrisk.report.paper import Reproduced, reproduce
from memrisk.report.run_page import explorer_section, load_run
from memrisk.report.study_data import StudyCell, StudyData, load_study_data

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


def axis_chart(axis: str, others: list[str], metric: str, rows: list[MetricRow]) -> dict[str, Any]:
    """One number against one numeric axis, a line per setting of the other axes; hover names the cell."""
    points = []
    for row in rows:
        if row.get(metric) is None:
            continue
        setting = ", ".join(f"{a.split('.')[-1]}={row[a]}" for a in others) or "all cells"
        points.append({"cell": row["cell"], "setting": setting, "x": row[axis], "y": row[metric]})
    settings = alt.selection_point(fields=["setting"], bind="legend")
    lines = alt.Chart(alt.Data(values=points)).mark_line(point=True).encode(
        x=alt.X("x:Q", title=axis, scale=alt.Scale(zero=False, padding=16)), y=alt.Y("y:Q", title=metric, scale=alt.Scale(padding=16)),
        color=alt.Color("setting:N", title=", ".join(a.split(".")[-1] for a in others) or None,
                        legend=alt.Legend(orient="right") if others else None),
        opacity=alt.condition(settings, alt.value(1.0), alt.value(0.1)),
        tooltip=tooltips("cell:N", "setting:N", alt.Tooltip("x:Q", title=axis), alt.Tooltip("y:Q", title=metric, format=".4g")),
    ).add_params(settings).interactive()
    return lines.properties(width=360, height=240, title=f"{metric} against {axis}").to_dict(validate=False)


def axis_charts(axes: list[str], metrics: list[str], rows: list[MetricRow]) -> list[tuple[Html, Picture]]:
    """For every numeric axis and every number: the number against the axis (`axis_chart`)."""
    drawn = []
    for axis in axes:
        if not _numeric([row[axis] for row in rows]):
            continue
        others = [a for a in axes if a != axis]
        for metric in metrics:
            slug = f"study-{axis}-{metric}".replace("/", "-")
            drawn.append(chart(axis_chart(axis, others, metric, rows), slug, f"{metric} against {axis}"))
    return drawn


def paper_section(reproduced: Sequence[Reproduced], cells: dict[str, int]) -> tuple[Html, list[Picture]]:
    """The papers' figures and tables this study has the data for, each under its caption, with its CSV; a click on a
    window's mark opens it in its cell's explorer (`cells`: cell name → explorer key)."""
    if not reproduced:
        return join([tag("h2", "Paper figures"), note(
            "None of the papers' figures applies to this study's axes and methods; docs/figures.md lists what each one needs.")]), []
    parts, pics = [tag("h2", "Paper figures"), note("Each figure's data is in figures/NAME.csv next to it.")], []
    for item in reproduced:
        csv_link = tag("a", "CSV", href=layout.figure_file(item.figure.slug, "csv"))
        if item.spec is not None:
            html, pic = chart(item.spec, item.figure.slug, item.figure.caption, cells=cells)
            parts.append(html)
            pics.append(pic)
        elif item.figure.draw is not None:
            parts += [tag("h3", item.figure.caption), note("No rows: the cells hold no windows this figure draws.")]
        else:
            columns = list(dict.fromkeys(k for row in item.rows for k in row))
            parts += [tag("h3", item.figure.caption),
                      table(columns, [[_shown(row.get(c)) for c in columns] for row in item.rows]) if item.rows
                      else note("No rows: the cells hold no windows this table counts.")]
        parts.append(tag("p", csv_link, class_="note"))
    return join(parts), pics


def explorers_section(study: StudyData) -> Html:
    """One window explorer per cell with records, one shown at a time (the picker chooses; a chart click or a shared
    link shows the cell it names)."""
    if study.books:
        return join([tag("h2", "Windows"), note("A books study has no windows: each cell's nv-recall is in its own report.")])
    picker = tag("select", *(tag("option", cell.name, value=str(key)) for key, cell in enumerate(study.cells)),
                 class_="explorer-picker", aria_label="cell")
    sections = [explorer_section(load_run(cell.folder), key, hidden=key > 0) for key, cell in enumerate(study.cells)]
    return join([tag("h2", "Windows"), tag("p", tag("label", "cell: ", picker)), *sections])


RATES = ("p_z_rate", "greedy_rate", "cbs_rate", "mc_rate")
"""The headline numbers that are shares of a dataset's windows (the PA share's denominator is the extractable windows)."""


def _cell_value(cell: StudyCell, column: str, value: Any) -> Any:
    """A study-table entry as the page shows it: a rate as k/n windows of its dataset, another float to 4 digits."""
    dataset, _, name = column.partition(".")
    if isinstance(value, float) and name.split(".")[0] in RATES and dataset in cell.summary.get("datasets", {}):
        windows = cell.summary["datasets"][dataset]["examples"]
        return count_rate(round(value * windows), windows)
    return f"{value:.4g}" if isinstance(value, float) else value


def signatures_note(study: StudyData) -> Html:
    """The settings behind the table's numbers: every distinct method signature of the cells, with the cells it holds for."""
    cells: dict[str, list[str]] = {}
    for cell in study.cells:
        for method, line in (cell.summary.get("signatures") or {}).items():
            cells.setdefault(f"{method}: {line}", []).append(cell.name)
    if not cells:
        return Html("")
    items = [tag("li", tag("code", line), f" ({', '.join(names) if len(names) < len(study.cells) else 'every cell'})")
             for line, names in cells.items()]
    return join([note("Rates are k/n windows of the dataset; the settings behind them, per method:"), tag("ul", *items, class_="note")])


def _shown(value: Any) -> Any:
    return "—" if value is None else f"{value:.4g}" if isinstance(value, float) else value


@dataclass(frozen=True)
class StudySection:
    """What the study page is made of."""

    body: Html
    pictures: list[Picture]
    """The static files of every chart (paper figures and axis charts)."""
    table_csv: str
    reproduced: list[Reproduced]
    explorers: bool
    """Whether the page has window explorers (not for a study of books runs)."""


def study_section(folder: Path) -> StudySection:
    """The study's HTML section, its figures, its CSV and the papers' figures it reproduces."""
    study = load_study_data(folder)
    axes, rows = study.axes, study_rows(study)
    reproduced = reproduce(study)
    cells = {} if study.books else {cell.name: key for key, cell in enumerate(study.cells)}
    metrics = list(dict.fromkeys(k for row in rows for k in row if k not in axes and k != "cell"))
    columns = ["cell", *axes, *metrics]
    shown = [[_cell_value(cell, c, row.get(c)) for c in columns] for cell, row in zip(study.cells, rows)]
    papers, pics = paper_section(reproduced, cells)
    drawn = axis_charts(axes, [m for m in metrics if "token_evals" not in m], rows)
    body = join([
        tag("h2", f"Study: {len(rows)} cells over {', '.join(axes) or 'named cells'}"),
        note(f"One row per cell ({layout.CELLS}/NAME, an ordinary books run folder). Per book: Phase 1 success and attempts, "
             f"nv-recall and matched words (Books paper §3); cost in US dollars. The same table is in {layout.STUDY_TABLE}.")
        if study.books else
        note(f"One row per cell ({layout.CELLS}/NAME, an ordinary run folder). Rates are shares of windows; "
             f"token evaluations are per window (CBS paper App. C.3). The same table is in {layout.STUDY_TABLE}."),
        table(columns, [["—" if v is None else v for v in r] for r in shown]),
        signatures_note(study),
        papers,
        tag("h2", "Every number against every axis"),
        join(html for html, _ in drawn) if drawn else note(
            "No grid axis is numeric (named cells, or settings such as a pruning rule), so there is no number to draw "
            "against one; the table above compares the cells."),
        explorers_section(study),
    ])
    return StudySection(body, pics + [pic for _, pic in drawn], csv_text(columns, rows), reproduced, not study.books)
