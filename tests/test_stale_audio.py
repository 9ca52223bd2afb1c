"""A prediction is never kept for audio that is gone or changed (issue 23).

A run keeps its finished records across reruns; each record of a model that listens carries
the SHA-256 of the audio it was made from (`meta.audio_sha256`), and a rerun drops (and asks
again) every record whose clip's audio is gone or is no longer that audio, judged by the
dataset's lock (data/lock.json) where it has the clip. A backend whose answer for one clip
depends on the other clips (knn, prior) keeps its records only while the whole dataset is
unchanged. The real openai SDK runs against a fake server on 127.0.0.1, which counts requests.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from fake_llm import Answer, FakeServer, openai_completion
from helpers import REPO, subprocess_env
from test_inference_api import GOOD, make_clips

from agl.contracts.models import ModelSpec
from agl.dataset.checksums import file_digest, read_lock, write_lock
from agl.dataset.manifest import clips, load_manifest
from agl.errors import AglError
from agl.inference.model_run import run_inference
from agl.inference.runner import Backoff, RunOptions
from agl.predictions.records import read_predictions
from agl.prompts import load_prompt

FAST = Backoff(base_s=0.001, cap_s=0.01)


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-OPENAI-0123456789abcdef")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rewrite_audio(path: Path, freq: float = 911.0, seconds: float = 0.1) -> None:
    import soundfile as sf

    t = np.arange(int(16000 * seconds)) / 16000
    sf.write(path, 0.2 * np.sin(2 * np.pi * freq * t), 16000)


class Dataset:
    """data/'s layout in a temp folder: manifest.csv, audio/<key>/a.wav, lock.json."""

    def __init__(self, root: Path, n: int = 3, lock: bool = True):
        self.root = root
        self.manifest, self.audio = make_clips(root, n)
        self.lock = root / "lock.json"
        if lock:
            self.relock()

    def relock(self) -> None:
        write_lock(self.lock, {f"{p.parent.name}/{p.name}": file_digest(p)
                               for p in sorted(self.audio.glob("*/*.wav"))})

    def clips(self):
        return clips(load_manifest(self.manifest))


def run(ds: Dataset, out: Path, backend: str = "openai", *, cache: Path | None = None,
        model: str = "fake-audio-model", settings: dict | None = None):
    with FakeServer(lambda call: Answer(200, openai_completion(GOOD))) as server:
        spec = ModelSpec("run", backend, model, settings=settings if settings is not None else
                         {"base_url": server.url + "/v1", "temperature": 0})
        summary = run_inference(spec, load_prompt(), ds.clips(), out_dir=out,
                                audio_root=ds.audio,
                                options=RunOptions(cache_dir=cache, progress=False, backoff=FAST))
    return summary, len(server.calls)


def test_each_record_carries_the_sha256_of_the_audio_it_was_made_from(tmp_path):
    ds = Dataset(tmp_path / "data")
    run(ds, tmp_path / "run")
    preds = read_predictions(tmp_path / "run" / "predictions.jsonl")
    for c in ds.clips():
        assert preds[c.key].meta["audio_sha256"] == sha(ds.audio / c.relpath)


def test_a_clip_whose_audio_is_deleted_loses_its_record_and_the_rerun_says_what_to_do(tmp_path, capfd):
    ds = Dataset(tmp_path / "data")
    out = tmp_path / "run"
    run(ds, out)
    (ds.audio / "clip_001" / "a.wav").unlink()
    # On main the rerun made no request and kept the old `ok` record, which was then scored.
    with pytest.raises(AglError) as err:
        run(ds, out)
    assert "clip_001" in str(err.value) and "agl download" in str(err.value)
    assert "clip_001" not in read_predictions(out / "predictions.jsonl")
    assert "1 record(s) dropped: audio gone (e.g. clip_001)" in capfd.readouterr().err


def test_a_clip_whose_audio_changed_is_asked_again_alone(tmp_path, capfd):
    ds = Dataset(tmp_path / "data", lock=False)  # no lock: the files themselves are hashed
    out = tmp_path / "run"
    _, calls = run(ds, out)
    assert calls == 3
    rewrite_audio(ds.audio / "clip_002" / "a.wav")
    summary, calls = run(ds, out)
    assert calls == 1 and summary["n_ok"] == 3  # on main: 0 requests, the old answer kept
    assert "audio changed since it was asked (e.g. clip_002)" in capfd.readouterr().err
    rec = read_predictions(out / "predictions.jsonl")["clip_002"]
    assert rec.meta["audio_sha256"] == sha(ds.audio / "clip_002" / "a.wav")


def test_a_lock_entry_that_changed_re_asks_its_clip_even_through_the_cache(tmp_path):
    ds = Dataset(tmp_path / "data")
    out, cache = tmp_path / "run", tmp_path / "cache"
    _, calls = run(ds, out, cache=cache)
    assert calls == 3
    rewrite_audio(ds.audio / "clip_000" / "a.wav", freq=1234.0)
    ds.relock()  # `agl download` fetched a new version of the clip and recorded it
    _, calls = run(ds, out, cache=cache)
    assert calls == 1  # the cache is keyed by the audio: the new bytes are a new request
    _, calls = run(ds, out, cache=cache)
    assert calls == 0  # nothing changed since


