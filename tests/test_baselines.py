"""The offline baselines: random (paper's), random-sphere, prior, knn, replay."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pandas as pd
import pytest

from agl.backends import get_backend
from agl.contracts.calls import Request
from agl.contracts.models import ModelSpec
from agl.core import canonical
from agl.dataset.manifest import clips, load_manifest, write_manifest
from agl.inference.model_run import run_inference
from agl.inference.runner import RunOptions
from agl.predictions.records import Status, read_predictions
from agl.prompts import load_prompt

CATS = ("human_sounds", "animal", "music", "natural_sounds", "channel",
        "environment_and_background", "sounds_of_things", "source_ambiguous_sounds")


def ask(backend, sample_ids):
    async def go():
        return [await backend.generate(Request(s, "p")) for s in sample_ids]
    return [json.loads(r.text) for r in asyncio.run(go())]


@pytest.fixture(scope="module")
def agl1k_clips(agl1k_manifest):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return clips(load_manifest(agl1k_manifest))


def test_random_is_the_papers_uniform_box_and_seeded(agl1k_clips):
    ids = [c.key for c in agl1k_clips]
    a = ask(get_backend("random")("", seed=0), ids)
    b = ask(get_backend("random")("", seed=0), list(reversed(ids)))[::-1]
    c = ask(get_backend("random")("", seed=1), ids)
    assert a == b  # per-clip seeding: order does not matter
    assert a != c
    lat = np.array([x["latitude"] for x in a])
    lon = np.array([x["longitude"] for x in a])
    assert lat.min() >= -90 and lat.max() <= 90 and lon.min() >= -180 and lon.max() <= 180
    # Uniform in latitude: a quarter of the draws above 45 N (on the sphere it would be 15%).
    assert abs((lat > 45).mean() - 0.25) < 0.04
    assert set(a[0]) == {"latitude", "longitude", "reasoning"}  # no place names: partial


def test_random_sphere_is_uniform_on_area(agl1k_clips):
    draws = ask(get_backend("random-sphere")("", seed=0), [c.key for c in agl1k_clips] * 3)
    lat = np.array([x["latitude"] for x in draws])
    frac = (lat > 45).mean()
    assert abs(frac - (1 - math.sin(math.radians(45))) / 2) < 0.03  # 14.6% of the sphere


def test_prior_is_most_frequent_country_centroid(agl1k_clips):
    b = get_backend("prior")("")
    b.prepare(agl1k_clips, None)
    (ans,) = ask(b, ["anything"])
    from collections import Counter

    top, n = Counter(c.country for c in agl1k_clips).most_common(1)[0]
    assert ans["country"] == top and str(n) in ans["reasoning"]
    mine = [c for c in agl1k_clips if c.country == top]
    assert abs(ans["latitude"] - np.mean([c.latitude for c in mine])) < 2
    assert ans["continent"] == Counter(c.continent for c in mine).most_common(1)[0][0]


def test_prior_centroid_respects_the_antimeridian():
    from agl.backends.baselines import spherical_centroid

    lat, lon = spherical_centroid([(0, 179), (0, -179)])
    assert abs(lat) < 1e-9 and abs(abs(lon) - 180) < 1e-9


def synth_places(tmp_path):
    """Two places with different soundscapes (low hum vs bright hiss), three clips each."""
    import soundfile as sf

    rng = np.random.default_rng(0)
    rows = []
    for place, (city, country, lat, lon) in enumerate(
            [("Oslo", "Norway", 59.9, 10.7), ("Lima", "Peru", -12.0, -77.0)]):
        for i in range(3):
            key = f"p{place}_{i}"
            t = np.arange(16000 * 2) / 16000
            if place == 0:
                x = 0.5 * np.sin(2 * np.pi * (90 + 5 * i) * t) + 0.01 * rng.standard_normal(t.size)
            else:
                x = 0.3 * np.diff(rng.standard_normal(t.size + 1))  # high-pass noise
            (tmp_path / "audio" / key).mkdir(parents=True)
            sf.write(tmp_path / "audio" / key / "x.wav", x.astype(np.float32), 16000)
            rows.append({"key": key, "mp3name": "x.wav", "latitude": lat + i, "longitude": lon,
                         "mp3seconds": 2.0, "city": city, "country": country,
                         "continent": "Europe" if place == 0 else "South America",
                         **{c: 0.0 for c in CATS}})
    write_manifest(pd.DataFrame(rows), tmp_path / "m.csv")
    return clips(load_manifest(tmp_path / "m.csv"))


def test_knn_leave_one_out_finds_same_place(tmp_path):
    cl = synth_places(tmp_path)
    run_inference(ModelSpec("run", "knn", "logmel", settings={"k": 1, "leave_out": "clip"}), load_prompt(), cl,
                  out_dir=tmp_path / "run", audio_root=tmp_path / "audio",
                  options=RunOptions(progress=False))
    preds = read_predictions(tmp_path / "run" / "predictions.jsonl")
    for c in cl:
        p = preds[c.key]
        assert p.status is Status.OK and p.country == c.country  # its soundscape's place
        assert (p.latitude, p.longitude) != (c.latitude, c.longitude)  # never itself
        assert c.key not in p.reasoning


@pytest.mark.parametrize("unit", ["city", "site:200"])
def test_knn_leave_cluster_out_cannot_peek_at_its_place(tmp_path, unit):
    """Leave-one-out lets a clip's neighbour be another recording of its place (the Oslo
    clips 111 km apart sound alike); leaving out the query's cluster (the same units as the
    intervals) takes that away: every answer then comes from the other place."""
    cl = synth_places(tmp_path)
    run_inference(ModelSpec("run", "knn", "logmel", settings={"k": 1, "leave_out": unit}), load_prompt(), cl,
                  out_dir=tmp_path / "run", audio_root=tmp_path / "audio",
                  options=RunOptions(progress=False))
    preds = read_predictions(tmp_path / "run" / "predictions.jsonl")
    assert all(preds[c.key].status is Status.OK and preds[c.key].country != c.country for c in cl)


def test_knn_without_a_clip_outside_the_cluster_fails_the_clip(tmp_path):
    from agl.errors import AglError

    cl = synth_places(tmp_path)
    b = get_backend("knn")("logmel", leave_out="site:20000")  # the whole Earth: one cluster
    b.prepare(cl, tmp_path / "audio")
    reply = asyncio.run(b.generate(Request(sample_id=cl[0].key, prompt="")))
    assert reply.status.value == "failed" and "no clip outside its site:20000 cluster" in reply.error
    with pytest.raises(AglError, match="knn settings.leave_out: unknown unit"):
        get_backend("knn")("logmel", leave_out="street")


def test_knn_needs_every_clips_audio(tmp_path):
    from agl.errors import AglError

    cl = synth_places(tmp_path)
    (tmp_path / "audio" / "p1_2" / "x.wav").unlink()
    with pytest.raises(AglError, match="missing"):
        get_backend("knn")("logmel").prepare(cl, tmp_path / "audio")


def test_replay_serves_published_predictions(tmp_path, qwen_published, agl1k_clips):
    from agl.predictions.importer import import_published

    out = tmp_path / "run"
    spec = ModelSpec("run", "replay", "qwen25-omni", settings={"source": str(qwen_published)})
    summary = run_inference(spec, load_prompt(), agl1k_clips, out_dir=out, audio_root=None,
                            options=RunOptions(progress=False))
    preds = read_predictions(out / "predictions.jsonl")
    published = {p.sample_id: p for p in import_published(qwen_published)}
    assert len(preds) == 1444 and summary["n_failed"] == 1444 - len(published)
    for sid, p in published.items():
        got = preds[sid]
        # Coordinates are written at the stated precision (agl.core.canonical, degrees: 6
        # decimals); the authors' verbatim fields (`original`) stay exact.
        lat = None if p.latitude is None else canonical.round_value(p.latitude, "degrees")
        assert (got.status, got.latitude, got.country, got.original) == (
            p.status, lat, p.country, p.original)
        assert got.meta["backend"] == "replay"
    missing = [p for p in preds.values() if p.status is Status.FAILED]
    assert all("no row for this clip" in p.error for p in missing)


def test_random_baseline_draws_differ_per_clip_even_through_the_cache(tmp_path):
    """Audio-less requests of different clips must not share a cache entry."""
    from agl.contracts.calls import Request
    from agl.inference.cache import cache_key

    a = cache_key("random", "uniform-latlon", {"seed": 0}, Request("clip_a", "p"))
    b = cache_key("random", "uniform-latlon", {"seed": 0}, Request("clip_b", "p"))
    assert a != b
    same_audio = [cache_key("gemini", "m", {}, Request(s, "p", audio_path=tmp_path / "x.mp3",
                                                       audio_sha256="ab" * 32)) for s in ("a", "b")]
    assert same_audio[0] == same_audio[1]  # audio calls stay content-addressed


@pytest.mark.parametrize("k", [1e12, 10**6])
def test_knn_k_past_the_other_clips_is_refused(tmp_path, k):
    """`k: 1e12` was cut to every other clip without a word (issue 49)."""
    from agl.errors import AglError

    cl = synth_places(tmp_path)
    with pytest.raises(AglError, match=rf"knn setting k: .* neighbours, but each clip has at most {len(cl) - 1}"):
        get_backend("knn")("logmel", k=k).prepare(cl, tmp_path / "audio")
