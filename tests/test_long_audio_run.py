"""Long audio through the run path: a 130-s clip whose first 30 s sound like one place and
whose rest like another, through the real openai / google-genai clients against a fake server
that records every request's audio and answers by what it hears (docs/inference.md#long-audio)."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pandas as pd
import pytest
import soundfile as sf
from fake_llm import Answer, FakeServer, gemini_response, openai_completion

from agl.contracts.long_audio import parse_long_audio
from agl.contracts.models import ModelSpec, parse_models
from agl.dataset.manifest import clips, load_manifest, write_manifest
from agl.errors import AglError
from agl.inference.finalize import read_run
from agl.inference.model_run import run_inference
from agl.inference.params_run import summary_line
from agl.inference.runner import Backoff, RunOptions
from agl.predictions.records import Status
from agl.prompts import load_prompt

SR = 8000
FIRST, REST = 440.0, 1000.0  # the first 30 s: a 440 Hz tone ("France"); the rest 1 kHz ("Morocco")
PLACES = {FIRST: ("France", "Paris", "Europe", 48.86, 2.35), REST: ("Morocco", "Marrakesh", "Africa", 31.63, -8.0)}


def _clip(root):
    t = np.arange(130 * SR) / SR
    x = np.where(t < 30, np.sin(2 * np.pi * FIRST * t), np.sin(2 * np.pi * REST * t)) * 0.3
    (root / "audio" / "long").mkdir(parents=True)
    sf.write(root / "audio" / "long" / "a.wav", x.astype(np.float32), SR)
    rows = [{"key": "long", "longitude": -8.0, "latitude": 31.63, "mp3name": "a.wav", "mp3seconds": 130.0,
             "city": "Marrakesh", "country": "Morocco", "continent": "Africa",
             **{c: 0.0 for c in ("human_sounds", "animal", "music", "natural_sounds", "channel",
                                 "environment_and_background", "sounds_of_things", "source_ambiguous_sounds")}}]
    write_manifest(pd.DataFrame(rows), root / "manifest.csv")
    return root / "manifest.csv", root / "audio"


def _heard(data: bytes) -> tuple[float, float]:
    """(seconds, the tone most of those seconds carry) of the audio a request carried."""
    x, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    votes = {FIRST: 0, REST: 0}
    for i in range(0, len(x) - sr + 1, sr):
        spec = np.abs(np.fft.rfft(x[i:i + sr]))
        f = np.fft.rfftfreq(sr, 1 / sr)
        votes[max(votes, key=lambda tone: spec[np.argmin(np.abs(f - tone))])] += 1
    return len(x) / sr, max(votes, key=votes.get)


def _audios_of(body: dict) -> list[tuple[str, bytes]]:
    """Every audio part of a request, in order, with its format or MIME type."""
    out = []
    for msg in body.get("messages", []):
        for part in msg.get("content") or []:
            if isinstance(part, dict) and part.get("type") == "input_audio":
                out.append((part["input_audio"]["format"], base64.b64decode(part["input_audio"]["data"])))
    for c in body.get("contents", []):
        for part in c.get("parts", []):
            inline = part.get("inlineData") or part.get("inline_data")
            if inline:
                data = inline["data"]
                out.append((inline.get("mimeType") or inline.get("mime_type"),
                            base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))))
    assert out, "no audio in the request"
    return out


class Server:
    """Answers each request with the place of the tone it mostly heard; records the seconds
    (a request of several audio parts: the list of each part's seconds, and `formats`).
    `reported_s`: the audio seconds the usage claims (None: the seconds sent)."""

    def __init__(self, api: str, reported_s: float | None = None):
        self.api, self.reported_s, self.heard, self.formats = api, reported_s, [], []

    def __call__(self, call) -> Answer:
        parts = [(fmt, *_heard(data)) for fmt, data in _audios_of(call.body)]
        self.formats.append([fmt for fmt, _, _ in parts])
        seconds = sum(s for _, s, _ in parts)
        tone = max((FIRST, REST), key=lambda t: sum(s for _, s, tn in parts if tn == t))
        self.heard.append(round(seconds, 3) if len(parts) == 1 else [round(s, 3) for _, s, _ in parts])
        country, city, continent, lat, lon = PLACES[tone]
        text = json.dumps({"city": city, "country": country, "continent": continent,
                           "latitude": lat, "longitude": lon, "confidence": 0.5})
        claimed = seconds if self.reported_s is None else self.reported_s
        if self.api == "openai":
            body = openai_completion(text, tokens=(100, 20))
            body["usage"]["prompt_tokens_details"] = {"audio_tokens": int(round(claimed * 10)), "cached_tokens": 0}
        else:
            body = gemini_response(text, tokens=(100, 20))
            body["usageMetadata"]["promptTokensDetails"] = [
                {"modality": "AUDIO", "tokenCount": int(round(claimed * 32))},
                {"modality": "TEXT", "tokenCount": 100 - int(round(claimed * 32)) % 100}]
        return Answer(200, body)


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-OPENAI-0123456789abcdef")
    monkeypatch.setenv("GEMINI_API_KEY", "gm-test-GEMINI-0123456789abcdef")


def _run(tmp_path, api, long_audio, *, reported_s=None, name="run", cache=None, **extra):
    manifest, audio = _clip(tmp_path) if not (tmp_path / "manifest.csv").exists() else (
        tmp_path / "manifest.csv", tmp_path / "audio")
    server = Server(api, reported_s)
    with FakeServer(server) as fake:
        settings = ({"base_url": fake.url + "/v1", "temperature": 0, **extra} if api == "openai"
                    else {"base_url": fake.url, "api_version": "v1beta", "temperature": 0, **extra})
        spec = ModelSpec(name, api, "fake-audio-model", settings=settings, price_in_per_m=2.0,
                         price_out_per_m=10.0, long_audio=parse_long_audio(long_audio, "test"))
        options = RunOptions(cache_dir=tmp_path / "cache" / (cache or name), progress=False,
                             backoff=Backoff(base_s=0.001, cap_s=0.01))
        summary = run_inference(spec, load_prompt(), clips(load_manifest(manifest)), out_dir=tmp_path / name,
                                audio_root=audio, options=options)
    _run.server = server
    return read_run(tmp_path / name)["long"], summary, server.heard


def test_a_window_is_labelled_wav_whatever_audio_format_says(tmp_path):
    """The paper gateway entries say `audio_format: mp3` of the published files; a window is a
    cut WAV and goes labelled wav (it went out as 'mp3')."""
    _run(tmp_path, "openai", {"mode": "windows", "window_s": 60}, audio_format="mp3")
    assert _run.server.formats == [["wav"]] * 3


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_multi_part_through_the_apis(tmp_path, api):
    """long_audio multi_part through the real SDKs: one request whose user turn holds the
    clip's windows as several audio parts (openai: input_audio parts; gemini: inline parts),
    WAV, in time order, of the windows' seconds; one answer (the majority's tone: 100 of 130
    s), recorded with its parts, heard_s and sent_s; the usage's audio tokens say all 130 s."""
    rec, summary, heard = _run(tmp_path, api, {"mode": "multi_part", "window_s": 30, "min_tail_s": 5})
    assert heard == [[30.0, 30.0, 30.0, 30.0, 10.0]]
    assert _run.server.formats == [["wav" if api == "openai" else "audio/wav"] * 5]
    assert summary["session_requests"] == 1 and rec.status is Status.OK and rec.country == "Morocco"
    assert rec.meta["long_audio"] == "multi_part" and "windows" not in rec.meta
    assert rec.meta["parts"] == [[0, 30], [30, 60], [60, 90], [90, 120], [120, 130]]
    assert rec.meta["heard_s"] == rec.meta["sent_s"] == rec.meta["audio_s"] == 130.0
    assert rec.meta["heard_s_reported"] == 130.0 and "heard_flag" not in summary
    # overlapping windows: each part is sent whole, overlaps counted in sent_s only
    rec, summary, heard = _run(tmp_path, api, {"mode": "multi_part", "window_s": 60, "overlap_s": 20},
                               name="overlap")
    assert heard == [[60.0, 60.0, 50.0]] and rec.meta["parts"] == [[0, 60], [40, 100], [80, 130]]
    assert rec.meta["heard_s"] == 130.0 and rec.meta["sent_s"] == 170.0


