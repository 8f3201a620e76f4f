"""The sliced output head (models/output_head.py) writes the head's own logits, bit for bit, and leaves the model as it was.

Each logit is one dot product over the hidden size in both, so equality is exact (same threads, same rows)."""

from __future__ import annotations

import torch

import memrisk
from memrisk.models import output_head
from tests.conftest import tiny_gpt2

VOCAB = 2 * output_head.VOCABULARY_SLICE + 300  # two full slices and a partial one


def test_sliced_head_gives_the_heads_logits_bit_for_bit() -> None:
    model = tiny_gpt2(vocab_size=VOCAB)
    head = model.get_output_embeddings()
    hidden = torch.randn(3, 7, head.in_features, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        assert torch.equal(output_head.SlicedHead(head)(hidden), head(hidden))


def test_forwards_run_sliced_give_the_plain_logits_and_restore_the_head(monkeypatch) -> None:
    model = tiny_gpt2(vocab_size=VOCAB)
    head = model.get_output_embeddings()
    lm = memrisk.load_model(model)
    prefixes, suffixes = [[1, 2, 3], [4, 5, 6, 7]], [[8, 9], [10, 11]]
    calls: list[int] = []
    hook = head.register_forward_hook(lambda *_: calls.append(1))
    sliced = lm.suffix_logits(prefixes, suffixes)
    assert calls == [] and model.get_output_embeddings() is head  # the sliced head ran, and the model has its own back
    monkeypatch.setattr(output_head, "sliceable", lambda model: False)
    plain = lm.suffix_logits(prefixes, suffixes)
    hook.remove()
    assert calls == [1] and torch.equal(sliced, plain)
