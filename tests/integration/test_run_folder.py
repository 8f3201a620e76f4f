"""A run folder has one writer and one set of settings: locks, refused changes, allowed changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from memrisk import cli
from memrisk.config import load_config
from memrisk.layout import LOCK
from memrisk.lock import FolderLock
from memrisk.runner import run_experiment
from memrisk.store import setting_changes
from tests.conftest import TINY_HIDDEN, word_tokenizer
from tests.numerics import assert_same_records, reorder_tolerance
from tests.integration.test_run import STORY, interrupted_run, records, write_config

HELD_CHUNKS = """
import os, sys, time
import memrisk.runner as runner
real, scored = runner.score_chunk, []
def held(*args, **kwargs):
    scored.append(1)
    while len(scored) > 1 and not os.path.exists(os.environ["MEMRISK_TEST_GATE"]):
        time.sleep(0.02)
    return real(*args, **kwargs)
runner.score_chunk = held
from memrisk.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""`memrisk run ARGS` that commits its first chunk, then scores the next only once the file $MEMRISK_TEST_GATE exists."""


def error_line(capsys) -> str:
    """The one `memrisk: error:` line the CLI printed."""
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("memrisk: error:")]
    return line


def test_a_folder_locked_by_a_live_process_is_refused(tmp_path, model_dir, capsys) -> None:
    path, out = write_config(tmp_path, model_dir), tmp_path / "out"
    out.mkdir()
    holder = FolderLock(out)
    holder.acquire()
    try:
        assert cli.main(["run", str(path), "--out", str(out)]) == 2
        line = error_line(capsys)
        assert f"{out} is being written by another memrisk process (pid {os.getpid()} on" in line
        assert "wait for it to finish, or use another --out folder" in line
        assert sorted(p.name for p in out.iterdir()) == [LOCK]
    finally:
        holder.release()
    assert list(out.iterdir()) == []


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path, model_dir, caplog) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text(json.dumps({"pid": 999999, "host": "elsewhere", "since": "then", "command": "memrisk run"}))
    with caplog.at_level("WARNING", logger="memrisk.lock"):
        run_experiment(load_config(write_config(tmp_path, model_dir)), out, progress=False)
    assert "took over the lock left by pid 999999 on elsewhere" in caplog.text
    assert not (out / LOCK).exists() and (out / "summary.json").is_file()


@pytest.mark.slow
def test_two_runs_on_one_folder_one_is_refused_and_the_records_stay_whole(tmp_path, model_dir, launcher) -> None:
    """The second run starts, with another shard size, while the first has committed its first chunk and waits to score
    the next (held until the second has been refused)."""
    first_config = write_config(tmp_path, model_dir, shard_size=1)
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    second_config = write_config(second_dir, model_dir, shard_size=3)
    out, gate = tmp_path / "out", tmp_path / "gate"
    first = subprocess.Popen([sys.executable, "-c", HELD_CHUNKS, "run", str(first_config), "--out", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "MEMRISK_TEST_GATE": str(gate)})
    deadline = time.monotonic() + 120
    while not (out / "manifest.json").exists() or not json.loads((out / "manifest.json").read_text())["shards"]:
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
        time.sleep(0.05)
    second = launcher.start(["run", str(second_config), "--out", str(out)])
    second_status = launcher.wait(second, timeout=120)
    assert first.poll() is None, "the first run finished before the second was refused"
    gate.touch()
    assert first.wait(timeout=120) == 0
    assert second_status == 2, second.tail()
    assert f"is being written by another memrisk process (pid {first.pid} on" in second.output.read_text()
    clean = tmp_path / "clean"
    run_experiment(load_config(first_config), clean, progress=False)
    got = records(out)
    assert len({r["example_id"] for r in got}) == len(got) == json.loads((out / "manifest.json").read_text())["rows"]
    assert got == records(clean)
    assert json.loads((out / "summary.json").read_text())["examples"] == len(got)


def test_an_edited_dataset_is_refused_naming_it(tmp_path, model_dir, capsys) -> None:
    path, out = write_config(tmp_path, model_dir), str(tmp_path / "out")
    assert cli.main(["run", str(path), "--out", out]) == 0
    (tmp_path / "story.txt").write_text(STORY + " bird", encoding="utf-8")
    assert cli.main(["run", str(path), "--out", out]) == 2
    line = error_line(capsys)
    assert "holds a run made with different settings: dataset_sha256.story: '" in line
    assert "control" not in line and "--force" in line


def test_settings_that_do_not_change_results_resume(tmp_path, model_dir, monkeypatch) -> None:
    """Shard size, threads, batch size and Ray placement may change between invocations. Rows
    batched differently are summed in another float32 order: floats agree to the bound of
    tests/numerics.py, ids and tokens exactly."""
    out = tmp_path / "out"
    first = load_config(write_config(tmp_path, model_dir, shard_size=2))
    interrupted_run(first, out, monkeypatch, chunks=2)
    moved = load_config(write_config(
        tmp_path, model_dir, shard_size=5, ray={"workers": 3},
        model={"name": str(model_dir), "batch_size": 1, "threads": torch.get_num_threads()},
    ))
    run_experiment(moved, out, progress=False)
    run_experiment(first, tmp_path / "clean", progress=False)
    assert_same_records(records(out), records(tmp_path / "clean"), reorder_tolerance(5, len(word_tokenizer()), TINY_HIDDEN))


def test_setting_changes_names_dotted_keys() -> None:
    old = {"model": {"name": "a", "dtype": "auto"}, "policies": [{"top_k": 40}], "tau_min": 0.001}
    new = {"model": {"name": "b", "dtype": "auto"}, "policies": [{"top_k": 40}, {"top_k": 1}], "seed": 3, "tau_min": 0.001}
    assert setting_changes(old, new) == [
        "model.name: 'a' → 'b'",
        "policies: [{'top_k': 40}] → [{'top_k': 40}, {'top_k': 1}]",
        "seed: '(unset)' → 3",
    ]
    assert setting_changes(old, old) == []
    assert setting_changes({"p": [{"k": 1}, {"k": 2}]}, {"p": [{"k": 1}, {"k": 3}]}) == ["p[1].k: 2 → 3"]


def test_report_waits_for_no_one_but_refuses_a_folder_being_written(tmp_path, model_dir, capsys) -> None:
    out = tmp_path / "out"
    run_experiment(load_config(write_config(tmp_path, model_dir)), out, progress=False)
    holder = FolderLock(Path(out))
    holder.acquire()
    try:
        assert cli.main(["report", str(out)]) == 2
        assert "is being written by another memrisk process" in error_line(capsys)
    finally:
        holder.release()
    assert cli.main(["report", str(out), str(out)]) == 0


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_resume_rescores_a_damaged_part_and_says_so(tmp_path, model_dir, caplog, damage) -> None:
    config = load_config(write_config(tmp_path, model_dir))
    out = tmp_path / "out"
    run_experiment(config, out, progress=False)
    part = out / "records" / "part-00001.parquet"
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2] if damage == "truncated" else b"")
    with caplog.at_level("WARNING", logger="memrisk.store"):
        run_experiment(config, out, progress=False)
    assert f"{part} is damaged" in caplog.text and "its records are dropped and their examples scored again" in caplog.text
    run_experiment(config, tmp_path / "clean", progress=False)
    got = records(out)
    assert_same_records(got, records(tmp_path / "clean"), reorder_tolerance(5, len(word_tokenizer()), TINY_HIDDEN))
    manifest = json.loads((out / "manifest.json").read_text())
    assert "part-00001.parquet" not in manifest["shards"] and manifest["rows"] == len(got)
    assert json.loads((out / "summary.json").read_text())["examples"] == len(got)
