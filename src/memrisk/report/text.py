"""Plain-text tables of a run's summary for the terminal."""

from __future__ import annotations

import difflib
from typing import Any

from memrisk import rules

TOKEN_EVAL_LABELS = {
    "probabilistic": "teacher forcing (probabilistic)", "greedy": "greedy", "cbs": "CBS",
    "cbs_baseline": "k-CBS baseline (text metrics)", "prior_aware": "prior-aware",
}


def _fmt_log10(value: float | None) -> str:
    """A log10 probability with one decimal, or '-inf' when there is none."""
    return "-inf" if value is None else f"{value:.1f}"


def inline_diff(target: str, candidate: str) -> str:
    """Word diff of a candidate against its target: [-missing-]{+added+}, whitespace folded."""
    target_words, candidate_words = target.split(), candidate.split()
    parts = []
    for op, a0, a1, b0, b1 in difflib.SequenceMatcher(None, target_words, candidate_words, autojunk=False).get_opcodes():
        if op == "equal":
            parts.append(" ".join(target_words[a0:a1]))
            continue
        if a1 > a0:
            parts.append(f"[-{' '.join(target_words[a0:a1])}-]")
        if b1 > b0:
            parts.append(f"{{+{' '.join(candidate_words[b0:b1])}+}}")
    return " ".join(parts)


def _cbs_cell(stats: dict[str, Any] | None) -> str:
    """'Lev<=5: 40% (0: 30%)': the CBS rate at the run's ε and at ε = 0."""
    if not stats:
        return "-"
    rates = stats["rate"][stats["distance"]]
    top = max(rates, key=int)
    short = "Lev" if stats["distance"] == "levenshtein" else "Ham"
    return f"{short}<={top}: {rates[top]:.0%} (0: {rates['0']:.0%})"


def _greedy_near_cell(stats: dict[str, Any] | None) -> str:
    """'Lev<=5: 40%': the greedy near-verbatim rate at the run's ε (the largest one the summary holds)."""
    if not stats:
        return "-"
    rates = stats["near_verbatim_rate"]["levenshtein"]
    top = max(rates, key=int)
    return f"Lev<={top}: {rates[top]:.0%}"


def summary_table(summary: dict[str, Any]) -> str:
    """Rates per dataset and policy, greedy rates, verdicts, the CBS certificate, PA counts, token evaluations and the
    top sequences as aligned text."""
    tau = summary["tau_min"]
    header = [
        "dataset", "role", "windows", "policy", f"p_z >= {tau:g}", "median log10 p_z", "max log10 p_z",
        "greedy exact", "greedy near-verbatim", "CBS near-verbatim",
    ]
    lines = []
    for name, entry in summary["datasets"].items():
        greedy = entry.get("greedy")
        greedy_exact = f"{greedy['exact']}/{entry['examples']}" if greedy else "-"
        greedy_near = _greedy_near_cell(greedy)
        near = _cbs_cell(entry.get("cbs"))
        for label, stats in (entry.get("probabilistic") or {"-": None}).items():
            lines.append([
                name, entry["role"], str(entry["examples"]), label,
                f"{stats['extractable']}/{entry['examples']} ({stats['rate']:.0%})" if stats else "-",
                _fmt_log10(stats["median_log10_p"]) if stats else "-",
                _fmt_log10(stats["max_log10_p"]) if stats else "-",
                greedy_exact, greedy_near, near,
            ])
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *lines]]
    out += _verdict_lines(summary) + _certificate_lines(summary)
    unlocked = summary.get("top_unlocked") or []
    if unlocked:
        out += ["", "Top sequences unlocked by near-verbatim extraction (p_z < tau_min <= CBS lower bound):"]
        for item in unlocked[:5]:
            out.append(f"  log10 p_z {float(item['log10_p']):7.2f}  log10 LB {item['log10_lower_bound']:6.2f}  {item['dataset']}")
            out.append("    " + inline_diff(item["suffix_text"], item["best_candidate"] or ""))
    out += _prior_aware_lines(summary) + _corpus_count_lines(summary) + _token_eval_lines(summary)
    top = summary.get("top_sequences") or []
    if top:
        out += ["", f"Top sequences by p_z ({top[0]['policy']}):"]
        for item in top[:5]:
            text = " ".join(item["suffix_text"].split())
            out.append(f"  log10 p_z {float(item['log10_p']):7.2f}  {item['dataset']:<12} {text[:90]!r}")
    return "\n".join(out + _signature_lines(summary))


