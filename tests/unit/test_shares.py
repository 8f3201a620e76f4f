"""Shares of a batch run side by side (`models.shares`): the same searches, the model's weights shared, clean failures."""

from __future__ import annotations

import threading

import pytest
import torch

import memrisk
from memrisk import DecodingPolicy
from memrisk.extraction.cbs import cbs
from memrisk.models.shares import SHARE_MIN_ROWS, dealt, run_shares, share_count
from tests.conftest import TINY_HIDDEN, tiny_gpt2
from tests.numerics import assert_close, reorder_tolerance

CASES = [([1, 2, 3], [1, 2, 3, 4]), ([4, 5], [0, 0, 1, 1]), ([7], [6, 5, 4, 3]), ([2, 2, 6, 1], [3, 1, 3])] * 3


@pytest.fixture(scope="module")
def lm() -> memrisk.LanguageModel:
    return memrisk.load_model(tiny_gpt2(vocab_size=8, seed=3), batch_size=4)


@pytest.mark.parametrize("shares", [2, 3, 5, "auto"])
@pytest.mark.parametrize("prune", [None, "levenshtein"])
def test_cbs_in_shares_finds_what_one_pool_finds(lm, shares, prune) -> None:
    """The same candidates, stops and token counts. Floats to the float32 reordering bound of tests/numerics.py: this
    tiny model's batches (2–12 rows) are small enough that a row's product may depend on its batch's size; SmolLM2's
    test checks the bits."""
    prefixes, suffixes = [c[0] for c in CASES], [c[1] for c in CASES]
    search = {"beam_width": 3, "prune": prune, "epsilon": 1, "batch_size": 4}
    one = cbs(lm, prefixes, suffixes, DecodingPolicy(top_k=4), shares=1, **search)
    split = cbs(lm, prefixes, suffixes, DecodingPolicy(top_k=4), shares=shares, **search)
    for a, b in zip(one, split, strict=True):
        assert [c.tokens for c in a.candidates] == [c.tokens for c in b.candidates]
        assert_close([c.log_p for c in a.candidates], [c.log_p for c in b.candidates], reorder_tolerance(4, 8, TINY_HIDDEN))
        assert (a.stop, a.token_evals, a.bank > 0) == (b.stop, b.token_evals, b.bank > 0)


def test_replicas_share_the_weights_and_keep_their_own_modules(lm) -> None:
    first, second = lm.replicas(2)
    assert first is lm and lm.replicas(2)[1] is second
    assert [p.data_ptr() for p in second.model.parameters()] == [p.data_ptr() for p in lm.model.parameters()]
    assert second.model is not lm.model and second.model.config is not lm.model.config
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        assert torch.equal(second.model(ids).logits, lm.model(ids).logits)


def test_a_failing_share_stops_the_others_and_its_error_is_raised_once_all_stop() -> None:
    lm = memrisk.load_model(tiny_gpt2(), batch_size=2)
    kept = torch.get_num_threads()
    seen: dict[str, object] = {}

    def fails(worker, stop):
        raise ValueError("share 0 broke")

    def waits(worker, stop):
        seen["threads"] = torch.get_num_threads()
        seen["stopped"] = stop.wait(timeout=30)
        return "done"

    with pytest.raises(ValueError, match="share 0 broke"):
        run_shares(lm, [fails, waits])
    assert seen == {"threads": 1, "stopped": True}
    assert torch.get_num_threads() == kept
    assert run_shares(lm, [lambda worker, stop: worker is lm]) == [True]


def test_shares_deal_items_round_robin_and_keep_enough_rows_each(lm, monkeypatch) -> None:
    assert dealt(7, 3) == [[0, 3, 6], [1, 4], [2, 5]]
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert share_count(lm, items=8, rows_per_item=21, batch_size=8) == 2
    assert share_count(lm, items=1, rows_per_item=21, batch_size=8) == 1
    assert share_count(lm, items=8, rows_per_item=4, batch_size=4) == 1  # 2 rows a share
    assert share_count(lm, items=8, rows_per_item=SHARE_MIN_ROWS, batch_size=2) == 2
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert share_count(lm, items=8, rows_per_item=21, batch_size=8) == 1


@pytest.mark.parametrize("shares", [0, 1.0, "two"])
def test_cbs_rejects_shares_that_are_not_a_count(lm, shares) -> None:
    with pytest.raises(memrisk.MemriskError, match="shares must be a positive integer or 'auto'"):
        cbs(lm, [[1]], [[2, 3]], shares=shares)


def test_a_run_passes_its_models_shares_to_cbs(lm, monkeypatch) -> None:
    from memrisk.config import parse_config
    from memrisk.methods import cbs as cbs_method

    seen = {}
    monkeypatch.setattr(cbs_method, "cbs", lambda *args, **kwargs: seen.update(kwargs))
    config = parse_config({"model": {"name": "m", "shares": "auto"}, "datasets": [{"name": "d", "documents": ["a b"]}]})
    cbs_method.run_cbs(config, lm, [[1]], [[2, 3]])
    assert seen["shares"] == "auto"


def test_every_share_runs_while_the_others_do() -> None:
    """Side by side, not one after another: each job waits for the other to start."""
    lm = memrisk.load_model(tiny_gpt2(), batch_size=2)
    barrier = threading.Barrier(2, timeout=30)
    assert run_shares(lm, [lambda worker, stop: barrier.wait() >= 0] * 2) == [True, True]


def test_replicas_of_a_onednn_model_multiply_with_their_own_layers_and_follow_its_library() -> None:
    """Each copy's oneDNN forwards are bound to its own layers (a deep copy would otherwise keep the original's), give
    the original's logits, and a later `use_matmul` on the original reaches the copies when they are next handed out."""
    from tests.unit.test_linears import tiny_llama

    lm = memrisk.load_model(tiny_llama(), matmul="onednn")
    replica = lm.replicas(2)[1]
    layers = [m for m in replica.model.modules() if type(m) is torch.nn.Linear]
    assert layers and all(vars(m)["forward"].__self__ is m for m in layers)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        assert torch.equal(replica.model(ids).logits, lm.model(ids).logits)
    lm.use_matmul("blas")
    assert lm.replicas(2)[1].matmul == "blas" and not any("forward" in vars(m) for m in layers)
