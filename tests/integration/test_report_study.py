"""The study page in real headless Chromium, opened from disk with the network off: every chart drawn, one window
explorer per cell chosen by a picker, a chart point's tooltip naming its cell, and a shared link that shows the cell
it names and opens the window. Screenshots of each step are written to the test's folder."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from memrisk.cli import main
from memrisk.store import RecordStore
from tests.integration.test_report_explorer import _wait
from tests.integration.test_report_html import BROWSER_MISSING, browser, keep_screenshot  # noqa: F401  (the fixture is used by name)
from tests.integration.test_study import GRID, write_study

CELLS = ["beam_width=1_epsilon=0", "beam_width=1_epsilon=1", "beam_width=2_epsilon=0", "beam_width=2_epsilon=1"]


def _visible(driver: Any) -> list[str]:
    """The ids of the explorers the page shows."""
    return driver.execute_script("return Array.from(document.querySelectorAll('section.explorer')).filter(s => !s.hidden).map(s => s.id)")


def _rows(driver: Any, key: int) -> list[str]:
    return driver.execute_script(
        f"return Array.from(document.querySelectorAll('#explorer-{key} .tabulator-row .tabulator-cell[tabulator-field=id]'))"
        ".map(c => c.innerText)")


@pytest.mark.skipif(BROWSER_MISSING is not None, reason=BROWSER_MISSING or "")
def test_the_study_page_draws_every_chart_and_opens_each_cells_windows_offline(tmp_path: Path, model_dir: Path, browser: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    out = tmp_path / "out"
    assert main(["study", write_study(tmp_path, model_dir, GRID), "--out", str(out)]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "data:image/png;base64," not in page, "every figure of the study page is an interactive chart"
    mappings = [json.loads(html.unescape(a)) for a in re.findall(r'data-cells="([^"]*)"', page)]
    assert mappings and all(m == {cell: key for key, cell in enumerate(CELLS)} for m in mappings), \
        "each paper figure maps a mark's cell to that cell's explorer"
    charts = page.count('class="memrisk-chart"')
    ids = {cell: [str(i) for i in RecordStore.existing(out / "cells" / cell).read_records().column("example_id").to_pylist()]
           for cell in CELLS}
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.emulateNetworkConditions",
                            {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    browser.get((out / "report.html").as_uri())
    assert _wait(lambda: browser.execute_script(
        "return Array.from(document.querySelectorAll('div.chart')).filter(c => c.dataset.ready === 'true').length") == charts, 20)
    assert _visible(browser) == ["explorer-0"] and _wait(lambda: _rows(browser, 0) == ids[CELLS[0]])
    keep_screenshot(browser, "study-1-opened", whole_page=False)  # a full-page capture would resize the viewport before the hover

    picker = Select(browser.find_element(By.CSS_SELECTOR, "select.explorer-picker"))
    assert [o.text for o in picker.options] == CELLS
    picker.select_by_index(2)
    assert _wait(lambda: _visible(browser) == ["explorer-2"]) and _wait(lambda: _rows(browser, 2) == ids[CELLS[2]]), \
        "picking a cell shows its explorer, its table laid out"
    keep_screenshot(browser, "study-2-picked", whole_page=False)

    chart = browser.find_element(By.ID, "chart-study-cbs.beam_width-story.cbs_rate")
    browser.execute_script("arguments[0].scrollIntoView()", chart)
    point = chart.find_elements(By.CSS_SELECTOR, "g.mark-symbol.role-mark path")[0]
    ActionChains(browser).move_to_element(point).perform()
    tooltip = _wait(lambda: [e.text for e in browser.find_elements(By.ID, "vg-tooltip-element") if e.text])
    assert tooltip and any(cell in tooltip[0] for cell in CELLS), "the tooltip names the point's cell"
    keep_screenshot(browser, "study-3-hover", whole_page=False)

    window = ids[CELLS[3]][1]
    browser.get("about:blank")
    browser.get((out / "report.html").as_uri() + "#" + quote(f"window=3:{window}"))
    detail = browser.find_element(By.CSS_SELECTOR, "#explorer-3 .window-detail")
    assert _wait(lambda: window in detail.text), "the shared link opens the window in its cell's explorer"
    assert _visible(browser) == ["explorer-3"]
    assert Select(browser.find_element(By.CSS_SELECTOR, "select.explorer-picker")).first_selected_option.text == CELLS[3]
    keep_screenshot(browser, "study-4-shared-link")
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0, "nothing was fetched"
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
