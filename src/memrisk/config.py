"""Experiment configuration (the YAML that `memrisk run` takes), validated with pydantic."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import ErrorDetails

from memrisk import defaults
from memrisk.decoding import DecodingPolicy
from memrisk.errors import MemriskError
from memrisk.methods import REGISTRY

M = TypeVar("M", bound=BaseModel)


class _Strict(BaseModel):
    """Unknown keys are errors, so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _registered_method(name: str) -> str:
    """A method name the registry knows (memrisk/methods)."""
    if name not in REGISTRY:
        names = [repr(n) for n in REGISTRY]
        raise ValueError(f"Input should be {', '.join(names[:-1])} or {names[-1]}, got {name!r}")
    return name


MethodName = Annotated[str, AfterValidator(_registered_method)]


class ModelConfig(_Strict):
    """Which model to load and how."""

    name: str
    revision: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16", "float64"] = "auto"
    device: str = "auto"
    gguf_file: str | None = None
    batch_size: int | Literal["auto"] = 8
    attention: Literal["auto", "sdpa", "eager", "flash_attention_2"] = "auto"
    compile: bool = False
    device_map: str | None = None
    threads: int | None = Field(None, ge=1)
    matmul: Literal["blas", "onednn"] = defaults.MATMUL
    """The CPU library of the linear layers' products: torch's own BLAS, or oneDNN (faster where BLAS leaves AVX-512
    unused; numbers agree to float32 rounding, like another thread count)."""
    prefix_cache: Literal["auto", "shared", "per_row"] = defaults.PREFIX_CACHE
    """How rows after one prefix (beams, samples, bank targets) hold its keys and values: read in place ("shared"), or
    copied into each row's cache ("per_row"); "auto" shares on the CPU and copies on a GPU, where fewer kernel launches
    win (docs/performance.md, GPU). Numbers agree to the dtype's rounding."""
    shares: int | Literal["auto"] = defaults.SHARES
    """CBS's sequences dealt into this many pools run side by side on CPU, one thread each; "auto": one per thread
    where each pool keeps enough rows (models/shares.py). Often faster on a few cores (docs/performance.md); floats agree
    to float32 rounding."""

    @field_validator("batch_size", "shares", mode="before")
    @classmethod
    def _positive_or_auto(cls, value: Any, info: ValidationInfo) -> Any:
        if value == "auto" or (type(value) is int and value >= 1):
            return value
        raise ValueError(f"{info.field_name} must be a positive integer or 'auto', got {value!r}")


MODEL_RUNNING_KEYS = ("batch_size", "compile", "device_map", "threads", "matmul", "prefix_cache", "shares")
"""ModelConfig keys that say how a model runs, not which results it gives (left out of a run's identity)."""

HUB_KEYS = ("hf", "config", "split", "revision", "streaming")
"""The DatasetConfig keys of Hugging Face datasets and save_to_disk folders."""


