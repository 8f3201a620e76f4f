"""Greedy discoverable extraction: does argmax decoding from the prefix reproduce the suffix, exactly or within ε tokens?"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from memrisk import closeness, rules
from memrisk.extraction.greedy import greedy_extraction
from memrisk.methods.base import Chunk, Column, MethodDefaults
from memrisk.signature import signature

if TYPE_CHECKING:
    from memrisk.config import ExperimentConfig

CLOSE = "greedy_close"
"""Record columns `greedy_close.<metric>`: the greedy continuation's closeness to the suffix (memrisk.closeness)."""


class Greedy(MethodDefaults):
    """Greedy continuation of T tokens (KV-cached), compared with the suffix and with teacher forcing's argmax."""

    name = "greedy"

    def columns(self, config: ExperimentConfig) -> list[str]:
        return ["greedy_ids", "greedy_text", "greedy_exact", "greedy_hamming", "greedy_levenshtein", "token_evals.greedy",
                *closeness.column_names(CLOSE)]

    def cost_bound(self, config: ExperimentConfig, prefix_length: int, suffix_length: int) -> int:
        return prefix_length + suffix_length

    def score(self, chunk: Chunk) -> list[dict[str, Any]]:
        results = greedy_extraction(chunk.lm, chunk.prefixes, chunk.suffixes, teacher_forced_exact=chunk.scores.argmax_match)
        records = []
        for g, evals, suffix in zip(results, chunk.one_pass, chunk.suffixes):
            text = chunk.lm.decode(g.continuation)
            close = closeness.closeness(g.continuation, suffix, text, chunk.lm.decode(suffix))
            records.append({
                "greedy_ids": g.continuation,
                "greedy_text": text,
                "greedy_exact": g.exact,
                "greedy_hamming": g.hamming,
                "greedy_levenshtein": g.levenshtein,
                "token_evals.greedy": evals - 1,
            } | {f"{CLOSE}.{name}": getattr(close, name) for name in closeness.METRICS})
        return records

    def shared_settings(self, config: ExperimentConfig) -> Any | None:
        return {}

    def summarise(self, column: Column, config: ExperimentConfig) -> dict[str, Any]:
        """Greedy verbatim rate, near-verbatim rates per ε ≤ E (the config's ε) and the teacher-forcing cross-check."""
        exact = column("greedy_exact")
        epsilons = rules.near_verbatim_epsilons(config.cbs.epsilon)
        near = {
            distance: {str(eps): float(rules.within(column(f"greedy_{distance}"), eps).mean()) for eps in epsilons}
            for distance in ("hamming", "levenshtein")
        }
        disagreements = int((exact != column("teacher_forced_greedy")).sum())
        return {"greedy": {"exact": int(exact.sum()), "rate": float(exact.mean()), "near_verbatim_rate": near,
                           "teacher_forced_disagreements": disagreements,
                           "closeness": closeness.summary({m: column(f"{CLOSE}.{m}") for m in closeness.METRICS})}}

    def extracted(self, column: Column, config: ExperimentConfig) -> dict[str, np.ndarray]:
        return {"greedy": column("greedy_exact").astype(bool)}

    def signature(self, config: ExperimentConfig) -> str:
        return signature(self.name, T=config.windows.suffix_length, eps=config.cbs.epsilon)
