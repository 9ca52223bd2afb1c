"""Breakdowns, paired comparison, factor analysis and calibration (issue 6)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.report import analysis

PARTITIONS = ("speech", "continent", "country", "status")


@pytest.fixture(scope="module")
def qwen_scored(qwen_published, agl1k_manifest) -> pd.DataFrame:
    from agl.scoring.evaluate import evaluate_files

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, scored = evaluate_files(qwen_published, agl1k_manifest, "paper", bootstrap=10)
    return scored


@pytest.fixture(scope="module")
def qwen_breakdowns(qwen_scored) -> dict[str, pd.DataFrame]:
    return analysis.run_breakdowns(qwen_scored, min_clips=10, bootstrap=200, seed=0)


def test_speech_split_matches_the_paper(qwen_breakdowns):
    t = qwen_breakdowns["speech"].set_index("group")
    assert round(t.at["speech", "mean_km"], 2) == 4540.06
    assert round(t.at["non-speech", "mean_km"], 2) == 7777.20
    assert (t.at["speech", "n"], t.at["non-speech", "n"]) == (1024, 418)
    for g in ("speech", "non-speech"):  # every CI brackets its point
        assert t.at[g, "mean_km_lo"] < t.at[g, "mean_km"] < t.at[g, "mean_km_hi"]


@pytest.mark.parametrize("name", PARTITIONS)
def test_partition_rows_sum_back_to_the_whole(qwen_breakdowns, qwen_scored, name):
    t, whole = qwen_breakdowns[name], qwen_breakdowns["all"].iloc[0]
    assert t["n"].sum() == whole["n"] == len(qwen_scored)
    for col in ("n_km", "continent_n", "continent_hits", "country_n", "country_hits", "city_n",
                "city_hits", "refused_count", "failed_count"):
        assert t[col].sum() == whole[col], col
    assert np.isclose(t["km_sum"].sum(), whole["km_sum"])
    # the weighted mean of the group means is the overall mean
    assert np.isclose((t["mean_km"] * t["n_km"]).sum() / t["n_km"].sum(), whole["mean_km"])
    assert np.isclose(whole["mean_km"], qwen_scored["distance_km"].mean())


def test_country_rows_pool_small_countries(qwen_breakdowns):
    t = qwen_breakdowns["country"]
    named, other = t[~t["group"].str.startswith("other")], t[t["group"].str.startswith("other")]
    assert (named["n"] >= 10).all() and len(other) == 1 and other["n"].iloc[0] > 0


def test_categories_are_the_papers_non_speech_scenes(qwen_scored, qwen_breakdowns):
    t = qwen_breakdowns["category"].set_index("group")
    quiet = qwen_scored[qwen_scored["human_sounds"] < 0.1]
    for cat in analysis.SCENE_CATEGORIES:
        rows = quiet[quiet[cat] >= 0.1]
        assert t.at[cat, "n"] == len(rows)
        assert np.isclose(t.at[cat, "mean_km"], rows["distance_km"].mean())


def test_confusion_rows_sum_to_each_true_continent(qwen_scored, qwen_breakdowns):
    conf = qwen_breakdowns["confusion"]
    counts = qwen_breakdowns["continent"].set_index("group")["n"]
    assert conf.sum(axis=1).to_dict() == counts.to_dict()
    assert conf.to_numpy().sum() == len(qwen_scored)
    # "Unknown" (the paper's refusal token) is no answer, not a continent
    no_answer = qwen_scored["pred_continent"].fillna("").str.lower().isin(analysis.NO_ANSWER)
    assert conf[analysis.NO_PREDICTION].sum() == no_answer.sum() > 300
    assert "Unknown" not in conf.columns


def _scored(d_km, country, *, confidence=None, speech=None) -> pd.DataFrame:
    n = len(d_km)
    frame = pd.DataFrame({
        "sample_id": [f"c{i}" for i in range(n)], "status": "ok",
        **{c: 0.0 for c in CATEGORY_COLUMNS},
        "distance_km": d_km, "country_correct": country, "continent_correct": country,
        "city_correct": 0.0, "refused": False, "failed": False,
        "true_country": "France", "true_continent": "Europe", "pred_continent": "Europe",
        "confidence": np.nan if confidence is None else confidence,
    })
    frame["has_speech"] = False if speech is None else speech
    return frame


def test_paired_test_finds_a_known_difference():
    rng = np.random.default_rng(1)
    base = rng.uniform(100, 9000, 300)
    a = _scored(base + 400 + rng.normal(0, 50, 300), (rng.random(300) < 0.3).astype(float))
    b = _scored(base, (rng.random(300) < 0.3).astype(float))
    row = analysis.compare_runs(a, b, seed=0).set_index("metric").loc["distance_km"]
    assert row["n"] == 300 and row["p_value"] < 0.001
    assert row["ci_lo"] < 400 < row["ci_hi"] and row["ci_lo"] > 300


def test_paired_test_with_no_difference():
    rng = np.random.default_rng(2)
    base = rng.uniform(100, 9000, 200)
    noise = rng.normal(0, 300, 100)
    # symmetric differences: exactly zero mean, so no test may call it a difference
    a = _scored(base + np.concatenate([noise, -noise]), np.ones(200))
    b = _scored(base, np.ones(200))
    t = analysis.compare_runs(a, b, seed=0).set_index("metric")
    assert abs(t.at["distance_km", "diff"]) < 1e-9
    assert t.at["distance_km", "p_value"] > 0.9
    assert t.at["distance_km", "ci_lo"] < 0 < t.at["distance_km", "ci_hi"]
    assert t.at["country_correct", "p_value"] == 1.0  # identical accuracy


def test_paired_uses_only_common_scored_clips():
    a = _scored([100.0, 200.0, np.nan, 400.0], [1.0, 0.0, 1.0, np.nan])
    b = _scored([150.0, 250.0, 300.0], [1.0, 1.0, 0.0])
    t = analysis.compare_runs(a, b, n_perm=200, n_boot=200).set_index("metric")
    assert t.at["distance_km", "n"] == 2 and t.at["distance_km", "diff"] == -50.0
    assert t.at["country_correct", "n"] == 3


def test_factor_analysis_recovers_speech_effect():
    rng = np.random.default_rng(3)
    n = 600
    speech = rng.random(n) < 0.5
    correct = (rng.random(n) < np.where(speech, 0.6, 0.1)).astype(float)
    frame = _scored(rng.uniform(0, 9000, n), correct, speech=speech)
    frame["animal"] = (rng.random(n) < 0.4).astype(float)
    f = analysis.country_factors(frame, bootstrap=100).set_index("factor")
    assert f.at["speech", "coef_lo"] > 1.5 and f.at["speech", "odds_ratio"] > 5
    assert f.at["animal", "coef_lo"] < 0 < f.at["animal", "coef_hi"]
    assert f.at["music", "note"] == "constant over the scored clips"


def test_calibration_bins_and_absent_confidence():
    conf = np.array([0.05, 0.15, 0.9, 0.95, 1.0, 0.5])
    frame = _scored(np.full(6, 10.0), [0.0, 0.0, 1.0, 1.0, 1.0, 0.0], confidence=conf)
    t = analysis.calibration(frame, bins=5, bootstrap=50)
    assert t["n"].sum() == 6 and t.iloc[-1]["group"] == "[0.8, 1.0]"
    assert t.iloc[-1]["country_acc"] == 1.0 and t.iloc[0]["country_acc"] == 0.0
    assert 0 <= t.attrs["ece_country"] <= 1
    assert analysis.calibration(_scored([1.0], [1.0])).empty


def test_paired_comparison_below_minimum_support_gives_no_estimate():
    """Fewer common clips than the minimum support: n and "insufficient data", no numbers."""
    rng = np.random.default_rng(4)
    base = rng.uniform(100, 9000, 12)
    a, b = _scored(base + 500, np.ones(12)), _scored(base, np.zeros(12))
    t = analysis.compare_runs(a, b, n_perm=200, n_boot=200, min_support=13).set_index("metric")
    for metric in ("distance_km", "country_correct"):
        assert t.at[metric, "n"] == 12
        assert t.at[metric, "note"] == "insufficient data (n = 12, needs 13)"
        assert t[["mean_a", "mean_b", "diff", "ci_lo", "ci_hi", "p_value"]].loc[metric].isna().all()
    enough = analysis.compare_runs(a, b, n_perm=200, n_boot=200, min_support=12).set_index("metric")
    assert enough.at["distance_km", "diff"] == pytest.approx(500.0) and enough.at["distance_km", "note"] == ""
