"""Batch mode end to end, through the real openai and google-genai SDKs against fake batch
services (tests/fake_batch.py): a 300-clip run over several passes equals the synchronous
run, at half its cost, through the same cache; a kill -9 between submit and poll resumes
without submitting anything twice."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_batch import BatchRequest, FakeBatchService, FakeJob, Result
from fake_llm import gemini_response, openai_completion
from helpers import subprocess_env
from test_inference_api import FAST

from agl.contracts.models import ModelSpec
from agl.dataset.manifest import clips, load_manifest
from agl.inference.model_run import run_inference
from agl.inference.runner import RunOptions
from agl.prompts import load_prompt

REPO = Path(__file__).resolve().parents[1]
# Run-specific bookkeeping that differs between a batch and a synchronous run by design:
# the price (half) and who answered. Everything else in a record must be the same bytes.
BOOKKEEPING = ("cost_usd", "answered_by", "batch_fallback")


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-BATCH-0123456789abcdef")
    monkeypatch.setenv("GEMINI_API_KEY", "gm-test-BATCH-0123456789abcdef")


def make_clips(root: Path, n: int) -> tuple[Path, Path]:
    """A manifest of n clips, each 0.1 s of its own seeded noise (audio root = root/audio)."""
    import numpy as np
    import pandas as pd
    import soundfile as sf

    from agl.dataset.manifest import CATEGORY_COLUMNS, write_manifest

    rows = []
    for i in range(n):
        key = f"clip_{i:03d}"
        (root / "audio" / key).mkdir(parents=True, exist_ok=True)
        noise = np.random.default_rng(i).uniform(-0.1, 0.1, 1600)
        sf.write(root / "audio" / key / "a.wav", noise, 16000)
        rows.append({"key": key, "longitude": -170.0 + i % 340, "latitude": 50.0,
                     "mp3name": "a.wav", "mp3seconds": 0.1, "city": "Berlin",
                     "country": "Germany", "continent": "Europe",
                     **{c: 0.0 for c in CATEGORY_COLUMNS}})
    manifest = root / "manifest.csv"
    write_manifest(pd.DataFrame(rows), manifest)
    return manifest, root / "audio"


def reply_text(sha: str) -> str:
    """A different, parseable answer per clip (by its audio), so a reply given to the wrong
    clip shows."""
    n = int(sha[:8], 16)
    return json.dumps({"reasoning": f"heard clip {sha[:10]}", "city": f"Town{n % 997}",
                       "country": "Germany", "continent": "Europe",
                       "latitude": round((n % 17000) / 100 - 85, 2),
                       "longitude": round((n // 17000 % 36000) / 100 - 180, 2),
                       "confidence": 0.5})


def answer(req: BatchRequest) -> Result:
    text = reply_text(req.audio_sha256[0])
    return Result(openai_completion(text) if "messages" in req.body else gemini_response(text))


def api_of(variant: str) -> str:
    return variant.split("-")[0]


def settings(variant: str, url: str, *, mode: str = "batch", **batch) -> dict:
    api = api_of(variant)
    s = ({"base_url": url + "/v1", "temperature": 0} if api == "openai"
         else {"base_url": url, "api_version": "v1beta", "temperature": 0})
    if variant == "gemini-file":
        batch.setdefault("inline_max_bytes", 0)  # every job a request file, results a file
    if mode == "batch":
        s.update(mode="batch", batch=batch)
    return s


def run(variant: str, manifest: Path, audio: Path, out: Path, cache: Path, s: dict,
        prompt=None) -> dict:
    spec = ModelSpec(name=out.name, backend=api_of(variant), model="fake", settings=s,
                     price_in_per_m=2.0, price_out_per_m=10.0)
    options = RunOptions(cache_dir=cache, concurrency=8, timeout_s=30, max_retries=0,
                         progress=False, backoff=FAST)
    return run_inference(spec, prompt or load_prompt(), clips(load_manifest(manifest)),
                         out_dir=out, audio_root=audio, options=options)


def run_until_done(variant, manifest, audio, out, cache, s, max_passes=10) -> list[dict]:
    from agl.inference.batch.report import pending

    summaries = []
    for _ in range(max_passes):
        summaries.append(run(variant, manifest, audio, out, cache, s))
        if not pending(summaries[-1]):
            return summaries
    raise AssertionError(f"not done after {max_passes} passes: {summaries[-1]['batch_in_flight']}")


def lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]


def without_bookkeeping(records: list[dict]) -> list[str]:
    from agl.core import canonical

    out = []
    for r in records:
        r = copy.deepcopy(r)
        for k in BOOKKEEPING:
            r["meta"].pop(k, None)
        out.append(canonical.jsonl_line(r))
    return out


def staggered(job: FakeJob) -> None:
    """Jobs finish on their 1st, 2nd, 3rd poll in turn: the run completes over passes."""
    staggered.n = getattr(staggered, "n", 0) + 1
    job.ready_after = 1 + staggered.n % 3


def the_request(body: dict) -> dict:
    """A request body with its audio reference taken out (inline bytes in a synchronous
    Gemini call, a Files API URI in a batch one): the rest must be identical."""
    body = copy.deepcopy(body)
    for c in body.get("contents", []):
        c["parts"] = [p for p in c["parts"] if not ({"inlineData", "fileData", "inline_data",
                                                    "file_data"} & set(p))]
    return body


@pytest.mark.parametrize("variant", ["openai", "gemini", "gemini-file"])
def test_300_clips_over_several_passes_equal_the_synchronous_run_at_half_the_cost(
        tmp_path, variant):
    n = 300 if variant != "gemini-file" else 60
    manifest, audio = make_clips(tmp_path, n)
    batch_out, sync_out, again_out = tmp_path / "batch", tmp_path / "sync", tmp_path / "again"
    with FakeBatchService(answer, plan=staggered) as svc:
        passes = run_until_done(variant, manifest, audio, batch_out, tmp_path / "cache",
                                settings(variant, svc.url, max_requests=n // 3))
        assert len(passes) >= 3  # probe, then jobs finishing on different polls
        assert passes[0]["batch_in_flight"]["clips"] == 2  # the probe holds two clips
        submitted = svc.submitted()
        assert len(submitted) == n and set(submitted.values()) == {1}  # each clip in one job
        assert len(svc.billed) == n and set(svc.billed.values()) == {1}
        assert len(svc.jobs) >= 4 and svc.sync_requests == []
        batch_bodies = {r.audio_sha256[0]: r.body for j in svc.jobs.values() for r in j.requests}

        # The synchronous run of the same clips, with its own cache.
        run(variant, manifest, audio, sync_out, tmp_path / "cache-sync",
            settings(variant, svc.url, mode="sync"))
        assert len(svc.sync_requests) == n
        # Each batch request is the synchronous request (prompt, settings; the same audio).
        for req in svc.sync_requests:
            assert the_request(batch_bodies[req.audio_sha256[0]]) == the_request(req.body)

        # The batch replies went into the same content-addressed cache: a synchronous run
        # on the batch run's cache asks nothing.
        calls = len(svc.calls)
        run(variant, manifest, audio, again_out, tmp_path / "cache",
            settings(variant, svc.url, mode="sync"))
        assert len(svc.calls) == calls

    batch, sync = lines(batch_out), lines(sync_out)
    assert [r["sample_id"] for r in batch] == [f"clip_{i:03d}" for i in range(n)]
    assert {r["status"] for r in batch} == {"ok"}
    assert without_bookkeeping(batch) == without_bookkeeping(sync)  # byte for byte
    assert without_bookkeeping(lines(again_out)) == without_bookkeeping(sync)
    assert {r["meta"]["answered_by"] for r in batch} == {"batch"}
    assert all(b["meta"]["cost_usd"] == pytest.approx(s["meta"]["cost_usd"] / 2)
               for b, s in zip(batch, sync, strict=True))

    summary_b = json.loads((batch_out / "run_summary.json").read_text())
    summary_s = json.loads((sync_out / "run_summary.json").read_text())
    assert summary_b["cost_usd"] == pytest.approx(summary_s["cost_usd"] / 2)
    assert summary_b["cost_usd"] > 0 and summary_b["complete"]
    assert summary_b["batch"]["answered_by"] == {"batch": n, "sync": 0, "cache": 0}
    assert summary_b["batch"]["clips"]["batch"] == [f"clip_{i:03d}" for i in range(n)]
    assert "batch_in_flight" not in summary_b  # a timing: kept out of the DVC output
    assert summary_b["run_fingerprint"] == summary_s["run_fingerprint"]
    state = json.loads((batch_out / "batch_state.json").read_text())
    assert state["jobs"] == [] and state["probe"]["status"] == "accepted"


def cli(variant: str, url: str, manifest: Path, audio: Path, out: Path, cache: Path,
        *extra: str) -> list[str]:
    api = api_of(variant)
    cmd = [sys.executable, "-m", "agl.cli", "infer", "--backend", api, "--model", "fake",
           "--manifest", str(manifest), "--audio-root", str(audio), "--out", str(out),
           "--cache-dir", str(cache), "--retries", "0", "--timeout", "30", "--no-progress",
           "--setting", "temperature=0", "--price-in", "2", "--price-out", "10", *extra]
    if api == "gemini":
        return cmd + ["--base-url", url, "--setting", "api_version=v1beta"]
    return cmd + ["--base-url", url + "/v1"]


def env() -> dict:
    return subprocess_env(OPENAI_API_KEY="sk-test-BATCH-0123456789abcdef",
                          GEMINI_API_KEY="gm-test-BATCH-0123456789abcdef")


@pytest.mark.parametrize("variant", ["openai", "gemini"])
def test_kill_9_between_submit_and_poll_resumes_with_nothing_submitted_twice(tmp_path, variant):
    """Three jobs to submit; the process is killed while the second one is being created
    (the provider made it; the reply never came). The rerun finds that job by its tag,
    submits only the third one's clips, and collects all three."""
    manifest, audio = make_clips(tmp_path, 10)
    out, cache = tmp_path / "run", tmp_path / "cache"
    with FakeBatchService(answer) as svc:
        svc.hold_create_at = 2
        cmd = cli(variant, svc.url, manifest, audio, out, cache, "--batch",
                  "--setting", "batch={probe: false, max_requests: 4}")
        proc = subprocess.Popen(cmd, env=env(), stderr=subprocess.PIPE, cwd=tmp_path)
        deadline = time.monotonic() + 60
        while svc.creates < 2:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the second job was never created"
            time.sleep(0.02)  # a subprocess's progress: no event to wait on
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        state = json.loads((out / "batch_state.json").read_text())
        assert [j["job_id"] is None for j in state["jobs"]] == [False, True]  # 1 live, 1 unsure
        assert len(svc.jobs) == 2

        svc.hold_create_at = None
        logs = []
        for _ in range(5):
            done = subprocess.run(cmd, env=env(), capture_output=True, text=True, cwd=tmp_path,
                                  timeout=120)
            logs.append(done.stderr)
            if done.returncode == 0:
                break
            assert done.returncode == 75, done.stderr  # clips still out: come back later
        assert done.returncode == 0, done.stderr
    assert "found and resumed" in logs[0]
    assert len(svc.jobs) == 3
    submitted = svc.submitted()
    assert len(submitted) == 10 and set(submitted.values()) == {1}  # nothing submitted twice
    assert len(svc.billed) == 10 and set(svc.billed.values()) == {1}
    records = lines(out)
    assert len(records) == 10 and {r["status"] for r in records} == {"ok"}
    assert {r["meta"]["answered_by"] for r in records} == {"batch"}
