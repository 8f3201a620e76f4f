"""The report's corpus-count section: how often the windows occur in the training corpus, and extraction against that
count — (n,p) paper Fig. 6 with measured counts in place of planted ones, for every method the run has
(docs/corpus_counts.md). The study figure (memrisk.report.paper.corpus) draws the same points per cell."""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np

from memrisk.config import ExperimentConfig
from memrisk.extraction.rates import is_extractable
from memrisk.methods.base import Column
from memrisk.methods.corpus_counts import WINDOW, binned_rates, count_stats, extraction_verdicts
from memrisk.report.charts import tooltips
from memrisk.report.markup import Html, Picture, chart, join, note, table, tag
from memrisk.summary import column_reader

NP_POINT = (10, 0.9)
"""The (n,p) setting drawn beside the other measures: the suffix is emitted within 10 generations with probability ≥ 0.9."""


def measure_name(label: str, config: ExperimentConfig) -> str:
    """A verdict label (`greedy`, `probabilistic.topk40`, `cbs.levenshtein.eps5`, ...) as the chart's legend reads it."""
    kind, _, rest = label.partition(".")
    if kind == "greedy":
        return "greedy (verbatim)"
    if kind == "probabilistic":
        return f"p_z ≥ τ_min ({rest})"
    if kind == "cbs":
        distance, _, epsilon = rest.partition(".")
        return f"CBS LB_{epsilon.removeprefix('eps')} ≥ τ_min ({distance})"
    if kind == "mc":
        distance, _, epsilon = rest.partition(".")
        return f"Monte Carlo ε = {epsilon.removeprefix('eps')} ({distance})"
    if label == "pa_memorized":
        return "PA-memorized"
    return label


def count_points(column: Column, config: ExperimentConfig, base: dict[str, Any]) -> list[dict[str, Any]]:
    """Per window-count bin and measure: the extraction rate in %, as k of n windows, each row starting with `base`.
    The measures are every method's verdict, and (n,p) at NP_POINT under the p_z policy when the run has p_z."""
    verdicts = {measure_name(label, config): verdict for label, verdict in extraction_verdicts(column, config).items()}
    if "probabilistic" in config.methods:
        n, p = NP_POINT
        verdicts[f"(n,p) = ({n}, {p:g})"] = is_extractable(column(f"log_p.{config.cbs_policy().label}").astype(np.float64), n, p)
    rows = []
    for entry in binned_rates(column(WINDOW), verdicts):
        rows += [base | {"bin": entry["bin"], "low": entry["low"], "high": entry["high"], "measure": measure, "extracted": k,
                         "windows": entry["windows"], "rate": 100.0 * k / entry["windows"], "of": f"{k} of {entry['windows']}"}
                 for measure, k in entry["extracted"].items()]
    return rows


def corpus_count_chart(points: list[dict[str, Any]], title: str) -> dict[str, Any]:
    """Extraction rate against the window's count in the training corpus (log-spaced bins), a line per measure and a
    panel per `panel`; hover a point for its rate as k of n windows."""
    bins = [label for _, label in sorted({(p["low"], p["bin"]) for p in points})]
    measures = alt.selection_point(fields=["measure"], bind="legend", name="corpus_measure")
    lines = alt.Chart().mark_line(point=True).encode(
        x=alt.X("bin:O", title="occurrences of prefix + suffix in the training corpus", sort=bins, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("rate:Q", title="extraction rate, %", scale=alt.Scale(domain=[0, 100])),
        color=alt.Color("measure:N", title="measure", sort=list(dict.fromkeys(p["measure"] for p in points))),
        strokeDash=alt.condition("datum.measure == 'greedy (verbatim)'", alt.value([6, 3]), alt.value([1, 0])),
        opacity=alt.condition(measures, alt.value(1.0), alt.value(0.1)),
        tooltip=tooltips("panel:N", alt.Tooltip("bin:N", title="corpus count"), "measure:N",
                         alt.Tooltip("rate:Q", title="rate, %", format=".1f"), alt.Tooltip("of:N", title="windows")),
    ).add_params(measures).properties(width=320, height=240)
    panels = list(dict.fromkeys(p["panel"] for p in points))
    header = alt.Header(labelFontSize=12, labelFontWeight="bold", labels=len(panels) > 1)
    return alt.layer(lines, data=alt.Data(values=points)).facet(
        column=alt.Column("panel:N", title=None, sort=panels, header=header)).properties(title=title).to_dict(validate=False)


def counts_table(column_of: dict[str, Column]) -> Html:
    """Per dataset: windows, how many occur in the corpus at all, and the median and largest suffix and window counts."""
    rows = []
    for name, column in column_of.items():
        stats = count_stats(column)
        rows.append((name, int(column(WINDOW).size), stats["windows_in_corpus"], stats["median_suffix"], stats["median_window"],
                     stats["max_suffix"], stats["max_window"]))
    return table(["dataset", "windows", "prefix + suffix in the corpus", "median suffix count", "median window count",
                  "largest suffix count", "largest window count"], rows)


def corpus_counts_section(config: ExperimentConfig, rows: dict[str, list], setup: dict[str, Any], label: str,
                          prefix: str) -> tuple[Html, list[Picture]]:
    """Counts per dataset, the index they come from, and the chart of extraction against the window count."""
    datasets = np.asarray(rows["dataset"])
    columns = {d.name: column_reader(rows, datasets == d.name) for d in config.scored_datasets() if (datasets == d.name).any()}
    everything = column_reader(rows, np.ones(datasets.size, dtype=bool))
    where = (f"Index of {setup['documents']:,} documents, {setup['tokens']:,} tokens (infini-gram), in the tokenizer of "
             f"{setup['tokenizer']['model']}. " if setup else "")
    parts = [tag("h3", "Occurrences in the training corpus"),
             note(f"{where}Counts are of token-id n-grams, overlapping occurrences included, none across two documents; "
                  "the window count is the duplication measure (a suffix alone also occurs wherever its words are common)."),
             counts_table(columns)]
    points = count_points(everything, config, {"panel": label})
    if not points:
        return join([*parts, note(f"No extraction chart: the run's methods ({', '.join(config.methods)}) include no "
                                  "extraction method to draw against the counts.")]), []
    html, picture = chart(corpus_count_chart(points, f"{label}: extraction against occurrences in the training corpus"),
                          f"{prefix}corpus-counts",
                          "Extraction rate of every measure against how often the whole window (prefix + suffix) occurs in "
                          "the training corpus, in log-spaced bins, all scored windows pooled ((n,p) paper Fig. 6 with "
                          "measured counts). Hover a point for its rate as k of n windows; click a legend entry to show one measure.")
    return join([*parts, html]), [picture]
