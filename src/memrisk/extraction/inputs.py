"""Normalising the (model, prefixes, suffixes, policies) arguments every method takes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from memrisk.decoding import DecodingPolicy
from memrisk.errors import MemriskError
from memrisk.models.backend import LanguageModel, load_model

TokenIds = list[int]


def as_model(model: Any) -> LanguageModel:
    """Accept what `load_model` returns or an in-memory transformers model."""
    return load_model(model)


def as_token_lists(model: LanguageModel, items: Any, what: str) -> list[TokenIds]:
    """Token-id lists from strings (encoded without special tokens), id sequences or a 2-D array."""
    if isinstance(items, (str, bytes)):
        raise MemriskError(f"{what} must be a list of texts or token-id sequences, not a single string")
    if isinstance(items, (torch.Tensor, np.ndarray)):
        items = items.tolist()
    vocab = model.vocab_size
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            out.append(model.encode(item))
        elif isinstance(item, (torch.Tensor, np.ndarray)):
            out.append([int(t) for t in item.tolist()])
        else:
            out.append([int(t) for t in item])
        bad = [t for t in out[-1] if not 0 <= t < vocab]
        if bad:
            raise MemriskError(f"{what}[{i}] has token id {bad[0]} outside the vocabulary [0, {vocab})")
    return out


def prefix_suffix_pairs(model: LanguageModel, prefixes: Any, suffixes: Any) -> tuple[list[TokenIds], list[TokenIds]]:
    """Validated parallel lists of prefix and suffix token ids."""
    prefix_ids = as_token_lists(model, prefixes, "prefixes")
    suffix_ids = as_token_lists(model, suffixes, "suffixes")
    if len(prefix_ids) != len(suffix_ids):
        raise MemriskError(f"got {len(prefix_ids)} prefixes but {len(suffix_ids)} suffixes; they must pair up")
    for i, (prefix, suffix) in enumerate(zip(prefix_ids, suffix_ids)):
        if not suffix:
            raise MemriskError(f"suffixes[{i}] is empty")
        if not prefix and model.bos_token_id is None:
            raise MemriskError(f"prefixes[{i}] is empty and the model adds no BOS token to condition on")
    return prefix_ids, suffix_ids


def as_policies(policies: DecodingPolicy | Sequence[DecodingPolicy]) -> tuple[DecodingPolicy, ...]:
    """One policy or a non-empty sequence of them, as a tuple."""
    if isinstance(policies, DecodingPolicy):
        return (policies,)
    policies = tuple(policies)
    if not policies or not all(isinstance(p, DecodingPolicy) for p in policies):
        raise MemriskError("policies must be a DecodingPolicy or a non-empty sequence of them")
    return policies


def batch_slices(n: int, size: int) -> Iterator[slice]:
    """Consecutive slices of at most `size` items covering range(n)."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def padded(rows: Sequence[TokenIds], width: int, device: torch.device) -> torch.Tensor:
    """A [len(rows), width] long tensor of the rows, right-padded with 0."""
    out = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out.to(device)
