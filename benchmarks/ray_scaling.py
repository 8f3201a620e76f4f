"""A Ray run against a local run of the same experiment: wall time and whether the records agree.

Writes a text of standard-library docstrings, then runs one experiment (SmolLM2-135M-Instruct,
book-mode windows of 32 + 16 tokens, teacher forcing + greedy + CBS with beam 4) three ways,
each from a fresh output folder:

  (a) local       `run_experiment` in this process, torch's default threads (all cores);
  (b) local, 1T   the same with `model.threads: 1`, the thread count of a one-CPU Ray worker;
  (c) Ray         `run_experiment_on_ray` on a local Ray cluster of W one-CPU workers.

Every time includes loading the model(s); (c) also includes starting the workers, not the
cluster. It prints the times, (a)/(c) and (b)/(c), and the largest difference of any number in
the records: (b) against (c) is 0 when every thread count matches (float sums in the same
order), (a) against (c) shows what a different thread count changes in float32.

Memory: the peak of the local runs (each loads its model, so the peak holds the weights) and each Ray worker's
resident high-water mark (VmHWM, sampled twice a second during the run: its model, torch's and Ray's own modules
and the work), next to
weights + KV cache + logits of CBS's rows at beam 4 and to what `batch_size: auto` budgets for them
(`measure.memory_line`).

Run:  python benchmarks/ray_scaling.py [--workers W] [--windows N]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import ray
import yaml
from measure import direct_bytes, measured, memory_line
from teacher_forcing import docstring_text

from memrisk.config import load_config
from memrisk.distributed import run_experiment_on_ray
from memrisk.runner import load_run_model, run_experiment

BATCH, BEAMS, TOKENS = 8, 4, 32 + 16
PROCESSES = Path("/proc")
TIMINGS = {"seconds"}
"""Record fields (`seconds.<method>`) that hold wall-clock times, which differ from run to run and are not compared."""
WORKER_TITLE = b"ray::ScoringWorker"
"""How the pool's workers' processes are titled (`memrisk.distributed.ScoringWorker`, and the method running)."""


def write_config(folder: Path, windows: int, workers: int, threads: int | None) -> Path:
    """The experiment YAML over a docstring text long enough for `windows` windows at stride 64."""
    (folder / "doc.txt").write_text(docstring_text()[: windows * 64 * 4], encoding="utf-8")
    model = {"name": "smollm2", "batch_size": BATCH} | ({"threads": threads} if threads else {})
    config = {
        "model": model,
        "datasets": [{"name": "docs", "path": "doc.txt"}],
        "windows": {"mode": "book", "prefix_length": 32, "suffix_length": 16, "stride": 64},
        "methods": ["probabilistic", "greedy", "cbs"],
        "cbs": {"beam_width": BEAMS, "epsilon": 2},
        "shard_size": 4,
        "ray": {"workers": workers},
    }
    path = folder / f"exp-{threads or 'default'}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def rows(out: Path) -> list[dict]:
    """Records of a run folder by example id."""
    return sorted((r for part in sorted((out / "records").glob("*.parquet")) for r in pq.read_table(part).to_pylist()),
                  key=lambda r: r["example_id"])


def differences(first: list[dict], second: list[dict]) -> tuple[float, str, list[str]]:
    """The largest absolute difference of any finite float in two runs' records (their `TIMINGS` left out) and where it
    is, and where any other value (a token, a rank, an id) differs."""
    worst, worst_at, elsewhere = 0.0, "", []

    def walk(a: object, b: object, where: str) -> None:
        nonlocal worst, worst_at
        if isinstance(a, float) and isinstance(b, float):
            if a != b and (math.isfinite(a) or math.isfinite(b)) and abs(a - b) > worst:
                worst, worst_at = abs(a - b), f"{where}: {a!r} vs {b!r}"
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{where}[{i}]")
        elif isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
            for key in (key for key in a if key.split(".")[0] not in TIMINGS):
                walk(a[key], b[key], f"{where}.{key}")
        elif a != b:
            elsewhere.append(f"{where}: {a!r} vs {b!r}")

    walk(first, second, "records")
    return worst, worst_at, elsewhere


def ray_worker_peaks() -> dict[int, tuple[str, int]]:
    """Each live pool worker process's title (`WORKER_TITLE` and the method it runs) and resident high-water mark in
    bytes, by pid (Linux; empty elsewhere)."""
    peaks = {}
    for status in PROCESSES.glob("[0-9]*/status"):
        try:
            command = (status.parent / "cmdline").read_bytes()
            lines = status.read_text().splitlines()
        except OSError:
            continue
        if command.startswith(WORKER_TITLE):
            title = command.split(b"\0")[0].decode(errors="replace").strip()
            peaks |= {int(status.parent.name): (title, int(line.split()[1]) * 1024)
                      for line in lines if line.startswith("VmHWM:")}
    return peaks


def sampled_while(fn: Callable[[], object], every: float = 0.5) -> dict[int, tuple[str, int]]:
    """`ray_worker_peaks` read every `every` seconds while `fn` runs, each worker's last reading kept: the pool stops
    its workers when the run ends, so a reading after it would miss them (the last `every` seconds' growth may be
    missed too)."""
    seen: dict[int, tuple[str, int]] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(every):
            seen.update(ray_worker_peaks())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        fn()
    finally:
        done.set()
        sampler.join()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="one-CPU Ray workers (default 2)")
    parser.add_argument("--windows", type=int, default=48, help="about this many windows (default 48)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="memrisk-ray-bench-"))
    default, single = write_config(folder, args.windows, args.workers, None), write_config(folder, args.windows, args.workers, 1)
    times, peaks = {}, {}
    summary, times["local"], peaks["local"] = measured(
        lambda: run_experiment(load_config(default), folder / "local", progress=False))
    _, times["local, 1 thread"], peaks["local, 1 thread"] = measured(
        lambda: run_experiment(load_config(single), folder / "local-1t", progress=False))
    ray.init(num_cpus=args.workers, include_dashboard=False, logging_level="WARNING")
    workers: dict[int, tuple[str, int]] = {}
    _, times["ray"], _ = measured(lambda: workers.update(sampled_while(
        lambda: run_experiment_on_ray(load_config(single), folder / "ray", progress=False))))
    ray.shutdown()
    lm = load_run_model(load_config(single))
    cbs_rows = BATCH * (BEAMS + 1)
    print(f"{summary['examples']} windows, SmolLM2-135M, teacher forcing + greedy + CBS (beam {BEAMS}), {args.workers} Ray workers x 1 CPU")
    for name, seconds in times.items():
        memory = (memory_line(lm, peaks[name], cbs_rows, TOKENS, 1, loaded_inside=True) if name in peaks else
                  "the pool's Ray workers, whole processes: " + ", ".join(f"{title} {peak / 2**20:,.0f} MiB" for title, peak in sorted(workers.values())))
        print(f"  {name:16s} {seconds:7.1f} s; {memory}")
    print(f"  (weights+KV+logits of CBS's rows: {direct_bytes(lm, cbs_rows, TOKENS, 1) / 2**20:,.0f} MiB a process)")
    print(f"  local / ray          {times['local'] / times['ray']:.2f}x")
    print(f"  local 1 thread / ray {times['local, 1 thread'] / times['ray']:.2f}x")
    ray_rows = rows(folder / "ray")
    for name in ("local-1t", "local"):
        worst, worst_at, elsewhere = differences(ray_rows, rows(folder / name))
        print(f"  ray vs {name:8s}: max |float difference| {worst:.3g} ({worst_at or 'none'}); "
              f"other values differing: {len(elsewhere)}")
        for line in elsewhere[:10]:
            print(f"    {line}")

if __name__ == "__main__":
    main()