def _signature_lines(summary: dict[str, Any]) -> list[str]:
    """Each method's signature: the settings behind its numbers above, to quote with them."""
    signatures = summary.get("signatures") or {}
    return ["", "Signatures:", *(f"  {signed}" for signed in signatures.values())] if signatures else []


def _verdict_lines(summary: dict[str, Any]) -> list[str]:
    """Per dataset with p_z and CBS: windows verbatim, near-verbatim only and not extracted (CBS §F.1.2)."""
    rows = [(name, entry["cbs"]["verdicts"]) for name, entry in summary["datasets"].items() if "verdicts" in entry.get("cbs", {})]
    if not rows:
        return []
    width = max(len(name) for name, _ in rows)
    out = ["", "Verdicts (verbatim: p_z >= tau_min; near-verbatim only: p_z < tau_min <= CBS lower bound at the largest eps):"]
    for name, counts in rows:
        near = f"{rules.LABELS[rules.NEAR_VERBATIM]} {counts[rules.NEAR_VERBATIM]} (p_z = 0: {counts['near_verbatim_p_z_zero']})"
        out.append(f"  {name:<{width}}  {rules.LABELS[rules.VERBATIM]} {counts[rules.VERBATIM]}  {near}"
                   f"  {rules.LABELS[rules.NOT_EXTRACTED]} {counts[rules.NOT_EXTRACTED]}")
    return out


def _certificate_lines(summary: dict[str, Any]) -> list[str]:
    """Per dataset with CBS: mean UB - LB per ε and the share certified to within 1e-3, for the pruning distance (CBS §E)."""
    rows = [(name, entry["cbs"]) for name, entry in summary["datasets"].items() if "cbs" in entry]
    if not rows:
        return []
    distance = rows[0][1]["distance"]
    tolerance = rows[0][1]["certificate"][distance]["tolerance"]
    width = max(len(name) for name, _ in rows)
    out = ["", f"CBS certificate LB <= p_z,eps <= UB ({distance}): mean UB - LB per eps (share with UB - LB <= {tolerance:g})"]
    for name, stats in rows:
        cert = stats["certificate"][distance]
        cells = [f"eps {e}: {gap:.2e} ({share:.0%})" for e, (gap, share) in enumerate(zip(cert["mean_gap"], cert["certified_share"]))]
        out.append(f"  {name:<{width}}  " + "  ".join(cells))
    return out


def token_eval_rows(costs: dict[str, dict[str, Any]]) -> list[list[str]]:
    """Method, total token evaluations, windows, per window (CBS App. C.3, Tables 1–2), as display strings."""
    return [[TOKEN_EVAL_LABELS.get(method, method), f"{c['total']:,}", f"{c['windows']:,}",
             "-" if c["per_window"] is None else f"{c['per_window']:,.1f}"] for method, c in costs.items()]


def _token_eval_lines(summary: dict[str, Any]) -> list[str]:
    """The run's token evaluations per method, when the records carry them."""
    if "token_evals" not in summary:
        return []
    rows = [["method", "total", "windows", "per window"], *token_eval_rows(summary["token_evals"])]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [row[0].ljust(widths[0]) + "".join(f"  {cell:>{w}}" for cell, w in zip(row[1:], widths[1:])) for row in rows]
    return ["", "Token evaluations per method (CBS App. C.3):", *("  " + line for line in lines)]


