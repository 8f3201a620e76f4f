"""A run's closeness columns (greedy, stored CBS candidates, Monte Carlo samples) equal the metrics recomputed from
what the records store, and summary.json gives their mean and median per dataset."""

from __future__ import annotations

import math

import numpy as np

import memrisk
from memrisk.closeness import METRICS, closeness, closeness_many
from memrisk.config import load_config
from memrisk.extraction.montecarlo import monte_carlo
from memrisk.methods.monte_carlo import window_seed
from memrisk.runner import run_experiment
from tests.integration.test_run import records, write_config


def test_closeness_columns_equal_recomputation_from_the_stored_generations(tmp_path, model_dir) -> None:
    config = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "greedy", "cbs", "mc"],
                                      cbs={"beam_width": 4, "epsilon": 4, "stored_candidates": 3},
                                      mc={"samples": [3, 8], "epsilon": 1, "seed": 5}))
    summary = run_experiment(config, tmp_path / "run", progress=False)
    rows = records(tmp_path / "run")
    lm = memrisk.load_model(str(model_dir))
    assert any(r["cbs_top"] for r in rows), "some window has stored candidates"
    for row in rows:
        target, target_text = row["suffix_ids"], row["suffix_text"]
        assert {m: row[f"greedy_close.{m}"] for m in METRICS} == closeness(row["greedy_ids"], target, row["greedy_text"], target_text).__dict__
        top = row["cbs_top"]
        stored = closeness_many([c["tokens"] for c in top], [c["text"] for c in top], target, target_text)
        for m in METRICS:
            assert row[f"cbs_close.{m}"] == stored[m].tolist()
            assert row[f"cbs_best_close.{m}"] == (max(stored[m].tolist()) if top else None)
        drawn: list[np.ndarray] = []
        monte_carlo(lm, [row["prefix_ids"]], [target], config.mc_policy().policy(), samples=8, epsilon=1,
                    seed=window_seed(5, row["example_id"]), checkpoints=[3, 8], on_samples=lambda _, s: drawn.append(s))
        samples = np.concatenate(drawn).tolist()
        assert len(samples) == 8
        sampled = closeness_many(samples, [lm.decode(s) for s in samples], target, target_text)
        for m in METRICS:
            assert row[f"mc_close_mean.{m}"] == math.fsum(sampled[m].tolist()) / 8
            assert row[f"mc_close_max.{m}"] == max(sampled[m].tolist())
    story = [r for r in rows if r["dataset"] == "story"]
    greedy = summary["datasets"]["story"]["greedy"]["closeness"]
    assert greedy["rouge_l"]["mean"] == np.mean([r["greedy_close.rouge_l"] for r in story])
    assert greedy["lcp_tokens"]["median"] == np.median([r["greedy_close.lcp_tokens"] for r in story])
    best = [r["cbs_best_close.bleu"] for r in story if r["cbs_best_close.bleu"] is not None]
    assert summary["datasets"]["story"]["cbs"]["best_closeness"]["bleu"]["mean"] == (np.mean(best) if best else None)
    assert summary["datasets"]["story"]["mc"]["closeness"]["max"]["lcs_substring_chars"]["median"] == \
        np.median([r["mc_close_max.lcs_substring_chars"] for r in story])
