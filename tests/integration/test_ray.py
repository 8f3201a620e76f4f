"""`memrisk run --ray` on a real local Ray cluster (127.0.0.1, 2 CPU workers), teacher forcing +
greedy + CBS + prior-aware on a tiny model: a killed worker's chunk is redone, a killed driver's
run resumes locally, a local run resumes on Ray, and every record equals the local run's."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from memrisk.config import load_config
from memrisk.distributed import run_experiment_on_ray, worker_resources
from memrisk.layout import RAY_RUN
from memrisk.errors import MemriskError
from memrisk.runner import run_experiment
from memrisk.study import run_study
from tests import numerics
from tests.conftest import TINY_HIDDEN, word_tokenizer
from tests.numerics import reorder_tolerance
from tests.integration.test_run import interrupted_run, records, write_config
from tests.launcher import Child, Launcher

pytestmark = pytest.mark.slow
EXPERIMENT = {
    "methods": ["probabilistic", "greedy", "cbs", "prior_aware"],
    "cbs": {"beam_width": 4, "epsilon": 2, "max_children": 8},
    "prior_aware": {"prefixes_per_trial": 6, "trials": 2, "m": 1e-3, "generic_sequences": ["the quick brown fox jumps over the lazy dog"]},
    "windows": {"mode": "book", "prefix_length": 6, "suffix_length": 5, "stride": 20},
    "shard_size": 2,
    "ray": {"workers": 2},
}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory, model_dir) -> tuple[Path, list[dict]]:
    """The config file and the records of its local run."""
    folder = tmp_path_factory.mktemp("experiment")
    path = write_config(folder, model_dir, **EXPERIMENT)
    run_experiment(load_config(path), folder / "local", progress=False)
    return path, records(folder / "local")


# Ray workers run one thread each while a local run uses the machine's thread count: floats agree
# to the float32 reordering bound of tests/numerics.py, everything else exactly.
FLOAT32_REORDER_TOLERANCE = reorder_tolerance(EXPERIMENT["windows"]["suffix_length"], len(word_tokenizer()), TINY_HIDDEN)


def assert_same_records(got: list[dict], want: list[dict]) -> None:
    """Same examples and sequences; every number within the float32 reordering bound."""
    numerics.assert_same_records(got, want, FLOAT32_REORDER_TOLERANCE)


def assert_close(got, want, where: str) -> None:
    numerics.assert_close(got, want, FLOAT32_REORDER_TOLERANCE, where)


def worker_pids() -> list[int]:
    """Processes of live memrisk Ray workers on this machine."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if command.startswith(b"ray::ScoringWorker"):
            pids.append(int(entry.name))
    return pids


def committed_shards(out: Path) -> int:
    manifest = out / "manifest.json"
    return len(json.loads(manifest.read_text())["shards"]) if manifest.exists() else 0


def start_ray_run(launcher: Launcher, path: Path, out: Path, address: str) -> Child:
    """`memrisk run PATH --out OUT --ray ADDRESS` as its own process (a driver that can be killed)."""
    return launcher.start(["run", str(path), "--out", str(out), "--ray", address])


def wait_for_shards(child: Child, out: Path, count: int) -> None:
    deadline = time.monotonic() + 180
    while committed_shards(out) < count:
        assert child.running(), child.tail()
        assert time.monotonic() < deadline, "the Ray run committed nothing in 180 s"
        time.sleep(0.02)


def test_killed_worker_chunk_is_redone_and_records_equal_the_local_run(tmp_path, ray_cluster, launcher, experiment) -> None:
    path, local = experiment
    out = tmp_path / "ray"
    child = start_ray_run(launcher, path, out, ray_cluster)
    wait_for_shards(child, out, 2)
    victims = worker_pids()
    assert len(victims) == 2
    os.kill(victims[0], signal.SIGKILL)
    shards_at_kill = committed_shards(out)
    assert launcher.wait(child, timeout=300) == 0, child.tail()
    assert shards_at_kill < math.ceil(len(local) / 2) == committed_shards(out)
    report = json.loads((out / RAY_RUN).read_text())
    assert report["replaced_workers"] >= 1 and sum(report["retried_chunks"].values()) >= 1
    assert len(report["workers"]) == 2 and all(w["device"] == "cpu" for w in report["workers"])
    assert victims[0] in [w["pid"] for w in report["workers"]]
    assert [w["pid"] for w in report["replacements"]] and not set(victims) & {w["pid"] for w in report["replacements"]}
    assert_same_records(records(out), local)
    local_folder = path.parent / "local"
    for name in ("summary.json", "prior_aware.json", "windows.json"):
        assert_close(json.loads((out / name).read_text()), json.loads((local_folder / name).read_text()), name)


