"""The CBS paper's figures and tables as a study reproduces them: each CSV recomputed from the cells' records."""

from __future__ import annotations

import copy
import csv
import html
import json
import math
import re
from pathlib import Path
from typing import Any

import altair as alt
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from memrisk.cli import main
from memrisk.report.html import write_report
from memrisk.report.paper import cbs
from tests.integration.test_study import write_study

TAU = 1e-3
STORY_WORDS = 90


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))


def number(text: str) -> float | None:
    """A CSV cell as a number (empty: None)."""
    return None if text == "" else float(text)


def cell_records(out: Path, cell: str, dataset: str | None = None) -> list[dict]:
    """A cell's records, shard by shard as the manifest lists them (optionally one dataset's)."""
    folder = out / "cells" / cell
    shards = json.loads((folder / "manifest.json").read_text())["shards"]
    rows = [r for shard in shards for r in pq.read_table(folder / "records" / shard).to_pylist()]
    return [r for r in rows if dataset is None or r["dataset"] == dataset]


def figures(out: Path) -> set[str]:
    return {p.name for p in (out / "figures").iterdir() if p.name.startswith("cbs-")}


CHART = re.compile(r'<script type="application/json" class="memrisk-chart" data-target="chart-(cbs-[^"]+)" data-cells="([^"]*)">(.*?)</script>',
                   re.S)


def page_specs(out: Path) -> dict[str, dict]:
    """The Vega-Lite spec of each CBS figure on a study's page, by slug."""
    return {slug: json.loads(spec) for slug, _, spec in CHART.findall((out / "report.html").read_text(encoding="utf-8"))}


def walk(spec: Any, key: str) -> list[Any]:
    """Every value under `key` at any depth of a spec."""
    if isinstance(spec, dict):
        return [v for k, v in spec.items() if k == key] + [x for v in spec.values() for x in walk(v, key)]
    if isinstance(spec, list):
        return [x for item in spec for x in walk(item, key)]
    return []


def data_rows(spec: dict) -> list[dict]:
    """Every inline data row of a spec."""
    return [row for values in walk(spec, "values") if isinstance(values, list) for row in values if isinstance(row, dict)]


def tooltip_fields(spec: dict) -> set[str]:
    """The fields any mark of a spec shows on hover."""
    return {item.get("field") for tooltip in walk(spec, "tooltip") if isinstance(tooltip, list) for item in tooltip}


def check_spec(out: Path, slug: str, spec: dict, hover: set[str]) -> None:
    """A drawable Vega-Lite spec with a title, JSON without NaN, legends outside the plot, hover showing `hover`, and
    its PNG and SVG written by vl-convert."""
    assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/") and spec["title"], slug
    json.dumps(spec, allow_nan=False)
    assert hover <= tooltip_fields(spec), (slug, hover - tooltip_fields(spec))
    assert all(legend is None or legend.get("orient", "right") == "right" for legend in walk(spec, "legend")), slug
    assert (out / "figures" / f"{slug}.png").read_bytes().startswith(b"\x89PNG")
    assert b"<svg" in (out / "figures" / f"{slug}.svg").read_bytes()[:200]


@pytest.fixture(scope="module")
def beam_study(tmp_path_factory, model_dir) -> Path:
    """B ∈ {1, 2} × ε ∈ {0, 1} on the word model (probabilistic + CBS), reported."""
    folder = tmp_path_factory.mktemp("beam-study")
    study = write_study(folder, model_dir, {"cbs.beam_width": [1, 2], "cbs.epsilon": [0, 1]})
    assert main(["study", study, "--out", str(folder / "out")]) == 0
    return folder / "out"


