"""`agl shared` builds ../shared from public pinned sources: here the same files served from
127.0.0.1 in their public layouts (the authors' repository, the Archive, the ontology)."""

import functools
import http.server
import shutil
import threading

import pytest

from agl.cli import main
from agl.dataset.checksums import file_digest
from agl.dataset.shared_data import FILES


class Handler(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def public_homes(tmp_path, shared):
    """Every remote file of FILES at its public path under one local server."""
    root = tmp_path / "www"
    for item in FILES:
        if item.source == "package":
            continue
        rel = {"agl1k": f"agl1k/{item.path}", "archive": f"archive/{item.path}", "ontology": "audioset/ontology.json"}[
            item.source
        ]
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(shared(item.dest), root / rel)
    log: list[str] = []
    h = type("H", (Handler,), {"requests": log})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(h, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    argv = [
        "--agl1k-base-url",
        f"{url}/agl1k",
        "--archive-base-url",
        f"{url}/archive",
        "--ontology-url",
        f"{url}/audioset/ontology.json",
    ]
    yield argv, root, log
    server.shutdown()
    server.server_close()


def test_builds_shared_byte_for_byte_then_makes_no_request(public_homes, tmp_path, shared, capsys):
    argv, _, log = public_homes
    out = tmp_path / "shared"
    assert main(["shared", "--out", str(out), *argv]) == 0
    for item in FILES:
        assert file_digest(out / item.dest) == file_digest(shared(item.dest)), item.dest
    assert len(log) == sum(item.source != "package" for item in FILES)
    assert "7 files ready (7 downloaded, 0 already present)" in capsys.readouterr().out
    assert main(["shared", "--out", str(out), *argv]) == 0
    assert len(log) == 6 and "(0 downloaded, 7 already present)" in capsys.readouterr().out


def test_a_changed_file_is_refused_and_named(public_homes, tmp_path, capsys):
    argv, root, _ = public_homes
    clip = next(root.glob("archive/aporee_5201_6631/*.mp3"))
    clip.write_bytes(clip.read_bytes()[:-10])
    out = tmp_path / "shared"
    assert main(["shared", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("agl shared: error: 1 of 7 file(s) could not be had")
    assert "AmselanDietersFensterJuni2003Edit.mp3: SHA-256" in err and "not written" in err
    assert not list(out.glob("data/agl1k/archive/aporee_5201_6631/*"))
    assert (out / "data/agl1k/geoLocalization_schema.csv").exists()  # the others are there
