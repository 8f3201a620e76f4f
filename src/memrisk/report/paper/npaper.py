"""Figures of the (n,p) paper (probabilistic extraction), from a study."""

from __future__ import annotations

from memrisk.report.paper.base import PaperFigure

FIGURES: tuple[PaperFigure, ...] = ()
