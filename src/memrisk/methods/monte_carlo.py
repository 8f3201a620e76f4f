"""Monte Carlo as a run method: p̂_{z,ε} with Wilson intervals at nested sample budgets (CBS paper §C.1, Figs. 2 and 5).

At ε = 0 it is the (n,p) paper's sampling check of teacher forcing (its Fig. 2).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np

from memrisk import closeness, rules
from memrisk.extraction.montecarlo import monte_carlo
from memrisk.methods.base import Chunk, Column, MethodDefaults
from memrisk.signature import signature

if TYPE_CHECKING:
    from memrisk.config import ExperimentConfig

MAX_ROWS = 512  # samples drawn in one batch; every batch continues the window's one prefill
CLOSE_MEAN, CLOSE_MAX = "mc_close_mean", "mc_close_max"
"""Record columns `mc_close_mean.<metric>` and `mc_close_max.<metric>`: the samples' closeness to the suffix."""


def estimates(values: np.ndarray) -> np.ndarray:
    """The `mc_estimate` column (per window: budgets × ε, as nested lists or arrays) as one (windows × budgets × ε) array."""
    return np.array([[np.asarray(row, dtype=np.float64) for row in window] for window in values], dtype=np.float64)


def window_seed(seed: int, example_id: str) -> int:
    """The sampling seed of one window: the same whatever chunk or process scores it."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{example_id}".encode()).digest()[:4], "little")


class MonteCarlo(MethodDefaults):
    """Samples continuations under the policy and counts those within ε of the suffix, per budget and ε."""

    name = "mc"
    section = "mc"

    def columns(self, config: ExperimentConfig) -> list[str]:
        return ["mc_samples", "mc_estimate", "mc_low", "mc_high", "token_evals.mc",
                *closeness.column_names(CLOSE_MEAN), *closeness.column_names(CLOSE_MAX)]

    def cost_bound(self, config: ExperimentConfig, prefix_length: int, suffix_length: int) -> int:
        """One prefill (BOS counted) and T − 1 steps per sample: (1 + a) + (T − 1)·M (CBS paper App. C.3, eq. 23)."""
        return 1 + prefix_length + (suffix_length - 1) * max(config.mc.samples)

    def score(self, chunk: Chunk) -> list[dict[str, Any]]:
        mc = chunk.config.mc
        policy = chunk.config.mc_policy().policy()
        records = []
        for example, prefix, suffix in zip(chunk.examples, chunk.prefixes, chunk.suffixes):
            close = closeness.SampleCloseness(suffix, chunk.lm.decode(suffix), chunk.lm.decode)
            [result] = monte_carlo(chunk.lm, [prefix], [suffix], policy, samples=max(mc.samples), distance=mc.distance,
                                   epsilon=mc.epsilon, seed=window_seed(mc.seed, example.example_id), checkpoints=mc.samples,
                                   max_rows=MAX_ROWS, on_samples=lambda _, samples: close.add(samples))
            summaries = close.result()
            records.append({
                "mc_samples": list(mc.samples),
                "mc_estimate": result.curve_estimate.tolist(),
                "mc_low": result.curve_low.tolist(),
                "mc_high": result.curve_high.tolist(),
                "token_evals.mc": result.token_evals,
            } | {f"{CLOSE_MEAN}.{name}": mean for name, (mean, _) in summaries.items()}
              | {f"{CLOSE_MAX}.{name}": top for name, (_, top) in summaries.items()})
        return records

    def shared_settings(self, config: ExperimentConfig) -> Any | None:
        return {"mc": config.mc.model_dump(exclude={"policy"}), "policy": repr(config.mc_policy().policy())}

    def summarise(self, column: Column, config: ExperimentConfig) -> dict[str, Any]:
        """Per budget and ε: the mean estimate and the share of windows with p̂_{z,ε} ≥ τ_min."""
        estimate = estimates(column("mc_estimate"))
        return {"mc": {
            "samples": list(config.mc.samples), "distance": config.mc.distance,
            "mean_estimate": estimate.mean(axis=0).tolist(),
            "rate": (estimate >= config.tau_min).mean(axis=0).tolist(),
            "closeness": {
                "mean": closeness.summary({m: column(f"{CLOSE_MEAN}.{m}") for m in closeness.METRICS}),
                "max": closeness.summary({m: column(f"{CLOSE_MAX}.{m}") for m in closeness.METRICS}),
            },
        }}

    def extracted(self, column: Column, config: ExperimentConfig) -> dict[str, np.ndarray]:
        top = estimates(column("mc_estimate"))[:, -1, -1]
        return {f"mc.{config.mc.distance}.eps{config.mc.epsilon}": rules.cbs_extracted(top, config.tau_min)}

    def signature(self, config: ExperimentConfig) -> str:
        mc = config.mc
        return signature("monte_carlo", policy=config.mc_policy().policy().name, samples=max(mc.samples), replicates=1,
                         distance=mc.distance, eps=mc.epsilon, seed=mc.seed)
