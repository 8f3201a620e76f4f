"""Figures of the prior-aware memorization paper, from a study: Figs. 2–3 (against counterfactual memorization),
Fig. 4 (PA against plain extractable memorization across models) and Fig. 5 (prefix length).

Counts come from the records' `pa_extractable` (P(s|p) > m) and `pa_memorized` (also P(s|p)/v̂_s > n); logs are natural.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt
import numpy as np

from memrisk import rules
from memrisk.report.charts import tooltips
from memrisk.report.paper.base import PANEL_HEADER, PaperFigure, Rows, Spec, legend_toggle, series_names, short_model
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


TESTS = ["extractable: P(s|p) > m", "PA-memorized: also P(s|p) / v̂_s > n"]


def models_figure(rows: Rows) -> Spec:
    """PA paper Fig. 4: extractable (solid) and PA-memorized (dashed) counts per model, models by size, one colour per
    dataset; beside it the PA share (memorized / extractable). Hover a point for its counts as k of n windows."""
    cells = sorted(dict.fromkeys(r["cell"] for r in rows), key=lambda c: next((r["parameters"], r["cell"]) for r in rows if r["cell"] == c))
    names = series_names(cells, [next(r["model"] for r in rows if r["cell"] == c) for c in cells])
    order = [f"{names[c]} ({_size(rows, c)})" for c in cells]
    points = [{"model": f"{names[r['cell']]} ({_size(rows, r['cell'])})", "cell": r["cell"], "dataset": r["dataset"], "test": test,
               "sequences": r[key], "of": f"{r[key]} of {r['windows']} windows"}
              for r in rows for test, key in zip(TESTS, ("extractable", "pa_memorized"))]
    shares = [{"model": f"{names[r['cell']]} ({_size(rows, r['cell'])})", "cell": r["cell"], "dataset": r["dataset"],
               "share": 100.0 * r["pa_share"],
               "of": f"{r['pa_memorized']} of {r['extractable']} extractable"} for r in rows if r["pa_share"] is not None]
    datasets = legend_toggle("dataset")
    model = alt.X("model:N", title="model (by parameter count)", sort=order, axis=alt.Axis(labelAngle=-30, labelLimit=220))
    colour, opacity = alt.Color("dataset:N", title="dataset"), alt.condition(datasets, alt.value(1.0), alt.value(0.1))
    counts = alt.Chart(alt.Data(values=points)).mark_line(point=True).encode(
        x=model, y=alt.Y("sequences:Q", title="sequences", scale=alt.Scale(domainMin=0)), color=colour, opacity=opacity,
        strokeDash=alt.StrokeDash("test:N", title="test", scale=alt.Scale(domain=TESTS, range=[[1, 0], [5, 3]]),
                                  legend=alt.Legend(labelLimit=320)), detail=alt.Detail("test:N"),
        tooltip=tooltips("model:N", "cell:N", "dataset:N", "test:N", alt.Tooltip("of:N", title="sequences")),
    ).add_params(datasets).properties(width=max(260, 70 * len(cells)), height=260, title="(a) extractable and PA-memorized")
    share = alt.Chart(alt.Data(values=shares)).mark_line(point=True, strokeWidth=3).encode(
        x=model, y=alt.Y("share:Q", title="PA-memorized / extractable, %", scale=alt.Scale(domain=[0, 100])), color=colour,
        opacity=opacity, tooltip=tooltips("model:N", "cell:N", "dataset:N", alt.Tooltip("share:Q", title="PA share, %", format=".1f"), "of:N"),
    ).properties(width=max(260, 70 * len(cells)), height=260, title="(b) PA share")
    return alt.hconcat(counts, share, title="Extractable against PA-memorized sequences per model").to_dict(validate=False)


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


def prefix_figure(rows: Rows) -> Spec:
    """PA paper Fig. 5: (a) extractable and (b) PA-memorized counts against the prefix length, a line per dataset (and
    model, and the other length when it varies too); hover a point for its counts as k of n windows."""
    axis = "prefix_length" if len({r["prefix_length"] for r in rows}) > 1 else "bank_prefix_length"
    other = "bank_prefix_length" if axis == "prefix_length" else "prefix_length"
    follows = all(r["bank_prefix_length"] == r["prefix_length"] for r in rows)
    models, others = {r["model"] for r in rows}, {r[other] for r in rows}
    points = []
    for r in rows:
        series = ", ".join([r["dataset"]] + ([short_model(r["model"])] if len(models) > 1 else [])
                           + ([f"{other.replace('_', ' ')} {r[other]}"] if len(others) > 1 and not follows else []))
        points += [{"series": series, "cell": r["cell"], "length": r[axis], "panel": panel, "sequences": r[key],
                    "of": f"{r[key]} of {r['windows']} windows"}
                   for panel, key in ((f"(a) {TESTS[0]}", "extractable"), (f"(b) {TESTS[1]}", "pa_memorized"))]
    title = {"prefix_length": "prefix length a (tokens)", "bank_prefix_length": "bank prefix length (tokens)"}[axis]
    title += "; the bank's prefixes as long" if follows else ""
    series = legend_toggle("series")
    chart = alt.Chart(alt.Data(values=points)).mark_line(point=True).encode(
        x=alt.X("length:Q", title=title, axis=alt.Axis(tickMinStep=1, format="d"), scale=alt.Scale(zero=False, padding=12)),
        y=alt.Y("sequences:Q", title="sequences", scale=alt.Scale(domainMin=0)), color=alt.Color("series:N", title="series"),
        opacity=alt.condition(series, alt.value(1.0), alt.value(0.1)),
        tooltip=tooltips("series:N", "cell:N", alt.Tooltip("length:Q", title=axis.replace("_", " ")), alt.Tooltip("of:N", title="sequences")),
    ).add_params(series).properties(width=300, height=240)
    return chart.facet(column=alt.Column("panel:N", title=None, header=PANEL_HEADER)).properties(
        title="Extractable and PA-memorized sequences against the prefix length").to_dict(validate=False)


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
    """Per composition and sequence (window): Eq. 6 and Eq. 7 over that sequence alone, means over the models (PA Fig. 3);
    `cell` is the first model's cell, where the page opens the window."""
    rows = []
    for c in compositions(study):
        log_p, log_prior = _by_window(c.models, "pa_log_p", c.dataset), _by_window(c.models, "pa_log_prior", c.dataset)
        base = _by_window(c.baselines, "pa_log_p", c.dataset)
        for example, values in log_p.items():
            mean_p = _mean(values)
            rows.append({"dataset": c.dataset, "exact": c.exact, "near": c.near, "example_id": example, "cell": c.models[0].name,
                         "models": int(values.size),
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


def _correlation_title(title: str, x: Sequence[float], y: Sequence[float], left_out: int) -> list[str]:
    pearson, spearman = correlations(x, y)
    shown = "—" if pearson is None else f"Pearson {pearson:.3f}, Spearman {spearman:.3f}"
    return [title, f"{len(x)} points: {shown}" + (f"; {left_out} with an undefined metric left out" if left_out else "")]


AXES = {"x": "counterfactual memorization, Eq. 6 (log10)", "y": "prior-aware memorization, Eq. 7 (log10)"}


def compositions_figure(rows: Rows) -> Spec:
    """PA paper Fig. 2: counterfactual (x) against prior-aware memorization (y), log10, a point per composition, labelled
    (exact copies, near-duplicates); hover gives the composition, its windows and models."""
    x, y, kept = _points(rows)
    points = [{"x": a, "y": b, "label": f"({r['exact']}, {r['near']})", "dataset": r["dataset"], "windows": r["windows"],
               "models": r["models"], "baselines": r["baselines"]} for a, b, r in zip(x, y, kept)]
    base = alt.Chart(alt.Data(values=points)).encode(
        x=alt.X("x:Q", title=AXES["x"], scale=alt.Scale(zero=False, padding=16)),
        y=alt.Y("y:Q", title=AXES["y"], scale=alt.Scale(zero=False, padding=16)))
    line = base.mark_line(color="#bbb", strokeWidth=0.8)
    dots = base.mark_circle(size=60).encode(tooltip=tooltips(
                "dataset:N", alt.Tooltip("label:N", title="(exact, near)"), "windows:Q", "models:Q", "baselines:Q",
                alt.Tooltip("x:Q", title="counterfactual (log10)", format=".3f"), alt.Tooltip("y:Q", title="prior-aware (log10)", format=".3f")))
    labels = base.mark_text(dx=6, dy=10, align="left", fontSize=9).encode(text=alt.Text("label:N"))
    title = _correlation_title("means over models per (exact copies, near-duplicates)", x, y, len(rows) - len(kept))
    return alt.layer(line, dots, labels, width=420, height=340, title=title).interactive().to_dict(validate=False)


def sequences_figure(rows: Rows) -> Spec:
    """PA paper Fig. 3: counterfactual against prior-aware memorization per sequence, coloured by exact copies; hover a
    point for its window, click it to open the window in the explorer of the first model trained with its composition."""
    x, y, kept = _points(rows)
    points = [{"x": a, "y": b, "exact": f"{r['exact']} exact copies", "near": r["near"], "dataset": r["dataset"],
               "id": str(r["example_id"]), "cell": r["cell"]} for a, b, r in zip(x, y, kept)]
    copies = legend_toggle("exact")
    chart = alt.Chart(alt.Data(values=points)).mark_circle(size=40).encode(
        x=alt.X("x:Q", title=AXES["x"], scale=alt.Scale(zero=False, padding=16)),
        y=alt.Y("y:Q", title=AXES["y"], scale=alt.Scale(zero=False, padding=16)),
        color=alt.Color("exact:N", title="composition", sort=sorted({p["exact"] for p in points}, key=lambda e: int(e.split()[0]))),
        opacity=alt.condition(copies, alt.value(0.85), alt.value(0.08)),
        tooltip=tooltips(alt.Tooltip("id:N", title="window"), "dataset:N", "cell:N", "exact:N", alt.Tooltip("near:Q", title="near-duplicates"),
                         alt.Tooltip("x:Q", title="counterfactual (log10)", format=".3f"), alt.Tooltip("y:Q", title="prior-aware (log10)", format=".3f")),
    ).add_params(copies).interactive()
    title = _correlation_title("one point per sequence and composition", x, y, len(rows) - len(kept))
    return chart.properties(width=420, height=340, title=title).to_dict(validate=False)


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
