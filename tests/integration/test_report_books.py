"""The HTML report of a books run (and of books and record runs together), on a run made with a fake chat provider."""

from __future__ import annotations

import functools
import html
import http.server
import json
import random
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from memrisk import cli
from memrisk.books.config import parse_books_config
from memrisk.books.nvrecall import PASSES
from memrisk.books.providers import ChatResponse, GenerationSettings, Usage
from memrisk.books.run import run_books
from memrisk.report import books
from memrisk.report.html import write_report
from memrisk.report.charts import COLOURS
from memrisk.report.markup import money, pct
from memrisk.summary import rebuild_summary
from tests.integration import test_report_html as shared
from tests.integration.test_report_html import BROWSER_MISSING, SCRIPT, QuietHandler, keep_screenshot, make_run, records, visible_text

browser = shared.browser  # the headless-Chromium fixture

ANSWER_WORDS = 120
TAIL = 8
PRICE = {"input": 2.0, "cached_input": 0.5, "output": 8.0}


def book_words(seed: int, count: int) -> list[str]:
    """`count` pseudo-words from a large seeded vocabulary (every 8-word run is unique)."""
    rng = random.Random(seed)
    return ["".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(3)) for _ in range(count)]


def book_text(seed: int) -> str:
    """Two chapters of 400 words, each under a 'Chapter N' heading line."""
    words = book_words(seed, 800)
    return "".join(f"Chapter {n + 1}\n" + " ".join(words[400 * n : 400 * (n + 1)]) + "\n" for n in range(2))


