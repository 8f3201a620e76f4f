"""`memrisk demo` end to end: a model trained here memorizes its planted passages by duplication."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from memrisk import cli
from memrisk.report.markup import count_rate, unpacked_json


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
    check_report_against_summary(out, summary)
    # a second run reuses the cached model and the stored records
    assert cli.main(["demo", "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["datasets"] == datasets


def rates_rows(page: str) -> dict[str, list[str]]:
    """The report's extraction-rates table, one list of cell texts per dataset row."""
    section = page.split("<h3>Extraction rates")[1].split("</table>")[0]
    rows = [[html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", section)]
    return {row[0]: row for row in rows if row}


def check_report_against_summary(out: Path, summary: dict[str, Any]) -> None:
    """Every count of the report's rates table and the explorer's rows equal summary.json's."""
    page = (out / "report.html").read_text(encoding="utf-8")
    rows = rates_rows(page)
    for name, entry in summary["datasets"].items():
        n = entry["examples"]
        greedy, cbs = entry["greedy"], entry["cbs"]["verdicts"]
        near_top = round(entry["cbs"]["rate"]["levenshtein"]["5"] * n)
        expected = [name, entry["role"], str(n), count_rate(greedy["exact"], n),
                    count_rate(round(greedy["near_verbatim_rate"]["levenshtein"]["5"] * n), n),
                    *(count_rate(entry["probabilistic"][policy]["extractable"], n) for policy in ("topk40", "full")),
                    count_rate(round(entry["cbs"]["rate"]["levenshtein"]["0"] * n), n), count_rate(near_top, n),
                    str(cbs["near_verbatim_p_z_zero"]), str(cbs["near_verbatim_p_z_positive"])]
        assert rows[name][: len(expected)] == expected, (name, rows[name], expected)
    data = unpacked_json(re.search(r'class="memrisk-explorer-data" data-key="0">(.*?)</script>', page, re.S).group(1))
    assert len(data["rows"]) == sum(entry["examples"] for entry in summary["datasets"].values())
