"""Figures and tables of the CBS paper (near-verbatim extraction risk by decoding-constrained beam search), from a study.

Every number is recomputed from the cells' records with the rules of `memrisk.rules`; figures that compare
models apply when a model setting varies between cells, and match windows across cells by `example_id`. Each figure is
an interactive Vega-Lite spec (Altair) whose window marks carry the window's `cell` and `id`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import altair as alt
import numpy as np

from memrisk import rules
from memrisk.methods.cbs import DISTANCES
from memrisk.methods.monte_carlo import MAX_ROWS, estimates
from memrisk.report.charts import book_heatmap_chart, panel_grid, tooltips, verdict_scatter_chart
from memrisk.report.metrics import BookHeatmap, coverage_max_owner, token_evals
from memrisk.report.paper.base import PaperFigure, Rows, Spec, legend_toggle
from memrisk.report.study_data import StudyCell, StudyData

BEAM_WIDTH = "cbs.beam_width"
PRUNE, EPSILON = "cbs.prune", "cbs.epsilon"
MODEL_KEYS = ("model.name", "model.revision", "model.gguf_file", "model.dtype")
"""The settings that make a cell's model another model (CBS Figs. 4, 20 and 21 compare models)."""
CANDIDATES_FIXED = {"greedy": 1, "probabilistic": 1}


def _describe(changes: dict[str, Any]) -> str:
    """Changes as the figures name them, `name=model-b, beam_width=4` (a model path by its folder name)."""
    def shown(key: str, value: Any) -> str:
        return Path(str(value)).name if key == "model.name" else str(value)

    return ", ".join(f"{key.split('.')[-1]}={shown(key, value)}" for key, value in changes.items())


def _label(cell: StudyCell) -> str:
    """A cell as the figures name it: its changes, or its name."""
    return _describe(cell.changes) or cell.name


def _head(cell: StudyCell, dataset: str | None = None) -> dict[str, Any]:
    """The columns every row starts with: the cell, its label and model, and the dataset."""
    head = {"cell": cell.name, "label": _label(cell), "model": cell.config.model.name}
    return head if dataset is None else head | {"dataset": dataset}


def _distance(cell: StudyCell) -> str:
    return rules.cbs_distance(cell.config.cbs.prune_mode)


def _bounds(cell: StudyCell, dataset: str, column: str) -> np.ndarray:
    """A per-ε list column (`cbs_lower.levenshtein`, `cbs_baseline_lower.levenshtein`) as a (windows × (E + 1)) array."""
    values = cell.column(column, dataset)
    return np.array([list(v) for v in values], dtype=np.float64).reshape(len(values), cell.config.cbs.epsilon + 1)


def _lower(cell: StudyCell, dataset: str, distance: str | None = None) -> np.ndarray:
    """LB_ε per window and ε = 0..E, by the cell's CBS distance unless another is named."""
    return _bounds(cell, dataset, f"cbs_lower.{distance or _distance(cell)}")


def _log_p(cell: StudyCell, dataset: str) -> np.ndarray:
    """Natural-log p_z under the CBS policy (−inf where the policy cannot emit the suffix)."""
    return cell.column(f"log_p.{cell.config.cbs_policy().label}", dataset).astype(np.float64)


def _compares_models(study: StudyData) -> bool:
    return study.has_method("cbs") and any(study.varies(key) for key in MODEL_KEYS)


def _groups(rows: Rows, *keys: str) -> dict[tuple, Rows]:
    """Rows grouped by the values of `keys`, groups and rows in first-seen order."""
    out: dict[tuple, Rows] = {}
    for row in rows:
        out.setdefault(tuple(row[k] for k in keys), []).append(row)
    return out


PADDING = {"left": 5, "top": 5, "bottom": 5, "right": 24}
"""Room on the right of a drawn figure: vl-convert measures legend labels a little short and would clip their ends."""


def _spec(chart: alt.TopLevelMixin) -> Spec:
    """A figure's chart as the Vega-Lite spec the page draws and vl-convert renders. The padding is set on the chart
    itself: `properties` would copy it, and the copy of a layered or concatenated chart combines its panels' parameters
    again."""
    chart.padding = PADDING
    return chart.to_dict(validate=False)


def _zoom(view: str, encodings: tuple[str, ...] = ("x", "y")) -> alt.Parameter:
    """Zoom and pan bound to a panel's scales, named apart from the other panels' (Altair would merge identical ones)."""
    return alt.selection_interval(bind="scales", encodings=list(encodings),
                                  name="".join(c if c.isalnum() else "_" for c in f"zoom_{view}"))


