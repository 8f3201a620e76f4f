"""memrisk: measure how much of a language model's training data can be extracted from it.

The public names below are imported on first use, so `import memrisk` (and commands that need
neither torch nor transformers, such as `memrisk books score`) start at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memrisk.version import __version__

if TYPE_CHECKING:
    from memrisk.books.nvrecall import NVRecall, nv_recall
    from memrisk.data.bank import PrefixBank
    from memrisk.decoding import DecodingPolicy
    from memrisk.errors import MemriskError
    from memrisk.extraction.cbs import Candidate, CBSResult, Stop, cbs
    from memrisk.extraction.rates import (
        RateTable,
        is_extractable,
        log_n_required,
        n_required,
        p_reached,
        rate_table,
    )
    from memrisk.extraction.greedy import GreedyResult, greedy_extraction
    from memrisk.extraction.montecarlo import (
        MonteCarloResult,
        monte_carlo,
        wilson_interval,
    )
    from memrisk.extraction.prior_aware import (
        Calibration,
        PriorAwareResult,
        PriorAwareScores,
        calibrate,
        prior_aware,
    )
    from memrisk.extraction.probabilistic import (
        VerbatimScores,
        verbatim_logprob,
        verbatim_scores,
    )
    from memrisk.models.backend import LanguageModel, load_model


_EXPORTS = {
    "NVRecall": "memrisk.books.nvrecall",
    "nv_recall": "memrisk.books.nvrecall",
    "PrefixBank": "memrisk.data.bank",
    "DecodingPolicy": "memrisk.decoding",
    "MemriskError": "memrisk.errors",
    "CBSResult": "memrisk.extraction.cbs",
    "Candidate": "memrisk.extraction.cbs",
    "Stop": "memrisk.extraction.cbs",
    "cbs": "memrisk.extraction.cbs",
    "RateTable": "memrisk.extraction.rates",
    "is_extractable": "memrisk.extraction.rates",
    "log_n_required": "memrisk.extraction.rates",
    "n_required": "memrisk.extraction.rates",
    "p_reached": "memrisk.extraction.rates",
    "rate_table": "memrisk.extraction.rates",
    "GreedyResult": "memrisk.extraction.greedy",
    "greedy_extraction": "memrisk.extraction.greedy",
    "MonteCarloResult": "memrisk.extraction.montecarlo",
    "monte_carlo": "memrisk.extraction.montecarlo",
    "wilson_interval": "memrisk.extraction.montecarlo",
    "Calibration": "memrisk.extraction.prior_aware",
    "PriorAwareResult": "memrisk.extraction.prior_aware",
    "PriorAwareScores": "memrisk.extraction.prior_aware",
    "calibrate": "memrisk.extraction.prior_aware",
    "prior_aware": "memrisk.extraction.prior_aware",
    "VerbatimScores": "memrisk.extraction.probabilistic",
    "verbatim_logprob": "memrisk.extraction.probabilistic",
    "verbatim_scores": "memrisk.extraction.probabilistic",
    "LanguageModel": "memrisk.models.backend",
    "load_model": "memrisk.models.backend",
}
__all__ = [
    "CBSResult",
    "Calibration",
    "Candidate",
    "DecodingPolicy",
    "GreedyResult",
    "LanguageModel",
    "MemriskError",
    "MonteCarloResult",
    "NVRecall",
    "PrefixBank",
    "PriorAwareResult",
    "PriorAwareScores",
    "RateTable",
    "Stop",
    "VerbatimScores",
    "calibrate",
    "cbs",
    "greedy_extraction",
    "is_extractable",
    "load_model",
    "log_n_required",
    "monte_carlo",
    "n_required",
    "nv_recall",
    "p_reached",
    "prior_aware",
    "rate_table",
    "verbatim_logprob",
    "verbatim_scores",
    "wilson_interval",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module the first time it is used."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memrisk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, with the module's own."""
    return sorted(set(globals()) | set(_EXPORTS))
