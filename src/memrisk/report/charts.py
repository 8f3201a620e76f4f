"""Interactive charts of the report, as Vega-Lite specs built with Altair: hover shows a point's values and window, the
scales zoom and pan, the legend toggles series, and a click on a point opens its window in the explorer. The page
draws them with Vega-Embed, inlined from `vl-convert` (nothing is fetched); `draw` turns the same spec into the
PNG and SVG written to figures/ for papers.

Every spec here and in `memrisk.report.paper` is made with `to_dict(validate=False)`, and while a report is written
with Altair's debug mode off (`unchecked`): Altair's schema check walks every data row (41 s of a 10,000-window run's
report went to it), and in debug mode it checks each object again as it is made; vl-convert compiles each spec into
its PNG and SVG, which rejects a bad one all the same. Channels are passed as Altair's channel objects (`tooltips` for
a tooltip list): Altair wraps a shorthand string or dict by rebuilding its table of every schema class, several
milliseconds each time. A layered or concatenated chart takes its size and title when it is made: `properties()`
copies a chart, and the copy of a layer or concat combines its panels' parameters again.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import altair as alt
import numpy as np

from memrisk import rules
from memrisk.report.books import RecallBar, Strip
from memrisk.report.metrics import CCDF_POINTS, BookHeatmap, pooled_argmax

LN10 = math.log(10.0)
COLOURS = {"blue": "#1f77b4", "orange": "#ff7f0e", "red": "#d62728"}
"""CBS Fig. 3's verdict colours: verbatim blue, near-verbatim only orange (0 < p_z < τ) or red (p_z = 0)."""
SERIES_LIMIT = 8
"""The most series a chart draws one per dataset before it shows roles only (more would not be told apart)."""
VERDICT_NAMES = {"blue": "verbatim (p_z ≥ τ)", "orange": "unlocked, 0 < p_z < τ", "red": "unlocked, p_z = 0"}
POWER_LABEL = "datum.value == floor(datum.value) ? '10^' + datum.value : ''"
"""Axis labels of a log10 axis as powers of ten, 10^-3, at whole decades only."""


@contextmanager
def unchecked() -> Iterator[None]:
    """Altair's debug mode off, as it was before afterwards: in it, every chart, channel and data object is checked
    against the Vega-Lite schema as it is made, its data rows included (9.7 s of the 181 s that the integration tests
    outside Ray spent in their own process, ad hoc with py-spy)."""
    with alt.utils.schemapi.debug_mode(False):
        yield


def tooltips(*fields: str | alt.Tooltip) -> list[alt.Tooltip]:
    """Tooltip channels from shorthand strings ("dataset:N") and Tooltip objects. Altair would wrap each string itself,
    rebuilding its table of every schema class each time (about 10 ms a string); the spec is the same."""
    return [field if isinstance(field, alt.Tooltip) else alt.Tooltip(field) for field in fields]


