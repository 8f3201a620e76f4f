"""Tests for the deterministic demo corpus with planted duplicated passages."""

from collections import Counter

import pytest

from memrisk.demo.corpus import DemoCorpus, build_demo_corpus

WINDOW = 100
STRIDE = 50


@pytest.fixture(scope="module")
def corpus() -> DemoCorpus:
    """Build the seed-0 demo corpus once for the module."""
    return build_demo_corpus(seed=0)


@pytest.fixture(scope="module")
def joined(corpus: DemoCorpus) -> str:
    """Return all training documents joined by a separator that never occurs in text."""
    return "\x00".join(corpus.training_documents)


def _windows(text: str) -> list[str]:
    """Return WINDOW-character substrings of text taken every STRIDE characters."""
    return [text[i : i + WINDOW] for i in range(0, len(text) - WINDOW + 1, STRIDE)]


def test_same_seed_gives_same_corpus(corpus: DemoCorpus) -> None:
    """Building twice with the same seed yields identical content and fingerprint."""
    again = build_demo_corpus(seed=0)
    assert again == corpus
    assert again.fingerprint() == corpus.fingerprint()


def test_a_package_that_patches_a_standard_class_does_not_change_the_corpus(corpus: DemoCorpus, monkeypatch) -> None:
    """transformers adds `warning_once` to `logging.Logger` when imported: the corpus, and so the demo model's cache
    key, must not depend on which packages the process imported before building it."""
    import logging

    def patched(self) -> None:
        pass

    patched.__doc__ = ("This method was added to the class by a package imported later, and it carries a long "
                       "docstring that reads like prose and would otherwise become a document of the corpus, since it is long "
                       "enough and made of plain words that any reader would take for a paragraph of documentation.")
    patched.__module__ = "someplugin.logging"
    monkeypatch.setattr(logging.Logger, "patched_by_a_plugin", patched, raising=False)
    assert build_demo_corpus(seed=0).fingerprint() == corpus.fingerprint()


def test_a_package_that_replaces_a_standard_function_does_not_change_the_corpus(corpus: DemoCorpus, monkeypatch) -> None:
    """Packages also replace functions of standard modules (the replacement has no docstring, or another one): the
    source text is collected in a fresh interpreter, so the original's docstring stays in the corpus."""
    import textwrap

    def replacement(text: str) -> str:
        return text

    monkeypatch.setattr(textwrap, "dedent", replacement)
    assert build_demo_corpus(seed=0).fingerprint() == corpus.fingerprint()


def test_other_seed_gives_other_corpus(corpus: DemoCorpus) -> None:
    """A different seed chooses different passages and so a different fingerprint."""
    other = build_demo_corpus(seed=1)
    assert other.fingerprint() != corpus.fingerprint()
    assert [p.text for p in other.planted] != [p.text for p in corpus.planted]


def test_eight_passages_per_duplication_count(corpus: DemoCorpus) -> None:
    """There are 8 planted passages at each of 1, 4, 16 and 64 copies and 32 held out."""
    assert Counter(p.copies for p in corpus.planted) == {1: 8, 4: 8, 16: 8, 64: 8}
    assert len(corpus.heldout) == 32


def test_planted_copies_are_exact(corpus: DemoCorpus) -> None:
    """Each planted passage appears as exactly ``copies`` whole training documents."""
    counts = Counter(corpus.training_documents)
    assert all(counts[p.text] == p.copies for p in corpus.planted)


def test_passages_are_distinct_and_long(corpus: DemoCorpus) -> None:
    """Planted and held-out passages are all distinct and at least 600 characters long."""
    texts = [p.text for p in corpus.planted] + corpus.heldout
    assert len(set(texts)) == 64
    assert min(map(len, texts)) >= 600


def test_heldout_never_in_training(corpus: DemoCorpus, joined: str) -> None:
    """No 100-character window of a held-out passage occurs in the training documents."""
    assert not any(window in joined for text in corpus.heldout for window in _windows(text))


def test_planted_windows_only_in_their_copies(corpus: DemoCorpus, joined: str) -> None:
    """Windows of a planted passage occur in training only as often as its copies."""
    assert all(joined.count(window) == p.copies for p in corpus.planted for window in _windows(p.text))