class DatasetConfig(_Strict):
    """A named set of documents: a file or save_to_disk folder, inline texts, or a Hugging Face dataset
    (docs/datasets.md); role 'control' marks a negative control, role 'bank' a corpus that only the prior-aware
    prefix bank is drawn from (not cut into windows, not scored)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.+-]+$")
    path: str | None = None
    documents: list[str] | None = None
    hf: str | None = None
    """A dataset `datasets.load_dataset` reads: a hub id, or a local folder of data files."""
    config: str | None = None
    """The hub dataset's configuration (subset) name."""
    split: str | None = None
    """The split of an `hf` dataset or of a saved DatasetDict (default train)."""
    revision: str | None = None
    """The hub dataset's branch, tag or commit hash: a commit hash pins its content."""
    streaming: bool = False
    """Read an `hf` dataset's rows as they arrive instead of downloading it first; with `limit`, only the first rows."""
    format: Literal["auto", "txt", "jsonl", "parquet"] = "auto"
    text_field: str = "text"
    id_field: str | None = None
    role: Literal["target", "control", "bank"] = "target"
    limit: int | None = Field(None, ge=1)
    duplicates: int | None = Field(None, ge=0)
    """How many times these documents occurred in the model's training data, where known ((n,p) paper Fig. 6)."""
    near_duplicates: int | None = Field(None, ge=0)
    """How many near-duplicates of each document (20% of its words kept in place) were in the training data, where
    known (PA paper §4.1.3: counterfactual baselines share them)."""

    @model_validator(mode="after")
    def _one_source(self) -> DatasetConfig:
        sources = [key for key in ("path", "documents", "hf") if getattr(self, key) is not None]
        if len(sources) != 1:
            given = f" (got {' and '.join(sources)})" if sources else ""
            raise ValueError(f"dataset {self.name!r} needs exactly one of 'path', 'documents' or 'hf'{given}")
        hub_only = [key for key in ("config", "revision", "streaming") if getattr(self, key) not in (None, False)]
        if self.hf is None and hub_only:
            verb = "applies" if len(hub_only) == 1 else "apply"
            raise ValueError(f"dataset {self.name!r}: {' and '.join(hub_only)} {verb} only to 'hf' datasets")
        if self.documents is not None and self.split is not None:
            raise ValueError(f"dataset {self.name!r}: split applies only to 'hf' datasets and save_to_disk folders")
        if self.hf is not None and self.format != "auto":
            raise ValueError(f"dataset {self.name!r}: format applies only to 'path' files; datasets reads an 'hf' dataset's own")
        return self

    def identity(self) -> dict[str, Any]:
        """Its settings, less the Hugging Face keys left unset (a run folder made before they existed still resumes)."""
        data = self.model_dump(mode="json")
        return {key: value for key, value in data.items() if key not in HUB_KEYS or value != DatasetConfig.model_fields[key].default}


class WindowConfig(_Strict):
    """How documents are cut into prefix ‖ suffix examples (CBS paper §4: a = T = 50 by default)."""

    mode: Literal["doc", "book"] = "doc"
    prefix_length: int = Field(defaults.PREFIX_LENGTH, ge=0)
    suffix_length: int = Field(defaults.SUFFIX_LENGTH, ge=1)
    stride: int = Field(defaults.STRIDE, ge=1)
    limit: int | None = Field(None, ge=1)
    """The first `limit` windows of each dataset only: a quick look at a large run (None: every window)."""


class PolicyConfig(_Strict):
    """One decoding policy; `name` defaults to the policy's own short name."""

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.+-]+$")
    temperature: float = defaults.TEMPERATURE
    top_k: int | None = None
    top_p: float | None = None

    def policy(self) -> DecodingPolicy:
        """The DecodingPolicy this entry describes (validated there)."""
        return DecodingPolicy(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)

    @property
    def label(self) -> str:
        """Column label of this policy in records."""
        return self.name or self.policy().name


class CBSConfig(_Strict):
    """Decoding-constrained beam search settings (CBS paper §4; defaults: its recommended run).

    `anchor` keeps the target's own path in the beam (docs/cbs.md; false: the paper's search).
    `text_metrics` adds the BLEU ≥ `bleu_threshold` and character-distance masses of CBS §F.9,
    measured as the paper does on the baseline k-CBS candidates: a second, unpruned search when
    `prune` is set.
    """

    policy: str | None = None
    beam_width: int = Field(defaults.BEAM_WIDTH, ge=1)
    prune: Literal["none", "hamming", "levenshtein"] = defaults.PRUNE
    epsilon: int = Field(defaults.EPSILON, ge=0)
    tau_min_stop: bool = True
    tighter_levenshtein: bool = False
    tail_closure: bool = False
    anchor: bool = True
    max_children: int = Field(defaults.MAX_CHILDREN, ge=1)
    stored_candidates: int = Field(10, ge=0)
    text_metrics: bool = False
    bleu_threshold: float = Field(0.75, gt=0.0, le=1.0)
    char_epsilons: list[int] = Field(default_factory=lambda: [0, 5, 10, 25])

    @property
    def prune_mode(self) -> str | None:
        """The `prune` argument of `memrisk.cbs`."""
        return None if self.prune == "none" else self.prune


