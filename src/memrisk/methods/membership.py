"""Membership-inference baselines as a run method: LOSS, zlib, Min-K%, Min-K%++ and the reference-model ratio per
window from the shared teacher-forced pass, and the ROC of every membership and extraction score between the
target (member) and control (non-member) windows in summary.json (docs/membership.md).

The scores cost no model evaluation beyond teacher forcing; only the reference model's ratio needs one more pass,
under a second model with the same tokenizer.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memrisk import rules
from memrisk.data.sources import Document
from memrisk.decoding import DecodingPolicy
from memrisk.errors import MemriskError
from memrisk.extraction.membership import RocCurve, roc_curve, roc_summary, window_scores
from memrisk.extraction.probabilistic import verbatim_scores
from memrisk.methods.base import Chunk, Column, MethodDefaults
from memrisk.models.backend import LanguageModel, load_model
from memrisk.signature import signature

if TYPE_CHECKING:
    from memrisk.config import ExperimentConfig, ModelConfig

MIA_SCORES = {
    "mia.loss": "LOSS (mean log p)",
    "mia.zlib": "zlib ratio",
    "mia.min_k": "Min-K% Prob",
    "mia.min_k_pp": "Min-K%++",
    "mia.reference": "reference ratio",
}
"""The membership columns and their names in tables and charts (higher: more likely a member)."""
TOKEN_COLUMNS = ("mia.token_log_p", "mia.token_mu", "mia.token_sigma")
REFERENCE_TOKENS = "mia.reference_token_log_p"
MEMBERSHIP = "membership"
EXTRACTION = "extraction"
NO_CONTROLS = "no role: control dataset"
NO_TARGETS = "no role: target dataset"


@dataclass(frozen=True)
class Score:
    """One per-window score a ROC is drawn for: its key in summary.json, its name on the page, its family (membership
    or extraction) and its values (higher: more likely a member)."""

    key: str
    name: str
    family: str
    values: np.ndarray


@functools.lru_cache(maxsize=1)
def reference_model(model: ModelConfig, batch_size: int) -> LanguageModel:
    """The reference model, loaded once per process (a Ray worker loads its own on its first chunk)."""
    return load_model(model.name, revision=model.revision, dtype=model.dtype, device=model.device, gguf_file=model.gguf_file,
                      batch_size=batch_size if model.batch_size == "auto" else model.batch_size, attention=model.attention,
                      compile=model.compile, device_map=model.device_map, matmul=model.matmul,
                      prefix_cache=model.prefix_cache)


@dataclass(frozen=True)
class ReferenceSetup:
    """The reference model's settings (it is loaded from them in each process) and its provenance."""

    model: ModelConfig
    batch_size: int
    info: dict[str, Any]

    def load(self) -> LanguageModel:
        """The reference model of this process."""
        return reference_model(self.model, self.batch_size)


def same_tokenizer(lm: LanguageModel, reference: LanguageModel) -> None:
    """Refuse a reference model whose tokenizer differs from the target model's: the ratio compares the same token ids."""
    if lm.tokenizer_fingerprint != reference.tokenizer_fingerprint:
        raise MemriskError(
            f"membership.reference_model {reference.name!r} has a different tokenizer from the model {lm.name!r} "
            f"({reference.vocab_size} and {lm.vocab_size} output tokens); the reference ratio compares log-likelihoods of "
            "the same token ids, so both models must share one tokenizer")


def window_records(chunk: Chunk, k: float, reference: np.ndarray | None) -> list[dict[str, Any]]:
    """The membership columns of every window of a chunk, from the teacher-forced raw log-probabilities, μ and σ
    (and the reference model's raw log-probabilities, when given)."""
    scores, records = chunk.scores, []
    for i, example in enumerate(chunk.examples):
        length = int(scores.suffix_lengths[i])
        log_p, mu, sigma = (a[i, :length] for a in (scores.raw_log_probs, scores.log_prob_mean, scores.log_prob_std))
        ref = None if reference is None else reference[i, :length]
        result = window_scores(log_p, mu, sigma, chunk.lm.decode(example.window.suffix_ids), k, ref)
        record: dict[str, Any] = {"mia.loss": result.loss, "mia.zlib": result.zlib, "mia.min_k": result.min_k,
                                  "mia.min_k_pp": result.min_k_pp}
        record |= dict(zip(TOKEN_COLUMNS, (log_p.tolist(), mu.tolist(), sigma.tolist())))
        if ref is not None:
            record |= {"mia.reference": result.reference, REFERENCE_TOKENS: ref.tolist()}
        records.append(record)
    return records


def _float_column(rows: Mapping[str, list], name: str) -> np.ndarray:
    return np.asarray(rows[name], dtype=np.float64)


def run_scores(rows: Mapping[str, list], config: ExperimentConfig) -> list[Score]:
    """Every score of the run a ROC is drawn for: the membership columns, then the extraction scores the run has
    (log p_z per policy, greedy −Levenshtein distance, CBS LB_E, the prior-aware log ratio)."""
    out = [Score(key, name, MEMBERSHIP, _float_column(rows, key)) for key, name in MIA_SCORES.items() if key in rows]
    if "probabilistic" in config.methods:
        out += [Score(f"log_p.{p.label}", f"log p_z ({p.label})", EXTRACTION, _float_column(rows, f"log_p.{p.label}"))
                for p in config.policies]
    if "greedy" in config.methods:
        out.append(Score("-greedy_levenshtein", "greedy −Levenshtein", EXTRACTION, -_float_column(rows, "greedy_levenshtein")))
    if "cbs" in config.methods:
        distance = rules.cbs_distance(config.cbs.prune_mode)
        lower = np.array([bounds[-1] for bounds in rows[f"cbs_lower.{distance}"]], dtype=np.float64)
        out.append(Score(f"cbs_lower.{distance}[{config.cbs.epsilon}]", f"CBS LB_{config.cbs.epsilon} ({distance})", EXTRACTION, lower))
    if "prior_aware" in config.methods:
        out.append(Score("pa_log_ratio", "prior-aware log ratio", EXTRACTION, _float_column(rows, "pa_log_ratio")))
    return out