def test_windows_native_truncate_on_a_130_s_clip(tmp_path):
    # windows: 5 requests of <= 30 s covering the clip; the majority's country, windows kept
    rec, summary, heard = _run(tmp_path, "openai", {"mode": "windows", "window_s": 30, "min_tail_s": 5},
                               name="windows")
    assert sorted(heard) == [10.0, 30.0, 30.0, 30.0, 30.0]
    assert rec.status is Status.OK and rec.country == "Morocco" and rec.city == "Marrakesh"
    wins = rec.meta["windows"]
    assert [(w["start_s"], w["end_s"]) for w in wins] == [(0, 30), (30, 60), (60, 90), (90, 120), (120, 130)]
    assert [w["country"] for w in wins] == ["France"] + ["Morocco"] * 4
    assert all(w["finish_reason"] == "stop" and w["input_tokens"] == 100 and w["output_tokens"] == 20
               for w in wins)
    assert rec.meta["heard_s"] == 130.0 and rec.meta["sent_s"] == 130.0 and rec.meta["audio_s"] == 130.0
    assert rec.meta["input_tokens"] == 500 and rec.meta["output_tokens"] == 100
    assert rec.meta["cost_usd"] == pytest.approx((500 * 2.0 + 100 * 10.0) / 1e6)
    assert rec.meta["attempts"] == 5 and rec.meta["long_audio"] == "windows"
    assert [w["heard_s_reported"] for w in wins] == [30.0, 30.0, 30.0, 30.0, 10.0]
    assert rec.meta["heard_s_reported"] == 130.0
    assert rec.meta["window_vote"]["agreement"] == 0.8 and rec.meta["window_vote"]["medoid_window"] == 1
    assert summary["session_requests"] == 5 and summary["n_ok"] == 1
    assert summary["heard"] == {"clips": 1, "audio_s": 130.0, "heard_s": 130.0, "sent_s": 130.0,
                                "reported_clips": 1, "heard_s_reported": 130.0, "short_clips": 0,
                                "tolerance": 0.1}
    assert "heard_flag" not in summary and summary["windows"]["window_agreement"] == 0.8
    assert summary["windows"]["first_window_agrees"] == 0.0
    # the truth is Marrakesh, which four windows named: combined and oracle 0 km, the first
    # window (Paris) 2,102 km away
    assert summary["windows"]["combined_mean_km"] == 0.0 and summary["windows"]["oracle_mean_km"] == 0.0
    assert round(summary["windows"]["first_window_mean_km"]) == 2102
    assert summary["long_audio"]["mode"] == "windows"

    # native: one request of the whole clip
    rec, summary, heard = _run(tmp_path, "openai", None, name="native")
    assert heard == [130.0] and rec.meta["heard_s"] == 130.0 and "windows" not in rec.meta
    assert rec.country == "Morocco" and summary["session_requests"] == 1

    # truncate: the first 30 s, the first window's country
    rec, summary, heard = _run(tmp_path, "openai", {"mode": "truncate", "window_s": 30}, name="truncate")
    assert heard == [30.0] and rec.country == "France" and rec.city == "Paris"
    assert rec.meta["heard_s"] == 30.0 and rec.meta["audio_s"] == 130.0
    assert [(w["start_s"], w["end_s"]) for w in rec.meta["windows"]] == [(0, 30)]
    # three protocols, three fingerprints: none stands in for another
    fps = {read_run(tmp_path / n)["long"].meta["run_fingerprint"] for n in ("windows", "native", "truncate")}
    assert len(fps) == 3
    # a truncate run sharing the windows run's cache: its one window is the windows run's first
    rec, summary, heard = _run(tmp_path, "openai", "truncate", name="truncate2", cache="windows")
    assert heard == [] and rec.country == "France" and summary["session_cache_hits"] == 1

    # windows again: every window from the cache, nothing sent, the same record
    again, summary, heard = _run(tmp_path, "openai", {"mode": "windows", "window_s": 30, "min_tail_s": 5},
                                 name="windows2", cache="windows")
    assert heard == [] and summary["session_cache_hits"] == 1 and again.country == "Morocco"


