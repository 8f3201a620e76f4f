"""The record store: the only writer of run files.

A run directory holds Parquet shards under `records/`, a `manifest.json` that lists the
committed shards and the settings that made them, the resolved `config.yaml`, `versions.json`
and the aggregates. Every file is written to a temporary name and renamed into place, and a
shard counts only once the manifest names it, so a killed run resumes without lost or
duplicated records. One live process at a time writes a folder (`FolderLock`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from memrisk.errors import MemriskError, first_line
from memrisk.files import atomic_write_bytes
from memrisk.layout import CONFIG, MANIFEST, RECORDS

log = logging.getLogger(__name__)


def config_fingerprint(config: Mapping[str, Any]) -> str:
    """SHA-256 of a config's canonical JSON form."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


class RecordStore:
    """Append-only Parquet records of one run directory, with resume."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = root
        self.manifest = manifest

    @classmethod
    def open(cls, root: str | Path, config: Mapping[str, Any], identity: Mapping[str, Any], *, force: bool = False) -> RecordStore:
        """Open or create a run directory; refuse to resume under different settings unless forced.

        `identity` is the part of the config that changes results (it is compared on resume and
        the differing keys are named); `config` is saved in full. `force` starts the run afresh.
        Committed shards that cannot be read are dropped from the manifest (said in a warning),
        so their examples are scored again.
        """
        root = Path(root)
        if not force:
            refuse_changed_settings(root, identity)
        remove_temporary_files(root)
        manifest_path = root / MANIFEST
        if manifest_path.exists() and not force:
            store = cls(root, _read_manifest(root))
            store._remove_uncommitted_shards()
            store._drop_damaged_shards()
            return store
        if force:
            for stale in [manifest_path, *(root / RECORDS).glob("*.parquet")]:
                stale.unlink(missing_ok=True)
        manifest = {"config_fingerprint": config_fingerprint(identity), "identity": dict(identity), "shards": [], "rows": 0}
        store = cls(root, manifest)
        store.write_text(CONFIG, yaml.safe_dump(dict(config), sort_keys=False, allow_unicode=True))
        store._save_manifest()
        return store

    @classmethod
    def existing(cls, root: str | Path) -> RecordStore:
        """Open a finished or interrupted run directory for reading."""
        root = Path(root)
        if not root.is_dir():
            raise MemriskError(f"{root} does not exist" if not root.exists() else f"{root} is a file, not a run folder")
        if not (root / MANIFEST).is_file():
            raise MemriskError(f"{root} is not a memrisk run folder (no {MANIFEST})")
        return cls(root, _read_manifest(root))

    def read_json(self, name: str) -> Any:
        """A JSON file of the run directory."""
        return json.loads((self.root / name).read_text(encoding="utf-8"))

    def read_yaml(self, name: str) -> Any:
        """A YAML file of the run directory."""
        return yaml.safe_load((self.root / name).read_text(encoding="utf-8"))

    @property
    def done_ids(self) -> set[str]:
        """Example ids already committed to the store."""
        ids: set[str] = set()
        for shard in self.manifest["shards"]:
            ids.update(self._read_shard(shard, columns=["example_id"]).column(0).to_pylist())
        return ids

    def append(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Commit one shard of records (a no-op for no rows)."""
        if not rows:
            return
        table = pa.Table.from_pylist(list(rows))
        number = max((int(name[5:10]) + 1 for name in self.manifest["shards"]), default=0)
        name = f"part-{number:05d}.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        atomic_write_bytes(self.root / RECORDS / name, sink.getvalue().to_pybytes())
        self.manifest["shards"].append(name)
        self.manifest["rows"] += table.num_rows
        self._save_manifest()

    def read_records(self) -> pa.Table:
        """All committed records as one table (empty table when there are none)."""
        tables = [self._read_shard(shard) for shard in self.manifest["shards"]]
        return pa.concat_tables(tables, promote_options="default") if tables else pa.table({})

    def _read_shard(self, name: str, columns: list[str] | None = None) -> pa.Table:
        """One committed shard; a missing or damaged one is a MemriskError naming it."""
        path = self.root / RECORDS / name
        try:
            return pq.read_table(path, columns=columns)
        except (OSError, pa.ArrowException) as exc:
            raise MemriskError(
                f"{path} is damaged ({first_line(exc)}); re-run `memrisk run` on this folder to score its examples again"
            ) from None

    def write_text(self, name: str, text: str) -> Path:
        """Atomically write a text file inside the run directory."""
        return self.write_bytes(name, text.encode("utf-8"))

    def write_json(self, name: str, data: Any) -> Path:
        """Atomically write JSON (non-finite floats as strings 'inf'/'-inf'/'nan')."""
        return self.write_text(name, json.dumps(_json_safe(data), indent=2, sort_keys=False, default=str) + "\n")

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Atomically write a binary file inside the run directory."""
        path = self.root / name
        atomic_write_bytes(path, data)
        return path

    def remove(self, name: str) -> None:
        """Delete a file of the run directory (no error when it is absent)."""
        (self.root / name).unlink(missing_ok=True)

    def _save_manifest(self) -> None:
        """Write the manifest last: it is what makes a shard count."""
        self.write_json(MANIFEST, self.manifest)

    def _remove_uncommitted_shards(self) -> None:
        """Delete shards a killed run wrote but never listed in the manifest."""
        committed = set(self.manifest["shards"])
        for path in (self.root / RECORDS).glob("*.parquet"):
            if path.name not in committed:
                path.unlink()

    def _drop_damaged_shards(self) -> None:
        """Take committed shards that cannot be read out of the manifest, so a resume scores them again."""
        kept, rows = [], 0
        for name in self.manifest["shards"]:
            path = self.root / RECORDS / name
            try:
                rows += pq.read_table(path).num_rows
                kept.append(name)
            except (OSError, pa.ArrowException) as exc:
                log.warning("%s is damaged (%s): its records are dropped and their examples scored again", path, first_line(exc))
                path.unlink(missing_ok=True)
        if kept != self.manifest["shards"]:
            self.manifest |= {"shards": kept, "rows": rows}
            self._save_manifest()


def remove_temporary_files(root: Path) -> None:
    """Delete the temporary files (`.NAME.*.tmp`, any subfolder) that a killed write left behind;
    only the folder's lock holder calls this, so none of them is being written."""
    for path in root.rglob(".*.tmp"):
        path.unlink(missing_ok=True)


