"""Offline, a run stops in seconds with one line, and resumes when the network is back
(issue 50: `agl infer` against an API and `agl download` of AGL1K retried every clip, two clips
took 115 s and a download showed an ETA of hours). Offline here is a closed port on
127.0.0.1 (connection refused); the network coming back is a fake server on that port."""

from __future__ import annotations

import errno
import hashlib
import socket
import threading
import time
import warnings

import pytest
import yaml
from fake_archive import FakeArchive
from fake_llm import Answer, FakeServer
from test_download import KEYS, metadata_for
from test_inference_api import GOOD, backend_settings, body_for, make_clips

from agl.cli import main
from agl.core.reach import NoNetwork, Reach, unreachable
from agl.dataset.checksums import read_lock
from agl.dataset.manifest import ManifestWarning, load_manifest, write_manifest
from agl.predictions.records import read_predictions


def closed_port() -> int:
    """A port nothing listens on (bound, then released): connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chained(inner: BaseException) -> Exception:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise RuntimeError("SDK: Connection error.") from exc
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("inner, reason", [
    (socket.gaierror(-2, "Name or service not known"), "the name does not resolve"),
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), "connection refused"),
    (OSError(errno.ENETUNREACH, "Network is unreachable"), "no route to it"),
    (OSError(errno.EHOSTUNREACH, "No route to host"), "no route to it"),
])
def test_every_kind_of_failure_to_connect_is_named(inner, reason):
    host, why = unreachable(_chained(inner))
    assert why.startswith(reason)
    reach = Reach("the API", 2, "infer.offline_after")
    reach.failed(_chained(inner))
    with pytest.raises(NoNetwork, match=rf"^no network: the API at {host} cannot be reached \({reason}"):
        reach.failed(_chained(inner))


def test_a_server_that_answered_once_makes_later_failures_a_clips():
    """Not a timeout, not a server's error: those say nothing of the network, or that it works."""
    refused = _chained(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    assert unreachable(_chained(TimeoutError("timed out"))) is None
    reach = Reach("the API", 1)
    reach.failed(_chained(ValueError("HTTP 500")))  # the server answered: it is reachable
    reach.failed(refused)  # an outage mid-run: the clip's failure, retried and recorded
    assert reach.reached


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_agl_infer_offline_stops_in_one_line_then_resumes(api, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    manifest, audio = make_clips(tmp_path, 12)
    port = closed_port()
    settings = backend_settings(api, f"http://127.0.0.1:{port}")
    argv = ["infer", "--backend", api, "--model", "m", "--manifest", str(manifest), "--audio-root",
            str(audio), "--out", str(tmp_path / "run"), "--no-progress", "--concurrency", "4",
            "--cache-dir", str(tmp_path / "cache"),
            *[x for k, v in settings.items() for x in ("--setting", f"{k}={v}")]]
    t0 = time.monotonic()
    rc = main(argv)
    took = time.monotonic() - t0
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "no network: the API at 127.0.0.1 cannot be reached (connection refused" in err, err
    assert "run it again when the network is back, it resumes where it stopped" in err
    assert took < 30, took  # the bound is 60 s; with backoff it takes a few seconds
    run = tmp_path / "run" / "predictions.jsonl"
    assert not run.exists() or not read_predictions(run)  # nothing recorded as failed
    # The network is back: the same command answers every clip.
    with FakeServer(lambda call: Answer(200, body_for(api, GOOD)), port=port) as server:
        assert main(argv) == 0, capsys.readouterr().err
    preds = read_predictions(run)
    assert len(preds) == 12 and {p.status.value for p in preds.values()} == {"ok"}
    assert len(server.calls) == 12


def test_agl_download_of_agl1k_offline_stops_in_one_line_then_resumes(
        archive_dir, agl1k_manifest, tmp_path, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        frame = load_manifest(agl1k_manifest)
    two = tmp_path / "two.csv"
    write_manifest(frame[frame["key"].isin(KEYS)], two)
    port = closed_port()
    url = f"http://127.0.0.1:{port}"
    params = tmp_path / "params.yaml"
    # AGL1K by its manifest URL (served here by the fake, pinned by its SHA-256), as a user's
    # params.yaml names it; the manifest is fetched first, then each clip.
    params.write_text(yaml.safe_dump({"download": {
        "manifest_url": f"{url}/manifest.csv",
        "manifest_sha256": hashlib.sha256(two.read_bytes()).hexdigest(), "backoff_s": 0.05}}))
    argv = ["download", "--params", str(params), "--dataset", "agl1k", "--out", str(tmp_path / "data"),
            "--base-url", f"{url}/download", "--metadata-url", f"{url}/metadata", "--no-progress"]
    t0 = time.monotonic()
    rc = main(argv)
    took = time.monotonic() - t0
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "no network: the server at 127.0.0.1 cannot be reached (connection refused" in err, err
    assert took < 30, took
    archive = FakeArchive(root=archive_dir, port=port,
                          documents={"/manifest.csv": two.read_bytes()},
                          metadata={k: metadata_for(archive_dir, k) for k in KEYS}).start()
    try:
        assert main(argv) == 0, capsys.readouterr().err
    finally:
        archive.stop()
    lock = read_lock(tmp_path / "data" / "lock.json")
    assert len(lock) == 2 and all((tmp_path / "data" / "audio" / rel).is_file() for rel in lock)


def test_a_download_that_reached_the_archive_goes_on_clip_by_clip(tmp_path):
    """The fast stop is for a run that reached nothing: once the Archive answered, a clip that
    cannot connect is a clip's failure (retried, then counted against failure_budget)."""
    from agl.dataset.fetch import Policy, RetryableError, with_retries

    reach = Reach("the Archive", 1)
    policy = Policy(progress=False, retries=1, sleep=lambda s: None, reach=reach)
    assert with_retries(lambda: 7, policy, threading.Event()) == 7
    refused = _chained(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))

    def attempt() -> int:
        raise RetryableError("connection error") from refused

    with pytest.raises(RetryableError):
        with_retries(attempt, policy, threading.Event())
