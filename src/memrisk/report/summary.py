"""Aggregates of a run's records (pure: a table in, a JSON-ready dict out)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from memrisk.config import ExperimentConfig
from memrisk.extraction.discoverable import rate_table
from memrisk.report import verdict

NEAR_VERBATIM_EPSILONS = (0, 1, 2, 3, 4, 5)
CERTIFIED_GAP = 1e-3
DISTANCES = ("levenshtein", "hamming")
TOKEN_EVALS = "token_evals."
LOG10_E = math.log10(math.e)


def log10(log_p: np.ndarray) -> np.ndarray:
    """Natural-log probabilities as log10."""
    return np.asarray(log_p, dtype=np.float64) * LOG10_E


def _finite_stat(values: np.ndarray, fn: Any) -> float | None:
    """fn over the finite values, or None when there are none."""
    finite = values[np.isfinite(values)]
    return float(fn(finite)) if finite.size else None


def _matrix(values: np.ndarray) -> np.ndarray:
    """A list<double> column (object array of lists) as a (windows × ε) float array."""
    return np.array([list(v) for v in values], dtype=np.float64)


def probabilistic_stats(log_p: np.ndarray, tau_min: float) -> dict[str, Any]:
    """Rate and count of p_z ≥ τ_min plus the spread of log10 p_z."""
    extractable = verdict.verbatim(log_p, tau_min)
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


def cbs_stats(column: Any, config: ExperimentConfig) -> dict[str, Any]:
    """Near-verbatim rates from CBS lower bounds per ε, the certificate UB_ε − LB_ε, verdict counts (CBS §F.1.2),
    and recovery of verbatim p_z.

    `column(name)` returns one record column as an array (list columns as object arrays).
    """
    tau = config.tau_min
    distance = config.cbs.prune_mode or "levenshtein"
    lower = {d: _matrix(column(f"cbs_lower.{d}")) for d in DISTANCES}
    upper = {d: _matrix(column(f"cbs_upper.{d}")) for d in DISTANCES}
    stops, counts = np.unique(column("cbs_stop").astype(str), return_counts=True)
    out: dict[str, Any] = {
        "distance": distance,
        "rate": {d: {str(e): float(verdict.cbs_extracted(lb[:, e], tau).mean()) for e in range(lb.shape[1])} for d, lb in lower.items()},
        "certificate": {d: certificate(lower[d], upper[d]) for d in lower},
        "stops": {str(k): int(v) for k, v in zip(stops, counts)},
    }
    if config.cbs.text_metrics:
        out["text_metrics"] = text_metric_stats(column, config)
    label = config.cbs_policy().label
    if "probabilistic" not in config.methods:
        return out
    log_p = column(f"log_p.{label}").astype(np.float64)
    out["verdicts"] = verdict.counts(log_p, lower[distance][:, -1], tau)
    out["recovery"] = recovery(column("example_id"), log_p, lower[distance][:, 0], tau)
    return out


def certificate(lower: np.ndarray, upper: np.ndarray) -> dict[str, Any]:
    """Per ε (list index): mean LB_ε, mean UB_ε, mean UB_ε − LB_ε and the share of windows certified to within
    CERTIFIED_GAP, UB_ε − LB_ε ≤ 1e-3 (CBS §E: LB_ε ≤ p_{z,ε} ≤ UB_ε); None for no windows."""
    lower, upper = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    gap = upper - lower

    def means(values: np.ndarray) -> list[float | None]:
        return values.mean(axis=0).tolist() if values.shape[0] else [None] * values.shape[1]

    return {"tolerance": CERTIFIED_GAP, "mean_lower": means(lower), "mean_upper": means(upper), "mean_gap": means(gap),
            "certified_share": means((gap <= CERTIFIED_GAP).astype(np.float64))}


def recovery(example_id: np.ndarray, log_p: np.ndarray, lower_zero: np.ndarray, tau: float) -> dict[str, Any]:
    """CBS verbatim (LB_0 ≥ τ) against teacher forcing (p_z ≥ τ), CBS Table 6: counts, ratio, mass ratio, missed and extra ids."""
    forced, found = verdict.verbatim(log_p, tau), verdict.cbs_extracted(lower_zero, tau)
    mass = float(np.asarray(lower_zero)[forced].sum() / np.exp(log_p[forced]).sum()) if forced.any() else None
    return {
        "teacher_forced": int(forced.sum()),
        "cbs_verbatim": int(found.sum()),
        "ratio": float(found.sum() / forced.sum()) if forced.any() else None,
        "mass_ratio": mass,
        "missed": [str(x) for x in example_id[forced & ~found]],
        "extra": [str(x) for x in example_id[found & ~forced]],
    }


def text_metric_stats(column: Any, config: ExperimentConfig) -> dict[str, Any]:
    """CBS Table 15 on the baseline k-CBS candidates: windows whose BLEU ≥ threshold mass, and whose
    token-Levenshtein ε mass, reach τ_min; both, Levenshtein only, BLEU only (CBS §F.9)."""
    tau, epsilon = config.tau_min, config.cbs.epsilon
    bleu = verdict.cbs_extracted(column("cbs_bleu_mass"), tau)
    lev = verdict.cbs_extracted(_matrix(column("cbs_baseline_lower.levenshtein"))[:, epsilon], tau)
    return {
        "bleu_threshold": config.cbs.bleu_threshold, "levenshtein_epsilon": epsilon,
        "bleu": int(bleu.sum()), "levenshtein": int(lev.sum()),
        "both": int((bleu & lev).sum()), "levenshtein_only": int((lev & ~bleu).sum()), "bleu_only": int((bleu & ~lev).sum()),
    }


def token_eval_columns(column_names: list[str]) -> list[str]:
    """The records' `token_evals.<method>` columns, in record order."""
    return [name for name in column_names if name.startswith(TOKEN_EVALS)]


