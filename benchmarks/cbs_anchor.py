"""What anchoring changes in CBS, measured in one run (B = 20, k = 40, Levenshtein ε = 5, τ_min stop):
recovery of the verbatim-extractable windows (LB_0 ≥ τ_min among p_z ≥ τ_min), LB_ε anchored minus
unanchored, and token evaluations, on the demo model's windows (by dataset) and on SmolLM2
windows of standard-library docstrings. Each search also prints its peak memory next to weights + KV cache + logits of
its rows and to what `batch_size: auto` budgets for them (`measure.memory_line`).

Run: python benchmarks/cbs_anchor.py [--smollm2-windows 16] [--skip-demo] [--skip-smollm2]
"""

from __future__ import annotations

import argparse

import numpy as np
from measure import measured, memory_line

import memrisk
from memrisk import DecodingPolicy
from memrisk.extraction.cbs import cbs

TAU_MIN, EPSILON, BEAM = 1e-3, 5, 20
POLICY = DecodingPolicy(top_k=40)


def compare(lm: memrisk.LanguageModel, prefixes: list[list[int]], suffixes: list[list[int]], label: str) -> dict[str, float]:
    """Anchored vs unanchored CBS on the same windows: recovery, LB differences, cost, wall time (and each search's
    peak memory, printed under `label`)."""
    log_p = memrisk.verbatim_logprob(lm, prefixes, suffixes, POLICY)[:, 0]
    tokens = max(len(p) + len(s) for p, s in zip(prefixes, suffixes)) + 1
    runs = {}
    for anchor in (False, True):
        results, seconds, peak = measured(lambda anchor=anchor: cbs(lm, prefixes, suffixes, POLICY, beam_width=BEAM,
                                                                    prune="levenshtein", epsilon=EPSILON, tau_min=TAU_MIN,
                                                                    anchor=anchor))
        runs[anchor] = (results, seconds)
        rows = min(lm.batch_size, len(prefixes)) * (BEAM + int(anchor))
        print(f"{label}, {'anchored' if anchor else 'unanchored'}: {memory_line(lm, peak, rows, tokens, 1)}", flush=True)
    extractable = np.exp(log_p) >= TAU_MIN

    def recovery(anchor: bool) -> str:
        found = np.array([r.lower_bound("levenshtein", 0) >= TAU_MIN for r in runs[anchor][0]])
        return f"{int((found & extractable).sum())}/{int(extractable.sum())}"

    lower = {a: np.array([[r.lower_bound("levenshtein", e) for e in range(EPSILON + 1)] for r in runs[a][0]]) for a in runs}
    gain = lower[True] - lower[False]
    evals = {a: sum(r.token_evals for r in runs[a][0]) for a in runs}
    return {
        "windows": len(prefixes), "recovery_paper": recovery(False), "recovery_anchored": recovery(True),
        "mean_gain_eps0": float(gain[:, 0].mean()), "mean_gain_eps5": float(gain[:, EPSILON].mean()),
        "max_gain_eps5": float(gain[:, EPSILON].max()), "min_gain_eps5": float(gain[:, EPSILON].min()),
        "token_evals_ratio": evals[True] / evals[False], "seconds_ratio": runs[True][1] / runs[False][1],
    }


def demo_rows() -> dict[str, dict[str, float]]:
    """The comparison per dataset of the demo experiment (trains or reuses the cached demo model)."""
    from memrisk.demo.corpus import build_demo_corpus, generic_documents
    from memrisk.demo.experiment import DEMO_BATCH_SIZE, DEMO_GENERIC_WINDOWS, demo_config
    from memrisk.demo.train import train_demo_model
    from memrisk.runner import build_examples, load_documents

    corpus = build_demo_corpus(0)
    path = str(train_demo_model(corpus, progress=False))
    lm = memrisk.load_model(path, batch_size=DEMO_BATCH_SIZE)
    config = demo_config(corpus, path, generic_documents(corpus, lm.encode_with_offsets)[:DEMO_GENERIC_WINDOWS])
    examples, _ = build_examples(config, lm, load_documents(config))
    rows = {}
    for name in dict.fromkeys(e.dataset for e in examples):
        chosen = [e for e in examples if e.dataset == name]
        rows[f"demo {name}"] = compare(lm, [list(e.window.prefix_ids) for e in chosen], [list(e.window.suffix_ids) for e in chosen],
                                       f"demo {name}")
    return rows


def smollm2_rows(count: int) -> dict[str, dict[str, float]]:
    """The comparison on SmolLM2-135M-Instruct, 50+50-token windows of standard-library docstrings."""
    import collections
    import email
    import json

    from memrisk.data import Document, make_windows

    lm = memrisk.load_model("smollm2", batch_size=8)
    text = "\n\n".join(m.__doc__ or "" for m in (collections, json, email, argparse))
    windows = make_windows(lm, [Document("stdlib", text)], mode="book", stride=60).windows[:count]
    return {"smollm2 stdlib": compare(lm, [list(w.prefix_ids) for w in windows], [list(w.suffix_ids) for w in windows],
                                      "smollm2 stdlib")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smollm2-windows", type=int, default=16)
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--skip-smollm2", action="store_true")
    args = parser.parse_args()
    rows = {}
    if not args.skip_demo:
        rows |= demo_rows()
    if not args.skip_smollm2:
        rows |= smollm2_rows(args.smollm2_windows)
    columns = list(next(iter(rows.values())))
    print(f"B = {BEAM}, top-k 40, Levenshtein ε = {EPSILON}, τ_min = {TAU_MIN:g}; gains are LB anchored − LB unanchored")
    print(" | ".join(["windows of", *columns]))
    for name, row in rows.items():
        print(" | ".join([name, *(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row.values())]))


if __name__ == "__main__":
    main()
