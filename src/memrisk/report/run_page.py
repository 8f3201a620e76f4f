"""The report section of one run with records: loading the run folder, then its configuration, rates, certificate,
near-verbatim tables, figures, top sequences and prior-aware memorization."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from memrisk import layout, rules
from memrisk.config import ExperimentConfig, parse_config
from memrisk.methods import configured
from memrisk.errors import MemriskError
from memrisk.models.backend import load_tokenizer, token_text_reader
from memrisk.report import charts, explorer, metrics
from memrisk.report.explorer import Pieces
from memrisk.report.corpus_counts_page import corpus_counts_section
from memrisk.report.membership_page import membership_section
from memrisk.report.markup import (
    LIST_LIMIT, Html, Picture, capped, chart, count_rate, inline_diff_html, join, log10_text, mass_text,
    note, packed_json_script, pct, table, tag,
)
from memrisk.report.text import pa_budget, token_eval_rows
from memrisk.store import RecordStore

TOP_ROWS = 10
HEATMAP_DOCUMENTS = 6
PREFIX_TAIL = 120


@dataclass(frozen=True)
class Run:
    """One run folder, loaded for reporting."""

    store: RecordStore
    label: str
    config: ExperimentConfig
    versions: dict[str, Any]
    windows: dict[str, Any]
    prior: dict[str, Any]
    table: pa.Table
    arrays: metrics.RunArrays

    @property
    def tau(self) -> float:
        """τ_min of the run."""
        return self.config.tau_min

    @property
    def near_label(self) -> str:
        """Name of the near-verbatim lower bound, e.g. 'LB_5 (levenshtein)'."""
        return f"LB_{self.config.cbs.epsilon} ({rules.cbs_distance(self.config.cbs.prune_mode)})"

    @property
    def near_verbatim(self) -> bool:
        """Whether the run has both p_z and CBS bounds."""
        return self.arrays.log_p is not None and self.arrays.lower is not None

    @property
    def prior_aware(self) -> bool:
        """Whether the run has prior-aware (PA) columns."""
        return self.arrays.pa_log_p is not None

    def role(self, role: str) -> metrics.RunArrays:
        """The sequences of one role."""
        return self.arrays.subset(self.arrays.role == role)

    def row(self, index: int) -> dict[str, Any]:
        """One record as a dict."""
        return self.table.slice(int(index), 1).to_pylist()[0]


def _optional_json(store: RecordStore, name: str) -> dict[str, Any]:
    """A JSON file of the run folder, or {} when the run has none."""
    return store.read_json(name) if (store.root / name).is_file() else {}


def model_label(name: str) -> str:
    """A model as the report names it: its name, or the last part of a local folder's path (never a cache path)."""
    return Path(name).name if Path(name).is_absolute() or Path(name).exists() else name


def load_run(folder: Path) -> Run:
    """Read a run folder's config, provenance and records (labelled by its model name)."""
    store = RecordStore.existing(folder)
    config = parse_config(store.read_yaml(layout.CONFIG))
    records = store.read_records()
    return Run(store, model_label(config.model.name), config, _optional_json(store, layout.VERSIONS), _optional_json(store, layout.WINDOWS),
               _optional_json(store, layout.PRIOR_AWARE), records, metrics.run_arrays(records, config))


def signature(run: Run) -> Html:
    """The configuration that produced the records, and the software that ran it."""
    c, model, policy = run.config, run.versions.get("model", {}), run.config.cbs_policy()
    window = f"{c.windows.mode} mode, a = {c.windows.prefix_length}, T = {c.windows.suffix_length}"
    software = " / ".join(str(run.versions.get(k, "—")) for k in ("memrisk", "torch", "transformers"))
    rows = [
        ("model", c.model.name),
        ("revision", c.model.revision or model.get("revision") or "—"),
        ("commit", model.get("commit_hash") or "—"),
        ("architecture / dtype", f"{model.get('architecture', '—')} / {model.get('dtype', c.model.dtype)}"),
        ("policies", ", ".join(f"{p.label} (β={p.temperature:g}, top_k={p.top_k}, top_p={p.top_p})" for p in c.policies)),
        ("p_z and CBS policy", policy.label),
        ("methods", ", ".join(c.methods)),
        ("windows", window + (f", stride {c.windows.stride} characters" if c.windows.mode == "book" else "")),
        ("CBS", f"B = {c.cbs.beam_width}, k = {policy.top_k or '—'}, ε = {c.cbs.epsilon}, prune = {c.cbs.prune}, "
                f"τ_min stop = {c.cbs.tau_min_stop}"),
        ("τ_min", f"{c.tau_min:g}"),
        ("records", run.arrays.count),
        ("memrisk / torch / transformers", software),
        ("folder", str(run.store.root)),
        *((f"signature: {method.name}", tag("code", method.signature(c))) for method in configured(c)),
    ]
    return table(["setting", "value"], rows)


