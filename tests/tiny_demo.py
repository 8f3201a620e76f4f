"""The demo shrunk for tests: a corpus of its shape over a 20-word vocabulary, tiny model sizes and a small
prior-aware bank, patched into `memrisk.demo` with the model cache in a temporary folder."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memrisk.demo import experiment, train
from memrisk.demo import study as demo_study
from memrisk.demo.corpus import GENERIC_SENTENCE, DemoCorpus, GenericPlant, PlantedPassage, TemplatePassage
from memrisk.demo.train import TrainingConfig

WORDS = "the module returns a value from each file and the class keeps its name while every method reads one list".split()
TINY = {
    "small": TrainingConfig(vocab_size=300, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                            block_size=64, steps=2, warmup_steps=1),
    "base": TrainingConfig(vocab_size=300, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                           block_size=64, steps=2, warmup_steps=1),
}
"""Two steps each: the sizes train in a blink and memorize nothing."""
MEMORIZING = {name: dataclasses.replace(config, steps=500, warmup_steps=10, learning_rate=1e-2) for name, config in TINY.items()}
"""500 steps at a high learning rate: `base` reproduces the passages planted 64 times (about ten seconds on two
cores), so every model-size figure has extracted windows to draw."""


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def tiny_corpus(seed: int = 0) -> DemoCorpus:
    """A corpus of the demo's shape, small enough that tiny models train and are measured in seconds."""
    rng = random.Random(seed)
    planted = [PlantedPassage(_text(rng, 60), copies) for copies in (1, 4, 16, 64)]
    heldout = [_text(rng, 120) for _ in range(3)]
    template = _text(rng, 60)
    generic = GenericPlant(GENERIC_SENTENCE, tuple(_text(rng, 60) for _ in range(2)))
    documents = [_text(rng, 80) for _ in range(10)] + [p.text for p in planted for _ in range(p.copies)]
    return DemoCorpus(documents, planted, heldout, [TemplatePassage(template, (template, template))], generic, seed)


@contextmanager
def shrunk_demo(monkeypatch: pytest.MonkeyPatch, cache: Path, sizes: dict[str, TrainingConfig] = TINY) -> Iterator[Path]:
    """The demo with `sizes`, the tiny corpus, a prior-aware bank of 8 prefixes and its model cache in `cache`."""
    monkeypatch.setattr(train, "SIZES", sizes)
    monkeypatch.setattr(experiment, "DEMO_PRIOR_AWARE", experiment.DEMO_PRIOR_AWARE | {"prefixes_per_trial": 4, "trials": 2})
    monkeypatch.setattr(demo_study, "build_demo_corpus", tiny_corpus)
    monkeypatch.setenv("MEMRISK_CACHE", str(cache))
    demo_study.demo_corpus.cache_clear()
    demo_study.demo_tokenizer.cache_clear()
    try:
        yield cache
    finally:
        demo_study.demo_corpus.cache_clear()
        demo_study.demo_tokenizer.cache_clear()
