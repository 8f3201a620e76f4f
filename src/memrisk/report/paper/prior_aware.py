"""Figures of the prior-aware memorization paper, from a study: Figs. 2–3 (against counterfactual memorization),
Fig. 4 (PA against plain extractable memorization across models) and Fig. 5 (prefix length).

Counts come from the records' `pa_extractable` (P(s|p) > m) and `pa_memorized` (also P(s|p)/v̂_s > n); logs are natural.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import cycle
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from memrisk import rules
from memrisk.report.figures import SERIES, new_figure, plain
from memrisk.report.paper.base import PaperFigure, Rows, series_names, short_model
from memrisk.report.study_data import StudyCell, StudyData

PREFIX_KEYS = ("windows.prefix_length", "prior_aware.prefix_length")
"""Fig. 5's axis: the prompt's prefix length, else the bank prefixes' length."""
LN10 = math.log(10.0)


def pa_counts(cell: StudyCell, dataset: str) -> dict[str, Any]:
    """A dataset's windows in a cell, extractable (P(s|p) > m) and PA-memorized counts, their rates and the PA share."""
    extractable = cell.column("pa_extractable", dataset).astype(bool)
    memorized = cell.column("pa_memorized", dataset).astype(bool)
    windows, found, kept = int(extractable.size), int(extractable.sum()), int(memorized.sum())
    return {"windows": windows, "extractable": found, "pa_memorized": kept, "extractable_rate": rules.fraction(found, windows),
            "pa_rate": rules.fraction(kept, windows), "pa_share": rules.fraction(kept, found)}


def _sizes_apply(study: StudyData) -> bool:
    return study.has_method("prior_aware") and len({cell.versions["model"]["parameters"] for cell in study.cells}) > 1


def model_rows(study: StudyData) -> Rows:
    """Per cell and target dataset: the model and its parameter count, PA counts and the verbatim p_z ≥ τ_min count under
    the p_z policy when the cell ran teacher forcing (PA paper Fig. 4: extractable against PA-memorized by model size)."""
    rows = []
    for cell in study.cells:
        policy = cell.config.cbs_policy().label if "probabilistic" in cell.config.methods else None
        for dataset in study.target_datasets():
            verbatim = None if policy is None else int(rules.verbatim(cell.column(f"log_p.{policy}", dataset).astype(np.float64),
                                                                      cell.config.tau_min).sum())
            rows.append({"cell": cell.name, "model": cell.config.model.name, "parameters": cell.versions["model"]["parameters"],
                         "dataset": dataset, "suffix_length": cell.config.windows.suffix_length} | pa_counts(cell, dataset)
                        | {"p_z_policy": policy, "p_z_verbatim": verbatim})
    return rows


def models_figure(rows: Rows) -> Figure:
    """PA paper Fig. 4: extractable (solid) and PA-memorized (dashed) counts per model, models by size, one colour per
    dataset; the PA share (memorized / extractable) as thick lines on the right axis."""
    cells = sorted(dict.fromkeys(r["cell"] for r in rows), key=lambda c: next((r["parameters"], r["cell"]) for r in rows if r["cell"] == c))
    names = series_names(cells, [next(r["model"] for r in rows if r["cell"] == c) for c in cells])
    fig = new_figure(9.6, 4.6)
    ax = fig.add_subplot()
    share_ax = ax.twinx()
    for colour, dataset in zip(cycle(SERIES), dict.fromkeys(r["dataset"] for r in rows)):
        part = {r["cell"]: r for r in rows if r["dataset"] == dataset}
        x = [i for i, c in enumerate(cells) if c in part]
        ax.plot(x, [part[cells[i]]["extractable"] for i in x], marker="o", color=colour, label=plain(f"{dataset}: extractable"))
        ax.plot(x, [part[cells[i]]["pa_memorized"] for i in x], marker="s", ls="--", color=colour, label=plain(f"{dataset}: PA-memorized"))
        shares = [(i, part[cells[i]]["pa_share"]) for i in x if part[cells[i]]["pa_share"] is not None]
        share_ax.plot([i for i, _ in shares], [100.0 * s for _, s in shares], lw=4.0, alpha=0.35, color=colour,
                      label=plain(f"{dataset}: PA share"))
    ax.set_xticks(range(len(cells)), [plain(f"{names[c]}\n{_size(rows, c)}") for c in cells], fontsize=8,
                  rotation=30 if len(cells) > 4 else 0, ha="right" if len(cells) > 4 else "center")
    ax.set(xlabel="model (by parameter count)", ylabel="sequences")
    ax.set_ylim(bottom=0.0)
    share_ax.set_ylim(0.0, 105.0)
    share_ax.set_ylabel("PA-memorized / extractable, %")
    handles = [h for a in (ax, share_ax) for h in a.get_legend_handles_labels()[0]]
    fig.legend(handles, [h.get_label() for h in handles], fontsize=7, loc="outside right upper")  # never over the lines
    return fig


