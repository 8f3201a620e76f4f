"""The report's window explorer: its data (rows, verdicts, diffs as opcodes, token pieces) and the page in real headless
Chromium, opened from disk with the network off: filter, search, open a window and read its diff, follow a shared link.
With MEMRISK_ARTIFACTS=1, a screenshot of each step is written to test-artifacts/."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memrisk import rules
from memrisk.config import parse_config
from memrisk.report import metrics
from memrisk.report.explorer import edits, explorer_data, packed_log10
from memrisk.report.html import write_report
from memrisk.report.markup import unpacked_json
from memrisk.runner import run_experiment
from memrisk.store import RecordStore
from tests.conftest import WORDS
from tests.integration.test_report_html import (  # noqa: F401  (the browser fixture is used by name)
    BROWSER_MISSING, IMG, browser, keep_screenshot, make_run, records,
)


def apply(target: Any, changes: list[list[Any]]) -> Any:
    """`target` (a list of ids or a string) with the explorer's edits applied."""
    out, at = target[:0], 0
    for a0, a1, inserted in changes:
        out += target[at:a0] + inserted
        at = a1
    return out + target[at:]


@given(st.lists(st.integers(0, 5), max_size=12), st.lists(st.integers(0, 5), max_size=12))
def test_edits_turn_the_target_into_the_generated_sequence(target: list[int], generated: list[int]) -> None:
    changes = edits(target, generated)
    assert apply(target, changes) == generated
    assert all(a1 > a0 or inserted for a0, a1, inserted in changes), "no empty edit"


@given(st.text(max_size=12), st.text(max_size=12))
def test_edits_of_texts_are_by_character(target: str, generated: str) -> None:
    assert apply(target, edits(target, generated)) == generated


def _data(root: Path) -> dict[str, Any]:
    store = RecordStore.existing(root)
    config = parse_config(store.read_yaml("config.yaml"))
    table = store.read_records()
    return explorer_data(config, metrics.run_arrays(table, config), table.to_pylist(), None)


def test_rows_hold_each_windows_verdict_and_scores_and_details_diff_by_character_without_a_tokenizer(tmp_path) -> None:
    data = _data(make_run(tmp_path / "run"))
    details = data["details"]
    rows = [dict(zip(data["fields"], values)) for values in data["rows"]]
    written = records()
    assert [r["id"] for r in rows] == [r["example_id"] for r in written] and data["pieces"] is None
    for row, record in zip(rows, written):
        verdict = rules.verdicts([record["log_p.topk40"]], [record["cbs_lower.levenshtein"][-1]], 1e-3)[0]
        assert row["class"] == rules.LABELS[str(verdict)]
        expected = record["log_p.topk40"] / math.log(10) if math.isfinite(record["log_p.topk40"]) else None
        assert row["p_z.topk40"] == (None if expected is None else pytest.approx(expected, abs=5e-4))
        assert row["greedy_distance"] == record["greedy_levenshtein"]
    first = details[0]
    assert "target" not in first and rows[0]["suffix"] == "plain suffix number 0", "the row's text is the sequence"
    assert first["candidates"] == [[-22, 1, 1, [[20, 21, "O"]]]], "log10 0.6 = −0.22; one character replaced: 0 → O"
    assert first["greedy"] == [] and first["token_log10_p"]["topk40"] == packed_log10([math.log(0.4) / 4] * 4)
    assert packed_log10([math.log(0.4) / 4]) == "AK", "−log10(0.4)/4 = 0.0995 → code 10"
    assert packed_log10([0.0, -math.inf, -1000.0]) == "AA" + "__" + "_-", "p = 1, p = 0, clipped at 10^−40.94 (4094)"
    json.dumps(data, allow_nan=False)


