"""A run with a `corpus:` section on a tiny saved model: per-window corpus counts equal brute force, the summary bins
extraction by count, and the corpus is part of what a resume must share."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from memrisk.cli import main
from memrisk.config import load_config, parse_config
from memrisk.errors import MemriskError
from memrisk.methods.corpus_counts import bin_label, count_bin
from memrisk.report.text import summary_table
from memrisk.runner import run_experiment
from tests.conftest import WORDS
from tests.integration.test_run import STORY, records, write_config
from tests.unit.test_corpus_index import brute_force

EXTRA = [" ".join(STORY.split()[40:70])] * 3 + [" ".join(WORDS[:12])]
"""Training documents besides the story: one stretch of it three more times, and the vocabulary's first words once."""


def corpus_config(tmp_path: Path, model_dir: Path, **corpus) -> Path:
    """The test_run experiment (book-mode story, doc-mode control) on greedy and p_z, with the story and EXTRA as corpus."""
    path = write_config(tmp_path, model_dir, methods=["probabilistic", "greedy"])
    config = yaml.safe_load(path.read_text())
    config["corpus"] = corpus or {"paths": ["story.txt"], "datasets": [{"name": "extra", "documents": EXTRA}]}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture
def counted_run(tmp_path, model_dir, monkeypatch, word_model):
    monkeypatch.setenv("MEMRISK_CACHE", str(tmp_path / "cache"))
    config = load_config(corpus_config(tmp_path, model_dir))
    summary = run_experiment(config, tmp_path / "out", progress=False)
    return config, summary, records(tmp_path / "out"), [word_model.encode(text) for text in [STORY, *EXTRA]]


def test_a_corpus_section_adds_the_method_and_counts_equal_brute_force(counted_run):
    config, _, rows, corpus = counted_run
    assert config.methods == ["probabilistic", "greedy", "corpus_counts"]
    for row in rows:
        window = row["prefix_ids"] + row["suffix_ids"]
        assert (row["corpus_count.suffix"], row["corpus_count.window"]) == (brute_force(corpus, row["suffix_ids"]), brute_force(corpus, window))
    story = [row for row in rows if row["dataset"] == "story"]
    assert all(row["corpus_count.window"] >= 1 for row in story)  # every story window is in the corpus
    assert max(row["corpus_count.window"] for row in story) >= 4  # the stretch EXTRA repeats: once in the story, 3 more times


def test_the_summary_bins_extraction_by_window_count(counted_run, tmp_path):
    _, summary, rows, _ = counted_run
    for dataset in ("story", "control"):
        part = [row for row in rows if row["dataset"] == dataset]
        entry = summary["datasets"][dataset]["corpus_counts"]
        window = np.array([row["corpus_count.window"] for row in part])
        assert entry["median_window"] == float(np.median(window)) and entry["max_window"] == int(window.max())
        assert entry["windows_in_corpus"] == int((window > 0).sum())
        bins = count_bin(window)
        expected = [{"bin": bin_label(b), "windows": int((bins == b).sum()),
                     "greedy": sum(row["greedy_exact"] for row, member in zip(part, bins == b) if member)} for b in np.unique(bins)]
        assert [{"bin": e["bin"], "windows": e["windows"], "greedy": e["extracted"]["greedy"]} for e in entry["by_window_count"]] == expected
        assert set(entry["by_window_count"][0]["extracted"]) == {"greedy", "probabilistic.topk3", "probabilistic.full"}
    setup = json.loads((tmp_path / "out" / "corpus_counts.json").read_text())
    assert setup["documents"] == 1 + len(EXTRA) and setup["engine"] == "infini-gram" and len(setup["tokenizer"]["fingerprint"]) == 64
    assert summary["corpus_counts_settings"] == setup and summary["signatures"]["corpus_counts"].startswith("corpus_counts|engine:infini-gram|")


def test_an_edited_corpus_is_a_changed_setting(counted_run, tmp_path):
    config = load_config(tmp_path / "exp.yaml")
    edited = config.model_copy(update={"corpus": config.corpus.model_copy(update={"datasets": [config.corpus.datasets[0].model_copy(update={"documents": EXTRA[:1]})]})})
    with pytest.raises(MemriskError, match="corpus:extra"):
        run_experiment(edited, tmp_path / "out", progress=False)


