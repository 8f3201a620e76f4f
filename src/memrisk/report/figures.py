"""Report figures (CBS paper §F.1, the prior-aware scatter, Books paper Fig. 5) drawn with matplotlib's Agg canvas;
`render` gives PNG and SVG bytes.

Figures are built on `matplotlib.figure.Figure` (no pyplot state). Text that comes from
configs or corpora is passed through `plain`, so a '$' never turns into mathtext.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from memrisk.report.books import RecallBar, Strip
from memrisk import rules
from memrisk.report.metrics import BookHeatmap, max_pool

COLOURS = {"blue": "#1f77b4", "orange": "#ff7f0e", "red": "#d62728"}
SERIES = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
RASTERIZE_ABOVE = 2000
HEATMAP_BINS = 2000


def plain(text: object) -> str:
    """Text shown literally by matplotlib ('$' escaped so it is not parsed as mathtext)."""
    return str(text).replace("$", r"\$")


def new_figure(width: float = 6.4, height: float = 4.2) -> Figure:
    """A figure on an Agg canvas."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def render(fig: Figure) -> tuple[bytes, bytes]:
    """PNG and SVG bytes of a figure, without timestamps; the layout is computed once, for the PNG."""
    png, svg = io.BytesIO(), io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "memrisk"}):
        fig.savefig(png, format="png", dpi=110, metadata={"Software": None})
        fig.set_layout_engine("none")
        fig.savefig(svg, format="svg", metadata={"Date": None, "Creator": None})
    return png.getvalue(), svg.getvalue()


def no_data(ax: Axes, message: str) -> None:
    """Mark an empty panel with a message instead of axes."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#555")
    ax.set_xticks([])
    ax.set_yticks([])


def _power_ticks(ax: Axes, axis: str) -> None:
    """Label a log10-valued axis as powers of ten."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(MaxNLocator(integer=True, nbins=7))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"$10^{{{int(round(v))}}}$"))


def scatter_panel(ax: Axes, log_p: np.ndarray, lower_top: np.ndarray, tau: float, label: str, legend_size: float = 8) -> None:
    """One CBS Fig. 3 scatter on `ax`: verbatim blue, near-verbatim only orange (0 < p_z < τ) or red (p_z = 0).

    p_z = 0 (and LB = 0) are drawn on a floor one decade below the smallest value on that axis.
    """
    kind = rules.verdicts(log_p, lower_top, tau)
    colour = np.where(kind == rules.VERBATIM, "blue", np.where(rules.zero_probability(log_p), "red", "orange"))
    shown = kind != rules.NOT_EXTRACTED
    if not shown.any():
        no_data(ax, "no sequence has p_z or the lower bound ≥ τ_min")
        return
    log_tau = np.log10(tau)
    with np.errstate(divide="ignore"):
        x = np.asarray(log_p, dtype=np.float64)[shown] / np.log(10.0)
        y = np.log10(np.asarray(lower_top, dtype=np.float64)[shown])
    floor_x, floor_y = (np.floor(min(v[np.isfinite(v)].min(initial=log_tau), log_tau)) - 1.0 for v in (x, y))
    x, y = np.where(np.isfinite(x), x, floor_x), np.where(np.isfinite(y), y, floor_y)
    many = shown.sum() > RASTERIZE_ABOVE
    names = {"blue": "verbatim-extractable (p_z ≥ τ)", "orange": "unlocked, 0 < p_z < τ", "red": "unlocked, p_z = 0"}
    for name, text in names.items():
        mask = colour[shown] == name
        ax.scatter(x[mask], y[mask], s=10, alpha=0.7, color=COLOURS[name], label=f"{text} ({mask.sum()})", rasterized=many)
    low = min(floor_x, floor_y)
    ax.plot([low, 0.0], [low, 0.0], ls="--", color="black", lw=0.8, label="y = x")
    ax.axvline(log_tau, ls=":", color="grey", lw=1.0, label=f"τ_min = {tau:g}")
    ax.axhline(log_tau, ls=":", color="grey", lw=1.0)
    ax.axvline(floor_x, ls="-", color="#bbb", lw=0.6)
    ax.axhline(floor_y, ls="-", color="#bbb", lw=0.6)
    ax.text(floor_x, 0.98, " 0", color="#777", fontsize=8, va="top", transform=ax.get_xaxis_transform())
    ax.text(0.01, floor_y, "0", color="#777", fontsize=8, va="bottom", transform=ax.get_yaxis_transform())
    ax.set_xlim(floor_x - 0.5, 0.3)
    ax.set_ylim(floor_y - 0.5, 0.3)
    _power_ticks(ax, "x")
    _power_ticks(ax, "y")
    ax.set_xlabel("verbatim p_z (teacher forcing)")
    ax.set_ylabel(f"near-verbatim lower bound {plain(label)}")
    ax.legend(loc="lower right", fontsize=legend_size)


