"""How a file enters the disk whole: written beside its place, fsynced, then renamed over it. The store's run files,
the cache's texts and the demo's corpus files are all written this way, so a reader never sees part of one."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temporary file in the same folder and a rename, with the mode a plain `open()`
    would give it; a failed or interrupted write leaves the old content and no temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_file_beside(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _new_file_beside(path: Path) -> tuple[int, Path]:
    """A new, empty `.NAME.RANDOM.tmp` beside `path`, open for writing. Created with mode 0666, which the kernel
    narrows by the umask as it does for `open()`: reading the umask would mean setting it, for every thread at once."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:
            continue


def atomic_write_text(path: Path, text: str) -> None:
    """`atomic_write_bytes` of `text` in UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))
