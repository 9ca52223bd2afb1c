"""`agl play`'s HTTP API against the two real AGL1K recordings: validation, audio, resume."""

from __future__ import annotations

import http.client
import json
import threading
import warnings
from pathlib import Path

import pandas as pd
import pytest

from agl.cli import main
from agl.core.geo import geodesic_km
from agl.core.worldmap import great_circle, world_svg
from agl.dataset.manifest import ManifestWarning, clips, load_manifest, write_manifest
from agl.errors import AglError
from agl.game.server import MAX_BODY_BYTES, GameServer
from agl.game.session import GameSession
from agl.predictions.records import Status, read_predictions

BERLIN = "aporee_5201_6631"
ESSAOUIRA = "aporee_26839_30948"


@pytest.fixture
def game_manifest(tmp_path, agl1k_manifest, archive_dir) -> Path:
    """A manifest of the two recordings whose real MP3s lie in ../shared/.../archive."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ManifestWarning)
        frame = load_manifest(agl1k_manifest)
    path = tmp_path / "manifest.csv"
    write_manifest(frame[frame["key"].isin([BERLIN, ESSAOUIRA])], path)
    return path


def _open(manifest: Path, archive_dir: Path, run_dir: Path, player: str = "ada") -> GameSession:
    return GameSession.open(clips(load_manifest(manifest)), archive_dir, player, run_dir)


@pytest.fixture
def game(tmp_path, game_manifest, archive_dir):
    """A running server on a free loopback port; yields (port, session)."""
    session = _open(game_manifest, archive_dir, tmp_path / "run")
    server = GameServer(("127.0.0.1", 0), session)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server.server_address[1], session
    server.shutdown()
    server.server_close()
    session.close()


def request(port, method, path, body=None, headers=None):
    """One raw request (http.client sends the path byte for byte: no '..' normalisation)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    if isinstance(body, dict | list):
        body = json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json"} if body is not None else {}
    hdrs.update(headers or {})
    conn.request(method, path, body=body, headers=hdrs)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp, data


def written(session: GameSession) -> bytes:
    return session.predictions_path.read_bytes()


def test_state_names_the_clip_but_never_its_place(game, game_manifest):
    port, _ = game
    resp, data = request(port, "GET", "/api/state")
    assert resp.status == 200
    state = json.loads(data)
    assert state["current"]["clip_id"] == BERLIN  # manifest order
    assert state["current"]["audio_url"] == f"/audio/{BERLIN}"
    text = data.decode()
    for secret in ("52.49", "13.42", "Berlin", "Germany", "Amsel", ".mp3", "latitude", "city"):
        assert secret.lower() not in text.lower(), secret
    assert (state["answered"], state["total"]) == (0, 2)


