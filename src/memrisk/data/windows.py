"""Cutting documents into (prefix, suffix) windows in the model's own token space (CBS paper §4).

doc mode: the first a+T tokens of each document. book mode: starting at character 0, every
`stride` characters take the next a+T tokens of the document's single tokenisation, keeping
the character span each window covers. Prefix and suffix are slices of one token-id list;
identical token windows are kept once.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from memrisk.data.sources import Document
from memrisk.errors import MemriskError
from memrisk.models.backend import LanguageModel

MODES = ("doc", "book")


@dataclass(frozen=True)
class Window:
    """One example z = prefix ‖ suffix with the character span it covers in its document."""

    example_id: str
    doc_id: str
    prefix_ids: tuple[int, ...]
    suffix_ids: tuple[int, ...]
    char_start: int
    suffix_char_start: int
    char_end: int


@dataclass(frozen=True)
class Example:
    """A window tagged with the dataset and role it came from: the unit every run method scores."""

    dataset: str
    role: str
    window: Window

    @property
    def example_id(self) -> str:
        """Identifier unique across the run's datasets."""
        return f"{self.dataset}/{self.window.example_id}"


@dataclass
class WindowSet:
    """Windows of a set of documents, with what was skipped and de-duplicated."""

    windows: list[Window]
    documents: int
    skipped_short: list[str] = field(default_factory=list)
    duplicates_removed: int = 0


def make_windows(
    model: LanguageModel,
    documents: Sequence[Document],
    *,
    mode: str = "doc",
    prefix_length: int = 50,
    suffix_length: int = 50,
    stride: int = 20,
    limit: int | None = None,
) -> WindowSet:
    """Windows of every document (the first `limit` only, when given); shorter documents are skipped and listed,
    never silently."""
    if mode not in MODES:
        raise MemriskError(f"window mode must be one of {', '.join(MODES)}; got {mode!r}")
    if prefix_length < 0 or suffix_length < 1:
        raise MemriskError(f"need prefix_length >= 0 and suffix_length >= 1; got {prefix_length}, {suffix_length}")
    if mode == "book" and stride < 1:
        raise MemriskError(f"book-mode stride must be >= 1 character, got {stride}")
    size = prefix_length + suffix_length
    result = WindowSet([], len(documents))
    seen: set[tuple[int, ...]] = set()
    longest = 0
    for document in documents:
        if limit is not None and len(result.windows) >= limit:
            break
        ids, spans = model.encode_with_offsets(document.text)
        longest = max(longest, len(ids))
        if len(ids) < size:
            result.skipped_short.append(document.doc_id)
            continue
        starts = [0] if mode == "doc" else _book_starts(spans, len(document.text), stride, size)
        for first in starts:
            if limit is not None and len(result.windows) >= limit:
                break
            tokens = tuple(ids[first : first + size])
            if tokens in seen:
                result.duplicates_removed += 1
                continue
            seen.add(tokens)
            char_start = spans[first][0]
            result.windows.append(
                Window(
                    example_id=f"{document.doc_id}@{char_start}",
                    doc_id=document.doc_id,
                    prefix_ids=tokens[:prefix_length],
                    suffix_ids=tokens[prefix_length:],
                    char_start=char_start,
                    suffix_char_start=spans[first + prefix_length][0],
                    char_end=spans[first + size - 1][1],
                )
            )
    if not result.windows and documents and longest == 0:
        raise MemriskError(
            f"the tokenizer of {model.name} encodes every document to no tokens at all: "
            "it does not fit this text (is it the model's own tokenizer?)"
        )
    if not result.windows:
        raise MemriskError(
            f"no window of {size} tokens (prefix {prefix_length} + suffix {suffix_length}) fits in any of "
            f"{len(documents)} document(s): every document is shorter than that (the longest has {longest} tokens)"
        )
    return result


def _book_starts(spans: Sequence[tuple[int, int]], text_length: int, stride: int, size: int) -> list[int]:
    """First token index at or after each stride-th character, while a full window still fits."""
    token_starts = [start for start, _ in spans]
    starts = []
    for char in range(0, text_length, stride):
        first = bisect.bisect_left(token_starts, char)
        if first + size > len(token_starts):
            break
        if not starts or starts[-1] != first:
            starts.append(first)
    return starts
