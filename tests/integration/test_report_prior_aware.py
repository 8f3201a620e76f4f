"""The report's prior-aware section: counts from the records of a real run, settings, extremes and escaping."""

from __future__ import annotations

import dataclasses
import html
import json
import math
import random
import re
from typing import Any

import numpy as np

from memrisk.config import parse_config
from memrisk.report.html import write_report
from memrisk.report.run_page import load_run, prior_aware_section
from memrisk.report.text import summary_table
from memrisk.runner import run_experiment
from memrisk.store import RecordStore
from tests.conftest import WORDS
from tests.integration.test_report_html import SCRIPT, make_run, records, visible_text

SECTION = "<h3>Prior-aware memorization</h3>"
BUDGET = " (c = 6, 2 trials)"
GENERIC = ["the dog", "a river"]


def cells(fragment: str) -> list[list[str]]:
    """The text of every table row's cells in a piece of the page."""
    rows = re.findall(r"<tr>(.*?)</tr>", fragment, re.DOTALL)
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r, re.DOTALL)] for r in rows]


def count_rate(count: int, total: int) -> str:
    """'k/n (x%)' as the report writes it."""
    return f"{count}/{total} ({100.0 * count / total:.2f}%)"


def test_prior_aware_section_of_a_real_run(tmp_path, word_model) -> None:
    words = random.Random(0).choices(WORDS, k=300)
    run = parse_config({
        "model": {"name": "word-model"},
        "datasets": [{"name": "story", "documents": [" ".join(words[:150]), " ".join(words[150:])]},
                     {"name": "control", "documents": [" ".join(WORDS)], "role": "control"}],
        "windows": {"mode": "book", "prefix_length": 6, "suffix_length": 3, "stride": 30},
        "methods": ["probabilistic", "greedy", "prior_aware"],
        "prior_aware": {"prefixes_per_trial": 6, "trials": 2, "generic_sequences": GENERIC, "m": 1e-8},
        "tau_min": 1e-8,
    })
    summary = run_experiment(run, tmp_path / "out", model=word_model, progress=False)
    rows = RecordStore.existing(tmp_path / "out").read_records().to_pylist()
    info = json.loads((tmp_path / "out" / "prior_aware.json").read_text())
    page = write_report([tmp_path / "out"]).read_text(encoding="utf-8")
    section = page.split(SECTION)[1]
    table = cells(section)
    for name, role in (("story", "target"), ("control", "control")):
        part = [r for r in rows if r["dataset"] == name]
        n = len(part)
        ratios = np.array([r["pa_log_ratio"] for r in part]) / math.log(10.0)
        median = f"{np.median(ratios[np.isfinite(ratios)]):.2f}" if np.isfinite(ratios).any() else "—"
        expected = [name, role, str(n), count_rate(sum(r["pa_extractable"] for r in part), n),
                    count_rate(sum(r["pa_memorized"] for r in part), n) + BUDGET]
        assert [row[:5] + row[6:7] for row in table if row[:2] == [name, role]] == [expected + [median + BUDGET]]
        stats = summary["datasets"][name]["prior_aware"]
        assert (stats["prefixes_per_trial"], stats["trials"]) == (6, 2)
        for method, extracted in (("greedy", [r["greedy_exact"] for r in part]),
                                  ("probabilistic.topk40", [r["log_p.topk40"] >= math.log(1e-8) for r in part])):
            counts = [sum(extracted), sum(e and r["pa_memorized"] for e, r in zip(extracted, part))]
            assert [name, method, count_rate(counts[0], n), count_rate(counts[1], n) + BUDGET] in table
    dropped = sum(not (math.isfinite(r["pa_log_prior"]) and math.isfinite(r["pa_log_p"])) for r in rows)
    text = " ".join(visible_text(section).split())
    assert f"{dropped} of {len(rows)} windows with v̂_s = 0 or P(s|p) = 0 are not drawn" in text
    assert f"m = {info['m']:g}, n = {info['n']:.4g} (calibrated" in text
    assert "PA-memorized (c = 6, 2 trials)" in " ".join(cells(section.split("lowest ratios")[1])[0])
    story = summary["datasets"]["story"]["prior_aware"]
    assert f"PA-memorized {story['pa_memorized']}/{summary['datasets']['story']['examples']}{BUDGET}" in summary_table(summary)
    for sequence, log_ratio in zip(GENERIC, info["calibration"]["log_ratios"]):
        assert [sequence, f"{log_ratio / math.log(10.0):.2f}"] in table
    lowest, highest = section.split("lowest ratios")[1].split("highest ratios")
    for part, key in ((lowest, "lowest"), (highest, "highest")):
        shown = [row[0] for row in cells(part) if len(row) == 8][1:]
        assert shown == [e["example_id"] for e in summary["prior_aware_extremes"][key]] and len(shown) == min(10, len(rows))
    assert (tmp_path / "out" / "figures" / "prior-aware.svg").is_file()