def _distribution(points: Rows, field: str, title: str, percent: bool, values: list[alt.Tooltip], view: str) -> alt.LayerChart:
    """A box per model (`label`, in study order) of `field` over its windows, every window a point beside it jittered
    by a seeded draw (hover for the window and `values`, click to open it) and the median as a labelled tick: the CBS
    paper's violins, with each window reachable; the y axis zooms and pans. `percent`: a linear axis from 0; otherwise
    a log axis (masses from τ_min to 1)."""
    counts = {label: len(group) for (label,), group in _groups(points, "label").items()}
    series = {label: f"{label} ({n} window{'s' if n > 1 else ''})" for label, n in counts.items()}
    x = alt.X("series:N", title=None, sort=list(series.values()), axis=alt.Axis(labelAngle=0, labelLimit=200))
    scale = alt.Scale(zero=True) if percent else alt.Scale(type="log")
    y = alt.Y(f"{field}:Q", title=title, scale=scale, axis=alt.Axis(format=".0f" if percent else "~g"))
    shown = ".1f" if percent else ".3g"
    jitter = np.random.default_rng(0).uniform(-4, 4, len(points))  # seeded: the same files from the same records
    base = alt.Chart(alt.Data(values=[p | {"id": p["example_id"], "series": series[p["label"]], "jitter": float(j)}
                                      for p, j in zip(points, jitter)]))
    boxes = base.mark_boxplot(extent="min-max", opacity=0.35, size=36, clip=True).encode(x=x, y=y)
    dots = base.mark_circle(size=24, opacity=0.8, clip=True).encode(
        x=x, xOffset=alt.XOffset("jitter:Q", scale=alt.Scale(domain=[-12, 12])), y=y, color=alt.value("#1f77b4"),
        tooltip=tooltips(alt.Tooltip("id:N", title="window"), "dataset:N", "cell:N", alt.Tooltip("label:N", title="model"),
                         alt.Tooltip(f"{field}:Q", title=title, format=shown), *values)).add_params(_zoom(view, ("y",)))
    median = base.transform_aggregate(median=f"median({field})", windows="count()", groupby=["series"]).transform_calculate(
        text=f"'median ' + format(datum.median, '{shown}') + '{'%' if percent else ''}'")
    at = alt.Y("median:Q", scale=scale)
    ticks = median.mark_tick(color="black", thickness=2, size=30, clip=True).encode(
        x=x, y=at, tooltip=[alt.Tooltip("series:N", title="model"), alt.Tooltip("median:Q", title=f"median {title}", format=shown)])
    text = median.mark_text(dy=-9, fontSize=10).encode(x=x, y=at, text=alt.Text("text:N"))
    return alt.layer(boxes, dots, ticks, text, width=max(160, 130 * len(series)), height=260)


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


def _pooled_sweep(rows: Rows) -> dict[tuple, dict[int, tuple[int, int, float]]]:
    """Per (model, prune, ε) and beam width: windows, extractable windows and their summed LB_ε, over the target datasets."""
    pooled: dict[tuple, dict[int, tuple[int, int, float]]] = {}
    for row in rows:
        points = pooled.setdefault((row["model"], row["prune"], row["epsilon"]), {})
        windows, extractable, mass = points.get(row["beam_width"], (0, 0, 0.0))
        extra = 0.0 if row["mean_mass"] is None else row["mean_mass"] * row["extractable"]
        points[row["beam_width"]] = (windows + row["windows"], extractable + row["extractable"], mass + extra)
    return pooled


def beam_sweep_figure(rows: Rows) -> Spec:
    """Three panels against B, the target datasets pooled: extraction rate and mean mass of the extractable windows per
    ε (colour) and pruning (line style), and CBS wall time per pruning mode (CBS Figs. 23–25); hover gives k of n."""
    pooled = _pooled_sweep(rows)
    points = [{"model": Path(str(model)).name, "prune": prune, "epsilon": epsilon, "beam_width": width, "windows": n,
               "rate": extractable / n if n else None, "of": f"{extractable} of {n}",
               "mass": mass / extractable if extractable else None}
              for (model, prune, epsilon), by_width in pooled.items() for width, (n, extractable, mass) in sorted(by_width.items())]
    timed = {(Path(str(r["model"])).name, r["prune"], r["beam_width"]): r["cbs_minutes"] * 60 for r in rows}
    times = [{"model": model, "prune": prune, "beam_width": width, "seconds": seconds} for (model, prune, width), seconds in timed.items()]
    widths = sorted({p["beam_width"] for p in points})
    x = alt.X("beam_width:Q", title="beam width B", axis=alt.Axis(values=widths, format="d"), scale=alt.Scale(padding=12))
    several = len({p["model"] for p in points}) > 1
    shape = alt.Shape("model:N", title="model") if several else alt.value("circle")
    epsilons = legend_toggle("epsilon", "beam")
    colour = alt.Color("epsilon:O", title="ε", scale=alt.Scale(scheme="viridis"))
    dash = alt.StrokeDash("prune:N", title="pruning", legend=alt.Legend(symbolType="stroke"))
    faded = alt.condition(epsilons, alt.value(1.0), alt.value(0.1))
    tooltip = tooltips("model:N", "prune:N", "epsilon:O", "beam_width:Q")
    rates = [p for p in points if p["rate"] is not None]
    top = max([0.05] + [p["rate"] for p in rates])
    rate = alt.Chart(alt.Data(values=rates)).mark_line(point=True, clip=True).encode(
        x=x, y=alt.Y("rate:Q", title=f"share of the {max(p['windows'] for p in points)} windows with LB_ε ≥ τ_min",
                     scale=alt.Scale(domain=[0, top]), axis=alt.Axis(format="%")),
        color=colour, strokeDash=dash, shape=shape, detail=alt.Detail("model:N"), opacity=faded,
        tooltip=tooltip + [alt.Tooltip("rate:Q", format=".1%"), alt.Tooltip("of:N", title="windows")],
    ).add_params(epsilons, _zoom("beam_rate"))
    masses = [p for p in points if p["mass"] is not None]
    mass = alt.Chart(alt.Data(values=masses)).mark_line(point=True, clip=True).encode(
        x=x, y=alt.Y("mass:Q", title="mean LB_ε of the extractable windows"), color=colour, strokeDash=dash, shape=shape,
        detail=alt.Detail("model:N"), opacity=faded,
        tooltip=tooltip + [alt.Tooltip("mass:Q", title="mean LB_ε", format=".3g"), alt.Tooltip("of:N", title="extractable windows")],
    ).add_params(_zoom("beam_mass")) if masses else alt.Chart(alt.Data(values=[{"text": "no window has LB_ε ≥ τ_min at any B"}])).mark_text(
    ).encode(text=alt.Text("text:N"))
    time = alt.Chart(alt.Data(values=times)).mark_line(point=alt.OverlayMarkDef(color="black"), color="black", clip=True).encode(
        x=x, y=alt.Y("seconds:Q", title="CBS wall time (s)"), strokeDash=dash, shape=shape, detail=alt.Detail("model:N"),
        tooltip=tooltips("model:N", "prune:N", "beam_width:Q", alt.Tooltip("seconds:Q", format=".1f")),
    ).add_params(_zoom("beam_time"))
    panels = zip((rate, mass, time), ("Fig. 23: extraction rate", "Fig. 24: extraction mass", "Fig. 25: wall time"))
    return _spec(alt.hconcat(*(chart.properties(width=240, height=220, title=title) for chart, title in panels),
                             title="Near-verbatim extraction against beam width (target datasets pooled)"))


