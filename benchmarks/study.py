"""What a study costs against its cells run one by one: one model load and the shared passes.

A 2 × 2 study (CBS beam width × ε) with teacher forcing, greedy and CBS on SmolLM2-135M, over
windows cut from this repository's README. First each cell is run alone with the model already
loaded (`run_experiment(model=...)`), which times its scoring only; then the whole study runs with
`run_study`, which loads the model once and lets the cells share the passes they agree on (teacher
forcing and greedy here). The goal is study ≤ 1.2 × the sum of the cells' scoring times; the study's
time includes its one model load, which the cells alone do not pay. Both are measured in this one run.

Run:  python benchmarks/study.py [--stride CHARS] [--threads T]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
import yaml

from memrisk.runner import load_run_model, run_experiment
from memrisk.study import load_study, run_study

README = Path(__file__).resolve().parents[1] / "README.md"


def study_file(folder: Path, stride: int) -> Path:
    """The benchmark's study: B ∈ {1, 4} × ε ∈ {0, 2}, windows of 32 + 16 tokens every `stride` characters."""
    base = {
        "model": {"name": "smollm2", "batch_size": 4},
        "datasets": [{"name": "readme", "path": str(README)}],
        "windows": {"mode": "book", "prefix_length": 32, "suffix_length": 16, "stride": stride},
        "methods": ["probabilistic", "greedy", "cbs"],
        "shard_size": 4,
    }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump({"base": base, "grid": {"cbs.beam_width": [1, 4], "cbs.epsilon": [0, 2]}}))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--stride", type=int, default=1500, help="characters between windows (smaller: more windows)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = study_file(folder, args.stride)
        _, cells = load_study(path)
        lm = load_run_model(cells[0].config)
        alone = {}
        for cell in cells:
            started = time.perf_counter()
            summary = run_experiment(cell.config, folder / "alone" / cell.name, model=lm, progress=False)
            alone[cell.name] = time.perf_counter() - started
        del lm
        started = time.perf_counter()
        run_study(path, folder / "study", progress=False)
        study = time.perf_counter() - started
    print(f"{len(cells)} cells, {summary['examples']} windows each, torch threads {torch.get_num_threads()}")
    for name, seconds in alone.items():
        print(f"  {name:28s} alone (model loaded): {seconds:6.2f} s")
    total = sum(alone.values())
    print(f"sum of the cells alone: {total:.2f} s; study (one model load, shared passes): {study:.2f} s")
    print(f"study / sum of cells = {study / total:.2f}  (goal ≤ 1.20)")


if __name__ == "__main__":
    main()
