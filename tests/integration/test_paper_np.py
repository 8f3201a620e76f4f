"""The (n,p) paper's figures as a study reproduces them: each CSV recomputed from the cells' records."""

from __future__ import annotations

import csv
import functools
import json
import math
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import yaml

import memrisk
from memrisk.cli import main
from tests.conftest import WORDS
from tests.integration.test_paper_cbs import window_rows

STORY = random.Random(0).choices(WORDS, k=600)
SLUGS = ("np-fig2-sampling", "np-fig5-models", "np-fig6-duplicates", "np-fig12-policies", "np-fig13-histograms", "np-fig14-17-grid")


def sampled_texts(lm: memrisk.LanguageModel, count: int, seed: int) -> list[str]:
    """Texts of 150 words the model writes itself by top-3 sampling, so that its p_z of their suffixes is far from 0."""
    torch.manual_seed(seed)
    prompt = torch.tensor([lm.encode("the")] * count)
    out = lm.model.generate(prompt, do_sample=True, top_k=3, max_new_tokens=150, pad_token_id=0, bad_words_ids=[[0]])
    return [lm.decode(row) for row in out.tolist()]


@pytest.fixture(scope="module")
def texts(word_model, other_model_dir) -> list[str]:
    """Four texts, the first and third by the first word model, the others by the second."""
    first, second = sampled_texts(word_model, 2, seed=0), sampled_texts(memrisk.load_model(str(other_model_dir)), 2, seed=0)
    return [first[0], second[0], first[1], second[1]]


def experiment(model_dir: Path, texts: list[str], **overrides) -> dict:
    """Two target datasets of the models' own text, said to be in their training data once and four times, and a
    negative control of random words."""
    return {
        "model": {"name": str(model_dir), "batch_size": 8},
        "datasets": [
            {"name": "x1", "documents": texts[:2], "duplicates": 1},
            {"name": "x4", "documents": texts[2:], "duplicates": 4},
            {"name": "control", "documents": [" ".join(STORY[:150])], "role": "control"},
        ],
        "windows": {"mode": "book", "prefix_length": 6, "suffix_length": 4, "stride": 160},
        "policies": [{"top_k": 3}, {"name": "full"}],
        "methods": ["probabilistic", "greedy", "mc"],
        "mc": {"samples": [4, 32], "epsilon": 0},
        "tau_min": 1e-2,
    } | overrides


def run_study(folder: Path, study: dict) -> Path:
    """`memrisk study` on `study` into folder/out (which it returns)."""
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study), encoding="utf-8")
    assert main(["study", str(path), "--out", str(folder / "out")]) == 0
    return folder / "out"


@pytest.fixture(scope="module")
def policy_study(tmp_path_factory, model_dir, texts) -> Path:
    """One cell: one model, policies top-3 and full, Monte Carlo under top-3."""
    return run_study(tmp_path_factory.mktemp("np-policies"), {"base": experiment(model_dir, texts)})


@pytest.fixture(scope="module")
def model_study(tmp_path_factory, model_dir, other_model_dir, texts) -> Path:
    """Two models (named cells), the top-3 policy only, no Monte Carlo."""
    base = experiment(model_dir, texts, policies=[{"top_k": 3}], methods=["probabilistic", "greedy"])
    cells = [{"name": "first", "set": {"model.name": str(model_dir)}}, {"name": "second", "set": {"model.name": str(other_model_dir)}}]
    return run_study(tmp_path_factory.mktemp("np-models"), {"base": base, "cells": cells})


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))


@functools.cache
def stored_records(study: Path, cell: str) -> list[dict]:
    """A cell's records in stored order (read once)."""
    return pq.read_table(study / "cells" / cell / "records").to_pylist()


def records(study: Path, cell: str, role: str | None = None) -> list[dict]:
    """A cell's records in stored order, of one role when given."""
    return [r for r in stored_records(study, cell) if role is None or r["role"] == role]


def targets(study: Path, cell: str) -> list[dict]:
    """The target windows in the order the figures pool them: dataset by dataset."""
    rows = records(study, cell, "target")
    return [r for name in ("x1", "x4") for r in rows if r["dataset"] == name]


def page_specs(study: Path) -> dict[str, dict]:
    """Every chart of the study page as the page embeds it, by its figure's slug."""
    page = (study / "report.html").read_text(encoding="utf-8")
    found = re.findall(r'<script type="application/json" class="memrisk-chart" data-target="chart-([^"]+)"[^>]*>(.*?)</script>', page, re.S)
    return {slug: json.loads(spec) for slug, spec in found}


