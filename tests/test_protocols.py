"""Both scoring protocols on hand-made cases with known answers."""

import math

import numpy as np
import pytest
from factories import manifest, prediction

from agl.errors import AglError
from agl.predictions.records import Prediction, Status, prediction_frame
from agl.scoring.evaluate import evaluate_frames, score_run
from agl.scoring.metrics import bootstrap_ci, summarize

PARIS = (48.8566, 2.3522)
LONDON = (51.5074, -0.1278)
PARIS_LONDON_KM = 343.92  # WGS-84 geodesic, to 0.01 km


def two_clips():
    return manifest([
        {"key": "a", "human_sounds": 1.0},
        {"key": "b", "latitude": LONDON[0], "longitude": LONDON[1], "city": "London",
         "country": "United Kingdom", "continent": "Europe"},
    ])


def test_paper_exact_hit_and_known_distance():
    preds = [prediction("a", *PARIS, "paris", "FRANCE", "europe"),
             prediction("b", *PARIS, "Paris", "England", "Europe")]
    s = score_run(two_clips(), preds, "paper").set_index("sample_id")
    assert s.loc["a", "distance_km"] == pytest.approx(0, abs=1e-6)
    assert s.loc["b", "distance_km"] == pytest.approx(PARIS_LONDON_KM, abs=0.01)
    assert s.loc["a", "city_correct"] == 1 and s.loc["a", "country_correct"] == 1  # case-insensitive
    assert s.loc["b", "country_correct"] == 1  # England -> United Kingdom, as the authors normalise
    assert s.loc["b", "city_correct"] == 0
    assert bool(s.loc["a", "has_speech"]) and not bool(s.loc["b", "has_speech"])


def test_paper_refusal_is_10000_km_and_wrong_where_both_present():
    preds = [prediction("a", status=Status.REFUSED, refused=True),
             prediction("b", *LONDON, "London", "UK", "Europe")]
    s = score_run(two_clips(), preds, "paper").set_index("sample_id")
    assert s.loc["a", "distance_km"] == 10_000
    assert s.loc["a", "refused"] and not s.loc["b", "refused"]
    assert s.loc["a", "country_correct"] == 0  # "Unknown", as the authors wrote it
    r = summarize(s, bootstrap=0)
    assert r["distance_error_km"] == pytest.approx(5000, abs=1e-6)
    assert r["reject_rate"] == 0.5 and r["within_1km"] == 0.5


def test_paper_drops_unscorable_coordinates_and_untagged_clips_with_counts():
    m = manifest([{"key": "a"}, {"key": "b"}, {"key": "c", "environment_and_background": 0.0}])
    preds = [
        Prediction("a", Status.PARTIAL, original={"predicted_latitude": "Not specified",
                   "predicted_longitude": "Not specified", "predicted_city": "Paris",
                   "predicted_country": "France", "predicted_continent": "Europe"}),
        prediction("b", *PARIS, "Paris", "France", "Europe"),
        prediction("c", *PARIS, "Paris", "France", "Europe"),
    ]
    r, scored = evaluate_frames(m, prediction_frame(preds), "paper", bootstrap=0)
    assert r["notes"]["n_untagged_dropped"] == 1 and r["n"] == 2
    assert r["n_distance_excluded"] == 1 and r["distance_error_km"] == pytest.approx(0, abs=1e-6)


def test_paper_empty_continent_is_excluded_from_continent_accuracy():
    m = manifest([{"key": "a", "continent": "", "city": "Vatican City", "country": "Vatican City"},
                  {"key": "b"}])
    preds = [prediction("a", *PARIS, "Rome", "Italy", "Europe"), prediction("b", *PARIS, "Paris", "France", "Europe")]
    r, _ = evaluate_frames(m, prediction_frame(preds), "paper", bootstrap=0)
    assert r["n_continent_scored"] == 1 and r["continent_acc"] == 1.0


