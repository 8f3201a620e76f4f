"""BLEU and token-Levenshtein masses on the baseline k-CBS candidates (CBS §F.9, Table 15): a
window can be BLEU-extractable only, Levenshtein-extractable only, or both; and a run with
`cbs.text_metrics` measures them on an unpruned search even when its own search is pruned."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from memrisk.config import load_config, parse_config
from memrisk.distance import levenshtein, sentence_bleu
from memrisk.extraction.cbs import Candidate, CBSResult, Stop, text_masses
from memrisk.methods.cbs import text_metric_stats
from memrisk.runner import run_experiment
from tests.integration.test_run import records, write_config

REFERENCE = [f"w{i}" for i in range(30)]
INSERTED = REFERENCE[:15] + ["x1", "x2", "x3", "x4", "x5", "x6"] + REFERENCE[15:]  # 6 edits, long n-gram runs intact
SCATTERED = [w if i % 6 else "y" for i, w in enumerate(REFERENCE)]  # 5 substitutions spread out: every 4-gram broken


def as_ids(words: list[str]) -> tuple[int, ...]:
    return tuple(int(w[1:]) if w.startswith("w") else 100 + sum(map(ord, w)) for w in words)


def decode(ids) -> str:
    names = {as_ids([w])[0]: w for w in REFERENCE + INSERTED + SCATTERED}
    return " ".join(names[i] for i in ids)


def result_of(*candidates: tuple[list[str], float]) -> CBSResult:
    suffix = as_ids(REFERENCE)
    made = [Candidate(as_ids(w), math.log(p), 0, levenshtein(as_ids(w), suffix)) for w, p in candidates]
    return CBSResult(made, sum(p for _, p in candidates), 0.0, 0.0, 0.0, 0, 0, Stop("completed", 30), None, 5, 30)


def test_bleu_and_levenshtein_disagree_both_ways() -> None:
    reference = " ".join(REFERENCE)
    assert levenshtein(as_ids(INSERTED), as_ids(REFERENCE)) == 6 and sentence_bleu(" ".join(INSERTED), reference) >= 0.75
    assert levenshtein(as_ids(SCATTERED), as_ids(REFERENCE)) == 5 and sentence_bleu(" ".join(SCATTERED), reference) < 0.75
    bleu_only = result_of((INSERTED, 0.2))
    assert text_masses(bleu_only, decode, reference).bleu == 0.2 and bleu_only.lower_bound("levenshtein", 5) == 0.0
    lev_only = result_of((SCATTERED, 0.3))
    assert text_masses(lev_only, decode, reference).bleu == 0.0 and lev_only.lower_bound("levenshtein", 5) == 0.3


def test_table_15_counts_both_levenshtein_only_and_bleu_only(tmp_path) -> None:
    config = parse_config({"model": {"name": "m"}, "datasets": [{"name": "d", "documents": ["x"]}], "methods": ["cbs"],
                           "cbs": {"epsilon": 1, "text_metrics": True}, "tau_min": 0.01})
    table = pa.table({
        "cbs_bleu_mass": [0.5, 0.5, 0.0, 0.0],
        "cbs_baseline_lower.levenshtein": [[0.0, 0.5], [0.0, 0.0], [0.2, 0.2], [0.0, 0.001]],
    })
    rows = table.to_pydict()

    def column(name: str) -> np.ndarray:
        values = np.empty(len(rows[name]), dtype=object)
        values[:] = rows[name]
        return values

    assert text_metric_stats(column, config) == {
        "bleu_threshold": 0.75, "levenshtein_epsilon": 1, "bleu": 2, "levenshtein": 2,
        "both": 1, "levenshtein_only": 1, "bleu_only": 1,
    }


def test_a_pruned_run_measures_text_metrics_on_a_baseline_search(tmp_path, model_dir) -> None:
    cbs = {"beam_width": 3, "epsilon": 2, "prune": "levenshtein", "text_metrics": True, "char_epsilons": [0, 3]}
    config = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "cbs"], cbs=cbs))
    summary = run_experiment(config, tmp_path / "out", progress=False)
    rows = records(tmp_path / "out")
    for row in rows:
        baseline = row["cbs_baseline_lower.levenshtein"]
        assert len(baseline) == 3 and baseline == sorted(baseline) and 0 <= row["cbs_bleu_mass"] <= 1
        assert row["token_evals.cbs_baseline"] >= 6 + 4 * 3 or row["cbs_stop"] != "completed"
    story = [r for r in rows if r["dataset"] == "story"]
    stats = summary["datasets"]["story"]["cbs"]["text_metrics"]
    assert stats["levenshtein"] == sum(r["cbs_baseline_lower.levenshtein"][2] >= config.tau_min for r in story)
    assert stats["both"] + stats["bleu_only"] == stats["bleu"] == sum(r["cbs_bleu_mass"] >= config.tau_min for r in story)
