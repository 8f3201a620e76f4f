"""`memrisk run` end to end on a tiny saved model: records, resume after a kill, config changes (bad input: test_hostile_inputs)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from memrisk import cli
from memrisk.config import load_config
from memrisk.methods.base import is_measurement
from memrisk.runner import run_experiment
from tests.conftest import TINY_HIDDEN, WORDS, word_tokenizer
from tests.numerics import assert_close, reorder_tolerance

STORY = " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(600))
# One log p of write_config's 5-token suffixes computed by two methods or kernels (rows batched otherwise): the float32
# reordering bound of tests/numerics.py.
REORDERED = reorder_tolerance(5, len(word_tokenizer()), TINY_HIDDEN)


def write_config(folder: Path, model_dir: Path, **overrides) -> Path:
    """An experiment YAML over a book-mode text and a doc-mode JSONL control."""
    (folder / "story.txt").write_text(STORY, encoding="utf-8")
    (folder / "control.jsonl").write_text(
        "\n".join(json.dumps({"text": " ".join(WORDS[i:] + WORDS[:i])}) for i in range(6)), encoding="utf-8"
    )
    config = {
        "model": {"name": str(model_dir), "batch_size": 4},
        "datasets": [
            {"name": "story", "path": "story.txt"},
            {"name": "control", "path": "control.jsonl", "role": "control"},
        ],
        "windows": {"mode": "book", "prefix_length": 6, "suffix_length": 5, "stride": 40},
        "policies": [{"top_k": 3}, {"name": "full"}],
        "shard_size": 4,
    } | overrides
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def records(out: Path) -> list[dict]:
    """All records of a run folder, sorted by example id, without the wall-time columns (measurements, which
    differ between identical runs)."""
    manifest = json.loads((out / "manifest.json").read_text())
    rows = [r for shard in manifest["shards"] for r in pq.read_table(out / "records" / shard).to_pylist()]
    return sorted(({k: v for k, v in r.items() if not is_measurement(k)} for r in rows), key=lambda r: r["example_id"])


def test_every_record_holds_its_share_of_each_methods_wall_time(tmp_path, model_dir) -> None:
    """`seconds.<method>` per window: the chunk's time for that method over its windows (equal within a chunk)."""
    config = load_config(write_config(tmp_path, model_dir))
    run_experiment(config, tmp_path / "out", progress=False)
    rows = pq.read_table(tmp_path / "out" / "records").to_pylist()
    timed = sorted(k for k in rows[0] if is_measurement(k))
    assert timed == ["seconds.greedy", "seconds.probabilistic", "seconds.teacher_forcing"]
    assert all(r[k] > 0 for r in rows for k in timed)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "seconds" not in json.dumps(summary), "summary.json holds results only"


def test_run_writes_records_summary_config_and_versions(tmp_path, model_dir) -> None:
    config = load_config(write_config(tmp_path, model_dir))
    summary = run_experiment(config, tmp_path / "out", progress=False)
    rows = records(tmp_path / "out")
    assert len(rows) == summary["examples"] == sum(w["windows"] for w in summary["windows"].values())
    assert len({r["example_id"] for r in rows}) == len(rows)
    row = rows[0]
    assert len(row["prefix_ids"]) == 6 and len(row["suffix_ids"]) == 5 and len(row["greedy_ids"]) == 5
    assert row["log_p.topk3"] <= 0 and row["log_p.full"] <= 0
    assert {"control", "story"} == set(summary["datasets"])
    assert summary["datasets"]["control"]["role"] == "control"
    for name in ("config.yaml", "versions.json", "summary.json", "windows.json"):
        assert (tmp_path / "out" / name).is_file()
    versions = json.loads((tmp_path / "out" / "versions.json").read_text())
    assert versions["model"]["architecture"] == "GPT2LMHeadModel" and "torch" in versions


