"""Monte Carlo estimation of near-verbatim extraction risk (CBS paper §C.1).

M i.i.d. T-token samples per example under the decoding policy, drawn after one shared
prefill of the prefix; p̂_{z,ε} = hits / M is unbiased. Each example draws from its own
random stream (a function of the seed, the example's index and the replicate), so results
do not depend on how examples are batched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from rapidfuzz.distance import Levenshtein
from tqdm.auto import tqdm

from memrisk import defaults
from memrisk.decoding import DecodingPolicy, default_policy
from memrisk.errors import MemriskError
from memrisk.extraction.inputs import as_model, prefix_suffix_pairs
from memrisk.models.backend import LanguageModel
from memrisk.signature import signature

Z_95 = 1.959963984540054


def wilson_interval(hits: np.ndarray, trials: np.ndarray | int, z: float = Z_95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for binomial proportions (vectorised; 0 trials give [0, 1])."""
    hits = np.asarray(hits, dtype=np.float64)
    n = np.broadcast_to(np.asarray(trials, dtype=np.float64), hits.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = hits / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low = np.where((n > 0) & (hits > 0), np.clip(centre - half, 0.0, 1.0), 0.0)
    high = np.where((n > 0) & (hits < n), np.clip(centre + half, 0.0, 1.0), 1.0)
    return low, high


@dataclass(frozen=True)
class MonteCarloResult:
    """Estimates of p_{z,ε} for ε = 0 … epsilon from pooled samples, with 95% Wilson intervals.

    `estimate[e]`, `ci_low[e]`, `ci_high[e]` refer to distance ≤ e. `curve_samples` are the
    pooled sample counts of the convergence curve and `curve_estimate[i, e]` the estimate
    after that many samples (`curve_low`/`curve_high` its interval).
    """

    distance: str
    samples: int
    replicates: int
    hits: np.ndarray
    estimate: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    replicate_estimates: np.ndarray
    curve_samples: np.ndarray
    curve_estimate: np.ndarray
    curve_low: np.ndarray
    curve_high: np.ndarray
    token_evals: int
    signature: str = ""
    """The settings behind these estimates: policy, samples, replicates, distance, ε and seed."""


def _distances(samples: np.ndarray, target: list[int], distance: str) -> np.ndarray:
    """Distance of every sampled continuation to the target."""
    if distance == "hamming":
        return (samples != np.asarray(target)).sum(axis=1)
    return np.array([Levenshtein.distance(row, target) for row in samples.tolist()])


@dataclass(frozen=True)
class _Job:
    """A chunk of samples of one example and replicate, with its own random stream."""

    example: int
    replicate: int
    count: int
    seed: int


def _jobs(n_examples: int, samples: int, replicates: int, seed: int, max_rows: int) -> list[_Job]:
    """Split every example's samples into chunks of at most `max_rows`, each seeded on its own."""
    jobs = []
    for example in range(n_examples):
        for replicate in range(replicates):
            for chunk, start in enumerate(range(0, samples, max_rows)):
                stream = int(np.random.SeedSequence([seed, example, replicate, chunk]).generate_state(1)[0])
                jobs.append(_Job(example, replicate, min(max_rows, samples - start), stream))
    return jobs


def _sample_jobs(lm: LanguageModel, jobs: list[_Job], prefixes: list[list[int]], suffixes: list[list[int]],
                 policy: DecodingPolicy) -> list[np.ndarray]:
    """Sample every job's continuations in one batch: one prefill per job, then T steps."""
    counts = torch.tensor([job.count for job in jobs])
    lengths = [len(suffixes[job.example]) for job in jobs]
    state = lm.prefill([prefixes[job.example] for job in jobs])
    state = lm.select_rows(state, torch.repeat_interleave(torch.arange(len(jobs)), counts))
    generators = [torch.Generator().manual_seed(job.seed) for job in jobs]
    tokens = []
    for t in range(max(lengths)):
        uniforms = torch.cat([torch.rand(job.count, generator=g, dtype=torch.float64) for job, g in zip(jobs, generators)])
        token = policy.sample(state.logits, uniforms=uniforms)
        tokens.append(token)
        if t + 1 < max(lengths):
            state = lm.step(state, token)
    drawn = torch.stack(tokens, dim=1).cpu().numpy()
    bounds = np.concatenate([[0], np.cumsum(counts.numpy())])
    return [drawn[bounds[i] : bounds[i + 1], : lengths[i]] for i in range(len(jobs))]


def monte_carlo(
    model: Any,
    prefixes: Any,
    suffixes: Any,
    policy: DecodingPolicy | None = None,
    samples: int = 1000,
    distance: str = defaults.PRUNE,
    epsilon: int = defaults.EPSILON,
    seed: int = 0,
    replicates: int = 1,
    *,
    checkpoints: Sequence[int] | None = None,
    max_rows: int = 512,
    progress: bool = False,
) -> list[MonteCarloResult]:
    """Monte Carlo estimates of p_{z,ε} for every (prefix, suffix), deterministic for a seed.

    The convergence curve is given at `checkpoints` (pooled sample counts per replicate, each ≤ `samples`;
    default 30 log-spaced counts): the estimates at nested budgets from one stream of samples.
    """
    if samples < 1 or replicates < 1:
        raise MemriskError(f"samples and replicates must be >= 1, got {samples} and {replicates}")
    if checkpoints is not None and (not checkpoints or min(checkpoints) < 1 or max(checkpoints) > samples):
        raise MemriskError(f"checkpoints must be sample counts from 1 to samples = {samples}, got {list(checkpoints or [])}")
    if distance not in ("hamming", "levenshtein"):
        raise MemriskError(f"distance must be 'hamming' or 'levenshtein', got {distance!r}")
    if epsilon < 0:
        raise MemriskError(f"epsilon must be >= 0, got {epsilon}")
    lm = as_model(model)
    prefix_ids, suffix_ids = prefix_suffix_pairs(lm, prefixes, suffixes)
    policy = default_policy() if policy is None else policy
    bos = 0 if lm.bos_token_id is None else 1
    jobs = _jobs(len(prefix_ids), samples, replicates, seed, max_rows)
    distances: dict[tuple[int, int], list[np.ndarray]] = {}
    evals = [0] * len(prefix_ids)
    bar = tqdm(total=len(jobs), desc="Monte Carlo", unit="chunk", disable=not progress)
    with torch.inference_mode():
        group: list[_Job] = []
        for job in jobs + [None]:
            if job is not None and sum(j.count for j in group) + job.count <= max_rows:
                group.append(job)
                continue
            for done, drawn in zip(group, _sample_jobs(lm, group, prefix_ids, suffix_ids, policy) if group else []):
                target = suffix_ids[done.example]
                distances.setdefault((done.example, done.replicate), []).append(_distances(drawn, target, distance))
                evals[done.example] += len(prefix_ids[done.example]) + bos + (len(target) - 1) * done.count
            bar.update(len(group))
            group = [job] if job is not None else []
    bar.close()
    signed = signature("monte_carlo", policy=policy.name, samples=samples, replicates=replicates, distance=distance, eps=epsilon, seed=seed)
    return [
        replace(_summarise(np.stack([np.concatenate(distances[(i, r)]) for r in range(replicates)]), distance, epsilon, evals[i], checkpoints),
                signature=signed)
        for i in range(len(prefix_ids))
    ]


def _summarise(distances: np.ndarray, distance: str, epsilon: int, token_evals: int, checkpoints: Sequence[int] | None = None) -> MonteCarloResult:
    """Pool replicate distances [R, M] into estimates, intervals and the convergence curve."""
    replicates, samples = distances.shape
    within = distances[:, :, None] <= np.arange(epsilon + 1)
    hits = within.sum(axis=(0, 1))
    total = replicates * samples
    low, high = wilson_interval(hits, total)
    if checkpoints is None:
        checkpoints = np.unique(np.round(np.logspace(0, math.log10(samples), 30)).astype(int))
    checkpoints = np.asarray(checkpoints, dtype=int)
    cumulative = within.cumsum(axis=1)[:, checkpoints - 1, :].sum(axis=0)
    curve_low, curve_high = wilson_interval(cumulative, (checkpoints * replicates)[:, None])
    return MonteCarloResult(
        distance=distance,
        samples=samples,
        replicates=replicates,
        hits=hits,
        estimate=hits / total,
        ci_low=low,
        ci_high=high,
        replicate_estimates=within.mean(axis=1),
        curve_samples=checkpoints * replicates,
        curve_estimate=cumulative / (checkpoints * replicates)[:, None],
        curve_low=curve_low,
        curve_high=curve_high,
        token_evals=token_evals,
    )
