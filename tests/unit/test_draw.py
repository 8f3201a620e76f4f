"""`charts.draw`: a spec drawn again in the same process gives the files kept the first time, within a byte limit."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import vl_convert

from memrisk.report import charts

SPEC = {"data": {"values": [{"x": 1, "y": 2}, {"x": 2, "y": 3}]}, "mark": "point",
        "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": {"field": "y", "type": "quantitative"}}}


def counting_svg(monkeypatch) -> list[dict]:
    """Specs vl-convert is asked to lay out from now on."""
    asked: list[dict] = []
    real = vl_convert.vegalite_to_svg

    def svg(spec, *args, **kwargs):
        asked.append(spec)
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(vl_convert, "vegalite_to_svg", svg)
    return asked


def test_a_spec_drawn_again_is_not_laid_out_again_and_gives_the_same_files(monkeypatch) -> None:
    monkeypatch.setattr(charts, "_drawn", charts._Drawings(1 << 20))
    asked = counting_svg(monkeypatch)
    first = charts.draw(SPEC, ["png", "svg"])
    assert set(first) == {"png", "svg"} and first["png"].startswith(b"\x89PNG")
    first["png"] = b"changed by the caller"
    again = charts.draw({**SPEC}, ["png", "svg"])
    assert len(asked) == 1 and again["png"].startswith(b"\x89PNG") and again["svg"] == first["svg"]
    assert set(charts.draw(SPEC, ["svg"])) == {"svg"} and len(asked) == 2  # other formats: drawn on their own
    other = {**SPEC, "mark": "line"}
    charts.draw(other, ["svg"])
    assert len(asked) == 3 and asked[-1] == other


def test_the_least_recently_drawn_spec_is_dropped_past_the_byte_limit(monkeypatch) -> None:
    specs = [{**SPEC, "title": title} for title in ("a", "b", "c")]
    sizes = sorted(len(vl_convert.vegalite_to_svg(spec).encode("utf-8")) for spec in specs)
    limit = sizes[1] + sizes[2] + sizes[0] // 2  # any two drawings fit, three do not
    monkeypatch.setattr(charts, "_drawn", charts._Drawings(limit))
    asked = counting_svg(monkeypatch)
    for spec in [*specs, specs[1], specs[2]]:
        charts.draw(spec, ["svg"])
    assert [spec["title"] for spec in asked] == ["a", "b", "c"]  # b and c kept
    charts.draw(specs[0], ["svg"])
    assert [spec["title"] for spec in asked] == ["a", "b", "c", "a"]
    kept = [spec for spec, _ in charts._drawn.files]
    assert kept == [json.dumps(spec, separators=(",", ":")) for spec in (specs[2], specs[0])]
    assert charts._drawn.size <= limit


def test_threads_drawing_one_spec_keep_it_once(monkeypatch) -> None:
    monkeypatch.setattr(charts, "_drawn", charts._Drawings(1 << 20))
    with ThreadPoolExecutor(4) as pool:
        drawn = list(pool.map(lambda _: charts.draw(SPEC, ["svg"]), range(4)))
    (kept,) = charts._drawn.files.values()  # threads that drew it at once add it once
    assert charts._drawn.size == len(kept["svg"])
    assert all(files["svg"].startswith(b"<svg") for files in drawn)
