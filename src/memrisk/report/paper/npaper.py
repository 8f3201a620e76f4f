"""Figures of the (n,p) paper (probabilistic discoverable extraction), from a study: Fig. 2 (sampling against teacher
forcing), Figs. 5, 12, 14–17 ((n,p) curves across models and policies), Fig. 13 (p_z histograms), Fig. 6 (duplicates).

p_z is always read as natural-log `log_p.<policy>` and compared in log space (memrisk.extraction.rates, memrisk.rules).
"""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import numpy as np

from memrisk import rules
from memrisk.extraction.rates import is_extractable, p_reached
from memrisk.methods.monte_carlo import estimates
from memrisk.report.charts import tooltips
from memrisk.report.metrics import np_curves
from memrisk.report.paper.base import PANEL_HEADER, PaperFigure, Rows, Spec, legend_toggle, series_names
from memrisk.report.study_data import StudyCell, StudyData

POLICY_PANEL_P = (0.1, 0.9)
"""The p of Fig. 12's two panels ((n,p) paper App. F: "We fix p to either 0.1 or 0.9")."""
HISTOGRAM_N = 100
"""Fig. 13's second row: the probability of sampling the suffix within n = 100 generations."""
DUPLICATE_POINTS = ((10, 0.1), (1000, 0.1), (10, 0.9), (1000, 0.9))
"""The (n, p) settings Fig. 6 draws next to the greedy and p_z ≥ τ_min rates."""
GREEDY, MAX_RATE = "greedy (verbatim)", "max rate (p_z > 0)"
"""The reference lines of an (n,p) panel: the greedy verbatim rate and the largest rate any n reaches."""


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


def curve_points(rows: Rows) -> list[dict[str, Any]]:
    """The curves' rows as chart points: a series per p (`p = 0.1`), and the greedy and max rates as flat series at the
    first and last n; each with the model's legend name, the rate in % and as k of n windows."""
    curves = curves_of(rows)
    names = _cell_names(curves)
    points = []
    for (cell, policy), entry in curves.items():
        if not entry["count"]:
            continue
        base = {"cell": cell, "model": names[cell], "policy": policy, "windows": entry["count"]}
        for p in entry["p_grid"]:
            points += [base | {"series": f"p = {p:g}", "n": n, "rate": 100.0 * r, "of": f"{round(r * entry['count'])} of {entry['count']}"}
                       for n, r in zip(entry["n_grid"], entry["rates"][f"{p:g}"])]
        for series, value in ((GREEDY, entry["greedy"]), (MAX_RATE, entry["max_rate"])):
            if value is not None:
                points += [base | {"series": series, "n": n, "rate": 100.0 * value, "of": f"{round(value * entry['count'])} of {entry['count']}"}
                           for n in (entry["n_grid"][0], entry["n_grid"][-1])]
    return points


N_AXIS = alt.X("n:Q", scale=alt.Scale(type="log"), title="n (number of generations)",
               axis=alt.Axis(format="~s", values=[10 ** k for k in range(7)]))
RATE_AXIS = alt.Y("rate:Q", title="(n,p)-extraction rate, %", scale=alt.Scale(domain=[0, 100]))
CURVE_TOOLTIP = tooltips("model:N", "cell:N", "policy:N", "series:N", alt.Tooltip("n:Q", format=",.0f"),
                         alt.Tooltip("rate:Q", title="rate, %", format=".2f"), alt.Tooltip("of:N", title="windows"))


ROW_HEADER = alt.Header(labelFont="sans-serif", labelFontSize=12, labelFontWeight="bold", labelLimit=200,
                       labelExpr="split(datum.value, '|')")
"""A row facet's panel titles on two lines (`model|windows`), no longer than a panel is high, so that they never overlap."""


def _reference_dash(points: list[dict[str, Any]]) -> alt.StrokeDash:
    """Solid (n,p) curves, dashed greedy rate, dotted max rate (in the legend only where the points have them)."""
    dashes = {"(n,p) curve": [1, 0], GREEDY: [6, 3], MAX_RATE: [2, 2]}
    kinds = [kind for kind in dashes if any(p["kind"] == kind for p in points)]
    return alt.StrokeDash("kind:N", title="line", scale=alt.Scale(domain=kinds, range=[dashes[kind] for kind in kinds]))


def _with_kind(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p | {"kind": p["series"] if p["series"] in (GREEDY, MAX_RATE) else "(n,p) curve"} for p in points]


