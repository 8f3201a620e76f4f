"""A figure or table of one of the papers, reproduced from a study: when it applies, the rows behind it, and how it is drawn.

Each one writes `figures/<slug>.csv` (its rows) and, when it is a figure, `figures/<slug>.png`/`.svg`;
the study page shows it under its caption, which names the paper and the figure or table number. A figure is a
Vega-Lite spec (built with Altair), drawn interactively on the page and as PNG/SVG by vl-convert. A row that is one
window carries its `cell` (name) and `id` (example id), so a click on its mark opens it in that cell's explorer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import altair as alt

from memrisk.report.study_data import StudyData

Rows = list[dict[str, Any]]
Spec = dict[str, Any]


@dataclass(frozen=True)
class PaperFigure:
    """One paper figure (or table, when `draw` is None) as a study reproduces it."""

    slug: str
    """File name stem under figures/, e.g. `cbs-fig23-beam-width`."""
    paper: str
    """The paper, as the docs name it: `CBS`, `(n,p)`, `prior-aware`, `Books`."""
    number: str
    """Its figure or table number in that paper, e.g. `Figs. 23–25` or `Table 2`."""
    title: str
    """What it shows, one sentence."""
    applies: Callable[[StudyData], bool]
    """Whether the study has what it needs (e.g. a beam-width axis and CBS in every cell)."""
    rows: Callable[[StudyData], Rows]
    """The data behind it, one dict per plotted point or table row (written as CSV)."""
    draw: Callable[[Rows], Spec] | None = None
    """The chart from those rows, a Vega-Lite spec; None for a table, which the page shows as rows."""

    @property
    def caption(self) -> str:
        return f"{self.paper} paper {self.number}: {self.title}"


def short_model(name: str) -> str:
    """A model's name as a legend shows it: the last part of a path, the name itself otherwise."""
    return Path(name).name or name


def series_names(cells: Sequence[str], models: Sequence[str]) -> dict[str, str]:
    """Per cell a legend name: its model's short name; the cell's name when every cell has the same model; both when
    some models repeat."""
    shorts = [short_model(m) for m in models]
    if len(set(shorts)) == 1 < len(cells):
        return dict(zip(cells, cells))
    return {cell: short if shorts.count(short) == 1 else f"{short} [{cell}]" for cell, short in zip(cells, shorts)}


def legend_toggle(field: str, view: str = "") -> alt.Parameter:
    """A selection bound to the legend of `field`: clicking an entry shows that series (the others fade). Two views of
    one chart that toggle the same field need different `view` names (Altair names a selection by its definition)."""
    name = "".join(c if c.isalnum() else "_" for c in f"toggle_{field}_{view}")
    return alt.selection_point(fields=[field], bind="legend", name=name)


PANEL_HEADER = alt.Header(labelFont="sans-serif", labelFontSize=12, labelFontWeight="bold")
"""A facet's panel titles, in the charts' font."""
