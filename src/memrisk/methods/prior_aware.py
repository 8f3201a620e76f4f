"""Prior-aware memorization: a suffix likely after its own prefix but not after random ones (PA paper §4, eq. 3)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memrisk.data.bank import PrefixBank
from memrisk.data.sources import Document
from memrisk.extraction.prior_aware import FULL_DISTRIBUTION, PriorAwareResult, calibrate, default_m, prior_aware
from memrisk.methods.base import Chunk, Column, MethodDefaults
from memrisk.methods.probabilistic import finite_stat, log10
from memrisk.signature import signature

if TYPE_CHECKING:
    from memrisk.config import ExperimentConfig
    from memrisk.methods.base import RunMethod
    from memrisk.models.backend import LanguageModel

EXTREMES = 10


@dataclass(frozen=True)
class PriorSetup:
    """What every chunk of a run shares for prior-aware scoring: the bank and the thresholds."""

    bank: PrefixBank
    m: float
    n: float
    info: dict[str, Any]


def prior_setup(config: ExperimentConfig, lm: LanguageModel, documents: Mapping[str, list[Document]]) -> PriorSetup:
    """Draw the run's prefix bank (seeded) and settle m and n (calibrating n once when asked)."""
    pa = config.prior_aware
    names = pa.bank_datasets or [d.name for d in config.datasets if d.role == "bank"] or \
        [d.name for d in config.datasets if d.role == "target"] or [d.name for d in config.datasets]
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


def filtered(extracted: np.ndarray, memorized: np.ndarray) -> dict[str, Any]:
    """Counts and rates of a method's extracted examples before and after the PA filter."""
    both = extracted & memorized
    n = max(len(extracted), 1)
    return {
        "extracted": int(extracted.sum()), "rate": float(extracted.sum() / n),
        "extracted_and_pa_memorized": int(both.sum()), "pa_rate": float(both.sum() / n),
    }


def prior_aware_extremes(rows: dict[str, list], count: int = EXTREMES) -> dict[str, list[dict[str, Any]]]:
    """The examples with the lowest and the highest log P(s|p) / v̂ ratio."""
    ratio = np.asarray(rows["pa_log_ratio"], dtype=np.float64)
    order = np.argsort(ratio, kind="stable")

    def entry(i: int) -> dict[str, Any]:
        return {
            "example_id": rows["example_id"][i], "dataset": rows["dataset"][i], "role": rows["role"][i],
            "log10_p": float(log10(rows["pa_log_p"][i])), "log10_prior": float(log10(rows["pa_log_prior"][i])),
            "log10_ratio": float(log10(ratio[i])), "pa_memorized": bool(rows["pa_memorized"][i]),
            "suffix_text": rows["suffix_text"][i],
        }

    return {"lowest": [entry(i) for i in order[:count]], "highest": [entry(i) for i in order[::-1][:count]]}


def prior_aware_stats(column: Column, config: ExperimentConfig, others: list[RunMethod]) -> dict[str, Any]:
    """Extractable (P(s|p) > m) vs PA-memorized counts, the PA share, the c and trials behind v̂_s (PA §4), and PA as
    a filter on the other methods' extraction verdicts ("extractable and PA-memorized")."""
    memorized = column("pa_memorized").astype(bool)
    extractable = column("pa_extractable").astype(bool)
    ratio = column("pa_log_ratio").astype(np.float64)
    return {
        "extractable": int(extractable.sum()),
        "pa_memorized": int(memorized.sum()),
        "pa_share": float(memorized.sum() / extractable.sum()) if extractable.any() else None,
        "median_log10_ratio": finite_stat(log10(ratio), np.median),
        "median_log10_ratio_spread": finite_stat(log10(column("pa_log_ratio_spread").astype(np.float64)), np.median),
        "prefixes_per_trial": config.prior_aware.prefixes_per_trial,
        "trials": config.prior_aware.trials,
        "filtered": {label: filtered(verdict, memorized) for method in others for label, verdict in method.extracted(column, config).items()},
    }


class PriorAware(MethodDefaults):
    """P(s|p) against v̂_s, the suffix's mean probability after c random bank prefixes (median over trials)."""

    name = "prior_aware"
    section = "prior_aware"
    reads_policies = (FULL_DISTRIBUTION,)

    def columns(self, config: ExperimentConfig) -> list[str]:
        return [
            "pa_log_p", "pa_log_prior", "pa_log_prior_trials", "pa_log_ratio", "pa_log_ratio_spread", "pa_prefixes_used",
            "pa_extractable", "pa_memorized", "token_evals.prior_aware",
        ]

    def cost_bound(self, config: ExperimentConfig, prefix_length: int, suffix_length: int) -> int:
        pa = config.prior_aware
        return 1 + prefix_length + suffix_length + pa.prefixes_per_trial * pa.trials * suffix_length

    def prepare(self, config: ExperimentConfig, lm: LanguageModel, documents: Mapping[str, list[Document]]) -> PriorSetup:
        return prior_setup(config, lm, documents)

    def setup_info(self, setup: PriorSetup) -> dict[str, Any]:
        return setup.info

    def score(self, chunk: Chunk) -> list[dict[str, Any]]:
        config, setup = chunk.config, chunk.setups[self.name]
        own = [f"{e.dataset}/{e.window.doc_id}" for e in chunk.examples] if config.prior_aware.exclude_own_document else None
        scores = prior_aware(chunk.lm, chunk.prefixes, chunk.suffixes, setup.bank, setup.m, setup.n, trials=config.prior_aware.trials,
                             documents=own, log_p=chunk.pass_log_p(FULL_DISTRIBUTION))
        bank_rows = scores.prefixes_per_trial * scores.trials
        return [
            prior_aware_record(result) | {"token_evals.prior_aware": evals + bank_rows * len(suffix)}
            for result, evals, suffix in zip(scores.results, chunk.one_pass, chunk.suffixes)
        ]

    def summarise(self, column: Column, config: ExperimentConfig) -> dict[str, Any]:
        """PA counts, and the PA filter applied to every other configured method's verdicts (hence the registry, read here)."""
        from memrisk.methods import configured

        others = [m for m in configured(config) if m.name != self.name]
        return {"prior_aware": prior_aware_stats(column, config, others)}

    def summarise_run(self, rows: dict[str, list], config: ExperimentConfig) -> dict[str, Any]:
        return {"prior_aware_extremes": prior_aware_extremes(rows)}

    def extracted(self, column: Column, config: ExperimentConfig) -> dict[str, np.ndarray]:
        return {"pa_memorized": column("pa_memorized").astype(bool)}

    def signature(self, config: ExperimentConfig) -> str:
        pa = config.prior_aware
        return signature(self.name, c=pa.prefixes_per_trial, trials=pa.trials, n=pa.n, m=pa.m, own_document=not pa.exclude_own_document,
                         seed=pa.seed)
