"""Aggregates of a run's records (pure: a table in, a JSON-ready dict out)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from memrisk.config import ExperimentConfig
from memrisk.extraction.discoverable import rate_table

NEAR_VERBATIM_EPSILONS = (0, 1, 2, 3, 4, 5)
LOG10_E = math.log10(math.e)


def log10(log_p: np.ndarray) -> np.ndarray:
    """Natural-log probabilities as log10."""
    return np.asarray(log_p, dtype=np.float64) * LOG10_E


def _finite_stat(values: np.ndarray, fn: Any) -> float | None:
    """fn over the finite values, or None when there are none."""
    finite = values[np.isfinite(values)]
    return float(fn(finite)) if finite.size else None


def probabilistic_stats(log_p: np.ndarray, tau_min: float) -> dict[str, Any]:
    """Rate and count of p_z ≥ τ_min plus the spread of log10 p_z."""
    extractable = log_p >= math.log(tau_min)
    return {
        "extractable": int(extractable.sum()),
        "rate": float(extractable.mean()) if log_p.size else 0.0,
        "zero_probability": int(np.isneginf(log_p).sum()),
        "median_log10_p": _finite_stat(log10(log_p), np.median),
        "max_log10_p": _finite_stat(log10(log_p), np.max),
    }


def greedy_stats(column: Any) -> dict[str, Any]:
    """Greedy verbatim rate, near-verbatim rates per ε and the teacher-forcing cross-check.

    `column(name)` returns one record column as an array.
    """
    exact = column("greedy_exact")
    near = {
        distance: {str(eps): float((column(f"greedy_{distance}") <= eps).mean()) for eps in NEAR_VERBATIM_EPSILONS}
        for distance in ("hamming", "levenshtein")
    }
    disagreements = int((exact != column("teacher_forced_greedy")).sum())
    return {"exact": int(exact.sum()), "rate": float(exact.mean()), "near_verbatim_rate": near, "teacher_forced_disagreements": disagreements}


def summarize(table: pa.Table, config: ExperimentConfig, window_info: dict[str, Any]) -> dict[str, Any]:
    """Per-dataset rates for every method and policy, (n,p) tables and the top sequences."""
    labels = [p.label for p in config.policies]
    summary: dict[str, Any] = {
        "examples": table.num_rows,
        "tau_min": config.tau_min,
        "policies": {p.label: p.model_dump(exclude={"name"}) for p in config.policies},
        "windows": window_info,
        "datasets": {},
    }
    if table.num_rows == 0:
        return summary
    rows = table.to_pydict()
    datasets = np.asarray(rows["dataset"])
    for dataset in config.datasets:
        mask = datasets == dataset.name

        def column(name: str, mask: np.ndarray = mask) -> np.ndarray:
            return np.asarray(rows[name])[mask]

        entry: dict[str, Any] = {"role": dataset.role, "examples": int(mask.sum())}
        if "probabilistic" in config.methods and mask.any():
            log_ps = {label: column(f"log_p.{label}").astype(np.float64) for label in labels}
            entry["probabilistic"] = {label: probabilistic_stats(lp, config.tau_min) for label, lp in log_ps.items()}
            entry["np_rates"] = {label: rate_table(lp).to_dict() for label, lp in log_ps.items()}
        if "greedy" in config.methods and mask.any():
            entry["greedy"] = greedy_stats(column)
        summary["datasets"][dataset.name] = entry
    if "probabilistic" in config.methods:
        summary["top_sequences"] = top_sequences(rows, labels[0])
    return summary


def top_sequences(rows: dict[str, list], label: str, count: int = 10) -> list[dict[str, Any]]:
    """The `count` examples with the highest p_z under policy `label`."""
    log_p = np.asarray(rows[f"log_p.{label}"], dtype=np.float64)
    order = np.argsort(-log_p, kind="stable")[:count]
    return [
        {
            "example_id": rows["example_id"][i],
            "dataset": rows["dataset"][i],
            "role": rows["role"][i],
            "policy": label,
            "log10_p": float(log10(log_p[i])),
            "greedy_exact": rows.get("greedy_exact", [None] * len(log_p))[i],
            "suffix_text": rows["suffix_text"][i],
        }
        for i in order
    ]
