"""`agl explore`'s local web server: the page, its data, the clips' audio and pictures.

It is a `PageServer` like `agl play`'s (agl.game.page, on agl.game.httpserver's asyncio server):
standard library only, a total deadline per request, bounded connections, loopback names only
on loopback, path segments checked, files streamed with HTTP Range, a strict
Content-Security-Policy. What it serves is a closed list, GET only:

  GET /  /index.html            the page
  GET /static/<name>            its scripts and style (agl/explore/static, read once)
  GET /data/index.js            the clip list as columns (built once at start)
  GET /data/text.js             titles and reasoning, for the free-text filter (on first use)
  GET /data/map.js              the world map (the game's geometry)
  GET /data/clips/<n>.js        clip n's details (n: its row in the manifest)
  GET /media/<n>/<name>         clip n's audio: `original<ext>`, or `<variant id><ext>`
  GET /spec/<n>/<stem>.png      the spectrogram of the same file

A URL never becomes a path: <n> picks a manifest row, and <name> must be one of the names
`payload.media_files` lists for it (the manifest's file, or the perturb stage's copy).
"""

from __future__ import annotations

import functools
import re
import sys
import threading

from agl.core.audio import mime_type
from agl.core.paths import inside
from agl.core.worldmap import world_svg
from agl.errors import AglError
from agl.explore import payload
from agl.explore.sources import Explorer
from agl.explore.spectrogram import spectrogram_png
from agl.game.httpserver import Request, Response
from agl.game.page import IDLE_TIMEOUT_S, PageServer, send
from agl.game.session import RequestError

_CLIP_JS = re.compile(r"^(\d{1,9})\.js$")
_NUMBER = re.compile(r"^\d{1,9}$")
CACHED_CLIPS = 256
CACHED_PICTURES = 64


class ExploreServer(PageServer):
    """The explorer over one `Explorer`: page, data scripts, audio and spectrograms."""

    program = "agl explore"

    def __init__(self, address: tuple[str, int], explorer: Explorer,
                 idle_timeout_s: float = IDLE_TIMEOUT_S):
        self.explorer = explorer
        self.index_js = payload.script("index", payload.index_payload(explorer))
        self.map_js = payload.script("map", world_svg())
        self._text_js: bytes | None = None
        self._text_lock = threading.Lock()
        self.clip_js = functools.lru_cache(maxsize=CACHED_CLIPS)(self._clip_js)
        self.picture = functools.lru_cache(maxsize=CACHED_PICTURES)(self._picture)
        super().__init__(address, static_package="agl.explore", idle_timeout_s=idle_timeout_s)

    def text_js(self) -> bytes:
        with self._text_lock:
            if self._text_js is None:
                self._text_js = payload.script("text", payload.text_payload(self.explorer))
            return self._text_js

    def _clip_js(self, n: int) -> bytes:
        return payload.script(f"clip:{n}", payload.clip_payload(self.explorer, n))

    def _picture(self, n: int, stem: str) -> bytes:
        return spectrogram_png(payload.media_files(self.explorer, n)[stem])

    def route(self, request: Request, parts: list[str]) -> Response:
        if request.method != "GET":
            raise RequestError(405, f"{request.method} not allowed on {request.target[:80]}; "
                                    "the explorer only reads (use GET)")
        js = "text/javascript; charset=utf-8"
        fixed = {
            ("",): lambda: self.static_file("index.html"),
            ("index.html",): lambda: self.static_file("index.html"),
            ("favicon.ico",): lambda: send(b"", "image/x-icon", status=204, cache=True),
            ("data", "index.js"): lambda: send(self.index_js, js),
            ("data", "text.js"): lambda: send(self.text_js(), js),
            ("data", "map.js"): lambda: send(self.map_js, js, cache=True),
        }
        key = tuple(parts)
        if key in fixed:
            return fixed[key]()
        if len(parts) == 2 and parts[0] == "static":
            return self.static_file(parts[1])
        if len(parts) == 3 and parts[:2] == ["data", "clips"] and _CLIP_JS.match(parts[2]):
            return send(self.clip_js(self._clip_number(parts[2][:-3])), js)
        if len(parts) == 3 and parts[0] in ("media", "spec"):
            return self._media(parts[0], self._clip_number(parts[1]), parts[2], request)
        raise RequestError(404, f"no such resource {request.target[:80]!r}")

    def _clip_number(self, text: str) -> int:
        n = int(text) if _NUMBER.match(text) else -1
        if not 0 <= n < len(self.explorer.manifest):
            raise RequestError(404, f"no clip number {text[:20]!r} (the manifest has "
                                    f"{len(self.explorer.manifest)} clips)")
        return n

    def _media(self, kind: str, n: int, name: str, request: Request) -> Response:
        files = payload.media_files(self.explorer, n)
        stem, dot, suffix = name.rpartition(".")
        path = files.get(stem) if dot else None
        if kind == "spec":
            if path is None or suffix != "png":
                raise RequestError(404, f"clip {n} has no spectrogram {name[:80]!r}")
            try:
                body = self.picture(n, stem)
            except AglError as exc:
                raise RequestError(404, f"no spectrogram: {exc}") from None
            return send(body, "image/png", cache=True)
        if path is None or path.suffix.lower() != f".{suffix.lower()}":
            raise RequestError(404, f"clip {n} has no audio {name[:80]!r}")
        path = inside(path.parents[1], path, functools.partial(RequestError, 403))  # <audio>/<key>/<file>: no link out
        return self.send_file(path, mime_type(path), f"audio of clip {n} ({stem})", request)


def serve(explorer: Explorer, host: str, port: int, open_browser: bool,
          idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
    """Serve until Ctrl-C or SIGTERM."""
    server = ExploreServer((host, port), explorer, idle_timeout_s=idle_timeout_s)
    print(f"agl explore: {server.url}  {len(explorer.manifest)} clips, {len(explorer.runs)} "
          f"run(s), {len(explorer.variants)} counterfactual variant(s). Ctrl-C stops.", flush=True)
    for note in explorer.notes:
        print(f"agl explore: note: {note}", file=sys.stderr, flush=True)

    server.run_until_stopped(open_browser)
    print("agl explore: stopped.", flush=True)