def shell_heatmap_figure(shares: np.ndarray) -> Figure:
    """Per extracted sequence (rows, sorted by verbatim share) the share of each ε-shell (columns)."""
    fig = new_figure(5.0, 5.0)
    ax = fig.add_subplot()
    if not shares.shape[0]:
        no_data(ax, "no near-verbatim extracted sequence")
        return fig
    order = np.argsort(-shares[:, 0], kind="stable")
    image = ax.imshow(shares[order], aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0, interpolation="antialiased")
    fig.colorbar(image, ax=ax, label="share of LB_E")
    ax.set_xticks(range(shares.shape[1]))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("ε-shell (0 = verbatim mass LB_0)")
    ax.set_ylabel(f"{shares.shape[0]} extracted sequences, by verbatim share")
    return fig


def shell_violin_figure(shares: np.ndarray, medians: Sequence[float | None]) -> Figure:
    """Distribution of each ε-shell's share over the extracted sequences, medians annotated."""
    fig = new_figure()
    ax = fig.add_subplot()
    if not shares.shape[0]:
        no_data(ax, "no near-verbatim extracted sequence")
        return fig
    for eps in range(shares.shape[1]):
        column = shares[:, eps]
        if np.unique(column).size > 1:
            parts = ax.violinplot([column], positions=[eps], widths=0.8, showextrema=False)
            for body in parts["bodies"]:
                body.set_alpha(0.5)
        else:
            ax.scatter([eps], [column[0]], marker="_", s=300, color=SERIES[0])
        median = medians[eps]
        if median is not None:
            ax.scatter([eps], [median], color="black", s=12, zorder=3)
            ax.annotate(f"{median:.1%}", (eps, median), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xticks(range(shares.shape[1]))
    ax.set_xlabel("ε-shell (0 = verbatim share LB_0 / LB_E)")
    ax.set_ylabel("share of LB_E")
    return fig


def np_curves_axes(ax: Axes, title: str, curves: Mapping[str, Any]) -> None:
    """One panel of (n,p)-extraction rate against n for each p, greedy and max rate as lines ((n,p) paper Figs. 3, 14–17)."""
    if not curves["count"]:
        no_data(ax, "no sequences")
        return
    for colour, p in zip(SERIES, curves["p_grid"]):
        ax.plot(curves["n_grid"], [100.0 * r for r in curves["rates"][f"{p:g}"]], color=colour, label=f"p = {p:g}")
    if curves["greedy"] is not None:
        ax.axhline(100.0 * curves["greedy"], color="black", ls="--", lw=1.0, label="greedy (verbatim)")
    ax.axhline(100.0 * curves["max_rate"], color="grey", ls=":", lw=1.0, label="max rate (p_z > 0)")
    ax.set_xscale("log")
    ax.set_title(plain(title))
    ax.set_xlabel("n (number of generations)")
    ax.set_ylabel("(n,p)-extraction rate, %")
    ax.legend(fontsize=7)


def position_heatmap_figure(heatmaps: Sequence[BookHeatmap], tau: float, label: str) -> Figure:
    """Per document, strips of the max verbatim and near-verbatim probability per character (white < τ)."""
    rows = [(h, name, values) for h in heatmaps for name, values in (("p_z", h.verbatim), (label, h.near_verbatim)) if values is not None]
    fig = new_figure(9.0, 0.9 + 0.55 * max(len(rows), 1))
    if not rows:
        no_data(fig.add_subplot(), "no probabilities to map")
        return fig
    cmap = matplotlib.colormaps["Blues"].with_extremes(under="white", bad="white")
    norm = LogNorm(vmin=tau, vmax=1.0)
    axes = fig.subplots(len(rows), 1, squeeze=False)[:, 0]
    image = None
    for ax, (heatmap, name, values) in zip(axes, rows):
        pooled = max_pool(values, HEATMAP_BINS)
        masked = np.ma.masked_less_equal(pooled, 0.0)
        image = ax.imshow(masked[None, :], aspect="auto", cmap=cmap, norm=norm, interpolation="nearest", extent=(0, values.size, 0, 1))
        ax.set_yticks([])
        ax.set_ylabel(plain(name), rotation=0, ha="right", va="center", fontsize=8)
        ax.set_title(plain(f"{heatmap.dataset} / {heatmap.doc_id} ({heatmap.windows} windows)"), fontsize=8, loc="left")
        ax.tick_params(axis="x", labelsize=7)
    axes[-1].set_xlabel("character position")
    fig.colorbar(image, ax=list(axes), label="max probability", extend="min")
    return fig


def nv_recall_figure(bars: Sequence[RecallBar]) -> Figure:
    """nv-recall per book as horizontal bars (%), the per-chapter union as a second bar where present."""
    fig = new_figure(6.4, 1.2 + 0.5 * max(len(bars), 1))
    ax = fig.add_subplot()
    if not bars:
        no_data(ax, "no books")
        return fig
    chapters = any(b.per_chapter is not None for b in bars)
    height = 0.4 if chapters else 0.7
    rows = np.arange(len(bars))
    ax.barh(rows - (height / 2 if chapters else 0.0), [100.0 * b.nv_recall for b in bars], height, color=SERIES[0], label="generation")
    if chapters:
        union = [(i, 100.0 * b.per_chapter) for i, b in enumerate(bars) if b.per_chapter is not None]
        ax.barh([i + height / 2 for i, _ in union], [v for _, v in union], height, color=SERIES[2], label="per-chapter union")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_yticks(rows, [plain(b.name) for b in bars])
    ax.invert_yaxis()
    ax.set_xlim(0.0, 100.0)
    ax.set_xlabel("nv-recall, % of the book's words")
    return fig


def book_strips_figure(book_strips: Sequence[Strip]) -> Figure:
    """Per book a strip over its words with the extracted near-verbatim blocks coloured (Books Fig. 5)."""
    fig = new_figure(9.0, 0.6 + 0.6 * max(len(book_strips), 1))
    if not book_strips:
        no_data(fig.add_subplot(), "no books")
        return fig
    axes = fig.subplots(len(book_strips), 1, squeeze=False)[:, 0]
    for ax, strip in zip(axes, book_strips):
        ax.broken_barh([(0, strip.book_words)], (0, 1), color="#eeeeee")
        ax.broken_barh(list(strip.spans), (0, 1), color=COLOURS["red"])
        ax.set_xlim(0, max(strip.book_words, 1))
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.set_title(plain(f"{strip.label}: {strip.covered} of {strip.book_words} words in extracted blocks"), fontsize=8, loc="left")
        ax.tick_params(axis="x", labelsize=7)
    axes[-1].set_xlabel("word position in the book")
    return fig
