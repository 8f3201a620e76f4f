"""The HTML report on hand-written run folders: content, escaping, comparisons, CLI, and a real headless Chromium."""

from __future__ import annotations

import base64
import functools
import html
import http.server
import importlib.util
import json
import math
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import vl_convert

from memrisk import cli
from memrisk.config import parse_config
from memrisk.methods import configured
from memrisk import rules
from memrisk.report import charts, metrics
from memrisk.report.html import write_report
from memrisk.report.markup import asset, inline_diff_html
from memrisk.summary import summarize
from memrisk.report.text import summary_table
from memrisk.runner import run_experiment
from memrisk.store import RecordStore
from tests.conftest import WORDS

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=\"document.title='pwned'\">"
MODEL = "tiny <b>model</b>"
REPO = Path(__file__).resolve().parents[2]


def config(methods: list[str], model: str = MODEL) -> dict[str, Any]:
    """A book-mode config over a target book and a negative control."""
    return parse_config({
        "model": {"name": model, "revision": "rev-1"},
        "datasets": [{"name": "book", "documents": ["x"]}, {"name": "heldout", "documents": ["y"], "role": "control"}],
        "windows": {"mode": "book", "prefix_length": 4, "suffix_length": 4, "stride": 10},
        "methods": methods,
        "cbs": {"epsilon": 2, "beam_width": 3},
    }).model_dump(mode="json")


def record(i: int, dataset: str, log_p: float, lower: list[float], greedy_text: str, candidate: str) -> dict[str, Any]:
    """One record with every column of a probabilistic + greedy + CBS run."""
    suffix = f"the suffix {i} {SCRIPT} {IMG}" if i == 1 else f"plain suffix number {i}"
    exact = greedy_text == suffix
    return {
        "example_id": f"{dataset}/{IMG}@{i * 10}", "dataset": dataset, "role": "control" if dataset == "heldout" else "target",
        "doc_id": IMG, "char_start": i * 10, "suffix_char_start": i * 10 + 20, "char_end": i * 10 + 40,
        "prefix_ids": [1, 2, 3, 4], "suffix_ids": [5, 6, 7, 8], "prefix_text": f"prefix {i} {SCRIPT}", "suffix_text": suffix,
        "target_ranks": [1, 1, 1, 1], "teacher_forced_greedy": exact,
        "log_p.topk40": log_p, "token_log_p.topk40": [log_p / 4] * 4,
        "greedy_ids": [5, 6, 7, 8], "greedy_text": greedy_text, "greedy_exact": exact,
        "greedy_hamming": 0 if exact else 2, "greedy_levenshtein": 0 if exact else 1,
        "cbs_lower.levenshtein": lower, "cbs_upper.levenshtein": [x + 0.01 for x in lower],
        "cbs_lower.hamming": lower, "cbs_upper.hamming": [x + 0.01 for x in lower],
        "cbs_covered_mass": lower[-1], "cbs_bank": 0.0, "cbs_eos_mass": 0.0,
        "token_evals.probabilistic": 4 + 4, "token_evals.greedy": 4 + 4 - 1, "token_evals.cbs": 12 + i,
        "cbs_stop": "completed", "cbs_stop_step": 4, "cbs_log_p": [math.log(max(lower[-1], 1e-12))],
        "cbs_hamming": [1], "cbs_levenshtein": [1], "cbs_bleu_mass": 0.0, "cbs_char_levenshtein_mass": [0.0] * 4,
        "cbs_top": [{"tokens": [5, 6, 7, 9], "text": candidate, "log_p": math.log(max(lower[-1], 1e-12)), "hamming": 1, "levenshtein": 1}],
    }


