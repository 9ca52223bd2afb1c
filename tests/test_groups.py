"""Groups and disparity (agl.scoring.groups, agl.scoring.covariates): planted gaps are found
inside their interval, equal groups give a gap interval holding 0, small groups are pooled in
order and marked, and the covariate tables load with the network blocked."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from agl.scoring import groups as groups_mod
from agl.scoring.groups import GroupSpec, by_group, pool

# Capitals of 12 high-income and 12 low-income countries (World Bank, hdx's file).
HIGH = [(52.52, 13.40), (48.86, 2.35), (51.51, -0.13), (48.21, 16.37), (40.42, -3.70),
        (52.37, 4.90), (59.33, 18.07), (60.17, 24.94), (47.50, 19.04), (50.09, 14.42),
        (38.72, -9.14), (35.68, 139.69)]
LOW = [(0.35, 32.58), (9.03, 38.74), (12.64, -8.00), (13.51, 2.11), (-13.96, 33.79),
       (15.50, 32.56), (12.37, -1.52), (12.13, 15.06), (-25.97, 32.57), (-18.88, 47.51),
       (-1.95, 30.06), (8.48, -13.23)]


def _table(p_high: float, p_low: float, seed: int, per_country: int = 20) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for places, p in ((HIGH, p_high), (LOW, p_low)):
        for lat, lon in places:
            # a country effect: each country's own rate scatters around its group's
            q = float(np.clip(p + rng.normal(0, 0.05), 0, 1))
            for _ in range(per_country):
                hit = float(rng.random() < q)
                rows.append({"true_lat": lat + rng.normal(0, 0.01), "true_lon": lon + rng.normal(0, 0.01),
                             "country_correct": hit, "continent_correct": hit, "city_correct": 0.0,
                             "distance_km": 500.0 if hit else 3000.0, "has_speech": True})
    return pd.DataFrame(rows)


def test_a_planted_gap_is_recovered_inside_its_interval():
    table = by_group(_table(0.7, 0.3, seed=1), GroupSpec("income", bootstrap=400, seed=0))
    shown = {g["group"]: g for g in table["groups"] if "withheld" not in g}
    assert "High" in shown and any("Low" in name for name in shown)
    d = table["disparity"]["country_acc"]
    assert d["best"] == "High" and "Low" in d["worst"]
    lo, hi = d["gap_ci95"]
    assert lo <= 0.4 <= hi and lo > 0.1  # the planted gap, and clearly not 0
    assert d["ratio"] > 1.5 and d["ratio_ci95"][0] > 1
    assert table["source"].startswith("hdx-python-country")


def test_equal_groups_give_a_gap_interval_holding_zero():
    """Over 10 synthetic benchmarks with equal groups, the gap interval holds 0 in at least
    8 (nominal: 95%; the worst and best are chosen by noise, and 12 countries a side)."""
    held = 0
    for seed in range(10):
        table = by_group(_table(0.5, 0.5, seed=seed), GroupSpec("income", bootstrap=400, seed=0))
        assert [g["group"] for g in table["groups"]] == ["Low", "High"]
        lo, hi = table["disparity"]["country_acc"]["gap_ci95"]
        km_lo, km_hi = table["disparity"]["distance_error_km"]["gap_ci95"]
        assert (lo <= 0 <= hi) == (km_lo <= 1e-9 and 0 <= km_hi)  # km is 3000 - 2500 x hit here
        held += lo <= 0 <= hi
    assert held >= 8


def test_small_groups_pool_with_neighbours_in_order_and_are_marked():
    sizes = {"Low": 9, "Lower middle": 41, "Upper middle": 72, "High": 1314, "unlisted": 8}
    assert pool("income", sizes, 10) == [(["Low", "Lower middle"], True), (["Upper middle"], False),
                                         (["High"], False), (["unlisted"], False)]
    # a short last run joins the row below it
    assert pool("income", {"Low": 30, "High": 4}, 10) == [(["Low", "High"], True)]
    assert pool("region", {"Europe": 50, "Oceania": 3, "Africa": 4}, 10) == [
        (["Europe"], False), (["Africa", "Oceania"], True)]


def test_pooled_rows_are_labelled_and_unsupported_rows_withheld():
    frame = _table(0.6, 0.4, seed=3, per_country=1)  # 12 clips each side
    extra = [(41.9029, 12.4534)] + [(28.61, 77.21)] * 3  # the Vatican (unlisted), New Delhi
    frame = pd.concat([frame, pd.DataFrame([{"true_lat": lat, "true_lon": lon, "country_correct": 1.0,
                                             "continent_correct": 1.0, "city_correct": 0.0,
                                             "distance_km": 10.0, "has_speech": False}
                                            for lat, lon in extra])], ignore_index=True)
    table = by_group(frame, GroupSpec("income", bootstrap=50))
    names = [g["group"] for g in table["groups"]]
    assert names[-1] == "unlisted" and "insufficient data (n = 1, needs 10)" in table["groups"][-1]["withheld"]
    assert names[:2] == ["Low", "Lower middle + High"] and table["groups"][1]["pooled"]
    json.dumps(table, allow_nan=False)  # no inf / NaN reaches JSON


def test_covariates_load_with_the_network_blocked():
    code = (
        "import socket\n"
        "def refuse(*a, **k): raise OSError('network blocked')\n"
        "socket.socket.connect = refuse; socket.create_connection = refuse\n"
        "socket.getaddrinfo = refuse\n"
        "from agl.scoring.covariates import covariate\n"
        "print(covariate('income', 'TWN'), covariate('income', 'UGA'), covariate('region', 'DEU'),"
        " covariate('language', 'JPN'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["High", "Low", "Europe", "Japanese"]


def test_unknown_grouping_is_one_line():
    from agl.errors import AglError

    with pytest.raises(AglError, match="--by: 'gdp' is not a grouping"):
        GroupSpec("gdp")
    assert socket  # the blocked-network test patches a subprocess, never this process
    assert groups_mod.BY[0] == "income"


def test_qwen_by_income(agl1k_manifest, qwen_published):
    """`agl evaluate --by income` on the authors' Qwen2.5-Omni file: High >= 1,200 clips, Low
    pooled with Lower middle, each with n, country accuracy and an interval (the command's
    JSON is this table: tests/test_evaluate_cli.py runs the command itself)."""
    import warnings

    from agl.dataset.manifest_cache import load_manifest_cached
    from agl.scoring.evaluate import evaluate_frames, load_predictions_any

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manifest = load_manifest_cached(agl1k_manifest, columns=[])
    _, scored = evaluate_frames(manifest, load_predictions_any(qwen_published), "paper", bootstrap=0)
    table = by_group(scored, GroupSpec("income", bootstrap=200))
    json.dumps(table, allow_nan=False)
    rows = {g["group"]: g for g in table["groups"]}
    assert rows["High"]["n"] >= 1200 and rows["High"]["country_acc_ci95"] is not None
    pooled = rows["Low + Lower middle"]
    assert pooled["pooled"] and pooled["n"] == 50 and pooled["n_countries"] == 16
    assert pooled["country_acc_ci95"][0] <= pooled["country_acc"] <= pooled["country_acc_ci95"][1]
    assert rows["unlisted"]["withheld"].startswith("insufficient data (n = 8")
    d = table["disparity"]["country_acc"]
    assert d["worst"] == "Low + Lower middle" and d["best"] == "High" and d["gap_ci95"] is not None


def test_magnets_and_spread_on_a_hand_made_table():
    from agl.scoring.magnets import magnets, spread

    # 12 clips in Germany answered France 8 times and Germany 4; 12 in France all answered
    # France; 3 in Japan answered Japan; 2 answered Brazil (never the truth); one refusal.
    true = ["Germany"] * 12 + ["France"] * 12 + ["Japan"] * 3 + ["Germany"] * 3
    pred = ["France"] * 8 + ["Germany"] * 4 + ["France"] * 12 + ["Japan"] * 3 + ["Brazil", "Brazil", None]
    scored = pd.DataFrame({"true_country": true, "pred_country": pred, "pred_lat": 10.0, "pred_lon": 20.0})
    pull = magnets(scored, min_support=10).set_index("country")
    assert pull.loc["France", "predicted"] == 20 and pull.loc["France", "true"] == 12
    assert pull.loc["France", "ratio"] == pytest.approx(20 / 12)
    assert pull.loc["Germany", "ratio"] == pytest.approx(4 / 14)
    assert pull.loc["Brazil", "true"] == 0 and pd.isna(pull.loc["Brazil", "ratio"])
    assert pull.loc["Japan", "withheld"] and pd.isna(pull.loc["Japan", "ratio"])  # true on 3 < 10
    assert pull.index[0] == "France"  # the largest excess first
    scatter = spread(scored, min_support=10).set_index("country")
    assert scatter.loc["France", "entropy_bits"] == 0.0 and scatter.loc["France", "top_share"] == 1.0
    p = np.array([8, 4, 2]) / 14  # Germany: France 8, Germany 4, Brazil 2 (the refusal drops out)
    assert scatter.loc["Germany", "entropy_bits"] == pytest.approx(float(-(p * np.log2(p)).sum()))
    assert bool(scatter.loc["Japan", "withheld"])


def test_covariate_regression_finds_a_planted_income_effect_and_keeps_the_epv_rule():
    from agl.report.covariate_model import covariate_model

    frame = _table(0.8, 0.2, seed=4).assign(sample_id=lambda f: [f"c{i}" for i in range(len(f))])
    model = covariate_model(frame, bootstrap=30, seed=0).set_index("term")
    assert model.loc["high_income", "odds_ratio"] > 3  # planted: 0.8 vs 0.2 (odds 16x)
    assert model.loc["speech", "note"] == "constant or unknown for every clip"  # every clip has speech
    assert model.attrs["countries"] == 24 and model.attrs["bootstrap"] + model.attrs["bootstrap_failed"] == 30
    few = covariate_model(_table(0.5, 0.5, seed=5, per_country=1).assign(sample_id="x"), bootstrap=5)
    assert few.attrs["insufficient"].startswith("insufficient data (n = 24 clips")
    assert few["odds_ratio"].isna().all()


def test_groups_that_all_score_the_same_name_no_worst_or_best():
    frame = _table(0.5, 0.5, seed=6).assign(city_correct=0.0)
    table = by_group(frame, GroupSpec("income", bootstrap=20))
    d = table["disparity"]["city_acc"]
    assert d["worst"] is None and d["best"] is None and d["gap"] == 0 and d["gap_ci95"] == [0.0, 0.0]


def test_the_fairness_section_withholds_what_lacks_support(tmp_path):
    """24 clips (one per capital): both income groups are shown, the regression is withheld
    in one row, and France, named 24 times and never the truth, has no ratio."""
    from agl.report import sections
    from agl.report.inputs import ReportInputs, ReportOptions, RunInput
    from agl.report.sections import fairness

    frame = _table(0.5, 0.5, seed=7, per_country=1)
    frame = frame.assign(sample_id=[f"c{i}" for i in range(len(frame))], true_country="Germany",
                         pred_country="France", pred_lat=48.86, pred_lon=2.35)
    run = RunInput("r", frame)
    ctx = sections.SectionContext(runs=[run], pipeline_runs=[run], inputs=ReportInputs(run_dirs=()),
                                  options=ReportOptions(group_bootstrap=20, factor_bootstrap=5),
                                  figs=tmp_path, tables=tmp_path)
    page = fairness.section(ctx)
    assert "<h2>Who the models fail</h2>" in page and "id='fairness-income-r'" in page
    assert page.count("needs 30 of each") == 1  # the regression: one row for its 3 covariates
    assert "<td>France</td><td>24</td><td>0</td><td>+24</td><td class='insufficient'>never the truth" in page
    assert "id='magnets-map-r'" in page and (tmp_path / "covariates-r.csv").exists()


def test_a_share_of_zero_in_a_group_gets_wilson_with_its_effective_countries():
    """`agl evaluate --by income` on the demo printed `country 0.000 [0.000, 0.000]` per group:
    resampling countries repeats a share of 0. Now the Wilson interval with Kish's effective
    number of the group's countries (sizes 20, 20, 10: 2500 / 900 = 2.78), as the run's cells."""
    from agl.scoring.design import wilson

    table = _table(0.0, 0.5, seed=3)
    high = table.index[:len(HIGH) * 20]
    table = table.drop(high[50:]).copy()  # High: three countries, 20 + 20 + 10 clips, none right
    table.loc[table.index[:50], ["country_correct", "continent_correct", "distance_km"]] = [0.0, 0.0, 3000.0]
    shown = {g["group"]: g for g in by_group(table, GroupSpec("income", bootstrap=200, seed=0))["groups"]}
    lo, hi = wilson(0.0, 2500 / 900)
    assert shown["High"]["country_acc_ci95"] == pytest.approx([lo, hi]) and hi > 0.4
    assert shown["High"]["city_acc_ci95"] == pytest.approx([lo, hi])
    assert shown["High"]["distance_error_km_ci95"] == [3000.0, 3000.0]  # not a share: as resampled
