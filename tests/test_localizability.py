"""Localizability: the regression recovers known weights, selection honours θ/size/balance,
judges (lexical and backends through agl.inference.runner, cached) and their agreement, the stage."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import subprocess_env

from agl.backends.base import Backend, register
from agl.contracts.calls import Reply, ReplyStatus
from agl.curation.localizability import run_localizability
from agl.curation.localizability_judges import (
    JUDGE_PROMPT,
    LexicalJudge,
    krippendorff_alpha_interval,
    parse_ratings,
    render_judge_prompt,
    run_judges,
)
from agl.curation.localizability_params import LocalizabilityConfig
from agl.curation.localizability_weights import fit_localizability, localizability, select, targets
from agl.dataset.manifest import CATEGORY_COLUMNS
from agl.errors import AglError
from agl.predictions.records import Prediction, Status

REPO = Path(__file__).resolve().parents[1]
GAMMA, CAP = 2500.0, 20003.93
# Known weights: what a good clip's closeness and a bad clip's badness are made of.
A = np.array([0.30, 0.00, 0.15, 0.20, 0.00, 0.05, 0.10, 0.00])
A_BAR = np.array([0.00, 0.25, 0.00, 0.05, 0.40, 0.10, 0.00, 0.15])
TOLERANCE = 0.02  # absolute, on every weight, with 400 clips per side and noise sd 0.01


def synthetic_clips(n_per_side: int, seed: int = 0):
    """x in [0.05, 1]^8; good clips' y = x·A (+noise), bad clips' y = x·Ā, mapped to errors
    by inverting `targets`: e = γ(1 - y) below γ, e = γ + y(cap - γ) above."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.05, 1.0, size=(2 * n_per_side, 8))
    noise = rng.normal(0, 0.01, size=2 * n_per_side)
    y_good = np.clip(x[:n_per_side] @ A + noise[:n_per_side], 1e-3, 0.999)
    y_bad = np.clip(x[n_per_side:] @ A_BAR + noise[n_per_side:], 1e-3, 1.0)
    errors = np.concatenate([GAMMA * (1 - y_good), GAMMA + y_bad * (CAP - GAMMA)])
    return x, errors


def test_targets_invert_the_synthetic_mapping():
    good, y = targets(np.array([0.0, 1250.0, 2500.0, CAP, 30000.0]), GAMMA, CAP)
    assert list(good) == [True, True, False, False, False]
    assert y == pytest.approx([1.0, 0.5, 0.0, 1.0, 1.0])


def test_regression_recovers_known_weights():
    x, errors = synthetic_clips(400)
    w = fit_localizability(x, errors, LocalizabilityConfig(gamma_km=GAMMA))
    assert (w.n_good, w.n_bad) == (400, 400)
    assert np.abs(w.a - A).max() < TOLERANCE, w.a
    assert np.abs(w.a_bar - A_BAR).max() < TOLERANCE, w.a_bar
    # P: a > ā; N: ā > a (human_sounds, music, natural, things in P here).
    assert w.sets == ["P", "N", "P", "P", "N", "N", "P", "N"]
    l_k = localizability(np.eye(8), w)
    assert l_k == pytest.approx(np.where(w.a > w.a_bar, w.a, -w.a_bar))


def test_too_few_clips_on_a_side_is_an_error():
    x, errors = synthetic_clips(2)
    with pytest.raises(AglError, match="each side needs at least 3"):
        fit_localizability(x, errors, LocalizabilityConfig(gamma_km=GAMMA))


def test_selection_honours_theta_size_and_speech_balance():
    keys = [f"c{i}" for i in range(12)]
    l_k = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, -0.1, -0.2, 0.05])
    speech = np.array([1, 1, 1, 0, 0, 1, 0, 0, 1, 1, 0, 0], dtype=bool)
    chosen, info = select(keys, l_k, speech, theta=0.15, target_size=4, speech_share=0.5)
    assert chosen == ["c0", "c1", "c3", "c4"]  # best two of each side, best first
    assert info["highly_localizable"] == 8  # l_k > 0.15
    lk = dict(zip(keys, l_k, strict=True))
    assert all(lk[k] > 0.15 for k in chosen)
    # θ excludes: with θ = 0.55 only c0..c3 qualify -> one no-speech clip (c3) exists.
    chosen, info = select(keys, l_k, speech, theta=0.55, target_size=4, speech_share=0.5)
    assert chosen == ["c0", "c1", "c3"]  # never topped up with a third speech clip
    assert info["shortfall_no_speech"] == 1 and info["selected"] == 3
    # No target: the largest set that keeps the share (θ = 0: 6 speech... 5 no-speech -> 10).
    chosen, info = select(keys, l_k, speech, theta=0.0, target_size=None, speech_share=0.5)
    assert info["target_size"] == 10 and len(chosen) == 10
    assert sum(speech[keys.index(k)] for k in chosen) == 5
    chosen, _ = select(keys, l_k, speech, theta=0.0, target_size=5, speech_share=0.2)
    assert sum(speech[keys.index(k)] for k in chosen) == 1 and len(chosen) == 5