def records() -> list[dict[str, Any]]:
    """Blue, orange and red target sequences, a not-extracted one, and a control hit; payloads planted in text."""
    return [
        record(0, "book", math.log(0.4), [0.4, 0.5, 0.6], "plain suffix number 0", "plain suffix number O"),
        record(1, "book", math.log(1e-5), [1e-5, 0.02, 0.03], f"the suffix 1 {IMG} {SCRIPT}", f"candidate {SCRIPT} {IMG}"),
        record(2, "book", -math.inf, [0.0, 0.0, 0.05], "something else", "plain suffix numbr 2"),
        record(3, "book", math.log(1e-9), [0.0, 0.0, 0.0], "nothing alike", "plain suffix"),
        record(4, "heldout", math.log(0.2), [0.2, 0.2, 0.2], "plain suffix number 4", "plain suffix number 4!"),
        record(5, "heldout", math.log(1e-8), [0.0, 0.0, 0.0], "no", "no"),
    ]


def make_run(root: Path, rows: list[dict[str, Any]] | None = None, methods: list[str] | None = None, model: str = MODEL) -> Path:
    """A finished run folder written by hand through the RecordStore (no model needed)."""
    data = config(methods or ["probabilistic", "greedy", "cbs"], model)
    store = RecordStore.open(root, data, data)
    store.append(records() if rows is None else rows)
    provenance = {"name": model, "commit_hash": "c0ffee<i>", "architecture": "GPT2LMHeadModel", "dtype": "float32"}
    store.write_json("versions.json", {"memrisk": "0.1.0", "torch": "2.13.0", "transformers": "4.56", "model": provenance})
    store.write_json("windows.json", {
        "book": {"role": "target", "documents": 1, "windows": 4, "skipped_short_documents": 0, "duplicate_windows_removed": 0},
        "heldout": {"role": "control", "documents": 1, "windows": 2, "skipped_short_documents": 1, "duplicate_windows_removed": 0},
    })
    return root


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """report.html of the hand-written run."""
    return write_report([make_run(tmp_path_factory.mktemp("run") / "run")])


