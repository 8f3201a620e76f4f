"""Running an experiment config end to end: windows → methods → records → summary."""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from memrisk import layout
from memrisk.config import ExperimentConfig
from memrisk.data.hub import is_saved_dataset, read_hub_dataset, read_saved_dataset
from memrisk.data.sources import Document, read_documents
from memrisk.data.windows import Example, WindowSet, make_windows
from memrisk.lock import locked_folder
from memrisk.methods import Chunk, configured
from memrisk.methods.base import TEACHER_FORCING, wall_time_column
from memrisk.methods.shared import SharedPasses
from memrisk.models.backend import LanguageModel, load_model
from memrisk.models.memory import auto_batch_size, halving_on_oom
from memrisk.store import RecordStore, refuse_changed_settings
from memrisk.summary import summarize, with_settings
from memrisk.version import __version__



def load_documents(config: ExperimentConfig, *, corpus: bool = False) -> dict[str, list[Document]]:
    """Documents of every dataset in the config (inline, from files or save_to_disk folders, or Hugging Face datasets);
    with `corpus`, also the training corpus's under `corpus:NAME` (a run counts in it; a dry run leaves it unread)."""
    out = {}
    for key, dataset in config.document_sources(corpus):
        rows = {"text_field": dataset.text_field, "id_field": dataset.id_field, "limit": dataset.limit}
        if dataset.documents is not None:
            docs = [Document(f"{dataset.name}:{i}", text) for i, text in enumerate(dataset.documents)]
        elif dataset.hf is not None:
            docs = read_hub_dataset(
                dataset.hf, config=dataset.config, split=dataset.split, revision=dataset.revision, streaming=dataset.streaming, **rows
            )
        elif dataset.split is not None or is_saved_dataset(dataset.path):
            docs = read_saved_dataset(dataset.path, split=dataset.split, **rows)
        else:
            docs = read_documents(dataset.path, dataset.format, dataset.text_field, dataset.id_field)
        out[key] = docs[: dataset.limit] if dataset.limit else docs
    return out


def data_digests(documents: dict[str, list[Document]]) -> dict[str, str]:
    """SHA-256 of each dataset's documents as read (ids and texts): an edited data file changes the run's settings."""
    return {
        name: hashlib.sha256(json.dumps([[d.doc_id, d.text] for d in docs], ensure_ascii=False).encode("utf-8")).hexdigest()
        for name, docs in documents.items()
    }


def run_identity(config: ExperimentConfig, documents: dict[str, list[Document]]) -> dict[str, Any]:
    """What a resumed run must share with the records already stored: the settings that change
    results and the content of every dataset."""
    return config.identity() | {"dataset_sha256": data_digests(documents)}


def build_examples(
    config: ExperimentConfig, lm: LanguageModel, documents: dict[str, list[Document]]
) -> tuple[list[Example], dict[str, Any]]:
    """All examples of the run and, per dataset, what windowing skipped or de-duplicated."""
    examples, info = [], {}
    for dataset in config.scored_datasets():
        windows: WindowSet = make_windows(lm, documents[dataset.name], **config.windows.model_dump())
        examples += [Example(dataset.name, dataset.role, w) for w in windows.windows]
        info[dataset.name] = {
            "role": dataset.role,
            "documents": windows.documents,
            "windows": len(windows.windows),
            "skipped_short_documents": len(windows.skipped_short),
            "duplicate_windows_removed": windows.duplicates_removed,
        }
    return examples, info


def versions(lm: LanguageModel) -> dict[str, Any]:
    """Software and model provenance saved next to the records."""
    import torch
    import transformers

    return {
        "memrisk": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "model": lm.describe(),
    }


def base_record(lm: LanguageModel, example: Example, scores: Any, i: int) -> dict[str, Any]:
    """The columns every record has: where the window is, its tokens and text, and teacher forcing's ranks."""
    w = example.window
    return {
        "example_id": example.example_id,
        "dataset": example.dataset,
        "role": example.role,
        "doc_id": w.doc_id,
        "char_start": w.char_start,
        "suffix_char_start": w.suffix_char_start,
        "char_end": w.char_end,
        "prefix_ids": list(w.prefix_ids),
        "suffix_ids": list(w.suffix_ids),
        "prefix_text": lm.decode(w.prefix_ids),
        "suffix_text": lm.decode(w.suffix_ids),
        "target_ranks": scores.ranks[i].tolist(),
        "teacher_forced_greedy": bool(scores.argmax_match[i]),
    }


def score_examples(
    config: ExperimentConfig, lm: LanguageModel, examples: Sequence[Example], setups: dict[str, Any] | None = None,
    passes: SharedPasses | None = None,
) -> list[dict[str, Any]]:
    """Run the configured methods on a batch of examples and return one record per example.

    Each record also gets the chunk's wall time per method (`seconds.<method>`, and `seconds.teacher_forcing`
    for the shared teacher-forcing pass) divided evenly among its windows: the methods work on the whole batch.
    In a study, `passes` holds what other cells computed for the same windows and settings (reused, with its time).
    """
    methods = configured(config)
    chunk = Chunk(config, lm, examples, setups or {}, passes or SharedPasses(), moments=any(m.reads_moments for m in methods),
                  read_policies=tuple(p for m in methods for p in m.reads_policies))
    scores, seconds_tf = chunk.teacher_forcing
    records = [base_record(lm, example, scores, i) for i, example in enumerate(examples)]
    seconds = {TEACHER_FORCING: seconds_tf}
    for method in methods:
        columns, seconds[method.name] = chunk.method_columns(method)
        for record, values in zip(records, columns):
            record |= values
    for record in records:
        record |= {wall_time_column(name): elapsed / len(examples) for name, elapsed in seconds.items()}
    return records


