"""Prior-aware memorization (PA paper §4): memorized text versus merely likely text.

A pair p‖s is PA-memorized when P(s|p) > m and P(s|p) / v̂_s > n (both strict), where
v̂_s = (1/c) Σ_i P(s|q_i) estimates the suffix's prior from c random prefixes q_i. Each bank
prefix is prefilled once and its KV cache continued with every target suffix, so a target
costs c·T token evaluations rather than c·(|q| + T). Everything is in log space.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from memrisk import defaults
from memrisk.data.bank import PrefixBank
from memrisk.decoding import DecodingPolicy, score_policies
from memrisk.errors import MemriskError
from memrisk.extraction import generic
from memrisk.extraction.inputs import as_model, as_token_lists, batch_slices, padded, prefix_suffix_pairs
from memrisk.extraction.probabilistic import verbatim_scores
from memrisk.models.backend import LanguageModel

FULL_DISTRIBUTION = DecodingPolicy()
TOKEN_BUDGET = 100


def default_m(suffix_length: int) -> float:
    """The PA paper's P(s|p) threshold: 1e-2 for short (≤ 10-token) suffixes, 1e-4 for long ones (§4.4)."""
    return 1e-2 if suffix_length <= generic.SHORT_SUFFIX_TOKENS else 1e-4


