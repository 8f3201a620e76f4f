"""The CBS paper's figures and tables as a study reproduces them: each CSV recomputed from the cells' records."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from memrisk.cli import main
from tests.integration.test_study import write_study


def read_csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open(encoding="utf-8")))


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