def interrupted_run(config, out: Path, monkeypatch, chunks: int) -> None:
    """A local run interrupted (as by Ctrl-C) while scoring chunk `chunks` + 1."""
    from memrisk import runner

    real, calls = runner.score_examples, []

    def crash_after(*args, **kwargs):
        calls.append(1)
        if len(calls) > chunks:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(runner, "score_examples", crash_after)
        with pytest.raises(KeyboardInterrupt):
            run_experiment(config, out, progress=False)


def test_resume_after_crash_has_no_lost_or_duplicated_records(tmp_path, model_dir, monkeypatch) -> None:
    config = load_config(write_config(tmp_path, model_dir))
    run_experiment(config, tmp_path / "clean", progress=False)
    interrupted_run(config, tmp_path / "resumed", monkeypatch, chunks=2)
    assert len(records(tmp_path / "resumed")) == 8
    (tmp_path / "resumed" / "records" / "part-00009.parquet").write_bytes(b"half-written shard")
    run_experiment(config, tmp_path / "resumed", progress=False)
    assert records(tmp_path / "resumed") == records(tmp_path / "clean")
    assert not (tmp_path / "resumed" / "records" / "part-00009.parquet").exists()


@pytest.mark.slow
def test_killed_process_resumes_with_the_same_command(tmp_path, model_dir, launcher) -> None:
    path = write_config(tmp_path, model_dir, shard_size=1)
    command = ["run", str(path), "--out", str(tmp_path / "out")]
    child = launcher.start(command)
    manifest = tmp_path / "out" / "manifest.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.running():
        if manifest.exists() and len(json.loads(manifest.read_text())["shards"]) >= 3:
            break
        time.sleep(0.05)
    launcher.kill(child)
    launcher.wait(child)
    partial = len(records(tmp_path / "out"))
    resumed = launcher.start(command)
    assert launcher.wait(resumed) == 0, resumed.tail()
    clean = tmp_path / "clean"
    run_experiment(load_config(path), clean, progress=False)
    assert partial < len(records(clean))
    assert records(tmp_path / "out") == records(clean)


def test_changed_config_is_refused_unless_forced(tmp_path, model_dir, capsys) -> None:
    path = write_config(tmp_path, model_dir)
    out = str(tmp_path / "out")
    assert cli.main(["run", str(path), "--out", out]) == 0
    write_config(tmp_path, model_dir, policies=[{"top_k": 2}])
    assert cli.main(["run", str(path), "--out", out]) == 2
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if line.startswith("memrisk: error:")]
    assert "holds a run made with different settings: policies: [{" in line and "'top_k': 3" in line and "'top_k': 2" in line
    assert "Use another --out folder, or --force" in err
    assert cli.main(["run", str(path), "--out", out, "--force"]) == 0
    assert "log_p.topk2" in records(tmp_path / "out")[0]
    assert "log_p.topk3" not in records(tmp_path / "out")[0]


def test_batch_size_change_resumes(tmp_path, model_dir) -> None:
    path = write_config(tmp_path, model_dir)
    run_experiment(load_config(path), tmp_path / "out", progress=False)
    config = load_config(write_config(tmp_path, model_dir, model={"name": str(model_dir), "batch_size": 1}))
    run_experiment(config, tmp_path / "out", progress=False)


