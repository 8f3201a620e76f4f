"""CBS benchmarks, printed as ratios measured in one run (B = 20, k = 40, a = T = 50).

1. SmolLM2: CBS wall time per sequence ÷ transformers `generate(num_beams=20, max_new_tokens=50)`
   on the same prefixes (target ≤ 1.3), and the share of CBS wall time spent in the
   Levenshtein-pruning bookkeeping (target ≤ 10%).
2. Demo model: a mix of 10% planted (memorized) and 90% held-out windows, Levenshtein-pruned
   with the τ_min stop, 10 sequences per batch as in the paper: compaction + refill vs padded
   batches (the paper's fixed shape of B rows per sequence until the batch ends), speed-up
   (target ≥ 3×) and whether the results are identical.
3. Demo model, windows planted 16 times: CBS lower bound vs Monte Carlo with M = B samples (about the
   same token evaluations) and vs a 10,000-sample Monte Carlo reference.

Each search of sections 1 and 2 also prints its peak memory next to weights + KV cache + logits of its rows and to
what `batch_size: auto` budgets for them (`measure.memory_line`).

Run: python benchmarks/cbs.py [--windows 8] [--skip-smollm2] [--skip-demo] [--skip-mc]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from measure import measured, memory_line

import memrisk
import memrisk.config as config_module
import memrisk.extraction.cbs as cbs_module
from memrisk import DecodingPolicy
from memrisk.data import Document, make_windows
from memrisk.models.throughput import device_peak_flops, utilization_line

TOP_K = DecodingPolicy(top_k=40)
LOG_P_TOLERANCE = 1e-4


def same_result(a: cbs_module.CBSResult, b: cbs_module.CBSResult) -> bool:
    """Same candidate set, stop and token evaluations; log-probabilities equal up to the float32
    rounding that differs between batch compositions (accumulated over 50 steps)."""
    mine, theirs = {c.tokens: c.log_p for c in a.candidates}, {c.tokens: c.log_p for c in b.candidates}
    return (
        mine.keys() == theirs.keys()
        and all(abs(mine[t] - theirs[t]) <= LOG_P_TOLERANCE for t in mine)
        and a.stop == b.stop
        and a.token_evals == b.token_evals
    )


def smollm2_windows(lm: memrisk.LanguageModel, count: int) -> tuple[list[list[int]], list[list[int]]]:
    """`count` 50+50-token windows of standard-library docstrings (text every machine has)."""
    import collections
    import email
    import json

    text = "\n\n".join(m.__doc__ or "" for m in (collections, json, email, argparse, config_module))
    windows = make_windows(lm, [Document("stdlib", text)], mode="book", stride=120).windows[:count]
    return [list(w.prefix_ids) for w in windows], [list(w.suffix_ids) for w in windows]


def beam_search_seconds(lm: memrisk.LanguageModel, prefixes: list[list[int]], batch_size: int) -> float:
    """Wall time of transformers' own beam search (20 beams, exactly 50 new tokens) over the prefixes."""
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(prefixes), batch_size):
            ids = torch.tensor(prefixes[i : i + batch_size])
            lm.model.generate(
                ids, attention_mask=torch.ones_like(ids), num_beams=20, max_new_tokens=50, min_new_tokens=50,
                do_sample=False, early_stopping=False, length_penalty=0.0, pad_token_id=lm.eos_token_id,
            )
    return time.perf_counter() - start


def bookkeeping_share(run: Callable[[], Any]) -> tuple[float, float, int]:
    """Seconds inside the Levenshtein band functions during `run`, the run's wall time and its peak memory."""
    spent = [0.0]
    originals = {name: getattr(cbs_module, name) for name in ("band_step", "band_lower_bound", "band_final")}

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed_call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            spent[0] += time.perf_counter() - start
            return out

        return timed_call

    for name, fn in originals.items():
        setattr(cbs_module, name, wrap(fn))
    try:
        _, wall, peak = measured(run)
    finally:
        for name, fn in originals.items():
            setattr(cbs_module, name, fn)
    return spent[0], wall, peak


def smollm2_section(count: int) -> None:
    """Section 1: CBS vs transformers beam search, and the Levenshtein bookkeeping share."""
    lm = memrisk.load_model("smollm2", batch_size=4)
    prefixes, suffixes = smollm2_windows(lm, count)
    n = len(prefixes)
    cbs_args = {"beam_width": 20, "tau_min": None, "batch_size": 4}
    generate_s = beam_search_seconds(lm, prefixes, 4)
    baseline, baseline_s, baseline_peak = measured(lambda: memrisk.cbs(lm, prefixes, suffixes, TOP_K, prune=None, **cbs_args))
    band_s, pruned_s, pruned_peak = bookkeeping_share(
        lambda: memrisk.cbs(lm, prefixes, suffixes, TOP_K, prune="levenshtein", epsilon=5, **cbs_args)
    )
    print(f"SmolLM2-135M, {n} windows of 50+50 tokens, B=20, k=40, batches of 4 sequences")
    print(f"  transformers generate(num_beams=20): {generate_s / n:6.2f} s/sequence")
    print(f"  k-CBS (Algorithm 1):                 {baseline_s / n:6.2f} s/sequence  ratio {baseline_s / generate_s:.2f} (target <= 1.3)")
    print(f"  Lev-pruned CBS (eps=5):              {pruned_s / n:6.2f} s/sequence  ratio {pruned_s / generate_s:.2f}")
    print(f"  Levenshtein bookkeeping: {band_s:.2f} s of {pruned_s:.2f} s = {band_s / pruned_s:.1%} (target <= 10%)")
    rows = min(cbs_args["batch_size"], n) * (cbs_args["beam_width"] + 1)  # B rows and the anchor's per sequence
    tokens = len(prefixes[0]) + len(suffixes[0]) + 1
    print(f"  memory, k-CBS: {memory_line(lm, baseline_peak, rows, tokens, 1)}")
    print(f"  memory, Lev-pruned CBS: {memory_line(lm, pruned_peak, rows, tokens, 1)}")
    evals = np.mean([r.token_evals for r in baseline])
    print(f"  token evaluations per sequence: {evals:.0f} (limit a + (T-1)B = {50 + 49 * 20})")
    parameters = sum(p.numel() for p in lm.model.parameters())
    total = sum(r.token_evals for r in baseline)
    print("  k-CBS " + utilization_line(total, parameters, baseline_s, device_peak_flops(lm.device)))


