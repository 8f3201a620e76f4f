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

from pydantic import BaseModel, ConfigDict, Field, model_validator

from memrisk.books.perturb import INSTRUCTION
from memrisk.books.phase1 import PROMPT_TEMPLATE, SUCCESS_THRESHOLD
from memrisk.books.phase2 import CONTINUE_PROMPT, REFUSAL_PATTERNS, STOP_STRINGS
from memrisk.config import read_yaml_mapping, validated

MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "claude-3-7-sonnet": {"max_tokens": 250, "turns": 600},
    "grok-3": {"max_tokens": 500, "turns": 300},
    "gemini-2.5-pro": {"max_tokens": 2000, "turns": 300, "frequency_penalty": 2.0, "presence_penalty": 0.1},
    "gpt-4.1": {"max_tokens": 500, "turns": 200},
}
FALLBACK_DEFAULTS: dict[str, Any] = {"max_tokens": 500, "turns": 300}


class _Strict(BaseModel):
    """Unknown keys are errors, so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class PriceConfig(_Strict):
    """US dollars per million tokens."""

    input: float = Field(ge=0)
    cached_input: float = Field(ge=0)
    output: float = Field(ge=0)


class ChatModelConfig(_Strict):
    """The chat model and its Phase 2 generation settings (unset ones from MODEL_DEFAULTS)."""

    provider: Literal["openai", "anthropic", "gemini"] = "openai"
    name: str
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float = Field(120.0, gt=0)
    temperature: float | None = Field(0.0, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    turns: int | None = Field(None, ge=0)
    price: PriceConfig | None = None

    def default(self, field: str) -> Any:
        """The configured value, else the Books App. C.2.1 default for this model."""
        value = getattr(self, field)
        if value is not None:
            return value
        for prefix, defaults in sorted(MODEL_DEFAULTS.items(), key=lambda kv: -len(kv[0])):
            if self.name.startswith(prefix):
                return defaults.get(field, FALLBACK_DEFAULTS.get(field))
        return FALLBACK_DEFAULTS.get(field)


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
    """Phase 1: instruction + prefix; Best-of-N over perturbed instructions when `perturb`."""

    attempts: int = Field(1, ge=1, le=100_000)
    perturb: bool = False
    seed: int = 0
    concurrency: int = Field(1, ge=1, le=64)
    threshold: float = Field(SUCCESS_THRESHOLD, gt=0, le=1)
    max_tokens: int = Field(1000, ge=1)
    prefix_words: int = Field(30, ge=1)
    target_words: int = Field(30, ge=1)
    instruction: str = INSTRUCTION
    template: str = PROMPT_TEMPLATE
    continue_on_failure: bool = False


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
    """Phase 2: the continuation loop and its halting rules."""

    continue_prompt: str = CONTINUE_PROMPT
    empty_retry_delay_s: float = Field(1.0, ge=0)
    refusal: MatchConfig = MatchConfig(patterns=list(REFUSAL_PATTERNS), regex=True, case_sensitive=False)
    stop: MatchConfig = MatchConfig(patterns=list(STOP_STRINGS), regex=False, case_sensitive=True)
    backoff: BackoffConfig = BackoffConfig()


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
    """Validate a books-run mapping; book paths are resolved against `base_dir`."""
    config = validated(BooksRunConfig, data, "books config")
    if base_dir is None:
        return config
    books = [b.model_copy(update={"path": str((base_dir / b.path).resolve())}) for b in config.books]
    return config.model_copy(update={"books": books})


def load_books_config(path: str | Path) -> BooksRunConfig:
    """Read and validate a books-run YAML file."""
    return parse_books_config(read_yaml_mapping(path, "model, books, spend_cap_usd"), Path(path).parent)