BAD_REQUESTS = [
    ("POST", "/api/guess", {"clip_id": BERLIN, "latitude": 95, "longitude": 0}, 400,
     "latitude 95.0 is outside [-90, 90]"),
    ("POST", "/api/guess", {"clip_id": BERLIN, "latitude": 10, "longitude": -180.5}, 400,
     "longitude -180.5 is outside [-180, 180]"),
    ("POST", "/api/guess", b'{"clip_id": "%s", "latitude": NaN, "longitude": 0}' % BERLIN.encode(),
     400, "latitude nan is outside"),
    ("POST", "/api/guess", {"clip_id": BERLIN, "latitude": True, "longitude": 0}, 400,
     "latitude must be a number"),
    ("POST", "/api/guess", {"clip_id": BERLIN, "longitude": 0}, 400, "latitude is required"),
    ("POST", "/api/guess", {"clip_id": "aporee_1_1", "latitude": 1, "longitude": 2}, 404,
     "unknown clip 'aporee_1_1'"),
    ("POST", "/api/skip", {"clip_id": "../../etc/passwd"}, 404, "unknown clip"),
    ("POST", "/api/guess", {"clip_id": BERLIN, "latitude": 1, "longitude": 2, "lat": 3}, 400,
     "unknown field(s) lat"),
    ("POST", "/api/guess", {"clip_id": BERLIN, "latitude": 1, "longitude": 2,
                            "continent": "Atlantis"}, 400, "continent 'Atlantis': choose one of"),
    ("POST", "/api/guess", {"clip_id": BERLIN, "latitude": 1, "longitude": 2, "city": "x" * 101},
     400, "city is longer than 100 characters"),
    ("POST", "/api/guess", b"{not json", 400, "body is not valid JSON"),
    ("POST", "/api/guess", [1, 2], 400, "must be a JSON object"),
    ("GET", "/audio/../../../etc/passwd", None, 400, "'..'"),
    ("GET", "/static/../server.py", None, 400, "'..'"),
    ("GET", "/audio/..%2F..%2Fmanifest.csv", None, 400, "'..'"),
    ("GET", "/audio/%2E%2E", None, 400, "'..'"),
    ("GET", f"/audio/{BERLIN}/../../manifest.csv", None, 400, "'..'"),
    ("GET", "/audio/aporee_1_1", None, 404, "unknown clip 'aporee_1_1'"),
    ("GET", "/static/server.py", None, 404, "no static file 'server.py'"),
    ("GET", "/manifest.csv", None, 404, "no such resource"),
    ("GET", "/api/guess", None, 405, "use POST"),
    ("DELETE", "/api/state", None, 405, "use GET"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "message"), BAD_REQUESTS)
def test_bad_requests_get_a_clear_4xx_and_write_nothing(game, method, path, body, status, message):
    port, session = game
    resp, data = request(port, method, path, body)
    assert resp.status == status, data
    assert resp.getheader("Content-Type") == "application/json"
    assert message in json.loads(data)["error"]
    assert written(session) == b""


def test_body_over_the_size_limit_is_refused_unread(game):
    port, session = game
    padding = "x" * (MAX_BODY_BYTES + 1)
    body = json.dumps({"clip_id": BERLIN, "latitude": 1, "longitude": 2, "city": padding})
    resp, data = request(port, "POST", "/api/guess", body.encode())
    assert resp.status == 413
    assert f"exceeds the {MAX_BODY_BYTES}-byte limit" in json.loads(data)["error"]
    assert written(session) == b""


@pytest.mark.parametrize(
    ("headers", "status", "message"),
    [
        ({"Content-Type": "text/plain"}, 415, "Content-Type: application/json"),
        ({"Host": "evil.example:80"}, 403, "Host 'evil.example:80' refused"),
    ],
)
def test_cross_site_requests_are_refused(game, headers, status, message):
    port, session = game
    body = {"clip_id": BERLIN, "latitude": 1, "longitude": 2}
    resp, data = request(port, "POST", "/api/guess", body, headers)
    assert resp.status == status
    assert message in json.loads(data)["error"]
    assert written(session) == b""


def test_guess_is_written_before_the_place_is_revealed(game, archive_dir):
    port, session = game
    request(port, "GET", "/api/state")
    guess = {"clip_id": BERLIN, "latitude": 48.8566, "longitude": 2.3522, "city": " Paris ",
             "country": "France", "continent": "Europe", "listened_s": 12.5}
    resp, data = request(port, "POST", "/api/guess", guess)
    assert resp.status == 200, data
    reply = json.loads(data)
    truth = reply["result"]["truth"]
    assert (truth["city"], truth["country"]) == ("Berlin Treptow", "Germany")
    expected_km = float(geodesic_km(48.8566, 2.3522, truth["latitude"], truth["longitude"]))
    assert reply["result"]["distance_km"] == pytest.approx(expected_km, abs=0.05)
    assert 870 < expected_km < 890
    assert reply["answered"] == 1 and reply["score"] == reply["result"]["score"] > 0
    path = reply["result"]["path"]
    assert path[0][0] == [2.3522, 48.8566] and path[-1][-1] == pytest.approx(
        [truth["longitude"], truth["latitude"]], abs=1e-4)

    saved = read_predictions(session.predictions_path)[BERLIN]
    assert saved.status is Status.OK and saved.city == "Paris"
    assert (saved.latitude, saved.longitude) == (48.8566, 2.3522)
    assert saved.meta["backend"] == "human" and saved.meta["model"] == "ada"
    assert saved.meta["listened_s"] == 12.5 and saved.meta["latency_s"] >= 0
    assert saved.meta["submitted_at"].endswith("+00:00")
    summary = json.loads((session.run_dir / "run_summary.json").read_text())
    assert (summary["backend"], summary["model"], summary["n_ok"], summary["n"]) == (
        "human", "ada", 1, 2)

    # The same clip again is a conflict, not a second record.
    resp, data = request(port, "POST", "/api/guess", guess)
    assert resp.status == 409 and "already answered" in json.loads(data)["error"]
    assert len(written(session).splitlines()) == 1
    state = json.loads(request(port, "GET", "/api/state")[1])
    assert state["current"]["clip_id"] == ESSAOUIRA