def refuse_changed_settings(root: Path, identity: Mapping[str, Any]) -> None:
    """Raise a MemriskError naming the settings that differ when `root` holds a run made with others."""
    if not (root / MANIFEST).is_file():
        return
    manifest = _read_manifest(root)
    if manifest.get("config_fingerprint") == config_fingerprint(identity):
        return
    stored = manifest.get("identity")
    changes = "" if stored is None else ": " + "; ".join(setting_changes(stored, json.loads(json.dumps(identity, default=str))))
    raise MemriskError(
        f"{root} holds a run made with different settings{changes}. Use another --out folder, "
        "or --force to discard its records and start again"
    )


def setting_changes(old: Any, new: Any, key: str = "") -> list[str]:
    """`key: old → new` for every dotted key whose value differs (a list of settings whose length
    changed is one key)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = sorted(set(old) | set(new), key=str)
        return [c for k in keys for c in setting_changes(old.get(k, _UNSET), new.get(k, _UNSET), f"{key}.{k}" if key else str(k))]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and any(isinstance(v, Mapping) for v in old):
        return [c for i, (o, n) in enumerate(zip(old, new)) for c in setting_changes(o, n, f"{key}[{i}]")]
    return [] if old == new else [f"{key}: {_short(old)} → {_short(new)}"]


_UNSET = "(unset)"


def _short(value: Any, width: int = 60) -> str:
    """A value's repr cut to `width` characters."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of a run folder; a damaged one is a MemriskError."""
    path = root / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise MemriskError(f"{path} is damaged ({first_line(exc)}); use another --out folder, or --force to start again") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("shards"), list):
        raise MemriskError(f"{path} is damaged (no list of shards); use another --out folder, or --force to start again")
    return manifest


def read_request_log(path: str | Path) -> list[dict[str, Any]]:
    """The entries of a request log, read without changing it; a missing file or a line that is not JSON is a
    MemriskError naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MemriskError(f"request log not found: {path}") from None
    entries = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except ValueError as exc:
            raise MemriskError(f"{path} line {number} is damaged ({exc}); repair or remove that line to resume") from None
    return entries


class RequestLog:
    """Append-only JSONL log of API requests and responses: one JSON object per line, flushed
    and fsynced before the call returns, so a killed run loses at most the line being written."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._drop_torn_tail()

    def entries(self) -> list[dict[str, Any]]:
        """Every complete entry, in order; a line that is not JSON is a MemriskError naming it."""
        return read_request_log(self.path) if self.path.exists() else []

    def append(self, entry: Mapping[str, Any]) -> None:
        """Add one entry at the end of the log."""
        line = json.dumps(_json_safe(entry), ensure_ascii=False, sort_keys=False) + "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def _drop_torn_tail(self) -> None:
        """Cut a last line that a killed write left without its newline (said in a warning)."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with self.path.open("r+b") as handle:
                handle.truncate(keep)
            log.warning("%s: dropped a torn last line (%d bytes) left by an interrupted write", self.path, len(data) - keep)


def _json_safe(value: Any) -> Any:
    """Replace non-finite floats (invalid JSON) by their names, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return _json_safe(value.item())
    return value
