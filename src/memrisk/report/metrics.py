"""Report metrics from stored records (CBS paper §F.1): pure functions, arrays in, arrays and dicts out.

Probabilities come in as natural-log p_z (−inf when the policy cannot emit the suffix) and
CBS lower and upper bounds LB_ε, UB_ε as (sequences × ε) arrays. A rate over an empty population is None,
never NaN; no function here warns on −inf or all-zero masses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from memrisk import rules
from memrisk.config import ExperimentConfig
from memrisk.extraction.rates import rate_table
from memrisk.methods import REGISTRY
from memrisk.methods.prior_aware import prior_aware_extremes
from memrisk.methods.probabilistic import probabilistic_stats
from memrisk.rules import fraction, mass_gain
from memrisk.summary import token_eval_columns, token_eval_stats

CCDF_POINTS = (1e-3, 1e-2, 1e-1)
ROLES = ("target", "control")
EXTREME_COLUMNS = ("example_id", "dataset", "role", "pa_log_p", "pa_log_prior", "pa_log_ratio", "pa_memorized", "suffix_text")


@dataclass(frozen=True)
class RunArrays:
    """The record columns the report needs; a method the run did not use is None."""

    example_id: np.ndarray
    dataset: np.ndarray
    role: np.ndarray
    doc_id: np.ndarray
    suffix_char_start: np.ndarray
    char_end: np.ndarray
    epsilons: tuple[int, ...]
    log_p: np.ndarray | None = None
    policy_log_p: dict[str, np.ndarray] | None = None
    greedy_exact: np.ndarray | None = None
    greedy_distance: np.ndarray | None = None
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    pa_log_p: np.ndarray | None = None
    pa_log_prior: np.ndarray | None = None
    pa_memorized: np.ndarray | None = None

    @property
    def count(self) -> int:
        """Number of sequences."""
        return int(self.example_id.size)

    def subset(self, mask: np.ndarray) -> RunArrays:
        """The sequences selected by a boolean mask."""
        def take(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: v[mask] for k, v in value.items()}
            return value[mask] if isinstance(value, np.ndarray) else value

        return RunArrays(**{name: take(getattr(self, name)) for name in self.__dataclass_fields__})


def _column(table: pa.Table, name: str, dtype: Any) -> np.ndarray:
    """One column as a numpy array (empty when the table has no rows)."""
    if table.num_rows == 0:
        return np.empty(0, dtype=dtype)
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=dtype)


def _list_column(table: pa.Table, name: str, width: int) -> np.ndarray:
    """A fixed-length list<double> column as a (rows × width) float array."""
    if table.num_rows == 0:
        return np.empty((0, width), dtype=np.float64)
    values = table.column(name).combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=np.float64).reshape(table.num_rows, width)




def run_arrays(table: pa.Table, config: ExperimentConfig) -> RunArrays:
    """Extract the report's columns from a run's records; p_z is taken under the CBS policy."""
    methods = set(config.methods)
    epsilons = tuple(rules.near_verbatim_epsilons(config.cbs.epsilon))
    distance = rules.cbs_distance(config.cbs.prune_mode)
    labels = [p.label for p in config.policies]
    policy_log_p = (
        {label: _column(table, f"log_p.{label}", np.float64) for label in labels} if "probabilistic" in methods else None
    )
    return RunArrays(
        example_id=_column(table, "example_id", object),
        dataset=_column(table, "dataset", object),
        role=_column(table, "role", object),
        doc_id=_column(table, "doc_id", object),
        suffix_char_start=_column(table, "suffix_char_start", np.int64),
        char_end=_column(table, "char_end", np.int64),
        epsilons=epsilons,
        log_p=policy_log_p[config.cbs_policy().label] if policy_log_p else None,
        policy_log_p=policy_log_p,
        greedy_exact=_column(table, "greedy_exact", bool) if "greedy" in methods else None,
        greedy_distance=_column(table, f"greedy_{distance}", np.int64) if "greedy" in methods else None,
        lower=_list_column(table, f"cbs_lower.{distance}", len(epsilons)) if "cbs" in methods else None,
        upper=_list_column(table, f"cbs_upper.{distance}", len(epsilons)) if "cbs" in methods else None,
        pa_log_p=_column(table, "pa_log_p", np.float64) if "prior_aware" in methods else None,
        pa_log_prior=_column(table, "pa_log_prior", np.float64) if "prior_aware" in methods else None,
        pa_memorized=_column(table, "pa_memorized", bool) if "prior_aware" in methods else None,
    )




def probabilities(log_p: np.ndarray) -> np.ndarray:
    """p_z from natural-log p_z (−inf → 0, no warnings), for plotting and sorting only (verdicts: memrisk.rules)."""
    return np.exp(np.asarray(log_p, dtype=np.float64))


def extraction_rates(arrays: RunArrays, tau: float) -> dict[str, Any]:
    """Rates per method and ε: greedy (dist ≤ ε), probabilistic (p_z ≥ τ, verbatim only), CBS (LB_ε ≥ τ)."""
    n = arrays.count
    out: dict[str, Any] = {"count": n, "epsilons": list(arrays.epsilons)}
    if arrays.greedy_distance is not None:
        out["greedy"] = [fraction(int((arrays.greedy_distance <= e).sum()), n) for e in arrays.epsilons]
    if arrays.log_p is not None:
        out["probabilistic"] = fraction(int(rules.verbatim(arrays.log_p, tau).sum()), n)
    if arrays.lower is not None:
        out["cbs"] = [fraction(int(rules.cbs_extracted(arrays.lower[:, e], tau).sum()), n) for e in arrays.epsilons]
    return out


def rates_by_role(arrays: RunArrays, tau: float) -> dict[str, dict[str, Any]]:
    """extraction_rates for the target and the negative-control sequences separately."""
    return {role: extraction_rates(arrays.subset(arrays.role == role), tau) for role in ROLES}


def verdicts_by_epsilon(log_p: np.ndarray, lower: np.ndarray, tau: float) -> list[dict[str, int]]:
    """rules.counts with LB_ε in place of LB_E, at every ε of the lower-bound array (CBS §F.1.2)."""
    return [rules.counts(log_p, lower[:, e], tau) for e in range(lower.shape[1])]




def ccdf_curve(values: np.ndarray, denominator: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Points (x, share of the population with value ≥ x) at every distinct positive value, x ascending."""
    values = np.asarray(values, dtype=np.float64)
    total = values.size if denominator is None else denominator
    positive = np.sort(values[values > 0])
    if not total or not positive.size:
        return np.empty(0), np.empty(0)
    x, first = np.unique(positive, return_index=True)
    return x, (positive.size - first) / total


