"""The prior-aware paper's figures as a study reproduces them: each CSV recomputed from the cells' records; and the
`bank` dataset role the counterfactual study draws its prefix bank from."""

from __future__ import annotations

import csv
import functools
import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from scipy.stats import pearsonr, spearmanr

import memrisk
from memrisk.config import parse_config
from memrisk.errors import MemriskError
from memrisk.report.paper.prior_aware import correlations
from tests.conftest import WORDS
from tests.integration.test_paper_cbs import window_rows
from tests.integration.test_paper_np import check_spec, data_rows, page_specs, run_study, sampled_texts

LN10 = math.log(10.0)
SLUGS = ("pa-fig2-counterfactual", "pa-fig3-counterfactual-sequences", "pa-fig4-models", "pa-fig5-prefix-length")
BANK = [" ".join(random.Random(i).choices(WORDS, k=80)) for i in range(3)]


@pytest.fixture(scope="module")
def texts(word_model, other_model_dir) -> list[str]:
    """Two texts of each word model's own writing, so that P(s|p) is far from 0 under one of them."""
    return sampled_texts(word_model, 2, seed=1) + sampled_texts(memrisk.load_model(str(other_model_dir)), 2, seed=1)


def experiment(model_dir: Path, texts: list[str], **overrides) -> dict:
    """Prior-aware (with teacher forcing) on a target dataset, a control and a bank-only corpus of random words."""
    return {
        "model": {"name": str(model_dir), "batch_size": 8},
        "datasets": [
            {"name": "targets", "documents": texts},
            {"name": "control", "documents": [" ".join(random.Random(9).choices(WORDS, k=120))], "role": "control"},
            {"name": "bank", "documents": BANK, "role": "bank"},
        ],
        "windows": {"mode": "book", "prefix_length": 6, "suffix_length": 3, "stride": 120},
        "policies": [{"top_k": 3}],
        "methods": ["probabilistic", "prior_aware"],
        "prior_aware": {"prefixes_per_trial": 6, "trials": 2, "m": 1e-4, "n": 3.0},
        "tau_min": 1e-3,
    } | overrides


def composition(name: str, model: Path, exact: int, near: int) -> dict:
    """A named cell whose targets were (so its config says) in the model's training data as `exact` copies and `near`
    near-duplicates."""
    return {"name": name, "set": {"model.name": str(model), "datasets.0.duplicates": exact, "datasets.0.near_duplicates": near}}


@pytest.fixture(scope="module")
def counterfactual_study(tmp_path_factory, model_dir, other_model_dir, texts) -> Path:
    """Compositions (0 exact, 4 near) and (2, 2), the latter with two models and a baseline (0, 2)."""
    cells = [composition("exact0-near4", model_dir, 0, 4), composition("exact2-near2-a", model_dir, 2, 2),
             composition("exact2-near2-b", other_model_dir, 2, 2), composition("baseline-near2", other_model_dir, 0, 2)]
    return run_study(tmp_path_factory.mktemp("pa-counterfactual"), {"base": experiment(model_dir, texts), "cells": cells})


@pytest.fixture(scope="module")
def prefix_study(tmp_path_factory, model_dir, texts) -> Path:
    """One model, prefix lengths 2, 4 and 6."""
    return run_study(tmp_path_factory.mktemp("pa-prefix"), {"base": experiment(model_dir, texts), "grid": {"windows.prefix_length": [2, 4, 6]}})


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))


@functools.cache
def records(study: Path, cell: str) -> list[dict]:
    """A cell's records (read once)."""
    return pq.read_table(study / "cells" / cell / "records").to_pylist()


def column(study: Path, cells: list[str], name: str, dataset: str = "targets") -> np.ndarray:
    """One column of a dataset's windows over the given cells."""
    return np.array([r[name] for cell in cells for r in records(study, cell) if r["dataset"] == dataset], dtype=np.float64)