def test_report_rebuilds_summary_from_records(tmp_path, model_dir, capsys) -> None:
    out = tmp_path / "out"
    run_experiment(load_config(write_config(tmp_path, model_dir)), out, progress=False)
    before = json.loads((out / "summary.json").read_text())
    (out / "summary.json").unlink()
    assert cli.main(["report", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text()) == before
    assert "story" in capsys.readouterr().out


def test_cbs_method_writes_bounds_masses_and_summary(tmp_path, model_dir) -> None:
    cbs = {"beam_width": 3, "epsilon": 2, "stored_candidates": 2, "char_epsilons": [0, 3]}
    config = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "greedy", "cbs"], cbs=cbs))
    summary = run_experiment(config, tmp_path / "out", progress=False)
    for row in records(tmp_path / "out"):
        for distance in ("levenshtein", "hamming"):
            lower, upper = row[f"cbs_lower.{distance}"], row[f"cbs_upper.{distance}"]
            assert len(lower) == 3 and lower == sorted(lower)
            assert all(lo <= up + 1e-12 for lo, up in zip(lower, upper))
        assert row["token_evals.cbs"] <= 6 + (5 - 1) * (3 + 1)
        assert (row["token_evals.probabilistic"], row["token_evals.greedy"]) == (6 + 5, 6 + 5 - 1)
        assert len(row["cbs_top"]) <= 2 and len(row["cbs_log_p"]) == len(row["cbs_levenshtein"])
        assert all(d <= 2 for d in row["cbs_levenshtein"])
        assert row["cbs_stop"] in ("completed", "no_viable", "tau_min")
        assert "cbs_char_levenshtein_mass" not in row and "cbs_bleu_mass" not in row  # text metrics are opt-in
    stats = summary["datasets"]["story"]["cbs"]
    assert stats["distance"] == "levenshtein" and set(stats["rate"]["levenshtein"]) == {"0", "1", "2"}
    assert sum(stats["stops"].values()) == summary["datasets"]["story"]["examples"]
    assert stats["recovery"]["teacher_forced"] == summary["datasets"]["story"]["probabilistic"]["topk3"]["extractable"]


def test_prior_aware_reads_p_z_from_the_one_teacher_forcing_pass(tmp_path, model_dir, monkeypatch) -> None:
    """The windows are teacher-forced once, by the pass every chunk starts with: it scores the full distribution for
    prior-aware even where the run does not configure it, and prior-aware's P(s|p) is that pass's p_z bit for bit.
    Only the calibration's generic halves are teacher-forced apart."""
    from memrisk.extraction import prior_aware as extraction
    from memrisk.extraction.probabilistic import verbatim_scores

    generic = ["the quick brown fox jumps over the lazy dog", "a river ran past old mill where children played"]
    apart: list[int] = []

    def counted(model, prefixes, suffixes, *args, **kwargs):
        apart.append(len(prefixes))
        return verbatim_scores(model, prefixes, suffixes, *args, **kwargs)

    monkeypatch.setattr(extraction, "verbatim_scores", counted)
    settings = {"prior_aware": {"prefixes_per_trial": 3, "trials": 2, "generic_sequences": generic}}
    config = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "prior_aware"], policies=[{"top_k": 3}], **settings))
    run_experiment(config, tmp_path / "out", progress=False)
    assert apart == [len(generic)], "prior-aware teacher-forced only the calibration's generic halves"
    with_full = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "prior_aware"], **settings))
    run_experiment(with_full, tmp_path / "full", progress=False)
    rows, full_rows = records(tmp_path / "out"), records(tmp_path / "full")
    assert [r["pa_log_p"] for r in rows] == [r["log_p.full"] for r in full_rows] == [r["pa_log_p"] for r in full_rows]
    assert [r["log_p.topk3"] for r in rows] == [r["log_p.topk3"] for r in full_rows]
    assert "log_p.full" not in rows[0], "the pass's extra policy is not a record column"


def test_cbs_policy_must_be_configured(tmp_path, model_dir, capsys) -> None:
    path = write_config(tmp_path, model_dir, methods=["cbs"], cbs={"policy": "nucleus"})
    assert cli.main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "cbs.policy 'nucleus' is not one of the policies" in capsys.readouterr().err