def bank_log_probs(
    model: Any, bank: PrefixBank, suffixes: Sequence[Sequence[int]], policy: DecodingPolicy = FULL_DISTRIBUTION,
    *, progress: bool = False,
) -> np.ndarray:
    """log P(s_i | q_j) for every suffix i and bank prefix j: [len(suffixes), len(bank)], float64.

    Bank prefixes are prefilled a batch at a time; each batch's cache is continued with every
    suffix (several suffixes per pass when they are short) and never recomputed.
    """
    lm = as_model(model)
    suffix_ids = [list(s) for s in suffixes]
    if not suffix_ids or min(len(s) for s in suffix_ids) < 1:
        raise MemriskError("every suffix scored against the prefix bank needs at least one token")
    out = np.empty((len(suffix_ids), len(bank)), dtype=np.float64)
    chunk = lm.batch_size
    longest = max(len(s) for s in suffix_ids)
    per_pass = max(1, (lm.batch_size * TOKEN_BUDGET) // (chunk * longest))
    bar = tqdm(total=len(bank) * len(suffix_ids), desc="prior (bank x suffixes)", unit="pair", disable=not progress)
    for rows in batch_slices(len(bank), chunk):
        state = lm.prefill([list(p) for p in bank.prefixes[rows]], shared=True)
        width = rows.stop - rows.start
        for group in batch_slices(len(suffix_ids), per_pass):
            members = suffix_ids[group]
            tiled = [s for s in members for _ in range(width)]  # row g·width + j: suffix g after prefix j
            length = max(len(s) for s in members)
            targets = padded(tiled, length, lm.device)
            logits = lm.continuation_logits(state, targets)
            steps = score_policies([policy], logits, targets)[0].double()
            valid = torch.arange(length, device=steps.device) < torch.tensor([len(s) for s in tiled], device=steps.device)[:, None]
            sums = steps.masked_fill(~valid, 0.0).sum(-1).view(len(members), width)
            out[group, rows] = sums.cpu().numpy()
            bar.update(len(members) * width)
    bar.close()
    return out


@dataclass(frozen=True)
class PriorAwareResult:
    """One target's prior-aware verdict; log-probabilities are natural logs.

    `log_prior` pools all c·trials bank prefixes; `log_prior_trials` has one estimate per trial
    and `log_ratio_spread` is the range of log P(s|p) − log v̂ over the trials.
    """

    log_p: float
    log_prior: float
    log_prior_trials: tuple[float, ...]
    log_ratio: float
    log_ratio_spread: float
    prefixes_used: int
    extractable: bool
    pa_memorized: bool


@dataclass(frozen=True)
class Calibration:
    """The threshold n of one model: the mean of P(s|p)/v̂_s over generic sequences (PA §4.4)."""

    n: float
    log_n: float
    sequences: tuple[str, ...]
    log_ratios: tuple[float, ...]


@dataclass(frozen=True)
class PriorAwareScores:
    """Per-target results with the thresholds and settings that produced them."""

    results: list[PriorAwareResult]
    m: float
    n: float
    calibration: Calibration | None
    trials: int
    prefixes_per_trial: int
    policy: DecodingPolicy
    bank: str

    @property
    def signature(self) -> str:
        """A reproducibility signature printed with every PA figure."""
        return (
            f"pa|m={self.m:g}|n={self.n:.4g}|n-source={'calibrated' if self.calibration else 'given'}"
            f"|c={self.prefixes_per_trial}|trials={self.trials}|policy={self.policy.name}|bank={self.bank}"
        )


def _pooled(log_probs: np.ndarray, keep: np.ndarray) -> float:
    """log of the mean of exp(log_probs) over `keep` (−inf when nothing is kept)."""
    if not keep.any():
        return float("-inf")
    return float(np.logaddexp.reduce(log_probs[keep]) - math.log(int(keep.sum())))


def _log_ratio(log_p: float, log_prior: float) -> float:
    """log P(s|p) − log v̂, with −inf − (−inf) read as −inf (a suffix no prefix can produce)."""
    return float("-inf") if log_p == float("-inf") else log_p - log_prior


def calibrate(
    model: Any, bank: PrefixBank, *, sequences: Sequence[str] | None = None, suffix_length: int = 50,
    trials: int = defaults.PA_TRIALS, policy: DecodingPolicy = FULL_DISTRIBUTION, progress: bool = False,
) -> Calibration:
    """Calibrate n on generic sequences (default: PA Appendix B's set matching `suffix_length`), each split into equal token halves."""
    lm = as_model(model)
    texts = tuple(generic.for_suffix_length(suffix_length) if sequences is None else sequences)
    halves = []
    for text in texts:
        ids = lm.encode(text)
        half = len(ids) // 2
        if half < 1:
            raise MemriskError(f"generic sequence {text!r} has fewer than 2 tokens")
        halves.append((ids[:half], ids[half : 2 * half]))
    scores = _prior_aware(lm, [p for p, _ in halves], [s for _, s in halves], bank, trials, policy, None, progress)
    log_ratios = tuple(r for r, _, _, _, _ in scores)
    log_n = float(np.logaddexp.reduce(np.array(log_ratios)) - math.log(len(log_ratios)))
    return Calibration(math.exp(log_n), log_n, texts, log_ratios)


def _prior_aware(
    lm: LanguageModel, prefixes: list[list[int]], suffixes: list[list[int]], bank: PrefixBank, trials: int,
    policy: DecodingPolicy, documents: Sequence[str | None] | None, progress: bool, log_p: np.ndarray | None = None,
) -> list[tuple[float, float, float, tuple[float, ...], int]]:
    """(log ratio, log P(s|p), log v̂ pooled, log v̂ per trial, prefixes used) for each target; log P(s|p) is
    teacher-forced here unless given."""
    if trials < 1 or len(bank) < trials:
        raise MemriskError(f"need 1 <= trials <= bank size; got trials={trials} with {len(bank)} bank prefixes")
    per_trial = len(bank) // trials
    used = per_trial * trials
    if log_p is None:
        log_p = verbatim_scores(lm, prefixes, suffixes, policy).log_p[:, 0]
    matrix = bank_log_probs(lm, bank, suffixes, policy, progress=progress)[:, :used]
    bank_docs = np.array([d if d is not None else "" for d in bank.documents[:used]], dtype=object)
    out = []
    for i in range(len(suffixes)):
        keep = np.ones(used, dtype=bool)
        if documents is not None and documents[i] is not None:
            keep &= bank_docs != documents[i]
        per = tuple(_pooled(matrix[i, t * per_trial : (t + 1) * per_trial], keep[t * per_trial : (t + 1) * per_trial]) for t in range(trials))
        pooled = _pooled(matrix[i], keep)
        out.append((_log_ratio(float(log_p[i]), pooled), float(log_p[i]), pooled, per, int(keep.sum())))
    return out


def prior_aware(
    model: Any,
    prefixes: Any,
    suffixes: Any,
    prefix_bank: PrefixBank | Sequence[Sequence[int]],
    m: float | None = None,
    n: float | str = "calibrate",
    *,
    trials: int = defaults.PA_TRIALS,
    policy: DecodingPolicy = FULL_DISTRIBUTION,
    documents: Sequence[str | None] | None = None,
    generic_sequences: Sequence[str] | None = None,
    log_p: Sequence[float] | None = None,
    progress: bool = False,
) -> PriorAwareScores:
    """Prior-aware memorization of every (prefix, suffix) against a bank of random prefixes.

    The bank's first c·trials prefixes (c = len(bank) // trials) form `trials` disjoint trials.
    `m` defaults by suffix length (PA §4.4); `n='calibrate'` computes it from generic sequences
    (PA Appendix B, or `generic_sequences`). With `documents` (the target's document id per
    example), bank prefixes drawn from the target's own document are left out of its prior.
    `log_p`, each target's log P(s|p) under `policy`, spares a teacher-forced pass where the caller already ran one.
    """
    lm = as_model(model)
    prefix_ids, suffix_ids = prefix_suffix_pairs(lm, prefixes, suffixes)
    if log_p is not None:
        log_p = np.asarray(log_p, dtype=np.float64)
        if log_p.shape != (len(prefix_ids),):
            raise MemriskError(f"log_p needs one log-probability per example: got shape {log_p.shape} for {len(prefix_ids)} examples")
    bank = prefix_bank if isinstance(prefix_bank, PrefixBank) else PrefixBank.from_token_lists(as_token_lists(lm, prefix_bank, "prefix_bank"))
    if documents is not None and len(documents) != len(prefix_ids):
        raise MemriskError(f"got {len(documents)} document ids for {len(prefix_ids)} examples")
    longest = max(len(s) for s in suffix_ids)
    m = default_m(longest) if m is None else m
    if not 0.0 <= m < 1.0:
        raise MemriskError(f"m must be in [0, 1), got {m}")
    calibration = None
    if n == "calibrate":
        calibration = calibrate(lm, bank, sequences=generic_sequences, suffix_length=longest, trials=trials, policy=policy)
        n = calibration.n
    if isinstance(n, str) or not n >= 0:
        raise MemriskError(f"n must be a number >= 0 or 'calibrate', got {n!r}")
    scored = _prior_aware(lm, prefix_ids, suffix_ids, bank, trials, policy, documents, progress, log_p)
    log_m = math.log(m) if m > 0 else float("-inf")
    log_n = math.log(n) if n > 0 else float("-inf")
    results = []
    for log_ratio, log_p, pooled, per_trial, used in scored:
        ratios = [_log_ratio(log_p, t) for t in per_trial]
        finite = [r for r in ratios if math.isfinite(r)]
        spread = max(finite) - min(finite) if len(finite) == len(ratios) else float("inf") if finite else 0.0
        extractable = log_p > log_m
        results.append(PriorAwareResult(
            log_p=log_p, log_prior=pooled, log_prior_trials=per_trial, log_ratio=log_ratio, log_ratio_spread=spread,
            prefixes_used=used, extractable=extractable, pa_memorized=extractable and log_ratio > log_n,
        ))
    return PriorAwareScores(results, m, float(n), calibration, trials, len(bank) // trials, policy, bank.description)
