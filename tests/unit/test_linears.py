"""The CPU kernels of the model's linear layers (models/linears.py).

With BLAS the sliced output head writes the head's own logits: each logit is one dot product over the hidden size in
both, so equality is exact (same threads, same rows). oneDNN sums in its own order: its logits agree with BLAS's to
float32 rounding, |Δ| ≤ 1e-4 · (1 + |logit|) for these 2-layer models whose logits sum a few hundred products each."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import memrisk
from memrisk.errors import MemriskError
from memrisk.models import linears
from tests.conftest import tiny_gpt2

VOCAB = 2 * linears.VOCABULARY_SLICE + 300  # two full slices and a partial one
PREFIXES, SUFFIXES = [[1, 2, 3], [4, 5, 6, 7]], [[8, 9], [10, 11]]


def tiny_llama() -> LlamaForCausalLM:
    """A random 2-layer Llama: every projection, and the head, an nn.Linear."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def test_sliced_head_gives_the_heads_logits_bit_for_bit() -> None:
    model = tiny_gpt2(vocab_size=VOCAB)
    head = model.get_output_embeddings()
    hidden = torch.randn(3, 7, head.in_features, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        assert torch.equal(linears.SlicedHead(head)(hidden), head(hidden))


def test_forwards_run_sliced_give_the_plain_logits_and_restore_the_head(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_gpt2(vocab_size=VOCAB)
    head = model.get_output_embeddings()
    lm = memrisk.load_model(model)
    calls: list[int] = []
    hook = head.register_forward_hook(lambda *_: calls.append(1))
    sliced = lm.suffix_logits(PREFIXES, SUFFIXES)
    assert calls == [] and model.get_output_embeddings() is head  # the sliced head ran, and the model has its own back
    monkeypatch.setattr(linears, "sliceable", lambda model: False)
    plain = lm.suffix_logits(PREFIXES, SUFFIXES)
    hook.remove()
    assert calls == [1] and torch.equal(sliced, plain)


def test_onednn_logits_agree_with_blas_to_rounding_until_blas_is_asked_for_again(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_llama()
    blas = memrisk.load_model(model).suffix_logits(PREFIXES, SUFFIXES)
    lm = memrisk.load_model(model, matmul="onednn")
    assert lm.matmul == "onednn" and lm.describe()["matmul"] == "onednn"
    ran = []
    product = linears.onednn_product
    monkeypatch.setattr(linears, "onednn_product", lambda *args: ran.append(1) or product(*args))
    onednn = lm.suffix_logits(PREFIXES, SUFFIXES)
    assert len(ran) == 2 * 7 + 1  # every projection of both layers, and the head
    assert bool(((onednn - blas).abs() <= 1e-4 * (1 + blas.abs())).all())
    lm.use_matmul("blas")
    assert not any("forward" in vars(m) for m in model.modules())  # each layer's own forward is back
    assert torch.equal(lm.suffix_logits(PREFIXES, SUFFIXES), blas) and len(ran) == 2 * 7 + 1


def test_blas_leaves_other_instance_forwards_and_onednn_refuses_placed_layers() -> None:
    model = tiny_llama()
    layer = model.model.layers[0].mlp.up_proj
    hooked = layer.forward
    object.__setattr__(layer, "forward", hooked)  # as accelerate's hooks wrap a placed layer's forward
    memrisk.load_model(model, matmul="blas")
    assert vars(layer)["forward"] is hooked
    model.hf_device_map = {"": "cpu"}
    with pytest.raises(MemriskError, match="placed by device_map"):
        memrisk.load_model(model, matmul="onednn")
    assert not linears.sliceable(model)


def test_a_bad_or_unusable_matmul_library_is_refused() -> None:
    with pytest.raises(MemriskError, match="matmul must be one of blas, onednn; got 'mkl'"):
        memrisk.load_model(tiny_llama(), matmul="mkl")
    with pytest.raises(MemriskError, match="matmul: onednn cannot run .*float32 models on CPU only"):
        memrisk.load_model(tiny_llama().to(torch.float64), matmul="onednn")