def test_killed_driver_resumes_locally_and_a_local_run_resumes_on_ray(
    tmp_path, ray_cluster, launcher, experiment, monkeypatch,
) -> None:
    path, local = experiment
    out = tmp_path / "driver-killed"
    child = start_ray_run(launcher, path, out, ray_cluster)
    wait_for_shards(child, out, 2)
    launcher.kill(child)
    assert launcher.wait(child) == -signal.SIGKILL
    partial = len(records(out))
    assert 0 < partial < len(local)
    run_experiment(load_config(path), out, progress=False)
    assert_same_records(records(out), local)

    resumed = tmp_path / "local-then-ray"
    interrupted_run(load_config(path), resumed, monkeypatch, chunks=2)
    assert len(records(resumed)) == 4
    run_experiment_on_ray(load_config(path), resumed, address=ray_cluster, progress=False)
    assert_same_records(records(resumed), local)
    report = json.loads((resumed / RAY_RUN).read_text())
    assert report["chunks"] == math.ceil((len(local) - 4) / 2) and report["replaced_workers"] == 0


def test_worker_count_follows_the_cluster_unless_configured(tmp_path, model_dir) -> None:
    config = load_config(write_config(tmp_path, model_dir))
    assert worker_resources(config, {"CPU": 8.0}) == (8, 1.0, 0.0)
    assert worker_resources(config, {"CPU": 16.0, "GPU": 4.0}) == (4, 1.0, 1.0)
    on_cpu = load_config(write_config(tmp_path, model_dir, model={"name": str(model_dir), "device": "cpu"}))
    assert worker_resources(on_cpu, {"CPU": 16.0, "GPU": 4.0}) == (16, 1.0, 0.0)
    sized = load_config(write_config(tmp_path, model_dir, ray={"workers": 2, "cpus_per_worker": 2, "gpus_per_worker": 0.5}))
    assert worker_resources(sized, {"CPU": 4.0, "GPU": 1.0}) == (2, 2.0, 0.5)
    with pytest.raises(MemriskError, match=r"2 workers × \(2 CPU, 0.5 GPU\) do not fit the Ray cluster \(3 CPU, 1 GPU\)"):
        worker_resources(sized, {"CPU": 3.0, "GPU": 1.0})


def test_placement_settings_do_not_block_a_resume(tmp_path, model_dir) -> None:
    base = load_config(write_config(tmp_path, model_dir))
    moved = load_config(write_config(
        tmp_path, model_dir, ray={"workers": 3, "max_retries": 1}, shard_size=7,
        model={"name": str(model_dir), "batch_size": "auto", "compile": True, "device_map": "auto", "threads": 1},
    ))
    assert base.identity() == moved.identity()


def test_bad_model_fails_with_one_error_and_writes_nothing(tmp_path, ray_cluster, launcher, model_dir) -> None:
    path = write_config(tmp_path, model_dir, model={"name": str(tmp_path / "no-such-model")}, ray={"workers": 1, "max_retries": 0})
    child = start_ray_run(launcher, path, tmp_path / "out", ray_cluster)
    assert launcher.wait(child, timeout=300) == 2, child.tail()
    assert child.output.read_text().count(f"memrisk: error: could not load model '{tmp_path / 'no-such-model'}'") == 1
    assert not (tmp_path / "out").exists()


def test_a_study_on_ray_keeps_one_pool_for_its_model_and_equals_the_local_study(tmp_path, ray_cluster, model_dir) -> None:
    """Two cells (B = 1, 2) on 2 workers: the same workers (one model load each) score both cells, and every
    cell's records equal the local study's within the float32 reordering bound."""
    base = yaml.safe_load(write_config(tmp_path, model_dir, **EXPERIMENT | {"methods": ["probabilistic", "cbs"]}).read_text())
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"base": base, "grid": {"cbs.beam_width": [1, 2]}}))
    run_study(study, tmp_path / "local", progress=False)
    run_study(study, tmp_path / "ray", progress=False, ray=True, ray_address=ray_cluster)
    pools = []
    for cell in ("beam_width=1", "beam_width=2"):
        assert_same_records(records(tmp_path / "ray" / "cells" / cell), records(tmp_path / "local" / "cells" / cell))
        pools.append(sorted(w["pid"] for w in json.loads((tmp_path / "ray" / "cells" / cell / "ray_run.json").read_text())["workers"]))
    assert pools[0] == pools[1] and len(pools[0]) == 2


def test_missing_ray_is_one_clear_error(tmp_path, model_dir, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MemriskError, match=r"--ray needs Ray: pip install 'memrisk\[ray\]'"):
        run_experiment_on_ray(load_config(write_config(tmp_path, model_dir)), tmp_path / "out")
    assert not (tmp_path / "out").exists()
