"""The blind baseline and the cascade on the demo set, through fake servers (real SDKs): what
reaches the model is exactly the prompt (blind), the prompt and the title (blind, inputs:
title), or the perception report (cascade), and never a clip's audio, key or file name."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from fake_llm import Answer, FakeServer, gemini_response, openai_completion

from agl.backends._perception import render
from agl.backends.blind import TITLE_LINE
from agl.contracts.models import ModelSpec
from agl.dataset.manifest import clips, load_manifest
from agl.inference.finalize import read_run
from agl.inference.model_run import run_inference
from agl.inference.runner import Backoff, RunOptions
from agl.predictions.records import Status
from agl.prompts import load_prompt

GOOD = ('{"reasoning": "r", "city": "Lisbon", "country": "Portugal", "continent": "Europe", '
        '"latitude": 38.7, "longitude": -9.1, "confidence": 0.5}')
OPTIONS = RunOptions(cache_dir=None, concurrency=4, timeout_s=10, max_retries=0, progress=False,
                     backoff=Backoff(base_s=0.001, cap_s=0.01))


@pytest.fixture(scope="module")
def demo(demo_data) -> Path:
    return demo_data


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-OPENAI-0123456789abcdef")
    monkeypatch.setenv("GEMINI_API_KEY", "gm-test-GEMINI-0123456789abcdef")


def run(demo: Path, out: Path, spec: ModelSpec, prompt: str = "default"):
    frame = load_manifest(demo / "manifest.csv")
    summary = run_inference(spec, load_prompt(prompt), clips(frame), out_dir=out,
                            audio_root=demo / "audio", options=OPTIONS)
    return frame, read_run(out), summary


def no_clip_identity(call, frame: pd.DataFrame, *, title_ok: bool = False) -> None:
    """No audio part, and none of the clip's key, file name, description (or title) in the body."""
    assert call.audio_sha256 == []
    raw = call.raw.decode()
    assert "input_audio" not in raw and "inlineData" not in raw and "inline_data" not in raw
    for r in frame.itertuples():
        assert r.key not in raw and r.mp3name not in raw and r.description not in raw
        if not title_ok:
            assert r.title not in raw


def test_blind_none_sends_the_prompt_and_no_audio(demo, tmp_path):
    with FakeServer(lambda call: Answer(200, openai_completion(GOOD))) as server:
        spec = ModelSpec("gpt-blind", "blind", "gpt-4o-audio-preview", settings={
            "of": "openai", "inputs": "none", "base_url": server.url + "/v1", "temperature": 0})
        frame, preds, summary = run(demo, tmp_path / "run", spec)
    assert len(server.calls) == len(frame) == 32
    for call in server.calls:
        no_clip_identity(call, frame)
        assert call.prompt == load_prompt().text
        assert "modalities" not in call.body  # a text request, not an audio one
    assert {p.status for p in preds.values()} == {Status.OK}
    p = preds["demo_0001"]
    assert p.meta["backend"] == "blind" and p.meta["inputs"] == "none"
    assert p.meta["model"] == "gpt-4o-audio-preview"


def test_blind_title_sends_only_the_title(demo, tmp_path):
    with FakeServer(lambda call: Answer(200, gemini_response(GOOD))) as server:
        spec = ModelSpec("gemini-title", "blind", "gemini-2.5-flash", settings={
            "of": "gemini", "inputs": "title", "base_url": server.url, "api_version": "v1beta",
            "temperature": 0})
        frame, preds, _ = run(demo, tmp_path / "run", spec)
    titles = dict(zip(frame["key"], frame["title"], strict=True))
    assert len(server.calls) == 32
    sent = sorted(c.prompt for c in server.calls)
    assert sent == sorted(load_prompt().text + TITLE_LINE.format(title=t) for t in titles.values())
    for call in server.calls:
        no_clip_identity(call, frame, title_ok=True)
        # exactly one title, and nothing of the manifest but it
        assert sum(t in call.prompt for t in set(titles.values())) == 1
        for col in ("city", "country", "latitude", "longitude", "short_key"):
            assert f"{col}" not in call.raw.decode().lower() or col in load_prompt().text.lower()
    assert {p.status for p in preds.values()} == {Status.OK}


