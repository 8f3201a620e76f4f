"""memrisk's cache on this machine (trained demo models, corpus indexes, the report pages' Vega-Embed script) and how
an entry enters it whole."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from memrisk.files import atomic_write_text


def cache_root() -> Path:
    """``$MEMRISK_CACHE``, or ``~/.cache/memrisk`` when the variable is unset: where trained models and indexes are kept."""
    root = os.environ.get("MEMRISK_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "memrisk"


def save_atomically(folder: Path, save: Callable[[Path], None]) -> None:
    """`save(staging)` into a fresh folder beside `folder`, then renamed to it: a killed save leaves no half-written
    folder, and when another process wins the race its folder is kept."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    staging.chmod(0o755)
    try:
        save(staging)
        staging.rename(folder)
    except OSError:
        if not folder.is_dir():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def cached_text(name: str, make: Callable[[], str]) -> str:
    """The text kept in the cache as `name`, made by `make()` on first use and kept, written whole
    (`files.atomic_write_text`). Where the cache cannot be written the text is made every time."""
    path = cache_root() / name
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    text = make()
    with contextlib.suppress(OSError):
        atomic_write_text(path, text)
    return text
