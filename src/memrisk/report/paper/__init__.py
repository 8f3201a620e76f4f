"""The papers' figures and tables that a study reproduces, each under its paper's number (docs/figures.md)."""

from __future__ import annotations

from dataclasses import dataclass

from memrisk.report.paper import books, cbs, corpus, npaper, prior_aware
from memrisk.report.paper.base import PaperFigure, Rows, Spec
from memrisk.report.study_data import StudyData

FIGURES: tuple[PaperFigure, ...] = (*cbs.FIGURES, *npaper.FIGURES, *corpus.FIGURES, *prior_aware.FIGURES, *books.FIGURES)


@dataclass(frozen=True)
class Reproduced:
    """One paper figure as this study draws it: its rows and, for a figure with rows, its Vega-Lite spec."""

    figure: PaperFigure
    rows: Rows
    spec: Spec | None


def reproduce(study: StudyData) -> list[Reproduced]:
    """Every registered figure the study has the data for, in registry order: the Books paper's for a study of books
    runs, the others for a study of experiments."""
    out = []
    for figure in FIGURES:
        if (figure.paper == books.PAPER) != study.books or not figure.applies(study):
            continue
        rows = figure.rows(study)
        out.append(Reproduced(figure, rows, figure.draw(rows) if figure.draw is not None and rows else None))
    return out
