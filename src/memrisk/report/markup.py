"""Markup helpers of the HTML report: `tag` escapes every child that is not itself markup, so text from corpora,
model outputs, configs and file names is always shown literally; also number formats, the inline diff, the page and its charts."""

from __future__ import annotations

import base64
import difflib
import functools
import gzip
import html
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from memrisk import rules
from memrisk.cache import cached_text
from memrisk.report import charts

LIST_LIMIT = 50
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline' 'unsafe-eval'"
"""Nothing is fetched: images are data URLs, styles and scripts inline (Vega compiles its expressions, hence eval)."""
EXPLORER_ASSETS = ("tabulator.min.js", "explorer.js")
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:.25em .5em;vertical-align:top}
th{background:#f3f3f3;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{display:inline-block;margin:.5em;vertical-align:top}figure.interactive{display:block}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.85em;color:#555;max-width:640px}.note{color:#555;font-size:.9em}
.text{white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:.85em}.prefix{color:#888}
.match{background:#e6f4ea}.missing{background:#fbe3e4;text-decoration:line-through;color:#a40000}
.added{background:#fff3c4;color:#7a4d00}.label{font-weight:600;font-size:.8em;color:#555}
.explorer{margin:1em 0 2em}.explorer-tools{margin:.5em 0}.explorer-search{width:24em;padding:.2em}
.window-detail{border:1px solid #ccc;padding:.5em 1em;margin-top:1em;min-height:3em}.window-detail h4{margin:.3em 0}
.tok{border-right:1px dotted #ccc}.strip{margin:.2em 0;font-family:ui-monospace,monospace;font-size:.85em}
.prob{display:inline-block;padding:0 .1em;white-space:pre}.candidates td{vertical-align:middle}
.book-text{max-height:32em;overflow-y:auto;border:1px solid #eee;padding:.5em;line-height:1.6}.book-matched{background:#d8f0d8}
.book-merged{background:#fff3c4}.book-short{background:#dce5f4}.book-outside{color:#666}.skip{color:#999;font-style:italic}
.flash{outline:2px solid #d62728}
"""


class Html(str):
    """A fragment of markup built here (anything else is escaped before it is inserted)."""


def escape(value: object) -> Html:
    """Markup as is; any other value as escaped text."""
    return value if isinstance(value, Html) else Html(html.escape(str(value), quote=True))


def tag(name: str, *children: object, **attrs: object) -> Html:
    """An element with escaped attributes and children (`class_` for `class`)."""
    attributes = "".join(f' {key.rstrip("_")}="{html.escape(str(v), quote=True)}"' for key, v in attrs.items())
    return Html(f"<{name}{attributes}>{''.join(escape(c) for c in children)}</{name}>")


def join(parts: Iterable[object]) -> Html:
    """Concatenate fragments (text parts escaped)."""
    return Html("".join(escape(p) for p in parts))


def table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> Html:
    """A table; numbers are right-aligned."""
    def cell(value: object) -> Html:
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        return tag("td", value, class_="num") if numeric else tag("td", value)

    head = tag("tr", *(tag("th", h) for h in header))
    return tag("table", head, *(tag("tr", *(cell(v) for v in row)) for row in rows))


def note(text: str) -> Html:
    """A muted paragraph."""
    return tag("p", text, class_="note")


def pct(value: float | None) -> str:
    """A rate as a percentage, '—' when undefined."""
    return "—" if value is None else f"{100.0 * value:.2f}%"


def mass_text(value: float | None) -> str:
    """A probability mass with three significant digits, '—' when undefined."""
    return "—" if value is None else f"{value:.3g}"


def log10_text(value: float | None) -> str:
    """A log10 value with two decimals ('−∞' / '+∞' at the ends, '—' when undefined)."""
    if value is None:
        return "—"
    return f"{value:.2f}" if math.isfinite(value) else ("+∞" if value > 0 else "−∞")


def count_rate(count: int, total: int) -> str:
    """'k/n (x%)'."""
    return f"{count}/{total} ({pct(rules.fraction(count, total))})"


def capped(items: Sequence[str]) -> str:
    """A comma-separated list, shortened to LIST_LIMIT items."""
    more = f" … and {len(items) - LIST_LIMIT} more" if len(items) > LIST_LIMIT else ""
    return (", ".join(items[:LIST_LIMIT]) or "none") + more


def money(value: float) -> str:
    """US dollars with four decimals."""
    return f"${value:,.4f}"


def relative_link(target: Path, base: Path) -> str:
    """`target` as a link relative to the folder `base` (forward slashes)."""
    return Path(os.path.relpath(target, base)).as_posix()


def inline_diff_html(target: str, candidate: str) -> Html:
    """Character diff of a candidate against its target: matched, missing and added spans."""
    parts = []
    for op, a0, a1, b0, b1 in difflib.SequenceMatcher(None, target, candidate, autojunk=False).get_opcodes():
        if op == "equal":
            parts.append(tag("span", target[a0:a1], class_="match"))
            continue
        if a1 > a0:
            parts.append(tag("span", target[a0:a1], class_="missing", title="in the target, not generated"))
        if b1 > b0:
            parts.append(tag("span", candidate[b0:b1], class_="added", title="generated, not in the target"))
    return tag("div", *parts, class_="text")


def asset(name: str) -> str:
    """A file of memrisk/report/assets (the page's inline scripts and styles)."""
    return resources.files("memrisk.report").joinpath("assets", name).read_text(encoding="utf-8")


def inline_script(source: str) -> Html:
    """A script element with `source` inline (a closing script tag inside it is escaped)."""
    return Html("<script>" + source.replace("</script", "<\\/script") + "</script>")


def json_script(data: object, class_: str, **attrs: object) -> Html:
    """Data for the page's scripts, as JSON that can never close its element ('<' is escaped)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    return Html(f'<script type="application/json" class="{class_}"{_data_attributes(attrs)}>{text}</script>')


def packed_json_script(data: object, class_: str, **attrs: object) -> Html:
    """Data for the page's scripts as gzip-compressed JSON in base64 (a fifth of the JSON's size for the window explorer;
    the page inflates it with the browser's DecompressionStream). Base64 can never close its element."""
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    text = base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")
    return Html(f'<script type="application/gzip+base64" class="{class_}"{_data_attributes(attrs)}>{text}</script>')


def _data_attributes(attrs: dict[str, object]) -> str:
    """` data-KEY="value"` for each item, escaped."""
    return "".join(f' data-{key}="{html.escape(str(v), quote=True)}"' for key, v in attrs.items())


def unpacked_json(text: str) -> object:
    """What `packed_json_script` packed (for readers of a page, such as its tests)."""
    return json.loads(gzip.decompress(base64.b64decode(text)).decode("utf-8"))


@functools.cache
def vega_bundle() -> str:
    """Vega, Vega-Lite and Vega-Embed as one script that sets them on `window`. vl-convert builds it (about 1.5 s of
    every process that wrote a page), so it is kept in memrisk's cache, once per vl-convert version."""
    import vl_convert

    return cached_text(f"vega/vega-embed-{vl_convert.__version__}.js", vl_convert.javascript_bundle)


def chart_html(spec: dict[str, Any], name: str, caption: str, explorer: int | None = None,
               cells: dict[str, int] | None = None) -> Html:
    """An interactive chart: its Vega-Lite spec drawn in place by charts.js; clicking a point opens its window in the
    explorer `explorer` of the page, or, on a study page, in the explorer `cells[point's cell]`."""
    data = {"target": f"chart-{name}"} | ({"explorer": explorer} if explorer is not None else {})
    if cells:
        data["cells"] = json.dumps(cells, ensure_ascii=False, separators=(",", ":"))
    return tag("figure", tag("div", "", id=f"chart-{name}", class_="chart"), json_script(spec, "memrisk-chart", **data),
               tag("figcaption", caption), class_="interactive")


def page(title: str, body: Html, explorer: bool = False, charts: bool = False) -> str:
    """The whole HTML document, with nothing to fetch (a CSP forbids it); with `explorer` the window explorer's table
    library, styles and script inline, with `charts` Vega-Embed and the script that draws the charts."""
    head = [Html('<meta charset="utf-8">'), Html(f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'),
            Html('<link rel="icon" href="data:,">'), tag("title", title), tag("style", Html(STYLE))]
    scripts = []
    if explorer:
        head.append(tag("style", Html(asset("tabulator.min.css"))))
        scripts = [inline_script(asset(name)) for name in EXPLORER_ASSETS]
    if charts:
        scripts += [inline_script(vega_bundle()), inline_script(asset("charts.js"))]
    document = tag("html", tag("head", join(head)), tag("body", tag("h1", title), body, join(scripts)), lang="en")
    return "<!DOCTYPE html>\n" + document + "\n"


@dataclass(frozen=True)
class Picture:
    """A chart's static files for figures/: file stem, caption and the Vega-Lite spec they are drawn from (`files`)."""

    name: str
    caption: str
    spec: dict[str, Any]

    def files(self, formats: Sequence[str]) -> dict[str, bytes]:
        """The chart drawn in each of `formats` (png, svg), and in no other."""
        return charts.draw(self.spec, formats)


def chart(spec: dict[str, Any], name: str, caption: str, explorer: int | None = None,
          cells: dict[str, int] | None = None) -> tuple[Html, Picture]:
    """An interactive chart for the page and its static files for figures/, from one Vega-Lite spec."""
    return chart_html(spec, name, caption, explorer, cells), Picture(name, caption, spec)
