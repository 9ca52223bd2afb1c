"""`agl power` (agl.scoring.power): the sample size it gives reaches the power it claims."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from agl.scoring.power import power_analysis


def draw(rng, groups: int, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Paired differences A - B of clips in clusters of a place: a planted difference, a
    shared effect per place (a model knows a place or not) and each clip's own noise."""
    sizes = rng.geometric(1 / 3.3, groups)  # AGL1K's 1,444 clips in 441 site:25 clusters
    labels = np.repeat(np.arange(groups), sizes)
    d = delta + rng.normal(0, 600, groups)[labels] + rng.normal(0, 1500, labels.size)
    return d, labels


def rejects(d: np.ndarray, labels: np.ndarray) -> bool:
    """The two-sided cluster-robust z test at 5% (what the power is computed for)."""
    groups = int(labels.max()) + 1
    mean = d.mean()
    resid = np.bincount(labels, weights=d - mean, minlength=groups)
    se = math.sqrt(groups / (groups - 1) * (resid ** 2).sum()) / d.size
    return abs(mean) / se > 1.959964


def test_the_sample_size_reaches_eighty_percent_power_in_simulation():
    """Two synthetic runs differing by a planted 400 km on 600 places: `power_analysis` says
    how many places detect 100 km with 80% power; 1,000 simulated comparisons of that many
    places from the same process detect it 75-85% of the time (Monte-Carlo sd 1.3 points;
    the pilot's standard error is itself an estimate, off by ~3%, moving the power ~2 points)."""
    rng = np.random.default_rng(31)
    pilot, labels = draw(rng, 600, 400.0)
    got = power_analysis(pilot, labels, target=100.0, metric="distance_km", n_boot=4000, seed=1)
    assert got.n_clusters == 600 and got.power_now < 0.8 < 1
    assert got.clusters_needed > 600  # 100 km is below what 600 places detect
    hits = sum(rejects(*draw(rng, got.clusters_needed, 100.0)) for _ in range(1000))
    assert abs(hits / 1000 - 0.80) <= 0.05, (hits, got)
    # the inverse: the smallest detectable difference on the pilot needs the pilot's size
    again = power_analysis(pilot, labels, target=got.detectable, n_boot=4000, seed=1)
    assert again.clusters_needed == 600 and again.power_now == pytest.approx(0.8, abs=1e-6)


def test_clusters_need_more_clips_than_independent_clips():
    rng = np.random.default_rng(5)
    d, labels = draw(rng, 300, 0.0)
    clustered = power_analysis(d, labels, target=200.0, seed=0)
    independent = power_analysis(d, np.arange(d.size), target=200.0, seed=0)
    assert clustered.detectable > independent.detectable
    assert clustered.clips_needed > independent.clips_needed


def test_agl_power_on_the_published_runs(qwen_published, agl1k_manifest, shared, capsys):
    from agl.cli import main

    gemini = shared("data/agl1k/published/gemini-3-pro-preview/seed_42_ABCD.jsonl")
    args = [str(qwen_published), str(gemini), "--manifest", str(agl1k_manifest), "--bootstrap", "500"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["power", *args, "--km", "500"]) == 0
        text = capsys.readouterr().out
        assert "262 common clips in 137 clusters (site:25" in text and "to detect 500.0 km:" in text
        assert main(["power", *args, "--points", "5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["metric"] == "country_correct" and doc["target"] == 0.05 and doc["clips_needed"] > 263
    assert main(["power", *args, "--km", "0"]) != 0
    assert "non-zero" in capsys.readouterr().err
