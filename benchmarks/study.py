"""What a study costs against its cells run one by one: one model load and the shared passes.

A 2 × 2 study (CBS beam width × ε) with teacher forcing, greedy and CBS on SmolLM2-135M, over
windows cut from this repository's README. First each cell is run alone with the model already
loaded (`run_experiment(model=...)`), which times its scoring only; then the whole study runs with
`run_study`, which loads the model once and lets the cells share the passes they agree on (teacher
forcing and greedy here). The goal is study ≤ 1.2 × the sum of the cells' scoring times; the study's
time includes its one model load, which the cells alone do not pay. Both are measured in this one run.
Each run's peak memory is printed next to weights + KV cache + logits of the cell's largest pass (CBS's rows at
B = 4, teacher forcing's at B = 1) and to what `batch_size: auto` budgets for them (`measure.memory_line`); the
study's peak holds the model it loads.

Run:  python benchmarks/study.py [--stride CHARS] [--threads T]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
import yaml
from measure import direct_bytes, measured, memory_line, touch_weights

from memrisk import LanguageModel
from memrisk.runner import load_run_model, run_experiment
from memrisk.study import load_study, run_study

README = Path(__file__).resolve().parents[1] / "README.md"
BATCH, PREFIX, SUFFIX = 4, 32, 16


def study_file(folder: Path, stride: int) -> Path:
    """The benchmark's study: B ∈ {1, 4} × ε ∈ {0, 2}, windows of 32 + 16 tokens every `stride` characters."""
    base = {
        "model": {"name": "smollm2", "batch_size": BATCH},
        "datasets": [{"name": "readme", "path": str(README)}],
        "windows": {"mode": "book", "prefix_length": PREFIX, "suffix_length": SUFFIX, "stride": stride},
        "methods": ["probabilistic", "greedy", "cbs"],
        "shard_size": 4,
    }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump({"base": base, "grid": {"cbs.beam_width": [1, 4], "cbs.epsilon": [0, 2]}}))
    return path


def largest_pass(lm: LanguageModel, beam_width: int) -> tuple[int, int, int]:
    """Rows, tokens and scored positions of a cell's pass that holds the most: teacher forcing (one row a window, the
    suffix's logits) or CBS (B + 1 rows a window, anchored, one position's logits)."""
    tokens = PREFIX + SUFFIX
    shapes = [(BATCH, tokens, SUFFIX), (BATCH * (beam_width + 1), tokens, 1)]
    return max(shapes, key=lambda shape: direct_bytes(lm, *shape))


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
        touch_weights(lm)
        alone, memory = {}, {}
        for cell in cells:
            summary, alone[cell.name], peak = measured(
                lambda cell=cell: run_experiment(cell.config, folder / "alone" / cell.name, model=lm, progress=False))
            memory[cell.name] = memory_line(lm, peak, *largest_pass(lm, cell.config.cbs.beam_width))
        study_shape = largest_pass(lm, max(cell.config.cbs.beam_width for cell in cells))
        _, study, study_peak = measured(lambda: run_study(path, folder / "study", progress=False))
        study_memory = memory_line(lm, study_peak, *study_shape, loaded_inside=True)
    print(f"{len(cells)} cells, {summary['examples']} windows each, torch threads {torch.get_num_threads()}")
    for name, seconds in alone.items():
        print(f"  {name:28s} alone (model loaded): {seconds:6.2f} s; {memory[name]}")
    total = sum(alone.values())
    print(f"sum of the cells alone: {total:.2f} s; study (one model load, shared passes): {study:.2f} s; {study_memory}")
    print(f"study / sum of cells = {study / total:.2f}  (goal ≤ 1.20)")


if __name__ == "__main__":
    main()
