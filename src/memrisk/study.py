"""Studies: a base experiment and a grid of changes to it, run as ordinary run folders, one per cell.

A study YAML holds `base:` (an experiment config, or a books-run config with `books:`; inline or a
path), `grid:` (dotted config keys → lists of values; the cells are their cartesian product) and/or
`cells:` (named lists of changes). Each cell is `OUT/cells/NAME/`, a run folder that `memrisk run`
(or `memrisk books run`) and `memrisk report` take on its own. Cells with the same model share one
model load; a cell whose summary is written is complete and is not run again; a study re-run with
other cells or settings is refused. A layer above may rewrite the YAML's mapping before it is
validated (`prepare`) and load the models its way (`load`, `skeleton_of`): the CLI passes the
demo's, which know `base: demo` and `demo:SIZE` models.
"""

from __future__ import annotations

import copy
import functools
import itertools
import re
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm.auto import tqdm

from memrisk import layout
from memrisk.books.config import BooksRunConfig, parse_books_config
from memrisk.books.run import run_books
from memrisk.layout import CELLS
from memrisk.config import ExperimentConfig, parse_config, read_yaml_mapping, validated
from memrisk.errors import MemriskError
from memrisk.lock import locked_folder
from memrisk.distributed import ray_connection, run_on_pool, worker_pool
from memrisk.methods import configured
from memrisk.methods.shared import SharedPasses
from memrisk.methods.base import is_measurement
from memrisk.models.backend import LanguageModel, load_model, resolve_device
from memrisk.models.throughput import device_peak_flops, forward_flops
from memrisk.runner import build_examples, fitting_batch_size, load_documents, load_run_model, run_experiment
from memrisk.store import RecordStore, refuse_changed_settings, remove_temporary_files
from memrisk.summary import TOKEN_EVALS

Prepare = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
"""A study YAML's mapping rewritten before it is validated (e.g. a named base replaced by its config), given the
overrides (dotted keys) the study will run with."""
Skeleton = Callable[[str, str | None, str | None], tuple[LanguageModel, int]]
"""A model's weightless skeleton and parameter count from its name, revision and GGUF file (as `skeleton`)."""


class NamedCell(BaseModel):
    """One hand-named cell: its changes to the base config."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_.+=-]+$")
    set: dict[str, Any] = Field(default_factory=dict)


class StudyConfig(BaseModel):
    """A study: `base` and the changes that make its cells (`grid` × `cells`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    base: dict[str, Any] | str
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    cells: list[NamedCell] = Field(default_factory=list)

    @model_validator(mode="after")
    def _some_cells(self) -> StudyConfig:
        empty = [key for key, values in self.grid.items() if not values]
        if empty:
            raise ValueError(f"grid axis {empty[0]!r} has no values")
        names = [c.name for c in self.cells]
        if len(set(names)) != len(names):
            raise ValueError(f"cell names must be unique, got {names}")
        return self


@dataclass(frozen=True)
class Cell:
    """One cell of a study: its folder name, its changes and its validated config."""

    name: str
    changes: dict[str, Any]
    config: ExperimentConfig | BooksRunConfig

    @property
    def books(self) -> bool:
        """Whether the cell is a books run (Books paper) rather than an experiment on windows."""
        return isinstance(self.config, BooksRunConfig)


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set `a.b.0.c` in nested mappings and lists (list items by index), creating mappings on the way."""
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise MemriskError(f"study key {key!r}: {'.'.join(parts[:i])} has no item {part}")
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
        if not isinstance(node, (dict, list)):
            raise MemriskError(f"study key {key!r}: {'.'.join(parts[:i + 1])} is a value, not a section")
    last = parts[-1]
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise MemriskError(f"study key {key!r}: {'.'.join(parts[:-1])} has no item {last}")
        node[int(last)] = value
    else:
        node[last] = value


def _slug(value: Any) -> str:
    """A key or value as it appears in a cell name: letters, digits and . _ + - only."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", str(value)).strip("-") or "none"


def cell_name(changes: dict[str, Any]) -> str:
    """A readable folder name from a cell's changes: `beam_width=4_epsilon=2` (the last part of each key)."""
    return "_".join(f"{_slug(key.split('.')[-1])}={_slug(value)}" for key, value in changes.items()) or "base"


