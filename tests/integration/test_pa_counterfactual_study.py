"""`base: pa-counterfactual` (PA paper §4.1.3 as a study): the compositions' training data, one cell per model with
its baseline, the models trained once and cached, and PA Figs. 2–3 drawn from a bounded study (3 compositions,
1 seed, models trained for a few steps)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from memrisk.demo.counterfactual import (
    COUNTERFACTUAL_BASE, CounterfactualCorpus, CounterfactualModels, CounterfactualOptions, parse_model_name,
)
from memrisk.demo.study import DemoModels, study_models
from memrisk.errors import MemriskError
from memrisk.report.html import write_report
from memrisk.study import load_study, run_study

STUDY = Path(__file__).parents[2] / "studies" / "pa-counterfactual.yaml"
BOUNDED = {"seeds": 1, "targets": 2, "documents": 120, "steps": 4, "compositions": [[0, 4], [2, 2], [4, 0]]}
QUICK = {"prior_aware.prefixes_per_trial": 10}


@pytest.fixture
def cache(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("MEMRISK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_ready_study_has_the_papers_compositions_scaled_by_a_fifth_with_a_baseline_each(cache) -> None:
    models = study_models(STUDY, progress=False)
    assert isinstance(models, CounterfactualModels)
    _, cells = load_study(STUDY, models.prepare)
    names = [cell.name for cell in cells]
    assert len(names) == 26 and len(set(names)) == 26
    paper = ((0, 180), (10, 150), (20, 120), (30, 90), (40, 60), (50, 30), (60, 0))
    assert models.options.compositions == tuple((e // 5, n // 5) for e, n in paper)
    for cell in cells:
        seed, exact, near = parse_model_name(cell.name)
        targets = cell.config.datasets[0]
        assert (targets.duplicates, targets.near_duplicates, cell.config.prior_aware.seed) == (exact, near, seed)
        assert cell.config.model.name == f"pa-counterfactual:{cell.name}"
    for seed in (0, 1):
        for exact, near in models.options.compositions:
            assert f"seed{seed}-exact0-near{near}" in names, "every composition has its counterfactual baseline"


def test_a_model_and_its_baseline_share_base_corpus_and_near_duplicates_and_differ_by_the_exact_copies(cache) -> None:
    corpus = CounterfactualCorpus(CounterfactualOptions(targets=2, documents=50))
    targets, base = corpus.texts
    assert len(targets) == 2 and all(len(t.split()) == 120 for t in targets) and len(base) == 50
    model, baseline = corpus.training_documents(0, 3, 5), corpus.training_documents(0, 0, 5)
    assert model == baseline + [t for t in targets for _ in range(3)]
    assert baseline[:50] == base and len(baseline) == 50 + 2 * 5
    assert corpus.near_duplicates(0, 5) != corpus.near_duplicates(1, 5), "each seed draws its own near-duplicates"
    for target, copies in zip(targets, (baseline[50:55], baseline[55:60])):
        for copy in copies:
            kept = sum(a == b for a, b in zip(target.split(), copy.split()))
            assert len(copy.split()) == 120 and kept >= 24, "20% of the 120 words stay in place (more by chance)"


def test_bad_settings_are_one_clear_error(cache) -> None:
    with pytest.raises(MemriskError, match="study section pa-counterfactual: seeds: .*greater than or equal to 1"):
        study_models({"base": COUNTERFACTUAL_BASE, COUNTERFACTUAL_BASE: {"seeds": 0}})
    with pytest.raises(MemriskError, match="applies only with base: pa-counterfactual"):
        study_models({"base": {"model": {"name": "x"}}, COUNTERFACTUAL_BASE: {}})
    with pytest.raises(MemriskError, match="makes its cells"):
        CounterfactualModels().prepare({"base": COUNTERFACTUAL_BASE, "cells": [{"name": "a"}]}, {})
    with pytest.raises(MemriskError, match=r"seed\{S\}-exact\{E\}-near\{N\}, got 'exact2'"):
        parse_model_name("exact2")
    assert isinstance(study_models({"base": {"model": {"name": "x"}}}), DemoModels)


def test_a_bounded_study_trains_each_model_once_and_draws_pa_figures_2_and_3(cache, tmp_path, capsys) -> None:
    study = {"base": COUNTERFACTUAL_BASE, COUNTERFACTUAL_BASE: BOUNDED}
    models = study_models(study)
    out = tmp_path / "study"
    run_study(study, out, progress=False, load=models.load, prepare=models.prepare, overrides=QUICK)
    write_report([out])
    trained = capsys.readouterr().out.count("training the pa-counterfactual model")
    expected = ["seed0-exact0-near0", "seed0-exact0-near2", "seed0-exact0-near4", "seed0-exact2-near2", "seed0-exact4-near0"]
    assert sorted(p.name for p in (cache / COUNTERFACTUAL_BASE).glob("*/models/*")) == expected
    assert trained == 5, "3 target models and the baselines of the compositions with exact copies"
    with (out / "figures" / "pa-fig2-counterfactual.csv").open() as f:
        rows = {(int(r["exact"]), int(r["near"])): r for r in csv.DictReader(f)}
    assert set(rows) == {(0, 4), (2, 2), (4, 0)}
    assert float(rows[(0, 4)]["counterfactual"]) == 0.0, "a model without exact copies is its own baseline"
    assert (out / "figures" / "pa-fig3-counterfactual-sequences.png").is_file()
    again = tmp_path / "again"
    run_study(study, again, progress=False, load=study_models(study).load, prepare=models.prepare, overrides=QUICK)
    assert "training the pa-counterfactual model" not in capsys.readouterr().out, "cached models are not trained again"
