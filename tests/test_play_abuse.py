"""`agl play` under abuse (issue 14, point 10): absurd bodies and headers get a 4xx and one
line, slow or idle clients are dropped, a body cut short records nothing."""

from __future__ import annotations

import json
import socket
import threading

import pytest
import test_play_api
from test_play_api import BERLIN, _open, request, written

from agl.game.server import GameServer

# A running game on the two real AGL1K clips, as test_play_api sets it up.
game = test_play_api.game
game_manifest = test_play_api.game_manifest


def raw(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send bytes as they are, half-close, and read the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def post(port: int, body: bytes, *, length: int | None = None, extra: str = "") -> bytes:
    head = (
        f"POST /api/guess HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}"
        f"Content-Type: application/json\r\nContent-Length: {length or len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return raw(port, head.encode() + body)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 2000 + b"]" * 2000,
        b'{"clip_id": "%s", "latitude": %s, "longitude": 1}' % (BERLIN.encode(), b"9" * 4000),
        b'{"clip_id": "%s", "latitude": 1, "longitude": -%s.5}' % (BERLIN.encode(), b"1" * 4000),
        b'{"a": ' * 50 + b"1" + b"}" * 50,
    ],
)
def test_absurd_bodies_are_400_with_one_line(game, capfd, body):
    port, session = game
    resp, data = request(port, "POST", "/api/guess", body)
    assert resp.status == 400, data
    assert "error" in json.loads(data)
    assert written(session) == b""
    assert "Traceback" not in capfd.readouterr().err


def test_a_huge_range_header_is_416(game, capfd):
    port, _ = game
    resp, data = request(port, "GET", f"/audio/{BERLIN}", headers={"Range": "bytes=" + "9" * 5000 + "-"})
    assert resp.status == 416
    assert "Traceback" not in capfd.readouterr().err


def test_a_second_foreign_host_header_is_refused(game):
    port, session = game
    body = json.dumps({"clip_id": BERLIN, "latitude": 1, "longitude": 2}).encode()
    answer = post(port, body, extra="Host: evil.example\r\n")
    assert answer.split(b" ")[1] == b"400", answer[:80]
    assert written(session) == b""


def test_a_body_cut_short_records_nothing(game):
    port, session = game
    body = json.dumps({"clip_id": BERLIN, "latitude": 1, "longitude": 2}).encode()
    assert post(port, body, length=len(body) + 40) == b""  # hung up: no one to answer
    assert written(session) == b""
    assert post(port, body).split(b" ")[1] == b"200"  # the whole body is recorded
    assert BERLIN.encode() in written(session)


@pytest.fixture
def quick_server(tmp_path, game_manifest, archive_dir):
    session = _open(game_manifest, archive_dir, tmp_path / "run")
    server = GameServer(("127.0.0.1", 0), session, idle_timeout_s=0.3)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server.server_address[1], session
    server.shutdown()
    server.server_close()
    session.close()


@pytest.mark.parametrize(
    "sent",
    [
        b"",
        b"POST /api/guess HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        b"POST /api/guess HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type:"
        b' application/json\r\nContent-Length: 100\r\n\r\n{"clip',
    ],
)
def test_idle_and_half_sent_connections_are_closed(quick_server, sent):
    port, session = quick_server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(sent)
        # The server closes it (recv returns b""); without a timeout this recv would block
        # until the client's own 10 s timeout raised.
        assert s.recv(65536) == b""
    resp, _ = request(port, "GET", "/api/state")  # and the game still answers
    assert resp.status == 200
    assert written(session) == b""
