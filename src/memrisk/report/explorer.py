"""The window explorer's data: one row per window (what the table sorts and filters) and one detail per window (what
opens when a row or a chart point is clicked), built from a run's records for the interactive report.

Sequences are token ids, shown through `pieces` (each id's text under the run's tokenizer); every diff is computed
here with `difflib` on token ids and shipped as opcodes, so the page only draws. Without a tokenizer the sequences
are the decoded texts and the diffs are by character.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Sequence
from typing import Any

from memrisk import rules
from memrisk.config import ExperimentConfig
from memrisk.report.metrics import RunArrays

LN10 = math.log(10.0)
DIGITS = 3
Unit = int | str
Pieces = Callable[[int], str]


def log10(value: float) -> float | None:
    """A natural log as log10 with DIGITS decimals; None for −inf (JSON has no infinities; the page shows −∞)."""
    return round(value / LN10, DIGITS) if math.isfinite(value) else None


def mass_log10(mass: float) -> float | None:
    """A probability mass as log10, None for 0."""
    return round(math.log10(mass), DIGITS) if mass > 0 else None


def opcodes(target: Sequence[Unit], candidate: Sequence[Unit]) -> list[list[int]]:
    """The non-equal difflib opcodes turning `target` into `candidate`, as [kind, a0, a1, b0, b1] with kind
    0 = replace, 1 = delete, 2 = insert (equal spans are what lies between)."""
    kinds = {"replace": 0, "delete": 1, "insert": 2}
    matcher = difflib.SequenceMatcher(None, list(target), list(candidate), autojunk=False)
    return [[kinds[op], a0, a1, b0, b1] for op, a0, a1, b0, b1 in matcher.get_opcodes() if op != "equal"]


def _sequence(ids: Sequence[int], text: str, pieces: Pieces | None) -> list[int] | str:
    return [int(i) for i in ids] if pieces is not None else text


def _classification(arrays: RunArrays, index: int, tau: float) -> str:
    """The window's verdict (CBS §F.1.2, `memrisk.rules`), with 'PA-memorized' when the prior-aware test holds."""
    parts = []
    if arrays.log_p is not None and arrays.lower is not None:
        parts.append(rules.LABELS[str(rules.verdicts(arrays.log_p[index:index + 1], arrays.lower[index:index + 1, -1], tau)[0])])
    elif arrays.log_p is not None:
        parts.append("verbatim" if bool(rules.verbatim(arrays.log_p[index:index + 1], tau)[0]) else "not extracted")
    if arrays.pa_memorized is not None and bool(arrays.pa_memorized[index]):
        parts.append("PA-memorized")
    return ", ".join(parts) or "—"


def columns(config: ExperimentConfig, arrays: RunArrays, table_columns: set[str]) -> list[dict[str, str]]:
    """The explorer's columns for this run: field, title and kind (text, number, log10, count)."""
    out = [{"field": "dataset", "title": "dataset", "kind": "text"}, {"field": "role", "title": "role", "kind": "text"}]
    if any(d.duplicates is not None for d in config.scored_datasets()):
        out.append({"field": "duplicates", "title": "copies in training", "kind": "count"})
    out.append({"field": "class", "title": "classification", "kind": "text"})
    out += [{"field": f"p_z.{label}", "title": f"log10 p_z ({label})", "kind": "log10"} for label in arrays.policy_log_p or {}]
    if arrays.greedy_exact is not None:
        out.append({"field": "greedy_distance", "title": "greedy distance", "kind": "count"})
    if arrays.lower is not None:
        for epsilon in arrays.epsilons:
            out.append({"field": f"lb.{epsilon}", "title": f"log10 LB_{epsilon}", "kind": "log10"})
        out.append({"field": f"ub.{arrays.epsilons[-1]}", "title": f"log10 UB_{arrays.epsilons[-1]}", "kind": "log10"})
    if "mc_estimate" in table_columns:
        out += [{"field": "mc_low", "title": f"MC low (ε = {config.mc.epsilon})", "kind": "number"},
                {"field": "mc_high", "title": f"MC high (ε = {config.mc.epsilon})", "kind": "number"}]
    if arrays.pa_log_p is not None:
        out.append({"field": "pa", "title": "log10 P(s|p) / v̂ (prior-aware)", "kind": "log10"})
    out += [{"field": "prefix", "title": "prefix", "kind": "text"}, {"field": "suffix", "title": "target suffix", "kind": "text"}]
    return out