def data_table(run: Run) -> Html:
    """Documents and windows per dataset, with what windowing skipped."""
    keys = ("role", "documents", "windows", "skipped_short_documents", "duplicate_windows_removed")
    header = ["dataset", "role", "documents", "windows", "short documents skipped", "duplicate windows removed"]
    return table(header, [(name, *(info.get(k, "—") for k in keys)) for name, info in run.windows.items()])


def rates_table(run: Run) -> Html:
    """Per dataset and per role: greedy, probabilistic per policy and CBS rates, with the near-verbatim-only counts."""
    a, top = run.arrays, run.config.cbs.epsilon
    header = ["dataset", "role", "windows"]
    if a.greedy_exact is not None:
        header += ["greedy verbatim", f"greedy dist ≤ {top}"]
    header += [f"p_z ≥ τ ({label})" for label in a.policy_log_p or {}]
    if a.lower is not None:
        header += ["CBS LB_0 ≥ τ", f"CBS {run.near_label} ≥ τ"]
    if run.near_verbatim:
        header += ["near-verbatim only, p_z = 0", "near-verbatim only, 0 < p_z < τ"]
    groups = [(d.name, d.role, a.dataset == d.name) for d in run.config.scored_datasets()]
    groups += [(f"all {role}s", role, a.role == role) for role in metrics.ROLES]
    rows = []
    for name, role, mask in groups:
        part, n = a.subset(mask), int(mask.sum())
        row: list[object] = [name, role, n]
        if a.greedy_exact is not None:
            row += [count_rate(int(part.greedy_exact.sum()), n), count_rate(int((part.greedy_distance <= top).sum()), n)]
        row += [count_rate(s["extractable"], n) for s in metrics.policy_table(part, run.tau).values()]
        if a.lower is not None:
            row += [count_rate(int(rules.cbs_extracted(part.lower[:, e], run.tau).sum()), n) for e in (0, -1)]
        if run.near_verbatim:
            counts = rules.counts(part.log_p, part.lower[:, -1], run.tau)
            row += [counts["near_verbatim_p_z_zero"], counts["near_verbatim_p_z_positive"]]
        rows.append(row)
    return join([table(header, rows), signatures_note(run)])


def signatures_note(run: Run) -> Html:
    """The settings behind the rates above, one signature per method (as `summary.json` keeps them)."""
    methods = [method for method in configured(run.config) if method.name in ("greedy", "probabilistic", "cbs")]
    if not methods:
        return Html("")
    parts: list[object] = ["Each rate is k/n windows (the negative controls in the rows of role control); the settings behind "
                           "them: "]
    for i, method in enumerate(methods):
        parts += ["; " if i else "", f"{method.name} ", tag("code", method.signature(run.config))]
    return tag("p", *parts, class_="note")


def cost_table(costs: dict[str, dict[str, Any]]) -> Html:
    """Token evaluations per method over the run: total, windows, per window (CBS App. C.3, Tables 1–2)."""
    return join([
        tag("h3", "Token evaluations per method"),
        note("The model's work as CBS App. C.3 counts it: teacher forcing a + T for every policy at once, greedy "
             "a + T − 1, CBS a + Σ_t |L_t|, prior-aware a + T plus c·trials·T."),
        table(["method", "token evaluations", "windows", "per window"], token_eval_rows(costs)),
    ])


