"""docs/figures.md: every entry's study, run as its command runs it, draws the entry's figure, and the study pages
open in real headless Chromium with every image loaded and no console error.

The studies are the ready ones in studies/, run as `memrisk study` runs them (SmolLM2 as the session's one load). The
full studies take minutes each on two cores, so here each experiment study runs as `memrisk study STUDY --set
windows.limit=1` does: every cell, method and figure, on the first window of each dataset; books studies replay their
recorded logs in full; the demo's studies (`base: demo`) run on the demo shrunk (tests/tiny_demo.py: its corpus over a
20-word vocabulary, two tiny sizes trained until the larger one reproduces the passages planted 64 times), whose
training takes seconds where the real sizes take minutes; a prior-aware experiment study's bank holds 5 prefixes per
trial instead of 25; an experiment study's Monte Carlo draws 4 and 16 samples instead of up to 500; the counterfactual
study (`base: pa-counterfactual`) trains its 13 models of one seed on 2 targets for a few steps each, with a bank of
2 × 10 prefixes. `python docs/make_figures.py` runs them all in full."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from memrisk.config import read_yaml_mapping
from memrisk.demo.counterfactual import COUNTERFACTUAL_BASE
from memrisk.demo.study import DEMO_BASE, study_models
from memrisk.report.html import write_report
from memrisk.study import load_study, run_study
from tests.tiny_demo import MEMORIZING, shrunk_demo
from tests.integration.test_report_html import BROWSER_MISSING, browser, keep_screenshot  # noqa: F401  (fixture used by name)

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = REPO / "docs" / "figures.md"
QUICK = {"windows.limit": 1}
COUNTERFACTUAL_QUICK = {"seeds": 1, "targets": 2, "documents": 150, "steps": 20}
"""The counterfactual study's section in the test: every composition, one seed, models trained for 20 steps."""
PRIOR_AWARE_QUICK = 5
"""Bank prefixes per trial of an experiment study's prior-aware method (calibration and priors cost a model pass per
bank prefix and sequence; the study's 25 make its prior-aware cells take most of the catalogue's time)."""
MONTE_CARLO_QUICK = [4, 16]
"""Nested sample budgets of an experiment study's Monte Carlo method (smollm2-beam-width's 100 samples of 3 windows
took 12 s of the catalogue on one thread; two budgets still draw every convergence curve)."""
ROW = re.compile(
    r"^\| (?P<figure>[^|]+?) \| `(?P<study>studies/[^`]+\.yaml)` \| `memrisk study (?P=study)` \| "
    r"!?\[[^\]]*\]\(figures/(?P<slug>[A-Za-z0-9.-]+)\.(?P<kind>png|csv)\) \|"
)
"""A catalogue row: | figure | `study` | `memrisk study study` | ![..](figures/SLUG.png) or [..](figures/SLUG.csv) (a table) | … |"""


def entries() -> list[dict[str, str]]:
    """The catalogue's rows: figure, study config, the figure's file stem and whether it is a picture or a table."""
    rows = [m.groupdict() for line in CATALOGUE.read_text(encoding="utf-8").splitlines() if (m := ROW.match(line))]
    assert rows, f"no entries found in {CATALOGUE}"
    return rows


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory, smollm2) -> Iterator[Path]:
    """Every catalogued study, run into a temporary folder and reported, as `memrisk study` does."""
    out = tmp_path_factory.mktemp("catalogue")
    kept = smollm2.batch_size
    try:
        for study in sorted({entry["study"] for entry in entries()}):
            with pytest.MonkeyPatch.context() as patch, ExitStack() as demo:
                base = read_yaml_mapping(REPO / study, "base, grid").get("base")
                if base == DEMO_BASE:
                    demo.enter_context(shrunk_demo(patch, out / "demo-cache", MEMORIZING))
                if base == COUNTERFACTUAL_BASE:
                    patch.setenv("MEMRISK_CACHE", str(out / "counterfactual-cache"))
                regenerate(study, out / Path(study).stem, smollm2, kept)
        yield out
    finally:
        smollm2.batch_size = kept


def regenerate(study: str, folder: Path, smollm2: Any, batch_size: int) -> None:
    """Run one catalogued study into `folder` as `memrisk study` does (quickly, see above) and write its page."""
    source: Path | dict[str, Any] = REPO / study
    quick: dict[str, Any] = dict(QUICK)
    mapping = read_yaml_mapping(source, "base, grid")
    base = mapping.get("base")
    if base == COUNTERFACTUAL_BASE:
        source = mapping | {COUNTERFACTUAL_BASE: mapping.get(COUNTERFACTUAL_BASE, {}) | COUNTERFACTUAL_QUICK}
        quick["prior_aware.prefixes_per_trial"] = 10
    elif isinstance(base, dict) and "prior_aware" in base.get("methods", []):
        quick["prior_aware.prefixes_per_trial"] = PRIOR_AWARE_QUICK
    if isinstance(base, dict) and "mc" in base.get("methods", []):
        quick["mc.samples"] = MONTE_CARLO_QUICK
    models = study_models(source, progress=False)

    def load(config: Any) -> Any:
        if config.model.name != "smollm2":
            return models.load(config)
        smollm2.batch_size = config.model.batch_size if isinstance(config.model.batch_size, int) else batch_size
        return smollm2

    _, cells = load_study(source, models.prepare)
    if any(cell.books for cell in cells):
        quick = {}  # books studies replay their logs in seconds
    run_study(source, folder, progress=False, load=load, prepare=models.prepare, overrides=quick)
    write_report([folder])


def test_every_entry_is_drawn_by_its_study_and_committed(regenerated) -> None:
    for entry in entries():
        figures = regenerated / Path(entry["study"]).stem / "figures"
        if entry["kind"] == "png":
            assert (figures / f"{entry['slug']}.png").is_file(), f"{entry['study']} did not draw {entry['slug']}"
        assert (figures / f"{entry['slug']}.csv").read_text().count("\n") >= 2, f"{entry['slug']}.csv has no rows"
        committed = REPO / "docs" / "figures" / f"{entry['slug']}.{entry['kind']}"
        assert committed.is_file(), f"{committed.relative_to(REPO)} is not committed"


def _wait_until(condition: Any, timeout: float = 30.0) -> bool:
    """Whether `condition()` holds within `timeout` seconds (Vega-Embed draws the charts after the page loads)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.skipif(BROWSER_MISSING is not None, reason=BROWSER_MISSING or "")
def test_every_study_page_opens_in_chromium_with_its_figures(regenerated, browser) -> None:
    by_study: dict[str, list[dict[str, str]]] = {}
    for entry in entries():
        by_study.setdefault(entry["study"], []).append(entry)
    for study, listed in by_study.items():
        page = regenerated / Path(study).stem / "report.html"
        browser.get(page.as_uri())
        charts = page.read_text(encoding="utf-8").count('class="memrisk-chart"')
        assert charts and _wait_until(lambda: browser.execute_script(
            "return Array.from(document.querySelectorAll('div.chart')).filter(c => c.dataset.ready === 'true').length") == charts), \
            f"{study}: a chart was not drawn"
        captions = browser.execute_script("return Array.from(document.querySelectorAll('figcaption, h3')).map(c => c.innerText)")
        for entry in listed:
            assert any(entry["figure"] in caption for caption in captions), f"{study}: no caption names {entry['figure']}"
        severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert severe == [], f"{study}: {severe}"
        keep_screenshot(browser, f"study-{Path(study).stem}")
