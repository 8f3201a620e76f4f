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

import memrisk
from memrisk.books.run import SUMMARY as BOOKS_SUMMARY
from memrisk.config import ExperimentConfig, parse_config
from memrisk.data.bank import PrefixBank
from memrisk.data.sources import Document, read_documents
from memrisk.data.windows import Window, WindowSet, make_windows
from memrisk.extraction.cbs import CBSResult, cbs, text_masses
from memrisk.extraction.greedy import greedy_extraction
from memrisk.extraction.prior_aware import (
    PriorAwareResult,
    calibrate,
    default_m,
    prior_aware,
)
from memrisk.extraction.probabilistic import verbatim_scores
from memrisk.lock import locked_folder
from memrisk.models.backend import LanguageModel, load_model
from memrisk.models.memory import auto_batch_size, halving_on_oom
from memrisk.report.books import is_books_run
from memrisk.report.summary import summarize
from memrisk.store import CONFIG, RecordStore, refuse_changed_settings

SUMMARY = "summary.json"
WINDOWS = "windows.json"
PRIOR_AWARE = "prior_aware.json"


@dataclass(frozen=True)
class Example:
    """A window tagged with the dataset and role it came from."""

    dataset: str
    role: str
    window: Window

    @property
    def example_id(self) -> str:
        """Identifier unique across the run's datasets."""
        return f"{self.dataset}/{self.window.example_id}"


@dataclass(frozen=True)
class PriorSetup:
    """What every chunk of a run shares for prior-aware scoring: the bank and the thresholds."""

    bank: PrefixBank
    m: float
    n: float
    info: dict[str, Any]


def prior_setup(config: ExperimentConfig, lm: LanguageModel, documents: dict[str, list[Document]]) -> PriorSetup:
    """Draw the run's prefix bank (seeded) and settle m and n (calibrating n once when asked)."""
    pa = config.prior_aware
    names = pa.bank_datasets or [d.name for d in config.datasets if d.role == "target"] or [d.name for d in config.datasets]
    pool = [Document(f"{name}/{doc.doc_id}", doc.text) for name in names for doc in documents[name]]
    length = pa.prefix_length or config.windows.prefix_length
    bank = PrefixBank.from_documents(lm, pool, length=length, size=pa.prefixes_per_trial * pa.trials, seed=pa.seed)
    m = pa.m if pa.m is not None else default_m(config.windows.suffix_length)
    calibration = None
    if pa.n == "calibrate":
        calibration = calibrate(lm, bank, sequences=pa.generic_sequences, suffix_length=config.windows.suffix_length, trials=pa.trials)
    n = calibration.n if calibration else float(pa.n)
    info = {
        "m": m, "n": n, "n_source": "calibrated" if calibration else "given", "bank": bank.description,
        "bank_datasets": names, "prefixes_per_trial": pa.prefixes_per_trial, "trials": pa.trials,
        "calibration": None if calibration is None else {
            "sequences": list(calibration.sequences), "log_ratios": list(calibration.log_ratios), "log_n": calibration.log_n,
        },
    }
    return PriorSetup(bank, m, n, info)


def prior_aware_record(result: PriorAwareResult) -> dict[str, Any]:
    """Record columns of one prior-aware verdict (natural logs)."""
    return {
        "pa_log_p": result.log_p,
        "pa_log_prior": result.log_prior,
        "pa_log_prior_trials": list(result.log_prior_trials),
        "pa_log_ratio": result.log_ratio,
        "pa_log_ratio_spread": result.log_ratio_spread,
        "pa_prefixes_used": result.prefixes_used,
        "pa_extractable": result.extractable,
        "pa_memorized": result.pa_memorized,
    }


def load_documents(config: ExperimentConfig) -> dict[str, list[Document]]:
    """Documents of every dataset in the config (inline or from files)."""
    out = {}
    for dataset in config.datasets:
        if dataset.documents is not None:
            docs = [Document(f"{dataset.name}:{i}", text) for i, text in enumerate(dataset.documents)]
        else:
            docs = read_documents(dataset.path, dataset.format, dataset.text_field, dataset.id_field)
        out[dataset.name] = docs[: dataset.limit] if dataset.limit else docs
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
    for dataset in config.datasets:
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
        "memrisk": memrisk.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "model": lm.describe(),
    }


