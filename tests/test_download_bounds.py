"""`agl download` against a hostile Archive on 127.0.0.1 (issue 24): every clip's read is
bounded in time, memory and disk, refused in one line, and nothing refused is kept.

The issue's cases: an endless body for a clip whose Archive metadata lists 78 KB (2.3 GB
written in 3 s before), a gzip-bomb clip (2 GB), a slow body and slow headers (ran until
killed), an HTML error page served with 200, a redirect to another host. Caps are small so
each run takes seconds; `pytest -s` prints the measured figures.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from factories import manifest as make_manifest
from hostile_server import (
    HostileServer,
    body,
    bytes_under,
    endless,
    files_under,
    gzip_bomb,
    gzipped,
    html_page,
    json_body,
    redirect,
    run_measured,
    slow_body,
    slow_headers,
)

from agl.dataset.manifest import write_manifest

KEY, NAME = "aporee_1_1", "clip.mp3"
CLIP_PATH = f"/download/{KEY}/{NAME}"
LISTED = 78_000  # what the Archive's metadata says the file has
DEADLINE_S = 1.5
MAX_CLIP = 1_000_000
MODULES = ("numpy", "pandas", "httpx", "soundfile", "tqdm", "agl.http.client",
           "agl.http.transport", "agl.core.audio", "agl.dataset.download",
           "agl.dataset.prepare", "agl.dataset.clip_fetch", "agl.commands.download")


@pytest.fixture(scope="module")
def mp3(tmp_path_factory) -> bytes:
    """A real one-second MP3 (what a recovered server serves)."""
    import soundfile as sf

    path = tmp_path_factory.mktemp("mp3") / NAME
    t = np.arange(44100) / 44100
    sf.write(path, 0.3 * np.sin(2 * np.pi * 440 * t), 44100, format="MP3")
    return path.read_bytes()


@pytest.fixture
def setup(tmp_path):
    """A one-clip manifest and a params file with small bounds and no waiting."""
    manifest = tmp_path / "manifest.csv"
    write_manifest(make_manifest([{"key": KEY, "mp3name": NAME, "mp3seconds": 1.0}]), manifest)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"download": {
        "retries": 0, "backoff_s": 0.01, "timeout_s": 1.0, "deadline_s": DEADLINE_S,
        "max_clip_bytes": MAX_CLIP, "max_document_bytes": 100_000,
        "summary": str(tmp_path / "summary.json")}}))
    return manifest, params


def metadata(size: int | None) -> dict:
    files = [{"name": NAME, **({"size": str(size)} if size is not None else {})}]
    return {"metadata": {"identifier": KEY}, "files": files}


def download(server: HostileServer, setup, tmp_path: Path, *extra: str):
    manifest, params = setup
    return run_measured(["download", "--params", str(params), "--dataset", str(manifest),
                         "--out", str(tmp_path / "data"), "--base-url", f"{server.url}/download",
                         "--metadata-url", f"{server.url}/metadata", "--no-progress", *extra],
                        cwd=tmp_path, preload=MODULES)


def reason(tmp_path: Path) -> str:
    missing = json.loads((tmp_path / "summary.json").read_text())["missing"]
    assert list(missing) == [f"{KEY}/{NAME}"]
    return missing[f"{KEY}/{NAME}"]


def assert_refused_cleanly(m, tmp_path: Path, said: str) -> None:
    assert m.rc == 2, m.stderr
    assert "Traceback" not in m.stderr and all(x.startswith("agl download:") for x in m.lines())
    why = reason(tmp_path)
    assert said in why and "\n" not in why, why  # the refusal is one line
    assert f"agl download: failed {KEY}/{NAME}: {why}" in m.lines()
    assert m.seconds < DEADLINE_S + 3 and m.rss_growth_mb < 40
    assert files_under(tmp_path / "data" / "audio") == []  # nothing of it kept on disk
    assert KEY not in (tmp_path / "data" / "lock.json").read_text()


HOSTILE = {
    # The endless body: the metadata lists 78 KB, the server never stops.
    "endless body, size listed": (endless("audio/mpeg"), LISTED, f"more than {LISTED:,} bytes"),
    "endless body, no size listed": (endless("audio/mpeg"), None, "more than 1,000,000 bytes"),
    "gzip bomb": (gzipped(gzip_bomb(), "audio/mpeg"), LISTED,
                  f"more than {LISTED:,} bytes (after decoding)"),
    "slow body": (slow_body(0.3, "audio/mpeg"), LISTED, f"within {DEADLINE_S:g} s"),
    "slow headers": (slow_headers(0.3), LISTED, f"within {DEADLINE_S:g} s"),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_hostile_clip_is_refused_bounded_in_time_memory_and_disk(kind, setup, tmp_path):
    behaviour, listed, said = HOSTILE[kind]
    routes = {CLIP_PATH: behaviour, f"/metadata/{KEY}": json_body(metadata(listed))}
    with HostileServer(routes) as server:
        m = download(server, setup, tmp_path)
    assert_refused_cleanly(m, tmp_path, said)


def test_an_error_page_with_200_is_never_kept_and_the_retry_gets_the_clip(setup, tmp_path, mp3):
    manifest, params = setup
    doc = yaml.safe_load(params.read_text())
    doc["download"]["retries"] = 1
    params.write_text(yaml.safe_dump(doc))
    routes = {CLIP_PATH: [html_page(), body(mp3, "audio/mpeg")],
              f"/metadata/{KEY}": json_body(metadata(len(mp3)))}
    with HostileServer(routes) as server:
        m = download(server, setup, tmp_path)
        assert server.log[CLIP_PATH] == 2
    assert m.rc == 0, m.stderr
    lock = json.loads((tmp_path / "data" / "lock.json").read_text())
    got = (tmp_path / "data" / "audio" / KEY / NAME).read_bytes()
    assert got == mp3 and hashlib.sha256(mp3).hexdigest() in json.dumps(lock)


def test_an_error_page_that_never_recovers_fails_in_one_line(setup, tmp_path):
    routes = {CLIP_PATH: html_page(), f"/metadata/{KEY}": json_body(metadata(None))}
    with HostileServer(routes) as server:
        m = download(server, setup, tmp_path)
    assert_refused_cleanly(m, tmp_path, "an HTML page with status 200")


def test_a_redirect_to_another_host_is_refused(setup, tmp_path, mp3):
    server = HostileServer({f"/metadata/{KEY}": json_body(metadata(len(mp3))),
                            "/elsewhere.mp3": body(mp3, "audio/mpeg")})
    server.routes[CLIP_PATH] = redirect(f"http://localhost:{server.port}/elsewhere.mp3")
    with server:
        m = download(server, setup, tmp_path)
        assert server.log["/elsewhere.mp3"] == 0
    assert_refused_cleanly(m, tmp_path, "another host (127.0.0.1 -> localhost)")
    assert "download.redirect_hosts" in reason(tmp_path)


def test_bounds_in_params_are_checked(tmp_path):
    from agl.dataset.prepare import from_params
    from agl.errors import AglError

    with pytest.raises(AglError, match="download.deadline_s: 0 is not a positive finite number"):
        from_params({"download": {"deadline_s": 0}})
    with pytest.raises(AglError, match="download.max_clip_bytes: 1.5 is not a whole number of at least 1"):
        from_params({"download": {"max_clip_bytes": 1.5}})
    # a bool is an int in Python: `jobs: true` was one download, `retries: true` one retry
    for key in ("jobs", "retries", "timeout_s"):
        with pytest.raises(AglError, match=f"download.{key}: True is not "):
            from_params({"download": {key: True}})
    with pytest.raises(AglError, match="download.redirect_hosts"):
        from_params({"download": {"redirect_hosts": [""]}})
    _, policy, _ = from_params({"download": {"deadline_s": 5, "redirect_hosts": ["cdn.x"]}})
    assert policy.deadline_s == 5 and policy.redirect_hosts == ("cdn.x",)
    assert bytes_under(tmp_path) == 0
