"""The causal check of the machinery, end to end with the real OpenAI SDK.

A fake audio-language server on 127.0.0.1 "listens": it decodes the MP3 it receives, runs
silero-vad, and answers the right place only when it hears speech (it knows each clip's place
from its duration, its stand-in for world knowledge); otherwise it always guesses Reykjavik.
Then mask_speech must cost it clearly on speech clips (CI above 0), nothing on non-speech
clips (CI covering 0), and a null intervention nothing at all. The report's section renders
in headless Chromium.
"""

from __future__ import annotations

import base64
import io
import json
import re
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_llm import Answer, FakeServer, openai_completion

from agl.counterfactual import perturb
from agl.counterfactual.effects import Subset, derive_dataset, paired_effects
from agl.counterfactual.listen import ListenConfig, score_level

SR = 16000
PLACES = [
    ("Nairobi", "Kenya", "Africa", -1.2921, 36.8219),
    ("Tokyo", "Japan", "Asia", 35.6762, 139.6503),
    ("Lima", "Peru", "South America", -12.0464, -77.0428),
    ("Sydney", "Australia", "Oceania", -33.8688, 151.2093),
    ("Toronto", "Canada", "North America", 43.6532, -79.3832),
    ("Berlin", "Germany", "Europe", 52.52, 13.405),
]
GUESS = {"city": "Reykjavik", "country": "Iceland", "continent": "Europe", "latitude": 64.1466, "longitude": -21.9426}


def _clip(i: int, speech: bool) -> np.ndarray:
    from agl.dataset import synth

    rng = np.random.default_rng(100 + i)
    n = int((2.5 + 0.1 * i) * SR)  # every clip its own duration: how the fake knows it
    x = 0.05 * synth.unit_rms(synth.stream(rng, n, SR))
    if speech:
        x[SR // 4 : n - SR // 4] += 0.3 * synth.unit_rms(synth.speech(rng, n - SR // 2, SR))
    else:
        x += 0.1 * synth.unit_rms(synth.birdsong(rng, n, SR))
    return x.astype(np.float32)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, dict[float, dict]]:
    """12 clips (6 with speech) in data/'s layout; the fake's table duration -> place."""
    from factories import manifest

    from agl.counterfactual.encode import encode_mp3
    from agl.dataset.manifest import write_manifest

    root = tmp_path_factory.mktemp("cf") / "data"
    rows, truth = [], {}
    for i in range(12):
        speech = i % 2 == 0
        city, country, continent, lat, lon = PLACES[i // 2]
        x = _clip(i, speech)
        key = f"clip_{i:02d}"
        path = root / "audio" / key / f"{key}.mp3"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_mp3(x[:, None], SR))
        rows.append(
            {
                "key": key,
                "mp3name": f"{key}.mp3",
                "mp3seconds": x.size / SR,
                "city": city,
                "country": country,
                "continent": continent,
                "latitude": lat,
                "longitude": lon,
                "human_sounds": 1.0 if speech else 0.0,
            }
        )
        truth[round(x.size / SR, 1)] = {
            "city": city,
            "country": country,
            "continent": continent,
            "latitude": lat,
            "longitude": lon,
        }
    write_manifest(manifest(rows), root / "manifest.csv")
    return root, truth


def _listener(truth: dict[float, dict]):
    lock = threading.Lock()

    def answer(call) -> Answer:
        import soundfile as sf

        part = next(
            p
            for m in call.body["messages"]
            if isinstance(m["content"], list)
            for p in m["content"]
            if p.get("type") == "input_audio"
        )
        data = base64.b64decode(part["input_audio"]["data"])
        x, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
        with lock:  # one silero model, one clip at a time
            heard = sum(e - s for s, e in perturb.speech_segments(x, sr)) / x.shape[0]
        place = truth.get(round(x.shape[0] / sr, 1)) if heard > 0.2 else None
        reply = {"reasoning": "I hear speech" if place else "no speech", **(place or GUESS)}
        return Answer(200, openai_completion(json.dumps(reply)))

    return answer


def _run(server, data: Path, out: Path) -> None:
    from agl.contracts.models import ModelSpec
    from agl.inference.params_run import RunTarget, run_spec
    from agl.inference.runspec import InferSettings

    spec = ModelSpec(
        name="listener",
        backend="openai",
        model="fake-listener",
        settings={"base_url": server.url + "/v1", "temperature": 0},
        price_in_per_m=2.5,
        price_out_per_m=10.0,
    )
    summary = run_spec(
        spec,
        InferSettings(concurrency=1, cache_dir=None, max_retries=0),
        RunTarget(data / "manifest.csv", data / "audio", out),
        progress=False,
    )
    assert summary["n_ok"] == summary["n"]


