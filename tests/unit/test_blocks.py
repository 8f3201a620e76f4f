"""Unit tests of memrisk.books.blocks: matching blocks, both longest-run searches and the suffix automaton."""

from __future__ import annotations

import difflib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrisk.books.blocks import SMALL_SEARCH, _longest_by_automaton, _longest_by_scan, _SuffixAutomaton, matching_blocks

SEARCHES = pytest.mark.parametrize("search", [_longest_by_scan, _longest_by_automaton], ids=["scan", "automaton"])
small_ints = st.lists(st.integers(0, 3), max_size=40)


@pytest.mark.parametrize(("a", "b", "blocks"), [
    ("", "", []),
    ("abc", "", []),
    ("abc", "xyz", []),
    ("abcd", "abcd", [(0, 0, 4)]),
    # 'ab' and 'cd' both have length 2: the earlier in a is found first, then 'cd' right of it
    ("abxcd", "abcd", [(0, 0, 2), (3, 2, 2)]),
    # 'b c' is the longest; left of it 'a'/'x' differ, right of it 'd' is found in 'y d'
    ("abcd", "xbcyd", [(1, 1, 2), (3, 4, 1)]),
    # ties of length 1: 'x' is earliest in a; nothing is left of b[2] or right of it in b
    ("xyz", "zyx", [(0, 2, 1)]),
    ("abab", "ab", [(0, 0, 2)]),
])
def test_matching_blocks_by_hand(a, b, blocks):
    assert matching_blocks(list(a), list(b)) == blocks


def test_a_tie_in_b_takes_the_earliest_position():
    assert matching_blocks(["q"], ["q", "q"]) == [(0, 0, 1)]


def test_words_are_compared_by_equality_of_any_hashable():
    """1 and '1' differ; tuples are words like any other."""
    assert matching_blocks([1, 2, (3, 4)], ["1", 2, (3, 4)]) == [(1, 1, 2)]


@SEARCHES
def test_a_search_returns_absolute_positions_in_b_earliest_first(search):
    """[1, 2, 3] occurs in b at 1 and at 4: searching b[1:] finds 1, searching b[4:] finds 4."""
    a, b = [1, 2, 3], [9, 1, 2, 3, 1, 2, 3]
    assert search(a, 0, 3, b, 1, 7) == (0, 1, 3)
    assert search(a, 0, 3, b, 4, 7) == (0, 4, 3)
    assert search(a, 1, 3, b, 0, 7) == (1, 2, 2)


@SEARCHES
def test_a_search_without_a_common_word_returns_the_range_starts(search):
    assert search([1, 2], 0, 2, [3, 4], 0, 2) == (0, 0, 0)
    assert search([1, 2, 3], 1, 3, [3, 4], 1, 2) == (1, 1, 0)
    assert search([1], 0, 0, [1], 0, 1) == (0, 0, 0)


@settings(max_examples=200, deadline=None)
@given(small_ints, small_ints, st.data())
def test_both_searches_equal_difflib_on_any_ranges(a, b, data):
    alo = data.draw(st.integers(0, len(a)))
    ahi = data.draw(st.integers(alo, len(a)))
    blo = data.draw(st.integers(0, len(b)))
    bhi = data.draw(st.integers(blo, len(b)))
    want = tuple(difflib.SequenceMatcher(None, a, b, autojunk=False).find_longest_match(alo, ahi, blo, bhi))
    assert _longest_by_scan(a, alo, ahi, b, blo, bhi) == want
    assert _longest_by_automaton(a, alo, ahi, b, blo, bhi) == want


long_words = st.lists(st.sampled_from("abc"), min_size=70, max_size=160)


@settings(max_examples=25, deadline=None)
@given(long_words, long_words)
def test_blocks_equal_difflib_when_the_first_search_uses_the_automaton(a, b):
    """At least 70 × 70 = 4900 > SMALL_SEARCH word pairs, so the top-level search is the automaton's."""
    assert len(a) * len(b) > SMALL_SEARCH
    want = [tuple(m) for m in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()[:-1]]
    assert matching_blocks(a, b) == want


@settings(max_examples=200, deadline=None)
@given(small_ints, small_ints)
def test_blocks_are_true_ordered_disjoint_and_never_adjacent(a, b):
    blocks = matching_blocks(a, b)
    for i, j, n in blocks:
        assert n > 0 and a[i:i + n] == b[j:j + n]
    for (i, j, n), (k, m, _) in zip(blocks, blocks[1:]):
        assert i + n <= k and j + n <= m
        assert (i + n, j + n) != (k, m), "adjacent runs are joined into one"


# --- the suffix automaton ----------------------------------------------------------------------


def substrings(sequence):
    """Every distinct non-empty substring, with the end index of its first occurrence."""
    first = {}
    for end in range(len(sequence)):
        for start in range(end + 1):
            first.setdefault(tuple(sequence[start:end + 1]), end)
    return first


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2), max_size=25))
def test_the_automaton_accepts_exactly_the_substrings_with_their_first_end(sequence):
    automaton = _SuffixAutomaton(sequence)
    first = substrings(sequence)
    # each state v != 0 stands for length[v] - length[link[v]] distinct substrings
    assert sum(automaton.length[v] - automaton.length[automaton.link[v]] for v in range(1, len(automaton.length))) == len(first)
    for substring, end in first.items():
        state = 0
        for symbol in substring:
            state = automaton.next[state][symbol]
        assert automaton.first_end[state] == end
    assert len(automaton.length) <= max(len(sequence) + 1, 2 * len(sequence) - 1)  # states, root included: 2n - 1 for n >= 2


def test_the_automaton_of_abcbc_by_hand():
    """'abcbc' (as 0 1 2 1 2) has 12 distinct substrings (15 windows, less the repeats 'b', 'c', 'bc');
    'bc' first ends at 2, 'cb' at 3, and 'cc' is no substring."""
    automaton = _SuffixAutomaton([0, 1, 2, 1, 2])

    def walk(word):
        state = 0
        for symbol in word:
            state = automaton.next[state][symbol]
        return state

    assert sum(automaton.length[v] - automaton.length[automaton.link[v]] for v in range(1, len(automaton.length))) == 12
    assert automaton.first_end[walk([1, 2])] == 2
    assert automaton.first_end[walk([2, 1])] == 3
    assert 2 not in automaton.next[walk([2])]
