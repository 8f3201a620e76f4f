"""The output projection on CPU, computed a slice of the vocabulary at a time into one logits tensor.

Part of the model backend. A [rows, hidden] × [hidden, vocabulary] product whose output is far larger than the cache
runs below the matmul peak in one call: SmolLM2's head (49,152 × 576) at 160 rows measured 160–170 GFLOP/s in one
call and 180–195 GFLOP/s in slices of 2,048 tokens, 1–1,000 rows alike (2 threads; `benchmarks/table.py` times the
whole method). Each logit is the same dot product in the same order either way, so the logits are the same bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

VOCABULARY_SLICE = 2048


class SlicedHead(torch.nn.Module):
    """A bias-free linear output head whose logits are written `VOCABULARY_SLICE` columns at a time."""

    def __init__(self, head: torch.nn.Linear) -> None:
        super().__init__()
        self.head = head

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [..., vocabulary] of `hidden` [..., hidden size]: the head's own output, bit for bit."""
        weight = self.head.weight
        if torch.is_grad_enabled() and (weight.requires_grad or hidden.requires_grad):
            return self.head(hidden)
        rows = hidden.reshape(-1, hidden.shape[-1])
        logits = rows.new_empty((rows.shape[0], weight.shape[0]))
        for start in range(0, weight.shape[0], VOCABULARY_SLICE):
            end = start + VOCABULARY_SLICE
            torch.mm(rows, weight[start:end].t(), out=logits[:, start:end])
        return logits.view(*hidden.shape[:-1], weight.shape[0])


def sliceable(model: Any) -> bool:
    """Whether `model`'s output head is a bias-free float linear layer on CPU, which `sliced` speeds up."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return (
        type(head) is torch.nn.Linear and head.bias is None and head.weight.device.type == "cpu"
        and head.weight.dtype == torch.float32 and hasattr(model, "set_output_embeddings")
    )


@contextmanager
def sliced(model: Any) -> Iterator[None]:
    """Run `model`'s forwards with its output head sliced (where `sliceable`), then restore its own head."""
    if not sliceable(model):
        yield
        return
    head = model.get_output_embeddings()
    model.set_output_embeddings(SlicedHead(head))
    try:
        yield
    finally:
        model.set_output_embeddings(head)
