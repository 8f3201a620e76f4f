"""What every benchmark measures of a run besides its time: the peak memory it held, next to weights + KV cache + logits
of its rows and to the bytes `batch_size: auto` budgets for them (issue 21 asks each benchmark to print both).

On Linux the peak is the process's resident high-water mark (VmHWM), reset before the run (`/proc/self/clear_refs`)
after the C allocator hands back the free memory it keeps (`models/allocator.py`), minus what was resident at the
start; on a GPU it is the peak its allocator held above the start. The weights are added back (they were resident
before), with oneDNN's blocked copies of them (`linears.PackedWeights`) where the model uses them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import memrisk
from memrisk.models import allocator, linears, memory

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


def synchronize() -> None:
    """Wait for the GPU's queued work, where torch has started one, so that a wall clock brackets it."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def resident(field: str) -> int:
    """Bytes of a /proc/self/status field (VmRSS, VmHWM); 0 where there is none."""
    if not STATUS.is_file():
        return 0
    for line in STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def measured(fn: Callable[[], Any], repeats: int = 1) -> tuple[Any, float, int]:
    """Result, best wall seconds of `repeats` calls, and the peak bytes held above the start (see the module's
    docstring)."""
    gpu = torch.cuda.is_initialized()
    allocator.release_freed_memory()
    if gpu:
        synchronize()
        torch.cuda.reset_peak_memory_stats()
    elif CLEAR_REFS.exists():
        CLEAR_REFS.write_text("5")
    before = torch.cuda.memory_allocated() if gpu else resident("VmRSS")
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        synchronize()
        times.append(time.perf_counter() - start)
    after = torch.cuda.max_memory_allocated() if gpu else resident("VmHWM")
    return out, min(times), max(0, after - before)


def touch_weights(lm: memrisk.LanguageModel) -> None:
    """Read every parameter once: weights mapped from the cache's files become resident only when first read, which
    would put them in the first measured run's peak as well as in `memory_line`'s weights."""
    with torch.no_grad():
        for parameter in lm.model.parameters():
            parameter.sum()


def weight_bytes(lm: memrisk.LanguageModel) -> int:
    """Bytes of the model's parameters."""
    return sum(p.numel() * p.element_size() for p in lm.model.parameters())


def direct_bytes(lm: memrisk.LanguageModel, rows: int, tokens: int, scored: int) -> int:
    """Weights + KV cache of `rows` rows of `tokens` tokens + float32 logits of `scored` positions per row."""
    shape = lm.shape
    kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * shape.dtype_bytes
    return weight_bytes(lm) + rows * tokens * kv_per_token + rows * scored * shape.vocab_size * 4


def memory_line(lm: memrisk.LanguageModel, peak: int, rows: int, tokens: int, scored: int, *,
                loaded_inside: bool = False) -> str:
    """`peak` (from `measured`) plus the weights, against weights + KV cache of `rows` rows of `tokens` tokens + float32
    logits of `scored` positions per row (the goal: at most 1.5x), and the bytes `batch_size: auto` budgets for those
    rows (`memory.sequence_bytes`, the weights added). With `loaded_inside` the measured call loaded the model itself,
    so its peak already holds the weights."""
    shape = lm.shape
    weights = weight_bytes(lm)
    direct = direct_bytes(lm, rows, tokens, scored)
    budget = rows * memory.sequence_bytes(**dataclasses.asdict(shape), sequence_length=tokens, scored_positions=scored)
    held = peak if loaded_inside else peak + weights + linears.PACKED.bytes()
    return (f"peak {held / 2**20:,.0f} MiB = {held / direct:.2f}x weights+KV+logits "
            f"({direct / 2**20:,.0f} MiB); auto budget {(budget + weights) / 2**20:,.0f} MiB")
