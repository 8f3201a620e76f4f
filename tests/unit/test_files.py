"""memrisk.files: a file enters the disk whole, with the mode a plain open() would give it, or not at all."""

from __future__ import annotations

import os

import pytest

from memrisk.files import atomic_write_bytes, atomic_write_text


def test_atomic_write_creates_folders_replaces_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "a" / "b" / "f.bin"
    atomic_write_bytes(path, b"first")
    atomic_write_bytes(path, b"second")
    assert path.read_bytes() == b"second"
    assert [p.name for p in path.parent.iterdir()] == ["f.bin"]


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_write_gives_the_mode_a_plain_open_would(tmp_path, umask, mode):
    """mkstemp makes 0600 files; the write restores 0666 minus the umask, as open() would."""
    old = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "f", b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "f").stat().st_mode & 0o777 == mode


def test_the_writer_never_sets_the_process_umask(tmp_path, monkeypatch):
    """The umask is one per process: setting it to read it would change the mode of files other threads create."""
    def forbidden(mask):
        raise AssertionError("os.umask called")

    monkeypatch.setattr(os, "umask", forbidden)
    atomic_write_bytes(tmp_path / "f", b"x")
    assert (tmp_path / "f").read_bytes() == b"x"


def test_a_failed_rename_removes_the_temporary_file(tmp_path):
    """The target is a non-empty folder, so os.replace fails after the data is written."""
    target = tmp_path / "f"
    target.mkdir()
    (target / "inside").write_bytes(b"kept")
    with pytest.raises(OSError):
        atomic_write_bytes(target, b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    assert (target / "inside").read_bytes() == b"kept"


def test_an_interrupt_during_the_write_removes_the_temporary_file_and_keeps_the_old_content(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_bytes(b"old")

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_text_is_written_as_utf8(tmp_path):
    atomic_write_text(tmp_path / "t.txt", "Vega ✓\n")
    assert (tmp_path / "t.txt").read_bytes() == "Vega ✓\n".encode("utf-8")