class _Drawings:
    """Files drawn in this process, by spec and formats, up to `limit` bytes (the least recently used dropped first);
    reports written from several threads share it."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size = limit, 0
        self.files: OrderedDict[tuple[str, tuple[str, ...]], dict[str, bytes]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[str, tuple[str, ...]]) -> dict[str, bytes] | None:
        with self.lock:
            if key not in self.files:
                return None
            self.files.move_to_end(key)
            return dict(self.files[key])

    def put(self, key: tuple[str, tuple[str, ...]], files: dict[str, bytes]) -> None:
        with self.lock:
            if key in self.files:
                return
            self.files[key] = dict(files)
            self.size += sum(map(len, files.values()))
            while self.size > self.limit and len(self.files) > 1:
                _, dropped = self.files.popitem(last=False)
                self.size -= sum(map(len, dropped.values()))


_drawn = _Drawings(32 << 20)
"""32 MiB: the largest chart the figure catalogue draws, CBS Fig. 22 over 54 panels, is 0.6 MB of SVG and 8 MB of PNG."""


def draw(spec: dict[str, Any], formats: Sequence[str]) -> dict[str, bytes]:
    """The chart's file in each of `formats` (png at 2× scale, svg), drawn by vl-convert without a browser, and only
    those: the PNG is rasterised from the SVG (the same bytes as `vegalite_to_png`, without laying the chart out a
    second time), which takes longer than the SVG itself, so a report asked for SVG only rasterises nothing. A spec
    drawn before in this process (the same JSON) gives the files kept then: a run's report written again draws no
    chart twice (the test suite's processes drew 131 of 534 charts a second time, 24 of 100 s)."""
    key = (json.dumps(spec, separators=(",", ":")), tuple(formats))
    kept = _drawn.get(key)
    if kept is not None:
        return kept
    import vl_convert

    svg = vl_convert.vegalite_to_svg(spec)
    drawn = {"svg": svg.encode("utf-8")}
    if "png" in formats:
        drawn["png"] = vl_convert.svg_to_png(svg, scale=2)
    files = {kind: drawn[kind] for kind in formats}
    _drawn.put(key, files)
    return files


def panel_grid(lines: list[list[alt.TopLevelMixin]], **top: Any) -> dict[str, Any]:
    """Panels in lines (each line side by side, the lines stacked) as one Vega-Lite spec with `top`'s properties. Each
    panel is converted on its own and the grid joined as dicts: Altair's `vconcat` of `hconcat`s compares every panel's
    parameters with every other's (2.8 s to build CBS Fig. 22's 54 panels, 1.4 s this way). As Altair does, a parameter
    that several panels define alike (the same name) becomes one, bound to all of their views; views are renamed by panel."""
    params: dict[str, dict[str, Any]] = {}
    rows = []
    for i, line in enumerate(lines):
        row = []
        for j, chart in enumerate(line):
            panel = chart.to_dict(validate=False)
            top.setdefault("config", panel.pop("config", None))
            panel.pop("$schema", None)
            names = _rename_views(panel, f"view_{i}_{j}_")
            for param in panel.pop("params", []):
                if "views" in param:
                    param["views"] = [names[v] for v in param["views"]]
                if param["name"] not in params:
                    params[param["name"]] = param
                elif "views" in param:
                    params[param["name"]]["views"] += param["views"]
            row.append(panel)
        rows.append({"hconcat": row})
    spec = {"$schema": alt.SCHEMA_URL, "vconcat": rows, "params": list(params.values()), **top}
    return {k: v for k, v in spec.items() if v is not None}


def _rename_views(spec: dict[str, Any], prefix: str) -> dict[str, str]:
    """Rename the named views of `spec` (its unit specs, in layers at any depth) `prefix`0, 1, …; the old names' map."""
    names: dict[str, str] = {}

    def visit(node: dict[str, Any]) -> None:
        if "name" in node:
            renamed = f"{prefix}{len(names)}"
            names[node["name"]] = renamed
            node["name"] = renamed
        for child in node.get("layer", []):
            visit(child)

    visit(spec)
    return names


def _floor(values: np.ndarray, log_tau: float) -> float:
    """One decade below the smallest finite value (and τ_min): where zeros are drawn."""
    finite = values[np.isfinite(values)]
    return float(np.floor(min(finite.min(initial=log_tau), log_tau)) - 1.0)


def verdict_scatter(example_id: np.ndarray, dataset: np.ndarray, log_p: np.ndarray, lower_top: np.ndarray, tau: float,
                    label: str, title: str) -> dict[str, Any]:
    """CBS Fig. 3 (§F.1.2) as an interactive chart: LB_E against p_z for the extracted windows, verbatim blue,
    near-verbatim only orange (0 < p_z < τ) or red (p_z = 0); zeros sit on a floor a decade below the smallest value."""
    return verdict_scatter_chart(example_id, dataset, log_p, lower_top, tau, label).properties(
        width=460, height=380, title=title).to_dict(validate=False)


def verdict_scatter_chart(example_id: np.ndarray, dataset: np.ndarray, log_p: np.ndarray, lower_top: np.ndarray, tau: float,
                          label: str, cell: str | None = None, view: str = "") -> alt.LayerChart:
    """`verdict_scatter` as a chart to place among others (CBS Fig. 22's panels): points carry `cell` when given, so a
    study page opens them in that cell's explorer; `view` names its legend selection apart from the other panels'."""
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
            | ({"cell": cell} if cell is not None else {})
            for i, d, c, a, b in zip(example_id[shown], dataset[shown], colour, x, y)]
    legend = alt.selection_point(fields=["verdict"], bind="legend", name="".join(ch if ch.isalnum() else "_" for ch in f"verdict_{view}"))
    low = min(floor_x, floor_y)
    x_scale, y_scale = alt.Scale(domain=[floor_x - 0.5, 0.3]), alt.Scale(domain=[floor_y - 0.5, 0.3])
    points = alt.Chart(alt.Data(values=rows)).mark_circle(size=36).encode(
        x=alt.X("x:Q", scale=x_scale, title="verbatim p_z (teacher forcing)", axis=alt.Axis(labelExpr=POWER_LABEL)),
        y=alt.Y("y:Q", scale=y_scale, title=f"near-verbatim lower bound {label}", axis=alt.Axis(labelExpr=POWER_LABEL)),
        color=alt.Color("verdict:N", title="verdict" if cell is not None else f"{len(rows)} extracted windows",
                        scale=alt.Scale(domain=list(VERDICT_NAMES.values()), range=[COLOURS[c] for c in VERDICT_NAMES])),
        opacity=alt.OpacityValue(**alt.condition(legend, alt.value(0.8), alt.value(0.05))),
        tooltip=tooltips(alt.Tooltip("id:N", title="window"), "dataset:N", *(["cell:N"] if cell is not None else []), "verdict:N",
                         "p_z:N", alt.Tooltip("lb:N", title=label)),
    ).add_params(legend).interactive()
    guides = [{"x": low, "y": low, "x2": 0.0, "y2": 0.0, "what": "y = x"},
              {"x": log_tau, "y": floor_y - 0.5, "x2": log_tau, "y2": 0.3, "what": f"τ_min = {tau:g}"},
              {"x": floor_x - 0.5, "y": log_tau, "x2": 0.3, "y2": log_tau, "what": f"τ_min = {tau:g}"},
              {"x": floor_x, "y": floor_y - 0.5, "x2": floor_x, "y2": 0.3, "what": "p_z = 0"},
              {"x": floor_x - 0.5, "y": floor_y, "x2": 0.3, "y2": floor_y, "what": f"{label} = 0"}]
    lines = alt.Chart(alt.Data(values=guides)).mark_rule(strokeDash=[4, 3], color="#888").encode(
        x=alt.X("x:Q", scale=x_scale), y=alt.Y("y:Q", scale=y_scale), x2=alt.X2("x2:Q"), y2=alt.Y2("y2:Q"),
        tooltip=[alt.Tooltip("what:N")])
    return alt.layer(lines, points)


