"""Figures of the prior-aware memorization paper, from a study."""

from __future__ import annotations

from memrisk.report.paper.base import PaperFigure

FIGURES: tuple[PaperFigure, ...] = ()
