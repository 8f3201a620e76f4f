"""The run-method protocol: what the runner and the summary need from each method, and nothing else.

A method (teacher forcing, greedy, CBS, prior-aware, ...) names its config section, lists the
record columns it writes, bounds its token evaluations per window (CBS paper App. C.3), scores a
chunk of examples, summarises its columns per dataset and signs its numbers with the settings
that produced them. The runner loops over the configured methods; nothing else knows them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from memrisk.data.sources import Document
from memrisk.data.windows import Example
from memrisk.decoding import DecodingPolicy
from memrisk.extraction.probabilistic import VerbatimScores, verbatim_scores
from memrisk.methods.shared import SharedPasses, settings_key, timed
from memrisk.models.backend import LanguageModel

if TYPE_CHECKING:
    from memrisk.config import ExperimentConfig

WALL_TIME = "seconds."
TEACHER_FORCING = "teacher_forcing"
"""The shared pass every chunk starts with (its ranks go into every record; `probabilistic` reads its p_z)."""


def wall_time_column(method: str) -> str:
    """The record column of one method's wall time per window: a measurement, not a result, so it differs
    between otherwise identical runs and is left out of summary.json and of record comparisons."""
    return WALL_TIME + method


def is_measurement(column: str) -> bool:
    """Whether a record column is a wall-time measurement (not reproducible bit for bit)."""
    return column.startswith(WALL_TIME)


Column = Callable[[str], np.ndarray]
"""`column(name)`: one record column of one dataset's windows as an array (list columns as object arrays)."""


@dataclass
class Chunk:
    """One chunk of examples as every method sees it: token ids, a + T per window, and the
    teacher-forced scores under every policy, computed once and shared (probabilistic, greedy's cross-check)."""

    config: ExperimentConfig
    lm: LanguageModel
    examples: Sequence[Example]
    setups: Mapping[str, Any] = field(default_factory=dict)
    passes: SharedPasses = field(default_factory=SharedPasses)
    """Results other cells of a study computed for the same windows (a fresh, empty one in a single run)."""
    moments: bool = False
    """Whether a configured method reads the teacher-forcing pass's Min-K%++ moments (`RunMethod.reads_moments`)."""
    read_policies: tuple[DecodingPolicy, ...] = ()
    """Policies the configured methods read from the teacher-forcing pass besides the configured ones
    (`RunMethod.reads_policies`), so that the pass scores them too."""

    @cached_property
    def key(self) -> tuple:
        """What a chunk's results depend on besides the settings: the batch layout, the window ids (Monte Carlo's
        seeds) and every window's tokens."""
        windows = tuple((e.example_id, tuple(p), tuple(s)) for e, p, s in zip(self.examples, self.prefixes, self.suffixes))
        return (self.lm.batch_size, windows)

    @cached_property
    def prefixes(self) -> list[list[int]]:
        return [list(e.window.prefix_ids) for e in self.examples]

    @cached_property
    def suffixes(self) -> list[list[int]]:
        return [list(e.window.suffix_ids) for e in self.examples]

    @cached_property
    def one_pass(self) -> list[int]:
        """a + T per window: BOS ‖ prefix ‖ suffix evaluated once (CBS App. C.3)."""
        bos = 0 if self.lm.bos_token_id is None else 1
        return [bos + len(p) + len(s) for p, s in zip(self.prefixes, self.suffixes)]

    @cached_property
    def configured_policies(self) -> list[DecodingPolicy]:
        """The run's decoding policies, in its config's order."""
        return [p.policy() for p in self.config.policies]

    @cached_property
    def _teacher_forcing_pass(self) -> tuple[VerbatimScores, float]:
        """The chunk's one teacher-forced pass and its wall time: every configured policy, every policy a method reads
        and those of the cells that share it, each policy's scores its own ((n,p) paper §3, eq. 1)."""
        covered = self.passes.covering([*self.configured_policies, *self.read_policies])
        moments = self.moments or self.passes.moments
        return self.passes.get((TEACHER_FORCING, covered, moments, self.key),
                               lambda: verbatim_scores(self.lm, self.prefixes, self.suffixes, covered, moments=moments))

    @cached_property
    def teacher_forcing(self) -> tuple[VerbatimScores, float]:
        """Teacher forcing of every suffix under every configured policy, and the pass's wall time."""
        scores, seconds = self._teacher_forcing_pass
        return scores.select(self.configured_policies), seconds

    def pass_log_p(self, policy: DecodingPolicy) -> np.ndarray:
        """log p_z of every suffix under `policy` from the teacher-forcing pass (the policy must be configured or one
        that a configured method reads, `RunMethod.reads_policies`)."""
        return self._teacher_forcing_pass[0].select([policy]).log_p[:, 0]

    @property
    def scores(self) -> VerbatimScores:
        return self.teacher_forcing[0]

    def method_columns(self, method: RunMethod) -> tuple[list[dict[str, Any]], float]:
        """A method's columns for this chunk and their wall time, reused when a cell with the same settings computed them."""
        settings = method.shared_settings(self.config)
        if settings is None:
            return timed(lambda: method.score(self))
        return self.passes.get((method.name, settings_key(settings), self.key), lambda: method.score(self))