def visible_text(page: str) -> str:
    """The page's text with tags removed and entities decoded (what a reader sees, roughly)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_report_is_written_into_the_run_folder_with_figures(report: Path) -> None:
    assert report.name == "report.html"
    figures = {p.name for p in (report.parent / "figures").iterdir()}
    for name in ("scatter", "ccdf", "shell-heatmap", "shell-violins", "rates", "np-curves", "book-heatmap"):
        assert {f"{name}.png", f"{name}.svg"} <= figures
    assert "prior-aware.png" not in figures
    page = report.read_text(encoding="utf-8")
    assert "data:image/png;base64," not in page, "every figure is an interactive chart"
    charted = ("scatter", "rates", "ccdf", "np-curves", "book-heatmap", "shell-heatmap", "shell-violins")
    assert page.count('class="memrisk-chart"') == len(charted) and all(f'id="chart-{name}"' in page for name in charted)
    for name in charted:  # static files drawn by vl-convert from the same spec
        assert (report.parent / "figures" / f"{name}.svg").read_bytes().lstrip().startswith(b"<svg")
        assert (report.parent / "figures" / f"{name}.png").read_bytes().startswith(b"\x89PNG")


def test_report_is_self_contained_and_escapes_every_text(report: Path) -> None:
    page = report.read_text(encoding="utf-8")
    scripts = re.findall(r"<script[^>]*>", page, flags=re.IGNORECASE)
    assert scripts == ['<script type="application/json" class="memrisk-chart" data-target="chart-scatter" data-explorer="0">',
                       '<script type="application/json" class="memrisk-chart" data-target="chart-rates">',
                       '<script type="application/json" class="memrisk-chart" data-target="chart-ccdf">',
                       '<script type="application/json" class="memrisk-chart" data-target="chart-np-curves">',
                       '<script type="application/json" class="memrisk-chart" data-target="chart-book-heatmap" data-explorer="0">',
                       '<script type="application/json" class="memrisk-chart" data-target="chart-shell-heatmap" data-explorer="0">',
                       '<script type="application/json" class="memrisk-chart" data-target="chart-shell-violins">',
                       '<script type="application/gzip+base64" class="memrisk-explorer-data" data-key="0">', *["<script>"] * 4], \
        "only the chart's spec, the explorer's data and four inline scripts (Tabulator, explorer.js, Vega-Embed, charts.js)"
    for name in ("explorer.js", "tabulator.min.js", "charts.js"):
        assert page.count(asset(name).replace("</script", "<\\/script")) == 1
    markup = re.sub(r"<script[^>]*>.*?</script>", "", page, flags=re.S)  # the inlined libraries' source is not markup
    assert all(tag.startswith('<img src="data:image/png;base64,') for tag in re.findall(r"<img[^>]*>", markup))
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", markup)
    assert SCRIPT not in page and IMG not in page and "<b>model</b>" not in page
    assert html.escape(SCRIPT) in page and html.escape(IMG) in page
    text = visible_text(page)
    for planted in (SCRIPT, IMG, MODEL, "c0ffee<i>"):
        assert planted in text


def test_report_shows_configuration_tables_and_sequences(report: Path) -> None:
    text = visible_text(report.read_text(encoding="utf-8"))
    for expected in ("rev-1", "B = 3, k = 40, ε = 2", "a = 4, T = 4", "τ_min", "0.1.0 / 2.13.0 / 4.56", "short documents skipped"):
        assert expected in text
    assert "Top extracted target sequences" in text and "Top unlocked target sequences" in text
    assert "Prior-aware memorization" not in text
    unlocked = text.split("Top unlocked target sequences")[1].split("Negative-control hits")[0]
    assert "book/" + IMG + "@10" in unlocked and "book/" + IMG + "@20" in unlocked and "@0" not in unlocked
    controls = text.split("Negative-control hits")[1]
    assert "1 of 2 control sequences were extracted" in controls and "plain suffix number 4!" in controls


def test_tables_hold_the_known_counts(report: Path) -> None:
    text = " ".join(visible_text(report.read_text(encoding="utf-8")).split())
    assert "Any positive gain: 75.00% of 4 sequences" in text
    assert "missed by CBS" in text and "recovery ratio" in text
    rows = re.findall(r"<tr>(.*?)</tr>", report.read_text(encoding="utf-8"))
    per_eps = [visible_text(r) for r in rows if r.startswith("<td class=\"num\">") and r.count("<td") == 8]
    assert per_eps == ["0100034" + "1/2 (50.00%)", "1110124" + "1/2 (50.00%)", "2121114" + "1/2 (50.00%)"], \
        "verdicts per ε, and the one control with LB_ε ≥ τ of two beside them"


def row_texts(page: str) -> list[list[str]]:
    """The visible text of every table row's cells."""
    return [[visible_text(c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r, re.DOTALL)]
            for r in re.findall(r"<tr>(.*?)</tr>", page, re.DOTALL)]


def test_one_verdict_rule_for_summary_metrics_html_and_text(tmp_path) -> None:
    # log p_z = −800: p_z underflows to 0.0 as a float but is positive; with LB_E = 0 it is not extracted,
    # with LB_E just above τ_min it is near-verbatim only with 0 < p_z < τ (the paper's orange), for every caller
    tau = 1e-3
    rows = [record(0, "book", -800.0, [0.0, 0.0, 0.0], "no", "no"),
            record(2, "book", -800.0, [0.0, 0.0, tau * (1 + 1e-12)], "no", "plain suffix numbr 2"),
            record(3, "book", math.log(tau), [tau, tau, tau], "plain suffix number 3", "plain suffix number 3")]
    folder = make_run(tmp_path / "run", rows)
    run_config = parse_config(config(["probabilistic", "greedy", "cbs"]))
    records_table = RecordStore.existing(folder).read_records()
    counts = {"verbatim": 1, "near_verbatim": 1, "not_extracted": 1,
              "near_verbatim_p_z_zero": 0, "near_verbatim_p_z_positive": 1, "total": 3}

    a = metrics.run_arrays(records_table, run_config)
    assert rules.verdicts(a.log_p, a.lower[:, -1], tau).tolist() == ["not_extracted", "near_verbatim", "verbatim"]
    assert metrics.verdicts_by_epsilon(a.log_p, a.lower, tau)[-1] == counts

    summary = summarize(records_table, run_config, {})
    assert summary["datasets"]["book"]["cbs"]["verdicts"] == counts
    assert [u["example_id"] for u in summary["top_unlocked"]] == [rows[1]["example_id"]]

    page = write_report([folder]).read_text(encoding="utf-8")
    assert ["2", "1", "1", "0", "1", "1", "3"] in row_texts(page)
    scores = [visible_text(c) for c in re.findall(r"<td>(<div>log10 p_z.*?)</td>", page)]
    shown = sorted(s.split("verdict: ")[1].split("greedy")[0] for s in scores)  # top extracted, then top unlocked
    assert shown == ["near-verbatim only", "near-verbatim only", "verbatim"]

    text = summary_table(summary)
    assert "book  verbatim 1  near-verbatim only 1 (p_z = 0: 0)  not extracted 1" in text
    assert text.count("log10 LB") == 1 and "[-number-] {+numbr+}" in text


