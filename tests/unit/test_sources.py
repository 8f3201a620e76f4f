"""Unit tests of memrisk.data.sources: format detection, txt/JSONL/Parquet reading, ids and error messages."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrisk.data.sources import Document, detect_format, read_documents
from memrisk.errors import MemriskError

FIXTURE_SETTINGS = settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
non_blank = st.text(min_size=1, max_size=30).filter(lambda t: t.strip() and "\x00" not in t)


def error_of(path, **options) -> str:
    with pytest.raises(MemriskError) as info:
        read_documents(path, **options)
    return str(info.value)


@pytest.mark.parametrize(("name", "fmt"), [
    ("a.txt", "txt"), ("a.md", "txt"), ("a", "txt"), ("a.csv", "txt"), ("a.jsonl.txt", "txt"),
    ("a.jsonl", "jsonl"), ("a.json", "jsonl"), ("a.ndjson", "jsonl"), ("A.JSONL", "jsonl"),
    ("a.parquet", "parquet"), ("a.pq", "parquet"), ("a.Parquet", "parquet"),
])
def test_detect_format_goes_by_the_last_suffix_ignoring_case(tmp_path, name, fmt):
    assert detect_format(tmp_path / name) == fmt


# --- plain text ------------------------------------------------------------------------------


def test_a_text_file_is_one_document_named_by_its_stem_and_kept_verbatim(tmp_path):
    """Leading/trailing spaces, blank lines and CRLF are not touched."""
    text = " first line\r\n\r\nsecond \n"
    (tmp_path / "notes.md").write_bytes(text.encode("utf-8"))
    assert read_documents(str(tmp_path / "notes.md")) == [Document("notes", text)]


@FIXTURE_SETTINGS
@given(non_blank)
def test_any_utf8_text_reads_back_exactly(tmp_path, text):
    path = tmp_path / "t.txt"
    path.write_bytes(text.encode("utf-8"))
    assert read_documents(path) == [Document("t", text)]


def test_bytes_that_are_not_utf8_are_named_by_offset_and_value(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"ab\xffcd")
    assert error_of(path) == f"{path} is not valid UTF-8 (byte 2: b'\\xff')"


def test_a_nul_byte_makes_a_jsonl_file_binary_too(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"\x00": 1}\n')
    assert error_of(path) == f"{path} is a binary file, not text (NUL byte at offset 2)"


# --- format option ---------------------------------------------------------------------------


def test_an_explicit_format_overrides_the_suffix(tmp_path):
    (tmp_path / "rows.txt").write_text('{"text": "a b"}\n', encoding="utf-8")
    assert read_documents(tmp_path / "rows.txt", format="jsonl") == [Document("rows:1", "a b")]
    pq.write_table(pa.table({"text": ["p"]}), tmp_path / "table.bin")
    assert read_documents(tmp_path / "table.bin", format="parquet") == [Document("table:0", "p")]
    (tmp_path / "doc.jsonl").write_text('{"text": "a"}\n', encoding="utf-8")
    assert read_documents(tmp_path / "doc.jsonl", format="txt") == [Document("doc", '{"text": "a"}\n')]


def test_an_unknown_format_lists_the_known_ones(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    assert error_of(tmp_path / "a.txt", format="csv") == "unknown data format 'csv'; use one of auto, txt, jsonl, parquet"


def test_a_missing_file_and_a_folder_are_named(tmp_path):
    assert error_of(tmp_path / "absent.jsonl") == f"data file not found: {tmp_path / 'absent.jsonl'}"
    assert error_of(tmp_path) == (
        f"data file {tmp_path} is a folder; name a .txt, .jsonl or .parquet file or a folder written by save_to_disk "
        "(a folder of data files is read with hf: FOLDER)"
    )


# --- JSONL -----------------------------------------------------------------------------------


def test_jsonl_ids_are_the_stem_and_the_1_based_line_counting_blank_lines(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a"}\n\n   \n{"text": "b"}\n', encoding="utf-8")
    assert read_documents(path) == [Document("d:1", "a"), Document("d:4", "b")]


def test_jsonl_with_crlf_line_ends_and_no_final_newline(tmp_path):
    """JSON allows the '\\r' left at each line's end as whitespace."""
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"text": "a"}\r\n{"text": "b"}')
    assert read_documents(path) == [Document("d:1", "a"), Document("d:2", "b")]


