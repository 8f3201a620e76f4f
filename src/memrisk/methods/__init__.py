"""The run methods, one object each behind `RunMethod` (methods/base.py), registered in run order.

Adding a method is one file in this package plus one line in REGISTRY; the config accepts its
name, the runner scores it and the summary summarises it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memrisk.methods.base import Chunk, RunMethod
from memrisk.methods.cbs import CBS
from memrisk.methods.corpus_counts import CorpusCounts
from memrisk.methods.greedy import Greedy
from memrisk.methods.membership import Membership
from memrisk.methods.monte_carlo import MonteCarlo
from memrisk.methods.prior_aware import PriorAware
from memrisk.methods.probabilistic import Probabilistic

if TYPE_CHECKING:
    from memrisk.config import ExperimentConfig

REGISTRY: dict[str, RunMethod] = {method.name: method for method in (Probabilistic(), Greedy(), CBS(), MonteCarlo(), PriorAware(),
                                                                  Membership(), CorpusCounts())}
"""Every method a run can name, in the order a run scores them and writes their columns."""


def configured(config: ExperimentConfig) -> list[RunMethod]:
    """The config's methods, in registry order (the order of `methods:` does not change the records)."""
    return [method for name, method in REGISTRY.items() if name in config.methods]


__all__ = ["REGISTRY", "Chunk", "RunMethod", "configured"]
