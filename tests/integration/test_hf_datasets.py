"""Hugging Face datasets and checkpoints end to end: a save_to_disk folder runs as its JSONL does, an edited one is
refused on resume, an unreachable hub dataset is one error, and a study sweeps a model's hub revisions offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from memrisk import cli
from memrisk.config import parse_config
from memrisk.runner import run_experiment
from tests.conftest import WORDS, tiny_gpt2, word_tokenizer
from tests.integration.test_run import records
from tests.integration.test_run_folder import error_line

datasets = pytest.importorskip("datasets")

ROWS = {
    "text": [" ".join(WORDS[i:] + WORDS[:i]) for i in range(0, 40, 8)] + ["", "bird sang in tree while children played every summer day"],
    "url": [f"https://example.org/{i}" for i in range(7)],
}


@pytest.fixture(autouse=True)
def no_hub(tmp_path, monkeypatch):
    """A datasets cache of the test's own, and a Hub endpoint that refuses connections at once."""
    from huggingface_hub import constants

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")


def experiment(model: str, dataset: dict, **overrides) -> dict:
    """A small doc-mode experiment over one dataset named `rows`."""
    return {
        "model": {"name": model, "batch_size": 4},
        "datasets": [{"name": "rows"} | dataset],
        "windows": {"mode": "doc", "prefix_length": 5, "suffix_length": 4},
        "policies": [{"top_k": 3}],
        "methods": ["probabilistic", "greedy"],
    } | overrides


def save_rows(folder: Path, rows: dict[str, list]) -> Path:
    datasets.Dataset.from_dict(rows).save_to_disk(folder)
    return folder


def test_a_saved_dataset_and_a_jsonl_file_of_the_same_rows_give_identical_records(tmp_path, model_dir) -> None:
    """Same example ids, token ids, texts and scores, whether the rows come from save_to_disk or from JSONL."""
    save_rows(tmp_path / "saved" / "rows", ROWS)
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps({"text": t, "url": u}) for t, u in zip(*ROWS.values())))
    for id_field in (None, "url"):
        runs = {}
        for source, path in (("saved", "saved/rows"), ("jsonl", "rows.jsonl")):
            config = parse_config(experiment(str(model_dir), {"path": path, "id_field": id_field}), tmp_path)
            run_experiment(config, tmp_path / f"{source}-{id_field}", progress=False)
            runs[source] = records(tmp_path / f"{source}-{id_field}")
        assert len(runs["saved"]) == 6
        assert runs["saved"] == runs["jsonl"]
    assert [r["doc_id"] for r in runs["saved"]] == [f"https://example.org/{i}" for i in (0, 1, 2, 3, 4, 6)]


def test_an_edited_saved_dataset_is_refused_on_resume(tmp_path, model_dir, capsys) -> None:
    save_rows(tmp_path / "rows", ROWS)
    path, out = tmp_path / "exp.yaml", str(tmp_path / "out")
    path.write_text(yaml.safe_dump(experiment(str(model_dir), {"path": "rows"})))
    assert cli.main(["run", str(path), "--out", out]) == 0
    save_rows(tmp_path / "rows", ROWS | {"text": [*ROWS["text"][:-1], "bird sang in tree while children played every summer night"]})
    assert cli.main(["run", str(path), "--out", out]) == 2
    assert "holds a run made with different settings: dataset_sha256.rows: '" in error_line(capsys)


def test_a_hub_dataset_that_cannot_be_reached_is_one_error_and_writes_nothing(tmp_path, model_dir, capsys) -> None:
    path, out = tmp_path / "exp.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(experiment(str(model_dir), {"hf": "someone/web-text", "streaming": True, "limit": 10})))
    assert cli.main(["run", str(path), "--out", str(out)]) == 2
    assert error_line(capsys) == (
        "memrisk: error: hub dataset 'someone/web-text' cannot be reached: the Hugging Face Hub does not answer "
        "([Errno 111] Connection refused) and no copy of it is cached here"
    )
    assert not out.exists()


def test_a_local_data_folder_as_hf_runs_with_streaming_and_limit(tmp_path, model_dir) -> None:
    folder = tmp_path / "web"
    folder.mkdir()
    (folder / "train.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in ROWS["text"]))
    config = parse_config(experiment(str(model_dir), {"hf": "web", "streaming": True, "limit": 3}), tmp_path)
    assert config.datasets[0].hf == str(folder)
    run_experiment(config, tmp_path / "out", progress=False)
    assert [r["example_id"] for r in records(tmp_path / "out")] == ["rows/web:1@0", "rows/web:2@0", "rows/web:3@0"]


def hub_cache_with_checkpoints(home: Path, repo: str, revisions: dict[str, int]) -> dict[str, Path]:
    """A Hugging Face cache (`HF_HOME`) holding one model repository with a snapshot per revision, as downloads
    leave it: `refs/REVISION` names a commit, `snapshots/COMMIT/` holds that checkpoint. Returns each snapshot folder."""
    tokenizer = word_tokenizer()
    folder = home / "hub" / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    snapshots = {}
    for revision, seed in revisions.items():
        commit = f"{seed:040x}"
        snapshot = folder / "snapshots" / commit
        tiny_gpt2(vocab_size=len(tokenizer), seed=seed, n_positions=256).save_pretrained(snapshot)
        tokenizer.save_pretrained(snapshot)
        (folder / "refs" / revision).write_text(commit)
        snapshots[revision] = snapshot
    return snapshots


def test_a_study_over_model_revision_loads_each_checkpoint_and_shares_no_pass_between_them(tmp_path) -> None:
    """Each cell's records equal a run of its own checkpoint's folder, and the two checkpoints' records differ."""
    snapshots = hub_cache_with_checkpoints(tmp_path / "hf-home", "memrisk-test/tiny", {"step100": 3, "step200": 4})
    rows = experiment("memrisk-test/tiny", {"documents": ROWS["text"][:5]})
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"base": rows, "grid": {"model.revision": ["step100", "step200"]}}))
    env = os.environ | {"HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "memrisk.cli", "study", str(study), "--out", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cells = {revision: tmp_path / "out" / "cells" / f"revision={revision}" for revision in snapshots}
    for revision, snapshot in snapshots.items():
        provenance = json.loads((cells[revision] / "versions.json").read_text())["model"]
        assert provenance["revision"] == revision
        run_experiment(parse_config(rows | {"model": {"name": str(snapshot), "batch_size": 4}}), tmp_path / revision, progress=False)
        assert records(cells[revision]) == records(tmp_path / revision)
    step100, step200 = (records(cells[revision]) for revision in snapshots)
    assert [r["example_id"] for r in step100] == [r["example_id"] for r in step200]
    assert [r["target_ranks"] for r in step100] != [r["target_ranks"] for r in step200]
