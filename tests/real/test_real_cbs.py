"""CBS on pretrained SmolLM2-135M-Instruct: licence windows, bounds and cost."""

from __future__ import annotations

import math

import pytest

import memrisk
from memrisk import DecodingPolicy

pytestmark = pytest.mark.real_model

MIT = (
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and "
    "associated documentation files (the \"Software\"), to deal in the Software without restriction, including "
    "without limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell "
    "copies of the Software, and to permit persons to whom the Software is furnished to do so, subject to the "
    "following conditions:"
)


def test_cbs_on_a_licence_window_reports_bounds_and_cost(smollm2) -> None:
    ids = smollm2.encode(MIT)
    prefix, suffix = ids[:30], ids[30:45]
    policy = DecodingPolicy(top_k=40)
    p_z = math.exp(memrisk.verbatim_logprob(smollm2, [prefix], [suffix], policy)[0, 0])
    [baseline, pruned] = [
        memrisk.cbs(smollm2, [prefix], [suffix], policy, beam_width=8, prune=prune, epsilon=3)[0]
        for prune in (None, "levenshtein")
    ]
    for result in (baseline, pruned):
        lower, upper = result.lower_bound("levenshtein", 3), result.upper_bound("levenshtein", 3)
        print(f"prune={result.prune}: LB {lower:.3e} UB {upper:.3e} covered {result.covered_mass:.3e} "
              f"bank {result.bank:.3e} token evals {result.token_evals} stop {result.stop}")
        assert 0.0 <= lower <= upper <= 1.0
        assert result.token_evals <= len(prefix) + (len(suffix) - 1) * (8 + 1)  # B rows and the anchor row
        # anchored: the target's own path is found; 15 KV-cached steps vs one teacher-forced pass in float32
        assert result.lower_bound("levenshtein", 0) == pytest.approx(p_z, rel=1e-4)
    assert 8 * 40 <= len(baseline.candidates) <= (8 + 1) * 40
    assert pruned.upper_bound("levenshtein", 3) < 1.0
