"""Running an experiment on a Ray cluster (`memrisk run CONFIG --ray [ADDRESS]`).

Each worker is a Ray actor holding one model replica. The first worker plans the run
(windows, prior-aware bank); the driver then hands the same chunks a local run would make,
one at a time, to whichever worker is free, and commits their records through the run's
store in chunk order. A worker that dies is replaced and its chunk redone, so no record is
lost or written twice, and a run can be resumed by a local or a Ray invocation alike.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from memrisk.config import ExperimentConfig
from memrisk.data.sources import Document
from memrisk.data.windows import Example
from memrisk.errors import MemriskError, first_line
from memrisk.methods.shared import SharedPasses
from memrisk.runner import (
    Plan,
    finish_run,
    fitting_batch_size,
    load_documents,
    load_run_model,
    open_run_store,
    pending_chunks,
    plan_run,
    run_identity,
    score_chunk,
)
from memrisk.layout import RAY_RUN
from memrisk.lock import locked_folder
from memrisk.store import refuse_changed_settings

log = logging.getLogger(__name__)


def _import_ray() -> Any:
    """The `ray` module, or one error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise MemriskError("--ray needs Ray: pip install 'memrisk[ray]'") from None
    return ray


class ScoringWorker:
    """One model replica on a Ray worker: plans runs and scores chunks of examples, for every run (study cell)
    that uses its model; what cells agree on is computed once per worker (`SharedPasses`).

    The model is loaded by the first call, so a load error reaches the driver as the
    error it is instead of a dead actor.
    """

    def __init__(self, config: ExperimentConfig, passes: SharedPasses | None = None) -> None:
        self.config = config
        self.lm = None
        self.passes = passes or SharedPasses()

    def _model(self, config: ExperimentConfig | None = None) -> Any:
        if self.lm is None:
            self.lm = load_run_model(self.config)
        if config is not None and config.model.batch_size == "auto":
            self.lm.batch_size = fitting_batch_size(config, self.lm)
        return self.lm

    def describe(self) -> dict[str, Any]:
        """Where this replica runs (loads the model first)."""
        import ray

        lm = self._model()
        return {"pid": os.getpid(), "node": ray.util.get_node_ip_address(), "device": str(lm.device), "batch_size": lm.batch_size}

    def plan(self, documents: dict[str, list[Document]], config: ExperimentConfig) -> Plan:
        """The run's examples, windowing report, prior-aware setup and provenance."""
        return plan_run(config, self._model(config), documents)

    def score(self, chunk: Sequence[Example], setups: dict[str, Any], config: ExperimentConfig) -> list[dict[str, Any]]:
        """Records of one chunk (the batch is halved on out-of-memory, as locally)."""
        return score_chunk(config, self._model(config), chunk, setups, self.passes)


@dataclass
class PoolReport:
    """What happened to the workers during one Ray invocation (saved as `ray_run.json`)."""

    address: str
    ray_version: str
    cpus_per_worker: float
    gpus_per_worker: float
    workers: list[dict[str, Any]] = field(default_factory=list)
    replacements: list[dict[str, Any]] = field(default_factory=list)
    replaced_workers: int = 0
    retried_chunks: dict[int, int] = field(default_factory=dict)
    chunks: int = 0


