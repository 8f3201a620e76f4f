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
    product = linears.PACKED.product
    monkeypatch.setattr(linears.PACKED, "product", lambda *args: ran.append(1) or product(*args))
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


def test_onednn_and_compile_are_refused_together_in_either_order() -> None:
    with pytest.raises(MemriskError, match="compile: true and matmul: onednn cannot be combined"):
        memrisk.load_model(tiny_llama(), matmul="onednn", compile=True)
    compiled = memrisk.load_model(tiny_llama(), compile=True)
    with pytest.raises(MemriskError, match="cannot be combined"):
        compiled.use_matmul("onednn")
    assert compiled.matmul == "blas"


def test_a_bad_or_unusable_matmul_library_is_refused() -> None:
    with pytest.raises(MemriskError, match="matmul must be one of blas, onednn; got 'mkl'"):
        memrisk.load_model(tiny_llama(), matmul="mkl")
    with pytest.raises(MemriskError, match="matmul: onednn cannot run .*float32 models on CPU only"):
        memrisk.load_model(tiny_llama().to(torch.float64), matmul="onednn")


def test_packed_weights_give_the_plain_weights_bits_at_every_row_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """A oneDNN layer against oneDNN's product of its plain weight, row counts 1–70 and 168, at one and two threads: at
    one row oneDNN's kernel for a packed weight differs here, and the layer takes the plain weight; above, the packed
    copy gives the plain weight's bits on the CPUs this suite runs on (AVX-512), and the layer uses it."""
    generator = torch.Generator().manual_seed(0)
    packed_products = []
    product = linears.onednn_product
    monkeypatch.setattr(linears, "onednn_product", lambda hidden, weight, bias=None: packed_products.append(weight.is_mkldnn)
                        or product(hidden, weight, bias))
    kept = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for out_features, in_features, bias in ((96, 32, False), (64, 96, True), (VOCAB, 32, False)):
                layer = torch.nn.Linear(in_features, out_features, bias=bias).requires_grad_(False)
                linears.install(layer, "onednn")
                try:
                    for rows in [*range(1, 71), 168]:
                        hidden = torch.randn(rows, in_features, generator=generator)
                        assert torch.equal(layer(hidden), product(hidden, layer.weight, layer.bias)), rows
                finally:
                    linears.install(layer, "blas")
    finally:
        torch.set_num_threads(kept)
    assert any(packed_products)


def test_a_weight_changed_in_place_is_packed_again_and_blas_drops_the_copies() -> None:
    layer = torch.nn.Linear(32, 96, bias=False).requires_grad_(False)
    before = linears.PACKED.bytes()
    linears.install(layer, "onednn")
    assert linears.PACKED.bytes() == before + layer.weight.numel() * 4
    hidden = torch.randn(5, 32, generator=torch.Generator().manual_seed(1))
    first = layer(hidden)
    layer.weight.mul_(2)
    assert torch.equal(layer(hidden), linears.onednn_product(hidden, layer.weight)) and not torch.equal(layer(hidden), first)
    linears.install(layer, "blas")
    assert linears.PACKED.bytes() == before


def test_a_packed_copy_whose_products_differ_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linears, "PACKED", linears.PackedWeights())
    monkeypatch.setattr(linears, "pack", lambda weight: torch.ops.mkldnn._reorder_linear_weight(weight.detach() * 2))
    layer = torch.nn.Linear(32, 96, bias=False).requires_grad_(False)
    linears.install(layer, "onednn")
    hidden = torch.randn(8, 32, generator=torch.Generator().manual_seed(2))
    assert torch.equal(layer(hidden), linears.onednn_product(hidden, layer.weight))
