"""memrisk's cache: a text is made once and read back after, and an unwritable cache only costs the making."""

from __future__ import annotations

import os

from memrisk.cache import cached_text
from memrisk.report.markup import vega_bundle


def test_a_text_is_made_once_and_read_back(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MEMRISK_CACHE", str(tmp_path))
    made = []

    def make() -> str:
        made.append(1)
        return "Vega ✓\n"

    assert cached_text("vega/bundle.js", make) == "Vega ✓\n"
    assert cached_text("vega/bundle.js", make) == "Vega ✓\n"
    assert len(made) == 1
    assert [p.name for p in (tmp_path / "vega").iterdir()] == ["bundle.js"]  # no staging file left
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "vega" / "bundle.js").stat().st_mode & 0o777 == 0o666 & ~umask  # as a plain open() gives


def test_an_unwritable_cache_makes_the_text_each_time(tmp_path, monkeypatch) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("MEMRISK_CACHE", str(blocked))  # no folder can be made under a file, whoever runs the test
    made = []
    assert [cached_text("vega/bundle.js", lambda: made.append(1) or "x") for _ in range(2)] == ["x", "x"]
    assert len(made) == 2 and list(tmp_path.iterdir()) == [blocked]


def test_the_vega_bundle_is_kept_for_the_next_process(tmp_path, monkeypatch) -> None:
    import vl_convert

    monkeypatch.setenv("MEMRISK_CACHE", str(tmp_path))
    vega_bundle.cache_clear()
    try:
        bundle = vega_bundle()
        kept = tmp_path / "vega" / f"vega-embed-{vl_convert.__version__}.js"
        assert kept.read_text(encoding="utf-8") == bundle and "vegaEmbed" in bundle
    finally:
        vega_bundle.cache_clear()
