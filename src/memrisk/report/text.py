"""Plain-text tables of a run's summary for the terminal."""

from __future__ import annotations

from typing import Any


def _fmt_log10(value: float | None) -> str:
    """A log10 probability with one decimal, or '-inf' when there is none."""
    return "-inf" if value is None else f"{value:.1f}"


def summary_table(summary: dict[str, Any]) -> str:
    """Rates per dataset and policy, greedy rates and the top sequences as aligned text."""
    tau = summary["tau_min"]
    header = ["dataset", "role", "windows", "policy", f"p_z >= {tau:g}", "median log10 p_z", "max log10 p_z", "greedy exact", "greedy Lev<=5"]
    lines = []
    for name, entry in summary["datasets"].items():
        greedy = entry.get("greedy")
        greedy_exact = f"{greedy['exact']}/{entry['examples']}" if greedy else "-"
        greedy_near = f"{greedy['near_verbatim_rate']['levenshtein']['5']:.0%}" if greedy else "-"
        for label, stats in (entry.get("probabilistic") or {"-": None}).items():
            lines.append([
                name, entry["role"], str(entry["examples"]), label,
                f"{stats['extractable']}/{entry['examples']} ({stats['rate']:.0%})" if stats else "-",
                _fmt_log10(stats["median_log10_p"]) if stats else "-",
                _fmt_log10(stats["max_log10_p"]) if stats else "-",
                greedy_exact, greedy_near,
            ])
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *lines]]
    top = summary.get("top_sequences") or []
    if top:
        out += ["", f"Top sequences by p_z ({top[0]['policy']}):"]
        for item in top[:5]:
            text = " ".join(item["suffix_text"].split())
            out.append(f"  log10 p_z {item['log10_p']:7.2f}  {item['dataset']:<12} {text[:90]!r}")
    return "\n".join(out)
