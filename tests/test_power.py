"""`agl power` (agl.scoring.power): the sample size it gives reaches the power it claims."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from agl.scoring.power import power_analysis, with_manifest


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
    assert doc["method"] == "connor"
    assert doc["clips_needed_manifest"] > doc["clips_needed"]  # AGL1K's clusters are larger
    for flag in (["--km", "0"], ["--km", "1e-300"], ["--points", "1e-300"], ["--alpha", "1e-300"],
                 ["--power", "0.3"]):
        assert main(["power", *args, *flag]) != 0
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (flag, err)
        assert f"agl power {flag[0]}: " in err, (flag, err)


def test_a_run_against_itself_has_no_difference_to_detect(qwen_published, agl1k_manifest, capsys):
    """`agl power A A`: every paired difference is 0; it printed 'power nan%'."""
    from agl.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for flag in ([], ["--points", "5"]):
            assert main(["power", str(qwen_published), str(qwen_published), "--manifest",
                         str(agl1k_manifest), "--bootstrap", "200", *flag]) != 0
            err = capsys.readouterr().err
            assert "no difference exists to detect" in err and "nan" not in err, err


def mcnemar_power(n: int, psi: float, delta: float, runs: int, rng) -> float:
    """Simulated power of the two-sided McNemar z test at 5% on `n` independent pairs whose
    true discordant share is psi and true gap delta."""
    cells = rng.multinomial(n, [(psi + delta) / 2, (psi - delta) / 2, 1 - psi], size=runs)
    b, c = cells[:, 0], cells[:, 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (b - c) / np.sqrt(b + c)
    return float(np.mean(np.abs(np.nan_to_num(z)) > 1.959964))


def test_accuracy_power_holds_in_simulation_when_the_observed_gap_exceeds_the_target():
    """Paired 0/1 data whose observed gap (30 points) is far above the target (5 points): the
    clips `power_analysis` gives detect 5 points in 75-83% of 2,000 simulated comparisons
    (Monte-Carlo sd 0.9 points). The variance at the observed gap (psi - 0.09) gave ~1,290
    clips, which reach ~72%."""
    rng = np.random.default_rng(46)
    n = 600
    pilot = rng.choice([1.0, -1.0, 0.0], size=n, p=[0.40, 0.10, 0.50])
    got = power_analysis(pilot, np.arange(n), target=0.05, metric="country_correct", seed=0)
    psi = float(np.mean(pilot != 0))
    assert got.method == "connor" and got.deff == 1.0 and got.diff > 0.25
    assert got.discordant == pytest.approx(psi) and got.clips_needed == got.clips_needed_independent
    simulated = mcnemar_power(got.clips_needed, psi, 0.05, 2000, rng)
    assert abs(simulated - 0.80) <= 0.03, (simulated, got.clips_needed)
    # the detectable gap at the pilot's size is the target that size was given for
    back = power_analysis(pilot, np.arange(n), target=got.detectable, metric="country_correct")
    assert back.clips_needed == n and back.power_now == pytest.approx(0.8, abs=1e-6)


def test_the_manifest_clusters_size_a_grown_benchmark():
    """Clips needed for clusters of the manifest's sizes: Kish's deff 1 + (m_w - 1) rho with
    rho from the pilot; larger clusters need more clips, single-clip ones the independent count."""
    rng = np.random.default_rng(7)
    d, labels = draw(rng, 300, 200.0)
    base = power_analysis(d, labels, target=150.0)
    small, big = with_manifest(base, labels, np.ones(500, int)), with_manifest(base, labels, np.full(50, 30))
    assert small.manifest_deff == 1.0 and small.clips_needed_manifest == small.clips_needed_independent
    assert 0 < big.icc < 1 and big.manifest_weighted_size == 30
    assert big.manifest_deff == pytest.approx(1 + 29 * big.icc)
    assert big.clips_needed_manifest > big.clips_needed > big.clips_needed_independent
