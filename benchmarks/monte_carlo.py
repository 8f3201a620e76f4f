"""Monte Carlo with one prefill per window against one prefill per batch of samples (CBS paper App. C.3, eq. 23).

Loads the pretrained SmolLM2-135M-Instruct (`memrisk.load_model("smollm2")`), cuts N windows of
a prefix + T suffix tokens from standard-library docstrings (one token list, never re-tokenised)
and times, per window, M samples in batches of MAX_ROWS rows (the `mc` method's batch):

  (a) before  one `monte_carlo` call per batch of MAX_ROWS samples, so every batch evaluates the
              prefix again (how the `mc` method sampled before); ceil(M / MAX_ROWS)·a + (T − 1)·M
              token evaluations (a = prefix tokens incl. BOS);
  (b) after   one `monte_carlo` call for all M samples, as the `mc` method runs now: the prefix is
              evaluated once and its KV cache expanded across every batch; a + (T − 1)·M.

Both decode the same rows in the same batches; only the prefills differ. A one-row prefill is cheap
next to a batch's expansion and decoding of MAX_ROWS rows (which copy and read the prefix's KV cache
MAX_ROWS times), so time falls by less than token evaluations do; the gain grows with the prefix
length and the number of batches, and shrinks with T. Repetitions are interleaved (a, b, then b, a, ...) so that noise from other work on the
machine hits both alike; seconds per window are reported from the median and the best run, in wall
and in CPU time (CPU time is the steadier one when other processes share the cores), with the
ratio (a)/(b) (> 1: (b) is faster), and each variant's peak memory next to weights + KV cache + logits of a batch of
MAX_ROWS rows and to what `batch_size: auto` budgets for them (`measure.memory_line`).

Run:  python benchmarks/monte_carlo.py [--windows N] [--prefix A] [--suffix T] [--samples M] [--repeats R] [--threads T]

(--threads 1 gives steadier numbers when another process is busy on the same cores.)
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import torch
from measure import measured, memory_line
from teacher_forcing import make_windows

import memrisk
from memrisk.methods.monte_carlo import MAX_ROWS

EPSILON = 5


def per_batch(lm: memrisk.LanguageModel, prefix: list[int], suffix: list[int], samples: int) -> int:
    """(a): one call, hence one prefill, per batch of MAX_ROWS samples; returns the token evaluations."""
    evals = 0
    for chunk, start in enumerate(range(0, samples, MAX_ROWS)):
        [result] = memrisk.monte_carlo(lm, [prefix], [suffix], samples=min(MAX_ROWS, samples - start), epsilon=EPSILON,
                                       seed=chunk, max_rows=MAX_ROWS)
        evals += result.token_evals
    return evals


def per_window(lm: memrisk.LanguageModel, prefix: list[int], suffix: list[int], samples: int) -> int:
    """(b): one call, hence one prefill, for all samples; returns the token evaluations."""
    [result] = memrisk.monte_carlo(lm, [prefix], [suffix], samples=samples, epsilon=EPSILON, seed=0, max_rows=MAX_ROWS)
    return result.token_evals


def timed(fn: Callable[[], int]) -> tuple[int, float, float, int]:
    """Result, wall seconds, CPU seconds and peak memory (`measure.measured`) of one call; the CPU clock brackets the
    call alone, not the allocator's trim that `measured` does before it."""

    def run() -> tuple[int, float]:
        start = time.process_time()
        out = fn()
        return out, time.process_time() - start

    (out, cpu), wall, peak = measured(run)
    return out, wall, cpu, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=2, help="number of windows (default 2)")
    parser.add_argument("--prefix", type=int, default=50, help="prefix tokens a, without BOS (default 50)")
    parser.add_argument("--suffix", type=int, default=50, help="suffix tokens T (default 50)")
    parser.add_argument("--samples", type=int, default=4 * MAX_ROWS, help=f"samples M per window (default {4 * MAX_ROWS})")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions of each variant (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    lm = memrisk.load_model("smollm2")
    prefixes, suffixes = make_windows(lm, args.windows, args.prefix, args.suffix)
    variants: dict[str, Callable[[], int]] = {
        "(a) one prefill per batch": lambda: sum(per_batch(lm, p, s, args.samples) for p, s in zip(prefixes, suffixes)),
        "(b) one prefill per window": lambda: sum(per_window(lm, p, s, args.samples) for p, s in zip(prefixes, suffixes)),
    }
    names = list(variants)
    print(
        f"{args.windows} windows of {args.prefix}+{args.suffix} tokens, {args.samples} samples each in "
        f"{math.ceil(args.samples / MAX_ROWS)} batches of ≤ {MAX_ROWS}, {torch.get_num_threads()} torch threads, device {lm.device}"
    )
    per_batch(lm, prefixes[0], suffixes[0], min(args.samples, MAX_ROWS))  # warm-up, untimed
    evals: dict[str, int] = {}
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    peaks = dict.fromkeys(names, 0)
    for rep in range(args.repeats):
        for name in names[rep % 2:] + names[:rep % 2]:
            evals[name], seconds, cpu_seconds, peak = timed(variants[name])
            wall[name].append(seconds / args.windows)
            cpu[name].append(cpu_seconds / args.windows)
            peaks[name] = max(peaks[name], peak)
    for name in names:
        runs = ", ".join(f"{t:.2f}" for t in wall[name])
        print(
            f"{name:28s} {statistics.median(wall[name]):8.3f} s/window wall median, {min(wall[name]):8.3f} best, "
            f"{statistics.median(cpu[name]):8.3f} CPU median, {min(cpu[name]):8.3f} best; "
            f"{evals[name] // args.windows:,} token evaluations/window   (wall runs: {runs})"
        )
    a, b = names
    print(
        f"speed-up (a)/(b): {statistics.median(wall[a]) / statistics.median(wall[b]):.3f} wall on medians, "
        f"{min(wall[a]) / min(wall[b]):.3f} wall on best runs, {statistics.median(cpu[a]) / statistics.median(cpu[b]):.3f} CPU on medians, "
        f"{min(cpu[a]) / min(cpu[b]):.3f} CPU on best runs; token evaluations {evals[a] / evals[b]:.4f}"
    )
    rows, tokens = min(MAX_ROWS, args.samples), args.prefix + args.suffix + 1
    for name in names:
        print(f"memory, {name}: {memory_line(lm, peaks[name], rows, tokens, 1)}")


if __name__ == "__main__":
    main()