def certificate_table(run: Run) -> Html:
    """Per dataset and ε: mean LB_ε, mean UB_ε, mean UB_ε − LB_ε and the share certified to within 1e-3 (CBS §E)."""
    a, rows = run.arrays, []
    for d in run.config.scored_datasets():
        part = a.subset(a.dataset == d.name)
        cert = rules.certificate(part.lower, part.upper)
        rows += [(d.name, d.role, e, *(mass_text(cert[k][e]) for k in ("mean_lower", "mean_upper", "mean_gap")),
                  pct(cert["certified_share"][e])) for e in a.epsilons]
    header = ["dataset", "role", "ε", "mean LB_ε", "mean UB_ε", "mean UB_ε − LB_ε", f"UB_ε − LB_ε ≤ {rules.CERTIFIED_GAP:g}"]
    return join([
        tag("h3", f"Certificate: LB_ε ≤ p_z,ε ≤ UB_ε ({rules.cbs_distance(run.config.cbs.prune_mode)})"),
        note("CBS bounds the near-verbatim mass from both sides; where UB − LB is small the lower bound is the mass itself."),
        table(header, rows),
    ])


def near_verbatim_tables(run: Run) -> Html:
    """Target sequences: verdicts per ε, mass-gain CCDF points, shell-share medians, verbatim recovery; the negative
    controls' counts beside the targets' where the run has controls."""
    t, tau, label = run.role("target"), run.tau, run.near_label
    gain = metrics.gain_table(t.lower, tau)
    shares = rules.shell_shares(t.lower, tau)
    rec = rules.recovery(t.example_id, t.log_p, t.lower[:, 0], tau)
    per_eps = metrics.verdicts_by_epsilon(t.log_p, t.lower, tau)
    ratio = "—" if rec["ratio"] is None else f"{rec['ratio']:.3f}"
    c = run.role("control")
    header = ["ε", "verbatim (p_z ≥ τ; blue)", "near-verbatim only (p_z < τ ≤ LB_ε)", "of which p_z = 0 (red)",
              "of which 0 < p_z < τ (orange)", "not extracted", "sequences"]
    rows = [[e, u["verbatim"], u["near_verbatim"], u["near_verbatim_p_z_zero"], u["near_verbatim_p_z_positive"],
             u["not_extracted"], u["total"]] for e, u in enumerate(per_eps)]
    gain_header, gain_rows = ["Δ ≥", "% of all sequences", "% of the extracted set"], [
        [x, pct(gain["population"][x]), pct(gain["extracted"][x])] for x in gain["population"]]
    if c.count:
        header.append("negative controls with LB_ε ≥ τ")
        for e, row in enumerate(rows):
            row.append(count_rate(int(rules.cbs_extracted(c.lower[:, e], tau).sum()), c.count))
        control_gain = metrics.gain_table(c.lower, tau)["population"]
        gain_header.append(f"% of all {c.count} negative controls")
        for row in gain_rows:
            row.append(pct(control_gain[row[0]]))
    return join([
        tag("h3", "Target sequences per ε: verbatim, near-verbatim only (unlocked), not extracted"),
        table(header, rows),
        tag("h3", f"Mass gain Δ = {label} − LB_0"),
        note(f"Any positive gain: {pct(gain['any_gain'])} of {gain['population_count']} sequences. "
             f"Extracted set: {label} ≥ τ_min ({gain['extracted_count']} sequences)."),
        table(gain_header, gain_rows),
        tag("h3", "ε-shell shares of the extracted set"),
        table(["ε-shell", *range(t.lower.shape[1])], [["median share (0: verbatim share LB_0 / LB_E)", *map(pct, metrics.medians(shares))]]),
        tag("h3", "Recovery of verbatim extraction by CBS"),
        table(["teacher-forced p_z ≥ τ", "CBS LB_0 ≥ τ", "recovery ratio", "missed by CBS", "found only by CBS"],
              [(rec["teacher_forced"], rec["cbs_verbatim"], ratio, capped(rec["missed"]), capped(rec["extra"]))]),
    ])