def test_certificate_upper_bounds_in_summary_html_and_text(tmp_path) -> None:
    rows = records()
    for row, gap in zip(rows, [0.0, 5e-4, 2e-3, 0.2]):  # the book's windows; UB − LB the same at every ε
        row["cbs_upper.levenshtein"] = [x + gap for x in row["cbs_lower.levenshtein"]]
    folder = make_run(tmp_path / "run", rows)
    summary = summarize(RecordStore.existing(folder).read_records(), parse_config(config(["probabilistic", "greedy", "cbs"])), {})
    cert = summary["datasets"]["book"]["cbs"]["certificate"]
    assert cert["levenshtein"]["mean_gap"] == pytest.approx([0.2025 / 4] * 3)
    assert cert["levenshtein"]["certified_share"] == [0.5] * 3
    assert cert["levenshtein"]["mean_upper"] == pytest.approx([(0.4 + 1e-5 + 0.2025) / 4, (0.52 + 0.2025) / 4, (0.68 + 0.2025) / 4])
    assert cert["hamming"]["mean_gap"] == pytest.approx([0.01] * 3) and cert["hamming"]["certified_share"] == [0.0] * 3

    page = write_report([folder]).read_text(encoding="utf-8")
    table = row_texts(page.split("Certificate")[1])
    assert ["book", "target", "2", "0.17", "0.221", "0.0506", "50.00%"] in table
    assert ["heldout", "control", "0", "0.1", "0.11", "0.01", "0.00%"] in table

    text = summary_table(summary)
    assert "book     eps 0: 5.06e-02 (50%)  eps 1: 5.06e-02 (50%)  eps 2: 5.06e-02 (50%)" in text


def test_token_evaluations_per_method_in_summary_html_and_text(tmp_path) -> None:
    # CBS App. C.3, Tables 1–2: teacher forcing a + T, greedy a + T − 1, CBS a + Σ|L_t|, per window and in total
    folder = make_run(tmp_path / "run")
    summary = summarize(RecordStore.existing(folder).read_records(), parse_config(config(["probabilistic", "greedy", "cbs"])), {})
    assert summary["token_evals"] == {
        "probabilistic": {"total": 48, "windows": 6, "per_window": 8.0},
        "greedy": {"total": 42, "windows": 6, "per_window": 7.0},
        "cbs": {"total": 72 + 15, "windows": 6, "per_window": 14.5},
    }
    assert summary["datasets"]["book"]["token_evals"]["cbs"] == {"total": 48 + 6, "windows": 4, "per_window": 13.5}
    assert summary["datasets"]["heldout"]["token_evals"]["greedy"] == {"total": 14, "windows": 2, "per_window": 7.0}

    rows = row_texts(write_report([folder]).read_text(encoding="utf-8").split("Token evaluations")[1])
    assert rows[:4] == [["method", "token evaluations", "windows", "per window"], ["teacher forcing (probabilistic)", "48", "6", "8.0"],
                        ["greedy", "42", "6", "7.0"], ["CBS", "87", "6", "14.5"]]

    text = summary_table(summary).split("Token evaluations")[1].splitlines()
    assert [line.split() for line in text[2:5]] == [["teacher", "forcing", "(probabilistic)", "48", "6", "8.0"],
                                                   ["greedy", "42", "6", "7.0"], ["CBS", "87", "6", "14.5"]]