def test_skip_is_a_refusal_and_the_game_ends(game):
    port, session = game
    for clip_id in (BERLIN, ESSAOUIRA):
        resp, data = request(port, "POST", "/api/skip", {"clip_id": clip_id})
        assert resp.status == 200, data
        assert json.loads(data)["result"]["distance_km"] is None
    saved = read_predictions(session.predictions_path)
    assert all(p.status is Status.REFUSED and p.refused and not p.has_coordinates
               for p in saved.values())
    state = json.loads(request(port, "GET", "/api/state")[1])
    assert state["current"] is None and state["skipped"] == 2 and state["score"] == 0


def test_audio_is_served_with_ranges_for_seeking(game, archive_dir):
    port, _ = game
    mp3 = next((archive_dir / BERLIN).glob("*.mp3")).read_bytes()
    resp, data = request(port, "GET", f"/audio/{BERLIN}", headers={"Range": "bytes=1000-1999"})
    assert resp.status == 206 and data == mp3[1000:2000]
    assert resp.getheader("Content-Range") == f"bytes 1000-1999/{len(mp3)}"
    resp, data = request(port, "GET", f"/audio/{BERLIN}", headers={"Range": "bytes=-10"})
    assert resp.status == 206 and data == mp3[-10:]
    resp, data = request(port, "GET", f"/audio/{BERLIN}")
    assert resp.status == 200 and data == mp3 and resp.getheader("Content-Type") == "audio/mpeg"
    resp, data = request(port, "GET", f"/audio/{BERLIN}", headers={"Range": f"bytes={len(mp3)}-"})
    assert resp.status == 416 and "not satisfiable" in json.loads(data)["error"]


def test_page_and_map_are_served_under_a_strict_policy(game):
    port, _ = game
    resp, data = request(port, "GET", "/")
    assert resp.status == 200 and b"/static/game.js" in data
    csp = resp.getheader("Content-Security-Policy")
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert b"http" not in data.replace(b"http://www.w3.org", b"")  # no CDN, no network
    resp, data = request(port, "GET", "/map.svg")
    assert resp.status == 200 and data.startswith(b"<svg") and b'class="land"' in data


def test_restart_resumes_at_the_next_clip_and_refuses_another_manifest(
    tmp_path, game_manifest, archive_dir, agl1k_manifest
):
    run = tmp_path / "run"
    first = _open(game_manifest, archive_dir, run)
    first.guess({"clip_id": BERLIN, "latitude": 52.5, "longitude": 13.4})
    first.close()
    again = _open(game_manifest, archive_dir, run)
    assert again.state()["current"]["clip_id"] == ESSAOUIRA
    assert again.state()["answered"] == 1
    again.close()
    other = _open(game_manifest, archive_dir, tmp_path / "run-bob", player="bob")
    assert other.state()["current"]["clip_id"] == BERLIN  # players keep separate runs
    other.close()

    only_essaouira = tmp_path / "one.csv"
    frame = load_manifest(game_manifest)
    write_manifest(frame[frame["key"] == ESSAOUIRA], only_essaouira)
    with pytest.raises(AglError, match="not in this manifest"):
        _open(only_essaouira, archive_dir, run)


