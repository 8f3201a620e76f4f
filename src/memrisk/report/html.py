"""The HTML report: one self-contained page (figures as base64 PNG) written through a RecordStore, with a section
per run or books run and a comparison when there are several runs with records."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from memrisk import layout
from memrisk.errors import MemriskError
from memrisk.report import charts
from memrisk.report.books_page import Books, books_section, load_books
from memrisk.report.comparison_page import comparison_section
from memrisk.report.markup import Picture, join, page
from memrisk.report.run_page import Run, load_run, run_section
from memrisk.report.study_page import csv_text, study_section
from memrisk.store import RecordStore

Folder = Run | Books


def load_folder(folder: Path) -> Folder:
    """A books run when the folder holds `books_summary.json`, else a run with records."""
    return load_books(folder) if layout.is_books_run(folder) else load_run(folder)


def labelled(runs: Sequence[Folder]) -> list[Folder]:
    """Runs whose labels are unique: a model name shared by several runs gets the folder name."""
    names = [r.label for r in runs]
    return [dataclasses.replace(r, label=f"{r.label} [{r.store.root.name}]") if names.count(r.label) > 1 else r for r in runs]


STATIC_FORMATS = ("png", "svg")
"""The static figure files written next to the page, for papers and slides."""


def check_formats(formats: Sequence[str]) -> None:
    """One clear error for a figure format other than png and svg, before anything is written."""
    unknown = set(formats) - set(STATIC_FORMATS)
    if unknown or not formats:
        raise MemriskError(f"figure formats are {' and '.join(STATIC_FORMATS)}; got {', '.join(sorted(unknown)) or 'none'}")


def write_pictures(store: RecordStore, pics: Sequence[Picture], formats: Sequence[str]) -> None:
    """Each figure's static files in `formats` (png, svg) under figures/, drawn in those formats only; every one is
    drawn before the first is written, so a chart vl-convert rejects leaves figures/ as it was."""
    drawn = [(pic.name, pic.files(formats)) for pic in pics]
    for name, files in drawn:
        for kind, data in files.items():
            store.write_bytes(layout.figure_file(name, kind), data)


def write_report(run_dirs: list[Path], out: Path | None = None, formats: Sequence[str] = STATIC_FORMATS) -> Path:
    """Write `report.html` and `figures/` for one run, or a comparison of several; return the page's path.

    Books-run folders get their own section, in the order given; runs with records are compared
    when there are several. The files go into the first folder, or into the folder `out` when
    given, through a RecordStore.
    """
    if not run_dirs:
        raise MemriskError("write_report needs at least one run folder")
    check_formats(formats)
    if any(layout.is_study(Path(d)) for d in run_dirs):
        if len(run_dirs) > 1:
            raise MemriskError("a study is reported on its own: `memrisk report STUDY_FOLDER`")
        return write_study_report(Path(run_dirs[0]), out, formats)
    with charts.unchecked():
        return _write_run_report(run_dirs, out, formats)


def _write_run_report(run_dirs: list[Path], out: Path | None, formats: Sequence[str]) -> Path:
    """`write_report` of run and books-run folders."""
    runs = labelled([load_folder(Path(d)) for d in run_dirs])
    store = runs[0].store if out is None else RecordStore(Path(out), {})
    record_runs = [r for r in runs if isinstance(r, Run)]
    sections, pics = [], []
    if len(record_runs) > 1:
        section, compare_pics = comparison_section(record_runs)
        sections.append(section)
        pics += compare_pics
    for i, run in enumerate(runs):
        prefix = f"run{i + 1}-" if i else ""
        section, run_pics = books_section(run, prefix, store.root) if isinstance(run, Books) else run_section(run, prefix, i)
        sections.append(section)
        pics += run_pics
    write_pictures(store, pics, formats)
    explorer = any(r.arrays.count for r in record_runs)  # a run with records has an explorer and charts
    drawn = explorer or len(record_runs) < len(runs)  # so does a books run
    title = "memrisk report: " + ", ".join(f"{r.store.root.resolve().name} ({r.label})" for r in runs)
    return store.write_text(layout.REPORT, page(title, join(sections), explorer=explorer, charts=drawn))


def write_study_report(folder: Path, out: Path | None = None, formats: Sequence[str] = STATIC_FORMATS) -> Path:
    """Write the study page, its figures and study.csv into the study folder (or `out`); return the page's path."""
    store = RecordStore.existing(folder) if out is None else RecordStore(Path(out), {})
    with charts.unchecked():
        section = study_section(folder)
    for item in section.reproduced:
        store.write_text(layout.figure_file(item.figure.slug, "csv"), csv_text(list(dict.fromkeys(k for r in item.rows for k in r)), item.rows))
    write_pictures(store, section.pictures, formats)
    store.write_text(layout.STUDY_TABLE, section.table_csv)
    return store.write_text(layout.REPORT, page(f"memrisk study: {Path(folder).name}", section.body,
                                                explorer=section.explorers, charts=True))
