"""(n,p) paper Fig. 6 in its general form, from a study whose cells count their windows in the training corpus: every
method's extraction rate against how often the window occurs there, measured rather than planted (docs/corpus_counts.md)."""

from __future__ import annotations

from memrisk.report.corpus_counts_page import corpus_count_chart, count_points
from memrisk.report.paper.base import PaperFigure, Rows, Spec, series_names
from memrisk.report.study_data import StudyData


def _counts_apply(study: StudyData) -> bool:
    return study.has_method("corpus_counts")


def count_rows(study: StudyData) -> Rows:
    """Per cell (every scored window pooled), window-count bin and measure: the windows, how many the measure extracted
    and the rate in %, with the cell's model as its panel."""
    names = series_names([cell.name for cell in study.cells], [cell.config.model.name for cell in study.cells])
    rows = []
    for cell in study.cells:
        rows += count_points(cell.column, cell.config, {"panel": names[cell.name], "cell": cell.name, "model": cell.config.model.name})
    return rows


def counts_figure(rows: Rows) -> Spec:
    """A panel per cell: the rate of every measure against the window's corpus count (log-spaced bins); k of n on hover."""
    return corpus_count_chart(rows, "Extraction against occurrences in the training corpus")


FIGURES: tuple[PaperFigure, ...] = (
    PaperFigure("np-fig6-corpus-counts", "(n,p)", "Fig. 6 (measured counts)",
                "greedy, p_z ≥ τ_min, (n,p), CBS and PA extraction rates against how often the window (prefix + suffix) "
                "occurs in the training corpus, counted in an index of it",
                _counts_apply, count_rows, counts_figure),
)
