"""Rows that continue shared prefixes read each prefix's KV cache in place (CBS paper App. C.3, eq. 23).

Part of the model backend. Beam search, Monte Carlo and prior-aware scoring run many rows after one
prefix: the beams of a window, the samples of a window, the targets after a bank prefix. A plain KV
cache holds the prefix once per row, so every beam step copies it (the beam reorder) and every
attention reads it once per row. Here the prefix keys and values are kept once per prefix, each row
keeps only the columns it generated, and attention is computed in two parts whose softmax is joined
exactly: the queries of all rows of one prefix against its keys in one matrix product, and each row's
queries against its own columns. Each row's generated columns sit in a slot of the buffers, and a beam reorder gives
each parent's first child its parent's slot: only the other children's columns are copied, and of those only the ones
the slot they move into does not already hold (beams that share an ancestor share its columns; `lineage`). A reorder to
fewer rows leaves slots free (up to `FREE_SLOTS`) rather than gathering every row's columns afresh.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface

from memrisk.errors import MemriskError
from memrisk.models import kvcache
from memrisk.models.columns import ColumnStore

ATTENTION = "memrisk_shared_prefix"
CACHE_ARGUMENT = "memrisk_shared_cache"
UNSUPPORTED_CONFIG = ("attn_logit_softcapping", "final_logit_softcapping", "sliding_window_pattern")
PLAIN_ATTENTION = ("sdpa", "eager", None)
PREFIX_CACHES = ("auto", "shared", "per_row")
"""How rows that continue one prefix hold its keys and values: read in place ("shared", this module) or copied into each
row's own cache ("per_row", transformers' own attention); "auto" is `chosen`'s rule."""
FREE_SLOTS = 0.25
"""The largest share of a cache's slots that an in-place reorder may leave free (or fill, to grow): past it, the rows'
columns are gathered into new buffers of their own size, since each free slot still costs its share of the attention's
own products and of the writes at every step."""
_WRITES = itertools.count()
"""Numbers each write of generated columns in this process (`fresh_columns`); `next` on it is atomic, so caches in
threads side by side never share one."""


def fresh_columns(rows: int, columns: int, device: torch.device) -> torch.Tensor:
    """Ids [rows, columns] no other generated column has had: the lineage of newly written columns."""
    return (next(_WRITES) << 32) + torch.arange(rows * columns, device=device).view(rows, columns)