def _size(rows: Rows, cell: str) -> str:
    """A cell's model size as `135M` or `5.2k` parameters."""
    count = next(r["parameters"] for r in rows if r["cell"] == cell)
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g}{unit}"
    return str(count)


def _prefix_applies(study: StudyData) -> bool:
    return study.has_method("prior_aware") and any(study.varies(key) for key in PREFIX_KEYS)


def prefix_rows(study: StudyData) -> Rows:
    """Per cell and target dataset: the prompt's and the bank prefixes' length and the PA counts (PA paper Fig. 5)."""
    return [{"cell": cell.name, "model": cell.config.model.name, "dataset": dataset,
             "prefix_length": cell.config.windows.prefix_length,
             "bank_prefix_length": cell.config.prior_aware.prefix_length or cell.config.windows.prefix_length}
            | pa_counts(cell, dataset) for cell in study.cells for dataset in study.target_datasets()]


def prefix_figure(rows: Rows) -> Figure:
    """PA paper Fig. 5: (a) extractable and (b) PA-memorized counts against the prefix length, a line per dataset (and
    model, and the other length when it varies too)."""
    axis = "prefix_length" if len({r["prefix_length"] for r in rows}) > 1 else "bank_prefix_length"
    other = "bank_prefix_length" if axis == "prefix_length" else "prefix_length"
    follows = all(r["bank_prefix_length"] == r["prefix_length"] for r in rows)
    fig = new_figure(11.0, 4.2)
    panels = fig.subplots(1, 2)
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["dataset"], None if follows else row[other]), []).append(row)
    models, others = {k[0] for k in groups}, {k[2] for k in groups}
    for colour, ((model, dataset, length), part) in zip(cycle(SERIES), groups.items()):
        part.sort(key=lambda r: r[axis])
        label = ", ".join([dataset] + ([short_model(model)] if len(models) > 1 else [])
                          + ([f"{other.replace('_', ' ')} {length}"] if len(others) > 1 else []))
        for ax, count in zip(panels, ("extractable", "pa_memorized")):
            ax.plot([r[axis] for r in part], [r[count] for r in part], marker="o", color=colour, label=plain(label))
    xlabel = {"prefix_length": "prefix length a (tokens)", "bank_prefix_length": "bank prefix length (tokens)"}[axis]
    xlabel += "; the bank's prefixes as long" if follows else ""
    panels[0].set(title="(a) extractable: P(s|p) > m", xlabel=xlabel, ylabel="sequences")
    panels[1].set(title="(b) PA-memorized: also P(s|p) / v̂_s > n", xlabel=xlabel, ylabel="sequences")
    for ax in panels:
        ax.set_ylim(bottom=0.0)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7)
    return fig


@dataclass(frozen=True)
class Composition:
    """Models trained with `exact` copies and `near` near-duplicates of a dataset's sequences, and the counterfactual
    baselines: the models trained with the same near-duplicates and no exact copy (PA paper §4.1.3)."""

    dataset: str
    exact: int
    near: int
    models: tuple[StudyCell, ...]
    baselines: tuple[StudyCell, ...]