@pytest.fixture(scope="module")
def experiment(dataset, tmp_path_factory):
    import os

    os.environ.setdefault("OPENAI_API_KEY", "sk-test-OPENAI-0123456789abcdef")
    root, truth = dataset
    work = tmp_path_factory.mktemp("cf-runs")
    levels = perturb.parse_perturb({"mask": {"kind": "mask_speech", "seed": 3}, "null": {"kind": "none", "seed": 3}})
    for name in levels:
        derive_dataset(root, work / "perturb" / name, levels[name])
    with FakeServer(_listener(truth)) as server:
        _run(server, root, work / "runs" / "original")
        for name in levels:
            _run(server, work / "perturb" / name / "default", work / "runs" / name)
    scores = {"original": score_level(root, work / "runs" / "original", ListenConfig(level_bootstrap=50))}
    effects = {}
    for name in levels:
        score_level(work / "perturb" / name / "default", work / "runs" / name, ListenConfig(level_bootstrap=50))
        effects[name] = paired_effects(
            __import__("pandas").read_csv(work / "runs" / "original" / "scores_paper.csv"),
            __import__("pandas").read_csv(work / "runs" / name / "scores_paper.csv"),
            n_boot=2000,
            n_perm=2000,
            seed=0,
        )
    return work, scores, effects


def _row(effects, group: str, metric: str = "distance_km"):
    t = effects[(effects["group"] == group) & (effects["metric"] == metric)]
    assert len(t) == 1
    return t.iloc[0]


def test_mask_speech_costs_the_listener_only_on_speech_clips(experiment):
    _, scores, effects = experiment
    assert scores["original"]["country_acc"] == 0.5  # it knew exactly the speech clips
    speech = _row(effects["mask"], "speech")
    assert speech["n"] == 6 and speech["ci_lo"] > 0 and speech["p_value"] < 0.05
    acc = _row(effects["mask"], "speech", "country_correct")
    assert acc["diff"] == -1.0 and acc["ci_hi"] < 0
    quiet = _row(effects["mask"], "non_speech")
    assert quiet["n"] == 6 and quiet["ci_lo"] <= 0 <= quiet["ci_hi"]
    for group in ("all", "speech", "non_speech"):
        null = _row(effects["null"], group)
        assert null["ci_lo"] <= 0 <= null["ci_hi"] and null["diff"] == 0
    assert set(effects["mask"]["group"]) >= {"continent=Africa", "continent=Europe"}


def test_derived_dataset_is_complete_and_deterministic(dataset, experiment, tmp_path):
    from agl.core.audio import decode
    from agl.dataset.checksums import file_digest, read_lock, read_source

    root, _ = dataset
    work, _, _ = experiment
    level = work / "perturb" / "mask" / "default"
    lock = read_lock(level / "lock.json")
    assert len(lock) == 12 and all(file_digest(level / "audio" / rel) == e for rel, e in lock.items())
    assert read_source(level / "lock.json")["intervention"]["kind"] == "mask_speech"
    again = tmp_path / "again"
    levels = perturb.parse_perturb({"mask": {"kind": "mask_speech", "seed": 3}})
    derive_dataset(root, again, levels["mask"], subset=Subset(size=4, seed=1))
    sub = read_lock(again / "default" / "lock.json")
    assert len(sub) == 4 and all(lock[rel] == e for rel, e in sub.items())  # same bytes
    for name in ("flac_a", "flac_b"):  # lossless and byte-deterministic too; named .flac
        derive_dataset(root, tmp_path / name, levels["mask"], subset=Subset(size=2, seed=1), fmt="flac")
    flac = read_lock(tmp_path / "flac_a" / "default" / "lock.json")
    assert flac == read_lock(tmp_path / "flac_b" / "default" / "lock.json")
    assert len(flac) == 2 and all(rel.endswith(".flac") for rel in flac)
    assert ".flac" in (tmp_path / "flac_a" / "default" / "manifest.csv").read_text()
    rel = sorted(sub)[0]
    assert np.array_equal(decode(level / "audio" / rel)[0], decode(again / "default" / "audio" / rel)[0])


