"""`agl explore`'s server over HTTP: the closed list of routes, audio with Range, refusals."""

from __future__ import annotations

import http.client
import json
import threading

import pytest
from explore_outputs import write_outputs
from test_explore_data import paths, unwrap

from agl.explore.server import ExploreServer
from agl.explore.sources import load


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = write_outputs(tmp_path_factory.mktemp("outputs"))
    srv = ExploreServer(("127.0.0.1", 0), load(paths(root)), idle_timeout_s=5)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv, root
    srv.shutdown()
    srv.server_close()


def get(srv, path: str, method: str = "GET", headers: dict | None = None):
    host, port = srv.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request(method, path, headers={"Host": f"127.0.0.1:{port}", **(headers or {})})
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r, body


def test_page_and_data(server):
    srv, _ = server
    r, body = get(srv, "/")
    assert r.status == 200 and b"static/app.js" in body
    assert "script-src 'self'" in r.getheader("Content-Security-Policy")
    r, body = get(srv, "/static/filters.js")
    assert r.status == 200 and r.getheader("Content-Type").startswith("text/javascript")
    name, idx = unwrap(get(srv, "/data/index.js")[1])
    assert name == "index" and idx["clips"]["key"] == ["k0", "k1", "k2", "k3"]
    name, clip = unwrap(get(srv, "/data/clips/3.js")[1])
    assert name == "clip:3" and clip["key"] == "k3"
    assert unwrap(get(srv, "/data/text.js")[1])[0] == "text"
    assert unwrap(get(srv, "/data/map.js")[1])[1].startswith("<svg")


def test_audio_with_range_and_spectrograms(server):
    srv, root = server
    original = (root / "data" / "audio" / "k0" / "k0.mp3").read_bytes()
    r, body = get(srv, "/media/0/original.mp3")
    assert r.status == 200 and body == original and r.getheader("Content-Type") == "audio/mpeg"
    r, body = get(srv, "/media/0/original.mp3", headers={"Range": "bytes=10-19"})
    assert r.status == 206 and body == original[10:20]
    assert r.getheader("Content-Range") == f"bytes 10-19/{len(original)}"
    derived = root / "build" / "perturb" / "mask_speech" / "default" / "audio" / "k0" / "k0.mp3"
    assert get(srv, "/media/0/mask_speech.default.mp3")[1] == derived.read_bytes()
    r, body = get(srv, "/spec/0/mask_speech.default.png")
    assert r.status == 200 and body.startswith(b"\x89PNG")


@pytest.mark.parametrize("path, status, says", [
    ("/media/2/original.mp3", 404, "unreadable"),  # the manifest names it; it is not there
    ("/spec/2/original.png", 404, "no spectrogram"),
    ("/media/1/mask_speech.default.mp3", 404, "unreadable"),
    ("/media/3/mask_speech.default.mp3", 404, "has no audio"),  # k3 is not in the subset
    ("/media/0/original.wav", 404, "has no audio"),
    ("/media/0/..%2F..%2Fdata%2Fmanifest.csv", 400, "refused"),
    ("/media/0/..", 400, "refused"),
    ("/media/4/original.mp3", 404, "no clip number"),
    ("/media/-1/original.mp3", 404, "no clip number"),
    ("/data/clips/99.js", 404, "no clip number"),
    ("/data/clips/k0.js", 404, "no such resource"),
    ("/static/../sources.py", 400, "refused"),
    ("/static/nothing.js", 404, "no static file"),
    ("/build/runs/alpha/predictions.jsonl", 404, "no such resource"),
])
def test_only_what_the_list_names(server, path, status, says):
    r, body = get(server[0], path)
    assert r.status == status and says in json.loads(body)["error"]


def test_reads_only(server):
    r, body = get(server[0], "/data/index.js", method="POST")
    assert r.status == 405 and "only reads" in json.loads(body)["error"]


def test_other_host_names_are_refused_on_loopback(server):
    r, body = get(server[0], "/data/index.js", headers={"Host": "evil.example:80"})
    assert r.status == 403 and "agl explore printed" in json.loads(body)["error"]