def pa_columns(row: dict[str, Any], p: float, prior: float, m: float, n: float) -> dict[str, Any]:
    """A hand-written record with prior-aware columns (probabilities in, natural logs stored)."""
    log_p, log_prior = (math.log(x) if x > 0 else -math.inf for x in (p, prior))
    ratio = -math.inf if log_p == -math.inf else log_p - log_prior
    return {k: v for k, v in row.items() if not k.startswith("cbs_")} | {
        "pa_log_p": log_p, "pa_log_prior": log_prior, "pa_log_prior_trials": [log_prior, log_prior], "pa_log_ratio": ratio,
        "pa_log_ratio_spread": 0.0, "pa_prefixes_used": 4, "pa_extractable": p > m, "pa_memorized": p > m and ratio > math.log(n),
    }


def test_prior_aware_section_escapes_text_and_shows_infinite_ratios(tmp_path) -> None:
    values = [(0.5, 1e-4), (0.02, 0.0), (0.0, 1e-3), (1e-6, 1e-5), (0.3, 0.2), (0.01, 1e-4)]
    rows = [pa_columns(row, p, prior, 1e-3, 10.0) for row, (p, prior) in zip(records(), values)]
    folder = make_run(tmp_path / "run", rows, ["probabilistic", "greedy", "prior_aware"])
    RecordStore.existing(folder).write_json("prior_aware.json", {
        "m": 1e-3, "n": 10.0, "n_source": "given", "bank": "corpus-len4-size8-seed0", "bank_datasets": ["book"],
        "prefixes_per_trial": 4, "trials": 2, "calibration": None,
    })
    page = write_report([folder]).read_text(encoding="utf-8")
    section = page.split(SECTION)[1]
    assert SCRIPT not in page and section.count(html.escape(SCRIPT)) == 2
    text = " ".join(visible_text(section).split())
    assert "m = 0.001, n = 10 (given in the config); prefix bank corpus-len4-size8-seed0 from book; c = 4" in text
    assert "2 of 6 windows" in text
    book = [row for row in cells(section) if row[:2] == ["book", "target"]]
    default = " (c = 5,000, 5 trials)"  # the config's defaults: the PA paper's c and trials
    assert book == [["book", "target", "4", "2/4 (50.00%)", "2/4 (50.00%)" + default, "100.00%" + default, "1.35" + default,
                     "0.00" + default]]
    highest = cells(section.split("highest ratios")[1])
    assert highest[1][3:7] == ["-1.70", "−∞", "+∞", "yes"] and SCRIPT in highest[1][7]
    assert cells(section.split("lowest ratios")[1])[1][3:6] == ["−∞", "-3.00", "−∞"]
    without_settings, pictures = prior_aware_section(dataclasses.replace(load_run(folder), prior={}), "", 0)
    assert pictures == [] and "prior_aware.json is missing" in without_settings and "2/4 (50.00%)" in without_settings


def test_default_prefixes_per_trial_is_the_papers_c() -> None:
    # PA §4: "we prompt the model with 5000 randomly sampled sequences ... We repeat this for 5 trials"
    config = parse_config({"model": {"name": "m"}, "datasets": [{"name": "d", "documents": ["x"]}]})
    assert (config.prior_aware.prefixes_per_trial, config.prior_aware.trials) == (5000, 5)


def test_exclude_own_document_false_is_the_papers_bank(tmp_path, word_model) -> None:
    # PA §4 draws the c prefixes from the whole dataset, the target's own document included; memrisk leaves that
    # document out by default (docs/prior_aware.md) and `exclude_own_document: false` gives the paper's bank back
    words = random.Random(1).choices(WORDS, k=300)
    used = {}
    for exclude in (True, False):
        run = parse_config({
            "model": {"name": "word-model"},
            "datasets": [{"name": "story", "documents": [" ".join(words[:150]), " ".join(words[150:])]}],
            "windows": {"mode": "book", "prefix_length": 6, "suffix_length": 3, "stride": 60},
            "methods": ["prior_aware"],
            "prior_aware": {"prefixes_per_trial": 8, "trials": 2, "n": 2.0, "exclude_own_document": exclude},
        })
        run_experiment(run, tmp_path / str(exclude), model=word_model, progress=False)
        rows = RecordStore.existing(tmp_path / str(exclude)).read_records().to_pylist()
        used[exclude] = [r["pa_prefixes_used"] for r in rows]
        assert all(math.isfinite(r["pa_log_prior"]) for r in rows)
    assert used[False] == [16] * len(used[False]), "every bank prefix is eligible, the own document's too"
    assert all(0 < n < 16 for n in used[True]), "the own document's prefixes are left out"