def interactive_charts(run: Run, prefix: str, key: int) -> tuple[list[Html], list[Picture]]:
    """The run's interactive charts and their static files: CBS Fig. 3 and the mass-gain CCDF when the run has p_z and
    CBS, the rates against ε, the (n,p) curves with p_z, and the book heatmap in book mode. Points of the scatter and
    cells of the heatmap open their windows in explorer `key`."""
    a, tau = run.arrays, run.tau
    roles = {role: run.role(role) for role in metrics.ROLES if (a.role == role).any()}
    drawn = []
    if run.near_verbatim:
        t = run.role("target")
        spec = charts.verdict_scatter(t.example_id, t.dataset, t.log_p, t.lower[:, -1], tau, run.near_label,
                                      f"{run.label}: {run.near_label} against p_z, target windows")
        drawn.append(chart(spec, f"{prefix}scatter", f"{run.near_label} against p_z for the target windows extracted either "
                           "way (CBS Fig. 3): hover a point for its window, drag to pan, scroll to zoom, click a legend entry "
                           "to show one kind, click a point to open it in the window explorer below. Zeros sit on the floor "
                           "a decade below the smallest value.", key))
    panels = {"by role": {role: metrics.extraction_rates(part, tau) for role, part in roles.items()}}
    if 2 < len(run.config.scored_datasets()) <= charts.SERIES_LIMIT:
        panels["by dataset"] = {d.name: metrics.extraction_rates(a.subset(a.dataset == d.name), tau) for d in run.config.scored_datasets()}
    drawn.append(chart(charts.rates_chart(panels, tau, f"{run.label}: extraction rate against ε"), f"{prefix}rates",
                       "Extraction rate against ε: greedy (distance ≤ ε), CBS (LB_ε ≥ τ_min) and verbatim p_z ≥ τ_min (flat "
                       "in ε). Hover a point for its rate as k of n windows; click a legend entry to show one series."))
    if run.near_verbatim:
        gain = metrics.ccdf_curve(rules.mass_gain(t.lower))
        drawn.append(chart(charts.ccdf_chart({run.label: gain}, run.near_label, f"{run.label}: near-verbatim mass gain"),
                           f"{prefix}ccdf", f"CCDF of the mass gain {run.near_label} − LB_0 over all {t.count} target windows "
                           "(the denominator); dotted at 10⁻³, 10⁻², 10⁻¹."))
    if a.log_p is not None:
        curves = {role: metrics.np_curves(part.log_p, part.greedy_exact) for role, part in roles.items()}
        policy = run.config.cbs_policy().label
        drawn.append(chart(charts.np_curves_chart(curves, policy, f"{run.label}: (n,p)-extraction rates"), f"{prefix}np-curves",
                           f"(n,p)-extraction rates from p_z ({policy}): the share of windows whose suffix n generations "
                           "emit at least once with probability ≥ p; greedy verbatim rate dashed, the largest rate any n "
                           "reaches (p_z > 0) dotted."))
    if run.config.windows.mode == "book":
        maps = metrics.book_heatmaps(a)
        shown = maps[:HEATMAP_DOCUMENTS]
        spec = charts.book_heatmap_chart(shown, a.example_id, tau, run.near_label, f"{run.label}: extraction along the text")
        drawn.append(chart(spec, f"{prefix}book-heatmap", f"Max extraction probability per character over the suffixes "
                           f"covering it (log scale, white below τ_min = {tau:g}); {len(shown)} of {len(maps)} documents, "
                           "most windows first. Hover a cell for its characters and window; click it to open the window.", key))
    if run.near_verbatim:
        drawn += shell_charts(run, prefix, key)
    return [html for html, _ in drawn], [pic for _, pic in drawn]


