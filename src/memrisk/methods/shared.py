"""Passes that cells of a study share: a method's columns for a chunk computed once for every cell that asks the same.

A chunk's results depend on the model (one loaded model per group of cells), its batch layout, the
windows' tokens and the settings the method reads (`RunMethod.shared_settings`); the key holds the last
three, so a reused result is the result the cell would have computed itself (tests/integration/test_study.py).
Teacher forcing is computed once under every policy the cells use, and each cell takes its own policies.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from memrisk.decoding import DecodingPolicy

T = TypeVar("T")


class SharedPasses:
    """Results already computed, with the wall time each took, keyed by what produced them; made knowing what the
    cells that share them ask of a teacher-forcing pass (`policies`, and `moments` when one reads the Min-K%++
    moments), so that one pass serves them all."""

    def __init__(self, policies: Iterable[DecodingPolicy] = (), moments: bool = False) -> None:
        self.policies = tuple(dict.fromkeys(policies))
        self.moments = moments
        self._results: dict[Any, tuple[Any, float]] = {}
        self.reused = 0

    def covering(self, policies: Iterable[DecodingPolicy]) -> tuple[DecodingPolicy, ...]:
        """The policies one teacher-forcing pass scores: every shared policy, then any the cell adds."""
        return tuple(dict.fromkeys((*self.policies, *policies)))

    def get(self, key: Any, compute: Callable[[], T]) -> tuple[T, float]:
        """The stored result and its wall time, or compute, time and store it."""
        if key in self._results:
            self.reused += 1
        else:
            self._results[key] = timed(compute)
        return self._results[key]


def timed(compute: Callable[[], T]) -> tuple[T, float]:
    """A result and the wall time it took."""
    started = time.perf_counter()
    value = compute()
    return value, time.perf_counter() - started


def settings_key(settings: Any) -> str:
    """Settings as a stable, hashable key."""
    return json.dumps(settings, sort_keys=True, default=str)
