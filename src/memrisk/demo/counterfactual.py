"""The prior-aware paper's counterfactual validation (PA §4.1.3, scaled down) as a study: `base: pa-counterfactual`.

Target sequences are injected into a base corpus (standard-library prose, `memrisk.demo.prose`) as `exact` verbatim
copies plus `near` near-duplicates that keep `overlap` of their words in place, the rest replaced by random corpus
words. Per seed and composition a small model trains on base + near-duplicates + exact copies; the model with the same
near-duplicates and no exact copy is its counterfactual baseline. Each model is one study cell, named
`seed{S}-exact{E}-near{N}`, whose `targets` dataset says what it trained on (`duplicates: E`, `near_duplicates: N`);
the study page then draws PA Figs. 2–3 (`memrisk.report.paper.prior_aware`). Models are trained when a cell first
needs them and cached under `$MEMRISK_CACHE/pa-counterfactual/`, one folder per corpus and training schedule.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerFast

from memrisk.config import ExperimentConfig, read_yaml_mapping, validated
from memrisk.demo.prose import source_documents
from memrisk.demo.train import TrainingConfig, cache_root, save_atomically, skeleton_model, train_model, train_tokenizer
from memrisk.errors import MemriskError
from memrisk.models.backend import LanguageModel
from memrisk.runner import load_run_model
from memrisk.files import atomic_write_text

COUNTERFACTUAL_BASE = "pa-counterfactual"
"""`base: pa-counterfactual` in a study YAML, with its options in a `pa-counterfactual:` section."""
MODEL_PREFIX = "pa-counterfactual:"
"""A model named `pa-counterfactual:seed{S}-exact{E}-near{N}` is the model trained on that composition."""
MODEL_NAME = re.compile(r"^seed(?P<seed>\d+)-exact(?P<exact>\d+)-near(?P<near>\d+)$")
TARGET_WORDS = 120
PREFIX_TOKENS = SUFFIX_TOKENS = 50
MODEL = TrainingConfig(
    vocab_size=2048, hidden_size=128, num_layers=2, num_heads=4, intermediate_size=384,
    block_size=128, batch_size=4, steps=500, learning_rate=2e-3, warmup_steps=30,
)
"""The models' shape and schedule (2 layers, hidden 128); `steps` is an option."""