def test_beam_width_sweep_counts_extractable_windows_and_cbs_time_per_cell(beam_study) -> None:
    """Figs. 23–25: per cell and ε ≤ the cell's ε, the windows with LB_ε ≥ τ_min and the summed `seconds.cbs`."""
    rows = read_csv(beam_study / "figures" / "cbs-fig23-25-beam-width.csv")
    assert {r["cell"] for r in rows} == {p.name for p in (beam_study / "cells").iterdir()}
    assert (beam_study / "figures" / "cbs-fig23-25-beam-width.png").is_file()
    for row in rows:
        tau = json.loads((beam_study / "cells" / row["cell"] / "summary.json").read_text())["tau_min"]
        records = pq.read_table(beam_study / "cells" / row["cell"] / "records").to_pylist()
        story = [r for r in records if r["dataset"] == row["dataset"]]
        lower = np.array([r["cbs_lower.levenshtein"][int(row["epsilon"])] for r in story])
        assert row["dataset"] == "story", "the control dataset is not a target"
        assert int(row["extractable"]) == int((lower >= tau).sum()) and int(row["windows"]) == len(story)
        assert float(row["cbs_minutes"]) * 60 == pytest.approx(sum(r["seconds.cbs"] for r in records), rel=1e-9)
    assert {(r["cell"], r["epsilon"]) for r in rows} >= {("beam_width=2_epsilon=1", "0"), ("beam_width=2_epsilon=1", "1")}
    page = (beam_study / "report.html").read_text()
    assert "CBS paper Figs. 23–25: near-verbatim extraction rate" in page


def test_a_study_without_models_monte_carlo_or_text_metrics_gets_only_the_figures_its_axes_allow(beam_study) -> None:
    """No model axis (Figs. 4, 20, 21), no Monte Carlo (Figs. 2/5, Table 1), no text metrics (Table 15)."""
    assert figures(beam_study) == {f"cbs-{name}.{ext}" for name in ("fig23-25-beam-width", "fig22-scatter-by-epsilon", "fig26-pruning")
                                   for ext in ("csv", "png", "svg")} | {"cbs-table2-cost.csv"}


def test_the_sweep_figures_are_vega_lite_specs_whose_hover_gives_counts_as_k_of_n(beam_study) -> None:
    """Figs. 23–25 and 26 hover with each rate as k of n windows; Fig. 22's points carry a real window of their cell."""
    specs = page_specs(beam_study)
    assert set(specs) == {"cbs-fig22-scatter-by-epsilon", "cbs-fig23-25-beam-width", "cbs-fig26-pruning"}
    check_spec(beam_study, "cbs-fig23-25-beam-width", specs["cbs-fig23-25-beam-width"],
               {"model", "prune", "epsilon", "beam_width", "rate", "of", "seconds"})
    check_spec(beam_study, "cbs-fig26-pruning", specs["cbs-fig26-pruning"], {"run", "cell", "d", "of", "baseline", "difference"})
    check_spec(beam_study, "cbs-fig22-scatter-by-epsilon", specs["cbs-fig22-scatter-by-epsilon"],
               {"id", "dataset", "cell", "verdict", "p_z", "lb"})
    rows = read_csv(beam_study / "figures" / "cbs-fig23-25-beam-width.csv")
    shown = {(r["prune"], r["epsilon"], r["beam_width"]): r["of"] for r in data_rows(specs["cbs-fig23-25-beam-width"]) if "rate" in r}
    for (prune, epsilon, width), of in shown.items():
        mine = [r for r in rows if r["prune"] == str(prune) and int(r["epsilon"]) == epsilon and int(r["beam_width"]) == width]
        assert of == f"{sum(int(r['extractable']) for r in mine)} of {sum(int(r['windows']) for r in mine)}"
    assert {(w, e) for _, e, w in shown} == {(1, 0), (1, 1), (2, 0), (2, 1)}
    pruning = {(r["cell"], r["d"]): r["of"] for r in data_rows(specs["cbs-fig26-pruning"])}
    for row in read_csv(beam_study / "figures" / "cbs-fig26-pruning.csv"):
        expected = f"{row['extractable']} of {row['windows']}" if row["extractable"] else f"d > the run's ε = {row['run_epsilon']}"
        assert pruning[(row["cell"], f"≤ {row['threshold']}")] == expected


def test_the_cbs_figures_module_draws_without_matplotlib() -> None:
    assert "matplotlib" not in Path(cbs.__file__).read_text(encoding="utf-8")


# ---- two models over a text the first one wrote -----------------------------------------------------------------


@pytest.fixture(scope="module")
def story(word_model) -> str:
    """Words sampled from the word model under top-3: windows it gives mass to, verbatim and near-verbatim."""
    model, tokenizer = word_model.model, word_model.tokenizer
    generator = torch.Generator().manual_seed(0)
    ids = [tokenizer.convert_tokens_to_ids("the")]
    with torch.no_grad():
        while len(ids) < STORY_WORDS:
            logits = model(torch.tensor([ids])).logits[0, -1]
            logits[tokenizer.unk_token_id] = -math.inf
            top = torch.topk(logits, 3)
            ids.append(int(top.indices[torch.multinomial(torch.softmax(top.values, -1), 1, generator=generator)]))
    return tokenizer.decode(ids)