def test_prior_aware_method_adds_columns_calibration_and_filtered_rates(tmp_path, model_dir) -> None:
    generic = ["the quick brown fox jumps over the lazy dog", "a river ran past old mill where children played"]
    config = load_config(write_config(
        tmp_path, model_dir, methods=["probabilistic", "greedy", "prior_aware"],
        prior_aware={"prefixes_per_trial": 6, "trials": 2, "generic_sequences": generic, "m": 1e-3},
    ))
    summary = run_experiment(config, tmp_path / "out", progress=False)
    rows = records(tmp_path / "out")
    info = json.loads((tmp_path / "out" / "prior_aware.json").read_text())
    assert info["n_source"] == "calibrated" and info["bank_datasets"] == ["story"] and len(info["calibration"]["log_ratios"]) == 2
    for row in rows:
        assert len(row["pa_log_prior_trials"]) == 2
        assert row["pa_log_ratio"] == pytest.approx(row["pa_log_p"] - row["pa_log_prior"])
        assert_close(row["pa_log_p"], row["log_p.full"], REORDERED)
        assert row["pa_memorized"] == (row["pa_log_p"] > math.log(1e-3) and row["pa_log_ratio"] > math.log(info["n"]))
        # the bank comes from the story's single document, which its own windows leave out
        assert row["pa_prefixes_used"] == (0 if row["dataset"] == "story" else 12)
        assert (row["pa_log_prior"] == -math.inf) == (row["dataset"] == "story")
    story = summary["datasets"]["story"]["prior_aware"]
    story_rows = [r for r in rows if r["dataset"] == "story"]
    assert story["pa_memorized"] == sum(r["pa_memorized"] for r in story_rows)
    assert story["extractable"] == sum(r["pa_extractable"] for r in story_rows)
    greedy = story["filtered"]["greedy"]
    assert greedy["extracted_and_pa_memorized"] == sum(r["greedy_exact"] and r["pa_memorized"] for r in story_rows)
    extremes = summary["prior_aware_extremes"]
    assert extremes["lowest"][0]["log10_ratio"] <= extremes["highest"][0]["log10_ratio"]


def test_out_of_memory_halves_the_batch_and_retries(tmp_path, model_dir, monkeypatch, caplog) -> None:
    """A device that fits at most 2 sequences per forward pass: the run halves 8 → 4 → 2 (logged;
    shards of 4 make the first pass 4 rows) and its records equal those of a run at batch size 2."""
    import torch

    import memrisk
    from memrisk.models.memory import halving_on_oom

    config = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "greedy", "cbs"]))
    run_experiment(config, tmp_path / "small", model=memrisk.load_model(str(model_dir), batch_size=2), progress=False)
    lm = memrisk.load_model(str(model_dir), batch_size=8)
    attempts: list[int] = []
    for name in ("suffix_logits", "prefill"):
        real = getattr(lm, name)

        def limited(rows, *args, _real=real, **kwargs):
            attempts.append(len(rows))
            if len(rows) > 2:
                raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
            return _real(rows, *args, **kwargs)

        monkeypatch.setattr(lm, name, limited)
    with caplog.at_level("WARNING", logger="memrisk.models.memory"):
        run_experiment(config, tmp_path / "halved", model=lm, progress=False)
    assert lm.batch_size == 2 and attempts[:3] == [4, 4, 2] and max(attempts[2:]) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "out of memory on cpu: batch size halved to 4, retrying", "out of memory on cpu: batch size halved to 2, retrying",
    ]
    assert records(tmp_path / "halved") == records(tmp_path / "small")
    monkeypatch.setattr(lm, "batch_size", 1)
    with pytest.raises(memrisk.MemriskError, match="one sequence per batch"):
        halving_on_oom(lm, lambda: (_ for _ in ()).throw(torch.OutOfMemoryError("oom")))


