"""Prior-aware scoring: shared bank prefill vs naive re-scoring of every q‖s, on SmolLM2.

For c bank prefixes of 50 tokens and a few targets, the prior needs log P(s | q_j) for every
pair. Naive: teacher-force each q_j‖s (c·(|q| + T) tokens per target). Shared: prefill every
q_j once and continue its KV cache with each suffix (c·|q| once, then c·T per target).
Printed: wall times, the speed-up (target >= 3x at c = 500) and the largest log-probability
difference (target <= 1e-4), for the PA paper's two settings: its default 50-token prefixes with
4-token (named-entity) suffixes, and 50-token suffixes. With T-token suffixes the speed-up cannot
exceed (|q| + T)/T (each pair still needs its T suffix tokens): 13.5x at T = 4, 2x at T = 50. A
float64 forward pass over the first prefixes is the exact reference that both float32 results
are compared against, so the rounding of each way is seen on its own. Each way's peak memory is printed next to
weights + KV cache + logits of a batch of q‖s rows and to what `batch_size: auto` budgets for it
(`measure.memory_line`; the shared way holds a batch of prefixes and continues them with several suffixes at once).

Run: python benchmarks/prior_aware.py [--bank 500] [--short-targets 16] [--long-targets 2]
"""

from __future__ import annotations

import argparse

import numpy as np
from measure import measured, memory_line

import memrisk
from memrisk.data import Document
from memrisk.extraction.prior_aware import bank_log_probs


def corpus() -> list[Document]:
    """Standard-library docstrings: text every machine has."""
    import collections
    import email
    import json
    import logging
    import typing

    return [Document(m.__name__, m.__doc__ or "") for m in (collections, email, json, logging, typing, argparse)]


def compare(
    lm: memrisk.LanguageModel, exact: memrisk.LanguageModel, bank: memrisk.PrefixBank, suffixes: list[list[int]], label: str,
    reference_prefixes: int = 32,
) -> None:
    """Time both ways of filling the [targets x c] matrix and print the ratio and the difference."""
    shared, shared_s, shared_peak = measured(lambda: bank_log_probs(lm, bank, suffixes))
    pairs = [(list(q), s) for s in suffixes for q in bank.prefixes]
    naive, naive_s, naive_peak = measured(
        lambda: memrisk.verbatim_logprob(lm, [q for q, _ in pairs], [s for _, s in pairs], memrisk.DecodingPolicy())
    )
    naive = naive[:, 0].reshape(len(suffixes), len(bank))
    tokens = len(suffixes[0])
    print(f"{label}: {len(suffixes)} targets x c={len(bank)} prefixes of {len(bank.prefixes[0])} tokens, {tokens}-token suffixes")
    print(f"  naive q||s teacher forcing: {naive_s:7.1f} s   shared prefill: {shared_s:7.1f} s   speed-up {naive_s / shared_s:.2f}x")
    print(f"  max |log P difference|: {np.abs(shared - naive).max():.2e} (target <= 1e-4), {np.abs(shared - naive).max() / tokens:.1e} per token")
    length = len(bank.prefixes[0]) + tokens + 1
    rows = min(lm.batch_size, len(pairs))
    print(f"  memory, naive: {memory_line(lm, naive_peak, rows, length, tokens + 1)}")
    print(f"  memory, shared: {memory_line(lm, shared_peak, rows, length, tokens + 1)}")
    head = pairs[: min(reference_prefixes, len(bank))]  # the first target's pairs
    truth = memrisk.verbatim_logprob(exact, [q for q, _ in head], [s for _, s in head], memrisk.DecodingPolicy())[:, 0]
    print(
        f"  vs float64 reference (first target x {len(head)} prefixes): naive {np.abs(naive[0, : len(head)] - truth).max():.1e}, "
        f"shared {np.abs(shared[0, : len(head)] - truth).max():.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bank", type=int, default=500)
    parser.add_argument("--short-targets", type=int, default=16)
    parser.add_argument("--long-targets", type=int, default=2)
    args = parser.parse_args()
    lm = memrisk.load_model("smollm2", batch_size=16)
    exact = memrisk.load_model("smollm2", batch_size=16, dtype="float64")
    documents = corpus()
    bank = memrisk.PrefixBank.from_documents(lm, documents, length=50, size=args.bank, seed=0)
    bank_log_probs(lm, bank, [list(bank.prefixes[0][:4])])  # first use's allocations, untimed
    targets = memrisk.PrefixBank.from_documents(lm, documents, length=50, size=max(args.short_targets, args.long_targets), seed=1)
    compare(lm, exact, bank, [list(t[:4]) for t in targets.prefixes[: args.short_targets]], "Named-entity setting")
    if args.long_targets:
        compare(lm, exact, bank, [list(t) for t in targets.prefixes[: args.long_targets]], "Long-sequence setting")


if __name__ == "__main__":
    main()