def test_each_figure_applies_only_where_the_study_has_its_axes_and_methods(counterfactual_study, prefix_study) -> None:
    """Compositions with baselines and two models of two sizes: Figs. 2, 3, 4; a prefix-length axis on one model: Fig. 5."""
    expected = {counterfactual_study: {"pa-fig2-counterfactual", "pa-fig3-counterfactual-sequences", "pa-fig4-models"},
                prefix_study: {"pa-fig5-prefix-length"}}
    for study, slugs in expected.items():
        assert {s for s in SLUGS if (study / "figures" / f"{s}.csv").is_file()} == slugs
        assert all((study / "figures" / f"{s}.png").is_file() for s in slugs)
    page = (counterfactual_study / "report.html").read_text(encoding="utf-8")
    assert "prior-aware paper Fig. 2: counterfactual against prior-aware memorization" in page


def test_a_bank_dataset_is_only_drawn_from_for_the_prior(counterfactual_study) -> None:
    """Role `bank`: no windows, no summary entry, the prefix bank's default source; it needs the prior_aware method."""
    cell = counterfactual_study / "cells" / "exact0-near4"
    assert {r["dataset"] for r in records(counterfactual_study, "exact0-near4")} == {"targets", "control"}
    assert set(json.loads((cell / "summary.json").read_text())["datasets"]) == {"targets", "control"}
    assert json.loads((cell / "prior_aware.json").read_text())["bank_datasets"] == ["bank"]
    base = yaml.safe_load((counterfactual_study / "config.yaml").read_text())["base"]
    with pytest.raises(MemriskError, match=r"datasets \['bank'\] have role 'bank', which only the prior_aware method draws from"):
        parse_config(base | {"methods": ["probabilistic"]})
    with pytest.raises(MemriskError, match="every dataset has role 'bank'"):
        parse_config(base | {"datasets": [base["datasets"][2]]})


def test_counterfactual_rows_are_eqs_6_and_7_over_each_compositions_models_and_baselines(counterfactual_study) -> None:
    """Fig. 2: (0, 4) is its own baseline (Eq. 6 = 0); (2, 2) has two models and the (0, 2) model as baseline, which is
    not a composition of its own. Fig. 3: the same per sequence."""
    study = counterfactual_study
    groups = {(0, 4): (["exact0-near4"], ["exact0-near4"]), (2, 2): (["exact2-near2-a", "exact2-near2-b"], ["baseline-near2"])}
    rows = read_csv(study / "figures" / "pa-fig2-counterfactual.csv")
    assert [(int(r["exact"]), int(r["near"])) for r in rows] == list(groups)
    for row in rows:
        models, baselines = groups[(int(row["exact"]), int(row["near"]))]
        log_p, prior, base = column(study, models, "pa_log_p"), column(study, models, "pa_log_prior"), column(study, baselines, "pa_log_p")
        assert (int(row["models"]), int(row["baselines"]), int(row["windows"])) == (len(models), len(baselines), log_p.size)
        assert float(row["counterfactual"]) == pytest.approx(log_p.mean() - base.mean(), abs=1e-9)
        assert float(row["prior_aware"]) == pytest.approx(log_p.mean() - prior.mean(), abs=1e-9)
    assert float(rows[0]["counterfactual"]) == 0.0
    sequences = read_csv(study / "figures" / "pa-fig3-counterfactual-sequences.csv")
    for row in sequences:
        models, baselines = groups[(int(row["exact"]), int(row["near"]))]
        mine = [[r for r in records(study, cell) if r["example_id"] == row["example_id"]][0] for cell in models]
        base = [[r for r in records(study, cell) if r["example_id"] == row["example_id"]][0] for cell in baselines]
        mean_p = np.mean([r["pa_log_p"] for r in mine])
        assert float(row["counterfactual"]) == pytest.approx(mean_p - np.mean([r["pa_log_p"] for r in base]), abs=1e-9)
        assert float(row["prior_aware"]) == pytest.approx(mean_p - np.mean([r["pa_log_prior"] for r in mine]), abs=1e-9)
    assert len(sequences) == 2 * len([r for r in records(study, "exact0-near4") if r["dataset"] == "targets"])


