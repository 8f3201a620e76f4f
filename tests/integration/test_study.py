"""`memrisk study`: a grid of cells, each an ordinary run folder equal to `memrisk run` of its resolved config."""

from __future__ import annotations

import html
import json

import pyarrow.parquet as pq
import pytest
import yaml

from memrisk.cli import main
from memrisk.errors import MemriskError
from memrisk.methods.base import is_measurement
from memrisk.report.markup import count_rate
from memrisk.runner import load_run_model, run_experiment
from memrisk.study import cell_name, load_study, run_study, set_dotted
from tests.integration.test_run import records, write_config


def write_study(folder, model_dir, grid, methods=("probabilistic", "cbs")) -> str:
    """A study over test_run's experiment (by default probabilistic + CBS) with `grid`."""
    base = yaml.safe_load(write_config(folder, model_dir, methods=list(methods)).read_text())
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump({"base": base, "grid": grid}))
    return str(path)


GRID = {"cbs.beam_width": [1, 2], "cbs.epsilon": [0, 1]}


def test_each_cell_equals_memrisk_run_of_its_config_and_the_model_loads_once(tmp_path, model_dir) -> None:
    """2 × 2 cells in product order; the same thread count and batch layout give bitwise-equal records."""
    loads = []

    def load(config):
        loads.append(config.model.name)
        return load_run_model(config)

    study = write_study(tmp_path, model_dir, GRID)
    summaries = run_study(study, tmp_path / "out", progress=False, load=load)
    names = ["beam_width=1_epsilon=0", "beam_width=1_epsilon=1", "beam_width=2_epsilon=0", "beam_width=2_epsilon=1"]
    assert list(summaries) == names
    assert loads == [str(model_dir)]
    _, cells = load_study(study)
    for cell in cells:
        assert (cell.config.cbs.beam_width, cell.config.cbs.epsilon) == (cell.changes["cbs.beam_width"], cell.changes["cbs.epsilon"])
        single = run_experiment(cell.config, tmp_path / "single" / cell.name, progress=False)
        assert records(tmp_path / "out" / "cells" / cell.name) == records(tmp_path / "single" / cell.name)
        assert summaries[cell.name] == single


def wall_times(out, name: str) -> list[dict[str, float]]:
    """Each record's `seconds.*` columns, by example id: a reused pass carries the time it took where it was computed."""
    rows = pq.read_table(out / "cells" / name / "records").to_pylist()
    return [{k: v for k, v in r.items() if is_measurement(k)} for r in sorted(rows, key=lambda r: r["example_id"])]


def test_cells_that_agree_on_a_pass_share_it_and_still_equal_their_own_runs(tmp_path, model_dir) -> None:
    """Cells differing in their policies share one teacher-forcing pass (scored under the union of their
    policies) and, since the CBS policy and settings agree, one CBS pass; greedy is shared by all. Every cell's
    records still equal `memrisk run` of its config, bitwise (each policy's scores are its own)."""
    grid = {"policies": [[{"top_k": 3}, {"name": "full"}], [{"top_k": 3}, {"top_k": 2, "temperature": 0.7}]],
            "cbs.epsilon": [0, 1]}
    study = write_study(tmp_path, model_dir, grid, methods=("probabilistic", "greedy", "cbs"))
    run_study(study, tmp_path / "out", progress=False)
    _, cells = load_study(study)
    for cell in cells:
        run_experiment(cell.config, tmp_path / "single" / cell.name, progress=False)
        assert records(tmp_path / "out" / "cells" / cell.name) == records(tmp_path / "single" / cell.name)
    times = {cell.name: wall_times(tmp_path / "out", cell.name) for cell in cells}
    first, *others = cells
    for cell in others:
        for mine, theirs in zip(times[cell.name], times[first.name]):
            assert mine["seconds.teacher_forcing"] == theirs["seconds.teacher_forcing"], "one teacher-forcing pass"
            assert mine["seconds.greedy"] == theirs["seconds.greedy"], "one greedy pass"
    cbs_times = {cell.name: [r["seconds.cbs"] for r in times[cell.name]] for cell in cells}
    for a in cells:
        for b in cells:
            same = a.config.cbs.epsilon == b.config.cbs.epsilon  # the CBS policy (top-3) is the same in every cell
            assert (cbs_times[a.name] == cbs_times[b.name]) == same, f"{a.name} and {b.name}"