def ccdf_at(values: np.ndarray, points: tuple[float, ...] = CCDF_POINTS, denominator: int | None = None) -> dict[str, float | None]:
    """Share of the population with value ≥ each point (None for an empty population)."""
    values = np.asarray(values, dtype=np.float64)
    total = values.size if denominator is None else denominator
    return {f"{x:g}": fraction(int((values >= x).sum()), total) for x in points}


def gain_table(lower: np.ndarray, tau: float) -> dict[str, Any]:
    """Mass-gain CCDF points over all sequences and over the extracted set LB_E ≥ τ (CBS §F.1.2)."""
    gain = mass_gain(lower)
    extracted = rules.cbs_extracted(np.asarray(lower)[:, -1], tau)
    return {
        "population": ccdf_at(gain),
        "population_count": int(gain.size),
        "any_gain": fraction(int((gain > 0).sum()), gain.size),
        "extracted": ccdf_at(gain[extracted]),
        "extracted_count": int(extracted.sum()),
    }


def medians(shares: np.ndarray) -> list[float | None]:
    """Median of every column (None for no rows)."""
    if shares.shape[0] == 0:
        return [None] * shares.shape[1]
    return [float(v) for v in np.median(shares, axis=0)]


def np_curves(log_p: np.ndarray, greedy_exact: np.ndarray | None) -> dict[str, Any]:
    """(n,p) rate table from log p_z, with the greedy verbatim rate as a reference line."""
    table = rate_table(log_p).to_dict()
    if table["count"] == 0:
        table["max_rate"] = None
    greedy = None if greedy_exact is None else fraction(int(np.sum(greedy_exact)), int(np.size(greedy_exact)))
    return table | {"greedy": greedy}


def policy_table(arrays: RunArrays, tau: float) -> dict[str, dict[str, Any]]:
    """Per policy: p_z ≥ τ count and rate, p_z = 0 count, median and max log10 p_z."""
    if not arrays.policy_log_p:
        return {}
    return {label: probabilistic_stats(lp, tau) for label, lp in arrays.policy_log_p.items()}