def test_krippendorff_alpha_reference_value():
    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": 4 coders, 12 units,
    # interval alpha = 0.849.
    n = None
    coders = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
        [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n],
    ]
    units = list(zip(*coders, strict=True))
    assert krippendorff_alpha_interval(units) == pytest.approx(0.849, abs=5e-4)
    assert krippendorff_alpha_interval([[1, 1], [3, 3], [2, 2]]) == 1.0
    assert math.isnan(krippendorff_alpha_interval([[1, None], [2]]))


def test_lexical_judge_counts_category_terms():
    judge = LexicalJudge(rating_max=3)
    text = ("The muezzin's call to prayer in Arabic, seagulls overhead and the surf on the "
            "ramparts suggest a Moroccan coastal town; I hear no traffic.")
    r = judge.rate(text)
    assert r["human_sounds"] == 3  # muezzin, call to prayer, prayer*, arabic -> capped at 3
    assert r["animal"] == 1  # seagull* ('gull*' must start a word, so it does not count again)
    assert r["natural_sounds"] == 2  # surf, coast* (coastal)
    assert r["sounds_of_things"] == 1  # traffic (mentioned; the lexical judge cannot negate)
    assert r["music"] == 0 and r["channel"] == 0
    assert judge.rate("")["human_sounds"] == 0


def test_parse_ratings():
    good = {c: 1 for c in CATEGORY_COLUMNS}
    assert parse_ratings("Here: " + json.dumps(good) + " done", 3) == good
    assert parse_ratings(json.dumps({**good, "music": 4}), 3) is None  # off the scale
    assert parse_ratings(json.dumps({**good, "music": 1.5}), 3) is None
    assert parse_ratings(json.dumps({**good, "music": True}), 3) is None
    assert parse_ratings(json.dumps({k: v for k, v in good.items() if k != "animal"}), 3) is None
    assert parse_ratings("no json", 3) is None and parse_ratings(None, 3) is None


def test_judge_prompt_snapshot():
    from agl.prompts import load_prompt

    text = render_judge_prompt(load_prompt(JUDGE_PROMPT).text, "  Birds and bells.  ", 3)
    assert "<<<\nBirds and bells.\n>>>" in text
    assert "- music: Music" in text and "integer from 0 to 3" in text
    assert "{" not in text.replace('{"', "")  # every placeholder filled


CALLS: list[str] = []


@register("test-judge")
class CountingJudge(Backend):
    """A deterministic offline judge backend: rates a category 3 if its column name appears
    in the reasoning, else 0; `settings.bias` shifts one category so judges disagree a bit."""

    deterministic = True
    needs_audio = False
    settings_rules = {"bias": None}  # a backend declares the settings it reads (issue 50)

    async def generate(self, request):
        CALLS.append(request.sample_id)
        reasoning = request.prompt.split("<<<")[1].split(">>>")[0]
        ratings = {c: (3 if c in reasoning else 0) for c in CATEGORY_COLUMNS}
        if self.settings.get("bias"):
            ratings["music"] = min(3, ratings["music"] + 1)
        if "unparseable" in reasoning:
            return Reply(status=ReplyStatus.OK, text="I cannot rate this.")
        return Reply(status=ReplyStatus.OK, text=json.dumps(ratings))


def test_backend_judges_are_cached_and_agreement_reported(tmp_path):
    from agl.curation.localizability_judges import agreement

    cfg = LocalizabilityConfig.from_params({
        "judges": [{"name": "j1", "backend": "test-judge", "model": "m"},
                   {"name": "j2", "backend": "test-judge", "model": "m", "settings": {"bias": 1}},
                   "lexical"],
        "judge_cache": str(tmp_path / "cache"),
    })
    reasoning = {"k1": "animal and music", "k2": "human_sounds only", "k3": "unparseable"}
    CALLS.clear()
    first = run_judges(reasoning, cfg)
    assert sorted(CALLS) == ["k1", "k1", "k2", "k2", "k3", "k3"]
    by = {(r.key, r.judge): r for r in first}
    assert by[("k1", "j1")].ratings["animal"] == 3 and by[("k1", "j1")].ratings["channel"] == 0
    assert by[("k3", "j1")].status == "unparseable" and by[("k3", "j1")].ratings is None
    assert by[("k1", "lexical")].status == "ok"
    CALLS.clear()
    again = run_judges(reasoning, cfg)
    assert [c for c in CALLS if c != "k3"] == []  # valid replies came from the cache
    assert [(r.key, r.judge, r.ratings) for r in again] == [(r.key, r.judge, r.ratings)
                                                           for r in first]
    agree = agreement(first, ["j1", "j2", "lexical"])
    assert agree["judges"] == 3 and agree["units"] == 16  # k1, k2 x 8 categories
    assert 0 < agree["krippendorff_alpha_interval"] < 1
    assert agree["mean_pairwise_spearman"] is not None


