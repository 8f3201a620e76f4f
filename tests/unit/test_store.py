"""Unit tests of memrisk.store: the record store's shards and manifest, refusals, the request log."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrisk.errors import MemriskError
from memrisk.store import (
    RecordStore,
    RequestLog,
    config_fingerprint,
    refuse_changed_settings,
    remove_temporary_files,
    setting_changes,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
)


def shard_names(root):
    return sorted(p.name for p in (root / "records").glob("*"))


# --- config_fingerprint ----------------------------------------------------------------------


def test_fingerprint_is_the_sha256_of_the_sorted_json():
    want = hashlib.sha256(b'{"a": 1, "b": [2, "x"]}').hexdigest()
    assert config_fingerprint({"b": [2, "x"], "a": 1}) == want


@settings(max_examples=50)
@given(st.dictionaries(st.text(max_size=4), json_values, max_size=5))
def test_fingerprint_does_not_depend_on_key_order(mapping):
    assert config_fingerprint(dict(reversed(list(mapping.items())))) == config_fingerprint(mapping)


# --- RecordStore.open, append, read -----------------------------------------------------------


def test_open_on_a_new_folder_writes_the_config_and_an_empty_manifest(tmp_path):
    root = tmp_path / "run"
    RecordStore.open(root, {"b": 1, "a": "café"}, {"x": 1})
    assert sorted(p.name for p in root.iterdir()) == ["config.yaml", "manifest.json"]
    assert (root / "config.yaml").read_text(encoding="utf-8") == "b: 1\na: café\n"  # key order kept, unicode as is
    assert json.loads((root / "manifest.json").read_text()) == {
        "config_fingerprint": config_fingerprint({"x": 1}), "identity": {"x": 1}, "shards": [], "rows": 0,
    }


def test_append_numbers_shards_and_counts_rows(tmp_path):
    store = RecordStore.open(tmp_path, {}, {})
    store.append([{"example_id": "a"}, {"example_id": "b"}])
    store.append([])  # no rows: no shard, manifest unchanged
    store.append([{"example_id": "c"}])
    assert shard_names(tmp_path) == ["part-00000.parquet", "part-00001.parquet"]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["shards"] == ["part-00000.parquet", "part-00001.parquet"] and manifest["rows"] == 3
    assert store.done_ids == {"a", "b", "c"}
    assert store.read_records().column("example_id").to_pylist() == ["a", "b", "c"]


def test_read_records_fills_columns_a_shard_lacks_with_nulls(tmp_path):
    store = RecordStore.open(tmp_path, {}, {})
    store.append([{"example_id": "a", "x": 1}])
    store.append([{"example_id": "b", "y": "s"}])
    assert store.read_records().to_pylist() == [
        {"example_id": "a", "x": 1, "y": None},
        {"example_id": "b", "x": None, "y": "s"},
    ]


def test_a_store_without_shards_reads_as_an_empty_table(tmp_path):
    store = RecordStore.open(tmp_path, {}, {})
    assert (store.read_records().num_rows, store.read_records().num_columns) == (0, 0)
    assert store.done_ids == set()


def test_a_reopened_store_resumes_its_shards(tmp_path):
    RecordStore.open(tmp_path, {}, {"k": 1}).append([{"example_id": "a"}])
    again = RecordStore.open(tmp_path, {}, {"k": 1})
    assert again.done_ids == {"a"}
    again.append([{"example_id": "b"}])
    assert RecordStore.existing(tmp_path).manifest["shards"] == ["part-00000.parquet", "part-00001.parquet"]


def test_a_shard_number_after_a_dropped_middle_shard_is_not_reused(tmp_path):
    """Shards 0, 1, 2; shard 1 damaged is dropped on reopen; the next shard is one past the largest kept (3)."""
    store = RecordStore.open(tmp_path, {}, {})
    for ids in (["a"], ["b", "c"], ["d"]):
        store.append([{"example_id": i} for i in ids])
    (tmp_path / "records" / "part-00001.parquet").write_bytes(b"PAR1 damaged")
    again = RecordStore.open(tmp_path, {}, {})
    assert again.manifest["shards"] == ["part-00000.parquet", "part-00002.parquet"] and again.manifest["rows"] == 2
    assert again.done_ids == {"a", "d"}
    again.append([{"example_id": "b"}])
    assert again.manifest["shards"][-1] == "part-00003.parquet"
    assert shard_names(tmp_path) == ["part-00000.parquet", "part-00002.parquet", "part-00003.parquet"]


def test_open_removes_uncommitted_shards_and_temporary_files(tmp_path):
    store = RecordStore.open(tmp_path, {}, {})
    store.append([{"example_id": "a"}])
    pq.write_table(pa.table({"example_id": ["ghost"]}), tmp_path / "records" / "part-00001.parquet")  # written, never committed
    (tmp_path / "records" / ".part-00002.parquet.x1.tmp").write_bytes(b"half")
    again = RecordStore.open(tmp_path, {}, {})
    assert shard_names(tmp_path) == ["part-00000.parquet"]
    assert again.done_ids == {"a"}


def test_force_discards_the_records_and_the_old_settings(tmp_path):
    store = RecordStore.open(tmp_path, {"v": 1}, {"v": 1})
    store.append([{"example_id": "a"}])
    fresh = RecordStore.open(tmp_path, {"v": 2}, {"v": 2}, force=True)
    assert shard_names(tmp_path) == [] and fresh.manifest["shards"] == [] and fresh.manifest["rows"] == 0
    assert fresh.manifest["identity"] == {"v": 2}
    assert fresh.read_yaml("config.yaml") == {"v": 2}


def test_a_committed_shard_that_is_missing_is_an_error_naming_it(tmp_path):
    store = RecordStore.open(tmp_path, {}, {})
    store.append([{"example_id": "a"}])
    shard = tmp_path / "records" / "part-00000.parquet"
    shard.unlink()
    with pytest.raises(MemriskError) as info:
        store.done_ids
    message = str(info.value)
    assert message.startswith(f"{shard} is damaged (")
    assert message.endswith("); re-run `memrisk run` on this folder to score its examples again")


def test_open_accepts_an_identity_the_fingerprint_accepts(tmp_path):
    identity = {"data": tmp_path / "story.txt"}
    RecordStore.open(tmp_path / "run", {}, identity)
    refuse_changed_settings(tmp_path / "run", identity)


# --- RecordStore.existing and the manifest -------------------------------------------------------


def test_existing_refuses_a_file(tmp_path):
    path = tmp_path / "f"
    path.write_text("x")
    with pytest.raises(MemriskError) as info:
        RecordStore.existing(path)
    assert str(info.value) == f"{path} is a file, not a run folder"


@pytest.mark.parametrize("manifest", ["[]", '{"shards": "part-00000.parquet"}', '{"rows": 0}'])
def test_a_manifest_without_a_list_of_shards_is_damaged(tmp_path, manifest):
    (tmp_path / "manifest.json").write_text(manifest)
    with pytest.raises(MemriskError) as info:
        RecordStore.existing(tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'manifest.json'} is damaged (no list of shards); use another --out folder, or --force to start again"
    )


def test_a_manifest_that_is_not_utf8_is_damaged(tmp_path):
    """'{"shards": ["' is 13 bytes, so 0xff is at position 13."""
    (tmp_path / "manifest.json").write_bytes(b'{"shards": ["\xff"]}')
    with pytest.raises(MemriskError, match=r"manifest.json is damaged \('utf-8' codec can't decode byte 0xff in position 13: invalid start byte\); use another --out folder"):
        RecordStore.existing(tmp_path)


# --- write_json / read_json ----------------------------------------------------------------------


def test_write_json_names_non_finite_floats_and_unwraps_numpy_scalars(tmp_path):
    store = RecordStore(tmp_path, {"shards": []})
    data = {
        "inf": float("inf"), "neg": -float("inf"), "nan": float("nan"), "ok": 0.5,
        "nested": [(np.float32(0.25), np.float64("inf")), {"n": np.int64(3)}], 7: True,
    }
    path = store.write_json("a.json", data)
    assert path == tmp_path / "a.json"
    assert store.read_json("a.json") == {
        "inf": "inf", "neg": "-inf", "nan": "nan", "ok": 0.5, "nested": [[0.25, "inf"], {"n": 3}], "7": True,
    }


def test_write_json_is_indented_by_two_with_a_final_newline(tmp_path):
    RecordStore(tmp_path, {"shards": []}).write_json("a.json", {"b": [1], "a": "é"})
    assert (tmp_path / "a.json").read_text(encoding="utf-8") == '{\n  "b": [\n    1\n  ],\n  "a": "\\u00e9"\n}\n'


def test_remove_deletes_a_file_and_ignores_an_absent_one(tmp_path):
    store = RecordStore(tmp_path, {"shards": []})
    store.write_text("a.txt", "x")
    store.remove("a.txt")
    store.remove("a.txt")
    assert list(tmp_path.iterdir()) == []


# --- remove_temporary_files --------------------------------------------------------------------


def test_remove_temporary_files_deletes_only_dot_names_ending_in_tmp_at_any_depth(tmp_path):
    names = [".manifest.json.abc.tmp", "records/.part-00000.parquet.x.tmp", "deep/er/.f.tmp",
             "keep.tmp", ".hidden", "records/part-00000.parquet", ".x.tmp.bak"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    remove_temporary_files(tmp_path)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == [".hidden", ".x.tmp.bak", "keep.tmp", "records/part-00000.parquet"]


# --- refuse_changed_settings and setting_changes ----------------------------------------------------


def test_a_folder_without_a_manifest_is_never_refused(tmp_path):
    assert refuse_changed_settings(tmp_path, {"anything": 1}) is None


def test_the_same_identity_is_not_refused_whatever_its_key_order(tmp_path):
    RecordStore.open(tmp_path, {}, {"a": 1, "b": 2})
    assert refuse_changed_settings(tmp_path, {"b": 2, "a": 1}) is None


def test_a_changed_setting_is_refused_naming_old_and_new(tmp_path):
    RecordStore.open(tmp_path, {}, {"tau_min": 0.001, "model": {"name": "a"}})
    with pytest.raises(MemriskError) as info:
        refuse_changed_settings(tmp_path, {"tau_min": 0.01, "model": {"name": "a"}})
    assert str(info.value) == (
        f"{tmp_path} holds a run made with different settings: tau_min: 0.001 → 0.01. Use another --out folder, "
        "or --force to discard its records and start again"
    )


def test_a_refused_open_changes_nothing_in_the_folder(tmp_path):
    """The refusal comes before the cleanup: leftovers of the other run stay for it to resume."""
    RecordStore.open(tmp_path, {}, {"v": 1}).append([{"example_id": "a"}])
    (tmp_path / "records" / ".part-00001.parquet.x.tmp").write_bytes(b"half")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    with pytest.raises(MemriskError, match="v: 1 → 2"):
        RecordStore.open(tmp_path, {}, {"v": 2})
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def test_a_manifest_without_stored_identity_is_refused_without_a_list_of_changes(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"config_fingerprint": "old", "shards": []}))
    with pytest.raises(MemriskError) as info:
        refuse_changed_settings(tmp_path, {"v": 1})
    assert str(info.value) == (
        f"{tmp_path} holds a run made with different settings. Use another --out folder, "
        "or --force to discard its records and start again"
    )


def test_setting_changes_of_removed_keys_scalar_lists_and_type_changes():
    """A list of scalars is one setting; a mapping replaced by a scalar is one change."""
    assert setting_changes({"gone": 1, "m": ["a", "b"], "t": {"x": 1}}, {"m": ["a", "c"], "t": 2}) == [
        "gone: 1 → '(unset)'",
        "m: ['a', 'b'] → ['a', 'c']",
        "t: {'x': 1} → 2",
    ]


def test_setting_changes_descends_lists_of_mappings_at_any_depth():
    old = {"p": [{"q": [{"r": 1}, {"r": 2}]}]}
    new = {"p": [{"q": [{"r": 1}, {"r": 5}]}]}
    assert setting_changes(old, new) == ["p[0].q[1].r: 2 → 5"]


def test_setting_changes_cuts_long_values_to_60_characters():
    """repr of 70 a's is 72 characters: its first 59 ("'" and 58 a's) and '…' are shown."""
    assert setting_changes({"k": "a" * 70}, {"k": "b"}) == ["k: '" + "a" * 58 + "… → 'b'"]


