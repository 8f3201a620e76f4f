"""Monte Carlo estimation of near-verbatim extraction risk (CBS paper §C.1).

M i.i.d. T-token samples per example under the decoding policy; p̂_{z,ε} = hits / M is unbiased.
Each prefix is evaluated once and its KV cache expanded across every batch of samples (App. C.3,
eq. 23). Each example and replicate draws from its own random stream (a function of the seed, the
example's index and the replicate), sample j taking the stream's draws j·T … j·T + T − 1: the draws
depend neither on how examples and samples are batched, and the first n of M samples are those of
a budget of n. Each draw inverts the policy's float32 CDF, which another batch layout or thread count
may round differently: a draw that lands within that rounding of a token boundary then picks the
neighbouring token (about 1e-5 a token on the tests' tiny models, tests/unit/test_cbs.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
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
from memrisk.models.backend import DecodeState, LanguageModel
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
class _Piece:
    """Consecutive samples of one example and replicate, drawn in one batch."""

    example: int
    replicate: int
    count: int


def _stream(seed: int, example: int, replicate: int) -> np.random.Generator:
    """The random stream of one example and replicate; sample j takes its draws j·T … j·T + T − 1."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, example, replicate])))


def _blocks(n_examples: int, samples: int, replicates: int, lm: LanguageModel, max_rows: int) -> list[range]:
    """Examples prefilled together: the model's batch size, or as many as one batch of samples holds."""
    size = max(lm.batch_size, max_rows // (samples * replicates))
    return [range(start, min(start + size, n_examples)) for start in range(0, n_examples, size)]


def _batches(examples: range, samples: int, replicates: int, max_rows: int) -> Iterator[list[_Piece]]:
    """Every example's streams, in order, cut into batches of `max_rows` samples (the last may be short)."""
    batch: list[_Piece] = []
    room = max_rows
    for example in examples:
        for replicate in range(replicates):
            left = samples
            while left:
                count = min(left, room)
                batch.append(_Piece(example, replicate, count))
                left, room = left - count, room - count
                if room == 0:
                    yield batch
                    batch, room = [], max_rows
    if batch:
        yield batch


def _parents(batch: list[_Piece], first: int) -> torch.Tensor:
    """The prefilled row each sample of the batch continues (example `first` is row 0)."""
    rows = torch.tensor([piece.example - first for piece in batch])
    return torch.repeat_interleave(rows, torch.tensor([piece.count for piece in batch]))


def _uniforms(batch: list[_Piece], lengths: list[int], streams: dict[tuple[int, int], np.random.Generator]) -> torch.Tensor:
    """Each sample's T uniforms from its stream, right-padded to the batch's longest suffix: [rows, max T]."""
    steps = max(lengths[piece.example] for piece in batch)
    return torch.from_numpy(np.concatenate([
        np.pad(streams[piece.example, piece.replicate].random((piece.count, lengths[piece.example])),
               ((0, 0), (0, steps - lengths[piece.example])))
        for piece in batch
    ]))


def _sample(lm: LanguageModel, prefilled: DecodeState, parents: torch.Tensor, uniforms: torch.Tensor,
            policy: DecodingPolicy) -> np.ndarray:
    """T-token continuations of prefilled rows `parents` under the policy (§C.1), one uniform per row and step: [rows, steps]."""
    state = lm.expand_rows(prefilled, parents)
    uniforms = uniforms.to(lm.device)
    tokens, deciding = [], policy.deciding_logits(lm.vocab_size)
    for t in range(uniforms.shape[1]):
        tokens.append(policy.sample(state.logits, uniforms=uniforms[:, t], within=state.candidates))
        if t + 1 < uniforms.shape[1]:
            state = lm.step(state, tokens[-1], deciding)
    return torch.stack(tokens, dim=1).cpu().numpy()


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
    on_samples: Callable[[int, np.ndarray], None] | None = None,
) -> list[MonteCarloResult]:
    """Monte Carlo estimates of p_{z,ε} for every (prefix, suffix), deterministic for a seed.

    The convergence curve is given at `checkpoints` (pooled sample counts per replicate, each ≤ `samples`;
    default 30 log-spaced counts): the estimates at nested budgets from one stream of samples. Each prefix
    is evaluated once: an example costs a + (T − 1)·samples·replicates token evaluations (a = prefix tokens incl. BOS).
    `on_samples(example, samples)` sees every batch of an example's sampled continuations ([count, T] token ids, in
    stream order) as they are drawn, so callers can summarise them without keeping them.
    """
    if samples < 1 or replicates < 1:
        raise MemriskError(f"samples and replicates must be >= 1, got {samples} and {replicates}")
    if checkpoints is not None and (not checkpoints or min(checkpoints) < 1 or max(checkpoints) > samples):
        raise MemriskError(f"checkpoints must be sample counts from 1 to samples = {samples}, got {list(checkpoints or [])}")
    if distance not in ("hamming", "levenshtein"):
        raise MemriskError(f"distance must be 'hamming' or 'levenshtein', got {distance!r}")
    if epsilon < 0:
        raise MemriskError(f"epsilon must be >= 0, got {epsilon}")
    if max_rows < 1:
        raise MemriskError(f"max_rows must be >= 1, got {max_rows}")
    lm = as_model(model)
    prefix_ids, suffix_ids = prefix_suffix_pairs(lm, prefixes, suffixes)
    policy = default_policy() if policy is None else policy
    bos = 0 if lm.bos_token_id is None else 1
    lengths = [len(suffix) for suffix in suffix_ids]
    streams = {(i, r): _stream(seed, i, r) for i in range(len(prefix_ids)) for r in range(replicates)}
    distances: dict[tuple[int, int], list[np.ndarray]] = {key: [] for key in streams}
    bar = tqdm(total=len(streams) * samples, desc="Monte Carlo", unit="sample", disable=not progress)
    with torch.inference_mode():
        for block in _blocks(len(prefix_ids), samples, replicates, lm, max_rows):
            prefilled = lm.prefill([prefix_ids[i] for i in block], shared=True)
            for batch in _batches(block, samples, replicates, max_rows):
                drawn = _sample(lm, prefilled, _parents(batch, block.start), _uniforms(batch, lengths, streams), policy)
                for piece, rows in zip(batch, np.split(drawn, np.cumsum([piece.count for piece in batch])[:-1])):
                    target = suffix_ids[piece.example]
                    if on_samples is not None:
                        on_samples(piece.example, rows[:, : len(target)])
                    found = _distances(rows[:, : len(target)], target, distance)
                    distances[piece.example, piece.replicate].append(found)
                    bar.update(piece.count)
    bar.close()
    evals = [len(prefix) + bos + (length - 1) * samples * replicates for prefix, length in zip(prefix_ids, lengths)]
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