def test_blind_refuses_bad_settings():
    from agl.backends import get_backend
    from agl.errors import AglError

    blind = get_backend("blind")
    with pytest.raises(AglError, match="set `of`"):
        blind("m", inputs="none")
    with pytest.raises(AglError, match="inputs 'tags' is not one of none, title"):
        blind("m", of="openai", inputs="tags")
    with pytest.raises(AglError, match="does not listen"):
        blind("m", of="knn")


def perception_tables(demo: Path, folder: Path) -> dict[str, dict]:
    """The curation stages' tables for the demo as they write them: speech for every clip
    whose manifest says speech, a blackbird where it says animal; returns what each clip got."""
    from agl.birds.birdnet import BIRD_COLUMNS
    from agl.dataset.manifest import CATEGORY_COLUMNS
    from agl.speech.tables import COLUMNS as SPEECH_COLUMNS

    frame = load_manifest(demo / "manifest.csv")
    folder.mkdir(parents=True)
    speech, windows, birds, dets, tags, truth = [], [], [], [], [], {}
    for i, r in enumerate(frame.itertuples()):
        talk, bird = r.human_sounds > 0.5, r.animal > 0.5
        lang = ("pt", "Portuguese", 0.93) if i % 2 else ("de", "German", 0.88)
        speech.append({**dict.fromkeys(SPEECH_COLUMNS), "key": r.key,
                       "status": "ok" if talk else "no_speech", "speech_heard": talk,
                       "language": lang[0] if talk else "", "language_name": lang[1] if talk else "",
                       "language_probability": lang[2] if talk else None,
                       "seconds": r.mp3seconds, "speech_seconds": 9.5 if talk else 0.0, "error": ""})
        transcript = f"next stop number {i} please mind the gap"
        windows.append({"key": r.key, "status": "ok", "segments": [],
                        "windows": [], **({"transcript": transcript} if talk else {})})
        birds.append({**dict.fromkeys(BIRD_COLUMNS), "key": r.key, "status": "ok",
                      "birds_heard": bird, "species": "Turdus merula" if bird else "",
                      "seconds": r.mp3seconds, "error": ""})
        dets.append({"key": r.key, "status": "ok", "detections": [
            {"scientific": "Turdus merula", "common": "Eurasian Blackbird", "kind": "species",
             "max_confidence": 0.912345, "seconds": 6.0, "windows": 2}] if bird else []})
        tags.append({"key": r.key, "status": "ok", "tagger": "precomputed",
                     **{c: getattr(r, c) for c in CATEGORY_COLUMNS}, "seconds": r.mp3seconds})
        truth[r.key] = {"talk": talk, "bird": bird, "lang": lang[1], "transcript": transcript}
    pd.DataFrame(speech).to_csv(folder / "speech.csv", index=False)
    pd.DataFrame(birds).to_csv(folder / "birds.csv", index=False)
    pd.DataFrame(tags).to_csv(folder / "tags.csv", index=False)
    (folder / "speech_windows.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows))
    (folder / "birds_detections.jsonl").write_text("".join(json.dumps(d) + "\n" for d in dets))
    (folder / "speech_summary.json").write_text(json.dumps({"model": {"name": "pypi-whisper-base"}}))
    return truth


def test_cascade_sends_the_perception_report_and_keeps_it(demo, tmp_path):
    truth = perception_tables(demo, tmp_path / "curation")
    with FakeServer(lambda call: Answer(200, openai_completion(GOOD))) as server:
        spec = ModelSpec("cascade-fake", "cascade", "llama-3-8b", prompt="cascade-v1", settings={
            "text_backend": "openai-compatible", "base_url": server.url + "/v1",
            "perception": str(tmp_path / "curation"), "temperature": 0})
        frame, preds, _ = run(demo, tmp_path / "run", spec, prompt="cascade-v1")
    assert len(server.calls) == 32
    by_prompt = {}
    for call in server.calls:
        no_clip_identity(call, frame)
        assert "{perception}" not in call.prompt and "You cannot hear" in call.prompt
        by_prompt[call.prompt] = call
    for key, t in truth.items():
        p = preds[key]
        assert p.status is Status.OK
        report = p.meta["perception"]
        # the report this clip's record keeps is exactly what one request carried
        text = load_prompt("cascade-v1").text.replace("{perception}", render(report))
        assert text in by_prompt, key
        assert "Sound categories (AudioSet roots" in text
        if t["talk"]:
            assert report["speech"]["language"] == t["lang"]
            assert report["speech"]["transcript"] == t["transcript"]
            assert f"language {t['lang']}" in text and t["transcript"] in text
        else:
            assert "language" not in report["speech"]
        if t["bird"]:
            assert report["birds"]["heard"][0] == {"name": "Eurasian Blackbird (Turdus merula)",
                                                   "kind": "species", "confidence": 0.912345}
            assert "Eurasian Blackbird (Turdus merula) 0.91" in text
        assert report["categories"]["scores"]["human_sounds"] == round(
            float(frame.set_index("key").at[key, "human_sounds"]), 2)


def test_cascade_missing_tables_and_prompt_without_slot_are_one_line(demo, tmp_path):
    from agl.errors import AglError

    spec = ModelSpec("c", "cascade", "gpt-4.1", prompt="cascade-v1", settings={
        "text_backend": "openai", "perception": str(tmp_path / "nowhere")})
    with pytest.raises(AglError, match="speech.csv is missing"):
        run(demo, tmp_path / "run", spec, prompt="cascade-v1")
    perception_tables(demo, tmp_path / "curation")
    spec = ModelSpec("c", "cascade", "gpt-4.1", settings={
        "text_backend": "openai", "perception": str(tmp_path / "curation")})
    with pytest.raises(AglError, match=r"no \{perception\} slot"):
        run(demo, tmp_path / "run2", spec)


def test_leaderboard_marks_runs_that_heard_nothing(tmp_path):
    from agl.scoring import leaderboard

    files = []
    for run, backend, km in (("gpt", "openai", 3000.0), ("gpt-blind", "blind", 6000.0),
                             ("gpt-cascade", "cascade", 4000.0)):
        res = {"n": 10, "distance_error_km": km, "country_acc": 0.3,
               "ci95": {"distance_error_km": [km - 100, km + 100], "country_acc": [0.2, 0.4]}}
        path = tmp_path / run / "metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"run": run, "model": "m", "backend": backend,
                                    "protocols": {"paper": res}}))
        files.append(path)
    board = leaderboard.collect(files, "paper")
    _, rows = leaderboard.render_rows(board)
    assert [r[1] for r in rows] == ["gpt", "gpt-cascade ≡", "gpt-blind ∅"]
    notes = leaderboard.table_notes(board)
    assert any(n.startswith('A run marked "∅" heard nothing') and n.endswith(": gpt-blind.") for n in notes)
    assert any(n.startswith('A run marked "≡"') and "gpt-cascade" in n for n in notes)


