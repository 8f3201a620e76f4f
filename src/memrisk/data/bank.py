"""Prefix banks: the random prefixes q_i that estimate a suffix's prior P(s) (PA paper §3.2).

A bank is a list of token-id prefixes, each remembering the document it came from so that a
target's own document can be left out. Banks drawn from a corpus are i.i.d. uniform over all
windows of the chosen length (with replacement), which is what the unbiasedness of the prior
estimate assumes, and reproducible from their seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memrisk.data.sources import Document
from memrisk.errors import MemriskError
from memrisk.models.backend import LanguageModel


@dataclass(frozen=True)
class PrefixBank:
    """Prefixes (token ids) with the id of the document each came from (None when unknown)."""

    prefixes: tuple[tuple[int, ...], ...]
    documents: tuple[str | None, ...]
    description: str = "given"

    def __post_init__(self) -> None:
        if not self.prefixes:
            raise MemriskError("the prefix bank is empty")
        if len(self.documents) != len(self.prefixes):
            raise MemriskError(f"prefix bank has {len(self.prefixes)} prefixes but {len(self.documents)} document ids")

    def __len__(self) -> int:
        return len(self.prefixes)

    @classmethod
    def from_token_lists(cls, prefixes: Sequence[Sequence[int]]) -> PrefixBank:
        """A bank of given prefixes whose documents are unknown."""
        return cls(tuple(tuple(int(t) for t in p) for p in prefixes), (None,) * len(prefixes))

    @classmethod
    def from_documents(
        cls, model: LanguageModel, documents: Sequence[Document], *, length: int = 50, size: int = 5000, seed: int = 0
    ) -> PrefixBank:
        """`size` windows of `length` tokens drawn uniformly (with replacement) from all such windows of the corpus."""
        if length < 1 or size < 1:
            raise MemriskError(f"a prefix bank needs length >= 1 and size >= 1; got length={length}, size={size}")
        encoded = [(doc.doc_id, model.encode(doc.text)) for doc in documents]
        encoded = [(doc_id, ids) for doc_id, ids in encoded if len(ids) >= length]
        if not encoded:
            raise MemriskError(f"no document has {length} tokens; a prefix bank cannot be drawn")
        starts = np.array([len(ids) - length + 1 for _, ids in encoded], dtype=np.int64)
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, int(starts.sum()), size=size)
        doc_index = np.searchsorted(np.cumsum(starts), picks, side="right")
        offsets = picks - np.concatenate([[0], np.cumsum(starts)[:-1]])[doc_index]
        prefixes = tuple(tuple(encoded[d][1][o : o + length]) for d, o in zip(doc_index.tolist(), offsets.tolist()))
        return cls(prefixes, tuple(encoded[d][0] for d in doc_index.tolist()), f"corpus-len{length}-size{size}-seed{seed}")
