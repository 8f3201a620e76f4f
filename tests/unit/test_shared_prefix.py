"""Shared-prefix decoding (models/shared_prefix.py) gives the logits of the plain per-row KV cache: after expanding
prefixes over rows, beam reorders with repeats, merging newly prefilled rows, and teacher-forced continuations.

The two compute attention in different orders (two softmax parts joined, against one SDPA call), so float32 logits
agree to a tolerance, not bitwise: |Δ| ≤ 1e-4 · (1 + |logit|) for these 2-layer models, whose logits sum a few
hundred products per layer."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import memrisk
from memrisk.models import columns, shared_prefix
from tests.conftest import tiny_gpt2

VOCAB = 50
PREFIXES = [[1, 2, 3, 4, 5], [7, 8, 9], [3, 3, 3, 3, 3, 3, 3]]


def tiny_llama() -> LlamaForCausalLM:
    """A random 2-layer Llama with grouped-query attention (4 heads over 2 key/value heads)."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(config).eval()


MODELS = {"gpt2": lambda: tiny_gpt2(vocab_size=VOCAB, n_positions=128), "llama-gqa": tiny_llama}


def decode(lm: memrisk.LanguageModel, shared: bool) -> list[torch.Tensor]:
    """Logits along one scripted decode: expand, step, reorder with repeats, step, merge a new prefix, step."""
    generator = torch.Generator().manual_seed(1)
    state = lm.prefill(PREFIXES, shared=shared)
    assert state.shared == shared
    state = lm.expand_rows(state, torch.tensor([0, 0, 1, 2, 2, 2, 1]))
    seen = [state.logits]
    state = lm.step(state, torch.randint(0, VOCAB, (7,), generator=generator))
    seen.append(state.logits)
    state = lm.select_rows(state, torch.tensor([6, 5, 5, 0, 3, 1]))
    state = lm.step(state, torch.randint(0, VOCAB, (6,), generator=generator))
    seen.append(state.logits)
    state = lm.merge(state, lm.prefill([[11, 12, 13, 14, 15, 16, 17, 18, 19]], shared=shared))
    state = lm.select_rows(state, torch.tensor([0, 2, 6, 6]))
    for _ in range(3):
        state = lm.step(state, torch.randint(0, VOCAB, (4,), generator=generator))
        seen.append(state.logits)
    return seen


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(((a - b).abs() <= 1e-4 * (1 + a.abs())).all())


@pytest.mark.parametrize("name", MODELS)
def test_shared_prefix_decoding_gives_the_plain_caches_logits(name: str) -> None:
    lm = memrisk.load_model(MODELS[name]())
    assert lm.shares_prefixes
    for plain, shared in zip(decode(lm, False), decode(lm, True), strict=True):
        assert plain.shape == shared.shape and close(plain, shared)


@pytest.mark.parametrize("name", MODELS)
def test_shared_prefix_continuations_match_a_full_forward(name: str) -> None:
    lm = memrisk.load_model(MODELS[name]())
    suffixes = torch.randint(0, VOCAB, (6, 5), generator=torch.Generator().manual_seed(2))
    shared = lm.continuation_logits(lm.prefill(PREFIXES, shared=True), suffixes)
    full = lm.suffix_logits([PREFIXES[i % 3] for i in range(6)], suffixes.tolist())
    assert close(full, shared)


def test_compaction_forgets_prefixes_and_columns_no_row_reads() -> None:
    lm = memrisk.load_model(tiny_llama())
    state = lm.prefill(PREFIXES, shared=True)
    state = lm.step(lm.select_rows(state, torch.tensor([1, 1])), torch.tensor([4, 5]))
    cache = state.cache
    assert cache.prefix_mask.shape == (1, 3) and cache.owner.tolist() == [0, 0]
    assert all(layer.prefix_keys.shape[0] == 1 and layer.prefix_keys.shape[2] == 3 for layer in cache.layers)


def test_models_with_windowed_or_capped_attention_keep_the_plain_cache() -> None:
    windowed = tiny_llama()
    windowed.config.sliding_window = 4
    assert not shared_prefix.supports(windowed)
    assert not memrisk.load_model(windowed).prefill(PREFIXES, shared=True).shared


def test_auto_shares_prefixes_on_the_cpu_only_and_a_named_cache_is_kept_on_any_device() -> None:
    assert shared_prefix.chosen("auto", torch.device("cpu")) == "shared"
    for device in ("cuda", "cuda:1", "mps"):
        assert shared_prefix.chosen("auto", torch.device(device)) == "per_row"
        assert shared_prefix.chosen("shared", torch.device(device)) == "shared"
    assert shared_prefix.chosen("per_row", torch.device("cpu")) == "per_row"
    with pytest.raises(memrisk.MemriskError, match="prefix_cache must be one of auto, shared, per_row; got 'paged'"):
        shared_prefix.chosen("paged", torch.device("cpu"))


