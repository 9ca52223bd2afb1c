"""An output is derived, never trusted (issue 35): a rerun answers a kept record again where
that costs nothing, so a line edited in predictions.jsonl after the run cannot survive and be
scored. A free offline backend computes every clip again; a record whose reply is in the
cache is served from it again, no request sent; a paid reply the cache does not hold (a
sampled one) is kept, as docs/inference.md says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_llm import Answer, FakeServer, openai_completion
from test_inference_api import FAST, make_clips

from agl.contracts.models import ModelSpec
from agl.dataset.manifest import clips, load_manifest
from agl.inference.model_run import run_inference
from agl.inference.runner import RunOptions
from agl.prompts import load_prompt

REPO = Path(__file__).resolve().parents[1]


def _run(spec: ModelSpec, tmp_path: Path, cache: Path | None):
    manifest, audio = tmp_path / "manifest.csv", tmp_path / "audio"
    options = RunOptions(cache_dir=cache, concurrency=2, timeout_s=30, max_retries=0,
                         progress=False, backoff=FAST)
    return run_inference(spec, load_prompt(), clips(load_manifest(manifest)), out_dir=tmp_path / "run",
                         audio_root=audio, options=options)


def _edit(path: Path) -> bytes:
    """Move the first record's guess to Paris; returns the file as it was."""
    whole = path.read_bytes()
    lines = whole.decode().splitlines(keepends=True)
    first = json.loads(lines[0])
    first["latitude"], first["longitude"], first["city"] = 48.8566, 2.3522, "Paris"
    lines[0] = json.dumps(first, sort_keys=True, separators=(",", ":")) + "\n"
    path.write_text("".join(lines))
    return whole


@pytest.mark.parametrize("backend,model", [("random", "uniform-latlon"), ("knn", "logmel-stats")])
def test_an_edited_record_of_a_free_backend_is_computed_again(backend, model, tmp_path, capsys):
    make_clips(tmp_path, 6)
    spec = ModelSpec("b", backend, model)
    _run(spec, tmp_path, None)  # no cache: recomputed anyway
    preds = tmp_path / "run" / "predictions.jsonl"
    whole = _edit(preds)
    capsys.readouterr()
    _run(spec, tmp_path, None)
    assert preds.read_bytes() == whole
    err = capsys.readouterr().err
    assert "1 record(s) differed from their answer computed again" in err and "clip_000" in err


def test_an_edited_record_is_served_again_from_the_cache_without_a_request(tmp_path, capsys):
    make_clips(tmp_path, 5)

    def answer(call):
        return Answer(200, openai_completion(json.dumps({
            "city": "Berlin", "country": "Germany", "continent": "Europe", "latitude": 52.5,
            "longitude": 13.4, "confidence": 0.5, "reasoning": f"call {call.n}"})))

    with FakeServer(answer) as server:
        spec = ModelSpec("api", "openai-compatible", "m",
                         settings={"base_url": server.url + "/v1", "temperature": 0})
        _run(spec, tmp_path, tmp_path / "cache")
        preds = tmp_path / "run" / "predictions.jsonl"
        whole = _edit(preds)
        sent = len(server.calls)
        capsys.readouterr()
        summary = _run(spec, tmp_path, tmp_path / "cache")
        assert len(server.calls) == sent == 5  # nothing asked again: every reply was cached
    assert preds.read_bytes() == whole
    assert summary["session_requests"] == 0 and summary["session_cache_hits"] == 5
    assert "served again from the reply cache" in capsys.readouterr().err


def test_a_sampled_reply_the_cache_does_not_hold_is_kept_as_documented(tmp_path):
    """temperature > 0: replies are not cached (each draw differs), so a rerun keeps the
    paid record rather than pay again; the docs say how to ask again."""
    make_clips(tmp_path, 3)
    with FakeServer(lambda call: Answer(200, openai_completion(json.dumps(
            {"city": "Rome", "country": "Italy", "continent": "Europe", "latitude": 41.9,
             "longitude": 12.5, "confidence": 0.3})))) as server:
        spec = ModelSpec("api", "openai-compatible", "m",
                         settings={"base_url": server.url + "/v1", "temperature": 0.7})
        _run(spec, tmp_path, tmp_path / "cache")
        preds = tmp_path / "run" / "predictions.jsonl"
        _edit(preds)
        edited = preds.read_bytes()
        _run(spec, tmp_path, tmp_path / "cache")
        assert len(server.calls) == 3 and preds.read_bytes() == edited
    docs = (REPO / "docs" / "inference.md").read_text()
    assert "is kept as it is" in docs and "delete its line" in docs


def test_an_edited_record_is_told_apart_from_a_machine_difference(tmp_path):
    """agl verify's check (agl.inference.audit): a record whose place no longer matches its
    cached reply is named as edited; one without a cached reply is counted, not judged."""
    from agl.inference.audit import audit_line, audit_run

    make_clips(tmp_path, 4)
    _run(ModelSpec("b", "random", "uniform-latlon"), tmp_path, tmp_path / "cache")
    preds = tmp_path / "run" / "predictions.jsonl"
    clean = audit_run(preds, tmp_path / "cache")
    assert clean.checked == 4 and clean.edited == () and audit_line(preds, clean, "infer@b") is None
    _edit(preds)
    found = audit_run(preds, tmp_path / "cache")
    assert found.edited == ("clip_000",)
    line = audit_line(preds, found, "infer@b")
    assert "1 of 4 record(s)" in line and "edited after the run" in line and "infer@b" in line
    # A reply the cache does not hold (knn's, a sampled one) cannot be checked: counted, not judged
    (tmp_path / "empty").mkdir()
    unknown = audit_run(preds, tmp_path / "empty")
    assert unknown.checked == 0 and unknown.unchecked == 4 and unknown.edited == ()
