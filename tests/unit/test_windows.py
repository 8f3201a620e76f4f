"""Reading documents and cutting them into windows (doc mode and book mode)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memrisk import MemriskError
from memrisk.data import Document, make_windows, read_documents

TEXT = "the quick brown fox jumps over the lazy dog and the cat sat on the mat while a bird sang in the tree"


def test_doc_mode_takes_first_a_plus_t_tokens(word_model) -> None:
    ids = word_model.encode(TEXT)
    result = make_windows(word_model, [Document("d", TEXT)], mode="doc", prefix_length=4, suffix_length=3)
    [w] = result.windows
    assert list(w.prefix_ids + w.suffix_ids) == ids[:7]
    assert (w.char_start, w.suffix_char_start) == (0, TEXT.index("jumps"))
    assert TEXT[w.char_start : w.char_end] == "the quick brown fox jumps over the"


def test_short_documents_are_skipped_and_counted(word_model) -> None:
    docs = [Document("long", TEXT), Document("short", "the cat sat")]
    result = make_windows(word_model, docs, prefix_length=4, suffix_length=3)
    assert result.skipped_short == ["short"] and len(result.windows) == 1
    with pytest.raises(MemriskError, match="no window of 7 tokens"):
        make_windows(word_model, [Document("short", "the cat sat")], prefix_length=4, suffix_length=3)


def test_book_mode_strides_over_characters_and_maps_spans(word_model) -> None:
    result = make_windows(word_model, [Document("book", TEXT)], mode="book", prefix_length=3, suffix_length=2, stride=10)
    ids, spans = word_model.encode_with_offsets(TEXT)
    starts = [w.char_start for w in result.windows]
    assert starts[0] == 0 and starts == sorted(starts)
    for w in result.windows:
        first = [s for s, _ in spans].index(w.char_start)
        assert list(w.prefix_ids + w.suffix_ids) == ids[first : first + 5]
        assert TEXT[w.suffix_char_start : w.char_end].split() == [word_model.decode([t]) for t in w.suffix_ids]
    token_starts, expected = [s for s, _ in spans], []
    for char in range(0, len(TEXT), 10):
        first = next(i for i, s in enumerate(token_starts) if s >= char)
        if first + 5 > len(ids):
            break
        if token_starts[first] not in expected:
            expected.append(token_starts[first])
    assert starts == expected


def test_identical_windows_are_kept_once(word_model) -> None:
    text = "the cat sat on the mat the cat sat on the mat the cat sat on the mat"
    result = make_windows(word_model, [Document("a", text), Document("b", text)], mode="book", prefix_length=2, suffix_length=2, stride=1)
    contents = [w.prefix_ids + w.suffix_ids for w in result.windows]
    assert len(contents) == len(set(contents)) == 6
    assert result.duplicates_removed > 0


def test_invalid_window_settings(word_model) -> None:
    doc = [Document("d", TEXT)]
    with pytest.raises(MemriskError, match="mode"):
        make_windows(word_model, doc, mode="chapter")
    with pytest.raises(MemriskError, match="stride"):
        make_windows(word_model, doc, mode="book", stride=0)
    with pytest.raises(MemriskError, match="suffix_length"):
        make_windows(word_model, doc, suffix_length=0)


def test_sources_txt_jsonl_parquet(tmp_path) -> None:
    (tmp_path / "a.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"body": t, "id": i}) for i, t in enumerate(["x y", "z"])) + "\n")
    pq.write_table(pa.table({"text": ["p", "q", None]}), tmp_path / "c.parquet")
    assert read_documents(tmp_path / "a.txt") == [Document("a", TEXT)]
    assert read_documents(tmp_path / "b.jsonl", text_field="body", id_field="id") == [Document("0", "x y"), Document("1", "z")]
    assert [d.text for d in read_documents(tmp_path / "c.parquet")] == ["p", "q"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.txt", b"", "contains no text"),
        ("blank.txt", b"  \n\n", "contains no text"),
        ("latin1.txt", "caf\u00e9".encode("latin-1"), "not valid UTF-8"),
        ("bad.jsonl", b'{"text": "ok"}\nnot json\n', "bad.jsonl, line 2: not valid JSON"),
        ("field.jsonl", b'{"body": "ok"}\n', "no string field 'text'"),
        ("broken.parquet", b"PAR1 nonsense", "not a readable Parquet"),
    ],
)
def test_bad_files_give_clear_errors(tmp_path, name: str, content: bytes, message: str) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(MemriskError, match=message):
        read_documents(tmp_path / name)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(MemriskError, match="not found"):
        read_documents(tmp_path / "nope.txt")


def test_limit_keeps_the_first_windows_across_documents(word_model) -> None:
    docs = [Document("a", TEXT), Document("b", " ".join(reversed(TEXT.split())))]
    every = make_windows(word_model, docs, mode="book", prefix_length=3, suffix_length=2, stride=10)
    for limit in (1, 3, len(every.windows), len(every.windows) + 5):
        first = make_windows(word_model, docs, mode="book", prefix_length=3, suffix_length=2, stride=10, limit=limit)
        assert first.windows == every.windows[:limit]
    assert {w.doc_id for w in every.windows} == {"a", "b"}