METHOD_NAMES = {"greedy": "greedy (distance ≤ ε)", "cbs": "CBS (LB_ε ≥ τ)", "probabilistic": "p_z ≥ τ (verbatim)"}


def rates_chart(panels: dict[str, dict[str, dict[str, Any]]], tau: float, title: str) -> dict[str, Any]:
    """Extraction rate against ε, one panel per key of `panels` and one colour per series: greedy, CBS and the verbatim
    p_z rate (flat in ε); hover shows each rate as k of n windows."""
    rows = []
    for panel, series in panels.items():
        for name, rates in series.items():
            n = rates["count"]
            if not n:
                continue
            for method in ("greedy", "cbs", "probabilistic"):
                values = rates.get(method)
                if values is None:
                    continue
                for epsilon in rates["epsilons"]:
                    rate = values if method == "probabilistic" else values[epsilon]
                    rows.append({"panel": panel, "series": name, "method": METHOD_NAMES[method], "epsilon": epsilon,
                                 "rate": 100.0 * rate, "windows": f"{round(rate * n)} of {n}"})
    series = alt.selection_point(fields=["series"], bind="legend")
    chart = alt.Chart(alt.Data(values=rows)).mark_line(point=True).encode(
        x=alt.X("epsilon:Q", title="ε (edit distance allowed)", axis=alt.Axis(tickMinStep=1, format="d")),
        y=alt.Y("rate:Q", title=f"extraction rate, % (τ_min = {tau:g})", scale=alt.Scale(domainMin=0)),
        color=alt.Color("series:N", title="series"),
        strokeDash=alt.StrokeDash("method:N", title="method", sort=list(METHOD_NAMES.values())),
        opacity=alt.condition(series, alt.value(1.0), alt.value(0.1)),
        tooltip=tooltips("series:N", "method:N", "epsilon:Q", alt.Tooltip("rate:Q", title="rate, %", format=".2f"), "windows:N"),
    ).properties(width=320, height=260).add_params(series).interactive()
    return chart.facet(column=alt.Column("panel:N", title=None)).properties(title=title).to_dict(validate=False)


