"""What a study's figures read: each cell's changes, resolved config and summary, and its records on demand.

Read-only: cells are opened through RecordStore and nothing is written here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memrisk import layout
from memrisk.books.config import BooksRunConfig, parse_books_config
from memrisk.config import ExperimentConfig, parse_config
from memrisk.errors import MemriskError
from memrisk.methods.base import is_measurement
from memrisk.report.metrics import RunArrays, run_arrays
from memrisk.store import RecordStore


def config_value(config: ExperimentConfig | BooksRunConfig, key: str) -> Any:
    """The resolved value of a dotted config key (`cbs.beam_width`, `policies.0.top_k`) in a cell's config."""
    node: Any = config.model_dump(mode="json")
    for part in key.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


@dataclass
class StudyCell:
    """One complete cell of a study."""

    name: str
    changes: dict[str, Any]
    folder: Path
    config: ExperimentConfig | BooksRunConfig
    summary: dict[str, Any]
    """summary.json, or books_summary.json for a books run."""

    @property
    def books(self) -> bool:
        """Whether the cell is a books run (Books paper)."""
        return isinstance(self.config, BooksRunConfig)

    @cached_property
    def records(self) -> pa.Table:
        """The cell's records (every column, wall times included)."""
        return RecordStore.existing(self.folder).read_records()

    @cached_property
    def versions(self) -> dict[str, Any]:
        """The cell's versions.json: software and model provenance (`model.parameters`, dtype, device, ...)."""
        return RecordStore.existing(self.folder).read_json(layout.VERSIONS)

    @cached_property
    def arrays(self) -> RunArrays:
        """The record columns the report's metrics use."""
        return run_arrays(self.records, self.config)

    def column(self, name: str, dataset: str | None = None) -> np.ndarray:
        """One record column (of one dataset's windows when `dataset` is given); list columns as object arrays."""
        table = self.records
        if dataset is not None:
            table = table.filter(pc.equal(table.column("dataset"), dataset))
        values = table.column(name).to_pylist()
        if values and isinstance(values[0], list):
            array = np.empty(len(values), dtype=object)
            array[:] = values
            return array
        return np.asarray(values)

    def wall_seconds(self) -> dict[str, float]:
        """Total wall time per method (`seconds.<method>` summed over windows; the teacher-forcing pass separately)."""
        return {name.split(".", 1)[1]: float(np.sum(self.records.column(name).to_numpy()))
                for name in self.records.column_names if is_measurement(name)}

    def value(self, key: str) -> Any:
        """The cell's resolved value of a dotted config key."""
        return config_value(self.config, key)


@dataclass
class StudyData:
    """Every cell of a study, in study order, and the grid axes that made them."""

    folder: Path
    axes: list[str]
    cells: list[StudyCell]

    def varies(self, key: str) -> bool:
        """Whether the cells' resolved configs differ at `key` (a grid axis or a named cell's change)."""
        return len({repr(cell.value(key)) for cell in self.cells}) > 1

    def has_method(self, method: str) -> bool:
        """Whether every cell ran `method` (never for books runs, which run the Books paper's two phases)."""
        return all(isinstance(cell.config, ExperimentConfig) and method in cell.config.methods for cell in self.cells)

    @property
    def books(self) -> bool:
        """Whether every cell is a books run."""
        return bool(self.cells) and all(cell.books for cell in self.cells)

    def datasets(self) -> list[str]:
        """The dataset names of the cells, in first-seen order."""
        return list(dict.fromkeys(name for cell in self.cells for name in cell.summary.get("datasets", {})))

    def target_datasets(self) -> list[str]:
        """The datasets whose role is not `control`."""
        return [name for name in self.datasets()
                if any(cell.summary["datasets"].get(name, {}).get("role") != "control" for cell in self.cells
                       if name in cell.summary.get("datasets", {}))]


def load_study_data(folder: str | Path) -> StudyData:
    """Read a study folder's cell list and each cell's config and summary (records are read when a figure asks)."""
    folder = Path(folder)
    listed = RecordStore.existing(folder).read_json(layout.STUDY_CELLS)
    cells = []
    for entry in listed:
        path = folder / layout.CELLS / entry["name"]
        store = RecordStore.existing(path)
        data = store.read_yaml(layout.CONFIG)
        config = parse_books_config(data) if "books" in data else parse_config(data)
        summary = layout.BOOKS_SUMMARY if "books" in data else layout.SUMMARY
        if not (path / summary).is_file():
            raise MemriskError(f"study cell {entry['name']} is not complete; re-run `memrisk study` to finish it")
        cells.append(StudyCell(entry["name"], entry["changes"], path, config, store.read_json(summary)))
    axes = list(dict.fromkeys(key for entry in listed for key in entry["changes"]))
    return StudyData(folder, axes, cells)


def labels(cells: Sequence[StudyCell], keys: Sequence[str]) -> list[str]:
    """A short label per cell from the values of `keys` (`beam_width=4, epsilon=2`), or the cell name."""
    if not keys:
        return [cell.name for cell in cells]
    return [", ".join(f"{key.split('.')[-1]}={cell.value(key)}" for key in keys) for cell in cells]