def test_records_without_token_evaluation_columns_have_no_cost_table(tmp_path) -> None:
    rows = [{k: v for k, v in r.items() if not k.startswith("token_evals.")} | {"cbs_token_evals": 12} for r in records()]
    folder = make_run(tmp_path / "run", rows)
    run_config = parse_config(config(["probabilistic", "greedy"]))
    summary = summarize(RecordStore.existing(folder).read_records(), run_config, {})
    assert "token_evals" not in summary and "token_evals" not in summary["datasets"]["book"]
    assert "Token evaluations" not in summary_table(summary)
    assert "Token evaluations" not in write_report([folder]).read_text(encoding="utf-8")


def test_diff_marks_matched_missing_and_added_spans() -> None:
    out = inline_diff_html("a <b> c", "a <i> c!")
    assert '<span class="match">a &lt;</span>' in out
    assert '<span class="missing" title="in the target, not generated">b</span>' in out
    assert '<span class="added" title="generated, not in the target">i</span>' in out
    assert out.endswith('<span class="added" title="generated, not in the target">!</span></div>')


@pytest.mark.filterwarnings("error")
def test_figures_render_degenerate_inputs_without_warnings() -> None:
    empty, zeros = np.empty(0), np.zeros((3, 3))
    no_rates = metrics.extraction_rates(metrics.run_arrays(pa.table({}), parse_config(config(["probabilistic", "cbs"]))), 1e-3)
    ids = np.array(["a", "b"])
    specs = [
        charts.verdict_scatter(ids[:0], ids[:0], empty, empty, 1e-3, "LB", "empty"),
        charts.verdict_scatter(ids, ids, np.array([-np.inf, -np.inf]), np.array([0.5, 0.5]), 1e-3, "LB", "zeros"),
        charts.rates_chart({"empty": {"target": no_rates}}, 1e-3, "no windows"),
        charts.ccdf_chart({"run": metrics.ccdf_curve(np.zeros(4))}, "LB", "no gain"),
        charts.np_curves_chart({"target": metrics.np_curves(empty, None)}, "topk40", "no windows"),
        charts.book_heatmap_chart([], ids, 1e-3, "LB", "no documents"),
        charts.book_heatmap_chart([metrics.BookHeatmap("book", "$doc$", 2, np.zeros(5), np.zeros(5), np.full(5, -1), np.full(5, -1))],
                                  ids, 1e-3, "LB", "nothing covered"),
        charts.prior_aware_chart(ids[:0], ids[:0], ids[:0], empty, empty, empty, 1e-3, 2.0, "empty"),
        charts.prior_aware_chart(ids, ids, np.array(["target", "control"]), np.array([-np.inf, -5.0]), np.array([-2.0, -np.inf]),
                                 np.array([True, False]), 1e-3, 2.0, "nothing finite"),
        charts.prior_aware_chart(ids[:1], ids[:1], np.array(["control"]), np.array([-5.0]), np.array([-2.0]), np.array([True]),
                                 0.0, 0.0, "no lines"),
        charts.shell_heatmap_chart(ids[:0], ids[:0], np.empty((0, 3)), "no extracted window"),
        charts.shell_violin_chart(np.empty((0, 3)), [None] * 3, "no extracted window"),
        charts.shell_violin_chart(zeros, metrics.medians(zeros), "one value per shell"),
    ]
    for spec in specs:
        drawn = charts.draw(spec, ("png", "svg"))
        assert drawn["png"].startswith(b"\x89PNG") and b"<svg" in drawn["svg"]


def test_report_without_cbs_or_greedy(tmp_path) -> None:
    rows = [{k: v for k, v in r.items() if not k.startswith(("cbs_", "greedy_"))} for r in records()]
    path = write_report([make_run(tmp_path / "run", rows, ["probabilistic"])])
    page = path.read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == 0 and 'id="chart-np-curves"' in page and 'id="chart-scatter"' not in page
    assert "Top unlocked" not in page and "Top extracted target sequences" in page
    assert "No CBS Fig. 3 scatter, mass-gain CCDF or ε-shell charts: they need p_z (probabilistic) and CBS bounds (cbs), " \
           "and this run's methods are probabilistic." in visible_text(page), "an empty section says why"


