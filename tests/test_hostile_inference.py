"""`agl infer` against a hostile server, broken audio and bad arguments (issue 14).

A key echoed anywhere is stored nowhere; a day-long Retry-After fails the clip instead of
stalling the run; a clip that does not decode is never sent; NaN is a missing value; a run
where nothing succeeded exits non-zero; nonsense arguments are refused in one line.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from fake_llm import Answer, FakeServer, openai_completion
from test_inference_api import make_clips

from agl.cli import main

KEY = "sk-DISTINCTIVE-c0ffee-LEAK-7f3a9b2e41d5"
GOOD = (
    '{"reasoning": "blackbird song", "city": "Berlin", "country": "Germany",'
    ' "continent": "Europe", "latitude": 52.52, "longitude": 13.40}'
)


@pytest.fixture(autouse=True)
def key_env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def infer(tmp_path: Path, url: str, manifest: Path, audio: Path, *extra: str, backend: str = "openai") -> int:
    return main(
        [
            "infer",
            "--backend",
            backend,
            "--model",
            "fake",
            "--manifest",
            str(manifest),
            "--audio-root",
            str(audio),
            "--out",
            str(tmp_path / "run"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--retries",
            "1",
            "--timeout",
            "20",
            "--no-progress",
            # knn reads no temperature: a setting it does not read is refused (issue 50)
            *(["--setting", "temperature=0"] if backend != "knn" else []),
            *(["--base-url", url + "/v1"] if url else []),
            *extra,
        ]
    )


def records(tmp_path: Path) -> list[dict]:
    def no_nan(x):
        raise ValueError(f"invalid JSON constant {x}")

    lines = (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()
    return [json.loads(line, parse_constant=no_nan) for line in lines]


def test_a_key_echoed_everywhere_is_stored_nowhere(tmp_path, monkeypatch, capfd):
    """Reply text, reasoning, place fields, headers and error bodies all carry the key;
    nothing under the run folder, the cache, the MLflow store or stdout/stderr does."""
    manifest, audio = make_clips(tmp_path, 3)
    echoed = json.dumps(
        {
            "reasoning": f"the key is {KEY}",
            "city": KEY,
            "country": "Germany",
            "continent": "Europe",
            "latitude": 52.5,
            "longitude": 13.4,
        }
    )

    def answer(call):
        assert KEY in json.dumps(call.headers)  # the key did travel
        if call.n == 1:  # an error body quoting it (retried)
            return Answer(500, {"error": {"message": f"bad key {KEY}"}}, headers={"X-Echo": KEY})
        if call.n == 2:  # prose around JSON: raw_reply keeps the text
            return Answer(200, openai_completion(f"{KEY} says:\n{echoed}"), headers={"X-Echo": KEY})
        if call.n == 3:
            return Answer(401, {"error": {"message": f"key {KEY} refused"}}, headers={"X-Echo": KEY})
        return Answer(200, openai_completion(echoed), headers={"X-Echo": KEY})

    with FakeServer(answer) as server:
        rc = infer(tmp_path, server.url, manifest, audio)
    assert rc == 0
    recs = records(tmp_path)
    assert any("[redacted]" in (r.get("raw_reply") or "") + (r.get("reasoning") or "") for r in recs)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    from agl.core.tracking import log_run

    # A hand-written file holding the key, logged as an artifact: MLflow gets a clean copy.
    (tmp_path / "run" / "notes.txt").write_text(f"debug {KEY}\n")
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    log_run(
        run_key="leak",
        run_name=f"run {KEY}",
        experiment="leakcheck",
        params={"settings": summary["settings"], "note": KEY},
        metrics={"n": summary["n"]},
        tags={"why": KEY},
        artifacts=[tmp_path / "run", tmp_path / "run" / "notes.txt"],
    )
    (tmp_path / "run" / "notes.txt").unlink()  # ours, not the project's

    out, err = capfd.readouterr()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "mlflow.db" for p in files)
    assert any("cache" in p.parts for p in files)
    hits = [p for p in files if KEY.encode() in p.read_bytes()]
    assert hits == [], f"key found in {hits}"
    assert KEY not in out + err


def test_retry_after_past_the_cap_fails_the_clip_not_the_run(tmp_path, capfd):
    manifest, audio = make_clips(tmp_path, 2)

    def answer(call):
        if call.prompt and len([c for c in server.calls]) <= 1:
            return Answer(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "86400"})
        return Answer(200, openai_completion(GOOD))

    with FakeServer(answer) as server:
        rc = infer(tmp_path, server.url, manifest, audio, "--retry-after-cap", "5", "--concurrency", "1")
    assert rc == 0  # one clip succeeded
    failed = [r for r in records(tmp_path) if r["status"] == "failed"]
    assert len(failed) == 1
    assert "Retry-After" in failed[0]["error"] and "86400" in failed[0]["error"]
    assert len(server.calls) == 2  # the capped clip was not re-requested


@pytest.mark.parametrize(
    "content", [b"", b"this is not audio\n" * 20, bytes(range(256)) * 40, b"ID3\x04\x00\x00\x00\x00"]
)
def test_unusable_audio_is_failed_and_never_requested(tmp_path, content):
    manifest, audio = make_clips(tmp_path, 2)
    (audio / "clip_001" / "a.wav").write_bytes(content)
    with FakeServer(lambda call: Answer(200, openai_completion(GOOD))) as server:
        rc = infer(tmp_path, server.url, manifest, audio)
    assert rc == 0
    by_id = {r["sample_id"]: r for r in records(tmp_path)}
    assert by_id["clip_000"]["status"] == "ok"
    assert by_id["clip_001"]["status"] == "failed"
    assert "unusable audio, not requested" in by_id["clip_001"]["error"]
    assert len(server.calls) == 1


def test_knn_with_a_broken_clip_fails_that_clip_only(tmp_path):
    manifest, audio = make_clips(tmp_path, 4)
    (audio / "clip_002" / "a.wav").write_bytes(b"garbage" * 100)
    rc = infer(tmp_path, "", manifest, audio, backend="knn")
    assert rc == 0
    by_id = {r["sample_id"]: r for r in records(tmp_path)}
    assert by_id["clip_002"]["status"] == "failed"
    assert {by_id[k]["status"] for k in ("clip_000", "clip_001", "clip_003")} == {"ok"}


def test_nan_in_a_reply_is_a_missing_value_and_the_file_stays_json(tmp_path):
    manifest, audio = make_clips(tmp_path, 1)
    text = (
        '{"city": "Berlin", "country": "Germany", "continent": "Europe", '
        '"latitude": NaN, "longitude": 13.4, "confidence": Infinity}'
    )
    with FakeServer(lambda call: Answer(200, openai_completion(text))) as server:
        assert infer(tmp_path, server.url, manifest, audio) == 0
    (rec,) = records(tmp_path)
    assert rec["latitude"] is None  # the reply's NaN: missing; its finite longitude stays as given
    assert rec["confidence"] is None or math.isfinite(rec["confidence"])
    assert "latitude" in rec["missing"]
    assert rec["status"] in ("partial", "unparseable")


def test_a_run_where_no_clip_succeeded_exits_non_zero(tmp_path, capfd):
    manifest, audio = make_clips(tmp_path, 2)
    with FakeServer(lambda call: Answer(400, {"error": {"message": "bad request"}})) as server:
        rc = infer(tmp_path, server.url, manifest, audio)
    assert rc == 1
    assert "no clip succeeded" in capfd.readouterr().err


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--limit", "-1"], "--limit"),
        (["--limit", "0"], "--limit"),
        (["--timeout", "0"], "--timeout"),
        (["--timeout", "nan"], "--timeout"),
        (["--retries", "-3"], "--retries"),
        (["--retry-after-cap", "-1"], "--retry-after-cap"),
        (["--setting", "api_key=sk-abc123456789"], "environment variable"),
        (["--setting", "openai_api_key=sk-abc123456789"], "environment variable"),
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path, capfd, extra, says):
    manifest, audio = make_clips(tmp_path, 1)
    rc = infer(tmp_path, "http://127.0.0.1:9", manifest, audio, *extra)
    err = capfd.readouterr().err
    assert rc == 2
    assert says in err and len(err.strip().splitlines()) == 1
    assert "sk-abc123456789" not in err
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


def test_env_secret_names(monkeypatch):
    from agl.core.secrets import known_secrets, scrub

    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-0123456789")
    monkeypatch.setenv("GATEWAY", "gw-0123456789abc")
    monkeypatch.setenv("SHORT_API_KEY", "abc")
    found = known_secrets({"api_key_env": "GATEWAY"})
    assert {"tok-0123456789", "gw-0123456789abc", KEY} <= set(found)
    assert "abc" not in found
    assert scrub({"a": [f"x{KEY}y"], KEY: 1}, found) == {"a": ["x[redacted]y"], "[redacted]": 1}
    assert os.environ["OPENAI_API_KEY"] == KEY


def test_a_reply_the_parser_chokes_on_costs_one_clip_not_the_run(tmp_path):
    manifest, audio = make_clips(tmp_path, 2)
    huge = "9" * 400  # float(int) overflows inside the parser
    text = f'{{"city": "Berlin", "latitude": {huge}, "longitude": 13.4}}'
    with FakeServer(lambda call: Answer(200, openai_completion(text))) as server:
        assert infer(tmp_path, server.url, manifest, audio) == 0
    for rec in records(tmp_path):
        assert rec["status"] in ("partial", "unparseable")
        assert rec["latitude"] is None


@pytest.mark.parametrize("where, says", [
    ("nowhere", "--audio-root {root}: no such folder"),
    ("other", "none of the 3 audio file(s) is under {root} (looked for e.g. {root}/clip_000/a.wav)"),
])
def test_a_wrong_audio_root_names_the_folder_it_looked_in(where, says, tmp_path, capsys):
    """It once said only "download the audio first", whatever the folder."""
    manifest, _audio = make_clips(tmp_path, 3)
    root = tmp_path / where
    if where == "other":
        root.mkdir()
    code = main(["infer", "--backend", "openai-compatible", "--model", "m", "--setting",
                 "base_url=http://127.0.0.1:9/v1", "--manifest", str(manifest), "--audio-root", str(root),
                 "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says.format(root=root) in err[0], err
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


@pytest.mark.parametrize("backend, settings, unset", [
    ("gemini", [], "GEMINI_API_KEY or GOOGLE_API_KEY"),
    ("openai", ["--setting", "api_key_env=MY_LAB_KEY"], "MY_LAB_KEY"),
])
def test_a_dry_run_names_the_unset_key(backend, settings, unset, tmp_path, capsys, monkeypatch):
    """A dry run once priced an entry whose key was unset without a word about it."""
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY", "MY_LAB_KEY"):
        monkeypatch.delenv(name, raising=False)
    manifest, audio = make_clips(tmp_path, 2)
    args = ["infer", "--backend", backend, "--model", "m", *settings, "--manifest", str(manifest),
            "--audio-root", str(audio), "--out", str(tmp_path / "run"), "--dry-run"]
    assert main(args) == 0
    assert f"dry run: no API key: set {unset} before the real run" in capsys.readouterr().out
    monkeypatch.setenv(unset.split()[0], "k-123")
    assert main(args) == 0
    assert "no API key" not in capsys.readouterr().out
