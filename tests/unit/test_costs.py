"""Unit tests of memrisk.books.costs: prices, per-request cost, the worst-case bound and the cost report."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memrisk.books.costs import (
    FREE,
    MESSAGE_OVERHEAD_TOKENS,
    PRICES,
    CostReport,
    Price,
    cost,
    cost_report,
    price_for,
    request_bound,
    run_price,
)
from memrisk.books.providers import Usage
from memrisk.errors import MemriskError

PRICE = Price(2.0, 0.5, 8.0)  # dollars per million tokens: fresh input, cached input, output


# --- Price and price_for -----------------------------------------------------------------------


@pytest.mark.parametrize("values", [(-1.0, 0.5, 8.0), (2.0, -0.5, 8.0), (2.0, 0.5, -8.0)])
def test_a_negative_price_is_refused_naming_the_price(values):
    with pytest.raises(MemriskError) as info:
        Price(*values)
    assert str(info.value) == f"prices must be >= 0, got Price(input={values[0]}, cached_input={values[1]}, output={values[2]})"


def test_zero_prices_are_allowed():
    assert cost(Usage(10, 10, 5), Price(0.0, 0.0, 0.0)) == 0.0


TABLE = {"gpt": Price(1, 1, 1), "gpt-4": Price(2, 2, 2), "gpt-4.1": Price(3, 3, 3)}


@pytest.mark.parametrize(("model", "price"), [
    ("gpt-4.1", Price(3, 3, 3)),
    ("gpt-4.1-mini", Price(3, 3, 3)),  # longest key it starts with
    ("gpt-4o", Price(2, 2, 2)),
    ("gpt-3.5-turbo", Price(1, 1, 1)),
])
def test_price_for_takes_the_exact_key_else_the_longest_prefix(model, price):
    assert price_for(model, TABLE) == price


@pytest.mark.parametrize("model", ["my-gpt-4.1", "GPT-4.1", "claude"])
def test_price_for_matches_prefixes_only_and_case_sensitively(model):
    with pytest.raises(MemriskError) as info:
        price_for(model, TABLE)
    assert str(info.value) == f"no price known for model {model!r}; give model.price (input, cached_input, output per 1M tokens)"


def test_a_dated_model_name_gets_the_list_price_of_its_family():
    assert price_for("claude-3-7-sonnet-20250219") == PRICES["claude-3-7-sonnet"] == Price(3.00, 0.30, 15.00)


# --- cost ------------------------------------------------------------------------------------


def test_cost_bills_fresh_cached_and_output_tokens_at_their_prices():
    """700 fresh · $2 + 300 cached · $0.5 + 200 output · $8 = $3150 per million requests."""
    assert cost(Usage(input=1000, output=200, cached_input=300), PRICE) == pytest.approx(3150 / 1e6)


def test_unreported_cache_is_billed_fresh():
    assert cost(Usage(input=1000, output=0, cached_input=None), PRICE) == pytest.approx(2000 / 1e6)


def test_a_cached_count_above_the_input_is_capped_at_the_input():
    """500 cached of 100 input: all 100 at the cached price, none fresh."""
    assert cost(Usage(input=100, output=0, cached_input=500), PRICE) == pytest.approx(50 / 1e6)
    assert cost(Usage(input=100, output=0), PRICE, cached_input=500) == pytest.approx(50 / 1e6)


def test_the_cached_override_replaces_the_provider_count():
    usage = Usage(input=100, output=10, cached_input=100)
    assert cost(usage, PRICE, cached_input=0) == pytest.approx((100 * 2 + 10 * 8) / 1e6)
    assert cost(usage, PRICE, cached_input=40) == pytest.approx((60 * 2 + 40 * 0.5 + 10 * 8) / 1e6)


# --- request_bound -----------------------------------------------------------------------------


def test_request_bound_counts_utf8_bytes_plus_overhead_per_message_and_every_candidate():
    """'ab' is 2 bytes and '€' 3: 5 + 2·16 = 37 input tokens at $2; 3 candidates · 100 tokens at $8."""
    messages = [{"role": "system", "content": "ab"}, {"role": "user", "content": "€"}]
    assert MESSAGE_OVERHEAD_TOKENS == 16
    assert request_bound(messages, 100, 3, PRICE) == pytest.approx((37 * 2 + 300 * 8) / 1e6)


def test_request_bound_without_messages_is_the_output_alone():
    assert request_bound([], 10, 2, PRICE) == pytest.approx(20 * 8 / 1e6)


prices = st.tuples(st.floats(0, 100), st.floats(0, 1), st.floats(0, 100)).map(lambda p: Price(p[0], p[0] * p[1], p[2]))


@given(prices, st.lists(st.text(max_size=20), max_size=4), st.integers(0, 50), st.integers(0, 4), st.data())
def test_the_bound_is_at_least_the_cost_of_any_usage_within_its_token_counts(price, texts, max_tokens, candidates, data):
    """With cached input no dearer than fresh input (what every listed price has)."""
    messages = [{"role": "user", "content": t} for t in texts]
    input_tokens = sum(len(t.encode("utf-8")) + MESSAGE_OVERHEAD_TOKENS for t in texts)
    used = data.draw(st.integers(0, input_tokens))
    usage = Usage(used, data.draw(st.integers(0, candidates * max_tokens)), data.draw(st.none() | st.integers(0, used)))
    assert cost(usage, price) <= request_bound(messages, max_tokens, candidates, price) * (1 + 1e-12)


def test_the_bound_holds_or_a_price_with_dearer_cache_is_refused():
    messages = [{"role": "user", "content": "abcd"}]  # 4 bytes + 16 overhead = 20 input tokens
    try:
        price = Price(1.0, 2.0, 0.0)
    except MemriskError:
        return
    assert cost(Usage(input=20, output=0, cached_input=20), price) <= request_bound(messages, 0, 1, price)


# --- cost_report -------------------------------------------------------------------------------


def test_cost_report_totals_and_the_cache_heuristic_per_conversation():
    """Per request (fresh·2 + cached·0.5 + output·8):
    1. a: 100 in, 10 out, cache unknown        cost 280, no-cache 280, estimate 280 (no previous in a)
    2. b: 50 in, 5 out, cache unknown          cost 140, no-cache 140, estimate 140 (no previous in b)
    3. a: 80 in, 10 out, cache unknown         cost 240, no-cache 240, estimate min(100, 80)=80 cached: 40 + 80 = 120
    4. a: 200 in, 0 out, 20 cached (reported)  cost 180·2 + 20·0.5 = 370, no-cache 400, estimate uses the reported 20: 370
    5. b: unanswered
    Totals: cost 1030, no-cache 1060, estimate 910 (per million)."""
    entries = [
        {"conversation": "a", "usage": {"input": 100, "output": 10, "cached_input": None}},
        {"conversation": "b", "usage": {"input": 50, "output": 5, "cached_input": None}},
        {"conversation": "a", "usage": {"input": 80, "output": 10, "cached_input": None}},
        {"conversation": "a", "usage": {"input": 200, "output": 0, "cached_input": 20}},
        {"conversation": "b", "usage": None},
    ]
    report = cost_report(entries, PRICE)
    assert (report.requests, report.answered) == (5, 4)
    assert (report.input_tokens, report.cached_input_tokens, report.output_tokens) == (430, 20, 25)
    assert report.cost == pytest.approx(1030 / 1e6)
    assert report.cost_without_cache == pytest.approx(1060 / 1e6)
    assert report.cost_with_cache_estimate == pytest.approx(910 / 1e6)


def test_the_heuristic_uses_the_previous_request_not_the_largest():
    """Inputs 300, 100, 200 in one conversation: the third is cached min(100, 200) = 100, not 300's share."""
    entries = [{"conversation": "c", "usage": {"input": n, "output": 0}} for n in (300, 100, 200)]
    report = cost_report(entries, PRICE)
    # fresh·2 + cached·0.5: 300·2 + (0·2 + 100·0.5) + (100·2 + 100·0.5)
    assert report.cost_with_cache_estimate == pytest.approx((600 + 50 + 250) / 1e6)


def test_entries_without_a_conversation_share_one():
    entries = [{"usage": {"input": 100, "output": 0}}, {"usage": {"input": 100, "output": 0}}]
    assert cost_report(entries, PRICE).cost_with_cache_estimate == pytest.approx((200 + 50) / 1e6)


def test_an_empty_report_is_all_zeros_and_its_dict_has_every_field():
    report = cost_report([], PRICE)
    assert report == CostReport(0, 0, 0, 0, 0, 0.0, 0.0, 0.0)
    assert report.as_dict() == {
        "requests": 0, "answered": 0, "input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
        "cost": 0.0, "cost_without_cache": 0.0, "cost_with_cache_estimate": 0.0,
    }


def test_run_price_is_free_for_local_models_and_unknown_replayed_ones() -> None:
    assert run_price("local", "smollm2", None) == FREE
    assert run_price("replay", "smollm2", None) == FREE
    assert run_price("replay", "gpt-4.1-2025-04-14", None) == PRICES["gpt-4.1"]
    assert run_price("local", "smollm2", Price(1.0, 0.5, 2.0)) == Price(1.0, 0.5, 2.0)
    with pytest.raises(MemriskError, match="no price known for model 'mystery'"):
        run_price("openai", "mystery", None)