def grid_figure(rows: Rows) -> Spec:
    """One (n,p) panel per cell (rows, with its window count) and policy (columns): (n,p) paper Figs. 14–17, models ×
    sampling schemes; a colour per p, the greedy rate dashed and the largest rate any n reaches dotted."""
    points = [p | {"panel": f"{p['model']}|{p['windows']} windows"} for p in _with_kind(curve_points(rows))]
    series = legend_toggle("series")
    chart = alt.Chart().mark_line(clip=True).encode(
        x=N_AXIS, y=RATE_AXIS, color=alt.Color("series:N", title="series"), strokeDash=_reference_dash(points),
        opacity=alt.condition(series, alt.value(1.0), alt.value(0.1)), tooltip=CURVE_TOOLTIP,
    ).add_params(series).properties(width=260, height=200).interactive()
    cells, policies = (list(dict.fromkeys(p[key] for p in points)) for key in ("panel", "policy"))
    return alt.layer(chart, data=alt.Data(values=points)).facet(
        row=alt.Row("panel:N", title=None, header=ROW_HEADER, sort=cells),
        column=alt.Column("policy:N", title=None, header=PANEL_HEADER, sort=policies),
    ).properties(title="(n,p)-extraction rates: models (rows) × decoding policies (columns)").to_dict(validate=False)


def models_figure(rows: Rows) -> Spec:
    """(n,p) paper Fig. 5: per policy one panel, a colour per model (cell), a line style per p, the greedy rate as a
    thick translucent line in the model's colour."""
    points = [p | {"panel": f"policy {p['policy']}"} for p in curve_points(rows) if p["series"] != MAX_RATE]
    models = legend_toggle("model")
    curves = alt.Chart().mark_line(clip=True).encode(
        x=N_AXIS, y=RATE_AXIS, color=alt.Color("model:N", title="model"), strokeDash=alt.StrokeDash("series:N", title="p"),
        opacity=alt.condition(models, alt.value(1.0), alt.value(0.1)), tooltip=CURVE_TOOLTIP,
    ).transform_filter(f"datum.series != '{GREEDY}'").add_params(models).interactive()
    greedy = alt.Chart().mark_line(strokeWidth=5, opacity=0.35, clip=True).encode(
        x=N_AXIS, y=RATE_AXIS, color=alt.Color("model:N"), tooltip=CURVE_TOOLTIP).transform_filter(f"datum.series == '{GREEDY}'")
    return alt.layer(curves, greedy, data=alt.Data(values=points), width=360, height=260).facet(
        column=alt.Column("panel:N", title=None, header=PANEL_HEADER, sort=list(dict.fromkeys(p["panel"] for p in points))),
    ).properties(title="(n,p)-extraction rates per model; thick translucent lines: greedy").to_dict(validate=False)


def policies_figure(rows: Rows) -> Spec:
    """(n,p) paper Fig. 12: at p = 0.1 and p = 0.9 one panel each, a colour per policy and a line style per cell, the
    greedy rates in black."""
    shown = {f"p = {p:g}" for p in POLICY_PANEL_P}
    points = []
    for point in curve_points(rows):
        if point["series"] in shown:
            points.append(point | {"panel": point["series"], "line": point["policy"]})
        elif point["series"] == GREEDY:
            points += [point | {"panel": panel, "line": GREEDY} for panel in sorted(shown)]
    policies = legend_toggle("line")
    several = len({p["cell"] for p in points}) > 1
    chart = alt.Chart().mark_line(clip=True).encode(
        x=N_AXIS, y=RATE_AXIS, detail=alt.Detail("cell:N"),
        color=alt.Color("line:N", title="policy", scale=alt.Scale(domain=[*dict.fromkeys(p["policy"] for p in points), GREEDY],
                                                                   range=[*_palette(len({p["policy"] for p in points})), "black"])),
        strokeDash=alt.StrokeDash("model:N", title="model") if several else alt.value([1, 0]),
        opacity=alt.condition(policies, alt.value(1.0), alt.value(0.1)), tooltip=CURVE_TOOLTIP,
    ).add_params(policies).properties(width=360, height=260).interactive()
    return alt.layer(chart, data=alt.Data(values=points)).facet(column=alt.Column("panel:N", title=None, header=PANEL_HEADER)).properties(
        title="(n,p)-extraction rates of every decoding policy at p = 0.1 and p = 0.9; greedy in black").to_dict(validate=False)


def _palette(count: int) -> list[str]:
    """`count` colours of Vega's category10 scheme, repeated as needed."""
    colours = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d", "#bab0ac"]
    return [colours[i % len(colours)] for i in range(count)]


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