def _mc_applies(study: StudyData) -> bool:
    return study.has_method("mc") and study.has_method("cbs")


def mc_epsilon(cell: StudyCell) -> int:
    """The ε Monte Carlo and CBS are compared at: the smaller of their two budgets."""
    return min(cell.config.mc.epsilon, cell.config.cbs.epsilon)


def mc_prefill(mc_evals: int, suffix_length: int, samples: int) -> float:
    """The a token evaluations of one prefill, from `token_evals.mc` = a·⌈M/MAX_ROWS⌉ + (T − 1)·M at the largest M."""
    return (mc_evals - (suffix_length - 1) * samples) / math.ceil(samples / MAX_ROWS)


def mc_cost(prefill: float, suffix_length: int, samples: int) -> float:
    """Token evaluations of M Monte Carlo samples (CBS eq. 23, one prefill per batch of MAX_ROWS samples)."""
    return prefill * math.ceil(samples / MAX_ROWS) + (suffix_length - 1) * samples


def sample_equivalent(cbs_evals: int, prefill: float, suffix_length: int) -> float | None:
    """The M at which one prefill plus M samples costs what CBS spent (CBS §C.3, Fig. 5's '≈ 20 MC samples')."""
    return (cbs_evals - prefill) / (suffix_length - 1) if suffix_length > 1 else None


def _mc_column(cell: StudyCell, dataset: str, name: str) -> np.ndarray:
    """`mc_estimate`, `mc_low` or `mc_high` as a (windows × budgets × (ε + 1)) array."""
    values = cell.column(name, dataset)
    return estimates(values).reshape(len(values), len(cell.config.mc.samples), cell.config.mc.epsilon + 1)


def _mc_window(lower: np.ndarray, top: np.ndarray) -> int:
    """The window Figs. 2/5 follow: the largest LB_ε, ties by the largest-budget estimate, then the first."""
    return max(range(lower.size), key=lambda i: (lower[i], top[i], -i))


def mc_convergence_rows(study: StudyData) -> Rows:
    """Per cell and target dataset, for its window with the largest LB_ε: the Monte Carlo estimate and 95% Wilson
    interval at every nested budget M with its token evaluations, next to LB_ε and CBS's own token evaluations
    (CBS Figs. 2 and 5)."""
    rows = []
    for cell in study.cells:
        for dataset in study.target_datasets():
            lower = _lower(cell, dataset, cell.config.mc.distance)[:, mc_epsilon(cell)]
            if lower.size:
                i = _mc_window(lower, _mc_column(cell, dataset, "mc_estimate")[:, -1, mc_epsilon(cell)])
                rows += _convergence_points(cell, dataset, i, float(lower[i]))
    return rows


def _convergence_points(cell: StudyCell, dataset: str, i: int, lower: float) -> Rows:
    """Figs. 2/5's points for window `i` of a dataset: one per budget M."""
    epsilon, samples = mc_epsilon(cell), list(cell.config.mc.samples)
    estimate, low, high = (_mc_column(cell, dataset, name)[i, :, epsilon] for name in ("mc_estimate", "mc_low", "mc_high"))
    length = len(cell.column("suffix_ids", dataset)[i])
    cbs_evals = int(cell.column("token_evals.cbs", dataset)[i])
    prefill = mc_prefill(int(cell.column("token_evals.mc", dataset)[i]), length, samples[-1])
    window = _head(cell, dataset) | {
        "example_id": str(cell.column("example_id", dataset)[i]), "distance": cell.config.mc.distance, "epsilon": epsilon,
        "cbs_lower": lower, "cbs_token_evals": cbs_evals, "cbs_samples_equivalent": sample_equivalent(cbs_evals, prefill, length),
        "tau_min": cell.config.tau_min,
    }
    return [window | {"samples": m, "mc_estimate": float(estimate[j]), "mc_low": float(low[j]), "mc_high": float(high[j]),
                      "mc_token_evals": mc_cost(prefill, length, m)} for j, m in enumerate(samples)]


def _probability_ticks(tau: float) -> list[float]:
    """Ticks of a symlog probability axis: 0, τ_min and each decade above it up to 1."""
    return [0.0, *(10.0 ** k for k in range(math.floor(math.log10(tau)), 1))]