def prior_aware_chart(example_id: np.ndarray, dataset: np.ndarray, role: np.ndarray, log_prior: np.ndarray,
                      log_p: np.ndarray, memorized: np.ndarray, m: float, n: float, title: str) -> dict[str, Any]:
    """PA paper's test as a chart: P(s|p) against the prior v̂_s (log10), by role, PA-memorized windows as diamonds; the
    line P(s|p) = m and the PA boundary P(s|p) = n·v̂_s. Windows with v̂_s = 0 or P(s|p) = 0 cannot be drawn."""
    x, y = np.asarray(log_prior, dtype=np.float64) / LN10, np.asarray(log_p, dtype=np.float64) / LN10
    shown = np.isfinite(x) & np.isfinite(y)
    rows = [{"id": str(i), "dataset": str(d), "role": str(r), "x": float(a), "y": float(b),
             "kind": "PA-memorized" if bool(k) else "not PA-memorized", "ratio": f"10^{b - a:.2f}",
             "p": f"{10 ** b:.3g}", "prior": f"{10 ** a:.3g}"}
            for i, d, r, a, b, k in zip(example_id[shown], dataset[shown], role[shown], x[shown], y[shown], np.asarray(memorized)[shown])]
    roles = alt.selection_point(fields=["role"], bind="legend")
    points = alt.Chart(alt.Data(values=rows)).mark_point(filled=True, size=50).encode(
        x=alt.X("x:Q", title="prior v̂_s (mean P(s|q) over bank prefixes q)", axis=alt.Axis(labelExpr=POWER_LABEL),
                scale=alt.Scale(zero=False)),
        y=alt.Y("y:Q", title="P(s|p) (full distribution)", axis=alt.Axis(labelExpr=POWER_LABEL), scale=alt.Scale(zero=False)),
        color=alt.Color("role:N", title="role"), shape=alt.Shape("kind:N", title="test", scale=alt.Scale(
            domain=["not PA-memorized", "PA-memorized"], range=["circle", "diamond"])),
        opacity=alt.condition(roles, alt.value(0.8), alt.value(0.05)),
        tooltip=tooltips(alt.Tooltip("id:N", title="window"), "dataset:N", "role:N", "kind:N", alt.Tooltip("p:N", title="P(s|p)"),
                         alt.Tooltip("prior:N", title="v̂_s"), alt.Tooltip("ratio:N", title="P(s|p) / v̂_s")),
    ).add_params(roles).interactive()
    layers: list[Any] = [points]
    if rows and n > 0:
        low, high = float(x[shown].min()) - 0.5, float(x[shown].max()) + 0.5
        shift = math.log10(n)
        boundary = [{"x": low, "y": low + shift, "x2": high, "y2": high + shift, "what": f"PA boundary P(s|p) = {n:.3g}·v̂_s"}]
        layers.append(alt.Chart(alt.Data(values=boundary)).mark_rule(strokeDash=[6, 3], color="black").encode(
            x=alt.X("x:Q"), y=alt.Y("y:Q"), x2=alt.X2("x2:Q"), y2=alt.Y2("y2:Q"), tooltip=tooltips("what:N")))
    if rows and m > 0:
        layers.append(alt.Chart(alt.Data(values=[{"y": math.log10(m), "what": f"P(s|p) = m = {m:g}"}])).mark_rule(
            strokeDash=[2, 3], color="grey").encode(y=alt.Y("y:Q"), tooltip=tooltips("what:N")))
    return alt.layer(*layers, width=460, height=380, title=title).to_dict(validate=False)


