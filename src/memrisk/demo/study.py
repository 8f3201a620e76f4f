"""The demo's experiment as a study (docs/studies.md): `base: demo` (with `demo: {seed: 0}`) stands for the experiment
`memrisk demo` runs, and a model named `demo:SIZE` for the demo model of that size (`memrisk.demo.train.SIZES`), read
from the demo's cache and trained first when missing; `base: pa-counterfactual` is `memrisk.demo.counterfactual`'s. The
study layer knows none of them: the CLI hands it the hooks `study_models` picks."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from transformers import PreTrainedTokenizerFast

from memrisk.config import ExperimentConfig, read_yaml_mapping, validated
from memrisk.demo.corpus import DemoCorpus, build_demo_corpus
from memrisk.demo.counterfactual import COUNTERFACTUAL_BASE, CounterfactualModels
from memrisk.demo.experiment import demo_batch_size, demo_generic, demo_settings, write_demo_corpus
from memrisk.demo.train import (
    DEFAULT_SIZE, cached_model_dir, skeleton_model, train_demo_model, train_tokenizer, training_config,
)
from memrisk.errors import MemriskError
from memrisk.models.backend import LanguageModel
from memrisk.runner import load_run_model
from memrisk.study import skeleton

DEMO_BASE = "demo"
"""`base: demo` in a study YAML: the demo's experiment."""
MODEL_PREFIX = "demo:"
"""A model named `demo:SIZE` is the demo model of that size."""
MODEL_KEY = "model.name"


class DemoOptions(BaseModel):
    """A study's `demo:` section: the corpus and training seed (as `memrisk demo --seed`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = 0


def demo_model_name(size: str) -> str:
    """The model name a study gives the demo model of `size`."""
    return f"{MODEL_PREFIX}{size}"


def demo_size(name: str) -> str | None:
    """The size a `demo:SIZE` model name names (checked against the sizes table), None for any other model."""
    if not name.startswith(MODEL_PREFIX):
        return None
    size = name.removeprefix(MODEL_PREFIX)
    training_config(size)
    return size


def sizes_study(sizes: list[str], seed: int) -> dict[str, Any]:
    """The study `memrisk demo --sizes` runs: the demo's experiment, one cell per size, named by it."""
    if not sizes or len(set(sizes)) != len(sizes):
        raise MemriskError(f"demo sizes must be distinct and at least one, got {','.join(sizes)!r}")
    for size in sizes:
        training_config(size)
    cells = [{"name": size, "set": {MODEL_KEY: demo_model_name(size)}} for size in sizes]
    return {"base": DEMO_BASE, "demo": {"seed": seed}, "cells": cells}


@functools.cache
def demo_corpus(seed: int) -> DemoCorpus:
    """The demo corpus of `seed`, built once per process."""
    return build_demo_corpus(seed)


@functools.cache
def demo_tokenizer(seed: int, vocab_size: int) -> PreTrainedTokenizerFast:
    """The tokenizer every demo size of this vocabulary trains first (BPE training is deterministic), without a model."""
    return train_tokenizer(demo_corpus(seed).training_documents, vocab_size)


@dataclass(frozen=True)
class DemoModels:
    """The demo's hooks into a study: `base: demo` expanded, `demo:SIZE` models loaded (trained when missing) and,
    for `--dry-run`, built as weightless skeletons. Any other base or model passes through unchanged."""

    seed: int = 0
    progress: bool = True

    @classmethod
    def of(cls, study: str | Path | dict[str, Any], progress: bool = True) -> DemoModels:
        """The hooks for a study (YAML path or mapping), with the seed of its `demo:` section."""
        data = study if isinstance(study, dict) else read_yaml_mapping(study, "base, grid")
        return cls(validated(DemoOptions, data.get("demo") or {}, "study section demo").seed, progress)

    def prepare(self, data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
        """The study mapping with `base: demo` replaced by the demo's experiment and its `demo:` section dropped; its
        batch is the demo's own models' unless the grid, a cell or `overrides` (`--set model.name=…`) names another model."""
        if data.get("base") != DEMO_BASE:
            if "demo" in data:
                raise MemriskError("the study section demo: applies only with base: demo")
            return data
        own = all(demo_size(name) is not None for name in _model_names(data, overrides))
        corpus = demo_corpus(self.seed)
        lm, _ = self.skeleton(demo_model_name(DEFAULT_SIZE), None, None)
        base = demo_settings(corpus, demo_model_name(DEFAULT_SIZE), demo_generic(corpus, lm), batch_size=demo_batch_size(own))
        return {key: value for key, value in data.items() if key != "demo"} | {"base": base}

    def load(self, config: ExperimentConfig) -> LanguageModel:
        """The cell's model: a `demo:SIZE` model from the demo's cache, trained first when missing; any other as run."""
        name = config.model.name
        size = demo_size(name)
        if size is None:
            return load_run_model(config)
        corpus, training = demo_corpus(self.seed), training_config(size)
        write_demo_corpus(corpus)
        if self.progress and not cached_model_dir(corpus, self.seed, training).is_dir():
            print(f"memrisk demo: training the {size} model (seed {self.seed}; cached for later runs)")
        path = train_demo_model(corpus, seed=self.seed, progress=self.progress, config=training)
        lm = load_run_model(config.model_copy(update={"model": config.model.model_copy(update={"name": str(path)})}))
        lm.name = name
        return lm

    def skeleton(self, name: str, revision: str | None, gguf_file: str | None) -> tuple[LanguageModel, int]:
        """A `demo:SIZE` model built from its training config on the meta device (nothing trained), with its
        parameter count; any other model as `memrisk.study.skeleton` reads it."""
        size = demo_size(name)
        if size is None:
            return skeleton(name, revision, gguf_file)
        training = training_config(size)
        tokenizer = demo_tokenizer(self.seed, training.vocab_size)
        model = skeleton_model(tokenizer, training)
        return LanguageModel(model, tokenizer, name=name), sum(p.numel() for p in model.parameters())


def _model_names(data: dict[str, Any], overrides: dict[str, Any]) -> list[str]:
    """The model names a study mapping's overrides (`--set`), grid and named cells set."""
    grid = data.get("grid") if isinstance(data.get("grid"), dict) else {}
    names = [overrides[MODEL_KEY]] if MODEL_KEY in overrides else []
    names += list(grid.get(MODEL_KEY) or [])
    for cell in data.get("cells") or []:
        changes = cell.get("set") if isinstance(cell, dict) else None
        if isinstance(changes, dict) and MODEL_KEY in changes:
            names.append(changes[MODEL_KEY])
    return [name for name in names if isinstance(name, str)]


def study_models(study: str | Path | dict[str, Any], progress: bool = True) -> DemoModels | CounterfactualModels:
    """The hooks a study's named base needs: `base: pa-counterfactual`'s, else the demo's (which pass any other base
    and model through unchanged)."""
    data = study if isinstance(study, dict) else read_yaml_mapping(study, "base, grid")
    if data.get("base") == COUNTERFACTUAL_BASE:
        return CounterfactualModels.of(data, progress)
    if COUNTERFACTUAL_BASE in data:
        raise MemriskError(f"the study section {COUNTERFACTUAL_BASE}: applies only with base: {COUNTERFACTUAL_BASE}")
    return DemoModels.of(data, progress)
