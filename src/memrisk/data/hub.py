"""Reading documents with the Hugging Face `datasets` library: hub datasets (downloaded or streamed), local folders
of data files, and folders written by `save_to_disk`.

`datasets` is imported only when one of these is read (`pip install 'memrisk[hf]'`). Rows become documents as a
JSONL file's lines do: the text from `text_field`, the id from `id_field` or `STEM:N` (N the 1-based row number),
blank and null texts left out, and `limit` counting the documents kept, in the dataset's row order.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import ModuleType
from typing import Any

from memrisk.data.sources import Document, refuse_repeated_ids
from memrisk.errors import MemriskError, first_line

SAVED_MARKERS = ("state.json", "dataset_dict.json")
"""Files `save_to_disk` writes at the top of its folder: `state.json` for one split, `dataset_dict.json` for several."""
HUB_TIMEOUT_SECONDS = 3.0
"""How long the Hub may take to answer before a hub dataset is read from the local cache instead."""
DEFAULT_SPLIT = "train"


def is_saved_dataset(path: str | Path) -> bool:
    """Whether `path` is a folder written by `Dataset.save_to_disk` or `DatasetDict.save_to_disk`."""
    folder = Path(path)
    return folder.is_dir() and any((folder / marker).is_file() for marker in SAVED_MARKERS)


def read_saved_dataset(
    path: str | Path, *, split: str | None = None, text_field: str = "text", id_field: str | None = None,
    limit: int | None = None,
) -> list[Document]:
    """Documents of a `save_to_disk` folder; a DatasetDict's `split` (default train) is the one read."""
    folder = Path(path)
    if not is_saved_dataset(folder):
        raise MemriskError(
            f"{folder} is not a folder written by save_to_disk (it has no {' or '.join(SAVED_MARKERS)}); "
            "'split' applies only to such folders and to 'hf' datasets"
        )
    datasets = _datasets_module()
    try:
        loaded = datasets.load_from_disk(str(folder))
    except Exception as exc:
        raise MemriskError(f"{folder} cannot be read as a save_to_disk folder: {first_line(exc)}") from exc
    return _documents(_one_split(loaded, split, str(folder)), str(folder), folder.name, text_field, id_field, limit)


def read_hub_dataset(
    name: str, *, config: str | None = None, split: str | None = None, revision: str | None = None,
    streaming: bool = False, text_field: str = "text", id_field: str | None = None, limit: int | None = None,
) -> list[Document]:
    """Documents of `datasets.load_dataset(name, config, split=split, revision=revision, streaming=streaming)`.

    `name` is a hub id or a local folder of data files. When the Hub does not answer within a few seconds the
    dataset is read from the local cache (offline mode), so an unreachable name fails at once instead of retrying.
    """
    datasets = _datasets_module()
    folder = _local_folder(name)
    where = str(folder) if folder else f"hub dataset {name!r}"
    unreachable = None if folder or _offline_already(datasets) else hub_unreachable()
    try:
        with _offline(datasets) if unreachable else nullcontext():
            rows = datasets.load_dataset(
                str(folder or name), config, split=split or DEFAULT_SPLIT, revision=revision, streaming=streaming,
            )
            stem = folder.name if folder else name.rstrip("/").split("/")[-1]
            return _documents(rows, where, stem, text_field, id_field, limit)
    except MemriskError:
        raise
    except ConnectionError as exc:
        if not (unreachable or _offline_already(datasets)):
            raise MemriskError(f"{where} cannot be reached: {first_line(exc)}") from exc
        cause = f"the Hugging Face Hub does not answer ({unreachable})" if unreachable else "offline mode is on"
        raise MemriskError(f"{where} cannot be reached: {cause} and no copy of it is cached here") from exc
    except Exception as exc:
        raise MemriskError(f"{where} cannot be loaded: {first_line(exc)}") from exc