def token_eval_stats(column: Any, names: list[str]) -> dict[str, dict[str, Any]]:
    """Per method: total token evaluations, windows counted and the mean per window, as CBS App. C.3 counts them
    (Tables 1–2). `column(name)` returns one record column as an array (missing values as None or NaN)."""
    out = {}
    for name in names:
        values = np.asarray(column(name), dtype=np.float64)
        counted = values[~np.isnan(values)]
        total, windows = int(counted.sum()), int(counted.size)
        out[name.removeprefix(TOKEN_EVALS)] = {"total": total, "windows": windows, "per_window": total / windows if windows else None}
    return out


def prior_aware_stats(column: Any, config: ExperimentConfig) -> dict[str, Any]:
    """Extractable (P(s|p) > m) vs PA-memorized counts, the PA share, the c and trials behind v̂_s (PA §4), and PA as
    a filter on the other methods' extraction verdicts ("extractable and PA-memorized").

    `column(name)` returns one record column as an array (list columns as object arrays).
    """
    memorized = column("pa_memorized").astype(bool)
    extractable = column("pa_extractable").astype(bool)
    ratio = column("pa_log_ratio").astype(np.float64)
    out: dict[str, Any] = {
        "extractable": int(extractable.sum()),
        "pa_memorized": int(memorized.sum()),
        "pa_share": float(memorized.sum() / extractable.sum()) if extractable.any() else None,
        "median_log10_ratio": _finite_stat(log10(ratio), np.median),
        "median_log10_ratio_spread": _finite_stat(log10(column("pa_log_ratio_spread").astype(np.float64)), np.median),
        "prefixes_per_trial": config.prior_aware.prefixes_per_trial,
        "trials": config.prior_aware.trials,
    }
    tau = config.tau_min
    filtered: dict[str, Any] = {}
    if "probabilistic" in config.methods:
        for policy in config.policies:
            extracted = verdict.verbatim(column(f"log_p.{policy.label}"), tau)
            filtered[f"probabilistic.{policy.label}"] = _filtered(extracted, memorized)
    if "greedy" in config.methods:
        filtered["greedy"] = _filtered(column("greedy_exact").astype(bool), memorized)
    if "cbs" in config.methods:
        distance = config.cbs.prune_mode or "levenshtein"
        near = np.array([v[-1] for v in column(f"cbs_lower.{distance}")], dtype=np.float64)
        filtered[f"cbs.{distance}.eps{config.cbs.epsilon}"] = _filtered(verdict.cbs_extracted(near, tau), memorized)
    out["filtered"] = filtered
    return out


def _filtered(extracted: np.ndarray, memorized: np.ndarray) -> dict[str, Any]:
    """Counts and rates of a method's extracted examples before and after the PA filter."""
    both = extracted & memorized
    n = max(len(extracted), 1)
    return {
        "extracted": int(extracted.sum()), "rate": float(extracted.sum() / n),
        "extracted_and_pa_memorized": int(both.sum()), "pa_rate": float(both.sum() / n),
    }