@pytest.fixture(scope="module")
def second_model_dir(tmp_path_factory, word_model) -> Path:
    """The word model with every weight perturbed a little: another model over the same tokenizer (same windows)."""
    folder = tmp_path_factory.mktemp("model-b")
    model = copy.deepcopy(word_model.model)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for weight in model.parameters():
            weight.add_(0.05 * torch.randn(weight.shape, generator=generator))
    model.save_pretrained(folder)
    word_model.tokenizer.save_pretrained(folder)
    return folder


def run_story_study(folder: Path, story: str, model: Path, grid: dict, **base) -> Path:
    """A study over the story (book mode) and a two-document control, reported; returns its output folder."""
    (folder / "story.txt").write_text(story, encoding="utf-8")
    (folder / "control.jsonl").write_text(
        "\n".join(json.dumps({"text": " ".join(reversed(story.split()[i::2]))}) for i in range(2)), encoding="utf-8")
    config = {
        "model": {"name": str(model), "batch_size": 16},
        "datasets": [{"name": "story", "path": "story.txt"}, {"name": "control", "path": "control.jsonl", "role": "control", "limit": 1}],
        "windows": {"mode": "book", "prefix_length": 6, "suffix_length": 5, "stride": 40},
        "policies": [{"top_k": 3}], "tau_min": TAU, "shard_size": 64,
    } | base
    (folder / "study.yaml").write_text(yaml.safe_dump({"base": config, "grid": grid}), encoding="utf-8")
    assert main(["study", str(folder / "study.yaml"), "--out", str(folder / "out")]) == 0
    return folder / "out"


@pytest.fixture(scope="module")
def model_study(tmp_path_factory, model_dir, second_model_dir, story) -> Path:
    """Two models × every method the CBS figures read: teacher forcing, greedy, Lev-pruned CBS (ε = 2) with text
    metrics on a separate baseline search, Monte Carlo at nested budgets."""
    return run_story_study(
        tmp_path_factory.mktemp("model-study"), story, model_dir, {"model.name": [str(model_dir), str(second_model_dir)]},
        methods=["probabilistic", "greedy", "cbs", "mc"],
        cbs={"beam_width": 2, "epsilon": 2, "text_metrics": True, "char_epsilons": [0, 3]},
        mc={"samples": [2, 8], "epsilon": 2})


def story_cells(out: Path) -> dict[str, list[dict]]:
    return {p.name: cell_records(out, p.name, "story") for p in sorted((out / "cells").iterdir())}


def test_the_model_study_draws_the_model_monte_carlo_and_text_figures_and_not_the_sweeps(model_study) -> None:
    drawn = figures(model_study)
    for name in ("fig2-5-mc-convergence", "fig4-verbatim-share", "fig20-common-set", "fig21-heatmaps", "fig22-scatter-by-epsilon"):
        assert {f"cbs-{name}.csv", f"cbs-{name}.png", f"cbs-{name}.svg"} <= drawn
    assert {"cbs-table1-mc-detection.csv", "cbs-table2-cost.csv", "cbs-table15-text-metrics.csv"} <= drawn
    assert not any(name.startswith(("cbs-fig23", "cbs-fig26")) for name in drawn), "no beam, pruning or ε axis"
    page = (model_study / "report.html").read_text()
    assert "CBS paper Table 15: windows extractable under verbatim" in page and "CBS paper Fig. 20: near-verbatim mass" in page


def window_rows(spec: Any) -> list[dict]:
    """Every data row of a Vega-Lite spec (top-level datasets or inline values, at any depth) that names a window."""
    if isinstance(spec, dict):
        return [row for value in spec.values() for row in window_rows(value)]
    if isinstance(spec, list):
        return [item for item in spec if isinstance(item, dict) and "id" in item] + [
            row for item in spec if isinstance(item, (dict, list)) and not (isinstance(item, dict) and "id" in item) for row in window_rows(item)]
    return []


