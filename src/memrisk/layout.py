"""The names of a run folder's files, written once; and what kind of run a folder holds.

A record run holds config.yaml, manifest.json, records/ (Parquet parts), windows.json,
versions.json, summary.json, prior_aware.json (with the prior-aware method), ray_run.json (on Ray),
report.html and figures/. A study holds config.yaml (the study), manifest.json, study.json (its
cells), cells/NAME/ (one record run each), and after `memrisk report` study.csv, report.html and
figures/. A books run holds config.yaml, manifest.json, requests.jsonl,
books_summary.json and books/NAME/ (generation.txt, result.json, diff.html). docs/records.md describes each.
"""

from __future__ import annotations

from pathlib import Path

from memrisk.errors import MemriskError

CONFIG = "config.yaml"
MANIFEST = "manifest.json"
RECORDS = "records"
WINDOWS = "windows.json"
VERSIONS = "versions.json"
SUMMARY = "summary.json"
RAY_RUN = "ray_run.json"
REPORT = "report.html"
FIGURES = "figures"
LOCK = ".memrisk.lock"
BOOKS_SUMMARY = "books_summary.json"
REQUESTS = "requests.jsonl"
BOOKS = "books"
GENERATION = "generation.txt"
BOOK_RESULT = "result.json"
DIFF = "diff.html"
CELLS = "cells"
STUDY_CELLS = "study.json"
STUDY_TABLE = "study.csv"


def setup_file(method: str) -> str:
    """Where a run method's run-level settings are saved, e.g. prior_aware.json (the bank, m and n)."""
    return f"{method}.json"


PRIOR_AWARE = setup_file("prior_aware")


def figure_file(name: str, extension: str) -> str:
    """A figure's file inside the run folder, e.g. figures/scatter.svg."""
    return f"{FIGURES}/{name}.{extension}"


def book_file(book: str, name: str) -> str:
    """One book's file inside a books run folder, e.g. books/NAME/diff.html."""
    return f"{BOOKS}/{book}/{name}"


def is_study(folder: Path) -> bool:
    """Whether `folder` holds a study (its cell list, written when the study starts)."""
    return (Path(folder) / STUDY_CELLS).is_file()


def is_books_run(folder: Path) -> bool:
    """Whether `folder` is a books run (it holds books_summary.json); an unfinished one is an error."""
    folder = Path(folder)
    if (folder / BOOKS_SUMMARY).is_file():
        return True
    if (folder / REQUESTS).is_file():
        raise MemriskError(f"{folder} is an unfinished books run (no {BOOKS_SUMMARY}); re-run `memrisk books run` with its config to finish it")
    return False
