"""Batch sizing by free memory: the per-sequence estimate, the config reader and the chosen size."""

from __future__ import annotations

import dataclasses
import logging
import os
import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LlamaConfig, LlamaForCausalLM

import memrisk
from memrisk import DecodingPolicy, MemriskError
from memrisk.models import memory
from memrisk.models.backend import ModelShape
from memrisk.models.memory import (
    auto_batch_size,
    free_memory_bytes,
    meminfo_available,
    model_shape,
    sequence_bytes,
)
from tests.conftest import tiny_gpt2

SMOLLM2 = {
    "layers": 30, "hidden_size": 576, "heads": 9, "kv_heads": 3, "head_dim": 64, "intermediate_size": 1536,
    "vocab_size": 49152, "dtype_bytes": 2, "keeps_logits": True, "attention_scores": True,
}


def tiny_llama(dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    """A 3-layer grouped-query Llama whose head size is not hidden / heads (so it must be read)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=300, hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=6,
        num_key_value_heads=2, head_dim=12, max_position_embeddings=256, attn_implementation="eager",
    )
    return LlamaForCausalLM(config).to(dtype).eval()


def test_sequence_bytes_of_smollm2_by_hand() -> None:
    # 50 prefix + 50 suffix tokens in bfloat16, all 50 suffix positions scored.
    kv_cache = 2 * 30 * 3 * 64 * (100 + 32) * 2                               # 3,041,280
    layer = 100 * 2 * (4 * 576 + (5 * 9 + 3 * 3) * 64 + 3 * 1536) + 32 * 100  # 2,076,800
    scores = 100 * 100 * (9 * (2 + 8) + 2)                                    # 920,000
    logits = 51 * 49152 * 2 + 10 * 50 * 49152 * 4                             # 103,317,504
    got = sequence_bytes(**SMOLLM2, sequence_length=100, scored_positions=50)
    assert got == kv_cache + layer + scores + logits == 109_355_584


def test_kernel_and_logit_options_change_exactly_their_terms() -> None:
    base = sequence_bytes(**SMOLLM2, sequence_length=100, scored_positions=50)
    flash = sequence_bytes(**(SMOLLM2 | {"attention_scores": False}), sequence_length=100, scored_positions=50)
    every_logit = sequence_bytes(**(SMOLLM2 | {"keeps_logits": False}), sequence_length=100, scored_positions=50)
    assert base - flash == 100 * 100 * (9 * (2 + 8) + 2)
    assert every_logit - base == (100 - 51) * 49152 * 2


def test_sequence_bytes_of_a_float64_tiny_gpt2_by_hand() -> None:
    # Float64 logits stay float64 in the decoding maths: its copies take 8 bytes, not 4.
    shape = {"layers": 2, "hidden_size": 16, "heads": 2, "kv_heads": 2, "head_dim": 8, "intermediate_size": 64, "vocab_size": 8}
    kv_cache = 2 * 2 * 2 * 8 * (10 + 32) * 8               # 21,504
    layer = 10 * 8 * (4 * 16 + (5 * 2 + 3 * 2) * 8 + 3 * 64) + 32 * 10  # 31,040
    scores = 10 * 10 * (2 * (8 + 8) + 8)                   # 4,000
    logits = 5 * 8 * 8 + 10 * 4 * 8 * 8                    # 2,880
    got = sequence_bytes(**shape, dtype_bytes=8, keeps_logits=True, attention_scores=True, sequence_length=10, scored_positions=4)
    assert got == kv_cache + layer + scores + logits == 59_424


def test_model_shape_of_tiny_gpt2(tiny_model) -> None:
    shape = model_shape(memrisk.load_model(tiny_model))
    config = tiny_model.config
    assert shape == ModelShape(
        layers=config.n_layer, hidden_size=config.n_embd, heads=config.n_head, kv_heads=config.n_head,
        head_dim=config.n_embd // config.n_head, intermediate_size=4 * config.n_embd, vocab_size=config.vocab_size,
        dtype_bytes=4, keeps_logits=True, attention_scores=True,
    )
    assert (shape.layers, shape.hidden_size, shape.heads, shape.head_dim, shape.vocab_size) == (2, 16, 2, 8, 8)
    assert model_shape(memrisk.load_model(tiny_gpt2().to(torch.bfloat16))).dtype_bytes == 2


def test_model_shape_of_tiny_llama() -> None:
    shape = model_shape(memrisk.load_model(tiny_llama(torch.bfloat16)))
    assert dataclasses.astuple(shape) == (3, 48, 6, 2, 12, 80, 300, 2, True, True)


@pytest.mark.real_model
def test_model_shape_of_smollm2_matches_the_hand_numbers(smollm2) -> None:
    shape = dataclasses.asdict(model_shape(smollm2))
    assert shape == SMOLLM2 | {"dtype_bytes": shape["dtype_bytes"]}
    assert shape["dtype_bytes"] == next(smollm2.model.parameters()).element_size()


def test_a_config_without_a_layer_count_is_named() -> None:
    lm = memrisk.load_model(tiny_llama())
    lm.model.config = types.SimpleNamespace(hidden_size=48, num_attention_heads=6, num_hidden_layers=None)
    with pytest.raises(MemriskError, match=r"config \(SimpleNamespace\) has no layer count \(num_hidden_layers or n_layer\)"):
        model_shape(lm)


def test_batch_is_the_number_of_whole_rows_that_fit(tiny_model) -> None:
    lm = memrisk.load_model(tiny_model)
    row = sequence_bytes(**dataclasses.asdict(model_shape(lm)), sequence_length=20, scored_positions=8)
    assert auto_batch_size(lm, 20, 8, free_bytes=10 * row, fraction=1.0) == 10
    assert auto_batch_size(lm, 20, 8, free_bytes=10 * row - 1, fraction=1.0) == 9
    assert auto_batch_size(lm, 20, 8, free_bytes=10 * row, fraction=0.5) == 5
    assert auto_batch_size(lm, 20, 8, free_bytes=row - 1) == 1
    assert auto_batch_size(lm, 20, 8, free_bytes=10**6 * row, maximum=64) == 64
    assert auto_batch_size(lm, 20, 8, rows_per_sequence=5, free_bytes=10 * row, fraction=1.0) == 2


def test_the_choice_is_logged(tiny_model, caplog) -> None:
    lm = memrisk.load_model(tiny_model)
    row = sequence_bytes(**dataclasses.asdict(model_shape(lm)), sequence_length=12, scored_positions=4)
    with caplog.at_level(logging.INFO, logger="memrisk.models.memory"):
        assert auto_batch_size(lm, 12, 4, free_bytes=7 * row, fraction=1.0) == 7
    assert "batch size 7 on cpu" in caplog.text
    assert f"{row / 2**20:.2f} MiB per sequence (1 rows of 12 tokens, 4 scored positions" in caplog.text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sequence_length": 0}, "sequence_length must be >= 1"),
        ({"scored_positions": -1}, "scored_positions >= 0"),
        ({"fraction": 0.0}, r"fraction must be in \(0, 1\]"),
        ({"fraction": 1.5}, r"fraction must be in \(0, 1\]"),
        ({"maximum": 0}, "maximum and rows_per_sequence must be >= 1, got 0 and 1"),
        ({"rows_per_sequence": 0}, "maximum and rows_per_sequence must be >= 1, got 512 and 0"),
        ({"free_bytes": -1}, "free_bytes must be >= 0"),
    ],
)
def test_bad_arguments_are_named(tiny_model, options, message) -> None:
    arguments = {"sequence_length": 10, "scored_positions": 4, "free_bytes": 10**9} | options
    with pytest.raises(MemriskError, match=message):
        auto_batch_size(memrisk.load_model(tiny_model), **arguments)


SIZES = st.integers(min_value=0, max_value=10**12)
LENGTHS = st.integers(min_value=1, max_value=4096)


@settings(max_examples=200, deadline=None)
@given(free=SIZES, more=SIZES, length=LENGTHS, scored=st.integers(0, 512), maximum=st.integers(1, 4096))
def test_more_free_memory_never_gives_a_smaller_batch(tiny_model, free, more, length, scored, maximum) -> None:
    lm = memrisk.load_model(tiny_model)
    small = auto_batch_size(lm, length, min(scored, length), free_bytes=free, maximum=maximum)
    large = auto_batch_size(lm, length, min(scored, length), free_bytes=free + more, maximum=maximum)
    assert 1 <= small <= large <= maximum


@pytest.fixture(scope="module")
def llama_lm() -> memrisk.LanguageModel:
    return memrisk.load_model(tiny_llama())


@settings(max_examples=200, deadline=None)
@given(free=SIZES, length=LENGTHS, longer=st.integers(0, 4096), scored=st.integers(0, 512), extra=st.integers(0, 512))
def test_longer_sequences_never_give_a_larger_batch(llama_lm, free, length, longer, scored, extra) -> None:
    lm = llama_lm
    assert auto_batch_size(lm, length + longer, scored, free_bytes=free) <= auto_batch_size(lm, length, scored, free_bytes=free)
    assert auto_batch_size(lm, length, scored + extra, free_bytes=free) <= auto_batch_size(lm, length, scored, free_bytes=free)


def test_meminfo_parsing() -> None:
    text = "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   16000000 kB\nBuffers: 1 kB\n"
    assert meminfo_available(text) == 16000000 * 1024
    assert meminfo_available("MemTotal: 5 kB\nMemFree: 4 kB\n") is None


def test_free_cpu_memory_is_measured(monkeypatch, tmp_path) -> None:
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < free_memory_bytes(torch.device("cpu")) <= physical
    monkeypatch.setattr(memory, "MEMINFO", tmp_path / "absent")
    assert 0 < free_memory_bytes(torch.device("cpu")) <= physical
    (tmp_path / "meminfo").write_text("MemTotal: 8 kB\nMemAvailable: 3 kB\n")
    monkeypatch.setattr(memory, "MEMINFO", tmp_path / "meminfo")
    assert free_memory_bytes(torch.device("cpu")) == 3 * 1024


def test_unmeasurable_devices_are_named() -> None:
    with pytest.raises(MemriskError, match="cannot measure free memory on a meta device"):
        free_memory_bytes(torch.device("meta"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_free_cuda_memory_counts_the_allocator_cache() -> None:
    device = torch.device("cuda")
    before = free_memory_bytes(device)
    block = torch.empty(64 * 2**20, dtype=torch.uint8, device=device)
    during = free_memory_bytes(device)
    del block
    assert before - during >= 64 * 2**20
    assert free_memory_bytes(device) - during >= 64 * 2**20  # the freed block is cached by torch, yet free


def cpu_peak_bytes(work) -> int:
    """Peak bytes the CPU allocator holds during `work()` above what it held at the start.

    The profiler records every allocation and free (temporaries inside operators included);
    replaying them in time order gives the peak.
    """
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        work()
    events, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            events.append((node.start_time_ns, node.extra_fields.alloc_size))
        stack.extend(node.children)
    held = peak = 0
    for _, size in sorted(events):
        held += size
        peak = max(peak, held)
    return peak


def test_the_cpu_peak_measurement_sees_temporaries() -> None:
    x = torch.randn(256, 1024)

    def work():
        kept = torch.ones(128, 1024)
        torch.logsumexp(x, dim=-1)  # holds an exp(x - max) temporary of x's size inside the operator
        return kept

    assert cpu_peak_bytes(work) >= (128 + 256) * 1024 * 4


SCORING_POLICIES = [
    DecodingPolicy(), DecodingPolicy(top_k=3), DecodingPolicy(temperature=0.7, top_p=0.9), DecodingPolicy(top_p=0.6)
]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: tiny_gpt2(vocab_size=40, seed=1, n_positions=256), id="word-gpt2-sdpa"),
        pytest.param(lambda: tiny_llama(), id="llama-eager-float32"),
        pytest.param(lambda: tiny_llama(torch.bfloat16), id="llama-eager-bfloat16"),
    ],
)
def test_estimate_bounds_the_measured_peak_of_one_scoring_batch(make) -> None:
    lm = memrisk.load_model(make(), batch_size=6)
    generator = torch.Generator().manual_seed(0)
    vocab, prefix_length, suffix_length = lm.vocab_size, 40, 20
    prefixes = torch.randint(0, vocab, (6, prefix_length), generator=generator).tolist()
    suffixes = torch.randint(0, vocab, (6, suffix_length), generator=generator).tolist()
    memrisk.verbatim_scores(lm, prefixes, suffixes, SCORING_POLICIES)  # first call: lazy initialisation
    measured = cpu_peak_bytes(lambda: memrisk.verbatim_scores(lm, prefixes, suffixes, SCORING_POLICIES))
    shape = dataclasses.asdict(model_shape(lm))
    estimate = 6 * sequence_bytes(**shape, sequence_length=prefix_length + suffix_length, scored_positions=suffix_length)
    logits = 6 * (suffix_length + 1) * vocab * lm.shape.dtype_bytes
    assert logits < measured <= estimate


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_estimate_bounds_the_measured_cuda_peak_of_one_scoring_batch() -> None:
    lm = memrisk.load_model(tiny_llama(torch.bfloat16).to("cuda"), batch_size=6)
    generator = torch.Generator().manual_seed(0)
    prefixes = torch.randint(0, lm.vocab_size, (6, 40), generator=generator).tolist()
    suffixes = torch.randint(0, lm.vocab_size, (6, 20), generator=generator).tolist()
    memrisk.verbatim_scores(lm, prefixes, suffixes, SCORING_POLICIES)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    memrisk.verbatim_scores(lm, prefixes, suffixes, SCORING_POLICIES)
    measured = torch.cuda.max_memory_allocated() - start
    estimate = 6 * sequence_bytes(**dataclasses.asdict(model_shape(lm)), sequence_length=60, scored_positions=20)
    assert 6 * 21 * lm.vocab_size * 2 < measured <= estimate
