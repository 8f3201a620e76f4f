"""Report benchmark: time `write_report` on synthetic book-mode runs (target: < 30 s for 10,000 records).

Synthesizes runs of one book (windows every 20 characters, a = T = 50 tokens, every record
column that `memrisk run` writes for probabilistic, greedy, CBS and membership, with 10 stored CBS candidates each,
their closeness metrics computed by memrisk.closeness and the membership scores by memrisk.extraction.membership). Runs differ in how
much of the book they memorize, like three sizes of one model family. Times the single-run
report of the first run and the comparison report of all runs; then, where Chromium and selenium are
installed, opens the single-run page headless from disk and prints its size and the time until the
window explorer shows its rows (goals: ≤ 20 MB, interactive in ≤ 3 s). The records have no
tokenizer, so the explorer's diffs are by character over unrelated texts: its largest case.

Run: python benchmarks/report.py [--records 10000] [--runs 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from memrisk import closeness
from memrisk.config import parse_config
from memrisk.extraction.membership import window_scores
from memrisk.methods.cbs import closeness_record
from memrisk.report.html import write_report
from memrisk.store import RecordStore

A = T = 50
STRIDE = 20
EPSILON = 5
CANDIDATES = 10
WORDS = "it was the best of times worst age wisdom foolishness epoch belief incredulity season light darkness".split()


def config(model: str) -> dict[str, Any]:
    """The CBS paper's recommended run on a book plus a held-out control."""
    return parse_config({
        "model": {"name": model},
        "datasets": [{"name": "book", "documents": ["."]}, {"name": "heldout", "documents": ["."], "role": "control"}],
        "windows": {"mode": "book", "prefix_length": A, "suffix_length": T, "stride": STRIDE},
        "policies": [{"top_k": 40}, {"name": "full"}],
        "methods": ["probabilistic", "greedy", "cbs", "membership"],
    }).model_dump(mode="json")


def words(rng: np.random.Generator, count: int) -> str:
    """Random text of `count` words."""
    return " ".join(rng.choice(WORDS, count))


def token_ids(rng: np.random.Generator) -> list[int]:
    """T random token ids."""
    return rng.integers(0, 50_000, T).tolist()


def record(i: int, rng: np.random.Generator, memorized: float, control: bool) -> dict[str, Any]:
    """One window's record; `memorized` in [0, 1] sets how likely its suffix is extractable."""
    dataset = "heldout" if control else "book"
    strong = rng.random() < memorized
    log10_p = rng.uniform(-4.0, 0.0) if strong else (-math.inf if rng.random() < 0.3 else rng.uniform(-120.0, -5.0))
    log_p = log10_p * math.log(10.0)
    shells = np.cumsum(rng.dirichlet(np.ones(EPSILON)) * rng.uniform(0.0, 0.3)) if strong or rng.random() < 0.05 else np.zeros(EPSILON)
    verbatim = math.exp(log_p) if log10_p > -5.0 else 0.0
    lower = [verbatim, *(verbatim + shells)]
    lower = [min(x, 1.0) for x in lower] if lower[-1] >= 1e-3 else [0.0] * (EPSILON + 1)
    suffix = words(rng, 40)
    exact = log10_p > -0.5
    greedy = suffix if exact else words(rng, 40)
    found = CANDIDATES if lower[-1] else 0
    cand_log_p = sorted(rng.uniform(-25.0, math.log(lower[-1]), found).tolist(), reverse=True) if found else []
    start = i * STRIDE
    suffix_ids, greedy_ids = token_ids(rng), token_ids(rng)
    top = [{"tokens": token_ids(rng), "text": words(rng, 40), "log_p": lp, "hamming": int(d), "levenshtein": int(d)}
           for lp, d in zip(cand_log_p, rng.integers(0, 6, found))]
    raw = rng.uniform(-12.0, 0.0, T)
    mu, sigma = raw - rng.uniform(0.0, 3.0, T), rng.uniform(0.5, 3.0, T)
    mia = window_scores(raw, mu, sigma, suffix, 0.2)
    greedy_close = closeness.closeness(suffix_ids if exact else greedy_ids, suffix_ids, greedy, suffix)
    return closeness_record(top, suffix_ids, suffix) | {
        f"greedy_close.{name}": getattr(greedy_close, name) for name in closeness.METRICS} | {
        "mia.loss": mia.loss, "mia.zlib": mia.zlib, "mia.min_k": mia.min_k, "mia.min_k_pp": mia.min_k_pp,
        "mia.token_log_p": raw.tolist(), "mia.token_mu": mu.tolist(), "mia.token_sigma": sigma.tolist(),
        "token_evals.membership": 0} | {
        "example_id": f"{dataset}/{dataset}.txt@{start}", "dataset": dataset, "role": "control" if control else "target",
        "doc_id": f"{dataset}.txt", "char_start": start, "suffix_char_start": start + 250, "char_end": start + 500,
        "prefix_ids": token_ids(rng), "suffix_ids": suffix_ids, "prefix_text": words(rng, 40), "suffix_text": suffix,
        "target_ranks": rng.integers(1, 40, T).tolist(), "teacher_forced_greedy": exact,
        "log_p.topk40": log_p, "token_log_p.topk40": [log_p / T] * T,
        "log_p.full": log_p - 5.0 if math.isfinite(log_p) else -300.0, "token_log_p.full": [(log_p - 5.0) / T] * T,
        "greedy_ids": suffix_ids if exact else greedy_ids, "greedy_text": greedy, "greedy_exact": exact,
        "greedy_hamming": 0 if exact else int(rng.integers(1, T)), "greedy_levenshtein": 0 if exact else int(rng.integers(1, T)),
        "cbs_lower.levenshtein": lower, "cbs_upper.levenshtein": [x + 0.01 for x in lower],
        "cbs_lower.hamming": lower, "cbs_upper.hamming": [x + 0.01 for x in lower],
        "cbs_covered_mass": lower[-1], "cbs_bank": 0.01, "cbs_eos_mass": 0.0, "token_evals.cbs": int(rng.integers(50, 1030)),
        "cbs_stop": "completed" if lower[-1] else "tau_min", "cbs_stop_step": T,
        "cbs_log_p": cand_log_p, "cbs_hamming": rng.integers(0, 6, found).tolist(),
        "cbs_levenshtein": rng.integers(0, 6, found).tolist(), "cbs_bleu_mass": lower[-1],
        "cbs_char_levenshtein_mass": [0.0, lower[1], lower[-1], lower[-1]],
        "cbs_top": top,
    }


