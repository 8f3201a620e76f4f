"""The YAML of `memrisk books run`: which chat model, which books, the two phases, the spend cap.

Per-model Phase 2 defaults follow Books App. C.2.1 (temperature 0; max tokens per turn 250 /
500 / 2000 / 500 for Claude 3.7 Sonnet, Grok 3, Gemini 2.5 Pro and GPT-4.1; Gemini's frequency /
presence penalties 2.0 / 0.1) and Table 4 with App. C.2.3 for the turn budgets: Claude 600,
Gemini 300, Grok 300, GPT-4.1 200 (App. C.2.1's list swaps Grok and GPT-4.1; its next sentence,
Table 4's maxima and App. C.2.3's "maximum of 200" for GPT-4.1 agree with these).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memrisk.books.perturb import INSTRUCTION
from memrisk.books.phase1 import PROMPT_TEMPLATE, SUCCESS_THRESHOLD
from memrisk.books.phase2 import PROMPTS, REFUSAL_PATTERNS, STOP_STRINGS, PromptName
from memrisk.config import read_yaml_mapping, validated

MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "claude-3-7-sonnet": {"max_tokens": 250, "turns": 600},
    "grok-3": {"max_tokens": 500, "turns": 300},
    "gemini-2.5-pro": {
        "max_tokens": 2000, "turns": 300, "frequency_penalty": 2.0, "presence_penalty": 0.1, "prompt": "continue_without_citation",
    },
    "gpt-4.1": {"max_tokens": 500, "turns": 200},
}
FALLBACK_DEFAULTS: dict[str, Any] = {"max_tokens": 500, "turns": 300, "prompt": "continue"}
GEMINI_MIN_THINKING: dict[str, int] = {"gemini-2.5-pro": 128, "gemini-2.5-flash": 0, "gemini-2.5-flash-lite": 0}
PHASE1_PRESETS: dict[str, dict[str, tuple[int, bool]]] = {
    "quick": {"": (1, False)},
    "paper": {
        "": (10_000, True), "claude-3-7-sonnet": (10_000, True), "gpt-4.1": (10_000, True),
        "gemini-2.5-pro": (1, False), "grok-3": (1, False),
    },
}


def by_prefix(table: dict[str, Any], name: str) -> Any:
    """The entry of `table` under the longest key `name` starts with ("" matches every name); None if none does."""
    keys = sorted((key for key in table if name.startswith(key)), key=len, reverse=True)
    return table[keys[0]] if keys else None


def model_default(name: str, field: str) -> Any:
    """The default of `field` for model `name`: Books App. C.2.1, Table 4 and §4.3 for the paper's models, else FALLBACK_DEFAULTS."""
    return (by_prefix(MODEL_DEFAULTS, name) or {}).get(field, FALLBACK_DEFAULTS.get(field))


