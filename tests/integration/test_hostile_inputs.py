"""Hostile input, one row each: the CLI prints exactly one `memrisk: error:` line naming the problem,
exits with status 2, prints no traceback and leaves the test folder as it found it (a fresh --out
is not created)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import huggingface_hub.constants
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import memrisk
from memrisk import cli
from memrisk.config import load_config
from memrisk.runner import run_experiment
from tests.integration.test_run import write_config

Builder = Callable[[Path, memrisk.LanguageModel], None]
RUN = ("run", "{config}", "--out", "{out}")
BOOKS_RUN = ("books", "run", "{tmp}/books.yaml", "--out", "{out}")
AS_ROOT = pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads a file of mode 000")


@dataclass(frozen=True)
class Hostile:
    """One bad input: CLI arguments, the files to make first and the text its one error line holds.

    `config` overrides the experiment YAML of `write_config` ({tmp}/exp.yaml; None: none written);
    `files` maps paths under the test folder to bytes, text or a builder `(path, word_model)`;
    `env` sets variables (None: unset). "{tmp}", "{config}", "{out}" and "{model}" in arguments,
    config strings and file contents stand for the test folder, exp.yaml, the output folder and the
    saved tiny model.
    """

    id: str
    message: str
    config: dict[str, Any] | None = field(default_factory=dict)
    files: dict[str, bytes | str | Builder] = field(default_factory=dict)
    args: tuple[str, ...] = RUN
    env: dict[str, str | None] = field(default_factory=dict)
    status: int = 2
    marks: tuple[Any, ...] = ()


def folder(path: Path, lm: memrisk.LanguageModel) -> None:
    """An empty folder."""
    path.mkdir()


def unreadable(path: Path, lm: memrisk.LanguageModel) -> None:
    """A config file of mode 000."""
    path.write_text("model: {name: x}\n", encoding="utf-8")
    path.chmod(0)


def symlink_loop(path: Path, lm: memrisk.LanguageModel) -> None:
    """A link to itself: unreadable to root too."""
    path.symlink_to(path.name)


def parquet_without_text(path: Path, lm: memrisk.LanguageModel) -> None:
    """A Parquet file whose text sits in a column named `body`."""
    pq.write_table(pa.table({"body": ["the quick brown fox"] * 3}), path)


def model_without_tokenizer(path: Path, lm: memrisk.LanguageModel) -> None:
    """A model folder holding the weights and config only."""
    lm.model.save_pretrained(path)


def tokenizer_folder(backend: Tokenizer) -> Builder:
    """A model folder whose tokenizer is `backend` (whitespace pre-tokenizer)."""

    def build(path: Path, lm: memrisk.LanguageModel) -> None:
        backend.pre_tokenizer = pre_tokenizers.Whitespace()
        lm.model.save_pretrained(path)
        PreTrainedTokenizerFast(tokenizer_object=backend).save_pretrained(path)

    return build


def books_yaml(**model: Any) -> Builder:
    """A books-run config over {tmp}/book.txt (written too); `model` overrides its model settings."""

    def build(path: Path, lm: memrisk.LanguageModel) -> None:
        (path.parent / "book.txt").write_text(" ".join(["once upon a time there was a book"] * 20), encoding="utf-8")
        config = {"model": {"name": "gpt-4.1", "api_key_env": "MEMRISK_TEST_ABSENT_KEY"} | model,
                  "books": [{"name": "book", "path": "book.txt"}], "spend_cap_usd": 1.0}
        path.write_text(yaml.safe_dump(config), encoding="utf-8")

    return build


FINISHED: dict[str, Path] = {}


def finished_run(damage: Callable[[Path], None]) -> Builder:
    """A run folder of exp.yaml on the tiny model (scored once per session, in pytest's temporary
    folder of the session, then copied), damaged by `damage`."""

    def build(path: Path, lm: memrisk.LanguageModel) -> None:
        if "run" not in FINISHED:
            FINISHED["run"] = path.parents[1] / "hostile-finished-run"
            run_experiment(load_config(path.parent / "exp.yaml"), FINISHED["run"], model=lm, progress=False)
        shutil.copytree(FINISHED["run"], path)
        damage(path)

    return build


def truncate_part(run: Path) -> None:
    """Cut the second shard in half, as a full disk would."""
    part = run / "records" / "part-00001.parquet"
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])


def empty_part(run: Path) -> None:
    (run / "records" / "part-00001.parquet").write_bytes(b"")


def garble_manifest(run: Path) -> None:
    (run / "manifest.json").write_text('{"config_fingerprint": "ab', encoding="utf-8")


def dataset(path: str, **settings: Any) -> dict[str, Any]:
    """Config overrides with a single dataset read from `path`."""
    return {"datasets": [{"name": "d", "path": path} | settings]}


def local_model(name: str, **settings: Any) -> dict[str, Any]:
    """Config overrides loading the model from folder {tmp}/`name`."""
    return {"model": {"name": f"{{tmp}}/{name}", "batch_size": 4} | settings}


def jsonl(*rows: str) -> str:
    """JSONL text from raw lines."""
    return "\n".join(rows) + "\n"


OK_ROW = json.dumps({"text": "the quick brown fox jumps over the lazy dog"})
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00"

HOSTILE = [
    # the config file
    Hostile("config-missing", "config file not found", None, args=("run", "{tmp}/nope.yaml", "--out", "{out}")),
    Hostile("config-is-a-folder", "is a folder, not a YAML file", None, {"exp.yaml": folder}),
    Hostile("config-mode-000", "cannot read config", None, {"exp.yaml": unreadable}, marks=(AS_ROOT,)),
    Hostile("config-symlink-loop", "cannot read config", None, {"exp.yaml": symlink_loop}),
    Hostile("config-yaml-syntax", "not valid YAML: expected <block end>, but found '<block mapping start>' (line 2, column 3)", None,
            {"exp.yaml": "model: {name: x}\n  bad: indent\n"}),
    Hostile("config-not-utf8", "exp.yaml is not UTF-8 text (byte 17)", None, {"exp.yaml": b"model: {name: caf\xe9}\n"}),
    Hostile("config-not-a-mapping", "must hold a mapping of settings", None, {"exp.yaml": "- model\n- datasets\n"}),
    Hostile("unknown-key", "policys: unknown key, did you mean 'policies'?", {"policys": []}),
    Hostile("unknown-nested-key", "cbs.beam_widht: unknown key, did you mean 'beam_width'?", {"cbs": {"beam_widht": 3}}),
    Hostile("unknown-key-in-list", "datasets.0.text_feild: unknown key, did you mean 'text_field'?",
            dataset("story.txt", text_feild="body")),
    Hostile("unknown-policy-key", "policies.0.topk: unknown key, did you mean 'top_k'?", {"policies": [{"topk": 3}]}),
    Hostile("unknown-key-no-match", "zzz: unknown key (allowed: model, datasets, windows, policies", {"zzz": 1}),
    Hostile("wrong-type-int", "windows.prefix_length: Input should be a valid integer", {"windows": {"prefix_length": "ten"}}),
    Hostile("wrong-type-list", "datasets: Input should be a valid list, got 'x'", {"datasets": "x"}),
    Hostile("batch-size", "batch_size must be a positive integer or 'auto', got 'big'", {"model": {"name": "smollm2", "batch_size": "big"}}),
    Hostile("ray-workers", "ray.workers: Input should be greater than or equal to 1", {"ray": {"workers": 0}}),
    # methods and their settings
    Hostile("unknown-method", "methods.0: Input should be 'probabilistic', 'greedy', 'cbs', 'mc', 'prior_aware', 'membership' or 'corpus_counts', got 'telepathy'",
            {"methods": ["telepathy"]}),
    Hostile("cbs-beam-width-0", "cbs.beam_width: Input should be greater than or equal to 1", {"cbs": {"beam_width": 0}}),
    Hostile("cbs-epsilon-negative", "cbs.epsilon: Input should be greater than or equal to 0", {"cbs": {"epsilon": -1}}),
    Hostile("top-k-0", "top_k must be an integer >= 1", {"policies": [{"top_k": 0}]}),
    Hostile("top-p-0", "top_p must be in (0, 1]", {"policies": [{"top_p": 0}]}),
    Hostile("top-p-1.5", "top_p must be in (0, 1]", {"policies": [{"top_p": 1.5}]}),
    Hostile("temperature-0", "temperature must be a finite number > 0", {"policies": [{"temperature": 0}]}),
    Hostile("temperature-negative", "temperature must be a finite number > 0", {"policies": [{"temperature": -1}]}),
    Hostile("tau-min-0", "tau_min: Input should be greater than 0", {"tau_min": 0}),
    Hostile("tau-min-1.5", "tau_min: Input should be less than or equal to 1", {"tau_min": 1.5}),
    Hostile("prior-aware-prefixes-0", "prior_aware.prefixes_per_trial: Input should be greater than or equal to 1",
            {"prior_aware": {"prefixes_per_trial": 0}}),
    Hostile("windows-too-long", "no window of 1000 tokens", {"windows": {"prefix_length": 500, "suffix_length": 500}}),
    # dataset files
    Hostile("data-empty", "contains no text", dataset("d.txt"), {"d.txt": b""}),
    Hostile("data-missing", "data file not found", dataset("absent.txt")),
    Hostile("data-is-a-folder", "is a folder; name a .txt, .jsonl or .parquet file", dataset("d.txt"), {"d.txt": folder}),
    Hostile("data-binary", "d.txt is a binary file, not text (NUL byte at offset 8)", dataset("d.txt"), {"d.txt": PNG}),
    Hostile("data-not-utf8", "not valid UTF-8 (byte 0", dataset("d.txt"), {"d.txt": b"\xff\xfe caf\xe9"}),
    Hostile("jsonl-malformed-line", "d.jsonl, line 3: not valid JSON", dataset("d.jsonl"),
            {"d.jsonl": jsonl(OK_ROW, OK_ROW, '{"text": oops}')}),
    Hostile("jsonl-missing-field", "d.jsonl, line 2: no string field 'text' (keys: body)", dataset("d.jsonl"),
            {"d.jsonl": jsonl(OK_ROW, '{"body": "the quick brown fox"}')}),
    Hostile("jsonl-not-an-object", "d.jsonl, line 1: not a JSON object", dataset("d.jsonl"), {"d.jsonl": jsonl('["the quick"]')}),
    Hostile("parquet-without-text-column", "has no column 'text' (columns: body)", dataset("d.parquet"),
            {"d.parquet": parquet_without_text}),
    Hostile("parquet-not-parquet", "is not a readable Parquet file", dataset("d.parquet"), {"d.parquet": "just text"}),
    # the model
    Hostile("model-hub-name-absent", "could not load model 'no-such-org/no-such-model'", {"model": {"name": "no-such-org/no-such-model"}}),
    Hostile("model-folder-missing", "absent': folder not found", local_model("absent")),
    Hostile("model-without-tokenizer", "bare': the folder has no tokenizer", local_model("bare"), {"bare": model_without_tokenizer}),
    Hostile("tokenizer-encodes-nothing", "encodes every document to no tokens", local_model("lm"),
            {"lm": tokenizer_folder(Tokenizer(models.BPE({"zzz": 0}, [])))}),
    Hostile("tokenizer-fails", "cannot encode the text: WordLevel error", local_model("lm"),
            {"lm": tokenizer_folder(Tokenizer(models.WordLevel({"zzz": 0})))}),
    Hostile("gguf-not-gguf", "gguf': x.gguf is not a GGUF file", local_model("gguf", gguf_file="x.gguf"), {"gguf/x.gguf": "not weights"}),
    Hostile("gguf-missing", "gguf': GGUF file x.gguf not found in the folder", local_model("gguf", gguf_file="x.gguf"), {"gguf": folder}),
    # run folders
    Hostile("out-is-a-file", "the output folder {out} is a file, not a folder", files={"out": "not a folder"}),
    Hostile("out-not-writable", "cannot create the output folder {tmp}/file/out: Not a directory",
            files={"file": "a file"}, args=("run", "{config}", "--out", "{tmp}/file/out")),
    Hostile("report-missing-folder", "{tmp}/absent does not exist", None, args=("report", "{tmp}/absent")),
    Hostile("report-empty-folder", "{out} is not a memrisk run folder (no manifest.json)", None, {"out": folder}, ("report", "{out}")),
    Hostile("report-truncated-part", "{out}/records/part-00001.parquet is damaged", files={"out": finished_run(truncate_part)},
            args=("report", "{out}")),
    Hostile("report-empty-part", "{out}/records/part-00001.parquet is damaged", files={"out": finished_run(empty_part)},
            args=("report", "{out}")),
    Hostile("report-damaged-manifest", "{out}/manifest.json is damaged", files={"out": finished_run(garble_manifest)},
            args=("report", "{out}")),
    Hostile("run-damaged-manifest", "{out}/manifest.json is damaged", files={"out": finished_run(garble_manifest)}),
    # books runs
    Hostile("books-api-key-unset", "environment variable MEMRISK_TEST_ABSENT_KEY is not set", None,
            {"books.yaml": books_yaml()}, BOOKS_RUN, {"MEMRISK_TEST_ABSENT_KEY": None}),
    Hostile("books-unknown-key", "model.api_key: unknown key, did you mean 'api_key_env'?", None,
            {"books.yaml": books_yaml(api_key="sk-oops")}, BOOKS_RUN),
]


def expand(value: Any, names: dict[str, str]) -> Any:
    """`value` with every "{name}" in its strings replaced (recursively in lists and mappings)."""
    if isinstance(value, str):
        for name, text in names.items():
            value = value.replace(f"{{{name}}}", text)
        return value
    if isinstance(value, dict):
        return {k: expand(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, names) for v in value]
    return value


def make_files(row: Hostile, tmp: Path, names: dict[str, str], lm: memrisk.LanguageModel) -> None:
    """The row's config and files under `tmp`."""
    if row.config is not None:
        write_config(tmp, Path(names["model"]), **expand(row.config, names))
    for name, content in row.files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content(path, lm)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(expand(content, names), encoding="utf-8")


