"""Prior-aware vs counterfactual memorization on small models trained here (PA paper §4.1.3, scaled down), as a study.

Each target sequence is injected into a base corpus as `exact` verbatim copies plus `near` near-duplicates that keep
20% of its words in place (the rest replaced by random corpus words), for the PA paper's seven compositions scaled by
1/5: (0,36), (2,30), (4,24), (6,18), (8,12), (10,6), (12,0). Per seed and composition a target model trains on base +
near-duplicates + exact copies, and (with exact copies) a baseline on base + near-duplicates only. The script

1. trains the models into OUT/T-targets/models/ (a model already there is kept: a re-run, or one with more seeds,
   trains only the missing ones) and writes the targets and the base corpus into OUT/T-targets/data/;
2. writes OUT/T-targets/study-S-seeds.yaml: one named cell per model, whose targets dataset says `duplicates: EXACT`
   (0 for a baseline) and `near_duplicates: NEAR`, scored by the prior_aware method against a bank of 2 × 100 windows
   of the base corpus (a dataset of role `bank`; m = 0 and n = 1, since only the logs are compared);
3. runs it into OUT/T-targets/study-S-seeds/ (`memrisk study`), whose report draws PA Figs. 2–3:
     counterfactual memorization (PA Eq. 6) = E_M[log P(s|p; M)] − E_M'[log P(s|p; M')]
     prior-aware memorization   (PA Eq. 7) = E_M[log P(s|p; M)] − E_M[log v̂_s; M]
   per composition (figures/pa-fig2-counterfactual.csv) and per target sequence (pa-fig3-counterfactual-sequences.csv);
4. prints the compositions and the correlations and writes them as JSON (--results).

Run: python studies/pa_counterfactual.py [--seeds 2] [--targets 4] [--out studies-out/pa-counterfactual]
                                         [--results studies/pa_counterfactual_results.json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import time
from pathlib import Path
from typing import Any

import yaml
from transformers import PreTrainedTokenizerFast

from memrisk.cli import main as memrisk_main
from memrisk.demo.prose import source_documents
from memrisk.demo.train import TrainingConfig, train_model, train_tokenizer
from memrisk.report.paper.prior_aware import correlations, counterfactual_rows, sequence_rows
from memrisk.report.study_data import load_study_data

COMPOSITIONS = ((0, 36), (2, 30), (4, 24), (6, 18), (8, 12), (10, 6), (12, 0))
OVERLAP = 0.2
BASE_DOCUMENTS = 600
PREFIX_TOKENS = SUFFIX_TOKENS = 50
BANK_PER_TRIAL, TRIALS = 100, 2
MODEL = TrainingConfig(
    vocab_size=2048, hidden_size=128, num_layers=2, num_heads=4, intermediate_size=384,
    block_size=128, batch_size=4, steps=500, learning_rate=2e-3, warmup_steps=30,
)
LN10 = math.log(10.0)


def near_duplicate(text: str, vocabulary: list[str], rng: random.Random) -> str:
    """`text` with OVERLAP of its words kept in place and the others replaced by random corpus words."""
    words = text.split()
    keep = set(rng.sample(range(len(words)), max(1, round(OVERLAP * len(words)))))
    return " ".join(w if i in keep else rng.choice(vocabulary) for i, w in enumerate(words))


def corpora(targets: int) -> tuple[list[str], list[str]]:
    """The first `targets` long documents (120 words each) as targets and 600 others as the base corpus."""
    documents = source_documents()
    random.Random(0).shuffle(documents)
    long_ones = [d for d in documents if len(d.split()) >= 120][:targets]
    return [" ".join(d.split()[:120]) for d in long_ones], [d for d in documents if d not in long_ones][:BASE_DOCUMENTS]


def train_into(folder: Path, documents: list[str], tokenizer: PreTrainedTokenizerFast, seed: int) -> None:
    """Train a model on `documents` and save it with the tokenizer (kept when the folder exists: a re-run resumes)."""
    if folder.is_dir():
        return
    staging = folder.with_name(f".{folder.name}")
    shutil.rmtree(staging, ignore_errors=True)
    train_model(documents, tokenizer, MODEL, seed=seed, progress=False).save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(folder)


def cell(name: str, model: Path, exact: int, near: int, seed: int) -> dict[str, Any]:
    """A study cell: the model, what its training data held of the targets, and the bank's seed."""
    return {"name": name, "set": {"model.name": str(model.resolve()), "datasets.0.duplicates": exact,
                                  "datasets.0.near_duplicates": near, "prior_aware.seed": seed}}


