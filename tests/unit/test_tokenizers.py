"""Tokenizers read once per process (`load_tokenizer`, `load_model`), again once their files change, and each token's
text as it reads inside a sequence."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from memrisk.errors import MemriskError
from memrisk.models.backend import load_model, load_tokenizer, token_text_reader
from tests.conftest import WORDS, word_tokenizer


def test_a_folders_tokenizer_is_read_once_until_its_files_change(tmp_path, word_model) -> None:
    word_model.model.save_pretrained(tmp_path)
    word_model.tokenizer.save_pretrained(tmp_path)
    first = load_tokenizer(str(tmp_path))
    assert load_tokenizer(str(tmp_path)) is first
    assert load_model(str(tmp_path)).tokenizer is first
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(dict.fromkeys([*WORDS, "zebra"]))}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]").save_pretrained(tmp_path)
    again = load_tokenizer(str(tmp_path))
    assert again is not first
    assert again("zebra", add_special_tokens=False)["input_ids"] == [len(vocab) - 1]


def test_a_folder_without_a_tokenizer_is_one_error(tmp_path, word_model) -> None:
    word_model.model.save_pretrained(tmp_path)
    with pytest.raises(MemriskError, match="the folder has no tokenizer"):
        load_tokenizer(str(tmp_path))


def test_token_text_keeps_the_space_a_word_has_inside_a_sequence() -> None:
    tokenizer = word_tokenizer()
    text = token_text_reader(tokenizer)
    assert [text(i) for i in range(4)] == [" [UNK]", f" {WORDS[0]}", f" {WORDS[1]}", f" {WORDS[2]}"]


def test_a_gguf_files_conversion_is_named_by_its_content_so_every_install_of_it_shares_one(tmp_path, monkeypatch) -> None:
    from memrisk.models import gguf

    monkeypatch.setenv("MEMRISK_CACHE", str(tmp_path / "cache"))
    content = b"GGUF" + bytes(3 * gguf.FINGERPRINT_BYTES)
    installs = [tmp_path / "venv-a", tmp_path / "venv-b"]
    for folder in installs:
        folder.mkdir()
        (folder / "model.gguf").write_bytes(content)
    first = gguf.converted_folder(installs[0], "model.gguf")
    assert first.parent == tmp_path / "cache" / "gguf" and first.name.startswith("model-")
    assert gguf.converted_folder(installs[1], "model.gguf") == first
    (installs[1] / "model.gguf").write_bytes(content[:-1] + b"x")
    assert gguf.converted_folder(installs[1], "model.gguf") != first, "a changed last byte names a new conversion"
    (installs[1] / "model.gguf").write_bytes(content + bytes(1))
    assert gguf.converted_folder(installs[1], "model.gguf") != first, "another size names a new conversion"


def test_a_conversion_parses_each_gguf_file_once_and_leaves_the_gguf_package_as_it_was(tmp_path) -> None:
    import gguf as gguf_package
    import numpy as np

    from memrisk.models import gguf

    path = tmp_path / "tiny.gguf"
    writer = gguf_package.GGUFWriter(path, "llama")
    writer.add_block_count(2)
    writer.add_tensor("output_norm.weight", np.arange(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader_class, name_map = gguf_package.GGUFReader, gguf_package.get_tensor_name_map
    with pytest.raises(RuntimeError, match="stopped"), gguf._parsed_once():
        first = gguf_package.GGUFReader(str(path))
        assert gguf_package.GGUFReader(tmp_path / "." / "tiny.gguf") is first
        assert isinstance(first, reader_class) and first.tensors[0].data.tolist() == [0.0, 1.0, 2.0, 3.0]
        assert gguf_package.GGUFReader(path, "c") is not first
        arch = gguf_package.MODEL_ARCH.LLAMA
        assert gguf_package.get_tensor_name_map(arch, 2) is gguf_package.get_tensor_name_map(arch, 2)
        raise RuntimeError("stopped")
    assert (gguf_package.GGUFReader, gguf_package.get_tensor_name_map) == (reader_class, name_map)
    assert gguf_package.GGUFReader(path) is not gguf_package.GGUFReader(path)