def test_a_real_runs_explorer_diffs_by_token_with_the_runs_tokenizer(tmp_path, model_dir) -> None:
    story = " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(200))
    config = parse_config({
        "model": {"name": str(model_dir)}, "datasets": [{"name": "story", "documents": [story]}],
        "windows": {"mode": "book", "prefix_length": 6, "suffix_length": 5, "stride": 80},
        "methods": ["probabilistic", "greedy", "cbs"], "cbs": {"beam_width": 3, "epsilon": 2, "stored_candidates": 3},
    })
    run_experiment(config, tmp_path / "out", progress=False)
    page = write_report([tmp_path / "out"]).read_text(encoding="utf-8")
    assert "Diffs are by token." in page
    payload = re.search(r'<script type="application/gzip\+base64" class="memrisk-explorer-data" data-key="0">(.*?)</script>', page, re.S)
    data = unpacked_json(payload.group(1))
    table = RecordStore.existing(tmp_path / "out").read_records().to_pylist()
    for record, detail in zip(table, data["details"]):
        # each piece reads as inside a sequence, so a word-level token keeps the space before it, the first one too
        assert "".join(data["pieces"][str(i)] for i in detail["target"]).lstrip() == record["suffix_text"]
        assert len(detail["token_log10_p"]["topk40"]) == 2 * len(record["suffix_ids"])
        assert len(detail["candidates"]) == len(record["cbs_top"]) <= 3
        assert apply(detail["target"], detail["greedy"]) == record["greedy_ids"]
        for (log10_p, levenshtein, _, changes), stored in zip(detail["candidates"], record["cbs_top"]):
            assert apply(detail["target"], changes) == stored["tokens"] and levenshtein == stored["levenshtein"]
            assert log10_p == round(100 * stored["log_p"] / math.log(10))
    assert any(detail["candidates"] for detail in data["details"]), "some window has CBS candidates within ε"
    versions = json.loads((tmp_path / "out" / "versions.json").read_text(encoding="utf-8"))
    assert versions["model"]["loaded_from"] == str(model_dir)
    config_file = tmp_path / "out" / "config.yaml"  # a study's cell names its model demo:SIZE, which no loader reads
    config_file.write_text(config_file.read_text(encoding="utf-8").replace(str(model_dir), "demo:small"), encoding="utf-8")
    renamed = write_report([tmp_path / "out"]).read_text(encoding="utf-8")
    assert "Diffs are by token." in renamed, "the tokenizer is read from the folder versions.json says the weights came from"


def _visible_ids(driver: Any) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#explorer-0 .tabulator-row .tabulator-cell[tabulator-field=id]'))"
        ".map(c => c.innerText)")


