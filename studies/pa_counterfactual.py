"""Prior-aware vs counterfactual memorization on small models trained here (PA paper §4.1.3, scaled down).

Each target sequence is injected into a base corpus as `exact` verbatim copies plus `near`
near-duplicates that keep 20% of its words in place (the rest replaced by random corpus words),
for the PA paper's seven compositions scaled by 1/5: (0,36), (2,30), (4,24), (6,18), (8,12),
(10,6), (12,0). A target model trains on base + exact copies + near-duplicates; its baseline
on base + near-duplicates only. Per composition, over seeds and targets:

  counterfactual memorization (PA Eq. 6) = E_M[log P(s|p; M)] − E_M'[log P(s|p; M')]
  prior-aware memorization   (PA Eq. 7) = E_M[log P(s|p; M)] − E_M[log v̂_s; M]

and their correlation across compositions and across individual (target, model) points.

Run: python studies/pa_counterfactual.py [--seeds 2] [--targets 4] [--out pa_counterfactual.json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import pearsonr, spearmanr

import memrisk
from memrisk.data import Document
from memrisk.demo.prose import source_documents
from memrisk.demo.train import TrainingConfig, train_model, train_tokenizer

COMPOSITIONS = ((0, 36), (2, 30), (4, 24), (6, 18), (8, 12), (10, 6), (12, 0))
OVERLAP = 0.2
BASE_DOCUMENTS = 600
PREFIX_TOKENS = SUFFIX_TOKENS = 50
BANK_PER_TRIAL, TRIALS = 100, 2
MODEL = TrainingConfig(
    vocab_size=2048, hidden_size=128, num_layers=2, num_heads=4, intermediate_size=384,
    block_size=128, batch_size=4, steps=500, learning_rate=2e-3, warmup_steps=30,
)


@dataclass(frozen=True)
class Scores:
    """One model's log P(s|p) and log v̂_s for each target (natural logs)."""

    log_p: list[float]
    log_prior: list[float]


def near_duplicate(text: str, vocabulary: list[str], rng: random.Random) -> str:
    """`text` with OVERLAP of its words kept in place and the others replaced by random corpus words."""
    words = text.split()
    keep = set(rng.sample(range(len(words)), max(1, round(OVERLAP * len(words)))))
    return " ".join(w if i in keep else rng.choice(vocabulary) for i, w in enumerate(words))


def score(lm: memrisk.LanguageModel, targets: list[str], bank_documents: list[Document], seed: int) -> Scores:
    """log P(s|p) (full distribution) and the prior estimate for every target's 50+50-token window."""
    ids = [lm.encode(t)[: PREFIX_TOKENS + SUFFIX_TOKENS] for t in targets]
    bank = memrisk.PrefixBank.from_documents(lm, bank_documents, length=PREFIX_TOKENS, size=BANK_PER_TRIAL * TRIALS, seed=seed)
    result = memrisk.prior_aware(lm, [i[:PREFIX_TOKENS] for i in ids], [i[PREFIX_TOKENS:] for i in ids], bank, m=0.0, n=1.0, trials=TRIALS)
    return Scores([r.log_p for r in result.results], [r.log_prior for r in result.results])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--targets", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("pa_counterfactual.json"))
    args = parser.parse_args()
    started = time.monotonic()
    documents = source_documents()
    rng = random.Random(0)
    rng.shuffle(documents)
    long_ones = [d for d in documents if len(d.split()) >= 120]
    targets = [" ".join(d.split()[:120]) for d in long_ones[: args.targets]]
    base = [d for d in documents if d not in long_ones[: args.targets]][:BASE_DOCUMENTS]
    vocabulary = sorted({w for d in base for w in d.split() if w.isalpha()})
    tokenizer = train_tokenizer(base + targets, MODEL.vocab_size)
    bank_documents = [Document(f"base{i}", d) for i, d in enumerate(base)]
    points = []
    for seed in range(args.seeds):
        seed_rng = random.Random(1000 + seed)
        near = {n: [[near_duplicate(t, vocabulary, seed_rng) for _ in range(n)] for t in targets] for _, n in COMPOSITIONS}
        for exact, n in COMPOSITIONS:
            injected_near = [d for per_target in near[n] for d in per_target]
            runs = {}
            for kind, extra in (("target", [t for t in targets for _ in range(exact)]), ("baseline", [])):
                if kind == "baseline" and exact == 0:
                    runs[kind] = runs["target"]
                    continue
                model = train_model(base + injected_near + extra, tokenizer, MODEL, seed=seed, progress=False)
                lm = memrisk.load_model(model, tokenizer, batch_size=16)
                runs[kind] = score(lm, targets, bank_documents, seed)
            for i, _ in enumerate(targets):
                points.append({
                    "seed": seed, "exact": exact, "near": n, "target": i,
                    "log_p": runs["target"].log_p[i], "log_prior": runs["target"].log_prior[i],
                    "baseline_log_p": runs["baseline"].log_p[i],
                })
            print(f"seed {seed} ({exact:2d} exact, {n:2d} near) done at {time.monotonic() - started:5.0f} s", flush=True)
    report(points, args, time.monotonic() - started)


def report(points: list[dict], args: argparse.Namespace, seconds: float) -> None:
    """Print per-composition means (log10) and the correlations; write everything as JSON."""
    rows = []
    print(f"\n{'exact':>5} {'near':>5} {'CF (Eq. 6)':>11} {'PA (Eq. 7)':>11} {'log10 P(s|p)':>13} {'log10 prior':>12}")
    for exact, n in COMPOSITIONS:
        group = [p for p in points if p["exact"] == exact]
        log_p = np.mean([p["log_p"] for p in group])
        cf = log_p - np.mean([p["baseline_log_p"] for p in group])
        pa = log_p - np.mean([p["log_prior"] for p in group])
        rows.append({"exact": exact, "near": n, "counterfactual": cf, "prior_aware": pa})
        print(f"{exact:5d} {n:5d} {cf / math.log(10):11.2f} {pa / math.log(10):11.2f} "
              f"{log_p / math.log(10):13.2f} {np.mean([p['log_prior'] for p in group]) / math.log(10):12.2f}")
    cf, pa = [r["counterfactual"] for r in rows], [r["prior_aware"] for r in rows]
    point_cf = [p["log_p"] - p["baseline_log_p"] for p in points]
    point_pa = [p["log_p"] - p["log_prior"] for p in points]
    correlations = {
        "compositions_pearson": float(pearsonr(cf, pa)[0]),
        "compositions_spearman": float(spearmanr(cf, pa)[0]),
        "points_spearman": float(spearmanr(point_cf, point_pa)[0]),
    }
    print(f"\nacross the 7 compositions: Pearson {correlations['compositions_pearson']:.3f}, "
          f"Spearman {correlations['compositions_spearman']:.3f}")
    print(f"across {len(points)} (target, model) points: Spearman {correlations['points_spearman']:.3f}")
    print(f"({args.seeds} seeds x {args.targets} targets, {seconds / 60:.1f} min)")
    args.out.write_text(json.dumps({"compositions": rows, "correlations": correlations, "points": points}, indent=1))


if __name__ == "__main__":
    main()
