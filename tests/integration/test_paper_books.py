"""The Books paper's figures and tables as a study of books runs reproduces them: each CSV recomputed from the cells'
per-book results and request logs; books studies resume, refuse a changed study and dry-run without a request."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from memrisk.books.config import load_books_config
from memrisk.books.run import run_books
from memrisk.cli import main
from memrisk.errors import MemriskError
from memrisk.study import run_study
from tests.integration.test_paper_cbs import window_rows
from tests.integration.test_paper_np import check_spec, data_rows, n_axes, page_specs, walk
from tests.unit.test_books_replay import Recorder, write_config

TEMPERATURES = (0.0, 0.7)


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))


def common_run(target: list[str], response: list[str]) -> int:
    """Longest run of words found contiguously in both (recomputed here, not imported)."""
    best = 0
    for i in range(len(target)):
        for j in range(len(response)):
            n = 0
            while i + n < len(target) and j + n < len(response) and target[i + n] == response[j + n]:
                n += 1
            best = max(best, n)
    return best


@pytest.fixture()
def study(tmp_path) -> Path:
    """Logs recorded with the fake model at two temperatures, and a study replaying them as two cells."""
    for t in TEMPERATURES:
        config = load_books_config(write_config(tmp_path, {"temperature": t}))
        run_books(config, tmp_path / f"rec-{t}", provider=Recorder(), sleep=lambda s: None, progress=False)
    base = yaml.safe_load(Path(write_config(tmp_path, {})).read_text())
    cells = [{"name": f"t{t}", "set": {"model.provider": "replay", "model.log": f"rec-{t}/requests.jsonl", "model.temperature": t}}
             for t in TEMPERATURES]
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"base": base, "cells": cells}))
    return path


def results(out: Path, cell: str) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted((out / "cells" / cell / "books").glob("*/result.json"))}


def first_successes(out: Path, cell: str, threshold: float = 0.6) -> dict[str, int | None]:
    """Per book, the smallest k whose logged Phase 1 answer covers ≥ threshold of the target, from requests.jsonl."""
    targets = {name: r["seed"]["target"].split() for name, r in results(out, cell).items()}
    firsts: dict[str, int | None] = {name: None for name in targets}
    for line in (out / "cells" / cell / "requests.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["event"] == "response" and "/phase1/" in entry["key"]:
            book, _, k = entry["key"].split("/")
            target = targets[book]
            if max(common_run(target, t.split()) for t in entry["texts"]) / len(target) >= threshold:
                firsts[book] = min(int(k), firsts[book] if firsts[book] is not None else int(k))
    return firsts


def test_each_books_figure_csv_equals_its_recomputation(study, tmp_path) -> None:
    out = tmp_path / "out"
    assert main(["study", str(study), "--out", str(out)]) == 0
    figures = out / "figures"
    page = (out / "report.html").read_text()
    for slug in ("books-table-models-books", "books-fig7-word-counts", "books-fig9a-settings", "books-fig14-best-vs-mean", "books-bon-power-law"):
        assert (figures / f"{slug}.csv").is_file(), slug
        assert f"figures/{slug}.csv" in page
    assert "cbs-" not in page and "np-fig" not in page

    table = read_csv(figures / "books-table-models-books.csv")
    assert [(r["model"], r["book"]) for r in table] == [(f"t{t}", b) for t in TEMPERATURES for b in ("b", "c")]
    for row in table:
        result = results(out, row["model"])[row["book"]]
        nv, costs = result["nv_recall"], result["costs"]
        assert int(row["matched"]) == nv["matched"] == sum(b["matched"] for b in nv["blocks"])
        assert int(row["missing"]) == 300 - nv["matched"] and int(row["book_words"]) == 300
        assert int(row["additional"]) == nv["generated_words"] - nv["matched"]
        assert float(row["nv_recall"]) == pytest.approx(nv["matched"] / 300)
        first = first_successes(out, row["model"])[row["book"]]
        assert int(row["bon_n"]) == (len(result["phase1"]["scores"]) if first is None else first + 1)
        assert int(row["phase1_requests"]) == len(result["phase1"]["scores"])
        assert row["phase1_success"] == str(max(result["phase1"]["scores"]) >= 0.6)
        assert float(row["phase1_cost_usd"]) == pytest.approx(costs["phase1"]["cost"])
        if row["phase1_success"] == "True":
            assert int(row["phase2_queries"]) == 4 and int(row["max_block"]) == max(b["matched"] for b in nv["blocks"])
    assert any(int(r["matched"]) >= 100 for r in table)
    assert any(int(r["bon_n"]) < int(r["phase1_requests"]) for r in table)  # answers in flight at the first success

    bars = read_csv(figures / "books-fig7-word-counts.csv")
    assert [(r["model"], r["book"], r["matched"], r["missing"], r["additional"]) for r in bars] == \
        [(r["model"], r["book"], r["matched"], r["missing"], r["additional"]) for r in table]

    sweep = read_csv(figures / "books-fig9a-settings.csv")
    assert [(r["setting"], r["book"], float(r["nv_recall"])) for r in sweep] == \
        [(f"temperature={t}", r["book"], float(r["nv_recall"])) for t in TEMPERATURES for r in table if r["model"] == f"t{t}"]
    for row in read_csv(figures / "books-fig14-best-vs-mean.csv"):
        values = np.array([float(r["nv_recall"]) for r in sweep if r["book"] == row["book"]])
        assert float(row["best_nv_recall"]) == pytest.approx(values.max())
        assert float(row["mean_nv_recall"]) == pytest.approx(values.mean())
        assert float(row["std_nv_recall"]) == pytest.approx(values.std())

    bon = read_csv(figures / "books-bon-power-law.csv")
    firsts = {f"t{t}": first_successes(out, f"t{t}") for t in TEMPERATURES}
    firsts["all"] = {f"{m}/{b}": k for m, per in firsts.items() for b, k in per.items()}
    assert {r["model"] for r in bon} == set(firsts)
    for model, per in firsts.items():
        rows = [r for r in bon if r["model"] == model]
        assert [int(r["n"]) for r in rows] == list(range(1, 13))
        rates = np.array([sum(k is not None and k < n for k in per.values()) / len(per) for n in range(1, 13)])
        assert [float(r["success_rate"]) for r in rows] == pytest.approx(list(rates))
        keep = (rates > 0) & (rates < 1)
        if len(np.unique(rates[keep])) >= 2:
            slope, intercept = np.polyfit(np.log(np.arange(1, 13)[keep]), np.log(-np.log(rates[keep])), 1)
            assert float(rows[0]["fit_a"]) == pytest.approx(np.exp(intercept)) and float(rows[0]["fit_b"]) == pytest.approx(-slope)
            assert float(rows[-1]["fit_rate"]) == pytest.approx(np.exp(-np.exp(intercept) * 12.0 ** slope))
        else:
            assert rows[0]["fit_a"] == ""
    assert 0 < float(bon[-1]["success_rate"]) < 1 and bon[-1]["model"] == "all" and bon[-1]["fit_a"] != ""
    check_figures(out, table, sweep, bon)


def check_figures(out: Path, table: list[dict[str, str]], sweep: list[dict[str, str]], bon: list[dict[str, str]]) -> None:
    """Each Books figure is a Vega-Lite chart of its CSV, hover showing its numbers (counts of |B|, successes as k of n,
    the fit's a and b); a books study has no windows, so no mark names one."""
    specs = page_specs(out)
    assert {slug for slug in specs if slug.startswith("books-")} == {
        "books-fig7-word-counts", "books-fig9a-settings", "books-fig14-best-vs-mean", "books-bon-power-law"}
    assert not window_rows(list(specs.values()))

    check_spec(specs["books-fig7-word-counts"], [{"book", "model", "words", "count", "book_words"}])
    words = {(p["model"], p["book"], p["words"]): p["count"] for p in data_rows(specs["books-fig7-word-counts"])}
    assert words == {(r["model"] + ("" if r["phase1_success"] == "True" else " †"), r["book"], key): int(r[key])
                     for r in table for key in ("matched", "missing", "additional")}

    check_spec(specs["books-fig9a-settings"], [{"book", "setting", "cell", "nv_recall", "of", "phase1_success"}])
    assert all(int(r["book_words"]) == 300 for r in sweep)
    assert [(p["setting"], p["book"], p["of"]) for p in data_rows(specs["books-fig9a-settings"])] == \
        [(r["setting"], r["book"], f"{int(r['matched']):,} of 300") for r in sweep]

    best = read_csv(out / "figures" / "books-fig14-best-vs-mean.csv")
    spec = specs["books-fig14-best-vs-mean"]
    check_spec(spec, [{"book", "statistic", "setting", "nv_recall", "std"}, {"book", "nv_recall", "std", "low", "high"}])
    bars = data_rows(spec)
    assert [(p["book"], p["statistic"], p["nv_recall"]) for p in bars] == [
        (r["book"], statistic, pytest.approx(float(r[key]))) for r in best
        for statistic, key in (("best setting", "best_nv_recall"), ("mean ± std over settings", "mean_nv_recall"))]
    assert [p["high"] - p["low"] for p in bars if p["std"] is not None] == [pytest.approx(2 * float(r["std_nv_recall"])) for r in best]
    assert {m["mark"]["type"] for m in walk(spec) if "mark" in m} == {"bar", "rule"}

    spec = specs["books-bon-power-law"]
    check_spec(spec, [{"series", "n", "success_rate", "within"}, {"series", "fit", "n", "fit_rate"}])
    assert n_axes(spec) == {("log", "~s")}
    points = data_rows(spec)
    measured = [p for p in points if "fit" not in p]
    assert [(p["series"], p["n"], p["within"]) for p in measured] == [(r["model"], int(r["n"]), f"{r['succeeded']} of {r['probes']}") for r in bon]
    fitted = [p for p in points if "fit" in p]
    assert [(p["series"], p["fit"]) for p in fitted] == [
        (r["model"], f"a = {float(r['fit_a']):.3g}, b = {float(r['fit_b']):.3g}") for r in bon if r["fit_a"]]
    assert fitted and all(f["fit_rate"] == pytest.approx(float(r["fit_rate"])) for f, r in zip(fitted, [r for r in bon if r["fit_a"]]))


def test_a_books_study_resumes_sends_nothing_again_and_refuses_a_changed_study(study, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    first = run_study(study, out, progress=False)
    logs = {name: (out / "cells" / name / "requests.jsonl").read_text() for name in first}
    (out / "cells" / "t0.7" / "books_summary.json").unlink()
    again = run_study(study, out, progress=False)
    assert again["t0.0"] == first["t0.0"]
    assert again["t0.7"]["requests_sent"] == 0 < first["t0.7"]["requests_sent"]  # answered from the cell's own log
    assert {**again["t0.7"], "requests_sent": 0} == {**first["t0.7"], "requests_sent": 0}
    assert (out / "cells" / "t0.0" / "requests.jsonl").read_text() == logs["t0.0"]
    replayed = [json.loads(line) for line in (out / "cells" / "t0.7" / "requests.jsonl").read_text().splitlines()]
    assert len([e for e in replayed if e["event"] == "response"]) == len([line for line in logs["t0.7"].splitlines() if '"event": "response"' in line])
    assert main(["report", str(out / "cells" / "t0.0")]) == 0
    assert (out / "cells" / "t0.0" / "report.html").is_file()

    data = yaml.safe_load(study.read_text())
    data["cells"][1]["set"]["model.max_tokens"] = 7
    study.write_text(yaml.safe_dump(data))
    with pytest.raises(MemriskError, match="differ"):
        run_study(study, out, progress=False)
    assert main(["study", str(study), "--out", str(tmp_path / "dry"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "model.provider=replay, model.temperature=0.0; per book" in printed and "per book ≤ 12 Phase 1 prompts and ≤ 4 Phase 2 turns" in printed
    assert "≤ 32 requests to replay fake-1" in printed
    assert not (tmp_path / "dry").exists()


def answers(log: Path) -> dict[str, list[str]]:
    """Each answered request's texts by request key."""
    entries = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    return {e["key"]: e["texts"] for e in entries if e["event"] == "response"}


@pytest.mark.parametrize("name", ["books-models", "books-settings"])
def test_the_ready_books_studies_replay_their_committed_logs_answer_for_answer(name, tmp_path) -> None:
    studies = Path(__file__).resolve().parents[2] / "studies"
    summaries = run_study(studies / f"{name}.yaml", tmp_path / "out", progress=False)
    for cell, summary in summaries.items():
        recorded = yaml.safe_load((studies / f"{name}.yaml").read_text())
        log = next(c["set"]["model.log"] for c in recorded["cells"] if c["name"] == cell)
        assert answers(tmp_path / "out" / "cells" / cell / "requests.jsonl") == answers(studies / "books" / log)
        assert summary["requests_sent"] == len(answers(studies / "books" / log))
        assert [b["name"] for b in summary["books"]] == ["genesis-1", "gettysburg", "psalm-23", "control"]
        assert summary["spent_usd"] == 0.0
