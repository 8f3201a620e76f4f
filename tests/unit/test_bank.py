"""Unit tests of memrisk.data.bank.PrefixBank: construction checks and uniform, seeded window draws."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrisk.data.bank import PrefixBank
from memrisk.data.sources import Document
from memrisk.errors import MemriskError

# Word ids follow tests/conftest.py WORDS order after [UNK]=0: the=1 quick=2 brown=3 fox=4 jumps=5 over=6 lazy=7 dog=8.
CORPUS = [Document("A", "the quick brown fox jumps"), Document("B", "over lazy"), Document("C", "dog")]
# All windows of 2 tokens, document by document, start by start; C (1 token) has none.
WINDOWS_2 = [((1, 2), "A"), ((2, 3), "A"), ((3, 4), "A"), ((4, 5), "A"), ((6, 7), "B")]


def test_the_corpus_encodes_to_the_ids_the_tests_assume(word_model):
    assert [word_model.encode(d.text) for d in CORPUS] == [[1, 2, 3, 4, 5], [6, 7], [8]]


def test_a_bank_from_token_lists_holds_int_tuples_of_unknown_documents():
    bank = PrefixBank.from_token_lists([np.array([3, 4], dtype=np.int64), [5]])
    assert bank.prefixes == ((3, 4), (5,)) and all(type(t) is int for p in bank.prefixes for t in p)
    assert bank.documents == (None, None) and bank.description == "given" and len(bank) == 2


def test_an_empty_bank_is_refused():
    with pytest.raises(MemriskError, match="^the prefix bank is empty$"):
        PrefixBank.from_token_lists([])


def test_prefixes_and_document_ids_must_pair_up():
    with pytest.raises(MemriskError, match="^prefix bank has 2 prefixes but 1 document ids$"):
        PrefixBank(((1,), (2,)), ("a",))


def test_a_bank_is_frozen():
    bank = PrefixBank.from_token_lists([[1]])
    with pytest.raises(dataclasses.FrozenInstanceError):
        bank.prefixes = ()


@pytest.mark.parametrize(("length", "size"), [(0, 5), (2, 0), (-1, -1)])
def test_from_documents_refuses_a_non_positive_length_or_size(word_model, length, size):
    with pytest.raises(MemriskError) as info:
        PrefixBank.from_documents(word_model, CORPUS, length=length, size=size)
    assert str(info.value) == f"a prefix bank needs length >= 1 and size >= 1; got length={length}, size={size}"


def test_from_documents_refuses_a_corpus_without_a_long_enough_document(word_model):
    """The longest document, A, has 5 tokens."""
    with pytest.raises(MemriskError) as info:
        PrefixBank.from_documents(word_model, CORPUS, length=6, size=3)
    assert str(info.value) == "no document has 6 tokens; a prefix bank cannot be drawn"


def test_draws_index_the_corpus_windows_in_order_with_the_seeded_generator(word_model):
    """Draw k is window number rng.integers(0, 5) of the 5 windows, listed document by document."""
    bank = PrefixBank.from_documents(word_model, CORPUS, length=2, size=40, seed=11)
    picks = np.random.default_rng(11).integers(0, len(WINDOWS_2), size=40)
    assert list(zip(bank.prefixes, bank.documents)) == [WINDOWS_2[k] for k in picks]
    assert bank.description == "corpus-len2-size40-seed11"


def test_draws_are_uniform_over_windows_not_over_documents(word_model):
    """5000 draws over 5 windows: each count is Binomial(5000, 1/5), mean 1000, sd sqrt(5000·0.2·0.8) ≈ 28.3;
    drawing a document first would give B's one window half the draws."""
    bank = PrefixBank.from_documents(word_model, CORPUS, length=2, size=5000, seed=0)
    counts = {window: bank.prefixes.count(window) for window, _ in WINDOWS_2}
    assert sum(counts.values()) == 5000
    assert all(abs(c - 1000) < 4 * 28.3 for c in counts.values()), counts


def test_the_same_seed_draws_the_same_bank_and_another_seed_another(word_model):
    first = PrefixBank.from_documents(word_model, CORPUS, length=2, size=50, seed=3)
    assert PrefixBank.from_documents(word_model, CORPUS, length=2, size=50, seed=3) == first
    assert PrefixBank.from_documents(word_model, CORPUS, length=2, size=50, seed=4).prefixes != first.prefixes


def test_a_document_exactly_as_long_as_a_prefix_gives_its_one_window(word_model):
    bank = PrefixBank.from_documents(word_model, CORPUS[1:], length=2, size=4)
    assert bank.prefixes == ((6, 7),) * 4 and bank.documents == ("B",) * 4


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 5), st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_every_prefix_is_a_window_of_the_document_it_names(word_model, length, size, seed):
    ids = {d.doc_id: word_model.encode(d.text) for d in CORPUS}
    bank = PrefixBank.from_documents(word_model, CORPUS, length=length, size=size, seed=seed)
    assert len(bank) == len(bank.documents) == size
    for prefix, doc in zip(bank.prefixes, bank.documents):
        tokens = ids[doc]
        assert len(prefix) == length <= len(tokens)
        assert any(tuple(tokens[i:i + length]) == prefix for i in range(len(tokens) - length + 1))
