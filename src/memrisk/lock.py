"""One writer per run folder: an advisory lock that a live process holds and a dead one loses.

The lock is `fcntl.flock` on `.memrisk.lock` inside the folder. The kernel releases it when
its holder exits for any reason (SIGKILL included), so a lock left by a killed run is free
and the next run takes it over; the file's text only names the owner for the message a
second process gets. Locks are per machine: on a shared filesystem (NFS) they hold only as
far as the filesystem forwards flock.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memrisk.errors import MemriskError
from memrisk.layout import LOCK

log = logging.getLogger(__name__)


class FolderLock:
    """The exclusive lock of one run folder, held from `acquire` to `release`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / LOCK
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock now or raise a MemriskError naming the live process that holds it."""
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise MemriskError(f"cannot write to the output folder {self.root}: {exc.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read_owner(fd)
                os.close(fd)
                raise MemriskError(
                    f"{self.root} is being written by another memrisk process ({_describe(owner)}); "
                    "wait for it to finish, or use another --out folder"
                ) from None
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the holder removed the file after we opened it: lock the new one
        stale = _read_owner(fd)
        if stale:
            log.warning("%s: took over the lock left by %s, which is no longer running", self.root, _describe(stale))
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(owner).encode("utf-8"), 0)
        self._fd = fd

    def release(self) -> None:
        """Remove the lock file and let go of the lock."""
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


@contextmanager
def locked_folder(root: str | Path) -> Iterator[Path]:
    """Create (if needed) and lock the output folder `root` for this process.

    A folder this call created is removed again when nothing was written to it, so a run
    that fails before its first file leaves nothing behind.
    """
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise MemriskError(f"the output folder {root} is a file, not a folder")
    created = not root.exists()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MemriskError(f"cannot create the output folder {root}: {exc.strerror}") from None
    lock = FolderLock(root)
    try:
        lock.acquire()
        yield root
    finally:
        lock.release()
        if created and root.is_dir() and not any(root.iterdir()):
            root.rmdir()


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is still the file at `path` (not removed or replaced)."""
    try:
        return os.fstat(fd).st_ino == path.stat().st_ino
    except FileNotFoundError:
        return False


def _read_owner(fd: int) -> dict[str, Any]:
    """The owner a lock file names ({} when it names none)."""
    try:
        return json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
    except (ValueError, OSError):
        return {}


def _describe(owner: dict[str, Any]) -> str:
    """`pid 123 on host, since ...: command` for messages."""
    if not owner:
        return "owner unknown"
    return f"pid {owner.get('pid')} on {owner.get('host')}, since {owner.get('since')}: {owner.get('command')}"