class PriorAwareConfig(_Strict):
    """Prior-aware memorization settings (PA paper §4).

    The bank is `prefixes_per_trial` × `trials` windows of `prefix_length` tokens (default: the
    windows' prefix length) drawn from `bank_datasets` (default: the datasets of role 'bank', else every
    target dataset).
    `m` defaults by suffix length (1e-2 up to 10 tokens, else 1e-4); `n` is calibrated on
    generic sequences (PA Appendix B, or `generic_sequences`) unless given.
    """

    prefixes_per_trial: int = Field(defaults.PA_PREFIXES_PER_TRIAL, ge=1)
    trials: int = Field(defaults.PA_TRIALS, ge=1)
    prefix_length: int | None = Field(None, ge=1)
    bank_datasets: list[str] | None = None
    exclude_own_document: bool = True
    m: float | None = Field(None, ge=0.0, lt=1.0)
    n: float | Literal["calibrate"] = "calibrate"
    generic_sequences: list[str] | None = None
    seed: int = 0

    @field_validator("n")
    @classmethod
    def _non_negative(cls, n: float | str) -> float | str:
        if not isinstance(n, str) and n < 0:
            raise ValueError(f"n must be >= 0 or 'calibrate', got {n}")
        return n


class MonteCarloConfig(_Strict):
    """Monte Carlo estimation of p_{z,ε} (CBS paper §C.1), the baseline CBS is measured against.

    Every window gets estimates at each of `samples` (nested: the first 20 of the 100 samples, ...),
    drawn under `policy` (default: the CBS policy) from one stream seeded by `seed` and the window's id.
    """

    samples: list[int] = Field(default_factory=lambda: list(defaults.MC_SAMPLES), min_length=1)
    seed: int = 0
    distance: Literal["hamming", "levenshtein"] = defaults.PRUNE
    epsilon: int = Field(defaults.EPSILON, ge=0)
    policy: str | None = None

    @field_validator("samples")
    @classmethod
    def _increasing(cls, samples: list[int]) -> list[int]:
        if min(samples) < 1 or samples != sorted(set(samples)):
            raise ValueError(f"samples must be increasing positive counts, got {samples}")
        return samples


class MembershipConfig(_Strict):
    """Membership-inference baselines from the teacher-forced pass (docs/membership.md): `k` of Min-K% and Min-K%++,
    an optional `reference_model` (same tokenizer; one more pass) for the likelihood ratio, and the ROC's reporting: TPR
    at each of `fprs`, percentile intervals at `confidence` from `bootstrap` resamples drawn with `seed`."""

    k: float = Field(defaults.MIA_K, gt=0.0, le=1.0)
    reference_model: ModelConfig | None = None
    fprs: list[float] = Field(default_factory=lambda: list(defaults.MIA_FPRS), min_length=1)
    bootstrap: int = Field(defaults.MIA_BOOTSTRAP, ge=0)
    confidence: float = Field(defaults.MIA_CONFIDENCE, gt=0.0, lt=1.0)
    seed: int = 0

    @field_validator("fprs")
    @classmethod
    def _rates(cls, fprs: list[float]) -> list[float]:
        if any(not 0.0 < f < 1.0 for f in fprs):
            raise ValueError(f"fprs must be false-positive rates in (0, 1), got {fprs}")
        return fprs


class CorpusConfig(_Strict):
    """The model's training corpus (docs/corpus_counts.md): each window gets how often its suffix, and its prefix + suffix,
    occur in it, counted in an index of its documents in the model's token ids, built once and cached. The documents are
    given as datasets are (`datasets`) or as files (`paths`); `index_dir` keeps the index in a folder of one's own, or
    names one built before (then no documents are needed)."""

    datasets: list[DatasetConfig] = Field(default_factory=list)
    paths: list[str] = Field(default_factory=list)
    index_dir: str | None = None

    @model_validator(mode="after")
    def _some_source(self) -> CorpusConfig:
        if not self.datasets and not self.paths and self.index_dir is None:
            raise ValueError("corpus needs datasets, paths or an index_dir")
        names = [d.name for d in self.sources()]
        if len(set(names)) != len(names):
            raise ValueError(f"corpus dataset names must be unique, got {names}")
        return self

    def sources(self) -> list[DatasetConfig]:
        """Where its documents come from: the datasets, then one per path (named `path0`, `path1`, ...)."""
        return [*self.datasets, *(DatasetConfig(name=f"path{i}", path=path) for i, path in enumerate(self.paths))]