class WorkerPool:
    """Ray actors holding model replicas; a dead one is replaced on the spot."""

    def __init__(self, ray: Any, config: ExperimentConfig, count: int, cpus: float, gpus: float, report: PoolReport,
                 passes: SharedPasses | None = None) -> None:
        self.ray, self.config, self.report, self.passes = ray, config, report, passes
        quiet = {"env_vars": {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}}
        self.remote_class = ray.remote(num_cpus=cpus, num_gpus=gpus, max_restarts=0, runtime_env=quiet)(ScoringWorker)
        self.actors = [self.remote_class.remote(config, self.passes) for _ in range(count)]
        self.replacement_calls: list[Any] = []
        report.workers = self._started()

    def _started(self) -> list[dict[str, Any]]:
        """Wait until every worker has loaded its model (all load at once)."""
        calls = [actor.describe.remote() for actor in self.actors]
        return [self._result(index, call, "describe", what="loading the model") for index, call in enumerate(calls)]

    def _result(self, index: int, call: Any, method: str, *args: Any, what: str) -> Any:
        """The result of `call`, a call of `method(*args)` on worker `index`; when the worker dies it
        is replaced and the call repeated, at most `ray.max_retries` times."""
        deaths = 0
        while True:
            try:
                return self._get(call, what)
            except self.ray.exceptions.RayActorError as exc:
                deaths += 1
                if deaths > self.config.ray.max_retries:
                    raise MemriskError(f"{what} failed: {deaths} workers died in turn ({first_line(exc)})") from None
                log.warning("a worker died while %s (%s); a fresh one takes over", what, first_line(exc))
                call = getattr(self.replace(self.actors[index]), method).remote(*args)

    def close(self) -> None:
        """Stop every worker (their models leave the cluster's memory now, not at garbage collection)."""
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)

    def replace(self, actor: Any) -> Any:
        """A fresh worker in place of a dead one."""
        self.ray.kill(actor, no_restart=True)
        fresh = self.remote_class.remote(self.config, self.passes)
        self.actors[self.actors.index(actor)] = fresh
        self.replacement_calls.append(fresh.describe.remote())
        self.report.replaced_workers += 1
        return fresh

    def describe_replacements(self) -> None:
        """Add where each replacement worker ran to the report (those that died in turn are left out)."""
        for call in self.replacement_calls:
            try:
                self.report.replacements.append(self.ray.get(call))
            except self.ray.exceptions.RayActorError:
                continue

    def plan(self, documents: dict[str, list[Document]], config: ExperimentConfig) -> Plan:
        """Plan a run of this pool's model on the first worker (another one if it dies)."""
        call = self.actors[0].plan.remote(documents, config)
        return self._result(0, call, "plan", documents, config, what="planning the run")

    def score(self, todo: list[Sequence[Example]], setups: dict[str, Any], commit: Callable[[list[dict[str, Any]]], None],
              bar: tqdm, config: ExperimentConfig) -> None:
        """Score every chunk; commit their records in chunk order; redo the chunks of dead workers."""
        ray = self.ray
        setups_ref, config_ref = ray.put(setups), ray.put(config)
        queue, idle = deque(range(len(todo))), list(self.actors)
        in_flight: dict[Any, tuple[Any, int]] = {}
        finished: dict[int, list[dict[str, Any]]] = {}
        next_commit = 0
        self.report.chunks = len(todo)
        while queue or in_flight:
            while idle and queue:
                actor, index = idle.pop(), queue.popleft()
                in_flight[actor.score.remote(todo[index], setups_ref, config_ref)] = (actor, index)
            (ready,), _ = ray.wait(list(in_flight), num_returns=1)
            actor, index = in_flight.pop(ready)
            try:
                finished[index] = self._get(ready, f"scoring chunk {index}")
                idle.append(actor)
            except ray.exceptions.RayActorError as exc:
                retries = self.report.retried_chunks.get(index, 0) + 1
                if retries > self.config.ray.max_retries:
                    raise MemriskError(f"chunk {index} failed {retries} times, its workers died ({first_line(exc)})") from None
                self.report.retried_chunks[index] = retries
                log.warning("worker died on chunk %d (%s); redoing it on a fresh worker", index, first_line(exc))
                queue.appendleft(index)
                idle.append(self.replace(actor))
                bar.set_postfix(workers=len(self.actors), retried=sum(self.report.retried_chunks.values()))
            while next_commit in finished:
                records = finished.pop(next_commit)
                commit(records)
                bar.update(len(records))
                next_commit += 1

    def _get(self, refs: Any, what: str) -> Any:
        """`ray.get`, with an error raised inside a worker surfaced as the MemriskError it was."""
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, MemriskError):
                raise MemriskError(str(cause)) from None
            raise MemriskError(f"{what} failed on a worker: {first_line(exc)}") from exc


