"""`agl explore`'s local web server: the page, its data, the clips' audio and pictures.

The handler is `agl play`'s (agl.game.server): standard library only, loopback names only on
loopback, path segments checked, files streamed with HTTP Range, a strict
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
import signal
import sys
import threading
import webbrowser
from http.server import ThreadingHTTPServer
from typing import Any

from agl.core.audio import mime_type
from agl.core.paths import inside
from agl.core.worldmap import world_svg
from agl.errors import AglError
from agl.explore import payload
from agl.explore.sources import Explorer
from agl.explore.spectrogram import spectrogram_png
from agl.game.server import _LOOPBACK_NAMES, IDLE_TIMEOUT_S, GameHandler, load_static
from agl.game.session import RequestError

_CLIP_JS = re.compile(r"^(\d{1,9})\.js$")
_NUMBER = re.compile(r"^\d{1,9}$")
CACHED_CLIPS = 256
CACHED_PICTURES = 64


class ExploreServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], explorer: Explorer,
                 idle_timeout_s: float = IDLE_TIMEOUT_S):
        self.explorer = explorer
        self.idle_timeout_s = idle_timeout_s
        self.loopback_only = address[0] in _LOOPBACK_NAMES
        self.static = load_static("agl.explore")
        self.index_js = payload.script("index", payload.index_payload(explorer))
        self.map_js = payload.script("map", world_svg())
        self._text_js: bytes | None = None
        self._text_lock = threading.Lock()
        self.clip_js = functools.lru_cache(maxsize=CACHED_CLIPS)(self._clip_js)
        self.picture = functools.lru_cache(maxsize=CACHED_PICTURES)(self._picture)
        super().__init__(address, ExploreHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def text_js(self) -> bytes:
        with self._text_lock:
            if self._text_js is None:
                self._text_js = payload.script("text", payload.text_payload(self.explorer))
            return self._text_js

    def _clip_js(self, n: int) -> bytes:
        return payload.script(f"clip:{n}", payload.clip_payload(self.explorer, n))

    def _picture(self, n: int, stem: str) -> bytes:
        return spectrogram_png(payload.media_files(self.explorer, n)[stem])


class ExploreHandler(GameHandler):
    server: ExploreServer  # type: ignore[assignment]
    server_version = "agl-explore"
    program = "agl explore"

    def _route(self, method: str, parts: list[str]) -> None:
        if method != "GET":
            raise RequestError(405, f"{method} not allowed on {self.path[:80]}; the explorer "
                                    "only reads (use GET)")
        server = self.server
        js = "text/javascript; charset=utf-8"
        fixed = {
            ("",): lambda: self._static("index.html"),
            ("index.html",): lambda: self._static("index.html"),
            ("favicon.ico",): lambda: self._send(b"", "image/x-icon", status=204, cache=True),
            ("data", "index.js"): lambda: self._send(server.index_js, js),
            ("data", "text.js"): lambda: self._send(server.text_js(), js),
            ("data", "map.js"): lambda: self._send(server.map_js, js, cache=True),
        }
        key = tuple(parts)
        if key in fixed:
            fixed[key]()
        elif len(parts) == 2 and parts[0] == "static":
            self._static(parts[1])
        elif len(parts) == 3 and parts[:2] == ["data", "clips"] and _CLIP_JS.match(parts[2]):
            self._send(server.clip_js(self._clip_number(parts[2][:-3])), js)
        elif len(parts) == 3 and parts[0] in ("media", "spec"):
            self._media(parts[0], self._clip_number(parts[1]), parts[2])
        else:
            raise RequestError(404, f"no such resource {self.path[:80]!r}")

    def _clip_number(self, text: str) -> int:
        n = int(text) if _NUMBER.match(text) else -1
        if not 0 <= n < len(self.server.explorer.manifest):
            raise RequestError(404, f"no clip number {text[:20]!r} (the manifest has "
                                    f"{len(self.server.explorer.manifest)} clips)")
        return n

    def _media(self, kind: str, n: int, name: str) -> None:
        files = payload.media_files(self.server.explorer, n)
        stem, dot, suffix = name.rpartition(".")
        path = files.get(stem) if dot else None
        if kind == "spec":
            if path is None or suffix != "png":
                raise RequestError(404, f"clip {n} has no spectrogram {name[:80]!r}")
            try:
                body = self.server.picture(n, stem)
            except AglError as exc:
                raise RequestError(404, f"no spectrogram: {exc}") from None
            self._send(body, "image/png", cache=True)
            return
        if path is None or path.suffix.lower() != f".{suffix.lower()}":
            raise RequestError(404, f"clip {n} has no audio {name[:80]!r}")
        path = inside(path.parents[1], path, functools.partial(RequestError, 403))  # <audio>/<key>/<file>: no link out
        self._send_file(path, mime_type(path), f"audio of clip {n} ({stem})")


def serve(explorer: Explorer, host: str, port: int, open_browser: bool,
          idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
    """Serve until Ctrl-C or SIGTERM."""
    server = ExploreServer((host, port), explorer, idle_timeout_s=idle_timeout_s)
    print(f"agl explore: {server.url}  {len(explorer.manifest)} clips, {len(explorer.runs)} "
          f"run(s), {len(explorer.variants)} counterfactual variant(s). Ctrl-C stops.", flush=True)
    for note in explorer.notes:
        print(f"agl explore: note: {note}", file=sys.stderr, flush=True)

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
    print("agl explore: stopped.", flush=True)