def test_a_server_that_hears_30_s_of_130_is_flagged(tmp_path):
    rec, summary, heard = _run(tmp_path, "gemini", None, reported_s=30.0)
    assert heard == [130.0] and rec.meta["heard_s"] == 130.0 and rec.meta["heard_s_reported"] == 30.0
    assert summary["heard"]["short_clips"] == 1
    assert summary["heard_flag"].startswith("the server heard 30 s of 130")
    assert "WARNING: the server heard 30 s of 130" in summary_line(summary)


def test_long_audio_in_a_model_entry():
    spec, = parse_models({"gem": {"backend": "gemini", "model": "m",
                                  "long_audio": {"mode": "truncate", "start": "random", "seed": 2}}})
    assert spec.long_audio.mode == "truncate" and spec.long_audio.seed == 2
    with pytest.raises(AglError, match=r"^params.yaml: models.gem.long_audio.window_s: -3 is not"):
        parse_models({"gem": {"backend": "gemini", "model": "m", "long_audio": {"window_s": -3}}})


def test_dry_run_per_mode(tmp_path, capsys):
    from agl.cli import main

    manifest, audio = _clip(tmp_path)
    args = ["infer", "--backend", "gemini", "--model", "gemini-2.5-flash", "--manifest", str(manifest),
            "--audio-root", str(audio), "--out", str(tmp_path / "run"), "--price-in", "1.0",
            "--price-out", "2.5", "--dry-run", "--long-audio", "windows", "--window-s", "30"]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("dry run: gemini:gemini-2.5-flash: 5 request(s), 2.17 audio minutes")
    assert out[0].endswith("(long_audio windows)")
    native, truncate, windows = out[1:4]
    assert native.startswith("dry run:   native: 1 request(s), 2.17 audio minutes, ~4,")
    assert truncate.startswith("dry run:   truncate 30 s: 1 request(s), 0.50 audio minutes, ~1,")
    assert windows.startswith("dry run:   windows 30 s: 5 request(s), 2.17 audio minutes")
    with pytest.raises(SystemExit):  # argparse: a mode that does not exist
        main([*args[:-4], "--long-audio", "chunks"])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main([*args[:-2], "--window-s", "-3"])
    assert "argument --window-s: '-3' is not a positive finite number" in capsys.readouterr().err


