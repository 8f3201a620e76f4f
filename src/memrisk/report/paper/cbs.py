"""Figures and tables of the CBS paper (near-verbatim extraction risk by decoding-constrained beam search), from a study.

Every number is recomputed from the cells' records with the rules of `memrisk.rules`; figures that compare
models apply when a model setting varies between cells, and match windows across cells by `example_id`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator, NullFormatter

from memrisk import rules
from memrisk.methods.cbs import DISTANCES
from memrisk.methods.monte_carlo import MAX_ROWS, estimates
from memrisk.report.figures import SERIES, new_figure, no_data, plain, position_heatmap_figure, scatter_panel
from memrisk.report.metrics import BookHeatmap, coverage_max, token_evals
from memrisk.report.paper.base import PaperFigure, Rows
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


def _grid(count: int, width: float, height: float, columns: int = 3) -> tuple[Figure, list[Axes]]:
    """A figure of `count` panels, at most `columns` a row; unused panels hidden."""
    cols = max(1, min(count, columns))
    rows = max(1, math.ceil(count / cols))
    fig = new_figure(width * cols, height * rows)
    axes = list(fig.subplots(rows, cols, squeeze=False).ravel())
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes[:count]


def _groups(rows: Rows, *keys: str) -> dict[tuple, Rows]:
    """Rows grouped by the values of `keys`, groups and rows in first-seen order."""
    out: dict[tuple, Rows] = {}
    for row in rows:
        out.setdefault(tuple(row[k] for k in keys), []).append(row)
    return out


def _violins(ax: Axes, series: list[tuple[str, np.ndarray]], percent: bool) -> None:
    """One violin per named series with its median annotated (a single value drawn as a bar); empty series skipped."""
    for position, (_, values) in enumerate(series):
        if not values.size:
            continue
        if np.unique(values).size > 1:
            for body in ax.violinplot([values], positions=[position], widths=0.8, showextrema=False)["bodies"]:
                body.set_alpha(0.5)
        else:
            ax.scatter([position], [values[0]], marker="_", s=300, color=SERIES[0])
        median = float(np.median(values))
        ax.scatter([position], [median], color="black", s=12, zorder=3)
        ax.annotate(f"{median:.1f}%" if percent else f"{median:.3g}", (position, median), textcoords="offset points",
                    xytext=(6, 4), fontsize=8)
    ax.set_xticks(range(len(series)), [f"{plain(name)}\n({values.size})" for name, values in series], fontsize=8)
    ax.set_xlim(-0.6, len(series) - 0.4)


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


def beam_sweep_figure(rows: Rows) -> Figure:
    """Three panels against B, the target datasets pooled: extraction rate and mean mass of the extractable windows per
    ε (colour) and pruning (line style), and CBS wall time per pruning mode."""
    fig = new_figure(11.5, 3.6)
    rate_ax, mass_ax, time_ax = fig.subplots(1, 3)
    pooled = _pooled_sweep(rows)
    epsilons = sorted({epsilon for _, _, epsilon in pooled})
    colours = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.9, max(len(epsilons), 1)))
    models = sorted({model for model, _, _ in pooled})
    styles = dict(zip(sorted({prune for _, prune, _ in pooled}), ("-", "--", ":", "-.")))
    for (model, prune, epsilon), points in pooled.items():
        widths = sorted(points)
        style = {"color": colours[epsilons.index(epsilon)], "ls": styles[prune], "marker": "os^D"[models.index(model) % 4]}
        rate_ax.plot(widths, [points[b][1] / points[b][0] if points[b][0] else np.nan for b in widths], **style)
        mass_ax.plot(widths, [points[b][2] / points[b][1] if points[b][1] else np.nan for b in widths], **style)
    timed: dict[tuple, dict[int, float]] = {}
    for row in rows:
        timed.setdefault((row["model"], row["prune"]), {})[row["beam_width"]] = row["cbs_minutes"]
    for (model, prune), minutes in timed.items():
        widths = sorted(minutes)
        time_ax.plot(widths, [minutes[b] * 60 for b in widths], color="black", ls=styles[prune], marker="os^D"[models.index(model) % 4])
    windows = {b: n for points in pooled.values() for b, (n, _, _) in points.items()}
    rate_ax.set(xlabel="beam width B", ylabel=f"share of the {max(windows.values(), default=0)} windows with LB_ε ≥ τ_min",
                title="Fig. 23: extraction rate")
    mass_ax.set(xlabel="beam width B", ylabel="mean LB_ε of the extractable windows", title="Fig. 24: extraction mass")
    time_ax.set(xlabel="beam width B", ylabel="CBS wall time (s)", title="Fig. 25: wall time")
    for ax in (rate_ax, mass_ax, time_ax):
        ax.set_xticks(sorted(windows))
    handles = [Line2D([], [], color=colours[i], marker="o", label=f"ε = {epsilon}") for i, epsilon in enumerate(epsilons)]
    handles += [Line2D([], [], color="black", ls=style, label=f"prune = {prune}") for prune, style in styles.items()]
    if len(models) > 1:
        handles += [Line2D([], [], color="grey", ls="", marker="os^D"[i % 4], label=plain(Path(str(m)).name)) for i, m in enumerate(models)]
    fig.legend(handles=handles, fontsize=7, loc="outside right upper")
    return fig


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


def _convergence_panel(ax: Axes, points: Rows) -> None:
    """One window's MC estimate with its interval against M, and CBS's LB_ε as a star at CBS's cost in samples."""
    first = points[0]
    m = [r["samples"] for r in points]
    ax.fill_between(m, [r["mc_low"] for r in points], [r["mc_high"] for r in points], color=SERIES[0], alpha=0.2,
                    label="MC 95% Wilson interval")
    ax.plot(m, [r["mc_estimate"] for r in points], marker="o", color=SERIES[0], label="MC estimate p̂_z,ε")
    ax.axhline(first["cbs_lower"], ls="--", color=SERIES[1], lw=1.0, label=f"CBS LB_ε = {first['cbs_lower']:.3g}")
    if first["cbs_samples_equivalent"] is not None and first["cbs_samples_equivalent"] > 0:
        ax.scatter([first["cbs_samples_equivalent"]], [first["cbs_lower"]], marker="*", s=140, color=SERIES[1], zorder=3,
                   label=f"CBS at its cost: {first['cbs_token_evals']} token evals ≈ M = {first['cbs_samples_equivalent']:.3g}")
    ax.axhline(first["tau_min"], ls=":", color="grey", lw=1.0, label=f"τ_min = {first['tau_min']:g}")
    ax.set_xscale("log")
    ax.set_xticks(m, [str(x) for x in m], minor=False)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yscale("symlog", linthresh=first["tau_min"])
    ax.set_ylim(0.0, 1.05)
    ax.set_xlabel("Monte Carlo samples M (log scale)")
    ax.set_ylabel(f"P({first['distance']} ≤ {first['epsilon']}), symlog")
    ax.set_title(plain(f"{first['label']}: {first['example_id']}"), fontsize=8)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def mc_convergence_figure(rows: Rows) -> Figure:
    """One panel per cell and dataset: Monte Carlo convergence with CBS's certified lower bound (CBS Fig. 5)."""
    groups = _groups(rows, "cell", "dataset")
    fig, axes = _grid(len(groups), 7.0, 3.6, columns=2)
    for ax, points in zip(axes, groups.values()):
        _convergence_panel(ax, points)
    return fig


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