def study_cells(study: StudyConfig, base_dir: Path, overrides: dict[str, Any] | None = None) -> list[Cell]:
    """Every cell of the study, grid cells in product order, each within each named cell, validated; `overrides`
    (dotted keys, as `memrisk study --set` gives them) change the base before the cells do."""
    base = read_yaml_mapping(base_dir / study.base, "model, datasets") if isinstance(study.base, str) else copy.deepcopy(study.base)
    for key, value in (overrides or {}).items():
        set_dotted(base, key, value)
    config_dir = (base_dir / study.base).parent if isinstance(study.base, str) else base_dir
    axes = list(study.grid.items())
    grid = [dict(zip([k for k, _ in axes], values)) for values in itertools.product(*[v for _, v in axes])]
    named = [(entry.name, entry.set) for entry in study.cells] or [("", {})]
    cells = []
    for label, changed in named:
        for point in grid:
            changes = changed | point
            data = copy.deepcopy(base)
            for key, value in changes.items():
                set_dotted(data, key, value)
            name = "_".join(part for part in (label, cell_name(point) if point else "") if part) or cell_name(changes)
            try:
                config = parse_cell_config(data, config_dir)
            except MemriskError as exc:
                raise MemriskError(f"study cell {name}: {exc}") from None
            cells.append(Cell(name, changes, config))
    names = [c.name for c in cells]
    if len(set(names)) != len(names):
        repeated = next(n for n in names if names.count(n) > 1)
        raise MemriskError(f"two study cells are both named {repeated!r}; name the cells so that they differ")
    return cells


def parse_cell_config(data: dict[str, Any], config_dir: Path) -> ExperimentConfig | BooksRunConfig:
    """A cell's config: a books run when it has `books:`, else an experiment."""
    return parse_books_config(data, config_dir) if "books" in data else parse_config(data, config_dir)


def load_study(
    source: str | Path | dict[str, Any], prepare: Prepare | None = None, overrides: dict[str, Any] | None = None,
) -> tuple[StudyConfig, list[Cell]]:
    """Read (a YAML path, or its mapping with paths relative to the working folder), prepare, validate and expand a
    study; `overrides` (dotted keys) change its base before the cells do."""
    data = source if isinstance(source, dict) else read_yaml_mapping(source, "base, grid")
    base_dir = Path.cwd() if isinstance(source, dict) else Path(source).parent
    study = validated(StudyConfig, prepare(data, overrides or {}) if prepare else data, "study")
    return study, study_cells(study, base_dir, overrides)


def study_identity(cells: list[Cell]) -> dict[str, Any]:
    """What a resumed study must share with the one stored: every cell's name and result-changing settings."""
    return {"cells": {cell.name: cell.config.model_dump(mode="json") if cell.books else cell.config.identity() for cell in cells}}


def summary_file(cell: Cell) -> str:
    """The file a complete cell's run writes last: books_summary.json for a books run, else summary.json."""
    return layout.BOOKS_SUMMARY if cell.books else layout.SUMMARY


def is_complete(folder: Path, summary: str = layout.SUMMARY) -> bool:
    """A cell whose summary is written has every record (the runner writes the summary last)."""
    return (folder / summary).is_file()


def books_requests_bound(config: BooksRunConfig) -> tuple[int, int]:
    """A books run's most requests per book: Phase 1 prompts (Best-of-N budget) and Phase 2 continue queries."""
    attempts, _ = config.phase1.budget(config.model.name)
    return attempts, config.model.default("turns")


