"""Figures of the (n,p) paper (probabilistic discoverable extraction), from a study: Fig. 2 (sampling against teacher
forcing), Figs. 5, 12, 14–17 ((n,p) curves across models and policies), Fig. 13 (p_z histograms), Fig. 6 (duplicates).

p_z is always read as natural-log `log_p.<policy>` and compared in log space (memrisk.extraction.rates, memrisk.rules).
"""

from __future__ import annotations

import math
from itertools import cycle
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from memrisk import rules
from memrisk.extraction.rates import is_extractable, p_reached
from memrisk.methods.monte_carlo import estimates
from memrisk.report.figures import SERIES, new_figure, np_curves_axes, plain
from memrisk.report.metrics import np_curves
from memrisk.report.paper.base import PaperFigure, Rows, series_names
from memrisk.report.study_data import StudyCell, StudyData

POLICY_PANEL_P = (0.1, 0.9)
"""The p of Fig. 12's two panels ((n,p) paper App. F: "We fix p to either 0.1 or 0.9")."""
HISTOGRAM_N = 100
"""Fig. 13's second row: the probability of sampling the suffix within n = 100 generations."""
DUPLICATE_POINTS = ((10, 0.1), (1000, 0.1), (10, 0.9), (1000, 0.9))
"""The (n, p) settings Fig. 6 draws next to the greedy and p_z ≥ τ_min rates."""
P_STYLES = ("-", "--", "-.", ":")


def target_values(study: StudyData, cell: StudyCell, column: str) -> np.ndarray:
    """One record column over the cell's target windows (every dataset whose role is not `control`)."""
    parts = [cell.column(column, dataset) for dataset in study.target_datasets()]
    return np.concatenate(parts) if parts else np.empty(0)


def policy_labels(study: StudyData) -> list[str]:
    """Every policy label of the study's cells, in first-seen order."""
    return list(dict.fromkeys(p.label for cell in study.cells for p in cell.config.policies))


def _curves_apply(study: StudyData) -> bool:
    return study.has_method("probabilistic") and (study.varies("model.name") or len(policy_labels(study)) > 1)


def _models_apply(study: StudyData) -> bool:
    return study.has_method("probabilistic") and study.varies("model.name")


def _policies_apply(study: StudyData) -> bool:
    return study.has_method("probabilistic") and len(policy_labels(study)) > 1


def curve_rows(study: StudyData) -> Rows:
    """Per cell and policy, over the target windows: the (n,p)-extraction rate, the share with 1 − (1 − p_z)^n ≥ p
    ((n,p) paper eq. 2), at each p and n of metrics.np_curves' grid, with the greedy verbatim rate and the max rate
    (share with p_z > 0, the paper's Fig. 4)."""
    rows = []
    for cell in study.cells:
        greedy = target_values(study, cell, "greedy_exact").astype(bool) if "greedy" in cell.config.methods else None
        for policy in cell.config.policies:
            curves = np_curves(target_values(study, cell, f"log_p.{policy.label}").astype(np.float64), greedy)
            for p in curves["p_grid"]:
                rows += [{"cell": cell.name, "model": cell.config.model.name, "policy": policy.label, "windows": curves["count"],
                          "p": p, "n": n, "rate": rate, "greedy_rate": curves["greedy"], "max_rate": curves["max_rate"]}
                         for n, rate in zip(curves["n_grid"], curves["rates"][f"{p:g}"])]
    return rows


