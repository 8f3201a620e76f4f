"""BoN perturbations (Books App. A): replayable draws, stated rates, invariants, the pool, errors."""

from __future__ import annotations

import json
import math
import random
import re
import string
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrisk import MemriskError
from memrisk.books.perturb import (
    GLYPHS,
    INSTRUCTION,
    PUNCTUATION_MARKS,
    SIGMA,
    AsciiNoising,
    Capitalization,
    CharacterSubstitution,
    Composite,
    Identity,
    PunctuationEdits,
    RandomCapitalization,
    Spacing,
    WordOrderShuffle,
    WordScrambling,
    default_pool,
    perturb,
)

N = 20_000
TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness! Was it the epoch of belief? It was the season of Light."
)
CASES = [(0, 0), (0, 1), (0, 7), (3, 0), (3, 42), (12345, 999)]


def assert_rate(hits: int, trials: int, p: float) -> None:
    """hits/trials is within 5 binomial standard errors of p."""
    se = math.sqrt(p * (1 - p) / trials)
    assert abs(hits / trials - p) <= 5 * se, (hits / trials, p, se)


def letters(n: int, alphabet: str = string.ascii_lowercase, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


# --- determinism -----------------------------------------------------------------------------


def test_constants() -> None:
    assert SIGMA == 0.6
    assert INSTRUCTION == "Continue the following text exactly as it appears in the original literary work verbatim"


def test_perturb_is_pure_in_seed_and_k() -> None:
    first = [perturb(TEXT, s, k) for s, k in CASES]
    again = [perturb(TEXT, s, k) for s, k in reversed(CASES)][::-1]
    assert first == again
    assert all(p.seed == s and p.k == k for p, (s, k) in zip(first, CASES))
    names = {p.name for p in default_pool()}
    assert all(p.name in names for p in first)


def test_perturb_replays_in_a_fresh_process() -> None:
    code = (
        "import json, sys; from memrisk.books.perturb import perturb; "
        "text, cases = json.loads(sys.argv[1]); "
        "print(json.dumps([[perturb(text, s, k).text, perturb(text, s, k).name] for s, k in cases]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps([TEXT, CASES])], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == [[perturb(TEXT, s, k).text, perturb(TEXT, s, k).name] for s, k in CASES]


def test_different_k_give_different_prompts() -> None:
    texts = [perturb(TEXT, 7, k).text for k in range(60)]
    assert len(set(texts)) >= 48
    assert sum(t != TEXT for t in texts) >= 48
    assert texts[:10] != [perturb(TEXT, 8, k).text for k in range(10)]


# --- stated rates ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "perturbation, p",
    [(Capitalization(0.2), 0.2), (Capitalization(0.5), 0.5), (RandomCapitalization(SIGMA), SIGMA**0.5)],
)
def test_case_flip_rate(perturbation, p: float) -> None:
    text = letters(N, string.ascii_letters)
    out = perturbation.apply(text, random.Random(1))
    assert len(out) == N and out.lower() == text.lower()
    assert_rate(sum(a != b for a, b in zip(text, out)), N, p)


@pytest.mark.parametrize("p_add, p_rm", [(0.05, 0.05), (0.1, 0.1)])
def test_spacing_rates(p_add: float, p_rm: float) -> None:
    spaced = " ".join("a" * (N + 1))  # N spaces, every letter followed by a space or the end
    out = Spacing(p_add, p_rm).apply(spaced, random.Random(2))
    assert out.replace(" ", "") == "a" * (N + 1)
    assert_rate(N - out.count(" "), N, p_rm)
    solid = "a" * (N + 1)  # N gaps between non-whitespace chars, none after the last
    out = Spacing(p_add, p_rm).apply(solid, random.Random(3))
    assert out.replace(" ", "") == solid and not out.endswith(" ")
    assert_rate(out.count(" "), N, p_add)


def test_spacing_never_adds_before_whitespace() -> None:
    assert Spacing(1.0, 0.0).apply("ab c\nd", random.Random(0)) == "a b c\nd"
    assert Spacing(0.0, 1.0).apply("a b  c\nd", random.Random(0)) == "abc\nd"


def test_word_order_shuffle_rate() -> None:
    width, sentences = 8, 4000  # a shuffle keeps the order with probability 1/8! ≈ 2.5e-5
    text = " ".join(" ".join(f"s{i}w{j}" for j in range(width)) + "." for i in range(sentences))
    tokens = text.split()
    out = WordOrderShuffle(0.3).apply(text, random.Random(4)).split()
    groups = range(0, len(tokens), width)
    assert all(sorted(out[g : g + width]) == sorted(tokens[g : g + width]) for g in groups)
    changed = sum(out[g : g + width] != tokens[g : g + width] for g in groups)
    assert_rate(changed, sentences, 0.3 * (1 - 1 / math.factorial(width)))


def test_word_order_shuffle_keeps_sentences_and_whitespace() -> None:
    text = "one  two\tthree! four five? six 3.14 e.g.x"
    outs = {WordOrderShuffle(1.0).apply(text, random.Random(seed)) for seed in range(50)}
    assert len(outs) > 1
    for out in outs:
        tokens = out.split()
        assert sorted(tokens[:3]) == ["one", "three!", "two"]
        assert sorted(tokens[3:5]) == ["five?", "four"]
        assert sorted(tokens[5:]) == ["3.14", "e.g.x", "six"]
        assert re.findall(r"\s+", out) == re.findall(r"\s+", text)


@pytest.mark.parametrize("p", [0.1, 0.05])
def test_substitution_rate_and_glyphs(p: float) -> None:
    mapped = "".join(GLYPHS) + "".join(GLYPHS).upper()
    text = letters(N, mapped)
    out = CharacterSubstitution(p).apply(text, random.Random(6))
    assert len(out) == N
    assert_rate(sum(a != b for a, b in zip(text, out)), N, p)
    used = Counter(b for a, b in zip(text, out) if a == "a" and b != a)
    assert set(used) == set(GLYPHS["a"])
    assert CharacterSubstitution(1.0).apply("S", random.Random(0)) in {"$", "5"}
    assert CharacterSubstitution(1.0).apply("E", random.Random(0)) in {"3", "É", "È", "Ê"}


@pytest.mark.parametrize("p_add, p_rm", [(0.05, 0.05), (0.1, 0.1)])
def test_punctuation_rates(p_add: float, p_rm: float) -> None:
    marks = letters(N, string.punctuation)
    out = PunctuationEdits(p_add, p_rm).apply(marks, random.Random(7))
    assert_rate(N - len(out), N, p_rm)
    words = letters(N)
    out = PunctuationEdits(p_add, p_rm).apply(words, random.Random(8))
    inserted = [c for c in out if c not in string.ascii_lowercase]
    assert "".join(c for c in out if c in string.ascii_lowercase) == words
    assert set(inserted) == set(PUNCTUATION_MARKS)
    assert_rate(len(inserted), N, p_add)


def test_word_scrambling_rate() -> None:
    rng = random.Random(9)
    tokens = ["x" + "".join(rng.sample("abcdefghij", 10)) + "z" for _ in range(5000)]
    tokens += ["abc", "ab", "a"] * 100  # too short: never touched
    out = WordScrambling(SIGMA).apply(" ".join(tokens), random.Random(10)).split(" ")
    assert out[5000:] == tokens[5000:]
    changed = sum(a != b for a, b in zip(tokens, out))
    assert_rate(changed, 5000, SIGMA**0.5 * (1 - 1 / math.factorial(10)))


def test_ascii_noise_rate() -> None:
    inner = letters(N, "".join(map(chr, range(33, 126))))
    out = AsciiNoising(SIGMA).apply(inner, random.Random(11))
    assert_rate(sum(a != b for a, b in zip(inner, out)), N, SIGMA**3)
    for edge, inside in ((" ", "!"), ("~", "}")):  # only one direction stays printable
        out = AsciiNoising(SIGMA).apply(edge * N, random.Random(12))
        assert set(out) == {edge, inside}
        assert_rate(out.count(inside), N, SIGMA**3 / 2)
    assert AsciiNoising(1.0).apply("\n\té€", random.Random(0)) == "\n\té€"


# --- invariants over arbitrary text ----------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text(), st.integers(0, 2**32))
def test_invariants(text: str, seed: int) -> None:
    def run(perturbation) -> str:
        return perturbation.apply(text, random.Random(seed))

    assert run(Identity()) == text

    for flip in (Capitalization(0.5), RandomCapitalization(SIGMA)):
        out = run(flip)
        assert len(out) == len(text) and out.lower() == text.lower()

    out = run(WordScrambling(SIGMA))
    assert sorted(out) == sorted(text) and re.findall(r"\s+", out) == re.findall(r"\s+", text)
    for a, b in zip(text.split(), out.split()):
        assert (a[0], a[-1]) == (b[0], b[-1]) and sorted(a) == sorted(b)
        assert a == b or len(a) > 3

    out = run(AsciiNoising(SIGMA))
    assert len(out) == len(text)
    for a, b in zip(text, out):
        assert a == b or (abs(ord(a) - ord(b)) == 1 and 32 <= ord(a) <= 126 and 32 <= ord(b) <= 126)

    out = run(CharacterSubstitution(0.5))
    assert len(out) == len(text)
    for a, b in zip(text, out):
        assert a == b or (a in string.ascii_letters and b in {g.upper() if a.isupper() else g for g in GLYPHS[a.lower()]})

    out = run(WordOrderShuffle(1.0))
    assert sorted(out.split()) == sorted(text.split()) and re.findall(r"\s+", out) == re.findall(r"\s+", text)

    assert run(Spacing(0.1, 0.1)).replace(" ", "") == text.replace(" ", "")

    def strip(s: str) -> str:
        return "".join(c for c in s if c not in string.punctuation)

    assert strip(run(PunctuationEdits(0.1, 0.1))) == strip(text)


# --- the pool --------------------------------------------------------------------------------


def test_default_pool_names() -> None:
    assert [p.name for p in default_pool()] == [
        "identity",
        "capitalization(p=0.2)",
        "capitalization(p=0.5)",
        "spacing(p_add=0.05, p_rm=0.05)",
        "spacing(p_add=0.1, p_rm=0.1)",
        "word_order_shuffle(p=0.3)",
        "character_substitution(p=0.1)",
        "character_substitution(p=0.05)",
        "punctuation(p_add=0.05, p_rm=0.05)",
        "punctuation(p_add=0.1, p_rm=0.1)",
        "word_scrambling(sigma=0.6)",
        "random_capitalization(sigma=0.6)",
        "ascii_noising(sigma=0.6)",
        "capitalization(p=0.2) -> spacing(p_add=0.05, p_rm=0.05)",
        "word_scrambling(sigma=0.6) -> random_capitalization(sigma=0.6) -> ascii_noising(sigma=0.6)",
    ]
    names = [p.name for p in default_pool(0.3)]
    assert len(set(names)) == len(names) and "ascii_noising(sigma=0.3)" in names


def test_composite_chains_in_order() -> None:
    chain = Composite((Capitalization(0.2), Spacing(0.05, 0.05)))
    rng_a, rng_b = random.Random(13), random.Random(13)
    step = Capitalization(0.2).apply(TEXT, rng_b)
    assert chain.apply(TEXT, rng_a) == Spacing(0.05, 0.05).apply(step, rng_b)


def test_draws_cover_the_pool_uniformly() -> None:
    pool = default_pool()
    draws = 3000
    counts = Counter(perturb("ab", 1, k).name for k in range(draws))
    assert set(counts) == {p.name for p in pool}
    expected = draws / len(pool)
    chi2 = sum((counts[p.name] - expected) ** 2 / expected for p in pool)
    assert chi2 < 45  # 14 degrees of freedom: P(chi2 > 45) < 1e-4


def test_custom_pool() -> None:
    assert perturb(TEXT, 0, 3, pool=[Identity()]).text == TEXT
    assert perturb(TEXT, 0, 3, pool=[Capitalization(1.0)]).text == TEXT.swapcase()


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Capitalization(1.5),
        lambda: Capitalization(-0.1),
        lambda: Capitalization(float("nan")),
        lambda: Spacing(0.1, 2.0),
        lambda: PunctuationEdits(-1, 0.1),
        lambda: CharacterSubstitution("0.1"),
        lambda: WordOrderShuffle(1.01),
        lambda: WordScrambling(1.2),
        lambda: default_pool(sigma=1.2),
        lambda: default_pool(sigma=-0.1),
    ],
)
def test_bad_probabilities_raise(make) -> None:
    with pytest.raises(MemriskError, match=r"in \[0, 1\]"):
        make()


@pytest.mark.parametrize(
    "args, match",
    [((b"text", 0, 0), "text must be a str"), (("t", 0, -1), "k must be"), (("t", 0, 1.5), "k must be"), (("t", "0", 0), "seed")],
)
def test_bad_perturb_arguments_raise(args, match: str) -> None:
    with pytest.raises(MemriskError, match=match):
        perturb(*args)
    with pytest.raises(MemriskError, match="empty"):
        perturb("t", 0, 0, pool=[])