class CounterfactualOptions(BaseModel):
    """A study's `pa-counterfactual:` section. The default compositions are the PA paper's seven (exact, near)
    compositions (0, 180) … (60, 0) scaled by 1/5; near-duplicates keep 20% of the words, as in the paper."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seeds: int = Field(2, ge=1)
    targets: int = Field(4, ge=1)
    documents: int = Field(600, ge=1)
    """Base-corpus documents."""
    steps: int = Field(MODEL.steps, ge=1)
    overlap: float = Field(0.2, gt=0.0, le=1.0)
    compositions: tuple[tuple[int, int], ...] = ((0, 36), (2, 30), (4, 24), (6, 18), (8, 12), (10, 6), (12, 0))
    """(exact copies, near-duplicates) per target sequence, one target model each (and a baseline with no exact copy)."""

    @field_validator("compositions")
    @classmethod
    def _counts(cls, value: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        if not value or any(exact < 0 or near < 0 for exact, near in value) or len(set(value)) != len(value):
            raise ValueError("compositions must be distinct (exact, near) pairs of non-negative counts, at least one")
        return value


@dataclass(frozen=True)
class CounterfactualCorpus:
    """The targets, the base corpus, and every model's training documents, for one set of options."""

    options: CounterfactualOptions

    @functools.cached_property
    def texts(self) -> tuple[list[str], list[str]]:
        """The first `targets` documents of at least TARGET_WORDS words (cut to that) and `documents` others."""
        documents = source_documents()
        random.Random(0).shuffle(documents)
        long_ones = [d for d in documents if len(d.split()) >= TARGET_WORDS][: self.options.targets]
        if len(long_ones) < self.options.targets:
            raise MemriskError(f"pa-counterfactual: only {len(long_ones)} source documents have {TARGET_WORDS} words; "
                               f"ask for fewer targets")
        base = [d for d in documents if d not in long_ones][: self.options.documents]
        return [" ".join(d.split()[:TARGET_WORDS]) for d in long_ones], base

    @property
    def training(self) -> TrainingConfig:
        return dataclasses.replace(MODEL, steps=self.options.steps)

    @functools.cached_property
    def key(self) -> str:
        """The cache folder's name: a hash of the texts, the overlap and the training schedule."""
        targets, base = self.texts
        settings = {"targets": targets, "base": base, "overlap": self.options.overlap, "training": dataclasses.asdict(self.training)}
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]

    @functools.cached_property
    def folder(self) -> Path:
        """Where the data, the tokenizer and the models of these options are cached."""
        return cache_root() / COUNTERFACTUAL_BASE / self.key

    @functools.cached_property
    def vocabulary(self) -> list[str]:
        """The base corpus's words, which replace the words a near-duplicate does not keep."""
        return sorted({w for d in self.texts[1] for w in d.split() if w.isalpha()})

    def near_duplicates(self, seed: int, near: int) -> list[str]:
        """`near` near-duplicates of each target, the same for every model of this seed with `near` of them."""
        rng = random.Random(f"near-duplicates {seed} {near}")
        return [_near_duplicate(t, self.vocabulary, self.options.overlap, rng) for t in self.texts[0] for _ in range(near)]

    def training_documents(self, seed: int, exact: int, near: int) -> list[str]:
        """Base corpus + near-duplicates + `exact` copies of each target."""
        targets, base = self.texts
        return base + self.near_duplicates(seed, near) + [t for t in targets for _ in range(exact)]

    @functools.cached_property
    def tokenizer(self) -> PreTrainedTokenizerFast:
        """One BPE tokenizer for every model, trained on base + targets (deterministic) and cached."""
        folder = self.folder / "tokenizer"
        if not folder.is_dir():
            targets, base = self.texts
            save_atomically(folder, train_tokenizer(base + targets, MODEL.vocab_size).save_pretrained)
        return PreTrainedTokenizerFast.from_pretrained(folder)

    def data_files(self) -> tuple[Path, Path]:
        """The targets and the base corpus as JSONL files in the cache (the study's datasets read them)."""
        paths = self.folder / "data" / "targets.jsonl", self.folder / "data" / "base.jsonl"
        for path, texts in zip(paths, self.texts):
            if not path.is_file():
                atomic_write_text(path, "".join(json.dumps({"text": t}) + "\n" for t in texts))
        return paths

    def model_dir(self, name: str, progress: bool = True) -> Path:
        """The trained model `seed{S}-exact{E}-near{N}`, trained first (and cached) when missing."""
        seed, exact, near = parse_model_name(name)
        folder = self.folder / "models" / name
        if folder.is_dir():
            return folder
        if progress:
            tqdm.write(f"memrisk: training the pa-counterfactual model {name} (cached for later runs)")
        documents = self.training_documents(seed, exact, near)

        def save(staging: Path) -> None:
            train_model(documents, self.tokenizer, self.training, seed=seed, progress=progress).save_pretrained(staging)
            self.tokenizer.save_pretrained(staging)

        save_atomically(folder, save)
        return folder

    def cells(self) -> list[dict[str, Any]]:
        """One named cell per model: each composition's target model, then its baseline (no exact copy) if new."""
        cells: dict[str, dict[str, Any]] = {}
        for seed in range(self.options.seeds):
            for exact, near in self.options.compositions:
                for e in dict.fromkeys((exact, 0)):
                    name = f"seed{seed}-exact{e}-near{near}"
                    cells.setdefault(name, {"name": name, "set": {
                        "model.name": MODEL_PREFIX + name, "datasets.0.duplicates": e,
                        "datasets.0.near_duplicates": near, "prior_aware.seed": seed}})
        return list(cells.values())

    def settings(self) -> dict[str, Any]:
        """The experiment every cell changes: the targets scored by the prior_aware method, the prior from a bank of
        2 × 100 windows of the base corpus (m = 0 and n = 1: only the logs are compared, PA Eqs. 6–7)."""
        targets, base = self.data_files()
        return {
            "model": {"name": self.cells()[0]["set"]["model.name"], "batch_size": 16},
            "datasets": [{"name": "targets", "path": str(targets)}, {"name": "base", "path": str(base), "role": "bank"}],
            "windows": {"mode": "doc", "prefix_length": PREFIX_TOKENS, "suffix_length": SUFFIX_TOKENS},
            "policies": [{"name": "full"}],
            "methods": ["prior_aware"],
            "prior_aware": {"prefixes_per_trial": 100, "trials": 2, "m": 0.0, "n": 1.0},
        }


