"""Cluster-aware intervals (issue 31, docs/metrics.md#clusters): the units, the cluster
bootstrap against what theory says it must give, and the paired test's verdicts."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from agl.errors import AglError
from agl.scoring import clusters
from agl.scoring.clusters import cluster_labels, parse_unit
from agl.scoring.metrics import EXACT_LIMIT, cluster_ci, summarize
from agl.scoring.paired import paired_test


def width(ci) -> float:
    return ci[1] - ci[0]


def scored_table(values: dict[str, np.ndarray], lat: np.ndarray, lon: np.ndarray) -> pd.DataFrame:
    n = len(lat)
    base = {"distance_km": np.full(n, 100.0), "city_correct": np.zeros(n), "country_correct": np.zeros(n),
            "continent_correct": np.zeros(n), "refused": np.zeros(n, bool), "failed": np.zeros(n, bool),
            "status": ["ok"] * n, "pred_lat": lat, "pred_lon": lon,
            "true_lat": lat, "true_lon": lon, "true_city": [f"c{i}" for i in range(n)],
            "true_country": ["X"] * n}
    return pd.DataFrame({**base, **values})


# --- the units -----------------------------------------------------------------------------


def test_units_on_a_small_map():
    # Three clips 5 km apart in a chain (A-B-C: A and C are 10 km apart), one 500 km away.
    km = 1 / 111.195  # degrees of latitude per km (mean radius)
    frame = pd.DataFrame({"true_lat": [0.0, 5 * km, 10 * km, 500 * km, np.nan],
                          "true_lon": [0.0, 0.0, 0.0, 0.0, 0.0],
                          "true_city": ["Rome", " rome ", "Ostia", "Naples", "Rome"],
                          "true_country": ["Italy", "ITALY", "Italy", "Italy", "Italy"]})
    assert cluster_labels(frame, "clip").tolist() == [0, 1, 2, 3, 4]
    # single linkage chains A-B-C under 6 km though A-C is 10 km; a clip without a place is alone
    assert cluster_labels(frame, "site:6").tolist() == [0, 0, 0, 1, 2]
    assert cluster_labels(frame, "site:4").tolist() == [0, 1, 2, 3, 4]
    assert cluster_labels(frame, "city").tolist() == [0, 0, 1, 2, 0]  # labels trimmed, case-folded
    assert cluster_labels(frame, "cell:1").tolist() == [0, 0, 0, 1, 2]


@pytest.mark.parametrize("bad", ["", "clips", "cell", "cell:0", "cell:-1", "site:abc", "site:nan",
                                 "cell:200", "city:3"])
def test_a_bad_unit_is_one_line(bad):
    with pytest.raises(AglError, match="unknown unit of resampling"):
        parse_unit(bad, "evaluate.resampling_unit")


def test_the_manifest_clusters_as_the_issue_counts(agl1k_manifest):
    """1,444 clips in 698 cells of 0.1 degree, 960 sharing theirs, 79 in the largest (Berlin);
    716 city labels; the default unit joins Berlin's districts and Taipei's metro area."""
    from agl.dataset.manifest_cache import load_manifest_cached

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manifest = load_manifest_cached(agl1k_manifest, columns=[])
    cells = np.bincount(cluster_labels(manifest, "cell:0.1"))
    assert (cells.size, cells.max(), int(cells[cells > 1].sum())) == (698, 79, 960)
    assert np.bincount(cluster_labels(manifest, "city")).size == 716
    site = cluster_labels(manifest, "site:25")
    sizes = np.bincount(site)
    assert sizes.size == 441
    berlin = site[manifest["city"].isin(["Berlin Treptow", "Bezirk Kreuzberg", "Mitte"]).to_numpy()]
    assert len(set(berlin.tolist())) == 1
    # deterministic: the same labels from the rows in the same order
    assert (cluster_labels(manifest, "site:25") == site).all()


# --- the cluster bootstrap ----------------------------------------------------------------


@pytest.mark.parametrize("route", ["binary", "index", "binned"])
def test_perfectly_correlated_clusters_widen_by_root_cluster_size(route):
    """Every clip of a cluster right or wrong (or as far off) together: the data hold G
    independent values, not G*m, so the interval is sqrt(m) = 3 times the clip one.

    Tolerance 10%: the percentile interval of B = 4000 resamples has a Monte-Carlo error of
    about 2% of its width per end (sd of the 2.5% quantile ~ sqrt(.025*.975/B)/phi(1.96) =
    0.04 sd of the statistic, over a width of 3.92 sd), the cluster interval of a 0/1 mean
    moves in steps of 1/G (1/400 of a width of ~0.1: 2.5%), and sqrt(m) is itself the large-G
    limit; 10% is over three times their combined spread, and far from the 1.0 of a bootstrap
    that ignored the clusters."""
    m = 9
    groups = 400 if route != "binned" else EXACT_LIMIT // m + 600  # binned: a large table
    rng = np.random.default_rng(7)
    labels = np.repeat(np.arange(groups), m)
    if route == "binary":
        values = (rng.random(groups) < 0.5).astype(float)[labels]
    else:
        values = rng.exponential(1000.0, groups)[labels]
    clip = cluster_ci(values, "mean", 4000, seed=3)
    cluster = cluster_ci(values, "mean", 4000, seed=3, clusters=labels)
    assert width(cluster) / width(clip) == pytest.approx(math.sqrt(m), rel=0.10)


def test_singleton_clusters_give_the_clip_interval_exactly():
    rng = np.random.default_rng(1)
    n = 300
    lat, lon = rng.uniform(-60, 60, n), rng.uniform(-180, 180, n)
    frame = scored_table({"distance_km": rng.exponential(2000, n),
                          "country_correct": (rng.random(n) < 0.3).astype(float)}, lat, lon)
    labels = cluster_labels(frame, "site:0.001")  # every clip far from every other
    assert labels.tolist() == list(range(n))
    got = summarize(frame, bootstrap=500, seed=11, clusters=labels)
    assert got["ci95"] == got["ci95_clip"] == summarize(frame, bootstrap=500, seed=11)["ci95"]
    assert got["n_clusters"] == n
    assert all(v == pytest.approx(1.0) for v in got["design_effect"].values() if not math.isnan(v))
    assert got["n_effective_clusters"] == pytest.approx(n)
    d = rng.normal(0, 1, n)
    assert paired_test(d, 0 * d, seed=5, clusters=labels) == paired_test(d, 0 * d, seed=5)


def test_single_clip_clusters_draw_what_the_row_bootstrap_draws():
    """The cluster routes with clusters of one clip numbered as the rows make the row
    bootstrap's random calls and sums: the same resamples, bit for bit (no shortcut)."""
    from agl.scoring import metrics, resample

    rng = np.random.default_rng(1)
    n = 300
    labels = np.arange(n)
    hits = (rng.random(n) < 0.3).astype(float)
    hits[:7] = np.nan
    ones, zeros = int(np.nansum(hits)), int((hits == 0).sum())
    assert np.array_equal(resample.binary_draws(hits, labels, n, 500, np.random.default_rng(5)),
                          metrics._binary_draws(ones, zeros, 7, 500, np.random.default_rng(5)), equal_nan=True)
    km = rng.exponential(2000, n)
    km[:5] = np.nan
    for stat in ("mean", "median"):
        assert np.array_equal(resample.index_draws(km, labels, n, stat, 500, np.random.default_rng(5)),
                              metrics._row_draws(km, stat, 500, np.random.default_rng(5))), stat