def charts_left_out(run: Run) -> list[str]:
    """Why each chart the run's page does not draw is left out (an empty section says why it is empty)."""
    methods = ", ".join(run.config.methods)
    out = []
    if not run.near_verbatim:
        out.append(f"No CBS Fig. 3 scatter, mass-gain CCDF or ε-shell charts: they need p_z (probabilistic) and CBS bounds "
                   f"(cbs), and this run's methods are {methods}.")
    elif not rules.cbs_extracted(run.role("target").lower[:, -1], run.tau).any():
        out.append(f"No ε-shell charts: no target window has {run.near_label} ≥ τ_min = {run.tau:g}, so there are no "
                   "shares to draw.")
    if run.arrays.log_p is None:
        out.append(f"No (n,p) curves: they need p_z (probabilistic), and this run's methods are {methods}.")
    if run.config.windows.mode != "book":
        out.append("No book heatmap: windows in doc mode do not tile a text (windows: {mode: book} does).")
    return out


def shell_charts(run: Run, prefix: str, key: int) -> list[tuple[Html, Picture]]:
    """The ε-shell charts of the extracted target windows (CBS §F.1.3): a heatmap whose cells open their windows in
    explorer `key`, and the shares' distributions per shell."""
    t = run.role("target")
    extracted = rules.cbs_extracted(t.lower[:, -1], run.tau)
    shares = rules.shell_shares(t.lower, run.tau)
    if not shares.shape[0]:
        return []
    return [
        chart(charts.shell_heatmap_chart(t.example_id[extracted], t.dataset[extracted], shares,
                                         f"{run.label}: ε-shells of the extracted windows"), f"{prefix}shell-heatmap",
              f"Per extracted target window ({run.near_label} ≥ τ_min), the share of its lower bound in each ε-shell, sorted "
              "by verbatim share. Hover a cell for the window; click it to open the window.", key),
        chart(charts.shell_violin_chart(shares, metrics.medians(shares), f"{run.label}: ε-shell shares"), f"{prefix}shell-violins",
              "Distribution of the ε-shell shares over the extracted target windows (kernel density); the black tick "
              "and its label are the median."),
    ]


def best_candidate(run: Run, row: dict[str, Any]) -> dict[str, Any] | None:
    """The most probable stored CBS candidate within ε (else the most probable one)."""
    top, distance = row.get("cbs_top") or [], rules.cbs_distance(run.config.cbs.prune_mode)
    return next((cand for cand in top if cand[distance] <= run.config.cbs.epsilon), top[0] if top else None)


def sequence_cell(run: Run, row: dict[str, Any]) -> Html:
    """Prefix tail, then the greedy continuation and the best CBS candidate diffed against the target."""
    target = row["suffix_text"]
    parts: list[object] = [tag("div", "…" + row["prefix_text"][-PREFIX_TAIL:], class_="text prefix")]
    if "greedy_text" in row:
        parts += [tag("span", f"greedy (Lev {row['greedy_levenshtein']}):", class_="label"), inline_diff_html(target, row["greedy_text"])]
    cand = best_candidate(run, row)
    if cand is not None:
        about = f"p = {math.exp(cand['log_p']):.3g}, Lev {cand['levenshtein']}, Ham {cand['hamming']}"
        parts += [tag("span", f"best CBS candidate ({about}):", class_="label"), inline_diff_html(target, cand["text"])]
    if len(parts) == 1:
        parts += [tag("span", "target suffix:", class_="label"), tag("div", target, class_="text")]
    return join(parts)


def scores_cell(run: Run, index: int) -> Html:
    """log10 p_z, the near-verbatim lower bound, the verdict and greedy exactness of one sequence."""
    a, lines = run.arrays, []
    if a.log_p is not None:
        lines.append(f"log10 p_z {a.log_p[index] / math.log(10.0):.2f}" if np.isfinite(a.log_p[index]) else "p_z = 0")
    if a.lower is not None:
        lines.append(f"{run.near_label} {a.lower[index, -1]:.3g}")
    if run.near_verbatim:
        lines.append(f"verdict: {rules.LABELS[rules.verdicts(a.log_p[[index]], a.lower[[index], -1], run.tau)[0]]}")
    if a.greedy_exact is not None:
        lines.append(f"greedy exact: {bool(a.greedy_exact[index])}")
    return join(tag("div", line) for line in lines)


def sequence_table(run: Run, indices: Iterable[int]) -> Html:
    """Sequences with their scores and text diffs."""
    rows = [(run.arrays.example_id[i], run.arrays.dataset[i], scores_cell(run, i), sequence_cell(run, run.row(i))) for i in indices]
    return table(["example", "dataset", "scores", "text (missing from / added to the target)"], rows)


