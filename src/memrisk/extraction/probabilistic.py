"""Probabilistic (verbatim) extraction: log p_z of a suffix given its prefix, by teacher forcing.

One forward pass over prefix ‖ suffix gives the logits at the T suffix positions; every
decoding policy is scored from those same logits ((n,p) paper §3).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from memrisk.decoding import DecodingPolicy, at_least_float32, rank_and_score
from memrisk.extraction.inputs import as_model, as_policies, batch_slices, padded, prefix_suffix_pairs
from memrisk.signature import signature

SCORED_POSITIONS = 128
"""Positions ranked and scored under the policies together on a CPU: their top-k and normalisers cost fewer calls in
larger parts (SmolLM2's 8 × 50 positions under 4 policies: 130 ms in parts of 8, 81 ms in parts of 128, 80 ms at
once), and a part of 128 × 49,152 float32 logits keeps each temporary at 25 MiB."""
CACHED_POSITIONS = 8
"""Positions whose Min-K%++ moments are computed together on a CPU: 8 × 49,152 float32 logits (1.5 MiB) stay in cache
through their half-dozen passes."""


@dataclass(frozen=True)
class VerbatimScores:
    """Teacher-forced scores of n suffixes under P policies.

    `log_p[i, j]` is log p_z of example i under policy j (−inf when a target token falls
    outside the policy's kept set). `token_log_probs[i, j, t]` are the per-step terms and
    `ranks[i, t]` the 1-based rank of target token t among the raw logits (ties go to the
    lower token id); both are 0 past the end of a shorter suffix. With `moments` (only membership
    inference reads them), `raw_log_probs[i, t]` is log p of target token t under the raw model
    (temperature 1, no truncation), and `log_prob_mean[i, t]`, `log_prob_std[i, t]` the mean and
    standard deviation of log p(z) over the vocabulary with z drawn from that same distribution
    (Min-K%++, Zhang et al. 2024); all three are 0 past the end, and None without `moments`.
    """

    policies: tuple[DecodingPolicy, ...]
    log_p: np.ndarray
    token_log_probs: np.ndarray
    ranks: np.ndarray
    suffix_lengths: np.ndarray
    raw_log_probs: np.ndarray | None = None
    log_prob_mean: np.ndarray | None = None
    log_prob_std: np.ndarray | None = None

    @property
    def signature(self) -> str:
        """The settings behind these scores: teacher forcing under each policy ((n,p) paper §3)."""
        return signature("teacher_forcing", policies=",".join(p.name for p in self.policies))

    def select(self, policies: Sequence[DecodingPolicy]) -> VerbatimScores:
        """The scores of some of these policies, in the order given (each policy's scores are its own)."""
        index = [self.policies.index(p) for p in policies]
        if index == list(range(len(self.policies))):
            return self
        return VerbatimScores(tuple(policies), self.log_p[:, index], self.token_log_probs[:, index], self.ranks, self.suffix_lengths,
                              self.raw_log_probs, self.log_prob_mean, self.log_prob_std)

    @property
    def argmax_match(self) -> np.ndarray:
        """Per example: is every target token the argmax (the teacher-forced greedy check)?"""
        return (self.ranks <= 1).all(axis=1)


def verbatim_scores(
    model: Any,
    prefixes: Any,
    suffixes: Any,
    policies: DecodingPolicy | Sequence[DecodingPolicy],
    *,
    moments: bool = False,
    progress: bool = False,
) -> VerbatimScores:
    """Score every suffix under every policy from one teacher-forced pass per batch; with `moments`, also the raw
    log-probabilities and their Min-K%++ moments (a few more passes over each position's vocabulary)."""
    lm = as_model(model)
    prefix_ids, suffix_ids = prefix_suffix_pairs(lm, prefixes, suffixes)
    policies = as_policies(policies)
    n, max_t = len(suffix_ids), max(len(s) for s in suffix_ids)
    lengths = np.array([len(s) for s in suffix_ids], dtype=np.int64)
    token_log_probs = np.zeros((n, len(policies), max_t), dtype=np.float32)
    ranks = np.zeros((n, max_t), dtype=np.int64)
    raw = np.zeros((3, n, max_t), dtype=np.float32) if moments else None
    bar = tqdm(total=n, desc="teacher forcing", unit="seq", disable=not progress)
    for rows in batch_slices(n, lm.batch_size):
        logits = lm.suffix_logits(prefix_ids[rows], suffix_ids[rows])
        width = logits.shape[1]
        targets = padded(suffix_ids[rows], width, logits.device)
        valid = torch.arange(width, device=logits.device) < torch.as_tensor(lengths[rows], device=logits.device)[:, None]
        rank, steps, raw_columns = score_positions(policies, logits, targets, moments)
        ranks[rows, :width] = ((rank + 1) * valid).cpu().numpy()
        for j, step in enumerate(steps):
            token_log_probs[rows, j, :width] = step.masked_fill(~valid, 0.0).cpu().numpy()
        for k, values in enumerate(raw_columns):
            raw[k, rows, :width] = values.masked_fill(~valid, 0.0).cpu().numpy()
        bar.update(rows.stop - rows.start)
    bar.close()
    log_p = token_log_probs.astype(np.float64).sum(axis=2)
    return VerbatimScores(policies, log_p, token_log_probs, ranks, lengths, *(raw if moments else ()))


def score_positions(
    policies: Sequence[DecodingPolicy], logits: torch.Tensor, targets: torch.Tensor, moments: bool = False
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """Per position ([..., V], [...]): the target's 0-based rank, its log-probability under each policy and, with
    `moments`, the raw moments (`raw_log_prob_moments`; an empty list without). On a CPU the positions go in parts
    (`SCORED_POSITIONS` for the ranks and scores, `CACHED_POSITIONS` for the moments). A position's numbers never depend
    on its batch-mates, and every part (⌊n / rows⌋ near-equal slices) holds at least two positions per thread, so each
    position is still reduced by one thread: the values are those of all positions at once, bit for bit."""
    vocab = logits.shape[-1]
    flat, flat_targets = logits.reshape(-1, vocab), targets.reshape(-1)
    scored = []
    for part, part_targets in _parts(flat, flat_targets, SCORED_POSITIONS):
        ahead, scores = rank_and_score(policies, part, part_targets)
        scored.append([ahead, *scores])
    columns = [torch.cat(column) for column in zip(*scored)]
    if moments:
        raw = [raw_log_prob_moments(part, part_targets) for part, part_targets in _parts(flat, flat_targets, CACHED_POSITIONS)]
        columns += [torch.cat(column) for column in zip(*raw)]
    joined = [column.reshape(targets.shape) for column in columns]
    return joined[0], joined[1:1 + len(policies)], joined[1 + len(policies):]


def _parts(flat: torch.Tensor, targets: torch.Tensor, rows: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """`flat` [n, V] and `targets` [n] in near-equal parts of at least `rows` positions and two per thread on a CPU;
    whole elsewhere."""
    if flat.device.type != "cpu":
        return zip([flat], [targets])
    count = max(1, len(flat) // max(rows, 2 * torch.get_num_threads()))
    return zip(flat.tensor_split(count), targets.tensor_split(count))


def raw_log_prob_moments(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per position ([..., V], [...] -> 3 × [...]): the target's log p under the raw model (float32 log-softmax, temperature 1,
    no truncation), and μ = E_z[log p(z)], σ = sqrt(E_z[(log p(z) − μ)²]) with z ~ p (Min-K%++, Zhang et al. 2024, eq. 3).

    Tokens of probability 0 add nothing to μ and σ (0 · log 0 = 0), so σ is never NaN.
    """
    log_p = torch.log_softmax(at_least_float32(logits), dim=-1)
    target = log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    p = log_p.exp()
    log_p.nan_to_num_(neginf=0.0)
    mean = (p * log_p).sum(-1)
    variance = log_p.sub_(mean.unsqueeze(-1)).square_().mul_(p).sum(-1)
    return target, mean, variance.sqrt()


def verbatim_logprob(
    model: Any,
    prefixes: Any,
    suffixes: Any,
    policies: DecodingPolicy | Sequence[DecodingPolicy],
) -> np.ndarray:
    """log p_z as an array [n_examples, n_policies] (−inf where a policy cannot emit the suffix)."""
    return verbatim_scores(model, prefixes, suffixes, policies).log_p
