"""Nothing but the sound leaves the process: every backend's requests, captured by a fake
server on 127.0.0.1 (the real openai and google-genai SDKs), carry the clips' audio frames
without ID3v2, ID3v1, APEv2 or RIFF INFO, no place word and no file name; under the `paper`
protocol the same clips go out as published, and the run says so."""

from __future__ import annotations

import base64
import json
import struct
from email.parser import BytesParser
from pathlib import Path

import numpy as np
import pytest
from fake_batch import BatchRequest, FakeBatchService, Result
from fake_llm import gemini_response, openai_completion
from test_inference_api import FAST

from agl.contracts.models import ModelSpec
from agl.core.container import strip
from agl.dataset import demo
from agl.dataset.manifest import clips, load_manifest
from agl.inference.model_run import run_inference
from agl.inference.runner import RunOptions
from agl.prompts import load_prompt

MP3_NAME = "20020207EssaouiraRempartsMuezzin.mp3"
WAV_NAME = "EssaouiraStationAmbience.wav"
# What must never leave: the place (in the tags and the names), the names, the recordist.
LEAKS = (b"Essaouira", b"essaouira", b"Morocco", b"Maroc", b"31.516", b"Mellah",
         b"Muezzin", b"Remparts", b"Flavien", b"EssaouiraStation", b"20020207")
ANSWER = json.dumps({"reasoning": "surf and a muezzin", "city": "Essaouira", "country": "Morocco",
                     "continent": "Africa", "latitude": 31.5, "longitude": -9.77,
                     "confidence": 0.5})


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-TAGS-0123456789abcdef")
    monkeypatch.setenv("GEMINI_API_KEY", "gm-test-TAGS-0123456789abcdef")


def _wav_with_info() -> bytes:
    import io

    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, (np.sin(np.arange(3200) / 5) * 9000).astype(np.int16), 16000, format="WAV",
             subtype="PCM_16")
    plain = buf.getvalue()
    info = b"INFO" + b"INAM" + struct.pack("<I", 16) + b"Rue Mellah, Essa" \
        + b"ICMT" + struct.pack("<I", 8) + b"Morocco\0"
    body = plain[12:] + b"LIST" + struct.pack("<I", len(info)) + info
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, Path, dict[str, bytes]]:
    """Two clips whose tags and names hold their place: an MP3 tagged as the Archive's
    Essaouira clip is (ID3v2.3 COMM with date, street, city, country, coordinates; an ID3v1
    trailer; an APEv2 tag) and a WAV with a RIFF INFO chunk."""
    import pandas as pd

    from agl.dataset.manifest import CATEGORY_COLUMNS, write_manifest

    root = tmp_path_factory.mktemp("tagged")
    mp3 = demo._encode(np.sin(np.arange(16000) / 11) * 0.2)
    mp3 = demo.plant_tags(mp3, "apev2", (("Title", "Remparts, Essaouira, Maroc"),))
    mp3 = demo.plant_tags(mp3, "id3v2.3+id3v1", (
        ("TIT2", "Battlements and Muezzin / Ancien Medina, Essaouira, Maroc"),
        ("TPE1", "Flavien Gilli"),
        ("COMM", "2002-02-07 16:18:00 Rue Mellah, Essaouira, Morocco 31.51633429397/-9.766309261322")))
    files = {"clip_mp3": (MP3_NAME, mp3), "clip_wav": (WAV_NAME, _wav_with_info())}
    rows = []
    for key, (name, data) in files.items():
        (root / "audio" / key).mkdir(parents=True)
        (root / "audio" / key / name).write_bytes(data)
        rows.append({"key": key, "longitude": -9.766, "latitude": 31.516, "mp3name": name,
                     "mp3seconds": 0.2, "city": "Essaouira", "country": "Morocco",
                     "continent": "Africa", "title": "Remparts et Muezzin",
                     "description": "Ancien Medina, Essaouira, Maroc",
                     **{c: 0.0 for c in CATEGORY_COLUMNS}})
    write_manifest(pd.DataFrame(rows), root / "manifest.csv")
    return root / "manifest.csv", root / "audio", {k: d for k, (_, d) in files.items()}


def _answer(req: BatchRequest) -> Result:
    return Result(openai_completion(ANSWER) if "messages" in req.body else gemini_response(ANSWER))


VARIANTS = {
    "openai": ("openai", {}),
    "openai-compatible (vLLM)": ("openai-compatible", {}),
    "openai batch": ("openai", {"mode": "batch", "batch": {}}),
    "gemini inline": ("gemini", {}),
    "gemini Files API": ("gemini", {"upload_above_bytes": 0}),
    "gemini batch": ("gemini", {"mode": "batch", "batch": {"inline_max_bytes": 0}}),
}


def _run(variant: str, dataset, tmp_path: Path, protocol: str | None = None):
    manifest, audio, _ = dataset
    backend, extra = VARIANTS[variant]
    with FakeBatchService(_answer) as svc:
        base = ({"base_url": svc.url + "/v1"} if backend.startswith("openai")
                else {"base_url": svc.url, "api_version": "v1beta"})
        spec = ModelSpec(name="run", backend=backend, model="fake",
                         settings={**base, "temperature": 0, **extra}, protocol=protocol)
        options = RunOptions(cache_dir=None, concurrency=2, timeout_s=30, max_retries=0,
                             progress=False, backoff=FAST)
        out = tmp_path / "run"
        for _ in range(6):  # a batch run returns while its jobs are out; rerun to collect
            summary = run_inference(spec, load_prompt(), clips(load_manifest(manifest)),
                                    out_dir=out, audio_root=audio, options=options)
            if summary.get("n_ok") == 2:
                break
        return summary, svc.wire, out