def walk(spec: Any) -> list[dict]:
    """Every object of a spec, at any depth."""
    if isinstance(spec, dict):
        return [spec] + [item for value in spec.values() for item in walk(value)]
    if isinstance(spec, list):
        return [item for value in spec for item in walk(value)]
    return []


def tooltips(spec: dict) -> list[set[str]]:
    """The fields each mark's tooltip shows (an aggregate by its operation, `count`)."""
    return [{t.get("field") or t["aggregate"] for t in item["encoding"]["tooltip"]}
            for item in walk(spec) if "mark" in item and isinstance(item.get("encoding", {}).get("tooltip"), list)]


def data_rows(spec: dict) -> list[dict]:
    """Every inline data row of a spec."""
    return [row for item in walk(spec) if isinstance(item.get("values"), list) for row in item["values"] if isinstance(row, dict)]


def n_axes(spec: dict) -> set[tuple[str, str]]:
    """The scale type and label format of every axis of the field `n`."""
    return {(x["scale"]["type"], x["axis"]["format"]) for x in walk(spec) if x.get("field") == "n" and "axis" in x}


def check_spec(spec: dict, fields: list[set[str]], toggle: bool = True) -> None:
    """A Vega-Lite spec with a title, JSON without NaN, no legend inside a plot, a legend that toggles series when
    `toggle`, and for each set of `fields` a mark whose tooltip shows them all."""
    assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/") and spec["title"]
    json.dumps(spec, allow_nan=False)
    assert toggle == any(item.get("bind") == "legend" for item in walk(spec) if "select" in item)
    legends = [item["legend"] for item in walk(spec) if isinstance(item.get("legend"), dict)]
    assert all(legend.get("orient", "right") == "right" for legend in legends)
    shown = tooltips(spec)
    for wanted in fields:
        assert any(wanted <= mark for mark in shown), (wanted, shown)


def reached(log_p: np.ndarray, n: float) -> np.ndarray:
    """1 − (1 − p_z)^n, written out."""
    return 1.0 - (1.0 - np.exp(log_p)) ** n


def test_each_figure_applies_only_where_the_study_has_its_axes_and_methods(policy_study, model_study) -> None:
    """One model and two policies with Monte Carlo: Figs. 2, 6, 12, 13, 14–17; two models with one policy: Figs. 5, 6,
    13, 14–17. Each drawn figure has its CSV, PNG and caption on the study page."""
    expected = {policy_study: {"np-fig2-sampling", "np-fig6-duplicates", "np-fig12-policies", "np-fig13-histograms", "np-fig14-17-grid"},
                model_study: {"np-fig5-models", "np-fig6-duplicates", "np-fig13-histograms", "np-fig14-17-grid"}}
    for study, slugs in expected.items():
        assert {s for s in SLUGS if (study / "figures" / f"{s}.csv").is_file()} == slugs
        assert all((study / "figures" / f"{s}.png").is_file() for s in slugs)
        page = (study / "report.html").read_text(encoding="utf-8")
        assert ("(n,p) paper Fig. 5: (n,p)-extraction rates" in page) == (study == model_study)
        assert "(n,p) paper Figs. 14–17: (n,p)-extraction rates against n, one panel per model" in page


def test_sampling_rows_hold_each_windows_estimate_and_p_z_under_the_mc_policy(policy_study) -> None:
    """Fig. 2: per window and budget N, p̂_z at ε = 0, p_z under the Monte Carlo policy (top-3) and 1 − (1 − ·)^N of both;
    the estimates converge on p_z (mean error at N = 32 below N = 4)."""
    rows = read_csv(policy_study / "figures" / "np-fig2-sampling.csv")
    assert {r["policy"] for r in rows} == {"topk3"}
    stored = {r["example_id"]: r for r in records(policy_study, "base")}
    assert len(rows) == 2 * len(stored) and {r["cell"] for r in rows} == {"base"}
    errors: dict[int, list[float]] = {4: [], 32: []}
    for row in rows:
        record, budget = stored[row["example_id"]], int(row["budget"])
        j = record["mc_samples"].index(budget)
        p_z = math.exp(record["log_p.topk3"])
        assert float(row["mc_estimate"]) == record["mc_estimate"][j][0] and float(row["p_z"]) == pytest.approx(p_z, rel=1e-12)
        assert float(row["theoretical_p"]) == pytest.approx(1.0 - (1.0 - p_z) ** budget, abs=1e-12)
        assert float(row["empirical_p"]) == pytest.approx(1.0 - (1.0 - record["mc_estimate"][j][0]) ** budget, abs=1e-12)
        assert (row["covered"] == "True") == (record["mc_low"][j][0] <= p_z <= record["mc_high"][j][0])
        errors[budget].append(abs(record["mc_estimate"][j][0] - p_z))
    assert np.mean(errors[32]) < np.mean(errors[4])


