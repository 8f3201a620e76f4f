"""Figures and tables of the CBS paper (near-verbatim extraction risk by decoding-constrained beam search), from a study."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from memrisk import rules
from memrisk.report.figures import new_figure
from memrisk.report.paper.base import PaperFigure, Rows
from memrisk.report.study_data import StudyData

BEAM_WIDTH = "cbs.beam_width"


def _beam_sweep_applies(study: StudyData) -> bool:
    return study.has_method("cbs") and study.varies(BEAM_WIDTH)


def beam_sweep_rows(study: StudyData) -> Rows:
    """Per cell, target dataset and ε: extractable count and rate from LB_ε (Fig. 23), mean ± sd of LB_ε over the
    extractable windows (Fig. 24), and the cell's CBS wall time in minutes (Fig. 25)."""
    rows = []
    for cell in study.cells:
        distance = rules.cbs_distance(cell.config.cbs.prune_mode)
        minutes = cell.wall_seconds().get("cbs", 0.0) / 60
        for dataset in study.target_datasets():
            lower = np.array([list(v) for v in cell.column(f"cbs_lower.{distance}", dataset)], dtype=np.float64)
            for epsilon in range(lower.shape[1]):
                extracted = rules.cbs_extracted(lower[:, epsilon], cell.config.tau_min)
                mass = lower[extracted, epsilon]
                rows.append({
                    "cell": cell.name, "model": cell.config.model.name, "dataset": dataset,
                    "beam_width": cell.config.cbs.beam_width, "prune": cell.config.cbs.prune, "distance": distance,
                    "epsilon": epsilon, "windows": int(lower.shape[0]), "extractable": int(extracted.sum()),
                    "rate": float(extracted.mean()) if extracted.size else None,
                    "mean_mass": float(mass.mean()) if mass.size else None,
                    "sd_mass": float(mass.std()) if mass.size else None,
                    "cbs_minutes": minutes,
                })
    return rows


def beam_sweep_figure(rows: Rows) -> Figure:
    """Three panels against B: extraction rate per ε, mean mass of the extractable windows per ε, CBS wall time."""
    fig = new_figure(11.0, 3.4)
    rate_ax, mass_ax, time_ax = fig.subplots(1, 3)
    series: dict[tuple, list[dict]] = {}
    for row in rows:
        series.setdefault((row["model"], row["dataset"], row["prune"], row["epsilon"]), []).append(row)
    for (model, dataset, prune, epsilon), points in series.items():
        points.sort(key=lambda r: r["beam_width"])
        label = f"{dataset}, prune={prune}, ε={epsilon}"
        widths = [r["beam_width"] for r in points]
        rate_ax.plot(widths, [r["rate"] for r in points], marker="o", label=label)
        mass_ax.plot(widths, [np.nan if r["mean_mass"] is None else r["mean_mass"] for r in points], marker="o")
    timed: dict[tuple, dict[int, float]] = {}
    for row in rows:
        timed.setdefault((row["model"], row["prune"]), {})[row["beam_width"]] = row["cbs_minutes"]
    for (model, prune), minutes in timed.items():
        widths = sorted(minutes)
        time_ax.plot(widths, [minutes[b] * 60 for b in widths], marker="s", label=f"prune={prune}")
    rate_ax.set(xlabel="beam width B", ylabel="rate with LB_ε ≥ τ_min", title="Fig. 23: extraction rate")
    mass_ax.set(xlabel="beam width B", ylabel="mean LB_ε (extractable)", title="Fig. 24: extraction mass")
    time_ax.set(xlabel="beam width B", ylabel="CBS wall time (s)", title="Fig. 25: wall time")
    rate_ax.legend(fontsize="x-small")
    time_ax.legend(fontsize="x-small")
    return fig


FIGURES: tuple[PaperFigure, ...] = (
    PaperFigure("cbs-fig23-25-beam-width", "CBS", "Figs. 23–25",
                "near-verbatim extraction rate, mean extraction mass and CBS wall time against beam width B",
                _beam_sweep_applies, beam_sweep_rows, beam_sweep_figure),
)