def test_a_cell_that_reads_no_moments_shares_the_pass_that_computes_them(tmp_path, model_dir) -> None:
    """Teacher forcing computes the Min-K%++ moments only for membership inference; in a study whose first cell has
    no membership method and whose second has, both cells share one pass that computes them, and each cell's records
    still equal `memrisk run` of its config, bitwise."""
    study = write_study(tmp_path, model_dir, {"methods": [["probabilistic"], ["probabilistic", "membership"]]})
    run_study(study, tmp_path / "out", progress=False)
    _, (plain, membership) = load_study(study)
    for cell in (plain, membership):
        run_experiment(cell.config, tmp_path / "single" / cell.name, progress=False)
        assert records(tmp_path / "out" / "cells" / cell.name) == records(tmp_path / "single" / cell.name)
    mine, theirs = wall_times(tmp_path / "out", plain.name), wall_times(tmp_path / "out", membership.name)
    assert [r["seconds.teacher_forcing"] for r in mine] == [r["seconds.teacher_forcing"] for r in theirs], "one pass"
    assert "mia.min_k_pp" in records(tmp_path / "out" / "cells" / membership.name)[0]


def test_a_cell_without_prior_aware_shares_the_pass_that_scores_its_full_distribution(tmp_path, model_dir) -> None:
    """Prior-aware reads P(s|p) from the teacher-forcing pass, which then scores the full distribution too; in a study
    of top-k cells whose second cell has prior-aware, both cells share that one pass, and each cell's records still
    equal `memrisk run` of its config, bitwise."""
    base = yaml.safe_load(write_config(tmp_path, model_dir, methods=["probabilistic"], policies=[{"top_k": 3}],
                                       prior_aware={"prefixes_per_trial": 3, "trials": 2, "n": 1.0}).read_text())
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"base": base, "grid": {"methods": [["probabilistic"], ["probabilistic", "prior_aware"]]}}))
    run_study(str(path), tmp_path / "out", progress=False)
    _, (plain, prior) = load_study(str(path))
    for cell in (plain, prior):
        run_experiment(cell.config, tmp_path / "single" / cell.name, progress=False)
        assert records(tmp_path / "out" / "cells" / cell.name) == records(tmp_path / "single" / cell.name)
    mine, theirs = wall_times(tmp_path / "out", plain.name), wall_times(tmp_path / "out", prior.name)
    assert [r["seconds.teacher_forcing"] for r in mine] == [r["seconds.teacher_forcing"] for r in theirs], "one pass"


def test_a_rerun_runs_only_the_missing_cells_and_a_changed_study_is_refused(tmp_path, model_dir) -> None:
    study = write_study(tmp_path, model_dir, {"cbs.beam_width": [1, 2]})
    run_study(study, tmp_path / "out", progress=False)
    kept = tmp_path / "out" / "cells" / "beam_width=1" / "summary.json"
    stamp = kept.stat().st_mtime_ns
    (tmp_path / "out" / "cells" / "beam_width=2" / "summary.json").unlink()
    loads = []
    run_study(study, tmp_path / "out", progress=False, load=lambda config: loads.append(1) or load_run_model(config))
    assert kept.stat().st_mtime_ns == stamp and loads == [1]
    assert (tmp_path / "out" / "cells" / "beam_width=2" / "summary.json").is_file()
    changed = write_study(tmp_path, model_dir, {"cbs.beam_width": [1, 3]})
    with pytest.raises(MemriskError, match=r"holds a run made with different settings: cells\.beam_width=2: .* → '\(unset\)'; cells\.beam_width=3: '\(unset\)' → "):
        run_study(changed, tmp_path / "out", progress=False)