def histogram_figure(rows: Rows) -> Spec:
    """(n,p) paper Fig. 13: a panel per cell (model) and policy, the suffix perplexities (top) and the probabilities of
    sampling the suffix within n = 100 generations (bottom); windows with p_z = 0 are counted in the panel's title."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["cell"], row["policy"]), []).append(row)
    cells = list(dict.fromkeys(c for c, _ in groups))
    names = series_names(cells, [groups[next(k for k in groups if k[0] == c)][0]["model"] for c in cells])
    values, panels = [], []
    for (cell, policy), part in groups.items():
        drawn = [r for r in part if r["log10_perplexity"] is not None]
        panel = f"{names[cell]}, {policy}: {len(part) - len(drawn)} of {len(part)} with p_z = 0"
        panels.append(panel)
        values += [{"panel": panel, "cell": cell, "perplexity": r["log10_perplexity"], "within": r[f"p_within_{HISTOGRAM_N}"]}
                   for r in drawn]
    columns = len({policy for _, policy in groups})

    def histogram(field: str, title: str, extent: list[float] | None, colour: str) -> alt.FacetChart:
        binned = alt.Bin(maxbins=20, extent=extent) if extent else alt.Bin(maxbins=20)
        return alt.Chart(alt.Data(values=values)).mark_bar(color=colour).encode(
            x=alt.X(f"{field}:Q", bin=binned, title=title), y=alt.Y("count():Q", title="windows"),
            tooltip=tooltips("panel:N", alt.Tooltip(f"{field}:Q", bin=binned, title=title), alt.Tooltip("count():Q", title="windows")),
        ).properties(width=200, height=140).facet(facet=alt.Facet("panel:N", title=None, header=PANEL_HEADER, sort=panels), columns=columns)

    return alt.vconcat(histogram("perplexity", "log10 perplexity of the suffix", None, "#4c78a8"),
                       histogram("within", f"P(sampled within n = {HISTOGRAM_N})", [0.0, 1.0], "#54a24b"),
                       title="Target suffixes per policy and model: perplexity, and the probability of sampling them within "
                             f"{HISTOGRAM_N} generations").to_dict(validate=False)


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


def sampling_figure(rows: Rows) -> Spec:
    """(n,p) paper Fig. 2 at each budget N: p̂_z against p_z, empirical against theoretical p at n = N (a point per
    window; click it to open the window), and the mean |p̂_z − p_z| per (cell, dataset) against N with the share of
    Wilson intervals that cover p_z."""
    points = [{k: v for k, v in r.items() if k != "log_p"} | {"id": r["example_id"], "N": f"N = {r['budget']:,}"}
              for r in rows]  # log p_z may be −inf, which JSON cannot hold; p_z carries it
    diagonal = alt.Chart(alt.Data(values=[{"x": 0.0, "y": 0.0, "what": "y = x"}, {"x": 1.0, "y": 1.0, "what": "y = x"}])).mark_line(
        strokeDash=[4, 3], color="black", strokeWidth=0.8, clip=True).encode(x=alt.X("x:Q"), y=alt.Y("y:Q"), tooltip=tooltips("what:N"))
    tooltip = tooltips(alt.Tooltip("id:N", title="window"), "dataset:N", "cell:N", "N:N", alt.Tooltip("p_z:Q", format=".4f"),
                       alt.Tooltip("mc_estimate:Q", title="estimate", format=".4f"), alt.Tooltip("mc_low:Q", title="Wilson low", format=".4f"),
                       alt.Tooltip("mc_high:Q", title="Wilson high", format=".4f"), "covered:N")

    def scatter(x: str, y: str, x_title: str, y_title: str, title: str) -> alt.LayerChart:
        budgets = legend_toggle("N", x)
        dots = alt.Chart(alt.Data(values=points)).mark_circle(size=30, clip=True).encode(
            x=alt.X(f"{x}:Q", title=x_title, scale=alt.Scale(domain=[0, 1])),
            y=alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("N:N", title="budget", sort=[f"N = {b:,}" for b in sorted({r["budget"] for r in rows})]),
            opacity=alt.condition(budgets, alt.value(0.7), alt.value(0.05)),
            tooltip=tooltip + [alt.Tooltip("theoretical_p:Q", format=".4f"), alt.Tooltip("empirical_p:Q", format=".4f")],
        ).add_params(budgets, alt.selection_interval(bind="scales", name=f"zoom_{x}"))
        return alt.layer(diagonal, dots, width=260, height=260, title=title)

    return alt.hconcat(
        scatter("p_z", "mc_estimate", "p_z (teacher forcing)", "Monte Carlo estimate of p_z, N samples",
                "Monte Carlo estimate (ε = 0) against p_z"),
        scatter("theoretical_p", "empirical_p", "theoretical p = 1 − (1 − p_z)^n", "empirical p = 1 − (1 − estimate)^n",
                "empirical against theoretical p, n = N"),
        _error_panel(rows),
    ).resolve_scale(color="independent").properties(title="Sampling against teacher forcing").to_dict(validate=False)


def _error_panel(rows: Rows) -> alt.LayerChart:
    """Mean |p̂_z − p_z| against the budget per (cell, dataset), labelled with the Wilson coverage at each point."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["cell"], row["dataset"], row["budget"]), []).append(row)
    several = len({cell for cell, _, _ in groups}) > 1
    errors = [{"series": f"{dataset} [{cell}]" if several else dataset, "budget": budget,
               "error": float(np.mean([abs(r["mc_estimate"] - r["p_z"]) for r in part])),
               "coverage": float(np.mean([r["covered"] for r in part])), "windows": len(part),
               "covers": f"{sum(r['covered'] for r in part)} of {len(part)}"} for (cell, dataset, budget), part in groups.items()]
    series = legend_toggle("series")
    base = alt.Chart(alt.Data(values=errors)).encode(
        x=alt.X("budget:Q", title="Monte Carlo budget N", axis=alt.Axis(format="~s", values=sorted({e["budget"] for e in errors})),
                scale=alt.Scale(type="log", domain=[min(e["budget"] for e in errors), max(e["budget"] for e in errors)], padding=16)),
        y=alt.Y("error:Q", title="mean |estimate − p_z|", scale=alt.Scale(domainMin=0)), color=alt.Color("series:N", title="dataset"))
    lines = base.mark_line(point=True).encode(
        opacity=alt.condition(series, alt.value(1.0), alt.value(0.1)),
        tooltip=tooltips("series:N", "budget:Q", alt.Tooltip("error:Q", format=".4f"), alt.Tooltip("covers:N", title="Wilson 95% covers p_z")),
    ).add_params(series)
    labels = base.mark_text(dx=6, dy=-8, fontSize=9).encode(text=alt.Text("coverage:Q", format=".0%"))
    return alt.layer(lines, labels, width=260, height=260, title="convergence (labels: Wilson 95% covers p_z)")


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