def _place(lat: float, lon: float, km: float, azimuth: float) -> tuple[float, float]:
    from pyproj import Geod

    lon2, lat2, _ = Geod(ellps="WGS84").fwd(lon, lat, azimuth, km * 1000.0)
    return float(lat2), float(lon2)


def synthetic_pool(n: int, seed: int = 1, reasoning: bool = True):
    """Clips whose tags t and the reference errors follow A / Ā; reasoning names categories."""
    rng = np.random.default_rng(seed)
    t = (rng.uniform(size=(n, 8)) < 0.5).astype(float)
    t[t.sum(axis=1) == 0, 0] = 1.0
    good = (t @ A) > (t @ A_BAR)
    y = np.where(good, t @ A, t @ A_BAR) + rng.normal(0, 0.01, n)
    y = np.clip(y, 0.01, 0.99)
    errors = np.where(good, GAMMA * (1 - y), GAMMA + y * (CAP - GAMMA))
    keys = [f"k{i:03d}" for i in range(n)]
    lat, lon = rng.uniform(-60, 60, n), rng.uniform(-170, 170, n)
    manifest = pd.DataFrame({"key": keys, "latitude": lat, "longitude": lon})
    tags = pd.DataFrame(t, columns=list(CATEGORY_COLUMNS))
    tags.insert(0, "status", "ok")
    tags.insert(0, "key", keys)
    tags["speech_fraction"] = np.where(t[:, 0] > 0, 0.6, 0.0)
    words = {"human_sounds": "speech", "animal": "birds", "music": "music",
             "natural_sounds": "surf", "channel": "radio", "environment_and_background":
             "reverb", "sounds_of_things": "traffic", "source_ambiguous_sounds": "clicks"}
    preds = {}
    for i, k in enumerate(keys):
        plat, plon = _place(lat[i], lon[i], errors[i], rng.uniform(0, 360))
        text = ("I hear " + ", ".join(words[c] for j, c in enumerate(CATEGORY_COLUMNS)
                                      if t[i, j])) if reasoning else None
        preds[k] = Prediction(sample_id=k, status=Status.OK, latitude=plat, longitude=plon,
                              reasoning=text)
    return manifest, tags, preds, errors


def test_run_localizability_predicts_held_out_error():
    manifest, tags, preds, errors = synthetic_pool(300)
    preds["k000"] = Prediction(sample_id="k000", status=Status.FAILED, error="timeout")
    preds["k001"] = Prediction(sample_id="k001", status=Status.REFUSED, refused=True,
                               reasoning="I cannot tell.")
    cfg = LocalizabilityConfig(gamma_km=GAMMA, features="tags", speech_from="vad",
                               target_size=40, theta=0.0)
    res = run_localizability(manifest, tags, preds, cfg)
    s = res.summary
    assert s["reference"]["failed_calls_left_out"] == 1
    clips = res.clips.set_index("key")
    assert clips.at["k000", "split"] == "unused"
    assert clips.at["k001", "error_km"] == 10000.0  # a refusal scores like the paper's
    assert np.abs(res.weights.a - A).max() < 0.05 and np.abs(res.weights.a_bar - A_BAR).max() < 0.05
    check = s["check_holdout"]
    assert check["n"] == round(299 * 0.3) and check["spearman_rho"] < -0.5
    assert len(res.selected) == 40 and s["selection"]["selected_speech"] == 20
    assert set(res.selected) <= set(clips.index[clips["l_k"] > 0])
    assert (clips.loc[res.selected, "has_speech"]).sum() == 20


def test_judges_features_from_reasoning():
    manifest, tags, preds, _ = synthetic_pool(200)
    cfg = LocalizabilityConfig(gamma_km=GAMMA, features="judges", rating_max=1)
    res = run_localizability(manifest, tags, preds, cfg)
    x = res.clips[[f"x_{c}" for c in CATEGORY_COLUMNS]].to_numpy()
    # The lexical judge reads back exactly the categories the reasoning names.
    assert np.array_equal(x, tags[list(CATEGORY_COLUMNS)].to_numpy())
    assert res.summary["judges"]["clips_rated"] == 200
    assert res.summary["check_holdout"]["spearman_rho"] < -0.5
    # Without reasoning text nothing can be rated, and judges mode cannot fit.
    manifest, tags, preds, _ = synthetic_pool(50, reasoning=False)
    with pytest.raises(AglError, match="0 of 50 reference answers have reasoning"):
        run_localizability(manifest, tags, preds, cfg)
    res = run_localizability(manifest, tags, preds, LocalizabilityConfig(
        gamma_km=GAMMA, features="tags"))
    assert "rated nothing" in res.summary["judges"]["note"]


