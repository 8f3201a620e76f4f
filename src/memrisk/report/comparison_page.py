"""The report section comparing several runs with records: a summary row per run, rates against ε and the
mass-gain CCDF per run."""

from __future__ import annotations

from collections.abc import Sequence

from memrisk import rules
from memrisk.report import charts, metrics
from memrisk.report.markup import Html, Picture, chart, count_rate, join, note, table, tag
from memrisk.report.run_page import Run, extracted_mask


def comparison_section(runs: Sequence[Run]) -> tuple[Html, list[Picture]]:
    """A summary row per run, rates against ε per run (targets, controls) and mass-gain CCDF per run."""
    tau = runs[0].tau
    panels = {f"{role}s": {r.label: metrics.extraction_rates(r.role(role), tau) for r in runs} for role in metrics.ROLES}
    rates_html, rates_pic = chart(charts.rates_chart(panels, tau, "extraction rate against ε per run"), "compare-rates",
                                  f"Extraction rate against ε per run (τ_min = {tau:g}); hover a point for k of n windows.")
    pics = [rates_pic]
    drawn = [rates_html]
    curves = {r.label: metrics.ccdf_curve(rules.mass_gain(r.role("target").lower)) for r in runs if r.near_verbatim}
    if curves:
        ccdf_html, ccdf_pic = chart(charts.ccdf_chart(curves, "LB_E", "near-verbatim mass gain per run"), "compare-ccdf",
                                    "CCDF of the near-verbatim mass gain per run (share of all target windows).")
        drawn.append(ccdf_html)
        pics.append(ccdf_pic)
    else:
        drawn.append(note("No mass-gain CCDF: it needs p_z (probabilistic) and CBS bounds (cbs), and no run has both."))
    rows = []
    for r in runs:
        rates, control = metrics.extraction_rates(r.role("target"), tau), r.role("control")
        rows.append((r.label, rates["count"], *(_of(rate, rates["count"]) for rate in (
            (rates.get("greedy") or [None])[0], rates.get("probabilistic"), (rates.get("cbs") or [None])[-1])),
            f"{int(extracted_mask(control, tau).sum())}/{control.count}"))
    parts: list[object] = [tag("h2", "Comparison of runs")]
    if len({r.tau for r in runs}) > 1:
        parts.append(note(f"The runs use different τ_min; this section applies the first run's τ_min = {tau:g} to all."))
    parts += [table(["run", "target sequences", "greedy verbatim", "p_z ≥ τ", "CBS LB_E ≥ τ", "control hits"], rows),
              note("Each rate is k/n target windows of that run (a method the run did not run shows —); control hits are the "
                   "negative-control windows any method extracted, of the run's controls."),
              *drawn]
    return join(parts), pics


def _of(rate: float | None, count: int) -> str:
    """A rate as 'k/n (x%)', '—' when the run has no such rate."""
    return "—" if rate is None else count_rate(round(rate * count), count)
