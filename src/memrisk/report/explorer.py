"""The window explorer's data: one row per window (what the table sorts and filters) and one detail per window (what
opens when a row or a chart point is clicked), built from a run's records for the interactive report.

Sequences are token ids, shown through `pieces` (each id's text under the run's tokenizer); without a tokenizer they
are the decoded texts, diffed by character. Every diff is computed here with `difflib` and shipped as the edits that
turn the target into the generated sequence, [a0, a1, inserted], so the page only draws and a near-verbatim candidate
costs a few numbers, not its whole text. Candidates' probabilities are log10 in hundredths (integers), None for −inf;
per-token probabilities are packed two characters a token (`packed_log10`). Rows go as arrays in the columns' order.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Sequence
from typing import Any

from memrisk import closeness, rules
from memrisk.config import ExperimentConfig
from memrisk.methods.membership import MIA_SCORES
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


def edits(target: Sequence[Unit] | str, generated: Sequence[Unit] | str) -> list[list[Any]]:
    """The difflib edits turning `target` into `generated`: [a0, a1, inserted] replaces target[a0:a1] by `inserted`
    (a deletion when it is empty, an insertion when a0 == a1); what lies between the edits is equal."""
    matcher = difflib.SequenceMatcher(None, target, generated, autojunk=False)
    return [[a0, a1, generated[b0:b1]] for op, a0, a1, b0, b1 in matcher.get_opcodes() if op != "equal"]


PACK_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
PACK_FLOOR = 4094
"""Packed per-token log10 probabilities: −(hundredths) in 0…4094 (down to 10^−40.94, lower ones clipped), 4095 for −inf."""


def packed_log10(log_p: Sequence[float]) -> str:
    """Natural logs packed as two characters each: the 12-bit code −round(100·log10 p), 4095 for p = 0."""
    out = []
    for value in log_p:
        code = min(-round(100 * value / LN10), PACK_FLOOR) if math.isfinite(value) else PACK_FLOOR + 1
        code = max(code, 0)
        out.append(PACK_ALPHABET[code >> 6] + PACK_ALPHABET[code & 63])
    return "".join(out)


def hundredths(log_p: float) -> int | None:
    """A natural log as log10 in hundredths (−1.234 decades → −123), None for −inf."""
    return round(100 * log_p / LN10) if math.isfinite(log_p) else None


CLOSENESS_TITLES = {"rouge_l": "ROUGE-L", "lcs_substring_tokens": "LCS substring (tokens)",
                    "lcs_substring_chars": "LCS substring (chars)", "lcp_tokens": "common prefix (tokens)",
                    "lcp_chars": "common prefix (chars)", "char_levenshtein_ratio": "char Levenshtein ratio", "bleu": "BLEU"}
"""The window view's names of the closeness metrics (memrisk.closeness), in record order."""
CLOSENESS_COLUMNS = {"greedy_rouge_l": ("greedy_close.rouge_l", "greedy ROUGE-L"),
                     "cbs_best_rouge_l": ("cbs_best_close.rouge_l", "best CBS candidate ROUGE-L")}
"""Closeness columns of the window table: field → (record column, title)."""


def _rounded(value: float | int | None) -> float | int | None:
    """A closeness value for the page: counts as they are, ratios to DIGITS decimals."""
    return round(value, DIGITS) if isinstance(value, float) else value


def _sequence(ids: Sequence[int], text: str, pieces: Pieces | None) -> list[int] | str:
    """Token ids when the page has their pieces, else the text."""
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
    out += [{"field": field, "title": title, "kind": "number"} for field, (column, title) in CLOSENESS_COLUMNS.items()
            if column in table_columns]
    if arrays.lower is not None:
        for epsilon in arrays.epsilons:
            out.append({"field": f"lb.{epsilon}", "title": f"log10 LB_{epsilon}", "kind": "log10"})
        out.append({"field": f"ub.{arrays.epsilons[-1]}", "title": f"log10 UB_{arrays.epsilons[-1]}", "kind": "log10"})
    if "mc_estimate" in table_columns:
        out += [{"field": "mc_low", "title": f"MC low (ε = {config.mc.epsilon})", "kind": "number"},
                {"field": "mc_high", "title": f"MC high (ε = {config.mc.epsilon})", "kind": "number"}]
    if arrays.pa_log_p is not None:
        out.append({"field": "pa", "title": "log10 P(s|p) / v̂ (prior-aware)", "kind": "log10"})
    out += [{"field": key, "title": f"MIA {name}", "kind": "number"} for key, name in MIA_SCORES.items() if key in table_columns]
    out += [{"field": "prefix", "title": "prefix", "kind": "text"}, {"field": "suffix", "title": "target suffix", "kind": "text"}]
    return out