def test_the_index_route_agrees_with_the_binned_one():
    """The two routes of a continuous column resample the same clusters: their intervals
    agree within Monte-Carlo noise (one table, small enough for both)."""
    from agl.scoring import resample

    rng = np.random.default_rng(2)
    sizes = rng.geometric(0.3, 3000)
    labels = np.repeat(np.arange(sizes.size), sizes)
    values = rng.exponential(500, sizes.size)[labels] + rng.exponential(500, labels.size)
    for stat in ("mean", "median"):
        exact = resample.index_draws(values, labels, sizes.size, stat, 2000, np.random.default_rng(0))
        binned = resample.binned_draws(values, labels, sizes.size, stat, 2000, np.random.default_rng(0))
        lo_e, hi_e = np.percentile(exact, [2.5, 97.5])
        lo_b, hi_b = np.percentile(binned, [2.5, 97.5])
        assert (hi_b - lo_b) == pytest.approx(hi_e - lo_e, rel=0.12), stat


def test_weighted_median_is_the_median_of_the_resample():
    from agl.scoring.resample import weighted_median

    values = np.array([1.0, 2.0, 5.0, 9.0])
    weights = np.array([[1, 1, 1, 1], [3, 0, 0, 1], [0, 0, 2, 0], [0, 0, 0, 0]])
    got = weighted_median(values, weights)
    assert got[:3].tolist() == [3.5, 1.0, 5.0] and math.isnan(got[3])