def extracted_mask(a: metrics.RunArrays, tau: float) -> np.ndarray:
    """Sequences extracted by any method: p_z ≥ τ, LB_E ≥ τ or greedy exact."""
    mask = np.zeros(a.count, dtype=bool)
    if a.log_p is not None:
        mask |= rules.verbatim(a.log_p, tau)
    if a.lower is not None:
        mask |= rules.cbs_extracted(a.lower[:, -1], tau)
    if a.greedy_exact is not None:
        mask |= a.greedy_exact
    return mask


def strength(a: metrics.RunArrays) -> np.ndarray:
    """Sort key: the larger of p_z and LB_E (runs with neither: 1 for greedy exact)."""
    values = [metrics.probabilities(a.log_p)] if a.log_p is not None else []
    values += [a.lower[:, -1]] if a.lower is not None else []
    if not values and a.greedy_exact is not None:
        values = [a.greedy_exact.astype(np.float64)]
    return np.max(values, axis=0) if values else np.zeros(a.count)


def sequences_section(run: Run) -> Html:
    """Top extracted and top unlocked target sequences, and every negative-control hit."""
    a, tau = run.arrays, run.tau
    order = np.argsort(-strength(a), kind="stable")
    extracted = extracted_mask(a, tau)
    is_target, is_control = a.role == "target", a.role == "control"
    top = [i for i in order if extracted[i] and is_target[i]][:TOP_ROWS]
    parts = [tag("h3", "Top extracted target sequences"),
             sequence_table(run, top) if top else note("No target sequence was extracted by any method.")]
    if run.near_verbatim:
        kind = rules.verdicts(a.log_p, a.lower[:, -1], tau)
        by_bound = np.argsort(-a.lower[:, -1], kind="stable")
        unlocked = [i for i in by_bound if kind[i] == rules.NEAR_VERBATIM and is_target[i]][:TOP_ROWS]
        parts += [tag("h3", f"Top unlocked target sequences (p_z < τ_min ≤ {run.near_label})"),
                  sequence_table(run, unlocked) if unlocked else note("No target sequence was unlocked.")]
    hits = [i for i in order if extracted[i] and is_control[i]]
    parts.append(tag("h3", "Negative-control hits (role = control)"))
    if not is_control.any():
        parts.append(note("This run has no negative-control dataset."))
    elif not hits:
        parts.append(note(f"None of the {int(is_control.sum())} control sequences was extracted by any method."))
    else:
        shown = f" (showing {LIST_LIMIT})" if len(hits) > LIST_LIMIT else ""
        parts += [note(f"{len(hits)} of {int(is_control.sum())} control sequences were extracted{shown}:"),
                  sequence_table(run, hits[:LIST_LIMIT])]
    return join(parts)


def prior_aware_settings(run: Run) -> Html:
    """m, n (calibrated or given, with the calibration ratios), the prefix bank, c and trials, from prior_aware.json."""
    info = run.prior
    if not info:
        return note(f"{layout.PRIOR_AWARE} is missing from the run folder: m, n and the prefix bank are unknown.")
    calibrated = info["n_source"] == "calibrated"
    source = "calibrated: the mean ratio of the generic sequences below" if calibrated else "given in the config"
    line = (f"m = {info['m']:g}, n = {info['n']:.4g} ({source}); prefix bank {info['bank']} from "
            f"{', '.join(info['bank_datasets'])}; c = {info['prefixes_per_trial']:,} prefixes per trial, {info['trials']} trials.")
    if not calibrated:
        return tag("p", line)
    cal = info["calibration"]
    rows = [(text, log10_text(r / math.log(10.0))) for text, r in zip(cal["sequences"], cal["log_ratios"])]
    rows.append(("n (the mean ratio)", log10_text(cal["log_n"] / math.log(10.0))))
    return join([tag("p", line), table(["calibration sequence", "log10 P(s|p) / v̂_s"], rows)])


