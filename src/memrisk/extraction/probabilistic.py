"""Probabilistic (verbatim) extraction: log p_z of a suffix given its prefix, by teacher forcing.

One forward pass over prefix ‖ suffix gives the logits at the T suffix positions; every
decoding policy is scored from those same logits ((n,p) paper §3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from memrisk.decoding import DecodingPolicy, at_least_float32, score_policies, tokens_ahead
from memrisk.extraction.inputs import as_model, as_policies, batch_slices, padded, prefix_suffix_pairs
from memrisk.signature import signature


@dataclass(frozen=True)
class VerbatimScores:
    """Teacher-forced scores of n suffixes under P policies.

    `log_p[i, j]` is log p_z of example i under policy j (−inf when a target token falls
    outside the policy's kept set). `token_log_probs[i, j, t]` are the per-step terms and
    `ranks[i, t]` the 1-based rank of target token t among the raw logits (ties go to the
    lower token id); both are 0 past the end of a shorter suffix. `raw_log_probs[i, t]` is log p of
    target token t under the raw model (temperature 1, no truncation), and `log_prob_mean[i, t]`,
    `log_prob_std[i, t]` the mean and standard deviation of log p(z) over the vocabulary with z drawn
    from that same distribution (Min-K%++, Zhang et al. 2024); all three are 0 past the end.
    """

    policies: tuple[DecodingPolicy, ...]
    log_p: np.ndarray
    token_log_probs: np.ndarray
    ranks: np.ndarray
    suffix_lengths: np.ndarray
    raw_log_probs: np.ndarray
    log_prob_mean: np.ndarray
    log_prob_std: np.ndarray

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
    progress: bool = False,
) -> VerbatimScores:
    """Score every suffix under every policy from one teacher-forced pass per batch."""
    lm = as_model(model)
    prefix_ids, suffix_ids = prefix_suffix_pairs(lm, prefixes, suffixes)
    policies = as_policies(policies)
    n, max_t = len(suffix_ids), max(len(s) for s in suffix_ids)
    lengths = np.array([len(s) for s in suffix_ids], dtype=np.int64)
    token_log_probs = np.zeros((n, len(policies), max_t), dtype=np.float32)
    ranks = np.zeros((n, max_t), dtype=np.int64)
    raw = np.zeros((3, n, max_t), dtype=np.float32)
    bar = tqdm(total=n, desc="teacher forcing", unit="seq", disable=not progress)
    for rows in batch_slices(n, lm.batch_size):
        logits = lm.suffix_logits(prefix_ids[rows], suffix_ids[rows])
        width = logits.shape[1]
        targets = padded(suffix_ids[rows], width, logits.device)
        valid = torch.arange(width, device=logits.device) < torch.as_tensor(lengths[rows], device=logits.device)[:, None]
        ranks[rows, :width] = ((tokens_ahead(logits, targets) + 1) * valid).cpu().numpy()
        for j, step in enumerate(score_policies(policies, logits, targets)):
            token_log_probs[rows, j, :width] = step.masked_fill(~valid, 0.0).cpu().numpy()
        for k, values in enumerate(raw_log_prob_moments(logits, targets)):
            raw[k, rows, :width] = values.masked_fill(~valid, 0.0).cpu().numpy()
        bar.update(rows.stop - rows.start)
    bar.close()
    log_p = token_log_probs.astype(np.float64).sum(axis=2)
    return VerbatimScores(policies, log_p, token_log_probs, ranks, lengths, *raw)


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