def test_roster_baselines_are_priced_entries_whose_dry_run_sends_no_audio(demo):
    from agl.inference.estimate import estimate_run
    from agl.inference.roster import load_baselines
    from agl.inference.runspec import InferSettings

    entries = {r.spec.name: r for r in load_baselines()}
    cascades = [r for r in entries.values() if r.spec.backend == "cascade"]
    assert len(cascades) == 2 and {r.spec.settings["text_backend"] for r in cascades} == {"openai", "gemini"}
    assert {r.spec.settings["inputs"] for r in entries.values() if r.spec.backend == "blind"} == {"none", "title"}
    for r in entries.values():
        assert r.spec.price_in_per_m > 0 and r.spec.price_out_per_m > 0 and r.key
        assert r.spec.paper_name is None
    est = estimate_run(entries["cascade-gpt-41"].spec, InferSettings(), manifest=demo / "manifest.csv",
                       audio_root=demo / "audio", out_dir=demo / "no-run", fetch=False)
    assert est.requests == 32 and est.audio_minutes == 0 and est.cost_usd > 0
    assert est.output_tokens == 32 * 300


def test_a_shard_reads_the_report_the_driver_composed(demo, tmp_path, monkeypatch):
    """On Ray a shard builds its own cascade (agl.inference.shards.build_backend) and is
    handed requests composed by the driver: prepared with the manifest's clips, in the
    driver's folder (the shard works there), it keeps the same report bytes, the manifest's
    duration included where no table has the clip's seconds."""
    import asyncio

    from agl.backends import get_backend
    from agl.contracts.calls import Request

    perception_tables(demo, tmp_path / "curation")
    speech = pd.read_csv(tmp_path / "curation" / "speech.csv")
    speech.drop(columns="seconds").to_csv(tmp_path / "curation" / "speech.csv", index=False)
    tags = pd.read_csv(tmp_path / "curation" / "tags.csv")
    tags.drop(columns="seconds").to_csv(tmp_path / "curation" / "tags.csv", index=False)
    monkeypatch.chdir(tmp_path)
    cl = clips(load_manifest(demo / "manifest.csv"))[:2]
    with FakeServer(lambda call: Answer(200, openai_completion(GOOD))) as server:
        settings = {"text_backend": "openai-compatible", "base_url": server.url + "/v1",
                    "perception": "curation", "temperature": 0}
        driver, shard = (get_backend("cascade")("m", **settings) for _ in range(2))
        for b in (driver, shard):
            b.prepare(cl, demo / "audio")
        prompt = load_prompt("cascade-v1").text

        async def both(clip):
            composed = driver.compose(Request(sample_id=clip.key, prompt=prompt), clip)
            return [(await b.generate(composed)).extra["perception"] for b in (driver, shard)]

        async def ask():
            try:
                return [await both(clip) for clip in cl]
            finally:
                for b in (driver, shard):
                    await b.aclose()

        for clip, (here, there) in zip(cl, asyncio.run(ask()), strict=True):
            assert there == here and here["duration_s"] == round(clip.seconds, 1)