def verbatim_share_figure(rows: Rows) -> Figure:
    """Per dataset, one violin per model of the extracted windows' verbatim share, medians annotated (CBS Fig. 4)."""
    datasets = _groups(rows, "dataset")
    fig, axes = _grid(len(datasets), 1.6 + 1.3 * len(_groups(rows, "cell")), 3.8)
    for ax, ((dataset,), points) in zip(axes, datasets.items()):
        series = [(label, np.array([r["verbatim_share"] for r in group])) for (label,), group in _groups(points, "label").items()]
        _violins(ax, series, percent=True)
        ax.set_ylim(-5.0, 105.0)
        ax.set_title(plain(f"{dataset}: extracted windows (LB_E ≥ τ_min)"), fontsize=9)
        ax.set_ylabel("verbatim share LB_0 / LB_E (%)")
    return fig


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


def common_set_figure(rows: Rows) -> Figure:
    """Per dataset: LB_E of the windows every model extracts, one violin per model (CBS Fig. 20), and per model its
    extracted windows split into those every model extracts and those only some do."""
    datasets = _groups(rows, "dataset")
    cells = len(_groups(rows, "cell"))
    fig = new_figure(3.0 + 2.6 * cells, 3.8 * len(datasets))
    for (mass_ax, count_ax), ((dataset,), points) in zip(fig.subplots(len(datasets), 2, squeeze=False), datasets.items()):
        by_label = _groups(points, "label")
        series = [(label, np.array([r["lower"] for r in group if r["by_every"]], dtype=np.float64))
                  for (label,), group in by_label.items()]
        if any(values.size for _, values in series):
            _violins(mass_ax, series, percent=False)
            mass_ax.set_ylim(0.0, 1.05)
        else:
            no_data(mass_ax, "no window is extracted by every model")
        mass_ax.set_ylabel("LB_E on the windows every model extracts")
        mass_ax.set_title(plain(f"{dataset}: the fixed set (CBS Fig. 20)"), fontsize=9)
        _count_bars(count_ax, by_label)
        count_ax.set_title(plain(f"{dataset}: extracted by every model vs by some"), fontsize=9)
    return fig