def parse_model_name(name: str) -> tuple[int, int, int]:
    """(seed, exact, near) of `seed{S}-exact{E}-near{N}`; any other name is an error."""
    match = MODEL_NAME.match(name)
    if match is None:
        raise MemriskError(f"pa-counterfactual model names are seed{{S}}-exact{{E}}-near{{N}}, got {name!r}")
    return int(match["seed"]), int(match["exact"]), int(match["near"])


def _near_duplicate(text: str, vocabulary: list[str], overlap: float, rng: random.Random) -> str:
    """`text` with `overlap` of its words kept in place and the others replaced by random corpus words."""
    words = text.split()
    keep = set(rng.sample(range(len(words)), max(1, round(overlap * len(words)))))
    return " ".join(w if i in keep else rng.choice(vocabulary) for i, w in enumerate(words))


@dataclass(frozen=True)
class CounterfactualModels:
    """The hooks of a `base: pa-counterfactual` study: the base and cells expanded from the options, its models
    trained when missing, and (for `--dry-run`) built as weightless skeletons."""

    options: CounterfactualOptions = CounterfactualOptions()
    progress: bool = True

    @classmethod
    def of(cls, study: str | Path | dict[str, Any], progress: bool = True) -> CounterfactualModels:
        """The hooks for a study (YAML path or mapping), with its `pa-counterfactual:` section."""
        data = study if isinstance(study, dict) else read_yaml_mapping(study, "base, grid")
        options = validated(CounterfactualOptions, data.get(COUNTERFACTUAL_BASE) or {}, f"study section {COUNTERFACTUAL_BASE}")
        return cls(options, progress)

    @functools.cached_property
    def corpus(self) -> CounterfactualCorpus:
        return CounterfactualCorpus(self.options)

    def prepare(self, data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
        """The study mapping with `base: pa-counterfactual` replaced by the experiment and one cell per model (each
        cell names its model, so `overrides` change nothing here)."""
        if "cells" in data:
            raise MemriskError("a base: pa-counterfactual study makes its cells (one per model); leave out cells:")
        kept = {key: value for key, value in data.items() if key != COUNTERFACTUAL_BASE}
        return kept | {"base": self.corpus.settings(), "cells": self.corpus.cells()}

    def load(self, config: ExperimentConfig) -> LanguageModel:
        """The cell's model, trained first when missing."""
        name = config.model.name.removeprefix(MODEL_PREFIX)
        path = self.corpus.model_dir(name, self.progress)
        lm = load_run_model(config.model_copy(update={"model": config.model.model_copy(update={"name": str(path)})}))
        lm.name = config.model.name
        return lm

    def skeleton(self, name: str, revision: str | None, gguf_file: str | None) -> tuple[LanguageModel, int]:
        """The model a cell trains, on the meta device (nothing trained), with its parameter count."""
        parse_model_name(name.removeprefix(MODEL_PREFIX))
        model = skeleton_model(self.corpus.tokenizer, self.corpus.training)
        return LanguageModel(model, self.corpus.tokenizer, name=name), sum(p.numel() for p in model.parameters())