def np_curves_chart(panels: dict[str, dict[str, Any]], policy: str, title: str) -> dict[str, Any]:
    """(n,p)-extraction rate against n (log) for each p ((n,p) paper Figs. 3, 14–17), one panel per key, with the greedy
    verbatim rate (dashed) and the largest rate any n reaches, the share with p_z > 0 (dotted)."""
    rows = []
    for panel, curves in panels.items():
        if not curves["count"]:
            continue
        name = f"{panel} ({curves['count']} windows, {policy})"
        for p in curves["p_grid"]:
            rows += [{"panel": name, "series": f"p = {p:g}", "n": n, "rate": 100.0 * r}
                     for n, r in zip(curves["n_grid"], curves["rates"][f"{p:g}"])]
        references = {"greedy (verbatim)": curves["greedy"], "max rate (p_z > 0)": curves["max_rate"]}
        rows += [{"panel": name, "series": series, "n": n, "rate": 100.0 * value}
                 for series, value in references.items() if value is not None for n in (curves["n_grid"][0], curves["n_grid"][-1])]
    series = alt.selection_point(fields=["series"], bind="legend")
    dashed = alt.condition("indexof(datum.series, 'p =') == 0", alt.value([1, 0]), alt.value([5, 3]))
    chart = alt.Chart(alt.Data(values=rows)).mark_line().encode(
        x=alt.X("n:Q", scale=alt.Scale(type="log"), title="n (number of generations)", axis=alt.Axis(format="~s")),
        y=alt.Y("rate:Q", title="(n,p)-extraction rate, %", scale=alt.Scale(domain=[0, 100])),
        color=alt.Color("series:N", title="series"), strokeDash=dashed,
        opacity=alt.condition(series, alt.value(1.0), alt.value(0.1)),
        tooltip=tooltips("series:N", alt.Tooltip("n:Q", format=",.0f"), alt.Tooltip("rate:Q", title="rate, %", format=".2f")),
    ).properties(width=320, height=260).add_params(series).interactive()
    return chart.facet(column=alt.Column("panel:N", title=None)).properties(title=title).to_dict(validate=False)


def ccdf_chart(curves: dict[str, tuple[np.ndarray, np.ndarray]], label: str, title: str) -> dict[str, Any]:
    """CCDF of the per-window mass gain Δ = LB_E − LB_0 (log–log, a step per distinct gain), one line per series; the
    y value is the share of all windows (the denominator) with gain ≥ Δ. Dotted rules at the CCDF points."""
    drawn = {name: xy for name, xy in curves.items() if xy[0].size}
    left = min((float(x[0]) for x, _ in drawn.values()), default=1e-3) / 3.0
    rows = []
    for name, (x, y) in drawn.items():
        rows += [{"series": name, "gain": left, "share": 100.0 * float(y[0])}]
        rows += [{"series": name, "gain": float(a), "share": 100.0 * float(b)} for a, b in zip(x, y)]
    series = alt.selection_point(fields=["series"], bind="legend")
    lines = alt.Chart(alt.Data(values=rows)).mark_line(interpolate="step-before").encode(
        x=alt.X("gain:Q", scale=alt.Scale(type="log"), title=f"mass gain Δ = {label} − LB_0", axis=alt.Axis(format="~e")),
        y=alt.Y("share:Q", scale=alt.Scale(type="log"), title="% of all windows with gain ≥ Δ", axis=alt.Axis(format="~g")),
        color=alt.Color("series:N", title="series"), opacity=alt.condition(series, alt.value(1.0), alt.value(0.1)),
        tooltip=tooltips("series:N", alt.Tooltip("gain:Q", title="Δ", format=".3g"), alt.Tooltip("share:Q", title="% with gain ≥ Δ", format=".2f")),
    ).add_params(series).interactive()
    rules = alt.Chart(alt.Data(values=[{"gain": point} for point in CCDF_POINTS])).mark_rule(strokeDash=[2, 3], color="grey").encode(
        x=alt.X("gain:Q"))
    return alt.layer(rules, lines, width=460, height=320, title=title).to_dict(validate=False)


HEATMAP_CELLS = 2000
"""Cells per strip: a long document is max-pooled, so a peak is never averaged away."""