def finite_points(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mask of the points whose two coordinates are finite."""
    return np.isfinite(np.asarray(x, dtype=np.float64)) & np.isfinite(np.asarray(y, dtype=np.float64))


def table_column(table: pa.Table) -> Any:
    """`column(name)` over a records table, as the methods' summarise reads it."""
    return lambda name: table.column(name).to_numpy(zero_copy_only=False)


def prior_aware_by_dataset(table: pa.Table, config: ExperimentConfig) -> dict[str, dict[str, Any]]:
    """Per dataset with records: its example count and summary.json's `prior_aware` entry, from the records."""
    datasets = _column(table, "dataset", object)
    out = {}
    for dataset in config.datasets:
        part = table.filter(pa.array(datasets == dataset.name, type=pa.bool_()))
        if part.num_rows:
            stats = REGISTRY["prior_aware"].summarise(table_column(part), config)["prior_aware"]
            out[dataset.name] = {"examples": part.num_rows} | stats
    return out


def prior_aware_ends(table: pa.Table, count: int) -> dict[str, list[dict[str, Any]]]:
    """summary.json's `prior_aware_extremes` (lowest and highest P(s|p) / v̂ ratio), from the records."""
    return prior_aware_extremes(table.select(list(EXTREME_COLUMNS)).to_pydict(), count)


def token_evals(table: pa.Table) -> dict[str, dict[str, Any]]:
    """summary.json's `token_evals` (per-method totals, CBS Tables 1–2), from the records."""
    return token_eval_stats(table_column(table), token_eval_columns(table.column_names))


@dataclass(frozen=True)
class BookHeatmap:
    """Max extraction probability per character of one document, verbatim and near-verbatim."""

    dataset: str
    doc_id: str
    windows: int
    verbatim: np.ndarray | None
    near_verbatim: np.ndarray | None
    verbatim_window: np.ndarray | None = None
    """Per character the record index of the window behind `verbatim` (−1 where no suffix covers it)."""
    near_window: np.ndarray | None = None


def _covered_positions(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (span, position) pair of the spans [start, end): the span's index and the position it covers."""
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    lengths = np.clip(ends - starts, 0, None)
    owner = np.repeat(np.arange(starts.size), lengths)
    return owner, starts[owner] + np.arange(owner.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def coverage_max(starts: np.ndarray, ends: np.ndarray, values: np.ndarray, length: int) -> np.ndarray:
    """Per position in [0, length) the max value over the spans [start, end) covering it (0 if none)."""
    return coverage_max_owner(starts, ends, values, length)[0]


def coverage_max_owner(starts: np.ndarray, ends: np.ndarray, values: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Per position in [0, length) the max value over the spans [start, end) covering it (0 if none) and the index of a
    span holding it (−1 if none)."""
    best, owners = np.zeros(length, dtype=np.float64), np.full(length, -1, dtype=np.int64)
    owner, positions = _covered_positions(starts, ends)
    if not owner.size:
        return best, owners
    covered = np.asarray(values, dtype=np.float64)[owner]
    np.maximum.at(best, positions, covered)
    hit = covered == best[positions]
    owners[positions[hit]] = owner[hit]
    return best, owners


def pooled_argmax(values: np.ndarray, owners: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`max_pool` that also keeps, per cell, its first position and the owner of its max."""
    values = np.asarray(values, dtype=np.float64)
    edges = np.linspace(0, values.size, min(bins, values.size) + 1).astype(np.int64)
    best = np.array([start + int(np.argmax(values[start:end])) for start, end in zip(edges[:-1], edges[1:])], dtype=np.int64)
    return values[best], owners[best], edges


def max_pool(values: np.ndarray, bins: int) -> np.ndarray:
    """Down-sample to at most `bins` cells, each the max of its consecutive positions."""
    values = np.asarray(values, dtype=np.float64)
    if values.size <= bins:
        return values
    edges = np.linspace(0, values.size, bins + 1).astype(np.int64)
    return np.maximum.reduceat(values, edges[:-1])


def book_heatmaps(arrays: RunArrays) -> list[BookHeatmap]:
    """One heatmap per (dataset, document), documents with the most windows first."""
    verbatim = None if arrays.log_p is None else probabilities(arrays.log_p)
    near = None if arrays.lower is None else arrays.lower[:, -1]
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (dataset, doc_id) in enumerate(zip(arrays.dataset, arrays.doc_id)):
        groups.setdefault((str(dataset), str(doc_id)), []).append(i)
    out = []
    for (dataset, doc_id), rows in groups.items():
        starts, ends = arrays.suffix_char_start[rows], arrays.char_end[rows]
        length = int(ends.max())
        index = np.asarray(rows, dtype=np.int64)
        maps, owners = [], []
        for values in (verbatim, near):
            best, owner = (None, None) if values is None else coverage_max_owner(starts, ends, values[rows], length)
            maps.append(best)
            owners.append(None if owner is None else np.where(owner >= 0, index[owner], -1))
        out.append(BookHeatmap(dataset, doc_id, len(rows), *maps, *owners))
    return sorted(out, key=lambda h: -h.windows)
