"""Prior-aware memorization on the demo's trained model: distinctive passages vs a generic sentence."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memrisk
from memrisk.data import Document, make_windows
from memrisk.demo.corpus import generic_documents
from memrisk.demo.experiment import DEMO_GENERIC_SEQUENCES
from memrisk.extraction.prior_aware import default_m

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scored(demo_model):
    """PA verdicts (default m, n calibrated on the demo's domain generic sentences) for the 64-copy
    passages and for the generic sentence after 32 of the contexts it was inserted into."""
    lm, corpus = demo_model
    planted = make_windows(lm, [Document(f"p{i}", p.text) for i, p in enumerate(corpus.planted) if p.copies == 64]).windows
    generic = make_windows(lm, [Document(f"g{i}", t) for i, t in enumerate(generic_documents(corpus, lm.encode_with_offsets)[:32])]).windows
    bank = memrisk.PrefixBank.from_documents(lm, [Document(f"h{i}", t) for i, t in enumerate(corpus.heldout)], length=50, size=100, seed=0)
    windows = planted + generic
    scores = memrisk.prior_aware(
        lm, [list(w.prefix_ids) for w in windows], [list(w.suffix_ids) for w in windows], bank, trials=5,
        generic_sequences=DEMO_GENERIC_SEQUENCES,
    )
    return scores, len(planted), generic, corpus


def test_generic_windows_continue_with_the_generic_sentence(demo_model, scored) -> None:
    lm, _ = demo_model
    _, _, generic, corpus = scored
    for window in generic:
        assert corpus.generic.text.startswith(lm.decode(window.suffix_ids).strip()[:40])


def test_distinctive_passages_are_pa_memorized_and_the_generic_sentence_is_not(scored) -> None:
    scores, planted, _, _ = scored
    results = scores.results
    distinctive, generic = results[:planted], results[planted:]
    print(scores.signature)
    print("calibration log10 ratios:", [round(r / math.log(10), 2) for r in scores.calibration.log_ratios])
    for name, part in (("planted x64", distinctive), ("generic", generic)):
        print(name, "log10 P(s|p):", [round(r.log_p / math.log(10), 1) for r in part])
        print(name, "log10 ratio:", [round(r.log_ratio / math.log(10), 1) for r in part])
    assert scores.m == default_m(50) == 1e-4
    assert all(math.isfinite(r.log_p) and math.isfinite(r.log_prior) and math.isfinite(r.log_ratio_spread) for r in results)
    assert all(r.pa_memorized for r in distinctive)
    # The generic sentence is likely after its contexts (P(s|p) > m) but about as likely after any
    # text: in every context its ratio stays below n, which generic domain sentences set.
    assert np.median([r.log_p for r in generic]) > math.log(scores.m)
    assert sum(r.extractable for r in generic) >= 0.9 * len(generic)
    assert not any(r.pa_memorized for r in generic)
    mean_log_ratio = np.mean([r.log_ratio for r in generic])
    assert abs(mean_log_ratio) < math.log(10)
    print(f"generic: max log10 ratio {max(r.log_ratio for r in generic) / math.log(10):.2f}, log10 n {math.log10(scores.n):.2f}")
    assert min(r.log_ratio for r in distinctive) - np.median([r.log_ratio for r in generic]) > math.log(1e6)
    assert np.median([r.log_ratio_spread for r in results]) < math.log(10), "trials agree within an order of magnitude"