@given(json_values)
def test_setting_changes_of_a_value_with_itself_is_empty(value):
    assert setting_changes(value, value) == []


@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 3), max_size=6),
       st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 3), max_size=6))
def test_setting_changes_names_exactly_the_differing_keys_of_flat_mappings(old, new):
    changed = [line.split(":")[0] for line in setting_changes(old, new)]
    assert changed == sorted(k for k in set(old) | set(new) if old.get(k, "unset") != new.get(k, "unset"))


# --- RequestLog ------------------------------------------------------------------------------------


def test_a_new_log_creates_its_folder_and_has_no_entries(tmp_path):
    log = RequestLog(tmp_path / "a" / "b" / "requests.jsonl")
    assert (tmp_path / "a" / "b").is_dir() and not log.path.exists()
    assert log.entries() == []


def test_append_writes_one_line_of_json_per_entry_keeping_unicode(tmp_path):
    log = RequestLog(tmp_path / "r.jsonl")
    log.append({"text": "café", "cost": float("inf")})
    log.append({"n": np.int64(2)})
    assert log.path.read_text(encoding="utf-8") == '{"text": "café", "cost": "inf"}\n{"n": 2}\n'
    assert log.entries() == [{"text": "café", "cost": "inf"}, {"n": 2}]


def test_entries_skip_blank_lines_and_number_damaged_lines_as_in_the_file(tmp_path):
    """The blank line 2 is skipped but counted, so the bad line is line 3."""
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n\n  \n{"b": 2}\n', encoding="utf-8")
    assert RequestLog(path).entries() == [{"a": 1}, {"b": 2}]
    path.write_text('{"a": 1}\n\n{bad\n', encoding="utf-8")
    with pytest.raises(MemriskError, match=r"r.jsonl line 3 is damaged \("):
        RequestLog(path).entries()


