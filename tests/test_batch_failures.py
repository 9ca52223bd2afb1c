"""Batch mode when things go wrong: an expired job, requests failing inside a batch, a
provider refusing audio in batch, a cancelled job, a changed prompt while jobs are out.
Every clip ends answered exactly once; no clip is lost or paid twice."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from fake_batch import BatchRequest, FakeBatchService, FakeJob, Result
from test_batch_runs import answer, cli, lines, make_clips, run, run_until_done, settings

from agl.cli import main
from agl.errors import AglError
from agl.inference.batch.report import pending
from agl.prompts import Prompt

APIS = ["openai", "gemini"]


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-BATCH-0123456789abcdef")
    monkeypatch.setenv("GEMINI_API_KEY", "gm-test-BATCH-0123456789abcdef")


def first_job_expires_with_two_answered(job: FakeJob) -> None:
    first_job_expires_with_two_answered.n = getattr(first_job_expires_with_two_answered, "n", 0) + 1
    if first_job_expires_with_two_answered.n == 1:
        job.fate, job.answered_before_end = "expire", 2


def sid_of(sha: str, audio: Path, n: int) -> str:
    import hashlib

    for i in range(n):
        key = f"clip_{i:03d}"
        if hashlib.sha256((audio / key / "a.wav").read_bytes()).hexdigest() == sha:
            return key
    raise KeyError(sha)


@pytest.mark.parametrize("api", APIS)
def test_an_expired_job_and_failed_requests_fall_back_and_every_clip_is_answered_once(
        tmp_path, api):
    manifest, audio = make_clips(tmp_path, 12)
    broken = {"clip_007", "clip_010"}  # their batch requests fail; synchronous calls work
    first_job_expires_with_two_answered.n = 0

    def flaky(req: BatchRequest) -> Result:
        if req.custom_id in broken:
            return Result(error=(400, "Audio could not be processed in this batch"))
        return answer(req)

    out = tmp_path / "run"
    with FakeBatchService(flaky, plan=first_job_expires_with_two_answered) as svc:
        s = settings(api, svc.url, probe=False, max_requests=6)
        passes = run_until_done(api, manifest, audio, out, tmp_path / "cache", s)
        assert len(passes) == 2  # submit; collect, fall back and answer synchronously
        assert len(svc.jobs) == 2 and set(svc.submitted().values()) == {1}
        by_sync = {sid_of(r.audio_sha256[0], audio, 12) for r in svc.sync_requests}
    assert len(svc.billed) == 12 and set(svc.billed.values()) == {1}  # each paid once
    records = {r["sample_id"]: r for r in lines(out)}
    assert len(records) == 12 and {r["status"] for r in records.values()} == {"ok"}
    expired = {sid for sid, r in records.items()
               if "expired" in (r["meta"].get("batch_fallback") or "")}
    failed = {sid for sid, r in records.items()
              if "batch request failed" in (r["meta"].get("batch_fallback") or "")}
    assert len(expired) == 4 and failed == broken  # 6 in the first job, 2 answered
    assert by_sync == expired | broken
    assert all(records[s]["meta"]["answered_by"] == "sync" for s in by_sync)
    assert "Audio could not be processed" in records["clip_007"]["meta"]["batch_fallback"]
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["batch"]["answered_by"] == {"batch": 6, "sync": 6, "cache": 0}
    assert set(summary["batch"]["fallback_reasons"]) == by_sync
    assert summary["complete"]


@pytest.mark.parametrize("api", APIS)
def test_fallback_batch_puts_an_expired_jobs_clips_into_a_new_job(tmp_path, api):
    manifest, audio = make_clips(tmp_path, 6)
    first_job_expires_with_two_answered.n = 0
    out = tmp_path / "run"
    with FakeBatchService(answer, plan=first_job_expires_with_two_answered) as svc:
        s = settings(api, svc.url, probe=False, fallback="batch")
        passes = run_until_done(api, manifest, audio, out, tmp_path / "cache", s)
        assert len(passes) == 3 and len(svc.jobs) == 2 and svc.sync_requests == []
        assert sorted(Counter(svc.submitted().values()).items()) == [(1, 2), (2, 4)]
    assert len(svc.billed) == 6 and set(svc.billed.values()) == {1}
    assert {r["meta"]["answered_by"] for r in lines(out)} == {"batch"}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("how", ["probe-job-fails", "create-refused"])
def test_a_provider_refusing_audio_in_batch_gets_one_line_and_a_synchronous_run(
        tmp_path, api, how, capsys):
    manifest, audio = make_clips(tmp_path, 8)

    def refuse(job: FakeJob) -> None:
        job.fate, job.fail_message = "fail", "audio input is not supported in batch mode"

    out = tmp_path / "run"
    with FakeBatchService(answer, plan=refuse) as svc:
        if how == "create-refused":
            svc.reject_create = (400, "audio input is not supported in batch mode")
        passes = run_until_done(api, manifest, audio, out, tmp_path / "cache",
                                settings(api, svc.url))
        assert len(passes) == (2 if how == "probe-job-fails" else 1)
        assert len(svc.sync_requests) == 8
        # Later runs go straight to the synchronous path (nothing left to do here).
        assert len(svc.jobs) == (1 if how == "probe-job-fails" else 0)
    said = [x for x in capsys.readouterr().err.splitlines() if "running synchronously" in x]
    assert len(said) == 1 and said[0].startswith("batch: ") and api in said[0]
    assert len(svc.billed) == 8 and set(svc.billed.values()) == {1}
    records = lines(out)
    assert {r["status"] for r in records} == {"ok"}
    assert all("batch not accepted" in r["meta"]["batch_fallback"] for r in records)
    state = json.loads((out / "batch_state.json").read_text())
    assert state["rejected"] and state["probe"]["status"] == "rejected"


@pytest.mark.parametrize("api", APIS)
def test_status_cancel_and_the_run_that_collects_a_cancelled_job(tmp_path, api, capsys):
    manifest, audio = make_clips(tmp_path, 6)
    out, cache = tmp_path / "run", tmp_path / "cache"

    def hang(job: FakeJob) -> None:
        job.fate, job.answered_before_end = "hang", 1

    with FakeBatchService(answer, plan=hang) as svc:
        args = cli(api, svc.url, manifest, audio, out, cache, "--setting",
                   "batch={probe: false, max_requests: 3}")[3:]  # after `python -m agl.cli`
        assert main(args + ["--batch"]) == 75  # submitted; nothing finished
        assert "rerun the same command later" in capsys.readouterr().err

        assert main(args) == 2  # a synchronous run now would pay for the clips twice
        assert "batch job(s) holding 6 clip(s) are live" in capsys.readouterr().err

        assert main(args + ["--batch-status"]) == 0
        status = capsys.readouterr().out.splitlines()
        jobs = [x for x in status if x.startswith("  ") and "clip(s)" in x and "age" in x]
        assert len(jobs) == 2 and all("3 clip(s)" in x for x in jobs)
        assert all(("in_progress" if api == "openai" else "JOB_STATE_RUNNING") in x for x in jobs)

        assert main(args + ["--batch-cancel"]) == 0
        assert capsys.readouterr().out.count("cancel requested") == 2
        assert main(args + ["--batch"]) == 0  # collects 1 + 1, the other 4 synchronously
        assert len(svc.sync_requests) == 4
    assert len(svc.billed) == 6 and set(svc.billed.values()) == {1}
    records = lines(out)
    assert Counter(r["meta"]["answered_by"] for r in records) == {"batch": 2, "sync": 4}
    assert all("cancelled" in r["meta"]["batch_fallback"] for r in records
               if r["meta"]["answered_by"] == "sync")


@pytest.mark.parametrize("api", APIS)
def test_a_job_of_an_earlier_prompt_is_cached_not_recorded_under_the_new_one(tmp_path, api):
    """A job's requests carry the prompt they were built with; when the run's prompt has
    changed by the time the job ends, its answers go to the cache (they were paid for)
    and not into the new prompt's records."""
    manifest, audio = make_clips(tmp_path, 4)
    out, cache = tmp_path / "run", tmp_path / "cache"
    other = Prompt("test-other", "Where was this recorded? Answer in JSON.", "test")
    with FakeBatchService(answer) as svc:
        s = settings(api, svc.url, probe=False)
        assert pending(run(api, manifest, audio, out, cache, s))  # default prompt: job A
        second = run(api, manifest, audio, out, cache, s, prompt=other)  # A ends; job B
        assert second["n_recorded"] == 0 and second["batch_in_flight"]["clips"] == 4
        third = run(api, manifest, audio, out, cache, s)  # default again: B ends (cached)
        assert not pending(third) and len(svc.jobs) == 2 and svc.sync_requests == []
    assert len(svc.billed) == 4 and set(svc.billed.values()) == {2}  # once per prompt
    records = lines(out)
    assert {r["meta"]["prompt"] for r in records} == {"geo-json-v1"}
    assert {r["meta"]["answered_by"] for r in records} == {"cache"}  # A's answers


