"""Probabilistic extraction: p_z by teacher forcing under every configured policy, and (n,p) rates ((n,p) paper §3–4)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from memrisk import rules
from memrisk.extraction.rates import rate_table
from memrisk.methods.base import Chunk, Column, MethodDefaults
from memrisk.signature import signature

if TYPE_CHECKING:
    from memrisk.config import ExperimentConfig

TOP_SEQUENCES = 10


def log10(log_p: np.ndarray) -> np.ndarray:
    """Natural-log probabilities as log10."""
    return np.asarray(log_p, dtype=np.float64) * np.log10(np.e)


def finite_stat(values: np.ndarray, fn: Any) -> float | None:
    """fn over the finite values, or None when there are none."""
    finite = values[np.isfinite(values)]
    return float(fn(finite)) if finite.size else None


def probabilistic_stats(log_p: np.ndarray, tau_min: float) -> dict[str, Any]:
    """Rate and count of p_z ≥ τ_min plus the spread of log10 p_z."""
    extractable = rules.verbatim(log_p, tau_min)
    return {
        "extractable": int(extractable.sum()),
        "rate": float(extractable.mean()) if log_p.size else 0.0,
        "zero_probability": int(np.isneginf(log_p).sum()),
        "median_log10_p": finite_stat(log10(log_p), np.median),
        "max_log10_p": finite_stat(log10(log_p), np.max),
    }


def top_sequences(rows: dict[str, list], label: str, count: int = TOP_SEQUENCES) -> list[dict[str, Any]]:
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


class Probabilistic(MethodDefaults):
    """p_z = Π_t p_φ(z_t | prefix, z_<t) for each policy φ, one forward pass per window."""

    name = "probabilistic"

    def columns(self, config: ExperimentConfig) -> list[str]:
        labels = [p.label for p in config.policies]
        return [f"log_p.{label}" for label in labels] + [f"token_log_p.{label}" for label in labels] + ["token_evals.probabilistic"]

    def cost_bound(self, config: ExperimentConfig, prefix_length: int, suffix_length: int) -> int:
        return 1 + prefix_length + suffix_length

    def score(self, chunk: Chunk) -> list[dict[str, Any]]:
        scores, labels = chunk.scores, [p.label for p in chunk.config.policies]
        records = []
        for i in range(len(chunk.examples)):
            record: dict[str, Any] = {}
            for j, label in enumerate(labels):
                record[f"log_p.{label}"] = float(scores.log_p[i, j])
                record[f"token_log_p.{label}"] = scores.token_log_probs[i, j].tolist()
            record["token_evals.probabilistic"] = chunk.one_pass[i]
            records.append(record)
        return records

    def summarise(self, column: Column, config: ExperimentConfig) -> dict[str, Any]:
        log_ps = {p.label: column(f"log_p.{p.label}").astype(np.float64) for p in config.policies}
        return {
            "probabilistic": {label: probabilistic_stats(lp, config.tau_min) for label, lp in log_ps.items()},
            "np_rates": {label: rate_table(lp).to_dict() for label, lp in log_ps.items()},
        }

    def summarise_run(self, rows: dict[str, list], config: ExperimentConfig) -> dict[str, Any]:
        return {"top_sequences": top_sequences(rows, config.policies[0].label)}

    def extracted(self, column: Column, config: ExperimentConfig) -> dict[str, np.ndarray]:
        return {f"probabilistic.{p.label}": rules.verbatim(column(f"log_p.{p.label}"), config.tau_min) for p in config.policies}

    def signature(self, config: ExperimentConfig) -> str:
        return signature("teacher_forcing", policies=",".join(p.policy().name for p in config.policies), tau=config.tau_min)