def demo_windows(lm: memrisk.LanguageModel, corpus: Any) -> tuple[list[Any], list[int], list[Any]]:
    """Windows of the planted passages (most copies first), their copy counts, and held-out windows."""
    planted = sorted(corpus.planted, key=lambda p: -p.copies)
    planted_w = make_windows(lm, [Document(f"p{i}", p.text) for i, p in enumerate(planted)]).windows
    copies = {f"p{i}": p.copies for i, p in enumerate(planted)}
    heldout_w = make_windows(lm, [Document(f"h{i}", t) for i, t in enumerate(corpus.heldout)]).windows
    return planted_w, [copies[w.doc_id] for w in planted_w], heldout_w


def demo_section(skip_mc: bool) -> None:
    """Sections 2 and 3 on the demo model (trained here; cached after the first run)."""
    from memrisk.demo.corpus import build_demo_corpus
    from memrisk.demo.train import train_demo_model

    corpus = build_demo_corpus(0)
    lm = memrisk.load_model(str(train_demo_model(corpus, progress=False)), batch_size=8)
    planted, copies, heldout = demo_windows(lm, corpus)
    mix = list(heldout[:32])
    for i, window in enumerate(planted[:4]):
        mix.insert(i * 10, window)
    prefixes, suffixes = [list(w.prefix_ids) for w in mix], [list(w.suffix_ids) for w in mix]
    args = {"beam_width": 20, "prune": "levenshtein", "epsilon": 5, "tau_min": 1e-3, "batch_size": 10}
    memrisk.cbs(lm, prefixes[:1], suffixes[:1], TOP_K, **args)  # first use's allocations, untimed
    compact, compact_s, compact_peak = measured(lambda: memrisk.cbs(lm, prefixes, suffixes, TOP_K, compaction=True, **args))
    padded, padded_s, padded_peak = measured(lambda: memrisk.cbs(lm, prefixes, suffixes, TOP_K, compaction=False, **args))
    differences = [i for i, (a, b) in enumerate(zip(compact, padded)) if not same_result(a, b)]
    print(f"\nDemo model, {len(mix)} windows (4 planted = {4 / len(mix):.0%}, rest held out), Lev eps=5, tau_min stop, 10 sequences per batch")
    print(f"  padded batches: {padded_s:6.2f} s   compaction + refill: {compact_s:6.2f} s   speed-up {padded_s / compact_s:.1f}x (target >= 3x)")
    print(f"  identical candidates, stops and token evaluations (log-p within {LOG_P_TOLERANCE:g}): "
          f"{not differences}{'' if not differences else f' (differ: windows {differences})'}")
    rows = min(args["batch_size"], len(prefixes)) * (args["beam_width"] + 1)
    tokens = max(len(p) + len(s) for p, s in zip(prefixes, suffixes)) + 1
    print(f"  memory, padded: {memory_line(lm, padded_peak, rows, tokens, 1)}")
    print(f"  memory, compaction + refill: {memory_line(lm, compact_peak, rows, tokens, 1)}")

    if skip_mc:
        return
    targets = [w for w, n in zip(planted, copies) if n == 16]
    prefixes, suffixes = [list(w.prefix_ids) for w in targets], [list(w.suffix_ids) for w in targets]
    found = memrisk.cbs(lm, prefixes, suffixes, TOP_K, beam_width=20, prune="levenshtein", epsilon=5, batch_size=8)
    small = memrisk.monte_carlo(lm, prefixes, suffixes, TOP_K, samples=20, epsilon=5, seed=0)
    large = memrisk.monte_carlo(lm, prefixes, suffixes, TOP_K, samples=10_000, epsilon=5, seed=1)
    lower = np.array([r.lower_bound("levenshtein", 5) for r in found])
    reference = np.array([r.estimate[5] for r in large])
    cheap = np.array([r.estimate[5] for r in small])
    print(f"\nDemo model, {len(targets)} windows planted 16 times (partly memorized), Lev eps=5 mass")
    print(f"  token evaluations per sequence: CBS {np.mean([r.token_evals for r in found]):.0f}, MC(M=20) {np.mean([r.token_evals for r in small]):.0f}")
    print(f"  CBS lower bound / MC(M=10^4) estimate: {lower.sum() / reference.sum():.1%} of the mass (sum over windows)")
    print(f"  MC(M=20) / MC(M=10^4): {cheap.sum() / reference.sum():.1%}; windows where MC(M=20) saw no hit: {(cheap == 0).sum()}")
    for lb, ref, mc in zip(lower, reference, cheap):
        print(f"    LB {lb:.4f}   MC(10^4) {ref:.4f}   MC(20) {mc:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--skip-mc", action="store_true", help="skip section 3 (its 10^4-sample reference takes ~10-20 min)")
    args = parser.parse_args()
    if not args.skip_smollm2:
        smollm2_section(args.windows)
    if not args.skip_demo:
        demo_section(args.skip_mc)


if __name__ == "__main__":
    main()