def test_a_torn_only_line_leaves_an_empty_log(tmp_path, caplog):
    """No newline at all: the whole 8-byte file is the torn line."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"a": 1}')
    with caplog.at_level("WARNING", logger="memrisk.store"):
        log = RequestLog(path)
    assert path.read_bytes() == b"" and log.entries() == []
    assert "dropped a torn last line (8 bytes)" in caplog.text


def test_a_log_ending_in_a_newline_is_left_as_it_is(tmp_path, caplog):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"a": 1}\n')
    with caplog.at_level("WARNING", logger="memrisk.store"):
        RequestLog(path)
    assert path.read_bytes() == b'{"a": 1}\n' and caplog.text == ""


def test_the_torn_line_size_is_counted_in_bytes(tmp_path, caplog):
    """'{"t": "é' is 8 characters and 9 bytes ('é' is two bytes in UTF-8)."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"a": 1}\n' + '{"t": "é'.encode())
    with caplog.at_level("WARNING", logger="memrisk.store"):
        log = RequestLog(path)
    assert "dropped a torn last line (9 bytes)" in caplog.text
    assert log.entries() == [{"a": 1}]


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_an_entry_holding_a_unicode_line_separator_reads_back(tmp_path, separator):
    log = RequestLog(tmp_path / "r.jsonl")
    log.append({"text": f"one{separator}two"})
    assert log.entries() == [{"text": f"one{separator}two"}]