def test_every_window_mark_names_a_real_window_of_its_cell_and_the_page_maps_cells_to_explorers(model_study) -> None:
    """A mark that is one window carries its cell and example id, so a click opens it in that cell's explorer."""
    page = (model_study / "report.html").read_text(encoding="utf-8")
    windows = {cell: {r["example_id"] for r in story} for cell, story in story_cells(model_study).items()}
    keys = {cell["name"]: key for key, cell in enumerate(json.loads((model_study / "study.json").read_text()))}
    charts = CHART.findall(page)
    assert charts and all(json.loads(html.unescape(mapping)) == keys for _, mapping, _ in charts)
    marked = {}
    for slug, _, spec in charts:
        data = window_rows(json.loads(spec))
        assert all(row["cell"] in windows and row["id"] in windows[row["cell"]] for row in data), slug
        marked[slug] = len(data)
    for slug in ("cbs-fig2-5-mc-convergence", "cbs-fig4-verbatim-share", "cbs-fig20-common-set", "cbs-fig21-heatmaps",
                 "cbs-fig22-scatter-by-epsilon"):
        assert marked[slug] > 0, f"{slug} has windows to open"


def by_cell(spec: dict) -> dict[str, set[str]]:
    """The windows a spec's marks name, per cell."""
    out: dict[str, set[str]] = {}
    for row in window_rows(spec):
        out.setdefault(row["cell"], set()).add(row["id"])
    return out


def test_each_model_figure_is_a_vega_lite_spec_whose_marks_are_the_windows_it_draws(model_study) -> None:
    """Figs. 2/5, 4, 20, 21 and 22: hover names each window's id, dataset and cell with its values; the marks are the
    very windows the figure is about (the followed window, the extracted ones, the common set, the max owners)."""
    specs = page_specs(model_study)
    hover = {"cbs-fig2-5-mc-convergence": {"samples", "mc_estimate", "interval", "mc_token_evals", "cbs_lower", "what"},
             "cbs-fig4-verbatim-share": {"label", "verbatim_share", "verbatim_mass", "lower", "median"},
             "cbs-fig20-common-set": {"label", "lower", "median", "set", "of"},
             "cbs-fig21-heatmaps": {"document", "strip", "start", "end", "p"},
             "cbs-fig22-scatter-by-epsilon": {"verdict", "p_z", "lb"}}
    for slug, fields in hover.items():
        check_spec(model_study, slug, specs[slug], fields | {"id", "cell"} | ({"dataset"} if slug != "cbs-fig21-heatmaps" else set()))
    stories = story_cells(model_study)
    extracted = {cell: {r["example_id"] for r in story if r["cbs_lower.levenshtein"][2] >= TAU} for cell, story in stories.items()}
    every = set.intersection(*extracted.values())
    best = {cell: max(story, key=lambda r: (r["cbs_lower.levenshtein"][2], r["mc_estimate"][-1][2]))["example_id"]
            for cell, story in stories.items()}
    assert by_cell(specs["cbs-fig2-5-mc-convergence"]) == {cell: {i} for cell, i in best.items()}
    assert by_cell(specs["cbs-fig4-verbatim-share"]) == extracted
    assert by_cell(specs["cbs-fig20-common-set"]) == {cell: every for cell in stories}
    unlocked = {cell: {r["example_id"] for r in story if r["log_p.topk3"] >= math.log(TAU) or r["cbs_lower.levenshtein"][2] >= TAU}
                for cell, story in stories.items()}
    assert by_cell(specs["cbs-fig22-scatter-by-epsilon"]) == unlocked
    records = {(cell, r["example_id"]): r for cell, story in stories.items() for r in story}
    heat = window_rows(specs["cbs-fig21-heatmaps"])
    assert {row["strip"] for row in heat} == {"p_z", "LB_E"}
    for row in heat:
        record = records[(row["cell"], row["id"])]
        value = math.exp(record["log_p.topk3"]) if row["strip"] == "p_z" else record["cbs_lower.levenshtein"][2]
        assert row["p"] == pytest.approx(value) and value >= TAU
    shares = {(r["cell"], r["id"]): r["verbatim_share"] for r in window_rows(specs["cbs-fig4-verbatim-share"])}
    for (cell, example_id), share in shares.items():
        lower = records[(cell, example_id)]["cbs_lower.levenshtein"]
        assert share == pytest.approx(100 * lower[0] / lower[2])
    counts = {(r["label"], r["set"]): r["of"] for r in data_rows(specs["cbs-fig20-common-set"]) if "set" in r}
    labels = {r["cell"]: r["label"] for r in read_csv(model_study / "figures" / "cbs-fig20-common-set.csv")}
    assert set(labels.values()) == {"name=model0", "name=model-b0"}
    for cell, label in labels.items():
        assert counts[(label, "extracted by every model")] == f"{len(every)} of {len(extracted[cell])} windows this model extracts"