def cost_estimate_lines(cells: list[Cell], out: Path, skeleton_of: Skeleton | None = None) -> list[str]:
    """Per cell: its windows, the most token evaluations its methods spend on them, and the wall time that needs at
    least (2 × parameters FLOPs per token evaluation at the device's measured matmul peak) and, once cells of this
    study are complete, at the seconds per token evaluation they measured. Reads tokenizers and model configs, no weights."""
    measured = measured_rate(out)
    lines = []
    for cell in cells:
        if isinstance(cell.config, BooksRunConfig):
            attempts, turns = books_requests_bound(cell.config)
            requests = len(cell.config.books) * (attempts + turns)
            lines.append(f"{CELLS}/{cell.name}: ≤ {requests:,} requests to {cell.config.model.provider} {cell.config.model.name}, "
                         f"spend cap ${cell.config.spend_cap_usd:g}")
            continue
        m = cell.config.model
        lm, parameters = (skeleton_of or skeleton)(m.name, m.revision, m.gguf_file)
        peak = device_peak(str(resolve_device(m.device)), m.matmul)
        windows = len(build_examples(cell.config, lm, load_documents(cell.config))[0])
        w = cell.config.windows
        evals = windows * sum(method.cost_bound(cell.config, w.prefix_length, w.suffix_length) for method in configured(cell.config))
        floor = forward_flops(evals, parameters) / peak
        line = f"{CELLS}/{cell.name}: {windows:,} windows, ≤ {evals:,} token evaluations, ≥ {floor:.1f} s at the matmul peak"
        if measured is not None:
            line += f", ≈ {evals * measured:.0f} s at the rate of the complete cells"
        lines.append(line)
    return lines


@functools.cache
def skeleton(name: str, revision: str | None, gguf_file: str | None) -> tuple[LanguageModel, int]:
    """A model's tokenizer on its weightless skeleton, and its parameter count (read once per process)."""
    lm = load_model(name, revision=revision, gguf_file=gguf_file, weights=False)
    return lm, sum(p.numel() for p in lm.model.parameters())


@functools.cache
def device_peak(device: str, matmul: str) -> float:
    """The device's peak FLOP/s with the `matmul` library, measured once per process."""
    return device_peak_flops(torch.device(device), matmul=matmul)


def measured_rate(out: Path) -> float | None:
    """Seconds per token evaluation over the complete cells already in `out` (None when there are none)."""
    seconds = evals = 0.0
    for folder in sorted((out / CELLS).glob("*")) if (out / CELLS).is_dir() else []:
        if is_complete(folder):
            table = RecordStore.existing(folder).read_records()
            seconds += sum(float(pc.sum(table.column(c)).as_py() or 0) for c in table.column_names if is_measurement(c))
            evals += sum(float(pc.sum(table.column(c)).as_py() or 0) for c in table.column_names if c.startswith(TOKEN_EVALS))
    return seconds / evals if evals else None


def dry_run_lines(cells: list[Cell]) -> list[str]:
    """One line per cell: its folder, its changes and each method's most token evaluations per window (CBS App. C.3)."""
    lines = []
    for cell in cells:
        changes = ", ".join(f"{k}={v}" for k, v in cell.changes.items()) or "the base config"
        if isinstance(cell.config, BooksRunConfig):
            attempts, turns = books_requests_bound(cell.config)
            lines.append(f"{CELLS}/{cell.name}: {changes}; per book ≤ {attempts:,} Phase 1 prompts and ≤ {turns:,} Phase 2 turns")
            continue
        w = cell.config.windows
        costs = ", ".join(f"{m.name} ≤ {m.cost_bound(cell.config, w.prefix_length, w.suffix_length):,}" for m in configured(cell.config))
        lines.append(f"{CELLS}/{cell.name}: {changes}; token evaluations per window: {costs}")
    return lines


def passes_of(cells: list[Cell], model_settings: dict[str, Any]) -> SharedPasses:
    """The passes the cells that use this model share: one teacher-forcing pass scores every decoding policy of theirs
    and every policy their methods read, with the Min-K%++ moments when one of their methods reads them."""
    mine = [cell.config for cell in cells if not cell.books and cell.config.model.model_dump() == model_settings]
    read = [p for config in mine for method in configured(config) for p in method.reads_policies]
    return SharedPasses([*(p.policy() for config in mine for p in config.policies), *read],
                        moments=any(method.reads_moments for config in mine for method in configured(config)))


