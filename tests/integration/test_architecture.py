"""The architecture as tests: layers point down (import-linter), a new method is one object and one
registry line, every default and every run-folder file name is written once."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sysconfig
from pathlib import Path

import numpy as np
import pytest

import memrisk
from memrisk import defaults, layout, methods
from memrisk.config import CBSConfig, ExperimentConfig, ModelConfig, PolicyConfig, PriorAwareConfig, WindowConfig, load_config
from memrisk.methods.base import MethodDefaults
from memrisk.runner import run_experiment
from memrisk.summary import rebuild_summary
from tests.integration.test_run import records, write_config

SOURCE = Path(memrisk.__file__).parent


def test_the_layer_contract_is_kept() -> None:
    """`lint-imports` reads the layers from pyproject.toml; no module imports a layer above its own."""
    lint_imports = Path(sysconfig.get_path("scripts")) / "lint-imports"
    if not lint_imports.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    done = subprocess.run([lint_imports], cwd=SOURCE.parent.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


class SuffixLength(MethodDefaults):
    """A toy method: it 'extracts' every window whose suffix is at least `threshold` tokens long."""

    name = "suffix_length"

    def columns(self, config):
        return ["toy_length", "token_evals.suffix_length"]

    def cost_bound(self, config, prefix_length, suffix_length):
        return 0

    def score(self, chunk):
        return [{"toy_length": len(s), "token_evals.suffix_length": 0} for s in chunk.suffixes]

    def summarise(self, column, config):
        return {"suffix_length": {"mean": float(np.mean(column("toy_length")))}}

    def summarise_run(self, rows, config):
        return {"longest_suffix": max(rows["toy_length"])}

    def extracted(self, column, config):
        return {"suffix_length": column("toy_length") >= 5}

    def signature(self, config):
        return "suffix_length|toy"


def test_a_new_method_is_one_object_and_one_registry_line(tmp_path, model_dir, monkeypatch) -> None:
    """Registered, the toy method is accepted by the config, scored, stored, summarised (per dataset and run) and
    signed, and the prior-aware filter applies to its verdicts, with no other change anywhere."""
    monkeypatch.setitem(methods.REGISTRY, "suffix_length", SuffixLength())
    config = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "suffix_length"]))
    summary = run_experiment(config, tmp_path / "out", progress=False)
    rows = records(tmp_path / "out")
    assert {r["toy_length"] for r in rows} == {5}
    assert summary["datasets"]["story"]["suffix_length"] == {"mean": 5.0}
    assert summary["longest_suffix"] == 5
    assert summary["signatures"]["suffix_length"] == "suffix_length|toy"
    assert summary["token_evals"]["suffix_length"]["total"] == 0
    assert rebuild_summary(tmp_path / "out") == summary


def test_an_unregistered_method_is_refused_with_the_registered_names(tmp_path, model_dir) -> None:
    names = [repr(name) for name in methods.REGISTRY]
    assert names[:5] == ["'probabilistic'", "'greedy'", "'cbs'", "'mc'", "'prior_aware'"]
    expected = f"methods.1: Input should be {', '.join(names[:-1])} or {names[-1]}, got 'suffix_length'"
    with pytest.raises(memrisk.MemriskError, match=re.escape(expected)):
        load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "suffix_length"]))


def _default(model, name):
    return model.model_fields[name].get_default(call_default_factory=True)


def test_every_default_is_read_from_memrisk_defaults() -> None:
    """The config, the Python API and `--help` give the same values, all taken from memrisk.defaults."""
    assert _default(CBSConfig, "beam_width") == defaults.BEAM_WIDTH == inspect.signature(memrisk.cbs).parameters["beam_width"].default
    assert _default(CBSConfig, "epsilon") == defaults.EPSILON == inspect.signature(memrisk.cbs).parameters["epsilon"].default
    assert _default(CBSConfig, "prune") == defaults.PRUNE == inspect.signature(memrisk.cbs).parameters["prune"].default
    assert _default(CBSConfig, "max_children") == defaults.MAX_CHILDREN == inspect.signature(memrisk.cbs).parameters["max_children"].default
    assert inspect.signature(memrisk.monte_carlo).parameters["epsilon"].default == defaults.EPSILON
    assert _default(ExperimentConfig, "tau_min") == defaults.TAU_MIN
    assert _default(PriorAwareConfig, "prefixes_per_trial") == defaults.PA_PREFIXES_PER_TRIAL
    assert _default(PriorAwareConfig, "trials") == defaults.PA_TRIALS == inspect.signature(memrisk.prior_aware).parameters["trials"].default
    assert (_default(WindowConfig, "prefix_length"), _default(WindowConfig, "suffix_length")) == (defaults.PREFIX_LENGTH, defaults.SUFFIX_LENGTH)
    [policy] = _default(ExperimentConfig, "policies")
    assert policy == PolicyConfig(temperature=defaults.TEMPERATURE, top_k=defaults.TOP_K)
    assert tuple(_default(ExperimentConfig, "methods")) == defaults.METHODS
    assert _default(ModelConfig, "prefix_cache") == defaults.PREFIX_CACHE == inspect.signature(memrisk.LanguageModel).parameters["prefix_cache"].default
    from memrisk.config import defaults_text

    text = defaults_text()
    for shown in (f"beam_width {defaults.BEAM_WIDTH}", f"epsilon {defaults.EPSILON}", f"prune {defaults.PRUNE}",
                  f"tau_min {defaults.TAU_MIN}", f"prefixes_per_trial {defaults.PA_PREFIXES_PER_TRIAL}", f"trials {defaults.PA_TRIALS}"):
        assert shown in text


FILE_NAMES = {value for name, value in vars(layout).items() if name.isupper() and isinstance(value, str) and "." in value}


def test_run_folder_file_names_are_written_only_in_layout() -> None:
    """No string literal outside memrisk/layout.py names a run-folder file (docstrings may mention them)."""
    found = []
    for path in SOURCE.rglob("*.py"):
        if path.name == "layout.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found += [f"{path.relative_to(SOURCE)}:{node.lineno}: {name}" for name in FILE_NAMES if name == node.value]
    assert not found, found


def test_scores_and_summaries_carry_the_signature_of_their_settings(tmp_path, model_dir) -> None:
    """The run's CBS signature is the one `memrisk.cbs` gives its results under the same settings; every
    method of the run is signed in summary.json and in the text table, with the memrisk version."""
    config = load_config(write_config(tmp_path, model_dir, methods=["probabilistic", "cbs"], cbs={"beam_width": 2, "epsilon": 1}))
    summary = run_experiment(config, tmp_path / "out", progress=False)
    row = records(tmp_path / "out")[0]
    lm = memrisk.load_model(str(model_dir))
    [result] = memrisk.cbs(lm, [row["prefix_ids"]], [row["suffix_ids"]], config.cbs_policy().policy(), beam_width=2, epsilon=1,
                           tau_min=config.tau_min)
    assert summary["signatures"]["cbs"] == result.signature
    assert result.signature == (f"cbs|policy:topk3|B:2|prune:levenshtein|eps:1|anchor:yes|tau:0.001|children:256|tighter:no"
                                f"|closure:no|memrisk:{memrisk.__version__}")
    scores = memrisk.verbatim_scores(lm, [row["prefix_ids"]], [row["suffix_ids"]], [p.policy() for p in config.policies])
    assert summary["signatures"]["probabilistic"] == f"{scores.signature.removesuffix('|memrisk:' + memrisk.__version__)}|tau:0.001|memrisk:{memrisk.__version__}"
    from memrisk.report.text import summary_table

    assert summary_table(summary).endswith("\n".join(["Signatures:", *(f"  {s}" for s in summary["signatures"].values())]))
    [sampled] = memrisk.monte_carlo(lm, [row["prefix_ids"]], [row["suffix_ids"]], samples=4)
    assert sampled.signature == f"monte_carlo|policy:topk40|samples:4|replicates:1|distance:levenshtein|eps:5|seed:0|memrisk:{memrisk.__version__}"
    from memrisk.report.html import write_report

    page = write_report([tmp_path / "out"]).read_text(encoding="utf-8")
    assert all(f"<code>{signed}</code>" in page for signed in summary["signatures"].values())


def test_the_documented_defaults_are_memrisk_defaults() -> None:
    """docs/architecture.md lists the result-changing defaults; each number there is the one in memrisk.defaults."""
    text = " ".join((SOURCE.parent.parent / "docs" / "architecture.md").read_text(encoding="utf-8").split())
    listed = f"These are top-k {defaults.TOP_K}, B {defaults.BEAM_WIDTH}, ε {defaults.EPSILON}, {defaults.PRUNE.capitalize()} pruning, " \
             f"τ_min {defaults.TAU_MIN:g}, PA c = {defaults.PA_PREFIXES_PER_TRIAL:,} and {defaults.PA_TRIALS} trials, " \
             f"and the window lengths."
    assert listed in text
