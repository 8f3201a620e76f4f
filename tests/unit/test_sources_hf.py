"""Unit tests of memrisk.data.hub: save_to_disk folders, local and cached hub datasets, streaming, and their errors."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from memrisk.config import DatasetConfig, parse_config, validated
from memrisk.data.hub import hub_unreachable, is_saved_dataset, read_hub_dataset, read_saved_dataset
from memrisk.data.sources import Document, read_documents
from memrisk.data.windows import make_windows
from memrisk.errors import MemriskError
from tests.conftest import WORDS

datasets = pytest.importorskip("datasets")

TEXTS = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(0, 30, 6)]
ROWS = {"text": [TEXTS[0], "", TEXTS[1], "   ", *TEXTS[2:]], "url": [f"u{i}" for i in range(len(TEXTS) + 2)]}
"""Five texts with two blank rows among them: blank rows are left out and still counted in the row numbers."""


@pytest.fixture(autouse=True)
def no_hub(tmp_path, monkeypatch):
    """Every test gets its own datasets cache, and a Hub endpoint that refuses connections at once."""
    from huggingface_hub import constants

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")


def write_jsonl(path: Path, rows: dict[str, list]) -> Path:
    """`rows` (columns) as a JSONL file, one object per row."""
    columns = list(rows)
    path.write_text("\n".join(json.dumps(dict(zip(columns, values))) for values in zip(*rows.values())), encoding="utf-8")
    return path


def hub_folder(path: Path, rows: dict[str, list], name: str = "train.jsonl") -> Path:
    """A script-free dataset folder as a hub repository holds one: data files only."""
    path.mkdir()
    write_jsonl(path / name, rows)
    return path


def error_of(read, *args, **options) -> str:
    with pytest.raises(MemriskError) as info:
        read(*args, **options)
    return str(info.value)


# --- save_to_disk folders ------------------------------------------------------------------------------------


@pytest.mark.parametrize("id_field", [None, "url"])
def test_a_saved_dataset_and_a_jsonl_file_of_the_same_rows_give_identical_windows(tmp_path, word_model, id_field):
    """Same documents (ids: the row number as a JSONL line number, or `id_field`) and so the same windows."""
    datasets.Dataset.from_dict(ROWS).save_to_disk(tmp_path / "rows")
    jsonl = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    saved = read_saved_dataset(tmp_path / "rows", id_field=id_field)
    assert saved == read_documents(jsonl, id_field=id_field)
    assert [d.doc_id for d in saved] == (["rows:1", "rows:3", "rows:5", "rows:6", "rows:7"] if id_field is None else ["u0", "u2", "u4", "u5", "u6"])
    options = {"mode": "book", "prefix_length": 4, "suffix_length": 3, "stride": 30}
    from_saved = make_windows(word_model, saved, **options)
    from_jsonl = make_windows(word_model, read_documents(jsonl, id_field=id_field), **options)
    assert len(from_saved.windows) > len(TEXTS)
    assert from_saved.windows == from_jsonl.windows
    assert [word_model.decode(w.suffix_ids) for w in from_saved.windows] == [word_model.decode(w.suffix_ids) for w in from_jsonl.windows]


def test_saved_folders_are_told_from_data_folders_by_the_files_save_to_disk_writes(tmp_path):
    datasets.Dataset.from_dict(ROWS).save_to_disk(tmp_path / "one")
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(ROWS)}).save_to_disk(tmp_path / "dict")
    hub_folder(tmp_path / "files", ROWS)
    assert [is_saved_dataset(tmp_path / n) for n in ("one", "dict", "files", "missing")] == [True, True, False, False]
    assert not is_saved_dataset(write_jsonl(tmp_path / "a.jsonl", ROWS))


def test_a_saved_dataset_dict_reads_train_unless_split_names_another(tmp_path):
    datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"text": ["train text"]}),
        "test": datasets.Dataset.from_dict({"text": ["test one", "test two"]}),
    }).save_to_disk(tmp_path / "dd")
    assert read_saved_dataset(tmp_path / "dd") == [Document("dd:1", "train text")]
    assert read_saved_dataset(tmp_path / "dd", split="test") == [Document("dd:1", "test one"), Document("dd:2", "test two")]
    assert error_of(read_saved_dataset, tmp_path / "dd", split="validation") == (
        f"{tmp_path / 'dd'} has no split 'validation' (splits: train, test); set split to one of them"
    )


def test_a_split_asked_of_one_saved_split_or_of_a_file_is_refused(tmp_path):
    datasets.Dataset.from_dict(ROWS).save_to_disk(tmp_path / "one")
    assert error_of(read_saved_dataset, tmp_path / "one", split="test") == (
        f"{tmp_path / 'one'} is one saved split, not a DatasetDict with split 'test'; leave out split"
    )
    jsonl = write_jsonl(tmp_path / "a.jsonl", ROWS)
    assert error_of(read_saved_dataset, jsonl, split="train") == (
        f"{jsonl} is not a folder written by save_to_disk (it has no state.json or dataset_dict.json); "
        "'split' applies only to such folders and to 'hf' datasets"
    )


def test_a_missing_text_field_names_the_fields_there_are(tmp_path):
    datasets.Dataset.from_dict({"body": ["a b c"], "url": ["u"]}).save_to_disk(tmp_path / "rows")
    assert error_of(read_saved_dataset, tmp_path / "rows") == (
        f"{tmp_path / 'rows'} has no field 'text' (fields: body, url); set text_field to one of them"
    )
    assert error_of(read_saved_dataset, tmp_path / "rows", text_field="body", id_field="uid") == (
        f"{tmp_path / 'rows'} has no field 'uid' (fields: body, url); set id_field to one of them"
    )


def test_a_field_that_is_not_text_is_named_with_its_row(tmp_path):
    datasets.Dataset.from_dict({"text": ["fine", "also fine"], "n": [1, 2]}).save_to_disk(tmp_path / "rows")
    assert error_of(read_saved_dataset, tmp_path / "rows", text_field="n") == (
        f"{tmp_path / 'rows'}, row 1: field 'n' holds int, not text"
    )


def test_null_and_blank_texts_are_left_out_and_repeated_ids_refused(tmp_path):
    datasets.Dataset.from_dict({"text": ["one", None, " ", "two"], "id": ["a", "b", "c", "a"]}).save_to_disk(tmp_path / "rows")
    assert read_saved_dataset(tmp_path / "rows") == [Document("rows:1", "one"), Document("rows:4", "two")]
    assert "the id 'a' (field 'id') names more than one document" in error_of(read_saved_dataset, tmp_path / "rows", id_field="id")
    datasets.Dataset.from_dict({"text": [None, ""]}).save_to_disk(tmp_path / "empty")
    assert error_of(read_saved_dataset, tmp_path / "empty") == f"{tmp_path / 'empty'} contains no text in field 'text'"


def test_limit_counts_the_documents_kept(tmp_path):
    datasets.Dataset.from_dict(ROWS).save_to_disk(tmp_path / "rows")
    assert [d.doc_id for d in read_saved_dataset(tmp_path / "rows", limit=2)] == ["rows:1", "rows:3"]


# --- hub datasets: local folders, streaming, the cache, an unreachable Hub -----------------------------------


def test_a_local_data_folder_reads_like_the_same_rows_saved(tmp_path):
    folder = hub_folder(tmp_path / "rows", ROWS)
    datasets.Dataset.from_dict(ROWS).save_to_disk(tmp_path / "saved" / "rows")
    assert read_hub_dataset(str(folder)) == read_saved_dataset(tmp_path / "saved" / "rows")


def test_streaming_with_limit_takes_the_first_documents_in_the_dataset_order(tmp_path):
    folder = hub_folder(tmp_path / "rows", ROWS)
    streamed = read_hub_dataset(str(folder), streaming=True, limit=3)
    assert streamed == [Document("rows:1", TEXTS[0]), Document("rows:3", TEXTS[1]), Document("rows:5", TEXTS[2])]
    assert not list((tmp_path / "hf-cache").rglob("*.arrow"))
    assert streamed == read_hub_dataset(str(folder), limit=3)
    assert list((tmp_path / "hf-cache").rglob("*.arrow"))


def test_a_split_of_a_local_data_folder_is_picked_by_its_file_name(tmp_path):
    folder = hub_folder(tmp_path / "rows", {"text": ["train row"]})
    write_jsonl(folder / "test.jsonl", {"text": ["test row"]})
    assert read_hub_dataset(str(folder), split="test", streaming=True) == [Document("rows:1", "test row")]
    assert "Unknown split \"dev\"" in error_of(read_hub_dataset, str(folder), split="dev")


def test_a_streamed_row_without_the_text_or_id_field_names_the_fields_it_has(tmp_path):
    folder = hub_folder(tmp_path / "rows", {"body": ["a b c"]})
    message = error_of(read_hub_dataset, str(folder), streaming=True)
    assert message.startswith(f"{folder}")
    assert "no field 'text'" in message and "(fields: body)" in message and "set text_field" in message
    message = error_of(read_hub_dataset, str(folder), streaming=True, text_field="body", id_field="url")
    assert "no field 'url'" in message and "(fields: body)" in message and "set id_field" in message


def test_rows_whose_fields_are_known_only_when_read_are_checked_row_by_row():
    """Some streamed datasets declare no columns (column_names is None): each row is checked as it arrives."""
    from memrisk.data.hub import _documents

    rows = datasets.Dataset.from_dict({"text": ["one", "two"], "n": [1, 2]}).to_iterable_dataset().map(lambda row: row)
    assert rows.column_names is None
    assert _documents(rows, "stream", "s", "text", None, None) == [Document("s:1", "one"), Document("s:2", "two")]
    with pytest.raises(MemriskError, match=r"^stream, row 1: no field 'body' \(fields: text, n\); set text_field"):
        _documents(rows, "stream", "s", "body", None, None)
    with pytest.raises(MemriskError, match=r"^stream, row 1: no field 'url' \(fields: text, n\); set id_field"):
        _documents(rows, "stream", "s", "text", "url", None)
    with pytest.raises(MemriskError, match=r"^stream, row 1: field 'n' holds int, not text$"):
        _documents(rows, "stream", "s", "n", None, None)


def test_a_path_that_can_only_be_a_folder_must_exist(tmp_path):
    assert error_of(read_hub_dataset, str(tmp_path / "missing")) == f"dataset folder not found: {tmp_path / 'missing'}"


def test_an_unreachable_hub_dataset_is_one_error_naming_it_within_seconds():
    started = time.perf_counter()
    message = error_of(read_hub_dataset, "someone/not-cached", streaming=True)
    assert time.perf_counter() - started < 5
    assert message == (
        "hub dataset 'someone/not-cached' cannot be reached: the Hugging Face Hub does not answer "
        "([Errno 111] Connection refused) and no copy of it is cached here"
    )
    assert datasets.config.HF_HUB_OFFLINE is False


def test_offline_mode_set_by_the_user_is_named_as_the_cause(monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    assert error_of(read_hub_dataset, "someone/not-cached") == (
        "hub dataset 'someone/not-cached' cannot be reached: offline mode is on and no copy of it is cached here"
    )


@pytest.mark.parametrize("streaming", [False, True])
def test_a_hub_dataset_in_the_local_cache_is_read_offline_when_the_hub_does_not_answer(tmp_path, streaming):
    """The cache holds what an online load left (here: a local folder's load, filed under a hub name)."""
    read_hub_dataset(str(hub_folder(tmp_path / "tiny", ROWS)))
    (tmp_path / "hf-cache" / "tiny").rename(tmp_path / "hf-cache" / "someone___tiny")
    started = time.perf_counter()
    documents = read_hub_dataset("someone/tiny", streaming=streaming, limit=2)
    assert time.perf_counter() - started < 5
    assert documents == [Document("tiny:1", TEXTS[0]), Document("tiny:3", TEXTS[1])]


def test_the_hub_probe_names_why_it_gets_no_answer():
    assert hub_unreachable(timeout=1) == "[Errno 111] Connection refused"


def test_without_the_datasets_package_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    datasets.Dataset.from_dict(ROWS).save_to_disk(tmp_path / "rows")
    monkeypatch.setitem(sys.modules, "datasets", None)
    assert error_of(read_saved_dataset, tmp_path / "rows") == (
        "reading Hugging Face datasets needs the datasets package: pip install 'memrisk[hf]'"
    )


# --- config ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dataset", "message"), [
    ({"path": "a.jsonl", "hf": "x/y"}, "dataset 'd' needs exactly one of 'path', 'documents' or 'hf' (got path and hf)"),
    ({"documents": ["t"], "hf": "x/y"}, "dataset 'd' needs exactly one of 'path', 'documents' or 'hf' (got documents and hf)"),
    ({"path": "a", "revision": "v1", "streaming": True}, "dataset 'd': revision and streaming apply only to 'hf' datasets"),
    ({"path": "a", "config": "en"}, "dataset 'd': config applies only to 'hf' datasets"),
    ({"documents": ["t"], "split": "test"}, "dataset 'd': split applies only to 'hf' datasets and save_to_disk folders"),
    ({"hf": "x/y", "format": "jsonl"}, "dataset 'd': format applies only to 'path' files; datasets reads an 'hf' dataset's own"),
])
def test_dataset_sources_are_validated(dataset, message):
    with pytest.raises(MemriskError) as info:
        validated(DatasetConfig, {"name": "d"} | dataset, "dataset")
    assert str(info.value) == f"invalid dataset: config: {message}"


def test_an_hf_folder_is_resolved_against_the_config_folder_and_a_hub_id_left_as_it_is(tmp_path):
    hub_folder(tmp_path / "rows", ROWS)
    config = parse_config({"model": {"name": "m"}, "datasets": [
        {"name": "local", "hf": "rows"}, {"name": "hub", "hf": "someone/rows", "split": "test", "revision": "v1"},
    ]}, tmp_path)
    assert [d.hf for d in config.datasets] == [str(tmp_path / "rows"), "someone/rows"]


def test_a_file_dataset_keeps_its_identity_from_before_hub_datasets(tmp_path):
    """The Hugging Face keys left unset are not part of a run's identity, so older run folders still resume."""
    assert set(DatasetConfig(name="d", path="a.txt").identity()) == {
        "name", "path", "documents", "format", "text_field", "id_field", "role", "limit", "duplicates", "near_duplicates",
    }
    hub = DatasetConfig(name="d", hf="x/y", revision="abc", streaming=True).identity()
    assert (hub["hf"], hub["revision"], hub["streaming"]) == ("x/y", "abc", True) and "config" not in hub