CORPUS_METHOD = "corpus_counts"
"""The method a `corpus:` section adds: the counts are what the section is for."""


class RayConfig(_Strict):
    """How `memrisk run --ray` spreads a run over a Ray cluster (placement only: results do not change).

    `workers` defaults to as many replicas as the cluster's CPUs (or GPUs) hold; `gpus_per_worker`
    defaults to 1 on a cluster with GPUs (unless `model.device` is the CPU), else 0. A chunk whose worker dies is redone on a fresh
    worker up to `max_retries` times.
    """

    workers: int | None = Field(None, ge=1)
    cpus_per_worker: float = Field(1.0, gt=0.0)
    gpus_per_worker: float | None = Field(None, ge=0.0)
    max_retries: int = Field(3, ge=0)


class ExperimentConfig(_Strict):
    """A whole experiment: model, data, windows, decoding policies and methods."""

    model: ModelConfig
    datasets: list[DatasetConfig] = Field(min_length=1)
    windows: WindowConfig = WindowConfig()
    policies: list[PolicyConfig] = Field(default_factory=lambda: [PolicyConfig(temperature=defaults.TEMPERATURE, top_k=defaults.TOP_K)], min_length=1)
    methods: list[MethodName] = Field(default_factory=lambda: list(defaults.METHODS), min_length=1)
    cbs: CBSConfig = CBSConfig()
    prior_aware: PriorAwareConfig = PriorAwareConfig()
    mc: MonteCarloConfig = MonteCarloConfig()
    membership: MembershipConfig = MembershipConfig()
    tau_min: float = Field(defaults.TAU_MIN, gt=0.0, le=1.0)
    shard_size: int = Field(defaults.SHARD_SIZE, ge=1)
    ray: RayConfig = RayConfig()
    corpus: CorpusConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _corpus_is_counted(cls, data: Any) -> Any:
        """A `corpus:` section adds the corpus_counts method to `methods` (to the defaults when none are named)."""
        if not isinstance(data, dict) or data.get("corpus") is None:
            return data
        methods = data.get("methods", list(defaults.METHODS))
        if isinstance(methods, list) and CORPUS_METHOD not in methods:
            return data | {"methods": [*methods, CORPUS_METHOD]}
        return data

    @model_validator(mode="after")
    def _corpus_given(self) -> ExperimentConfig:
        if CORPUS_METHOD in self.methods and self.corpus is None:
            raise ValueError(f"method {CORPUS_METHOD} counts windows in the training corpus, and the config has no corpus: section")
        return self

    @field_validator("policies")
    @classmethod
    def _valid_policies(cls, policies: list[PolicyConfig]) -> list[PolicyConfig]:
        for entry in policies:
            try:
                entry.policy()
            except MemriskError as exc:
                raise ValueError(str(exc)) from exc
        labels = [p.label for p in policies]
        if len(set(labels)) != len(labels):
            raise ValueError(f"policy names must be unique, got {labels}")
        return policies

    @field_validator("datasets")
    @classmethod
    def _unique_datasets(cls, datasets: list[DatasetConfig]) -> list[DatasetConfig]:
        names = [d.name for d in datasets]
        if len(set(names)) != len(names):
            raise ValueError(f"dataset names must be unique, got {names}")
        return datasets

    @model_validator(mode="after")
    def _cbs_policy_exists(self) -> ExperimentConfig:
        labels = [p.label for p in self.policies]
        if self.cbs.policy is not None and self.cbs.policy not in labels:
            raise ValueError(f"cbs.policy {self.cbs.policy!r} is not one of the policies {labels}")
        if self.mc.policy is not None and self.mc.policy not in labels:
            raise ValueError(f"mc.policy {self.mc.policy!r} is not one of the policies {labels}")
        return self

    @model_validator(mode="after")
    def _bank_datasets_exist(self) -> ExperimentConfig:
        names = [d.name for d in self.datasets]
        unknown = [n for n in self.prior_aware.bank_datasets or [] if n not in names]
        if unknown:
            raise ValueError(f"prior_aware.bank_datasets {unknown} are not datasets of this config {names}")
        return self

    @model_validator(mode="after")
    def _banks_are_drawn_from(self) -> ExperimentConfig:
        if not self.scored_datasets():
            raise ValueError("every dataset has role 'bank'; at least one must be scored (role 'target' or 'control')")
        banks = [d.name for d in self.datasets if d.role == "bank"]
        if banks and "prior_aware" not in self.methods:
            raise ValueError(f"datasets {banks} have role 'bank', which only the prior_aware method draws from, and it is not among the methods")
        return self

    def document_sources(self, corpus: bool = True) -> list[tuple[str, DatasetConfig]]:
        """The sources of documents a run reads, by key: the datasets by name and, with `corpus`, the training corpus's
        as `corpus:NAME`."""
        counted = self.corpus.sources() if corpus and self.corpus is not None else []
        return [(d.name, d) for d in self.datasets] + [(f"corpus:{d.name}", d) for d in counted]

    def scored_datasets(self) -> list[DatasetConfig]:
        """The datasets cut into windows and scored: all but those of role 'bank'."""
        return [d for d in self.datasets if d.role != "bank"]

    def mc_policy(self) -> PolicyConfig:
        """The policy Monte Carlo samples from: `mc.policy`, else the CBS policy."""
        return next(p for p in self.policies if p.label == (self.mc.policy or self.cbs_policy().label))

    def cbs_policy(self) -> PolicyConfig:
        """The policy CBS searches under: `cbs.policy`, else the first configured one."""
        return next(p for p in self.policies if p.label == (self.cbs.policy or self.policies[0].label))

    def identity(self) -> dict[str, Any]:
        """The settings that change results (batch size, compilation, placement, sharding, threads, the matmul library and
        the prefix cache change them at most by the dtype's rounding)."""
        data = self.model_dump(mode="json")
        for key in MODEL_RUNNING_KEYS:
            data["model"].pop(key)
        data.pop("shard_size")
        data.pop("ray")
        data["datasets"] = [dataset.identity() for dataset in self.datasets]
        if "membership" not in self.methods:
            data.pop("membership")
        elif self.membership.reference_model is not None:
            for key in MODEL_RUNNING_KEYS:
                data["membership"]["reference_model"].pop(key)
        if self.corpus is None:
            data.pop("corpus")
        else:
            data["corpus"]["datasets"] = [dataset.identity() for dataset in self.corpus.datasets]
        return data