def test_counts_need_a_corpus_and_a_corpus_needs_documents_or_an_index(model_dir):
    base = {"model": {"name": str(model_dir)}, "datasets": [{"name": "d", "documents": ["the cat"]}]}
    with pytest.raises(MemriskError, match="method corpus_counts counts windows in the training corpus, and the config has no corpus: section"):
        parse_config(base | {"methods": ["greedy", "corpus_counts"]})
    with pytest.raises(MemriskError, match="corpus: corpus needs datasets, paths or an index_dir"):
        parse_config(base | {"corpus": {}})
    assert parse_config(base | {"corpus": {"index_dir": "somewhere"}}).methods == ["probabilistic", "greedy", "corpus_counts"]


def test_a_prebuilt_index_dir_serves_without_documents(counted_run, tmp_path, model_dir):
    built = json.loads((tmp_path / "out" / "corpus_counts.json").read_text())["folder"]
    config = load_config(corpus_config(tmp_path, model_dir, index_dir=built))
    run_experiment(config, tmp_path / "again", progress=False)
    first, again = counted_run[2], records(tmp_path / "again")
    assert [(r["corpus_count.suffix"], r["corpus_count.window"]) for r in again] == [(r["corpus_count.suffix"], r["corpus_count.window"]) for r in first]


def test_the_run_report_draws_extraction_against_the_corpus_count(counted_run, tmp_path):
    _, summary, _, _ = counted_run
    assert main(["report", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "Occurrences in the training corpus" in page and "Index of 5 documents" in page
    assert (tmp_path / "out" / "figures" / "corpus-counts.png").stat().st_size > 1000
    story = summary["datasets"]["story"]["corpus_counts"]
    assert f"<td>story</td><td class=\"num\">{summary['datasets']['story']['examples']}</td>" in page
    assert story["windows_in_corpus"] == summary["datasets"]["story"]["examples"]
    n = summary["datasets"]["story"]["examples"]
    assert (f"  story    windows in the corpus {n}/{n}  median window count {story['median_window']:g}  median suffix count "
            f"{story['median_suffix']:g}") in summary_table(summary).splitlines()


def test_a_study_draws_the_general_fig6_per_cell(tmp_path, model_dir, other_model_dir, monkeypatch, word_model):
    monkeypatch.setenv("MEMRISK_CACHE", str(tmp_path / "cache"))
    base = yaml.safe_load(corpus_config(tmp_path, model_dir).read_text())
    cells = [{"name": "first", "set": {"model.name": str(model_dir)}}, {"name": "second", "set": {"model.name": str(other_model_dir)}}]
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({"base": base, "cells": cells}), encoding="utf-8")
    assert main(["study", str(tmp_path / "study.yaml"), "--out", str(tmp_path / "study")]) == 0
    with open(tmp_path / "study" / "figures" / "np-fig6-corpus-counts.csv", encoding="utf-8") as handle:
        figure = list(csv.DictReader(handle))
    for cell in ("first", "second"):
        rows = records(tmp_path / "study" / "cells" / cell)
        bins = count_bin(np.array([row["corpus_count.window"] for row in rows]))
        expected = {(bin_label(b), "greedy (verbatim)"): f"{sum(r['greedy_exact'] for r, m in zip(rows, bins == b) if m)} of {int((bins == b).sum())}"
                    for b in np.unique(bins)}
        drawn = {(row["bin"], row["measure"]): row["of"] for row in figure if row["cell"] == cell and row["measure"] == "greedy (verbatim)"}
        assert drawn == expected
        assert {row["measure"] for row in figure if row["cell"] == cell} == {
            "greedy (verbatim)", "p_z ≥ τ_min (topk3)", "p_z ≥ τ_min (full)", "(n,p) = (10, 0.9)"}
    assert len(list((tmp_path / "cache" / "corpus-index").iterdir())) == 1  # one tokenizer, one index for both cells
    assert "Fig. 6 (measured counts)" in (tmp_path / "study" / "report.html").read_text(encoding="utf-8")


def test_counts_alone_are_reported_without_a_chart(tmp_path, model_dir, monkeypatch, word_model):
    monkeypatch.setenv("MEMRISK_CACHE", str(tmp_path / "cache"))
    path = corpus_config(tmp_path, model_dir)
    config = yaml.safe_load(path.read_text()) | {"methods": ["corpus_counts"]}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    summary = run_experiment(load_config(path), tmp_path / "out", progress=False)
    assert [entry["extracted"] for entry in summary["datasets"]["story"]["corpus_counts"]["by_window_count"]] == [{}] * len(
        summary["datasets"]["story"]["corpus_counts"]["by_window_count"])
    assert main(["report", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "No extraction chart: the run&#x27;s methods (corpus_counts) include no extraction method" in page
