"""Membership inference as a run method: `memrisk run` writes the scores from the teacher-forced pass, summary.json
their ROC between targets and controls, the page a ROC chart and table; a reference model must share the tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pytest

import memrisk
from memrisk import DecodingPolicy, MemriskError, cli
from memrisk.config import load_config
from memrisk.extraction.membership import roc_auc, window_scores
from memrisk.report import explorer
from memrisk.report.run_page import load_run
from memrisk.runner import run_experiment
from tests.conftest import TINY_HIDDEN, tiny_gpt2, word_tokenizer
from tests.integration.test_run import records, write_config
from tests.numerics import assert_close, reorder_tolerance

MEMBERSHIP = {"k": 0.4, "bootstrap": 50, "seed": 3}
MIA = ("mia.loss", "mia.zlib", "mia.min_k", "mia.min_k_pp")
# A token's log p and its moments over the vocabulary, from the run's batches against one row alone: the float32
# reordering bound of tests/numerics.py for one position.
PER_TOKEN = reorder_tolerance(1, len(word_tokenizer()), TINY_HIDDEN)


def test_memrisk_run_writes_the_scores_their_roc_and_the_report(tmp_path, model_dir) -> None:
    path = write_config(tmp_path, model_dir, methods=["probabilistic", "greedy", "membership"], membership=MEMBERSHIP)
    assert cli.main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    rows = records(tmp_path / "out")
    lm = memrisk.load_model(str(model_dir))
    row = rows[0]
    direct = memrisk.verbatim_scores(lm, [row["prefix_ids"]], [row["suffix_ids"]], DecodingPolicy(), moments=True)
    assert_close(row["mia.token_log_p"], direct.raw_log_probs[0], PER_TOKEN)
    assert_close(row["mia.token_mu"], direct.log_prob_mean[0], PER_TOKEN)
    assert_close(row["mia.token_sigma"], direct.log_prob_std[0], PER_TOKEN)
    for r in rows:
        expected = window_scores(np.array(r["mia.token_log_p"]), np.array(r["mia.token_mu"]), np.array(r["mia.token_sigma"]),
                                 r["suffix_text"], k=0.4)
        assert [r[key] for key in MIA] == pytest.approx([expected.loss, expected.zlib, expected.min_k, expected.min_k_pp])
        assert r["mia.loss"] == pytest.approx(np.mean(r["token_log_p.full"]), abs=1e-6)
        assert r["token_evals.membership"] == 0 and "mia.reference" not in r
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    membership = summary["membership"]
    assert set(membership["comparisons"]) == {"pooled", "story"}
    assert list(membership["scores"]) == [*MIA, "log_p.topk3", "log_p.full", "-greedy_levenshtein"]
    targets = [r for r in rows if r["role"] == "target"]
    controls = [r for r in rows if r["role"] == "control"]
    for key in MIA:
        entry = membership["comparisons"]["pooled"][key]
        assert (entry["members"], entry["non_members"]) == (len(targets), len(controls))
        assert entry["auc"]["estimate"] == pytest.approx(roc_auc([r[key] for r in targets], [r[key] for r in controls]))
        assert entry["auc"]["low"] <= entry["auc"]["high"]
        assert set(entry["tpr_at_fpr"]) == {"0.01", "0.001"}
    greedy = membership["comparisons"]["story"]["-greedy_levenshtein"]["auc"]["estimate"]
    assert greedy == pytest.approx(roc_auc([-r["greedy_levenshtein"] for r in targets], [-r["greedy_levenshtein"] for r in controls]))
    assert summary["datasets"]["story"]["membership"]["median"]["mia.loss"] == pytest.approx(np.median([r["mia.loss"] for r in targets]))
    assert summary["signatures"]["membership"] == f"membership|k:0.4|reference:none|bootstrap:50|confidence:0.95|seed:3|memrisk:{memrisk.__version__}"
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "Membership inference: targets (members) against controls (non-members)" in page
    auc = membership["comparisons"]["pooled"]["mia.min_k_pp"]["auc"]
    assert f"{auc['estimate']:.3f} [{auc['low']:.3f}, {auc['high']:.3f}]" in page
    assert (tmp_path / "out" / "figures" / "membership-roc.svg").is_file()
    assert len(controls) < 100  # so neither FPR can be resolved, and the page says so
    assert (f"With {len(controls)} control windows an FPR below 1/{len(controls)}" in page
            and "TPR at FPR 1.00% and 0.10% is the TPR at FPR 0" in page)
    run = load_run(tmp_path / "out")
    data = explorer.explorer_data(run.config, run.arrays, run.table.to_pylist(), None)
    shown = {record["example_id"]: record["mia.min_k_pp"] for record in run.table.to_pylist()}
    column = data["fields"].index("mia.min_k_pp")
    assert {row[0]: row[column] for row in data["rows"]} == {i: round(v, 3) for i, v in shown.items()}


def test_a_run_without_controls_says_so(tmp_path, model_dir) -> None:
    config = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "membership"], membership=MEMBERSHIP,
                                      datasets=[{"name": "story", "path": "story.txt"}]))
    summary = run_experiment(config, tmp_path / "out", progress=False)
    assert summary["membership"]["note"] == "no role: control dataset"
    assert "comparisons" not in summary["membership"]


def test_the_reference_ratio_is_target_minus_reference_log_likelihood(tmp_path, model_dir, other_model_dir) -> None:
    config = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "membership"],
                                      membership=MEMBERSHIP | {"reference_model": {"name": str(other_model_dir), "batch_size": 2}}))
    summary = run_experiment(config, tmp_path / "out", progress=False)
    rows = records(tmp_path / "out")
    reference = memrisk.load_model(str(other_model_dir))
    row = rows[0]
    direct = memrisk.verbatim_scores(reference, [row["prefix_ids"]], [row["suffix_ids"]], DecodingPolicy(), moments=True)
    assert_close(row["mia.reference_token_log_p"], direct.raw_log_probs[0], PER_TOKEN)
    for r in rows:
        assert r["mia.reference"] == pytest.approx(r["mia.loss"] - np.mean(r["mia.reference_token_log_p"]), abs=1e-6)
        assert r["token_evals.membership"] == len(r["prefix_ids"]) + len(r["suffix_ids"])
    assert "mia.reference" in summary["membership"]["scores"]
    assert summary["membership_settings"]["reference_model"]["loaded_from"] == str(other_model_dir)
    assert "reference:" + str(other_model_dir) in summary["signatures"]["membership"]


def test_a_reference_model_with_another_tokenizer_is_refused(tmp_path, model_dir) -> None:
    other = tmp_path / "other-vocabulary"
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "alpha": 1, "beta": 2, "gamma": 3}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tiny_gpt2(vocab_size=4, seed=3, n_positions=64).save_pretrained(other)
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]").save_pretrained(other)
    config = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "membership"],
                                      membership={"reference_model": {"name": str(other)}}))
    with pytest.raises(MemriskError) as error:
        run_experiment(config, tmp_path / "out", progress=False)
    message = str(error.value)
    assert f"membership.reference_model {str(other)!r} has a different tokenizer from the model {str(model_dir)!r}" in message
    assert not (tmp_path / "out" / "records").exists()
