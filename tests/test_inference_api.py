"""The real google-genai and openai clients against fake servers on 127.0.0.1.

Every scenario of a service's life: a good JSON reply, prose around JSON, a refusal in words
and a structured one, 429 with Retry-After then success, 500s past the retry budget, a
malformed body, a reply slower than the timeout; and the audio each request carries.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_llm import Answer, FakeServer, gemini_response, openai_completion

from agl.backends import get_backend
from agl.contracts.calls import Request
from agl.contracts.models import ModelSpec
from agl.dataset.manifest import clips, write_manifest
from agl.inference.finalize import read_run
from agl.inference.model_run import run_inference
from agl.inference.runner import Backoff, RunOptions, complete
from agl.predictions.records import Status
from agl.prompts import load_prompt

GOOD = ('{"reasoning": "blackbird song, German speech", "city": "Berlin", "country": "Germany",'
        ' "continent": "Europe", "latitude": 52.52, "longitude": 13.40, "confidence": 0.6}')
PROSE = f"Sure! Here is my analysis of the recording.\n\n```json\n{GOOD}\n```\nHope this helps."
REFUSAL = "I'm sorry, but I cannot determine where this recording was made."
FAST = Backoff(base_s=0.001, cap_s=0.01)


def make_clips(root: Path, n: int) -> tuple[Path, Path]:
    """A manifest of n clips with distinct tiny WAV files (audio root = root/audio)."""
    import soundfile as sf

    rows = []
    for i in range(n):
        key = f"clip_{i:03d}"
        (root / "audio" / key).mkdir(parents=True, exist_ok=True)
        t = np.arange(1600) / 16000
        sf.write(root / "audio" / key / "a.wav", 0.1 * np.sin(2 * np.pi * (200 + 37 * i) * t),
                 16000)
        rows.append({"key": key, "longitude": 10.0 + i, "latitude": 50.0, "mp3name": "a.wav",
                     "mp3seconds": 0.1, "city": "Berlin", "country": "Germany",
                     "continent": "Europe", **{c: 0.0 for c in (
                         "human_sounds", "animal", "music", "natural_sounds", "channel",
                         "environment_and_background", "sounds_of_things",
                         "source_ambiguous_sounds")}})
    manifest = root / "manifest.csv"
    write_manifest(pd.DataFrame(rows), manifest)
    return manifest, root / "audio"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def body_for(api: str, text: str | None, **kw) -> dict:
    return openai_completion(text, **kw) if api == "openai" else gemini_response(text, **kw)


def backend_settings(api: str, url: str) -> dict:
    if api == "openai":
        return {"base_url": url + "/v1", "temperature": 0}
    return {"base_url": url, "api_version": "v1beta", "temperature": 0}


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-OPENAI-0123456789abcdef")
    monkeypatch.setenv("GEMINI_API_KEY", "gm-test-GEMINI-0123456789abcdef")


def run_one(tmp_path: Path, api: str, answer, *, n: int = 1, timeout_s: float = 10,
            max_retries: int = 3, cache: bool = False):
    from agl.dataset.manifest import load_manifest

    manifest, audio = make_clips(tmp_path, n)
    with FakeServer(answer) as server:
        spec = ModelSpec("run", api, "fake-audio-model", settings=backend_settings(api, server.url),
                         price_in_per_m=2.0, price_out_per_m=10.0)
        options = RunOptions(cache_dir=(tmp_path / "cache") if cache else None, concurrency=4,
                             timeout_s=timeout_s, max_retries=max_retries, progress=False,
                             backoff=FAST)
        summary = run_inference(spec, load_prompt(), clips(load_manifest(manifest)),
                                out_dir=tmp_path / "run", audio_root=audio, options=options)
    # Latency, attempts and cache hits live in the run's timings file (kept out of DVC).
    return read_run(tmp_path / "run"), summary, server, audio


APIS = ["openai", "gemini"]


@pytest.mark.parametrize("api", APIS)
def test_good_json_reply_carries_each_clips_audio(tmp_path, api):
    preds, summary, server, audio = run_one(
        tmp_path, api, lambda call: Answer(200, body_for(api, GOOD)), n=3)
    assert {p.status for p in preds.values()} == {Status.OK}
    p = preds["clip_000"]
    assert (p.latitude, p.longitude, p.country, p.confidence) == (52.52, 13.40, "Germany", 0.6)
    assert p.meta["input_tokens"] == 120 and p.meta["output_tokens"] == 30
    assert math.isclose(p.meta["cost_usd"], (120 * 2.0 + 30 * 10.0) / 1e6)
    assert p.meta["attempts"] == 1 and p.meta["cached"] is False
    assert p.meta["backend"] == api and p.meta["latency_s"] > 0
    # Each request carried exactly its own clip's bytes and the prompt text.
    assert len(server.calls) == 3
    for key in preds:
        calls = server.calls_for(sha(audio / key / "a.wav"))
        assert len(calls) == 1 and calls[0].audio_sha256 == [sha(audio / key / "a.wav")]
        assert load_prompt().text.strip() in calls[0].prompt
    assert len({c.audio_sha256[0] for c in server.calls}) == 3
    assert summary["n_ok"] == 3 and summary["input_tokens"] == 360
    assert math.isclose(summary["cost_usd"], 3 * p.meta["cost_usd"])


@pytest.mark.parametrize("api", APIS)
def test_real_mp3_payload_differs_per_clip(tmp_path, api, real_mp3s):
    import asyncio

    async def go(backend):
        try:
            return await complete(
                backend, [Request(f"c{i}", "where?", p) for i, p in enumerate(real_mp3s)],
                cache=None, concurrency=2, timeout_s=30, max_retries=0)
        finally:
            await backend.aclose()

    with FakeServer(lambda call: Answer(200, body_for(api, GOOD))) as server:
        replies = asyncio.run(go(get_backend(api)("fake", **backend_settings(api, server.url))))
    assert all(r.status.value == "ok" for r in replies)
    sent = sorted(c.audio_sha256[0] for c in server.calls)
    # Each clip's MPEG frames, without the tags the Archive's files carry (agl.core.container).
    from agl.core.container import strip

    frames = [hashlib.sha256(strip(p.read_bytes(), ".mp3")).hexdigest() for p in real_mp3s]
    assert sent == sorted(frames) and len(set(sent)) == len(real_mp3s)


@pytest.mark.parametrize("api", APIS)
def test_prose_around_json_is_parsed(tmp_path, api):
    preds, *_ = run_one(tmp_path, api, lambda call: Answer(200, body_for(api, PROSE)))
    p = preds["clip_000"]
    assert p.status is Status.OK and p.city == "Berlin" and p.raw_reply == PROSE


@pytest.mark.parametrize("api", APIS)
def test_refusal_in_words_is_a_refusal(tmp_path, api):
    preds, summary, *_ = run_one(tmp_path, api, lambda call: Answer(200, body_for(api, REFUSAL)))
    p = preds["clip_000"]
    assert p.status is Status.REFUSED and p.refused and p.latitude is None
    assert summary["n_refused"] == 1 and summary["n_failed"] == 0


@pytest.mark.parametrize("api", APIS)
def test_structured_refusal_is_a_refusal(tmp_path, api):
    if api == "openai":
        body = openai_completion(None, refusal="I can't help with identifying that.")
    else:
        body = gemini_response(None, finish="SAFETY")
    preds, *_ = run_one(tmp_path, api, lambda call: Answer(200, body))
    p = preds["clip_000"]
    assert p.status is Status.REFUSED and p.error is None


@pytest.mark.parametrize("api", APIS)
def test_429_with_retry_after_then_success(tmp_path, api):
    import time

    arrivals: list[float] = []

    def answer(call):
        arrivals.append(time.monotonic())
        if call.n == 1:
            return Answer(429, {"error": {"code": 429, "message": "quota",
                                          "status": "RESOURCE_EXHAUSTED"}},
                          headers={"Retry-After": "1"})
        return Answer(200, body_for(api, GOOD))

    preds, summary, server, _ = run_one(tmp_path, api, answer)
    p = preds["clip_000"]
    assert p.status is Status.OK and p.meta["attempts"] == 2
    assert len(server.calls) == 2
    assert arrivals[1] - arrivals[0] >= 1.0  # the server's Retry-After was honoured


@pytest.mark.parametrize("api", APIS)
def test_500s_past_the_retry_budget_are_a_failure_not_a_refusal(tmp_path, api):
    body = {"error": {"code": 500, "message": "internal error", "status": "INTERNAL"}}
    preds, summary, server, _ = run_one(tmp_path, api, lambda call: Answer(500, body),
                                        max_retries=2)
    p = preds["clip_000"]
    assert p.status is Status.FAILED and not p.refused
    assert "500" in p.error and "gave up after 3 attempts" in p.error
    assert len(server.calls) == 3 and p.meta["attempts"] == 3
    assert summary["n_failed"] == 1 and summary["n_refused"] == 0 and not summary["complete"]


@pytest.mark.parametrize("api", APIS)
def test_malformed_body_is_a_failure(tmp_path, api):
    preds, *_ = run_one(tmp_path, api, lambda call: Answer(200, "<html>upstream error</html"))
    p = preds["clip_000"]
    assert p.status is Status.FAILED and "unreadable" in p.error and p.raw_reply is None


@pytest.mark.parametrize("api", APIS)
def test_slow_reply_past_the_timeout_is_a_failure(tmp_path, api):
    preds, _, server, _ = run_one(tmp_path, api, lambda call: Answer(hold=True),
                                  timeout_s=0.5, max_retries=1)
    p = preds["clip_000"]
    assert p.status is Status.FAILED and "timed out after 0.5 s" in p.error
    # A timeout is retried, then given up: counted by the client. (On a loaded machine the
    # 0.5 s can run out before the server has read a request, so its count may be lower.)
    assert p.meta["attempts"] == 2 and len(server.calls) <= 2


@pytest.mark.parametrize("api", APIS)
def test_cache_serves_a_changed_run_without_requests(tmp_path, api):
    answer = lambda call: Answer(200, body_for(api, GOOD))  # noqa: E731
    preds, first, server, _ = run_one(tmp_path, api, answer, n=2, cache=True)
    assert len(server.calls) == 2 and first["cost_usd"] > 0
    tracked = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    (tmp_path / "run" / "predictions.jsonl").unlink()  # a stage rerun starts a new file
    preds2, summary, server2, _ = run_one(tmp_path, api, answer, n=2, cache=True)
    assert server2.calls == [] and summary["cached"] == 2 and summary["session_cost_usd"] == 0
    # What the answers cost is not run history: the tracked summary is the same (but for the
    # fake server's port); this session's spend, requests and cache hits are in its timings.
    assert summary["cost_usd"] == first["cost_usd"]
    again = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert {**again, "settings": None} == {**tracked, "settings": None}
    assert [p.meta["cost_usd"] for p in preds2.values()] == [p.meta["cost_usd"] for p in preds.values()]
    assert all(p.meta["cached"] for p in preds2.values())
    assert [p.latitude for p in preds2.values()] == [p.latitude for p in preds.values()]


def test_sampled_replies_are_not_cached(tmp_path):
    answer = lambda call: Answer(200, openai_completion(GOOD))  # noqa: E731
    manifest, audio = make_clips(tmp_path, 1)
    with FakeServer(answer) as server:
        backend = get_backend("openai")("m", base_url=server.url + "/v1", temperature=0.7)
        assert not backend.deterministic
        from agl.inference.runner_sync import complete_sync

        req = [Request("clip_000", "where?", audio / "clip_000" / "a.wav")]
        for _ in range(2):
            r = complete_sync("openai", "m", req, settings={"base_url": server.url + "/v1",
                                                              "temperature": 0.7},
                              options=RunOptions(cache_dir=tmp_path / "cache", max_retries=0,
                                                 progress=False))
            assert r[0].extra["cached"] is False
    assert len(server.calls) == 2 and not list((tmp_path / "cache").glob("*/*.json"))


def test_unknown_backend_and_missing_key_are_one_line_errors(monkeypatch, capsys, tmp_path):
    from agl.cli import main

    manifest, audio = make_clips(tmp_path, 1)
    monkeypatch.delenv("OPENAI_API_KEY")
    rc = main(["infer", "--backend", "openai", "--model", "m", "--manifest", str(manifest),
               "--audio-root", str(audio), "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "OPENAI_API_KEY" in err
    rc = main(["infer", "--backend", "gemin", "--manifest", str(manifest),
               "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "did you mean 'gemini'" in err and len(err.splitlines()) == 1


def test_missing_audio_is_one_line_error(tmp_path, capsys):
    from agl.cli import main

    manifest, audio = make_clips(tmp_path, 2)
    (audio / "clip_001" / "a.wav").unlink()
    rc = main(["infer", "--backend", "openai", "--model", "m", "--manifest", str(manifest),
               "--audio-root", str(audio), "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "clip_001/a.wav" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o" / "predictions.jsonl").exists()


def test_summary_has_no_secret_and_records_prompt(tmp_path):
    preds, summary, *_ = run_one(tmp_path, "openai", lambda c: Answer(200, openai_completion(GOOD)))
    assert summary["prompt_sha256"] == load_prompt().sha256 and summary["prompt"] == "geo-json-v1"
    text = json.dumps(summary)
    assert "sk-test-OPENAI" not in text


def test_gemini_large_audio_goes_through_the_files_api(tmp_path, real_mp3s):
    """Above `upload_above_bytes` the clip is uploaded (resumable protocol), referenced by
    URI in the request, and deleted afterwards."""
    import asyncio

    mp3 = real_mp3s[0]
    uploaded = {"name": "files/abc123", "uri": "", "mimeType": "audio/mpeg", "state": "ACTIVE"}

    def answer(call):
        if call.path.startswith("/upload/") and call.headers.get("X-Goog-Upload-Command",
                                                                  "").startswith("start"):
            return Answer(200, {}, headers={"X-Goog-Upload-URL": server.url + "/upload-session",
                                            "X-Goog-Upload-Status": "active"})
        if call.path == "/upload-session":
            uploaded["uri"] = server.url + "/v1beta/files/abc123"
            return Answer(200, {"file": uploaded}, headers={"X-Goog-Upload-Status": "final"})
        if call.method == "DELETE":
            return Answer(200, {})
        return Answer(200, gemini_response(GOOD))

    async def go(backend):
        try:
            return await complete(backend, [Request("c", "where?", mp3)], cache=None,
                                  concurrency=1, timeout_s=60, max_retries=0)
        finally:
            await backend.aclose()

    with FakeServer(answer) as server:
        settings = {**backend_settings("gemini", server.url), "upload_above_bytes": 1000}
        (reply,) = asyncio.run(go(get_backend("gemini")("fake", **settings)))
    assert reply.status.value == "ok", reply.error
    sent = b"".join(c.raw for c in server.calls if c.path == "/upload-session")
    from agl.core.container import strip

    assert sent == strip(mp3.read_bytes(), ".mp3")  # the frames alone, not the Archive's tags
    (gen,) = [c for c in server.calls if c.path.endswith(":generateContent")]
    parts = gen.body["contents"][0]["parts"]
    assert gen.audio_sha256 == []  # not inline
    refs = [p.get("fileData") or p.get("file_data") for p in parts]
    assert any(r and (r.get("fileUri") or r.get("file_uri")) == uploaded["uri"] for r in refs)
    assert [c.path for c in server.calls if c.method == "DELETE"] == ["/v1beta/files/abc123"]