def run_budget(run: Run) -> str:
    """' (c = 5,000, 5 trials)' of the run's prior-aware settings, shown beside every PA number (PA §4)."""
    return pa_budget(run.config.prior_aware.prefixes_per_trial, run.config.prior_aware.trials)


def prior_aware_tables(run: Run) -> Html:
    """Per dataset: extractable and PA-memorized counts, PA share, median ratio and spread; then the filtered rates."""
    stats = metrics.prior_aware_by_dataset(run.table, run.config)
    roles = {d.name: d.role for d in run.config.datasets}
    header = ["dataset", "role", "examples", "extractable (P(s|p) > m)", "PA-memorized", "PA share (memorized / extractable)",
              "median log10 P(s|p) / v̂_s", "median trial spread (decades)"]
    budget = run_budget(run)
    rows = [(name, roles[name], s["examples"], count_rate(s["extractable"], s["examples"]),
             count_rate(s["pa_memorized"], s["examples"]) + budget, pct(s["pa_share"]) + budget,
             log10_text(s["median_log10_ratio"]) + budget, log10_text(s["median_log10_ratio_spread"]) + budget)
            for name, s in stats.items()]
    filtered = [(name, method, count_rate(f["extracted"], s["examples"]), count_rate(f["extracted_and_pa_memorized"], s["examples"]) + budget)
                for name, s in stats.items() for method, f in s["filtered"].items()]
    return join([
        table(header, rows),
        tag("h4", "Other methods filtered by PA"),
        table(["dataset", "method", "extracted", "extracted and PA-memorized"], filtered) if filtered
        else note("The run has no other extraction method to filter."),
    ])


def extremes_table(entries: Sequence[dict[str, Any]], budget: str) -> Html:
    """Sequences with their log10 P(s|p), prior and ratio, PA verdict and suffix text; `budget` names c and the trials."""
    rows = [(e["example_id"], e["dataset"], e["role"], log10_text(e["log10_p"]), log10_text(e["log10_prior"]),
             log10_text(e["log10_ratio"]), "yes" if e["pa_memorized"] else "no", tag("div", e["suffix_text"], class_="text"))
            for e in entries]
    header = ["example", "dataset", "role", "log10 P(s|p)", f"log10 v̂_s{budget}", f"log10 ratio{budget}", f"PA-memorized{budget}", "suffix"]
    return table(header, rows)


def prior_aware_section(run: Run, prefix: str, key: int) -> tuple[Html, list[Picture]]:
    """Settings, per-dataset PA counts and filtered rates, the prior scatter, and the lowest and highest ratios."""
    a, budget = run.arrays, run_budget(run)
    parts: list[object] = [tag("h3", "Prior-aware memorization"), prior_aware_settings(run), prior_aware_tables(run)]
    pics: list[Picture] = []
    if run.prior:
        dropped = a.count - int(metrics.finite_points(a.pa_log_prior, a.pa_log_p).sum())
        caption = (f"P(s|p) against the prior v̂_s{budget} (log–log), targets and controls; PA-memorized windows are diamonds. "
                   f"Dotted: P(s|p) = m; dashed: the PA boundary P(s|p) = n·v̂_s. {dropped} of {a.count} windows with "
                   "v̂_s = 0 or P(s|p) = 0 are not drawn. Hover a point for its window, click it to open it in the explorer.")
        spec = charts.prior_aware_chart(a.example_id, a.dataset, a.role, a.pa_log_prior, a.pa_log_p, a.pa_memorized,
                                        run.prior["m"], run.prior["n"], f"{run.label}: P(s|p) against the prior v̂_s")
        html, pic = chart(spec, f"{prefix}prior-aware", caption, key)
        parts.append(html)
        pics.append(pic)
    ends = metrics.prior_aware_ends(run.table, TOP_ROWS)
    parts += [tag("h4", f"{TOP_ROWS} lowest ratios P(s|p) / v̂_s"), extremes_table(ends["lowest"], budget),
              tag("h4", f"{TOP_ROWS} highest ratios P(s|p) / v̂_s"), extremes_table(ends["highest"], budget)]
    return join(parts), pics