def test_config_validation():
    cfg = LocalizabilityConfig.from_params(yaml.safe_load((REPO / "params.yaml").read_text())
                                           ["localizability"])
    assert cfg.judges[0].backend == "lexical"
    for bad, key in [({"gama_km": 1}, "unknown"), ({"features": "audio"}, "features"),
                     ({"speech_share": 1.5}, "speech_share"), ({"judges": [{"backend": "x"}]},
                                                                "needs a model")]:
        with pytest.raises(AglError, match=key):
            LocalizabilityConfig.from_params(bad)


@pytest.mark.slow
def test_localize_stage_logs_to_mlflow(tmp_path):
    from agl.dataset.manifest import write_manifest
    from agl.predictions.records import write_predictions

    manifest, tags, preds, _ = synthetic_pool(120)
    full = manifest.assign(mp3name="x.mp3", mp3seconds=30.0, city="c", country="c",
                           continent="Europe", **{c: 0.0 for c in CATEGORY_COLUMNS})
    write_manifest(full, tmp_path / "manifest.csv")
    tags.to_csv(tmp_path / "tags.csv", index=False)
    write_predictions(tmp_path / "predictions.jsonl", preds.values())
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"localizability": {
        "reference": str(tmp_path / "predictions.jsonl"), "features": "judges",
        "judges": ["lexical"], "rating_max": 1, "gamma_km": GAMMA, "target_size": 20}}))
    db = tmp_path / "mlflow.db"
    out = tmp_path / "loc"
    env = subprocess_env(MLFLOW_TRACKING_URI=f"sqlite:///{db}")
    cmd = [sys.executable, str(REPO / "stages" / "localize.py"), "--manifest",
           str(tmp_path / "manifest.csv"), "--tags", str(tmp_path / "tags.csv"), "--reference",
           str(tmp_path / "predictions.jsonl"), "--out-dir", str(out), "--summary",
           str(tmp_path / "summary.json"), "--params", str(params)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    weights = pd.read_csv(out / "weights.csv")
    assert list(weights["category"]) == list(CATEGORY_COLUMNS)
    assert set(weights["set"]) <= {"P", "N", "neutral"}
    summary = json.loads((tmp_path / "summary.json").read_text())
    selected = pd.read_csv(out / "selected.csv")
    assert len(selected) == summary["selection"]["selected"] <= 20
    assert selected["has_speech"].sum() == summary["selection"]["selected_speech"] <= 10
    assert len(pd.read_csv(out / "ratings.csv")) == 120
    assert summary["check_holdout"]["spearman_rho"] < -0.3

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{db}")
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.data.metrics["holdout_spearman_rho"] == pytest.approx(
        summary["check_holdout"]["spearman_rho"])
    assert run.data.params["gamma_km"] == str(GAMMA)
    # Bad input: a missing reference file is one line and exit 2... not a traceback.
    cmd[cmd.index("--reference") + 1] = str(tmp_path / "nope.jsonl")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "reference predictions not found" in proc.stderr


def test_agl1k_published_tags_predict_qwen_error(agl1k_manifest, qwen_published):
    """Real data: weights fitted on AGL1K's published tags and the authors' Qwen2.5-Omni
    errors; l_k ranks the held-out clips' errors (negative rank correlation)."""
    from agl.dataset.manifest import load_manifest
    from agl.predictions.importer import import_published

    with pytest.warns(UserWarning):
        manifest = load_manifest(agl1k_manifest)
    preds = {p.sample_id: p for p in import_published(qwen_published)}
    tags = manifest[["key", *CATEGORY_COLUMNS]].assign(status="ok")
    cfg = LocalizabilityConfig(features="tags", gamma_km=5000.0, speech_from="tags")
    res = run_localizability(manifest, tags, preds, cfg)
    check = res.summary["check_holdout"]
    assert check["n"] == 433 and check["spearman_rho"] < -0.1 and check["p_value"] < 0.01
    assert res.summary["reference"]["with_reasoning"] == 0  # the published file has none
    with pytest.raises(AglError, match="0 of 1442 reference answers have reasoning"):
        run_localizability(manifest, tags, preds, LocalizabilityConfig(features="judges"))