def compositions(study: StudyData) -> list[Composition]:
    """Every composition of a target dataset with `duplicates:` and `near_duplicates:` that has a baseline. A cell whose
    dataset has no exact copy is the baseline of the compositions with the same near-duplicates, and a composition of
    its own (counterfactual memorization 0) only when there are none."""
    groups: dict[tuple[str, int, int], list[StudyCell]] = {}
    for cell in study.cells:
        for d in cell.config.scored_datasets():
            if d.role == "target" and d.duplicates is not None and d.near_duplicates is not None:
                groups.setdefault((d.name, d.duplicates, d.near_duplicates), []).append(cell)
    return [Composition(name, exact, near, tuple(cells), tuple(groups[(name, 0, near)]))
            for (name, exact, near), cells in sorted(groups.items())
            if (name, 0, near) in groups and (exact > 0 or not any(e > 0 and (n, k) == (name, near) for n, e, k in groups))]


def _counterfactual_applies(study: StudyData) -> bool:
    return study.has_method("prior_aware") and len(compositions(study)) > 1


def _mean(values: np.ndarray) -> float:
    """The mean of natural logs (−inf when any is −inf, never NaN)."""
    return float(np.mean(values)) if values.size else -math.inf


def _gap(a: float, b: float) -> float | None:
    """a − b, or None where both are −inf (no difference is defined)."""
    return None if a == b == -math.inf else a - b


def _pooled(cells: Sequence[StudyCell], column: str, dataset: str) -> np.ndarray:
    return np.concatenate([cell.column(column, dataset).astype(np.float64) for cell in cells])


def counterfactual_rows(study: StudyData) -> Rows:
    """Per composition: counterfactual memorization (PA Eq. 6), E_M[log P(s|p)] − E_M'[log P(s|p)], and prior-aware
    memorization (Eq. 7), E_M[log P(s|p)] − E_M[log v̂_s], the means over the models' (or baselines') windows (PA Fig. 2)."""
    rows = []
    for c in compositions(study):
        log_p, log_prior = _pooled(c.models, "pa_log_p", c.dataset), _pooled(c.models, "pa_log_prior", c.dataset)
        mean_p, mean_prior, mean_base = _mean(log_p), _mean(log_prior), _mean(_pooled(c.baselines, "pa_log_p", c.dataset))
        rows.append({"dataset": c.dataset, "exact": c.exact, "near": c.near, "models": len(c.models), "baselines": len(c.baselines),
                     "windows": int(log_p.size), "mean_log_p": mean_p, "mean_log_prior": mean_prior, "mean_baseline_log_p": mean_base,
                     "counterfactual": _gap(mean_p, mean_base), "prior_aware": _gap(mean_p, mean_prior)})
    return rows


def _by_window(cells: Sequence[StudyCell], column: str, dataset: str) -> dict[str, np.ndarray]:
    """Per window (example id) its values in each cell, in cell order."""
    out: dict[str, list[float]] = {}
    for cell in cells:
        for example, value in zip(cell.column("example_id", dataset), cell.column(column, dataset).astype(np.float64)):
            out.setdefault(str(example), []).append(float(value))
    return {example: np.asarray(values) for example, values in out.items()}


def sequence_rows(study: StudyData) -> Rows:
    """Per composition and sequence (window): Eq. 6 and Eq. 7 over that sequence alone, means over the models (PA Fig. 3)."""
    rows = []
    for c in compositions(study):
        log_p, log_prior = _by_window(c.models, "pa_log_p", c.dataset), _by_window(c.models, "pa_log_prior", c.dataset)
        base = _by_window(c.baselines, "pa_log_p", c.dataset)
        for example, values in log_p.items():
            mean_p = _mean(values)
            rows.append({"dataset": c.dataset, "exact": c.exact, "near": c.near, "example_id": example, "models": int(values.size),
                         "mean_log_p": mean_p, "counterfactual": _gap(mean_p, _mean(base[example])),
                         "prior_aware": _gap(mean_p, _mean(log_prior[example]))})
    return rows


def ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their mean rank (as Spearman's coefficient needs)."""
    order = np.argsort(values, kind="stable")
    position = np.empty(values.size)
    position[order] = np.arange(1, values.size + 1)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    return (np.bincount(inverse, weights=position) / counts)[inverse]


def correlations(x: Sequence[float], y: Sequence[float]) -> tuple[float | None, float | None]:
    """Pearson's and Spearman's coefficients, None where either series is constant or has fewer than two points."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None, None
    return float(np.corrcoef(x, y)[0, 1]), float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def _points(rows: Rows) -> tuple[list[float], list[float], list[dict[str, Any]]]:
    """The rows with both metrics defined, as log10 x (counterfactual) and y (prior-aware)."""
    kept = [r for r in rows if r["counterfactual"] is not None and r["prior_aware"] is not None
            and math.isfinite(r["counterfactual"]) and math.isfinite(r["prior_aware"])]
    return [r["counterfactual"] / LN10 for r in kept], [r["prior_aware"] / LN10 for r in kept], kept


def _correlation_title(title: str, x: Sequence[float], y: Sequence[float]) -> str:
    pearson, spearman = correlations(x, y)
    shown = "—" if pearson is None else f"Pearson {pearson:.3f}, Spearman {spearman:.3f}"
    return f"{title}\n{len(x)} points: {shown}"


def compositions_figure(rows: Rows) -> Figure:
    """PA paper Fig. 2: counterfactual (x) against prior-aware memorization (y), log10, a point per composition."""
    fig = new_figure(6.0, 4.8)
    ax = fig.add_subplot()
    x, y, kept = _points(rows)
    ax.plot(x, y, color="#bbb", lw=0.8, zorder=1)
    ax.scatter(x, y, s=36, color=SERIES[0], zorder=2)
    for xi, yi, row in zip(x, y, kept):
        ax.annotate(f"({row['exact']}, {row['near']})", (xi, yi), textcoords="offset points", xytext=(5, -10), fontsize=7)
    ax.set(title=_correlation_title("means over models per (exact copies, near-duplicates)", x, y),
           xlabel="counterfactual memorization, Eq. 6 (log10)", ylabel="prior-aware memorization, Eq. 7 (log10)")
    return fig


def sequences_figure(rows: Rows) -> Figure:
    """PA paper Fig. 3: counterfactual against prior-aware memorization per sequence, coloured by exact copies."""
    fig = new_figure(7.4, 4.8)
    ax = fig.add_subplot()
    x, y, kept = _points(rows)
    for colour, exact in zip(cycle(SERIES), sorted({r["exact"] for r in kept})):
        chosen = [i for i, r in enumerate(kept) if r["exact"] == exact]
        ax.scatter([x[i] for i in chosen], [y[i] for i in chosen], s=24, color=colour, label=f"{exact} exact copies")
    if kept:
        fig.legend(fontsize=7, loc="outside right upper")  # never over the points
    ax.set(title=_correlation_title("one point per sequence and composition", x, y),
           xlabel="counterfactual memorization, Eq. 6 (log10)", ylabel="prior-aware memorization, Eq. 7 (log10)")
    return fig


FIGURES: tuple[PaperFigure, ...] = (
    PaperFigure("pa-fig2-counterfactual", "prior-aware", "Fig. 2",
                "counterfactual against prior-aware memorization, means over the models trained with each composition of exact "
                "copies and near-duplicates", _counterfactual_applies, counterfactual_rows, compositions_figure),
    PaperFigure("pa-fig3-counterfactual-sequences", "prior-aware", "Fig. 3",
                "counterfactual against prior-aware memorization, one point per sequence", _counterfactual_applies,
                sequence_rows, sequences_figure),
    PaperFigure("pa-fig4-models", "prior-aware", "Fig. 4",
                "extractable (P(s|p) > m) against PA-memorized sequences per model, by model size, and the PA share",
                _sizes_apply, model_rows, models_figure),
    PaperFigure("pa-fig5-prefix-length", "prior-aware", "Fig. 5",
                "extractable and PA-memorized sequences against the prefix length", _prefix_applies, prefix_rows, prefix_figure),
)