def book_heatmap_chart(heatmaps: list[BookHeatmap], example_id: np.ndarray, tau: float, label: str, title: str,
                       cells: np.ndarray | None = None) -> dict[str, Any]:
    """Per document, the max verbatim p_z and near-verbatim LB_E over the suffixes covering each character, as two strips
    (log colour from τ_min to 1; white below τ_min or where no suffix covers). Hover a cell for its characters, its
    probability and the window behind it; click it to open that window (in its study cell's explorer when `cells`,
    aligned with `example_id`, names the cells: CBS Fig. 21)."""
    rows = []
    for heatmap in heatmaps:
        document = f"{heatmap.dataset} / {heatmap.doc_id} ({heatmap.windows} windows)"
        for strip, values, owners in (("p_z", heatmap.verbatim, heatmap.verbatim_window),
                                      (label, heatmap.near_verbatim, heatmap.near_window)):
            if values is None or owners is None or not values.size:
                continue
            pooled, windows, edges = pooled_argmax(values, owners, HEATMAP_CELLS)
            rows.append({"document": document, "strip": strip, "start": 0, "end": int(values.size), "cell": False})
            rows += [{"document": document, "strip": strip, "start": int(a), "end": int(b), "p": float(v), "cell": True,
                      "log10_p": math.log10(v), "id": str(example_id[w])} | ({"cell": str(cells[w])} if cells is not None else {})
                     for a, b, v, w in zip(edges[:-1], edges[1:], pooled, windows) if v >= tau and w >= 0]
    strip = alt.Y("strip:N", title=None, sort=["p_z", label])
    text = alt.Chart().mark_rect(color="#f7f7f7", stroke="#ccc", strokeWidth=0.5).encode(
        x=alt.X("start:Q", title="character position"), x2=alt.X2("end:Q"), y=strip).transform_filter("!datum.cell")
    cells = alt.Chart().mark_rect().encode(
        x=alt.X("start:Q", title="character position"), x2=alt.X2("end:Q"), y=strip,
        color=alt.Color("log10_p:Q", title="max probability", scale=alt.Scale(scheme="blues", domain=[math.log10(tau), 0]),
                        legend=alt.Legend(labelExpr="'10^' + datum.value")),
        tooltip=tooltips("document:N", "strip:N", alt.Tooltip("start:Q", title="from character"), alt.Tooltip("end:Q", title="to character"),
                         alt.Tooltip("p:Q", title="max probability", format=".3g"), alt.Tooltip("id:N", title="window")),
    ).transform_filter("datum.cell").interactive(bind_y=False)
    layered = alt.layer(text, cells, data=alt.Data(values=rows), width=760, height=44)
    return layered.facet(row=alt.Row("document:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left"))).resolve_scale(
        x="independent").properties(title=title).to_dict(validate=False)


