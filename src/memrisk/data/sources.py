"""Reading documents from plain text, JSONL and Parquet files (Hugging Face datasets: memrisk.data.hub)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memrisk.errors import MemriskError, first_line

FORMATS = ("txt", "jsonl", "parquet")


@dataclass(frozen=True)
class Document:
    """One text with a stable identifier."""

    doc_id: str
    text: str


def detect_format(path: Path) -> str:
    """File format from the extension: .txt/.md → txt, .jsonl/.json → jsonl, .parquet → parquet."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    return "txt"


def read_documents(
    path: str | Path,
    format: str = "auto",
    text_field: str = "text",
    id_field: str | None = None,
) -> list[Document]:
    """Documents of a file: a .txt file is one document; JSONL and Parquet give one per row."""
    path = Path(path)
    if path.is_dir():
        raise MemriskError(
            f"data file {path} is a folder; name a .txt, .jsonl or .parquet file or a folder written by save_to_disk "
            "(a folder of data files is read with hf: FOLDER)"
        )
    if not path.is_file():
        raise MemriskError(f"data file not found: {path}")
    fmt = detect_format(path) if format == "auto" else format
    if fmt not in FORMATS:
        raise MemriskError(f"unknown data format {format!r}; use one of auto, {', '.join(FORMATS)}")
    if fmt == "parquet":
        documents = _read_parquet(path, text_field, id_field)
    else:
        text = _read_utf8(path)
        documents = [Document(path.stem, text)] if fmt == "txt" else _parse_jsonl(path, text, text_field, id_field)
    documents = [d for d in documents if d.text.strip()]
    if not documents:
        raise MemriskError(f"{path} contains no text")
    refuse_repeated_ids(path, documents, id_field)
    return documents


def refuse_repeated_ids(where: Path | str, documents: list[Document], id_field: str | None) -> None:
    """Two documents with one id would give their windows one example id (a resume would take one for the other)."""
    seen: set[str] = set()
    for document in documents:
        if document.doc_id in seen:
            raise MemriskError(f"{where}: the id {document.doc_id!r} (field {id_field!r}) names more than one document; ids must be unique")
        seen.add(document.doc_id)


def _read_utf8(path: Path) -> str:
    """The file's text, with a clear error for binary files and bytes that are not UTF-8."""
    raw = path.read_bytes()
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise MemriskError(f"{path} is a binary file, not text (NUL byte at offset {nul})")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MemriskError(f"{path} is not valid UTF-8 (byte {exc.start}: {raw[exc.start:exc.start + 1]!r})") from exc


def _parse_jsonl(path: Path, text: str, text_field: str, id_field: str | None) -> list[Document]:
    """One document per non-empty JSON line, text from `text_field`; errors name the 1-based line."""
    documents = []
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            row = _json_row(path, number, line, text_field)
            doc_id = str(row[id_field]) if id_field and id_field in row else f"{path.stem}:{number}"
            documents.append(Document(doc_id, row[text_field]))
    return documents


def _json_row(path: Path, number: int, line: str, text_field: str) -> dict[str, Any]:
    """Line `number` of a JSONL file: a JSON object with a string `text_field`."""
    where = f"{path}, line {number}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise MemriskError(f"{where}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(row, dict):
        raise MemriskError(f"{where}: not a JSON object with a {text_field!r} field")
    if not isinstance(row.get(text_field), str):
        keys = ", ".join(row) or "none"
        raise MemriskError(f"{where}: no string field {text_field!r} (keys: {keys}); set text_field to the one that holds the text")
    return row


def _read_parquet(path: Path, text_field: str, id_field: str | None) -> list[Document]:
    """One document per row of a Parquet file's `text_field` column."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise MemriskError(f"{path} is not a readable Parquet file: {first_line(exc)}") from exc
    if text_field not in table.column_names:
        raise MemriskError(f"{path} has no column {text_field!r} (columns: {', '.join(table.column_names)})")
    texts = table.column(text_field).to_pylist()
    ids = table.column(id_field).to_pylist() if id_field and id_field in table.column_names else None
    return [
        Document(str(ids[i]) if ids else f"{path.stem}:{i}", t)
        for i, t in enumerate(texts)
        if isinstance(t, str)
    ]