def _convergence_panel(points: Rows, view: str) -> alt.LayerChart:
    """One window's MC estimate with its Wilson interval against M, CBS's LB_ε dashed and as a diamond at CBS's cost in
    samples, τ_min dotted; symlog y so that 0 and small masses both show. Hover gives the values; a click opens the window."""
    first = points[0]
    data = [r | {"id": r["example_id"], "interval": f"[{r['mc_low']:.3g}, {r['mc_high']:.3g}]"} for r in points]
    x = alt.X("samples:Q", title="Monte Carlo samples M", scale=alt.Scale(type="log"),
              axis=alt.Axis(values=[r["samples"] for r in points], format="d"))
    symlog = alt.Scale(type="symlog", constant=first["tau_min"], domain=[0, 1])
    y = alt.Y("mc_estimate:Q", title=f"P({first['distance']} ≤ {first['epsilon']}), symlog", scale=symlog,
              axis=alt.Axis(values=_probability_ticks(first["tau_min"]), format="~g"))
    tooltip = tooltips(alt.Tooltip("id:N", title="window"), "dataset:N", "cell:N", "samples:Q",
                       alt.Tooltip("mc_estimate:Q", title="MC estimate", format=".3g"), alt.Tooltip("interval:N", title="95% Wilson interval"),
                       alt.Tooltip("mc_token_evals:Q", title="MC token evaluations", format=",.0f"),
                       alt.Tooltip("cbs_lower:Q", title="CBS LB_ε", format=".3g"))
    base = alt.Chart(alt.Data(values=data))
    band = base.mark_area(opacity=0.2, clip=True).encode(x=x, y=alt.Y("mc_low:Q", scale=symlog), y2=alt.Y2("mc_high:Q"), tooltip=tooltip)
    line = base.mark_line(point=True, clip=True).encode(x=x, y=y, tooltip=tooltip).add_params(_zoom(view, ("x",)))
    refs = [{"y": first["cbs_lower"], "what": f"CBS LB_ε = {first['cbs_lower']:.3g}", "kind": "CBS LB_ε"},
            {"y": first["tau_min"], "what": f"τ_min = {first['tau_min']:g}", "kind": "τ_min"}]
    rules_ = alt.Chart(alt.Data(values=refs)).mark_rule().encode(
        y=alt.Y("y:Q", scale=symlog), tooltip=tooltips("what:N"),
        strokeDash=alt.StrokeDash("kind:N", title=None, scale=alt.Scale(domain=["CBS LB_ε", "τ_min"], range=[[6, 3], [2, 2]])),
        color=alt.Color("kind:N", title=None, scale=alt.Scale(domain=["CBS LB_ε", "τ_min"], range=["#ff7f0e", "grey"])))
    layers: list[Any] = [band, line, rules_]
    if first["cbs_samples_equivalent"] is not None and first["cbs_samples_equivalent"] > 0:
        star = [{"samples": first["cbs_samples_equivalent"], "cbs_lower": first["cbs_lower"], "id": first["example_id"],
                 "cell": first["cell"], "dataset": first["dataset"],
                 "what": f"CBS at its cost: {first['cbs_token_evals']} token evaluations ≈ M = {first['cbs_samples_equivalent']:.3g}"}]
        layers.append(alt.Chart(alt.Data(values=star)).mark_point(shape="diamond", size=160, filled=True, color="#ff7f0e", clip=True).encode(
            x=x, y=alt.Y("cbs_lower:Q", scale=symlog),
            tooltip=tooltips(alt.Tooltip("id:N", title="window"), "dataset:N", "cell:N", "what:N",
                             alt.Tooltip("cbs_lower:Q", title="LB_ε", format=".3g"))))
    return alt.layer(*layers, width=320, height=220,
                     title=f"{first['label']}, {first['dataset']}: window {first['example_id']}")


def mc_convergence_figure(rows: Rows) -> Spec:
    """One panel per cell and dataset: Monte Carlo convergence with CBS's certified lower bound (CBS Figs. 2 and 5)."""
    panels = [_convergence_panel(points, f"mc_{i}") for i, points in enumerate(_groups(rows, "cell", "dataset").values())]
    return _spec(alt.concat(*panels, columns=2, title="Monte Carlo estimate and its 95% interval against M; CBS's lower bound "
                                                      "(diamond: at CBS's cost in samples)"))


def mc_detection_rows(study: StudyData) -> Rows:
    """Per cell, target dataset and budget M: of the windows CBS certifies (LB_ε ≥ τ_min), how many Monte Carlo hit
    at least once, against the hit probability 1 − (1 − LB_ε)^M ≤ 1 − (1 − p_{z,ε})^M that CBS Table 1 inverts."""
    rows = []
    for cell in study.cells:
        epsilon, samples = mc_epsilon(cell), cell.config.mc.samples
        for dataset in study.target_datasets():
            lower = _lower(cell, dataset, cell.config.mc.distance)[:, epsilon]
            certified = rules.cbs_extracted(lower, cell.config.tau_min)
            estimate = _mc_column(cell, dataset, "mc_estimate")[certified][:, :, epsilon]
            with np.errstate(divide="ignore"):  # LB_ε = 1: log(1 − LB_ε) = −inf, a sure hit
                miss = np.log1p(-np.clip(lower[certified], 0.0, 1.0))
            for j, m in enumerate(samples):
                detected = int((estimate[:, j] > 0).sum())
                bound = -np.expm1(m * miss)
                rows.append(_head(cell, dataset) | {
                    "distance": cell.config.mc.distance, "epsilon": epsilon, "samples": m, "windows": int(lower.size),
                    "certified": int(certified.sum()), "detected": detected,
                    "detected_share": rules.fraction(detected, int(certified.sum())),
                    "hit_probability_at_least": float(bound.mean()) if bound.size else None,
                })
    return rows


def _candidates(cell: StudyCell, method: str) -> float | None:
    """Continuations a method returns per window (CBS Table 2): CBS's candidate count, MC's samples, one otherwise."""
    if method == "cbs":
        return float(np.mean([len(v) for v in cell.column("cbs_log_p")]))
    if method == "mc":
        return float(max(cell.config.mc.samples))
    return CANDIDATES_FIXED.get(method)


