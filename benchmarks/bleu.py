"""BLEU benchmark: nltk's sentence BLEU per pair against memrisk.distance.sentence_bleus, which counts the reference's
n-grams once for many candidates (Monte Carlo samples of one target); prints both per pair, their ratio and whether they
agree value for value.

Run: python benchmarks/bleu.py
"""

from __future__ import annotations

import random
import time

from memrisk.distance import sentence_bleu, sentence_bleus
from memrisk.demo.prose import source_documents


def main() -> None:
    """2,000 perturbed copies of one 50-word target, scored both ways."""
    words = " ".join(source_documents()).split()
    rng = random.Random(0)
    target = " ".join(words[:50])
    samples = [" ".join(w if rng.random() < 0.7 else rng.choice(words) for w in words[:50]) for _ in range(2000)]
    start = time.perf_counter()
    one = [sentence_bleu(sample, target) for sample in samples]
    nltk_seconds = time.perf_counter() - start
    start = time.perf_counter()
    many = sentence_bleus(samples, target).tolist()
    batched_seconds = time.perf_counter() - start
    print(f"nltk per pair {1e6 * nltk_seconds / len(samples):.0f} us, batched per pair "
          f"{1e6 * batched_seconds / len(samples):.0f} us, ratio {nltk_seconds / batched_seconds:.1f}x, equal: {one == many}")


if __name__ == "__main__":
    main()
