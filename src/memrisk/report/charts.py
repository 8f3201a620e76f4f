"""Interactive charts of the report, as Vega-Lite specs built with Altair: hover shows a point's values and window, the
scales zoom and pan, the legend toggles series, and a click on a point opens its window in the explorer. The page
draws them with Vega-Embed, inlined from `vl-convert` (nothing is fetched); the PNG/SVG files for papers stay
matplotlib's (`memrisk.report.figures`).
"""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import numpy as np

from memrisk import rules
from memrisk.report.figures import COLOURS

LN10 = math.log(10.0)
VERDICT_NAMES = {"blue": "verbatim (p_z ≥ τ)", "orange": "unlocked, 0 < p_z < τ", "red": "unlocked, p_z = 0"}
POWER_LABEL = "datum.value == floor(datum.value) ? '10^' + datum.value : ''"
"""Axis labels of a log10 axis as powers of ten, 10^-3, at whole decades only."""


def _floor(values: np.ndarray, log_tau: float) -> float:
    """One decade below the smallest finite value (and τ_min): where zeros are drawn."""
    finite = values[np.isfinite(values)]
    return float(np.floor(min(finite.min(initial=log_tau), log_tau)) - 1.0)


def verdict_scatter(example_id: np.ndarray, dataset: np.ndarray, log_p: np.ndarray, lower_top: np.ndarray, tau: float,
                    label: str, title: str) -> dict[str, Any]:
    """CBS Fig. 3 (§F.1.2) as an interactive chart: LB_E against p_z for the extracted windows, verbatim blue,
    near-verbatim only orange (0 < p_z < τ) or red (p_z = 0); zeros sit on a floor a decade below the smallest value."""
    kind = rules.verdicts(log_p, lower_top, tau)
    shown = kind != rules.NOT_EXTRACTED
    colour = np.where(kind == rules.VERBATIM, "blue", np.where(rules.zero_probability(log_p), "red", "orange"))[shown]
    log_tau = math.log10(tau)
    with np.errstate(divide="ignore"):
        x = np.asarray(log_p, dtype=np.float64)[shown] / LN10
        y = np.log10(np.asarray(lower_top, dtype=np.float64)[shown])
    floor_x, floor_y = _floor(x, log_tau), _floor(y, log_tau)
    rows = [{"id": str(i), "dataset": str(d), "verdict": VERDICT_NAMES[c],
             "x": float(a) if math.isfinite(a) else floor_x, "y": float(b) if math.isfinite(b) else floor_y,
             "p_z": f"{10 ** a:.3g}" if math.isfinite(a) else "0", "lb": f"{10 ** b:.3g}" if math.isfinite(b) else "0"}
            for i, d, c, a, b in zip(example_id[shown], dataset[shown], colour, x, y)]
    legend = alt.selection_point(fields=["verdict"], bind="legend")
    low = min(floor_x, floor_y)
    x_scale, y_scale = alt.Scale(domain=[floor_x - 0.5, 0.3]), alt.Scale(domain=[floor_y - 0.5, 0.3])
    points = alt.Chart(alt.Data(values=rows)).mark_circle(size=36).encode(
        x=alt.X("x:Q", scale=x_scale, title="verbatim p_z (teacher forcing)", axis=alt.Axis(labelExpr=POWER_LABEL)),
        y=alt.Y("y:Q", scale=y_scale, title=f"near-verbatim lower bound {label}", axis=alt.Axis(labelExpr=POWER_LABEL)),
        color=alt.Color("verdict:N", title=f"{len(rows)} extracted windows",
                        scale=alt.Scale(domain=list(VERDICT_NAMES.values()), range=[COLOURS[c] for c in VERDICT_NAMES])),
        opacity=alt.condition(legend, alt.value(0.8), alt.value(0.05)),
        tooltip=[alt.Tooltip("id:N", title="window"), "dataset:N", "verdict:N", "p_z:N", alt.Tooltip("lb:N", title=label)],
    ).add_params(legend).interactive()
    guides = [{"x": low, "y": low, "x2": 0.0, "y2": 0.0, "what": "y = x"},
              {"x": log_tau, "y": floor_y - 0.5, "x2": log_tau, "y2": 0.3, "what": f"τ_min = {tau:g}"},
              {"x": floor_x - 0.5, "y": log_tau, "x2": 0.3, "y2": log_tau, "what": f"τ_min = {tau:g}"},
              {"x": floor_x, "y": floor_y - 0.5, "x2": floor_x, "y2": 0.3, "what": "p_z = 0"},
              {"x": floor_x - 0.5, "y": floor_y, "x2": 0.3, "y2": floor_y, "what": f"{label} = 0"}]
    lines = alt.Chart(alt.Data(values=guides)).mark_rule(strokeDash=[4, 3], color="#888").encode(
        x=alt.X("x:Q", scale=x_scale), y=alt.Y("y:Q", scale=y_scale), x2="x2:Q", y2="y2:Q", tooltip=["what:N"])
    chart = alt.layer(lines, points).properties(width=460, height=380, title=title)
    return chart.to_dict()