def curves_of(rows: Rows) -> dict[tuple[str, str], dict[str, Any]]:
    """The rows of each (cell, policy) back in metrics.np_curves' form, with the cell's model."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        entry = out.setdefault((row["cell"], row["policy"]), {
            "model": row["model"], "count": row["windows"], "greedy": row["greedy_rate"], "max_rate": row["max_rate"],
            "p_grid": [], "n_grid": [], "rates": {}})
        key = f"{row['p']:g}"
        if key not in entry["rates"]:
            entry["p_grid"].append(row["p"])
            entry["rates"][key] = []
        entry["rates"][key].append(row["rate"])
        if len(entry["p_grid"]) == 1:
            entry["n_grid"].append(row["n"])
    return out


def _cell_names(curves: dict[tuple[str, str], dict[str, Any]]) -> dict[str, str]:
    cells = list(dict.fromkeys(cell for cell, _ in curves))
    return series_names(cells, [next(e["model"] for (c, _), e in curves.items() if c == cell) for cell in cells])


def grid_figure(rows: Rows) -> Figure:
    """One (n,p) panel per cell (rows) and policy (columns): (n,p) paper Figs. 14–17, models × sampling schemes."""
    curves = curves_of(rows)
    names = _cell_names(curves)
    policies = list(dict.fromkeys(policy for _, policy in curves))
    fig = new_figure(4.4 * len(policies), 3.5 * len(names))
    axes = fig.subplots(len(names), len(policies), squeeze=False)
    for i, cell in enumerate(names):
        for j, policy in enumerate(policies):
            entry = curves.get((cell, policy))
            if entry is None:
                axes[i, j].set_axis_off()
                continue
            np_curves_axes(axes[i, j], f"{names[cell]}, {policy} ({entry['count']} windows)", entry)
    return fig


def models_figure(rows: Rows) -> Figure:
    """(n,p) paper Fig. 5: per policy one panel, a colour per model (cell), a line style per p, greedy rates as
    thick translucent lines in the model's colour."""
    curves = curves_of(rows)
    names = _cell_names(curves)
    policies = list(dict.fromkeys(policy for _, policy in curves))
    fig = new_figure(6.8 * len(policies), 4.6)
    for ax, policy in zip(fig.subplots(1, len(policies), squeeze=False)[0], policies):
        for colour, cell in zip(cycle(SERIES), names):
            entry = curves.get((cell, policy))
            if entry is None or not entry["count"]:
                continue
            for style, p in zip(cycle(P_STYLES), entry["p_grid"]):
                ax.plot(entry["n_grid"], [100.0 * r for r in entry["rates"][f"{p:g}"]], color=colour, ls=style,
                        label=plain(f"{names[cell]}, p = {p:g}"))
            if entry["greedy"] is not None:
                ax.axhline(100.0 * entry["greedy"], color=colour, lw=3.0, alpha=0.35, label=plain(f"{names[cell]}: greedy"))
        ax.set_xscale("log")
        ax.set(title=plain(f"policy {policy}"), xlabel="n (number of generations)", ylabel="(n,p)-extraction rate, %")
        ax.legend(fontsize=6, ncol=2)
    return fig


def policies_figure(rows: Rows) -> Figure:
    """(n,p) paper Fig. 12: at p = 0.1 and p = 0.9 one panel each, a colour per policy and a line style per cell,
    the greedy rates in black."""
    curves = curves_of(rows)
    names = _cell_names(curves)
    colours = dict(zip(dict.fromkeys(policy for _, policy in curves), cycle(SERIES)))
    styles = dict(zip(names, cycle(P_STYLES)))
    fig = new_figure(13.0, 4.6)
    for ax, p in zip(fig.subplots(1, len(POLICY_PANEL_P), squeeze=False)[0], POLICY_PANEL_P):
        for (cell, policy), entry in curves.items():
            if entry["count"] and f"{p:g}" in entry["rates"]:
                label = f"{policy}, {names[cell]}" if len(names) > 1 else policy
                ax.plot(entry["n_grid"], [100.0 * r for r in entry["rates"][f"{p:g}"]], color=colours[policy], ls=styles[cell],
                        label=plain(label))
        for cell, entry in {cell: e for (cell, _), e in curves.items() if e["greedy"] is not None}.items():
            ax.axhline(100.0 * entry["greedy"], color="black", ls=styles[cell], lw=1.0,
                       label=plain(f"greedy, {names[cell]}" if len(names) > 1 else "greedy"))
        ax.set_xscale("log")
        ax.set(title=f"p = {p:g}", xlabel="n (number of generations)", ylabel="(n,p)-extraction rate, %")
        ax.legend(fontsize=7)
    return fig