class _Strict(BaseModel):
    """Unknown keys are errors, so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class PriceConfig(_Strict):
    """US dollars per million tokens."""

    input: float = Field(ge=0)
    cached_input: float = Field(ge=0)
    output: float = Field(ge=0)


class ChatModelConfig(_Strict):
    """The chat model and its Phase 2 generation settings (unset ones from MODEL_DEFAULTS); Gemini's
    thinking budget is minimised by default (`min`, Books §4.3). `local` runs `name` on this machine
    (sampling seeded by `seed`); `replay` answers from the recorded request log `log`."""

    provider: Literal["openai", "anthropic", "gemini", "local", "replay"] = "openai"
    name: str
    log: str | None = None
    seed: int = 0
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float = Field(120.0, gt=0)
    temperature: float | None = Field(0.0, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    turns: int | None = Field(None, ge=0)
    thinking_budget: int | str | None = "min"
    price: PriceConfig | None = None

    @field_validator("thinking_budget", mode="before")
    @classmethod
    def _min_or_tokens(cls, value: Any) -> Any:
        if value is None or value == "min" or (type(value) is int and value >= -1):
            return value
        raise ValueError(f"give min, null (not sent), -1 (dynamic) or a number of tokens >= 0, got {value!r}")

    @model_validator(mode="after")
    def _log_is_replay_only(self) -> ChatModelConfig:
        if (self.provider == "replay") != (self.log is not None):
            raise ValueError("provider replay needs log: (a recorded requests.jsonl); other providers take none")
        return self

    @model_validator(mode="after")
    def _thinking_budget_is_gemini_only(self) -> ChatModelConfig:
        if isinstance(self.thinking_budget, int) and self.provider != "gemini":
            raise ValueError(f"thinking_budget {self.thinking_budget} is a gemini setting; the {self.provider} provider takes none")
        return self

    def default(self, field: str) -> Any:
        """The configured value, else the Books App. C.2.1 / Table 4 default for this model."""
        value = getattr(self, field)
        return model_default(self.name, field) if value is None else value

    def thinking(self) -> int | None:
        """The thinking budget sent (Gemini only): `min` is 0 where the model can turn thinking off,
        else its smallest budget (128 for Gemini 2.5 Pro); None (not sent) for models not known."""
        if self.provider != "gemini" or self.thinking_budget is None:
            return None
        if self.thinking_budget == "min":
            return by_prefix(GEMINI_MIN_THINKING, self.name)
        return int(self.thinking_budget)


class BookConfig(_Strict):
    """A reference book; the Phase 1 seed is `prefix` + `target`, or the book's first words."""

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    path: str
    prefix: str | None = None
    target: str | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> BookConfig:
        if (self.prefix is None) != (self.target is None):
            raise ValueError("give both prefix and target, or neither (then the book's first words are used)")
        return self


class Phase1Config(_Strict):
    """Phase 1: instruction + prefix; Best-of-N over perturbed instructions when `perturb`. The
    budget comes from `preset`: `quick` (one plain prompt) or `paper` (Books §3.1, §4.1, Table 3:
    Best-of-N up to 10,000 for Claude 3.7 Sonnet, GPT-4.1 and other models; one plain prompt,
    N = 0, for Gemini 2.5 Pro and Grok 3); `attempts` and `perturb` override it."""

    preset: Literal["quick", "paper"] = "quick"
    attempts: int | None = Field(None, ge=1, le=100_000)
    perturb: bool | None = None
    seed: int = 0
    concurrency: int = Field(1, ge=1, le=64)
    threshold: float = Field(SUCCESS_THRESHOLD, gt=0, le=1)
    max_tokens: int = Field(1000, ge=1)
    prefix_words: int = Field(30, ge=1)
    target_words: int = Field(30, ge=1)
    instruction: str = INSTRUCTION
    template: str = PROMPT_TEMPLATE
    continue_on_failure: bool = False

    def budget(self, model: str) -> tuple[int, bool]:
        """(prompts sent at most, perturbed) for `model`: the preset's, overridden by `attempts` / `perturb`."""
        preset_attempts, preset_perturb = by_prefix(PHASE1_PRESETS[self.preset], model)
        attempts = preset_attempts if self.attempts is None else self.attempts
        perturb = preset_perturb if self.perturb is None else self.perturb
        return (attempts if perturb else 1), perturb


class MatchConfig(_Strict):
    """Refusal or stop-string patterns with their case rule and scope (full / head / tail chars)."""

    patterns: list[str]
    regex: bool
    case_sensitive: bool
    scope: Literal["full", "head", "tail"] = "full"
    scope_chars: int = Field(0, ge=0)


class BackoffConfig(_Strict):
    """Retries of 429s and timeouts."""

    max_retries: int = Field(8, ge=0)
    initial_delay_s: float = Field(1.0, ge=0)
    factor: float = Field(2.0, ge=1)
    max_delay_s: float = Field(60.0, ge=0)