def test_a_per_row_prefix_cache_decodes_with_the_plain_cache_and_says_so() -> None:
    lm = memrisk.load_model(tiny_llama(), prefix_cache="per_row")
    assert not lm.shares_prefixes and not lm.prefill(PREFIXES, shared=True).shared
    assert lm.describe()["prefix_cache"] == "per_row" and lm.replicas(2)[1].prefix_cache == "per_row"
    lm.use_prefix_cache("auto")
    assert lm.shares_prefixes and lm.prefill(PREFIXES, shared=True).shared and lm.describe()["prefix_cache"] == "shared"
    with pytest.raises(memrisk.MemriskError, match="prefix_cache"):
        lm.use_prefix_cache("none")
    assert lm.prefix_cache == "auto"


def reorder_decode(lm: memrisk.LanguageModel, in_place: bool) -> list[torch.Tensor]:
    """Logits along beam reorders, to as many rows, to fewer (leaving slots free) and back to more: in place (each
    parent's first child keeps its slot, the others' columns move) or into a freshly gathered cache, compacted the
    same way."""
    generator = torch.Generator().manual_seed(3)
    state = lm.expand_rows(lm.prefill(PREFIXES, shared=True), torch.tensor([0, 0, 1, 2, 2, 2, 1, 0]))
    seen = []
    for index in ([6, 5, 5, 0, 3, 1, 1, 7], [2, 2, 2, 6, 4, 4, 0, 7], [1, 1, 1, 3, 3, 5, 5], [1, 3, 5, 0, 2, 4, 6],
                  [0, 0, 2, 2, 4, 4, 6, 6]):
        state = lm.step(state, torch.randint(0, VOCAB, (len(state.next_position),), generator=generator))
        seen.append(state.logits)
        if in_place:
            state = lm.select_rows(state, torch.tensor(index))
            assert state.cache.slot_count == 8 and state.cache.rows == len(index)
        else:
            state = lm.expand_rows(state, torch.tensor(index))
            state.cache.compact()
    seen.append(lm.step(state, torch.randint(0, VOCAB, (8,), generator=generator)).logits)
    return seen


@pytest.mark.parametrize("name", MODELS)
def test_reordering_in_place_gives_the_gathered_caches_logits_bit_for_bit(name: str) -> None:
    """Both compute every row from the same columns in the same order (only the slot a row's columns sit in differs), so
    the logits are equal bit for bit at any thread count."""
    lm = memrisk.load_model(MODELS[name]())
    for moved, gathered in zip(reorder_decode(lm, True), reorder_decode(lm, False), strict=True):
        assert torch.equal(moved, gathered)


