"""The physical limit a run can be compared with: a forward pass costs about 2 × parameters
FLOPs per token evaluation, so a method's token evaluations (CBS paper App. C.3) divided by the
device's peak FLOP/s give the shortest possible time."""

from __future__ import annotations

import time

import torch

from memrisk import defaults
from memrisk.models import linears

# Dense bf16/fp16 tensor-core peaks (TFLOP/s, no sparsity) of common accelerators, by name fragment.
PEAK_TFLOPS: dict[str, float] = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0, "4090": 165.0}


def forward_flops(token_evals: int, parameters: int) -> float:
    """FLOPs of `token_evals` token evaluations of a model with `parameters` weights (2·N per token)."""
    return 2.0 * parameters * token_evals


def device_peak_flops(
    device: torch.device, dtype: torch.dtype = torch.float32, seconds: float = 0.5, matmul: str = defaults.MATMUL,
    size: int = 1024, datasheet: bool = True,
) -> float:
    """Peak FLOP/s of `device`: the table for known GPUs (with `datasheet`), else a `size`² matmul in `dtype` measured
    for `seconds` (on CPU with the `matmul` library the model's linear layers use, `linears`, oneDNN's with its weight
    blocked as the layers' are)."""
    if device.type == "cuda" and datasheet:
        name = torch.cuda.get_device_name(device)
        for fragment, tflops in PEAK_TFLOPS.items():
            if fragment in name:
                return tflops * 1e12
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    onednn = matmul == "onednn" and device.type == "cpu"
    packed = linears.pack(b) if onednn else b
    if device.type == "cuda":  # the first product also starts cuBLAS: not part of the peak
        a @ b
        torch.cuda.synchronize(device)
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        linears.onednn_product(a, packed) if onednn else a @ b
        runs += 1
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return 2.0 * size**3 * runs / (time.perf_counter() - start)


def utilization_line(token_evals: int, parameters: int, seconds: float, peak_flops: float) -> str:
    """One line comparing a measured run with the device's limit."""
    achieved = forward_flops(token_evals, parameters) / seconds
    floor = forward_flops(token_evals, parameters) / peak_flops
    return (
        f"{token_evals:,} token evals x 2 x {parameters / 1e6:.0f}M params = {forward_flops(token_evals, parameters) / 1e12:.2f} TFLOP "
        f"in {seconds:.2f} s: {achieved / 1e9:.1f} GFLOP/s = {achieved / peak_flops:.1%} of the device's "
        f"{peak_flops / 1e9:.0f} GFLOP/s (limit {floor:.2f} s)"
    )
