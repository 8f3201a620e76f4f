"""memrisk's cache on this machine (trained demo models, corpus indexes, the report pages' Vega-Embed script) and how
an entry enters it whole."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


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
    """The text kept in the cache as `name`, made by `make()` on first use and kept: written beside its place and
    renamed, so a reader never sees part of it. Where the cache cannot be written the text is made every time."""
    path = cache_root() / name
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    text = make()
    staging = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}-", delete=False) as handle:
            staging = Path(handle.name)
            handle.write(text)
        staging.chmod(0o644)
        staging.replace(path)
    except OSError:
        if staging is not None:
            staging.unlink(missing_ok=True)
    return text
