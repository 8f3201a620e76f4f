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


def rows_alike_at_one_and_two_threads(lm: memrisk.LanguageModel) -> bool:
    """Whether this machine's BLAS gives each of the first rows of SmolLM2's products at two threads the bits of the
    same rows alone at one thread, at the row counts of the test below (8 and 4, 64 and 32): so on the AMD EPYC these
    tests were written on; not so on an Intel Xeon with AVX-512, where MKL takes other kernels."""
    import torch

    generator = torch.Generator().manual_seed(0)
    kept = torch.get_num_threads()
    try:
        layers = [m.weight for m in lm.model.modules() if isinstance(m, torch.nn.Linear)]
        for weight in (lm.model.get_output_embeddings().weight, *layers[:7]):
            for rows in (8, 64):
                hidden = torch.randn(rows, weight.shape[1], generator=generator)
                torch.set_num_threads(2)
                both = hidden @ weight.t()
                torch.set_num_threads(1)
                if not torch.equal(both[: rows // 2], hidden[: rows // 2] @ weight.t()):
                    return False
    finally:
        torch.set_num_threads(kept)
    return True


def test_k_cbs_dealt_into_two_shares_gives_the_one_pool_results_bit_for_bit(smollm2) -> None:
    """Two pools side by side, one thread each, against one pool on two threads. Every forward holds rows enough for
    torch's products to compute a row alike in both (`models.shares`): the prefills' heads 8 rows at two threads and 4 at
    one, the steps 64 and 32. So every float is equal, where this machine's BLAS computes a row alike at those counts;
    elsewhere the same candidates and stops, with log-probabilities equal to float32 rounding."""
    import torch

    ids = smollm2.encode(MIT)
    starts = range(0, 32, 4)
    prefixes, suffixes = [ids[i : i + 16] for i in starts], [ids[i + 16 : i + 24] for i in starts]
    search = {"beam_width": 8, "prune": None, "anchor": False, "batch_size": 8}
    kept = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        one = memrisk.cbs(smollm2, prefixes, suffixes, DecodingPolicy(top_k=40), shares=1, **search)
        two = memrisk.cbs(smollm2, prefixes, suffixes, DecodingPolicy(top_k=40), shares=2, **search)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(kept)
    assert len(one[0].candidates) == 8 * 40
    if rows_alike_at_one_and_two_threads(smollm2):
        assert one == two
    else:
        for a, b in zip(one, two):
            mine, theirs = {c.tokens: c.log_p for c in a.candidates}, {c.tokens: c.log_p for c in b.candidates}
            assert mine.keys() == theirs.keys() and a.stop == b.stop and a.token_evals == b.token_evals
            assert [mine[t] for t in mine] == pytest.approx([theirs[t] for t in mine], rel=1e-5)


def test_k_cbs_with_the_screened_head_gives_the_full_heads_results_bit_for_bit(smollm2, monkeypatch) -> None:
    """SmolLM2's head screened by oneDNN's logits (forced on, whatever this machine's speeds) against BLAS's full head,
    on 2 windows × B = 20 rows a step: every float equal, and each step's exact columns a few percent of 49,152."""
    from memrisk.models import linears

    ids = smollm2.encode(MIT)
    prefixes, suffixes = [ids[0:16], ids[8:24]], [ids[16:24], ids[24:32]]
    search = {"beam_width": 20, "prune": None, "anchor": False, "batch_size": 2}
    widths: list[int] = []
    product = linears.column_logits
    monkeypatch.setattr(linears, "column_logits", lambda rows, weight, columns: widths.append(len(columns)) or product(rows, weight, columns))
    monkeypatch.setattr(linears.HeadScreen, "pays", lambda self, sliced: True)
    screened = memrisk.cbs(smollm2, prefixes, suffixes, DecodingPolicy(top_k=40), **search)
    monkeypatch.setattr(linears.HeadScreen, "pays", lambda self, sliced: False)
    full = memrisk.cbs(smollm2, prefixes, suffixes, DecodingPolicy(top_k=40), **search)
    print(f"exact columns per screened step: {widths}")
    assert len(widths) == 7 and max(widths) < 0.05 * smollm2.vocab_size  # every step after the prefill, screened
    assert screened == full


def test_k_cbs_with_onednns_packed_weights_gives_the_plain_weights_results_bit_for_bit(smollm2, monkeypatch) -> None:
    """`matmul: onednn` multiplies by blocked copies of SmolLM2's weights (`linears.PackedWeights`): k-CBS on 2 windows
    × B = 20 gives every float of the search run with the plain weights (the same library, the same batches)."""
    from memrisk.models import linears

    ids = smollm2.encode(MIT)
    prefixes, suffixes = [ids[0:16], ids[8:24]], [ids[16:24], ids[24:32]]
    search = {"beam_width": 20, "prune": None, "anchor": False, "batch_size": 2}
    packed_products: list[bool] = []
    product = linears.onednn_product
    monkeypatch.setattr(linears, "onednn_product", lambda hidden, weight, bias=None: packed_products.append(weight.is_mkldnn)
                        or product(hidden, weight, bias))
    smollm2.use_matmul("onednn")
    try:
        packed = memrisk.cbs(smollm2, prefixes, suffixes, DecodingPolicy(top_k=40), **search)
        assert sum(packed_products) >= 7 * (7 * 30 + 1)  # every layer and the head of each step after the prefill
        monkeypatch.setattr(linears.PACKED, "_copy", lambda weight: None)
        plain = memrisk.cbs(smollm2, prefixes, suffixes, DecodingPolicy(top_k=40), **search)
    finally:
        smollm2.use_matmul("blas")
    assert packed == plain
