"""The C allocator under a CPU run: freed memory is kept for the next tensor instead of handed back to the kernel.

glibc gives an allocation of 128 KiB or more pages of its own (mmap) and returns freed memory at the top of its heap
to the kernel; its thresholds then grow only with what was freed. A search step or a scored batch makes and frees
the same tensors of 1–160 MB again and again, so each one comes back as fresh pages, zeroed by the kernel one 4 KiB
page fault at a time (about 45,000 faults to score SmolLM2's logits at 8 × 50 teacher-forced positions). With both
thresholds at `KEEP_BYTES`, tensors of that size reuse the heap's pages.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

KEEP_BYTES = 256 * 2**20
"""Allocations below this size come from the heap, and up to this much free memory stays at its top (both well above
the logits of a batch: SmolLM2's 8 windows of 101 tokens are 159 MB)."""
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES", "LD_PRELOAD")
"""Environment variables by which a user has chosen the allocator's behaviour (or another allocator) already."""


@cache
def _glibc() -> ctypes.CDLL | None:
    """The process's C library where it is glibc (the only one with these settings), else None."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt") else None


@cache
def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds to `KEEP_BYTES` once per process; whether they were set (not where the C
    library is not glibc, or the user chose the allocator's settings by its environment variables)."""
    libc = _glibc()
    if libc is None or any(os.environ.get(name) for name in USER_SETTINGS):
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, KEEP_BYTES)) and bool(libc.mallopt(M_TRIM_THRESHOLD, KEEP_BYTES))


def release_freed_memory() -> None:
    """Hand the heap's free memory back to the kernel (glibc's malloc_trim), so that resident memory and the kernel's
    available memory count only what is in use: before a memory budget is read or a peak is measured."""
    libc = _glibc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
