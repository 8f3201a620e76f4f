"""Near-verbatim extraction risk by decoding-constrained beam search: certified LB_ε ≤ p_{z,ε} ≤ UB_ε (CBS paper §4, App. E–F)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from memrisk import closeness, rules
from memrisk.extraction.cbs import CBSResult, cbs, cbs_signature, text_masses, token_evaluation_limit
from memrisk.methods.base import Chunk, Column, MethodDefaults
from memrisk.methods.probabilistic import log10

if TYPE_CHECKING:
    from memrisk.config import ExperimentConfig
    from memrisk.models.backend import LanguageModel

DISTANCES = ("levenshtein", "hamming")
TOP_UNLOCKED = 10
CLOSE, BEST_CLOSE = "cbs_close", "cbs_best_close"
"""Record columns `cbs_close.<metric>` (a list aligned with `cbs_top`) and `cbs_best_close.<metric>` (its maximum)."""


def matrix(values: np.ndarray) -> np.ndarray:
    """A list<double> column (object array of lists) as a (windows × ε) float array."""
    return np.array([list(v) for v in values], dtype=np.float64)


def run_cbs(config: ExperimentConfig, lm: LanguageModel, prefixes: list[list[int]], suffixes: list[list[int]], **override: Any) -> list[CBSResult]:
    """CBS over a chunk of examples with the config's settings (`override`: e.g. prune=None for the baseline)."""
    c = config.cbs
    settings = {
        "beam_width": c.beam_width, "prune": c.prune_mode, "epsilon": c.epsilon,
        "tau_min": config.tau_min if c.tau_min_stop else None, "tighter_levenshtein": c.tighter_levenshtein,
        "tail_closure": c.tail_closure, "max_children": c.max_children, "anchor": c.anchor, "shares": config.model.shares,
    } | override
    return cbs(lm, prefixes, suffixes, config.cbs_policy().policy(), **settings)


def cbs_record(config: ExperimentConfig, lm: LanguageModel, result: CBSResult) -> dict[str, Any]:
    """Record columns of one CBS result: bounds per ε, cost, stop, all masses, top candidates with text."""
    c = config.cbs
    epsilons = rules.near_verbatim_epsilons(c.epsilon)
    columns: dict[str, Any] = {}
    for distance in DISTANCES:
        columns[f"cbs_lower.{distance}"] = [result.lower_bound(distance, e) for e in epsilons]
        columns[f"cbs_upper.{distance}"] = [result.upper_bound(distance, e) for e in epsilons]
    return columns | {
        "cbs_covered_mass": result.covered_mass,
        "cbs_bank": result.bank,
        "cbs_eos_mass": result.eos_mass,
        "token_evals.cbs": result.token_evals + result.closure_token_evals,
        "cbs_stop": result.stop.reason,
        "cbs_stop_step": result.stop.step,
        "cbs_log_p": [cand.log_p for cand in result.candidates],
        "cbs_hamming": [cand.hamming for cand in result.candidates],
        "cbs_levenshtein": [cand.levenshtein for cand in result.candidates],
        "cbs_top": [
            {"tokens": list(cand.tokens), "text": lm.decode(cand.tokens), "log_p": cand.log_p,
             "hamming": cand.hamming, "levenshtein": cand.levenshtein}
            for cand in result.candidates[: c.stored_candidates]
        ],
    }


def closeness_record(top: list[dict[str, Any]], suffix: list[int], suffix_text: str) -> dict[str, Any]:
    """Closeness of each stored candidate (`cbs_top`) to the suffix, as lists in its order, and per metric the
    closest any of them comes (None without candidates)."""
    values = closeness.closeness_many([t["tokens"] for t in top], [t["text"] for t in top], suffix, suffix_text)
    return {f"{CLOSE}.{name}": v.tolist() for name, v in values.items()} | {
        f"{BEST_CLOSE}.{name}": v.max().item() if v.size else None for name, v in values.items()
    }


