"""`memrisk demo` end to end: a model trained here memorizes its planted passages by duplication."""

from __future__ import annotations

import json

import pytest

from memrisk import cli


@pytest.mark.slow
def test_demo_extraction_rises_with_duplication_and_spares_held_out_text(tmp_path, capsys) -> None:
    out = tmp_path / "demo"
    assert cli.main(["demo", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "planted-x64" in printed and "heldout" in printed
    assert printed.rstrip().endswith("next: the demo's model sizes as a study, `memrisk study studies/demo-sizes.yaml` (docs/studies.md)")
    summary = json.loads((out / "summary.json").read_text())
    datasets = summary["datasets"]
    rates = [datasets[f"planted-x{c}"]["probabilistic"]["topk40"]["rate"] for c in (1, 4, 16, 64)]
    assert rates == sorted(rates), rates
    assert rates[-1] >= 0.75 and rates[0] <= 0.25, rates
    greedy = [datasets[f"planted-x{c}"]["greedy"]["rate"] for c in (1, 4, 16, 64)]
    assert greedy[-1] > greedy[0], greedy
    for name, entry in datasets.items():  # anchored CBS finds every verbatim-extractable window (CBS Table 6)
        recovered = entry["cbs"]["recovery"]
        assert recovered["missed"] == [] and recovered["ratio"] in (None, 1.0), (name, recovered)
    control = datasets["heldout"]
    assert control["role"] == "control"
    assert control["probabilistic"]["topk40"]["extractable"] == 0
    assert control["greedy"]["exact"] == 0
    assert control["probabilistic"]["full"]["max_log10_p"] < -3
    # a second run reuses the cached model and the stored records
    assert cli.main(["demo", "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["datasets"] == datasets
