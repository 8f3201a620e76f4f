"""Rows that continue shared prefixes read each prefix's KV cache in place (CBS paper App. C.3, eq. 23).

Part of the model backend. Beam search, Monte Carlo and prior-aware scoring run many rows after one
prefix: the beams of a window, the samples of a window, the targets after a bank prefix. A plain KV
cache holds the prefix once per row, so every beam step copies it (the beam reorder) and every
attention reads it once per row. Here the prefix keys and values are kept once per prefix, each row
keeps only the columns it generated, and attention is computed in two parts whose softmax is joined
exactly: the queries of all rows of one prefix against its keys in one matrix product, and each row's
queries against its own columns. The reorder then gathers only the generated columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface

from memrisk.models import kvcache

ATTENTION = "memrisk_shared_prefix"
CACHE_ARGUMENT = "memrisk_shared_cache"
SPARE_COLUMNS = kvcache.SPARE_COLUMNS
UNSUPPORTED_CONFIG = ("attn_logit_softcapping", "final_logit_softcapping", "sliding_window_pattern")
PLAIN_ATTENTION = ("sdpa", "eager", None)


class SharedPrefixLayer:
    """One layer: prefix keys/values [prefixes, kv heads, P, d] and each row's generated columns in a buffer."""

    def __init__(self, prefix_keys: torch.Tensor, prefix_values: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        self.prefix_keys, self.prefix_values = prefix_keys, prefix_values
        self.key_buffer, self.value_buffer, self.length = keys, values, length

    @property
    def keys(self) -> torch.Tensor:
        """The rows' generated keys [rows, kv heads, length, d]."""
        return self.key_buffer[..., : self.length, :]

    @property
    def values(self) -> torch.Tensor:
        """The rows' generated values."""
        return self.value_buffer[..., : self.length, :]

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write new columns behind the generated ones (growing the buffers when the spare runs out)."""
        added = keys.shape[-2]
        if self.length + added > self.key_buffer.shape[-2]:
            self.key_buffer = kvcache.with_spare(self.keys, added + SPARE_COLUMNS)
            self.value_buffer = kvcache.with_spare(self.values, added + SPARE_COLUMNS)
        self.key_buffer[..., self.length : self.length + added, :] = keys
        self.value_buffer[..., self.length : self.length + added, :] = values
        self.length += added
        return self.keys, self.values


class SharedPrefixCache:
    """KV cache of rows continuing shared prefixes: `owner[r]` is the prefix row r continues, `prefix_mask` the
    prefixes' real (unpadded) columns, and row r's generated columns start at `generated_from[r]`."""

    def __init__(self, layers: list[SharedPrefixLayer], prefix_mask: torch.Tensor, owner: torch.Tensor, generated_from: torch.Tensor) -> None:
        self.layers, self.prefix_mask, self.owner, self.generated_from = layers, prefix_mask, owner, generated_from
        self._slots: tuple[torch.Tensor, int] | None = None

    @classmethod
    def from_prefill(cls, cache: Any, attention_mask: torch.Tensor) -> SharedPrefixCache:
        """The prefilled rows of a plain cache, each its own prefix, with no generated column yet."""
        layers = []
        for layer in kvcache.cache_layers(cache):
            rows, heads, _, dim = layer.keys.shape
            empty = layer.keys.new_empty((rows, heads, SPARE_COLUMNS, dim))
            layers.append(SharedPrefixLayer(layer.keys, layer.values, empty, torch.empty_like(empty), 0))
        rows = attention_mask.shape[0]
        owner = torch.arange(rows, device=attention_mask.device)
        return cls(layers, attention_mask.bool(), owner, torch.zeros_like(owner))

    @property
    def rows(self) -> int:
        """Number of rows."""
        return len(self.owner)

    @property
    def length(self) -> int:
        """Generated columns held (the same for every layer between forwards)."""
        return self.layers[0].length

    def slots(self) -> tuple[torch.Tensor, int]:
        """Each row's place among the rows of its prefix, and the most rows any prefix has."""
        if self._slots is None:
            order = torch.sort(self.owner, stable=True).indices
            sorted_owner = self.owner[order]
            first = torch.searchsorted(sorted_owner, sorted_owner)
            slot = torch.empty_like(self.owner)
            slot[order] = torch.arange(self.rows, device=self.owner.device) - first
            self._slots = (slot, int(slot.max()) + 1 if self.rows else 0)
        return self._slots

    @torch.compiler.disable
    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Append a forward's new keys and values to layer `layer_idx` (the model calls this); return the generated ones.
        Eager under torch.compile, like `shared_prefix_attention`: its Python-int lengths would recompile each step."""
        return self.layers[layer_idx].append(key_states, value_states)

    def select(self, index: torch.Tensor, copy: bool = False) -> SharedPrefixCache:
        """Rows `index` (repeats allowed): generated columns gathered, prefixes shared. In place unless `copy`."""
        layers = [
            SharedPrefixLayer(layer.prefix_keys, layer.prefix_values, kvcache.gather_with_spare(layer.keys, index), kvcache.gather_with_spare(layer.values, index), layer.length)
            for layer in self.layers
        ]
        if not copy:
            self.layers, self.owner, self.generated_from, self._slots = layers, self.owner[index], self.generated_from[index], None
            return self
        return SharedPrefixCache(layers, self.prefix_mask, self.owner[index], self.generated_from[index])

    def tiled(self, tiles: int) -> SharedPrefixCache:
        """A new cache whose row r continues prefix r mod rows, `tiles` × rows rows, none generated yet."""
        index = torch.arange(self.rows, device=self.owner.device).repeat(tiles)
        return self.select(index, copy=True)

    def merge(self, other: SharedPrefixCache) -> None:
        """Add the rows and prefixes of `other` (prefixes left-padded to one width, generated columns right-aligned)."""
        width = max(self.prefix_mask.shape[1], other.prefix_mask.shape[1])
        mine_length, their_length = self.length, other.length
        length = max(mine_length, their_length)
        for mine, theirs in zip(self.layers, other.layers):
            mine.prefix_keys = torch.cat([kvcache.left_pad(mine.prefix_keys, width, -2), kvcache.left_pad(theirs.prefix_keys, width, -2)])
            mine.prefix_values = torch.cat([kvcache.left_pad(mine.prefix_values, width, -2), kvcache.left_pad(theirs.prefix_values, width, -2)])
            mine.key_buffer = kvcache.with_spare(torch.cat([kvcache.left_pad(mine.keys, length, -2), kvcache.left_pad(theirs.keys, length, -2)]))
            mine.value_buffer = kvcache.with_spare(torch.cat([kvcache.left_pad(mine.values, length, -2), kvcache.left_pad(theirs.values, length, -2)]))
            mine.length = length
        prefixes = self.prefix_mask.shape[0]
        self.prefix_mask = torch.cat([kvcache.left_pad(self.prefix_mask, width, 1), kvcache.left_pad(other.prefix_mask, width, 1)])
        self.owner = torch.cat([self.owner, other.owner + prefixes])
        self.generated_from = torch.cat([self.generated_from + length - mine_length, other.generated_from + length - their_length])
        self._slots = None
        self.compact()

    def compact(self) -> None:
        """Forget prefixes no row continues and generated columns no row reads."""
        used = torch.zeros(self.prefix_mask.shape[0], dtype=torch.bool, device=self.owner.device)
        used[self.owner] = True
        if not bool(used.all()):
            keep = used.nonzero(as_tuple=True)[0]
            renumber = torch.cumsum(used.long(), 0) - 1
            for layer in self.layers:
                layer.prefix_keys, layer.prefix_values = layer.prefix_keys[keep], layer.prefix_values[keep]
            self.prefix_mask, self.owner, self._slots = self.prefix_mask[keep], renumber[self.owner], None
        columns = self.prefix_mask.any(dim=0)
        first = int(columns.int().argmax()) if bool(columns.any()) else 0
        if first:
            for layer in self.layers:
                layer.prefix_keys, layer.prefix_values = layer.prefix_keys[..., first:, :], layer.prefix_values[..., first:, :]
            self.prefix_mask = self.prefix_mask[:, first:]
        unread = int(self.generated_from.min()) if self.rows else 0
        if unread:
            for layer in self.layers:
                layer.key_buffer, layer.value_buffer = layer.key_buffer[..., unread:, :], layer.value_buffer[..., unread:, :]
                layer.length -= unread
            self.generated_from = self.generated_from - unread


@torch.compiler.disable
def shared_prefix_attention(
    module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,
    scaling: float | None = None, dropout: float = 0.0, **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """softmax(q·[K_prefix ‖ K_own]ᵀ·scale)·[V_prefix ‖ V_own] for each row: the prefix part computed once per prefix
    for all of its rows (grouped queries), the own part per row, causal over the q new columns. Returns [rows, q, heads, d].

    Runs eager under torch.compile: its slot count and column lengths are Python ints that change every step, and traced
    they recompiled the graph for each new length (a 1-layer GPT-2's compiled CBS test: 41.6 s with an empty compile cache,
    9.4 s eager here)."""
    cache: SharedPrefixCache = kwargs[CACHE_ARGUMENT]
    layer = cache.layers[module.layer_idx]
    rows, heads, steps, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    scale = dim**-0.5 if scaling is None else scaling
    slot, slots = cache.slots()
    prefixes, width = cache.prefix_mask.shape
    queries = query.reshape(rows, kv_heads, group * steps, dim)
    grouped = query.new_zeros((prefixes, slots, kv_heads, group * steps, dim))
    grouped[cache.owner, slot] = queries
    grouped = grouped.transpose(1, 2).reshape(prefixes, kv_heads, slots * group * steps, dim)
    prefix_scores = torch.matmul(grouped, layer.prefix_keys.transpose(-1, -2))
    prefix_scores = prefix_scores.view(prefixes, kv_heads, slots, group * steps, width).transpose(1, 2)[cache.owner, slot]
    own_scores = torch.matmul(queries, key.transpose(-1, -2))
    scores = torch.cat([prefix_scores, own_scores], dim=-1).float() * scale
    length = key.shape[-2]
    column = torch.arange(length, device=query.device)
    newest = length - steps + torch.arange(steps, device=query.device).repeat(group)
    own_visible = (column >= cache.generated_from[:, None, None]) & (column <= newest[None, :, None])
    visible = torch.cat([cache.prefix_mask[cache.owner][:, None, :].expand(-1, group * steps, -1), own_visible], dim=-1)
    weights = torch.softmax(scores.masked_fill(~visible[:, None], float("-inf")), dim=-1).to(value.dtype)
    prefix_weights = weights[..., :width]
    own = torch.matmul(weights[..., width:], value)
    spread = weights.new_zeros((prefixes, slots, kv_heads, group * steps, width))
    spread[cache.owner, slot] = prefix_weights
    spread = spread.transpose(1, 2).reshape(prefixes, kv_heads, slots * group * steps, width)
    from_prefix = torch.matmul(spread, layer.prefix_values).view(prefixes, kv_heads, slots, group * steps, dim).transpose(1, 2)
    out = (from_prefix[cache.owner, slot] + own).view(rows, heads, steps, dim)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, shared_prefix_attention)


def supports(model: Any) -> bool:
    """Whether `model` can decode over shared prefixes: every layer full attention, without soft-capping or sinks,
    through transformers' attention interface (sdpa or eager)."""
    config = model.config
    if getattr(config, "_attn_implementation", None) not in PLAIN_ATTENTION:
        return False
    if any(getattr(config, name, None) not in (None, False) for name in UNSUPPORTED_CONFIG):
        return False
    if getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True):
        return False
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return False
    return getattr(config, "model_type", None) in SUPPORTED_MODELS


SUPPORTED_MODELS = ("llama", "gpt2", "gpt_neox", "qwen2", "qwen3", "mistral", "olmo", "olmo2", "phi3", "smollm3")
"""Architectures whose attention modules pass the cache and keyword arguments through transformers' attention
interface with `layer_idx` set (checked against their modelling code; others decode with the plain cache)."""


@contextmanager
def attention(model: Any) -> Iterator[None]:
    """Run `model`'s forwards with shared-prefix attention, then restore its own."""
    config = model.config
    kept = config._attn_implementation
    config._attn_implementation = ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = kept
