"""What API requests cost: a per-model price table, a worst-case bound checked before every
request (so a spend cap is never crossed), and the cost report of Books Tables 1 and 5–10."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memrisk.books.providers import Usage
from memrisk.errors import MemriskError

MESSAGE_OVERHEAD_TOKENS = 16


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens: fresh input, cached input, output."""

    input: float
    cached_input: float
    output: float

    def __post_init__(self) -> None:
        if min(self.input, self.cached_input, self.output) < 0:
            raise MemriskError(f"prices must be >= 0, got {self}")
        if self.cached_input > self.input:
            raise MemriskError(f"the cached-input price must not exceed the input price (the spend cap's bound bills input fresh), got {self}")


# List prices in effect for the Books paper's runs (Aug–Sep 2025); override per run in the config.
PRICES: dict[str, Price] = {
    "gpt-4.1": Price(2.00, 0.50, 8.00),
    "claude-3-7-sonnet": Price(3.00, 0.30, 15.00),
    "gemini-2.5-pro": Price(1.25, 0.31, 10.00),
    "grok-3": Price(3.00, 0.75, 15.00),
}


def price_for(model: str, table: Mapping[str, Price] = PRICES) -> Price:
    """The price of `model`, matched exactly or by the longest table key it starts with."""
    if model in table:
        return table[model]
    keys = sorted((k for k in table if model.startswith(k)), key=len, reverse=True)
    if not keys:
        raise MemriskError(f"no price known for model {model!r}; give model.price (input, cached_input, output per 1M tokens)")
    return table[keys[0]]


FREE = Price(0.0, 0.0, 0.0)


def run_price(provider: str, model: str, given: Price | None) -> Price:
    """The price a run bills at: `given`, else free for a model run locally, else the table's price of `model`
    (a replayed log is billed at it when the table knows the model, else free, as a locally recorded log)."""
    if given is not None:
        return given
    if provider == "local" or (provider == "replay" and not any(model.startswith(k) for k in PRICES)):
        return FREE
    return price_for(model)


def cost(usage: Usage, price: Price, *, cached_input: int | None = None) -> float:
    """Dollars for one request; `cached_input` overrides the provider's count (e.g. a heuristic)."""
    cached = usage.cached_input if cached_input is None else cached_input
    cached = min(cached or 0, usage.input)
    return ((usage.input - cached) * price.input + cached * price.cached_input + usage.output * price.output) / 1e6


def request_bound(messages: Sequence[Mapping[str, str]], max_tokens: int, candidates: int, price: Price) -> float:
    """An upper bound on a request's cost: every input token billed fresh, one token per UTF-8
    byte (no tokenizer emits more tokens than bytes) plus overhead per message, and every
    candidate generating `max_tokens`."""
    input_tokens = sum(len(m["content"].encode("utf-8")) + MESSAGE_OVERHEAD_TOKENS for m in messages)
    return (input_tokens * price.input + candidates * max_tokens * price.output) / 1e6


@dataclass(frozen=True)
class CostReport:
    """Token usage and dollars of a set of requests (Books Tables 1, 5–10)."""

    requests: int
    answered: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    cost: float
    cost_without_cache: float
    cost_with_cache_estimate: float

    def as_dict(self) -> dict[str, Any]:
        """Plain fields for JSON."""
        return dict(self.__dict__)


def cost_report(responses: Iterable[Mapping[str, Any]], price: Price) -> CostReport:
    """Totals over logged responses (dicts with `usage` and `conversation`).

    `cost` uses the provider's cached-token counts; `cost_without_cache` bills every input token
    fresh (upper bound); `cost_with_cache_estimate` applies the Books paper's heuristic where the
    provider reports no cache: cached = min(previous, current prompt tokens) within a conversation.
    """
    requests = answered = fresh_in = cached_in = out = 0
    total = without = estimate = 0.0
    previous: dict[str, int] = {}
    for entry in responses:
        requests += 1
        if entry.get("usage") is None:
            continue
        answered += 1
        usage = Usage(**entry["usage"])
        fresh_in += usage.input
        cached_in += usage.cached_input or 0
        out += usage.output
        total += cost(usage, price)
        without += cost(usage, price, cached_input=0)
        conversation = str(entry.get("conversation", ""))
        heuristic = usage.cached_input if usage.cached_input is not None else min(previous.get(conversation, 0), usage.input)
        estimate += cost(usage, price, cached_input=heuristic)
        previous[conversation] = usage.input
    return CostReport(requests, answered, fresh_in, cached_in, out, total, without, estimate)