def test_curve_rows_are_the_np_rates_of_each_cell_and_policy_over_the_target_windows(policy_study, model_study) -> None:
    """Figs. 5, 12, 14–17: the share of target windows with 1 − (1 − p_z)^n ≥ p, the greedy rate and the share with p_z > 0."""
    for study, slug in ((policy_study, "np-fig12-policies"), (policy_study, "np-fig14-17-grid"), (model_study, "np-fig5-models")):
        rows = read_csv(study / "figures" / f"{slug}.csv")
        for row in rows:
            stored = targets(study, row["cell"])
            log_p = np.array([r[f"log_p.{row['policy']}"] for r in stored])
            assert int(row["windows"]) == len(stored) and len(stored) > 10
            assert float(row["rate"]) == pytest.approx(np.mean(reached(log_p, float(row["n"])) >= float(row["p"])))
            assert float(row["greedy_rate"]) == pytest.approx(np.mean([r["greedy_exact"] for r in stored]))
            assert float(row["max_rate"]) == pytest.approx(np.mean(log_p > -np.inf))
    policies = read_csv(policy_study / "figures" / "np-fig12-policies.csv")
    assert {(r["cell"], r["policy"]) for r in policies} == {("base", "topk3"), ("base", "full")}
    models = read_csv(model_study / "figures" / "np-fig5-models.csv")
    assert {r["cell"] for r in models} == {"first", "second"}
    first, second = ([float(r["rate"]) for r in models if r["cell"] == c] for c in ("first", "second"))
    assert first != second, "two different models give different curves"


def test_histogram_rows_hold_each_windows_perplexity_and_chance_within_100_samples(model_study) -> None:
    """Fig. 13: −log10 p_z / T (empty when p_z = 0) and 1 − (1 − p_z)^100 per target window, per model."""
    rows = read_csv(model_study / "figures" / "np-fig13-histograms.csv")
    for cell in ("first", "second"):
        stored = {r["example_id"]: r for r in targets(model_study, cell)}
        part = [r for r in rows if r["cell"] == cell]
        assert sorted(r["example_id"] for r in part) == sorted(stored)
        for row in part:
            log_p = stored[row["example_id"]]["log_p.topk3"]
            if log_p == -math.inf:
                assert row["log10_perplexity"] == "" and float(row["p_within_100"]) == 0.0
            else:
                assert float(row["log10_perplexity"]) == pytest.approx(-log_p / (4 * math.log(10.0)))
                assert float(row["p_within_100"]) == pytest.approx(1.0 - (1.0 - math.exp(log_p)) ** 100)


def test_duplicate_rows_give_each_rate_per_training_copy_count_and_model(policy_study, model_study) -> None:
    """Fig. 6: per cell and `duplicates:` the greedy, p_z ≥ τ_min and (n,p) rates of that dataset's windows."""
    for study in (policy_study, model_study):
        rows = read_csv(study / "figures" / "np-fig6-duplicates.csv")
        for row in rows:
            name = {"1": "x1", "4": "x4"}[row["duplicates"]]
            stored = [r for r in records(study, row["cell"]) if r["dataset"] == name]
            log_p = np.array([r["log_p.topk3"] for r in stored])
            expected = {"greedy": np.mean([r["greedy_exact"] for r in stored]), "p_z ≥ τ_min": np.mean(log_p >= math.log(1e-2))}
            if row["measure"] == "(n,p)":
                expected["(n,p)"] = np.mean(reached(log_p, float(row["n"])) >= float(row["p"]))
            assert row["datasets"] == name and int(row["windows"]) == len(stored)
            assert float(row["rate"]) == pytest.approx(expected[row["measure"]])
        cells = {r["cell"] for r in rows}
        assert len(rows) == len(cells) * 2 * 6
    assert {r["cell"] for r in read_csv(model_study / "figures" / "np-fig6-duplicates.csv")} == {"first", "second"}