TEXT_TOKENS = 57  # what the fake vLLM's /tokenize says the prompt's text is
ENCODER_RATE = 25  # tokens per second of the fake served model's audio encoder


def _vllm(tmp_path, settings, *, tokenize=True, hears_s=None, name="vllm", long_audio=None):
    """A vLLM-like server: usage has prompt_tokens only (text + 25 per second of audio heard,
    `hears_s` capping it: a server that cuts), and /tokenize counts the text."""
    manifest, audio = _clip(tmp_path) if not (tmp_path / "manifest.csv").exists() else (
        tmp_path / "manifest.csv", tmp_path / "audio")
    paths = []

    def answer(call):
        paths.append(call.path)
        if call.path == "/tokenize":
            assert not _has_audio(call.body) and call.body["add_generation_prompt"] is True
            return Answer(200, {"count": TEXT_TOKENS, "max_model_len": 8192}) if tokenize else Answer(404, {})
        seconds = sum(_heard(data)[0] for _, data in _audios_of(call.body))
        heard = seconds if hears_s is None else min(seconds, hears_s)
        text = json.dumps({"city": "Paris", "country": "France", "continent": "Europe",
                           "latitude": 48.86, "longitude": 2.35})
        return Answer(200, openai_completion(text, tokens=(TEXT_TOKENS + round(heard * ENCODER_RATE), 20)))

    with FakeServer(answer) as fake:
        spec = ModelSpec(name, "openai-compatible", "served", settings={
            "base_url": fake.url + "/v1", "temperature": 0, **settings},
            long_audio=parse_long_audio(long_audio, "test"))
        summary = run_inference(spec, load_prompt(), clips(load_manifest(manifest)), out_dir=tmp_path / name,
                                audio_root=audio, options=RunOptions(cache_dir=None, progress=False,
                                                                     backoff=Backoff(base_s=0.001, cap_s=0.01)))
    return read_run(tmp_path / name)["long"], summary, paths


def _has_audio(body):
    return any(isinstance(p, dict) and p.get("type") == "input_audio"
               for m in body["messages"] for p in (m["content"] if isinstance(m["content"], list) else []))


