"""Matching blocks of two word sequences, identical to difflib's, in near-linear time.

`difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()` finds the longest
common run of a[alo:ahi] and b[blo:bhi] (ties: earliest in a, then earliest in b), then
recurses on the unmatched regions left and right of it. Its longest-run search walks every
occurrence in b of every word of a, which is quadratic in the frequency of common words.
Here each search over large ranges uses a suffix automaton of b[blo:bhi] instead (linear in
the range sizes) and small ranges use difflib's own dynamic programme, so the blocks are the
same and long texts are scored in seconds.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

SMALL_SEARCH = 4096


class _SuffixAutomaton:
    """The suffix automaton of an integer sequence, with each state's first end position."""

    def __init__(self, sequence: Sequence[int]) -> None:
        self.next: list[dict[int, int]] = [{}]
        self.link = [-1]
        self.length = [0]
        self.first_end = [-1]
        last = 0
        for position, symbol in enumerate(sequence):
            last = self._extend(last, symbol, position)

    def _new_state(self, length: int, first_end: int, transitions: dict[int, int], link: int) -> int:
        self.next.append(transitions)
        self.link.append(link)
        self.length.append(length)
        self.first_end.append(first_end)
        return len(self.length) - 1

    def _extend(self, last: int, symbol: int, position: int) -> int:
        """Append one symbol (standard online construction); return the new last state."""
        current = self._new_state(self.length[last] + 1, position, {}, -1)
        state = last
        while state != -1 and symbol not in self.next[state]:
            self.next[state][symbol] = current
            state = self.link[state]
        if state == -1:
            self.link[current] = 0
            return current
        target = self.next[state][symbol]
        if self.length[state] + 1 == self.length[target]:
            self.link[current] = target
            return current
        clone = self._new_state(self.length[state] + 1, self.first_end[target], dict(self.next[target]), self.link[target])
        while state != -1 and self.next[state].get(symbol) == target:
            self.next[state][symbol] = clone
            state = self.link[state]
        self.link[target] = self.link[current] = clone
        return current


def _longest_by_automaton(a: Sequence[int], alo: int, ahi: int, b: Sequence[int], blo: int, bhi: int) -> tuple[int, int, int]:
    """Longest common run of a[alo:ahi] and b[blo:bhi]: earliest in a, then earliest in b."""
    automaton = _SuffixAutomaton(b[blo:bhi])
    nxt, link, length_of = automaton.next, automaton.link, automaton.length
    state = length = 0
    best_length, best_end, best_state = 0, alo, 0
    for i in range(alo, ahi):
        symbol = a[i]
        while state and symbol not in nxt[state]:
            state = link[state]
            length = length_of[state]
        if symbol in nxt[state]:
            state = nxt[state][symbol]
            length += 1
        else:
            state = length = 0
        if length > best_length:
            best_length, best_end, best_state = length, i, state
    if best_length == 0:
        return alo, blo, 0
    return best_end - best_length + 1, blo + automaton.first_end[best_state] - best_length + 1, best_length


def _longest_by_scan(a: Sequence[int], alo: int, ahi: int, b: Sequence[int], blo: int, bhi: int) -> tuple[int, int, int]:
    """The same search by difflib's dynamic programme over matching positions (fast on small ranges)."""
    positions: dict[int, list[int]] = {}
    for j in range(blo, bhi):
        positions.setdefault(b[j], []).append(j)
    best_i, best_j, best_length = alo, blo, 0
    run: dict[int, int] = {}
    for i in range(alo, ahi):
        new_run: dict[int, int] = {}
        for j in positions.get(a[i], ()):
            k = new_run[j] = run.get(j - 1, 0) + 1
            if k > best_length:
                best_i, best_j, best_length = i - k + 1, j - k + 1, k
        run = new_run
    return best_i, best_j, best_length


def matching_blocks(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int, int]]:
    """(i, j, n) with a[i:i+n] == b[j:j+n], in order, adjacent runs joined: difflib's
    `SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()` without the final sentinel."""
    codes: dict[Hashable, int] = {}
    a_ids = [codes.setdefault(word, len(codes)) for word in a]
    b_ids = [codes.setdefault(word, len(codes)) for word in b]
    found = []
    pending = [(0, len(a_ids), 0, len(b_ids))]
    while pending:
        alo, ahi, blo, bhi = pending.pop()
        search = _longest_by_scan if (ahi - alo) * (bhi - blo) <= SMALL_SEARCH else _longest_by_automaton
        i, j, k = search(a_ids, alo, ahi, b_ids, blo, bhi)
        if k:
            found.append((i, j, k))
            if alo < i and blo < j:
                pending.append((alo, i, blo, j))
            if i + k < ahi and j + k < bhi:
                pending.append((i + k, ahi, j + k, bhi))
    found.sort()
    joined: list[tuple[int, int, int]] = []
    for i, j, k in found:
        if joined and joined[-1][0] + joined[-1][2] == i and joined[-1][1] + joined[-1][2] == j:
            joined[-1] = (joined[-1][0], joined[-1][1], joined[-1][2] + k)
        else:
            joined.append((i, j, k))
    return joined