def parse_config(data: Any, base_dir: Path | None = None) -> ExperimentConfig:
    """Validate a config mapping; relative dataset paths are resolved against `base_dir`."""
    config = validated(ExperimentConfig, data, "config")
    if base_dir is None:
        return config
    datasets = [_with_resolved_paths(d, base_dir) for d in config.datasets]
    return config.model_copy(update={"datasets": datasets, "corpus": config.corpus and _corpus_resolved(config.corpus, base_dir)})


def _corpus_resolved(corpus: CorpusConfig, base_dir: Path) -> CorpusConfig:
    """The corpus's dataset paths, files and index folder made absolute against `base_dir`."""
    return corpus.model_copy(update={
        "datasets": [_with_resolved_paths(d, base_dir) for d in corpus.datasets],
        "paths": [str((base_dir / path).resolve()) for path in corpus.paths],
        "index_dir": str((base_dir / Path(corpus.index_dir).expanduser()).resolve()) if corpus.index_dir else None,
    })


def _with_resolved_paths(dataset: DatasetConfig, base_dir: Path) -> DatasetConfig:
    """`path`, and an `hf` that names a local folder, made absolute against `base_dir`."""
    if dataset.path:
        return dataset.model_copy(update={"path": str((base_dir / dataset.path).resolve())})
    if dataset.hf and (folder := base_dir / Path(dataset.hf).expanduser()).is_dir():
        return dataset.model_copy(update={"hf": str(folder.resolve())})
    return dataset


