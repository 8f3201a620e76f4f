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

Run:  python benchmarks/ray_scaling.py [--workers W] [--windows N]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import ray
import yaml
from teacher_forcing import docstring_text

from memrisk.config import load_config
from memrisk.distributed import run_experiment_on_ray
from memrisk.runner import run_experiment


def write_config(folder: Path, windows: int, workers: int, threads: int | None) -> Path:
    """The experiment YAML over a docstring text long enough for `windows` windows at stride 64."""
    (folder / "doc.txt").write_text(docstring_text()[: windows * 64 * 4], encoding="utf-8")
    model = {"name": "smollm2", "batch_size": 8} | ({"threads": threads} if threads else {})
    config = {
        "model": model,
        "datasets": [{"name": "docs", "path": "doc.txt"}],
        "windows": {"mode": "book", "prefix_length": 32, "suffix_length": 16, "stride": 64},
        "methods": ["probabilistic", "greedy", "cbs"],
        "cbs": {"beam_width": 4, "epsilon": 2},
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


def differences(first: list[dict], second: list[dict]) -> tuple[float, list[str]]:
    """The largest absolute difference of any finite float in two runs' records, and where any
    other value (a token, a rank, an id) differs."""
    worst, elsewhere = 0.0, []

    def walk(a: object, b: object, where: str) -> None:
        nonlocal worst
        if isinstance(a, float) and isinstance(b, float):
            if a != b and (math.isfinite(a) or math.isfinite(b)):
                worst = max(worst, abs(a - b))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{where}[{i}]")
        elif isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
            for key in a:
                walk(a[key], b[key], f"{where}.{key}")
        elif a != b:
            elsewhere.append(f"{where}: {a!r} vs {b!r}")

    walk(first, second, "records")
    return worst, elsewhere


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="one-CPU Ray workers (default 2)")
    parser.add_argument("--windows", type=int, default=48, help="about this many windows (default 48)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="memrisk-ray-bench-"))
    default, single = write_config(folder, args.windows, args.workers, None), write_config(folder, args.windows, args.workers, 1)
    times = {}
    start = time.perf_counter()
    summary = run_experiment(load_config(default), folder / "local", progress=False)
    times["local"] = time.perf_counter() - start
    start = time.perf_counter()
    run_experiment(load_config(single), folder / "local-1t", progress=False)
    times["local, 1 thread"] = time.perf_counter() - start
    ray.init(num_cpus=args.workers, include_dashboard=False, logging_level="WARNING")
    start = time.perf_counter()
    run_experiment_on_ray(load_config(single), folder / "ray", progress=False)
    times["ray"] = time.perf_counter() - start
    ray.shutdown()
    print(f"{summary['examples']} windows, SmolLM2-135M, teacher forcing + greedy + CBS (beam 4), {args.workers} Ray workers x 1 CPU")
    for name, seconds in times.items():
        print(f"  {name:16s} {seconds:7.1f} s")
    print(f"  local / ray          {times['local'] / times['ray']:.2f}x")
    print(f"  local 1 thread / ray {times['local, 1 thread'] / times['ray']:.2f}x")
    ray_rows = rows(folder / "ray")
    for name in ("local-1t", "local"):
        worst, elsewhere = differences(ray_rows, rows(folder / name))
        print(f"  ray vs {name:8s}: max |float difference| {worst:.3g}; other values differing: {len(elsewhere)}")
        for line in elsewhere[:10]:
            print(f"    {line}")

if __name__ == "__main__":
    main()
