"""torch.compile and device_map loading: both must give the numbers of a plain load."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import memrisk
from memrisk import DecodingPolicy, MemriskError
from tests.conftest import TINY_HIDDEN, tiny_gpt2, word_tokenizer
from tests.numerics import assert_close, reorder_tolerance

PREFIXES = ["the quick brown fox", "a river ran past old mill", "children played every", "bird sang in tree"]
SUFFIXES = ["jumps over lazy dog", "where children played", "summer day until night", "while cat sat on"]
POLICIES = [DecodingPolicy(), DecodingPolicy(top_k=3), DecodingPolicy(temperature=0.7, top_p=0.9)]


def word_lm(**options) -> memrisk.LanguageModel:
    """A fresh copy of conftest's word model (same seed, so the same weights), one batch for all rows."""
    tokenizer = word_tokenizer()
    return memrisk.load_model(tiny_gpt2(vocab_size=len(tokenizer), seed=1, n_positions=256, layers=1), tokenizer, batch_size=4, **options)


REORDERED = reorder_tolerance(max(len(s.split()) for s in SUFFIXES), len(word_tokenizer()), TINY_HIDDEN)
"""The compiled graph fuses and sums in other orders: the float32 reordering bound of tests/numerics.py over the
longest suffix, the vocabulary and the hidden size."""


SEARCH = {"beam_width": 4, "epsilon": 2, "prune": "hamming", "batch_size": 4}
"""A Hamming CBS small enough to compile and search in seconds."""


def searches(compiled: memrisk.LanguageModel, plain: memrisk.LanguageModel) -> list[tuple[Any, Any]]:
    """The compiled and the plain model's CBS results (`SEARCH`, top-k policy) for each window, in pairs."""
    return list(zip(*(memrisk.cbs(lm, PREFIXES, SUFFIXES, POLICIES[1], **SEARCH) for lm in (compiled, plain))))


def assert_same_scores(got: memrisk.VerbatimScores, want: memrisk.VerbatimScores) -> None:
    """Same log-probabilities (to float32 reordering, −inf where the reference has −inf) and the same ranks."""
    np.testing.assert_array_equal(got.ranks, want.ranks)
    assert_close(got.token_log_probs, want.token_log_probs, REORDERED)
    assert_close(got.log_p, want.log_p, REORDERED)


@pytest.mark.slow
def test_compiled_model_scores_and_searches_like_the_plain_one() -> None:
    plain, compiled = word_lm(), word_lm(compile=True)
    assert compiled.compiled and not plain.compiled
    assert compiled.describe()["compiled"] is True and plain.describe()["compiled"] is False
    assert compiled.shape.keeps_logits
    want = memrisk.verbatim_scores(plain, PREFIXES, SUFFIXES, POLICIES)
    assert np.isfinite(want.log_p[:, 0]).all() and np.isneginf(want.log_p).any()
    assert_same_scores(memrisk.verbatim_scores(compiled, PREFIXES, SUFFIXES, POLICIES), want)
    for got, ref in searches(compiled, plain):
        assert got.upper_bound() == pytest.approx(ref.upper_bound(), abs=REORDERED)
        assert got.lower_bound("hamming") == pytest.approx(ref.lower_bound("hamming"), abs=REORDERED)
        assert [c.tokens for c in got.candidates] == [c.tokens for c in ref.candidates]
        assert_close([c.log_p for c in got.candidates], [c.log_p for c in ref.candidates], REORDERED)
        assert got.token_evals == ref.token_evals