def score_examples(
    config: ExperimentConfig, lm: LanguageModel, examples: Sequence[Example], prior: PriorSetup | None = None
) -> list[dict[str, Any]]:
    """Run the configured methods on a batch of examples and return one record per example."""
    prefixes = [list(e.window.prefix_ids) for e in examples]
    suffixes = [list(e.window.suffix_ids) for e in examples]
    labels = [p.label for p in config.policies]
    scores = verbatim_scores(lm, prefixes, suffixes, [p.policy() for p in config.policies])
    greedy = (
        greedy_extraction(lm, prefixes, suffixes, teacher_forced_exact=scores.argmax_match)
        if "greedy" in config.methods
        else None
    )
    bos = 0 if lm.bos_token_id is None else 1
    one_pass = [bos + len(p) + len(s) for p, s in zip(prefixes, suffixes)]  # a + T: prefix ‖ suffix once (CBS App. C.3)
    records = []
    for i, example in enumerate(examples):
        w = example.window
        record: dict[str, Any] = {
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
        if "probabilistic" in config.methods:
            for j, label in enumerate(labels):
                record[f"log_p.{label}"] = float(scores.log_p[i, j])
                record[f"token_log_p.{label}"] = scores.token_log_probs[i, j].tolist()
            record["token_evals.probabilistic"] = one_pass[i]
        if greedy is not None:
            g = greedy[i]
            record |= {
                "greedy_ids": g.continuation,
                "greedy_text": lm.decode(g.continuation),
                "greedy_exact": g.exact,
                "greedy_hamming": g.hamming,
                "greedy_levenshtein": g.levenshtein,
                "token_evals.greedy": one_pass[i] - 1,
            }
        records.append(record)
    if "cbs" in config.methods:
        results = run_cbs(config, lm, prefixes, suffixes)
        for record, result in zip(records, results):
            record |= cbs_record(config, lm, result)
        if config.cbs.text_metrics:
            baseline = results if config.cbs.prune_mode is None else run_cbs(config, lm, prefixes, suffixes, prune=None, tail_closure=False)
            for record, result in zip(records, baseline):
                record |= text_record(config, lm, result, record["suffix_text"], separate=config.cbs.prune_mode is not None)
    if prior is not None:
        own = [f"{e.dataset}/{e.window.doc_id}" for e in examples] if config.prior_aware.exclude_own_document else None
        scores = prior_aware(lm, prefixes, suffixes, prior.bank, prior.m, prior.n, trials=config.prior_aware.trials, documents=own)
        bank_rows = scores.prefixes_per_trial * scores.trials
        for record, result, evals, suffix in zip(records, scores.results, one_pass, suffixes):
            record |= prior_aware_record(result) | {"token_evals.prior_aware": evals + bank_rows * len(suffix)}
    return records


def run_cbs(
    config: ExperimentConfig, lm: LanguageModel, prefixes: list[list[int]], suffixes: list[list[int]], **override: Any
) -> list[CBSResult]:
    """CBS over a chunk of examples with the config's settings (`override`: e.g. prune=None for the baseline)."""
    c = config.cbs
    settings = {
        "beam_width": c.beam_width, "prune": c.prune_mode, "epsilon": c.epsilon,
        "tau_min": config.tau_min if c.tau_min_stop else None, "tighter_levenshtein": c.tighter_levenshtein,
        "tail_closure": c.tail_closure, "max_children": c.max_children, "anchor": c.anchor,
    } | override
    return cbs(lm, prefixes, suffixes, config.cbs_policy().policy(), **settings)


def text_record(config: ExperimentConfig, lm: LanguageModel, baseline: CBSResult, suffix_text: str, *, separate: bool) -> dict[str, Any]:
    """Text-metric columns from the baseline k-CBS candidates (CBS §F.9, Table 15): the mass with
    BLEU ≥ threshold, within each character distance, and within each token Levenshtein ε on the
    same set; `separate` when the baseline was a second, unpruned search (its cost is recorded)."""
    c = config.cbs
    text = text_masses(
        baseline, lm.decode, suffix_text, bleu_threshold=c.bleu_threshold, char_epsilons=c.char_epsilons,
        negligible=config.tau_min * 1e-3,
    )
    columns = {
        "cbs_bleu_mass": text.bleu,
        "cbs_char_levenshtein_mass": [text.char_levenshtein[e] for e in c.char_epsilons],
        "cbs_baseline_lower.levenshtein": [baseline.lower_bound("levenshtein", e) for e in range(c.epsilon + 1)],
    }
    if separate:
        columns["token_evals.cbs_baseline"] = baseline.token_evals
    return columns


def cbs_record(config: ExperimentConfig, lm: LanguageModel, result: CBSResult) -> dict[str, Any]:
    """Record columns of one CBS result: bounds per ε, cost, stop, all masses, top candidates with text."""
    c = config.cbs
    epsilons = range(c.epsilon + 1)
    columns: dict[str, Any] = {}
    for distance in ("levenshtein", "hamming"):
        columns[f"cbs_lower.{distance}"] = [result.lower_bound(distance, e) for e in epsilons]
        columns[f"cbs_upper.{distance}"] = [result.upper_bound(distance, e) for e in epsilons]
    return columns | {
        "cbs_covered_mass": result.covered_mass,
        "cbs_bank": result.bank,
        "cbs_eos_mass": result.eos_mass,
        "token_evals.cbs": result.token_evals + result.closure_token_evals,
        "cbs_stop": result.stop.reason,
        "cbs_stop_step": result.stop.step,
        "cbs_log_p": [cand.log_p for cand in result.candidates],
        "cbs_hamming": [cand.hamming for cand in result.candidates],
        "cbs_levenshtein": [cand.levenshtein for cand in result.candidates],
        "cbs_top": [
            {"tokens": list(cand.tokens), "text": lm.decode(cand.tokens), "log_p": cand.log_p,
             "hamming": cand.hamming, "levenshtein": cand.levenshtein}
            for cand in result.candidates[: c.stored_candidates]
        ],
    }


def chunks(items: Sequence[Example], size: int) -> Iterator[Sequence[Example]]:
    """Consecutive chunks of at most `size` items."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass(frozen=True)
class Plan:
    """Everything settled before the first record: the examples, what windowing did, the
    prior-aware setup and the provenance of the model that made them."""

    examples: list[Example]
    window_info: dict[str, Any]
    prior: PriorSetup | None
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
        device_map=m.device_map,
    )
    if m.batch_size == "auto":
        lm.batch_size = fitting_batch_size(config, lm)
    return lm


def fitting_batch_size(config: ExperimentConfig, lm: LanguageModel) -> int:
    """The largest batch every configured method fits in free memory (CBS holds a beam of rows per sequence)."""
    w = config.windows
    longest = max(w.prefix_length, config.prior_aware.prefix_length or 0) + w.suffix_length + 1
    size = auto_batch_size(lm, sequence_length=longest, scored_positions=w.suffix_length + 1)
    if "cbs" in config.methods:
        rows = config.cbs.beam_width + int(config.cbs.anchor)
        size = min(size, auto_batch_size(lm, sequence_length=longest, scored_positions=1, rows_per_sequence=rows))
    return size


def plan_run(config: ExperimentConfig, lm: LanguageModel, documents: dict[str, list[Document]]) -> Plan:
    """Cut the documents into examples and settle the prior-aware bank and thresholds."""
    examples, window_info = build_examples(config, lm, documents)
    prior = prior_setup(config, lm, documents) if "prior_aware" in config.methods else None
    return Plan(examples, window_info, prior, versions(lm))


def open_run_store(
    config: ExperimentConfig, out_dir: str | Path, plan: Plan, identity: dict[str, Any], *, force: bool = False
) -> RecordStore:
    """Open (or resume) the run folder and write what the plan settled next to the records."""
    store = RecordStore.open(out_dir, config.model_dump(mode="json"), identity, force=force)
    store.write_json("versions.json", plan.versions)
    store.write_json(WINDOWS, plan.window_info)
    if plan.prior is not None:
        store.write_json(PRIOR_AWARE, plan.prior.info)
    return store


def pending_chunks(config: ExperimentConfig, plan: Plan, store: RecordStore) -> list[Sequence[Example]]:
    """The chunks of examples not yet in the store, in run order (one shard each)."""
    done = store.done_ids
    return list(chunks([e for e in plan.examples if e.example_id not in done], config.shard_size))


def score_chunk(config: ExperimentConfig, lm: LanguageModel, chunk: Sequence[Example], prior: PriorSetup | None) -> list[dict[str, Any]]:
    """Records of one chunk; on out-of-memory the batch is halved and the chunk redone."""
    return halving_on_oom(lm, lambda: score_examples(config, lm, chunk, prior))


def finish_run(config: ExperimentConfig, plan: Plan, store: RecordStore) -> dict[str, Any]:
    """Summarize the stored records into `summary.json` and return the summary."""
    summary = summarize(store.read_records(), config, plan.window_info)
    if plan.prior is not None:
        summary["prior_aware_settings"] = plan.prior.info
    store.write_json(SUMMARY, summary)
    return summary


def run_experiment(
    config: ExperimentConfig,
    out_dir: str | Path,
    *,
    model: LanguageModel | None = None,
    force: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Run (or resume) an experiment into `out_dir` and return its summary.

    The folder is locked for this process; a resume under changed settings is refused before
    the model loads; everything that can fail on bad input (model, data, windows) is checked
    before the first file is written.
    """
    documents = load_documents(config)
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
            store.append(score_chunk(config, lm, chunk, plan.prior))
            bar.update(len(chunk))
        bar.close()
        return finish_run(config, plan, store)


def rebuild_summary(out_dir: Path) -> dict[str, Any]:
    """Recompute `summary.json` of a run folder from its stored records (no model needed); a books
    run has no records, so its stored `books_summary.json` is returned as it is."""
    store = RecordStore.existing(out_dir)
    if is_books_run(out_dir):
        return store.read_json(BOOKS_SUMMARY)
    config = parse_config(store.read_yaml(CONFIG))
    summary = summarize(store.read_records(), config, store.read_json(WINDOWS))
    if "prior_aware" in config.methods:
        summary["prior_aware_settings"] = store.read_json(PRIOR_AWARE)
    store.write_json(SUMMARY, summary)
    return summary

