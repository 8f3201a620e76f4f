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
  (as thread counts and batch layouts already do). Each layer's weight is kept in oneDNN's own blocked layout as well
  (`PackedWeights`), which spares a product re-blocking the plain weight: 5–15% of a decode step's products at 168 rows,
  with the plain weight's bits (checked once per weight shape and thread count).

A decoding policy that keeps the top k tokens reads only each row's k + 1 largest logits. For such a reader, "blas"
screens the head where oneDNN's product is the faster (`HeadScreen`): oneDNN's logits bound BLAS's to float32
rounding, and BLAS computes exactly only the columns that can reach a row's top; the logits the reader sees are BLAS's,
bit for bit, wherever they decide anything.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from memrisk.decoding import largest

MATMUL_LIBRARIES = ("blas", "onednn")
VOCABULARY_SLICE = 2048
SCREEN_SPARE = 12
"""Tokens a screened head takes past the ones its reader needs, so that the last of them certifies the rest: for
SmolLM2, oneDNN's logits are within about 0.03 of BLAS's (`HeadScreen.error`), and a row's 41st and 53rd logits lie
about 0.3 apart. 12 certified every row of a k-CBS run on SmolLM2 (8 windows, B = 20) and kept every step's columns
within one vocabulary slice (1,580–2,042 of 49,152); 8 left a row uncertified in 8 of its 49 steps."""
SCREEN_WIDER = 8
"""How many times more tokens a row that `SCREEN_SPARE` does not certify takes before its batch gets the full head."""
SCREEN_MIN_ROWS = 32
"""Fewest rows a head is screened at: below, the full head costs little more than the screen itself."""
SCREEN_MIN_SLICES = 4
"""Fewest full vocabulary slices a screened head has: with fewer, its exact slices would be most of the head."""
NORM_BLOCK_ROWS = 4096
"""Rows of a head whose norms `largest_row_norm` takes at once (19 MiB of float64 at SmolLM2's width of 576)."""


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