def test_dry_run_prints_requests_minutes_and_cost(dataset, tmp_path, capsys):
    from agl.cli import main

    root, _ = dataset
    rc = main(
        [
            "infer",
            "--backend",
            "openai",
            "--model",
            "gpt-4o-audio-preview",
            "--manifest",
            str(root / "manifest.csv"),
            "--audio-root",
            str(root / "audio"),
            "--out",
            str(tmp_path / "run"),
            "--price-in",
            "40",
            "--price-out",
            "10",
            "--setting",
            "audio_tokens_per_s=10",
            "--dry-run",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and not (tmp_path / "run").exists()
    minutes = sum(2.5 + 0.1 * i for i in range(12)) / 60
    assert re.search(rf"12 request\(s\), {minutes:.2f} audio minutes", out), out
    assert "estimated $" in out


def test_listen_run_is_linked_in_mlflow(dataset, experiment, tmp_path, monkeypatch):
    from agl.contracts.models import ModelSpec
    from agl.counterfactual.listen import log_listen_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    work, scores, _ = experiment
    spec = ModelSpec(name="listener", backend="openai", model="fake-listener")
    run_id = log_listen_run(
        spec,
        "mask",
        "default",
        work / "perturb" / "mask" / "default",
        work / "runs" / "mask",
        scores["original"],
        {"n": 12},
        ListenConfig(experiment="cf-test"),
    )
    import mlflow

    run = mlflow.tracking.MlflowClient().get_run(run_id)
    from agl.dataset.manifest import content_hash

    root, _ = dataset
    assert run.data.tags["parent_data_version"] == content_hash(root / "manifest.csv")
    assert run.data.tags["intervention"] == "mask"
    assert run.data.tags["intervention_kind"] == "mask_speech"
    assert run.data.params["intervention.fill"] == "background"


def test_report_section_renders(experiment, tmp_path):
    import pandas as pd

    from agl.report.build import build_report
    from agl.report.inputs import ReportInputs, ReportOptions, RunInput

    work, _, effects = experiment
    table = pd.concat(
        [
            e.assign(model="listener", intervention=name, kind=name, level="default", value=np.nan)
            for name, e in effects.items()
        ]
    )
    graded = effects["mask"].assign(model="listener", intervention="mask-graded", kind="noise")
    table = pd.concat([table, graded.assign(level="snr_db_0", value=0.0), graded.assign(level="snr_db_10", value=10.0)])
    table.to_csv(tmp_path / "effects.csv", index=False)
    scored = pd.read_csv(work / "runs" / "original" / "scores_paper.csv")
    for col in ("has_speech", "refused", "failed"):
        scored[col] = scored[col].astype(str).str.lower().eq("true")
    out = tmp_path / "report"
    summary = build_report(
        [RunInput("listener", scored)],
        out,
        options=ReportOptions(group_bootstrap=20, factor_bootstrap=5, maps_for=0),
        inputs=ReportInputs(run_dirs=(), counterfactual_dir=tmp_path),  # the section reads effects.csv
    )
    page = Path(summary["html"]).read_text()
    assert "What the models listen to" in page and "listen-dose-listener" in page
    assert (out / "tables" / "listen_effects.csv").exists()
    from helpers import require_chromium
    from test_report import ARGS, CHROMIUM

    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.route(re.compile(r"^https?://"), lambda route: route.abort())
        page.goto(Path(summary["html"]).resolve().as_uri())
        for sel in ("#listen-section", "#listen-listener", "#listen-dose-listener", "#listen-table"):
            page.locator(sel).scroll_into_view_if_needed()
            assert page.locator(sel).is_visible(), sel
        for img in ("#listen-listener", "#listen-dose-listener"):
            assert page.eval_on_selector(img, "e => e.complete && e.naturalWidth > 300"), img
        assert page.locator("#listen-table tbody tr").count() == 4 * 3 * 3
        page.locator("#listen-section").screenshot(path=str(tmp_path / "listen.png"))
        browser.close()
    assert (tmp_path / "listen.png").stat().st_size > 20_000


def test_groups_below_minimum_support_are_not_estimated(experiment):
    """The same experiment with a minimum support of 7 paired clips: the 6 speech and 6
    non-speech clips keep their n with "insufficient data"; all 12 clips are estimated."""
    work, _, _ = experiment
    effects = paired_effects(
        pd.read_csv(work / "runs" / "original" / "scores_paper.csv"),
        pd.read_csv(work / "runs" / "mask" / "scores_paper.csv"),
        n_boot=500,
        n_perm=500,
        seed=0,
        min_support=7,
    )
    for group in ("speech", "non_speech"):
        row = _row(effects, group)
        assert row["n"] == 6 and row["note"] == "insufficient data (n = 6, needs 7)"
        assert pd.isna(row["diff"]) and pd.isna(row["ci_lo"]) and pd.isna(row["p_value"])
    everything = _row(effects, "all")
    assert everything["n"] == 12 and everything["note"] == "" and everything["diff"] > 0


def test_listen_levels_runs_scores_and_refuses_in_process(experiment, tmp_path):
    """The listen stage's one call, with a stand-in for the model run: every level scored and
    summarised, the run's accounting in the timings; a level where every clip failed refused."""
    import shutil
    from types import SimpleNamespace

    from agl.counterfactual.listen import ListenConfig, listen_levels
    from agl.errors import AglError

    work, _, _ = experiment
    spec = SimpleNamespace(name="listener")
    config = ListenConfig(level_bootstrap=20, track=False)

    def run_model(data, out, failed=0):
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(work / "runs" / "mask" / "predictions.jsonl", out / "predictions.jsonl")
        run = {"n_recorded": 12, "n_failed": failed, "session_requests": 3, "session_cache_hits": 9,
               "cost_usd": 0.0}
        return run, {"requests": 3}

    summary, timings = listen_levels(spec, "mask", work / "perturb" / "mask", tmp_path / "out", config, run_model)
    assert summary["model"] == "listener" and summary["protocol"] == "paper"
    assert list(summary["levels"]) == ["default"] and summary["levels"]["default"]["n"] > 0
    assert timings["levels"]["default"] == {"estimate_before_run": {"requests": 3}, "requests": 3,
                                            "cache_hits": 9, "cost_usd": 0.0}
    assert (tmp_path / "out" / "default" / "scores_paper.csv").is_file()
    with pytest.raises(AglError, match="no clip succeeded"):
        listen_levels(spec, "mask", work / "perturb" / "mask", tmp_path / "again", config,
                      lambda data, out: run_model(data, out, failed=12))