def duplicates_figure(rows: Rows) -> Spec:
    """(n,p) paper Fig. 6: per cell (model) the rates against the number of training duplicates, one line per measure,
    greedy dashed; hover a point for its rate as k of n windows."""
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    names = series_names(cells, [next(r["model"] for r in rows if r["cell"] == c) for c in cells])
    counts = sorted({r["duplicates"] for r in rows})
    points = [{"model": f"{names[r['cell']]}, policy {r['policy']}", "cell": r["cell"], "copies": f"×{r['duplicates']}",
               "measure": _measure_label(r), "rate": 100.0 * r["rate"], "datasets": r["datasets"],
               "of": f"{round(r['rate'] * r['windows'])} of {r['windows']}"} for r in rows if r["rate"] is not None]
    measures = legend_toggle("measure")
    chart = alt.Chart().mark_line(point=True).encode(
        x=alt.X("copies:O", title="copies in the training data", sort=[f"×{c}" for c in counts], axis=alt.Axis(labelAngle=0)),
        y=alt.Y("rate:Q", title="extraction rate, %", scale=alt.Scale(domain=[0, 100])),
        color=alt.Color("measure:N", title="measure", sort=list(dict.fromkeys(p["measure"] for p in points))),
        strokeDash=alt.condition("datum.measure == 'greedy'", alt.value([6, 3]), alt.value([1, 0])),
        opacity=alt.condition(measures, alt.value(1.0), alt.value(0.1)),
        tooltip=tooltips("model:N", "cell:N", "copies:N", "datasets:N", "measure:N", alt.Tooltip("rate:Q", title="rate, %", format=".1f"),
                         alt.Tooltip("of:N", title="windows")),
    ).add_params(measures).properties(width=300, height=240)
    return alt.layer(chart, data=alt.Data(values=points)).facet(column=alt.Column("model:N", title=None, header=PANEL_HEADER)).properties(
        title="Extraction against the number of copies in the training data").to_dict(validate=False)


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