def text_record(config: ExperimentConfig, lm: LanguageModel, baseline: CBSResult, suffix_text: str, *, separate: bool) -> dict[str, Any]:
    """Text-metric columns from the baseline k-CBS candidates (CBS §F.9, Table 15): the mass with
    BLEU ≥ threshold, within each character distance, and within each token Levenshtein ε on the
    same set; `separate` when the baseline was a second, unpruned search (its cost is recorded)."""
    c = config.cbs
    text = text_masses(
        baseline, lm.decode, suffix_text, bleu_threshold=c.bleu_threshold, char_epsilons=c.char_epsilons,
        negligible=config.tau_min * 1e-3,
    )
    columns = {
        "cbs_bleu_mass": text.bleu,
        "cbs_char_levenshtein_mass": [text.char_levenshtein[e] for e in c.char_epsilons],
        "cbs_baseline_lower.levenshtein": [baseline.lower_bound("levenshtein", e) for e in rules.near_verbatim_epsilons(c.epsilon)],
    }
    if separate:
        columns["token_evals.cbs_baseline"] = baseline.token_evals
    return columns


def text_metric_stats(column: Column, config: ExperimentConfig) -> dict[str, Any]:
    """CBS Table 15 on the baseline k-CBS candidates: windows whose BLEU ≥ threshold mass, and whose
    token-Levenshtein ε mass, reach τ_min; both, Levenshtein only, BLEU only (CBS §F.9)."""
    tau, epsilon = config.tau_min, config.cbs.epsilon
    bleu = rules.cbs_extracted(column("cbs_bleu_mass"), tau)
    lev = rules.cbs_extracted(matrix(column("cbs_baseline_lower.levenshtein"))[:, epsilon], tau)
    return {
        "bleu_threshold": config.cbs.bleu_threshold, "levenshtein_epsilon": epsilon,
        "bleu": int(bleu.sum()), "levenshtein": int(lev.sum()),
        "both": int((bleu & lev).sum()), "levenshtein_only": int((lev & ~bleu).sum()), "bleu_only": int((bleu & ~lev).sum()),
    }


def top_unlocked(rows: dict[str, list], config: ExperimentConfig, count: int = TOP_UNLOCKED) -> list[dict[str, Any]]:
    """Near-verbatim-only sequences (p_z < τ_min ≤ LB_E), by lower bound, with the best candidate."""
    distance = rules.cbs_distance(config.cbs.prune_mode)
    label, tau = config.cbs_policy().label, config.tau_min
    log_p = np.asarray(rows[f"log_p.{label}"], dtype=np.float64)
    near = np.array([v[-1] for v in rows[f"cbs_lower.{distance}"]], dtype=np.float64)
    unlocked = np.flatnonzero(rules.verdicts(log_p, near, tau) == rules.NEAR_VERBATIM)
    order = unlocked[np.argsort(-near[unlocked], kind="stable")][:count]
    return [
        {
            "example_id": rows["example_id"][i],
            "dataset": rows["dataset"][i],
            "role": rows["role"][i],
            "log10_p": float(log10(log_p[i])),
            "log10_lower_bound": float(np.log10(near[i])),
            "suffix_text": rows["suffix_text"][i],
            "best_candidate": rows["cbs_top"][i][0]["text"] if rows["cbs_top"][i] else None,
        }
        for i in order
    ]