def test_listen_refuses_a_cascade_before_any_work(tmp_path, monkeypatch):
    """An intervention changes the audio; the cascade reads the curation tables made from the
    original clips (derived clips keep their keys), so in listen@ it would be told what was
    in the clip before the intervention. The stage refuses it in one line, before it reads a
    level or writes anything; a model that hears the audio (knn) passes the same check."""
    import sys

    from agl.errors import AglError
    from agl.inference.runspec import check_listens

    check_listens(ModelSpec("knn", "knn", "logmel-stats"), "mask_speech")  # hears the audio: passes
    stages = Path(__file__).resolve().parents[1] / "stages"
    monkeypatch.syspath_prepend(str(stages))
    import _params

    (tmp_path / "params.yaml").write_text(
        "models:\n  cascade-gpt:\n    backend: cascade\n    model: gpt-4.1\n    prompt: cascade-v1\n"
        "    settings:\n      text_backend: openai\ninfer: {}\ncounterfactual:\n  level_bootstrap: 10\n")
    monkeypatch.setattr(_params, "ROOT", tmp_path)
    monkeypatch.delitem(sys.modules, "listen", raising=False)
    import listen as stage

    out = tmp_path / "listen" / "cascade-gpt" / "mask_speech"
    with pytest.raises(AglError) as err:
        stage.main(["cascade-gpt", "mask_speech", str(tmp_path / "perturb" / "mask_speech"), str(out),
                    str(tmp_path / "listen" / "cascade-gpt" / "mask_speech.json")])
    line = str(err.value)
    assert "\n" not in line and "'cascade-gpt' (backend cascade) cannot listen to 'mask_speech'" in line
    assert "original clips" in line and "remove 'cascade-gpt' from counterfactual.models" in line
    assert not (tmp_path / "listen").exists()
