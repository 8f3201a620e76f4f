"""One layer's generated key (or value) columns of a shared-prefix cache: each slot's columns, with spare room behind.

Part of the model backend. The store is read as [slots, heads, columns, head dim] (`columns`), whatever its layout in
memory. On CPU it is laid out step by step, [columns, slots, heads, head dim]: a decode step's new column of every slot
is one contiguous block, and the attention's batched products read each slot's columns as a matrix whose rows lie a
step's block apart. Laid out slot by slot, each slot's columns would be a contiguous run followed by its spare room,
and the products read hundreds of short runs: on SmolLM2's k-CBS shapes (160 rows, 3 KV heads, 30 layers' stores in
turn, 2 threads) a query-key product took 599 µs slot by slot and 377 µs step by step at 49 columns, 370 and 194 µs
at 25. Both layouts give the products the same bits (`tests/unit/test_shared_prefix.py`); other devices keep the slot by
slot layout they were measured with.
"""

from __future__ import annotations

import torch

from memrisk.models.kvcache import SPARE_COLUMNS


def step_major(device: torch.device) -> bool:
    """Whether stores on `device` are laid out step by step (CPU) rather than slot by slot."""
    return device.type == "cpu"


class ColumnStore:
    """Generated columns [slots, heads, length, head dim] in a buffer with spare columns, appended in place."""

    def __init__(self, buffer: torch.Tensor, length: int, by_step: bool) -> None:
        self._buffer, self.length, self.by_step = buffer, length, by_step

    @classmethod
    def empty(cls, slots: int, heads: int, dim: int, like: torch.Tensor, capacity: int = SPARE_COLUMNS) -> ColumnStore:
        """A store of `slots` slots with no column yet and room for `capacity`, on `like`'s device and dtype."""
        by_step = step_major(like.device)
        shape = (capacity, slots, heads, dim) if by_step else (slots, heads, capacity, dim)
        return cls(like.new_empty(shape), 0, by_step)

    @classmethod
    def of(cls, columns: torch.Tensor) -> ColumnStore:
        """A store holding a copy of `columns` [slots, heads, length, head dim]."""
        slots, heads, length, dim = columns.shape
        store = cls.empty(slots, heads, dim, columns, length + SPARE_COLUMNS)
        store.append(columns)
        return store

    def columns_view(self) -> torch.Tensor:
        """The whole buffer, spare columns included, as [slots, heads, capacity, head dim]."""
        return self._buffer.permute(1, 2, 0, 3) if self.by_step else self._buffer

    @property
    def columns(self) -> torch.Tensor:
        """The generated columns [slots, heads, length, head dim] (a view)."""
        return self.columns_view()[..., : self.length, :]

    @property
    def slots(self) -> int:
        """Slots the store holds."""
        return self._buffer.shape[1] if self.by_step else self._buffer.shape[0]

    @property
    def capacity(self) -> int:
        """Columns the buffer has room for."""
        return self._buffer.shape[0] if self.by_step else self._buffer.shape[2]

    def append(self, new: torch.Tensor) -> None:
        """Write `new` [slots, heads, added, head dim] behind the generated columns, growing the buffer if it is full."""
        added = new.shape[-2]
        if self.length + added > self.capacity:
            self._grow(self.length + added)
        self.columns_view()[..., self.length : self.length + added, :] = new
        self.length += added

    def _grow(self, needed: int) -> None:
        """Move the generated columns into a buffer with room for `needed` columns and `SPARE_COLUMNS` more."""
        _, heads, _, dim = self.columns.shape
        grown = ColumnStore.empty(self.slots, heads, dim, self._buffer, needed + SPARE_COLUMNS)
        grown.append(self.columns)
        self._buffer = grown._buffer

    def gathered(self, slots: torch.Tensor) -> ColumnStore:
        """A new store whose slot i holds this store's slot `slots[i]` (repeats allowed), gathered straight into it."""
        _, heads, _, dim = self.columns.shape
        store = ColumnStore.empty(len(slots), heads, dim, self._buffer, self.length + SPARE_COLUMNS)
        if self.by_step:
            torch.index_select(self._buffer[: self.length], 1, slots, out=store._buffer[: self.length])
        else:
            torch.index_select(self.columns, 0, slots, out=store._buffer[..., : self.length, :])
        store.length = self.length
        return store

    def drop_leading(self, columns: int) -> None:
        """Forget the first `columns` generated columns (no row reads them any more); a view, no copy."""
        self._buffer = self._buffer[columns:] if self.by_step else self._buffer[..., columns:, :]
        self.length -= columns