class RunMethod(Protocol):
    """One extraction method as a run uses it."""

    name: str
    """Its name in `methods:` and in `token_evals.<name>`."""
    section: str | None
    """The config key of its settings (None: it has none of its own)."""
    reads_moments: bool
    """Whether it reads the teacher-forcing pass's raw log-probabilities and their Min-K%++ moments, which the pass
    computes only when a configured method does."""
    reads_policies: tuple[DecodingPolicy, ...]
    """Decoding policies whose p_z it reads from the teacher-forcing pass (`Chunk.pass_log_p`) whether or not the run
    configures them: the pass scores them too, rather than the method teacher-forcing the windows again."""

    def columns(self, config: ExperimentConfig) -> list[str]:
        """The record columns it writes (docs/records.md)."""

    def cost_bound(self, config: ExperimentConfig, prefix_length: int, suffix_length: int) -> int:
        """Most token evaluations it spends on one window with these lengths (CBS App. C.3)."""

    def rows_per_sequence(self, config: ExperimentConfig) -> int:
        """Model rows one window occupies at once while it is scored (a beam: B, + 1 when anchored), for batch sizing."""

    def prepare(self, config: ExperimentConfig, lm: LanguageModel, documents: Mapping[str, list[Document]]) -> Any:
        """Run-level state settled once before the first chunk (None when it needs none)."""

    def setup_info(self, setup: Any) -> dict[str, Any] | None:
        """What `prepare` settled, saved next to the records (None: nothing to save)."""

    def score(self, chunk: Chunk) -> list[dict[str, Any]]:
        """Its record columns for every example of the chunk, in order."""

    def shared_settings(self, config: ExperimentConfig) -> Any | None:
        """The settings its columns depend on besides the model and the windows, so study cells that agree on them
        share one computation (None: computed in every cell)."""

    def summarise(self, column: Column, config: ExperimentConfig) -> dict[str, Any]:
        """Its entries of one dataset's summary (keys of `summary.json` → datasets → NAME)."""

    def summarise_run(self, rows: dict[str, list], config: ExperimentConfig) -> dict[str, Any]:
        """Its run-level entries of `summary.json` (over all datasets)."""

    def extracted(self, column: Column, config: ExperimentConfig) -> dict[str, np.ndarray]:
        """Per label, which windows it extracted (the verdict other methods' filters apply to)."""

    def signature(self, config: ExperimentConfig) -> str:
        """The settings behind its numbers, short enough to print next to each one."""


class MethodDefaults:
    """The protocol's optional parts, for methods that have no run-level state or run-level summary."""

    section: str | None = None
    reads_moments: bool = False
    reads_policies: tuple[DecodingPolicy, ...] = ()

    def rows_per_sequence(self, config: ExperimentConfig) -> int:
        return 1

    def prepare(self, config: ExperimentConfig, lm: LanguageModel, documents: Mapping[str, list[Document]]) -> Any:
        return None

    def setup_info(self, setup: Any) -> dict[str, Any] | None:
        return None

    def summarise_run(self, rows: dict[str, list], config: ExperimentConfig) -> dict[str, Any]:
        return {}

    def shared_settings(self, config: ExperimentConfig) -> Any | None:
        return None

    def extracted(self, column: Column, config: ExperimentConfig) -> dict[str, np.ndarray]:
        return {}