def test_mc_convergence_follows_the_window_with_the_largest_lower_bound_and_prices_cbs_in_samples(model_study) -> None:
    """Figs. 2/5: the chosen window's estimates per budget; MC costs a + (T − 1)·M and CBS's cost in samples is
    (token_evals.cbs − a)/(T − 1), with a = token_evals.probabilistic − T (teacher forcing costs a + T)."""
    rows = read_csv(model_study / "figures" / "cbs-fig2-5-mc-convergence.csv")
    for cell, story in story_cells(model_study).items():
        mine = [r for r in rows if r["cell"] == cell]
        best = max(story, key=lambda r: (r["cbs_lower.levenshtein"][2], r["mc_estimate"][-1][2]))
        assert {r["example_id"] for r in mine} == {best["example_id"]} and [int(r["samples"]) for r in mine] == [2, 8]
        length = len(best["suffix_ids"])
        prefill = best["token_evals.probabilistic"] - length
        for j, row in enumerate(mine):
            assert float(row["mc_estimate"]) == best["mc_estimate"][j][2] and float(row["mc_high"]) == best["mc_high"][j][2]
            assert float(row["mc_token_evals"]) == prefill + (length - 1) * int(row["samples"])
            assert float(row["cbs_lower"]) == best["cbs_lower.levenshtein"][2]
            assert float(row["cbs_samples_equivalent"]) == pytest.approx((best["token_evals.cbs"] - prefill) / (length - 1))
        assert float(mine[-1]["mc_token_evals"]) == best["token_evals.mc"]
    assert any(float(r["cbs_lower"]) >= TAU for r in rows), "the story gives the models something to extract"


def test_mc_detection_counts_hits_among_the_windows_cbs_certifies(model_study) -> None:
    """Table 1: per budget, certified windows (LB_2 ≥ τ) with at least one Monte Carlo hit, and the mean 1 − (1 − LB)^M."""
    rows = read_csv(model_study / "figures" / "cbs-table1-mc-detection.csv")
    assert len(rows) == 2 * 2
    for row in rows:
        story = cell_records(model_study, row["cell"], "story")
        j = [2, 8].index(int(row["samples"]))
        certified = [r for r in story if r["cbs_lower.levenshtein"][2] >= TAU]
        assert int(row["certified"]) == len(certified) and int(row["windows"]) == len(story)
        assert int(row["detected"]) == sum(r["mc_estimate"][j][2] > 0 for r in certified)
        expected = [1 - (1 - r["cbs_lower.levenshtein"][2]) ** int(row["samples"]) for r in certified]
        assert number(row["hit_probability_at_least"]) == (pytest.approx(np.mean(expected)) if expected else None)


def test_cost_table_gives_token_evaluations_wall_time_and_candidates_per_method(model_study) -> None:
    """Table 2: mean `token_evals.<method>` per window and its ratio to greedy, summed `seconds.<method>`."""
    rows = read_csv(model_study / "figures" / "cbs-table2-cost.csv")
    for cell in story_cells(model_study):
        records = cell_records(model_study, cell)
        mine = {r["method"]: r for r in rows if r["cell"] == cell}
        assert set(mine) == {"teacher_forcing", "probabilistic", "greedy", "cbs", "mc", "cbs_baseline"}
        greedy = np.mean([r["token_evals.greedy"] for r in records])
        for method in ("greedy", "cbs", "mc", "cbs_baseline"):
            evals = np.mean([r[f"token_evals.{method}"] for r in records])
            assert float(mine[method]["token_evals_per_window"]) == pytest.approx(evals)
            assert float(mine[method]["vs_greedy"]) == pytest.approx(evals / greedy)
        for method in ("teacher_forcing", "cbs", "mc"):
            assert float(mine[method]["seconds"]) == pytest.approx(sum(r[f"seconds.{method}"] for r in records))
        assert mine["teacher_forcing"]["token_evals_per_window"] == "" and float(mine["mc"]["candidates_per_window"]) == 8
        assert float(mine["cbs"]["candidates_per_window"]) == pytest.approx(np.mean([len(r["cbs_log_p"]) for r in records]))


