"""Messages that point the way (issue 23): a wrong checksum, a malformed one, a URL that is
not there, a repaired manifest served from the cache. Each says what happened, about the
input the user gave, and the one thing that fixes it."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
import warnings

import pytest

from agl.cli import main
from agl.dataset.paper import fetch
from agl.dataset.sources import SourceConfig, resolve_source
from agl.errors import AglError

QWEN_PATH = "results/audio_localization/qwen25-omni/seed_42_progress_fixed.json"
QWEN_SHA = "640190737106d95abed554a88783dfe2a50e8d18866ec67dc46bd8d2732c3e08"


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def served(tmp_path, qwen_published):
    root = tmp_path / "mirror"
    (root / QWEN_PATH).parent.mkdir(parents=True)
    shutil.copy(qwen_published, root / QWEN_PATH)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()
    server.server_close()


def last_error(capfd) -> str:
    err = capfd.readouterr().err.strip()
    assert "Traceback" not in err and "\n" not in err, err
    return err


def test_a_wrong_sha256_on_a_cached_file_blames_the_value_not_the_cache(served, tmp_path, capfd):
    url, _ = served
    cache = tmp_path / "cache"
    out = tmp_path / "q.jsonl"
    assert main(["import", f"{url}/{QWEN_PATH}", "--out", str(out), "--cache-dir", str(cache)]) == 0
    capfd.readouterr()
    wrong = "1" * 64
    assert main(["import", f"{url}/{QWEN_PATH}", "--out", str(out), "--cache-dir", str(cache),
                 "--sha256", wrong]) == 2
    err = last_error(capfd)
    # On main: "cached copy ... does not match SHA-256 ...; delete it to download again".
    assert "delete it to download again" not in err
    assert f"not the --sha256 {wrong}" in err and QWEN_SHA in err and "check the value" in err


def test_a_wrong_sha256_on_a_fresh_download_names_the_option_not_a_pin(served, tmp_path, capfd):
    url, _ = served
    wrong = "2" * 64
    assert main(["import", f"{url}/{QWEN_PATH}", "--out", str(tmp_path / "q.jsonl"),
                 "--cache-dir", str(tmp_path / "c"), "--sha256", wrong]) == 2
    err = last_error(capfd)
    assert "pinned" not in err and f"not the --sha256 {wrong}" in err and QWEN_SHA in err


def test_a_changed_cached_copy_of_a_pinned_file_says_how_to_fetch_it_again(served, tmp_path):
    url, root = served
    cfg = SourceConfig.from_params({"paper": {"base_url": url, "published": {
        "qwen25-omni": {"path": QWEN_PATH, "sha256": QWEN_SHA}}}})
    got = resolve_source("paper:qwen25-omni", cache_dir=tmp_path / "c", config=cfg)
    got.write_bytes(got.read_bytes().replace(b"London", b"Londres"))  # damaged on disk
    with pytest.raises(AglError) as err:
        resolve_source("paper:qwen25-omni", cache_dir=tmp_path / "c", config=cfg)
    msg = str(err.value)
    assert f"rm {got}" in msg and "paper.published.qwen25-omni.sha256" in msg


@pytest.mark.parametrize("value", ["abc", "g" * 64, "0" * 63])
def test_a_malformed_sha256_is_refused_as_malformed(tmp_path, capfd, qwen_published, value):
    with pytest.raises(SystemExit) as exit_:
        main(["import", str(qwen_published), "--out", str(tmp_path / "q.jsonl"), "--sha256", value])
    assert exit_.value.code == 2
    err = capfd.readouterr().err
    assert "is not a SHA-256 (64 hex digits" in err and "does not match" not in err
    with pytest.raises(AglError, match="is not a SHA-256"):
        resolve_source(str(qwen_published), sha256=value)
    with pytest.raises(AglError, match=r"paper\.published\.x\.sha256.*is not a SHA-256"):
        SourceConfig.from_params({"paper": {"published": {"x": {"path": "a", "sha256": value}}}})
    with pytest.raises(AglError, match=r"download\.manifest_sha256.*is not a SHA-256"):
        SourceConfig.from_params({"download": {"manifest_sha256": value}})
    with pytest.raises(AglError, match=r"download\.manifest_sha256.*is not a SHA-256"):
        from agl.dataset.prepare import from_params

        from_params({"download": {"manifest_sha256": value}})


def test_a_404_for_a_url_on_the_command_line_does_not_blame_params_yaml(served, tmp_path, capfd):
    url, _ = served
    assert main(["import", f"{url}/results/nope.json", "--out", str(tmp_path / "q.jsonl"),
                 "--cache-dir", str(tmp_path / "c")]) == 2
    err = last_error(capfd)
    assert "HTTP 404" in err and "params.yaml" not in err
    assert "check the URL given on the command line" in err


def test_a_404_for_a_short_name_points_at_the_base_url(served, tmp_path):
    url, _ = served
    cfg = SourceConfig.from_params({"paper": {"base_url": f"{url}/elsewhere"}})
    with pytest.raises(AglError) as err:
        resolve_source("paper:qwen25-omni", cache_dir=tmp_path / "c", config=cfg)
    assert "HTTP 404" in str(err.value) and "paper.base_url" in str(err.value)


def test_fetch_names_where_its_url_came_from(tmp_path):
    missing = (tmp_path / "nothing.json").as_uri()
    with pytest.raises(AglError, match="check the URL given on the command line"):
        fetch(missing, tmp_path / "c", url_from="given on the command line")
    with pytest.raises(AglError, match=r"check paper\.base_url in params\.yaml"):
        fetch(missing, tmp_path / "c", url_from="paper.base_url in params.yaml")


def test_the_manifest_cache_names_the_file_passed_not_the_first_one_cached(
        tmp_path, monkeypatch, agl1k_manifest):
    from agl.dataset.manifest import ManifestWarning
    from agl.dataset.manifest_cache import load_manifest_cached

    monkeypatch.setenv("AGL_CACHE_DIR", str(tmp_path / "cache"))
    first, second = tmp_path / "first.csv", tmp_path / "elsewhere" / "second.csv"
    second.parent.mkdir()
    shutil.copy(agl1k_manifest, first)
    shutil.copy(agl1k_manifest, second)
    for path in (first, second):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ManifestWarning)
            load_manifest_cached(path, columns=[])
        (message,) = [str(w.message) for w in caught]
        assert message.startswith(f"{path}: header has 19 names"), message
        other = second if path == first else first
        assert str(other) not in message
