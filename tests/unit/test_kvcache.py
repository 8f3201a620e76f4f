"""Incremental decoding with row selection, merging and trimming matches full forward passes."""

from __future__ import annotations

import torch

import memrisk
from memrisk.models.kvcache import SPARE_COLUMNS, SpareColumnsLayer

from conftest import tiny_gpt2


def full_logits(lm: memrisk.LanguageModel, sequences: list[list[int]]) -> torch.Tensor:
    """Next-token logits after each whole sequence, from a fresh forward pass."""
    return torch.stack([lm.suffix_logits([s], [[0]])[0, 0] for s in sequences])


def test_select_step_merge_and_trim_match_recomputation() -> None:
    lm = memrisk.load_model(tiny_gpt2(vocab_size=11, seed=3, n_positions=128))
    generator = torch.Generator().manual_seed(0)
    histories = [[1, 2, 3, 4], [5, 6], [7, 8, 9]]
    state = lm.prefill(histories)
    assert all(isinstance(layer, SpareColumnsLayer) for layer in state.cache.layers)

    def advance(parents: torch.Tensor | None) -> None:
        """One decoding step from `parents` (None: every row continues without reordering)."""
        nonlocal state, histories
        rows = len(histories) if parents is None else len(parents)
        tokens = torch.randint(0, 11, (rows,), generator=generator)
        state = lm.step(state if parents is None else lm.select_rows(state, parents), tokens)
        histories = [histories[p] + [int(t)] for p, t in zip(range(rows) if parents is None else parents.tolist(), tokens.tolist())]
        torch.testing.assert_close(state.logits, full_logits(lm, histories), atol=1e-5, rtol=1e-5)

    for step in range(10):  # beam-style reordering with repeats, growing and shrinking the batch
        advance(torch.randint(0, len(histories), (2 + step % 4,), generator=generator))
    newcomers = [[3, 1], [4, 1, 5, 9, 2, 6]]
    state = lm.merge(state, lm.prefill(newcomers))
    histories += newcomers
    advance(None)
    width = state.attention_mask.shape[1]
    advance(torch.tensor([len(histories) - 1, len(histories) - 2, len(histories) - 1]))
    assert state.attention_mask.shape[1] < width, "leading columns no row attends to are dropped"
    for _ in range(SPARE_COLUMNS + 4):  # appending past the spare columns regrows the buffers
        advance(None)


def test_expanded_rows_decode_like_recomputation_and_leave_the_prefill_untouched() -> None:
    lm = memrisk.load_model(tiny_gpt2(vocab_size=11, seed=3, n_positions=128))
    histories = [[1, 2, 3, 4], [5, 6]]
    prefilled = lm.prefill(histories)
    before = [(layer.keys.clone(), layer.values.clone()) for layer in prefilled.cache.layers]
    for index, tokens in (([1, 1, 1], [2, 3, 4]), ([0, 1, 0], [7, 7, 8])):  # two batches from one prefill
        state = lm.expand_rows(prefilled, torch.tensor(index))
        rows = [histories[i] for i in index]
        for _ in range(3):
            state = lm.step(state, torch.tensor(tokens))
            rows = [row + [t] for row, t in zip(rows, tokens)]
        torch.testing.assert_close(state.logits, full_logits(lm, rows), atol=1e-5, rtol=1e-5)
    for layer, (keys, values) in zip(prefilled.cache.layers, before):
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)