def test_correlations_are_pearson_and_spearman_with_tied_ranks() -> None:
    """The coefficients in the titles of Figs. 2–3 (and the counterfactual script's results) equal scipy's."""
    x, y = [0.0, 5.7, 26.7, 30.2, 30.2, 59.5, 91.2], [0.47, 0.34, 2.96, 2.94, 5.0, 7.3, 11.1]
    pearson, spearman = correlations(x, y)
    assert pearson == pytest.approx(pearsonr(x, y)[0]) and spearman == pytest.approx(spearmanr(x, y)[0])
    assert correlations([1.0, 1.0], [2.0, 3.0]) == (None, None)


def test_model_rows_count_extractable_and_pa_memorized_windows_per_model(counterfactual_study) -> None:
    """Fig. 4: per cell, the target windows with P(s|p) > m, with also P(s|p)/v̂ > n, their share, the parameter count."""
    rows = read_csv(counterfactual_study / "figures" / "pa-fig4-models.csv")
    assert len({r["parameters"] for r in rows}) == 2
    assert [r["cell"] for r in rows] == ["exact0-near4", "exact2-near2-a", "exact2-near2-b", "baseline-near2"]
    for row in rows:
        stored = [r for r in records(counterfactual_study, row["cell"]) if r["dataset"] == "targets"]
        extractable = [r["pa_log_p"] > math.log(1e-4) for r in stored]
        memorized = [e and r["pa_log_ratio"] > math.log(3.0) for e, r in zip(extractable, stored)]
        assert (int(row["windows"]), int(row["extractable"]), int(row["pa_memorized"])) == (len(stored), sum(extractable), sum(memorized))
        assert row["pa_share"] == ("" if not any(extractable) else str(sum(memorized) / sum(extractable)))
        assert int(row["p_z_verbatim"]) == sum(r["log_p.topk3"] >= math.log(1e-3) for r in stored)
        versions = json.loads((counterfactual_study / "cells" / row["cell"] / "versions.json").read_text())
        assert int(row["parameters"]) == versions["model"]["parameters"]
    assert any(int(r["pa_memorized"]) for r in rows) and any(int(r["extractable"]) > int(r["pa_memorized"]) for r in rows)


def test_prefix_rows_count_per_prefix_length(prefix_study) -> None:
    """Fig. 5: per prefix length (the prompt's, and the bank's by default) the extractable and PA-memorized counts."""
    rows = read_csv(prefix_study / "figures" / "pa-fig5-prefix-length.csv")
    assert [(r["prefix_length"], r["bank_prefix_length"]) for r in rows] == [("2", "2"), ("4", "4"), ("6", "6")]
    for row in rows:
        stored = [r for r in records(prefix_study, row["cell"]) if r["dataset"] == "targets"]
        assert all(len(r["prefix_ids"]) == int(row["prefix_length"]) for r in stored)
        assert int(row["extractable"]) == sum(r["pa_extractable"] for r in stored)
        assert int(row["pa_memorized"]) == sum(r["pa_memorized"] for r in stored)