def test_report_of_a_run_without_records(tmp_path) -> None:
    path = write_report([make_run(tmp_path / "run", [])])
    assert "This run has no records yet." in path.read_text(encoding="utf-8")


def test_comparison_of_several_runs(tmp_path) -> None:
    first = make_run(tmp_path / "a")
    second = make_run(tmp_path / "b", records()[:3], model="other $model$")
    path = write_report([first, second])
    assert path == first / "report.html"
    text = visible_text(path.read_text(encoding="utf-8"))
    assert "Comparison of runs" in text and "other $model$" in text
    figures = {p.name for p in (first / "figures").iterdir()}
    assert {"compare-rates.png", "compare-ccdf.svg", "scatter.png", "run2-scatter.png"} <= figures
    assert text.index("Comparison of runs") < text.index("Run: " + MODEL)


def test_out_folder(tmp_path) -> None:
    run = make_run(tmp_path / "run")
    path = write_report([run], tmp_path / "elsewhere")
    assert path == tmp_path / "elsewhere" / "report.html" and (tmp_path / "elsewhere" / "figures" / "rates.png").is_file()
    assert not (run / "report.html").exists()


def test_format_picks_the_static_files_and_an_unknown_one_is_refused_before_writing(tmp_path, capsys, monkeypatch) -> None:
    run = make_run(tmp_path / "run")
    assert cli.main(["report", str(run), "--format", "png"]) == 0
    assert {p.suffix for p in (run / "figures").iterdir()} == {".png"} and (run / "figures" / "scatter.png").is_file()

    def no_raster(*args, **kwargs):
        raise AssertionError("an SVG-only report rasterised a chart")

    monkeypatch.setattr(vl_convert, "svg_to_png", no_raster)
    vector = make_run(tmp_path / "vector")
    assert cli.main(["report", str(vector), "--format", "svg"]) == 0
    assert {p.suffix for p in (vector / "figures").iterdir()} == {".svg"} and (vector / "figures" / "scatter.svg").is_file()
    fresh = make_run(tmp_path / "fresh")
    assert cli.main(["report", str(fresh), "--format", "png,pdf"]) == 2
    assert "figure formats are png and svg; got pdf" in capsys.readouterr().err
    assert not (fresh / "report.html").exists() and not (fresh / "figures").exists()