def test_order_seed_shuffles_the_same_way_every_time(tmp_path, game_manifest, archive_dir):
    frame = clips(load_manifest(game_manifest))

    def order(seed: int) -> list[str]:
        session = GameSession.open(frame, archive_dir, "ada", tmp_path / f"s{seed}", seed)
        session.close()
        return [c.key for c in session.clips]

    assert order(3) == order(3)
    assert {tuple(order(seed)) for seed in range(8)} == {(BERLIN, ESSAOUIRA), (ESSAOUIRA, BERLIN)}


def test_cli_refuses_missing_audio_and_bad_player_in_one_line(tmp_path, game_manifest, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code = main(["play", "--manifest", str(game_manifest), "--audio-root", str(empty),
                 "--player", "ada", "--no-browser", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "2 of 2 clips have no audio" in err and len(err.splitlines()) == 1
    code = main(["play", "--manifest", str(game_manifest), "--player", "../x", "--no-browser"])
    err = capsys.readouterr().err
    assert code == 2 and "player name '../x'" in err


def test_great_circle_is_cut_at_the_antimeridian():
    pieces = great_circle(60.0, 170.0, 62.0, -170.0)
    assert len(pieces) == 2
    assert pieces[0][-1][0] == 180.0 and pieces[1][0][0] == -180.0
    assert pieces[0][-1][1] == pieces[1][0][1]
    assert all(abs(b[0] - a[0]) < 10 for piece in pieces for a, b in zip(piece, piece[1:], strict=False))
    one = great_circle(48.85, 2.35, 52.5, 13.4)
    assert len(one) == 1 and one[0][0] == [2.35, 48.85] and one[0][-1] == [13.4, 52.5]


def test_world_map_comes_from_the_wheel():
    svg = world_svg()
    assert 'viewBox="-180 -90 360 180"' in svg
    assert svg.count("M") > 500  # hundreds of coastline polygons and borders


def test_a_human_run_is_evaluated_and_tracked_like_a_model_run(
    tmp_path, game_manifest, archive_dir, monkeypatch
):
    from agl.core.tracking import _mlflow
    from agl.scoring.config import EvaluateConfig
    from agl.scoring.evaluate import evaluate_run

    session = _open(game_manifest, archive_dir, tmp_path / "runs" / "human-ada")
    session.guess({"clip_id": BERLIN, "latitude": 52.52, "longitude": 13.40, "city": "Berlin",
                   "country": "Germany", "continent": "Europe"})
    session.skip({"clip_id": ESSAOUIRA})
    session.close()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    doc = evaluate_run(run="human-ada", predictions_path=session.predictions_path,
                       manifest_path=game_manifest, out_dir=session.run_dir,
                       config=EvaluateConfig(protocols=["paper"], metric_bootstrap=20, experiment="human-baseline"))
    paper = doc["protocols"]["paper"]
    berlin_km = float(geodesic_km(52.52, 13.40, *_truth(game_manifest, BERLIN)))
    # The paper counts the skip as a refusal at 10,000 km.
    assert paper["n"] == 2 and paper["reject_rate"] == 0.5
    assert paper["distance_error_km"] == pytest.approx((berlin_km + 10_000) / 2, abs=0.01)
    scores = pd.read_csv(session.run_dir / "scores_paper.csv").set_index("sample_id")
    assert scores.loc[BERLIN, ["country_correct", "continent_correct"]].tolist() == [1, 1]
    assert (doc["backend"], doc["model"]) == ("human", "ada")
    run = _mlflow().tracking.MlflowClient().get_run(doc["mlflow_run_id"])
    assert run.data.tags["backend"] == "human" and run.data.tags["model"] == "ada"
    assert (session.run_dir / "metrics.json").exists()


def _truth(manifest: Path, key: str) -> tuple[float, float]:
    row = load_manifest(manifest).set_index("key").loc[key]
    return float(row["latitude"]), float(row["longitude"])