def snapshot(tmp: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under `tmp` with its mode, size and modification time (of links themselves; of a
    folder only its mode, since a lock file that came and went changes a folder's time)."""
    def stat(p: Path) -> tuple[int, int, int]:
        s = p.lstat()
        return (s.st_mode, 0, 0) if p.is_dir() and not p.is_symlink() else (s.st_mode, s.st_size, s.st_mtime_ns)

    return {str(p.relative_to(tmp)): stat(p) for p in sorted(tmp.rglob("*"))}


@pytest.mark.parametrize("row", [pytest.param(row, id=row.id, marks=row.marks) for row in HOSTILE])
def test_hostile_input_gives_one_error_line_and_writes_nothing(row: Hostile, tmp_path, model_dir, word_model, capsys, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read once, when the hub client was imported
    for variable, value in row.env.items():
        if value is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, value)
    names = {"tmp": str(tmp_path), "config": str(tmp_path / "exp.yaml"), "out": str(tmp_path / "out"), "model": str(model_dir)}
    make_files(row, tmp_path, names, word_model)
    before = snapshot(tmp_path)
    assert cli.main([expand(arg, names) for arg in row.args]) == row.status
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("memrisk: error:")]
    assert len(errors) == 1, err
    assert expand(row.message, names) in errors[0]
    assert err.rstrip().endswith(errors[0]), "the error is the last thing printed, on one line"
    assert "Traceback" not in out + err
    assert snapshot(tmp_path) == before