def cost_rows(study: StudyData) -> Rows:
    """Per cell and method: token evaluations per window (CBS App. C.3) and their ratio to greedy, wall seconds
    (`seconds.<method>`, the shared teacher-forcing pass as its own row) and candidates returned (CBS Table 2)."""
    rows = []
    for cell in study.cells:
        evals, seconds, windows = token_evals(cell.records), cell.wall_seconds(), cell.records.num_rows
        greedy = (evals.get("greedy") or {}).get("per_window")
        for method in dict.fromkeys([*seconds, *evals]):
            per_window, spent = (evals.get(method) or {}).get("per_window"), seconds.get(method)
            rows.append(_head(cell) | {
                "method": method, "windows": windows, "token_evals_per_window": per_window,
                "vs_greedy": per_window / greedy if per_window is not None and greedy else None,
                "seconds": spent, "seconds_per_window": spent / windows if spent is not None and windows else None,
                "candidates_per_window": _candidates(cell, method),
            })
    return rows


def verbatim_share_rows(study: StudyData) -> Rows:
    """Per cell, target dataset and extracted window (LB_E ≥ τ_min): LB_E, CBS's verbatim mass LB_0 and the verbatim
    share LB_0 / LB_E in % (CBS eq. 53; Figs. 4, 11b and 15b)."""
    rows = []
    for cell in study.cells:
        for dataset in study.target_datasets():
            lower = _lower(cell, dataset)
            extracted = rules.cbs_extracted(lower[:, -1], cell.config.tau_min)
            shares = rules.shell_shares(lower, cell.config.tau_min)[:, 0]
            for example_id, top, verbatim, share in zip(cell.column("example_id", dataset)[extracted], lower[extracted, -1],
                                                        lower[extracted, 0], shares):
                rows.append(_head(cell, dataset) | {
                    "example_id": str(example_id), "distance": _distance(cell), "epsilon": cell.config.cbs.epsilon,
                    "lower": float(top), "verbatim_mass": float(verbatim), "verbatim_share": 100.0 * float(share),
                })
    return rows


def verbatim_share_figure(rows: Rows) -> Spec:
    """Per dataset, the extracted windows' verbatim share per model, its median labelled (CBS Figs. 4, 11b and 15b)."""
    masses = [alt.Tooltip("verbatim_mass:Q", title="LB_0", format=".3g"), alt.Tooltip("lower:Q", title="LB_E", format=".3g")]
    panels = [_distribution(points, "verbatim_share", "verbatim share LB_0 / LB_E (%)", True, masses, f"share_{dataset}").properties(
        title=f"{dataset}: extracted windows (LB_E ≥ τ_min)") for (dataset,), points in _groups(rows, "dataset").items()]
    return _spec(alt.concat(*panels, columns=3, title="Verbatim share of the near-verbatim mass, per model"))


def _masses(cell: StudyCell, dataset: str) -> dict[str, float]:
    """LB_E of every window of a dataset, by example_id."""
    return dict(zip(map(str, cell.column("example_id", dataset)), _lower(cell, dataset)[:, -1].tolist()))


def common_set_rows(study: StudyData) -> Rows:
    """Per target dataset, every window some cell extracts (LB_E ≥ τ_min), matched by example_id, with its LB_E in
    each cell and whether every cell extracts it: the fixed set of CBS Fig. 20."""
    rows = []
    for dataset in study.target_datasets():
        masses = [_masses(cell, dataset) for cell in study.cells]
        extracted = [{i for i, v in m.items() if rules.cbs_extracted(v, c.config.tau_min)} for m, c in zip(masses, study.cells)]
        every = set.intersection(*extracted)
        for example_id in sorted(set.union(*extracted)):
            for cell, mass, chosen in zip(study.cells, masses, extracted):
                rows.append(_head(cell, dataset) | {
                    "example_id": example_id, "lower": mass.get(example_id), "extracted": example_id in chosen,
                    "by_every": example_id in every,
                })
    return rows


def common_set_figure(rows: Rows) -> Spec:
    """Per dataset: LB_E of the windows every model extracts, per model (CBS Fig. 20), and per model its extracted
    windows split into those every model extracts and those only some do (hover: k of the model's n)."""
    sets = legend_toggle("set", "common")
    panels = []
    for (dataset,), points in _groups(rows, "dataset").items():
        fixed = [r for r in points if r["by_every"] and r["lower"] is not None]
        mass = (_distribution(fixed, "lower", "LB_E on the windows every model extracts", False, [], f"common_{dataset}") if fixed
                else alt.Chart(alt.Data(values=[{"text": "no window is extracted by every model"}])).mark_text().encode(
                    text=alt.Text("text:N")).properties(width=200, height=260))
        counts = []
        for (label,), group in _groups(points, "label").items():
            extracted = sum(r["extracted"] for r in group)
            for kind, every in (("extracted by every model", True), ("extracted by this model, not every one", False)):
                k = sum(r["extracted"] and r["by_every"] == every for r in group)
                counts.append({"label": label, "cell": group[0]["cell"], "dataset": dataset, "set": kind, "windows": k,
                               "of": f"{k} of {extracted} windows this model extracts"})
        labels = list(dict.fromkeys(c["label"] for c in counts))
        bars = alt.Chart(alt.Data(values=counts)).mark_bar().encode(
            x=alt.X("label:N", title=None, sort=labels, axis=alt.Axis(labelAngle=0, labelLimit=200)),
            y=alt.Y("windows:Q", title="windows with LB_E ≥ τ_min", axis=alt.Axis(tickMinStep=1, format="d")),
            color=alt.Color("set:N", title=None, scale=alt.Scale(range=["#1f77b4", "#2ca02c"]), legend=alt.Legend(labelLimit=320)),
            opacity=alt.condition(sets, alt.value(1.0), alt.value(0.2)),
            tooltip=tooltips(alt.Tooltip("label:N", title="model"), "cell:N", "dataset:N", "set:N", alt.Tooltip("of:N", title="windows")),
        ).properties(width=max(160, 90 * len(labels)), height=260, title=f"{dataset}: extracted by every model vs by some")
        bars = bars if panels else bars.add_params(sets)
        panels.append(alt.hconcat(mass.properties(title=f"{dataset}: the fixed set"), bars).resolve_scale(xOffset="independent"))
    return _spec(alt.vconcat(*panels, title="The windows every model extracts, and each model's extracted set"))