def explorer_data(config: ExperimentConfig, arrays: RunArrays, records: list[dict[str, Any]], pieces: Pieces | None) -> dict[str, Any]:
    """Rows, details and token pieces of every window (records in the order of `arrays`). With pieces the rows' prefix
    and suffix texts are left for the page to join from the pieces."""
    names = set(records[0]) if records else set()
    cols = columns(config, arrays, names)
    duplicates = {d.name: d.duplicates for d in config.scored_datasets()}
    rows, details, used = [], [], set()
    for i, record in enumerate(records):
        row: dict[str, Any] = {"id": record["example_id"], "dataset": record["dataset"], "role": record["role"],
                               "class": _classification(arrays, i, config.tau_min)}
        if pieces is None:
            row["prefix"], row["suffix"] = record["prefix_text"], record["suffix_text"]
        if "duplicates" in {c["field"] for c in cols}:
            row["duplicates"] = duplicates.get(record["dataset"])
        for label, values in (arrays.policy_log_p or {}).items():
            row[f"p_z.{label}"] = log10(float(values[i]))
        if arrays.greedy_exact is not None:
            row["greedy_distance"] = int(arrays.greedy_distance[i])
        for field, (column, _) in CLOSENESS_COLUMNS.items():
            if column in names:
                row[field] = _rounded(record[column])
        if arrays.lower is not None:
            for e in arrays.epsilons:
                row[f"lb.{e}"] = mass_log10(float(arrays.lower[i, e]))
            row[f"ub.{arrays.epsilons[-1]}"] = mass_log10(float(arrays.upper[i, -1]))
        if "mc_estimate" in names:
            row["mc_low"], row["mc_high"] = (round(float(record[k][-1][-1]), 6) for k in ("mc_low", "mc_high"))
        if arrays.pa_log_p is not None:
            row["pa"] = log10(float(arrays.pa_log_p[i] - arrays.pa_log_prior[i])) if math.isfinite(arrays.pa_log_prior[i]) else None
        for key in MIA_SCORES:
            if key in names:
                row[key] = round(float(record[key]), DIGITS) if math.isfinite(record[key]) else None
        rows.append(row)
        details.append(_detail(record, arrays, i, pieces, used))
    shown = {str(i): pieces(i) for i in sorted(used)} if pieces is not None else None
    fields = ["id", "dataset", "role", "class", *(c["field"] for c in cols if c["field"] not in ("dataset", "role", "class"))]
    if pieces is not None:
        fields = [f for f in fields if f not in ("prefix", "suffix")]
    return {"columns": cols, "fields": fields, "rows": [[row.get(f) for f in fields] for row in rows], "details": details, "pieces": shown,
            "closeness": list(CLOSENESS_TITLES.values())}


def _detail(record: dict[str, Any], arrays: RunArrays, index: int, pieces: Pieces | None, used: set[int]) -> dict[str, Any]:
    """What opens for one window: prefix, target, greedy continuation (edits against the target), the top CBS
    candidates as [log10 p in hundredths, Levenshtein, Hamming, edits], the closeness metrics of the greedy continuation
    and of each candidate (`greedy_closeness`, `candidate_closeness`: values in the order of the data's `closeness`
    names), and the target's per-token probabilities under each policy (`packed_log10`)."""
    target = _sequence(record["suffix_ids"], record["suffix_text"], pieces)
    detail: dict[str, Any] = {}
    if pieces is not None:  # without pieces the row's prefix and suffix texts are the sequences
        detail |= {"prefix": _sequence(record["prefix_ids"], record["prefix_text"], pieces), "target": target}
        used.update(record["prefix_ids"], record["suffix_ids"])
    if record.get("greedy_ids") is not None:
        detail["greedy"] = edits(target, _sequence(record["greedy_ids"], record["greedy_text"], pieces))
        if pieces is not None:
            used.update(record["greedy_ids"])
    if record.get("greedy_close.rouge_l") is not None:
        detail["greedy_closeness"] = [_rounded(record[f"greedy_close.{name}"]) for name in closeness.METRICS]
    if record.get("cbs_close.rouge_l") is not None:
        detail["candidate_closeness"] = [[_rounded(v) for v in values]
                                         for values in zip(*(record[f"cbs_close.{name}"] for name in closeness.METRICS))]
    if record.get("cbs_top") is not None:
        detail["candidates"] = []
        for candidate in record["cbs_top"]:
            if pieces is not None:
                used.update(candidate["tokens"])
            generated = _sequence(candidate["tokens"], candidate["text"], pieces)
            detail["candidates"].append([hundredths(candidate["log_p"]), candidate["levenshtein"], candidate["hamming"],
                                         edits(target, generated)])
    detail["token_log10_p"] = {
        label: packed_log10([float(v) for v in record[f"token_log_p.{label}"]])
        for label in arrays.policy_log_p or {} if record.get(f"token_log_p.{label}") is not None
    }
    return detail
