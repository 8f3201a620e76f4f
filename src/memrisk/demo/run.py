"""`memrisk demo`: real memorization with a known ground truth, measured end to end.

A small model is trained here on a corpus where passages are planted 1, 4, 16 and 64 times;
extraction is then measured on those passages and on held-out passages of the same source
(the negative control). Extraction must rise with duplication and stay absent on held-out text.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from memrisk.config import ExperimentConfig, parse_config
from memrisk.demo.corpus import DemoCorpus, build_demo_corpus, generic_documents
from memrisk.demo.train import train_demo_model
from memrisk.models.backend import load_model
from memrisk.report.html import write_report
from memrisk.report.text import summary_table
from memrisk.runner import run_experiment

DEMO_BATCH_SIZE = 16
DEMO_POLICIES = [{"top_k": 40}, {"name": "full"}]
DEMO_GENERIC_WINDOWS = 16
DEMO_PRIOR_AWARE = {"prefixes_per_trial": 40, "trials": 5, "bank_datasets": ["heldout"]}


def demo_config(corpus: DemoCorpus, model: str, generic: list[str], gguf_file: str | None = None) -> ExperimentConfig:
    """The demo's experiment: one dataset per duplication count, the template passages (slot words
    vary across copies), the generic sentence after each of its contexts (`generic`, from
    `generic_documents`), and the held-out control."""
    copies = sorted({p.copies for p in corpus.planted})
    datasets: list[dict[str, Any]] = [
        {"name": f"planted-x{c}", "documents": [p.text for p in corpus.planted if p.copies == c]} for c in copies
    ]
    datasets.append({"name": f"template-x{len(corpus.templates[0].copies)}", "documents": [t.text for t in corpus.templates]})
    datasets.append({"name": f"generic-x{len(generic)}", "documents": generic})
    datasets.append({"name": "heldout", "documents": list(corpus.heldout), "role": "control"})
    return parse_config({
        "model": {"name": model, "gguf_file": gguf_file, "batch_size": DEMO_BATCH_SIZE},
        "datasets": datasets,
        "windows": {"mode": "doc", "prefix_length": 50, "suffix_length": 50},
        "policies": DEMO_POLICIES,
        "methods": ["probabilistic", "greedy", "cbs", "prior_aware"],
        "prior_aware": DEMO_PRIOR_AWARE,
    })


def run_demo(
    out_dir: Path,
    *,
    model: str | None = None,
    gguf_file: str | None = None,
    seed: int = 0,
    force: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Build the corpus, train (or reuse) the demo model, measure extraction, print the table."""
    started = time.monotonic()
    corpus = build_demo_corpus(seed)
    if model is None:
        print(f"memrisk demo: {len(corpus.training_documents)} training documents, "
              f"{len(corpus.planted)} planted passages, {len(corpus.heldout)} held out")
        model = str(train_demo_model(corpus, seed=seed, progress=progress))
    lm = load_model(model, gguf_file=gguf_file, batch_size=DEMO_BATCH_SIZE)
    config = demo_config(corpus, model, generic_documents(corpus, lm.encode_with_offsets)[:DEMO_GENERIC_WINDOWS], gguf_file)
    summary = run_experiment(config, out_dir, model=lm, force=force, progress=progress)
    report = write_report([out_dir])
    print()
    print(summary_table(summary))
    print(f"\nrecords, summary.json and config in {out_dir}/; report: {report}  ({time.monotonic() - started:.0f} s)")
    return summary
