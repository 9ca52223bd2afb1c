"""The report's figures, checked on what they draw (the SVG matplotlib writes, read back by
`svgfigure`): every guess inside the map, points at the date line drawn whole, the
interactive map wrapping and greying refusals, the intervention-effect labels on their
points, and the accuracy chart's note counting "not applicable" apart from "insufficient"."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import svgfigure

from agl.report import maps, plots
from agl.report.sections.counterfactual import GROUPS, effect_figure, effect_rows

GREEN = maps.BAND_COLOURS[0]  # < 25 km


@pytest.fixture(autouse=True)
def _text_as_text(monkeypatch):
    import matplotlib

    monkeypatch.setitem(matplotlib.rcParams, "svg.fonttype", "none")


def _scored(true, pred, km) -> pd.DataFrame:
    """A score table: true and predicted (lat, lon) pairs (None: no coordinates) and errors."""
    rows = []
    for i, ((tlat, tlon), guess, d) in enumerate(zip(true, pred, km, strict=True)):
        plat, plon = guess if guess is not None else (np.nan, np.nan)
        rows.append({"sample_id": f"k{i}", "true_lat": tlat, "true_lon": tlon, "pred_lat": plat,
                     "pred_lon": plon, "distance_km": d, "true_city": "c", "true_country": "x",
                     "pred_city": np.nan if guess is None else "g", "pred_country": np.nan})
    return pd.DataFrame(rows)


def test_every_guess_on_earth_is_inside_the_map_and_counted_in_its_legend(tmp_path):
    """Random guesses cover the globe: 8 of these 32 lie south of 58 S or north of 84 N,
    outside the map that main drew (latitudes -58 to 84) while its legend said 32."""
    rng = np.random.default_rng(3)
    lat = np.concatenate([[-89.0, -80.0, -70.0, -62.0, 85.0, 88.0, 86.5, -75.5],
                          np.linspace(-50, 80, 24)])
    lon = np.linspace(-175, 175, 32)
    true = list(zip(rng.uniform(-50, 60, 32), rng.uniform(-170, 170, 32), strict=True))
    scored = _scored(true, list(zip(lat, lon, strict=True)), rng.uniform(3000, 15000, 32))
    svg = maps.world_map(scored, tmp_path / "map.svg", title="random")
    marks, texts = svgfigure.read(svg)
    drawn = [m for m in svgfigure.styled(marks, "fill: none", "stroke: #d62728") if m.clip]
    inside = [m for m in drawn if m.inside()]  # one hollow circle per guess, all in the map
    assert len(inside) == 32, f"{32 - len(inside)} of 32 guesses drawn outside the map"
    x0, y0, x1, y1 = inside[0].clip
    for m in drawn:  # the rest: copies of guesses near the date line, beyond a side edge
        assert m.inside() or (y0 <= m.y <= y1 and min(abs(m.x - x0), abs(m.x - x1)) < 0.05 * (x1 - x0))
    assert "predicted (32)" in {t.text for t in texts}


def test_a_point_on_the_date_line_is_drawn_at_both_edges(tmp_path):
    """A clip at 180 degrees: one marker centred on each edge, so both halves show."""
    true = [(-17.0, 180.0), (48.0, 2.0), (35.0, 139.0)]
    scored = _scored(true, [(-17.1, 179.95), (10.0, 10.0), (0.0, 0.0)], [10.0, 4000.0, 9000.0])
    marks, _ = svgfigure.read(maps.world_map(scored, tmp_path / "map.svg", title="t"))
    green = [m for m in svgfigure.styled(marks, f"fill: {GREEN}") if m.clip]
    assert len(green) == 2, green
    x0, _, x1, _ = green[0].clip
    xs = sorted(m.x for m in green)
    assert xs[0] == pytest.approx(x0, abs=0.5) and xs[1] == pytest.approx(x1, abs=0.5)
    assert green[0].y == pytest.approx(green[1].y)


def _svg_groups(svg: str) -> list[str]:
    return re.findall(r"<g><title>.*?</g>", svg, flags=re.S)


def test_interactive_map_wraps_at_the_date_line_and_greys_refusals():
    true = [(-17.0, 179.9), (64.8, -147.7), (48.0, 2.0)]
    pred = [(-16.0, -179.0), (62.0, 170.0), None]  # across the date line twice; one refusal
    scored = _scored(true, pred, [150.0, 900.0, 10000.0])
    svg = maps.svg_map(scored, svg_id="m", width=1000)
    fiji, alaska, refused = _svg_groups(svg)
    cx = [float(v) for v in re.findall(r"<circle cx='([-\d.]+)'", fiji)]
    assert sorted(round(v) for v in cx) == [0, 1000]  # drawn at both edges
    for g in (fiji, alaska):  # the line to the guess takes the short way round
        for x1, x2 in re.findall(r"<line x1='([-\d.]+)' y1='[-\d.]+' x2='([-\d.]+)'", g):
            assert abs(float(x2) - float(x1)) < 200, g  # 42 degrees at most, not 318
    assert f"fill='{maps.NO_GUESS_COLOUR}'" in refused and "no coordinates" in refused
    height = 500
    assert all(0 <= float(y) <= height for y in re.findall(r"cy='([-\d.]+)'", svg))


def _effects() -> pd.DataFrame:
    """Three levels: all three groups estimated; "all" only; "all" and non-speech."""
    rows = []
    for level, groups in (("a", ("all", "speech", "non_speech")), ("b", ("all",)),
                          ("c", ("all", "non_speech"))):
        for g, _, _ in GROUPS:
            est = g in groups
            rows.append({"model": "m", "intervention": "noise", "kind": "noise", "level": level,
                         "value": np.nan, "group": g, "metric": "distance_km", "n": 12 if est else 5,
                         "diff": 300.0 if est else np.nan, "ci_lo": -100.0 if est else np.nan,
                         "ci_hi": 700.0 if est else np.nan,
                         "note": "" if est else "insufficient data (n = 5, needs 10)"})
    return pd.DataFrame(rows)


def test_intervention_labels_sit_on_their_points(tmp_path):
    effects = _effects()
    rows = effect_rows(effects, "m")
    assert [len(points) for _, points in rows] == [3, 1, 2]
    for i, (_, points) in enumerate(rows):  # the data: each level's markers centred on it
        assert np.mean([y for _, y in points]) == pytest.approx(i)
    marks, texts = svgfigure.read(effect_figure(effects, "m", tmp_path / "effect.svg"))
    colours = [c for _, _, c in GROUPS]
    points = [m for m in marks if m.curved and m.clip and any(f"fill: {c}" in m.style for c in colours)]
    assert len(points) == 6
    ticks = {}
    for m in marks:  # a y tick: its mark in a group ytick_<k>
        tick = next((g for g in m.groups if g.startswith("ytick_")), None)
        if tick and not m.curved:
            ticks[tick] = m.y
    labels = {t.text: t.y for t in texts if any(g.startswith("ytick_") for g in t.groups)}
    assert set(labels) == {"noise (a)", "noise (b)", "noise (c)"}
    spacing = abs(np.diff(sorted(ticks.values()))).min()
    for y in ticks.values():
        mine = [p.y for p in points if abs(p.y - y) < spacing / 2]
        assert mine and np.mean(mine) == pytest.approx(y, abs=0.5), (y, mine)
    for y in labels.values():  # the text itself: within a few px of its tick (and points)
        assert min(abs(y - t) for t in ticks.values()) < 5


def test_accuracy_chart_note_counts_not_applicable_apart(tmp_path):
    """A coordinates-only run scores no continent (n = 0, not applicable): the note gives the
    range of the runs that do, not "n = 0-7"."""
    def table(ns):
        return pd.DataFrame([{"group": g, "n": n, "continent_n": n, "country_n": n,
                              **{f"{lv}_acc{s}": 0.5 for lv in ("continent", "country")
                                 for s in ("", "_lo", "_hi")}} for g, n in ns.items()])

    knn = table({"Africa": 5, "Europe": 7, "Asia": 4})
    random = table({"Africa": 5, "Europe": 7, "Asia": 4}).assign(continent_n=0, country_n=0)
    note = plots.accuracy_by_continent({"knn": knn, "random": random}, tmp_path / "a.png",
                                       min_support=10)
    assert isinstance(note, plots.NoData)
    assert "insufficient data (n = 4-7 scored clips per continent, needs 10)" in note
    only_na = plots.accuracy_by_continent({"random": random}, tmp_path / "b.png", min_support=10)
    assert "not applicable" in only_na and "insufficient" not in only_na


def test_cdf_legend_says_where_refusals_are_scored(tmp_path):
    """A run refusing every clip is a vertical step at 10,000 km: its legend says why."""
    guesses = _scored([(48.0, 2.0)] * 4, [(48.1, 2.1)] * 4, [12.0, 30.0, 200.0, 900.0])
    refuser = _scored([(48.0, 2.0)] * 4, [None] * 4, [10000.0] * 4)
    marks, texts = svgfigure.read(plots.cdf_plot({"knn": guesses, "birdrange": refuser},
                                                 tmp_path / "cdf.svg"))
    labels = {t.text for t in texts}
    assert "birdrange (n=4; 4 without coordinates, scored 10,000 km)" in labels
    assert "knn (n=4)" in labels
    # The long label widens the image, not narrows the axes (the 750 and 2500 km marks met).
    alone, _ = svgfigure.read(plots.cdf_plot({"knn": guesses}, tmp_path / "alone.svg"))

    def width(ms):
        x0, _, x1, _ = next(m.clip for m in ms if m.clip)
        return x1 - x0

    assert width(marks) == pytest.approx(width(alone), abs=1.0)