def _bodies(raw: bytes, headers: dict[str, str]) -> list:
    """The JSON documents in one request body: itself, a JSONL file's lines, a multipart
    upload's file part."""
    ctype = headers.get("Content-Type", "")
    if "multipart" in ctype:
        msg = BytesParser().parsebytes(f"Content-Type: {ctype}\r\n\r\n".encode() + raw)
        parts = [p.get_payload(decode=True) for p in msg.get_payload()]
        return [doc for p in parts for doc in _bodies(p or b"", {})]
    out = []
    for line in raw.splitlines() or [raw]:
        try:
            out.append(json.loads(line))
        except (json.JSONDecodeError, UnicodeDecodeError):
            pass
    return out


def _audio_in(doc) -> list[bytes]:
    """Every base64 audio payload in a JSON document (input_audio.data, inlineData.data)."""
    found = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ("input_audio",) and isinstance(v, dict):
                data = v["data"].split("base64,")[-1]
                found.append(base64.b64decode(data))
            elif k in ("inlineData", "inline_data") and isinstance(v, dict):
                data = v["data"]
                found.append(base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)))
            else:
                found += _audio_in(v)
    elif isinstance(doc, list):
        for v in doc:
            found += _audio_in(v)
    return found


def _sent(wire) -> tuple[list[bytes], bytes]:
    """(the audio payloads that left, everything else that left: paths, headers, bodies
    without their audio)."""
    audio, rest = [], []
    for method, path, headers, raw in wire:
        rest.append(f"{method} {path} {json.dumps(headers)}".encode())
        docs = _bodies(raw, headers)
        if path.startswith("/upload-session/") and not docs:
            audio.append(raw)  # a Files API upload of the audio itself
            continue
        for doc in docs:
            audio += _audio_in(doc)
        text = raw
        for blob in _audio_in(docs):
            for enc in (base64.b64encode(blob), base64.urlsafe_b64encode(blob).rstrip(b"=")):
                text = text.replace(enc, b"<audio>")
        rest.append(text)
    return audio, b"\n".join(rest)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_no_tag_no_name_no_place_word_leaves_any_backend(variant, dataset, tmp_path):
    summary, wire, out = _run(variant, dataset, tmp_path)
    assert summary["n_ok"] == 2, summary
    assert "audio_tags_sent" not in summary
    audio, rest = _sent(wire)
    originals = dataset[2]
    assert len(audio) >= 2
    for blob in audio:
        assert blob[:3] != b"ID3", variant  # no ID3v2 header
        assert blob[-128:-125] != b"TAG", variant  # no ID3v1 trailer
        assert b"APETAGEX" not in blob, variant  # no APEv2
        assert b"LIST" not in blob and b"INFO" not in blob, variant  # no RIFF INFO chunk
        for word in LEAKS:
            assert word not in blob, (variant, word)
        assert blob in {strip(originals["clip_mp3"], ".mp3"), strip(originals["clip_wav"], ".wav")}
    # The MP3's frames are the original's, byte for byte.
    assert any(blob and blob in originals["clip_mp3"] for blob in audio)
    for word in (*LEAKS, MP3_NAME.encode(), WAV_NAME.encode(), b".mp3", b".wav"):
        assert word not in rest, (variant, word)
    if variant == "gemini Files API":
        files = [json.loads(raw)["file"] for _, p, _, raw in wire if p.startswith("/upload/")]
        names = [f.get("displayName") or f.get("display_name") for f in files]
        assert names and all(n.startswith("audio-") for n in names)
        assert not any("X-Goog-Upload-File-Name" in h for _, _, h, _ in wire)


@pytest.mark.parametrize("variant", ["openai-compatible (vLLM)", "gemini Files API"])
def test_the_paper_protocol_sends_the_file_as_published_and_marks_the_run(variant, dataset, tmp_path):
    summary, wire, out = _run(variant, dataset, tmp_path, protocol="paper")
    assert summary["n_ok"] == 2 and summary["audio_tags_sent"] is True
    audio, _ = _sent(wire)
    assert set(audio) == set(dataset[2].values())  # the tags went out, as the authors sent them
    records = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert all(r["meta"]["audio_tags_sent"] is True for r in records)
    saved = json.loads((out / "run_summary.json").read_text())
    assert saved["audio_tags_sent"] is True and saved["run_protocol"] == "paper"


def test_a_local_model_gets_samples_and_no_path():
    from agl.backends.local_transformers import LocalTransformers
    from agl.contracts.calls import Request

    backend = object.__new__(LocalTransformers)  # no checkpoint: the messages alone
    backend.settings = {}
    msgs = backend._messages(Request("k", "Where?", audio_path=Path("/x/EssaouiraStation.mp3")))
    assert "Essaouira" not in json.dumps(msgs) and ".mp3" not in json.dumps(msgs)
