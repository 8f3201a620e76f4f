"""The throughput limit printed by the benchmarks: 2 × parameters FLOPs per token evaluation."""

from __future__ import annotations

import torch

from memrisk.models.throughput import device_peak_flops, forward_flops, utilization_line


def test_forward_flops_and_the_utilization_line() -> None:
    assert forward_flops(1000, 135_000_000) == 2.7e11
    line = utilization_line(1000, 135_000_000, seconds=2.0, peak_flops=2.7e11)
    assert "0.27 TFLOP in 2.00 s" in line and "135.0 GFLOP/s = 50.0% of the device's 270 GFLOP/s (limit 1.00 s)" in line


def test_cpu_peak_is_measured() -> None:
    peak = device_peak_flops(torch.device("cpu"), seconds=0.05)
    assert 1e8 < peak < 1e14
