"""A field a run never attempts is not applicable, not a refusal: a coordinates-only baseline
has no reject rate of 1.00 and no city/country accuracy of 0 under `paper` (shown "—")."""

from __future__ import annotations

import math

import pandas as pd
from factories import manifest, prediction

from agl.predictions.records import Status, prediction_frame
from agl.scoring.evaluate import evaluate_frames
from agl.scoring.leaderboard import render_rows


def _result(preds):
    m = manifest([{}, {}, {}, {}])
    return evaluate_frames(m, prediction_frame(preds), "paper", bootstrap=20)[0]


def test_coordinates_only_run_has_no_refusals_and_no_text_accuracy():
    res = _result([prediction(f"k{i}", lat=48.0 + i, lon=2.0) for i in range(4)])
    assert res["reject_rate"] == 0.0
    assert math.isnan(res["country_acc"]) and math.isnan(res["city_acc"]) and math.isnan(res["continent_acc"])
    assert res["notes"]["not_applicable"] == ["city", "continent", "country"]
    assert res["distance_error_km"] < 300


def test_coordinates_only_replies_read_by_the_authors_parser_stay_not_applicable():
    """Under `paper` a run's raw replies are read by the authors' parser port, which writes
    "Unknown" for a field it finds none of: for a run that never gives one, still "—"."""
    from agl.predictions.authors import with_authors_view

    preds = [prediction(f"k{i}", lat=48.0 + i, lon=2.0) for i in range(4)]
    frame = with_authors_view(prediction_frame(preds), {f"k{i}": f'{{"latitude": {48.0 + i}, "longitude": 2.0}}'
                                                         for i in range(4)})
    res = evaluate_frames(manifest([{}, {}, {}, {}]), frame, "paper", bootstrap=20)[0]
    assert res["reject_rate"] == 0.0 and math.isnan(res["country_acc"])
    assert res["notes"]["not_applicable"] == ["city", "continent", "country"]


def test_a_field_given_for_some_clips_is_attempted_and_its_gaps_are_refusals():
    preds = [prediction("k0", lat=48.0, lon=2.0, city="Paris", country="France", continent="Europe")]
    preds += [prediction(f"k{i}", lat=48.0, lon=2.0) for i in (1, 2, 3)]
    res = _result(preds)
    assert res["reject_rate"] == 0.75 and res["country_acc"] == 0.25
    assert "not_applicable" not in res["notes"]


def test_a_run_that_refuses_everything_still_refuses():
    res = _result([prediction(f"k{i}", status=Status.REFUSED, refused=True) for i in range(4)])
    assert res["reject_rate"] == 1.0 and res["country_acc"] == 0.0


def test_leaderboard_shows_a_dash_for_not_applicable():
    row = {
        "run": "random",
        "model": "uniform",
        "n": 4,
        "distance_error_km": 9000.0,
        "median_km": 9000.0,
        "geoscore": 100.0,
        "reject_rate": 0.0,
        **{f"{c}_acc": math.nan for c in ("continent", "country", "city")},
    }
    for c in ("distance_error_km", "continent_acc", "country_acc", "city_acc", "reject_rate"):
        row[f"{c}_lo"], row[f"{c}_hi"] = (8000.0, 10000.0) if c == "distance_error_km" else (math.nan, math.nan)
    for c in ("distance_error_km", "continent_acc", "country_acc", "city_acc"):
        row[f"paper_{c}"] = math.nan
    head, (cells,) = render_rows(pd.DataFrame([row]))
    cell = dict(zip(head, cells, strict=True))
    assert cell["continent"] == cell["country"] == cell["city"] == "—"
    assert cell["distance km [95% CI]"] == "9000.00 [8000, 10000]"
