"""A run's `summary.json`: every configured method's aggregates per dataset, token evaluations, and the run-level lists.

Pure from records to dict (`summarize`), plus `rebuild_summary`, which recomputes it from a
run folder without a model. The runner and the report both call these; the rules they apply
are in memrisk.rules, and what each method contributes is its own `summarise`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from memrisk import layout
from memrisk.config import ExperimentConfig, parse_config
from memrisk.methods import configured
from memrisk.store import RecordStore

TOKEN_EVALS = "token_evals."


def token_eval_columns(column_names: list[str]) -> list[str]:
    """The records' `token_evals.<method>` columns, in record order."""
    return [name for name in column_names if name.startswith(TOKEN_EVALS)]


def token_eval_stats(column: Any, names: list[str]) -> dict[str, dict[str, Any]]:
    """Per method: total token evaluations, windows counted and the mean per window, as CBS App. C.3 counts them
    (Tables 1–2). `column(name)` returns one record column as an array (missing values as None or NaN)."""
    out = {}
    for name in names:
        values = np.asarray(column(name), dtype=np.float64)
        counted = values[~np.isnan(values)]
        total, windows = int(counted.sum()), int(counted.size)
        out[name.removeprefix(TOKEN_EVALS)] = {"total": total, "windows": windows, "per_window": total / windows if windows else None}
    return out


def column_reader(rows: dict[str, list], mask: np.ndarray) -> Any:
    """`column(name)` over the rows selected by `mask`: scalars as arrays, list columns as object arrays of lists; a
    column the records lack (written by an earlier memrisk, before the column existed) as missing values (None)."""

    def column(name: str) -> np.ndarray:
        values = rows.get(name)
        if values is None:
            return np.full(int(np.count_nonzero(mask)), None, dtype=object)
        if values and isinstance(values[0], list):
            array = np.empty(len(values), dtype=object)
            array[:] = values
            return array[mask]
        return np.asarray(values)[mask]

    return column


def summarize(table: pa.Table, config: ExperimentConfig, window_info: dict[str, Any]) -> dict[str, Any]:
    """Per-dataset aggregates of every configured method, token evaluations per method and each method's run-level lists."""
    methods = configured(config)
    summary: dict[str, Any] = {
        "examples": table.num_rows,
        "tau_min": config.tau_min,
        "policies": {p.label: p.model_dump(exclude={"name"}) for p in config.policies},
        "signatures": {method.name: method.signature(config) for method in methods},
        "windows": window_info,
        "datasets": {},
    }
    if table.num_rows == 0:
        return summary
    rows = table.to_pydict()
    datasets = np.asarray(rows["dataset"])
    costs = token_eval_columns(table.column_names)
    for dataset in config.scored_datasets():
        mask = datasets == dataset.name
        entry: dict[str, Any] = {"role": dataset.role, "examples": int(mask.sum())}
        if mask.any():
            column = column_reader(rows, mask)
            for method in methods:
                entry |= method.summarise(column, config)
            if costs:
                entry["token_evals"] = token_eval_stats(column, costs)
        summary["datasets"][dataset.name] = entry
    if costs:
        summary["token_evals"] = token_eval_stats(lambda name: rows[name], costs)
    for method in methods:
        summary |= method.summarise_run(rows, config)
    return summary


def with_settings(summary: dict[str, Any], settings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The summary with each method's run-level settings (e.g. `prior_aware_settings`: the bank, m and n)."""
    return summary | {f"{name}_settings": info for name, info in settings.items()}


def rebuild_summary(out_dir: Path) -> dict[str, Any]:
    """Recompute `summary.json` of a run folder from its stored records (no model needed); a books
    run has no records, so its stored `books_summary.json` is returned as it is."""
    store = RecordStore.existing(out_dir)
    if layout.is_books_run(out_dir):
        return store.read_json(layout.BOOKS_SUMMARY)
    config = parse_config(store.read_yaml(layout.CONFIG))
    settings = {m.name: store.read_json(layout.setup_file(m.name)) for m in configured(config) if (store.root / layout.setup_file(m.name)).is_file()}
    summary = with_settings(summarize(store.read_records(), config, store.read_json(layout.WINDOWS)), settings)
    store.write_json(layout.SUMMARY, summary)
    return summary
