"""`memrisk demo` end to end: a model trained here memorizes its planted passages by duplication."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

import memrisk
from memrisk import cli
from memrisk.demo.corpus import build_demo_corpus
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
    check_corpus_counts(out, summary)
    check_membership(summary)
    # a second run reuses the cached model and the stored records
    assert cli.main(["demo", "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["datasets"] == datasets


def check_membership(summary: dict[str, Any]) -> None:
    """Membership inference on the demo: every AUC comes with its bootstrap interval around it, and LOSS tells the
    passages planted 64 times from the held-out control better than those planted once."""
    comparisons = summary["membership"]["comparisons"]
    assert {"pooled", "planted-x1", "planted-x64"} <= set(comparisons)
    for scores in comparisons.values():
        for entry in scores.values():
            auc = entry["auc"]
            assert auc["low"] <= auc["estimate"] <= auc["high"], auc
    loss = {name: comparisons[name]["mia.loss"]["auc"]["estimate"] for name in ("planted-x1", "planted-x64")}
    assert loss["planted-x64"] > loss["planted-x1"], loss


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


def occurrences(text: str, part: str) -> int:
    """Occurrences of `part` in `text`, overlapping ones included."""
    count, at = 0, text.find(part)
    while at >= 0:
        count, at = count + 1, text.find(part, at + 1)
    return count


def token_string(ids: list[int]) -> str:
    """Token ids as a string of one character each, so that str.find searches token sequences."""
    return "".join(chr(0x100 + i) for i in ids)


def check_corpus_counts(out: Path, summary: dict[str, Any], sample: int = 40) -> None:
    """The recorded corpus counts equal an independent search of the demo's training corpus: token-level brute force on
    every planted and held-out window and a seeded sample of the others, and string search of the decoded text where
    it encodes back to the same ids; planted passages occur at least as often as they were planted, held-out ones never."""
    config = yaml.safe_load((out / "config.yaml").read_text())
    lm = memrisk.load_model(config["model"]["name"], weights=False, local_only=True)
    documents = build_demo_corpus(0).training_documents
    tokens = "\n".join(token_string(lm.encode(document)) for document in documents)  # a separator no id maps to: no spanning
    text = "\x00".join(documents)
    rows = pq.read_table(out / "records").to_pylist()
    copies = {d["name"]: d.get("duplicates") for d in config["datasets"]}
    fixed = [r for r in rows if copies[r["dataset"]] is not None or r["dataset"] == "heldout"]
    others = [r for r in rows if copies[r["dataset"]] is None and r["dataset"] != "heldout"]
    chosen = fixed + [others[i] for i in np.random.default_rng(0).choice(len(others), min(sample, len(others)), replace=False)]
    exact = 0
    for row in chosen:
        window = row["prefix_ids"] + row["suffix_ids"]
        counts = {"suffix": row["corpus_count.suffix"], "window": row["corpus_count.window"]}
        assert counts == {"suffix": occurrences(tokens, token_string(row["suffix_ids"])), "window": occurrences(tokens, token_string(window))}, row["example_id"]
        for kind, ids in (("suffix", row["suffix_ids"]), ("window", window)):
            decoded = lm.decode(ids)
            if lm.encode(decoded) == ids:
                exact += 1
                assert occurrences(text, decoded) >= counts[kind], (row["example_id"], kind)
                if copies[row["dataset"]] is not None or row["dataset"] == "heldout":
                    assert occurrences(text, decoded) == counts[kind], (row["example_id"], kind)
        if copies[row["dataset"]] is not None:
            assert counts["window"] >= copies[row["dataset"]], (row["example_id"], counts)
        if row["dataset"] == "heldout":
            assert counts["window"] == 0, (row["example_id"], counts)
    assert exact >= len(chosen)
    for copies_planted in (1, 4, 16, 64):
        assert summary["datasets"][f"planted-x{copies_planted}"]["corpus_counts"]["median_window"] >= copies_planted