def _wait(condition: Any, timeout: float = 20.0) -> Any:
    """`condition()` once it is truthy, or its last value after `timeout` s (generous: CI's browser shares two busy cores)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


@pytest.mark.skipif(BROWSER_MISSING is not None, reason=BROWSER_MISSING or "")
def test_the_explorer_filters_opens_a_window_and_follows_a_shared_link_offline(tmp_path, browser) -> None:
    from selenium.webdriver.common.by import By

    report = write_report([make_run(tmp_path / "run")])
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.emulateNetworkConditions",
                            {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    browser.get(report.as_uri())
    ids = [r["example_id"] for r in records()]
    assert _wait(lambda: _visible_ids(browser) == ids), "every window is listed, in the records' order"
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0, "nothing was fetched"
    section = browser.find_element(By.ID, "explorer-0")
    browser.execute_script("arguments[0].scrollIntoView()", section)
    keep_screenshot(browser, "explorer-1-opened")

    search = section.find_element(By.CSS_SELECTOR, ".explorer-search")
    search.send_keys("numbr")
    assert _wait(lambda: _visible_ids(browser) == []), "'numbr' is in no prefix, suffix or id"
    search.clear()
    search.send_keys("number 2")
    assert _wait(lambda: _visible_ids(browser) == [ids[2]])
    keep_screenshot(browser, "explorer-2-searched")
    search.send_keys("\b" * len("number 2"))
    assert _wait(lambda: len(_visible_ids(browser)) == len(ids))

    distance = section.find_element(By.CSS_SELECTOR, ".tabulator-col[tabulator-field=greedy_distance] input")
    distance.send_keys("1")
    expected = [r["example_id"] for r in records() if r["greedy_levenshtein"] >= 1]
    assert _wait(lambda: _visible_ids(browser) == expected), "a number filter keeps the windows at or above it"
    assert section.find_element(By.CSS_SELECTOR, ".explorer-count").text == f"{len(expected)} of {len(ids)} windows"
    keep_screenshot(browser, "explorer-3-filtered")
    distance.send_keys("\b")
    assert _wait(lambda: _visible_ids(browser) == ids), "the filter let go: every row is drawn again before the click"

    row = _wait(lambda: [r for r in section.find_elements(By.CSS_SELECTOR, ".tabulator-row") if r.text.startswith(ids[2])])
    row[0].click()
    detail = section.find_element(By.CSS_SELECTOR, ".window-detail")
    assert _wait(lambda: ids[2] in detail.text)
    missing = [e.text for e in detail.find_elements(By.CSS_SELECTOR, ".candidates .missing")]
    added = [e.text for e in detail.find_elements(By.CSS_SELECTOR, ".candidates .added")]
    assert (missing, added) == (["e"], []), "candidate 'plain suffix numbr 2' drops the target's 'e'"
    assert "near-verbatim only" in detail.text, "window 2: p_z = 0 < τ_min ≤ LB_E"
    greedy = browser.execute_script(
        "const box = arguments[0].querySelector(':scope > .diff');"
        "return Array.from(box.querySelectorAll('.match, .added')).map(e => e.textContent).join('')", detail)
    assert greedy == "something else", "matched and added spans spell the greedy continuation"
    link = browser.current_url
    assert unquote(link.split("#", 1)[1]) == "window=0:" + ids[2], "the address names the open window"
    strip = [e.get_attribute("title") for e in detail.find_elements(By.CSS_SELECTOR, ".strip .prob")]
    assert strip == [f"token {i}: log10 p = −∞ (p = 0.00)" for i in range(1, 5)], "window 2's target is impossible (p_z = 0)"
    keep_screenshot(browser, "explorer-4-window")

    browser.get("about:blank")
    browser.get(link)
    detail = browser.find_element(By.CSS_SELECTOR, "#explorer-0 .window-detail")
    assert _wait(lambda: ids[2] in detail.text), "the shared link opens the same window"
    assert browser.execute_script("return document.querySelectorAll('#explorer-0 .tabulator-row.tabulator-selected').length") == 1
    assert IMG in detail.text and "pwned" not in browser.title, "the planted markup in the id is shown as text"
    keep_screenshot(browser, "explorer-5-shared-link")
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


@pytest.mark.skipif(BROWSER_MISSING is not None, reason=BROWSER_MISSING or "")
def test_a_chart_point_shows_its_window_on_hover_and_opens_it_on_click(tmp_path, browser) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    report = write_report([make_run(tmp_path / "run")])
    browser.get(report.as_uri())
    chart = browser.find_element(By.ID, "chart-scatter")
    assert _wait(lambda: chart.get_attribute("data-ready") == "true"), "Vega-Embed drew the chart"
    browser.execute_script("arguments[0].scrollIntoView()", chart)
    points = chart.find_elements(By.CSS_SELECTOR, "g.mark-symbol.role-mark path")
    written = records()
    extracted = [r for r in written if r["role"] == "target" and (r["log_p.topk40"] >= math.log(1e-3) or r["cbs_lower.levenshtein"][-1] >= 1e-3)]
    assert len(points) == len(extracted) == 3, "the verbatim, orange and red target windows"
    ActionChains(browser).move_to_element(points[1]).perform()
    tooltip = _wait(lambda: [e.text for e in browser.find_elements(By.ID, "vg-tooltip-element") if e.text])
    assert tooltip and any(r["example_id"] in tooltip[0] for r in extracted), "the tooltip names the point's window"
    shown = next(r["example_id"] for r in extracted if r["example_id"] in tooltip[0])
    keep_screenshot(browser, "explorer-6-chart-hover", whole_page=False)  # a full-page capture would resize the viewport before the click
    points[1].click()
    detail = browser.find_element(By.CSS_SELECTOR, "#explorer-0 .window-detail")
    assert _wait(lambda: shown in detail.text), "a click opens the point's window in the explorer"
    assert unquote(browser.current_url.split("#", 1)[1]) == "window=0:" + shown
    keep_screenshot(browser, "explorer-7-chart-click", whole_page=False)
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0, "nothing was fetched"
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