# --- the paired test --------------------------------------------------------------------------


def test_a_difference_inside_one_cluster_is_significant_only_under_clips():
    """Two runs identical except on the 100 clips of one place (run A 500 km closer there):
    as 400 independent clips the difference is certain; as 301 clusters it is one place's."""
    n, big = 400, 100
    rng = np.random.default_rng(4)
    b = rng.exponential(3000, n)
    a = b.copy()
    a[:big] -= 500.0
    labels = np.concatenate([np.zeros(big, int), np.arange(1, n - big + 1)])
    clip = paired_test(a, b, n_boot=2000, n_perm=2000, seed=0)
    cluster = paired_test(a, b, n_boot=2000, n_perm=2000, seed=0, clusters=labels)
    assert clip.ci_hi < 0 and clip.p_value < 0.01  # significant under `clip`
    assert cluster.ci_lo <= 0 <= cluster.ci_hi and cluster.p_value > 0.05  # not under clusters
    assert (clip.diff, cluster.diff) == (-125.0, -125.0) and cluster.n_clusters == n - big + 1


def test_min_support_counts_clusters():
    d = np.arange(30, dtype=float)
    r = paired_test(d, 0 * d, min_n=10, clusters=np.repeat(np.arange(3), 10))
    assert math.isnan(r.diff) and r.note == "insufficient data (n = 3 clusters, needs 10)"


# --- on the authors' published run -----------------------------------------------------------