def shell_heatmap_chart(example_id: np.ndarray, dataset: np.ndarray, shares: np.ndarray, title: str) -> dict[str, Any]:
    """CBS §F.1.3: per extracted window (rows, sorted by verbatim share) the share of LB_E in each ε-shell (columns,
    eqs. 51–53); hover a cell for the window and its share, click it to open the window."""
    order = np.argsort(-shares[:, 0], kind="stable") if shares.shape[0] else np.empty(0, dtype=int)
    rows = [{"rank": rank, "id": str(example_id[i]), "dataset": str(dataset[i]), "shell": eps, "share": float(shares[i, eps])}
            for rank, i in enumerate(order) for eps in range(shares.shape[1])]
    cells = alt.Chart(alt.Data(values=rows)).mark_rect().encode(
        x=alt.X("shell:O", title="ε-shell (0 = verbatim mass LB_0)", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("rank:O", title=f"{shares.shape[0]} extracted windows, by verbatim share", axis=alt.Axis(labels=False, ticks=False)),
        color=alt.Color("share:Q", title="share of LB_E", scale=alt.Scale(scheme="viridis", domain=[0, 1])),
        tooltip=tooltips(alt.Tooltip("id:N", title="window"), "dataset:N", alt.Tooltip("shell:O", title="ε-shell"),
                         alt.Tooltip("share:Q", title="share of LB_E", format=".1%")),
    )
    return cells.properties(width=300, height=max(160, min(600, 4 * shares.shape[0])), title=title).to_dict(validate=False)


def shell_violin_chart(shares: np.ndarray, medians: list[float | None], title: str) -> dict[str, Any]:
    """CBS Figs. 4 and 11 in one run: the distribution of each ε-shell's share of LB_E over the extracted windows, as a
    violin per shell (kernel density, bandwidth 0.03) with its median as a rule; hover gives the median and the count."""
    summary = [{"shell": eps, "median": m, "label": f"median {m:.1%}", "windows": int(shares.shape[0])}
               for eps, m in enumerate(medians) if m is not None]
    def column(eps: int) -> alt.LayerChart:
        share = alt.Y("share:Q", title="share of LB_E" if eps == 0 else None, scale=alt.Scale(domain=[0, 1]),
                      axis=alt.Axis(format="%", labels=eps == 0))
        violin = alt.Chart(alt.Data(values=[{"share": float(v)} for v in shares[:, eps]])).transform_density(
            "share", as_=["share", "density"], extent=[0, 1], bandwidth=0.03,
        ).mark_area(orient="horizontal", opacity=0.6).encode(
            y=share, x=alt.X("density:Q", stack="center", impute=None, title=None, axis=alt.Axis(labels=False, ticks=False, grid=False)))
        median = alt.Chart(alt.Data(values=summary)).transform_filter(f"datum.shell == {eps}").mark_tick(
            color="black", thickness=2, size=40).encode(
            y=alt.Y("median:Q", scale=alt.Scale(domain=[0, 1]), axis=None),
            tooltip=[alt.Tooltip("shell:O", title="ε-shell"), alt.Tooltip("median:Q", title="median share", format=".1%"),
                     alt.Tooltip("windows:Q", title="extracted windows")])
        return alt.layer(violin, median, median.mark_text(dx=22, dy=-8, fontSize=10).encode(text=alt.Text("label:N")),
                         width=70, height=260, title=f"shell {eps}")

    columns = [column(eps) for eps in range(shares.shape[1])]
    return alt.hconcat(*columns, spacing=4, title=title).to_dict(validate=False)


def nv_recall_chart(bars: list[RecallBar], title: str) -> dict[str, Any]:
    """nv-recall per book (Books paper Fig. 5's numbers) as bars, the per-chapter union beside it where the run has one;
    hover gives the matched words of the book's words."""
    rows = [{"book": bar.name, "generation": kind, "nv_recall": 100.0 * value}
            for bar in bars for kind, value in (("whole book", bar.nv_recall), ("per-chapter union", bar.per_chapter))
            if value is not None]
    kinds = alt.selection_point(fields=["generation"], bind="legend")
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("book:N", title=None), yOffset=alt.YOffset("generation:N"),
        x=alt.X("nv_recall:Q", title="nv-recall, % of the book's words", scale=alt.Scale(domain=[0, 100])),
        color=alt.Color("generation:N", title="generation"), opacity=alt.condition(kinds, alt.value(1.0), alt.value(0.15)),
        tooltip=tooltips("book:N", "generation:N", alt.Tooltip("nv_recall:Q", title="nv-recall, %", format=".2f")),
    ).add_params(kinds).properties(width=460, title=title).to_dict(validate=False)


def book_strips_chart(strips: list[Strip], title: str) -> dict[str, Any]:
    """Books paper Fig. 5: per book a strip over its words with the near-verbatim blocks nv-recall kept; hover a block
    for its words."""
    rows = []
    for strip in strips:
        label = f"{strip.label}: {strip.covered} of {strip.book_words} words"
        rows.append({"book": label, "start": 0, "end": strip.book_words, "block": False})
        rows += [{"book": label, "start": start, "end": start + span, "words": span, "block": True} for start, span in strip.spans]
    base = alt.Chart(alt.Data(values=rows)).encode(
        x=alt.X("start:Q", title="word position in the book"), x2=alt.X2("end:Q"), y=alt.Y("book:N", title=None, axis=alt.Axis(labelLimit=400)))
    book = base.mark_rect(color="#eeeeee").transform_filter("!datum.block")
    blocks = base.mark_rect(color=COLOURS["red"]).transform_filter("datum.block").encode(
        tooltip=tooltips("book:N", alt.Tooltip("start:Q", title="from word"), alt.Tooltip("end:Q", title="to word"),
                         alt.Tooltip("words:Q", title="words in the block")))
    return alt.layer(book, blocks, width=760, title=title).interactive(bind_y=False).to_dict(validate=False)


