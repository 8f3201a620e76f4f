"""A local GGUF file converted once into a float32 safetensors folder in memrisk's cache.

transformers reads a GGUF file three times to load it (config, tokenizer, weights), and each read parses every
metadata field: SmolLM2-135M took 15 s to load on one CPU thread, against under 3 s from the converted folder (load
and a first forward). The folder holds what the GGUF load gives, saved with `save_pretrained`: the dequantized
weights, the config and the tokenizer, so every later load computes the same numbers. The conversion itself parses
the file once (`_parsed_once`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from memrisk.cache import cache_root, save_atomically


FINGERPRINT_BYTES = 1 << 20
"""How much of a GGUF file's start (its metadata and first tensors) and of its end is hashed to name its conversion."""


def converted_folder(folder: Path, gguf_file: str) -> Path:
    """Where the conversion of `folder`/`gguf_file` is kept: named by the file's name, size and the hash of its first
    and last MiB, and by the transformers version that dequantizes it. The same file installed elsewhere (another
    virtual environment) shares one conversion; a file changed in its size, start or end, or a new converter, makes a new
    folder."""
    import transformers

    path = (folder / gguf_file).resolve()
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        digest.update(handle.read(FINGERPRINT_BYTES))
        if size > FINGERPRINT_BYTES:
            handle.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
            digest.update(handle.read())
    key = json.dumps([path.name, size, digest.hexdigest(), transformers.__version__])
    return cache_root() / "gguf" / f"{path.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def convert(folder: Path, gguf_file: str) -> Path:
    """The converted folder of `folder`/`gguf_file`, written on first use (atomically: a killed conversion leaves none)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = converted_folder(folder, gguf_file)
    if not target.is_dir():
        def save(staging: Path) -> None:
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch.float32)
            model.hf_quantizer = None  # dequantized on load: what is saved is plain float32
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(staging)
            AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file).save_pretrained(staging)

        with _parsed_once():
            save_atomically(target, save)
    return target


@contextmanager
def _parsed_once() -> Iterator[None]:
    """Within a conversion, one `gguf.GGUFReader` per file and one tensor-name table per architecture and depth.
    transformers makes a reader for each of its reads (config, tokenizer, weights), each parsing every metadata field,
    and a name table for each submodule it maps; both are only read, so sharing them changes no byte of the folder,
    and SmolLM2's first load (conversion included) took 14.5–15.2 s instead of 27.5–29.3 s on one thread."""
    import gguf

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[Path, gguf.GGUFReader] = {}

    def shared_reader(path: str | Path, mode: str = "r") -> gguf.GGUFReader:
        if mode != "r":
            return reader_class(path, mode)
        key = Path(path).resolve()
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = shared_reader, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map
