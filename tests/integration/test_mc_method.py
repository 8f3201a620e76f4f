"""Monte Carlo as a run method: nested budgets from one stream per window, independent of how windows are chunked."""

from __future__ import annotations

import numpy as np

import memrisk
from memrisk.config import load_config
from memrisk.methods.monte_carlo import MonteCarlo, window_seed
from memrisk.runner import run_experiment
from tests.integration.test_run import records, write_config

MC = {"samples": [4, 16], "epsilon": 1, "seed": 3}


def test_mc_columns_equal_the_python_api_and_do_not_depend_on_the_shard_size(tmp_path, model_dir) -> None:
    one = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "mc"], mc=MC, shard_size=1))
    summary = run_experiment(one, tmp_path / "one", progress=False)
    four = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "mc"], mc=MC, shard_size=4))
    run_experiment(four, tmp_path / "four", progress=False)
    rows = records(tmp_path / "one")
    assert [{k: v for k, v in r.items() if k.startswith(("mc_", "token_evals.mc"))} for r in rows] == \
           [{k: v for k, v in r.items() if k.startswith(("mc_", "token_evals.mc"))} for r in records(tmp_path / "four")]
    lm = memrisk.load_model(str(model_dir))
    row = rows[0]
    [direct] = memrisk.monte_carlo(lm, [row["prefix_ids"]], [row["suffix_ids"]], one.mc_policy().policy(), samples=16, epsilon=1,
                                   seed=window_seed(3, row["example_id"]), checkpoints=[4, 16])
    assert row["mc_samples"] == [4, 16]
    assert row["mc_estimate"] == direct.curve_estimate.tolist()
    assert row["token_evals.mc"] == direct.token_evals
    prefill = len(row["prefix_ids"]) + (lm.bos_token_id is not None)  # the prefix, evaluated once
    assert row["token_evals.mc"] == prefill + (len(row["suffix_ids"]) - 1) * 16
    assert row["token_evals.mc"] <= MonteCarlo().cost_bound(one, len(row["prefix_ids"]), len(row["suffix_ids"]))
    for r in rows:
        estimate = np.array(r["mc_estimate"])
        assert estimate.shape == (2, 2)
        assert np.all(estimate[:, 0] <= estimate[:, 1])  # within ε = 0 ⊂ within ε = 1
        assert np.allclose(estimate * np.array([[4], [16]]), np.round(estimate * np.array([[4], [16]])))  # hit counts
        assert all(lo <= e <= hi for lo_row, e_row, hi_row in zip(r["mc_low"], r["mc_estimate"], r["mc_high"])
                   for lo, e, hi in zip(lo_row, e_row, hi_row))
    story = summary["datasets"]["story"]["mc"]
    story_rows = np.array([r["mc_estimate"] for r in rows if r["dataset"] == "story"])
    assert story["samples"] == [4, 16]
    assert np.allclose(story["mean_estimate"], story_rows.mean(axis=0))
    # the run signs the config's seed; each window samples under window_seed(seed, example id)
    assert summary["signatures"]["mc"] == direct.signature.replace(f"seed:{window_seed(3, row['example_id'])}", "seed:3")