class FakeProvider:
    """Continues the conversation with the book's true text; at Phase 2 turn 2 book 0 refuses and book 1
    emits a stop string. Both the refusal and the last continuation carry a script payload."""

    name = "openai"
    model = "fake-model"

    def __init__(self, texts: list[str]) -> None:
        self.books = [text.split() for text in texts]

    def locate(self, content: str) -> tuple[int, int]:
        """(book index, word position after the message's last words in that book)."""
        tail = content.split()[-TAIL:]
        for index, words in enumerate(self.books):
            for start in range(len(words) - TAIL + 1):
                if words[start : start + TAIL] == tail:
                    return index, start + TAIL
        raise AssertionError(f"the fake provider cannot place {tail}")

    def complete(self, messages: list[dict[str, str]], settings: GenerationSettings) -> ChatResponse:
        """Answer with the next words of the book after the last user prompt or assistant answer."""
        turn = sum(m["role"] == "assistant" for m in messages) - 1
        last = next(m["content"] for m in reversed(messages) if m["role"] == "assistant" or len(messages) == 1)
        index, position = self.locate(last)
        text = " ".join(self.books[index][position : position + ANSWER_WORDS])
        if turn == 2 and index == 0:
            text = f"Sorry, I can't continue {SCRIPT} this text."
        elif turn == 2:
            text = f"{text} {SCRIPT} THE END"
        tokens_in = sum(len(m["content"].split()) for m in messages)
        usage = Usage(tokens_in, len(text.split()) * settings.candidates, None if turn < 0 else tokens_in // 2)
        return ChatResponse((text,) * settings.candidates, ("stop",) * settings.candidates, usage)


def make_books_run(root: Path) -> tuple[Path, dict[str, Any]]:
    """A books run over two books, with the per-chapter variant, answered by the fake provider."""
    texts = [book_text(seed) for seed in (1, 2)]
    for i, text in enumerate(texts):
        (root / f"book{i}.txt").write_text(text, encoding="utf-8")
    config = parse_books_config({
        "model": {"provider": "openai", "name": "fake-model", "turns": 4, "price": PRICE},
        "books": [{"name": "alpha", "path": "book0.txt"}, {"name": "beta.2", "path": "book1.txt"}],
        "spend_cap_usd": 5.0,
        "phase1": {"prefix_words": 20, "target_words": 20},
        "per_chapter": {"candidates": 2, "turns": 2, "refusal_retry": {"attempts": 0}},
    }, root)
    out = root / "run"
    summary = run_books(config, out, provider=FakeProvider(texts), sleep=lambda s: None, progress=False)
    return out, summary


@pytest.fixture(scope="module")
def books_run(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """The books run folder and its summary."""
    return make_books_run(tmp_path_factory.mktemp("books"))


@pytest.fixture(scope="module")
def page(books_run) -> str:
    """report.html of the books run."""
    return write_report([books_run[0]]).read_text(encoding="utf-8")


def rows(page: str) -> list[str]:
    """The table rows of a page as visible text, cells separated by '|'."""
    return [visible_text(re.sub(r"</t[dh]>", "|", row)) for row in re.findall(r"<tr>(.*?)</tr>", page, re.DOTALL)]


def test_the_fake_run_has_refusals_stops_and_extraction(books_run) -> None:
    _, summary = books_run
    alpha, beta = summary["books"]
    assert alpha["phase1"]["success"] and beta["phase1"]["success"]
    assert (alpha["phase2"]["halt"], beta["phase2"]["halt"]) == ("refusal", "stop_string")
    assert 0.3 < alpha["nv_recall"]["nv_recall"] < beta["nv_recall"]["nv_recall"] < 1.0
    assert "per_chapter" in alpha and alpha["per_chapter"]["nv_recall"] > 0.5


def test_report_escapes_refusal_and_generated_text(books_run, page: str) -> None:
    out, summary = books_run
    assert SCRIPT in (out / "books" / "beta.2" / "generation.txt").read_text(encoding="utf-8")
    assert SCRIPT not in page
    scripts = re.findall(r"<script[^>]*>", page, flags=re.IGNORECASE)
    assert set(scripts) == {'<script type="application/json" class="memrisk-chart" data-target="chart-books-nv-recall">',
                            '<script type="application/json" class="memrisk-chart" data-target="chart-books-heatmap">',
                            *(f'<script type="application/json" class="memrisk-chart" data-target="chart-books-merges-{b["name"]}">'
                              for b in summary["books"]), "<script>"}, "the charts' specs and the inline Vega-Embed and charts.js"
    excerpts = [m["excerpt"] for m in books.match_rows(summary)]
    assert page.count(html.escape(SCRIPT)) == sum(SCRIPT in e for e in excerpts) >= 2
    text = visible_text(page)
    assert "Sorry, I can't continue " + SCRIPT in text and SCRIPT + " THE END" in text


def test_book_rows_show_the_summary_values(books_run, page: str) -> None:
    _, summary = books_run
    table = rows(page)
    for book in summary["books"]:
        row = next(r for r in table if r.startswith(book["name"] + "|"))
        nv = book["nv_recall"]
        cells = row.split("|")
        assert cells[12] == pct(nv["nv_recall"])
        assert cells[13:17] == [str(nv[k]) for k in ("matched", "missing", "additional", "max_block")]
        assert cells[17] == money(books.book_cost(book))
        assert cells[8] == book["phase2"]["halt"]
        union = next(r for r in table if r.startswith(f"{book['name']} (per chapter, union)|"))
        assert union.split("|")[12] == pct(book["per_chapter"]["nv_recall"])
    assert "Books run: openai:fake-model (books)" in visible_text(page)
    assert f"spend cap {money(5.0)}, spent {money(summary['spent_usd'])}" in visible_text(page)
    assert summary["books"][0]["nv_recall"]["signature"] in page


def test_cost_total_is_the_sum_of_the_books(books_run, page: str) -> None:
    _, summary = books_run
    per_book = sum(books.book_cost(b) for b in summary["books"])
    total = books.cost_total(books.cost_rows(summary))
    assert total["cost"] == pytest.approx(per_book) == pytest.approx(summary["costs"]["cost"])
    assert total["requests"] == summary["costs"]["requests"] > 0
    assert total["cost_without_cache"] > total["cost"]
    row = next(r for r in rows(page) if r.startswith("total|")).split("|")
    assert row[2] == str(total["requests"]) and row[7:10] == [money(total[k]) for k in ("cost", "cost_without_cache", "cost_with_cache_estimate")]


def test_figures_and_links_exist(books_run, page: str) -> None:
    out, summary = books_run
    charted = ["books-nv-recall", "books-heatmap", *(f"books-merges-{book['name']}" for book in summary["books"])]
    for name in charted:
        assert (out / "figures" / f"{name}.png").read_bytes().startswith(b"\x89PNG")
        assert b"<svg" in (out / "figures" / f"{name}.svg").read_bytes()
        assert f'id="chart-{name}"' in page
    assert "data:image/png;base64," not in page, "every figure is an interactive chart"
    links = re.findall(r'href="([^"]+)"', page)
    for book in summary["books"]:
        assert f"books/{book['name']}/diff.html" in links and f"books/{book['name']}/generation.txt" in links
    assert all((out / link).is_file() for link in links if link.startswith("books/"))


def test_heatmap_strips_and_matches_follow_the_blocks(books_run) -> None:
    _, summary = books_run
    strips = books.strips(summary)
    assert [s.label for s in strips] == ["alpha", "alpha (per chapter)", "beta.2", "beta.2 (per chapter)"]
    alpha = summary["books"][0]["nv_recall"]
    assert strips[0].spans == tuple((b["book_start"], b["book_span"]) for b in alpha["blocks"])
    assert strips[0].book_words == alpha["book_words"] and strips[0].covered >= alpha["matched"]
    matches = books.match_rows(summary)
    assert {(m["book"], m["source"], m["kind"]) for m in matches} >= {("alpha", "phase 2", "refusal"), ("beta.2", "phase 2", "stop")}


def test_books_view_marks_what_nv_recall_counted(books_run, page: str) -> None:
    """The books view's text marks exactly the words nv-recall counted (per block, its verbatim words), every final block
    has an anchor, and the merges chart's counted runs sum to the matched words."""
    out, summary = books_run
    for book in summary["books"]:
        nv = book["nv_recall"]
        section = page[page.index(f"<h4>{html.escape(book['name'])}</h4>"):]
        section = section[section.index('class="text book-text"'):]
        section = section[:section.index("</div>")]
        matched = sum(len(words.split()) for words in re.findall(r'<span class="book-matched"[^>]*>([^<]*)</span>', section))
        assert matched == nv["matched"]
        assert [int(i) for i in re.findall(rf'id="book-{re.escape(book["name"])}-block-(\d+)"', section)] == list(range(len(nv["blocks"])))
        spec = json.loads(re.search(rf'data-target="chart-books-merges-{re.escape(book["name"])}">(.*?)</script>', page).group(1))
        rows = next(iter(spec["datasets"].values())) if "datasets" in spec else spec["data"]["values"]
        final = [r for r in rows if r["stage"].startswith(f"pass {len(PASSES)}")]
        assert [(r["start"], r["end"] - r["start"], r["matched"]) for r in final] == \
            [(b["book_start"], b["book_span"], b["matched"]) for b in nv["blocks"]]
        assert all(r["kept"] == "counted by nv-recall" and r["anchor"].startswith("book-") for r in final)


def test_cli_report_of_a_books_run(books_run, capsys) -> None:
    out, _ = books_run
    assert rebuild_summary(out) == json.loads((out / "books_summary.json").read_text(encoding="utf-8"))
    assert cli.main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "book extraction from openai:fake-model" in printed and f"report written to {out / 'report.html'}" in printed
    assert (out / "report.html").is_file()


def test_cli_report_of_an_unfinished_books_run(books_run, tmp_path, capsys) -> None:
    out, _ = books_run
    for name in ("manifest.json", "config.yaml", "requests.jsonl"):
        (tmp_path / name).write_bytes((out / name).read_bytes())
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "unfinished books run" in capsys.readouterr().err


def test_cli_report_of_books_and_record_runs_together(books_run, tmp_path, capsys) -> None:
    out, _ = books_run
    probabilistic = [{k: v for k, v in r.items() if not k.startswith(("cbs_", "greedy_"))} for r in records()]
    run = make_run(tmp_path / "records", probabilistic, ["probabilistic"])
    assert cli.main(["report", str(run), str(out)]) == 0
    assert "book extraction from" in capsys.readouterr().out
    report = run / "report.html"
    page = report.read_text(encoding="utf-8")
    text = visible_text(page)
    assert text.index("Run: tiny <b>model</b>") < text.index("Books run: openai:fake-model")
    assert "Comparison of runs" not in text and SCRIPT not in page
    diffs = [link for link in re.findall(r'href="([^"]+)"', page) if link.endswith("diff.html")]
    assert len(set(diffs)) == 2 and all((report.parent / link).resolve().is_file() for link in diffs)
    assert {"rates.png", "run2-books-heatmap.png", "run2-books-nv-recall.svg"} <= {p.name for p in (run / "figures").iterdir()}


@pytest.mark.skipif(BROWSER_MISSING is not None, reason=BROWSER_MISSING or "")
def test_books_report_in_headless_chromium(books_run, page: str, browser: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    out, summary = books_run
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(out)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/report.html")
        assert browser.execute_script("return document.images.length") == 0
        assert browser.execute_script("return document.querySelectorAll('[onerror], iframe, object').length") == 0
        charts = 2 + len(summary["books"])
        WebDriverWait(browser, 30).until(lambda b: b.execute_script(
            "return Array.from(document.querySelectorAll('div.chart')).filter(c => c.dataset.ready === 'true').length") == charts)
        assert SCRIPT in browser.execute_script("return document.body.innerText")
        block = next(b for b in summary["books"] if b["nv_recall"]["blocks"])["name"]
        browser.execute_script("document.getElementById(arguments[0]).scrollIntoView()", f"chart-books-merges-{block}")
        chart = browser.find_element(By.ID, f"chart-books-merges-{block}")
        mark = chart.find_element(By.CSS_SELECTOR, f"path[fill='{COLOURS['red']}']")
        ActionChains(browser).move_to_element(mark).click().perform()
        anchor = f"book-{block}-block-0"
        WebDriverWait(browser, 10).until(lambda b: b.execute_script(
            "const r = document.getElementById(arguments[0]).getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight", anchor))
        with pytest.raises(NoAlertPresentException):
            _ = browser.switch_to.alert
        assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
        keep_screenshot(browser, "books-report")
    finally:
        server.shutdown()
        thread.join()
