"""Out-of-memory back-off: when a batch does not fit on the device, halve the batch size and
redo the work, down to one sequence per batch."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import torch

from memrisk.errors import MemriskError
from memrisk.models.backend import LanguageModel

log = logging.getLogger(__name__)
T = TypeVar("T")


def halving_on_oom(lm: LanguageModel, work: Callable[[], T]) -> T:
    """`work()`, retried with `lm.batch_size` halved after each out-of-memory error (logged).

    The work must be repeatable (its partial results discarded on failure); results do not
    depend on the batch size beyond float rounding. One sequence per batch that still does not
    fit is an error naming the problem.
    """
    while True:
        try:
            return work()
        except torch.OutOfMemoryError as exc:
            if lm.batch_size == 1:
                raise MemriskError(f"out of memory with one sequence per batch on {lm.device}: use a smaller model, dtype or device") from exc
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            lm.batch_size = max(1, lm.batch_size // 2)
            log.warning("out of memory on %s: batch size halved to %d, retrying", lm.device, lm.batch_size)
