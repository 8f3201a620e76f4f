"""Greedy discoverable extraction: decode T tokens greedily and compare with the suffix."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from memrisk.decoding import DecodingPolicy
from memrisk.distance import hamming, levenshtein
from memrisk.extraction.inputs import as_model, batch_slices, prefix_suffix_pairs
from memrisk.extraction.probabilistic import verbatim_scores

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GreedyResult:
    """Greedy continuation of one prefix and its token distances to the target suffix.

    `teacher_forced_exact` is the cross-check "the target is the argmax at every position";
    it differs from `exact` only on floating-point near-ties (`agrees` is False then).
    """

    continuation: list[int]
    exact: bool
    hamming: int
    levenshtein: int
    teacher_forced_exact: bool

    @property
    def agrees(self) -> bool:
        """Whether generated greedy and the teacher-forced argmax check agree."""
        return self.exact == self.teacher_forced_exact


def greedy_continuations(model: Any, prefixes: Any, lengths: list[int], *, progress: bool = False) -> list[list[int]]:
    """Exactly `lengths[i]` greedily decoded tokens after each prefix (EOS does not stop)."""
    lm = as_model(model)
    policy = DecodingPolicy.greedy()
    out: list[list[int]] = []
    bar = tqdm(total=len(prefixes), desc="greedy decoding", unit="seq", disable=not progress)
    for rows in batch_slices(len(prefixes), lm.batch_size):
        steps = max(lengths[rows])
        state = lm.prefill(prefixes[rows])
        generated = []
        for t in range(steps):
            token = policy.log_probs(state.logits).argmax(-1)
            generated.append(token)
            if t + 1 < steps:
                state = lm.step(state, token)
        tokens = torch.stack(generated, dim=1).cpu().tolist()
        out.extend(row[:n] for row, n in zip(tokens, lengths[rows]))
        bar.update(rows.stop - rows.start)
    bar.close()
    return out


def greedy_extraction(
    model: Any,
    prefixes: Any,
    suffixes: Any,
    *,
    teacher_forced_exact: np.ndarray | None = None,
    progress: bool = False,
) -> list[GreedyResult]:
    """Greedy discoverable extraction (verbatim and near-verbatim) with the teacher-forced check.

    Pass `teacher_forced_exact` (e.g. `VerbatimScores.argmax_match`) to reuse a forward pass
    already made; otherwise one is run here.
    """
    lm = as_model(model)
    prefix_ids, suffix_ids = prefix_suffix_pairs(lm, prefixes, suffixes)
    if teacher_forced_exact is None:
        scores = verbatim_scores(lm, prefix_ids, suffix_ids, DecodingPolicy.greedy(), progress=progress)
        teacher_forced_exact = scores.argmax_match
    continuations = greedy_continuations(lm, prefix_ids, [len(s) for s in suffix_ids], progress=progress)
    results = [
        GreedyResult(cont, cont == suffix, hamming(cont, suffix), levenshtein(cont, suffix), bool(tf))
        for cont, suffix, tf in zip(continuations, suffix_ids, teacher_forced_exact)
    ]
    disagreeing = [i for i, r in enumerate(results) if not r.agrees]
    if disagreeing:
        log.warning(
            "greedy generation and the teacher-forced argmax check disagree on %d of %d examples "
            "(floating-point near-ties): %s",
            len(disagreeing), len(results), disagreeing[:20],
        )
    return results