def _heatmaps_apply(study: StudyData) -> bool:
    return (_compares_models(study) and study.has_method("probabilistic")
            and all(cell.config.windows.mode == "book" for cell in study.cells))


def heatmap_rows(study: StudyData) -> Rows:
    """Per cell and target-dataset window: its document, the character span of its suffix, p_z and LB_E, from which
    Fig. 21 draws the max per character position (CBS §F.1.4)."""
    rows = []
    for cell in study.cells:
        for dataset in study.target_datasets():
            columns = [cell.column(name, dataset) for name in ("example_id", "doc_id", "suffix_char_start", "char_end")]
            for example_id, doc_id, start, end, log_p, top in zip(*columns, _log_p(cell, dataset), _lower(cell, dataset)[:, -1]):
                rows.append(_head(cell, dataset) | {
                    "doc_id": str(doc_id), "example_id": str(example_id), "suffix_char_start": int(start), "char_end": int(end),
                    "p_z": float(np.exp(log_p)), "lower": float(top), "tau_min": cell.config.tau_min,
                })
    return rows


def heatmap_figure(rows: Rows) -> Spec:
    """Per document, each model's pair of strips, verbatim p_z and near-verbatim LB_E (CBS Fig. 21); hover a cell for the
    window with the largest probability there and its study cell, click it to open the window in that cell's explorer."""
    ordered = sorted(_groups(rows, "dataset", "doc_id", "cell").values(), key=lambda g: (g[0]["dataset"], g[0]["doc_id"]))
    heatmaps, ids, cells = [], [], []
    for points in ordered:
        first, offset = points[0], len(ids)
        starts, ends = (np.array([r[k] for r in points], dtype=np.int64) for k in ("suffix_char_start", "char_end"))
        (verbatim, verbatim_owner), (near, near_owner) = (
            coverage_max_owner(starts, ends, np.array([r[k] for r in points]), int(ends.max())) for k in ("p_z", "lower"))
        heatmaps.append(BookHeatmap(f"{first['label']} · {first['dataset']}", first["doc_id"], len(points), verbatim, near,
                                    np.where(verbatim_owner >= 0, verbatim_owner + offset, -1), np.where(near_owner >= 0, near_owner + offset, -1)))
        ids += [r["example_id"] for r in points]
        cells += [r["cell"] for r in points]
    spec = book_heatmap_chart(heatmaps, np.array(ids, dtype=object), min(r["tau_min"] for r in rows), "LB_E",
                              "Max p_z and LB_E per character, one pair of strips per model and document", np.array(cells, dtype=object))
    for layer in spec["spec"]["layer"]:
        if "tooltip" in layer["encoding"]:
            layer["encoding"]["tooltip"].append({"field": "cell", "type": "nominal"})
    return spec | {"padding": PADDING}


def _scatter_applies(study: StudyData) -> bool:
    near = any(cell.config.cbs.epsilon >= 1 for cell in study.cells)
    return study.has_method("cbs") and study.has_method("probabilistic") and near


def scatter_rows(study: StudyData) -> Rows:
    """Per cell, target-dataset window and ε = 0..E: log p_z (natural), LB_ε and the window's verdict at that ε
    (CBS Fig. 22: how windows are unlocked as ε grows)."""
    rows = []
    for cell in study.cells:
        for dataset in study.target_datasets():
            log_p, lower, ids = _log_p(cell, dataset), _lower(cell, dataset), cell.column("example_id", dataset)
            for epsilon in range(lower.shape[1]):
                verdicts = rules.verdicts(log_p, lower[:, epsilon], cell.config.tau_min)
                for example_id, lp, lb, verdict in zip(ids, log_p, lower[:, epsilon], verdicts):
                    rows.append(_head(cell, dataset) | {
                        "example_id": str(example_id), "distance": _distance(cell), "epsilon": epsilon, "log_p": float(lp),
                        "lower": float(lb), "verdict": str(verdict), "tau_min": cell.config.tau_min,
                    })
    return rows


def scatter_epsilons(largest: int) -> list[int]:
    """The ε panels of Fig. 22: 0 (the verbatim reference), 1 and the largest."""
    return sorted({0, min(1, largest), largest})


def scatter_grid_figure(rows: Rows) -> Spec:
    """One row of panels per cell and dataset, LB_ε against p_z at ε = 0, 1 and E, coloured as CBS Fig. 3 (CBS Fig. 22);
    a point opens its window in its cell's explorer."""
    lines = []
    for (cell, dataset), points in _groups(rows, "cell", "dataset").items():
        by_epsilon = _groups(points, "epsilon")
        panels = []
        for epsilon in scatter_epsilons(max(e for (e,) in by_epsilon)):
            shown = by_epsilon[(epsilon,)]
            first = shown[0]
            panel = verdict_scatter_chart(
                np.array([r["example_id"] for r in shown], dtype=object), np.array([r["dataset"] for r in shown], dtype=object),
                np.array([r["log_p"] for r in shown]), np.array([r["lower"] for r in shown]), first["tau_min"], f"LB_{epsilon}",
                cell=cell, view=f"{cell}_{dataset}_{epsilon}")
            extracted = sum(r["verdict"] != rules.NOT_EXTRACTED for r in shown)
            panels.append(panel.properties(width=250, height=220, title=[
                f"{first['label']}, {dataset}: {first['distance']} ε = {epsilon}", f"{extracted} of {len(shown)} windows extracted"]))
        lines.append(panels)
    return panel_grid(lines, padding=PADDING, resolve={"scale": {"color": "shared"}}, title={
        "text": "LB_ε against p_z as ε grows: windows unlocked by near-verbatim extraction",
        "subtitle": "p_z = 0 and LB_ε = 0 are drawn on the dashed lines a decade below the smallest value; y = x dashed"})