def test_verbatim_share_is_lb0_over_lbe_for_each_models_extracted_windows(model_study) -> None:
    """Figs. 4, 11b, 15b: one row per window with LB_2 ≥ τ, share 100·LB_0/LB_2, per model."""
    rows = read_csv(model_study / "figures" / "cbs-fig4-verbatim-share.csv")
    assert {r["label"] for r in rows} == {"name=model0", "name=model-b0"}
    for cell, story in story_cells(model_study).items():
        extracted = {r["example_id"]: r["cbs_lower.levenshtein"] for r in story if r["cbs_lower.levenshtein"][2] >= TAU}
        mine = {r["example_id"]: r for r in rows if r["cell"] == cell}
        assert set(mine) == set(extracted) and extracted
        for example_id, lower in extracted.items():
            assert float(mine[example_id]["verbatim_share"]) == pytest.approx(100 * lower[0] / lower[2])


def test_common_set_matches_windows_across_models_by_example_id(model_study) -> None:
    """Fig. 20: the union of the models' extracted windows, each flagged as extracted by every model or not."""
    rows = read_csv(model_study / "figures" / "cbs-fig20-common-set.csv")
    extracted = {cell: {r["example_id"]: r["cbs_lower.levenshtein"][2] for r in story if r["cbs_lower.levenshtein"][2] >= TAU}
                 for cell, story in story_cells(model_study).items()}
    every, some = set.intersection(*map(set, extracted.values())), set.union(*map(set, extracted.values()))
    assert every and some - every, "the two models share some extracted windows and not others"
    assert {(r["cell"], r["example_id"]) for r in rows} == {(cell, i) for cell in extracted for i in some}
    for row in rows:
        assert (row["by_every"] == "True") == (row["example_id"] in every)
        assert (row["extracted"] == "True") == (row["example_id"] in extracted[row["cell"]])
        if row["extracted"] == "True":
            assert float(row["lower"]) == extracted[row["cell"]][row["example_id"]]


def test_heatmap_rows_hold_each_windows_suffix_span_p_z_and_lower_bound(model_study) -> None:
    """Fig. 21: per model and story window, the character span of its suffix, p_z and LB_E."""
    rows = read_csv(model_study / "figures" / "cbs-fig21-heatmaps.csv")
    for cell, story in story_cells(model_study).items():
        mine = {r["example_id"]: r for r in rows if r["cell"] == cell}
        assert set(mine) == {r["example_id"] for r in story}
        for record in story:
            row = mine[record["example_id"]]
            assert (int(row["suffix_char_start"]), int(row["char_end"])) == (record["suffix_char_start"], record["char_end"])
            assert float(row["p_z"]) == pytest.approx(math.exp(record["log_p.topk3"])) and float(row["lower"]) == record["cbs_lower.levenshtein"][2]


def test_scatter_by_epsilon_gives_every_window_its_verdict_at_each_epsilon(model_study) -> None:
    """Fig. 22: per window and ε, verbatim when p_z ≥ τ, near-verbatim when p_z < τ ≤ LB_ε, else not extracted."""
    rows = read_csv(model_study / "figures" / "cbs-fig22-scatter-by-epsilon.csv")
    for cell, story in story_cells(model_study).items():
        mine = {(r["example_id"], int(r["epsilon"])): r for r in rows if r["cell"] == cell}
        assert len(mine) == 3 * len(story)
        for record in story:
            for epsilon in range(3):
                verbatim = record["log_p.topk3"] >= math.log(TAU)
                expected = "verbatim" if verbatim else "near_verbatim" if record["cbs_lower.levenshtein"][epsilon] >= TAU else "not_extracted"
                assert mine[(record["example_id"], epsilon)]["verdict"] == expected
    assert {r["verdict"] for r in rows} >= {"near_verbatim", "not_extracted"}