def test_cli_report_rebuilds_summaries_and_compares_runs_of_one_model(tmp_path, capsys) -> None:
    first, second = make_run(tmp_path / "a"), make_run(tmp_path / "b")
    assert cli.main(["report", str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert f"report written to {first / 'report.html'}" in out
    assert json.loads((second / "summary.json").read_text())["examples"] == 6
    text = visible_text((first / "report.html").read_text(encoding="utf-8"))
    assert "Comparison of runs" in text and f"{MODEL} [a]" in text and f"{MODEL} [b]" in text


def test_cli_report_of_a_folder_that_is_not_a_run(tmp_path, capsys) -> None:
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "not a memrisk run folder" in capsys.readouterr().err


def test_report_of_a_real_run(tmp_path, word_model) -> None:
    story = " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(300))
    run = parse_config({
        "model": {"name": "word-model"},
        "datasets": [{"name": "story", "documents": [story]}, {"name": "control", "documents": [" ".join(WORDS)], "role": "control"}],
        "windows": {"mode": "book", "prefix_length": 6, "suffix_length": 5, "stride": 60},
        "policies": [{"top_k": 3}, {"name": "full"}],
        "methods": ["probabilistic", "greedy", "cbs"],
        "cbs": {"policy": "full", "beam_width": 3, "epsilon": 2, "stored_candidates": 2, "char_epsilons": [0, 3]},
        "tau_min": 1e-10,
    })
    run_experiment(run, tmp_path / "out", model=word_model, progress=False)
    page = write_report([tmp_path / "out"]).read_text(encoding="utf-8")
    assert "data:image/png;base64," not in page and 'id="chart-scatter"' in page and 'id="chart-shell-heatmap"' in page
    assert "Run: word-model" in page
    a = metrics.run_arrays(RecordStore.existing(tmp_path / "out").read_records(), run)
    shares = rules.shell_shares(a.lower, run.tau_min)
    assert shares.shape[0] >= 2, "the run extracts some windows near-verbatim"
    assert np.abs(shares.sum(axis=1) - 1.0).max() <= 1e-12


CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
BROWSER_MISSING = (
    "selenium is not installed (pip install selenium)" if importlib.util.find_spec("selenium") is None
    else None if CHROMIUM and CHROMEDRIVER
    else "chromium/chromedriver not found (apt-get install -y chromium chromium-driver)"
)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Static files without request logging."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Drop the access log."""


@pytest.fixture
def served(report: Path) -> Iterator[str]:
    """URL of the report on a local HTTP server (127.0.0.1, free port)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(report.parent)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{report.name}"
    server.shutdown()
    thread.join()


@pytest.fixture
def browser(tmp_path) -> Iterator[Any]:
    """Headless Chromium driven by chromedriver, with a fresh profile and browser logging."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,1600"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def full_page_png(driver: Any) -> bytes:
    """A screenshot of the whole page, not only the window."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip})
    return base64.b64decode(shot["data"])


def keep_screenshot(driver: Any, name: str, whole_page: bool = True) -> None:
    """With MEMRISK_ARTIFACTS=1, a screenshot of the page (or of what the window shows) as test-artifacts/NAME.png for a
    person to look at; otherwise none is taken (a full page costs Chromium up to 4 s, and no assertion reads it)."""
    if not os.environ.get("MEMRISK_ARTIFACTS"):
        return
    png = full_page_png(driver) if whole_page else driver.get_screenshot_as_png()
    (REPO / "test-artifacts").mkdir(exist_ok=True)
    (REPO / "test-artifacts" / f"{name}.png").write_bytes(png)


@pytest.mark.skipif(BROWSER_MISSING is not None, reason=BROWSER_MISSING or "")
def test_report_in_headless_chromium(served: str, browser: Any, tmp_path) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    browser.get(served)
    title = browser.title
    assert title.startswith("memrisk report: ") and "pwned" not in title
    images = browser.execute_script(
        "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])"
    )
    assert images == [], "every figure is an interactive chart"
    assert browser.execute_script("return document.querySelectorAll('[onerror], iframe, object').length") == 0
    assert browser.execute_script("return document.querySelectorAll('script').length") == 12, "charts and explorer, data and scripts"
    assert browser.execute_script("return Array.from(document.querySelectorAll('div.chart')).map(c => c.dataset.ready)") == ["true"] * 7
    body = browser.execute_script("return document.body.innerText")
    assert SCRIPT in body and IMG in body and MODEL in body
    with pytest.raises(NoAlertPresentException):
        _ = browser.switch_to.alert
    assert browser.title == title
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == []
    keep_screenshot(browser, "report")


def test_the_title_names_the_run_folder_and_model_never_a_cache_path(tmp_path) -> None:
    cached = tmp_path / "cache" / "memrisk" / "demo" / "7171c0e3f4a7c7b5-dfac79cdc01c6e74"
    page = write_report([make_run(tmp_path / "my-audit", model=str(cached))]).read_text(encoding="utf-8")
    title = re.search(r"<title>(.*?)</title>", page).group(1)
    assert title == "memrisk report: my-audit (7171c0e3f4a7c7b5-dfac79cdc01c6e74)"
    assert "Run: 7171c0e3f4a7c7b5-dfac79cdc01c6e74" in page and f"Run: {cached}" not in page


def test_every_rate_names_its_denominator_and_the_signatures_behind_it(report: Path) -> None:
    text = " ".join(visible_text(report.read_text(encoding="utf-8")).split())
    config_data = parse_config(config(["probabilistic", "greedy", "cbs"]))
    signatures = {m.name: m.signature(config_data) for m in configured(config_data)}
    assert "Each rate is k/n windows" in text
    for name in ("probabilistic", "greedy", "cbs"):
        assert f"{name} {signatures[name]}" in text