def test_dry_run_lists_cells_and_costs_without_writing(tmp_path, model_dir, capsys) -> None:
    study = write_study(tmp_path, model_dir, GRID)
    assert main(["study", study, "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"4 cells into {tmp_path / 'out'}/:"
    # a = 6 prefix tokens + BOS, T = 5: teacher forcing a + T = 12; CBS a + (T − 1)(B + 1) = 7 + 4·(B + 1)
    assert lines[1] == "  cells/beam_width=1_epsilon=0: cbs.beam_width=1, cbs.epsilon=0; token evaluations per window: probabilistic ≤ 12, cbs ≤ 15"
    assert lines[4] == "  cells/beam_width=2_epsilon=1: cbs.beam_width=2, cbs.epsilon=1; token evaluations per window: probabilistic ≤ 12, cbs ≤ 19"
    assert lines[5] == "estimated cost (tokenizers and model configs read, no weights):"
    assert not (tmp_path / "out").exists()
    summaries = run_study(study, tmp_path / "out", progress=False)
    windows = summaries["beam_width=1_epsilon=0"]["examples"]
    assert lines[6].startswith(f"  cells/beam_width=1_epsilon=0: {windows:,} windows, ≤ {windows * 27:,} token evaluations, ≥ ")
    assert lines[6].endswith(" s at the matmul peak")
    assert main(["study", study, "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    again = capsys.readouterr().out.splitlines()
    assert again[6].startswith(lines[6]) and again[6].endswith(" s at the rate of the complete cells"), again[6]


def test_set_changes_every_cell_and_is_part_of_the_study(tmp_path, model_dir, capsys) -> None:
    """`--set windows.limit=1` keeps one window per dataset in every cell; a study run with it is not the study run
    without it (a resume refuses the change)."""
    study = write_study(tmp_path, model_dir, {"cbs.beam_width": [1, 2]})
    _, plain = load_study(study)
    _, capped = load_study(study, overrides={"windows.limit": 1})
    assert [c.config.windows.limit for c in capped] == [1, 1] and [c.config.windows.limit for c in plain] == [None, None]
    assert [c.config.model_copy(update={"windows": c.config.windows.model_copy(update={"limit": None})}) for c in capped] == [c.config for c in plain]
    out = tmp_path / "out"
    assert main(["study", study, "--out", str(out), "--set", "windows.limit=1"]) == 0
    datasets = len({d.name for d in plain[0].config.scored_datasets()})
    assert [json.loads((out / "cells" / c.name / "summary.json").read_text())["examples"] for c in capped] == [datasets] * 2
    with pytest.raises(MemriskError, match="holds a run made with different settings"):
        run_study(study, out, progress=False)
    with pytest.raises(SystemExit) as exit:
        main(["study", study, "--set", "windows.limit"])
    assert exit.value.code == 2
    assert "give KEY=VALUE" in capsys.readouterr().err


def test_dotted_keys_reach_into_sections_and_list_items() -> None:
    data = {"cbs": {"beam_width": 20}, "policies": [{"top_k": 40}]}
    set_dotted(data, "cbs.epsilon", 2)
    set_dotted(data, "policies.0.top_k", 5)
    assert data == {"cbs": {"beam_width": 20, "epsilon": 2}, "policies": [{"top_k": 5}]}
    with pytest.raises(MemriskError, match="study key 'cbs.beam_width.x': cbs.beam_width is a value, not a section"):
        set_dotted(data, "cbs.beam_width.x", 1)
    with pytest.raises(MemriskError, match="study key 'policies.3.top_k': policies has no item 3"):
        set_dotted(data, "policies.3.top_k", 1)
    assert cell_name({"cbs.prune": "none", "policies.0.top_p": 0.9}) == "prune=none_top_p=0.9"


def test_a_cell_with_an_invalid_config_is_named_in_the_error(tmp_path, model_dir) -> None:
    study = write_study(tmp_path, model_dir, {"cbs.beam_width": [2, 0]})
    assert main(["study", study, "--out", str(tmp_path / "out")]) == 2


def test_every_ready_study_validates_and_dry_runs(capsys) -> None:
    """The study configs shipped in studies/ expand to valid cells without loading a model."""
    from pathlib import Path

    shipped = sorted((Path(__file__).resolve().parents[2] / "studies").glob("*.yaml"))
    assert shipped
    for path in shipped:
        assert main(["study", str(path), "--dry-run"]) == 0
        assert "cells into" in capsys.readouterr().out


def test_the_study_report_tabulates_every_cell_and_draws_each_number_against_each_axis(tmp_path, model_dir) -> None:
    import csv

    study = write_study(tmp_path, model_dir, GRID)
    out = tmp_path / "out"
    assert main(["study", study, "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "study.csv").read_text().splitlines()))
    assert [r["cell"] for r in rows] == ["beam_width=1_epsilon=0", "beam_width=1_epsilon=1", "beam_width=2_epsilon=0", "beam_width=2_epsilon=1"]
    for row in rows:
        summary = json.loads((out / "cells" / row["cell"] / "summary.json").read_text())
        story = summary["datasets"]["story"]
        assert float(row["story.cbs_rate"]) == story["cbs"]["rate"]["levenshtein"][row["cbs.epsilon"]]
        assert float(row["story.p_z_rate.topk3"]) == story["probabilistic"]["topk3"]["rate"]
        assert float(row["story.token_evals_per_window.cbs"]) == story["token_evals"]["cbs"]["per_window"]
    figures = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert "study-cbs.beam_width-story.cbs_rate.png" in figures and "study-cbs.epsilon-control.cbs_rate.png" in figures
    page = (out / "report.html").read_text()
    assert "Study: 4 cells over cbs.beam_width, cbs.epsilon" in page and page.count("<figure") == len(figures)
    assert page.count('class="memrisk-explorer-data"') == 4 and page.count('class="explorer-picker"') == 1
    for row in rows:  # the page shows each rate as k/n windows of its dataset, with the signatures behind it
        summary = json.loads((out / "cells" / row["cell"] / "summary.json").read_text())
        n = summary["datasets"]["story"]["examples"]
        assert count_rate(round(float(row["story.cbs_rate"]) * n), n) in page
        assert all(html.escape(line) in page for line in summary["signatures"].values())
    assert main(["report", str(out)]) == 0