def _pruning_applies(study: StudyData) -> bool:
    return study.has_method("cbs") and (study.varies(PRUNE) or study.varies(EPSILON))


def _setting(cell: StudyCell) -> str:
    """The cell's changes other than pruning and ε: the panel it belongs to in Fig. 26."""
    return _describe({k: v for k, v in cell.changes.items() if k not in (PRUNE, EPSILON)}) or "all cells"


def _runs(cells: list[StudyCell], distance: str) -> list[tuple[str, StudyCell]]:
    """Fig. 26's rows of one panel: baseline k-CBS (the unpruned cell of largest ε) first, then the cells pruned
    with `distance` by ε."""
    baseline = [c for c in cells if c.config.cbs.prune_mode is None]
    pruned = sorted((c for c in cells if c.config.cbs.prune_mode == distance), key=lambda c: c.config.cbs.epsilon)
    runs = [("baseline", max(baseline, key=lambda c: c.config.cbs.epsilon))] if baseline else []
    return runs + [(f"{distance} ε={c.config.cbs.epsilon}", c) for c in pruned]


def _counts(cell: StudyCell, dataset: str, distance: str, thresholds: int) -> list[int | None]:
    """Windows with LB_d ≥ τ_min at each evaluation threshold d < `thresholds` (None beyond the run's ε)."""
    lower = _lower(cell, dataset, distance)
    return [int(rules.cbs_extracted(lower[:, d], cell.config.tau_min).sum()) if d < lower.shape[1] else None
            for d in range(thresholds)]


def pruning_rows(study: StudyData) -> Rows:
    """Per setting of the other axes, target dataset, pruning distance, run (baseline or pruned at ε) and evaluation
    threshold d: windows with LB_d ≥ τ_min and the difference from baseline k-CBS (CBS Fig. 26)."""
    rows = []
    settings: dict[str, list[StudyCell]] = {}
    for cell in study.cells:
        settings.setdefault(_setting(cell), []).append(cell)
    for setting, cells in settings.items():
        thresholds = 1 + max(c.config.cbs.epsilon for c in cells)
        distances = [d for d in DISTANCES if any(c.config.cbs.prune_mode == d for c in cells)] or [DISTANCES[0]]
        for dataset in study.target_datasets():
            for distance in distances:
                rows += _pruning_panel(setting, dataset, distance, _runs(cells, distance), thresholds)
    return rows


def _pruning_panel(setting: str, dataset: str, distance: str, runs: list[tuple[str, StudyCell]], thresholds: int) -> Rows:
    counts = {run: _counts(cell, dataset, distance, thresholds) for run, cell in runs}
    base = counts.get("baseline", [None] * thresholds)
    return [
        {"setting": setting, "dataset": dataset, "distance": distance, "run": run, "cell": cell.name,
         "prune": cell.config.cbs.prune, "run_epsilon": cell.config.cbs.epsilon, "threshold": d,
         "windows": len(cell.column("example_id", dataset)), "extractable": counts[run][d], "baseline": base[d],
         "difference": counts[run][d] - base[d] if counts[run][d] is not None and base[d] is not None else None}
        for run, cell in runs for d in range(thresholds)
    ]


def _pruning_matrix(points: Rows) -> alt.LayerChart:
    """Runs × thresholds: the count in each cell, blue above baseline and red below (white without a baseline cell),
    grey where d exceeds the run's ε; hover gives the count as k of n windows, the baseline's and the difference."""
    runs = list(dict.fromkeys(r["run"] for r in points))
    bound = max([1] + [abs(r["difference"]) for r in points if r["difference"] is not None])
    data = [r | {"d": f"≤ {r['threshold']}", "shown": "n/a" if r["extractable"] is None else str(r["extractable"]),
                 "of": f"d > the run's ε = {r['run_epsilon']}" if r["extractable"] is None else f"{r['extractable']} of {r['windows']}",
                 "change": r["difference"] or 0, "strong": abs(r["difference"] or 0) > 0.6 * bound} for r in points]
    x = alt.X("d:O", title=f"evaluation threshold d ({points[0]['distance']})", sort=[f"≤ {t}" for t in sorted({r['threshold'] for r in points})],
              axis=alt.Axis(labelAngle=0))
    y = alt.Y("run:N", title=None, sort=runs, axis=alt.Axis(labelLimit=200))
    tooltip = tooltips("run:N", "cell:N", "d:O", alt.Tooltip("of:N", title="windows with LB_d ≥ τ_min"), alt.Tooltip("baseline:Q", title="baseline"),
                       alt.Tooltip("difference:Q", title="− baseline"))
    base = alt.Chart(alt.Data(values=data))
    legend = alt.Legend(tickMinStep=1, format="d") if "baseline" in runs else None
    counted = base.transform_filter("datum.extractable !== null").mark_rect(stroke="white").encode(
        x=x, y=y, tooltip=tooltip, color=alt.Color(
            "change:Q", title="windows − baseline", scale=alt.Scale(scheme="redblue", domain=[-bound, bound]), legend=legend))
    missing = base.transform_filter("datum.extractable === null").mark_rect(stroke="white", color="#bdbdbd").encode(
        x=x, y=y, tooltip=tooltip)
    text = base.mark_text(fontSize=11).encode(
        x=x, y=y, text=alt.Text("shown:N"), color=alt.condition("datum.strong", alt.value("white"), alt.value("#222")), tooltip=tooltip)
    return alt.layer(counted, missing, text, width=60 * len({r["threshold"] for r in points}), height=28 * len(runs))


