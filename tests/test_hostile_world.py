"""A hostile world, bounded (issue 24): predictions and manifests in any shape, encoding or
size, a second writer into a run folder, and links planted in the data folder. Each is one
line naming the file, row or path and a non-zero exit, never a traceback or a crash."""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
from factories import manifest, prediction
from helpers import one_line_error, subprocess_env

from agl.dataset.manifest import load_manifest, write_manifest
from agl.errors import AglError
from agl.predictions.lines import STATUSES
from agl.predictions.records import PredictionWriter, Status, iter_records, prediction_frame

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def files(tmp_path):
    m = tmp_path / "manifest.csv"
    write_manifest(manifest([{}, {"key": "k1"}]), m)
    preds = tmp_path / "predictions.jsonl"
    with PredictionWriter(preds) as w:
        w.write(prediction("k0", 48.9, 2.3, "Paris", "France", "Europe"))
        w.write(prediction("k1", 40.0, 3.0, "Madrid", "Spain", "Europe"))
    return m, preds



def agl(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A separate process: a crash (SIGSEGV in a C extension) shows as its return code."""
    env = subprocess_env(AGL_CACHE_DIR="off", **(env or {}))
    return subprocess.run([sys.executable, "-m", "agl.cli", *argv], capture_output=True,
                          text=True, timeout=120, env=env)


def assert_one_line(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def served(tmp_path):
    """A local HTTP server over tmp_path/www; yields (folder, base URL)."""
    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# --- predictions: shape, encoding, size --------------------------------------------------


@pytest.mark.parametrize("head", [b"null\n", b"  null  \n", b"1\n", b"\"k0\"\n"])
def test_a_line_that_is_not_an_object_is_one_line_from_a_path_and_a_url(files, served, tmp_path, head):
    """Was: a first line `null` killed `agl evaluate` with SIGSEGV in pyarrow's JSON reader."""
    m, preds = files
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(head + preds.read_bytes())
    assert_one_line(agl("evaluate", str(bad), "--manifest", str(m), "--bootstrap", "10"),
                    str(bad), "line 1", "not an object")
    www, url = served
    (www / "bad.jsonl").write_bytes(head)
    assert_one_line(agl("evaluate", f"{url}/bad.jsonl", "--manifest", str(m), "--bootstrap", "10",
                        "--cache-dir", str(tmp_path / "cache")), "line 1", "not an object")


def test_a_latin1_byte_in_a_string_is_one_line_naming_the_line(files, capfd, tmp_path):
    """Was: a pyarrow ArrowException traceback ("Wrapping Par?s failed") from the fast path."""
    m, preds = files
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(preds.read_bytes().replace(b"Madrid", b"M\xe1drid"))
    line = one_line_error(capfd, ["evaluate", str(bad), "--manifest", str(m), "--bootstrap", "10"])
    assert f"{bad}: line 2: not UTF-8 text" in line and "save the predictions file as UTF-8" in line
    with pytest.raises(AglError, match="line 2: not UTF-8"):
        list(iter_records(bad))
    utf16 = tmp_path / "utf16.jsonl"
    utf16.write_bytes(preds.read_text().encode("utf-16"))
    assert "UTF-16" in one_line_error(capfd, ["evaluate", str(utf16), "--manifest", str(m)])


@pytest.mark.parametrize("extra, problem", [
    (b'{"sample_id": "k2", "status": "ok"} {"sample_id": "k3", "status": "ok"}\n', "not a prediction record"),
    (b'{"sample_id": "k2",\n"status": "ok"}\n', "line 3"),
    (b'{"sample_id": {"a": 1}, "status": "ok"}\n', "sample_id must be text"),
    (b'{"sample_id": "k2", "status": 1}\n', "status"),
    (b'{"sample_id": "k2", "status": "ok", "latitude": "48.9"}\n', "latitude must be a number"),
    (b'{"sample_id": "k2", "status": "ok", "refused": "yes"}\n', "refused must be"),
], ids=["two objects", "one object, two lines", "id object", "status number", "latitude text",
        "refused text"])
def test_every_reader_checks_the_shape_of_each_line(files, tmp_path, extra, problem):
    """The fast (pyarrow) and careful readers agree: a line of the wrong shape is an error
    naming it, whichever reader meets it (two objects on a line were two rows in pyarrow)."""
    _, preds = files
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(preds.read_bytes() + extra)
    for read in (prediction_frame, lambda p: list(iter_records(p))):
        with pytest.raises(AglError, match="line 3") as err:
            read(bad)
        assert problem in str(err.value) and "\n" not in str(err.value)


def test_deep_nesting_is_one_line_for_the_careful_readers(files, tmp_path):
    _, preds = files
    bad = tmp_path / "deep.jsonl"  # json.loads raises RecursionError past ~1,000 levels
    bad.write_bytes(preds.read_bytes() + b'{"sample_id": "k2", "status": "ok", "x": ' + b"[" * 5000
                    + b"]" * 5000 + b"}\n")
    with pytest.raises(AglError, match="line 3: not a prediction record"):
        list(iter_records(bad))


def test_a_record_of_any_size_is_read(files, tmp_path):
    _, preds = files
    big = prediction("k2", 1.0, 2.0, "X", "Y", "Asia").to_json() | {"reasoning": "r" * 3_000_000}
    path = tmp_path / "big.jsonl"
    path.write_bytes(preds.read_bytes() + json.dumps(big).encode() + b"\n")
    assert list(prediction_frame(path)["sample_id"]) == ["k0", "k1", "k2"]
    bom = tmp_path / "bom.jsonl"  # a byte-order mark is not part of line 1
    bom.write_bytes(b"\xef\xbb\xbf" + preds.read_bytes())
    assert len(prediction_frame(bom)) == 2 and len(list(iter_records(bom))) == 2


def test_the_shape_check_knows_every_status():
    assert STATUSES == tuple(s.value for s in Status)


def test_a_negative_seed_is_one_line(files, capfd):
    """Was: a numpy ValueError traceback ("expected non-negative integer")."""
    m, preds = files
    done = agl("evaluate", str(preds), "--manifest", str(m), "--seed", "-1")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "argument --seed: '-1' is not a seed: a whole number, 0 or more" in done.stderr.splitlines()[-1]


# --- manifests: encoding, NUL bytes, size, for every command --------------------------------


def _manifest_bytes(tmp_path: Path, kind: str) -> Path:
    frame = manifest([{}, {"key": "k1"}])
    good = tmp_path / "good.csv"
    write_manifest(frame, good)
    path = tmp_path / f"{kind}.csv"
    if kind == "big":  # one 200 KB field (was: a _csv.Error traceback in every command)
        frame.loc[0, "description"] = "x" * 200_000
        write_manifest(frame, path)
    elif kind == "nul":  # was: accepted with exit 0 by evaluate, infer and filter
        lines = good.read_bytes().split(b"\n")
        lines[2] = lines[2].replace(b",", b",\x00", 1)
        path.write_bytes(b"\n".join(lines))
    elif kind == "latin1":
        path.write_bytes(good.read_bytes().replace(b"Paris", b"P\xe2ris"))
    return path


COMMANDS = {
    "evaluate": lambda m, tmp, preds: ["evaluate", str(preds), "--manifest", str(m), "--bootstrap", "10"],
    "infer": lambda m, tmp, preds: ["infer", "--backend", "random", "--manifest", str(m), "--out",
                                    str(tmp / "run"), "--no-progress", "--cache-dir", ""],
    "filter": lambda m, tmp, preds: ["filter", "--manifest", str(m), "--audio-root", str(tmp),
                                     "--out", str(tmp / "f.csv"), "--params", str(tmp / "none.yaml")],
    "download": lambda m, tmp, preds: ["download", "--params", str(tmp / "none.yaml"), "--dataset",
                                       str(m), "--out", str(tmp / "data"), "--no-progress"],
    "play": lambda m, tmp, preds: ["play", "--manifest", str(m), "--no-browser", "--port", "0",
                                   "--out", str(tmp / "human")],
}
EXPECTED = {
    "big": "row 1 field 'description': 200,000 characters",
    "nul": "line 3: contains a NUL byte",
    "latin1": "line 2: not UTF-8 text",
}


@pytest.mark.parametrize("kind", list(EXPECTED))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bad_manifest_is_one_line_in_every_command(files, tmp_path, capfd, monkeypatch, command, kind):
    monkeypatch.setenv("AGL_CACHE_DIR", "off")
    _, preds = files
    bad = _manifest_bytes(tmp_path, kind)
    line = one_line_error(capfd, COMMANDS[command](bad, tmp_path, preds))
    assert line.startswith(f"agl {command}: error: {bad}: {EXPECTED[kind]}"), line
    assert len(line) < 400  # the 200 KB value is never quoted back
    assert not (tmp_path / "run" / "predictions.jsonl").exists()


def test_a_runaway_field_is_refused_by_both_manifest_parsers(tmp_path, monkeypatch):
    """The pyarrow path and the pandas path agree, with or without a column selection."""
    bad = _manifest_bytes(tmp_path, "big")
    for columns in (None, []):
        with pytest.raises(AglError, match="row 1 field 'description'"):
            load_manifest(bad, columns=columns)
    from agl.dataset.manifest import parse_manifest

    with pytest.raises(AglError, match="row 1 field 'description'"):
        parse_manifest(bad.read_text(), str(bad))
    fine = pd.read_csv(bad, keep_default_na=False, dtype=str)
    fine.loc[0, "description"] = "x" * 100_000  # long, but a description can be long
    write_manifest(fine, tmp_path / "fine.csv")
    assert len(load_manifest(tmp_path / "fine.csv")) == 2


# --- links: nothing served, pruned or written outside its folder -----------------------------


@pytest.fixture
def planted(tmp_path):
    """data/ with two clips and a link data/audio/k0/c0.mp3 -> a secret outside data/."""
    data = tmp_path / "data"
    for key in ("k0", "k1"):
        (data / "audio" / key).mkdir(parents=True)
    (data / "audio" / "k1" / "c1.mp3").write_bytes(b"ID3 not really audio")
    secret = tmp_path / "secret.txt"
    secret.write_text("PRIVATE KEY MATERIAL\n")
    (data / "audio" / "k0" / "c0.mp3").symlink_to(secret)
    write_manifest(manifest([{}, {"key": "k1", "mp3name": "c1.mp3"}]), data / "manifest.csv")
    return data, secret


def test_play_refuses_a_link_out_of_the_audio_folder(planted, tmp_path, capfd):
    data, _ = planted
    line = one_line_error(capfd, ["play", "--manifest", str(data / "manifest.csv"), "--no-browser",
                                  "--port", "0", "--out", str(tmp_path / "human")])
    assert f"{data / 'audio' / 'k0' / 'c0.mp3'}: leads outside {data / 'audio'}" in line


def test_the_game_never_serves_a_link_planted_after_it_started(planted, tmp_path):
    """Was: /audio/<clip> sent the outside file's contents to the browser."""
    from test_play_api import request

    from agl.dataset.manifest import clips
    from agl.game.server import GameServer
    from agl.game.session import GameSession

    data, secret = planted
    link = data / "audio" / "k0" / "c0.mp3"
    link.unlink()
    link.write_bytes(b"ID3 a clip")
    session = GameSession.open(clips(load_manifest(data / "manifest.csv")), data / "audio", "ada",
                               tmp_path / "run")
    server = GameServer(("127.0.0.1", 0), session)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        assert request(port, "GET", "/audio/k0")[0].status == 200
        link.unlink()
        link.symlink_to(secret)  # planted while the game runs
        resp, body = request(port, "GET", "/audio/k0")
        assert resp.status == 403 and b"PRIVATE" not in body
        assert "leads outside" in json.loads(body)["error"]
        inner = data / "audio" / "k1" / "c1.mp3"  # a link that stays inside is served
        link.unlink()
        link.symlink_to(inner)
        resp, body = request(port, "GET", "/audio/k0")
        assert resp.status == 200 and body == inner.read_bytes()
    finally:
        server.shutdown()
        server.server_close()
        session.close()


def test_the_explorer_never_serves_a_link_out_of_an_audio_folder(tmp_path):
    from explore_outputs import write_outputs
    from test_explore_data import paths
    from test_explore_server import get

    from agl.explore.server import ExploreServer
    from agl.explore.sources import load

    root = write_outputs(tmp_path / "outputs")
    secret = tmp_path / "secret.txt"
    secret.write_text("PRIVATE KEY MATERIAL\n")
    for clip in (root / "data" / "audio" / "k0" / "k0.mp3",
                 root / "build" / "perturb" / "mask_speech" / "default" / "audio" / "k0" / "k0.mp3"):
        clip.unlink()
        clip.symlink_to(secret)
    srv = ExploreServer(("127.0.0.1", 0), load(paths(root)), idle_timeout_s=5)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        for url in ("/media/0/original.mp3", "/media/0/mask_speech.default.mp3"):
            r, body = get(srv, url)
            assert r.status == 403 and b"PRIVATE" not in body and b"leads outside" in body, (url, body)
    finally:
        srv.shutdown()
        srv.server_close()


def test_prune_removes_a_link_and_never_what_it_points_to(tmp_path):
    """Was: `Cannot call rmtree on a symbolic link` (an OSError traceback) from the prune."""
    from agl.dataset.prepare import _prune

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.mp3").write_bytes(b"not ours")
    data = tmp_path / "data"
    (data / "audio" / "k0").mkdir(parents=True)
    (data / "audio" / "old").symlink_to(outside, target_is_directory=True)
    (data / "audio" / "stale.mp3").symlink_to(outside / "keep.mp3")
    _prune(data, {"k0"}, None, prune=True)
    assert sorted(p.name for p in (data / "audio").iterdir()) == ["k0"]
    assert (outside / "keep.mp3").read_bytes() == b"not ours"


def test_download_refuses_a_link_that_would_write_or_prune_outside(tmp_path, capfd):
    from agl.dataset.demo import key_of

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    (data / "audio").symlink_to(outside, target_is_directory=True)  # the whole audio folder
    argv = ["download", "--params", str(tmp_path / "none.yaml"), "--dataset", "demo", "--out",
            str(data), "--no-progress"]
    assert f"{data / 'audio'}: leads outside {data}" in one_line_error(capfd, argv)
    (data / "audio").unlink()
    (data / "audio").mkdir()
    (data / "audio" / key_of(0)).symlink_to(outside, target_is_directory=True)  # one clip folder
    assert "leads outside" in one_line_error(capfd, argv)
    assert list(outside.iterdir()) == []  # nothing written there


def test_a_run_never_appends_through_a_link_out_of_its_folder(files, tmp_path, capfd):
    m, _ = files
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("")
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").symlink_to(outside)
    line = one_line_error(capfd, ["infer", "--backend", "random", "--manifest", str(m), "--out", str(run),
                                  "--no-progress", "--cache-dir", ""])
    assert f"{run / 'predictions.jsonl'}: leads outside {run}" in line
    assert outside.read_text() == ""


# --- one writer per run folder -------------------------------------------------------------


def test_a_second_infer_into_the_same_folder_refuses_naming_the_first(tmp_path):
    """Was: two runs a second apart both ran, 64 requests for 32 clips."""
    from fake_llm import Answer, FakeServer, openai_completion
    from test_inference_api import GOOD, make_clips
    from test_inference_resume import infer_cmd

    manifest_path, audio = make_clips(tmp_path, 4)
    release, first_call = threading.Event(), threading.Event()

    def answer(call):
        first_call.set()
        release.wait(60)  # the first run holds its folder while this waits
        return Answer(200, openai_completion(GOOD))

    out = tmp_path / "run"
    env = subprocess_env(OPENAI_API_KEY="sk-test")
    with FakeServer(answer) as server:
        cmd = infer_cmd("openai", server.url, manifest_path, audio, out, tmp_path / "cache", "--no-progress")
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert first_call.wait(60), first.stderr.read() if first.poll() is not None else "no request"
            second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        finally:
            release.set()
        _, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
        assert_one_line(second, str(out), "another process is writing into this folder",
                        f"pid {first.pid}")
        assert len(server.calls) == 4  # each clip requested once
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 4


def test_the_lock_is_reentrant_in_one_thread_and_exclusive_across_threads(tmp_path):
    from agl.core.single_writer import exclusive

    with exclusive(tmp_path, "a test"), exclusive(tmp_path, "batch mode inside it"):
        seen: list[str] = []

        def other():
            try:
                with exclusive(tmp_path, "another thread"):
                    seen.append("entered")
            except AglError as exc:
                seen.append(str(exc))

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert "another process is writing" in seen[0]
    with exclusive(tmp_path, "again"):  # released by the outer exit
        pass
