"""The report's membership-inference section: one ROC chart with every membership and extraction score (targets pooled
against the controls) and a table of AUC and TPR at low FPR with bootstrap intervals, per comparison (docs/membership.md)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from memrisk import layout
from memrisk.config import ExperimentConfig
from memrisk.methods.membership import membership_summary, roc_curves
from memrisk.report import charts
from memrisk.report.markup import Html, Picture, chart, join, note, pct, table, tag
from memrisk.store import RecordStore

POOLED = "pooled"


def interval_text(entry: dict[str, Any], percent: bool) -> str:
    """'0.812 [0.744, 0.871]' (or as percentages), the estimate alone without bootstrap."""
    def shown(value: float) -> str:
        return pct(value) if percent else f"{value:.3f}"

    if entry["low"] is None:
        return shown(entry["estimate"])
    return f"{shown(entry['estimate'])} [{shown(entry['low'])}, {shown(entry['high'])}]"


def stored_summary(store: RecordStore, rows: dict[str, list], config: ExperimentConfig) -> dict[str, Any]:
    """The run's membership entry of summary.json (as `memrisk run` and `memrisk report` write it), else computed."""
    if (store.root / layout.SUMMARY).is_file():
        stored = store.read_json(layout.SUMMARY).get("membership")
        if stored is not None:
            return stored
    return membership_summary(rows, config)


def resolution_note(summary: dict[str, Any], non_members: int) -> Html | None:
    """Which FPRs the controls cannot resolve: below 1/n₀ no false positive is allowed, so TPR there is TPR at FPR 0."""
    unresolved = [f"{pct(fpr)}" for fpr in summary["fprs"] if fpr * non_members < 1]
    if not unresolved:
        return None
    return note(f"With {non_members} control windows an FPR below 1/{non_members} = {pct(1 / non_members)} allows no false "
                f"positive: TPR at FPR {' and '.join(unresolved)} is the TPR at FPR 0. Resolving FPR {pct(min(summary['fprs']))} "
                f"needs at least {round(1 / min(summary['fprs'])):,} controls.")


def roc_table(summary: dict[str, Any]) -> Html:
    """Per comparison and score: members, non-members, AUC and TPR at each FPR, each with its interval."""
    fprs = [f"{fpr:g}" for fpr in summary["fprs"]]
    level = f"{100 * summary['confidence']:g}%"
    header = ["targets", "score", "family", "members / non-members", f"AUC [{level} interval]",
              *(f"TPR at FPR {pct(float(f))}" for f in fprs)]
    rows = []
    for comparison, scores in summary["comparisons"].items():
        for key, entry in scores.items():
            about = summary["scores"][key]
            rows.append([
                "all targets" if comparison == POOLED else comparison, about["name"], about["family"],
                f"{entry['members']} / {entry['non_members']}", interval_text(entry["auc"], percent=False),
                *(interval_text(entry["tpr_at_fpr"][f], percent=True) for f in fprs),
            ])
    return table(header, rows)


def membership_section(store: RecordStore, config: ExperimentConfig, records: pa.Table, label: str,
                       prefix: str) -> tuple[Html, list[Picture]]:
    """The ROC chart and the AUC/TPR table, or a note saying why there are none (no control or no target windows)."""
    rows = records.to_pydict()
    summary = stored_summary(store, rows, config)
    parts: list[object] = [tag("h3", "Membership inference: targets (members) against controls (non-members)")]
    if "note" in summary:
        return join([*parts, note(f"No ROC: the run has {summary['note']}.")]), []
    auc = summary["comparisons"][POOLED]
    series = [{"name": score.name, "family": score.family, "auc": interval_text(auc[score.key]["auc"], percent=False),
               "fpr": curve.fpr, "tpr": curve.tpr} for score, curve in roc_curves(rows, config)]
    first = next(iter(auc.values()))
    spec = charts.roc_chart(series, first["non_members"], f"{label}: ROC of membership and extraction scores")
    html, picture = chart(spec, f"{prefix}membership-roc", (
        f"ROC of every score, all {first['members']} target windows against the {first['non_members']} control windows "
        "(log FPR axis; FPR 0 is drawn on the left edge). Membership scores are solid, extraction scores dashed; hover a "
        "line for its score and AUC, click a legend entry to show one score."))
    return join([
        *parts,
        note(f"Each score ranks windows as likely members (higher: member). AUC counts ties as one half; TPR is read at the "
             f"last ROC vertex with FPR at most the rate; intervals are {summary['bootstrap']} stratified bootstrap "
             f"resamples (seed {summary['seed']}). Min-K% and Min-K%++ average the lowest k = {summary['k']:g} of the "
             "tokens. Controls from another distribution than the targets make any score look better than it is "
             "(docs/membership.md)."),
        html, roc_table(summary), *filter(None, [resolution_note(summary, first["non_members"])]),
    ]), [picture]
