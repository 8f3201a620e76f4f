"""`charts.panel_grid` joins panels as Altair's vconcat of hconcats does, and draws the same picture."""

from __future__ import annotations

import re

import altair as alt
import pytest
import vl_convert

from memrisk.report.charts import panel_grid


def panel(k: int) -> alt.LayerChart:
    """A panel as CBS Fig. 22 draws one: a legend toggle of its own, a scale zoom defined alike in every panel, two layers."""
    rows = [{"x": k + i, "y": (k * i) % 5, "kind": "ab"[i % 2]} for i in range(6)]
    toggle = alt.selection_point(fields=["kind"], bind="legend", name=f"toggle_{k}")
    points = alt.Chart(alt.Data(values=rows)).mark_circle().encode(
        x="x:Q", y="y:Q", color="kind:N", opacity=alt.condition(toggle, alt.value(1.0), alt.value(0.1)),
    ).add_params(toggle).interactive()
    rule = alt.Chart(alt.Data(values=[{"x": k, "y": 0}])).mark_rule().encode(x="x:Q")
    return alt.layer(rule, points).properties(width=120, height=90, title=f"panel {k}")


def normalised(svg: str) -> str:
    """An SVG with its view names and clip-path ids (numbered per process by vl-convert) blanked."""
    return re.sub(r"view_[0-9a-f_]+", "view", re.sub(r"clip\d+", "clip", svg))


# Altair warns that it merged the panels' identical zoom parameters into one: the merge this test compares against.
@pytest.mark.filterwarnings("ignore:Automatically deduplicated selection parameter:UserWarning")
def test_the_grid_draws_what_altairs_concat_draws_with_one_zoom_over_every_panel() -> None:
    lines = [[panel(3 * i + j) for j in range(3)] for i in range(2)]
    top = {"title": "six panels", "resolve": {"scale": {"color": "shared"}}}
    spec = panel_grid(lines, **top)
    altair_spec = alt.vconcat(*(alt.hconcat(*line) for line in lines)).resolve_scale(color="shared").properties(
        title="six panels").to_dict(validate=False)
    assert set(spec) == set(altair_spec)
    units = [layer["name"] for row in spec["vconcat"] for cell in row["hconcat"] for layer in cell["layer"] if "name" in layer]
    assert len(units) == len(set(units)) == 6
    params = {p["name"]: p["views"] for p in spec["params"]}
    assert {name: views for name, views in params.items() if name.startswith("toggle")} == {
        f"toggle_{k}": [units[k]] for k in range(6)}
    zoom = [views for name, views in params.items() if not name.startswith("toggle")]
    assert zoom == [units]
    assert normalised(vl_convert.vegalite_to_svg(spec)) == normalised(vl_convert.vegalite_to_svg(altair_spec))