def test_jsonl_id_field_is_used_as_text_where_present_else_the_line(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [{"body": "a", "key": 7}, {"body": "b"}, {"body": "c", "key": "x"}]
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    assert read_documents(path, text_field="body", id_field="key") == [Document("7", "a"), Document("d:2", "b"), Document("x", "c")]


def test_jsonl_blank_texts_are_dropped_and_only_blank_texts_are_no_text(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": " "}\n{"text": "kept"}\n{"text": ""}\n', encoding="utf-8")
    assert read_documents(path) == [Document("d:2", "kept")]
    path.write_text('{"text": " \\n "}\n', encoding="utf-8")
    assert error_of(path) == f"{path} contains no text"


def test_an_invalid_json_line_names_line_and_column(tmp_path):
    """In '{"text": oops}' the 'o' is the 10th character: where a JSON value was expected."""
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a"}\n{"text": oops}\n', encoding="utf-8")
    assert error_of(path) == f"{path}, line 2: not valid JSON (Expecting value, column 10)"


def test_a_byte_order_mark_is_an_error_on_line_1(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"text": "a"}\n')
    assert error_of(path) == f"{path}, line 1: not valid JSON (Unexpected UTF-8 BOM (decode using utf-8-sig), column 1)"


@pytest.mark.parametrize(("line", "field", "problem"), [
    ('["a"]', "text", "not a JSON object with a 'text' field"),
    ('"a"', "body", "not a JSON object with a 'body' field"),
    ('{"text": 3, "id": 1}', "text", "no string field 'text' (keys: text, id); set text_field to the one that holds the text"),
    ('{"text": null}', "text", "no string field 'text' (keys: text); set text_field to the one that holds the text"),
    ("{}", "body", "no string field 'body' (keys: none); set text_field to the one that holds the text"),
])
def test_a_row_without_a_string_text_field_is_named(tmp_path, line, field, problem):
    path = tmp_path / "d.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    assert error_of(path, text_field=field) == f"{path}, line 1: {problem}"


@FIXTURE_SETTINGS
@given(st.lists(non_blank, min_size=1, max_size=5))
def test_any_texts_round_trip_through_jsonl(tmp_path, texts):
    """Unescaped U+2028, U+0085 and the like stay inside their line: only '\\n' ends a row."""
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    assert read_documents(path) == [Document(f"d:{i}", t) for i, t in enumerate(texts, 1)]


def test_a_line_separator_inside_a_jsonl_text_does_not_split_the_row(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "one\u2028two\x85three"}\n', encoding="utf-8")
    assert read_documents(path) == [Document("d:1", "one\u2028two\x85three")]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_repeated_id_field_values_do_not_give_repeated_document_ids(tmp_path, fmt):
    rows = {"text": ["first text", "second text"], "id": ["same", "same"]}
    path = tmp_path / f"d.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.table(rows), path)
    else:
        path.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for t, i in zip(rows["text"], rows["id"])))
    try:
        documents = read_documents(path, id_field="id")
    except MemriskError:
        return  # refusing the file is a fix too
    assert len({d.doc_id for d in documents}) == len(documents)


# --- Parquet ---------------------------------------------------------------------------------


def test_parquet_ids_are_the_stem_and_the_0_based_row_skipping_non_strings(tmp_path):
    """Null and blank rows are dropped but keep their place in the numbering."""
    pq.write_table(pa.table({"text": ["p", None, " ", "q"]}), tmp_path / "c.parquet")
    assert read_documents(tmp_path / "c.parquet") == [Document("c:0", "p"), Document("c:3", "q")]


def test_parquet_id_field_values_become_text_ids(tmp_path):
    pq.write_table(pa.table({"body": ["a", "b"], "n": [10, 11]}), tmp_path / "c.parquet")
    assert read_documents(tmp_path / "c.parquet", text_field="body", id_field="n") == [Document("10", "a"), Document("11", "b")]


def test_parquet_without_the_id_column_falls_back_to_row_numbers(tmp_path):
    pq.write_table(pa.table({"text": ["a", "b"]}), tmp_path / "c.parquet")
    assert read_documents(tmp_path / "c.parquet", id_field="absent") == [Document("c:0", "a"), Document("c:1", "b")]


def test_parquet_large_string_column_is_read(tmp_path):
    pq.write_table(pa.table({"text": pa.array(["a", "b"], type=pa.large_string())}), tmp_path / "c.parquet")
    assert [d.text for d in read_documents(tmp_path / "c.parquet")] == ["a", "b"]


def test_parquet_without_the_text_column_lists_its_columns(tmp_path):
    pq.write_table(pa.table({"body": ["a"], "id": [1]}), tmp_path / "c.parquet")
    path = tmp_path / "c.parquet"
    assert error_of(path) == f"{path} has no column 'text' (columns: body, id)"


def test_a_parquet_column_of_numbers_holds_no_text(tmp_path):
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "c.parquet")
    assert error_of(tmp_path / "c.parquet") == f"{tmp_path / 'c.parquet'} contains no text"


def test_a_file_that_is_not_parquet_names_the_reader_error_on_one_line(tmp_path):
    path = tmp_path / "c.parquet"
    path.write_bytes(b"not parquet at all")
    message = error_of(path)
    assert message.startswith(f"{path} is not a readable Parquet file: ") and "\n" not in message