def test_dry_run_shows_the_synchronous_and_the_batch_price(tmp_path, capsys):
    manifest, audio = make_clips(tmp_path, 3)
    args = cli("openai", "http://127.0.0.1:9", manifest, audio, tmp_path / "run",
               tmp_path / "cache")[3:]
    assert main(args + ["--dry-run", "--batch"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("dry run: openai:fake: 3 request(s)")
    cost = float(out[0].rsplit("$", 1)[1])
    # (between them, the long-audio protocol's line: agl.inference.estimate)
    assert out[-1] == (f"dry run: ${cost:.4f} synchronously, ${cost / 2:.4f} through the batch "
                      "API (x0.5); this run is mode batch")


@pytest.mark.parametrize("bad, message", [
    ({"mode": "fast"}, "settings.mode: 'fast' is not a mode"),
    ({"mode": "batch", "batch": {"probes": True}}, "settings.batch: unknown key(s) probes"),
    ({"mode": "batch", "batch": {"fallback": "drop"}}, "settings.batch.fallback: 'drop'"),
    ({"mode": "batch", "batch": {"max_requests": 0}},
     "settings.batch max_requests: 0 is not null or a whole number of at least 1; e.g. `max_requests: null`"),
    ({"mode": "batch", "batch": {"price_factor": -1}},
     "settings.batch price_factor: -1 is not a finite number, 0 or more; e.g. `price_factor: 0.5`"),
])
def test_bad_batch_settings_are_one_line(tmp_path, bad, message, capsys):
    manifest, audio = make_clips(tmp_path, 1)
    args = cli("openai", "http://127.0.0.1:9", manifest, audio, tmp_path / "run",
               tmp_path / "cache")[3:]
    assert main(args + [f"--setting={k}={json.dumps(v)}" for k, v in bad.items()]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_batch_mode_is_refused_for_a_backend_without_a_batch_api():
    from agl.inference.batch.options import batch_options

    with pytest.raises(AglError, match="batch is for the gemini and openai backends"):
        batch_options("openai-compatible", {"mode": "batch"})


def test_the_dvc_stage_exits_75_while_clips_are_out_then_0(tmp_path, monkeypatch):
    import yaml

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "stages"))
    import infer as stage  # stages/infer.py

    manifest, audio = make_clips(tmp_path, 4)
    with FakeBatchService(answer) as svc:
        params = {"infer": {"cache_dir": str(tmp_path / "cache"), "timeout_s": 30},
                  "models": {"gem": {"backend": "gemini", "model": "fake",
                                     "settings": settings("gemini", svc.url),
                                     "price_in_per_m": 2.0, "price_out_per_m": 10.0}}}
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
        argv = ["--name", "gem", "--manifest", str(manifest), "--audio-root", str(audio),
                "--out", str(tmp_path / "build" / "gem"), "--params", str(tmp_path / "params.yaml"),
                "--telemetry", str(tmp_path / "telemetry.json")]
        codes = [stage.main(argv) for _ in range(3)]
        assert stage.main(argv + ["--batch-status"]) == 0
    assert codes == [75, 75, 0]  # probe out; the rest out; all collected
    summary = json.loads((tmp_path / "build" / "gem" / "run_summary.json").read_text())
    assert summary["complete"] and summary["batch"]["answered_by"]["batch"] == 4


@pytest.mark.parametrize("api", APIS)
def test_a_key_quoted_by_the_provider_is_written_nowhere(tmp_path, api, capsys):
    """A provider error that echoes the key (a request error, a failed job) reaches no
    record, summary, state file or log line."""
    import os

    key = os.environ["OPENAI_API_KEY" if api == "openai" else "GEMINI_API_KEY"]
    manifest, audio = make_clips(tmp_path, 3)

    def leaky(req: BatchRequest) -> Result:
        if req.custom_id == "clip_001":
            return Result(error=(400, f"bad request from key {key}"))
        return answer(req)

    def fail_second(job: FakeJob) -> None:
        if len(job.requests) == 1:  # the job after the probe fails, quoting the key
            job.fate, job.fail_message = "fail", f"rejected for key {key}"

    out = tmp_path / "run"
    with FakeBatchService(leaky, plan=fail_second) as svc:
        run_until_done(api, manifest, audio, out, tmp_path / "cache", settings(api, svc.url))
    written = "".join(p.read_text() for p in out.iterdir() if p.is_file())
    logged = capsys.readouterr()
    assert "[redacted]" in written and key not in written
    assert key not in logged.out + logged.err
    assert {r["status"] for r in lines(out)} == {"ok"}


def test_jobs_are_split_by_size_and_a_request_over_the_file_limit_goes_synchronous(tmp_path):
    """OpenAI request lines carry their audio as base64: a request file is cut where the next
    line would pass `max_bytes`, and a single request larger than that runs synchronously."""
    import numpy as np
    import soundfile as sf

    manifest, audio = make_clips(tmp_path, 7)  # ~5.6 kB per request line
    big = audio / "clip_003" / "a.wav"
    sf.write(big, np.random.default_rng(99).uniform(-0.1, 0.1, 16000), 16000)  # ~43 kB line
    out = tmp_path / "run"
    with FakeBatchService(answer) as svc:
        s = settings("openai", svc.url, probe=False, max_bytes=12_000)
        run_until_done("openai", manifest, audio, out, tmp_path / "cache", s)
        sizes = sorted(len(j.requests) for j in svc.jobs.values())
        assert sizes == [2, 2, 2] and len(svc.sync_requests) == 1
        assert all(5_000 < j.input_bytes <= 12_000 for j in svc.jobs.values())
        assert all(j.input_file not in svc.files for j in svc.jobs.values())  # cleaned up
    records = {r["sample_id"]: r for r in lines(out)}
    assert {r["status"] for r in records.values()} == {"ok"}
    assert records["clip_003"]["meta"]["answered_by"] == "sync"
    assert "exceeds the batch file limit" in records["clip_003"]["meta"]["batch_fallback"]


@pytest.mark.parametrize("age_s, held", [(30, True), (3600, False)])
def test_a_job_record_the_provider_never_saw(tmp_path, age_s, held, capsys):
    """A record saved just before a create that never reached the provider (the process died
    in between): while young it keeps its clips held (a list may lag a create); once older
    than the grace period its clips go back to the queue and are submitted once."""
    import time

    from agl.inference.batch import state as state_mod
    from agl.inference.model_run import run_fingerprint

    manifest, audio = make_clips(tmp_path, 3)
    out = tmp_path / "run"
    with FakeBatchService(answer) as svc:
        s = settings("openai", svc.url, probe=False)
        fp = run_fingerprint("openai", "fake", s, load_prompt_sha())
        state = state_mod.BatchState("openai", "fake", fp, jobs=[state_mod.Job(
            tag="agl-0-lost", provider="openai", created=time.time() - age_s, fingerprint=fp,
            clips={"clip_000": {"key": None, "audio_sha256": None}})])
        state_mod.save(out, state)
        first = run("openai", manifest, audio, out, tmp_path / "cache", s)
        err = capsys.readouterr().err
        if held:
            assert "not listed by the provider yet" in err
            assert first["batch_in_flight"]["clips"] == 3  # 1 held + 2 submitted
            assert "clip_000" not in svc.submitted()
        else:
            assert "was never created" in err
            run_until_done("openai", manifest, audio, out, tmp_path / "cache", s)
            assert set(svc.submitted().values()) == {1} and len(svc.submitted()) == 3


def load_prompt_sha() -> str:
    from agl.prompts import load_prompt

    return load_prompt().sha256


class _LosesResults(dict):
    """The service's file store, dropping every result file it is given: the job says where
    its results are, and that file answers 404 (a provider that lost it)."""

    def __setitem__(self, fid, value):
        if value.get("purpose") != "batch_output":
            super().__setitem__(fid, value)


def test_a_job_whose_results_stay_unreadable_falls_back_after_its_tries(tmp_path, capsys):
    """A finished job whose result file answers 404: two passes say so and wait; the third
    gives it up, and its clips are asked synchronously (they once exited 75 on every pass)."""
    manifest, audio = make_clips(tmp_path, 6)
    out = tmp_path / "run"
    with FakeBatchService(answer) as svc:
        svc.files = _LosesResults()
        s = settings("openai", svc.url, probe=False, result_tries=3)
        passes = run_until_done("openai", manifest, audio, out, tmp_path / "cache", s)
        assert len(svc.jobs) == 1 and len(svc.sync_requests) == 6
    said = capsys.readouterr().err
    assert said.count("try 1 of 3") == 1 and said.count("try 2 of 3") == 1, said
    assert said.count("in 3 passes") == 1 and "given up: its clips fall back" in said, said
    assert len(passes) == 4  # submit (and poll); two unreadable; given up and asked synchronously
    records = lines(out)
    assert len(records) == 6 and {r["status"] for r in records} == {"ok"}
    assert all(r["meta"]["answered_by"] == "sync" for r in records)
    assert all("results could not be read" in r["meta"]["batch_fallback"] for r in records)
    assert not (out / "batch_state.json").exists() or not json.loads(
        (out / "batch_state.json").read_text())["jobs"]