def validated(model: type[M], data: Any, what: str) -> M:
    """`data` validated as `model`; every problem named in one MemriskError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_problem(model, error) for error in exc.errors())
        raise MemriskError(f"invalid {what}: {problems}") from None


def _problem(model: type[BaseModel], error: ErrorDetails) -> str:
    """One validation error as `where: what`; an unknown key gets the closest allowed key as a suggestion."""
    where = ".".join(str(part) for part in error["loc"]) or "config"
    if error["type"] == "extra_forbidden":
        return f"{where}: unknown key{_suggestion(str(error['loc'][-1]), _model_at(model, error['loc'][:-1]))}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "literal_error" or error["type"].endswith(("_type", "_parsing")):
        message += f", got {_short(error['input'])}"
    return f"{where}: {message}"


def _suggestion(key: str, model: type[BaseModel] | None) -> str:
    """', did you mean 'x'?' for the allowed key closest to `key`, else the allowed keys."""
    if model is None:
        return ""
    allowed = list(model.model_fields)
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    return f", did you mean {close[0]!r}?" if close else f" (allowed: {', '.join(allowed)})"


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The settings class that holds the keys at `loc` (list indexes and union tags are stepped over)."""
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is not None:
            inner = _inner_model(field.annotation)
            if inner is None:
                return None
            model = inner
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The settings class inside an annotation such as `X`, `X | None` or `list[X]`, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for m in map(_inner_model, get_args(annotation)) if m is not None), None)


def _short(value: Any) -> str:
    """`repr(value)`, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_yaml_mapping(path: str | Path, expected: str) -> dict[str, Any]:
    """The mapping a YAML file holds; `expected` names its settings in the error when it holds none."""
    path = Path(path)
    if path.is_dir():
        raise MemriskError(f"config {path} is a folder, not a YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MemriskError(f"config file not found: {path}") from None
    except OSError as exc:
        raise MemriskError(f"cannot read config {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise MemriskError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MemriskError(f"{path} is not valid YAML: {_yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise MemriskError(f"{path} must hold a mapping of settings ({expected}, ...)")
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error on one line: what is wrong and where (1-based line and column)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark else problem


def load_config(path: str | Path) -> ExperimentConfig:
    """Read and validate a YAML experiment file."""
    return parse_config(read_yaml_mapping(path, "model, datasets"), Path(path).parent)


def defaults_text() -> str:
    """The result-changing defaults of an experiment, read from the config classes (for `memrisk run --help`)."""
    def fields(model: type[BaseModel], names: str) -> str:
        return ", ".join(f"{name} {model.model_fields[name].get_default(call_default_factory=True)}" for name in names.split())

    policies = ExperimentConfig.model_fields["policies"].get_default(call_default_factory=True)
    methods = ExperimentConfig.model_fields["methods"].get_default(call_default_factory=True)
    return "\n".join([
        "defaults (every one can be set in the YAML; the resolved config.yaml of a run lists them all):",
        f"  policies: {', '.join(p.label for p in policies)}; methods: {', '.join(methods)}",
        f"  windows: {fields(WindowConfig, 'mode prefix_length suffix_length stride')}",
        f"  cbs: {fields(CBSConfig, 'beam_width prune epsilon anchor tau_min_stop text_metrics')} (CBS paper §4)",
        f"  tau_min {ExperimentConfig.model_fields['tau_min'].default} (CBS paper App. F, (n,p) paper)",
        f"  prior_aware: {fields(PriorAwareConfig, 'prefixes_per_trial trials exclude_own_document n')} (PA paper §4)",
    ])