def hub_unreachable(timeout: float = HUB_TIMEOUT_SECONDS) -> str | None:
    """Why the Hugging Face Hub does not answer within `timeout` seconds, or None when it answers (any HTTP status)."""
    from huggingface_hub import constants

    try:
        urllib.request.urlopen(urllib.request.Request(constants.ENDPOINT, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as exc:
        return first_line(exc.reason) if isinstance(exc.reason, BaseException) else str(exc.reason)
    except OSError as exc:
        return first_line(exc)
    return None


def _datasets_module() -> ModuleType:
    """The `datasets` library, or one error saying how to install it."""
    try:
        import datasets
    except ImportError:
        raise MemriskError("reading Hugging Face datasets needs the datasets package: pip install 'memrisk[hf]'") from None
    return datasets


def _local_folder(name: str) -> Path | None:
    """The folder `name` names, or None for a hub id; a name that can only be a path must exist."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.is_absolute() or name.startswith((".", "~")) or name.count("/") > 1:
        raise MemriskError(f"dataset folder not found: {path}")
    return None


def _offline_already(datasets: ModuleType) -> bool:
    """Whether HF_HUB_OFFLINE (or HF_DATASETS_OFFLINE) already keeps `datasets` from the network."""
    return bool(datasets.config.HF_HUB_OFFLINE)


@contextmanager
def _offline(datasets: ModuleType) -> Iterator[None]:
    """Offline mode for one load, as HF_HUB_OFFLINE=1 sets it: the cache is read and the Hub is not asked."""
    from huggingface_hub import constants

    before = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = before


def _one_split(loaded: Any, split: str | None, where: str) -> Any:
    """The split to read: `split` (default train) of a DatasetDict; a single saved split only when it is the one asked."""
    if isinstance(loaded, dict):
        chosen = split or DEFAULT_SPLIT
        if chosen not in loaded:
            raise MemriskError(f"{where} has no split {chosen!r} (splits: {', '.join(loaded)}); set split to one of them")
        return loaded[chosen]
    if split is not None and str(loaded.split) != split:
        named = f" ({loaded.split})" if loaded.split else ""
        raise MemriskError(f"{where} is one saved split{named}, not a DatasetDict with split {split!r}; leave out split")
    return loaded


def _documents(
    rows: Any, where: str, stem: str, text_field: str, id_field: str | None, limit: int | None,
) -> list[Document]:
    """The first `limit` non-blank documents of `rows` (a Dataset or IterableDataset), checked like a JSONL file's."""
    columns = rows.column_names
    if columns is not None:
        for field, role in ((text_field, "text_field"), (id_field, "id_field")):
            if field is not None and field not in columns:
                raise MemriskError(f"{where} has no field {field!r} (fields: {', '.join(columns)}); set {role} to one of them")
        rows = rows.select_columns([f for f in (text_field, id_field) if f is not None])
    documents = []
    for number, row in enumerate(rows, start=1):
        if limit is not None and len(documents) >= limit:
            break
        text = _text_of(row, where, number, text_field)
        if id_field is not None and id_field not in row:
            raise MemriskError(f"{where}, row {number}: no field {id_field!r} (fields: {', '.join(row)}); set id_field to one of them")
        if text is not None and text.strip():
            doc_id = str(row[id_field]) if id_field else f"{stem}:{number}"
            documents.append(Document(doc_id, text))
    if not documents:
        raise MemriskError(f"{where} contains no text in field {text_field!r}")
    refuse_repeated_ids(where, documents, id_field)
    return documents


def _text_of(row: dict[str, Any], where: str, number: int, text_field: str) -> str | None:
    """Row `number`'s text (None for a null value); a missing field or a value that is not text is an error."""
    if text_field not in row:
        raise MemriskError(f"{where}, row {number}: no field {text_field!r} (fields: {', '.join(row) or 'none'}); set text_field to the one that holds the text")
    text = row[text_field]
    if text is not None and not isinstance(text, str):
        raise MemriskError(f"{where}, row {number}: field {text_field!r} holds {type(text).__name__}, not text")
    return text
