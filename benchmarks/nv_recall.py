"""nv-recall's matching blocks vs difflib on a 100,000-word book and a 100,000-word generation.

The book is standard-library prose (lower-cased, whitespace-split); the generation copies it
with the kinds of damage long generations show: word substitutions (2%), deletions (1%) and
drifting passages (1% of positions start 30 invented words and skip up to 30 book words).
Printed: both wall times, the ratio (target >= 10x) and whether the blocks are identical.

Run: python benchmarks/nv_recall.py [--words 100000]
"""

from __future__ import annotations

import argparse
import difflib
import random
import time

from memrisk.books.blocks import matching_blocks
from memrisk.demo.prose import source_documents


def damaged_copy(book: list[str], vocabulary: list[str], seed: int = 0) -> list[str]:
    """The book with substitutions, deletions and drifting passages."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(book):
        r = rng.random()
        if r < 0.01:
            out += rng.sample(vocabulary, 30)
            i += rng.randint(0, 30)
        elif r < 0.03:
            out.append(rng.choice(vocabulary))
            i += 1
        elif r < 0.04:
            i += 1
        else:
            out.append(book[i])
            i += 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=100_000)
    args = parser.parse_args()
    prose = " ".join(source_documents()).lower().split()
    book = (prose * (args.words // len(prose) + 1))[: args.words]
    generated = damaged_copy(book, sorted(set(prose)))
    start = time.perf_counter()
    ours = matching_blocks(book, generated)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    reference = [tuple(m) for m in difflib.SequenceMatcher(None, book, generated, autojunk=False).get_matching_blocks()[:-1]]
    difflib_s = time.perf_counter() - start
    print(f"book {len(book):,} words, generation {len(generated):,} words, {len(ours):,} matching blocks")
    print(f"  difflib SequenceMatcher(autojunk=False): {difflib_s:7.2f} s")
    print(f"  memrisk matching_blocks:                 {ours_s:7.2f} s   speed-up {difflib_s / ours_s:.1f}x (target >= 10x)")
    print(f"  identical blocks: {ours == reference}")


if __name__ == "__main__":
    main()
