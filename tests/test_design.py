"""Kish's design effect, effective clips and clusters, and intervals that are intervals
(agl.scoring.design, agl.scoring.metrics): no 95% interval of zero width, none from one cluster."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from agl.scoring import design
from agl.scoring.metrics import bootstrap_ci, cluster_ci, summarize


def table(n: int, **cols) -> pd.DataFrame:
    base = {"distance_km": np.full(n, 500.0), "city_correct": np.zeros(n), "country_correct": np.zeros(n),
            "continent_correct": np.ones(n), "refused": np.zeros(n, bool), "failed": np.zeros(n, bool),
            "status": ["ok"] * n, "pred_lat": np.zeros(n), "pred_lon": np.zeros(n)}
    base.update(cols)
    return pd.DataFrame(base)


def test_wilson_by_hand():
    # 0 of 44: upper z^2 / (n + z^2) = 3.8415 / 47.8415 (Clopper-Pearson's: 1 - 0.025^(1/44) = 0.0804)
    assert design.wilson(0, 44) == pytest.approx((0.0, 0.080296), abs=1e-6)
    lo, hi = design.wilson(3, 10)  # the textbook case: [0.108, 0.603]
    assert (round(lo, 3), round(hi, 3)) == (0.108, 0.603)


def test_no_degenerate_cell_has_zero_width():
    """0 of 44 correct, 44 of 44, no refusal, no failure: every 0/1 cell of a run is an
    interval with width; the clip unit gives Wilson's 0.080 for 0 of 44."""
    got = summarize(table(44), bootstrap=300, seed=0)
    for key in ("country_acc", "city_acc", "reject_rate", "failure_rate", "within_1km"):
        lo, hi = got["ci95"][key]
        assert got[key] == 0 and lo == 0 and hi == pytest.approx(0.0803, abs=5e-4), key
    lo, hi = got["ci95"]["continent_acc"]  # 44 of 44
    assert hi == 1 and lo == pytest.approx(1 - 0.0803, abs=5e-4)
    assert got["ci95"]["median_km"][0] == got["ci95"]["median_km"][1] == 500  # a constant distance


def test_a_degenerate_cell_under_clusters_uses_kish_effective_clusters():
    """0 of 44 in 11 clusters of 4: the proportion has no spread, the intra-cluster correlation
    cannot be estimated, so each cluster counts once: Wilson with n = 11 (upper 0.259)."""
    labels = np.repeat(np.arange(11), 4)
    lo, hi = cluster_ci(np.zeros(44), "mean", 500, seed=0, clusters=labels)
    assert lo == 0 and hi == pytest.approx(design.wilson(0, 11)[1]) and hi == pytest.approx(0.2589, abs=1e-3)


def test_one_cluster_forms_no_interval():
    """Resampling one cluster gives it back every time: [x, x] was printed as a 95% interval."""
    rng = np.random.default_rng(0)
    values = (rng.random(30) < 0.4).astype(float)
    one = np.zeros(30, dtype=np.int64)
    for stat, v in (("mean", values), ("mean", rng.normal(size=30)), ("median", rng.normal(size=30))):
        assert all(math.isnan(x) for x in cluster_ci(v, stat, 500, clusters=one))
    assert all(math.isnan(x) for x in bootstrap_ci(np.array([1200.0]), "mean", 500))
    from agl.scoring.text import metrics_table

    got = summarize(table(30, country_correct=values), bootstrap=200, clusters=one)
    assert got["n_clusters"] == 1
    text = metrics_table(got)
    assert "none (one cluster)" in text and "[0.4" not in text


def test_kish_deff_by_hand():
    """Clusters of m clips that agree within: deff ~ m; independent clips: deff ~ 1. Against
    the formula written out: G/(G-1) sum (s_g - mean m_g)^2 / n^2 over s^2 / n."""
    rng = np.random.default_rng(3)
    g, m = 200, 5
    labels = np.repeat(np.arange(g), m)
    together = np.repeat((rng.random(g) < 0.3).astype(float), m)
    assert design.kish_deff(together, labels) == pytest.approx(m, rel=0.01)
    y = rng.normal(size=g * m) + np.repeat(rng.normal(size=g), m)
    sums = np.bincount(labels, weights=y)
    by_hand = (g / (g - 1) * ((sums - y.mean() * m) ** 2).sum() / y.size ** 2) / (y.var(ddof=1) / y.size)
    assert design.kish_deff(y, labels) == pytest.approx(by_hand, rel=1e-12)
    # one cluster of 10 and 40 singles: Kish's effective clusters (50^2 / (100 + 40)) = 17.9
    assert design.effective_clusters(np.r_[np.zeros(10, int), np.arange(1, 41)]) == pytest.approx(2500 / 140)
    shares = design.variance_shares(y, labels)
    assert shares.sum() == pytest.approx(1.0) and shares.size == g


def test_the_median_at_the_refusal_distance_reads_refused():
    """A run whose median is the paper's 10,000 km (most clips refused) prints 'refused'."""
    from agl.scoring.text import metrics_table

    got = summarize(table(9, distance_km=np.r_[np.full(5, 10_000.0), np.full(4, 300.0)]), bootstrap=100)
    got["median_refused"] = got["median_km"] == 10_000.0
    line = next(x for x in metrics_table(got).splitlines() if x.startswith("median"))
    assert "refused" in line and "10000" not in line.split("[")[0]


def test_a_breakdown_median_at_the_fixed_distance_reads_refused():
    """The report's breakdowns: a group whose median is the distance its clips without
    coordinates are scored at (10,000 km under paper) prints "refused", not 10000.0."""
    from agl.report.analysis import group_row
    from agl.report.tables import breakdown_table

    nan = float("nan")
    frame = pd.DataFrame({"distance_km": [10_000.0, 10_000.0, 10_000.0, 50.0],
                          "pred_lat": [nan, nan, nan, 1.0], "pred_lon": [nan, nan, nan, 1.0],
                          "continent_correct": [0, 0, 0, 1.0], "country_correct": [0, 0, 0, 1.0],
                          "city_correct": [0, 0, 0, 1.0], "refused": [True, True, True, False],
                          "failed": [False] * 4})
    row = group_row(frame, bootstrap=50)
    assert row["median_refused"] and row["median_km"] == 10_000.0
    page = breakdown_table(pd.DataFrame([{**row, "group": "all", "breakdown": "all"}]))
    assert "<td>refused</td>" in page and "10000.0" not in page
    assert not group_row(frame.iloc[[0, 3, 3]], bootstrap=50)["median_refused"]