def test_audio_that_differs_from_its_lock_entry_is_an_error_naming_the_clip(tmp_path):
    ds = Dataset(tmp_path / "data")
    out = tmp_path / "run"
    run(ds, out)
    rewrite_audio(ds.audio / "clip_001" / "a.wav", seconds=0.3)  # edited, lock not updated
    with pytest.raises(AglError) as err:
        run(ds, out)
    msg = str(err.value)
    assert "clip_001/a.wav" in msg and "lock.json" in msg and "agl download" in msg
    assert read_lock(ds.lock)  # untouched


def test_records_without_an_audio_hash_are_asked_again(tmp_path, capfd):
    ds = Dataset(tmp_path / "data")
    out, cache = tmp_path / "run", tmp_path / "cache"
    run(ds, out, cache=cache)
    path = out / "predictions.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        r["meta"].pop("audio_sha256")  # as written before audio hashes were kept
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary, calls = run(ds, out, cache=cache)
    assert calls == 0 and summary["n_ok"] == 3  # answered again from the response cache
    assert "3 record(s) dropped: made before audio hashes were kept" in capfd.readouterr().err
    assert all("audio_sha256" in p.meta for p in read_predictions(path).values())


def test_knn_answers_depend_on_every_clip_so_one_changed_clip_re_asks_all(tmp_path):
    ds = Dataset(tmp_path / "data", n=4)
    out = tmp_path / "run"
    first = run(ds, out, "knn", model="logmel", settings={"k": 1})[0]
    assert first["session_requests"] == 4
    before = (out / "predictions.jsonl").read_bytes()
    again = run(ds, out, "knn", model="logmel", settings={"k": 1})[0]
    # knn computes offline at no cost: a rerun answers every clip again (an output is
    # derived, never trusted: agl.inference.model_run._rederive), to the same bytes.
    assert again["session_requests"] == 4 and (out / "predictions.jsonl").read_bytes() == before
    rewrite_audio(ds.audio / "clip_003" / "a.wav", freq=3000.0)
    ds.relock()
    third = run(ds, out, "knn", model="logmel", settings={"k": 1})[0]
    assert third["session_requests"] == 4  # each answer may have had clip_003 as neighbour


def test_prior_is_asked_again_when_the_manifest_labels_change(tmp_path):
    ds = Dataset(tmp_path / "data", n=3)
    out, cache = tmp_path / "run", tmp_path / "cache"
    run(ds, out, "prior", model="top-country-centroid", settings={}, cache=cache)
    text = ds.manifest.read_text().replace("Germany", "Austria").replace("Berlin", "Vienna")
    ds.manifest.write_text(text)
    summary = run(ds, out, "prior", model="top-country-centroid", settings={}, cache=cache)[0]
    assert summary["session_requests"] == 3
    countries = {p.country for p in read_predictions(out / "predictions.jsonl").values()}
    assert countries == {"Austria"}  # on main: the cached "Germany", per clip


def test_the_infer_stage_fails_for_a_deleted_clip_and_nothing_stale_is_left(tmp_path):
    """The issue's scenario: one clip's audio deleted, then `dvc repro` (the infer stage)."""
    ds = Dataset(tmp_path / "data", n=4)
    params = tmp_path / "params.yaml"
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["infer"]["cache_dir"] = None
    params.write_text(yaml.safe_dump(doc))
    out = tmp_path / "runs" / "knn"
    cmd = [sys.executable, str(REPO / "stages" / "infer.py"), "--name", "knn", "--manifest",
           str(ds.manifest), "--audio-root", str(ds.audio), "--out", str(out), "--params",
           str(params)]
    env = subprocess_env()
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (ds.audio / "clip_002" / "a.wav").unlink()
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert again.returncode != 0 and "Traceback" not in again.stderr
    last = again.stderr.strip().splitlines()[-1]
    assert "error:" in last and "clip_002" in last and "agl download" in last
    assert "clip_002" not in read_predictions(out / "predictions.jsonl")


def test_the_filter_stage_refuses_a_clip_that_the_lock_lists_and_the_disk_lost(tmp_path):
    """On main the filter wrote a `missing` row and exited 0, and `dvc repro` went on."""
    ds = Dataset(tmp_path / "data", n=3)
    (ds.audio / "clip_001" / "a.wav").unlink()
    r = subprocess.run(
        [sys.executable, str(REPO / "stages" / "filter.py"), "--manifest", str(ds.manifest),
         "--audio-root", str(ds.audio), "--out", str(tmp_path / "f.csv"), "--summary",
         str(tmp_path / "s.json"), "--params", str(REPO / "params.yaml")],
        capture_output=True, text=True, cwd=tmp_path,
        env=subprocess_env())
    assert r.returncode != 0 and "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "clip_001/a.wav" in last and "lock.json" in last and "agl download" in last
    assert not (tmp_path / "f.csv").exists()
