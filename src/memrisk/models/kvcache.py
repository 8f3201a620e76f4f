"""KV-cache rows for batched decoding: select (beam reorder), merge, trim, append in place.

Part of the model backend. A decoded token is appended by writing into spare columns
reserved behind the history, so the only copy of the history per beam step is the row
gather that reorders it (transformers' dynamic layer concatenates, copying it again).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from memrisk.errors import MemriskError

SPARE_COLUMNS = 32


class SpareColumnsLayer(DynamicLayer):
    """A full-attention KV layer whose buffers keep spare columns after the cached history."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._assign(keys, values)

    def _assign(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Copy `keys`/`values` into fresh buffers with spare columns."""
        self.adopt_buffers(with_spare(keys), with_spare(values), keys.shape[-2])

    def adopt_buffers(self, key_buffer: torch.Tensor, value_buffer: torch.Tensor, length: int) -> None:
        """Hold these buffers, whose first `length` columns are the cached history."""
        self._key_buffer, self._value_buffer = key_buffer, value_buffer
        self.keys, self.values = key_buffer[..., :length, :], value_buffer[..., :length, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new key/value columns in place (growing the buffers when the spare runs out)."""
        length, added = self.keys.shape[-2], key_states.shape[-2]
        if length + added > self._key_buffer.shape[-2]:
            self._assign(torch.cat([self.keys, key_states], -2), torch.cat([self.values, value_states], -2))
            return self.keys, self.values
        self._key_buffer[..., length : length + added, :] = key_states
        self._value_buffer[..., length : length + added, :] = value_states
        self.keys = self._key_buffer[..., : length + added, :]
        self.values = self._value_buffer[..., : length + added, :]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep (and repeat) rows `indices`: one gather straight into new buffers with spare columns."""
        length = self.keys.shape[-2]
        self.adopt_buffers(gather_with_spare(self.keys, indices), gather_with_spare(self.values, indices), length)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam reorder, as `batch_select_indices`."""
        self.batch_select_indices(beam_idx)

    def drop_leading(self, columns: int) -> None:
        """Forget the first `columns` cached positions (no row attends to them any more)."""
        self._key_buffer = self._key_buffer[..., columns:, :]
        self._value_buffer = self._value_buffer[..., columns:, :]
        self.keys, self.values = self.keys[..., columns:, :], self.values[..., columns:, :]


def with_spare(tensor: torch.Tensor, spare: int = SPARE_COLUMNS) -> torch.Tensor:
    """A copy of `tensor` [rows, heads, length, dim] in a buffer with `spare` more columns."""
    rows, heads, length, dim = tensor.shape
    buffer = tensor.new_empty((rows, heads, length + spare, dim))
    buffer[..., :length, :] = tensor
    return buffer


def gather_with_spare(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Rows `indices` of `tensor` gathered into a buffer with SPARE_COLUMNS more columns."""
    _, heads, length, dim = tensor.shape
    buffer = tensor.new_empty((len(indices), heads, length + SPARE_COLUMNS, dim))
    torch.index_select(tensor, 0, indices, out=buffer[..., :length, :])
    return buffer


def cache_layers(cache: Any) -> list[Any]:
    """The per-layer key/value holders of a dynamic KV cache."""
    layers = getattr(cache, "layers", None)
    if layers is None or not all(hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers):
        raise MemriskError(f"batched decoding needs a dynamic KV cache; this model uses {type(cache).__name__}")
    return layers


def adopt(cache: Any) -> Any:
    """Give the plain full-attention layers of a fresh cache spare columns (others are left as they are)."""
    layers = cache_layers(cache)
    for i, layer in enumerate(layers):
        if type(layer) is DynamicLayer and layer.is_initialized:
            layers[i] = SpareColumnsLayer(layer.keys, layer.values)
    return cache


def selected_copy(cache: Any, indices: torch.Tensor) -> Any:
    """A new cache holding rows `indices` of `cache` (repeats allowed); `cache` is left as it is."""
    selected = copy.copy(cache)
    selected.layers = [copy.copy(layer) for layer in cache_layers(cache)]
    selected.batch_select_indices(indices)  # every layer gathers into new tensors, none writes in place
    return selected


def tiled_copy(cache: Any, tiles: int, config: Any) -> DynamicCache:
    """A new plain cache holding the rows of `cache` repeated `tiles` times (the original is untouched)."""
    data = [(layer.keys.repeat(tiles, 1, 1, 1), layer.values.repeat(tiles, 1, 1, 1)) for layer in cache_layers(cache)]
    return DynamicCache(ddp_cache_data=data, config=config)


def merge(first: Any, second: Any, width: int) -> None:
    """Append the rows of cache `second` to cache `first`, both left-padded to `width` positions."""
    for mine, theirs in zip(cache_layers(first), cache_layers(second)):
        if isinstance(mine, SpareColumnsLayer):
            mine.adopt_buffers(_stacked([mine.keys, theirs.keys], width), _stacked([mine.values, theirs.values], width), width)
        else:
            mine.keys = torch.cat([left_pad(mine.keys, width, -2), left_pad(theirs.keys, width, -2)])
            mine.values = torch.cat([left_pad(mine.values, width, -2), left_pad(theirs.values, width, -2)])


def _stacked(parts: list[torch.Tensor], width: int) -> torch.Tensor:
    """The rows of `parts`, each left-padded with zeros to `width` columns, in one buffer with spare columns."""
    rows = sum(part.shape[0] for part in parts)
    _, heads, _, dim = parts[0].shape
    buffer = parts[0].new_empty((rows, heads, width + SPARE_COLUMNS, dim))
    start = 0
    for part in parts:
        end, length = start + part.shape[0], part.shape[-2]
        buffer[start:end, :, : width - length].zero_()
        buffer[start:end, :, width - length : width] = part
        start = end
    return buffer


def drop_leading(cache: Any, columns: int) -> None:
    """Forget the first `columns` cached positions of every layer."""
    for layer in cache_layers(cache):
        if isinstance(layer, SpareColumnsLayer):
            layer.drop_leading(columns)
        else:
            layer.keys, layer.values = layer.keys[..., columns:, :], layer.values[..., columns:, :]


def left_pad(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """Zero-pad `tensor` on the left of dimension `dim` up to `width`."""
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)
