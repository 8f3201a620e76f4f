"""The book heatmap's window behind each character: the covering span with the largest value, kept through max-pooling."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memrisk.report.metrics import coverage_max_owner, pooled_argmax


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 8), st.floats(0.0, 1.0)), min_size=1, max_size=12))
def test_the_window_behind_each_character_covers_it_and_holds_its_max(spans) -> None:
    starts = np.array([s for s, _, _ in spans])
    ends = starts + np.array([n for _, n, _ in spans])
    values = np.array([v for _, _, v in spans])
    length = int(ends.max()) + 2
    best, owner = coverage_max_owner(starts, ends, values, length)
    for position in range(length):
        covering = [i for i in range(len(spans)) if starts[i] <= position < ends[i]]
        if not covering:
            assert owner[position] == -1 and best[position] == 0.0
        else:
            assert owner[position] in covering and values[owner[position]] == best[position] == max(values[covering])


def test_pooling_keeps_each_cells_max_and_its_owner() -> None:
    values, owners = np.array([0.1, 0.5, 0.2, 0.9, 0.0, 0.3]), np.array([7, 8, 9, 10, 11, 12])
    pooled, windows, edges = pooled_argmax(values, owners, 3)
    assert pooled.tolist() == [0.5, 0.9, 0.3] and windows.tolist() == [8, 10, 12] and edges.tolist() == [0, 2, 4, 6]
    pooled, windows, edges = pooled_argmax(values, owners, 10)
    assert pooled.tolist() == values.tolist() and windows.tolist() == owners.tolist(), "fewer positions than cells: as they are"