def prior_aware_extremes(rows: dict[str, list], count: int = 10) -> dict[str, list[dict[str, Any]]]:
    """The examples with the lowest and the highest log P(s|p) / v̂ ratio."""
    ratio = np.asarray(rows["pa_log_ratio"], dtype=np.float64)
    order = np.argsort(ratio, kind="stable")

    def entry(i: int) -> dict[str, Any]:
        return {
            "example_id": rows["example_id"][i], "dataset": rows["dataset"][i], "role": rows["role"][i],
            "log10_p": float(log10(rows["pa_log_p"][i])), "log10_prior": float(log10(rows["pa_log_prior"][i])),
            "log10_ratio": float(log10(ratio[i])), "pa_memorized": bool(rows["pa_memorized"][i]),
            "suffix_text": rows["suffix_text"][i],
        }

    return {"lowest": [entry(i) for i in order[:count]], "highest": [entry(i) for i in order[::-1][:count]]}


def summarize(table: pa.Table, config: ExperimentConfig, window_info: dict[str, Any]) -> dict[str, Any]:
    """Per-dataset rates for every method and policy, (n,p) tables, the top sequences and token evaluations per method."""
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
    costs = token_eval_columns(table.column_names)
    for dataset in config.datasets:
        mask = datasets == dataset.name

        def column(name: str, mask: np.ndarray = mask) -> np.ndarray:
            values = rows[name]
            array = np.empty(len(values), dtype=object) if values and isinstance(values[0], list) else None
            if array is None:
                return np.asarray(values)[mask]
            array[:] = values
            return array[mask]

        entry: dict[str, Any] = {"role": dataset.role, "examples": int(mask.sum())}
        if "probabilistic" in config.methods and mask.any():
            log_ps = {label: column(f"log_p.{label}").astype(np.float64) for label in labels}
            entry["probabilistic"] = {label: probabilistic_stats(lp, config.tau_min) for label, lp in log_ps.items()}
            entry["np_rates"] = {label: rate_table(lp).to_dict() for label, lp in log_ps.items()}
        if "greedy" in config.methods and mask.any():
            entry["greedy"] = greedy_stats(column)
        if "cbs" in config.methods and mask.any():
            entry["cbs"] = cbs_stats(column, config)
        if "prior_aware" in config.methods and mask.any():
            entry["prior_aware"] = prior_aware_stats(column, config)
        if costs and mask.any():
            entry["token_evals"] = token_eval_stats(column, costs)
        summary["datasets"][dataset.name] = entry
    if costs:
        summary["token_evals"] = token_eval_stats(lambda name: rows[name], costs)
    if "prior_aware" in config.methods:
        summary["prior_aware_extremes"] = prior_aware_extremes(rows)
    if "probabilistic" in config.methods:
        summary["top_sequences"] = top_sequences(rows, labels[0])
        if "cbs" in config.methods:
            summary["top_unlocked"] = top_unlocked(rows, config)
    return summary


def top_unlocked(rows: dict[str, list], config: ExperimentConfig, count: int = 10) -> list[dict[str, Any]]:
    """Near-verbatim-only sequences (p_z < τ_min ≤ LB_E), by lower bound, with the best candidate."""
    distance = config.cbs.prune_mode or "levenshtein"
    label, tau = config.cbs_policy().label, config.tau_min
    log_p = np.asarray(rows[f"log_p.{label}"], dtype=np.float64)
    near = np.array([v[-1] for v in rows[f"cbs_lower.{distance}"]], dtype=np.float64)
    unlocked = np.flatnonzero(verdict.verdicts(log_p, near, tau) == verdict.NEAR_VERBATIM)
    order = unlocked[np.argsort(-near[unlocked], kind="stable")][:count]
    return [
        {
            "example_id": rows["example_id"][i],
            "dataset": rows["dataset"][i],
            "role": rows["role"][i],
            "log10_p": float(log10(log_p[i])),
            "log10_lower_bound": float(math.log10(near[i])),
            "suffix_text": rows["suffix_text"][i],
            "best_candidate": rows["cbs_top"][i][0]["text"] if rows["cbs_top"][i] else None,
        }
        for i in order
    ]


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
