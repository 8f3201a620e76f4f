"""Batch sizing by device memory: an upper estimate of the bytes one sequence needs picks the
largest batch that fits, and an out-of-memory back-off halves the batch if it still does not."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from memrisk.errors import MemriskError
from memrisk.models import allocator
from memrisk.models.backend import LanguageModel, ModelShape
from memrisk.models.kvcache import SPARE_COLUMNS

log = logging.getLogger(__name__)
T = TypeVar("T")

MEMINFO = Path("/proc/meminfo")

# Float32 tensors the size of the scored logits that the decoding maths holds at once, at most.
# The heaviest path, top-p `DecodingPolicy.log_probs` (also behind `sample` and `top_children`),
# peaks at 9¼: scaled logits, log-probabilities, sorted log-probabilities and their int64 order
# (3), probabilities, the mass before each token, the int64 count of kept tokens (2) and a mask (¼).
# Teacher-forced scoring (`rank_and_score`) peaks lower, at 7 (8 when the
# model's logits are bfloat16 and are first copied to float32).
DECODING_COPIES = 10
# Tensors of one layer's forward pass, per token, in units of the hidden size, of one query/key
# head, and of the MLP width: residual, normed input, attention output and their sum (4 hidden);
# queries, keys, values, their rotated copies and the keys and values repeated to every query
# head, and the attention context (5 query heads + 3 key/value heads); MLP gate, up and product.
HIDDEN_COPIES = 4
QUERY_HEAD_COPIES = 5
KV_HEAD_COPIES = 3
MLP_COPIES = 3
# Float32 tensors per attention score beside the scores themselves: the upcast and the softmax.
SCORE_FLOAT32_COPIES = 2
# Per-token int64 inputs: ids, attention mask, positions and the mask's running sum.
INPUT_BYTES = 4 * 8


def model_shape(lm: LanguageModel) -> ModelShape:
    """The architecture numbers of `lm` that `sequence_bytes` needs (read by the backend)."""
    return lm.shape


def sequence_bytes(
    *,
    layers: int,
    hidden_size: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    intermediate_size: int,
    vocab_size: int,
    dtype_bytes: int,
    keeps_logits: bool,
    attention_scores: bool,
    sequence_length: int,
    scored_positions: int,
) -> int:
    """Upper estimate of the device bytes one sequence (one batch row) needs while it is scored.

    With s = sequence_length, P = scored_positions, b = dtype_bytes, f = max(4, b):
      KV cache     2·layers·kv_heads·head_dim·(s + 32)·b   (32 spare columns for decoding)
      one layer    s·b·(4·hidden + (5·heads + 3·kv_heads)·head_dim + 3·intermediate) + 32·s
                   + s²·(heads·(b + 8) + b) when the kernel may materialise attention scores
                     (scores in b, their float32 copy and float32 softmax, the mask in b)
      logits       (P + 1, or s when the model cannot keep only the last logits)·vocab·b
                   + 10·P·vocab·f   (DECODING_COPIES float32-or-wider copies of the scored logits)
    The three parts are added although they do not all peak together, so the sum is an upper bound.
    """
    s, b = sequence_length, dtype_bytes
    kv_cache = 2 * layers * kv_heads * head_dim * (s + SPARE_COLUMNS) * b
    head_widths = (QUERY_HEAD_COPIES * heads + KV_HEAD_COPIES * kv_heads) * head_dim
    widths = HIDDEN_COPIES * hidden_size + head_widths + MLP_COPIES * intermediate_size
    layer = s * b * widths + INPUT_BYTES * s
    if attention_scores:
        layer += s * s * (heads * (b + SCORE_FLOAT32_COPIES * 4) + b)
    output_positions = scored_positions + 1 if keeps_logits else s
    logits = output_positions * vocab_size * b + DECODING_COPIES * scored_positions * vocab_size * max(4, b)
    return kv_cache + layer + logits


def meminfo_available(text: str) -> int | None:
    """Bytes of the MemAvailable line of a /proc/meminfo text, or None when it has none."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "MemAvailable":
            number, _, unit = value.strip().partition(" ")
            return int(number) * (1024 if unit == "kB" else 1)
    return None


def free_memory_bytes(device: torch.device) -> int:
    """Bytes free for new tensors on `device`.

    CUDA: free device memory plus what PyTorch's caching allocator holds unused. CPU: the
    kernel's MemAvailable (after the C allocator hands back the memory it keeps free), else the
    available physical pages. Other device types cannot be measured: pass the free bytes (or a
    fixed batch size) instead.
    """
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if device.type == "cpu":
        allocator.release_freed_memory()
        available = meminfo_available(MEMINFO.read_text()) if MEMINFO.is_file() else None
        if available is not None:
            return available
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError) as exc:
            raise MemriskError("cannot measure free CPU memory on this system: set a fixed batch size") from exc
    raise MemriskError(f"cannot measure free memory on a {device.type} device: set a fixed batch size")


def auto_batch_size(
    lm: LanguageModel,
    sequence_length: int,
    scored_positions: int,
    *,
    rows_per_sequence: int = 1,
    free_bytes: int | None = None,
    fraction: float = 0.8,
    maximum: int = 512,
) -> int:
    """The largest batch whose sequences fit in `fraction` of the free memory, within [1, `maximum`].

    `sequence_length` is the longest prefix + suffix in tokens; `scored_positions` the
    full-vocabulary logit rows each batch row has at once (the suffix length when teacher
    forcing, 1 when decoding); `rows_per_sequence` the batch rows of one sequence (CBS: the beam width).
    Free memory is measured on `lm.device` (with a device map: where the first layers live) unless
    `free_bytes` is given. A batch that still does not fit is caught by `halving_on_oom`.
    """
    if sequence_length < 1 or scored_positions < 0:
        raise MemriskError(
            f"sequence_length must be >= 1 and scored_positions >= 0; got {sequence_length} and {scored_positions}"
        )
    if not 0.0 < fraction <= 1.0:
        raise MemriskError(f"fraction must be in (0, 1], got {fraction}")
    if maximum < 1 or rows_per_sequence < 1:
        raise MemriskError(f"maximum and rows_per_sequence must be >= 1, got {maximum} and {rows_per_sequence}")
    if free_bytes is None:
        free_bytes = free_memory_bytes(lm.device)
    elif free_bytes < 0:
        raise MemriskError(f"free_bytes must be >= 0, got {free_bytes}")
    per_sequence = rows_per_sequence * sequence_bytes(
        **dataclasses.asdict(model_shape(lm)), sequence_length=sequence_length, scored_positions=scored_positions
    )
    size = max(1, min(maximum, int(free_bytes * fraction) // per_sequence))
    log.info(
        "batch size %d on %s: %.1f MiB free x %.2f / %.2f MiB per sequence (%d rows of %d tokens, %d scored positions; at most %d)",
        size, lm.device, free_bytes / 2**20, fraction, per_sequence / 2**20, rows_per_sequence, sequence_length,
        scored_positions, maximum,
    )
    return size


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