def worker_resources(config: ExperimentConfig, cluster: dict[str, float]) -> tuple[int, float, float]:
    """Number of workers and CPUs / GPUs each: as configured, else as many as the cluster holds
    (one GPU each on a GPU cluster, unless the model is placed on the CPU)."""
    r = config.ray
    wants_gpu = cluster.get("GPU", 0) >= 1 and not config.model.device.startswith("cpu")
    gpus = r.gpus_per_worker if r.gpus_per_worker is not None else (1.0 if wants_gpu else 0.0)
    cpus, have_cpus, have_gpus = r.cpus_per_worker, cluster.get("CPU", 0.0), cluster.get("GPU", 0.0)
    fits = int(have_gpus // gpus) if gpus else int(have_cpus // cpus)
    count = r.workers or max(1, fits)
    if count * cpus > have_cpus or count * gpus > have_gpus:
        raise MemriskError(
            f"{count} workers × ({cpus:g} CPU, {gpus:g} GPU) do not fit the Ray cluster "
            f"({have_cpus:g} CPU, {have_gpus:g} GPU); lower ray.workers or the per-worker resources"
        )
    return count, cpus, gpus


@contextmanager
def ray_connection(address: str | None) -> Iterator[Any]:
    """The `ray` module, connected to `address` (a running cluster: `HOST:PORT`, `ray://HOST:PORT` or `auto`;
    without one, `RAY_ADDRESS` or a cluster started on this machine, else a local one is started).
    A process already connected (`ray.init` called by the caller) keeps its connection."""
    ray = _import_ray()
    connected_here = not ray.is_initialized()
    if connected_here:
        ray.init(address=address, logging_level=logging.WARNING, configure_logging=False)
    try:
        yield ray
    finally:
        if connected_here:
            ray.shutdown()


@contextmanager
def worker_pool(ray: Any, config: ExperimentConfig, passes: SharedPasses | None = None) -> Iterator[WorkerPool]:
    """Workers holding `config`'s model, sized to the cluster; each starts from a copy of `passes` (empty, saying what
    the cells it will score ask of a shared pass). Stopped on exit."""
    count, cpus, gpus = worker_resources(config, ray.cluster_resources())
    report = PoolReport(ray.get_runtime_context().gcs_address, ray.__version__, cpus, gpus)
    pool = WorkerPool(ray, config, count, cpus, gpus, report, passes)
    try:
        yield pool
    finally:
        pool.close()


def run_on_pool(pool: WorkerPool, config: ExperimentConfig, out_dir: str | Path, *, force: bool = False,
                progress: bool = True) -> dict[str, Any]:
    """Run (or resume) an experiment into `out_dir` with a pool of workers holding its model; the records equal a local run's."""
    documents = load_documents(config, corpus=True)
    identity = run_identity(config, documents)
    with locked_folder(out_dir):
        if not force:
            refuse_changed_settings(Path(out_dir), identity)
        plan = pool.plan(documents, config)
        store = open_run_store(config, out_dir, plan, identity, force=force)
        todo = pending_chunks(config, plan, store)
        remaining = sum(len(chunk) for chunk in todo)
        bar = tqdm(
            total=len(plan.examples), initial=len(plan.examples) - remaining, unit="ex",
            desc=f"examples ({len(pool.actors)} Ray workers)", disable=not progress,
        )
        pool.score(todo, plan.setups, store.append, bar, config)
        bar.close()
        pool.describe_replacements()
        store.write_json(RAY_RUN, asdict(pool.report))
        return finish_run(config, plan, store)


def run_experiment_on_ray(
    config: ExperimentConfig, out_dir: str | Path, *, address: str | None = None, force: bool = False, progress: bool = True
) -> dict[str, Any]:
    """Run (or resume) an experiment on a Ray cluster (see `ray_connection` for `address`) into `out_dir`;
    the records equal a local run's."""
    documents = load_documents(config, corpus=True)
    if not force:
        refuse_changed_settings(Path(out_dir), run_identity(config, documents))  # before any worker loads a model
    with ray_connection(address) as ray, worker_pool(ray, config) as pool:
        return run_on_pool(pool, config, out_dir, force=force, progress=progress)