def test_a_moved_row_copies_only_the_columns_its_new_slot_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Siblings share their parent's columns: a child moved into a slot that held a relative's columns copies only the
    columns after their common ancestor, and decodes as the fully gathered cache does (the test above, bit for bit)."""
    copies: list[tuple[int, int]] = []
    original = shared_prefix.ColumnCopy.__init__

    def spied(self, source, target, start, length):  # type: ignore[no-untyped-def]
        original(self, source, target, start, length)
        copies.append((len(self.column), len(source) * length))

    monkeypatch.setattr(shared_prefix.ColumnCopy, "__init__", spied)
    lm = memrisk.load_model(tiny_llama())
    reorder_decode(lm, True)
    assert len(copies) == 4 and all(copied <= whole for copied, whole in copies)  # the fourth reorder moves no row
    assert any(copied < whole for copied, whole in copies)


def test_column_copies_reach_the_same_places_in_a_buffer_trimmed_on_the_left() -> None:
    generator = torch.Generator().manual_seed(4)
    whole = torch.randn(5, 2, 9, 4, generator=generator)
    buffer = whole[:, :, 3:]  # as `compact` leaves a buffer whose leading columns no row reads
    expected, unread = buffer.clone(), whole[:, :, :3].clone()
    source, target, start = torch.tensor([0, 2]), torch.tensor([3, 4]), torch.tensor([1, 0])
    for s, t, first in zip(source, target, start):
        expected[t, :, first:5] = expected[s, :, first:5]
    shared_prefix.ColumnCopy(source, target, start, 5).apply(buffer)
    assert torch.equal(buffer, expected) and torch.equal(whole[:, :, :3], unread)


def test_common_columns_counts_the_leading_columns_two_lineages_share() -> None:
    lineage = torch.tensor([[1, 2, 3], [1, 2, 3], [1, 9, 3], [7, 2, 3]])
    other = torch.tensor([[1, 2, 3], [1, 2, 4], [1, 2, 3], [1, 2, 3]])
    assert shared_prefix.common_columns(lineage, other).tolist() == [3, 2, 1, 0]


def test_a_reorder_leaves_at_most_a_quarter_of_the_slots_free() -> None:
    lm = memrisk.load_model(tiny_llama())
    state = lm.expand_rows(lm.prefill(PREFIXES, shared=True), torch.tensor([0, 0, 1, 1, 2, 2, 2, 2]))
    state = lm.step(state, torch.arange(8))
    kept = lm.select_rows(state, torch.tensor([0, 0, 2, 3, 4, 5]))  # 6 rows in 8 slots: 2 free
    assert kept.cache.slot_count == 8 and kept.cache.rows == 6
    state = lm.step(kept, torch.arange(6))
    gathered = lm.select_rows(state, torch.tensor([0, 1, 2, 3, 4]))  # 5 rows would leave 3 of 8 free
    assert gathered.cache.slot_count == 5 and gathered.cache.place.tolist() == list(range(5))


def test_rows_expanded_from_some_prefixes_attend_to_those_only_with_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Monte Carlo expands one window's prefix at a time out of a batch of prefilled ones: the other prefixes are
    dropped from the copy (their columns stay as wide), so the attention's grouped products hold only prefixes with
    rows, and the logits are those of the copy that kept every prefix, bit for bit."""
    lm = memrisk.load_model(tiny_llama())
    prefilled = lm.prefill(PREFIXES, shared=True)
    tokens = torch.randint(0, VOCAB, (3, 8), generator=torch.Generator().manual_seed(2))

    def sampled() -> tuple[list[torch.Tensor], shared_prefix.SharedPrefixCache]:
        state = lm.expand_rows(prefilled, torch.tensor([1] * 8))
        seen = [state.logits]
        for step in tokens:
            state = lm.step(state, step)
            seen.append(state.logits)
        return seen, state.cache

    dropped, cache = sampled()
    assert cache.prefix_mask.shape == (1, 7) and cache.owner.tolist() == [0] * 8 and cache.plan(1, 2).regular
    assert prefilled.cache.prefix_mask.shape == (3, 7)  # the prefilled batch keeps its prefixes for the next window
    monkeypatch.setattr(shared_prefix.SharedPrefixCache, "_forget_unused_prefixes", lambda self: None)
    kept, cache = sampled()
    assert cache.prefix_mask.shape == (3, 7) and not cache.plan(1, 2).regular
    assert all(torch.equal(a, b) for a, b in zip(dropped, kept))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_batched_attention_product_gives_each_matrix_the_same_bits_whatever_else_the_batch_holds(threads: int) -> None:
    """What dropping unused prefixes relies on, at SmolLM2's shapes (3 key/value heads, head dim 64, 20 beams × 3
    queries or 256 samples × 3 against 50 prefix columns): MKL multiplies each matrix of a batch alike."""
    generator = torch.Generator().manual_seed(3)
    kept = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for rows, columns in ((60, 50), (768, 50), (63, 37)):
            queries, keys = torch.randn(8, 3, rows, 64, generator=generator), torch.randn(8, 3, 64, columns, generator=generator)
            weights, values = torch.randn(8, 3, rows, columns, generator=generator), torch.randn(8, 3, columns, 64, generator=generator)
            scores, out = torch.matmul(queries, keys), torch.matmul(weights, values)
            for some in ([0], [5], [1, 7]):
                index = torch.tensor(some)
                assert torch.equal(torch.matmul(queries[index], keys[index]), scores[index])
                assert torch.equal(torch.matmul(weights[index], values[index]), out[index])
    finally:
        torch.set_num_threads(kept)


@pytest.mark.parametrize("name", MODELS)
def test_both_column_layouts_give_the_same_logits_bit_for_bit(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU store lays its columns out step by step, other devices slot by slot (models/columns.py): along the scripted
    decodes (reorders with repeats, in place and gathered, merges, compaction) the logits are the same bits."""
    lm = memrisk.load_model(MODELS[name]())
    by_step = [decode(lm, True), reorder_decode(lm, True), reorder_decode(lm, False)]
    monkeypatch.setattr(columns, "step_major", lambda device: False)
    by_slot = [decode(lm, True), reorder_decode(lm, True), reorder_decode(lm, False)]
    for ours, theirs in zip(by_step, by_slot, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


@pytest.mark.parametrize("threads", [1, 2])
def test_the_attentions_own_products_give_the_same_bits_in_both_layouts(threads: int) -> None:
    """At SmolLM2's decode shapes (160 slots × 3 key/value heads, 3 queries each, head dim 64) and every generated length
    from 1 to 70 (the benchmark table's searches reach 49), each slot's queries against its own keys, and its weights
    against its own values, read from a store laid out step by step give the products of the slot-by-slot layout (with
    spare columns behind each slot) bit for bit."""
    generator = torch.Generator().manual_seed(5)
    kept = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for length in range(1, 71):
            slot_keys = torch.randn(160, 3, length + 8, 64, generator=generator)[..., :length, :]
            slot_values = torch.randn(160, 3, length + 8, 64, generator=generator)[..., :length, :]
            step_keys = slot_keys.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)
            step_values = slot_values.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)
            queries = torch.randn(160, 3, 3, 64, generator=generator)
            weights = torch.softmax(torch.randn(160, 3, 3, length, generator=generator), dim=-1)
            assert torch.equal(torch.matmul(queries, step_keys.transpose(-1, -2)), torch.matmul(queries, slot_keys.transpose(-1, -2)))
            assert torch.equal(torch.matmul(weights, step_values), torch.matmul(weights, slot_values))
    finally:
        torch.set_num_threads(kept)