def pz_rows(study: StudyData) -> Rows:
    """Per cell, policy and target window: log p_z, log10 of the suffix's perplexity under the policy, −log10 p_z / T
    (None when p_z = 0), and the probability of sampling it within n = 100 generations ((n,p) paper Fig. 13)."""
    rows = []
    for cell in study.cells:
        ids = target_values(study, cell, "example_id")
        length = cell.config.windows.suffix_length
        for policy in cell.config.policies:
            log_p = target_values(study, cell, f"log_p.{policy.label}").astype(np.float64)
            within = p_reached(log_p, HISTOGRAM_N)
            rows += [{"cell": cell.name, "model": cell.config.model.name, "policy": policy.label, "example_id": str(i),
                      "log_p": float(lp), "log10_perplexity": -float(lp) / (length * math.log(10.0)) if np.isfinite(lp) else None,
                      f"p_within_{HISTOGRAM_N}": float(w)} for i, lp, w in zip(ids, log_p, within)]
    return rows


def histogram_figure(rows: Rows) -> Figure:
    """(n,p) paper Fig. 13: a column per policy and per cell (model) two rows, the suffix perplexities and the
    probabilities of sampling the suffix within n = 100 generations; windows with p_z = 0 are counted, not drawn."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["cell"], row["policy"]), []).append(row)
    cells = list(dict.fromkeys(c for c, _ in groups))
    policies = list(dict.fromkeys(p for _, p in groups))
    names = series_names(cells, [groups[next(k for k in groups if k[0] == c)][0]["model"] for c in cells])
    fig = new_figure(3.4 * len(policies), 5.6 * len(cells))
    axes = fig.subplots(2 * len(cells), len(policies), squeeze=False)
    for (cell, policy), part in groups.items():
        top, bottom = axes[2 * cells.index(cell), policies.index(policy)], axes[2 * cells.index(cell) + 1, policies.index(policy)]
        drawn = [r for r in part if r["log10_perplexity"] is not None]
        top.hist([r["log10_perplexity"] for r in drawn], bins=20, color=SERIES[0])
        bottom.hist([r[f"p_within_{HISTOGRAM_N}"] for r in drawn], bins=20, range=(0.0, 1.0), color=SERIES[2])
        top.set(title=plain(f"{names[cell]}, {policy}\n{len(part) - len(drawn)} of {len(part)} with p_z = 0"),
                xlabel="log10 perplexity of the suffix", ylabel="windows")
        bottom.set(xlabel=f"P(sampled within n = {HISTOGRAM_N})", ylabel="windows")
    return fig


def _mc_applies(study: StudyData) -> bool:
    return study.has_method("mc") and study.has_method("probabilistic")


def _reached(probability: np.ndarray, n: int) -> np.ndarray:
    """1 − (1 − p)^n for probabilities p (the empirical p of (n,p) paper App. C.3 from p̂_z)."""
    with np.errstate(divide="ignore"):
        return -np.expm1(n * np.log1p(-np.asarray(probability, dtype=np.float64)))


def sampling_rows(study: StudyData) -> Rows:
    """Per cell, window and Monte Carlo budget N: teacher-forced p_z under the Monte Carlo policy, the sampled estimate
    p̂_z at ε = 0 with its 95% Wilson interval, and 1 − (1 − ·)^N from each: the theoretical and empirical p of
    (n,p) paper Fig. 2 (eqs. 2–3)."""
    rows = []
    for cell in study.cells:
        policy, budgets = cell.config.mc_policy().label, cell.config.mc.samples
        for dataset in study.datasets():
            log_p = cell.column(f"log_p.{policy}", dataset).astype(np.float64)
            if not log_p.size:
                continue
            estimate, low, high = (estimates(cell.column(name, dataset))[:, :, 0] for name in ("mc_estimate", "mc_low", "mc_high"))
            p_z = np.exp(log_p)
            base = {"cell": cell.name, "model": cell.config.model.name, "policy": policy, "dataset": dataset,
                    "role": cell.summary["datasets"][dataset]["role"]}
            for j, budget in enumerate(budgets):
                theoretical, empirical = p_reached(log_p, budget), _reached(estimate[:, j], budget)
                rows += [base | {"example_id": str(eid), "budget": budget, "log_p": float(log_p[i]), "p_z": float(p_z[i]),
                                 "mc_estimate": float(estimate[i, j]), "mc_low": float(low[i, j]), "mc_high": float(high[i, j]),
                                 "covered": bool(low[i, j] <= p_z[i] <= high[i, j]),
                                 "theoretical_p": float(theoretical[i]), "empirical_p": float(empirical[i])}
                         for i, eid in enumerate(cell.column("example_id", dataset))]
    return rows


def sampling_figure(rows: Rows) -> Figure:
    """(n,p) paper Fig. 2 at each budget N: p̂_z against p_z, empirical against theoretical p at n = N, and the mean
    |p̂_z − p_z| per (cell, dataset) against N with the share of Wilson intervals that cover p_z."""
    fig = new_figure(13.5, 4.2)
    estimate_ax, p_ax, error_ax = fig.subplots(1, 3)
    budgets = sorted({r["budget"] for r in rows})
    for colour, budget in zip(cycle(SERIES), budgets):
        part = [r for r in rows if r["budget"] == budget]
        estimate_ax.scatter([r["p_z"] for r in part], [r["mc_estimate"] for r in part], s=12, alpha=0.6, color=colour, label=f"N = {budget:,}")
        p_ax.scatter([r["theoretical_p"] for r in part], [r["empirical_p"] for r in part], s=12, alpha=0.6, color=colour, label=f"n = N = {budget:,}")
    for ax in (estimate_ax, p_ax):
        ax.plot([0.0, 1.0], [0.0, 1.0], ls="--", color="black", lw=0.8, label="y = x")
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    estimate_ax.set(title="p̂_z (ε = 0) against p_z", xlabel="p_z (teacher forcing)", ylabel="Monte Carlo p̂_z, N samples")
    p_ax.set(title="Fig. 2: empirical against theoretical p", xlabel="theoretical p = 1 − (1 − p_z)^n",
             ylabel="empirical p = 1 − (1 − p̂_z)^n")
    _error_panel(error_ax, rows)
    return fig


def _error_panel(ax: Any, rows: Rows) -> None:
    """Mean |p̂_z − p_z| against the budget per (cell, dataset), the Wilson coverage at each point."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["cell"], row["dataset"]), []).append(row)
    several = len({cell for cell, _ in groups}) > 1
    for colour, ((cell, dataset), part) in zip(cycle(SERIES), groups.items()):
        budgets = sorted({r["budget"] for r in part})
        at = [[r for r in part if r["budget"] == b] for b in budgets]
        errors = [float(np.mean([abs(r["mc_estimate"] - r["p_z"]) for r in points])) for points in at]
        ax.plot(budgets, errors, marker="o", color=colour, label=plain(f"{dataset} [{cell}]" if several else dataset))
        for budget, error, points in zip(budgets, errors, at):
            ax.annotate(f"{np.mean([r['covered'] for r in points]):.0%}", (budget, error), textcoords="offset points",
                        xytext=(4, 4), fontsize=7, color=colour)
    ax.set_xscale("log")
    budgets = sorted({r["budget"] for r in rows})
    ax.set_xticks(budgets, [f"{b:,}" for b in budgets])
    ax.minorticks_off()
    ax.set(title="convergence (labels: Wilson 95% covers p_z)", xlabel="Monte Carlo budget N", ylabel="mean |p̂_z − p_z|")
    ax.set_ylim(bottom=0.0)
    ax.legend(fontsize=7)