def test_strict_counts_every_clip_and_fails_refusals_everywhere():
    m = manifest([{"key": "a", "continent": "", "city": "Vatican City", "country": "Vatican City"},
                  {"key": "b", "city": "Taipei", "country": "China", "continent": "Asia",
                   "latitude": 25.033, "longitude": 121.565},
                  {"key": "c"}, {"key": "d"}])
    preds = [
        prediction("a", 41.9, 12.45, "Vatican", "Holy See", "europe"),
        prediction("b", 25.033, 121.565, "Taipei", "Taiwan", "Asia"),
        prediction("c", status=Status.REFUSED, refused=True),
        # clip d has no prediction at all
    ]
    r, s = evaluate_frames(m, prediction_frame(preds), "strict", bootstrap=0, strict_refusal_km=20_000)
    s = s.set_index("sample_id")
    assert r["n"] == 4 and r["notes"]["n_without_prediction"] == 1
    assert s.loc["a", "country_correct"] == 1  # Holy See == Vatican City as ISO codes
    assert s.loc["a", "continent_correct"] == 1  # derived from the country where the manifest is empty
    assert s.loc["b", "country_correct"] == 1  # Taiwan labelled China on both sides
    assert s.loc[["c", "d"], "distance_km"].tolist() == [20_000, 20_000]
    assert s.loc[["c", "d"], "country_correct"].tolist() == [0, 0]
    assert r["country_acc"] == 0.5 and r["failure_rate"] == 0.25 and r["reject_rate"] == 0.25


def test_strict_city_ignores_case_and_accents_but_hedges_are_wrong():
    m = manifest([{"key": "a", "city": "São Paulo", "country": "Brazil", "continent": "South America"}])
    ok = score_run(m, [prediction("a", *PARIS, "sao paulo", "BRAZIL", "South America")], "strict")
    hedge = score_run(m, [prediction("a", *PARIS, "x", "Brazil", "South America or Africa")], "strict")
    assert ok["city_correct"].item() == 1 and ok["country_correct"].item() == 1
    assert hedge["continent_correct"].item() == 0


def test_unknown_sample_id_is_an_error():
    with pytest.raises(AglError, match="not in the manifest"):
        score_run(two_clips(), [prediction("zzz", *PARIS)], "paper")


def test_geoscore_and_thresholds():
    m = manifest([{"key": "a"}])
    r = summarize(score_run(m, [prediction("a", *LONDON, "x", "y", "z")], "paper"), bootstrap=0)
    assert r["geoscore"] == pytest.approx(5000 * math.exp(-PARIS_LONDON_KM / 1492), rel=1e-4)  # the paper's
    assert r["within_200km"] == 0 and r["within_750km"] == 1 and r["within_2500km"] == 1


def test_bootstrap_ci_is_seeded_and_covers_the_mean():
    rng = np.random.default_rng(1)
    v = rng.exponential(1000, size=500)
    lo, hi = bootstrap_ci(v, "mean", n=500, seed=3)
    assert lo < v.mean() < hi and (lo, hi) == bootstrap_ci(v, "mean", n=500, seed=3)
    binary = (rng.random(400) < 0.3).astype(float)
    blo, bhi = bootstrap_ci(binary, "mean", n=2000, seed=0)
    se = math.sqrt(0.3 * 0.7 / 400)
    assert blo == pytest.approx(binary.mean() - 1.96 * se, abs=0.012)
    assert bhi == pytest.approx(binary.mean() + 1.96 * se, abs=0.012)


def test_binned_bootstrap_agrees_with_row_bootstrap_on_large_inputs():
    from agl.scoring import metrics

    rng = np.random.default_rng(2)
    v = rng.exponential(3000, size=60_000)
    binned = metrics._binned_draws(v, "mean", 400, np.random.default_rng(0))
    rows = metrics._row_draws(v, "mean", 400, np.random.default_rng(0))
    assert np.std(binned) == pytest.approx(np.std(rows), rel=0.15)
    assert np.mean(binned) == pytest.approx(np.mean(rows), rel=1e-3)
