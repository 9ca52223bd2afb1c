"""A run killed with SIGKILL resumes without losing or repeating work; keys leak nowhere."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from fake_llm import Answer, FakeServer, gemini_response, openai_completion
from helpers import subprocess_env
from test_inference_api import GOOD, make_clips

REPO = Path(__file__).resolve().parents[1]
OPENAI_KEY = "sk-test-LEAKCHECK-9f8e7d6c5b4a3210"
GEMINI_KEY = "gm-test-LEAKCHECK-0123456789abcdef"


def infer_cmd(backend: str, url: str, manifest: Path, audio: Path, out: Path,
              cache: Path, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "agl.cli", "infer", "--backend", backend, "--model", "fake",
           "--manifest", str(manifest), "--audio-root", str(audio), "--out", str(out),
           "--cache-dir", str(cache), "--retries", "0", "--timeout", "30",
           "--setting", "temperature=0", *extra]
    if backend == "gemini":
        cmd += ["--base-url", url, "--setting", "api_version=v1beta"]
    else:
        cmd += ["--base-url", url + "/v1"]
    return cmd


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        time.sleep(0.02)  # polling a subprocess's file: no event to wait on
    raise AssertionError(f"{path} did not reach {n} lines in {timeout} s")


def test_sigkill_halfway_then_rerun_requests_each_finished_clip_once(tmp_path):
    manifest, audio = make_clips(tmp_path, 10)
    sha_to_key = {hashlib.sha256((audio / f"clip_{i:03d}" / "a.wav").read_bytes()).hexdigest():
                  f"clip_{i:03d}" for i in range(10)}
    answered: Counter = Counter()
    lock = threading.Lock()
    phase = {"hold_after": 5}

    def answer(call):
        key = sha_to_key[call.audio_sha256[0]]
        with lock:
            if sum(answered.values()) >= phase["hold_after"]:
                return Answer(hold=True)  # in flight when the kill comes: never answered
            answered[key] += 1
        return Answer(200, openai_completion(GOOD))

    out = tmp_path / "run"
    env = subprocess_env(OPENAI_API_KEY=OPENAI_KEY)
    with FakeServer(answer) as server:
        cmd = infer_cmd("openai", server.url, manifest, audio, out, tmp_path / "cache",
                        "--concurrency", "2", "--no-progress")
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, cwd=tmp_path)
        wait_for_lines(out / "predictions.jsonl", 5, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        first = [json.loads(x)["sample_id"]
                 for x in (out / "predictions.jsonl").read_text().splitlines()]
        assert len(first) == 5 and proc.returncode == -signal.SIGKILL

        phase["hold_after"] = 10**9
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp_path,
                              timeout=120)
        assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert sorted(r["sample_id"] for r in lines) == sorted(sha_to_key.values())  # once each
    assert all(r["status"] == "ok" for r in lines)
    for key in first:  # finished before the kill: never requested again
        assert answered[key] == 1
    assert sum(answered.values()) == 10
    summary = json.loads((out / "run_summary.json").read_text())
    timings = json.loads((out / "run_summary.timings.json").read_text())  # not hashed by DVC
    assert summary["n_ok"] == 10 and summary["complete"] and timings["session_requests"] == 5


def test_rerun_of_finished_run_makes_no_request(tmp_path):
    manifest, audio = make_clips(tmp_path, 3)
    env = subprocess_env(OPENAI_API_KEY=OPENAI_KEY)
    with FakeServer(lambda call: Answer(200, openai_completion(GOOD))) as server:
        cmd = infer_cmd("openai", server.url, manifest, audio, tmp_path / "run",
                        tmp_path / "cache", "--no-progress")
        for _ in range(2):
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
        assert len(server.calls) == 3
    assert "0 request(s) this time" in done.stderr


@pytest.mark.slow
def test_api_keys_appear_nowhere(tmp_path, monkeypatch):
    """Keys in the environment never reach predictions, summaries, cache, logs or MLflow,
    even when a server echoes the key back in an error message."""
    manifest, audio = make_clips(tmp_path, 3)
    env = subprocess_env(OPENAI_API_KEY=OPENAI_KEY, GEMINI_API_KEY=GEMINI_KEY,
                         MY_GATEWAY_KEY="gw-test-LEAKCHECK-55aa55aa55aa")

    def answer(call):
        if call.n % 3 == 0:  # a server that quotes the key it was given
            return Answer(401, {"error": {"code": 401, "status": "UNAUTHENTICATED",
                                          "message": f"bad key {OPENAI_KEY} {GEMINI_KEY}"}})
        return Answer(200, openai_completion(GOOD) if "chat" in call.path
                      else gemini_response(GOOD))

    logs = tmp_path / "logs"
    logs.mkdir()
    runs = []
    with FakeServer(answer) as server:
        for backend, extra in [("openai", []), ("gemini", []),
                               ("openai-compatible", ["--setting", "api_key_env=MY_GATEWAY_KEY"])]:
            out = tmp_path / "build" / backend
            cmd = infer_cmd(backend, server.url, manifest, audio, out, tmp_path / "cache", *extra)
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
            (logs / f"{backend}.log").write_text(done.stdout + done.stderr)
            assert done.returncode == 0, done.stderr
            runs.append(out)
        # The keys did travel to the server, so the search below is meaningful.
        sent = json.dumps([c.headers for c in server.calls])
        assert OPENAI_KEY in sent and GEMINI_KEY in sent and env["MY_GATEWAY_KEY"] in sent
    errors = [json.loads(x).get("error") or "" for r in runs
              for x in (r / "predictions.jsonl").read_text().splitlines()]
    assert any("[redacted]" in e for e in errors)

    # Track the runs the way the pipeline does: summary params/metrics, files as artifacts.
    monkeypatch.chdir(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    from agl.core.tracking import log_run

    for r in runs:
        summary = json.loads((r / "run_summary.json").read_text())
        log_run(run_key=f"leak-{r.name}", run_name=r.name, experiment="leakcheck",
                params={"backend": summary["backend"], "settings": summary["settings"]},
                metrics={k: v for k, v in summary.items() if isinstance(v, int | float)},
                artifacts=[r / "predictions.jsonl", r / "run_summary.json"])
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "mlflow.db" for p in files) and any("cache" in p.parts for p in files)
    for secret in (OPENAI_KEY, GEMINI_KEY, env["MY_GATEWAY_KEY"]):
        hits = [p for p in files if secret.encode() in p.read_bytes()]
        assert hits == [], f"key found in {hits}"
