"""Real memorization with a known ground truth: CBS and teacher forcing on the demo's trained model."""

from __future__ import annotations

import numpy as np
import pytest

import memrisk
from memrisk import DecodingPolicy
from memrisk.data import Document, make_windows

TAU = 1e-3
POLICY = DecodingPolicy(top_k=40)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def windows(demo_model):
    """Planted windows (exact copies, then template passages whose slot words vary), and held-out windows."""
    lm, corpus = demo_model
    planted = make_windows(lm, [Document(f"x{p.copies}-{i}", p.text) for i, p in enumerate(corpus.planted)]).windows
    planted += make_windows(lm, [Document(f"template-{i}", t.text) for i, t in enumerate(corpus.templates)]).windows
    heldout = make_windows(lm, [Document(f"h{i}", t) for i, t in enumerate(corpus.heldout)]).windows
    return planted, heldout


def run(lm, windows, **kwargs):
    prefixes, suffixes = [list(w.prefix_ids) for w in windows], [list(w.suffix_ids) for w in windows]
    log_p = memrisk.verbatim_logprob(lm, prefixes, suffixes, POLICY)[:, 0]
    results = memrisk.cbs(lm, prefixes, suffixes, POLICY, beam_width=20, prune="levenshtein", epsilon=5, tau_min=TAU, **kwargs)
    return np.exp(log_p), results


def test_near_verbatim_mass_on_planted_passages(demo_model, windows) -> None:
    lm, _ = demo_model
    p_z, results = run(lm, windows[0])
    near = np.array([r.lower_bound("levenshtein", 5) for r in results])
    verbatim = np.array([r.lower_bound("levenshtein", 0) for r in results])
    assert (near >= TAU).sum() >= 8, near
    assert (near > p_z * (1 + 1e-6)).any(), "CBS should find near-verbatim mass beyond p_z somewhere"
    unlocked = (p_z < TAU) & (near >= TAU)
    print(f"near-verbatim extractable {int((near >= TAU).sum())}/{len(near)}, verbatim {int((p_z >= TAU).sum())}, unlocked {int(unlocked.sum())}")
    assert unlocked.any(), "near-verbatim extraction should unlock some planted passage"
    extractable = p_z >= TAU
    recovery = verbatim[extractable].sum() / p_z[extractable].sum()
    missed = [w.example_id for w, e, v in zip(windows[0], extractable, verbatim) if e and v < TAU]
    print(f"recovery of teacher-forced p_z by LB(eps=0): {recovery:.4f}; missed windows: {missed}")
    assert missed == [] and recovery == pytest.approx(1.0, rel=1e-4)  # anchored: the target's path is never pruned
    for r, p in zip(results, p_z):
        # 50 steps from a KV cache vs one teacher-forced pass: float32 sums in another order
        if p >= TAU:
            assert r.lower_bound("levenshtein", 0) == pytest.approx(p, rel=1e-4)
        assert r.lower_bound("levenshtein", 0) <= p * (1 + 1e-4) + 1e-12
        assert r.token_evals <= 50 + 49 * (20 + 1)


def test_held_out_passages_stay_below_tau(demo_model, windows) -> None:
    lm, _ = demo_model
    p_z, results = run(lm, windows[1])
    assert all(r.lower_bound("levenshtein", 5) < TAU for r in results)
    assert (p_z < TAU).all()
    assert sum(r.stop.reason == "tau_min" for r in results) >= len(results) // 2