class Phase2Config(_Strict):
    """Phase 2: the continuation loop and its halting rules. The prompt is a named variant (`prompt`,
    default per model: Books §4.3's "Continue without citation metadata." for Gemini 2.5 Pro, else
    "Continue.") or any text (`continue_prompt`)."""

    prompt: PromptName | None = None
    continue_prompt: str | None = None
    empty_retry_delay_s: float = Field(1.0, ge=0)
    refusal: MatchConfig = MatchConfig(patterns=list(REFUSAL_PATTERNS), regex=True, case_sensitive=False)
    stop: MatchConfig = MatchConfig(patterns=list(STOP_STRINGS), regex=False, case_sensitive=True)
    backoff: BackoffConfig = BackoffConfig()

    @model_validator(mode="after")
    def _one_prompt(self) -> Phase2Config:
        if self.prompt is not None and self.continue_prompt is not None:
            raise ValueError("give prompt or continue_prompt, not both")
        return self

    def text(self, model: str) -> tuple[str, str]:
        """(variant name, or "custom" for `continue_prompt`; the text sent) for `model`."""
        if self.continue_prompt is not None:
            return "custom", self.continue_prompt
        name = self.prompt or model_default(model, "prompt")
        return name, PROMPTS[name]


class RefusalRetryConfig(_Strict):
    """Waiting out refusals (per-chapter variant)."""

    attempts: int = Field(50, ge=0)
    delay_s: float = Field(120.0, ge=0)
    factor: float = Field(1.0, ge=1)


class PerChapterConfig(_Strict):
    """The GPT-4.1 per-chapter variant (Books §4.3, App. C.2.3): Phase 1 and 2 per chapter with
    several candidates per turn, retrying when all refuse; nv-recall over the union of blocks."""

    chapter_pattern: str = r"^\s*chapter\b.*$"
    candidates: int = Field(5, ge=1)
    turns: int = Field(50, ge=0)
    refusal_retry: RefusalRetryConfig = RefusalRetryConfig()


class BooksRunConfig(_Strict):
    """A whole `memrisk books run`."""

    model: ChatModelConfig
    books: list[BookConfig] = Field(min_length=1)
    spend_cap_usd: float = Field(ge=0)
    phase1: Phase1Config = Phase1Config()
    phase2: Phase2Config = Phase2Config()
    per_chapter: PerChapterConfig | None = None

    @model_validator(mode="after")
    def _unique_books(self) -> BooksRunConfig:
        names = [b.name for b in self.books]
        if len(set(names)) != len(names):
            raise ValueError(f"book names must be unique, got {names}")
        return self


def parse_books_config(data: Any, base_dir: Path | None = None) -> BooksRunConfig:
    """Validate a books-run mapping; book paths and a replayed log are resolved against `base_dir`."""
    config = validated(BooksRunConfig, data, "books config")
    if base_dir is None:
        return config
    books = [b.model_copy(update={"path": str((base_dir / b.path).resolve())}) for b in config.books]
    model = config.model
    if model.log is not None:
        model = model.model_copy(update={"log": str((base_dir / model.log).resolve())})
    return config.model_copy(update={"books": books, "model": model})


def load_books_config(path: str | Path) -> BooksRunConfig:
    """Read and validate a books-run YAML file."""
    return parse_books_config(read_yaml_mapping(path, "model, books, spend_cap_usd"), Path(path).parent)


def defaults_text() -> str:
    """Per-model Phase 2 defaults and the Phase 1 presets, from the tables above (for `memrisk books run --help`)."""
    lines = ["per-model defaults (Books App. C.2.1, Table 4, App. C.2.3, §4.3; other models: "
             + ", ".join(f"{k} {v}" for k, v in FALLBACK_DEFAULTS.items()) + "):"]
    lines += [f"  {name}: " + ", ".join(f"{k} {v}" for k, v in values.items()) for name, values in MODEL_DEFAULTS.items()]
    lines.append("phase1.preset (prompts sent at most, perturbed), 'quick' by default:")
    lines += [f"  {preset}: " + ", ".join(f"{name or 'other models'} {budget}" for name, budget in table.items())
              for preset, table in PHASE1_PRESETS.items()]
    return "\n".join(lines)
