"""Unit tests of memrisk.data.corpus_index (exact n-gram counts against brute force, the tokenizer and content checks,
the cache and the atomic build) and of the count bins of memrisk.methods.corpus_counts."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import memrisk
from memrisk.data import corpus_index
from memrisk.data.corpus_index import INDEX_INFO, cached_index_folder, corpus_digest, open_corpus_index
from memrisk.errors import MemriskError
from memrisk.methods.corpus_counts import bin_label, binned_rates, count_bin
from tests.conftest import WORDS, tiny_gpt2

CORPUS = ["the quick brown fox jumps over the lazy dog", "the cat sat on the mat the cat", "the the the", "dog"]


def brute_force(token_lists: list[list[int]], query: list[int]) -> int:
    """Occurrences of `query` in the token lists, overlapping ones included, none across two lists."""
    n = len(query)
    return sum(ids[i : i + n] == query for ids in token_lists for i in range(len(ids) - n + 1))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMRISK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_counts_equal_brute_force_for_every_ngram_of_the_corpus(word_model, cache):
    index = open_corpus_index(word_model, CORPUS, progress=False)
    tokens = [word_model.encode(text) for text in CORPUS]
    assert (index.documents, index.tokens, index.token_width) == (4, 21, 2)
    ngrams = {tuple(ids[i : i + n]) for ids in tokens for n in range(1, 5) for i in range(len(ids) - n + 1)}
    assert {q: index.count(list(q)) for q in ngrams} == {q: brute_force(tokens, list(q)) for q in ngrams}
    the = word_model.encode("the")
    assert index.count(the) == 8 and index.count(the * 2) == 2  # "the the the" holds two overlapping "the the"
    assert index.count(word_model.encode("dog the")) == 0  # the first document ends in "dog", the third starts with "the"
    assert index.count(word_model.encode("mill")) == 0


def test_an_id_the_corpus_never_uses_occurs_nowhere(word_model, cache):
    index = open_corpus_index(word_model, CORPUS, progress=False)
    the, mill = word_model.encode("the mill")
    assert index.distinct_ids == 12 and index.count([mill]) == index.count([the, mill]) == index.count([10**9]) == 0


def word_model_numbered(first_id: int, name: str, reverse: bool = False) -> memrisk.LanguageModel:
    """A tiny model whose word tokenizer numbers the words from `first_id` (in reverse order when asked)."""
    words = list(dict.fromkeys(WORDS))
    vocab = {"[UNK]": 0, **{w: first_id + i for i, w in enumerate(reversed(words) if reverse else words)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    return memrisk.LanguageModel(tiny_gpt2(vocab_size=8, seed=3), tokenizer, name=name)


def test_ids_past_two_bytes_are_indexed_by_their_rank(cache):
    large = word_model_numbered(100_000, "large-ids")
    index = open_corpus_index(large, CORPUS, progress=False)
    tokens = [large.encode(text) for text in CORPUS]
    assert min(min(ids) for ids in tokens) >= 100_000 and index.token_width == 2
    ngrams = {tuple(ids[i : i + n]) for ids in tokens for n in (1, 2, 3) for i in range(len(ids) - n + 1)}
    assert {q: index.count(list(q)) for q in ngrams} == {q: brute_force(tokens, list(q)) for q in ngrams}


def test_a_corpus_past_two_byte_ranks_needs_the_memory_of_the_four_byte_indexer(word_model, cache, monkeypatch):
    monkeypatch.setattr(corpus_index, "U16_LIMIT", 8)
    monkeypatch.setattr(corpus_index, "physical_memory", lambda: 24 * 2**30)
    with pytest.raises(MemriskError, match=r"the corpus uses 12 distinct token ids, more than infini-gram's 2-byte index "
                                           r"holds \(8\); its 4-byte indexer needs 40 GiB of memory and this machine has 24 GiB"):
        open_corpus_index(word_model, CORPUS, progress=False)
    assert not (cache / "corpus-index").exists() or list((cache / "corpus-index").iterdir()) == []


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(documents=st.lists(st.lists(st.sampled_from(WORDS[:6]), min_size=1, max_size=12), min_size=1, max_size=5),
       query=st.lists(st.sampled_from(WORDS[:6]), min_size=1, max_size=4))
def test_random_corpora_count_as_brute_force(word_model, tmp_path_factory, documents, query):
    texts = [" ".join(words) for words in documents]
    index = open_corpus_index(word_model, texts, tmp_path_factory.mktemp("index") / "index", progress=False)
    tokens = [word_model.encode(text) for text in texts]
    ids = word_model.encode(" ".join(query))
    assert index.count(ids) == brute_force(tokens, ids)


def other_tokenizer_model() -> memrisk.LanguageModel:
    """A tiny model whose word tokenizer numbers the words in reverse: the same text, other ids."""
    return word_model_numbered(1, "reversed-words", reverse=True)


def test_an_index_opened_with_another_tokenizer_is_refused_naming_both(word_model, tmp_path):
    folder = tmp_path / "index"
    open_corpus_index(word_model, CORPUS, folder, progress=False)
    other = other_tokenizer_model()
    with pytest.raises(MemriskError, match=r"built with the tokenizer of GPT2LMHeadModel \(fingerprint [0-9a-f]{12}\), "
                                           r"but the model reversed-words has another \(fingerprint [0-9a-f]{12}\)"):
        open_corpus_index(other, CORPUS, folder, progress=False)
    with pytest.raises(MemriskError, match="built with the tokenizer of GPT2LMHeadModel"):
        open_corpus_index(other, None, folder, progress=False)


def test_the_cache_keeps_one_index_per_tokenizer(word_model, cache):
    mine = open_corpus_index(word_model, CORPUS, progress=False)
    other = open_corpus_index(other_tokenizer_model(), CORPUS, progress=False)
    assert mine.folder != other.folder and mine.folder.parent == other.folder.parent == cache / "corpus-index"
    assert mine.count(word_model.encode("the cat")) == other.count(other_tokenizer_model().encode("the cat")) == 2


def test_an_index_of_other_documents_is_refused(word_model, tmp_path):
    folder = tmp_path / "index"
    open_corpus_index(word_model, CORPUS, folder, progress=False)
    with pytest.raises(MemriskError, match="built from other documents .* than the corpus names .*; remove it or name another index_dir"):
        open_corpus_index(word_model, CORPUS[:2], folder, progress=False)
    assert open_corpus_index(word_model, None, folder, progress=False).documents == 4


def test_a_second_open_reuses_the_cached_index(word_model, cache, monkeypatch):
    first = open_corpus_index(word_model, CORPUS, progress=False)
    assert first.folder == cached_index_folder(corpus_digest(CORPUS), word_model)
    stamps = {path.name: path.stat().st_mtime_ns for path in first.folder.iterdir()}

    def refuse(*args):
        raise AssertionError("rebuilt")

    monkeypatch.setattr(corpus_index, "_build", refuse)
    second = open_corpus_index(word_model, CORPUS, progress=False)
    assert second == first and {path.name: path.stat().st_mtime_ns for path in second.folder.iterdir()} == stamps


def test_a_failed_build_leaves_nothing_that_is_later_trusted(word_model, cache, monkeypatch):
    def killed(staging, width):
        (staging / "table.0").write_bytes(b"half")
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(corpus_index, "_sort_suffixes", killed)
        with pytest.raises(KeyboardInterrupt):
            open_corpus_index(word_model, CORPUS, progress=False)
    assert list((cache / "corpus-index").iterdir()) == []
    assert open_corpus_index(word_model, CORPUS, progress=False).count(word_model.encode("the")) == 8


def test_a_folder_without_a_complete_index_is_refused(word_model, tmp_path):
    folder = tmp_path / "index"
    folder.mkdir()
    (folder / INDEX_INFO).write_text(json.dumps({}))
    with pytest.raises(MemriskError, match=r"holds no complete corpus index \(missing token-ids.npy, tokenized.0, offset.0, table.0\)"):
        open_corpus_index(word_model, CORPUS, folder, progress=False)


def test_a_missing_index_dir_without_documents_is_refused(word_model, tmp_path):
    with pytest.raises(MemriskError, match="does not exist, and the corpus names no documents to build it from"):
        open_corpus_index(word_model, None, tmp_path / "nowhere", progress=False)


def test_a_corpus_without_tokens_is_refused(word_model, cache):
    with pytest.raises(MemriskError, match=r"the corpus \(2 documents\) encodes to no tokens under the tokenizer of"):
        open_corpus_index(word_model, ["", "   "], progress=False)


def test_the_digest_depends_on_the_documents_and_their_order():
    assert corpus_digest(["a", "b"]) == corpus_digest(("a", "b"))
    assert len({corpus_digest(["a", "b"]), corpus_digest(["b", "a"]), corpus_digest(["ab"]), corpus_digest(["a", "", "b"])}) == 4


def test_counts_fall_in_log_spaced_bins():
    counts = np.array([0, 1, 2, 3, 4, 7, 8, 1000])
    assert count_bin(counts).tolist() == [0, 1, 2, 2, 3, 3, 4, 10]
    assert [bin_label(b) for b in (0, 1, 2, 3, 10)] == ["0", "1", "2–3", "4–7", "512–1023"]
    rates = binned_rates(counts, {"greedy": counts >= 4})
    assert [(r["bin"], r["windows"], r["extracted"]["greedy"]) for r in rates] == [
        ("0", 1, 0), ("1", 1, 0), ("2–3", 2, 0), ("4–7", 2, 2), ("8–15", 1, 1), ("512–1023", 1, 1)]


def test_a_corpus_sorted_in_parallel_parts_counts_exactly(word_model, cache, monkeypatch):
    """infini-gram's parts overlap by HACK bytes: a corpus split in parts below that size counts suffixes twice, so only
    a corpus well past it is sorted in parallel, and then exactly."""
    monkeypatch.setattr(corpus_index.os, "cpu_count", lambda: 2)
    assert corpus_index.sorting_jobs(799_999) == 1 and corpus_index.sorting_jobs(800_000) == 2
    rng = random.Random(0)
    texts = [" ".join(rng.choices(WORDS[:6], k=rng.randint(50, 3000))) for _ in range(300)]
    index = open_corpus_index(word_model, texts, progress=False)
    assert corpus_index.sorting_jobs(2 * (index.tokens + index.documents)) == 2
    tokens = [word_model.encode(text) for text in texts]
    queries = [ids[i : i + n] for n in (1, 3, 8) for ids in rng.sample(tokens, 6) for i in [rng.randrange(len(ids) - n)]]
    assert [index.count(q) for q in queries] == [brute_force(tokens, q) for q in queries]
