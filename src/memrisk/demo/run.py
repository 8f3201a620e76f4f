"""`memrisk demo`: real memorization with a known ground truth, measured end to end.

A small model is trained (`memrisk.demo.train`, or reused from its cache) on a corpus where passages
are planted 1, 4, 16 and 64 times (`memrisk.demo.corpus`); extraction is then measured on those passages,
on templated passages, on a generic sentence and on held-out passages of the same source (the negative
control). Extraction must rise with duplication and stay absent on held-out text. With several sizes
(`memrisk demo --sizes small,base`) each size is one cell of a study (`memrisk.demo.study`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from memrisk.demo.corpus import build_demo_corpus
from memrisk.demo.experiment import demo_batch_size, demo_config, demo_generic, write_demo_corpus
from memrisk.demo.study import DemoModels, demo_model_name, sizes_study
from memrisk.demo.train import DEFAULT_SIZE, train_demo_model, training_config
from memrisk.lock import locked_folder
from memrisk.models.backend import load_model
from memrisk.report.html import write_report
from memrisk.report.text import summary_table
from memrisk.runner import run_experiment
from memrisk.study import run_study

NEXT_STEP = "next: the demo's model sizes as a study, `memrisk study studies/demo-sizes.yaml` (docs/studies.md)"


def run_demo(
    out_dir: Path,
    *,
    model: str | None = None,
    gguf_file: str | None = None,
    seed: int = 0,
    size: str = DEFAULT_SIZE,
    force: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Build the corpus, train (or reuse) the demo model of `size`, measure extraction, print the table."""
    started = time.monotonic()
    training = training_config(size)
    corpus = build_demo_corpus(seed)
    batch_size = demo_batch_size(own_models=model is None)
    if model is None:
        print(f"memrisk demo: {len(corpus.training_documents)} training documents, "
              f"{len(corpus.planted)} planted passages, {len(corpus.heldout)} held out")
        model = str(train_demo_model(corpus, seed=seed, progress=progress, config=training))
    lm = load_model(model, gguf_file=gguf_file, batch_size=batch_size)
    config = demo_config(corpus, model, demo_generic(corpus, lm), gguf_file, batch_size)
    write_demo_corpus(corpus)
    summary = run_experiment(config, out_dir, model=lm, force=force, progress=progress)
    with locked_folder(out_dir):
        report = write_report([out_dir])
    print()
    print(summary_table(summary))
    print(f"\nrecords, summary.json and config in {out_dir}/; report: {report}  ({time.monotonic() - started:.0f} s)")
    print(NEXT_STEP)
    return summary


def run_demo_sizes(
    out_dir: Path, sizes: list[str], *, seed: int = 0, force: bool = False, progress: bool = True,
) -> dict[str, dict[str, Any]]:
    """Train (or reuse) the demo model of each size and measure them as one study, one cell per size; print a table
    per size and write the study page (the model-size figures: CBS Figs. 4, 11b, 15b, 20; (n,p) Figs. 5, 6; PA Fig. 4)."""
    started = time.monotonic()
    study = sizes_study(sizes, seed)
    models = DemoModels(seed, progress)
    summaries = run_study(study, out_dir, force=force, progress=progress, load=models.load, prepare=models.prepare)
    with locked_folder(out_dir):
        report = write_report([out_dir])
    for size, summary in summaries.items():
        _, parameters = models.skeleton(demo_model_name(size), None, None)
        print(f"\n{size} ({parameters / 1e6:.1f}M parameters)")
        print(summary_table(summary))
    print(f"\none run folder per size in {out_dir}/cells/; study table and report: {report}  ({time.monotonic() - started:.0f} s)")
    print(NEXT_STEP)
    return summaries