def test_text_metrics_table_counts_bleu_and_levenshtein_on_the_baseline_candidates(model_study) -> None:
    """Table 15: baseline LB_0 and LB_2 ≥ τ, BLEU mass ≥ τ, their overlap; equal to the cell's summary."""
    rows = read_csv(model_study / "figures" / "cbs-table15-text-metrics.csv")
    assert len(rows) == 2
    for row in rows:
        story = cell_records(model_study, row["cell"], "story")
        lev = {r["example_id"] for r in story if r["cbs_baseline_lower.levenshtein"][2] >= TAU}
        bleu = {r["example_id"] for r in story if r["cbs_bleu_mass"] >= TAU}
        assert int(row["verbatim"]) == sum(r["cbs_baseline_lower.levenshtein"][0] >= TAU for r in story)
        assert (int(row["levenshtein"]), int(row["bleu"]), int(row["both"])) == (len(lev), len(bleu), len(lev & bleu))
        assert (int(row["levenshtein_only"]), int(row["bleu_only"])) == (len(lev - bleu), len(bleu - lev))
        assert int(row["char_levenshtein_3"]) == sum(r["cbs_char_levenshtein_mass"][1] >= TAU for r in story)
        summary = json.loads((model_study / "cells" / row["cell"] / "summary.json").read_text())
        stats = summary["datasets"]["story"]["cbs"]["text_metrics"]
        assert {k: int(row[k]) for k in ("levenshtein", "bleu", "both", "levenshtein_only", "bleu_only")} == {
            k: stats[k] for k in ("levenshtein", "bleu", "both", "levenshtein_only", "bleu_only")}


# ---- pruned against baseline k-CBS ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pruning_study(tmp_path_factory, model_dir, story) -> Path:
    """prune ∈ {none, levenshtein, hamming} × ε ∈ {0, 2} on the word model over its own story (CBS only)."""
    return run_story_study(tmp_path_factory.mktemp("pruning-study"), story, model_dir,
                           {"cbs.prune": ["none", "levenshtein", "hamming"], "cbs.epsilon": [0, 2]},
                           methods=["cbs"], cbs={"beam_width": 2})


def test_pruning_grid_counts_each_run_at_each_threshold_against_the_widest_baseline(pruning_study) -> None:
    """Fig. 26: per distance panel, the baseline row (unpruned, ε = 2) and the pruned runs ε = 0, 2; a threshold
    above the run's ε is unavailable; the difference is from the baseline at the same threshold."""
    rows = read_csv(pruning_study / "figures" / "cbs-fig26-pruning.csv")
    assert figures(pruning_study) >= {"cbs-fig26-pruning.png", "cbs-fig26-pruning.svg"}
    assert {name.split(".")[0] for name in figures(pruning_study)} == {"cbs-fig26-pruning", "cbs-table2-cost"}
    assert list(dict.fromkeys(r["distance"] for r in rows)) == ["levenshtein", "hamming"]
    for distance in ("levenshtein", "hamming"):
        panel = [r for r in rows if r["distance"] == distance]
        assert [r["run"] for r in panel[::3]] == ["baseline", f"{distance} ε=0", f"{distance} ε=2"]
        baseline = cell_records(pruning_study, "epsilon=2_prune=none", "story")
        for row in panel:
            d, run_epsilon = int(row["threshold"]), int(row["run_epsilon"])
            base = sum(r[f"cbs_lower.{distance}"][d] >= TAU for r in baseline)
            assert int(row["baseline"]) == base
            if d > run_epsilon:
                assert row["extractable"] == "" and row["difference"] == ""
                continue
            count = sum(r[f"cbs_lower.{distance}"][d] >= TAU for r in cell_records(pruning_study, row["cell"], "story"))
            assert (int(row["extractable"]), int(row["difference"])) == (count, count - base)
    assert any(int(r["extractable"] or 0) > 0 for r in rows)


def test_the_same_records_draw_the_same_figure_files_and_altair_keeps_its_debug_mode(model_study, tmp_path) -> None:
    """Figs. 4 and 20 jitter their points by a seeded draw, not Vega's `random()`: a second report of the study draws
    every picture and table byte for byte (an SVG's clip-path ids count up within a process). The report builds its
    charts with Altair's debug mode off and leaves it as it was."""
    write_report([model_study], tmp_path / "again")
    drawn = sorted(f for f in (model_study / "figures").iterdir() if f.suffix in (".png", ".csv"))
    assert {"cbs-fig4-verbatim-share.png", "cbs-fig20-common-set.png"} <= {f.name for f in drawn}
    for figure in drawn:
        assert (tmp_path / "again" / "figures" / figure.name).read_bytes() == figure.read_bytes(), figure.name
    assert alt.utils.schemapi.DEBUG_MODE