def test_fig3_points_open_a_real_window_of_the_first_model_of_their_composition(counterfactual_study) -> None:
    """Each PA Fig. 3 point is one sequence: it carries the cell (the composition's first model) and window it opens,
    hover shows them with its dataset and both metrics, and it sits at the CSV's metrics in log10; the title counts
    the points and the rows left out."""
    page = (counterfactual_study / "report.html").read_text(encoding="utf-8")
    spec = json.loads(re.search(r'data-target="chart-pa-fig3-counterfactual-sequences"[^>]*>(.*?)</script>', page, re.S).group(1))
    check_spec(spec, [{"id", "dataset", "cell", "exact", "near", "x", "y"}])
    points = window_rows(spec)
    rows = read_csv(counterfactual_study / "figures" / "pa-fig3-counterfactual-sequences.csv")
    defined = [r for r in rows if r["counterfactual"] and r["prior_aware"]
               and math.isfinite(float(r["counterfactual"])) and math.isfinite(float(r["prior_aware"]))]
    assert len(points) == len(defined) > 10
    assert spec["title"][1].startswith(f"{len(defined)} points: Pearson ")
    assert (f"; {len(rows) - len(defined)} with an undefined metric left out" in spec["title"][1]) == (len(rows) > len(defined))
    for point in points:
        assert point["id"] in {str(r["example_id"]) for r in records(counterfactual_study, point["cell"])}
        row = next(r for r in defined if r["example_id"] == point["id"] and r["cell"] == point["cell"]
                   and point["exact"] == f"{r['exact']} exact copies")
        assert point["x"] == pytest.approx(float(row["counterfactual"]) / LN10) and point["y"] == pytest.approx(float(row["prior_aware"]) / LN10)


def test_figs_2_4_and_5_are_vega_lite_charts_of_their_rows(counterfactual_study, prefix_study) -> None:
    """Fig. 2: a labelled point per composition at its log10 metrics; Fig. 4: each count and PA share as k of n, by
    model and cell; Fig. 5: each count as k of n windows against the prefix length. None of them is a window."""
    specs = page_specs(counterfactual_study)
    check_spec(specs["pa-fig2-counterfactual"], [{"dataset", "label", "windows", "models", "baselines", "x", "y"}], toggle=False)
    compositions = read_csv(counterfactual_study / "figures" / "pa-fig2-counterfactual.csv")
    points = data_rows(specs["pa-fig2-counterfactual"])
    assert [p["label"] for p in points] == [f"({r['exact']}, {r['near']})" for r in compositions]
    assert [(p["x"], p["y"]) for p in points] == [
        (pytest.approx(float(r["counterfactual"]) / LN10), pytest.approx(float(r["prior_aware"]) / LN10)) for r in compositions]

    check_spec(specs["pa-fig4-models"], [{"model", "cell", "dataset", "test", "of"}, {"model", "cell", "dataset", "share", "of"}])
    models = {r["cell"]: r for r in read_csv(counterfactual_study / "figures" / "pa-fig4-models.csv")}
    counts = [p for p in data_rows(specs["pa-fig4-models"]) if "test" in p]
    assert len(counts) == 2 * len(models)
    for point in counts:
        row = models[point["cell"]]
        key = "extractable" if point["test"].startswith("extractable") else "pa_memorized"
        assert point["sequences"] == int(row[key]) and point["of"] == f"{row[key]} of {row['windows']} windows"
    shares = [p for p in data_rows(specs["pa-fig4-models"]) if "share" in p]
    assert {p["cell"] for p in shares} == {c for c, r in models.items() if r["pa_share"]}
    for point in shares:
        row = models[point["cell"]]
        assert point["share"] == pytest.approx(100.0 * float(row["pa_share"]))
        assert point["of"] == f"{row['pa_memorized']} of {row['extractable']} extractable"

    spec = page_specs(prefix_study)["pa-fig5-prefix-length"]
    check_spec(spec, [{"series", "cell", "length", "of"}])
    prefixes = {r["cell"]: r for r in read_csv(prefix_study / "figures" / "pa-fig5-prefix-length.csv")}
    points = data_rows(spec)
    assert len(points) == 2 * len(prefixes) == 6
    for point in points:
        row = prefixes[point["cell"]]
        key = "extractable" if point["panel"].startswith("(a)") else "pa_memorized"
        assert point["length"] == int(row["prefix_length"]) and point["of"] == f"{row[key]} of {row['windows']} windows"
    assert not window_rows([specs["pa-fig2-counterfactual"], specs["pa-fig4-models"], spec])