def explorer_data(config: ExperimentConfig, arrays: RunArrays, records: list[dict[str, Any]], pieces: Pieces | None) -> dict[str, Any]:
    """Rows, details and token pieces of every window (records in the order of `arrays`)."""
    names = set(records[0]) if records else set()
    cols = columns(config, arrays, names)
    duplicates = {d.name: d.duplicates for d in config.scored_datasets()}
    rows, details, used = [], [], set()
    for i, record in enumerate(records):
        row: dict[str, Any] = {"id": record["example_id"], "dataset": record["dataset"], "role": record["role"],
                               "class": _classification(arrays, i, config.tau_min),
                               "prefix": record["prefix_text"], "suffix": record["suffix_text"]}
        if "duplicates" in {c["field"] for c in cols}:
            row["duplicates"] = duplicates.get(record["dataset"])
        for label, values in (arrays.policy_log_p or {}).items():
            row[f"p_z.{label}"] = log10(float(values[i]))
        if arrays.greedy_exact is not None:
            row["greedy_distance"] = int(arrays.greedy_distance[i])
        if arrays.lower is not None:
            for e in arrays.epsilons:
                row[f"lb.{e}"] = mass_log10(float(arrays.lower[i, e]))
            row[f"ub.{arrays.epsilons[-1]}"] = mass_log10(float(arrays.upper[i, -1]))
        if "mc_estimate" in names:
            row["mc_low"], row["mc_high"] = (round(float(record[k][-1][-1]), 6) for k in ("mc_low", "mc_high"))
        if arrays.pa_log_p is not None:
            row["pa"] = log10(float(arrays.pa_log_p[i] - arrays.pa_log_prior[i])) if math.isfinite(arrays.pa_log_prior[i]) else None
        rows.append(row)
        details.append(_detail(record, arrays, i, pieces, used))
    shown = {str(i): pieces(i) for i in sorted(used)} if pieces is not None else None
    return {"columns": cols, "rows": rows, "details": details, "pieces": shown}


def _detail(record: dict[str, Any], arrays: RunArrays, index: int, pieces: Pieces | None, used: set[int]) -> dict[str, Any]:
    """What opens for one window: prefix, target, greedy continuation and top CBS candidates with their diffs against the
    target, and the target's per-token log10 probability under each policy."""
    target = _sequence(record["suffix_ids"], record["suffix_text"], pieces)
    detail: dict[str, Any] = {"prefix": _sequence(record["prefix_ids"], record["prefix_text"], pieces), "target": target}
    if pieces is not None:
        used.update(record["prefix_ids"], record["suffix_ids"])
    if record.get("greedy_ids") is not None:
        greedy = _sequence(record["greedy_ids"], record["greedy_text"], pieces)
        detail["greedy"] = {"units": greedy, "ops": opcodes(target, greedy)}
        if pieces is not None:
            used.update(record["greedy_ids"])
    if record.get("cbs_top") is not None:
        detail["candidates"] = []
        for candidate in record["cbs_top"]:
            units = _sequence(candidate["tokens"], candidate["text"], pieces)
            if pieces is not None:
                used.update(candidate["tokens"])
            detail["candidates"].append({"units": units, "ops": opcodes(target, units), "log10_p": log10(candidate["log_p"]),
                                         "levenshtein": candidate["levenshtein"], "hamming": candidate["hamming"]})
    detail["token_log10_p"] = {
        label: [log10(float(v)) for v in record[f"token_log_p.{label}"]]
        for label in arrays.policy_log_p or {} if record.get(f"token_log_p.{label}") is not None
    }
    return detail