def duplicate_counts(study: StudyData) -> set[int]:
    """The distinct `duplicates:` of the cells' target datasets."""
    return {d.duplicates for cell in study.cells for d in cell.config.scored_datasets()
            if d.role == "target" and d.duplicates is not None}


def _duplicates_apply(study: StudyData) -> bool:
    return study.has_method("probabilistic") and study.has_method("greedy") and len(duplicate_counts(study)) > 1


def duplicate_rows(study: StudyData) -> Rows:
    """Per cell and training-duplicate count (its target datasets with that `duplicates:` pooled): the greedy verbatim
    rate, the p_z ≥ τ_min rate and (n,p) rates at DUPLICATE_POINTS under the p_z policy ((n,p) paper Fig. 6)."""
    rows = []
    for cell in study.cells:
        policy = cell.config.cbs_policy().label
        groups: dict[int, list[str]] = {}
        for dataset in cell.config.scored_datasets():
            if dataset.role == "target" and dataset.duplicates is not None:
                groups.setdefault(dataset.duplicates, []).append(dataset.name)
        for duplicates, names in sorted(groups.items()):
            log_p = np.concatenate([cell.column(f"log_p.{policy}", name) for name in names]).astype(np.float64)
            greedy = np.concatenate([cell.column("greedy_exact", name) for name in names]).astype(bool)
            base = {"cell": cell.name, "model": cell.config.model.name, "policy": policy, "datasets": ",".join(names),
                    "duplicates": duplicates, "windows": int(log_p.size)}
            rows.append(base | {"measure": "greedy", "n": None, "p": None, "rate": rules.fraction(int(greedy.sum()), log_p.size)})
            rows.append(base | {"measure": "p_z ≥ τ_min", "n": None, "p": None,
                                "rate": rules.fraction(int(rules.verbatim(log_p, cell.config.tau_min).sum()), log_p.size)})
            rows += [base | {"measure": "(n,p)", "n": n, "p": p, "rate": rules.fraction(int(is_extractable(log_p, n, p).sum()), log_p.size)}
                     for n, p in DUPLICATE_POINTS]
    return rows