def _prior_aware_lines(summary: dict[str, Any]) -> list[str]:
    """Per dataset: extractable (P(s|p) > m) vs PA-memorized counts, when the run has them."""
    rows = [(name, entry["prior_aware"]) for name, entry in summary["datasets"].items() if "prior_aware" in entry]
    if not rows:
        return []
    settings = summary.get("prior_aware_settings") or {}
    thresholds = f"m = {settings['m']:g}, n = {settings['n']:.3g} ({settings['n_source']})" if settings else "m, n"
    out = ["", f"Prior-aware memorization, {thresholds}: extractable P(s|p) > m; PA-memorized also P(s|p)/prior > n"]
    width = max(len(name) for name, _ in rows)
    for name, stats in rows:
        median, examples = stats["median_log10_ratio"], summary["datasets"][name]["examples"]
        out.append(
            f"  {name:<{width}}  extractable {stats['extractable']}/{examples}  PA-memorized {stats['pa_memorized']}/{examples}"
            f"{pa_budget(stats['prefixes_per_trial'], stats['trials'])}  median log10 P(s|p)/prior {'-' if median is None else f'{median:.1f}'}"
        )
    return out


def _corpus_count_lines(summary: dict[str, Any]) -> list[str]:
    """Per dataset: the windows found in the training corpus and the median suffix and window counts, when the run has them."""
    rows = [(name, entry["corpus_counts"]) for name, entry in summary["datasets"].items() if "corpus_counts" in entry]
    if not rows:
        return []
    width = max(len(name) for name, _ in rows)
    out = ["", "Occurrences in the indexed corpus (`corpus:`; token ids; the window count is the duplication measure):"]
    for name, counts in rows:
        examples = summary["datasets"][name]["examples"]
        out.append(f"  {name:<{width}}  windows in the corpus {counts['windows_in_corpus']}/{examples}  median window count "
                   f"{counts['median_window']:g}  median suffix count {counts['median_suffix']:g}")
    return out


def pa_budget(c: int, trials: int) -> str:
    """' (c = 5,000, 5 trials)': the bank prefixes per trial and the trials behind a PA number's prior v̂_s (PA §4)."""
    return f" (c = {c:,}, {trials} trials)"


def books_text_table(summary: dict[str, Any]) -> str:
    """Terminal table of a books run: per book Phase 1, Phase 2, nv-recall and cost."""
    model = summary["model"]
    lines = [f"book extraction from {model['provider']}:{model['name']}", ""]
    lines.append(f"{'book':<24} {'phase 1':<22} {'phase 2':<24} {'nv-recall':>9} {'max block':>9} {'cost $':>9}")
    for book in summary["books"]:
        p1, p2, nv = book["phase1"], book["phase2"], book["nv_recall"]
        first = ("ok" if p1["success"] else "failed") + (f" s={p1['score']:.2f} k={p1['best_k']}" if p1["score"] is not None else "")
        second = f"{p2['turns']} turns, {p2['halt']}" if p2 else "not run"
        spent = sum(c["cost"] for c in book["costs"].values())
        lines.append(f"{book['name']:<24} {first:<22} {second:<24} {nv['nv_recall']:>9.1%} {nv['max_block']:>9} {spent:>9.2f}")
        if "per_chapter" in book:
            chapters = book["per_chapter"]
            lines.append(f"{'  per chapter (union)':<72} {chapters['nv_recall']:>9.1%} {chapters['max_block']:>9}")
    costs = summary["costs"]
    lines += [
        "",
        f"requests {costs['requests']} ({summary['requests_sent']} sent now), tokens in {costs['input_tokens']:,} "
        f"(cached {costs['cached_input_tokens']:,}), out {costs['output_tokens']:,}; spent ${summary['spent_usd']:.2f} "
        f"of the ${summary['spend_cap_usd']:.2f} cap",
    ]
    if summary["books"]:
        lines.append(summary["books"][0]["nv_recall"]["signature"])
    return "\n".join(lines)