def test_a_vllm_server_heard_s_from_prompt_tokens_less_the_texts(tmp_path):
    """openai-compatible with `audio_tokens_per_s` (the encoder's rate): the usage's prompt
    tokens less the text's (the server's own /tokenize, asked once) are the audio heard; a
    server that heard 30 s of 130 is flagged. Without the rate, or without /tokenize, nothing
    is reported (never guessed)."""
    rec, summary, paths = _vllm(tmp_path, {"audio_tokens_per_s": ENCODER_RATE})
    assert paths == ["/v1/chat/completions", "/tokenize"]
    assert rec.meta["audio_tokens"] == 130 * ENCODER_RATE and rec.meta["audio_tokens_from"] == "tokenize"
    assert rec.meta["heard_s_reported"] == 130.0 == rec.meta["heard_s"] and "heard_flag" not in summary

    # windows: five requests, the text counted once; each window's heard seconds, summed
    rec, summary, paths = _vllm(tmp_path, {"audio_tokens_per_s": ENCODER_RATE}, name="windows",
                                long_audio={"mode": "windows", "window_s": 30, "min_tail_s": 5})
    assert paths.count("/tokenize") == 1 and paths.count("/v1/chat/completions") == 5
    assert [w["heard_s_reported"] for w in rec.meta["windows"]] == [30.0, 30.0, 30.0, 30.0, 10.0]
    assert rec.meta["heard_s_reported"] == 130.0

    rec, summary, _ = _vllm(tmp_path, {"audio_tokens_per_s": ENCODER_RATE}, hears_s=30, name="cut")
    assert rec.meta["heard_s_reported"] == 30.0
    assert summary["heard_flag"].startswith("the server heard 30 s of 130")

    for name, settings, tokenize in (("norate", {}, True), ("notok", {"audio_tokens_per_s": ENCODER_RATE}, False)):
        rec, summary, paths = _vllm(tmp_path, settings, tokenize=tokenize, name=name)
        assert "heard_s_reported" not in rec.meta and "audio_tokens" not in rec.meta, name
        assert "reported_clips" not in summary["heard"], name
        assert ("/tokenize" in paths) is bool(settings), name


def test_knn_hears_each_window(tmp_path):
    """The offline knn baseline under windows (the demo's knn): each window's own
    fingerprint finds its neighbour, so the 130-s clip whose first 30 s sound like the French
    clip and whose rest like the Moroccan one answers France natively (knn hears the first 30
    s) and Morocco in windows (four windows of five); no request leaves the machine."""
    t = np.arange(20 * SR) / SR
    _clip(tmp_path)
    frame = load_manifest(tmp_path / "manifest.csv")
    rows = frame.to_dict("records")
    for key, tone, (country, city, continent, lat, lon) in (("fr", FIRST, PLACES[FIRST]), ("ma", REST, PLACES[REST])):
        (tmp_path / "audio" / key).mkdir()
        sf.write(tmp_path / "audio" / key / "a.wav", (np.sin(2 * np.pi * tone * t) * 0.3).astype(np.float32), SR)
        rows.append({**rows[0], "key": key, "country": country, "city": city, "continent": continent,
                     "latitude": lat, "longitude": lon, "mp3seconds": 20.0})
    rows[0].update(latitude=-33.9, longitude=18.4)  # the long clip: its own site, far from both
    write_manifest(pd.DataFrame(rows), tmp_path / "manifest.csv")
    cl = clips(load_manifest(tmp_path / "manifest.csv"))
    out = {}
    for name, long_audio in (("native", None), ("windows", {"mode": "windows", "window_s": 30, "min_tail_s": 5})):
        spec = ModelSpec(name, "knn", "logmel-stats", settings={"k": 1, "max_seconds": 30},
                         long_audio=parse_long_audio(long_audio, "test"))
        run_inference(spec, load_prompt(), cl, out_dir=tmp_path / name, audio_root=tmp_path / "audio",
                      options=RunOptions(cache_dir=None, progress=False))
        out[name] = read_run(tmp_path / name)["long"]
    assert out["native"].country == "France"
    wins = out["windows"].meta["windows"]
    assert [w["country"] for w in wins] == ["France"] + ["Morocco"] * 4
    assert out["windows"].country == "Morocco" and out["windows"].meta["heard_s"] == 130.0