def train_all(out: Path, targets: list[str], base: list[str], seeds: int, started: float) -> list[dict[str, Any]]:
    """Train every target and baseline model (one tokenizer for all) and return their study cells."""
    vocabulary = sorted({w for d in base for w in d.split() if w.isalpha()})
    tokenizer = train_tokenizer(base + targets, MODEL.vocab_size)
    cells = []
    for seed in range(seeds):
        rng = random.Random(1000 + seed)
        near = {n: [[near_duplicate(t, vocabulary, rng) for _ in range(n)] for t in targets] for _, n in COMPOSITIONS}
        for exact, n in COMPOSITIONS:
            injected = base + [d for per_target in near[n] for d in per_target]
            name = f"seed{seed}-exact{exact}-near{n}"
            train_into(out / "models" / name, injected + [t for t in targets for _ in range(exact)], tokenizer, seed)
            cells.append(cell(name, out / "models" / name, exact, n, seed))
            if exact:
                baseline = f"seed{seed}-near{n}-baseline"
                train_into(out / "models" / baseline, injected, tokenizer, seed)
                cells.append(cell(baseline, out / "models" / baseline, 0, n, seed))
            print(f"seed {seed} ({exact:2d} exact, {n:2d} near) trained at {time.monotonic() - started:5.0f} s", flush=True)
    return cells


def write_study(out: Path, targets: list[str], base: list[str], cells: list[dict[str, Any]], seeds: int) -> Path:
    """The targets and the base corpus as JSONL, and the study over every trained model."""
    (out / "data").mkdir(parents=True, exist_ok=True)
    for name, texts in (("targets", targets), ("base", base)):
        (out / "data" / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    study = {
        "base": {
            "model": {"name": cells[0]["set"]["model.name"], "batch_size": 16},
            "datasets": [{"name": "targets", "path": "data/targets.jsonl"}, {"name": "base", "path": "data/base.jsonl", "role": "bank"}],
            "windows": {"mode": "doc", "prefix_length": PREFIX_TOKENS, "suffix_length": SUFFIX_TOKENS},
            "policies": [{"name": "full"}],
            "methods": ["prior_aware"],
            "prior_aware": {"prefixes_per_trial": BANK_PER_TRIAL, "trials": TRIALS, "m": 0.0, "n": 1.0},
        },
        "cells": cells,
    }
    path = out / f"study-{seeds}-seeds.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False), encoding="utf-8")
    return path


def report(study: Path, results: Path, seconds: float) -> None:
    """Print the compositions (log10) and the correlations; write both, and the per-sequence rows, as JSON."""
    data = load_study_data(study)
    rows, sequences = counterfactual_rows(data), sequence_rows(data)
    print(f"\n{'exact':>5} {'near':>5} {'CF (Eq. 6)':>11} {'PA (Eq. 7)':>11} {'log10 P(s|p)':>13} {'log10 prior':>12}")
    for r in rows:
        print(f"{r['exact']:5d} {r['near']:5d} {r['counterfactual'] / LN10:11.2f} {r['prior_aware'] / LN10:11.2f} "
              f"{r['mean_log_p'] / LN10:13.2f} {r['mean_log_prior'] / LN10:12.2f}")
    found = {}
    for name, part in (("compositions", rows), ("sequences", sequences)):
        found[f"{name}_pearson"], found[f"{name}_spearman"] = correlations([r["counterfactual"] for r in part], [r["prior_aware"] for r in part])
    print(f"\nacross the {len(rows)} compositions: Pearson {found['compositions_pearson']:.3f}, Spearman {found['compositions_spearman']:.3f}")
    print(f"across {len(sequences)} (sequence, composition) points: Pearson {found['sequences_pearson']:.3f}, "
          f"Spearman {found['sequences_spearman']:.3f}")
    print(f"({len(data.cells)} models, {seconds / 60:.1f} min; figures in {study / 'figures'})")
    results.write_text(json.dumps({"compositions": rows, "correlations": found, "sequences": sequences}, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--targets", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("studies-out") / "pa-counterfactual")
    parser.add_argument("--results", type=Path, default=Path(__file__).with_name("pa_counterfactual_results.json"))
    args = parser.parse_args()
    started = time.monotonic()
    targets, base = corpora(args.targets)
    out = args.out / f"{args.targets}-targets"
    cells = train_all(out, targets, base, args.seeds, started)
    study = write_study(out, targets, base, cells, args.seeds)
    if memrisk_main(["study", str(study), "--out", str(study.with_suffix(""))]) != 0:
        raise SystemExit("the study failed")
    report(study.with_suffix(""), args.results, time.monotonic() - started)


if __name__ == "__main__":
    main()