def merge_stages_chart(stages: list[dict[str, Any]], title: str) -> dict[str, Any]:
    """nv-recall's merges for one book (Books Algorithm 1): a row per stage (verbatim runs, then each merge-and-filter
    pass) with its blocks over the book's words; hover a block for its words in the book and the generation, click it
    to scroll the book's text to it. `stages` rows: stage, start, end, g_start, g_end, matched, words, anchor."""
    order = list(dict.fromkeys(row["stage"] for row in stages))
    return alt.Chart(alt.Data(values=stages)).mark_rect(stroke="white", strokeWidth=0.3).encode(
        x=alt.X("start:Q", title="word position in the book"), x2=alt.X2("end:Q"), y=alt.Y("stage:N", title=None, sort=order, axis=alt.Axis(labelLimit=400)),
        color=alt.Color("kept:N", title="block", scale=alt.Scale(domain=["counted by nv-recall", "dropped by a later pass"],
                                                                   range=[COLOURS["red"], "#bbbbbb"])),
        tooltip=tooltips("stage:N", alt.Tooltip("start:Q", title="book from word"), alt.Tooltip("end:Q", title="book to word"),
                         alt.Tooltip("g_start:Q", title="generation from word"), alt.Tooltip("g_end:Q", title="generation to word"),
                         alt.Tooltip("matched:Q", title="verbatim words"), alt.Tooltip("words:N", title="begins")),
    ).properties(width=760, title=title).interactive(bind_y=False).to_dict(validate=False)


ROC_POINTS = 400
"""The most vertices a ROC line is drawn with (the summary's AUC and TPR come from every vertex)."""


def _roc_vertices(fpr: np.ndarray, tpr: np.ndarray) -> np.ndarray:
    """Indices of a ROC's corners (collinear vertices left out), thinned evenly to at most ROC_POINTS."""
    keep = np.ones(fpr.size, dtype=bool)
    if fpr.size > 2:
        turn = (fpr[1:-1] - fpr[:-2]) * (tpr[2:] - tpr[:-2]) != (tpr[1:-1] - tpr[:-2]) * (fpr[2:] - fpr[:-2])
        keep[1:-1] = turn
    index = np.flatnonzero(keep)
    return index if index.size <= ROC_POINTS else index[np.unique(np.linspace(0, index.size - 1, ROC_POINTS).round().astype(int))]


def roc_chart(series: list[dict[str, Any]], non_members: int, title: str) -> dict[str, Any]:
    """ROC curves of membership and extraction scores on a log FPR axis, where attacks are judged (Carlini et al. 2022):
    a line per score (`series` items: name, family, auc text, fpr, tpr), membership scores solid and extraction scores
    dashed; the legend toggles a score, hover gives its name, AUC, FPR and TPR. FPR 0 sits on the floor 0.5/n₀."""
    floor = 0.5 / max(non_members, 1)
    rows = []
    for item in series:
        fpr, tpr = np.asarray(item["fpr"], dtype=np.float64), np.asarray(item["tpr"], dtype=np.float64)
        rows += [{"score": item["name"], "family": item["family"], "auc": item["auc"], "fpr": max(float(fpr[i]), floor),
                  "tpr": float(tpr[i]), "shown_fpr": f"{fpr[i]:.4g}"} for i in _roc_vertices(fpr, tpr)]
    chance = [{"fpr": float(x), "tpr": float(x), "what": "chance: TPR = FPR"} for x in np.logspace(math.log10(floor), 0.0, 40)]
    scores = alt.selection_point(fields=["score"], bind="legend")
    x = alt.X("fpr:Q", scale=alt.Scale(type="log", domain=[floor, 1.0]), title="false-positive rate (controls flagged)",
              axis=alt.Axis(format="~g"))
    y = alt.Y("tpr:Q", scale=alt.Scale(domain=[0.0, 1.0]), title="true-positive rate (targets flagged)")
    lines = alt.Chart(alt.Data(values=rows)).mark_line(point=alt.OverlayMarkDef(size=14), interpolate="linear").encode(
        x=x, y=y, color=alt.Color("score:N", title="score", sort=[item["name"] for item in series]),
        strokeDash=alt.StrokeDash("family:N", title="family", sort=["membership", "extraction"]),
        opacity=alt.condition(scores, alt.value(1.0), alt.value(0.08)),
        tooltip=tooltips(alt.Tooltip("score:N"), "family:N", alt.Tooltip("auc:N", title="AUC"), alt.Tooltip("shown_fpr:N", title="FPR"),
                         alt.Tooltip("tpr:Q", title="TPR", format=".3f")),
    ).add_params(scores)
    diagonal = alt.Chart(alt.Data(values=chance)).mark_line(strokeDash=[2, 3], color="#888").encode(
        x=x, y=y, tooltip=tooltips("what:N"))
    return alt.layer(diagonal, lines, width=520, height=400, title=title).interactive().to_dict(validate=False)
