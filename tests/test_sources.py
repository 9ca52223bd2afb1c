"""Inputs by URL or short name: the authors' files served from 127.0.0.1, downloaded once into a
cache, checked against SHA-256, read offline afterwards."""

import functools
import http.server
import json
import shutil
import threading

import pandas as pd
import pytest

from agl.cli import main
from agl.dataset.sources import SourceConfig, paper_values, resolve_source
from agl.errors import AglError

QWEN_PATH = "results/audio_localization/qwen25-omni/seed_42_progress_fixed.json"
QWEN_SHA = "640190737106d95abed554a88783dfe2a50e8d18866ec67dc46bd8d2732c3e08"
MANIFEST_PATH = "data/geoLocalization_schema.csv"


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def mirror(tmp_path, agl1k_manifest, qwen_published):
    """The authors' repository layout (no README), served on 127.0.0.1."""
    root = tmp_path / "mirror"
    (root / QWEN_PATH).parent.mkdir(parents=True)
    (root / "data").mkdir()
    shutil.copy(qwen_published, root / QWEN_PATH)
    shutil.copy(agl1k_manifest, root / MANIFEST_PATH)
    log: list[str] = []
    handler = type("H", (CountingHandler,), {"requests": log})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield url, root, log, server
    server.shutdown()
    server.server_close()


def test_evaluate_urls_reproduces_the_paper_row_then_works_offline(mirror, tmp_path, capsys):
    url, _, log, server = mirror
    cache = tmp_path / "cache"
    argv = [
        "evaluate",
        f"{url}/{QWEN_PATH}",
        "--manifest",
        f"{url}/{MANIFEST_PATH}",
        "--protocol",
        "paper",
        "--json",
        "--bootstrap",
        "20",
        "--cache-dir",
        str(cache),
        "--sha256",
        QWEN_SHA,
    ]
    assert main(argv) == 0
    r = json.loads(capsys.readouterr().out)
    assert [round(r[k], 2) for k in ("distance_error_km", "continent_acc", "country_acc", "city_acc")] == [
        5476.83,
        0.45,
        0.26,
        0.02,
    ]
    assert sorted(log) == sorted([f"/{QWEN_PATH}", f"/{MANIFEST_PATH}"])
    server.shutdown()  # offline from now on: the cache answers
    assert main(argv) == 0
    assert round(json.loads(capsys.readouterr().out)["distance_error_km"], 2) == 5476.83
    assert len(log) == 2


def test_wrong_checksum_is_refused_in_one_line_and_nothing_cached(mirror, tmp_path, capsys):
    url, *_ = mirror
    cache = tmp_path / "cache"
    code = main(
        [
            "import",
            f"{url}/{QWEN_PATH}",
            "--out",
            str(tmp_path / "q.jsonl"),
            "--sha256",
            "0" * 64,
            "--cache-dir",
            str(cache),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert f"not the --sha256 {'0' * 64} you gave" in err and QWEN_PATH in err
    assert not any(p.is_file() for p in cache.rglob("*"))
    assert not (tmp_path / "q.jsonl").exists()


def test_short_names_resolve_through_params_and_pinned_checksums_apply(mirror, tmp_path):
    url, root, *_ = mirror
    cfg = SourceConfig.from_params(
        {"paper": {"base_url": url, "published": {"qwen25-omni": {"path": QWEN_PATH, "sha256": QWEN_SHA}}}}
    )
    got = resolve_source("paper:qwen25-omni", cache_dir=tmp_path / "c1", config=cfg)
    assert got.read_bytes() == (root / QWEN_PATH).read_bytes()
    assert resolve_source("paper:manifest", cache_dir=tmp_path / "c1", config=cfg).exists()
    # The mirror serves a changed file: the pin refuses it.
    (root / QWEN_PATH).write_bytes((root / QWEN_PATH).read_bytes().replace(b"London", b"Londres"))
    with pytest.raises(AglError, match=rf"not {QWEN_SHA} \(paper\.published\.qwen25-omni\.sha256"):
        resolve_source("paper:qwen25-omni", cache_dir=tmp_path / "c2", config=cfg)
    with pytest.raises(AglError, match="did you mean 'paper:qwen25-omni'"):
        resolve_source("paper:qwen25omni", cache_dir=tmp_path / "c2", config=cfg)
    # Every model of the paper's leaderboard has a name (unchecked: no pin for it).
    assert "gemini-2.5-pro" in cfg.names() and cfg.names()["gemini-2.5-pro"].sha256 is None


def test_params_yaml_pins_the_published_qwen_file():
    from pathlib import Path

    cfg = SourceConfig.load(Path(__file__).resolve().parents[1] / "params.yaml")
    assert cfg.names()["qwen25-omni"] == type(cfg.names()["qwen25-omni"])(QWEN_PATH, QWEN_SHA)


def test_shipped_paper_values_match_shared(shared):
    ours = paper_values()
    theirs = pd.read_csv(shared("data/agl1k/paper_leaderboard.csv"))
    pd.testing.assert_frame_equal(ours, theirs)
    row = ours.set_index("model").loc["Qwen2.5-Omni"]
    assert (row["distance_error_km"], row["country_acc"]) == (5476.83, 0.26)