def column_logits(rows: torch.Tensor, weight: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """BLAS's logits [rows, columns] of the vocabulary ids `columns` (sorted, unique), bit for bit the sliced head's.

    Each product has the shape and strides of one of `SlicedHead`'s: the columns inside full slices go
    `VOCABULARY_SLICE` at a time (the last group padded with copies of a column), their weight rows gathered, into an
    output as wide as the vocabulary; those in the last, partial slice get that slice's own product. BLAS chooses its
    kernels, blocking and threads by shapes, strides and thread count, so each logit is the same sum in the same order
    as the sliced head's (a narrower product of gathered columns is not: with 4 threads MKL sums some widths, such as
    17 or 100 columns, in another order)."""
    vocabulary = weight.shape[0]
    full = vocabulary - vocabulary % VOCABULARY_SLICE
    scratch = _scratch(rows, vocabulary)
    inside, tail = columns[columns < full], columns[columns >= full]
    parts = []
    for start in range(0, len(inside), VOCABULARY_SLICE):
        group = inside[start:start + VOCABULARY_SLICE]
        padded = torch.cat([group, group[:1].expand(VOCABULARY_SLICE - len(group))])
        torch.mm(rows, weight[padded].t(), out=scratch[:, :VOCABULARY_SLICE])
        parts.append(scratch[:, : len(group)].clone())
    if len(tail):
        torch.mm(rows, weight[full:].t(), out=scratch[:, full:])
        parts.append(scratch[:, tail])
    return torch.cat(parts, dim=1)


_scratches = threading.local()


def _scratch(rows: torch.Tensor, vocabulary: int) -> torch.Tensor:
    """An uninitialised [rows, vocabulary] output for `column_logits`, kept per thread and reused: its products write
    only a few of its columns, and a fresh one each step was an allocation of the vocabulary's width that glibc's
    aligned allocations could not serve from the last one freed, so the heap grew and was trimmed again and again."""
    kept = getattr(_scratches, "buffer", None)
    if kept is None or kept.shape[0] < rows.shape[0] or kept.shape[1] != vocabulary or kept.dtype != rows.dtype \
            or kept.device != rows.device:
        kept = rows.new_empty((rows.shape[0], vocabulary))
        _scratches.buffer = kept
    return kept[: rows.shape[0]]


class HeadScreen:
    """What screening a model's head needs, worked out once per head weight (its storage and version): a bound on its
    rows' norms, and per thread count whether screening pays on this machine (`pays`).

    The bound (Higham, Accuracy and Stability of Numerical Algorithms, §3.1): a float32 dot product of K terms summed in
    any order is within γ_K · Σ|h_i w_i| ≤ γ_K · ‖h‖ · ‖w‖ of the exact one, γ_K = K·u / (1 − K·u), u = 2⁻²⁴. BLAS's and
    oneDNN's logits are two such sums, so they differ by at most 2 · γ_K · ‖h‖ · max‖w‖, and by at most
    2 · K · 2⁻¹²⁶ · (1 + ‖h‖ + max‖w‖) more where a kernel flushes subnormal numbers to zero."""

    def __init__(self) -> None:
        self._norms: dict[tuple[int, int, tuple[int, ...]], float] = {}
        self._pays: dict[tuple[int, int, tuple[int, ...]], bool] = {}

    def error(self, rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Per row, a bound on |BLAS logit − oneDNN logit| over the vocabulary of `weight` (float32, rounded up by 2%)."""
        key = _identity(weight)
        if key not in self._norms:
            self._norms = {key: largest_row_norm(weight)}
        terms, norm, row_norms = weight.shape[1], self._norms[key], rows.norm(dim=1)
        gamma = terms * 2.0**-24 / (1 - terms * 2.0**-24)
        flushed = 2 * terms * 2.0**-126 * (1 + norm + row_norms)  # subnormal inputs and products a kernel may zero
        return 2.04 * gamma * norm * row_norms + flushed

    def pays(self, sliced: SlicedHead) -> bool:
        """Whether, at this thread count, oneDNN's product of the sliced head's weight is faster than BLAS's (measured
        once, on the model's own head, which also checks that `column_logits` gives the sliced head's bits)."""
        weight = sliced.head.weight
        key = (torch.get_num_threads(), weight.data_ptr(), tuple(weight.shape))
        if key not in self._pays:
            self._pays[key] = self._measure(sliced)
        return self._pays[key]

    def _measure(self, sliced: SlicedHead) -> bool:
        if not torch.backends.mkldnn.is_available():
            return False
        weight = sliced.head.weight
        generator = torch.Generator().manual_seed(0)
        rows = torch.randn(128, weight.shape[1], generator=generator)
        with torch.inference_mode():
            columns = torch.randperm(weight.shape[0], generator=generator)[:VOCABULARY_SLICE + 100].sort().values
            if not torch.equal(column_logits(rows, weight, columns), sliced(rows)[:, columns]):
                return False
            try:
                onednn = _best_seconds(lambda: onednn_product(rows, weight))
            except RuntimeError:  # a weight oneDNN's kernel does not take (a strided view, say): the full head then
                return False
            return onednn < 0.8 * _best_seconds(lambda: sliced(rows))


def largest_row_norm(weight: torch.Tensor) -> float:
    """The largest Euclidean norm of a weight's rows, summed in float64, `NORM_BLOCK_ROWS` rows at a time: a float64
    copy of a whole head held twice its float32 bytes at once (216 MiB for SmolLM2's, 325 MiB with the norm's work)."""
    with torch.no_grad():
        return max(float(block.double().norm(dim=1).max()) for block in weight.detach().split(NORM_BLOCK_ROWS))


def _identity(weight: torch.Tensor) -> tuple[int, int, tuple[int, ...]]:
    """A weight's storage, version (bumped by any in-place change) and shape: what a bound on it depends on."""
    return weight.data_ptr(), weight._version, tuple(weight.shape)


def full_float32() -> bool:
    """Whether float32 products run at full float32 precision (torch's "highest"), as `HeadScreen.error`'s bound
    assumes: a lower setting lets oneDNN multiply float32 in bfloat16."""
    setting = getattr(getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision", "none")
    return torch.get_float32_matmul_precision() == "highest" and setting in ("none", "ieee")


def _best_seconds(fn: Any, repeats: int = 3) -> float:
    """The fastest of `repeats` timed calls of `fn`."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


class ScreenedHead(torch.nn.Module):
    """The output head for a reader of each row's `top` largest logits only: those, and every logit equal to the
    `top`-th, are BLAS's own bits; every other logit may come back as a smaller value, below the `top`-th.

    oneDNN's product (twice BLAS's speed on AMD CPUs) gives approximate logits a, within `HeadScreen.error` E of BLAS's.
    Of each row's m = `top` + `SCREEN_SPARE` largest a, the `top`-th is t and the m-th is s. Every BLAS logit outside
    those m is at most s + E, and the `top`-th largest BLAS logit is at least t − E; where s + E < t − E, no token
    outside the m can reach the top, so BLAS computes only their columns (all rows' together) and they overwrite a.
    The rest of a stays: each value there is at most s, below the `top`-th BLAS logit. A row not so certified tries
    again with `SCREEN_WIDER` times m tokens; if one still is not, the batch gets the full sliced head, as do batches too
    small or heads too narrow for the screen to pay."""

    def __init__(self, head: torch.nn.Linear, screen: HeadScreen, top: int) -> None:
        super().__init__()
        self.head = head
        self.screen = screen
        self.top = top
        self.candidates: torch.Tensor | None = None
        """After a forward, per row [rows, m] vocabulary ids whose logits are BLAS's, among which the row's `top`
        largest lie: every logit of the row outside them is below those (None: the full head ran)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [..., vocabulary] of `hidden` [..., hidden size], BLAS's own bits at each row's top."""
        self.candidates = None
        sliced = SlicedHead(self.head)
        weight = self.head.weight
        rows = hidden.reshape(-1, hidden.shape[-1])
        take = self.top + SCREEN_SPARE
        if (torch.is_grad_enabled() and (weight.requires_grad or hidden.requires_grad)) or take >= VOCABULARY_SLICE \
                or weight.shape[0] < SCREEN_MIN_SLICES * VOCABULARY_SLICE or rows.shape[0] < SCREEN_MIN_ROWS \
                or not full_float32() or not self.screen.pays(sliced):
            return sliced(hidden)
        logits = onednn_product(rows.contiguous(), weight)
        error = self.screen.error(rows, weight)
        values, candidates = largest(logits, take)
        certified = self._certified(values, error)
        columns = candidates[certified].flatten()
        if not bool(certified.all()):
            left = (~certified).nonzero().squeeze(1)
            wider_values, wider = largest(logits[left], min(SCREEN_WIDER * take, weight.shape[0]))
            if not bool(self._certified(wider_values, error[left]).all()):
                return sliced(hidden)
            columns = torch.cat([columns, wider.flatten()])
            candidates = None
        columns = torch.unique(columns)
        logits.index_copy_(1, columns, column_logits(rows, weight, columns))
        self.candidates = columns.expand(rows.shape[0], -1) if candidates is None else candidates
        return logits.view(*hidden.shape[:-1], weight.shape[0])

    def _certified(self, descending: torch.Tensor, error: torch.Tensor) -> torch.Tensor:
        """Per row of descending approximate logits: whether its last lies more than twice `error` below its `top`-th,
        so that no token outside them can reach the row's top."""
        return descending[:, -1] + error < descending[:, self.top - 1] - error


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
    """hidden · weightᵀ (+ bias) by oneDNN's float32 kernel, on dense tensors as they are (no gradient); `weight` may
    also be one of `PackedWeights`' blocked copies."""
    return torch.ops.mkldnn._linear_pointwise(hidden, weight, bias, "none", [], "")


def pack(weight: torch.Tensor) -> torch.Tensor:
    """`weight` in oneDNN's blocked layout for its float32 products (an opaque tensor only `onednn_product` reads)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


PACK_PROBE_ROWS = (2, 3, 17, 64, 168)
"""Row counts at which a packed weight's products are compared with the plain weight's, bit for bit, before it is used.
On the development CPU (AMD EPYC, AVX-512) the two agreed at 2–89, 127–129, 160, 168, 200, 255–257, 400, 513 and 1,024
rows, at 1–4 threads, for SmolLM2's and the demo models' shapes; at 1 row oneDNN multiplies a plain weight with
another kernel, so a single row always takes the plain weight."""


class PackedWeights:
    """oneDNN's blocked copies of the weights of layers `install`ed with oneDNN, shared by every copy of the model.

    A plain weight is re-blocked inside every product; a packed one is not. On SmolLM2 at 168 rows that made its
    products 5–15% faster (a CBS search 5–9%), with the same bits. A copy is made when a layer is installed, made
    again after its weight changes in place (its storage or version), and used only where `PACK_PROBE_ROWS` products
    agree with the plain weight's at the current thread count; it costs memory the size of the weights."""

    def __init__(self) -> None:
        self._copies: dict[int, tuple[weakref.ref[torch.Tensor], tuple[int, int, tuple[int, ...]], torch.Tensor]] = {}
        self._agrees: dict[tuple[int, tuple[int, ...], bool], bool] = {}
        self._lock = threading.Lock()

    def add(self, weight: torch.Tensor) -> None:
        """Make `weight`'s blocked copy now (so that memory budgets see it); it goes when the weight does."""
        key = id(weight)
        with self._lock:
            self._copies[key] = (weakref.ref(weight, lambda _: self._copies.pop(key, None)), _identity(weight), pack(weight))

    def discard(self, weight: torch.Tensor) -> None:
        """Drop `weight`'s blocked copy."""
        with self._lock:
            self._copies.pop(id(weight), None)

    def bytes(self) -> int:
        """Memory the blocked copies take (the size of their weights)."""
        with self._lock:
            return sum(copy.numel() * copy.element_size() for _, _, copy in self._copies.values())

    def _copy(self, weight: torch.Tensor) -> torch.Tensor | None:
        """`weight`'s blocked copy, made again if the weight changed in place since; None where it has none."""
        held = self._copies.get(id(weight))
        if held is None or held[0]() is not weight:
            return None
        if held[1] != _identity(weight):
            self.add(weight)
            held = self._copies[id(weight)]
        return held[2]

    def product(self, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """hidden · weightᵀ (+ bias) by oneDNN, through `weight`'s blocked copy where it has one that gives its bits."""
        packed = self._copy(weight) if hidden.numel() > hidden.shape[-1] else None
        if packed is None or not self._agree(weight, packed, bias):
            return onednn_product(hidden, weight, bias)
        return onednn_product(hidden, packed, bias)

    def _agree(self, weight: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> bool:
        """Whether the packed weight's products equal the plain weight's at `PACK_PROBE_ROWS` rows (once per shape,
        bias and thread count)."""
        key = (torch.get_num_threads(), tuple(weight.shape), bias is not None)
        if key not in self._agrees:
            generator = torch.Generator().manual_seed(0)
            with torch.inference_mode():
                self._agrees[key] = all(
                    torch.equal(onednn_product(probe, weight, bias), onednn_product(probe, packed, bias))
                    for probe in (torch.randn(rows, weight.shape[1], generator=generator) for rows in PACK_PROBE_ROWS)
                )
        return self._agrees[key]


PACKED = PackedWeights()


def _onednn_linear(linear: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """`linear(hidden)` by oneDNN's kernel (by the layer itself where gradients are needed)."""
    if torch.is_grad_enabled() and (linear.weight.requires_grad or hidden.requires_grad):
        return torch.nn.functional.linear(hidden, linear.weight, linear.bias)
    return PACKED.product(hidden, linear.weight, linear.bias)


def _runs_onednn(layer: torch.nn.Module) -> bool:
    """Whether `install` gave this layer oneDNN's forward."""
    return getattr(vars(layer).get("forward"), "__func__", None) is _onednn_linear


def install(model: Any, library: str) -> None:
    """Make the model's CPU `nn.Linear` layers multiply with `library` from now on. For "onednn" each layer gets
    oneDNN's forward as an instance attribute, set past `Module.__setattr__` so the layers, their names and weights stay
    as they are, and its weight a blocked copy (`PACKED`); "blas" takes those forwards and copies away again (and leaves
    any other forward, such as accelerate's hooks)."""
    for layer in model.modules():
        if type(layer) is not torch.nn.Linear:
            continue
        if library == "onednn" and layer.weight.device.type == "cpu":
            object.__setattr__(layer, "forward", _onednn_linear.__get__(layer))
            PACKED.add(layer.weight)
        elif _runs_onednn(layer):
            del vars(layer)["forward"]
            PACKED.discard(layer.weight)


@contextmanager
def running(
    model: Any, library: str, screen: HeadScreen | None = None, top: int | None = None
) -> Iterator[ScreenedHead | None]:
    """Run one of memrisk's forwards of `model` with `library`'s per-forward kernels: BLAS's sliced output head, or its
    screened head where the reader needs only each row's `top` largest logits (oneDNN's layers are already
    `install`ed), then restore the model's own head. Yields the screened head where one runs (its `candidates` tell
    the reader where to look), else None."""
    if library != "blas" or not sliceable(model):
        yield None
        return
    head = model.get_output_embeddings()
    screened = None if top is None or screen is None else ScreenedHead(head, screen, top)
    model.set_output_embeddings(SlicedHead(head) if screened is None else screened)
    try:
        yield screened
    finally:
        model.set_output_embeddings(head)