def token_pieces(run: Run) -> tuple[Pieces | None, str | None]:
    """Each token id's text under the run's tokenizer (read without the weights), or None and why it cannot be read.
    A model name that is no folder or hub id (a study's `demo:small`) is read from the folder its weights were loaded
    from, as versions.json records it."""
    model = run.config.model
    pieces, problem = _tokenizer_pieces(model.name, model.revision, model.gguf_file)
    loaded_from = run.versions.get("model", {}).get("loaded_from")
    if pieces is None and loaded_from and loaded_from != model.name and Path(loaded_from).is_dir():
        return _tokenizer_pieces(loaded_from, model.revision, model.gguf_file)
    return pieces, problem


def _tokenizer_pieces(name: str, revision: str | None, gguf_file: str | None) -> tuple[Pieces | None, str | None]:
    """`token_pieces` by model (`load_tokenizer` reads each tokenizer once per process: a study's cells usually share one)."""
    try:
        tokenizer = load_tokenizer(name, revision=revision, gguf_file=gguf_file, local_only=True)
    except MemriskError as exc:
        return None, str(exc)
    return token_text_reader(tokenizer), None


def explorer_section(run: Run, key: int, hidden: bool = False) -> Html:
    """The window explorer: every window in a table that sorts and filters, and the window a click opens (`hidden`: one
    of a study's explorers, shown when its cell is picked)."""
    pieces, problem = token_pieces(run)
    data = explorer.explorer_data(run.config, run.arrays, run.table.to_pylist(), pieces)
    unit = "token" if pieces is not None else f"character (the tokenizer could not be read: {problem})"
    tools = tag("div", tag("input", type="search", class_="explorer-search", placeholder="search windows by text or id",
                           aria_label="search windows"), " ", tag("span", f"{run.arrays.count} windows", class_="explorer-count"),
                class_="explorer-tools")
    return tag("section", tag("h3", "Window explorer"),
               note(f"Every window of the run. Click a column to sort it, filter under its title (numbers: at least the value), "
                    f"search by text, click a row to open the window; the address then links to it. Diffs are by {unit}."),
               tools, tag("div", "", class_="explorer-table"),
               tag("div", note("Click a window to see its prefix, target, greedy continuation and CBS candidates."),
                   class_="window-detail"),
               packed_json_script(data, "memrisk-explorer-data", key=key),
               class_="explorer", id=f"explorer-{key}", **({"hidden": "hidden"} if hidden else {}))


def run_section(run: Run, prefix: str, key: int = 0) -> tuple[Html, list[Picture]]:
    """The report section of one run and its figures; `key` tells its window explorer apart from other runs'."""
    parts = [tag("h2", f"Run: {run.label}"), tag("h3", "Configuration"), signature(run)]
    if run.windows:
        parts += [tag("h3", "Data"), data_table(run)]
    if not run.arrays.count:
        return join([*parts, note("This run has no records yet.")]), []
    parts += [tag("h3", f"Extraction rates (τ_min = {run.tau:g})"), rates_table(run)]
    if run.arrays.lower is not None:
        parts.append(certificate_table(run))
    costs = metrics.token_evals(run.table)
    if costs:
        parts.append(cost_table(costs))
    if run.near_verbatim:
        parts.append(near_verbatim_tables(run))
    interactive, pics = interactive_charts(run, prefix, key)
    parts += [tag("h3", "Figures"), *interactive, *map(note, charts_left_out(run)), sequences_section(run)]
    if run.prior_aware:
        section, prior_pics = prior_aware_section(run, prefix, key)
        parts.append(section)
        pics += prior_pics
    if "membership" in run.config.methods:
        section, membership_pics = membership_section(run.store, run.config, run.table, run.label, prefix)
        parts.append(section)
        pics += membership_pics
    if "corpus_counts" in run.config.methods:
        setup = _optional_json(run.store, layout.setup_file("corpus_counts"))
        section, corpus_pics = corpus_counts_section(run.config, run.table.to_pydict(), setup, run.label, prefix)
        parts.append(section)
        pics += corpus_pics
    parts.append(explorer_section(run, key))
    return join(parts), pics