def test_attention_kernel_is_chosen_by_the_config_and_recorded(tmp_path, model_dir) -> None:
    import memrisk

    config = load_config(write_config(tmp_path, model_dir, model={"name": str(model_dir), "batch_size": 4, "attention": "eager"}))
    run_experiment(config, tmp_path / "eager", progress=False)
    versions = json.loads((tmp_path / "eager" / "versions.json").read_text())
    assert versions["model"]["attention"] == "eager"
    assert memrisk.load_model(str(model_dir), attention="sdpa").model.config._attn_implementation == "sdpa"
    with pytest.raises(memrisk.MemriskError, match="attention must be one of"):
        memrisk.load_model(str(model_dir), attention="fast")
    sdpa = load_config(write_config(tmp_path, model_dir, model={"name": str(model_dir), "batch_size": 4, "attention": "sdpa"}))
    run_experiment(sdpa, tmp_path / "sdpa", progress=False)
    for a, b in zip(records(tmp_path / "eager"), records(tmp_path / "sdpa"), strict=True):
        assert a["greedy_ids"] == b["greedy_ids"]
        assert_close(a["log_p.topk3"], b["log_p.topk3"], REORDERED)


def test_threads_setting_pins_the_cpu_threads(tmp_path, model_dir) -> None:
    import torch

    from memrisk.runner import load_run_model

    before = torch.get_num_threads()
    try:
        load_run_model(load_config(write_config(tmp_path, model_dir, model={"name": str(model_dir), "threads": 1})))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_matmul_setting_reaches_the_model_and_its_provenance(tmp_path, model_dir) -> None:
    import memrisk
    from memrisk.runner import load_run_model

    lm = load_run_model(load_config(write_config(tmp_path, model_dir, model={"name": str(model_dir), "matmul": "onednn"})))
    assert lm.matmul == "onednn" and lm.describe()["matmul"] == "onednn"
    with pytest.raises(memrisk.MemriskError, match="model.matmul"):
        load_config(write_config(tmp_path, model_dir, model={"name": str(model_dir), "matmul": "mkl"}))


def test_prefix_cache_setting_reaches_the_model_and_its_provenance(tmp_path, model_dir) -> None:
    import memrisk
    from memrisk.runner import load_run_model

    lm = load_run_model(load_config(write_config(tmp_path, model_dir, model={"name": str(model_dir), "prefix_cache": "per_row"})))
    assert lm.prefix_cache == "per_row" and lm.describe()["prefix_cache"] == "per_row"
    assert load_run_model(load_config(write_config(tmp_path, model_dir))).describe()["prefix_cache"] == "shared"
    with pytest.raises(memrisk.MemriskError, match="model.prefix_cache"):
        load_config(write_config(tmp_path, model_dir, model={"name": str(model_dir), "prefix_cache": "paged"}))


def test_auto_batch_size_fits_free_memory_and_keeps_the_records(tmp_path, model_dir, monkeypatch) -> None:
    import dataclasses

    from memrisk.models import memory
    from memrisk.runner import fitting_batch_size, load_run_model

    fixed = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "greedy", "cbs"]))
    auto = load_config(write_config(
        tmp_path, model_dir, methods=["probabilistic", "greedy", "cbs"], model={"name": str(model_dir), "batch_size": "auto"},
    ))
    lm = load_run_model(fixed)
    shape = dataclasses.asdict(memory.model_shape(lm))
    teacher_row = memory.sequence_bytes(**shape, sequence_length=12, scored_positions=6)
    beam_row = memory.sequence_bytes(**shape, sequence_length=12, scored_positions=1)
    free = 3 * 20 * beam_row
    monkeypatch.setattr(memory, "free_memory_bytes", lambda device: free)
    expected = min(int(0.8 * free) // teacher_row, int(0.8 * free) // (20 * beam_row))
    assert fitting_batch_size(auto, lm) == expected == 2
    run_experiment(fixed, tmp_path / "fixed", progress=False)
    run_experiment(auto, tmp_path / "auto", progress=False)
    got, want = records(tmp_path / "auto"), records(tmp_path / "fixed")
    assert [r["greedy_ids"] for r in got] == [r["greedy_ids"] for r in want]
    assert max(abs(a["log_p.full"] - b["log_p.full"]) for a, b in zip(got, want)) < 1e-5