def _measure_label(row: dict[str, Any]) -> str:
    return f"(n,p) = ({row['n']:,}, {row['p']:g})" if row["measure"] == "(n,p)" else row["measure"]


def duplicates_figure(rows: Rows) -> Figure:
    """(n,p) paper Fig. 6: per cell (model) the rates against the number of training duplicates, one line per measure."""
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    names = series_names(cells, [next(r["model"] for r in rows if r["cell"] == c) for c in cells])
    counts = sorted({r["duplicates"] for r in rows})
    fig = new_figure(6.0 * len(cells), 4.4)
    for ax, cell in zip(fig.subplots(1, len(cells), squeeze=False)[0], cells):
        part = [r for r in rows if r["cell"] == cell]
        for colour, label in zip(cycle(SERIES), dict.fromkeys(_measure_label(r) for r in part)):
            points = [(counts.index(r["duplicates"]), r["rate"]) for r in part if _measure_label(r) == label and r["rate"] is not None]
            style = {"marker": "s", "color": "black", "ls": "--"} if label == "greedy" else {"marker": "o", "color": colour}
            ax.plot([x for x, _ in points], [100.0 * y for _, y in points], label=label, **style)
        ax.set_xticks(range(len(counts)), [f"×{c}" for c in counts])
        ax.set(title=plain(f"{names[cell]}, policy {part[0]['policy']}"), xlabel="copies in the training data",
               ylabel="extraction rate, %")
        ax.set_ylim(0.0, max([5.0] + [110.0 * r["rate"] for r in part if r["rate"] is not None]))
        ax.legend(fontsize=7)
    return fig


FIGURES: tuple[PaperFigure, ...] = (
    PaperFigure("np-fig2-sampling", "(n,p)", "Fig. 2",
                "Monte Carlo p̂_z (ε = 0) against teacher-forced p_z per window, and the empirical against the theoretical "
                "p = 1 − (1 − p_z)^n, converging as the sample budget grows",
                _mc_applies, sampling_rows, sampling_figure),
    PaperFigure("np-fig5-models", "(n,p)", "Fig. 5",
                "(n,p)-extraction rates against n for each p, models compared in one panel per policy, with their greedy rates",
                _models_apply, curve_rows, models_figure),
    PaperFigure("np-fig6-duplicates", "(n,p)", "Fig. 6",
                "greedy, p_z ≥ τ_min and (n,p) extraction rates against the number of copies in the training data",
                _duplicates_apply, duplicate_rows, duplicates_figure),
    PaperFigure("np-fig12-policies", "(n,p)", "Fig. 12",
                "(n,p)-extraction rates against n at p = 0.1 and p = 0.9, every decoding policy side by side",
                _policies_apply, curve_rows, policies_figure),
    PaperFigure("np-fig13-histograms", "(n,p)", "Fig. 13",
                "per policy and model, the target suffixes' perplexity and their probability of being sampled within n = 100 "
                "generations", _curves_apply, pz_rows, histogram_figure),
    PaperFigure("np-fig14-17-grid", "(n,p)", "Figs. 14–17",
                "(n,p)-extraction rates against n, one panel per model (rows) and decoding policy (columns)",
                _curves_apply, curve_rows, grid_figure),
)