CURVE_FIELDS = {"model", "cell", "policy", "series", "n", "rate", "of"}


def test_each_figure_is_an_interactive_vega_lite_chart_of_its_rows(policy_study, model_study) -> None:
    """The (n,p) curves show the CSV's rate at each n, also as k of n target windows, on a log n axis in SI units;
    Fig. 6 shows its rates as k of n windows; Fig. 13 counts the windows with p_z > 0 in bins; each has a PNG and SVG."""
    for study in (policy_study, model_study):
        specs = page_specs(study)
        for slug in {"np-fig5-models", "np-fig12-policies", "np-fig14-17-grid"} & set(specs):
            check_spec(specs[slug], [CURVE_FIELDS])
            assert n_axes(specs[slug]) == {("log", "~s")}
            rates = {(r["cell"], r["policy"], f"p = {float(r['p']):g}", int(r["n"])): (float(r["rate"]), int(r["windows"]))
                     for r in read_csv(study / "figures" / f"{slug}.csv")}
            points = [p for p in data_rows(specs[slug]) if p["series"].startswith("p = ")]
            drawn = {key for key in rates if slug != "np-fig12-policies" or key[2] in ("p = 0.1", "p = 0.9")}
            assert {(p["cell"], p["policy"], p["series"], p["n"]) for p in points} == drawn
            for point in points:
                rate, windows = rates[(point["cell"], point["policy"], point["series"], point["n"])]
                assert point["rate"] == pytest.approx(100.0 * rate) and point["of"] == f"{round(rate * windows)} of {windows}"
        check_spec(specs["np-fig6-duplicates"], [{"model", "cell", "copies", "measure", "rate", "of"}])
        rates = {(r["cell"], f"×{r['duplicates']}", r["measure"] if r["measure"] != "(n,p)" else f"(n,p) = ({int(r['n']):,}, {float(r['p']):g})"):
                 (float(r["rate"]), int(r["windows"])) for r in read_csv(study / "figures" / "np-fig6-duplicates.csv")}
        points = data_rows(specs["np-fig6-duplicates"])
        assert len(points) == len(rates)
        for point in points:
            rate, windows = rates[(point["cell"], point["copies"], point["measure"])]
            assert point["rate"] == pytest.approx(100.0 * rate) and point["of"] == f"{round(rate * windows)} of {windows}"
        histograms = specs["np-fig13-histograms"]
        check_spec(histograms, [{"panel", "perplexity", "count"}, {"panel", "within", "count"}], toggle=False)
        bars = [m for m in walk(histograms) if "mark" in m]
        assert [m["mark"]["type"] for m in bars] == ["bar", "bar"] and all(m["encoding"]["x"]["bin"] for m in bars)
        assert all((study / "figures" / f"{slug}.{kind}").stat().st_size > 1000 for slug in specs if slug.startswith("np-")
                   for kind in ("png", "svg"))
    drawn = data_rows(page_specs(model_study)["np-fig13-histograms"])
    assert len(drawn) == 2 * sum(r["log_p.topk3"] > -math.inf for cell in ("first", "second") for r in targets(model_study, cell))


def test_fig2_points_open_a_real_window_of_their_cell(policy_study) -> None:
    """Each Fig. 2 point is one window at one budget: it carries its cell and example id (the page opens it there), and
    hover shows its window, dataset, cell, p_z and the estimate with its Wilson interval."""
    spec = page_specs(policy_study)["np-fig2-sampling"]
    check_spec(spec, [{"id", "dataset", "cell", "p_z", "mc_estimate", "mc_low", "mc_high", "theoretical_p", "empirical_p"},
                      {"series", "budget", "error", "covers"}])
    stored = {r["example_id"]: r for r in records(policy_study, "base")}
    points = window_rows(spec)
    assert len(points) == 2 * 2 * len(stored)  # both scatter panels, both budgets
    for point in points:
        record = stored[point["id"]]
        assert point["cell"] == "base" and point["dataset"] == record["dataset"]
        assert point["p_z"] == pytest.approx(math.exp(record["log_p.topk3"]), rel=1e-12)
        assert point["mc_estimate"] == record["mc_estimate"][record["mc_samples"].index(point["budget"])][0]
