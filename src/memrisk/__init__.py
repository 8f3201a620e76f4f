"""memrisk: measure how much of a language model's training data can be extracted from it."""

from memrisk.books.nvrecall import NVRecall, nv_recall
from memrisk.decoding import DecodingPolicy
from memrisk.errors import MemriskError
from memrisk.extraction.cbs import CBSResult, Candidate, Stop, cbs
from memrisk.extraction.discoverable import (
    RateTable,
    is_extractable,
    log_n_required,
    n_required,
    p_reached,
    rate_table,
)
from memrisk.extraction.montecarlo import MonteCarloResult, monte_carlo, wilson_interval
from memrisk.extraction.greedy import GreedyResult, greedy_extraction
from memrisk.extraction.prior_aware import Calibration, PriorAwareResult, PriorAwareScores, calibrate, prior_aware
from memrisk.extraction.probabilistic import VerbatimScores, verbatim_logprob, verbatim_scores
from memrisk.data.bank import PrefixBank
from memrisk.models.backend import LanguageModel, load_model

__version__ = "0.1.0"

__all__ = [
    "CBSResult",
    "Calibration",
    "PrefixBank",
    "PriorAwareResult",
    "PriorAwareScores",
    "calibrate",
    "prior_aware",
    "Candidate",
    "Stop",
    "cbs",
    "DecodingPolicy",
    "GreedyResult",
    "LanguageModel",
    "MemriskError",
    "MonteCarloResult",
    "NVRecall",
    "RateTable",
    "VerbatimScores",
    "greedy_extraction",
    "is_extractable",
    "load_model",
    "monte_carlo",
    "log_n_required",
    "n_required",
    "nv_recall",
    "p_reached",
    "rate_table",
    "verbatim_logprob",
    "verbatim_scores",
    "wilson_interval",
]