def common_columns(lineage: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """Per row, how many leading generated columns two slots' lineages [rows, length] share (their data is the same)."""
    return torch.cumprod(lineage == other, dim=1).sum(dim=1)


class ColumnCopy:
    """Generated columns `start[i]` … `length` − 1 of every head of slot `source[i]`, to be copied into slot `target[i]`
    of a layer's key and value stores (each seen as [slots, heads, columns, head dim], `ColumnStore.columns_view`): one
    gather and one scatter of head-dim rows."""

    def __init__(self, source: torch.Tensor, target: torch.Tensor, start: torch.Tensor, length: int) -> None:
        counts = length - start
        mover = torch.repeat_interleave(torch.arange(len(source), device=source.device), counts)
        first = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        self.column = torch.arange(len(mover), device=source.device) - first + start[mover]
        self.source, self.target = source[mover], target[mover]
        self._rows: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def apply(self, buffer: torch.Tensor) -> None:
        """Copy the columns within `buffer` [slots, heads, columns, head dim], whose head-dim rows are contiguous and lie
        whole multiples of `head dim` apart in memory (either layout of a `ColumnStore`)."""
        slots, heads, columns, dim = buffer.shape
        strides = buffer.stride()
        if strides[3] != 1 or strides[2] % dim or strides[1] % dim or strides[0] % dim:
            raise ValueError(f"a key/value buffer of strides {strides} does not hold contiguous head-dim rows at multiples of {dim}")
        if strides not in self._rows:
            head = torch.arange(heads, device=buffer.device) * (strides[1] // dim)
            offset = self.column[:, None] * (strides[2] // dim) + head
            self._rows[strides] = ((self.source[:, None] * (strides[0] // dim) + offset).flatten(),
                                   (self.target[:, None] * (strides[0] // dim) + offset).flatten())
        source, target = self._rows[strides]
        span = ((slots - 1) * strides[0] + (heads - 1) * strides[1] + (columns - 1) * strides[2]) // dim + 1
        rows = buffer.as_strided((span, dim), (dim, 1))
        rows.index_copy_(0, target, rows.index_select(0, source))


class SharedPrefixLayer:
    """One layer: prefix keys/values [prefixes, kv heads, P, d] and each slot's generated keys and values (`ColumnStore`)."""

    def __init__(self, prefix_keys: torch.Tensor, prefix_values: torch.Tensor, keys: ColumnStore, values: ColumnStore) -> None:
        self.prefix_keys, self.prefix_values = prefix_keys, prefix_values
        self.key_store, self.value_store = keys, values

    @property
    def length(self) -> int:
        """Generated columns held."""
        return self.key_store.length

    @property
    def keys(self) -> torch.Tensor:
        """The slots' generated keys [slots, kv heads, length, d]."""
        return self.key_store.columns

    @property
    def values(self) -> torch.Tensor:
        """The slots' generated values."""
        return self.value_store.columns

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write new columns (already in slot order) behind the generated ones, growing the stores when the spare runs out."""
        self.key_store.append(keys)
        self.value_store.append(values)
        return self.keys, self.values

    def move(self, columns: ColumnCopy) -> None:
        """Copy generated columns from slot to slot (`columns`: sources disjoint from targets)."""
        columns.apply(self.key_store.columns_view())
        columns.apply(self.value_store.columns_view())

    def drop_leading(self, columns: int) -> None:
        """Forget the first `columns` generated columns."""
        self.key_store.drop_leading(columns)
        self.value_store.drop_leading(columns)


class SharedPrefixCache:
    """KV cache of rows continuing shared prefixes: `owner[r]` is the prefix row r continues, `prefix_mask` the
    prefixes' real (unpadded) columns, row r's generated columns start at `generated_from[r]` and sit in slot
    `place[r]` of every layer's buffers (distinct slots, so a reorder moves few of them; slots no row holds are free).
    `lineage` [slots, length] names each slot's generated columns by the write that made them (`fresh_columns`), and
    copies keep the name: two slots whose columns j have one name hold the same columns 0 … j in every layer."""

    def __init__(
        self, layers: list[SharedPrefixLayer], prefix_mask: torch.Tensor, owner: torch.Tensor, generated_from: torch.Tensor,
        lineage: torch.Tensor, place: torch.Tensor | None = None,
    ) -> None:
        self.layers, self.prefix_mask, self.owner, self.generated_from = layers, prefix_mask, owner, generated_from
        self.lineage = lineage
        self._place(place)

    @classmethod
    def from_prefill(cls, cache: Any, attention_mask: torch.Tensor) -> SharedPrefixCache:
        """The prefilled rows of a plain cache, each its own prefix, with no generated column yet."""
        layers = []
        for layer in kvcache.cache_layers(cache):
            rows, heads, _, dim = layer.keys.shape
            layers.append(SharedPrefixLayer(layer.keys, layer.values, ColumnStore.empty(rows, heads, dim, layer.keys),
                                            ColumnStore.empty(rows, heads, dim, layer.values)))
        rows = attention_mask.shape[0]
        owner = torch.arange(rows, device=attention_mask.device)
        return cls(layers, attention_mask.bool(), owner, torch.zeros_like(owner), fresh_columns(rows, 0, owner.device))

    @property
    def rows(self) -> int:
        """Number of rows."""
        return len(self.owner)

    @property
    def slot_count(self) -> int:
        """Slots in every layer's buffers: one per row, and those a reorder to fewer rows left free."""
        return self.layers[0].key_store.slots

    @property
    def length(self) -> int:
        """Generated columns held (the same for every layer between forwards)."""
        return self.layers[0].length

    def _place(self, place: torch.Tensor | None) -> None:
        """Put row r's generated columns in slot `place[r]` (None: slot r) and forget the last forward's plan."""
        identity = torch.arange(self.rows, device=self.owner.device)
        self.place = identity if place is None else place
        self._unplace = None
        if place is not None and (self.slot_count != self.rows or not torch.equal(place, identity)):
            self._unplace = torch.zeros(self.slot_count, dtype=place.dtype, device=place.device)
            self._unplace[place] = identity
        self._plan: AttentionPlan | None = None

    def to_slots(self, rows_first: torch.Tensor) -> torch.Tensor:
        """Row-ordered `rows_first` [rows, ...] in slot order [slots, ...] (a free slot gets row 0's, which no row reads)."""
        return rows_first if self._unplace is None else rows_first.index_select(0, self._unplace)

    def from_slots(self, slots_first: torch.Tensor) -> torch.Tensor:
        """Slot-ordered `slots_first` [slots, ...] in row order [rows, ...]."""
        return slots_first if self._unplace is None else slots_first.index_select(0, self.place)

    def plan(self, steps: int, group: int) -> AttentionPlan:
        """The plan that every layer of this forward shares (made by the first layer's attention)."""
        if self._plan is None or self._plan.made_for != (steps, group, self.length):
            self._plan = AttentionPlan(self, steps, group)
        return self._plan

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Append a forward's new keys and values to layer `layer_idx` (the model calls this); return the generated ones,
        in slot order."""
        if layer_idx == 0:
            fresh = fresh_columns(self.slot_count, key_states.shape[-2], self.lineage.device)
            self.lineage = torch.cat([self.lineage, fresh], dim=1)
        return self.layers[layer_idx].append(self.to_slots(key_states), self.to_slots(value_states))

    def select(self, index: torch.Tensor, copy: bool = False) -> SharedPrefixCache:
        """Rows `index` (repeats allowed): generated columns gathered, prefixes shared. In place unless `copy`, while the
        rows fill all but `FREE_SLOTS` of the slots: each parent's first child keeps its slot and only the other
        children's columns move."""
        slots = self.slot_count
        if not copy and 0 < len(index) <= slots and len(index) >= (1 - FREE_SLOTS) * slots:
            place = self._reuse_slots(index)
        else:
            source = self.place[index]
            lineage = self.lineage[source]
            layers = [
                SharedPrefixLayer(layer.prefix_keys, layer.prefix_values, layer.key_store.gathered(source),
                                  layer.value_store.gathered(source))
                for layer in self.layers
            ]
            if copy:
                selected = SharedPrefixCache(layers, self.prefix_mask, self.owner[index], self.generated_from[index], lineage)
                selected._forget_unused_prefixes()
                return selected
            self.layers, self.lineage, place = layers, lineage, None
        self.owner, self.generated_from = self.owner[index], self.generated_from[index]
        self._place(place)
        return self

    def _reuse_slots(self, index: torch.Tensor) -> torch.Tensor:
        """Slots of rows `index` when each parent's first child takes its parent's slot and the others take the slots
        no child keeps, into which their parents' columns are copied (those the slot does not already hold)."""
        parent_slot = self.place[index]
        order = torch.sort(parent_slot, stable=True).indices
        ordered = parent_slot[order]
        first_in_order = torch.ones_like(ordered, dtype=torch.bool)
        first_in_order[1:] = ordered[1:] != ordered[:-1]
        keeps = torch.empty_like(first_in_order)
        keeps[order] = first_in_order
        free = torch.ones(self.slot_count, dtype=torch.bool, device=keeps.device)
        free[parent_slot[keeps]] = False
        movers = (~keeps).nonzero(as_tuple=True)[0]
        targets = free.nonzero(as_tuple=True)[0][: len(movers)]
        if len(movers):
            sources = parent_slot[movers]
            columns = ColumnCopy(sources, targets, common_columns(self.lineage[targets], self.lineage[sources]), self.length)
            for layer in self.layers:
                layer.move(columns)
            self.lineage = self.lineage.index_copy(0, targets, self.lineage[sources])
        place = parent_slot.clone()
        place[movers] = targets
        return place

    def tiled(self, tiles: int) -> SharedPrefixCache:
        """A new cache whose row r continues prefix r mod rows, `tiles` × rows rows, none generated yet."""
        index = torch.arange(self.rows, device=self.owner.device).repeat(tiles)
        return self.select(index, copy=True)

    def merge(self, other: SharedPrefixCache) -> None:
        """Add the rows and prefixes of `other` (prefixes left-padded to one width, generated columns right-aligned)."""
        width = max(self.prefix_mask.shape[1], other.prefix_mask.shape[1])
        mine_length, their_length, mine_slots = self.length, other.length, self.slot_count
        length = max(mine_length, their_length)
        for mine, theirs in zip(self.layers, other.layers):
            mine.prefix_keys = torch.cat([kvcache.left_pad(mine.prefix_keys, width, -2), kvcache.left_pad(theirs.prefix_keys, width, -2)])
            mine.prefix_values = torch.cat([kvcache.left_pad(mine.prefix_values, width, -2), kvcache.left_pad(theirs.prefix_values, width, -2)])
            mine.key_store = ColumnStore.of(torch.cat([kvcache.left_pad(mine.keys, length, -2), kvcache.left_pad(theirs.keys, length, -2)]))
            mine.value_store = ColumnStore.of(torch.cat([kvcache.left_pad(mine.values, length, -2), kvcache.left_pad(theirs.values, length, -2)]))
        self.lineage = torch.cat([self._padded_lineage(length), other._padded_lineage(length)])
        prefixes, place = self.prefix_mask.shape[0], torch.cat([self.place, other.place + mine_slots])
        self.prefix_mask = torch.cat([kvcache.left_pad(self.prefix_mask, width, 1), kvcache.left_pad(other.prefix_mask, width, 1)])
        self.owner = torch.cat([self.owner, other.owner + prefixes])
        self.generated_from = torch.cat([self.generated_from + length - mine_length, other.generated_from + length - their_length])
        self._place(place)
        self.compact()

    def _forget_unused_prefixes(self) -> None:
        """Drop the prefixes no row continues, so that the attention multiplies only prefixes with rows, and rows that
        stand prefix by prefix are grouped by a reshape. The columns stay as wide, so each remaining prefix's attention
        products keep their shapes, and MKL's batched products give a matrix the same bits whatever else the batch
        holds (`tests/unit/test_shared_prefix.py`)."""
        self._plan = None
        used = torch.zeros(self.prefix_mask.shape[0], dtype=torch.bool, device=self.owner.device)
        used[self.owner] = True
        if not bool(used.all()):
            keep = used.nonzero(as_tuple=True)[0]
            renumber = torch.cumsum(used.long(), 0) - 1
            for layer in self.layers:
                layer.prefix_keys, layer.prefix_values = layer.prefix_keys[keep], layer.prefix_values[keep]
            self.prefix_mask, self.owner = self.prefix_mask[keep], renumber[self.owner]

    def _padded_lineage(self, length: int) -> torch.Tensor:
        """The lineage left-padded to `length` columns, each padding column fresh (`kvcache.left_pad` zeros)."""
        padding = fresh_columns(self.lineage.shape[0], length - self.lineage.shape[1], self.lineage.device)
        return torch.cat([padding, self.lineage], dim=1)

    def compact(self) -> None:
        """Forget prefixes no row continues and generated columns no row reads."""
        self._forget_unused_prefixes()
        columns = self.prefix_mask.any(dim=0)
        first = int(columns.int().argmax()) if bool(columns.any()) else 0
        if first:
            for layer in self.layers:
                layer.prefix_keys, layer.prefix_values = layer.prefix_keys[..., first:, :], layer.prefix_values[..., first:, :]
            self.prefix_mask = self.prefix_mask[:, first:]
        unread = int(self.generated_from.min()) if self.rows else 0
        if unread:
            for layer in self.layers:
                layer.drop_leading(unread)
            self.lineage = self.lineage[:, unread:]
            self.generated_from = self.generated_from - unread


class AttentionPlan:
    """What every layer's attention in one forward shares: each row's place among the rows of its prefix (`slot`; the
    rows are `regular` when they already stand prefix by prefix, `slots` to a prefix) and the columns no query sees."""

    def __init__(self, cache: SharedPrefixCache, steps: int, group: int) -> None:
        owner, rows, length = cache.owner, cache.rows, cache.length
        self.made_for = (steps, group, length)
        self.owner, self.rows, self.prefixes = owner, rows, cache.prefix_mask.shape[0]
        order = torch.sort(owner, stable=True).indices
        sorted_owner = owner[order]
        first = torch.searchsorted(sorted_owner, sorted_owner)
        rank = torch.arange(rows, device=owner.device)
        self.slot = torch.empty_like(owner)
        self.slot[order] = rank - first
        self.slots = int(self.slot.max()) + 1 if rows else 0
        self.spread_index = owner * self.slots + self.slot
        self.regular = rows == self.prefixes * self.slots and torch.equal(self.spread_index, rank)
        column = torch.arange(length, device=owner.device)
        newest = length - steps + torch.arange(steps, device=owner.device).repeat(group)
        own_visible = (column >= cache.generated_from[:, None, None]) & (column <= newest[None, :, None])
        visible = torch.cat([cache.prefix_mask[owner][:, None, :].expand(-1, group * steps, -1), own_visible], dim=-1)
        self.hidden = ~visible[:, None]

    def grouped(self, per_row: torch.Tensor) -> torch.Tensor:
        """[rows, kv heads, m, c] as [prefixes, kv heads, slots × m, c]: each prefix's rows side by side (zeros where
        a prefix has fewer rows), for one matrix product per prefix."""
        _, kv_heads, m, c = per_row.shape
        if self.regular:
            spread = per_row.reshape(self.prefixes, self.slots, kv_heads, m, c)
        else:
            spread = per_row.new_zeros((self.prefixes, self.slots, kv_heads, m, c))
            spread.view(-1, kv_heads, m, c).index_copy_(0, self.spread_index, per_row)
        return spread.transpose(1, 2).reshape(self.prefixes, kv_heads, self.slots * m, c)

    def ungrouped(self, per_prefix: torch.Tensor, m: int) -> torch.Tensor:
        """The inverse of `grouped`: [prefixes, kv heads, slots × m, c] back to [rows, kv heads, m, c]."""
        kv_heads, c = per_prefix.shape[1], per_prefix.shape[-1]
        per_slot = per_prefix.view(self.prefixes, kv_heads, self.slots, m, c).transpose(1, 2)
        return per_slot.reshape(self.rows, kv_heads, m, c) if self.regular else per_slot[self.owner, self.slot]


def shared_prefix_attention(
    module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,
    scaling: float | None = None, dropout: float = 0.0, **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """softmax(q·[K_prefix ‖ K_own]ᵀ·scale)·[V_prefix ‖ V_own] for each row: the prefix part computed once per prefix
    for all of its rows (grouped queries), the own part per row in its columns' slot, causal over the q new columns.
    Returns [rows, q, heads, d]. Eager under `compile: true`, with the rest of the attention (`regions`)."""
    cache: SharedPrefixCache = kwargs[CACHE_ARGUMENT]
    layer = cache.layers[module.layer_idx]
    rows, heads, steps, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    scale = dim**-0.5 if scaling is None else scaling
    plan = cache.plan(steps, group)
    width = cache.prefix_mask.shape[1]
    queries = query.reshape(rows, kv_heads, group * steps, dim)
    prefix_scores = plan.ungrouped(torch.matmul(plan.grouped(queries), layer.prefix_keys.transpose(-1, -2)), group * steps)
    own_scores = cache.from_slots(torch.matmul(cache.to_slots(queries), key.transpose(-1, -2)))
    scores = torch.cat([prefix_scores, own_scores], dim=-1).float().mul_(scale)
    weights = torch.softmax(scores.masked_fill_(plan.hidden, float("-inf")), dim=-1).to(value.dtype)
    own = cache.from_slots(torch.matmul(cache.to_slots(weights[..., width:]), value))
    from_prefix = plan.ungrouped(torch.matmul(plan.grouped(weights[..., :width]), layer.prefix_values), group * steps)
    out = (from_prefix + own).reshape(rows, heads, steps, dim)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, shared_prefix_attention)


def chosen(mode: str, device: torch.device) -> str:
    """The prefix cache a `mode` of `PREFIX_CACHES` runs: "auto" shares prefixes on the CPU, whose decode steps are
    bound by memory traffic that the shared cache saves (no prefix copied per row, none moved in a beam reorder), and
    copies them per row elsewhere: on a GPU a small model's steps are bound by kernel launches, and the shared
    attention's two parts launch more kernels than the fused attention they replace (docs/performance.md, GPU)."""
    if mode not in PREFIX_CACHES:
        raise MemriskError(f"prefix_cache must be one of {', '.join(PREFIX_CACHES)}; got {mode!r}")
    if mode == "auto":
        return "shared" if device.type == "cpu" else "per_row"
    return mode


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