def test_published_qwen_clip_and_cluster_intervals(qwen_published, agl1k_manifest, capsys):
    """`agl evaluate` on the authors' Qwen2.5-Omni file prints each headline metric with its
    cluster (site:25) and clip intervals; the point estimates stay the paper's row."""
    from agl.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["evaluate", str(qwen_published), "--manifest", str(agl1k_manifest), "--json",
                     "--bootstrap", "400"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert (round(doc["distance_error_km"], 2), round(doc["continent_acc"], 2),
            round(doc["country_acc"], 2), round(doc["city_acc"], 2)) == (5476.83, 0.45, 0.26, 0.02)
    assert doc["resampling_unit"] == "site:25" and doc["n"] == 1442 and doc["n_clusters"] == 441
    for key in ("distance_error_km", "country_acc", "continent_acc"):
        assert doc["design_effect"][key] > 1.2  # clips of a place are not independent
        assert width(doc["ci95"][key]) > width(doc["ci95_clip"][key])
    # Kish's design effect (variance ratio, linearised: no Monte-Carlo noise) and the
    # effective clips of country accuracy: 1,442 clips carry the information of ~94; the
    # width ratio is deft. An independent computation gave 13.5 (bootstrap) to 15.4 (sandwich).
    assert round(doc["design_effect"]["country_acc"], 2) == 15.35
    assert round(doc["n_effective"]["country_acc"]) == 94
    assert 3.0 < doc["deft"]["country_acc"] < 4.5 and round(doc["n_effective_clusters"], 1) == 35.8
    top = doc["influential_clusters"]["country_acc"][0]  # Taipei: 164 clips, 88% of the variance
    assert top["cluster"].startswith("Taipei") and top["clips"] == 164 and round(top["share"], 2) == 0.88
    assert round(doc["geoscore"], 1) == 1317.5  # the paper's 5000 exp(-d / 1492)
    assert doc["by_speech"]["non_speech"]["median_refused"] and not doc["median_refused"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["evaluate", str(qwen_published), "--manifest", str(agl1k_manifest),
                     "--bootstrap", "400", "--unit", "clip"]) == 0
    table = capsys.readouterr().out
    assert "95% CI (clip)" in table and "deff" not in table
    assert "median distance error (km)" in table
    assert main(["evaluate", str(qwen_published), "--manifest", str(agl1k_manifest), "--unit", "town"]) != 0
    assert "unknown unit of resampling 'town'" in capsys.readouterr().err


def test_metrics_json_mlflow_and_leaderboard_carry_both_intervals(qwen_published, agl1k_manifest, tmp_path):
    """metrics.json (per protocol and speech split), the MLflow metrics and the leaderboard
    carry the unit's interval, the clip one, the design effect and the clusters."""
    from agl.scoring import leaderboard
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run
    from agl.scoring.evaluate_mlflow import run_metrics

    config = EvaluateConfig(protocols=("paper",), metric_bootstrap=200, track=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc = evaluate_run("qwen", qwen_published, agl1k_manifest, tmp_path / "qwen", config)
    paper = doc["protocols"]["paper"]
    assert paper["resampling_unit"] == "site:25" and paper["n_clusters"] == 441
    assert paper["by_speech"]["speech"]["n_clusters"] < paper["by_speech"]["speech"]["n"]
    assert set(paper["design_effect"]) >= {"distance_error_km", "country_acc"}
    metrics = run_metrics(doc, {})
    assert metrics["paper.design_effect.country_acc"] == paper["design_effect"]["country_acc"] > 1
    assert metrics["paper.n_effective.country_acc"] == paper["n_effective"]["country_acc"] < 100
    assert metrics["paper.deft.country_acc"] == paper["deft"]["country_acc"]
    assert not any("influential" in k for k in metrics)
    # the report names the cluster carrying most of a metric's variance, from metrics.json
    import pandas as pd

    from agl.report.inputs import RunInput
    from agl.report.page import influence_lines

    qwen = RunInput("qwen", pd.DataFrame(), info={"metrics": str(tmp_path / "qwen" / "metrics.json")})
    lines = influence_lines([qwen], "paper")
    assert any(x.startswith("qwen, country_acc: Taipei") and "88% of the variance" in x for x in lines), lines
    assert metrics["paper.ci95_clip_lo.country_acc"] == paper["ci95_clip"]["country_acc"][0]
    board = leaderboard.collect([tmp_path / "qwen" / "metrics.json"], "paper")
    head, rows = leaderboard.render_rows(board)
    assert rows[0][head.index("clusters")] == "441 (site:25)"
    assert rows[0][head.index("design effect (km, country)")].count(",") == 1
    with pytest.raises(AglError, match="evaluate.resampling_unit: unknown unit"):
        EvaluateConfig(resampling_unit="town")


def test_report_groups_and_effects_count_clusters():
    """A breakdown row of 40 clips from 4 places: its intervals resample places and its
    estimates are withheld below min support counted in clusters; the counterfactual
    effects carry n_clusters and flip a place's signs together."""
    from agl.counterfactual.effects import paired_effects
    from agl.report.analysis import group_row
    from agl.report.tables import breakdown_table

    rng = np.random.default_rng(3)
    n = 40
    place = np.repeat(np.arange(4), 10)
    frame = scored_table({"distance_km": rng.exponential(2000, n) + 3000 * place,
                          "country_correct": (place % 2).astype(float)},
                         lat=10.0 * place, lon=np.zeros(n))
    frame = frame.assign(sample_id=[f"k{i}" for i in range(n)], has_speech=False,
                         true_continent="Europe", cluster=place)
    row = group_row(frame, bootstrap=300, seed=0)
    plain = group_row(frame.drop(columns="cluster"), bootstrap=300, seed=0)
    assert row["n_clusters"] == 4 and "n_clusters" not in plain
    assert row["mean_km"] == plain["mean_km"]  # the point estimate never moves
    assert (row["country_acc_hi"] - row["country_acc_lo"]) > 2 * (plain["country_acc_hi"] - plain["country_acc_lo"])
    page = breakdown_table(pd.DataFrame([{"breakdown": "all", "group": "all", **row}]), "t", min_n=5)
    assert "<th>clusters</th>" in page and "insufficient data (n = 4 clusters, needs 5)" in page
    perturbed = frame.assign(distance_km=frame["distance_km"] + 100 * (place == 0))
    effects = paired_effects(frame, perturbed, n_boot=200, n_perm=200, unit="site:25")
    km = effects[(effects["group"] == "all") & (effects["metric"] == "distance_km")].iloc[0]
    assert (km["n"], km["n_clusters"], km["diff"]) == (40, 4, 25.0)
    assert km["p_value"] > 0.05  # one place of four moved: not evidence of an effect


def test_a_site_of_one_clip_is_not_named_an_influential_cluster():
    """The demo's 32 sites of one clip each named '... (1 clips)': one outlying answer is no
    cluster of clips moving together. Two clips of one place far from the rest are named; a
    lone clip further out still is not, though its share counts in everyone's."""
    from agl.scoring.metrics import influential

    km = np.array([100.0] * 10 + [9000.0, 9000.0] + [20000.0])
    scored = pd.DataFrame({"true_city": [f"c{i}" for i in range(10)] + ["Oslo", "Oslo", "Lima"],
                           "true_country": ["X"] * 10 + ["Norway", "Norway", "Peru"]})
    clusters = np.array([*range(10), 10, 10, 11])
    columns = {k: (km, "mean") for k in ("distance_error_km", "country_acc", "continent_acc", "city_acc",
                                        "geoscore")}
    found = influential(scored, columns, clusters, 0.2)["distance_error_km"]
    assert [(c["cluster"], c["clips"]) for c in found] == [("Oslo, Norway", 2)]
    shares = {c["cluster"]: c["share"] for c in found}
    assert 0.2 < shares["Oslo, Norway"] < 0.5  # Lima's lone clip holds the most, unnamed


def test_site_pairs_and_components_are_scipys():
    """`site:<km>` links points without scipy up to clusters.PAIRS_MAX: the same pairs as
    cKDTree.query_pairs and the same partition as connected_components, on points in tight
    groups and chains (where single linkage joins through neighbours), and on the tree's path."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(7)
    centres = rng.uniform([-60, -180], [70, 180], size=(40, 2))
    pts = np.vstack([c + rng.normal(0, 0.15, size=(rng.integers(1, 30), 2)) for c in centres])
    pts = np.vstack([pts, np.column_stack([np.linspace(10, 12, 60), np.full(60, 20.0)])])  # a chain
    phi, lam = np.radians(pts[:, 0]), np.radians(pts[:, 1])
    xyz = np.column_stack([np.cos(phi) * np.cos(lam), np.cos(phi) * np.sin(lam), np.sin(phi)])
    for km in (1.0, 25.0, 300.0):
        r = 2.0 * np.sin(km / clusters.EARTH_RADIUS_KM / 2.0) * (1 - 1e-12)
        ours = clusters._close_pairs(xyz, r)
        tree = cKDTree(xyz).query_pairs(r, output_type="ndarray")
        assert sorted(map(tuple, ours.tolist())) == sorted(map(tuple, tree.tolist()))
        m = len(xyz)
        graph = coo_matrix((np.ones(len(tree)), (tree[:, 0], tree[:, 1])), shape=(m, m))
        _, theirs = connected_components(graph, directed=False)
        assert np.array_equal(clusters._renumber(clusters._components(m, ours)), clusters._renumber(theirs))
    frame = pd.DataFrame({"true_lat": pts[:, 0], "true_lon": pts[:, 1]})
    scan = clusters.cluster_labels(frame, "site:25")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(clusters, "PAIRS_MAX", 0)  # the KD-tree's path
        assert np.array_equal(clusters.cluster_labels(frame, "site:25"), scan)
    assert 40 <= scan.max() + 1 < len(frame)  # groups joined, chain one cluster
