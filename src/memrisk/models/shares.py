"""Independent shares of a batch run side by side on CPU, one thread each.

Part of the model backend. A decode step spends a fifth of its time outside the matrix products: Python, the
attention's small products, norms and top-k, most of which leave one of two cores idle. Splitting the work into
shares, each on its own copy of the model (`LanguageModel.replicas`, the weights shared) in its own Python thread with
one intra-op thread, lets one share's overhead run while the other's products do. On SmolLM2's k-CBS (8 windows,
B = 20, 2 cores) two shares took 0.84–0.98× the time of one batch on two threads in a slow hour of the development
machine, and 0.98–1.05× in a fast one (docs/performance.md).

A row's numbers stay the same wherever each forward holds rows enough: torch's products compute a row alike at one
thread and at two, in any batch but a small one (measured on the development CPU: one-thread products differ from a
large batch's at 1–3 rows, two-thread ones at 1–3, 5–7 and 9–11). `shares: auto` makes shares only where each pool
holds `SHARE_MIN_ROWS` rows at full width. Where a forward still holds so few rows (a pruned search's narrowest steps, or a
prefill's output head, a row per window admitted at once), those rows' floats may differ from one pool's at float32
rounding, as between two batch sizes today (docs/performance.md): k-CBS and the benchmark's CBS give the same bits,
`memrisk demo`'s pruned CBS bounds differ at about 10⁻⁷. So one pool stays the default (`model.shares`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

from memrisk.models.backend import LanguageModel

SHARE_MIN_ROWS = 32
"""The fewest rows a share's batch holds at full width for the work to be split: below it one thread's products lose
more than the overlap gains, and rows' float sums may depend on their batch's size (above)."""

T = TypeVar("T")
Job = Callable[[LanguageModel, threading.Event], T]


def share_count(lm: LanguageModel, items: int, rows_per_item: int, batch_size: int) -> int:
    """How many shares to split `items` sequences into, each run `batch_size` // shares at a time with `rows_per_item`
    rows each: one per CPU thread while every share keeps `SHARE_MIN_ROWS` rows; 1 off CPU, compiled or placed."""
    if lm.device.type != "cpu" or lm.compiled or getattr(lm.model, "hf_device_map", None) is not None:
        return 1
    shares = min(torch.get_num_threads(), items, batch_size)
    while shares > 1 and (batch_size // shares) * rows_per_item < SHARE_MIN_ROWS:
        shares -= 1
    return max(shares, 1)


def dealt(items: int, shares: int) -> list[list[int]]:
    """Items 0..items−1 dealt round-robin into `shares` lists, so neighbouring items (often alike in cost) spread."""
    return [list(range(share, items, shares)) for share in range(shares)]


def run_shares(lm: LanguageModel, jobs: Sequence[Job[T]]) -> list[T]:
    """Run each job on its own replica of `lm` in its own thread, with one intra-op thread each; return their results
    in order. The first failure (or an interrupt here) sets the event every job is given, so the others stop early, and
    is raised once all have stopped. The thread count is restored afterwards."""
    if len(jobs) == 1:
        return [jobs[0](lm, threading.Event())]
    workers = lm.replicas(len(jobs))
    stop = threading.Event()

    def guarded(job: Job[T], worker: LanguageModel) -> T:
        try:
            return job(worker, stop)
        except BaseException:
            stop.set()
            raise

    kept = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(len(jobs), thread_name_prefix="memrisk-share") as pool:
            futures = [pool.submit(guarded, job, worker) for job, worker in zip(jobs, workers)]
            try:
                return [future.result() for future in futures]
            except BaseException:
                stop.set()
                raise
    finally:
        torch.set_num_threads(kept)
