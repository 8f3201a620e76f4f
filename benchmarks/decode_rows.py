"""One decode step of SmolLM2-135M at R rows, as a share of the machine's float32 matmul peak.

    python benchmarks/decode_rows.py [--rows 8,16,32,64,128,168,256] [--steps 10]

Every row continues one of 8 shared 50-token prefixes (the shared-prefix cache CBS and Monte Carlo use). A step
costs 2 × parameters FLOPs per row (CBS paper App. C.3); few rows do little arithmetic per weight read, so the step
is bound by memory bandwidth there, and that bounds any search whose beams pruning has narrowed. Each row count's
peak memory is printed next to weights + KV cache + logits of its rows and to what `batch_size: auto` budgets for them
(`measure.memory_line`).
"""

from __future__ import annotations

import argparse
import time

import torch
from measure import measured, memory_line
from teacher_forcing import make_windows

import memrisk
from memrisk.models.throughput import device_peak_flops, forward_flops

PREFIXES = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="8,16,32,64,128,168,256", help="comma-separated row counts")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per row count (default 10)")
    args = parser.parse_args()
    lm = memrisk.load_model("smollm2", batch_size=PREFIXES)
    parameters = sum(p.numel() for p in lm.model.parameters())
    peak = device_peak_flops(lm.device, seconds=2.0)
    prefixes, suffixes = make_windows(lm, PREFIXES)
    print(f"matmul peak {peak / 1e9:.0f} GFLOP/s; {torch.get_num_threads()} threads")
    with torch.inference_mode():
        lm.step(lm.prefill(prefixes, shared=True), torch.tensor([s[0] for s in suffixes]))  # first use's allocations, untimed
        for rows in (int(r) for r in args.rows.split(",")):
            owner = torch.arange(rows) % PREFIXES

            def steps(owner: torch.Tensor = owner) -> float:
                """Seconds per decode step, after the prefill and the first step (untimed)."""
                first = torch.tensor([s[0] for s in suffixes])[owner]
                state = lm.step(lm.select_rows(lm.prefill(prefixes, shared=True), owner), first)
                start = time.perf_counter()
                for t in range(1, args.steps + 1):
                    state = lm.step(state, torch.tensor([s[t] for s in suffixes])[owner])
                return (time.perf_counter() - start) / args.steps

            seconds, _, held = measured(steps)
            rate = forward_flops(rows, parameters) / seconds
            tokens = len(prefixes[0]) + args.steps + 2  # BOS, the prefix and every stepped token
            print(f"rows {rows:4d}: {seconds * 1e3:7.1f} ms per step, {rate / 1e9:6.1f} GFLOP/s = {rate / peak:.0%} of peak; "
                  f"{memory_line(lm, held, rows, tokens, 1)}")


if __name__ == "__main__":
    main()
