"""How the model's linear layers multiply on CPU: torch's own BLAS with the output head a vocabulary slice at a time, or
every linear layer through oneDNN (the model's `matmul` setting).

Part of the model backend.
- "blas" (the default), applied around memrisk's own forwards only, so the model object stays as transformers made
  it: a [rows, hidden] × [hidden, vocabulary] head product whose output is far larger than the cache runs below the
  matmul peak in one call. SmolLM2's head (49,152 × 576) at 160 rows measured 160–170 GFLOP/s in one call and
  180–195 GFLOP/s in slices of 2,048 tokens, 1–1,000 rows alike (2 threads). Each logit is the same dot product in the
  same order either way, so the logits are the head's own, bit for bit.
- "onednn": oneDNN's float32 kernels for every `nn.Linear` layer, installed in the model until "blas" is asked for
  again (`generate` on the model runs them too). Where torch's MKL does not use the CPU's AVX-512 (AMD), they are
  2–2.6× faster (SmolLM2's products at 160 rows: 400–470 against 160–195 GFLOP/s, AMD EPYC, 2 threads). The numbers
  agree with BLAS's to float32 rounding, not bit for bit, and a row's result depends on how many rows share its batch
  (as thread counts and batch layouts already do).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

MATMUL_LIBRARIES = ("blas", "onednn")
VOCABULARY_SLICE = 2048


class SlicedHead(torch.nn.Module):
    """A bias-free linear output head whose logits are written `VOCABULARY_SLICE` columns at a time."""

    def __init__(self, head: torch.nn.Linear) -> None:
        super().__init__()
        self.head = head

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [..., vocabulary] of `hidden` [..., hidden size]: the head's own output, bit for bit."""
        weight = self.head.weight
        if torch.is_grad_enabled() and (weight.requires_grad or hidden.requires_grad):
            return self.head(hidden)
        rows = hidden.reshape(-1, hidden.shape[-1])
        logits = rows.new_empty((rows.shape[0], weight.shape[0]))
        for start in range(0, weight.shape[0], VOCABULARY_SLICE):
            end = start + VOCABULARY_SLICE
            torch.mm(rows, weight[start:end].t(), out=logits[:, start:end])
        return logits.view(*hidden.shape[:-1], weight.shape[0])


def sliceable(model: Any) -> bool:
    """Whether `model`'s output head is a bias-free float32 linear layer on CPU, not placed by accelerate, which
    `SlicedHead` speeds up."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return (
        type(head) is torch.nn.Linear and head.bias is None and head.weight.device.type == "cpu"
        and head.weight.dtype == torch.float32 and hasattr(model, "set_output_embeddings")
        and getattr(model, "hf_device_map", None) is None and "forward" not in vars(head)
    )


def onednn_problem(model: Any) -> str | None:
    """Why `matmul: onednn` cannot run `model` (None when it can)."""
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN"
    parameter = next(model.parameters(), None)
    if parameter is None or parameter.device.type != "cpu" or parameter.dtype != torch.float32:
        return "it runs float32 models on CPU only"
    if getattr(model, "hf_device_map", None) is not None:
        return "its layers are placed by device_map"
    return None


def onednn_product(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """hidden · weightᵀ (+ bias) by oneDNN's float32 kernel, on dense tensors as they are (no gradient)."""
    return torch.ops.mkldnn._linear_pointwise(hidden, weight, bias, "none", [], "")


def _onednn_linear(linear: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """`linear(hidden)` by oneDNN's kernel (by the layer itself where gradients are needed)."""
    if torch.is_grad_enabled() and (linear.weight.requires_grad or hidden.requires_grad):
        return torch.nn.functional.linear(hidden, linear.weight, linear.bias)
    return onednn_product(hidden, linear.weight, linear.bias)


def _runs_onednn(layer: torch.nn.Module) -> bool:
    """Whether `install` gave this layer oneDNN's forward."""
    return getattr(vars(layer).get("forward"), "__func__", None) is _onednn_linear


def install(model: Any, library: str) -> None:
    """Make the model's CPU `nn.Linear` layers multiply with `library` from now on. For "onednn" each layer gets
    oneDNN's forward as an instance attribute, set past `Module.__setattr__` so the layers, their names and weights stay
    as they are; "blas" takes those forwards away again (and leaves any other, such as accelerate's hooks)."""
    for layer in model.modules():
        if type(layer) is not torch.nn.Linear:
            continue
        if library == "onednn" and layer.weight.device.type == "cpu":
            object.__setattr__(layer, "forward", _onednn_linear.__get__(layer))
        elif _runs_onednn(layer):
            del vars(layer)["forward"]


@contextmanager
def running(model: Any, library: str) -> Iterator[None]:
    """Run one of memrisk's forwards of `model` with `library`'s per-forward kernels: BLAS's sliced output head (oneDNN's
    layers are already `install`ed), then restore the model's own head."""
    if library != "blas" or not sliceable(model):
        yield
        return
    head = model.get_output_embeddings()
    model.set_output_embeddings(SlicedHead(head))
    try:
        yield
    finally:
        model.set_output_embeddings(head)