def chunks(items: Sequence[Example], size: int) -> Iterator[Sequence[Example]]:
    """Consecutive chunks of at most `size` items."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass(frozen=True)
class Plan:
    """Everything settled before the first record: the examples, what windowing did, the
    methods' run-level setups (the prior-aware bank) and the provenance of the model that made them."""

    examples: list[Example]
    window_info: dict[str, Any]
    setups: dict[str, Any]
    versions: dict[str, Any]


def load_run_model(config: ExperimentConfig) -> LanguageModel:
    """The config's model, loaded as it asks; `batch_size: auto` is sized by the device's free memory.

    `threads` pins the CPU threads of this process: float sums are bitwise reproducible only
    between runs with the same thread count.
    """
    m = config.model
    if m.threads is not None:
        torch.set_num_threads(m.threads)
    lm = load_model(
        m.name, revision=m.revision, dtype=m.dtype, device=m.device, gguf_file=m.gguf_file,
        batch_size=1 if m.batch_size == "auto" else m.batch_size, attention=m.attention, compile=m.compile,
        device_map=m.device_map, matmul=m.matmul, prefix_cache=m.prefix_cache,
    )
    if m.batch_size == "auto":
        lm.batch_size = fitting_batch_size(config, lm)
    return lm


def fitting_batch_size(config: ExperimentConfig, lm: LanguageModel) -> int:
    """The largest batch every configured method fits in free memory (CBS holds a beam of rows per sequence)."""
    w = config.windows
    longest = max(w.prefix_length, config.prior_aware.prefix_length or 0) + w.suffix_length + 1
    size = auto_batch_size(lm, sequence_length=longest, scored_positions=w.suffix_length + 1)
    for method in configured(config):
        rows = method.rows_per_sequence(config)
        if rows > 1:
            size = min(size, auto_batch_size(lm, sequence_length=longest, scored_positions=1, rows_per_sequence=rows))
    return size


def plan_run(config: ExperimentConfig, lm: LanguageModel, documents: dict[str, list[Document]]) -> Plan:
    """Cut the documents into examples and settle each method's run-level setup (the prior-aware bank and thresholds)."""
    examples, window_info = build_examples(config, lm, documents)
    setups = {method.name: method.prepare(config, lm, documents) for method in configured(config)}
    return Plan(examples, window_info, {name: setup for name, setup in setups.items() if setup is not None}, versions(lm))


def open_run_store(
    config: ExperimentConfig, out_dir: str | Path, plan: Plan, identity: dict[str, Any], *, force: bool = False
) -> RecordStore:
    """Open (or resume) the run folder and write what the plan settled next to the records."""
    store = RecordStore.open(out_dir, config.model_dump(mode="json"), identity, force=force)
    store.write_json(layout.VERSIONS, plan.versions)
    store.write_json(layout.WINDOWS, plan.window_info)
    for name, info in setup_infos(config, plan).items():
        store.write_json(layout.setup_file(name), info)
    return store


def pending_chunks(config: ExperimentConfig, plan: Plan, store: RecordStore) -> list[Sequence[Example]]:
    """The chunks of examples not yet in the store, in run order (one shard each)."""
    done = store.done_ids
    return list(chunks([e for e in plan.examples if e.example_id not in done], config.shard_size))


def setup_infos(config: ExperimentConfig, plan: Plan) -> dict[str, dict[str, Any]]:
    """What each method's setup settled, by method name, as saved next to the records."""
    infos = {m.name: m.setup_info(plan.setups[m.name]) for m in configured(config) if m.name in plan.setups}
    return {name: info for name, info in infos.items() if info is not None}


def score_chunk(
    config: ExperimentConfig, lm: LanguageModel, chunk: Sequence[Example], setups: dict[str, Any], passes: SharedPasses | None = None
) -> list[dict[str, Any]]:
    """Records of one chunk; on out-of-memory the batch is halved and the chunk redone."""
    return halving_on_oom(lm, lambda: score_examples(config, lm, chunk, setups, passes))


def finish_run(config: ExperimentConfig, plan: Plan, store: RecordStore) -> dict[str, Any]:
    """Summarize the stored records into `summary.json` and return the summary."""
    summary = with_settings(summarize(store.read_records(), config, plan.window_info), setup_infos(config, plan))
    store.write_json(layout.SUMMARY, summary)
    return summary


def run_experiment(
    config: ExperimentConfig,
    out_dir: str | Path,
    *,
    model: LanguageModel | None = None,
    force: bool = False,
    progress: bool = True,
    passes: SharedPasses | None = None,
) -> dict[str, Any]:
    """Run (or resume) an experiment into `out_dir` and return its summary.

    The folder is locked for this process; a resume under changed settings is refused before
    the model loads; everything that can fail on bad input (model, data, windows) is checked
    before the first file is written.
    """
    documents = load_documents(config, corpus=True)
    identity = run_identity(config, documents)
    with locked_folder(out_dir):
        if not force:
            refuse_changed_settings(Path(out_dir), identity)
        lm = model or load_run_model(config)
        plan = plan_run(config, lm, documents)
        store = open_run_store(config, out_dir, plan, identity, force=force)
        todo = pending_chunks(config, plan, store)
        remaining = sum(len(chunk) for chunk in todo)
        bar = tqdm(total=len(plan.examples), initial=len(plan.examples) - remaining, desc="examples", unit="ex", disable=not progress)
        for chunk in todo:
            store.append(score_chunk(config, lm, chunk, plan.setups, passes))
            bar.update(len(chunk))
        bar.close()
        return finish_run(config, plan, store)