def make_run(folder: Path, records: int, strength: float, seed: int) -> Path:
    """A run folder of `records` windows: 90% a book with memorized chapters, 10% held-out control."""
    rng = np.random.default_rng(seed)
    data = config(f"synthetic-{strength:g}")
    store = RecordStore.open(folder, data, data, force=True)
    controls = records // 10
    chapters = np.sin(np.arange(records - controls) / 300.0) > 0.6
    rows = [record(i, rng, strength * (0.8 if chapters[i] else 0.02), False) for i in range(records - controls)]
    rows += [record(i, rng, 0.001, True) for i in range(controls)]
    for start in range(0, len(rows), 1000):
        store.append(rows[start : start + 1000])
    store.write_json("versions.json", {"memrisk": "0.1.0", "model": {"name": data["model"]["name"]}})
    return folder


def seconds_to_interactive(page: Path) -> float | None:
    """Seconds from navigation until the explorer lists rows, in headless Chromium (None without Chromium or selenium)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,1600"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.set_page_load_timeout(120)
        driver.get(page.as_uri())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready = driver.execute_script(
                "return document.querySelectorAll('#explorer-0 .tabulator-row').length > 0 ? performance.now() : null")
            if ready is not None:
                return ready / 1000.0
            time.sleep(0.02)
        return None
    finally:
        driver.quit()


def main() -> None:
    """Synthesize the runs, then time the single-run and the comparison report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000, help="records per run")
    parser.add_argument("--runs", type=int, default=3, help="runs (model sizes) to compare")
    parser.add_argument("--keep", type=Path, help="write the runs here and keep them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        start = time.perf_counter()
        folders = [make_run(root / f"run{i + 1}", args.records, 0.3 * (i + 1), i) for i in range(args.runs)]
        print(f"synthesized {args.runs} runs x {args.records} records in {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        path = write_report(folders[:1])
        single = time.perf_counter() - start
        print(f"single-run report ({args.records} records): {single:.1f} s  (target < 30 s)")
        interactive = seconds_to_interactive(path)
        shown = "no Chromium/selenium here" if interactive is None else f"{interactive:.2f} s"
        print(f"page: {path.stat().st_size / 1e6:.1f} MB (goal ≤ 20 MB); explorer interactive in headless Chromium: {shown} (goal ≤ 3 s)")
        start = time.perf_counter()
        write_report(folders)
        print(f"comparison report ({args.runs} runs, {args.runs * args.records} records): {time.perf_counter() - start:.1f} s")
        if args.keep:
            print(f"reports: {path} (single run, then overwritten by the comparison)")


if __name__ == "__main__":
    main()