def _count_bars(ax: Axes, by_label: dict[tuple, Rows]) -> None:
    """Stacked bars per model: its extracted windows that every model extracts, and the rest."""
    labels = [label for (label,) in by_label]
    every = [sum(r["extracted"] and r["by_every"] for r in group) for group in by_label.values()]
    some = [sum(r["extracted"] and not r["by_every"] for r in group) for group in by_label.values()]
    positions = np.arange(len(labels))
    ax.bar(positions, every, color=SERIES[0], label="extracted by every model")
    ax.bar(positions, some, bottom=every, color=SERIES[2], label="extracted by this model, not every one")
    ax.set_xticks(positions, [plain(label) for label in labels], fontsize=8)
    ax.set_ylabel("windows with LB_E ≥ τ_min")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, max(e + s for e, s in zip(every, some)) * 1.35 + 1)
    ax.legend(fontsize=7, loc="upper left")


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


def _heatmap(points: Rows) -> BookHeatmap:
    """One model's strips over one document from its windows' rows; `dataset` names the model too."""
    first = points[0]
    starts, ends = (np.array([r[k] for r in points], dtype=np.int64) for k in ("suffix_char_start", "char_end"))
    maps = [coverage_max(starts, ends, np.array([r[k] for r in points]), int(ends.max())) for k in ("p_z", "lower")]
    return BookHeatmap(f"{first['label']} · {first['dataset']}", first["doc_id"], len(points), *maps)


def heatmap_figure(rows: Rows) -> Figure:
    """Per document, each model's pair of strips, verbatim p_z and near-verbatim LB_E, one under another (CBS Fig. 21)."""
    ordered = sorted(_groups(rows, "dataset", "doc_id", "cell").values(), key=lambda g: (g[0]["dataset"], g[0]["doc_id"]))
    return position_heatmap_figure([_heatmap(points) for points in ordered], min(r["tau_min"] for r in rows), "LB_E")


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


def scatter_grid_figure(rows: Rows) -> Figure:
    """One row of panels per cell and dataset, LB_ε against p_z at ε = 0, 1 and E, coloured as CBS Fig. 3."""
    groups = _groups(rows, "cell", "dataset")
    columns = max(len(scatter_epsilons(max(r["epsilon"] for r in g))) for g in groups.values())
    fig = new_figure(4.2 * columns, 3.9 * len(groups))
    for axes, points in zip(fig.subplots(len(groups), columns, squeeze=False), groups.values()):
        by_epsilon = _groups(points, "epsilon")
        epsilons = scatter_epsilons(max(e for (e,) in by_epsilon))
        for ax in axes[len(epsilons):]:
            ax.set_visible(False)
        for ax, epsilon in zip(axes, epsilons):
            shown = by_epsilon[(epsilon,)]
            first = shown[0]
            scatter_panel(ax, np.array([r["log_p"] for r in shown]), np.array([r["lower"] for r in shown]), first["tau_min"],
                          f"LB_{epsilon}", legend_size=6)
            ax.set_title(plain(f"{first['label']}, {first['dataset']}: {first['distance']} ε = {epsilon}"), fontsize=8)
    return fig


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


def _pruning_matrix(ax: Axes, points: Rows) -> None:
    """Runs × thresholds: the count in each cell, blue above baseline and red below (white without a baseline cell),
    grey where d exceeds the run's ε."""
    runs = list(dict.fromkeys(r["run"] for r in points))
    diff = np.full((len(runs), 1 + max(r["threshold"] for r in points)), np.nan)
    for r in points:
        if r["extractable"] is not None:
            diff[runs.index(r["run"]), r["threshold"]] = r["difference"] or 0
    bound = max(1.0, float(np.nanmax(np.abs(diff), initial=0.0)))
    cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#bdbdbd")
    image = ax.imshow(np.ma.masked_invalid(diff), cmap=cmap, norm=TwoSlopeNorm(0.0, -bound, bound), aspect="auto")
    for r in points:
        strong = abs(r["difference"] or 0) > 0.6 * bound
        ax.text(r["threshold"], runs.index(r["run"]), "n/a" if r["extractable"] is None else str(r["extractable"]),
                ha="center", va="center", fontsize=8, color="white" if strong else "#222")
    ax.set_xticks(range(diff.shape[1]), [f"≤ {d}" for d in range(diff.shape[1])])
    ax.set_yticks(range(len(runs)), runs, fontsize=8)
    ax.set_xlabel(f"evaluation threshold d ({points[0]['distance']})")
    if "baseline" in runs:
        ax.figure.colorbar(image, ax=ax, label="windows − baseline", shrink=0.8, ticks=MaxNLocator(integer=True))


def pruning_figure(rows: Rows) -> Figure:
    """One matrix per setting, dataset and pruning distance: extractable windows per run and threshold (CBS Fig. 26)."""
    panels = _groups(rows, "setting", "dataset", "distance")
    height = 1.2 + 0.45 * max(len({r["run"] for r in p}) for p in panels.values())
    fig, axes = _grid(len(panels), max(4.6, 2.4 + 0.7 * (1 + max(r["threshold"] for r in rows))), height, columns=2)
    for ax, ((setting, dataset, distance), points) in zip(axes, panels.items()):
        _pruning_matrix(ax, points)
        ax.set_title(plain(f"{setting}, {dataset}: {distance}-pruned runs"), fontsize=9)
    return fig


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
