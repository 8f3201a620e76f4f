"""The demo's model sizes: the sizes table, `memrisk demo --sizes` as a study with one cell per size, and
studies/demo-sizes.yaml (`base: demo`, `demo:SIZE` models), on a small synthetic corpus and tiny training configs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from memrisk import cli
from memrisk.demo import run as demo_run
from memrisk.demo.experiment import DEMO_BATCH_SIZE, OTHER_MODEL_BATCH_SIZE, demo_config, demo_generic
from memrisk.demo.run import NEXT_STEP
from memrisk.demo.study import DemoModels, demo_model_name, sizes_study
from memrisk.demo.train import SIZES, TrainingConfig, skeleton_model, train_demo_model, training_config
from memrisk.errors import MemriskError
from memrisk.study import load_study
from tests.tiny_demo import shrunk_demo, tiny_corpus

STUDY = Path(__file__).parents[2] / "studies" / "demo-sizes.yaml"


@pytest.fixture
def tiny_demo(monkeypatch, tmp_path):
    """The demo with tiny sizes, the tiny corpus, a prior-aware bank of 8 prefixes and a cache in tmp_path."""
    with shrunk_demo(monkeypatch, tmp_path / "cache"):
        yield tmp_path


class _Vocabulary:
    """What `skeleton_model` reads of a tokenizer: its length and EOS id."""

    eos_token_id = 0

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size


def _parameters(config: TrainingConfig) -> int:
    return sum(p.numel() for p in skeleton_model(_Vocabulary(config.vocab_size), config).parameters())


def test_sizes_share_everything_but_the_model_shape_and_small_is_the_original_model() -> None:
    assert list(SIZES) == ["small", "base"]
    assert SIZES["small"] == TrainingConfig()
    shape = ("hidden_size", "num_layers", "num_heads", "intermediate_size")
    small, base = (vars(SIZES[name]) for name in ("small", "base"))
    assert {k: v for k, v in small.items() if k not in shape} == {k: v for k, v in base.items() if k not in shape}
    assert (_parameters(SIZES["small"]), _parameters(SIZES["base"])) == (2_753_792, 4_458_752)


def test_an_unknown_size_is_one_clear_error(capsys) -> None:
    with pytest.raises(MemriskError, match="unknown demo model size 'huge'; the sizes are small, base"):
        training_config("huge")
    assert cli.main(["demo", "--sizes", "small,huge"]) == 2
    assert "unknown demo model size 'huge'; the sizes are small, base" in capsys.readouterr().err
    with pytest.raises(MemriskError, match="distinct"):
        sizes_study(["small", "small"], 0)
    assert cli.main(["demo", "--sizes", "small,base", "--model", "smollm2"]) == 2
    assert "leave out --model" in capsys.readouterr().err


def test_sizes_parse_from_the_command_line() -> None:
    args = cli.build_parser().parse_args(["demo", "--sizes", "small,base", "--seed", "3"])
    assert (args.sizes, args.seed, args.out) == ("small,base", 3, None)
    assert cli.build_parser().parse_args(["demo"]).sizes is None
    assert sizes_study(["small", "base"], 3) == {
        "base": "demo", "demo": {"seed": 3},
        "cells": [{"name": "small", "set": {"model.name": "demo:small"}}, {"name": "base", "set": {"model.name": "demo:base"}}],
    }


def test_the_study_file_has_the_demos_own_config_for_each_size(tiny_demo) -> None:
    models = DemoModels.of(STUDY)
    _, cells = load_study(STUDY, models.prepare)
    _, from_demo = load_study(sizes_study(["small", "base"], 0), DemoModels(0).prepare)
    corpus = tiny_corpus(0)
    assert [c.name for c in cells] == ["small", "base"]
    for cell, demo_cell in zip(cells, from_demo):
        name = demo_model_name(cell.name)
        lm, _ = models.skeleton(name, None, None)
        assert cell.config == demo_config(corpus, name, demo_generic(corpus, lm)) == demo_cell.config
        assert [d.name for d in cell.config.datasets] == [
            "planted-x1", "planted-x4", "planted-x16", "planted-x64", "template-x2", "generic-x2", "heldout",
        ]


def test_the_demos_own_models_run_a_whole_shard_a_batch_and_any_other_model_sixteen_windows(tiny_demo, model_dir, monkeypatch) -> None:
    assert (DEMO_BATCH_SIZE, OTHER_MODEL_BATCH_SIZE) == (64, 16)
    own = {"base": "demo", "grid": {"model.name": ["demo:small", "demo:base"]}}
    mixed = {"base": "demo", "cells": [{"name": "demo", "set": {"model.name": "demo:small"}}, {"name": "other", "set": {"model.name": str(model_dir)}}]}
    assert [cell.config.model.batch_size for cell in load_study(own, DemoModels(0).prepare)[1]] == [64, 64]
    assert [cell.config.model.batch_size for cell in load_study(mixed, DemoModels(0).prepare)[1]] == [16, 16]
    plain = {"base": "demo", "grid": {"windows.limit": [1, 2]}}
    for name, batch_size in ((str(model_dir), 16), ("demo:small", 64)):
        overrides = {"model.name": name}
        cells = load_study(plain, DemoModels(0).prepare, overrides)[1]
        assert [(c.config.model.name, c.config.model.batch_size) for c in cells] == [(name, batch_size)] * 2, "--set model.name"
    monkeypatch.setattr(demo_run, "build_demo_corpus", tiny_corpus)
    monkeypatch.setattr(demo_run, "write_report", lambda folders: folders[0] / "report.html")
    trained = train_demo_model(tiny_corpus(0), progress=False, config=training_config("small"))
    for model, out, batch_size in ((None, "own", 64), (str(trained), "given", 16)):
        demo_run.run_demo(tiny_demo / out, model=model, progress=False)
        assert yaml.safe_load((tiny_demo / out / "config.yaml").read_text())["model"]["batch_size"] == batch_size


def test_dry_run_builds_skeletons_and_trains_nothing(tiny_demo, capsys) -> None:
    assert cli.main(["study", str(STUDY), "--dry-run", "--out", str(tiny_demo / "out")]) == 0
    printed = capsys.readouterr().out
    assert "cells/small: model.name=demo:small;" in printed and "cells/base: model.name=demo:base;" in printed
    assert "cells/base: 10 windows," in printed
    assert not (tiny_demo / "cache").exists() and not (tiny_demo / "out").exists()


def test_bad_demo_studies_are_refused(tiny_demo, capsys) -> None:
    study = tiny_demo / "study.yaml"
    study.write_text("base: demo\ncells:\n  - {name: huge, set: {model.name: 'demo:huge'}}\n")
    assert cli.main(["study", str(study), "--dry-run"]) == 2
    assert "unknown demo model size 'huge'" in capsys.readouterr().err
    study.write_text("base: {model: {name: smollm2}, datasets: []}\ndemo: {seed: 1}\n")
    assert cli.main(["study", str(study), "--dry-run"]) == 2
    assert "demo: applies only with base: demo" in capsys.readouterr().err
    study.write_text("base: demo\ndemo: {seed: 1, steps: 3}\n")
    assert cli.main(["study", str(study), "--dry-run"]) == 2
    assert "steps" in capsys.readouterr().err


def test_demo_sizes_trains_each_size_and_measures_them_as_one_study(tiny_demo, capsys, monkeypatch) -> None:
    out = tiny_demo / "sizes"
    assert cli.main(["demo", "--sizes", "small,base", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.rstrip().endswith(NEXT_STEP)
    assert "memrisk demo: training the base model" in printed and "\nbase (0.0M parameters)\n" in printed
    assert len(list((tiny_demo / "cache" / "demo").iterdir())) == 2
    cells = json.loads((out / "study.json").read_text())
    assert cells == [{"name": "small", "changes": {"model.name": "demo:small"}}, {"name": "base", "changes": {"model.name": "demo:base"}}]
    summaries = {size: json.loads((out / "cells" / size / "summary.json").read_text()) for size in ("small", "base")}
    assert all(s["datasets"]["heldout"]["role"] == "control" for s in summaries.values())
    with open(out / "study.csv", newline="") as handle:
        assert [row["cell"] for row in csv.DictReader(handle)] == ["small", "base"]
    for figure in ("cbs-fig4-verbatim-share", "cbs-fig20-common-set", "np-fig5-models", "np-fig6-duplicates", "pa-fig4-models"):
        assert (out / "figures" / f"{figure}.csv").is_file(), figure  # their rows; a picture needs extracted windows
    monkeypatch.setattr(demo_run, "write_report", lambda folders: folders[0] / "report.html")  # drawn above already
    assert cli.main(["demo", "--sizes", "small,base", "--out", str(out)]) == 0  # resumed: trains and runs nothing
    assert "training" not in capsys.readouterr().out
    assert {size: json.loads((out / "cells" / size / "summary.json").read_text()) for size in ("small", "base")} == summaries