@pytest.mark.slow
def test_a_deep_model_compiles_each_kind_of_part_once_for_all_its_layers() -> None:
    """Twelve layers, past torch.compile's recompile limit of 8: compiled whole, each attention layer traced apart (its
    `layer_idx` a constant) and the layers after the eighth ran uncompiled; by region every layer shares the graphs."""
    from torch._dynamo.utils import counters
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer, layers = word_tokenizer(), 12
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=TINY_HIDDEN, intermediate_size=2 * TINY_HIDDEN,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    plain = memrisk.load_model(model, tokenizer, batch_size=4)
    compiled = memrisk.load_model(model, tokenizer, batch_size=4, compile=True)
    graphs_before = counters["stats"]["unique_graphs"]
    assert_same_scores(memrisk.verbatim_scores(compiled, PREFIXES, SUFFIXES, POLICIES),
                       memrisk.verbatim_scores(plain, PREFIXES, SUFFIXES, POLICIES))
    for got, ref in searches(compiled, plain):
        assert [c.tokens for c in got.candidates] == [c.tokens for c in ref.candidates]
        assert got.upper_bound() == pytest.approx(ref.upper_bound(), abs=REORDERED)
    graphs = counters["stats"]["unique_graphs"] - graphs_before
    assert 0 < graphs < layers / 2, graphs


def test_a_model_without_a_list_of_layers_is_refused_by_name() -> None:
    from memrisk.models.regions import compiled_regions

    with pytest.raises(MemriskError, match="compile: true .* Linear has no list of layers; load it without compile$"):
        compiled_regions(torch.nn.Linear(2, 2))


def test_compile_leaves_the_wrapped_model_alone(tiny_model) -> None:
    lm = memrisk.load_model(tiny_model, compile=True)
    assert lm.model is tiny_model and lm.compiled
    assert memrisk.load_model(lm) is lm and not memrisk.load_model(tiny_model).compiled


def test_a_compiler_failure_is_one_clear_error(monkeypatch, tiny_model) -> None:
    import torch._inductor.compile_fx

    def broken(*args, **kwargs):
        raise RuntimeError("no working C++ compiler\nlong traceback")

    monkeypatch.setattr(torch._inductor.compile_fx, "compile_fx", broken)
    torch.compiler.reset()
    lm = memrisk.load_model(tiny_model, compile=True)
    expected = r"could not compile GPT2LMHeadModel: RuntimeError: no working C\+\+ compiler; load it without compile$"
    with pytest.raises(MemriskError, match=expected):
        memrisk.verbatim_scores(lm, [[1, 2]], [[3, 4]], DecodingPolicy())


@pytest.mark.parametrize("device_map", ["cpu", "auto"])
def test_device_map_load_scores_like_a_plain_load(model_dir, device_map) -> None:
    if device_map == "auto" and torch.cuda.is_available():
        pytest.skip("'auto' would place the model on the GPU; this compares against a CPU load")
    plain = memrisk.load_model(str(model_dir), device="cpu", batch_size=4)
    mapped = memrisk.load_model(str(model_dir), device_map=device_map, batch_size=4)
    assert mapped.device == torch.device("cpu") and mapped.describe()["dtype"] == "float32"
    want = memrisk.verbatim_scores(plain, PREFIXES, SUFFIXES, POLICIES)
    got = memrisk.verbatim_scores(mapped, PREFIXES, SUFFIXES, POLICIES)
    np.testing.assert_array_equal(got.token_log_probs, want.token_log_probs)
    np.testing.assert_array_equal(got.ranks, want.ranks)


def test_describe_records_the_device_map_of_a_dispatched_model() -> None:
    from accelerate import dispatch_model

    device_map = {"transformer": "cpu", "lm_head": "cpu"}
    lm = memrisk.load_model(dispatch_model(tiny_gpt2(), device_map=device_map))
    assert lm.describe()["device_map"] == device_map
    assert memrisk.load_model(tiny_gpt2()).describe()["device_map"] is None


def test_device_map_reaches_the_loader(model_dir) -> None:
    with pytest.raises(MemriskError, match="could not load model.*device_map as a string"):
        memrisk.load_model(str(model_dir), device_map="nowhere")


def test_device_map_needs_a_model_to_load(model_dir, tiny_model) -> None:
    with pytest.raises(MemriskError, match="device_map needs a model name or folder"):
        memrisk.load_model(tiny_model, device_map="auto")
    with pytest.raises(MemriskError, match="device or device_map, not both"):
        memrisk.load_model(str(model_dir), device="cpu", device_map="auto")