def pruning_figure(rows: Rows) -> Spec:
    """One matrix per setting, dataset and pruning distance: extractable windows per run and threshold (CBS Fig. 26)."""
    panels = [_pruning_matrix(points).properties(title=f"{setting}, {dataset}: {distance}-pruned runs")
              for (setting, dataset, distance), points in _groups(rows, "setting", "dataset", "distance").items()]
    return _spec(alt.concat(*panels, columns=2, title="Extractable windows of baseline and ε-pruned k-CBS"))


def _text_metrics_apply(study: StudyData) -> bool:
    return study.has_method("cbs") and all(cell.config.cbs.text_metrics for cell in study.cells)


def text_metric_rows(study: StudyData) -> Rows:
    """Per cell and target dataset, on the baseline k-CBS candidates: windows extractable verbatim (LB_0), within
    Levenshtein ε = E, with BLEU ≥ threshold, both, only one, and within each character distance (CBS Table 15)."""
    rows = []
    for cell in study.cells:
        c, tau = cell.config.cbs, cell.config.tau_min
        for dataset in study.target_datasets():
            baseline = _bounds(cell, dataset, "cbs_baseline_lower.levenshtein")
            lev, verbatim = rules.cbs_extracted(baseline[:, -1], tau), rules.cbs_extracted(baseline[:, 0], tau)
            bleu = rules.cbs_extracted(cell.column("cbs_bleu_mass", dataset).astype(np.float64), tau)
            chars = np.array([list(v) for v in cell.column("cbs_char_levenshtein_mass", dataset)], dtype=np.float64)
            rows.append(_head(cell, dataset) | {
                "windows": int(lev.size), "bleu_threshold": c.bleu_threshold, "levenshtein_epsilon": c.epsilon,
                "verbatim": int(verbatim.sum()), "levenshtein": int(lev.sum()), "bleu": int(bleu.sum()),
                "both": int((lev & bleu).sum()), "levenshtein_only": int((lev & ~bleu).sum()),
                "bleu_only": int((bleu & ~lev).sum()),
            } | _char_counts(chars.reshape(lev.size, len(c.char_epsilons)), c.char_epsilons, tau))
    return rows


def _char_counts(masses: np.ndarray, epsilons: Iterable[int], tau: float) -> dict[str, int]:
    return {f"char_levenshtein_{e}": int(rules.cbs_extracted(masses[:, i], tau).sum()) for i, e in enumerate(epsilons)}


FIGURES: tuple[PaperFigure, ...] = (
    PaperFigure("cbs-fig2-5-mc-convergence", "CBS", "Figs. 2 and 5",
                "Monte Carlo estimate of p_{z,ε} with its 95% interval against the number of samples, for the window with "
                "the largest CBS lower bound, and LB_ε at the number of samples that costs what CBS spent",
                _mc_applies, mc_convergence_rows, mc_convergence_figure),
    PaperFigure("cbs-table1-mc-detection", "CBS", "Table 1",
                "Monte Carlo detection at each sample budget of the windows CBS certifies extractable, against the hit "
                "probability their lower bounds guarantee",
                _mc_applies, mc_detection_rows),
    PaperFigure("cbs-table2-cost", "CBS", "Table 2",
                "token evaluations per window (and their ratio to greedy), wall time and candidates returned, "
                "per method and cell",
                lambda study: study.has_method("cbs"), cost_rows),
    PaperFigure("cbs-fig4-verbatim-share", "CBS", "Figs. 4, 11b and 15b",
                "distribution of the verbatim share LB_0 / LB_E over each model's extracted windows, medians annotated",
                _compares_models, verbatim_share_rows, verbatim_share_figure),
    PaperFigure("cbs-fig20-common-set", "CBS", "Fig. 20",
                "near-verbatim mass LB_E of the windows every model extracts, and each model's extracted set split into "
                "windows every model extracts and windows only some do",
                _compares_models, common_set_rows, common_set_figure),
    PaperFigure("cbs-fig21-heatmaps", "CBS", "Fig. 21",
                "max verbatim p_z and near-verbatim LB_E per character position of each book, one pair of strips per model",
                _heatmaps_apply, heatmap_rows, heatmap_figure),
    PaperFigure("cbs-fig22-scatter-by-epsilon", "CBS", "Fig. 22",
                "LB_ε against p_z at ε = 0, 1 and E: windows unlocked by near-verbatim extraction as ε grows",
                _scatter_applies, scatter_rows, scatter_grid_figure),
    PaperFigure("cbs-fig23-25-beam-width", "CBS", "Figs. 23–25",
                "near-verbatim extraction rate, mean extraction mass and CBS wall time against beam width B",
                _beam_sweep_applies, beam_sweep_rows, beam_sweep_figure),
    PaperFigure("cbs-fig26-pruning", "CBS", "Fig. 26",
                "extractable windows of baseline and ε-pruned k-CBS at each evaluation threshold d, against baseline",
                _pruning_applies, pruning_rows, pruning_figure),
    PaperFigure("cbs-table15-text-metrics", "CBS", "Table 15",
                "windows extractable under verbatim, Levenshtein ε = E, BLEU ≥ threshold and character distances on "
                "the baseline k-CBS candidates, and the Levenshtein/BLEU overlap",
                _text_metrics_apply, text_metric_rows),
)