class LocalCells:
    """Runs cells in this process: cells with the same `model` settings share one loaded model (the last one is kept)
    and the passes they agree on."""

    def __init__(self, cells: list[Cell], load: Callable[[ExperimentConfig], LanguageModel], force: bool, progress: bool) -> None:
        self.cells, self.load, self.force, self.progress = cells, load, force, progress
        self.loaded: tuple[dict[str, Any], LanguageModel, SharedPasses] | None = None

    def run(self, cell: Cell, folder: Path) -> dict[str, Any]:
        if isinstance(cell.config, BooksRunConfig):
            return run_books(cell.config, folder, force=self.force, progress=self.progress)
        settings = cell.config.model.model_dump()
        if self.loaded is None or self.loaded[0] != settings:
            self.loaded = None  # the previous model and its shared passes are released before the next one loads
            self.loaded = (settings, self.load(cell.config), passes_of(self.cells, settings))
        elif cell.config.model.batch_size == "auto":
            self.loaded[1].batch_size = fitting_batch_size(cell.config, self.loaded[1])  # e.g. a wider beam needs a smaller batch
        _, lm, passes = self.loaded
        return run_experiment(cell.config, folder, model=lm, force=self.force, progress=self.progress, passes=passes)

    def close(self) -> None:
        self.loaded = None


class RayCells:
    """Runs cells on a Ray cluster: one pool of workers per model, kept while consecutive cells use it;
    each cell's chunks go to whichever worker is free."""

    def __init__(self, ray: Any, cells: list[Cell], force: bool, progress: bool) -> None:
        self.ray, self.cells, self.force, self.progress = ray, cells, force, progress
        self.pool: tuple[dict[str, Any], ExitStack, Any] | None = None

    def run(self, cell: Cell, folder: Path) -> dict[str, Any]:
        settings = cell.config.model.model_dump()
        if self.pool is None or self.pool[0] != settings:
            self.close()
            stack = ExitStack()
            self.pool = (settings, stack, stack.enter_context(worker_pool(self.ray, cell.config, passes_of(self.cells, settings))))
        return run_on_pool(self.pool[2], cell.config, folder, force=self.force, progress=self.progress)

    def close(self) -> None:
        if self.pool is not None:
            self.pool[1].close()
            self.pool = None


def run_study(
    path: str | Path | dict[str, Any],
    out_dir: str | Path,
    *,
    force: bool = False,
    progress: bool = True,
    load: Callable[[ExperimentConfig], LanguageModel] = load_run_model,
    prepare: Prepare | None = None,
    ray: bool = False,
    ray_address: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run (or resume) every cell of a study into `out_dir/cells/` and return each cell's summary.

    Locally, cells with the same `model` settings share one loaded model and the passes they agree on
    (teacher forcing, and each method whose settings match); with `ray`, one pool of workers per model
    (`ray_address` as `memrisk run --ray` takes it). Complete cells are read, not run. `path`, `prepare` and
    `overrides` (e.g. `{"windows.limit": 2}` for a quick look; part of the study's identity) are as `load_study`
    takes them.
    """
    study, cells = load_study(path, prepare, overrides)
    if ray and any(cell.books for cell in cells):
        raise MemriskError("books cells send requests to a chat model and run in this process; leave out --ray")
    out = Path(out_dir)
    identity = study_identity(cells)
    with locked_folder(out), ExitStack() as stack:
        if not force:
            refuse_changed_settings(out, identity)
        store = RecordStore.open(out, study.model_dump(mode="json") | {"set": overrides or {}}, identity, force=force)
        store.write_json(layout.STUDY_CELLS, [{"name": cell.name, "changes": cell.changes} for cell in cells])
        if ray:
            runner: LocalCells | RayCells = RayCells(stack.enter_context(ray_connection(ray_address)), cells, force, progress)
        else:
            runner = LocalCells(cells, load, force, progress)
        stack.callback(runner.close)
        summaries: dict[str, dict[str, Any]] = {}
        bar = tqdm(cells, desc="cells", unit="cell", disable=not progress)
        for cell in bar:
            folder = out / CELLS / cell.name
            bar.set_postfix_str(cell.name)
            if is_complete(folder, summary_file(cell)) and not force:
                with locked_folder(folder):  # clears what a kill after the summary left: its lock, temporary files
                    remove_temporary_files(folder)
                    summaries[cell.name] = RecordStore.existing(folder).read_json(summary_file(cell))
                continue
            if isinstance(cell.config, ExperimentConfig):
                load_documents(cell.config)  # a missing data file is reported before a model is loaded for it
            summaries[cell.name] = runner.run(cell, folder)
        bar.close()
        return summaries
