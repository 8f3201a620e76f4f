"""`memrisk run --help` and `memrisk books run --help` print the defaults that change results, read
from the config classes, and they are the papers' (PA c = 5,000; Books turn budgets)."""

from __future__ import annotations

import pytest

from memrisk import cli


def help_text(capsys, *args: str) -> str:
    with pytest.raises(SystemExit):
        cli.main([*args, "--help"])
    return capsys.readouterr().out


def test_run_help_lists_the_papers_defaults(capsys) -> None:
    text = help_text(capsys, "run")
    assert "policies: topk40" in text
    assert "cbs: beam_width 20, prune levenshtein, epsilon 5, anchor True" in text
    assert "tau_min 0.001" in text
    assert "prior_aware: prefixes_per_trial 5000, trials 5" in text


def test_books_run_help_lists_the_papers_turn_budgets(capsys) -> None:
    text = help_text(capsys, "books", "run")
    assert "grok-3: max_tokens 500, turns 300" in text and "gpt-4.1: max_tokens 500, turns 200" in text
    assert "claude-3-7-sonnet: max_tokens 250, turns 600" in text
    assert "paper: other models (10000, True)" in text