def comparisons(rows: Mapping[str, list], config: ExperimentConfig) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Member and non-member masks of each comparison: all target windows against all control windows ('pooled'), then
    each target dataset against the pooled controls."""
    role, dataset = np.asarray(rows["role"]), np.asarray(rows["dataset"])
    controls = role == "control"
    out = {"pooled": (role == "target", controls)}
    out |= {d.name: (dataset == d.name, controls) for d in config.scored_datasets() if d.role == "target"}
    return out


def roc_curves(rows: Mapping[str, list], config: ExperimentConfig, comparison: str = "pooled") -> list[tuple[Score, RocCurve]]:
    """Each score's ROC for one comparison (the report's chart); none when it lacks members or non-members."""
    members, non_members = comparisons(rows, config)[comparison]
    if not members.any() or not non_members.any():
        return []
    return [(score, roc_curve(score.values[members], score.values[non_members])) for score in run_scores(rows, config)]


def membership_summary(rows: Mapping[str, list], config: ExperimentConfig) -> dict[str, Any]:
    """Per comparison and score: AUC and TPR at each FPR of `membership.fprs`, with bootstrap intervals and the class
    sizes; a note instead when the run has no control (or no target) windows."""
    settings = config.membership
    role = np.asarray(rows["role"])
    about = {"k": settings.k, "bootstrap": settings.bootstrap, "confidence": settings.confidence, "seed": settings.seed,
             "fprs": list(settings.fprs), "members": "role: target", "non_members": "role: control"}
    if not (role == "control").any():
        return about | {"note": NO_CONTROLS}
    if not (role == "target").any():
        return about | {"note": NO_TARGETS}
    scores = run_scores(rows, config)
    out: dict[str, Any] = about | {"scores": {s.key: {"name": s.name, "family": s.family} for s in scores}, "comparisons": {}}
    for name, (members, non_members) in comparisons(rows, config).items():
        if not members.any():
            continue
        out["comparisons"][name] = {
            s.key: roc_summary(s.values[members], s.values[non_members], settings.fprs, settings.bootstrap, settings.seed,
                               settings.confidence).to_dict()
            for s in scores
        }
    return out


class Membership(MethodDefaults):
    """LOSS, zlib, Min-K%, Min-K%++ (and the reference ratio) per window, and their ROC against the controls."""

    name = "membership"
    section = "membership"
    reads_moments = True

    def columns(self, config: ExperimentConfig) -> list[str]:
        reference = config.membership.reference_model is not None
        scores = [key for key in MIA_SCORES if reference or key != "mia.reference"]
        return [*scores, *TOKEN_COLUMNS, *([REFERENCE_TOKENS] if reference else []), "token_evals.membership"]

    def cost_bound(self, config: ExperimentConfig, prefix_length: int, suffix_length: int) -> int:
        """Nothing beyond teacher forcing; with a reference model, its one pass a + T."""
        return 1 + prefix_length + suffix_length if config.membership.reference_model is not None else 0

    def prepare(self, config: ExperimentConfig, lm: LanguageModel, documents: Mapping[str, list[Document]]) -> ReferenceSetup | None:
        """Load the reference model, when one is configured, and refuse it unless it shares the model's tokenizer."""
        model = config.membership.reference_model
        if model is None:
            return None
        reference = reference_model(model, lm.batch_size)
        same_tokenizer(lm, reference)
        return ReferenceSetup(model, lm.batch_size, {"reference_model": reference.describe()})

    def setup_info(self, setup: ReferenceSetup) -> dict[str, Any]:
        return setup.info

    def score(self, chunk: Chunk) -> list[dict[str, Any]]:
        setup: ReferenceSetup | None = chunk.setups.get(self.name)
        reference = None
        if setup is not None:
            reference = verbatim_scores(setup.load(), chunk.prefixes, chunk.suffixes, [DecodingPolicy()], moments=True).raw_log_probs
        records = window_records(chunk, chunk.config.membership.k, reference)
        bos = 0 if setup is None or setup.load().bos_token_id is None else 1
        for record, prefix, suffix in zip(records, chunk.prefixes, chunk.suffixes):
            record["token_evals.membership"] = bos + len(prefix) + len(suffix) if setup is not None else 0
        return records

    def summarise(self, column: Column, config: ExperimentConfig) -> dict[str, Any]:
        """The median of each membership score over the dataset's windows."""
        keys = [key for key in MIA_SCORES if key != "mia.reference" or config.membership.reference_model is not None]
        return {"membership": {"median": {key: float(np.median(column(key).astype(np.float64))) for key in keys}}}

    def summarise_run(self, rows: dict[str, list], config: ExperimentConfig) -> dict[str, Any]:
        return {"membership": membership_summary(rows, config)}

    def signature(self, config: ExperimentConfig) -> str:
        m = config.membership
        return signature(self.name, k=m.k, reference=None if m.reference_model is None else m.reference_model.name,
                         bootstrap=m.bootstrap, confidence=m.confidence, seed=m.seed)