class CBS(MethodDefaults):
    """k-CBS (optionally Hamming/Levenshtein-pruned, anchored) under the CBS policy; BLEU and character masses on request."""

    name = "cbs"
    section = "cbs"

    def columns(self, config: ExperimentConfig) -> list[str]:
        names = [f"cbs_{bound}.{d}" for d in DISTANCES for bound in ("lower", "upper")]
        names += ["cbs_covered_mass", "cbs_bank", "cbs_eos_mass", "token_evals.cbs", "cbs_stop", "cbs_stop_step",
                  "cbs_log_p", "cbs_hamming", "cbs_levenshtein", "cbs_top",
                  *closeness.column_names(CLOSE), *closeness.column_names(BEST_CLOSE)]
        if config.cbs.text_metrics:
            names += ["cbs_bleu_mass", "cbs_char_levenshtein_mass", "cbs_baseline_lower.levenshtein"]
            if config.cbs.prune_mode is not None:
                names.append("token_evals.cbs_baseline")
        return names

    def cost_bound(self, config: ExperimentConfig, prefix_length: int, suffix_length: int) -> int:
        return token_evaluation_limit(1 + prefix_length, suffix_length, self.rows_per_sequence(config))

    def rows_per_sequence(self, config: ExperimentConfig) -> int:
        return config.cbs.beam_width + int(config.cbs.anchor)

    def score(self, chunk: Chunk) -> list[dict[str, Any]]:
        config, lm = chunk.config, chunk.lm
        results = run_cbs(config, lm, chunk.prefixes, chunk.suffixes)
        records = [cbs_record(config, lm, result) for result in results]
        for record, suffix in zip(records, chunk.suffixes):
            record |= closeness_record(record["cbs_top"], suffix, lm.decode(suffix))
        if config.cbs.text_metrics:
            pruned = config.cbs.prune_mode is not None
            baseline = run_cbs(config, lm, chunk.prefixes, chunk.suffixes, prune=None, tail_closure=False) if pruned else results
            for record, result, example in zip(records, baseline, chunk.examples):
                record |= text_record(config, lm, result, lm.decode(example.window.suffix_ids), separate=pruned)
        return records

    def shared_settings(self, config: ExperimentConfig) -> Any | None:
        return {"cbs": config.cbs.model_dump(exclude={"policy"}), "policy": repr(config.cbs_policy().policy()),
                "tau_min": config.tau_min}

    def summarise(self, column: Column, config: ExperimentConfig) -> dict[str, Any]:
        """Near-verbatim rates from LB_ε per ε, the certificate UB_ε − LB_ε, verdict counts (CBS §F.1.2) and recovery of verbatim p_z."""
        tau = config.tau_min
        distance = rules.cbs_distance(config.cbs.prune_mode)
        lower = {d: matrix(column(f"cbs_lower.{d}")) for d in DISTANCES}
        upper = {d: matrix(column(f"cbs_upper.{d}")) for d in DISTANCES}
        stops, counts = np.unique(column("cbs_stop").astype(str), return_counts=True)
        out: dict[str, Any] = {
            "distance": distance,
            "rate": {d: {str(e): float(rules.cbs_extracted(lb[:, e], tau).mean()) for e in range(lb.shape[1])} for d, lb in lower.items()},
            "certificate": {d: rules.certificate(lower[d], upper[d]) for d in lower},
            "stops": {str(k): int(v) for k, v in zip(stops, counts)},
            "best_closeness": closeness.summary({m: column(f"{BEST_CLOSE}.{m}") for m in closeness.METRICS}),
        }
        if config.cbs.text_metrics:
            out["text_metrics"] = text_metric_stats(column, config)
        if "probabilistic" in config.methods:
            log_p = column(f"log_p.{config.cbs_policy().label}").astype(np.float64)
            out["verdicts"] = rules.counts(log_p, lower[distance][:, -1], tau)
            out["recovery"] = rules.recovery(column("example_id"), log_p, lower[distance][:, 0], tau)
        return {"cbs": out}

    def summarise_run(self, rows: dict[str, list], config: ExperimentConfig) -> dict[str, Any]:
        return {"top_unlocked": top_unlocked(rows, config)} if "probabilistic" in config.methods else {}

    def extracted(self, column: Column, config: ExperimentConfig) -> dict[str, np.ndarray]:
        distance = rules.cbs_distance(config.cbs.prune_mode)
        near = np.array([v[-1] for v in column(f"cbs_lower.{distance}")], dtype=np.float64)
        return {f"cbs.{distance}.eps{config.cbs.epsilon}": rules.cbs_extracted(near, config.tau_min)}

    def signature(self, config: ExperimentConfig) -> str:
        c = config.cbs
        return cbs_signature(config.cbs_policy().policy(), c.beam_width, c.prune_mode, c.epsilon, c.anchor,
                             config.tau_min if c.tau_min_stop else None, c.max_children, c.tighter_levenshtein, c.tail_closure)
